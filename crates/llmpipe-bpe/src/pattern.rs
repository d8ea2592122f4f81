//! Pre-tokenizer patterns: the text is split into pieces (regex matches and the gaps between
//! them, HF's `Split(behavior="Isolated")`), and BPE runs inside each piece.

use crate::pretok::Builtin;
use crate::Error;
use fancy_regex::Regex;

/// GPT-2 (also HF's ByteLevel default).
pub const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// tiktoken's cl100k_base, except `\p{N}{1,3}+` is written `\p{N}{1,3}`: the same language (the
/// alternative ends there, so possessive and greedy agree), but Oniguruma (HF) reads `{1,3}+` as
/// "one or more groups of 1 to 3 digits", which would split "1482" differently from tiktoken.
pub const CL100K: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";
/// tiktoken's own cl100k_base source. fancy-regex (tiktoken, llmpipe) reads it exactly like
/// [`CL100K`], so a tokenizer.json carrying it gets the same hand-written scanner.
pub const CL100K_TIKTOKEN: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";
/// tiktoken's o200k_base.
pub const O200K: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+(?!\S)",
    r"|\s+"
);

/// The regex source for a pattern name (`gpt2`, `cl100k`, `o200k`).
pub fn pattern_by_name(name: &str) -> Result<&'static str, Error> {
    match name {
        "gpt2" => Ok(GPT2),
        "cl100k" => Ok(CL100K),
        "o200k" => Ok(O200K),
        other => Err(Error::Invalid(format!(
            "unknown pre-tokenizer pattern {other:?}; known: gpt2, cl100k, o200k"
        ))),
    }
}

/// The name of a known pattern source, if it is one.
pub fn name_of_pattern(src: &str) -> Option<&'static str> {
    [("gpt2", GPT2), ("cl100k", CL100K), ("o200k", O200K)]
        .into_iter()
        .find(|(_, p)| *p == src)
        .map(|(n, _)| n)
}

/// A compiled pre-tokenizer. The three built-in patterns run through hand-written scanners
/// (`pretok.rs`) that give the same pieces as the regex; any other pattern through fancy-regex.
#[derive(Debug, Clone)]
pub struct PreTokenizer {
    source: String,
    re: Regex,
    fast: Option<Builtin>,
}

impl PreTokenizer {
    pub fn new(source: &str) -> Result<Self, Error> {
        let re = Regex::new(source)
            .map_err(|e| Error::Invalid(format!("bad pre-tokenizer regex {source:?}: {e}")))?;
        Ok(PreTokenizer { source: source.to_string(), re, fast: Builtin::for_source(source) })
    }

    /// Whether a hand-written scanner (not the regex engine) splits the text.
    pub fn is_builtin(&self) -> bool {
        self.fast.is_some()
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Call `f` on every piece of `text`, in order.
    #[inline]
    pub fn for_each_piece<'t>(&self, text: &'t str, f: impl FnMut(&'t str)) {
        match self.fast {
            Some(b) => b.for_each_piece(text, f),
            None => self.for_each_piece_regex(text, f),
        }
    }

    /// Call `f` on every piece the regex gives (also for the built-in patterns: the reference the
    /// scanners are tested against): matches and the (rare) gaps between them. If the regex
    /// engine gives up (backtrack limit), the rest of the text is one piece.
    pub fn for_each_piece_regex<'t>(&self, text: &'t str, mut f: impl FnMut(&'t str)) {
        let mut last = 0;
        for m in self.re.find_iter(text) {
            let m = match m {
                Ok(m) => m,
                Err(_) => break,
            };
            if m.start() == m.end() {
                continue;
            }
            if m.start() > last {
                f(&text[last..m.start()]);
            }
            f(m.as_str());
            last = m.end();
        }
        if last < text.len() {
            f(&text[last..]);
        }
    }

    /// The pieces of `text` as a vector (tests and tools).
    pub fn pieces<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let mut v = Vec::new();
        self.for_each_piece(text, |p| v.push(p));
        v
    }

    /// The pieces the regex engine gives (tests of the built-in scanners).
    pub fn regex_pieces<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let mut v = Vec::new();
        self.for_each_piece_regex(text, |p| v.push(p));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_pieces() {
        let p = PreTokenizer::new(GPT2).unwrap();
        assert_eq!(p.pieces("Hello world's  end\n"), vec!["Hello", " world", "'s", " ", " end", "\n"]);
    }

    #[test]
    fn all_patterns_compile_and_cover_text() {
        for name in ["gpt2", "cl100k", "o200k"] {
            let p = PreTokenizer::new(pattern_by_name(name).unwrap()).unwrap();
            let text = "Ünïcödé  42 12345 ok?!\r\n\n  \tx 😀 <|endoftext|>";
            assert_eq!(p.pieces(text).concat(), text, "{name}");
        }
    }
}

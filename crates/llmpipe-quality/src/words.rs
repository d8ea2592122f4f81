//! Word and sentence splitting compatible with datatrove's English tokenizer, which is
//! `spacy.blank("en")` (plus spaCy's rule-based sentencizer for sentences).
//!
//! This is a port of spaCy's tokenizer algorithm (`Tokenizer._split_affixes` / `_attach_tokens`)
//! driven by spaCy's own English rules, exported as data in `data/spacy_en.json` by
//! `data/gen_spacy_en.py`. Tokens are slices of the input: nothing is allocated per token.
//! spaCy's second pass is ported too: special cases that affix splitting cut into several tokens
//! (`a.C.` -> `a.` `C.`, `):`, `''`) are merged back, longest match first. (spaCy's matcher also
//! sees matches across whitespace, which it then never applies; those cannot block a match here.)

use ahash::{AHashMap, AHashSet};
use fancy_regex::Regex;
use serde::Deserialize;
use std::sync::OnceLock;

use crate::pycompat::{is_punct_category, is_space};

#[derive(Deserialize)]
struct Rules {
    prefix: String,
    suffix: String,
    infix: String,
    url: String,
    specials: std::collections::HashMap<String, Vec<String>>,
    sentence_punct: Vec<String>,
}

/// One of spaCy's affix patterns, split in two for speed: the alternatives without lookaround go
/// into one `regex` (a DFA, no backtracking), the few with lookaround into one `fancy_regex`.
struct Split {
    plain: Option<regex::Regex>,
    fancy: Option<Regex>,
}

/// Top-level alternatives of a pattern (aware of escapes, classes and groups).
fn alternatives(p: &str) -> Vec<&str> {
    let (mut out, mut depth, mut in_class, mut esc, mut start) = (Vec::new(), 0i32, false, false, 0);
    for (i, c) in p.char_indices() {
        if esc {
            esc = false;
            continue;
        }
        match c {
            '\\' => esc = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => depth += 1,
            ')' if !in_class => depth -= 1,
            '|' if !in_class && depth == 0 => {
                out.push(&p[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&p[start..]);
    out
}

impl Split {
    fn new(pattern: &str) -> Self {
        let (mut plain, mut fancy) = (Vec::new(), Vec::new());
        for a in alternatives(pattern) {
            if a.contains("(?<=") || a.contains("(?=") || a.contains("(?!") || a.contains("(?<!") {
                fancy.push(a);
            } else {
                plain.push(a);
            }
        }
        let plain = (!plain.is_empty()).then(|| {
            regex::Regex::new(&plain.join("|")).unwrap_or_else(|e| panic!("spaCy rule does not compile: {e}"))
        });
        let fancy = (!fancy.is_empty()).then(|| compile(&fancy.join("|")));
        Split { plain, fancy }
    }

    /// Leftmost match at or after `at`: (start, end); at equal starts the plain alternatives win
    /// (in spaCy's English rules they come first in the alternation).
    fn find_at(&self, s: &str, at: usize) -> Option<(usize, usize)> {
        let p = self.plain.as_ref().and_then(|r| r.find_at(s, at)).map(|m| (m.start(), m.end()));
        let f = self
            .fancy
            .as_ref()
            .and_then(|r| r.find_from_pos(s, at).ok().flatten())
            .map(|m| (m.start(), m.end()));
        match (p, f) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    fn is_match(&self, s: &str) -> bool {
        self.find_at(s, 0).is_some()
    }
}

const CACHE_SIZE: usize = 200_000;

/// Longest match (bytes) of spaCy's English suffix rules that use lookbehind (checked in `new`).
const SUFFIX_TAIL: usize = 16;

thread_local! {
    /// span -> byte lengths of its tokens (spaCy keeps the same cache)
    static CACHE: std::cell::RefCell<AHashMap<String, Vec<u32>>> = std::cell::RefCell::new(AHashMap::new());
}

/// Could any infix alternative match? (all need one of these characters, or a non-ASCII one)
#[inline]
fn may_have_infix(s: &str) -> bool {
    !s.is_ascii()
        || s.bytes().any(|b| {
            matches!(b, b'.' | b'+' | b'-' | b'*' | b'^' | b',' | b'~' | b':' | b'<' | b'>' | b'=' | b'/')
        })
}

/// spaCy's English tokenizer rules, compiled once.
pub struct EnglishTokenizer {
    prefix: Split,
    suffix: Split,
    infix: Split,
    url: Regex,
    /// special case -> byte lengths of its pieces
    specials: AHashMap<String, Vec<usize>>,
    /// second pass: first affix token -> (affix tokens of a special case, the special case)
    merges: AHashMap<String, Vec<(Vec<String>, String)>>,
    sentence_punct: AHashSet<String>,
}

fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| panic!("spaCy rule does not compile: {e}"))
}

impl EnglishTokenizer {
    fn new() -> Self {
        let rules: Rules =
            serde_json::from_str(include_str!("../data/spacy_en.json")).expect("data/spacy_en.json is valid");
        let specials =
            rules.specials.into_iter().map(|(k, v)| (k, v.iter().map(|p| p.len()).collect())).collect();
        let mut tok = Self {
            prefix: Split::new(&rules.prefix),
            suffix: Split::new(&rules.suffix),
            infix: Split::new(&rules.infix),
            url: compile(&rules.url),
            specials,
            merges: AHashMap::new(),
            sentence_punct: rules.sentence_punct.into_iter().collect(),
        };
        // spaCy registers a special case with its matcher when affix rules would cut it
        let mut merges: AHashMap<String, Vec<(Vec<String>, String)>> = AHashMap::new();
        let mut keys: Vec<&String> = tok.specials.keys().collect();
        keys.sort();
        for key in keys {
            if key.chars().any(is_space) {
                continue;
            }
            let cut = tok.prefix.is_match(key) || tok.suffix.is_match(key) || tok.infix.is_match(key);
            if !cut {
                continue;
            }
            let mut pieces = Vec::new();
            tok.affixes(key, false, &mut pieces);
            if pieces.len() < 2 {
                continue;
            }
            let pattern: Vec<String> = pieces.iter().map(|p| p.to_string()).collect();
            merges.entry(pattern[0].clone()).or_default().push((pattern, key.clone()));
        }
        tok.merges = merges;
        tok
    }

    /// The shared instance.
    pub fn get() -> &'static EnglishTokenizer {
        static TOK: OnceLock<EnglishTokenizer> = OnceLock::new();
        TOK.get_or_init(EnglishTokenizer::new)
    }

    /// Append the words of `text` to `out` (whitespace tokens are dropped, as datatrove does).
    pub fn words<'a>(&self, text: &'a str, out: &mut Vec<&'a str>) {
        for span in text.split(is_space) {
            if !span.is_empty() {
                self.span(span, out);
            }
        }
    }

    /// Convenience: the words of `text` as a new vector.
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut out = Vec::new();
        self.words(text, &mut out);
        out
    }

    fn push_special<'a>(&self, s: &'a str, out: &mut Vec<&'a str>) -> bool {
        match self.specials.get(s) {
            Some(pieces) => {
                let mut at = 0;
                for &n in pieces {
                    out.push(&s[at..at + n]);
                    at += n;
                }
                true
            }
            None => false,
        }
    }

    fn find_prefix(&self, s: &str) -> usize {
        let first = s.chars().next().unwrap_or(' ');
        if first.is_alphanumeric() && !matches!(first, 'U' | 'C' | 'A') {
            return 0;
        }
        // every alternative is anchored with `^`: a match, if any, starts at 0
        self.prefix.find_at(s, 0).map_or(0, |(a, b)| b - a)
    }

    fn find_suffix(&self, s: &str) -> usize {
        let last = s.chars().next_back().unwrap_or(' ');
        if last.is_alphabetic() && !s.contains(['\'', '’']) && !s.bytes().any(|b| b.is_ascii_digit()) {
            return 0;
        }
        // every alternative ends with `$`: the leftmost match runs to the end. The lookbehind ones
        // match at most SUFFIX_TAIL bytes (units, currencies, a period), so they only search the tail.
        let p = self.suffix.plain.as_ref().and_then(|r| r.find(s)).map(|m| m.start());
        let mut tail = s.len().saturating_sub(SUFFIX_TAIL);
        while !s.is_char_boundary(tail) {
            tail -= 1;
        }
        let f = self
            .suffix
            .fancy
            .as_ref()
            .and_then(|r| r.find_from_pos(s, tail).ok().flatten())
            .map(|m| m.start());
        match (p, f) {
            (Some(a), Some(b)) => s.len() - a.min(b),
            (Some(a), None) | (None, Some(a)) => s.len() - a,
            (None, None) => 0,
        }
    }

    fn span<'a>(&self, s: &'a str, out: &mut Vec<&'a str>) {
        if self.push_special(s, out) {
            return;
        }
        if s.chars().all(char::is_alphabetic) {
            out.push(s);
            return;
        }
        let base = out.len();
        let hit = CACHE.with(|c| {
            let c = c.borrow();
            let lens = c.get(s)?;
            let mut at = 0;
            for &n in lens {
                out.push(&s[at..at + n as usize]);
                at += n as usize;
            }
            Some(())
        });
        if hit.is_some() {
            return;
        }
        self.affixes(s, true, out);
        if out.len() - base >= 2 {
            self.merge_specials(s, base, out);
        }
        // tokens of a span are contiguous pieces of it, so their lengths say everything
        let lens: Vec<u32> = out[base..].iter().map(|t| t.len() as u32).collect();
        CACHE.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= CACHE_SIZE {
                c.clear();
            }
            c.insert(s.to_string(), lens);
        });
    }

    /// spaCy's `_apply_special_cases`, within one whitespace-delimited span.
    fn merge_specials<'a>(&self, s: &'a str, base: usize, out: &mut Vec<&'a str>) {
        let toks = &out[base..];
        let mut found: Vec<(usize, usize, &str)> = Vec::new();
        for i in 0..toks.len() {
            if let Some(cands) = self.merges.get(toks[i]) {
                for (pat, key) in cands {
                    let end = i + pat.len();
                    if end <= toks.len() && pat.iter().zip(&toks[i..end]).all(|(p, t)| p == t) {
                        found.push((i, end, key));
                    }
                }
            }
        }
        if found.is_empty() {
            return;
        }
        found.sort_by(|a, b| (b.1 - b.0).cmp(&(a.1 - a.0)).then(a.0.cmp(&b.0)));
        let mut seen = vec![false; toks.len()];
        let mut keep: Vec<(usize, usize, &str)> = Vec::new();
        for (a, b, key) in found {
            if !seen[a] && !seen[b - 1] {
                keep.push((a, b, key));
            }
            seen[a..b].iter_mut().for_each(|x| *x = true);
        }
        keep.sort_by_key(|k| k.0);
        let offset = |t: &str| t.as_ptr() as usize - s.as_ptr() as usize;
        let old: Vec<&'a str> = out.drain(base..).collect();
        let mut i = 0;
        for (a, b, key) in keep {
            out.extend_from_slice(&old[i..a]);
            let start = offset(old[a]);
            let whole = &s[start..start + key.len()];
            if !self.push_special(whole, out) {
                out.extend_from_slice(&old[a..b]);
            }
            i = b;
        }
        out.extend_from_slice(&old[i..]);
    }

    /// spaCy's `_split_affixes` + `_attach_tokens` (with or without special cases).
    fn affixes<'a>(&self, s: &'a str, with_specials: bool, out: &mut Vec<&'a str>) {
        let special = |x: &str| with_specials && self.specials.contains_key(x);
        let mut prefixes: Vec<&'a str> = Vec::new();
        let mut suffixes: Vec<&'a str> = Vec::new();
        let mut string = s;
        let mut last_size = usize::MAX;
        while !string.is_empty() && string.len() != last_size {
            if special(string) {
                break;
            }
            last_size = string.len();
            let pre_len = self.find_prefix(string);
            if pre_len != 0 {
                let minus_pre = &string[pre_len..];
                if !minus_pre.is_empty() && special(minus_pre) {
                    prefixes.push(&string[..pre_len]);
                    string = minus_pre;
                    break;
                }
            }
            let suf_len = self.find_suffix(&string[pre_len..]);
            if suf_len != 0 {
                let minus_suf = &string[..string.len() - suf_len];
                if !minus_suf.is_empty() && special(minus_suf) {
                    suffixes.push(&string[string.len() - suf_len..]);
                    string = minus_suf;
                    break;
                }
            }
            let n = string.len();
            if pre_len != 0 && suf_len != 0 && pre_len + suf_len <= n {
                prefixes.push(&string[..pre_len]);
                suffixes.push(&string[n - suf_len..]);
                string = &string[pre_len..n - suf_len];
            } else if pre_len != 0 {
                prefixes.push(&string[..pre_len]);
                string = &string[pre_len..];
            } else if suf_len != 0 {
                suffixes.push(&string[n - suf_len..]);
                string = &string[..n - suf_len];
            }
        }
        out.extend(prefixes);
        let special_done = !string.is_empty() && with_specials && self.push_special(string, out);
        if !string.is_empty() && !special_done {
            if string.contains('.') && self.url.is_match(string).unwrap_or(false) {
                out.push(string);
            } else if may_have_infix(string) {
                self.infixes(string, out);
            } else {
                out.push(string);
            }
        }
        out.extend(suffixes.into_iter().rev());
    }

    fn infixes<'a>(&self, string: &'a str, out: &mut Vec<&'a str>) {
        let mut start = 0;
        let mut at = 0;
        while at <= string.len() {
            let Some((a, b)) = self.infix.find_at(string, at) else { break };
            at = if b > a { b } else { b + string[b..].chars().next().map_or(1, char::len_utf8) };
            if a == 0 {
                continue;
            }
            if a != start {
                out.push(&string[start..a]);
            }
            if a != b {
                out.push(&string[a..b]);
            }
            start = b;
        }
        if start < string.len() {
            out.push(&string[start..]);
        }
    }

    /// Sentences spaCy's sentencizer finds in `text` (datatrove's `len(split_into_sentences(text))`).
    pub fn count_sentences(&self, text: &str) -> usize {
        let mut words = Vec::new();
        self.words(text, &mut words);
        if words.is_empty() {
            return 1;
        }
        let mut n = 1;
        let mut seen_period = false;
        for w in &words {
            let in_punct = self.sentence_punct.contains(*w);
            if seen_period && !in_punct && !w.chars().all(is_punct_category) {
                n += 1;
                seen_period = false;
            } else if in_punct {
                seen_period = true;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_spacy_on_known_cases() {
        let t = EnglishTokenizer::get();
        let got = t.split("Hello, world! Don't well-known U.S. e-mail test@x.com http://a.b/c 3.5");
        let want = vec![
            "Hello",
            ",",
            "world",
            "!",
            "Do",
            "n't",
            "well",
            "-",
            "known",
            "U.S.",
            "e",
            "-",
            "mail",
            "test@x.com",
            "http://a.b",
            "/",
            "c",
            "3.5",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn lookbehind_suffixes_units_and_currencies() {
        // expected splits from spacy.blank("en") (3.8.18); the long units check SUFFIX_TAIL
        let t = EnglishTokenizer::get();
        let cases: [(&str, &[&str]); 10] = [
            ("10km", &["10", "km"]),
            ("3اكواب", &["3", "اكواب"]),
            ("5кПа", &["5", "кПа"]),
            ("20US$", &["20", "US$"]),
            ("100km/h.", &["100", "km/h", "."]),
            ("30°C.", &["30", "°", "C", "."]),
            ("(12kg).", &["(", "12", "kg", ")", "."]),
            ("U.S.A.", &["U.S.A."]),
            ("e.g.,", &["e.g.", ","]),
            ("Mr.Smith", &["Mr.", "Smith"]),
        ];
        for (text, want) in cases {
            assert_eq!(t.split(text), want.to_vec(), "{text}");
        }
    }

    #[test]
    fn sentences() {
        let t = EnglishTokenizer::get();
        assert_eq!(t.count_sentences("One. Two! Three?"), 3);
        assert_eq!(t.count_sentences("No end"), 1);
    }
}

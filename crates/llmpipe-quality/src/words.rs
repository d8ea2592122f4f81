//! Word and sentence splitting compatible with datatrove's English tokenizer, which is
//! `spacy.blank("en")` (plus spaCy's rule-based sentencizer for sentences).
//!
//! This is a port of spaCy's tokenizer algorithm (`Tokenizer._split_affixes` / `_attach_tokens`)
//! driven by spaCy's own English rules, exported as data in `data/spacy_en.json` by
//! `data/gen_spacy_en.py`. Tokens are slices of the input: nothing is allocated per token.
//! Known difference: spaCy's second pass that merges special cases spanning several affix tokens
//! (e.g. `:)` glued to a word) is not ported.

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

/// spaCy's English tokenizer rules, compiled once.
pub struct EnglishTokenizer {
    prefix: Regex,
    suffix: Regex,
    infix: Regex,
    url: Regex,
    /// special case -> byte lengths of its pieces
    specials: AHashMap<String, Vec<usize>>,
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
        Self {
            prefix: compile(&rules.prefix),
            suffix: compile(&rules.suffix),
            infix: compile(&rules.infix),
            url: compile(&rules.url),
            specials,
            sentence_punct: rules.sentence_punct.into_iter().collect(),
        }
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
        match self.prefix.find(s) {
            Ok(Some(m)) => m.end() - m.start(),
            _ => 0,
        }
    }

    fn find_suffix(&self, s: &str) -> usize {
        let last = s.chars().next_back().unwrap_or(' ');
        if last.is_alphabetic() && !s.contains(['\'', '’']) && !s.bytes().any(|b| b.is_ascii_digit()) {
            return 0;
        }
        match self.suffix.find(s) {
            Ok(Some(m)) => m.end() - m.start(),
            _ => 0,
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
        let mut prefixes: Vec<&'a str> = Vec::new();
        let mut suffixes: Vec<&'a str> = Vec::new();
        let mut string = s;
        let mut last_size = usize::MAX;
        while !string.is_empty() && string.len() != last_size {
            if self.specials.contains_key(string) {
                break;
            }
            last_size = string.len();
            let pre_len = self.find_prefix(string);
            if pre_len != 0 {
                let minus_pre = &string[pre_len..];
                if !minus_pre.is_empty() && self.specials.contains_key(minus_pre) {
                    prefixes.push(&string[..pre_len]);
                    string = minus_pre;
                    break;
                }
            }
            let suf_len = self.find_suffix(&string[pre_len..]);
            if suf_len != 0 {
                let minus_suf = &string[..string.len() - suf_len];
                if !minus_suf.is_empty() && self.specials.contains_key(minus_suf) {
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
        if !string.is_empty() && !self.push_special(string, out) {
            if self.url.is_match(string).unwrap_or(false) {
                out.push(string);
            } else {
                self.infixes(string, out);
            }
        }
        out.extend(suffixes.into_iter().rev());
    }

    fn infixes<'a>(&self, string: &'a str, out: &mut Vec<&'a str>) {
        let mut start = 0;
        for m in self.infix.find_iter(string).flatten() {
            let (a, b) = (m.start(), m.end());
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
    fn sentences() {
        let t = EnglishTokenizer::get();
        assert_eq!(t.count_sentences("One. Two! Three?"), 3);
        assert_eq!(t.count_sentences("No end"), 1);
    }
}

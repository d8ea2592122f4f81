//! C4 rules (Raffel et al. 2020) with their line-level cleaning, ported from datatrove's
//! `C4QualityFilter` (split by lines, as C4 does). A kept document's text is rewritten to its kept lines.

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

use crate::pycompat::{len, split_ws, splitlines, strip};
use crate::words::EnglishTokenizer;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct C4Config {
    pub remove_citations: bool,
    pub filter_no_terminal_punct: bool,
    /// -1 disables
    pub min_num_sentences: i64,
    /// -1 disables
    pub min_words_per_line: i64,
    /// -1 disables
    pub max_word_length: i64,
    pub filter_lorem_ipsum: bool,
    pub filter_javascript: bool,
    pub filter_curly_bracket: bool,
    pub filter_policy: bool,
}

impl Default for C4Config {
    fn default() -> Self {
        Self {
            remove_citations: true,
            filter_no_terminal_punct: true,
            min_num_sentences: 5,
            min_words_per_line: 3,
            max_word_length: 1000,
            filter_lorem_ipsum: true,
            filter_javascript: true,
            filter_curly_bracket: true,
            filter_policy: true,
        }
    }
}

const POLICY: [&str; 6] =
    ["terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies"];

fn citation() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\[\d*\]|\[edit\]|\[citation needed\]").expect("valid regex"))
}

/// The outcome for one document: the drop reason, or the cleaned text.
pub enum C4Outcome {
    Drop(&'static str),
    Keep(String),
}

pub fn c4(cfg: &C4Config, text: &str, tok: &EnglishTokenizer) -> C4Outcome {
    let mut num_sentences: i64 = 0;
    let mut kept: Vec<std::borrow::Cow<'_, str>> = Vec::new();
    for raw in splitlines(text) {
        let line = strip(raw);
        let n_words = split_ws(line).count() as i64;
        if cfg.max_word_length != -1 && split_ws(line).any(|w| len(w) as i64 > cfg.max_word_length) {
            continue;
        }
        let line = if cfg.remove_citations && line.contains('[') {
            citation().replace_all(line, "")
        } else {
            std::borrow::Cow::Borrowed(line)
        };
        if cfg.filter_no_terminal_punct
            && (!line.ends_with(['.', '?', '!', '"', '\'']) || line.ends_with("..."))
        {
            continue;
        }
        if n_words < cfg.min_words_per_line {
            continue;
        }
        let lower = line.to_lowercase();
        if cfg.filter_lorem_ipsum && lower.contains("lorem ipsum") {
            return C4Outcome::Drop("lorem_ipsum");
        }
        if cfg.filter_javascript && lower.contains("javascript") {
            continue;
        }
        if cfg.filter_curly_bracket && line.contains('{') {
            return C4Outcome::Drop("curly_bracket");
        }
        if cfg.filter_policy && POLICY.iter().any(|p| lower.contains(p)) {
            continue;
        }
        if cfg.min_num_sentences != -1 {
            num_sentences += tok.count_sentences(&line) as i64;
        }
        kept.push(line);
    }
    if num_sentences < cfg.min_num_sentences {
        return C4Outcome::Drop("too_few_sentences");
    }
    C4Outcome::Keep(strip(&kept.join("\n")).to_string())
}

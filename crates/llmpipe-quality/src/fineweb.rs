//! FineWeb's own quality rules, ported from datatrove's `FineWebQualityFilter`.

use serde::{Deserialize, Serialize};

use crate::charsets::CharSets;
use crate::pycompat::{len, strip};
use crate::repetition::find_duplicates;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FineWebConfig {
    pub line_punct_thr: f64,
    pub line_punct_exclude_zero: bool,
    /// characters that count as a line's terminal punctuation; empty = datatrove's TERMINAL_PUNCTUATION
    pub stop_chars: Vec<String>,
    pub short_line_thr: f64,
    pub short_line_length: usize,
    pub char_duplicates_ratio: f64,
    pub new_line_ratio: f64,
}

impl Default for FineWebConfig {
    fn default() -> Self {
        Self {
            line_punct_thr: 0.12,
            line_punct_exclude_zero: false,
            stop_chars: Vec::new(),
            short_line_thr: 0.67,
            short_line_length: 30,
            char_duplicates_ratio: 0.01,
            new_line_ratio: 0.3,
        }
    }
}

pub fn fineweb(cfg: &FineWebConfig, text: &str, n_words: usize) -> Option<&'static str> {
    let lines: Vec<&str> = text.split('\n').filter(|l| !strip(l).is_empty()).collect();
    if lines.is_empty() {
        return Some("empty");
    }
    let n = lines.len() as f64;
    let sets = CharSets::get();
    let ends = |l: &str| -> bool {
        if cfg.stop_chars.is_empty() {
            l.chars().next_back().is_some_and(|c| sets.terminal.contains(&c))
        } else {
            cfg.stop_chars.iter().any(|s| l.ends_with(s.as_str()))
        }
    };
    let ratio = lines.iter().filter(|l| ends(l)).count() as f64 / n;
    if ratio < cfg.line_punct_thr && !(ratio == 0.0 && cfg.line_punct_exclude_zero) {
        return Some("line_punct_ratio");
    }
    let ratio = lines.iter().filter(|l| len(l) <= cfg.short_line_length).count() as f64 / n;
    if ratio > cfg.short_line_thr {
        return Some("short_line_ratio");
    }
    let non_nl = len(text) - text.bytes().filter(|b| *b == b'\n').count();
    let ratio = find_duplicates(lines.iter().copied()).1 as f64 / non_nl as f64;
    if ratio > cfg.char_duplicates_ratio {
        return Some("char_dup_ratio");
    }
    let newlines = text.bytes().filter(|b| *b == b'\n').count() as f64;
    if n_words == 0 || newlines / n_words as f64 > cfg.new_line_ratio {
        return Some("list_ratio");
    }
    None
}

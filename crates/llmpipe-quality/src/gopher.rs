//! Gopher quality rules (Rae et al. 2021, table A1), ported from datatrove's `GopherQualityFilter`.

use serde::{Deserialize, Serialize};

use crate::charsets::CharSets;
use crate::pycompat::{count, is_alpha, len, Lines};

/// Thresholds; `None` (or 0) disables a rule, as in datatrove. Defaults are datatrove 0.9's.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GopherQualityConfig {
    pub min_doc_words: Option<usize>,
    pub max_doc_words: Option<usize>,
    pub min_avg_word_length: Option<f64>,
    pub max_avg_word_length: Option<f64>,
    pub max_symbol_word_ratio: Option<f64>,
    pub max_bullet_lines_ratio: Option<f64>,
    pub max_ellipsis_lines_ratio: Option<f64>,
    pub max_non_alpha_words_ratio: Option<f64>,
    pub min_stop_words: Option<usize>,
    pub stop_words: Vec<String>,
}

impl Default for GopherQualityConfig {
    fn default() -> Self {
        Self {
            min_doc_words: Some(50),
            max_doc_words: Some(100_000),
            min_avg_word_length: Some(3.0),
            max_avg_word_length: Some(10.0),
            max_symbol_word_ratio: Some(0.1),
            max_bullet_lines_ratio: Some(0.9),
            max_ellipsis_lines_ratio: Some(0.3),
            max_non_alpha_words_ratio: Some(0.8),
            min_stop_words: Some(2),
            stop_words: ["the", "be", "to", "of", "and", "that", "have", "with"].map(String::from).to_vec(),
        }
    }
}

fn on_f(x: Option<f64>) -> Option<f64> {
    x.filter(|v| *v != 0.0)
}
fn on_u(x: Option<usize>) -> Option<usize> {
    x.filter(|v| *v != 0)
}

/// `None` to keep, else datatrove's reason. `words` are the document's words (see `words.rs`).
pub fn gopher_quality(cfg: &GopherQualityConfig, text: &str, words: &[&str]) -> Option<&'static str> {
    let sets = CharSets::get();
    let n_words = words.len();
    let mut n_non_symbol = 0usize;
    let mut non_symbol_chars = 0usize;
    for w in words {
        let non_symbol = match w.as_bytes().first() {
            // the first character decides for most words
            Some(&b) if b.is_ascii_alphanumeric() => true,
            _ => w.chars().any(|c| !sets.is_punct(c)),
        };
        if non_symbol {
            n_non_symbol += 1;
            non_symbol_chars += len(w);
        }
    }
    if let Some(t) = on_u(cfg.min_doc_words) {
        if n_non_symbol < t {
            return Some("gopher_short_doc");
        }
    }
    if let Some(t) = on_u(cfg.max_doc_words) {
        if n_non_symbol > t {
            return Some("gopher_long_doc");
        }
    }
    // np.mean of an empty list is nan: every comparison with it is false
    let avg = if n_non_symbol == 0 { f64::NAN } else { non_symbol_chars as f64 / n_non_symbol as f64 };
    if let Some(t) = on_f(cfg.min_avg_word_length) {
        if avg < t {
            return Some("gopher_below_avg_threshold");
        }
    }
    if let Some(t) = on_f(cfg.max_avg_word_length) {
        if avg > t {
            return Some("gopher_above_avg_threshold");
        }
    }
    let nw = n_words as f64;
    if let Some(t) = on_f(cfg.max_symbol_word_ratio) {
        if text.bytes().filter(|&b| b == b'#').count() as f64 / nw > t {
            return Some("gopher_too_many_hashes");
        }
        if (count(text, "...") + count(text, "…")) as f64 / nw > t {
            return Some("gopher_too_many_ellipsis");
        }
    }
    let (mut nl, mut bullets, mut ell) = (0usize, 0usize, 0usize);
    for s in Lines::new(text) {
        nl += 1;
        let head = s.trim_start_matches(crate::pycompat::is_space);
        bullets += usize::from(head.starts_with('•') || head.starts_with('-'));
        let tail = s.trim_end_matches(crate::pycompat::is_space);
        ell += usize::from(tail.ends_with("...") || tail.ends_with('…'));
    }
    let nl = nl as f64;
    if let Some(t) = on_f(cfg.max_bullet_lines_ratio) {
        if bullets as f64 / nl > t {
            return Some("gopher_too_many_bullets");
        }
    }
    if let Some(t) = on_f(cfg.max_ellipsis_lines_ratio) {
        if ell as f64 / nl > t {
            return Some("gopher_too_many_end_ellipsis");
        }
    }
    if let Some(t) = on_f(cfg.max_non_alpha_words_ratio) {
        let alpha = words
            .iter()
            .filter(|w| match w.as_bytes().first() {
                Some(b) if b.is_ascii_alphabetic() => true,
                _ => w.chars().any(is_alpha),
            })
            .count();
        if (alpha as f64 / nw) < t {
            return Some("gopher_below_alpha_threshold");
        }
    }
    if let Some(t) = on_u(cfg.min_stop_words) {
        let mut stop: Vec<&str> = cfg.stop_words.iter().map(String::as_str).collect();
        stop.sort_unstable();
        stop.dedup();
        // how many stop words occur, counted until `t` are found
        let longest = stop.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut seen = vec![false; stop.len()];
        let mut found = 0usize;
        'words: for w in words {
            if w.len() > longest {
                continue;
            }
            for (i, sw) in stop.iter().enumerate() {
                if !seen[i] && w == sw {
                    seen[i] = true;
                    found += 1;
                    if found >= t {
                        break 'words;
                    }
                }
            }
        }
        if found < t {
            return Some("gopher_enough_stop_words");
        }
    }
    None
}

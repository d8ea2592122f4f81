//! llmpipe-quality: the quality stages' core, pure Rust (no Python).
//!
//! - heuristic filters ported from datatrove 0.9 with its defaults and reason strings: Gopher quality,
//!   Gopher repetition, C4 (with its line cleaning) and FineWeb; words as spaCy's English tokenizer
//!   splits them (datatrove's word tokenizer), see [`words`];
//! - language identification ([`lang`]), fastText model inference ([`fasttext`]), a hashed n-gram
//!   linear classifier ([`classifier`]),
//!   PII redaction ([`pii`]).
//!
//! Batch functions run documents in parallel with rayon and return results in input order.

pub mod c4;
pub mod charsets;
pub mod classifier;
pub mod fasttext;
pub mod fineweb;
pub mod gopher;
pub mod lang;
pub mod memo;
pub mod pii;
pub mod pycompat;
pub mod repetition;
pub mod url;
pub mod words;

use rayon::prelude::*;
pub use serde::de::DeserializeOwned;
use serde::Deserialize;

pub use c4::{C4Config, C4Outcome};
pub use fineweb::FineWebConfig;
pub use gopher::GopherQualityConfig;
pub use repetition::GopherRepetitionConfig;
use words::EnglishTokenizer;

/// The four heuristic filters, each optional, run in FineWeb's order:
/// Gopher repetition -> Gopher quality -> C4 (rewrites the text) -> FineWeb.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeuristicsConfig {
    pub gopher_repetition: Option<GopherRepetitionConfig>,
    pub gopher_quality: Option<GopherQualityConfig>,
    pub c4: Option<C4Config>,
    pub fineweb: Option<FineWebConfig>,
}

impl HeuristicsConfig {
    /// Every filter on, at datatrove's defaults.
    pub fn all_defaults() -> Self {
        Self {
            gopher_repetition: Some(Default::default()),
            gopher_quality: Some(Default::default()),
            c4: Some(Default::default()),
            fineweb: Some(Default::default()),
        }
    }
}

/// This crate's own defaults of every config, as one JSON object keyed by filter (`gopher_repetition`,
/// `gopher_quality`, `c4`, `fineweb`, `pii`, `classifier`). The pipeline always sends its values from
/// Python (`python/llmpipe/quality.py`); the Rust defaults serve Rust callers and tests, and a Python
/// test compares the two field by field so that they cannot drift apart.
pub fn default_configs_json() -> String {
    serde_json::json!({
        "gopher_repetition": GopherRepetitionConfig::default(),
        "gopher_quality": GopherQualityConfig::default(),
        "c4": C4Config::default(),
        "fineweb": FineWebConfig::default(),
        "pii": pii::PiiConfig::default(),
        "classifier": classifier::TrainConfig::default(),
    })
    .to_string()
}

/// Parse a JSON config (as the Python side sends it) into one of this crate's config types.
pub fn parse_config<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, String> {
    serde_json::from_str(json).map_err(|e| e.to_string())
}

/// One document's verdict.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// every filter that drops the document, `filter:reason` (empty = keep)
    pub reasons: Vec<String>,
    /// the C4-cleaned text, when C4 is on and changed it
    pub text: Option<String>,
}

/// Run the configured filters on one document. With `all_reasons`, later filters still run after a
/// drop so that every reason is reported; otherwise evaluation stops at the first drop.
pub fn evaluate(cfg: &HeuristicsConfig, text: &str, all_reasons: bool) -> Verdict {
    let tok = EnglishTokenizer::get();
    let mut v = Verdict::default();
    let mut words = Vec::new();
    if cfg.gopher_repetition.is_some() || cfg.gopher_quality.is_some() {
        tok.words(text, &mut words);
    }
    if let Some(c) = &cfg.gopher_repetition {
        if let Some(r) = repetition::gopher_repetition(c, text, &words) {
            v.reasons.push(format!("gopher_repetition:{r}"));
            if !all_reasons {
                return v;
            }
        }
    }
    if let Some(c) = &cfg.gopher_quality {
        if let Some(r) = gopher::gopher_quality(c, text, &words) {
            v.reasons.push(format!("gopher_quality:{r}"));
            if !all_reasons {
                return v;
            }
        }
    }
    let mut current: &str = text;
    let cleaned;
    let mut cleaned_words = None;
    if let Some(c) = &cfg.c4 {
        let known = (!words.is_empty()).then_some(&words[..]);
        match c4::c4_words(c, text, tok, known) {
            (C4Outcome::Drop(r), _) => {
                v.reasons.push(format!("c4:{r}"));
                if !all_reasons {
                    return v;
                }
            }
            (C4Outcome::Keep(t), spans) => {
                if t != text {
                    cleaned = t;
                    current = &cleaned;
                    v.text = Some(current.to_string());
                    cleaned_words = spans.map(|s| s.len());
                }
            }
        }
    }
    if let Some(c) = &cfg.fineweb {
        let n_words = if current.as_ptr() == text.as_ptr() && !words.is_empty() {
            words.len()
        } else if let Some(n) = cleaned_words {
            n
        } else {
            tok.split(current).len()
        };
        if let Some(r) = fineweb::fineweb(c, current, n_words) {
            v.reasons.push(format!("fineweb:{r}"));
        }
    }
    v
}

/// [`evaluate`] over a batch, in parallel.
pub fn evaluate_batch(cfg: &HeuristicsConfig, texts: &[&str], all_reasons: bool) -> Vec<Verdict> {
    texts.par_iter().map(|t| evaluate(cfg, t, all_reasons)).collect()
}

/// Gopher quality over a batch: `None` keeps, else datatrove's reason. (The three filters share the
/// words of texts through [`memo`].)
pub fn gopher_quality_batch(cfg: &GopherQualityConfig, texts: &[&str]) -> Vec<Option<&'static str>> {
    let tok = EnglishTokenizer::get();
    memo::next_batch();
    texts.par_iter().map(|t| gopher::gopher_quality(cfg, t, &memo::words(tok, t))).collect()
}

/// Gopher repetition over a batch.
pub fn gopher_repetition_batch(cfg: &GopherRepetitionConfig, texts: &[&str]) -> Vec<Option<String>> {
    let tok = EnglishTokenizer::get();
    memo::next_batch();
    texts.par_iter().map(|t| repetition::gopher_repetition(cfg, t, &memo::words(tok, t))).collect()
}

/// C4 over a batch: the drop reason or the cleaned text. A document whose words a filter before
/// memoized ([`memo`]) has its lines' words taken from them, and a cleaned text's words are
/// memoized for FineWeb, which runs on it next.
pub fn c4_batch(cfg: &C4Config, texts: &[&str]) -> Vec<C4Outcome> {
    let tok = EnglishTokenizer::get();
    memo::next_batch();
    texts
        .par_iter()
        .map(|t| {
            let words = memo::lookup(t);
            let (outcome, spans) = c4::c4_words(cfg, t, tok, words.as_deref());
            if let (C4Outcome::Keep(kept), Some(spans)) = (&outcome, spans) {
                if kept != t {
                    memo::insert(kept, spans);
                }
            }
            outcome
        })
        .collect()
}

/// FineWeb over a batch.
pub fn fineweb_batch(cfg: &FineWebConfig, texts: &[&str]) -> Vec<Option<&'static str>> {
    let tok = EnglishTokenizer::get();
    memo::next_batch();
    texts.par_iter().map(|t| fineweb::fineweb(cfg, t, memo::words(tok, t).len())).collect()
}

/// Language of each text: (ISO 639-3 code, confidence).
pub fn detect_language_batch(texts: &[&str]) -> Vec<(&'static str, f64)> {
    texts.par_iter().map(|t| lang::detect(t)).collect()
}

/// PII redaction over a batch.
pub fn redact_batch(cfg: &pii::PiiConfig, texts: &[&str]) -> Vec<(Option<String>, pii::PiiCounts)> {
    texts.par_iter().map(|t| pii::redact(cfg, t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_spam_is_dropped_with_every_reason() {
        let v = evaluate(&HeuristicsConfig::all_defaults(), "buy now buy now buy now", true);
        assert!(v.reasons.contains(&"gopher_quality:gopher_short_doc".to_string()), "{:?}", v.reasons);
        assert!(v.reasons.iter().any(|r| r.starts_with("c4:")));
    }
}

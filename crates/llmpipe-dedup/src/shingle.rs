//! Shingles: word or character n-grams of the normalised text, each hashed to a 32-bit value.
//!
//! Words: the text is normalised (NFC, lower case, punctuation removed by default) and split on
//! whitespace; a shingle is `n` consecutive words. Characters: the normalised text (whitespace
//! collapsed) is cut into windows of `n` characters. A document with fewer units than `n` but at
//! least one is a single shingle of all its units (as datatrove does); an empty document has no
//! shingles (and is never a near duplicate of anything).
//!
//! The result is the sorted set of distinct 32-bit shingle hashes: MinHash reads it, and exact
//! Jaccard verification intersects two of them.

use llmpipe_text::{normalize, Normalization};
use unicode_normalization::{is_nfc_quick, IsNormalized};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// What a shingle is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShingleUnit {
    Words,
    Chars,
}

/// How documents are cut into shingles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShingleConfig {
    pub unit: ShingleUnit,
    /// Units per shingle (n-gram size), at least 1.
    pub ngram: usize,
    pub norm: Normalization,
    /// Seed of the unit hashes.
    pub seed: u64,
}

impl Default for ShingleConfig {
    /// FineWeb / datatrove: word 5-grams of lower-cased text without punctuation.
    fn default() -> Self {
        Self {
            unit: ShingleUnit::Words,
            ngram: 5,
            norm: Normalization {
                nfc: true,
                lowercase: true,
                collapse_whitespace: true,
                strip_punctuation: true,
            },
            seed: 1,
        }
    }
}

const K1: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline]
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Combine the unit hashes of one window into a 32-bit shingle hash (order sensitive).
#[inline]
fn combine(window: &[u64], seed: u64) -> u32 {
    let mut h = seed ^ (window.len() as u64).wrapping_mul(K1);
    for &w in window {
        h = (h ^ w).wrapping_mul(K1).rotate_left(29);
    }
    let h = fmix64(h);
    (h ^ (h >> 32)) as u32
}

/// Hashes of the n-gram windows over `units`, sorted and deduplicated, appended to `out`.
fn windows_into(units: &[u64], n: usize, seed: u64, out: &mut Vec<u32>) {
    out.clear();
    if units.is_empty() {
        return;
    }
    if units.len() < n {
        out.push(combine(units, seed));
        return;
    }
    out.extend(units.windows(n).map(|w| combine(w, seed)));
    out.sort_unstable();
    out.dedup();
}

#[inline]
fn is_ws(b: u8) -> bool {
    // char::is_whitespace restricted to ASCII (includes vertical tab, unlike u8::is_ascii_whitespace)
    matches!(b, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ')
}

/// Word hashes of an ASCII text, identical to normalising with `norm` and splitting on spaces.
fn ascii_words(text: &[u8], norm: Normalization, seed: u64, out: &mut Vec<u64>) {
    let mut word: Vec<u8> = Vec::with_capacity(32);
    for tok in text.split(|&b| is_ws(b)) {
        word.clear();
        for &b in tok {
            if norm.strip_punctuation && b.is_ascii_punctuation() {
                continue;
            }
            word.push(if norm.lowercase { b.to_ascii_lowercase() } else { b });
        }
        if !word.is_empty() {
            out.push(xxh3_64_with_seed(&word, seed));
        }
    }
}

/// Unit hashes of `text` (words or characters), in text order.
pub fn unit_hashes(text: &str, cfg: &ShingleConfig, out: &mut Vec<u64>) {
    out.clear();
    match cfg.unit {
        ShingleUnit::Words => {
            let mut norm = cfg.norm;
            norm.collapse_whitespace = true;
            if text.is_ascii() {
                ascii_words(text.as_bytes(), norm, cfg.seed, out);
            } else {
                let normed;
                let t = if norm.nfc && is_nfc_quick(text.chars()) != IsNormalized::Yes
                    || norm.lowercase
                    || norm.strip_punctuation
                {
                    normed = normalize(text, norm);
                    normed.as_str()
                } else {
                    text
                };
                out.extend(
                    t.split(char::is_whitespace)
                        .filter(|w| !w.is_empty())
                        .map(|w| xxh3_64_with_seed(w.as_bytes(), cfg.seed)),
                );
            }
        }
        ShingleUnit::Chars => {
            let normed = normalize(text, cfg.norm);
            out.extend(normed.chars().map(|c| {
                let mut buf = [0u8; 4];
                xxh3_64_with_seed(c.encode_utf8(&mut buf).as_bytes(), cfg.seed)
            }));
        }
    }
}

/// Reusable buffers for shingling many documents on one thread.
#[derive(Default)]
pub struct Shingler {
    units: Vec<u64>,
}

impl Shingler {
    /// The sorted distinct shingle hashes of `text`, written to `out`.
    pub fn shingles(&mut self, text: &str, cfg: &ShingleConfig, out: &mut Vec<u32>) {
        unit_hashes(text, cfg, &mut self.units);
        windows_into(&self.units, cfg.ngram.max(1), cfg.seed, out);
    }
}

/// The sorted distinct shingle hashes of one text.
pub fn shingles(text: &str, cfg: &ShingleConfig) -> Vec<u32> {
    let mut out = Vec::new();
    Shingler::default().shingles(text, cfg, &mut out);
    out
}

/// Exact Jaccard similarity of two sorted distinct sets.
pub fn jaccard(a: &[u32], b: &[u32]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut inter) = (0usize, 0usize, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter as f64 / (a.len() + b.len() - inter) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow_words(text: &str, cfg: &ShingleConfig) -> Vec<u64> {
        let mut norm = cfg.norm;
        norm.collapse_whitespace = true;
        normalize(text, norm)
            .split(' ')
            .filter(|w| !w.is_empty())
            .map(|w| xxh3_64_with_seed(w.as_bytes(), cfg.seed))
            .collect()
    }

    #[test]
    fn ascii_fast_path_matches_normalisation() {
        let cfg = ShingleConfig::default();
        for t in ["Hello, World!  foo\x0Bbar -- baz", "", "   ", "a-b c.d ,,, E", "Tab\tSep\r\nLine"] {
            let mut fast = Vec::new();
            unit_hashes(t, &cfg, &mut fast);
            assert_eq!(fast, slow_words(t, &cfg), "{t:?}");
        }
    }

    #[test]
    fn short_and_empty_documents() {
        let cfg = ShingleConfig::default();
        assert!(shingles("", &cfg).is_empty());
        assert!(shingles(" ,,, ", &cfg).is_empty());
        assert_eq!(shingles("word", &cfg).len(), 1);
        assert_eq!(shingles("two words", &cfg).len(), 1);
        assert_ne!(shingles("word", &cfg), shingles("other", &cfg));
        assert_eq!(shingles("a b c d e f", &cfg).len(), 2);
    }

    #[test]
    fn normalisation_makes_case_and_punctuation_irrelevant() {
        let cfg = ShingleConfig::default();
        assert_eq!(shingles("The cat, sat on the Mat.", &cfg), shingles("the cat sat on the mat", &cfg));
        assert_eq!(shingles("Ünïcode café ok now yes", &cfg), shingles("ünïcode CAFÉ ok now yes", &cfg));
        assert_eq!(shingles("caf\u{e9} a b c d", &cfg), shingles("cafe\u{301} a b c d", &cfg));
    }

    #[test]
    fn chars_unit() {
        let cfg = ShingleConfig { unit: ShingleUnit::Chars, ngram: 3, ..Default::default() };
        assert_eq!(shingles("abcd", &cfg).len(), 2);
        assert_eq!(shingles("ab", &cfg).len(), 1);
        assert!(shingles("", &cfg).is_empty());
    }

    #[test]
    fn jaccard_of_sets() {
        assert_eq!(jaccard(&[1, 2, 3], &[2, 3, 4]), 0.5);
        assert_eq!(jaccard(&[], &[]), 1.0);
        assert_eq!(jaccard(&[1], &[]), 0.0);
    }
}

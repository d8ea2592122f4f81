//! Text helpers shared by every llmpipe stage: normalisation and 128-bit content hashing.
//!
//! Nothing here knows about Python; the binding crate calls these on whole batches.

use unicode_normalization::UnicodeNormalization;
use xxhash_rust::xxh3::xxh3_128_with_seed;

/// How text is normalised before hashing or shingling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Normalization {
    /// Unicode NFC composition.
    pub nfc: bool,
    /// Lower-case every character.
    pub lowercase: bool,
    /// Collapse every run of whitespace to one space and trim the ends.
    pub collapse_whitespace: bool,
    /// Drop Unicode punctuation characters.
    pub strip_punctuation: bool,
}

impl Default for Normalization {
    fn default() -> Self {
        Self { nfc: true, lowercase: true, collapse_whitespace: true, strip_punctuation: false }
    }
}

/// Normalise one text.
pub fn normalize(text: &str, how: Normalization) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending_space = false;
    let mut push = |c: char, out: &mut String| {
        if how.strip_punctuation && (c.is_ascii_punctuation() || is_unicode_punct(c)) {
            return;
        }
        if how.collapse_whitespace && c.is_whitespace() {
            pending_space = !out.is_empty();
            return;
        }
        if pending_space {
            out.push(' ');
            pending_space = false;
        }
        if how.lowercase {
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    };
    if how.nfc {
        for c in text.nfc() {
            push(c, &mut out);
        }
    } else {
        for c in text.chars() {
            push(c, &mut out);
        }
    }
    out
}

fn is_unicode_punct(c: char) -> bool {
    matches!(c, '\u{2000}'..='\u{206F}' | '\u{3000}'..='\u{303F}' | '\u{FF01}'..='\u{FF0F}' | '¡' | '¿' | '«' | '»')
}

/// 128-bit content hash (xxh3-128) of a text, normalised first.
pub fn content_hash(text: &str, how: Normalization, seed: u64) -> u128 {
    let norm = normalize(text, how);
    xxh3_128_with_seed(norm.as_bytes(), seed)
}

/// 128-bit hash of raw bytes.
pub fn hash128(bytes: &[u8], seed: u64) -> u128 {
    xxh3_128_with_seed(bytes, seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_collapses_case_and_space() {
        let how = Normalization::default();
        assert_eq!(normalize("  Hello\t\tWORLD \n", how), "hello world");
        assert_eq!(normalize("", how), "");
    }

    #[test]
    fn nfc_makes_composed_and_decomposed_equal() {
        let how = Normalization::default();
        assert_eq!(content_hash("caf\u{e9}", how, 0), content_hash("cafe\u{301}", how, 0));
        assert_ne!(content_hash("cafe", how, 0), content_hash("caf\u{e9}", how, 0));
    }

    #[test]
    fn punctuation_stripping_is_optional() {
        let mut how = Normalization::default();
        assert_eq!(normalize("a, b!", how), "a, b!");
        how.strip_punctuation = true;
        assert_eq!(normalize("a, b!", how), "a b");
    }
}

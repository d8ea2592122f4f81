//! Line and paragraph dedup across a corpus: split texts into segments, normalise and hash them,
//! and rewrite texts without the segments a corpus-wide count listed.
//!
//! A segment is a piece of `text.split(sep)` with its separator (`"\n"` for lines, `"\n\n"` for
//! paragraphs) re-attached; an empty last piece is no segment. Its key is the xxh3-128 hash of
//! `" ".join(piece.split()).lower()` (Python's words and lower-casing); segments whose key has fewer
//! than `min_chars` characters (at least 1: blank ones) are never counted nor removed.

use llmpipe_text::{hash128, is_split_whitespace};
use rayon::prelude::*;

/// What a segment is: a line or a paragraph (blank-line separated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentUnit {
    Line,
    Paragraph,
}

impl SegmentUnit {
    fn sep(self) -> &'static str {
        match self {
            SegmentUnit::Line => "\n",
            SegmentUnit::Paragraph => "\n\n",
        }
    }
}

/// How segments are cut and keyed.
#[derive(Clone, Copy, Debug)]
pub struct Segmenting {
    pub unit: SegmentUnit,
    /// segments whose normalised form has fewer characters are left alone (at least 1)
    pub min_chars: usize,
    pub seed: u64,
}

/// The segments of `text` as byte ranges `(start, end)`, separators included.
pub fn segments(text: &str, unit: SegmentUnit) -> Vec<(usize, usize)> {
    let sep = unit.sep();
    let finder = memchr::memmem::Finder::new(sep.as_bytes());
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    while let Some(k) = finder.find(&bytes[start..]) {
        let end = start + k + sep.len();
        out.push((start, end));
        start = end;
    }
    if start < text.len() {
        out.push((start, text.len()));
    }
    out
}

impl Segmenting {
    /// The key of segment `text[s..e]`, or None when it is too short to count.
    fn key(&self, text: &str, s: usize, e: usize, buf: &mut String) -> Option<[u8; 16]> {
        let piece = text[s..e].strip_suffix(self.unit.sep()).unwrap_or(&text[s..e]);
        buf.clear();
        for w in piece.split(is_split_whitespace).filter(|w| !w.is_empty()) {
            if !buf.is_empty() {
                buf.push(' ');
            }
            buf.push_str(w);
        }
        if buf.is_empty() {
            return None;
        }
        let lower = buf.to_lowercase();
        if self.min_chars > 1 && lower.chars().count() < self.min_chars {
            return None;
        }
        Some(hash128(lower.as_bytes(), self.seed).to_le_bytes())
    }

    /// Each text's distinct segment keys, sorted: `(text index, key)` rows in text order.
    pub fn keys(&self, texts: &[&str]) -> Vec<(u32, [u8; 16])> {
        let per: Vec<Vec<[u8; 16]>> = texts
            .par_iter()
            .map(|t| {
                let mut buf = String::new();
                let mut ks: Vec<[u8; 16]> = segments(t, self.unit)
                    .into_iter()
                    .filter_map(|(s, e)| self.key(t, s, e, &mut buf))
                    .collect();
                ks.sort_unstable();
                ks.dedup();
                ks
            })
            .collect();
        per.into_iter().enumerate().flat_map(|(i, ks)| ks.into_iter().map(move |k| (i as u32, k))).collect()
    }

    /// The texts without their segments whose key is in `repeated` (sorted), except in the text
    /// `exempt` names for that key (sorted `(text index, key)`: the first document of a key, kept).
    /// Returns the new texts, and per text the segments and bytes removed.
    pub fn drop_repeated(
        &self,
        texts: &[&str],
        repeated: &[[u8; 16]],
        exempt: &[(u32, [u8; 16])],
    ) -> (Vec<String>, Vec<u32>, Vec<u64>) {
        let res: Vec<(String, u32, u64)> = texts
            .par_iter()
            .enumerate()
            .map(|(i, t)| {
                let mut buf = String::new();
                let mut out = String::with_capacity(t.len());
                let (mut n, mut bytes) = (0u32, 0u64);
                for (s, e) in segments(t, self.unit) {
                    let drop = match self.key(t, s, e, &mut buf) {
                        Some(k) => {
                            repeated.binary_search(&k).is_ok()
                                && exempt.binary_search(&(i as u32, k)).is_err()
                        }
                        None => false,
                    };
                    if drop {
                        n += 1;
                        bytes += (e - s) as u64;
                    } else {
                        out.push_str(&t[s..e]);
                    }
                }
                (out, n, bytes)
            })
            .collect();
        let mut texts_out = Vec::with_capacity(res.len());
        let (mut ns, mut bs) = (Vec::with_capacity(res.len()), Vec::with_capacity(res.len()));
        for (t, n, b) in res {
            texts_out.push(t);
            ns.push(n);
            bs.push(b);
        }
        (texts_out, ns, bs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_match_python_split() {
        let t = "a\n\n\nb\nc";
        assert_eq!(segments(t, SegmentUnit::Line), vec![(0, 2), (2, 3), (3, 4), (4, 6), (6, 7)]);
        assert_eq!(segments(t, SegmentUnit::Paragraph), vec![(0, 3), (3, 7)]);
        assert!(segments("", SegmentUnit::Line).is_empty());
        assert_eq!(segments("x\n", SegmentUnit::Line), vec![(0, 2)]);
    }

    #[test]
    fn drops_listed_keys_but_not_in_the_exempt_text() {
        let seg = Segmenting { unit: SegmentUnit::Line, min_chars: 0, seed: 0 };
        let texts = ["Cookie  banner\nhello\n", "cookie banner\nworld"];
        let keys = seg.keys(&texts);
        assert_eq!(keys.len(), 4);
        let k0 = keys.iter().filter(|(i, _)| *i == 1).map(|(_, k)| *k).collect::<Vec<_>>();
        let common: Vec<[u8; 16]> =
            keys.iter().filter(|(i, k)| *i == 0 && k0.contains(k)).map(|(_, k)| *k).collect();
        assert_eq!(common.len(), 1);
        let (out, n, b) = seg.drop_repeated(&texts, &common, &[(0, common[0])]);
        assert_eq!(out, vec!["Cookie  banner\nhello\n".to_string(), "world".to_string()]);
        assert_eq!((n, b), (vec![0, 1], vec![0, 14]));
    }
}

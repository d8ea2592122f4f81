//! Benchmark decontamination: word n-grams normalised as lm-eval's decontamination (`Janitor`)
//! normalises them, hashed to 64 bits, and looked up in the sorted n-gram hashes of the
//! evaluation sets.
//!
//! Normalisation (lm-eval `Janitor.normalize_string`): ASCII capitals lowercased, ASCII punctuation
//! (Python's `string.punctuation`) deleted, every other character kept; words are then split on
//! whitespace as Python's `str.split()` splits. An n-gram is `n` consecutive words; a text of fewer
//! than `n` words has none (lm-eval's `word_ngrams`). Each word is hashed with xxh3-64, an n-gram is
//! the xxh3-64 of its words' hashes: equal n-grams hash equal, a false match needs a 64-bit collision.
//!
//! [`cut_matches`] removes the matching n-grams instead of judging the whole text: a word's bytes
//! are the whitespace-delimited token it comes from (its punctuation included), the windows of
//! matching n-grams that overlap or touch are merged into one span of words, and each span's bytes,
//! from its first word's first byte to its last word's last byte, are cut; the whitespace around a
//! span stays. A text whose every word is cut is cut whole (its punctuation and whitespace too):
//! nothing meaningful is left of it.

use llmpipe_text::is_split_whitespace;
use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation()
}

/// Calls `f(hash, start, end)` for each normalised word of `text`, in order: `start..end` are the
/// bytes of the whitespace-delimited token it comes from (a token of punctuation alone is no word).
fn for_each_word(text: &str, mut f: impl FnMut(u64, usize, usize)) {
    let mut word = String::new();
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if is_split_whitespace(c) {
            if let Some(s) = start.take() {
                if !word.is_empty() {
                    f(xxh3_64(word.as_bytes()), s, i);
                    word.clear();
                }
            }
        } else {
            start.get_or_insert(i);
            if !is_punct(c) {
                word.push(c.to_ascii_lowercase());
            }
        }
    }
    if let Some(s) = start {
        if !word.is_empty() {
            f(xxh3_64(word.as_bytes()), s, text.len());
        }
    }
}

/// The hash of each normalised word of `text`, in order.
pub fn word_hashes(text: &str, out: &mut Vec<u64>) {
    out.clear();
    for_each_word(text, |h, _, _| out.push(h));
}

/// The hashes of the `n`-grams of `words` (word hashes), in order, appended to `out`.
fn grams_of(words: &[u64], n: usize, out: &mut Vec<u64>) {
    if n == 0 || words.len() < n {
        return;
    }
    let mut buf = vec![0u8; 8 * n];
    for w in words.windows(n) {
        for (i, h) in w.iter().enumerate() {
            buf[8 * i..8 * i + 8].copy_from_slice(&h.to_le_bytes());
        }
        out.push(xxh3_64(&buf));
    }
}

/// The hash of every `n`-gram of `text`'s normalised words, in order.
pub fn ngram_hashes_into(text: &str, n: usize, words: &mut Vec<u64>, out: &mut Vec<u64>) {
    word_hashes(text, words);
    grams_of(words, n, out);
}

/// Every n-gram hash of every text (an evaluation set), concatenated.
pub fn ngram_hashes(texts: &[&str], n: usize) -> Vec<u64> {
    let per: Vec<Vec<u64>> = texts
        .par_iter()
        .map_init(Vec::new, |words, t| {
            let mut out = Vec::new();
            ngram_hashes_into(t, n, words, &mut out);
            out
        })
        .collect();
    per.concat()
}

/// Per text: the entry of `sets` for its first n-gram (in text order) found in `table` (sorted,
/// no repeats), or -1 when it shares none.
pub fn first_match(texts: &[&str], n: usize, table: &[u64], sets: &[i32]) -> Vec<i32> {
    texts
        .par_iter()
        .map_init(
            || (Vec::new(), Vec::new()),
            |(words, grams), t| {
                grams.clear();
                ngram_hashes_into(t, n, words, grams);
                grams.iter().find_map(|g| table.binary_search(g).ok().map(|i| sets[i])).unwrap_or(-1)
            },
        )
        .collect()
}

/// The matching n-grams of one text: the set of the first (in text order), or -1, the byte spans
/// `(start, end)` of its merged matching windows, in order (see the module docs), and whether they
/// hold every word of the text.
pub fn matched_spans(text: &str, n: usize, table: &[u64], sets: &[i32]) -> (i32, Vec<(usize, usize)>, bool) {
    let (mut words, mut bytes, mut grams) = (Vec::new(), Vec::new(), Vec::new());
    for_each_word(text, |h, s, e| {
        words.push(h);
        bytes.push((s, e));
    });
    grams_of(&words, n, &mut grams);
    let mut first = -1;
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut open: Option<(usize, usize)> = None; // the word range [a, b) being merged
    let mut covered = 0; // words in the spans
    for (i, g) in grams.iter().enumerate() {
        let Ok(k) = table.binary_search(g) else { continue };
        if first < 0 {
            first = sets[k];
        }
        open = match open {
            Some((a, b)) if i <= b => Some((a, i + n)),
            Some((a, b)) => {
                spans.push((bytes[a].0, bytes[b - 1].1));
                covered += b - a;
                Some((i, i + n))
            }
            None => Some((i, i + n)),
        };
    }
    if let Some((a, b)) = open {
        spans.push((bytes[a].0, bytes[b - 1].1));
        covered += b - a;
    }
    (first, spans, covered > 0 && covered == words.len())
}

/// What [`cut_matches`] made of one text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// the text without its matching spans (the text itself when none matched)
    pub text: String,
    /// the set of its first matching n-gram (text order), or -1
    pub first: i32,
    /// spans cut
    pub spans: u32,
    /// bytes cut
    pub bytes: u64,
}

/// Per text: the text without the spans of its n-grams found in `table` (sorted, no repeats; `sets`
/// one entry per hash), and what was cut.
pub fn cut_matches(texts: &[&str], n: usize, table: &[u64], sets: &[i32]) -> Vec<Cut> {
    texts
        .par_iter()
        .map(|t| {
            let (first, spans, all) = matched_spans(t, n, table, sets);
            if spans.is_empty() {
                return Cut { text: (*t).to_owned(), first, spans: 0, bytes: 0 };
            }
            if all {
                return Cut { text: String::new(), first, spans: spans.len() as u32, bytes: t.len() as u64 };
            }
            let cut: usize = spans.iter().map(|(s, e)| e - s).sum();
            let mut out = String::with_capacity(t.len() - cut);
            let mut at = 0;
            for &(s, e) in &spans {
                out.push_str(&t[at..s]);
                at = e;
            }
            out.push_str(&t[at..]);
            Cut { text: out, first, spans: spans.len() as u32, bytes: cut as u64 }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_ngrams() {
        let a = ngram_hashes(&["The quick, brown fox!"], 2);
        let b = ngram_hashes(&["the QUICK brown\n fox"], 2);
        assert_eq!(a, b);
        assert_eq!(a.len(), 3);
        assert!(ngram_hashes(&["too short"], 3).is_empty());
        // "don't" loses its apostrophe: one word "dont", as in lm-eval
        assert_eq!(ngram_hashes(&["don't stop"], 2), ngram_hashes(&["dont stop"], 2));
    }

    #[test]
    fn first_match_in_text_order() {
        let mut table: Vec<(u64, i32)> = ngram_hashes(&["c d e"], 3).into_iter().map(|h| (h, 1)).collect();
        table.extend(ngram_hashes(&["a b c"], 3).into_iter().map(|h| (h, 0)));
        table.sort_unstable();
        let (h, s): (Vec<u64>, Vec<i32>) = table.into_iter().unzip();
        assert_eq!(first_match(&["x a b c d e", "c d e", "nothing here at all"], 3, &h, &s), vec![0, 1, -1]);
    }

    fn table_of(texts: &[&str], n: usize) -> (Vec<u64>, Vec<i32>) {
        let mut t: Vec<(u64, i32)> = Vec::new();
        for (k, x) in texts.iter().enumerate() {
            t.extend(ngram_hashes(&[x], n).into_iter().map(|h| (h, k as i32)));
        }
        t.sort_unstable();
        t.dedup_by_key(|p| p.0);
        t.into_iter().unzip()
    }

    #[test]
    fn word_bytes_are_their_tokens() {
        let mut got = Vec::new();
        for_each_word("  Hi, -- there!\tyou\u{a0}é ...", |_, s, e| got.push((s, e)));
        // "--" and "..." are punctuation alone: no word
        assert_eq!(got, vec![(2, 5), (9, 15), (16, 19), (21, 23)]);
    }

    #[test]
    fn cuts_merged_spans() {
        let (h, s) = table_of(&["a b c", "x y z"], 3);
        // "A, b c;" (punctuation kept with its words) and "x y z!" are cut, the spaces around stay
        let cut = cut_matches(&["keep A, b c; d. then x y z!"], 3, &h, &s);
        assert_eq!(cut[0].text, "keep  d. then ");
        assert_eq!((cut[0].first, cut[0].spans, cut[0].bytes), (0, 2, 7 + 6));
        // two matching windows side by side (no word between) merge into one span
        let (h, s) = table_of(&["a b", "c d"], 2);
        let cut = cut_matches(&["a b c d e", "e f"], 2, &h, &s);
        assert_eq!(cut[0].text, " e");
        assert_eq!((cut[0].first, cut[0].spans), (0, 1));
        assert_eq!(cut[1], Cut { text: "e f".into(), first: -1, spans: 0, bytes: 0 });
        // every word cut: nothing is left, not even the punctuation
        let cut = cut_matches(&[" a b -- c d! ..."], 2, &h, &s);
        assert_eq!(cut[0], Cut { text: String::new(), first: 0, spans: 1, bytes: 16 });
    }
}

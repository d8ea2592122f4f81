//! Benchmark decontamination: word n-grams normalised as lm-eval's decontamination (`Janitor`)
//! normalises them, hashed to 64 bits, and looked up in the sorted n-gram hashes of the
//! evaluation sets.
//!
//! Normalisation (lm-eval `Janitor.normalize_string`): ASCII capitals lowercased, ASCII punctuation
//! (Python's `string.punctuation`) deleted, every other character kept; words are then split on
//! whitespace as Python's `str.split()` splits. An n-gram is `n` consecutive words; a text of fewer
//! than `n` words has none (lm-eval's `word_ngrams`). Each word is hashed with xxh3-64, an n-gram is
//! the xxh3-64 of its words' hashes: equal n-grams hash equal, a false match needs a 64-bit collision.

use llmpipe_text::is_split_whitespace;
use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation()
}

/// The hash of each normalised word of `text`, in order.
pub fn word_hashes(text: &str, out: &mut Vec<u64>) {
    out.clear();
    let mut word = String::new();
    let flush = |w: &mut String, out: &mut Vec<u64>| {
        if !w.is_empty() {
            out.push(xxh3_64(w.as_bytes()));
            w.clear();
        }
    };
    for c in text.chars() {
        if is_split_whitespace(c) {
            flush(&mut word, out);
        } else if !is_punct(c) {
            word.push(c.to_ascii_lowercase());
        }
    }
    flush(&mut word, out);
}

/// The hash of every `n`-gram of `text`'s normalised words, in order.
pub fn ngram_hashes_into(text: &str, n: usize, words: &mut Vec<u64>, out: &mut Vec<u64>) {
    word_hashes(text, words);
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
}

//! The words of recently seen texts, shared by the filters that split the same documents.
//!
//! The pipeline runs Gopher repetition, Gopher quality and FineWeb one after another, each as one
//! call per batch; all three need the English words of the same texts (FineWeb sees C4's cleaned text,
//! which is the same text for documents C4 left alone). Splitting is the larger part of their cost, so
//! the words of the last few batch calls are kept, keyed by a 128-bit hash of the text. It is a pure
//! cache: the words are what [`EnglishTokenizer::words`] returns, hit or miss.
//!
//! C4 adds the words of the texts it rewrites (from the words of the lines it kept), for FineWeb.
//!
//! Memory: 8 bytes per word of the documents of the last [`KEEP`] batch calls (a 4 MiB batch of
//! English is about 0.7 M words, 6 MB), in 16 locked shards so rayon threads rarely wait.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ahash::AHashMap;
use xxhash_rust::xxh3::xxh3_128;

use crate::words::EnglishTokenizer;

/// Batch calls whose words are kept.
const KEEP: u32 = 4;
const SHARDS: usize = 16;

type Spans = Arc<[(u32, u32)]>;

#[derive(Default)]
struct Shard {
    map: AHashMap<u128, (u32, Spans)>,
    /// the generation this shard last dropped old entries in
    purged: u32,
}

struct Memo {
    generation: AtomicU32,
    shards: Vec<Mutex<Shard>>,
}

fn memo() -> &'static Memo {
    static MEMO: OnceLock<Memo> = OnceLock::new();
    MEMO.get_or_init(|| Memo {
        generation: AtomicU32::new(0),
        shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
    })
}

/// Start a batch call: words memoized more than [`KEEP`] calls ago are dropped from now on.
pub fn next_batch() {
    memo().generation.fetch_add(1, Ordering::Relaxed);
}

/// The words of `text` (as [`EnglishTokenizer::words`]), from the memo when a recent call split it.
pub fn words<'a>(tok: &EnglishTokenizer, text: &'a str) -> Vec<&'a str> {
    if let Some(w) = lookup(text) {
        return w;
    }
    let mut out = Vec::new();
    tok.words(text, &mut out);
    if text.len() <= u32::MAX as usize {
        let base = text.as_ptr() as usize;
        let spans = out.iter().map(|w| {
            let a = (w.as_ptr() as usize - base) as u32;
            (a, a + w.len() as u32)
        });
        insert(text, spans.collect());
    }
    out
}

/// The words of `text` if a recent call memoized them.
pub fn lookup(text: &str) -> Option<Vec<&str>> {
    let m = memo();
    let key = xxh3_128(text.as_bytes());
    let shard = &m.shards[(key as usize) % SHARDS];
    let now = m.generation.load(Ordering::Relaxed);
    let spans = {
        let mut s = shard.lock().unwrap_or_else(|e| e.into_inner());
        s.map.get_mut(&key).map(|(g, spans)| {
            *g = now;
            spans.clone()
        })
    }?;
    Some(spans.iter().map(|&(a, b)| &text[a as usize..b as usize]).collect())
}

/// Memoize the words of `text`, given as byte spans `(start, end)` in it; they must be what
/// [`EnglishTokenizer::words`] returns for `text` (a caller that derives them another way, such as
/// C4 from the words of the lines it kept, says why they are equal). Texts over 4 GiB are not kept.
pub fn insert(text: &str, spans: Vec<(u32, u32)>) {
    if text.len() > u32::MAX as usize {
        return;
    }
    let m = memo();
    let key = xxh3_128(text.as_bytes());
    let shard = &m.shards[(key as usize) % SHARDS];
    let now = m.generation.load(Ordering::Relaxed);
    let mut s = shard.lock().unwrap_or_else(|e| e.into_inner());
    if s.purged != now {
        s.purged = now;
        s.map.retain(|_, (g, _)| now.wrapping_sub(*g) < KEEP);
    }
    s.map.insert(key, (now, spans.into()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_gives_the_words_of_a_miss_and_old_batches_are_dropped() {
        let tok = EnglishTokenizer::get();
        let text = "Don't split me twice, (please): 10km e.g. U.S.A.";
        next_batch();
        let first = words(tok, text);
        assert_eq!(first, tok.split(text));
        let owned = text.to_string(); // same text at another address
        assert_eq!(words(tok, &owned), first);
        for _ in 0..KEEP + 1 {
            next_batch();
        }
        words(tok, "another text, so the shards purge");
        assert_eq!(words(tok, text), first);
    }
}

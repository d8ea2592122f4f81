//! BPE training: streaming parallel word counting, then merges with incremental pair counts and
//! a lazy max-heap (the algorithm of HF's BpeTrainer, with 64-bit counts).

use crate::bytemap::byte_to_char;
use crate::model::{Special, Tokenizer};
use crate::pattern::PreTokenizer;
use crate::Error;
use ahash::AHashMap;
use rayon::prelude::*;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::atomic::{self, AtomicBool};

/// Read size for one unit of parallel word counting (extended to the next newline).
const CHUNK: usize = 1 << 20;

/// Training options.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    pub vocab_size: usize,
    /// Merges stop when the best pair occurs fewer times than this.
    pub min_frequency: u64,
    /// Longest token, in bytes (HF semantics, see docs/tokenizer.md); `None` for no limit.
    pub max_token_length: Option<usize>,
    /// Special tokens, given the first ids in this order.
    pub special_tokens: Vec<String>,
}

type Pair = (u32, u32);
pub type WordCounts = AHashMap<Box<[u8]>, u64>;

fn add_words(pre: &PreTokenizer, text: &str, map: &mut WordCounts) {
    // Line by line with the line ending kept, like HF's train_from_files.
    for line in text.split_inclusive('\n') {
        pre.for_each_piece(line, |p| {
            let b = p.as_bytes();
            if let Some(c) = map.get_mut(b) {
                *c += 1;
            } else {
                map.insert(b.into(), 1);
            }
        });
    }
}

fn merge_maps(mut a: WordCounts, mut b: WordCounts) -> WordCounts {
    if a.len() < b.len() {
        std::mem::swap(&mut a, &mut b);
    }
    for (k, v) in b {
        *a.entry(k).or_insert(0) += v;
    }
    a
}

/// Chunks of whole lines read from the files one after the other (never a whole file in memory).
struct Chunks<'a> {
    files: std::slice::Iter<'a, PathBuf>,
    cur: Option<(PathBuf, BufReader<File>)>,
}

impl Iterator for Chunks<'_> {
    type Item = Result<Vec<u8>, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.cur.is_none() {
                let path = self.files.next()?.clone();
                match File::open(&path) {
                    Ok(f) => self.cur = Some((path, BufReader::with_capacity(CHUNK, f))),
                    Err(e) => return Some(Err(Error::Io(format!("{}: {e}", path.display())))),
                }
            }
            let (path, r) = self.cur.as_mut()?;
            let mut buf = Vec::with_capacity(CHUNK + 4096);
            let res = r.by_ref().take(CHUNK as u64).read_to_end(&mut buf).and_then(|n| {
                if n > 0 && buf.last() != Some(&b'\n') {
                    r.read_until(b'\n', &mut buf)?;
                }
                Ok(n)
            });
            match res {
                Err(e) => return Some(Err(Error::Io(format!("{}: {e}", path.display())))),
                Ok(0) => self.cur = None,
                Ok(_) => return Some(Ok(buf)),
            }
        }
    }
}

/// Count pre-tokenized words of `files` in parallel, streaming them chunk by chunk.
/// Invalid UTF-8 is replaced by U+FFFD.
/// Stops early with [`Error::Interrupted`] when `stop` is set.
pub fn count_words(files: &[PathBuf], pre: &PreTokenizer, stop: &AtomicBool) -> Result<WordCounts, Error> {
    let chunks = Chunks { files: files.iter(), cur: None };
    chunks
        .par_bridge()
        .try_fold(WordCounts::default, |mut map, chunk| {
            if stop.load(atomic::Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let chunk = chunk?;
            add_words(pre, &String::from_utf8_lossy(&chunk), &mut map);
            Ok::<_, Error>(map)
        })
        .try_reduce(WordCounts::default, |a, b| Ok(merge_maps(a, b)))
}

/// Count the words of in-memory texts (each text is split into lines like a file).
pub fn count_words_texts<S: AsRef<str> + Sync>(texts: &[S], pre: &PreTokenizer) -> WordCounts {
    texts
        .par_iter()
        .fold(WordCounts::default, |mut map, t| {
            add_words(pre, t.as_ref(), &mut map);
            map
        })
        .reduce(WordCounts::default, merge_maps)
}

#[derive(Debug, PartialEq, Eq)]
struct Merge {
    count: u64,
    pair: Pair,
    pos: Vec<u32>,
}

impl Ord for Merge {
    fn cmp(&self, other: &Self) -> Ordering {
        // highest count first, then the smallest pair of ids (HF BpeTrainer)
        self.count.cmp(&other.count).then_with(|| other.pair.cmp(&self.pair))
    }
}
impl PartialOrd for Merge {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Merge (a, b) -> new in one word, reporting pair-count changes like HF's `Word::merge`.
fn merge_word(
    w: &mut Vec<u32>,
    a: u32,
    b: u32,
    new: u32,
    len: &[usize],
    max_len: usize,
    mut ch: impl FnMut(Pair, i64),
) {
    let n = w.len();
    let (mut r, mut wr) = (0, 0);
    let new_len = len[new as usize];
    while r < n {
        if r + 1 < n && w[r] == a && w[r + 1] == b {
            if wr > 0 {
                let p = w[wr - 1];
                ch((p, a), -1);
                if len[p as usize] + new_len < max_len {
                    ch((p, new), 1);
                }
            }
            if r + 2 < n {
                let nx = w[r + 2];
                ch((b, nx), -1);
                if len[nx as usize] + new_len < max_len {
                    ch((new, nx), 1);
                }
            }
            w[wr] = new;
            wr += 1;
            r += 2;
        } else {
            w[wr] = w[r];
            wr += 1;
            r += 1;
        }
    }
    w.truncate(wr);
}

struct WordsPtr(*mut Vec<u32>);
// SAFETY: used only to mutate distinct words from different threads (positions are deduplicated).
unsafe impl Sync for WordsPtr {}
unsafe impl Send for WordsPtr {}

/// Train from word counts.
pub fn train_from_counts(
    words: WordCounts,
    cfg: &TrainConfig,
    pre: PreTokenizer,
    stop: &AtomicBool,
) -> Result<Tokenizer, Error> {
    if cfg.vocab_size < 256 + cfg.special_tokens.len() {
        return Err(Error::Invalid(format!(
            "vocab_size {} is below 256 bytes + {} special token(s)",
            cfg.vocab_size,
            cfg.special_tokens.len()
        )));
    }
    let max_len = cfg.max_token_length.unwrap_or(usize::MAX);
    // 1. special tokens, then the 256 bytes ordered by their GPT-2 char (HF's alphabet order).
    let mut tokens: Vec<Vec<u8>> = Vec::with_capacity(cfg.vocab_size);
    let mut specials = Vec::new();
    for s in &cfg.special_tokens {
        if specials.iter().any(|x: &Special| &x.content == s) {
            continue;
        }
        specials.push(Special { content: s.clone(), id: tokens.len() as u32 });
        tokens.push(s.as_bytes().to_vec());
    }
    let table = byte_to_char();
    let mut bytes: Vec<u8> = (0..=255).collect();
    bytes.sort_by_key(|&b| table[b as usize] as u32);
    let mut byte_id = [0u32; 256];
    for b in bytes {
        byte_id[b as usize] = tokens.len() as u32;
        tokens.push(vec![b]);
    }
    let mut by_bytes: AHashMap<Vec<u8>, u32> =
        tokens.iter().enumerate().skip(specials.len()).map(|(i, t)| (t.clone(), i as u32)).collect();
    let mut len: Vec<usize> = tokens.iter().map(|t| if t.len() == 1 { 1 } else { t.len() }).collect();
    for s in &specials {
        len[s.id as usize] = s.content.chars().count();
    }

    // 2. words as id sequences (single-byte words never hold a pair)
    let (mut seqs, counts): (Vec<Vec<u32>>, Vec<u64>) = words
        .into_iter()
        .filter(|(w, _)| w.len() > 1)
        .map(|(w, c)| (w.iter().map(|&b| byte_id[b as usize]).collect(), c))
        .unzip();

    // 3. initial pair counts and positions, in parallel
    let (mut pair_counts, where_): (AHashMap<Pair, i64>, AHashMap<Pair, Vec<u32>>) = seqs
        .par_iter()
        .enumerate()
        .fold(
            || (AHashMap::new(), AHashMap::new()),
            |(mut pc, mut wh): (AHashMap<Pair, i64>, AHashMap<Pair, Vec<u32>>), (i, w)| {
                for win in w.windows(2) {
                    let p = (win[0], win[1]);
                    *pc.entry(p).or_insert(0) += counts[i] as i64;
                    let v = wh.entry(p).or_default();
                    if v.last() != Some(&(i as u32)) {
                        v.push(i as u32);
                    }
                }
                (pc, wh)
            },
        )
        .reduce(
            || (AHashMap::new(), AHashMap::new()),
            |(mut pa, mut wa), (pb, wb)| {
                if pa.len() < pb.len() {
                    return merge_pc(pb, wb, pa, wa);
                }
                for (k, v) in pb {
                    *pa.entry(k).or_insert(0) += v;
                }
                for (k, mut v) in wb {
                    wa.entry(k).or_default().append(&mut v);
                }
                (pa, wa)
            },
        );
    let mut heap: BinaryHeap<Merge> = where_
        .into_iter()
        .filter_map(|(pair, pos)| {
            let c = pair_counts[&pair];
            (c > 0).then_some(Merge { count: c as u64, pair, pos })
        })
        .collect();

    // 4. merges
    let mut merges: Vec<Pair> = Vec::new();
    let mut where_to_update: AHashMap<Pair, Vec<u32>> = AHashMap::new();
    while tokens.len() < cfg.vocab_size {
        if merges.len().is_multiple_of(64) && stop.load(atomic::Ordering::Relaxed) {
            return Err(Error::Interrupted);
        }
        let Some(mut top) = heap.pop() else { break };
        let cur = pair_counts.get(&top.pair).copied().unwrap_or(0).max(0) as u64;
        if top.count != cur {
            top.count = cur;
            heap.push(top);
            continue;
        }
        if top.count < 1 || cfg.min_frequency > top.count {
            break;
        }
        let (a, b) = top.pair;
        let joined = [tokens[a as usize].as_slice(), tokens[b as usize].as_slice()].concat();
        let new = match by_bytes.get(&joined) {
            Some(&id) => id,
            None => {
                let id = tokens.len() as u32;
                by_bytes.insert(joined.clone(), id);
                len.push(len[a as usize] + len[b as usize]);
                tokens.push(joined);
                id
            }
        };
        merges.push((a, b));
        let mut pos = top.pos;
        pos.sort_unstable();
        pos.dedup();
        let mut apply = |pair: Pair, delta: i64, iw: u32| {
            *pair_counts.entry(pair).or_insert(0) += delta * counts[iw as usize] as i64;
            if delta > 0 {
                let v = where_to_update.entry(pair).or_default();
                if v.last() != Some(&iw) {
                    v.push(iw);
                }
            }
        };
        if pos.len() < 2048 {
            for &iw in &pos {
                merge_word(&mut seqs[iw as usize], a, b, new, &len, max_len, |p, d| apply(p, d, iw));
            }
        } else {
            let ptr = WordsPtr(seqs.as_mut_ptr());
            let len_ref = &len;
            let changes: Vec<(Pair, i64, u32)> = pos
                .par_iter()
                .with_min_len(256)
                .fold(Vec::new, |mut acc, &iw| {
                    let p = &ptr;
                    // SAFETY: `pos` is deduplicated, so each word is borrowed by one thread only,
                    // and `seqs` is neither resized nor read elsewhere during this loop.
                    let w = unsafe { &mut *p.0.add(iw as usize) };
                    merge_word(w, a, b, new, len_ref, max_len, |pr, d| acc.push((pr, d, iw)));
                    acc
                })
                .reduce(Vec::new, |mut x, mut y| {
                    x.append(&mut y);
                    x
                });
            for (p, d, iw) in changes {
                apply(p, d, iw);
            }
        }
        for (pair, pos) in where_to_update.drain() {
            let c = pair_counts[&pair];
            if c > 0 {
                heap.push(Merge { count: c as u64, pair, pos });
            }
        }
    }

    let tokens: Vec<Option<Vec<u8>>> = tokens.into_iter().map(Some).collect();
    Tokenizer::new(tokens, merges, specials, pre, false)
}

#[allow(clippy::type_complexity)]
fn merge_pc(
    mut pa: AHashMap<Pair, i64>,
    mut wa: AHashMap<Pair, Vec<u32>>,
    pb: AHashMap<Pair, i64>,
    wb: AHashMap<Pair, Vec<u32>>,
) -> (AHashMap<Pair, i64>, AHashMap<Pair, Vec<u32>>) {
    for (k, v) in pb {
        *pa.entry(k).or_insert(0) += v;
    }
    for (k, mut v) in wb {
        wa.entry(k).or_default().append(&mut v);
    }
    (pa, wa)
}

/// Train on files, streaming them; stops early with [`Error::Interrupted`] when `stop` is set.
pub fn train_files(
    files: &[PathBuf],
    cfg: &TrainConfig,
    pre: PreTokenizer,
    stop: &AtomicBool,
) -> Result<Tokenizer, Error> {
    let words = count_words(files, &pre, stop)?;
    train_from_counts(words, cfg, pre, stop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Allowed;
    use crate::pattern::{PreTokenizer, GPT2};

    #[test]
    fn trains_and_roundtrips() {
        let pre = PreTokenizer::new(GPT2).unwrap();
        let text = "the cat sat on the mat; the cat ate the rat. ".repeat(50);
        let words = count_words_texts(&[text.as_str()], &pre);
        let cfg = TrainConfig {
            vocab_size: 300,
            min_frequency: 2,
            max_token_length: None,
            special_tokens: vec!["<|endoftext|>".into()],
        };
        let tok = train_from_counts(words, &cfg, pre, &AtomicBool::new(false)).unwrap();
        assert!(tok.vocab_size() > 256 && tok.vocab_size() <= 300);
        let ids = tok.encode(&text, &Allowed::None).unwrap();
        assert!(ids.len() < text.len() / 3);
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
        assert_eq!(tok.token_to_id("<|endoftext|>"), Some(0));
    }

    #[test]
    fn merge_word_reports_changes_like_hf() {
        let len = vec![1, 1, 1, 1, 2];
        let mut w = vec![0, 1, 2, 2, 3];
        let mut ch = Vec::new();
        merge_word(&mut w, 2, 2, 4, &len, usize::MAX, |p, d| ch.push((p, d)));
        assert_eq!(w, vec![0, 1, 4, 3]);
        assert_eq!(ch, vec![((1, 2), -1), ((1, 4), 1), ((2, 3), -1), ((4, 3), 1)]);
    }
}

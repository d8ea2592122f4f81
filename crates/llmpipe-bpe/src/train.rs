//! BPE training: streaming parallel word counting, then merges with incremental pair counts and
//! a lazy max-heap (the algorithm of HF's BpeTrainer, with 64-bit counts).

use crate::bytemap::byte_to_char;
use crate::model::{key2, short_key, Special, Tokenizer, SHORT};
use crate::pattern::PreTokenizer;
use crate::shorttab::{hash, Key, ShortTable};
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

/// Counts of the pre-tokenized words (pieces). A piece of one byte holds no pair and is not
/// counted. Pieces of 2 to [`SHORT`] bytes (nearly all of them) are counted under an integer key
/// (their bytes and length, see [`short_key`]) in a [`ShortTable`], their slots prefetched a few
/// pieces ahead: no allocation, no key behind a pointer, no byte comparison, fewer waits on
/// memory; longer pieces under their bytes.
#[derive(Debug, Default, Clone)]
pub struct WordCounts {
    short: ShortTable<u64>,
    long: AHashMap<Box<[u8]>, u64>,
}

/// Pieces between the prefetch of a short piece's slot and its count.
const AHEAD: usize = 8;

impl WordCounts {
    /// Distinct words counted (of two bytes or more).
    pub fn len(&self) -> usize {
        self.short.len() + self.long.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sum of two counts.
    pub fn merge(mut self, mut other: WordCounts) -> WordCounts {
        if self.short.len() < other.short.len() {
            std::mem::swap(&mut self.short, &mut other.short);
        }
        for (k, v) in other.short.iter() {
            *self.short.entry(k, hash(k)) += v;
        }
        if self.long.len() < other.long.len() {
            std::mem::swap(&mut self.long, &mut other.long);
        }
        for (k, v) in other.long {
            *self.long.entry(k).or_insert(0) += v;
        }
        self
    }

    /// Call `f(bytes, count)` for every word.
    fn for_each(&self, mut f: impl FnMut(&[u8], u64)) {
        for ([lo, hi], c) in self.short.iter() {
            let b = (lo as u128 | (hi as u128) << 64).to_le_bytes();
            f(&b[..b[15] as usize], c);
        }
        for (k, &c) in &self.long {
            f(k, c);
        }
    }
}

fn add_words(pre: &PreTokenizer, text: &str, wc: &mut WordCounts) {
    // short pieces wait in a ring for AHEAD more pieces while their slots are fetched
    let mut ring: [(Key, u64); AHEAD] = [([0, 0], 0); AHEAD];
    let mut n = 0usize;
    // Line by line with the line ending kept, like HF's train_from_files.
    for line in text.split_inclusive('\n') {
        pre.for_each_piece(line, |p| {
            let b = p.as_bytes();
            if b.len() <= 1 {
                return;
            }
            if b.len() > SHORT {
                if let Some(c) = wc.long.get_mut(b) {
                    *c += 1;
                } else {
                    wc.long.insert(b.into(), 1);
                }
                return;
            }
            let k = key2(short_key(b));
            let h = hash(k);
            wc.short.prefetch(h);
            let slot = &mut ring[n % AHEAD];
            if n >= AHEAD {
                *wc.short.entry(slot.0, slot.1) += 1;
            }
            *slot = (k, h);
            n += 1;
        });
    }
    for i in n.saturating_sub(AHEAD)..n {
        let (k, h) = ring[i % AHEAD];
        *wc.short.entry(k, h) += 1;
    }
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
            // (SIMD validation first: the lossy conversion's own check is several times slower)
            match simdutf8::basic::from_utf8(&chunk) {
                Ok(text) => add_words(pre, text, &mut map),
                Err(_) => add_words(pre, &String::from_utf8_lossy(&chunk), &mut map),
            }
            Ok::<_, Error>(map)
        })
        .try_reduce(WordCounts::default, |a, b| Ok(a.merge(b)))
}

/// Count the words of in-memory texts (each text is split into lines like a file).
pub fn count_words_texts<S: AsRef<str> + Sync>(texts: &[S], pre: &PreTokenizer) -> WordCounts {
    texts
        .par_iter()
        .fold(WordCounts::default, |mut map, t| {
            add_words(pre, t.as_ref(), &mut map);
            map
        })
        .reduce(WordCounts::default, WordCounts::merge)
}

/// Add to `acc` the words of documents given as the buffers of an Arrow string column (`offsets`,
/// `data`), each document followed by a newline: the words [`count_words`] counts in a file of
/// those documents one after the other, each ended by "\n" (so a caller need not write that file).
/// Invalid UTF-8 is replaced by U+FFFD, as there (an invalid sequence never spans a newline).
pub fn count_words_docs(
    acc: &mut WordCounts,
    offsets: &[i64],
    data: &[u8],
    pre: &PreTokenizer,
) -> Result<(), Error> {
    for (row, w) in offsets.windows(2).enumerate() {
        if w[0] < 0 || w[1] < w[0] || w[1] as usize > data.len() {
            return Err(Error::Invalid(format!(
                "row {row}: string offsets out of range: {}..{}",
                w[0], w[1]
            )));
        }
    }
    let n = offsets.len().saturating_sub(1);
    if n == 0 {
        return Ok(());
    }
    // One contiguous run of documents per thread, of about equal bytes; the first is counted
    // straight into `acc` (one thread: no table to merge).
    let parts = rayon::current_num_threads().clamp(1, n.div_ceil(64));
    let (lo, hi) = (offsets[0], offsets[n]);
    let mut cuts: Vec<usize> = (0..=parts)
        .map(|k| {
            let target = lo + (hi - lo) * k as i64 / parts as i64;
            offsets[..n].partition_point(|&o| o < target)
        })
        .collect();
    cuts[parts] = n;
    let mut seeds = vec![WordCounts::default(); parts];
    seeds[0] = std::mem::take(acc);
    let counted: Vec<WordCounts> = seeds
        .into_par_iter()
        .enumerate()
        .map(|(k, mut wc)| {
            let mut line = String::new();
            for i in cuts[k]..cuts[k + 1] {
                let bytes = &data[offsets[i] as usize..offsets[i + 1] as usize];
                match simdutf8::basic::from_utf8(bytes) {
                    Ok(text) => add_document(pre, text, &mut wc, &mut line),
                    Err(_) => add_document(pre, &String::from_utf8_lossy(bytes), &mut wc, &mut line),
                }
            }
            wc
        })
        .collect();
    let mut it = counted.into_iter();
    *acc = it.next().unwrap_or_default();
    for wc in it {
        *acc = std::mem::take(acc).merge(wc);
    }
    Ok(())
}

/// The words of `text` followed by a newline; `line` is scratch space for its last line.
fn add_document(pre: &PreTokenizer, text: &str, wc: &mut WordCounts, line: &mut String) {
    let (body, last) = match text.rfind('\n') {
        Some(i) => text.split_at(i + 1),
        None => ("", text),
    };
    add_words(pre, body, wc);
    if !last.is_empty() {
        line.clear();
        line.push_str(last);
        line.push('\n');
        add_words(pre, line, wc);
    }
}

/// A heap entry: a pair, its count when pushed and the words it was pushed with (their list in a
/// [`Slab`]: entries are 24 bytes, not 40, and the heap's sifting moves less).
#[derive(Debug, PartialEq, Eq)]
struct Merge {
    count: u64,
    pair: Pair,
    pos: u32,
}

/// The word lists of the heap's entries, by slot; freed slots are reused.
#[derive(Default)]
struct Slab {
    lists: Vec<Vec<u32>>,
    free: Vec<u32>,
}

impl Slab {
    fn put(&mut self, v: Vec<u32>) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.lists[i as usize] = v;
                i
            }
            None => {
                self.lists.push(v);
                (self.lists.len() - 1) as u32
            }
        }
    }

    fn take(&mut self, i: u32) -> Vec<u32> {
        self.free.push(i);
        std::mem::take(&mut self.lists[i as usize])
    }
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

/// Merge (a, b) -> new in one word, in place, reporting pair-count changes like HF's
/// `Word::merge`; returns the word's new length.
fn merge_word(
    w: &mut [u32],
    a: u32,
    b: u32,
    new: u32,
    len: &[usize],
    max_len: usize,
    mut ch: impl FnMut(Pair, i64),
) -> usize {
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
    wr
}

/// Words of the header of a word in [`Words`]: its length and its count (low, high 32 bits).
const HDR: usize = 3;

/// All the words in one buffer, each as `[length, count low, count high, ids...]` and named by
/// its offset: a word's count and ids are read in one place (a vector per word cost two dependent
/// cache misses per visit, the largest cost of the merge loop). Words only shrink, in place.
struct Words {
    data: Vec<u32>,
}

impl Words {
    #[inline]
    fn count(&self, o: u32) -> u64 {
        let o = o as usize;
        self.data[o + 1] as u64 | (self.data[o + 2] as u64) << 32
    }

    #[inline]
    fn ids(&self, o: u32) -> &[u32] {
        let o = o as usize;
        &self.data[o + HDR..o + HDR + self.data[o] as usize]
    }

    /// The ids of word `o`, to change in place, and its length to set.
    #[inline]
    fn ids_mut(&mut self, o: u32) -> (&mut [u32], &mut u32) {
        let o = o as usize;
        let n = self.data[o] as usize;
        let (hdr, rest) = self.data[o..].split_at_mut(HDR);
        (&mut rest[..n], &mut hdr[0])
    }
}

/// Visits ahead to prefetch in the merge loop.
const PREFETCH: usize = 8;

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

    // 2. words as id sequences in one buffer, the most frequent first (they take part in most
    //    merges: a smaller, warmer part of memory), then by bytes.
    let mut bytes_all: Vec<u8> = Vec::new();
    let mut order: Vec<(u64, u32, u32)> = Vec::with_capacity(words.len());
    words.for_each(|w, c| {
        order.push((c, bytes_all.len() as u32, w.len() as u32));
        bytes_all.extend_from_slice(w);
    });
    drop(words);
    let bytes_of = |&(_, s, n): &(u64, u32, u32)| &bytes_all[s as usize..(s + n) as usize];
    order.par_sort_unstable_by(|x, y| y.0.cmp(&x.0).then_with(|| bytes_of(x).cmp(bytes_of(y))));
    let mut words = Words { data: Vec::with_capacity(bytes_all.len() + HDR * order.len()) };
    let mut offs: Vec<u32> = Vec::with_capacity(order.len());
    for e in &order {
        let w = bytes_of(e);
        offs.push(words.data.len() as u32);
        words.data.extend([w.len() as u32, e.0 as u32, (e.0 >> 32) as u32]);
        words.data.extend(w.iter().map(|&b| byte_id[b as usize]));
    }
    drop(order);
    drop(bytes_all);

    // 3. initial pair counts and positions, in parallel
    let (mut pair_counts, where_): (AHashMap<Pair, i64>, AHashMap<Pair, Vec<u32>>) = offs
        .par_iter()
        .fold(
            || (AHashMap::new(), AHashMap::new()),
            |(mut pc, mut wh): (AHashMap<Pair, i64>, AHashMap<Pair, Vec<u32>>), &o| {
                let c = words.count(o) as i64;
                for win in words.ids(o).windows(2) {
                    let p = (win[0], win[1]);
                    *pc.entry(p).or_insert(0) += c;
                    let v = wh.entry(p).or_default();
                    if v.last() != Some(&o) {
                        v.push(o);
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
    drop(offs);
    let mut slab = Slab::default();
    let mut heap: BinaryHeap<Merge> = where_
        .into_iter()
        .filter_map(|(pair, pos)| {
            let c = pair_counts[&pair];
            (c > 0).then(|| Merge { count: c as u64, pair, pos: slab.put(pos) })
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
        let mut pos = slab.take(top.pos);
        pos.sort_unstable();
        pos.dedup();
        for (k, &o) in pos.iter().enumerate() {
            // the words are far apart in memory: ask for one a few visits ahead
            if let Some(&next) = pos.get(k + PREFETCH) {
                crate::prefetch(words.data.as_ptr().wrapping_add(next as usize).cast());
            }
            let c = words.count(o) as i64;
            let (w, n) = words.ids_mut(o);
            *n = merge_word(w, a, b, new, &len, max_len, |pair, d| {
                // `d` occurrences more or fewer in a word counted `c` times
                *pair_counts.entry(pair).or_insert(0) += d * c;
                if d > 0 {
                    let v = where_to_update.entry(pair).or_default();
                    if v.last() != Some(&o) {
                        v.push(o);
                    }
                }
            }) as u32;
        }
        for (pair, pos) in where_to_update.drain() {
            let c = pair_counts[&pair];
            if c > 0 {
                heap.push(Merge { count: c as u64, pair, pos: slab.put(pos) });
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
        let n = merge_word(&mut w, 2, 2, 4, &len, usize::MAX, |p, d| ch.push((p, d)));
        assert_eq!(w[..n], [0, 1, 4, 3]);
        assert_eq!(ch, vec![((1, 2), -1), ((1, 4), 1), ((2, 3), -1), ((4, 3), 1)]);
    }
}

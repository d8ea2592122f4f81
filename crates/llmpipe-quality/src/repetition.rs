//! Gopher repetition rules, ported from datatrove's `GopherRepetitionFilter`.
//!
//! Every comparison is exact (no decision rests on a hash alone):
//! - most frequent n-grams (`" ".join`; words have no space, so equal strings are equal words):
//!   words get ids, and an n-gram is numbered from the ids of its two (n-1)-grams, only where both
//!   occur twice (otherwise it occurs once): a few table lookups per word for sizes 2 to 4;
//! - duplicated n-grams (`"".join`, where different words can glue into the same string): the words
//!   are glued once; an n-gram of 16 bytes or more can only repeat if the 16 bytes at its start
//!   occur at another word's start, which a table of their hashes rules out for most word starts;
//!   the others are compared byte for byte;
//! - duplicated lines and paragraphs: each hashed once, equal hashes compared.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use crate::pycompat::{len, strip};
use llmpipe_text::swar::any_eq;
use xxhash_rust::xxh3::xxh3_64;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GopherRepetitionConfig {
    pub dup_line_frac: Option<f64>,
    pub dup_para_frac: Option<f64>,
    pub dup_line_char_frac: Option<f64>,
    pub dup_para_char_frac: Option<f64>,
    /// (n, max fraction of characters in the most frequent n-gram)
    pub top_n_grams: Vec<(usize, f64)>,
    /// (n, max fraction of characters in duplicated n-grams)
    pub dup_n_grams: Vec<(usize, f64)>,
}

impl Default for GopherRepetitionConfig {
    fn default() -> Self {
        Self {
            dup_line_frac: Some(0.3),
            dup_para_frac: Some(0.3),
            dup_line_char_frac: Some(0.2),
            dup_para_char_frac: Some(0.2),
            top_n_grams: vec![(2, 0.2), (3, 0.18), (4, 0.16)],
            dup_n_grams: vec![(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)],
        }
    }
}

/// datatrove's `find_duplicates`: (duplicate elements, their characters).
pub fn find_duplicates<'a>(items: impl IntoIterator<Item = &'a str>) -> (usize, usize) {
    let mut seen: ahash::AHashSet<&str> = ahash::AHashSet::new();
    let (mut n, mut chars) = (0, 0);
    for x in items {
        if !seen.insert(x) {
            n += 1;
            chars += len(x);
        }
    }
    (n, chars)
}

fn on(x: Option<f64>) -> Option<f64> {
    x.filter(|v| *v != 0.0)
}

/// `len` of UTF-8 bytes: code points.
#[inline]
fn code_points(b: &[u8]) -> usize {
    b.iter().filter(|&&c| (c & 0xC0) != 0x80).count()
}

/// A 64-bit mix of two words (the high and low halves of their 128-bit product, folded).
#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let p = (a ^ 0x243F_6A88_85A3_08D3) as u128 * (b ^ 0x1319_8A2E_0370_7344) as u128;
    (p as u64) ^ ((p >> 64) as u64)
}

/// The 8 bytes of `b` at `at` (little-endian; `b` is padded, so it may read past the text).
#[inline]
fn load8(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The `n` bytes of `b` at `at` as their first 8 and last 8 (zero-padded; no last 8 up to 8 bytes):
/// the bytes themselves when `n <= 16`.
#[inline]
fn short_key(b: &[u8], at: usize, n: usize) -> (u64, u64) {
    let first = load8(b, at) & if n >= 8 { u64::MAX } else { (1u64 << (8 * n)) - 1 };
    (first, if n > 8 { load8(b, at + n - 8) } else { 0 })
}

/// A word glued at `at`: its [`short_key`], a hash of it, and whether it has a space. Words of up to
/// 16 bytes are hashed from their key; longer ones whole (words that share their first and last 8
/// bytes would otherwise all probe the same slots).
#[inline]
fn word_key(glued: &[u8], at: usize, w: &str) -> (u64, u64, u64, bool) {
    let n = w.len();
    let (a, b) = short_key(glued, at, n);
    let spaced = any_eq(a, b' ') | any_eq(b, b' ') != 0 || (n > 16 && w.as_bytes().contains(&b' '));
    let h = if n <= 16 { fold(a ^ n as u64, b) } else { xxh3_64(w.as_bytes()) };
    (a, b, h, spaced)
}

/// Bytes of the prefix that the duplicated n-gram prefilter compares (see [`Scratch::candidates`]).
const PREFIX: usize = 16;
/// Zero bytes after the glued words, so that 8- and 16-byte loads never run off the end.
const PAD: usize = 16;
/// No id / an n-gram that occurs once.
const NONE: u32 = u32::MAX;

/// An open-addressing hash table of ids (dense, from 0): it holds no keys, the caller compares
/// its own keys through the ids, so nothing is ever equal by hash alone. Reused from one document
/// to the next; emptied by visiting the slots it filled.
#[derive(Default)]
struct Table {
    slots: Vec<u32>,
    bits: u32,
    used: Vec<u32>,
}

impl Table {
    /// Empty the table, sized for up to `cap` ids.
    fn reset(&mut self, cap: usize) {
        for &s in &self.used {
            self.slots[s as usize] = 0;
        }
        self.used.clear();
        let bits = (cap.max(32) * 2).next_power_of_two().trailing_zeros();
        if self.slots.len() < 1 << bits {
            self.slots.resize(1 << bits, 0);
        }
        self.bits = bits;
    }

    /// Double the table, which holds ids `0..ids`; `hash(id)` gives each one's hash again.
    fn grow(&mut self, ids: usize, hash: impl Fn(u32) -> u64) {
        self.reset(ids * 2);
        let mask = (1usize << self.bits) - 1;
        for id in 0..ids as u32 {
            let mut s = (hash(id) >> (64 - self.bits)) as usize;
            while self.slots[s] != 0 {
                s = (s + 1) & mask;
            }
            self.slots[s] = id + 1;
            self.used.push(s as u32);
        }
    }

    /// The id of the key of hash `h` for which `eq(id)` holds, or `None` after storing `new`.
    #[inline]
    fn get_or_insert(&mut self, h: u64, new: u32, eq: impl Fn(u32) -> bool) -> Option<u32> {
        let mask = (1usize << self.bits) - 1;
        let mut s = (h >> (64 - self.bits)) as usize;
        loop {
            let v = self.slots[s];
            if v == 0 {
                self.slots[s] = new + 1;
                self.used.push(s as u32);
                return None;
            }
            if eq(v - 1) {
                return Some(v - 1);
            }
            s = (s + 1) & mask;
        }
    }
}

/// Counts saturating at 2 per slot of a table 16 times the number of keys: a key whose slot was
/// hit once occurs once (a prefilter: equal keys always share a slot). Stays in cache; emptied by
/// visiting the keys again.
#[derive(Default)]
struct Seen {
    slots: Vec<u8>,
    shift: u32,
}

impl Seen {
    fn fill(&mut self, keys: &[u64]) {
        let bits = (keys.len().max(64) * 16).next_power_of_two().trailing_zeros();
        if self.slots.len() < 1 << bits {
            self.slots.resize(1 << bits, 0);
        }
        self.shift = 64 - bits;
        let (slots, shift) = (&mut self.slots[..1 << bits], self.shift);
        for &k in keys {
            let v = &mut slots[(k >> shift) as usize];
            *v = (*v + 1).min(2);
        }
    }

    /// May `key` occur twice? (false: it is the only one of its value)
    #[inline]
    fn twice(&self, key: u64) -> bool {
        self.slots[(key >> self.shift) as usize] > 1
    }

    fn clear(&mut self, keys: &[u64]) {
        for &k in keys {
            self.slots[(k >> self.shift) as usize] = 0;
        }
    }
}

/// One level of n-grams (all of one size `n`): per position the n-gram's id (ids are dense and
/// numbered in order of first occurrence; [`NONE`] for an n-gram that certainly occurs once), and
/// per id its count and first position.
#[derive(Default)]
struct Level {
    n: usize,
    ids: Vec<u32>,
    counts: Vec<u32>,
    first: Vec<u32>,
}

/// Buffers reused from one document to the next on a thread (allocating them per document cost
/// more than filling them).
#[derive(Default)]
struct Scratch {
    /// "".join(words), then [`PAD`] zero bytes
    glued: Vec<u8>,
    /// each word's start in `glued`, then its end
    gl: Vec<usize>,
    /// per word id: its first 8 and last 8 bytes (zero-padded) and its length
    wkey: Vec<(u64, u64, usize)>,
    /// per n-gram id of a level above 1: the ids of its two (n-1)-grams
    pairs: Vec<u64>,
    /// the n-grams of one size numbered (`n == 0`: not yet)
    level: Level,
    next: Level,
    /// a word has a space
    spaced: bool,
    /// over the words: the largest count times byte length, and the largest count (exact after
    /// [`number`](Self::number), from above after [`sketch`](Self::sketch))
    word_mass: (usize, usize),
    /// `word_mass` and `spaced` hold for this document's words (set by either)
    massed: bool,
    /// two rows of counters of a count-min sketch of the words
    counters: Vec<u32>,
    table: Table,
    /// per word start, a hash of the [`PREFIX`] bytes of `glued` there
    keys: Vec<u64>,
    seen: Seen,
    /// word starts whose n-grams may occur twice in `glued` (for the smallest n of the rules), and
    /// whether the [`PREFIX`] bytes there may
    cand: Vec<(usize, bool)>,
    /// per id of the duplicated n-gram walk: its bytes in `glued`
    spans: Vec<(usize, usize)>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// `None` to keep, else datatrove's reason.
pub fn gopher_repetition(cfg: &GopherRepetitionConfig, text: &str, words: &[&str]) -> Option<String> {
    let text_len = len(text) as f64;
    let frac = |chars: usize| if text_len == 0.0 { 0.0 } else { chars as f64 / text_len };

    SCRATCH.with(|cell| {
        let sc = &mut *cell.borrow_mut();
        rules(cfg, text, words, sc, frac)
    })
}

/// The rules in datatrove's order: paragraphs, lines, most frequent n-grams, duplicated n-grams.
fn rules(
    cfg: &GopherRepetitionConfig,
    text: &str,
    words: &[&str],
    sc: &mut Scratch,
    frac: impl Fn(usize) -> f64,
) -> Option<String> {
    let stripped = strip(text);
    let (np, pd, pc) = sc.duplicates(text, split_runs(stripped, 2));
    if let Some(t) = on(cfg.dup_para_frac) {
        if pd as f64 / np as f64 > t {
            return Some("dup_para_frac".into());
        }
    }
    if let Some(t) = on(cfg.dup_para_char_frac) {
        if frac(pc) > t {
            return Some("dup_para_char_frac".into());
        }
    }
    let (nl, ld, lc) = sc.duplicates(text, split_runs(text, 1));
    if let Some(t) = on(cfg.dup_line_frac) {
        if ld as f64 / nl as f64 > t {
            return Some("dup_line_frac".into());
        }
    }
    if let Some(t) = on(cfg.dup_line_char_frac) {
        if frac(lc) > t {
            return Some("dup_line_char_frac".into());
        }
    }
    if cfg.top_n_grams.is_empty() && cfg.dup_n_grams.is_empty() {
        return None;
    }
    n_grams(cfg, words, sc, frac)
}

/// The n-gram rules (the costly part): most frequent n-grams, then duplicated n-grams. Every
/// comparison is exact: n-grams are equal when their words are (for `" ".join`) or their bytes are
/// (for `"".join`), never by hash alone.
fn n_grams(
    cfg: &GopherRepetitionConfig,
    words: &[&str],
    sc: &mut Scratch,
    frac: impl Fn(usize) -> f64,
) -> Option<String> {
    sc.glue(words);
    let nw = words.len();
    for &(n, t) in &cfg.top_n_grams {
        if n == 0 || nw < n {
            continue;
        }
        if sc.top_bound(words, n).is_some_and(|b| frac(b) <= t) {
            continue; // no n-gram can reach the threshold
        }
        // most_common(1): highest count, ties -> first seen; an n-gram that occurs once counts only
        // when every one does, and then the first one wins
        let (c, f) = sc.top(words, n);
        let ngram_chars = code_points(&sc.glued[sc.gl[f]..sc.gl[f + n]]) + (n - 1);
        if frac(ngram_chars * c) > t {
            return Some(format!("top_{n}_gram"));
        }
    }
    if let Some(n_min) = cfg.dup_n_grams.iter().map(|g| g.0).filter(|&n| n > 0).min() {
        sc.candidates(n_min);
    }
    for &(n, t) in &cfg.dup_n_grams {
        if n == 0 {
            continue;
        }
        if frac(sc.duplicated(n)) > t {
            return Some(format!("duplicated_{n}_n_grams"));
        }
    }
    None
}

/// `most_common(1)` of the n-grams as `" ".join`ed strings, the plain way: (count, first position)
/// (only for words with a space in them, which the tokenizer never makes).
fn top_plain(words: &[&str], n: usize) -> (usize, usize) {
    let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
    for (i, g) in words.windows(n).enumerate() {
        counts.entry(g.join(" ")).or_insert((0, i)).0 += 1;
    }
    counts
        .into_values()
        .filter(|v| v.0 > 1)
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
        .unwrap_or((1, 0))
}

impl Scratch {
    /// [`find_duplicates`] of pieces of `text`, with their number: (pieces, duplicates, their
    /// characters). Each piece is hashed once; equal hashes are compared.
    fn duplicates<'a>(
        &mut self,
        text: &'a str,
        items: impl Iterator<Item = &'a str>,
    ) -> (usize, usize, usize) {
        let Scratch { table, spans, .. } = self;
        spans.clear();
        table.reset(64);
        let base = text.as_ptr() as usize;
        let (mut count, mut n, mut chars) = (0, 0, 0);
        for x in items {
            count += 1;
            if spans.len() * 2 >= 1 << table.bits {
                table.grow(spans.len(), |id| {
                    let (a, b) = spans[id as usize];
                    xxh3_64(&text.as_bytes()[a..b])
                });
            }
            let at = x.as_ptr() as usize - base;
            let eq = |id: u32| {
                let (a, b) = spans[id as usize];
                &text[a..b] == x
            };
            if table.get_or_insert(xxh3_64(x.as_bytes()), spans.len() as u32, eq).is_some() {
                n += 1;
                chars += len(x);
            } else {
                spans.push((at, at + x.len()));
            }
        }
        (count, n, chars)
    }

    /// Glue the words (their n-grams are numbered only when a rule of the most frequent n-grams
    /// runs).
    fn glue(&mut self, words: &[&str]) {
        let total: usize = words.iter().map(|w| w.len()).sum();
        self.glued.clear();
        self.glued.reserve(total + PAD);
        self.gl.clear();
        self.gl.reserve(words.len() + 1);
        for w in words {
            self.gl.push(self.glued.len());
            self.glued.extend_from_slice(w.as_bytes());
        }
        self.gl.push(self.glued.len());
        self.glued.extend_from_slice(&[0; PAD]);
        self.level.n = 0;
        self.massed = false;
    }

    /// `word_mass` from above without numbering the words: each word's count is estimated by a
    /// count-min sketch (two rows of counters, at least twice as many per row as words, at most
    /// 4,096), which never counts a word fewer times than it occurs. At a word's last occurrence
    /// both of its counters hold all its occurrences, so the largest estimate seen is at least its
    /// count. Collisions only loosen the bound (then the words are numbered after all).
    fn sketch(&mut self, words: &[&str]) {
        let Scratch { glued, gl, counters, word_mass, spaced, massed, .. } = self;
        let slots = (2 * words.len()).next_power_of_two().clamp(64, 4096);
        counters.clear();
        counters.resize(2 * slots, 0);
        let (mut mass, mut most, mut sp) = (0usize, 0usize, false);
        for (i, w) in words.iter().enumerate() {
            let (_, _, h, has_space) = word_key(glued, gl[i], w);
            sp |= has_space;
            let n = w.len();
            let (x, y) = (h as usize & (slots - 1), slots + ((h >> 32) as usize & (slots - 1)));
            counters[x] += 1;
            counters[y] += 1;
            let c = counters[x].min(counters[y]) as usize;
            mass = mass.max(c * n);
            most = most.max(c);
        }
        (*word_mass, *spaced, *massed) = ((mass, most), sp, true);
    }

    /// Number the words (level 1: equal ids for equal words) and note whether a word has a space
    /// (then `" ".join`ed n-grams can be equal for different words: see [`top_plain`]).
    fn number(&mut self, words: &[&str]) {
        let Scratch { glued, gl, wkey, level, table, spaced, word_mass, .. } = self;
        level.n = 1;
        level.ids.clear();
        level.counts.clear();
        level.first.clear();
        wkey.clear();
        table.reset(words.len());
        *spaced = false;
        for (i, w) in words.iter().enumerate() {
            let (a, b, h, has_space) = word_key(glued, gl[i], w);
            *spaced |= has_space;
            let n = w.len();
            // the first and last 8 bytes with the length are the word itself up to 16 bytes
            let eq = |id: u32| {
                let (ka, kb, kn) = wkey[id as usize];
                ka == a && kb == b && kn == n && (n <= 16 || words[level.first[id as usize] as usize] == *w)
            };
            let id = match table.get_or_insert(h, level.counts.len() as u32, eq) {
                Some(id) => id,
                None => {
                    wkey.push((a, b, n));
                    level.counts.push(0);
                    level.first.push(i as u32);
                    level.counts.len() as u32 - 1
                }
            };
            level.counts[id as usize] += 1;
            level.ids.push(id);
        }
        *word_mass = level
            .counts
            .iter()
            .zip(wkey.iter())
            .fold((0, 0), |(m, c), (&k, &(_, _, len))| (m.max(k as usize * len), c.max(k as usize)));
        self.massed = true;
    }

    /// An upper bound of count times characters of any n-gram (as `" ".join`ed strings), from the
    /// words' counts alone; `None` where words have spaces. An n-gram occurs at most as often as
    /// each of its words, so `count * (len(w_1) + ... + len(w_n) + n - 1)` is at most
    /// `n * max(count(w) * len(w)) + (n - 1) * max(count(w))`. (Bytes bound characters.) Typical
    /// text stays far below the thresholds, and then neither the n-grams nor the words are numbered
    /// (the counts come from [`sketch`](Self::sketch), exact ones once the words are numbered).
    fn top_bound(&mut self, words: &[&str], n: usize) -> Option<usize> {
        if !self.massed {
            self.sketch(words);
        }
        let (mass, count) = self.word_mass;
        (!self.spaced).then(|| n * mass + (n - 1) * count)
    }

    /// `most_common(1)` of the n-grams (words joined by spaces, with no space in a word: equal
    /// strings are equal words): (count, first position). Climbs the levels from the current one
    /// (an n-gram is determined by its two (n-1)-grams, and occurs twice only if both do).
    fn top(&mut self, words: &[&str], n: usize) -> (usize, usize) {
        if self.level.n == 0 || self.level.n > n {
            self.number(words);
        }
        if self.spaced {
            return top_plain(words, n);
        }
        while self.level.n < n {
            self.climb(words.len());
        }
        let lv = &self.level;
        let mut best: Option<usize> = None;
        for (id, &c) in lv.counts.iter().enumerate() {
            if c > 1 && best.is_none_or(|b| c > lv.counts[b]) {
                best = Some(id);
            }
        }
        best.map_or((1, 0), |b| (lv.counts[b] as usize, lv.first[b] as usize))
    }

    /// Level n+1 from level n.
    fn climb(&mut self, nw: usize) {
        let Scratch { level, next, table, pairs, .. } = self;
        let n = level.n + 1;
        next.n = n;
        next.ids.clear();
        next.counts.clear();
        next.first.clear();
        pairs.clear();
        let positions = (nw + 1).saturating_sub(n);
        table.reset(positions);
        for i in 0..positions {
            let (l, r) = (level.ids[i], level.ids[i + 1]);
            if l == NONE || r == NONE || level.counts[l as usize] < 2 || level.counts[r as usize] < 2 {
                next.ids.push(NONE);
                continue;
            }
            let key = (l as u64) << 32 | r as u64;
            let id =
                match table.get_or_insert(fold(key, 0x9E37_79B9_7F4A_7C15), next.counts.len() as u32, |id| {
                    pairs[id as usize] == key
                }) {
                    Some(id) => id,
                    None => {
                        pairs.push(key);
                        next.counts.push(0);
                        next.first.push(i as u32);
                        next.counts.len() as u32 - 1
                    }
                };
            next.counts[id as usize] += 1;
            next.ids.push(id);
        }
        std::mem::swap(level, next);
    }

    /// The prefilter of the duplicated n-gram walks: an n-gram of at least [`PREFIX`] bytes can only
    /// occur twice if the [`PREFIX`] bytes at its start occur at another word's start, so only the
    /// word starts where that may be (by a [`Seen`] of their hashes), or where the n-gram of the
    /// smallest size `n_min` is shorter, are kept in `cand`.
    fn candidates(&mut self, n_min: usize) {
        let Scratch { glued, gl, keys, seen, cand, .. } = self;
        let nw = gl.len() - 1;
        keys.clear();
        keys.extend(gl[..nw].iter().map(|&at| fold(load8(glued, at), load8(glued, at + 8))));
        seen.fill(keys);
        cand.clear();
        for i in 0..(nw + 1).saturating_sub(n_min) {
            let twice = seen.twice(keys[i]);
            if twice || gl[i + n_min] - gl[i] < PREFIX {
                cand.push((i, twice));
            }
        }
        seen.clear(keys);
    }

    /// datatrove's duplicated n-gram walk: characters of n-grams (as `"".join`ed strings) seen
    /// before; a repeated one counts and skips ahead n words, a new one is remembered. Only the
    /// candidates can be seen twice (the others are visited and remembered to no effect).
    fn duplicated(&mut self, n: usize) -> usize {
        let Scratch { glued, gl, cand, table, spans, .. } = self;
        let positions = gl.len().saturating_sub(n);
        spans.clear();
        table.reset(cand.len());
        let (mut repeated, mut idx) = (0usize, 0usize);
        for &(i, twice) in cand.iter() {
            if i < idx {
                continue;
            }
            if i >= positions {
                break;
            }
            let (a, b) = (gl[i], gl[i + n]);
            if b - a >= PREFIX && !twice {
                continue;
            }
            let s = &glued[a..b];
            // a hash of the n-gram's own bytes (all of them: n-grams that share their first and
            // last bytes would otherwise all probe the same slots)
            let h = if b - a > PREFIX {
                xxh3_64(s)
            } else {
                let (x, y) = short_key(glued, a, b - a);
                fold(x ^ (b - a) as u64, y)
            };
            let eq = |id: u32| {
                let (x, y) = spans[id as usize];
                glued[x..y] == *s
            };
            if table.get_or_insert(h, spans.len() as u32, eq).is_some() {
                repeated += code_points(s);
                idx = i + n;
            } else {
                spans.push((a, b));
                idx = i + 1;
            }
        }
        repeated
    }
}

/// `re.split(r"\n{k,}", s)`: split on runs of at least `k` newlines.
fn split_runs(s: &str, k: usize) -> SplitRuns<'_> {
    SplitRuns { s, k, start: 0, at: 0, done: false }
}

struct SplitRuns<'a> {
    s: &'a str,
    k: usize,
    /// where the current piece starts, and where to look for the next newline
    start: usize,
    at: usize,
    done: bool,
}

impl<'a> Iterator for SplitRuns<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.done {
            return None;
        }
        let b = self.s.as_bytes();
        while let Some(k) = memchr::memchr(b'\n', &b[self.at..]) {
            let i = self.at + k;
            let mut j = i + 1;
            while j < b.len() && b[j] == b'\n' {
                j += 1;
            }
            self.at = j;
            if j - i >= self.k {
                let piece = &self.s[self.start..i];
                self.start = j;
                return Some(piece);
            }
        }
        self.done = true;
        Some(&self.s[self.start..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// datatrove's n-gram rules on joined strings, the plain way: the oracle of the hashed and
    /// prefiltered passes.
    fn reference(cfg: &GopherRepetitionConfig, text: &str, words: &[&str]) -> Option<String> {
        let text_len = len(text) as f64;
        for &(n, t) in &cfg.top_n_grams {
            if n == 0 || words.len() < n {
                continue;
            }
            let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
            for (i, g) in words.windows(n).enumerate() {
                counts.entry(g.join(" ")).or_insert((0, i)).0 += 1;
            }
            let (g, (c, _)) =
                counts.iter().max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.1 .1.cmp(&a.1 .1))).unwrap();
            if (len(g) * c) as f64 / text_len > t {
                return Some(format!("top_{n}_gram"));
            }
        }
        for &(n, t) in &cfg.dup_n_grams {
            if n == 0 {
                continue;
            }
            let (mut unique, mut repeated, mut idx) = (HashSet::new(), 0, 0);
            while idx + n <= words.len() {
                let g = words[idx..idx + n].concat();
                if unique.contains(&g) {
                    repeated += len(&g);
                    idx += n;
                } else {
                    unique.insert(g);
                    idx += 1;
                }
            }
            if repeated as f64 / text_len > t {
                return Some(format!("duplicated_{n}_n_grams"));
            }
        }
        None
    }

    #[test]
    fn n_gram_passes_match_the_plain_rules() {
        // words that glue into the same strings ("ab" + "c" == "a" + "bc"), and a small vocabulary,
        // so that n-grams repeat at every size
        let vocab =
            ["a", "b", "ab", "c", "bc", "abc", "abcdefgh", "ijk", "abcdefghijk", "日本語のテキスト", "x"];
        let mut rng = llmpipe_text::TestRng::new(0x2545_F491_4F6C_DD1D);
        let mut next = move |m: usize| rng.below(m);
        let mut checked = 0;
        for doc in 0..400 {
            let nw = next(if doc % 4 == 0 { 12 } else { 400 });
            let k = 2 + next(vocab.len() - 1); // how many distinct words this document uses
            let words: Vec<&str> = (0..nw).map(|_| vocab[next(k)]).collect();
            let text = words.join(" ");
            for n in 1..=10 {
                for t in [0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8] {
                    let top = GopherRepetitionConfig {
                        dup_line_frac: None,
                        dup_para_frac: None,
                        dup_line_char_frac: None,
                        dup_para_char_frac: None,
                        top_n_grams: vec![(n, t)],
                        dup_n_grams: vec![],
                    };
                    let dup = GopherRepetitionConfig {
                        top_n_grams: vec![],
                        dup_n_grams: vec![(n, t)],
                        ..top.clone()
                    };
                    for cfg in [top, dup] {
                        let got = gopher_repetition(&cfg, &text, &words);
                        assert_eq!(got, reference(&cfg, &text, &words), "{cfg:?} {words:?}");
                        checked += usize::from(got.is_some());
                    }
                }
            }
            let cfg = GopherRepetitionConfig::default();
            assert_eq!(gopher_repetition(&cfg, &text, &words), reference(&cfg, &text, &words));
        }
        assert!(checked > 10_000, "{checked}"); // the thresholds were crossed, not only kept
    }

    #[test]
    fn the_top_n_gram_bound_skips_natural_text_only() {
        // a document of Zipf-distributed words (as in prose): the bound rules out the top n-gram
        // rules without numbering n-grams; the same words in a short loop do not pass it
        let vocab: Vec<String> =
            (0..400).map(|i| format!("w{}", "x".repeat(i % 7) + &i.to_string())).collect();
        let mut rng = llmpipe_text::TestRng::new(0x9E37_79B9_7F4A_7C15);
        let words: Vec<&str> = (0..3000)
            .map(|_| {
                let u = (rng.bits() >> 11) as f64 / (1u64 << 53) as f64;
                &vocab[((400f64).powf(u) as usize - 1).min(399)][..]
            })
            .collect();
        let looped: Vec<&str> = words[..5].repeat(600);
        let cfg = GopherRepetitionConfig::default();
        for (doc, skips) in [(&words, true), (&looped, false)] {
            let text = doc.join(" ");
            let text_len = len(&text) as f64;
            let mut sc = Scratch::default();
            sc.glue(doc);
            let b = sc.top_bound(doc, 2).expect("no word has a space");
            assert_eq!((b as f64 / text_len) <= 0.2, skips);
            assert_eq!(gopher_repetition(&cfg, &text, doc), reference(&cfg, &text, doc));
        }
    }

    #[test]
    fn the_sketched_word_counts_bound_the_exact_ones() {
        // documents of every size over vocabularies of every size (words up to and over 16 bytes),
        // where the sketch's rows are small enough to collide: never below the exact counts
        let mut rng = llmpipe_text::TestRng::new(0x2545_F491_4F6C_DD1D);
        let (mut looser, mut equal) = (0, 0);
        for _ in 0..400 {
            let v = 1 + (rng.bits() % 3000) as usize;
            let vocab: Vec<String> = (0..v).map(|i| format!("{}{i}", "w".repeat((i * 7) % 23))).collect();
            let nw = (rng.bits() % 6000) as usize;
            let skewed = rng.bits() & 1 == 0; // a tenth of the vocabulary, or all of it
            let words: Vec<&str> = (0..nw)
                .map(|_| {
                    let r = rng.bits() as usize;
                    &vocab[if skewed { r % (1 + v / 10) } else { r % v }][..]
                })
                .collect();
            let mut sc = Scratch::default();
            sc.glue(&words);
            sc.sketch(&words);
            let (est, est_spaced) = (sc.word_mass, sc.spaced);
            sc.number(&words);
            let exact = sc.word_mass;
            assert!(est.0 >= exact.0 && est.1 >= exact.1, "{est:?} < {exact:?}");
            assert_eq!(est_spaced, sc.spaced);
            if est == exact {
                equal += 1;
            } else {
                looser += 1;
            }
        }
        assert!(equal > 200 && looser > 0, "{equal} {looser}"); // mostly exact, collisions happen
    }

    #[test]
    fn edge_cases_match_the_plain_rules() {
        // words with a space (the plain path of the top n-grams), words of more than 16 bytes that
        // share their first and last 8 bytes, n-grams shorter and longer than the 16-byte prefix,
        // the same glued bytes from different words, empty words, NUL bytes, more than one table
        // growth of lines
        let long = ["abcdefgh-middle1-ijklmnop", "abcdefgh-middle2-ijklmnop"];
        let docs: Vec<Vec<&str>> = vec![
            vec!["a b", "c", "a", "b c", "a b", "c", "a", "b c"],
            [long[0], long[1]].repeat(6),
            vec![long[0], long[1], long[1], long[0], long[0], long[1]],
            ["ab", "c", "a", "bc", "abc", "", "\0", "\0\0"].repeat(5),
            ["x"; 40].to_vec(),
            vec![],
        ];
        let lines: String = (0..3000).map(|i| format!("line {}\n", i % 1700)).collect();
        let cfgs = [(1..=10).map(|n| (n, 0.0)).collect::<Vec<_>>(), vec![(3, 0.5), (2, 0.9), (4, 2.0)]];
        for words in &docs {
            let text = words.join(" ");
            for g in &cfgs {
                let cfg = GopherRepetitionConfig {
                    dup_line_frac: None,
                    dup_para_frac: None,
                    dup_line_char_frac: None,
                    dup_para_char_frac: None,
                    top_n_grams: g.clone(),
                    dup_n_grams: vec![],
                };
                let dup =
                    GopherRepetitionConfig { top_n_grams: vec![], dup_n_grams: g.clone(), ..cfg.clone() };
                for c in [cfg, dup] {
                    assert_eq!(
                        gopher_repetition(&c, &text, words),
                        reference(&c, &text, words),
                        "{c:?} {words:?}"
                    );
                }
            }
        }
        // 1,700 distinct lines of 3,000 (and an empty one after the last newline): 1,300 duplicates
        let mut sc = Scratch::default();
        assert_eq!(sc.duplicates(&lines, split_runs(&lines, 1)), (3001, 1300, dup_chars(&lines)));
        assert_eq!(find_duplicates(split_runs(&lines, 1)), (1300, dup_chars(&lines)));
    }

    /// Characters of the lines of `text` seen before (the plain way).
    fn dup_chars(text: &str) -> usize {
        let mut seen = HashSet::new();
        text.split('\n').filter(|l| !seen.insert(*l)).map(len).sum()
    }

    #[test]
    fn split_like_re() {
        let split = |s, k| split_runs(s, k).collect::<Vec<_>>();
        assert_eq!(split("a\n\nb\nc\n\n\nd", 2), vec!["a", "b\nc", "d"]);
        assert_eq!(split("\na\nb\n", 1), vec!["", "a", "b", ""]);
        assert_eq!(split("\n\n", 2), vec!["", ""]);
        assert_eq!(split("a\nb", 2), vec!["a\nb"]);
        assert_eq!(split("", 1), vec![""]);
    }
}

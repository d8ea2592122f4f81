//! Gopher repetition rules, ported from datatrove's `GopherRepetitionFilter`.
//!
//! n-grams are compared through 64-bit polynomial hashes of their text (plus its length), computed
//! from prefix sums, so each n-gram costs O(1) instead of a joined string.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use crate::pycompat::{len, strip};

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

/// The keys are already uniform 61-bit hashes: hash maps use them as they are.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

type IdBuild = BuildHasherDefault<IdHasher>;

/// One 64-bit key from a substring hash and its length.
#[inline]
fn key((h, n): (u64, usize)) -> u64 {
    h ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

const MOD: u64 = (1 << 61) - 1;
const BASE: u64 = 1_000_003;

#[inline]
fn mulmod(a: u64, b: u64) -> u64 {
    reduce((a as u128) * (b as u128))
}

/// `p mod MOD` for `p < 2^122`.
#[inline]
fn reduce(p: u128) -> u64 {
    let lo = (p as u64) & MOD;
    let hi = (p >> 61) as u64;
    let s = lo + hi;
    if s >= MOD {
        s - MOD
    } else {
        s
    }
}

/// Extend `pw` to BASE^0 .. BASE^n (kept per thread: every document needs a prefix of it).
fn powers(pw: &mut Vec<u64>, n: usize) {
    if pw.is_empty() {
        pw.push(1);
    }
    while pw.len() <= n {
        let last = pw[pw.len() - 1];
        pw.push(mulmod(last, BASE));
    }
}

#[inline]
fn addmod(a: u64, b: u64) -> u64 {
    let v = a + b;
    if v >= MOD {
        v - MOD
    } else {
        v
    }
}

/// The polynomial hash of a byte string (Horner: h = h * BASE + byte + 1). Appending `w` to a
/// string of hash `h` gives `h * BASE^len(w) + poly(w)`, so the hash of any prefix of a joined word
/// sequence is known at each word boundary with one step per word; the words' own hashes are
/// independent of each other, which lets the CPU overlap them. Eight bytes take one Horner step of
/// BASE^8 (their eight products with `pw` are independent: one multiply's latency per 8 bytes
/// instead of per byte); `pw` holds BASE^0..=BASE^8 at least.
#[inline]
fn poly(bytes: &[u8], pw: &[u64]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut h = 0u64;
    for c in &mut chunks {
        let s: u128 = c.iter().zip(pw[..8].iter().rev()).map(|(&b, &p)| (b as u128 + 1) * p as u128).sum();
        h = addmod(mulmod(h, pw[8]), reduce(s));
    }
    chunks.remainder().iter().fold(h, |h, &b| addmod(mulmod(h, BASE), b as u64 + 1))
}

/// The key of the substring between prefix hashes `ha` (at its start) and `hb` (at its end),
/// `len` bytes long.
#[inline]
fn sub(ha: u64, hb: u64, pw: &[u64], len: usize) -> u64 {
    let x = hb + MOD - mulmod(ha, pw[len]);
    key((if x >= MOD { x - MOD } else { x }, len))
}

/// Buffers reused from one document to the next on a thread (allocating and zeroing them per
/// document cost more than filling them).
#[derive(Default)]
struct Scratch {
    sp_off: Vec<usize>,
    gl_off: Vec<usize>,
    cp: Vec<usize>,
    pw: Vec<u64>,
    /// prefix hashes of " ".join(words) at each word's start and end
    hs_start: Vec<u64>,
    hs_end: Vec<u64>,
    /// prefix hashes of "".join(words) at each word boundary
    hg: Vec<u64>,
    counts: HashMap<u64, (u32, u32), IdBuild>,
    unique: HashSet<u64, IdBuild>,
    /// the n-gram keys of one size, and a small table of how often each key's slot was hit
    keys: Vec<u64>,
    seen: Seen,
}

/// A prefilter for the n-gram passes: counts (saturating at 2) per slot of a table 16 times the
/// number of keys. A key whose slot was hit once occurs once in the document, so it can neither be
/// found again nor be the most frequent n-gram unless every n-gram occurs once: only the others
/// (a few percent of the n-grams of size 4 and up in prose) go through the hash set or map. The
/// table stays in cache and is emptied by visiting the keys again.
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
            let v = &mut slots[slot(k, shift)];
            *v = (*v + 1).min(2);
        }
    }

    /// The table as a test "may this key occur twice?" (false: it is the only one of its value).
    #[inline]
    fn view(&self) -> impl Fn(u64) -> bool + '_ {
        let (slots, shift) = (&self.slots[..1 << (64 - self.shift)], self.shift);
        move |key| slots[slot(key, shift)] > 1
    }

    fn clear(&mut self, keys: &[u64]) {
        let (slots, shift) = (&mut self.slots[..1 << (64 - self.shift)], self.shift);
        for &k in keys {
            slots[slot(k, shift)] = 0;
        }
    }
}

#[inline]
fn slot(key: u64, shift: u32) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
}

/// Empty a reused map; one grown far beyond `need` by a long document is shrunk, so that clearing
/// it does not cost every later short document its old size.
fn reset<V>(m: &mut HashMap<u64, V, IdBuild>, need: usize) {
    m.clear();
    if m.capacity() > 1024 && m.capacity() > 4 * need {
        m.shrink_to(need);
    }
    m.reserve(need);
}

fn reset_set(m: &mut HashSet<u64, IdBuild>, need: usize) {
    m.clear();
    if m.capacity() > 1024 && m.capacity() > 4 * need {
        m.shrink_to(need);
    }
    m.reserve(need);
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// `None` to keep, else datatrove's reason.
pub fn gopher_repetition(cfg: &GopherRepetitionConfig, text: &str, words: &[&str]) -> Option<String> {
    let text_len = len(text) as f64;
    let frac = |chars: usize| if text_len == 0.0 { 0.0 } else { chars as f64 / text_len };

    let stripped = strip(text);
    let paragraphs: Vec<&str> = split_runs(stripped, 2);
    let (pd, pc) = find_duplicates(paragraphs.iter().copied());
    if let Some(t) = on(cfg.dup_para_frac) {
        if pd as f64 / paragraphs.len() as f64 > t {
            return Some("dup_para_frac".into());
        }
    }
    if let Some(t) = on(cfg.dup_para_char_frac) {
        if frac(pc) > t {
            return Some("dup_para_char_frac".into());
        }
    }
    let lines: Vec<&str> = split_runs(text, 1);
    let (ld, lc) = find_duplicates(lines.iter().copied());
    if let Some(t) = on(cfg.dup_line_frac) {
        if ld as f64 / lines.len() as f64 > t {
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
    SCRATCH.with(|cell| n_grams(cfg, words, &mut cell.borrow_mut(), frac))
}

/// The n-gram rules (the costly part): most frequent n-grams, then duplicated n-grams.
fn n_grams(
    cfg: &GopherRepetitionConfig,
    words: &[&str],
    sc: &mut Scratch,
    frac: impl Fn(usize) -> f64,
) -> Option<String> {
    let Scratch { sp_off, gl_off, cp, pw, hs_start, hs_end, hg, counts, unique, keys, seen } = sc;
    for v in [&mut *sp_off, &mut *gl_off, &mut *cp] {
        v.clear();
    }
    for v in [&mut *hs_start, &mut *hs_end, &mut *hg] {
        v.clear();
    }
    // " ".join(words) and "".join(words): each word's start offset and the prefix hashes at word
    // boundaries (the strings themselves are never built), and code-point prefix sums
    let nw = words.len();
    powers(pw, words.iter().map(|w| w.len() + 1).sum::<usize>().max(8));
    cp.push(0usize);
    hg.push(0);
    let (mut sp, mut gl, mut hs, mut g) = (0usize, 0usize, 0u64, 0u64);
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            hs = addmod(mulmod(hs, BASE), b' ' as u64 + 1);
            sp += 1;
        }
        sp_off.push(sp);
        gl_off.push(gl);
        hs_start.push(hs);
        let (wh, p) = (poly(w.as_bytes(), pw), pw[w.len()]);
        hs = addmod(mulmod(hs, p), wh);
        g = addmod(mulmod(g, p), wh);
        hs_end.push(hs);
        hg.push(g);
        sp += w.len();
        gl += w.len();
        cp.push(cp[i] + len(w));
    }
    sp_off.push(sp + 1);
    gl_off.push(gl);

    for &(n, t) in &cfg.top_n_grams {
        if n == 0 || nw < n {
            continue;
        }
        // most_common(1): highest count, ties -> first seen; an n-gram that occurs once counts only
        // when every one does, and then the first one wins
        keys.clear();
        keys.resize(nw - n + 1, 0);
        for (i, k) in keys.iter_mut().enumerate() {
            *k = sub(hs_start[i], hs_end[i + n - 1], pw, sp_off[i + n] - 1 - sp_off[i]);
        }
        seen.fill(keys);
        reset(counts, 64);
        let repeated = seen.view();
        for (i, &key) in keys.iter().enumerate() {
            if repeated(key) {
                let e = counts.entry(key).or_insert((0, i as u32));
                e.0 += 1;
            }
        }
        drop(repeated);
        seen.clear(keys);
        let (c, first) = counts
            .values()
            .filter(|v| v.0 > 1)
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
            .map_or((1, 0), |&(c, first)| (c, first));
        let f = first as usize;
        let ngram_chars = cp[f + n] - cp[f] + (n - 1);
        if frac(ngram_chars * c as usize) > t {
            return Some(format!("top_{n}_gram"));
        }
    }
    for &(n, t) in &cfg.dup_n_grams {
        if n == 0 {
            continue;
        }
        // datatrove's walk: a repeated n-gram counts its characters and skips ahead n words; only
        // n-grams that may occur twice need the set (the others are never found again)
        keys.clear();
        keys.resize((nw + 1).saturating_sub(n), 0);
        for (i, k) in keys.iter_mut().enumerate() {
            *k = sub(hg[i], hg[i + n], pw, gl_off[i + n] - gl_off[i]);
        }
        seen.fill(keys);
        reset_set(unique, 64);
        let (mut repeated, mut idx, twice) = (0usize, 0usize, seen.view());
        while idx < keys.len() {
            let key = keys[idx];
            if !twice(key) || unique.insert(key) {
                idx += 1;
            } else {
                repeated += cp[idx + n] - cp[idx];
                idx += n;
            }
        }
        drop(twice);
        seen.clear(keys);
        if frac(repeated) > t {
            return Some(format!("duplicated_{n}_n_grams"));
        }
    }
    None
}

/// `re.split(r"\n{k,}", s)`: split on runs of at least `k` newlines.
fn split_runs(s: &str, k: usize) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        if b[i] == b'\n' {
            let mut j = i;
            while j < b.len() && b[j] == b'\n' {
                j += 1;
            }
            if j - i >= k {
                out.push(&s[start..i]);
                start = j;
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out.push(&s[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |m: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m as u64) as usize
        };
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
    fn eight_bytes_at_a_time_is_horner() {
        let mut pw = Vec::new();
        powers(&mut pw, 64);
        let text: Vec<u8> = (0..64u32).map(|i| (i * 37 % 256) as u8).collect();
        for n in 0..=64 {
            let horner = text[..n].iter().fold(0u64, |h, &b| addmod(mulmod(h, BASE), b as u64 + 1));
            assert_eq!(poly(&text[..n], &pw), horner, "{n}");
        }
    }

    #[test]
    fn split_like_re() {
        assert_eq!(split_runs("a\n\nb\nc\n\n\nd", 2), vec!["a", "b\nc", "d"]);
        assert_eq!(split_runs("\na\nb\n", 1), vec!["", "a", "b", ""]);
    }
}

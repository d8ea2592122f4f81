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
    let p = (a as u128) * (b as u128);
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
/// independent of each other, which lets the CPU overlap them.
#[inline]
fn poly(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |h, &b| addmod(mulmod(h, BASE), b as u64 + 1))
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
    let Scratch { sp_off, gl_off, cp, pw, hs_start, hs_end, hg, counts, unique } = sc;
    for v in [&mut *sp_off, &mut *gl_off, &mut *cp] {
        v.clear();
    }
    for v in [&mut *hs_start, &mut *hs_end, &mut *hg] {
        v.clear();
    }
    // " ".join(words) and "".join(words): each word's start offset and the prefix hashes at word
    // boundaries (the strings themselves are never built), and code-point prefix sums
    let nw = words.len();
    powers(pw, words.iter().map(|w| w.len() + 1).sum::<usize>());
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
        let (wh, p) = (poly(w.as_bytes()), pw[w.len()]);
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

    if !cfg.top_n_grams.is_empty() {
        for &(n, t) in &cfg.top_n_grams {
            if n == 0 || nw < n {
                continue;
            }
            // most_common(1): highest count, ties -> first seen
            reset(counts, nw);
            for i in 0..=nw - n {
                let key = sub(hs_start[i], hs_end[i + n - 1], pw, sp_off[i + n] - 1 - sp_off[i]);
                let e = counts.entry(key).or_insert((0, i as u32));
                e.0 += 1;
            }
            let (_, &(c, first)) = counts
                .iter()
                .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.1 .1.cmp(&a.1 .1)))
                .expect("non-empty");
            let f = first as usize;
            let ngram_chars = cp[f + n] - cp[f] + (n - 1);
            if frac(ngram_chars * c as usize) > t {
                return Some(format!("top_{n}_gram"));
            }
        }
    }
    if !cfg.dup_n_grams.is_empty() {
        for &(n, t) in &cfg.dup_n_grams {
            if n == 0 {
                continue;
            }
            reset_set(unique, nw);
            let mut repeated = 0usize;
            let mut idx = 0usize;
            while idx + n <= nw {
                let key = sub(hg[idx], hg[idx + n], pw, gl_off[idx + n] - gl_off[idx]);
                if unique.insert(key) {
                    idx += 1;
                } else {
                    repeated += cp[idx + n] - cp[idx];
                    idx += n;
                }
            }
            if frac(repeated) > t {
                return Some(format!("duplicated_{n}_n_grams"));
            }
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

    #[test]
    fn split_like_re() {
        assert_eq!(split_runs("a\n\nb\nc\n\n\nd", 2), vec!["a", "b\nc", "d"]);
        assert_eq!(split_runs("\na\nb\n", 1), vec!["", "a", "b", ""]);
    }
}

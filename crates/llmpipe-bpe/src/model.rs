//! The byte-level BPE model: vocabulary, ranked merges, special tokens, encode and decode.

use crate::pattern::PreTokenizer;
use crate::shorttab::{hash, Key, ShortTable};
use crate::Error;
use ahash::AHashMap;
use rayon::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Mutex, OnceLock};

/// Pieces longer than this (in bytes) use the heap-based merge; shorter ones a linear rescan.
const SCAN_MAX: usize = 48;
/// Pieces up to this length are memoised in the per-call cache.
const CACHE_MAX_PIECE: usize = 128;
/// The cache is emptied when it holds this many pieces or this many ids.
const CACHE_MAX_ENTRIES: usize = 1 << 17;
const CACHE_MAX_IDS: usize = 1 << 21;
/// Pieces up to this many bytes are looked up by an integer key (bytes and length in a u128):
/// one hash of two words and no byte comparison. That is nearly every piece of real text.
pub(crate) const SHORT: usize = 15;

#[inline]
fn key(a: u32, b: u32) -> u64 {
    ((a as u64) << 32) | b as u64
}

/// Pieces between the prefetch of a short piece's table slots and its lookup.
const AHEAD: usize = 8;

/// A [`short_key`] as the two words of a [`ShortTable`] key.
#[inline(always)]
pub(crate) fn key2(k: u128) -> Key {
    [k as u64, (k >> 64) as u64]
}

/// The bytes of a piece of 2 to [`SHORT`] bytes (little-endian, from byte 0) and its length
/// (byte 15), as one integer. Built from overlapping word loads: a byte-wise copy into a stack
/// buffer followed by a wide load stalls on store forwarding, and this is the hottest line of
/// encoding.
#[inline(always)]
pub(crate) fn short_key(p: &[u8]) -> u128 {
    let n = p.len();
    debug_assert!((2..=SHORT).contains(&n));
    let rd4 = |i: usize| u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]) as u64;
    let rd8 = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().expect("8 bytes"));
    let (lo, hi) = if n > 8 {
        // the last 8 bytes overlap the first 8 by 16 - n bytes: shift those out
        (rd8(0), rd8(n - 8) >> ((16 - n) * 8))
    } else if n >= 4 {
        // overlapping bytes sit at the same positions with the same values
        (rd4(0) | (rd4(n - 4) << ((n - 4) * 8)), 0)
    } else {
        (p[0] as u64 | ((p[1] as u64) << 8) | ((p[n - 1] as u64) << ((n - 1) * 8)), 0)
    };
    ((hi | ((n as u64) << 56)) as u128) << 64 | lo as u128
}

/// A special (added) token: matched in text only when the caller allows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Special {
    pub content: String,
    pub id: u32,
}

/// Which special tokens `encode` recognises in the text.
#[derive(Debug, Clone, Default)]
pub enum Allowed {
    /// None: every special-token string is ordinary text (the default).
    #[default]
    None,
    /// All special tokens of the tokenizer.
    All,
    /// Only these.
    Some(Vec<String>),
}

/// A byte-level BPE tokenizer.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    /// id -> bytes (special tokens: their UTF-8 content); `None` for unused ids.
    pub(crate) tokens: Vec<Option<Vec<u8>>>,
    /// bytes -> id for ordinary (non-special) tokens.
    token_ids: AHashMap<Vec<u8>, u32>,
    /// (left, right) -> (rank, new id).
    merges: AHashMap<u64, (u32, u32)>,
    /// Merges in rank order, as (left, right) ids: what tokenizer.json stores.
    pub(crate) merge_list: Vec<(u32, u32)>,
    byte_ids: [u32; 256],
    /// Which tokens a whole piece may be looked up as: made on first encode (loading a tokenizer
    /// to read its vocabulary, or training and saving one, does not pay for the BPE of every token).
    whole: OnceLock<Whole>,
    /// tiktoken semantics (HF `ignore_merges`): a piece that is a token is that token.
    pub(crate) ignore_merges: bool,
    pub(crate) add_prefix_space: bool,
    pub(crate) specials: Vec<Special>,
    special_re: Option<regex::Regex>,
    pub(crate) pre: PreTokenizer,
    /// Piece caches of earlier calls, reused by the next ones: a batch call used to start every
    /// thread with an empty cache, so each batch redid the BPE of its common pieces (with batches
    /// of 1,000 documents that was a third of the encoding time). The ids do not depend on it.
    pool: StatePool,
}

/// The whole-token shortcut of encoding.
#[derive(Debug, Clone)]
struct Whole {
    /// token id -> BPE of its own bytes gives exactly that token, so a whole piece may be looked up.
    ok: Vec<bool>,
    /// short_key(bytes) -> id for the tokens of at most [`SHORT`] bytes that are `ok`.
    short: ShortTable<u32>,
}

/// Idle [`EncodeState`]s (a clone of the tokenizer starts with none).
#[derive(Debug, Default)]
struct StatePool(Mutex<Vec<EncodeState>>);

impl Clone for StatePool {
    fn clone(&self) -> Self {
        StatePool::default()
    }
}

impl StatePool {
    fn take(&self) -> EncodeState {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default()
    }

    fn put(&self, st: EncodeState) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // no more than the threads that may use them at once
        if v.len() < rayon::current_num_threads().max(1) {
            v.push(st);
        }
    }
}

/// Reusable per-thread state for encoding: the cache of the BPE of recent pieces. The ids of
/// all cached pieces live in one arena, so caching a piece allocates nothing (short pieces)
/// or only its key (longer ones); the cache is emptied when full.
#[derive(Debug, Default)]
pub struct EncodeState {
    short: ShortTable<(u32, u32)>,
    long: AHashMap<Box<[u8]>, (u32, u32)>,
    ids: Vec<u32>,
}

/// One [`EncodeState`] per worker thread of the rayon pool for one batch call, so each thread's
/// piece cache stays warm across all the texts it encodes (a state per rayon job started cold
/// many times per call: more BPE work and rehashing than one thread encoding everything).
struct States(Vec<Mutex<EncodeState>>);

impl States {
    /// One state per worker thread, taken from `pool` (new ones if it holds fewer).
    fn new(pool: &StatePool) -> Self {
        States((0..rayon::current_num_threads().max(1)).map(|_| Mutex::new(pool.take())).collect())
    }

    /// Give the states back to `pool` for the next call.
    fn release(self, pool: &StatePool) {
        for m in self.0 {
            pool.put(m.into_inner().unwrap_or_else(|e| e.into_inner()));
        }
    }

    /// Run `f` with the calling worker's state (uncontended: a worker runs one job at a time).
    fn with<R>(&self, f: impl FnOnce(&mut EncodeState) -> R) -> R {
        let i = rayon::current_thread_index().unwrap_or(0) % self.0.len();
        let mut g = self.0[i].lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }
}

impl EncodeState {
    #[inline]
    fn get(&self, range: (u32, u32)) -> &[u32] {
        &self.ids[range.0 as usize..(range.0 + range.1) as usize]
    }

    /// Store `ids` in the arena and return their range, emptying the cache first if it is full.
    #[inline]
    fn push(&mut self, ids: &[u32]) -> (u32, u32) {
        if self.ids.len() + ids.len() > CACHE_MAX_IDS
            || self.short.len() + self.long.len() >= CACHE_MAX_ENTRIES
        {
            self.short.clear();
            self.long.clear();
            self.ids.clear();
        }
        let start = self.ids.len() as u32;
        self.ids.extend_from_slice(ids);
        (start, ids.len() as u32)
    }
}

impl Tokenizer {
    /// Build from tokens (id -> bytes), merges in rank order, special tokens and a pre-tokenizer.
    /// With `rank_by_token` (tiktoken files), a merge's rank is the id of the merged token and every
    /// split of every token is a merge; otherwise the rank is the index in `merge_list`.
    pub fn new(
        tokens: Vec<Option<Vec<u8>>>,
        merge_list: Vec<(u32, u32)>,
        specials: Vec<Special>,
        pre: PreTokenizer,
        ignore_merges: bool,
    ) -> Result<Self, Error> {
        let mut tokens = tokens;
        let special_ids: Vec<u32> = specials.iter().map(|s| s.id).collect();
        for s in &specials {
            let i = s.id as usize;
            if tokens.len() <= i {
                tokens.resize(i + 1, None);
            }
            tokens[i] = Some(s.content.as_bytes().to_vec());
        }
        let mut token_ids = AHashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            if let Some(t) = t {
                if !special_ids.contains(&(i as u32)) {
                    token_ids.entry(t.clone()).or_insert(i as u32);
                }
            }
        }
        let mut byte_ids = [0u32; 256];
        for b in 0..=255u8 {
            byte_ids[b as usize] = *token_ids.get(&vec![b]).ok_or_else(|| {
                Error::Invalid(format!("the vocabulary lacks the single byte 0x{b:02x} (not byte-level BPE)"))
            })?;
        }
        let mut merges = AHashMap::with_capacity(merge_list.len());
        for (rank, &(a, b)) in merge_list.iter().enumerate() {
            let (ta, tb) = match (tok(&tokens, a), tok(&tokens, b)) {
                (Some(x), Some(y)) => (x, y),
                _ => return Err(Error::Invalid(format!("merge {rank} refers to an unknown id"))),
            };
            let joined = [ta, tb].concat();
            let new = *token_ids.get(&joined).ok_or_else(|| {
                Error::Invalid(format!(
                    "merge {rank}: the merged token {:?} is not in the vocabulary",
                    String::from_utf8_lossy(&joined)
                ))
            })?;
            merges.entry(key(a, b)).or_insert((rank as u32, new));
        }
        let mut t = Tokenizer {
            whole: OnceLock::new(),
            tokens,
            token_ids,
            merges,
            merge_list,
            byte_ids,
            ignore_merges,
            add_prefix_space: false,
            specials,
            special_re: None,
            pre,
            pool: StatePool::default(),
        };
        t.special_re = t.build_special_re(None)?;
        Ok(t)
    }

    /// Build from tiktoken ranks (token bytes with rank == id): every split of a token into two
    /// tokens is a merge whose rank is the merged token's rank.
    pub fn from_ranks(
        tokens: Vec<Option<Vec<u8>>>,
        specials: Vec<Special>,
        pre: PreTokenizer,
    ) -> Result<Self, Error> {
        let mut ids: AHashMap<&[u8], u32> = AHashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            if let Some(t) = t {
                ids.insert(t.as_slice(), i as u32);
            }
        }
        // HF's tiktoken converter order: by merged rank, then by (left rank, right rank).
        let mut list: Vec<(u32, u32, u32)> = Vec::new();
        for (i, t) in tokens.iter().enumerate() {
            let Some(t) = t else { continue };
            let mut local = Vec::new();
            for k in 1..t.len() {
                if let (Some(&l), Some(&r)) = (ids.get(&t[..k]), ids.get(&t[k..])) {
                    local.push((i as u32, l, r));
                }
            }
            local.sort_by_key(|&(_, l, r)| (l, r));
            list.extend(local);
        }
        let merge_list: Vec<(u32, u32)> = list.iter().map(|&(_, l, r)| (l, r)).collect();
        let mut t = Tokenizer::new(tokens, merge_list, specials, pre, true)?;
        // Rank of a merge = rank of the token it makes (tiktoken's byte_pair_merge).
        for &(new, l, r) in &list {
            t.merges.insert(key(l, r), (new, new));
        }
        Ok(t)
    }

    /// The whole-token shortcut, computed on first use (from the final merges).
    fn whole(&self) -> &Whole {
        self.whole.get_or_init(|| {
            let ok: Vec<bool> = if self.ignore_merges {
                vec![true; self.tokens.len()]
            } else {
                (0..self.tokens.len())
                    .into_par_iter()
                    .map(|i| match &self.tokens[i] {
                        Some(t) if self.token_ids.get(t) == Some(&(i as u32)) => {
                            let mut out = Vec::new();
                            self.bpe(t, &mut out);
                            out.len() == 1 && out[0] == i as u32
                        }
                        _ => false,
                    })
                    .collect()
            };
            let mut short = ShortTable::with_capacity(self.token_ids.len());
            for (t, &id) in &self.token_ids {
                if (2..=SHORT).contains(&t.len()) && ok[id as usize] {
                    let k = key2(short_key(t));
                    *short.entry(k, hash(k)) = id;
                }
            }
            Whole { ok, short }
        })
    }

    fn build_special_re(&self, only: Option<&[String]>) -> Result<Option<regex::Regex>, Error> {
        let mut names: Vec<&str> = self
            .specials
            .iter()
            .map(|s| s.content.as_str())
            .filter(|c| only.is_none_or(|o| o.iter().any(|x| x == c)))
            .filter(|c| !c.is_empty())
            .collect();
        if names.is_empty() {
            return Ok(None);
        }
        names.sort_by_key(|s| Reverse(s.len()));
        let alt = names.iter().map(|s| regex::escape(s)).collect::<Vec<_>>().join("|");
        regex::Regex::new(&alt).map(Some).map_err(|e| Error::Invalid(format!("special tokens: {e}")))
    }

    /// Drop the piece caches kept for the next calls (their memory goes back; ids do not change).
    pub fn clear_cache(&self) {
        self.pool.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Number of ids (highest id + 1).
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    pub fn specials(&self) -> &[Special] {
        &self.specials
    }

    pub fn pre_tokenizer(&self) -> &PreTokenizer {
        &self.pre
    }

    /// The id of a token given as text (special tokens by content, others by their bytes).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.specials
            .iter()
            .find(|s| s.content == token)
            .map(|s| s.id)
            .or_else(|| self.token_ids.get(token.as_bytes()).copied())
    }

    /// The bytes of a token id.
    pub fn id_to_bytes(&self, id: u32) -> Option<&[u8]> {
        tok(&self.tokens, id)
    }

    /// BPE of one piece, appended to `out` (no cache, no whole-piece lookup).
    fn bpe(&self, piece: &[u8], out: &mut Vec<u32>) {
        if piece.len() <= SCAN_MAX {
            self.bpe_scan(piece, out)
        } else {
            self.bpe_heap(piece, out)
        }
    }

    /// Quadratic rescan: fastest for the short pieces that are nearly all of real text.
    fn bpe_scan(&self, piece: &[u8], out: &mut Vec<u32>) {
        let mut syms: [u32; SCAN_MAX] = [0; SCAN_MAX];
        let mut n = piece.len();
        for (s, &b) in syms.iter_mut().zip(piece) {
            *s = self.byte_ids[b as usize];
        }
        // ranks[i]: (rank, new id) of the pair (syms[i], syms[i+1]).
        let mut ranks: [(u32, u32); SCAN_MAX] = [(u32::MAX, 0); SCAN_MAX];
        for i in 0..n.saturating_sub(1) {
            ranks[i] = self.merges.get(&key(syms[i], syms[i + 1])).copied().unwrap_or((u32::MAX, 0));
        }
        while n > 1 {
            let mut best = u32::MAX;
            let mut at = 0;
            for (i, r) in ranks[..n - 1].iter().enumerate() {
                if r.0 < best {
                    best = r.0;
                    at = i;
                }
            }
            if best == u32::MAX {
                break;
            }
            syms[at] = ranks[at].1;
            syms.copy_within(at + 2..n, at + 1);
            ranks.copy_within(at + 2..n.saturating_sub(1).max(at + 2), at + 1);
            n -= 1;
            if at + 1 < n {
                ranks[at] = self.merges.get(&key(syms[at], syms[at + 1])).copied().unwrap_or((u32::MAX, 0));
            } else {
                ranks[at] = (u32::MAX, 0);
            }
            if at > 0 {
                ranks[at - 1] =
                    self.merges.get(&key(syms[at - 1], syms[at])).copied().unwrap_or((u32::MAX, 0));
            }
        }
        out.extend_from_slice(&syms[..n]);
    }

    /// Heap + linked list: O(n log n) for arbitrarily long pieces (a million equal characters).
    fn bpe_heap(&self, piece: &[u8], out: &mut Vec<u32>) {
        let n = piece.len();
        let mut sym: Vec<u32> = piece.iter().map(|&b| self.byte_ids[b as usize]).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut alive = vec![true; n];
        // min-heap on (rank, position); entries carry the id they would produce
        let mut heap: BinaryHeap<Reverse<(u32, usize, u32)>> = BinaryHeap::with_capacity(n);
        for i in 0..n - 1 {
            if let Some(&(r, new)) = self.merges.get(&key(sym[i], sym[i + 1])) {
                heap.push(Reverse((r, i, new)));
            }
        }
        while let Some(Reverse((r, i, new))) = heap.pop() {
            if !alive[i] || next[i] >= n {
                continue;
            }
            let j = next[i];
            match self.merges.get(&key(sym[i], sym[j])) {
                Some(&(r2, n2)) if r2 == r && n2 == new => {}
                _ => continue,
            }
            sym[i] = new;
            alive[j] = false;
            next[i] = next[j];
            if next[j] < n {
                prev[next[j]] = i;
            }
            if prev[i] < n {
                let p = prev[i];
                if let Some(&(r, nw)) = self.merges.get(&key(sym[p], sym[i])) {
                    heap.push(Reverse((r, p, nw)));
                }
            }
            if next[i] < n {
                if let Some(&(r, nw)) = self.merges.get(&key(sym[i], sym[next[i]])) {
                    heap.push(Reverse((r, i, nw)));
                }
            }
        }
        let mut i = 0;
        while i < n {
            out.push(sym[i]);
            i = next[i];
        }
    }

    /// Encode one piece with the whole-token shortcut and the cache; `k` and `h` are the key and
    /// hash of a piece of 2 to [`SHORT`] bytes.
    #[inline]
    fn encode_piece(
        &self,
        piece: &[u8],
        (k, h): (Key, u64),
        out: &mut Vec<u32>,
        st: &mut EncodeState,
        whole: &Whole,
    ) {
        if piece.len() == 1 {
            out.push(self.byte_ids[piece[0] as usize]);
            return;
        }
        if piece.len() <= SHORT {
            if let Some(&id) = whole.short.get(k, h) {
                out.push(id);
                return;
            }
            if let Some(&r) = st.short.get(k, h) {
                out.extend_from_slice(st.get(r));
                return;
            }
            let start = out.len();
            self.bpe(piece, out);
            let r = st.push(&out[start..]);
            *st.short.entry(k, h) = r;
            return;
        }
        if let Some(&id) = self.token_ids.get(piece) {
            if whole.ok[id as usize] {
                out.push(id);
                return;
            }
        }
        if piece.len() > CACHE_MAX_PIECE {
            self.bpe(piece, out);
            return;
        }
        if let Some(&r) = st.long.get(piece) {
            out.extend_from_slice(st.get(r));
            return;
        }
        let start = out.len();
        self.bpe(piece, out);
        let r = st.push(&out[start..]);
        st.long.insert(piece.into(), r);
    }

    /// Encode the pieces of `text` in order. A short piece's slots in the whole-token table and
    /// the cache are prefetched [`AHEAD`] pieces before it is looked up (most lookups were waits
    /// on memory).
    fn encode_pieces(&self, text: &str, out: &mut Vec<u32>, st: &mut EncodeState, whole: &Whole) {
        let mut ring: [(&[u8], (Key, u64)); AHEAD] = [(&[], ([0, 0], 0)); AHEAD];
        let mut n = 0usize;
        self.pre.for_each_piece(text, |p| {
            let b = p.as_bytes();
            let kh = if (2..=SHORT).contains(&b.len()) {
                let k = key2(short_key(b));
                let h = hash(k);
                whole.short.prefetch(h);
                st.short.prefetch(h);
                (k, h)
            } else {
                ([0, 0], 0)
            };
            let slot = &mut ring[n % AHEAD];
            if n >= AHEAD {
                let (piece, kh) = *slot;
                self.encode_piece(piece, kh, out, st, whole);
            }
            ring[n % AHEAD] = (b, kh);
            n += 1;
        });
        for i in n.saturating_sub(AHEAD)..n {
            let (piece, kh) = ring[i % AHEAD];
            self.encode_piece(piece, kh, out, st, whole);
        }
    }

    /// Encode text with no special tokens recognised.
    pub fn encode_ordinary_into(&self, text: &str, out: &mut Vec<u32>, st: &mut EncodeState) {
        let whole = self.whole();
        if self.add_prefix_space && !text.starts_with(' ') && !text.is_empty() {
            self.encode_pieces(&format!(" {text}"), out, st, whole);
        } else {
            self.encode_pieces(text, out, st, whole);
        }
    }

    /// Resolve which special tokens to recognise.
    pub fn allowed_regex(&self, allowed: &Allowed) -> Result<Option<regex::Regex>, Error> {
        match allowed {
            Allowed::None => Ok(None),
            Allowed::All => Ok(self.special_re.clone()),
            Allowed::Some(v) => {
                for name in v {
                    if !self.specials.iter().any(|s| &s.content == name) {
                        return Err(Error::Invalid(format!(
                            "{name:?} is not a special token of this tokenizer"
                        )));
                    }
                }
                self.build_special_re(Some(v))
            }
        }
    }

    /// Encode text; special tokens are recognised only where `re` (from [`Self::allowed_regex`]) finds them.
    pub fn encode_into(
        &self,
        text: &str,
        re: Option<&regex::Regex>,
        out: &mut Vec<u32>,
        st: &mut EncodeState,
    ) {
        let Some(re) = re else {
            return self.encode_ordinary_into(text, out, st);
        };
        let mut last = 0;
        for m in re.find_iter(text) {
            if m.start() > last {
                self.encode_ordinary_into(&text[last..m.start()], out, st);
            }
            let id = self.specials.iter().find(|s| s.content == m.as_str()).map(|s| s.id);
            out.extend(id);
            last = m.end();
        }
        if last < text.len() {
            self.encode_ordinary_into(&text[last..], out, st);
        }
    }

    /// Encode one text.
    pub fn encode(&self, text: &str, allowed: &Allowed) -> Result<Vec<u32>, Error> {
        let re = self.allowed_regex(allowed)?;
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut st = self.pool.take();
        self.encode_into(text, re.as_ref(), &mut out, &mut st);
        self.pool.put(st);
        Ok(out)
    }

    /// Encode many texts on the rayon pool.
    pub fn encode_batch<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        allowed: &Allowed,
    ) -> Result<Vec<Vec<u32>>, Error> {
        let re = self.allowed_regex(allowed)?;
        let states = States::new(&self.pool);
        let out = texts
            .par_iter()
            .with_min_len(8)
            .map(|t| {
                let t = t.as_ref();
                let mut out = Vec::with_capacity(t.len() / 3 + 1);
                states.with(|st| self.encode_into(t, re.as_ref(), &mut out, st));
                out
            })
            .collect();
        states.release(&self.pool);
        Ok(out)
    }

    /// Encode many texts into one flat id array plus `n + 1` offsets.
    pub fn encode_batch_flat<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        allowed: &Allowed,
    ) -> Result<(Vec<u32>, Vec<i64>), Error> {
        let re = self.allowed_regex(allowed)?;
        let states = States::new(&self.pool);
        // Contiguous chunks of texts, each encoded into one flat buffer (no vector per text).
        let chunk = (texts.len() / (rayon::current_num_threads() * 16)).clamp(1, 256);
        let parts: Vec<(Vec<u32>, Vec<i64>)> = texts
            .par_chunks(chunk)
            .map(|c| {
                let bytes: usize = c.iter().map(|t| t.as_ref().len()).sum();
                let mut flat = Vec::with_capacity(bytes / 3 + 1);
                let mut ends = Vec::with_capacity(c.len());
                states.with(|st| {
                    for t in c {
                        self.encode_into(t.as_ref(), re.as_ref(), &mut flat, st);
                        ends.push(flat.len() as i64);
                    }
                });
                (flat, ends)
            })
            .collect();
        states.release(&self.pool);
        let total: usize = parts.iter().map(|p| p.0.len()).sum();
        let mut flat = Vec::with_capacity(total);
        let mut offsets = Vec::with_capacity(texts.len() + 1);
        offsets.push(0i64);
        for (ids, ends) in &parts {
            let base = flat.len() as i64;
            flat.extend_from_slice(ids);
            offsets.extend(ends.iter().map(|e| base + e));
        }
        Ok((flat, offsets))
    }

    /// The bytes of a sequence of ids; unknown ids are an error.
    pub fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            if skip_special && self.specials.iter().any(|s| s.id == id) {
                continue;
            }
            let t = tok(&self.tokens, id).ok_or_else(|| Error::Invalid(format!("unknown token id {id}")))?;
            out.extend_from_slice(t);
        }
        Ok(out)
    }

    /// Decode to text; invalid UTF-8 (a split multi-byte character) becomes U+FFFD, like HF.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, Error> {
        let b = self.decode_bytes(ids, skip_special)?;
        Ok(match String::from_utf8(b) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// Decode many sequences on the rayon pool.
    pub fn decode_batch(&self, seqs: &[Vec<u32>], skip_special: bool) -> Result<Vec<String>, Error> {
        seqs.par_iter().map(|s| self.decode(s, skip_special)).collect()
    }
}

fn tok(tokens: &[Option<Vec<u8>>], id: u32) -> Option<&[u8]> {
    tokens.get(id as usize).and_then(|t| t.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_key_is_bytes_and_length() {
        let data: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37).wrapping_add(1)).collect();
        for start in 0..8 {
            for n in 2..=SHORT {
                let p = &data[start..start + n];
                let mut b = [0u8; 16];
                b[..n].copy_from_slice(p);
                b[15] = n as u8;
                assert_eq!(short_key(p), u128::from_le_bytes(b), "{p:?}");
            }
        }
    }
}

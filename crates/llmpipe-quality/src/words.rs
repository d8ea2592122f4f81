//! Word and sentence splitting compatible with datatrove's English tokenizer, which is
//! `spacy.blank("en")` (plus spaCy's rule-based sentencizer for sentences).
//!
//! This is a port of spaCy's tokenizer algorithm (`Tokenizer._split_affixes` / `_attach_tokens`)
//! driven by spaCy's own English rules, exported as data in `data/spacy_en.json` by
//! `data/gen_spacy_en.py`. Tokens are slices of the input: nothing is allocated per token.
//! spaCy's second pass is ported too: special cases that affix splitting cut into several tokens
//! (`a.C.` -> `a.` `C.`, `):`, `''`) are merged back, longest match first. (spaCy's matcher also
//! sees matches across whitespace, which it then never applies; those cannot block a match here.)

use ahash::{AHashMap, AHashSet};
use fancy_regex::Regex;
use llmpipe_text::for_each_word;
use serde::Deserialize;
use std::sync::OnceLock;
use xxhash_rust::xxh3::xxh3_64;

use crate::pycompat::{is_punct_category, is_space};

#[derive(Deserialize)]
struct Rules {
    prefix: String,
    suffix: String,
    infix: String,
    url: String,
    specials: std::collections::HashMap<String, Vec<String>>,
    sentence_punct: Vec<String>,
}

/// One alternative of spaCy's affix patterns with lookaround, as a plain `regex`: the fixed-width
/// lookbehind and lookahead are matched as ordinary atoms and cut off the match afterwards, so no
/// backtracking engine runs. (`(?<=[0-9])\+$` becomes `(?:[0-9])(?:\+$)` with one char cut at the front.)
#[derive(Clone)]
struct Around {
    re: regex::Regex,
    /// characters of lookbehind matched before the token
    behind: usize,
    /// characters of positive lookahead matched after the token
    ahead: usize,
    /// a negative lookahead, anchored: no match where it matches right after the token
    not_ahead: Option<regex::Regex>,
}

/// Number of atoms (a class `[...]`, an escape or one character) in a lookaround body; panics on
/// anything else (a group or a quantifier would make the width vary).
fn atoms(p: &str) -> usize {
    let b: Vec<char> = p.chars().collect();
    let (mut i, mut n) = (0, 0);
    while i < b.len() {
        match b[i] {
            '[' => {
                i += 1;
                while b[i] != ']' {
                    i += if b[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '\\' => {
                i += match b[i + 1] {
                    'u' => 6,
                    'x' => 4,
                    _ => 2,
                };
            }
            '(' | ')' | '*' | '+' | '?' | '{' | '|' => {
                panic!("spaCy rule lookaround is not fixed-width: {p}")
            }
            _ => i += 1,
        }
        n += 1;
    }
    n
}

/// Walk the characters of a pattern that are outside classes and escapes: `f(byte index, char,
/// group depth after it)` until `f` returns false.
fn walk(p: &str, mut f: impl FnMut(usize, char, i32) -> bool) {
    let (mut depth, mut in_class, mut esc) = (0i32, false, false);
    for (i, c) in p.char_indices() {
        if esc {
            esc = false;
            continue;
        }
        match c {
            '\\' => {
                esc = true;
                continue;
            }
            '[' if !in_class => {
                in_class = true;
                continue;
            }
            ']' if in_class => {
                in_class = false;
                continue;
            }
            _ if in_class => continue,
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if !f(i, c, depth) {
            return;
        }
    }
}

/// The body of a group opened at byte `open` (at `(`): (content, index after the closing paren).
fn group(p: &str, open: usize) -> (&str, usize) {
    let mut close = None;
    walk(&p[open..], |i, c, depth| {
        if c == ')' && depth == 0 {
            close = Some(i);
        }
        close.is_none()
    });
    let i = close.unwrap_or_else(|| panic!("unbalanced spaCy rule: {p}"));
    let body = &p[open..open + i];
    let head = body.find([':', '=', '!']).map_or(1, |k| k + 1);
    (&body[head..], open + i + 1)
}

impl Around {
    fn new(alt: &str) -> Self {
        let (behind_pat, rest) = match alt.strip_prefix("(?<=") {
            Some(_) => {
                let (lb, after) = group(alt, 0);
                (lb, &alt[after..])
            }
            None => ("", alt),
        };
        let (mut body, mut ahead_pat, mut not_ahead) = (rest, "", None);
        for (opener, negative) in [("(?=", false), ("(?!", true)] {
            if let Some(k) = rest.rfind(opener) {
                let (la, after) = group(rest, k);
                assert_eq!(after, rest.len(), "lookahead not at the end of a spaCy rule: {alt}");
                body = &rest[..k];
                if negative {
                    not_ahead = Some(regex_new(&format!("^(?:{la})")));
                } else {
                    ahead_pat = la;
                }
            }
        }
        assert!(
            !body.contains("(?<") && !body.contains("(?=") && !body.contains("(?!"),
            "unsupported lookaround in spaCy rule: {alt}"
        );
        Around {
            re: regex_new(&format!("(?:{behind_pat})(?:{body})(?:{ahead_pat})")),
            behind: atoms(behind_pat),
            ahead: atoms(ahead_pat),
            not_ahead,
        }
    }

    /// Leftmost token (start, end) at or after `at`; the lookbehind may see text before `at`.
    fn find_at(&self, s: &str, at: usize) -> Option<(usize, usize)> {
        let mut from = chars_back(s, at, self.behind);
        loop {
            let m = self.re.find_at(s, from)?;
            let a = chars_fwd(s, m.start(), self.behind);
            let b = chars_back(s, m.end(), self.ahead);
            debug_assert!(a >= at);
            match &self.not_ahead {
                Some(neg) if neg.is_match(&s[b..]) => from = chars_fwd(s, m.start(), 1),
                _ => return Some((a, b)),
            }
            if from > s.len() || m.start() == s.len() {
                return None;
            }
        }
    }
}

/// The byte offset `n` characters before `i` (or 0).
#[inline]
fn chars_back(s: &str, i: usize, n: usize) -> usize {
    s[..i].char_indices().rev().nth(n.wrapping_sub(1)).map_or(if n == 0 { i } else { 0 }, |(k, _)| k)
}

/// The byte offset `n` characters after `i` (or the end).
#[inline]
fn chars_fwd(s: &str, i: usize, n: usize) -> usize {
    s[i..].char_indices().nth(n).map_or(s.len(), |(k, _)| i + k)
}

fn regex_new(p: &str) -> regex::Regex {
    regex::Regex::new(p).unwrap_or_else(|e| panic!("spaCy rule does not compile: {e}"))
}

/// One of spaCy's affix patterns, split in two for speed: the alternatives without lookaround go
/// into one `regex` (a DFA, no backtracking); each one with lookaround is its own [`Around`].
/// Cloned per thread (see [`Local`]): a `regex` shared by threads serves all but one of them
/// through its cache pool's slow path.
#[derive(Clone)]
struct Split {
    plain: Option<regex::Regex>,
    around: Vec<Around>,
}

/// Top-level alternatives of a pattern (aware of escapes, classes and groups).
fn alternatives(p: &str) -> Vec<&str> {
    let (mut out, mut start) = (Vec::new(), 0);
    walk(p, |i, c, depth| {
        if c == '|' && depth == 0 {
            out.push(&p[start..i]);
            start = i + 1;
        }
        true
    });
    out.push(&p[start..]);
    out
}

impl Split {
    fn new(pattern: &str) -> Self {
        let (mut plain, mut around) = (Vec::new(), Vec::new());
        for a in alternatives(pattern) {
            if a.contains("(?<=") || a.contains("(?=") || a.contains("(?!") || a.contains("(?<!") {
                around.push(Around::new(a));
            } else {
                plain.push(a);
            }
        }
        let plain = (!plain.is_empty()).then(|| regex_new(&plain.join("|")));
        Split { plain, around }
    }

    /// Leftmost match of the lookaround alternatives at or after `at`; at equal starts the first
    /// alternative wins, as in one backtracking alternation.
    fn find_around(&self, s: &str, at: usize) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for alt in &self.around {
            if let Some(m) = alt.find_at(s, at) {
                if best.is_none_or(|b| m.0 < b.0) {
                    best = Some(m);
                }
            }
        }
        best
    }

    /// Leftmost match at or after `at`: (start, end); at equal starts the plain alternatives win
    /// (in spaCy's English rules they come first in the alternation).
    fn find_at(&self, s: &str, at: usize) -> Option<(usize, usize)> {
        let p = self.plain.as_ref().and_then(|r| r.find_at(s, at)).map(|m| (m.start(), m.end()));
        let f = self.find_around(s, at);
        match (p, f) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    fn is_match(&self, s: &str) -> bool {
        self.find_at(s, 0).is_some()
    }
}

/// What each thread owns: its copy of the compiled rules and its span cache.
struct Local {
    prefix: Split,
    suffix: Split,
    infix: Split,
    url: Regex,
    /// span -> byte lengths of its tokens (spaCy keeps the same cache)
    cache: SpanCache,
    /// a small direct-mapped cache in front of the others (see [`Recent`])
    recent: Recent,
}

/// Spans of at most this many bytes go through [`Recent`].
const RECENT_KEY: usize = 24;
/// ... if they have at most this many tokens.
const RECENT_TOKENS: usize = 6;
/// Slots of [`Recent`] (32 bytes each: 128 KiB).
const RECENT_SLOTS: usize = 4096;

/// One slot: the span's bytes (zero-padded), its length (0: empty slot), its tokens' byte lengths.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct RecentSlot {
    key: [u64; 3],
    len: u8,
    ntok: u8,
    lens: [u8; RECENT_TOKENS],
}

/// The tokens of recently seen short spans that are not plain words (`word,` `it's` `(the` `2024`),
/// in a table that stays in cache: the span cache (`Local::cache`) is a hash map of up to 200,000
/// heap strings, and most of its lookups miss the CPU caches. Web text repeats the same few
/// thousand such spans. A pure cache: a hit gives what `span_uncached` gave for the same bytes.
struct Recent {
    slots: Vec<RecentSlot>,
}

impl Default for Recent {
    fn default() -> Self {
        Recent { slots: vec![RecentSlot::default(); RECENT_SLOTS] }
    }
}

impl Recent {
    #[inline]
    fn key(s: &str) -> Option<([u64; 3], usize)> {
        let b = s.as_bytes();
        let n = b.len();
        if n == 0 || n > RECENT_KEY {
            return None;
        }
        // words that cover every byte (overlapping where the length is not a multiple of 8): with
        // the length, the key is the bytes themselves
        let key = if n <= 8 {
            [short8(b), 0, 0]
        } else if n <= 16 {
            [load8(b, 0), load8(b, n - 8), 0]
        } else {
            [load8(b, 0), load8(b, 8), load8(b, n - 8)]
        };
        let h = (key[0] ^ key[1].rotate_left(21) ^ key[2].rotate_left(42) ^ n as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Some((key, (h >> 52) as usize % RECENT_SLOTS))
    }

    /// Push the cached tokens of `s` and say true, or say false.
    #[inline]
    fn get<'a>(&self, s: &'a str, out: &mut Vec<&'a str>) -> bool {
        let Some((key, i)) = Self::key(s) else { return false };
        let slot = &self.slots[i];
        if slot.len as usize != s.len() || slot.key != key {
            return false;
        }
        let mut at = 0;
        for &n in &slot.lens[..slot.ntok as usize] {
            out.push(&s[at..at + n as usize]);
            at += n as usize;
        }
        true
    }

    #[inline]
    fn put(&mut self, s: &str, toks: &[&str]) {
        let Some((key, i)) = Self::key(s) else { return };
        if toks.len() > RECENT_TOKENS {
            return;
        }
        let mut lens = [0u8; RECENT_TOKENS];
        for (l, t) in lens.iter_mut().zip(toks) {
            *l = t.len() as u8;
        }
        self.slots[i] = RecentSlot { key, len: s.len() as u8, ntok: toks.len() as u8, lens };
    }
}

/// The span cache is emptied when it holds this many spans ...
const CACHE_SIZE: usize = 200_000;
/// ... or this many bytes of spans and token lengths.
const CACHE_BYTES: usize = 8 << 20;
/// Slots of the span cache's table (a power of two, at least twice `CACHE_SIZE`).
const CACHE_SLOTS: usize = (2 * CACHE_SIZE).next_power_of_two();

/// The span cache: each entry (span length, token count, the span's bytes, its tokens' byte
/// lengths) is appended to one arena, found through an open-addressing table of arena offsets and
/// hash tags. A map of `String` to `Vec<u32>` took about 150 bytes an entry in three heap blocks:
/// 30 MB per thread when full, most of a curate worker's growth with its part size; this takes
/// about 40, and an insert allocates nothing. A pure cache: a hit gives the lengths it was given.
struct SpanCache {
    /// (arena offset + 1, high half of the hash); offset 0: an empty slot
    slots: Vec<(u32, u32)>,
    arena: Vec<u8>,
    len: usize,
}

impl Default for SpanCache {
    fn default() -> Self {
        SpanCache { slots: vec![(0, 0); CACHE_SLOTS], arena: Vec::new(), len: 0 }
    }
}

impl SpanCache {
    #[inline]
    fn read_u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.arena[at..at + 4].try_into().expect("4 bytes"))
    }

    /// The slot of `s`'s entry (`Ok`) or of the empty slot where it would go (`Err`).
    #[inline]
    fn find(&self, s: &[u8], h: u64) -> Result<usize, usize> {
        let tag = (h >> 32) as u32;
        let mask = CACHE_SLOTS - 1;
        let mut i = h as usize & mask;
        loop {
            let (off, t) = self.slots[i];
            if off == 0 {
                return Err(i);
            }
            if t == tag {
                let at = off as usize - 1;
                let n = self.read_u32(at) as usize;
                if n == s.len() && &self.arena[at + 8..at + 8 + n] == s {
                    return Ok(i);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Push the tokens of `s` and say true, or say false.
    #[inline]
    fn get<'a>(&self, s: &'a str, out: &mut Vec<&'a str>) -> bool {
        let Ok(i) = self.find(s.as_bytes(), xxh3_64(s.as_bytes())) else { return false };
        let at = self.slots[i].0 as usize - 1;
        let ntok = self.read_u32(at + 4) as usize;
        let mut lens = at + 8 + s.len();
        let mut pos = 0;
        for _ in 0..ntok {
            let n = self.read_u32(lens) as usize;
            out.push(&s[pos..pos + n]);
            pos += n;
            lens += 4;
        }
        true
    }

    /// Remember the tokens of `s` (contiguous pieces of it), emptying the cache first when full.
    fn put(&mut self, s: &str, toks: &[&str]) {
        let size = 8 + s.len() + 4 * toks.len();
        if size > CACHE_BYTES {
            return; // one enormous span would empty the cache for nothing
        }
        if self.len >= CACHE_SIZE || self.arena.len() + size > CACHE_BYTES {
            self.slots.fill((0, 0));
            self.arena.clear();
            self.len = 0;
        }
        let h = xxh3_64(s.as_bytes());
        let Err(i) = self.find(s.as_bytes(), h) else { return };
        let at = self.arena.len();
        self.arena.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.arena.extend_from_slice(&(toks.len() as u32).to_le_bytes());
        self.arena.extend_from_slice(s.as_bytes());
        for t in toks {
            self.arena.extend_from_slice(&(t.len() as u32).to_le_bytes());
        }
        self.slots[i] = (at as u32 + 1, (h >> 32) as u32);
        self.len += 1;
    }
}

/// Longest match (bytes) of spaCy's English suffix rules that use lookbehind (checked in `new`).
const SUFFIX_TAIL: usize = 16;

thread_local! {
    /// this thread's compiled rules and span cache (of the one shared tokenizer)
    static LOCAL: std::cell::RefCell<Option<Local>> = const { std::cell::RefCell::new(None) };
}

/// Could any infix alternative match? (all need one of these characters, or a non-ASCII one)
#[inline]
fn may_have_infix(s: &str) -> bool {
    !s.is_ascii()
        || s.bytes().any(|b| {
            matches!(b, b'.' | b'+' | b'-' | b'*' | b'^' | b',' | b'~' | b':' | b'<' | b'>' | b'=' | b'/')
        })
}

/// spaCy's English tokenizer rules, compiled once.
pub struct EnglishTokenizer {
    prefix: Split,
    suffix: Split,
    infix: Split,
    /// compiled per thread: `fancy_regex` clones share their inner caches
    url: String,
    /// special case -> byte lengths of its pieces
    specials: AHashMap<String, Vec<usize>>,
    /// a bit per [`fingerprint`] slot of any special case: a span whose bit is clear is none
    /// (most words: the map is not consulted)
    special_bits: Vec<u64>,
    /// second pass: first affix token -> (affix tokens of a special case, the special case)
    merges: AHashMap<String, Vec<(Vec<String>, String)>>,
    sentence_punct: AHashSet<String>,
    /// ASCII characters that are sentence punctuation on their own (`sentence_punct` has no ASCII
    /// entry of more than one character: checked in `new`)
    ascii_sentence_punct: [bool; 128],
}

/// Bits of the special-case filter (64 Ki bits: ~2% of other words pass with spaCy's 1,347 cases).
const SPECIAL_BITS: u32 = 16;

/// A cheap hash of a span for the special-case filter: its length and its first and last (up to)
/// eight bytes.
#[inline]
fn fingerprint(s: &[u8]) -> usize {
    let n = s.len();
    let (a, b) = if n >= 8 { (load8(s, 0), load8(s, n - 8)) } else { (short8(s), 0) };
    let h = (a ^ b.rotate_left(29) ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (h >> (64 - SPECIAL_BITS)) as usize
}

/// The 8 bytes of `b` from `at` (little-endian).
#[inline]
fn load8(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Up to 8 bytes as one number, without a copy: two overlapping 4-byte loads from 4 bytes on, the
/// first, middle and last byte below (with the length, every byte is in it).
#[inline]
fn short8(b: &[u8]) -> u64 {
    let n = b.len();
    if n >= 4 {
        let lo = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
        let hi = u32::from_le_bytes(b[n - 4..].try_into().expect("4 bytes"));
        u64::from(lo) | u64::from(hi) << 32
    } else if n > 0 {
        u64::from(b[0]) | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]) << 16
    } else {
        0
    }
}

fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| panic!("spaCy rule does not compile: {e}"))
}

impl EnglishTokenizer {
    fn new() -> Self {
        let rules: Rules =
            serde_json::from_str(include_str!("../data/spacy_en.json")).expect("data/spacy_en.json is valid");
        let specials: AHashMap<String, Vec<usize>> =
            rules.specials.into_iter().map(|(k, v)| (k, v.iter().map(|p| p.len()).collect())).collect();
        let mut special_bits = vec![0u64; (1 << SPECIAL_BITS) / 64];
        for k in specials.keys() {
            let f = fingerprint(k.as_bytes());
            special_bits[f / 64] |= 1 << (f % 64);
        }
        let mut ascii_sentence_punct = [false; 128];
        for p in &rules.sentence_punct {
            if p.is_ascii() {
                assert_eq!(
                    p.len(),
                    1,
                    "spaCy's sentence punctuation has a multi-character ASCII entry: {p:?}"
                );
                ascii_sentence_punct[p.as_bytes()[0] as usize] = true;
            }
        }
        let mut tok = Self {
            prefix: Split::new(&rules.prefix),
            suffix: Split::new(&rules.suffix),
            infix: Split::new(&rules.infix),
            url: rules.url,
            specials,
            special_bits,
            merges: AHashMap::new(),
            sentence_punct: rules.sentence_punct.into_iter().collect(),
            ascii_sentence_punct,
        };
        // spaCy registers a special case with its matcher when affix rules would cut it
        let mut merges: AHashMap<String, Vec<(Vec<String>, String)>> = AHashMap::new();
        let mut keys: Vec<&String> = tok.specials.keys().collect();
        keys.sort();
        let local = tok.local();
        for key in keys {
            if key.chars().any(is_space) {
                continue;
            }
            let cut = tok.prefix.is_match(key) || tok.suffix.is_match(key) || tok.infix.is_match(key);
            if !cut {
                continue;
            }
            let mut pieces = Vec::new();
            tok.affixes(&local, key, false, &mut pieces);
            if pieces.len() < 2 {
                continue;
            }
            let pattern: Vec<String> = pieces.iter().map(|p| p.to_string()).collect();
            merges.entry(pattern[0].clone()).or_default().push((pattern, key.clone()));
        }
        tok.merges = merges;
        tok
    }

    /// The shared instance.
    pub fn get() -> &'static EnglishTokenizer {
        static TOK: OnceLock<EnglishTokenizer> = OnceLock::new();
        TOK.get_or_init(EnglishTokenizer::new)
    }

    fn local(&self) -> Local {
        Local {
            prefix: self.prefix.clone(),
            suffix: self.suffix.clone(),
            infix: self.infix.clone(),
            url: compile(&self.url),
            cache: SpanCache::default(),
            recent: Recent::default(),
        }
    }

    /// Append the words of `text` to `out` (whitespace tokens are dropped, as datatrove does).
    pub fn words<'a>(&self, text: &'a str, out: &mut Vec<&'a str>) {
        LOCAL.with(|cell| {
            let mut slot = cell.borrow_mut();
            let local = slot.get_or_insert_with(|| self.local());
            for_each_word(text, |span, letters| self.span(local, span, letters, out));
        })
    }

    /// Convenience: the words of `text` as a new vector.
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut out = Vec::new();
        self.words(text, &mut out);
        out
    }

    /// Is `s` possibly a special case? (false: certainly not)
    #[inline]
    fn may_be_special(&self, s: &str) -> bool {
        let f = fingerprint(s.as_bytes());
        self.special_bits[f / 64] & (1 << (f % 64)) != 0
    }

    fn push_special<'a>(&self, s: &'a str, out: &mut Vec<&'a str>) -> bool {
        if !self.may_be_special(s) {
            return false;
        }
        match self.specials.get(s) {
            Some(pieces) => {
                let mut at = 0;
                for &n in pieces {
                    out.push(&s[at..at + n]);
                    at += n;
                }
                true
            }
            None => false,
        }
    }

    fn find_prefix(&self, l: &Local, s: &str) -> usize {
        let first = s.chars().next().unwrap_or(' ');
        if first.is_alphanumeric() && !matches!(first, 'U' | 'C' | 'A') {
            return 0;
        }
        // every alternative is anchored with `^`: a match, if any, starts at 0
        l.prefix.find_at(s, 0).map_or(0, |(a, b)| b - a)
    }

    fn find_suffix(&self, l: &Local, s: &str) -> usize {
        let last = s.chars().next_back().unwrap_or(' ');
        if last.is_alphabetic() && !s.contains(['\'', '’']) && !s.bytes().any(|b| b.is_ascii_digit()) {
            return 0;
        }
        // every alternative ends with `$`: the leftmost match runs to the end. The lookbehind ones
        // match at most SUFFIX_TAIL bytes (units, currencies, a period), so they only search the tail.
        let p = l.suffix.plain.as_ref().and_then(|r| r.find(s)).map(|m| m.start());
        let mut tail = s.len().saturating_sub(SUFFIX_TAIL);
        while !s.is_char_boundary(tail) {
            tail -= 1;
        }
        let f = l.suffix.find_around(s, tail).map(|m| m.0);
        match (p, f) {
            (Some(a), Some(b)) => s.len() - a.min(b),
            (Some(a), None) | (None, Some(a)) => s.len() - a,
            (None, None) => 0,
        }
    }

    /// The tokens of one whitespace-delimited span; `letters`: it is all ASCII letters.
    fn span<'a>(&self, l: &mut Local, s: &'a str, letters: bool, out: &mut Vec<&'a str>) {
        if !self.may_be_special(s) {
            // most words: no special case, all letters
            if letters || !s.is_ascii() && s.chars().all(char::is_alphabetic) {
                out.push(s);
                return;
            }
            // the next most common: a word or a number with a closing mark (`word,` `2024.`)
            if let Some(cut) = self.word_and_mark(s) {
                out.push(&s[..cut]);
                out.push(&s[cut..]);
                return;
            }
        }
        let base = out.len();
        if l.recent.get(s, out) {
            return;
        }
        self.span_uncached(l, s, out);
        l.recent.put(s, &out[base..]);
    }

    /// Where spaCy's rules cut a span that is not a special case into a word and its closing mark:
    /// ASCII letters (or digits) then one of `, ; : ! ? ) ] } " '`, or `.` after a lowercase letter
    /// or a digit (the only places where a period is a suffix on its own), with no special case for
    /// the word. Then the mark is a suffix rule of its own (no suffix rule spans a letter or a digit
    /// before a mark), no prefix rule matches (the letter ones need a `$`), and the word has nothing
    /// left to split. `None` for everything else (the rules decide).
    #[inline]
    fn word_and_mark(&self, s: &str) -> Option<usize> {
        let b = s.as_bytes();
        let (&mark, word) = b.split_last()?;
        let &last = word.last()?;
        let closing = match mark {
            b',' | b';' | b':' | b'!' | b'?' | b')' | b']' | b'}' | b'"' | b'\'' => true,
            b'.' => last.is_ascii_lowercase() || last.is_ascii_digit(),
            _ => false,
        };
        let plain = if last.is_ascii_digit() {
            word.iter().all(u8::is_ascii_digit)
        } else {
            word.iter().all(u8::is_ascii_alphabetic)
        };
        (closing && plain && !self.may_be_special(&s[..word.len()])).then_some(word.len())
    }

    /// [`span`](Self::span) without the small cache of recent spans.
    fn span_uncached<'a>(&self, l: &mut Local, s: &'a str, out: &mut Vec<&'a str>) {
        if self.push_special(s, out) {
            return;
        }
        let alphabetic = if s.is_ascii() {
            s.bytes().all(|b| b.is_ascii_alphabetic())
        } else {
            s.chars().all(char::is_alphabetic)
        };
        if alphabetic {
            out.push(s);
            return;
        }
        let base = out.len();
        if l.cache.get(s, out) {
            return;
        }
        self.affixes(l, s, true, out);
        if out.len() - base >= 2 {
            self.merge_specials(s, base, out);
        }
        // tokens of a span are contiguous pieces of it, so their lengths say everything
        l.cache.put(s, &out[base..]);
    }

    /// spaCy's `_apply_special_cases`, within one whitespace-delimited span.
    fn merge_specials<'a>(&self, s: &'a str, base: usize, out: &mut Vec<&'a str>) {
        let toks = &out[base..];
        let mut found: Vec<(usize, usize, &str)> = Vec::new();
        for i in 0..toks.len() {
            if let Some(cands) = self.merges.get(toks[i]) {
                for (pat, key) in cands {
                    let end = i + pat.len();
                    if end <= toks.len() && pat.iter().zip(&toks[i..end]).all(|(p, t)| p == t) {
                        found.push((i, end, key));
                    }
                }
            }
        }
        if found.is_empty() {
            return;
        }
        found.sort_by(|a, b| (b.1 - b.0).cmp(&(a.1 - a.0)).then(a.0.cmp(&b.0)));
        let mut seen = vec![false; toks.len()];
        let mut keep: Vec<(usize, usize, &str)> = Vec::new();
        for (a, b, key) in found {
            if !seen[a] && !seen[b - 1] {
                keep.push((a, b, key));
            }
            seen[a..b].iter_mut().for_each(|x| *x = true);
        }
        keep.sort_by_key(|k| k.0);
        let offset = |t: &str| t.as_ptr() as usize - s.as_ptr() as usize;
        let old: Vec<&'a str> = out.drain(base..).collect();
        let mut i = 0;
        for (a, b, key) in keep {
            out.extend_from_slice(&old[i..a]);
            let start = offset(old[a]);
            let whole = &s[start..start + key.len()];
            if !self.push_special(whole, out) {
                out.extend_from_slice(&old[a..b]);
            }
            i = b;
        }
        out.extend_from_slice(&old[i..]);
    }

    /// spaCy's `_split_affixes` + `_attach_tokens` (with or without special cases).
    fn affixes<'a>(&self, l: &Local, s: &'a str, with_specials: bool, out: &mut Vec<&'a str>) {
        let special = |x: &str| with_specials && self.specials.contains_key(x);
        let mut prefixes: Vec<&'a str> = Vec::new();
        let mut suffixes: Vec<&'a str> = Vec::new();
        let mut string = s;
        let mut last_size = usize::MAX;
        while !string.is_empty() && string.len() != last_size {
            if special(string) {
                break;
            }
            last_size = string.len();
            let pre_len = self.find_prefix(l, string);
            if pre_len != 0 {
                let minus_pre = &string[pre_len..];
                if !minus_pre.is_empty() && special(minus_pre) {
                    prefixes.push(&string[..pre_len]);
                    string = minus_pre;
                    break;
                }
            }
            let suf_len = self.find_suffix(l, &string[pre_len..]);
            if suf_len != 0 {
                let minus_suf = &string[..string.len() - suf_len];
                if !minus_suf.is_empty() && special(minus_suf) {
                    suffixes.push(&string[string.len() - suf_len..]);
                    string = minus_suf;
                    break;
                }
            }
            let n = string.len();
            if pre_len != 0 && suf_len != 0 && pre_len + suf_len <= n {
                prefixes.push(&string[..pre_len]);
                suffixes.push(&string[n - suf_len..]);
                string = &string[pre_len..n - suf_len];
            } else if pre_len != 0 {
                prefixes.push(&string[..pre_len]);
                string = &string[pre_len..];
            } else if suf_len != 0 {
                suffixes.push(&string[n - suf_len..]);
                string = &string[..n - suf_len];
            }
        }
        out.extend(prefixes);
        let special_done = !string.is_empty() && with_specials && self.push_special(string, out);
        if !string.is_empty() && !special_done {
            if string.contains('.') && l.url.is_match(string).unwrap_or(false) {
                out.push(string);
            } else if may_have_infix(string) {
                self.infixes(l, string, out);
            } else {
                out.push(string);
            }
        }
        out.extend(suffixes.into_iter().rev());
    }

    fn infixes<'a>(&self, l: &Local, string: &'a str, out: &mut Vec<&'a str>) {
        let mut start = 0;
        let mut at = 0;
        while at <= string.len() {
            let Some((a, b)) = l.infix.find_at(string, at) else { break };
            at = if b > a { b } else { b + string[b..].chars().next().map_or(1, char::len_utf8) };
            if a == 0 {
                continue;
            }
            if a != start {
                out.push(&string[start..a]);
            }
            if a != b {
                out.push(&string[a..b]);
            }
            start = b;
        }
        if start < string.len() {
            out.push(&string[start..]);
        }
    }

    /// Is `w` one of spaCy's sentencizer punctuation characters?
    #[inline]
    fn is_sentence_punct(&self, w: &str) -> bool {
        match w.as_bytes() {
            [b] if b.is_ascii() => self.ascii_sentence_punct[*b as usize],
            b if b.is_ascii() => false,
            _ => self.sentence_punct.contains(w),
        }
    }

    /// Sentences spaCy's sentencizer finds in `text` (datatrove's `len(split_into_sentences(text))`).
    pub fn count_sentences(&self, text: &str) -> usize {
        let mut words = Vec::new();
        self.words(text, &mut words);
        self.count_sentences_of(&words)
    }

    /// [`count_sentences`](Self::count_sentences) of a text whose words are `words`.
    pub fn count_sentences_of(&self, words: &[&str]) -> usize {
        if words.is_empty() {
            return 1;
        }
        let mut n = 1;
        let mut seen_period = false;
        for w in words {
            let in_punct = self.is_sentence_punct(w);
            if seen_period && !in_punct && !w.chars().all(is_punct_category) {
                n += 1;
                seen_period = false;
            } else if in_punct {
                seen_period = true;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_spacy_on_known_cases() {
        let t = EnglishTokenizer::get();
        let got = t.split("Hello, world! Don't well-known U.S. e-mail test@x.com http://a.b/c 3.5");
        let want = vec![
            "Hello",
            ",",
            "world",
            "!",
            "Do",
            "n't",
            "well",
            "-",
            "known",
            "U.S.",
            "e",
            "-",
            "mail",
            "test@x.com",
            "http://a.b",
            "/",
            "c",
            "3.5",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn lookbehind_suffixes_units_and_currencies() {
        // expected splits from spacy.blank("en") (3.8.18); the long units check SUFFIX_TAIL
        let t = EnglishTokenizer::get();
        let cases: [(&str, &[&str]); 10] = [
            ("10km", &["10", "km"]),
            ("3اكواب", &["3", "اكواب"]),
            ("5кПа", &["5", "кПа"]),
            ("20US$", &["20", "US$"]),
            ("100km/h.", &["100", "km/h", "."]),
            ("30°C.", &["30", "°", "C", "."]),
            ("(12kg).", &["(", "12", "kg", ")", "."]),
            ("U.S.A.", &["U.S.A."]),
            ("e.g.,", &["e.g.", ","]),
            ("Mr.Smith", &["Mr.", "Smith"]),
        ];
        for (text, want) in cases {
            assert_eq!(t.split(text), want.to_vec(), "{text}");
        }
    }

    #[test]
    fn lookaround_rules_as_plain_regexes() {
        // expected splits from spacy.blank("en") (3.8.18): each lookbehind, lookahead and the
        // negative lookahead of the prefix rules, at string edges and next to multi-byte characters
        let t = EnglishTokenizer::get();
        let cases: [(&str, &[&str]); 16] = [
            ("+5", &["+5"]),
            ("+x", &["+", "x"]),
            ("(+3)", &["(", "+3", ")"]),
            ("3+", &["3", "+"]),
            ("3+4", &["3", "+", "4"]),
            ("1^2", &["1", "^", "2"]),
            ("a.B", &["a.", "B"]),
            ("x.Y.z", &["x.", "Y.z"]),
            ("a,b", &["a", ",", "b"]),
            ("a--b", &["a", "--", "b"]),
            ("naïve—done", &["naïve", "—", "done"]),
            ("a:b", &["a", ":", "b"]),
            ("9°F.", &["9", "°", "F", "."]),
            ("ÀB.", &["ÀB", "."]),
            ("1.", &["1", "."]),
            ("10$", &["10", "$"]),
        ];
        for (text, want) in cases {
            assert_eq!(t.split(text), want.to_vec(), "{text}");
        }
    }

    /// Every span the word-and-mark shortcut takes splits as the full rules split it.
    fn check_word_and_mark(t: &EnglishTokenizer, l: &mut Local, s: &str) -> bool {
        if t.may_be_special(s) {
            return false;
        }
        let Some(cut) = t.word_and_mark(s) else { return false };
        let mut full = Vec::new();
        t.span_uncached(l, s, &mut full);
        assert_eq!(full, vec![&s[..cut], &s[cut..]], "{s:?}");
        true
    }

    #[test]
    fn word_and_mark_agrees_with_the_rules() {
        // words of letters or digits, every special case's among them (as written, upper case,
        // capitalized, without its last character), followed by every ASCII punctuation mark
        let t = EnglishTokenizer::get();
        let mut l = t.local();
        let mut words: Vec<String> =
            ["a", "I", "US", "CA", "A", "U", "C", "AB", "aB", "Ab", "word", "2024", "0", "km", "4K", "U2"]
                .map(String::from)
                .to_vec();
        for key in t.specials.keys() {
            let w: String = key.chars().filter(char::is_ascii_alphanumeric).collect();
            if w.is_empty() {
                continue;
            }
            let mut cap = w.to_lowercase();
            cap[..1].make_ascii_uppercase();
            words.extend([w.to_uppercase(), w[..w.len() - 1].to_string(), cap, w]);
        }
        words.retain(|w| !w.is_empty());
        let (mut taken, mut seen) = (0, 0);
        for w in &words {
            for mark in (b'!'..=b'~').filter(u8::is_ascii_punctuation) {
                let s = format!("{w}{}", mark as char);
                seen += 1;
                taken += usize::from(check_word_and_mark(t, &mut l, &s));
            }
        }
        // the shortcut is taken, and not for everything
        assert!(taken > 10_000 && taken < seen / 2, "{taken} of {seen}");
    }

    #[test]
    fn span_cache_gives_back_what_it_was_given() {
        let mut c = SpanCache::default();
        let span = |i: usize| format!("({i}-x,{})", "y".repeat(i % 5));
        // more spans than it holds: it empties once, then holds the later ones
        for i in 0..CACHE_SIZE + 1000 {
            let s = span(i);
            let toks = [&s[..1], &s[1..s.len() - 1], &s[s.len() - 1..]];
            c.put(&s, &toks);
            let mut out = vec!["before"];
            assert!(c.get(&s, &mut out), "{s}");
            assert_eq!(out[1..], toks, "{s}");
        }
        let has = |c: &SpanCache, s: &str| c.get(s, &mut Vec::new());
        assert!(!has(&c, &span(0)) && !has(&c, &span(CACHE_SIZE - 1)));
        assert!(has(&c, &span(CACHE_SIZE + 999)));
        assert!(!has(&c, "(1-x,") && !has(&c, ""));
        // a span larger than its byte budget is not kept, and the others stay
        let big = "a".repeat(CACHE_BYTES);
        c.put(&big, &[&big]);
        assert!(!has(&c, &big) && has(&c, &span(CACHE_SIZE)));
        // the byte budget empties it too
        let long = |i: usize| format!("{i}:{}", "z".repeat(1 << 16));
        for i in 0..(CACHE_BYTES >> 16) + 1 {
            let s = long(i);
            c.put(&s, &[&s[..1], &s[1..]]);
        }
        assert!(!has(&c, &long(0)) && has(&c, &long(CACHE_BYTES >> 16)));
        assert!(c.arena.len() <= CACHE_BYTES && c.len < CACHE_SIZE);
    }

    #[test]
    fn sentences() {
        let t = EnglishTokenizer::get();
        assert_eq!(t.count_sentences("One. Two! Three?"), 3);
        assert_eq!(t.count_sentences("No end"), 1);
    }
}

//! Shingles: word or character n-grams of the normalised text, each hashed to a 32-bit value.
//!
//! Words: the text is normalised (NFC, lower case, punctuation removed by default) and split on
//! whitespace; a shingle is `n` consecutive words. Characters: the normalised text (whitespace
//! collapsed) is cut into windows of `n` characters. A document with fewer units than `n` but at
//! least one is a single shingle of all its units (as datatrove does); an empty document has no
//! shingles (and is never a near duplicate of anything).
//!
//! The result is the sorted set of distinct 32-bit shingle hashes: MinHash reads it, and exact
//! Jaccard verification intersects two of them.

use llmpipe_text::{normalize, Normalization};
use std::sync::OnceLock;

use unicode_normalization::char::canonical_combining_class;
use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// What a shingle is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShingleUnit {
    Words,
    Chars,
}

/// How documents are cut into shingles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShingleConfig {
    pub unit: ShingleUnit,
    /// Units per shingle (n-gram size), at least 1.
    pub ngram: usize,
    pub norm: Normalization,
    /// Seed of the unit hashes.
    pub seed: u64,
}

impl Default for ShingleConfig {
    /// FineWeb / datatrove: word 5-grams of lower-cased text without punctuation.
    fn default() -> Self {
        Self {
            unit: ShingleUnit::Words,
            ngram: 5,
            norm: Normalization {
                nfc: true,
                lowercase: true,
                collapse_whitespace: true,
                strip_punctuation: true,
            },
            seed: 1,
        }
    }
}

const K1: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline]
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

const MULS: [u64; 8] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0x85EB_CA77_C2B2_AE63,
    0x27D4_EB2F_1656_67C5,
    0xFF51_AFD7_ED55_8CCD,
    0xC4CE_B9FE_1A85_EC53,
    0x94D0_49BB_1331_11EB,
];

/// Combine the unit hashes of one window into a 32-bit shingle hash (order sensitive).
///
/// The unit hashes are already uniform 64-bit values, so a sum of products with distinct odd
/// constants (independent multiplies, cheap) followed by a finaliser is enough.
#[inline(always)]
fn combine(window: &[u64], seed: u64) -> u32 {
    let mut h = seed ^ (window.len() as u64).wrapping_mul(K1);
    for (j, &w) in window.iter().enumerate() {
        h = h.wrapping_add(w.wrapping_mul(MULS[j % 8]).rotate_left((j / 8) as u32 * 7));
    }
    let h = fmix64(h);
    (h ^ (h >> 32)) as u32
}

/// Sort and deduplicate 32-bit values (LSD radix sort for larger sets).
pub fn sort_dedup(v: &mut Vec<u32>, scratch: &mut Vec<u32>) {
    if v.len() < 128 {
        v.sort_unstable();
    } else {
        let mut counts = [[0u32; 256]; 4];
        for &x in v.iter() {
            for (k, c) in counts.iter_mut().enumerate() {
                c[((x >> (8 * k)) & 0xFF) as usize] += 1;
            }
        }
        scratch.clear();
        scratch.resize(v.len(), 0);
        for (k, c) in counts.iter_mut().enumerate() {
            let mut sum = 0u32;
            for slot in c.iter_mut() {
                let n = *slot;
                *slot = sum;
                sum += n;
            }
            for &x in v.iter() {
                let b = ((x >> (8 * k)) & 0xFF) as usize;
                scratch[c[b] as usize] = x;
                c[b] += 1;
            }
            std::mem::swap(v, scratch);
        }
    }
    v.dedup();
}

/// `combine` over every window of `N` units, with `N` known at compile time (the loop unrolls:
/// `N` independent multiplies and a finaliser per shingle).
fn windows_fixed<const N: usize>(units: &[u64], seed: u64, out: &mut Vec<u32>) {
    out.extend(units.windows(N).map(|w| {
        let w: &[u64; N] = w.try_into().expect("windows of N");
        combine(w, seed)
    }));
}

/// The CPU has AVX-512 F and DQ (64-bit lane multiplies).
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx512_windows() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq")
}

/// `combine` of eight consecutive windows of `N` units starting at `units[i]` (`i + 7 + N <=
/// units.len()`), in the eight 64-bit lanes: the same sum of products and finaliser, lane-wise.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
fn combine8<const N: usize>(units: &[u64], i: usize, seed: u64) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    assert!(i + 7 + N <= units.len() && N <= 8);
    let mut h = _mm512_set1_epi64((seed ^ (N as u64).wrapping_mul(K1)) as i64);
    for (j, &m) in MULS.iter().enumerate().take(N) {
        // SAFETY: `i + j + 8 <= i + N + 7 <= units.len()` (asserted), an unaligned load of 8 lanes.
        let u = unsafe { _mm512_loadu_si512(units.as_ptr().add(i + j).cast()) };
        h = _mm512_add_epi64(h, _mm512_mullo_epi64(u, _mm512_set1_epi64(m as i64)));
    }
    h = _mm512_xor_si512(h, _mm512_srli_epi64::<33>(h));
    h = _mm512_mullo_epi64(h, _mm512_set1_epi64(0xff51_afd7_ed55_8ccd_u64 as i64));
    h = _mm512_xor_si512(h, _mm512_srli_epi64::<33>(h));
    h = _mm512_mullo_epi64(h, _mm512_set1_epi64(0xc4ce_b9fe_1a85_ec53_u64 as i64));
    h = _mm512_xor_si512(h, _mm512_srli_epi64::<33>(h));
    _mm512_cvtepi64_epi32(_mm512_xor_si512(h, _mm512_srli_epi64::<32>(h)))
}

/// `windows_fixed::<N>` eight windows at a time with AVX-512 (the last few by `combine`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn windows_avx512_fixed<const N: usize>(units: &[u64], seed: u64, out: &mut Vec<u32>) {
    use std::arch::x86_64::*;
    let total = units.len() + 1 - N;
    let start = out.len();
    out.reserve(total + 8);
    let mut i = 0;
    while i + 7 + N <= units.len() {
        let h = combine8::<N>(units, i, seed);
        // SAFETY: `out` has room for `total + 8` values past `start` (reserved above) and
        // `i + 8 <= total`; the 8 values written are initialised before `set_len` covers them.
        unsafe {
            _mm256_storeu_si256(out.as_mut_ptr().add(start + i).cast(), h);
            out.set_len(start + i + 8);
        }
        i += 8;
    }
    out.extend(units[i..].windows(N).map(|w| combine(w, seed)));
}

/// `windows_into` for `n <= 8` windows with AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn windows_avx512(units: &[u64], n: usize, seed: u64, out: &mut Vec<u32>) {
    match n {
        1 => windows_avx512_fixed::<1>(units, seed, out),
        2 => windows_avx512_fixed::<2>(units, seed, out),
        3 => windows_avx512_fixed::<3>(units, seed, out),
        4 => windows_avx512_fixed::<4>(units, seed, out),
        5 => windows_avx512_fixed::<5>(units, seed, out),
        6 => windows_avx512_fixed::<6>(units, seed, out),
        7 => windows_avx512_fixed::<7>(units, seed, out),
        _ => windows_avx512_fixed::<8>(units, seed, out),
    }
}

/// Hashes of the n-gram windows over `units` (unsorted, may repeat), written to `out`.
fn windows_into(units: &[u64], n: usize, seed: u64, out: &mut Vec<u32>) {
    out.clear();
    if units.is_empty() {
        return;
    }
    if units.len() < n {
        out.push(combine(units, seed));
        return;
    }
    out.reserve(units.len() + 1 - n);
    #[cfg(target_arch = "x86_64")]
    if n <= 8 && crate::simd_cap() >= crate::SimdCap::Avx512 && has_avx512_windows() {
        // SAFETY: the CPU supports AVX-512 F and DQ (checked just above).
        unsafe { windows_avx512(units, n, seed, out) };
        return;
    }
    match n {
        1 => windows_fixed::<1>(units, seed, out),
        2 => windows_fixed::<2>(units, seed, out),
        3 => windows_fixed::<3>(units, seed, out),
        4 => windows_fixed::<4>(units, seed, out),
        5 => windows_fixed::<5>(units, seed, out),
        6 => windows_fixed::<6>(units, seed, out),
        7 => windows_fixed::<7>(units, seed, out),
        8 => windows_fixed::<8>(units, seed, out),
        _ => out.extend(units.windows(n).map(|w| combine(w, seed))),
    }
}

/// `MASKS[k]`: the low `k` bytes of a little-endian `u64`.
const MASKS: [u64; 9] = [
    0,
    0xFF,
    0xFFFF,
    0xFF_FFFF,
    0xFFFF_FFFF,
    0xFF_FFFF_FFFF,
    0xFFFF_FFFF_FFFF,
    0xFF_FFFF_FFFF_FFFF,
    u64::MAX,
];

/// 64-bit hash of one normalised word: a deterministic function of its bytes and the seed.
///
/// Words of at most 16 bytes (nearly all) take no branch on their length: two 8-byte loads masked
/// to the word, a 64 x 64 -> 128-bit multiply of the two halves keyed by the seed and the length
/// (folded), and a 64-bit finaliser. Longer words use xxh3-64.
pub fn word_hash(word: &[u8], seed: u64) -> u64 {
    word_hash_at(word, 0, word.len(), seed)
}

/// `word_hash(&buf[start..start + len], seed)`, reading up to 16 bytes from `start` when `buf`
/// has them (the bytes after the word are masked off).
#[inline(always)]
fn word_hash_at(buf: &[u8], start: usize, len: usize, seed: u64) -> u64 {
    if len > 16 {
        return xxh3_64_with_seed(&buf[start..start + len], seed);
    }
    let mut pad = [0u8; 16];
    let src: &[u8; 16] = match buf.get(start..start + 16) {
        Some(s) => s.try_into().expect("16 bytes"),
        None => {
            pad[..len].copy_from_slice(&buf[start..start + len]);
            &pad
        }
    };
    let (lo, hi) = src.split_at(8);
    let la = len.min(8);
    let a = u64::from_le_bytes(lo.try_into().expect("8 bytes")) & MASKS[la];
    let b = u64::from_le_bytes(hi.try_into().expect("8 bytes")) & MASKS[len - la];
    let ka = seed ^ 0x243F_6A88_85A3_08D3;
    let kb = seed.rotate_left(32) ^ 0x1319_8A2E_0370_7344 ^ (len as u64).wrapping_mul(K1);
    let x = u128::from(a ^ ka) * u128::from(b ^ kb);
    fmix64(x as u64 ^ (x >> 64) as u64)
}

const SEP: u8 = 0xFF;
const SKIP: u8 = 0xFE;
/// Class of every byte >= 0x80 (the start or continuation of a multi-byte character).
const WIDE: u8 = 0xFD;

/// Per byte: `SEP` (ASCII whitespace, as `char::is_whitespace`), `SKIP` (stripped punctuation),
/// `WIDE` (not ASCII) or the ASCII byte to keep (lower-cased if asked). An ASCII byte that is kept
/// unchanged maps to itself, and no byte >= 0x80 does (`WIDE` = 0xFD never occurs in UTF-8).
fn byte_table(norm: Normalization) -> [u8; 256] {
    let mut t = [WIDE; 256];
    for (b, slot) in t.iter_mut().enumerate().take(128) {
        let c = b as u8;
        *slot = if norm.strip_punctuation && c.is_ascii_punctuation() {
            SKIP
        } else if (c as char).is_whitespace() {
            SEP
        } else if norm.lowercase {
            c.to_ascii_lowercase()
        } else {
            c
        };
    }
    t
}

/// The punctuation that `llmpipe_text::normalize` strips besides ASCII punctuation.
fn is_unicode_punct(c: char) -> bool {
    matches!(c, '\u{2000}'..='\u{206F}' | '\u{3000}'..='\u{303F}' | '\u{FF01}'..='\u{FF0F}' | '¡' | '¿' | '«' | '»')
}

/// CJK, kana, Yi and Hangul blocks: no case mapping (skips the lookup on the hot path).
fn caseless(c: char) -> bool {
    matches!(c, '\u{2E80}'..='\u{A63F}' | '\u{AC00}'..='\u{D7FF}')
}

/// `to_lowercase` of the character is the character itself.
const LOWER_ID: u8 = 1;
/// `char::is_whitespace`.
const WS: u8 = 2;
/// Stripped by `is_unicode_punct`.
const PUNCT: u8 = 4;
/// NFC quick check `Yes` and canonical combining class 0: a word made of such characters (and
/// ASCII) passes the NFC quick check, so NFC leaves it unchanged.
const NFC_SAFE: u8 = 8;

/// Properties of every Basic Multilingual Plane character (64 KiB, built once per process in a
/// few milliseconds): replaces a case-mapping search, a whitespace test and an NFC quick check
/// per character by one load.
fn bmp_props() -> &'static [u8] {
    static PROPS: OnceLock<Box<[u8]>> = OnceLock::new();
    PROPS.get_or_init(|| {
        (0..0x1_0000u32)
            .map(|u| {
                let Some(c) = char::from_u32(u) else { return 0 };
                let mut lower = c.to_lowercase();
                let mut p = 0;
                if lower.next() == Some(c) && lower.next().is_none() {
                    p |= LOWER_ID;
                }
                if c.is_whitespace() {
                    p |= WS;
                }
                if is_unicode_punct(c) {
                    p |= PUNCT;
                }
                if is_nfc_quick(std::iter::once(c)) == IsNormalized::Yes && canonical_combining_class(c) == 0
                {
                    p |= NFC_SAFE;
                }
                p
            })
            .collect()
    })
}

/// Lower case of every Basic Multilingual Plane character whose `to_lowercase` is one BMP
/// character (0 otherwise: no case, several characters, or beyond the BMP), built once per
/// process (128 KiB): replaces the case-mapping search in `push_char` by one load.
fn bmp_lower() -> &'static [u16] {
    static LOWER: OnceLock<Box<[u16]>> = OnceLock::new();
    LOWER.get_or_init(|| {
        (0..0x1_0000u32)
            .map(|u| {
                let Some(c) = char::from_u32(u) else { return 0 };
                let mut lower = c.to_lowercase();
                match (lower.next(), lower.next()) {
                    (Some(l), None) if (l as u32) < 0x1_0000 => l as u16,
                    _ => 0,
                }
            })
            .collect()
    })
}

/// The character starting at byte `i` of `bytes` (valid UTF-8, `bytes[i]` a leading byte >= 0x80)
/// and its length: the decoding `str::chars` does, without its checks (a `&str` is valid).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn decode_utf8(bytes: &[u8], i: usize) -> (char, usize) {
    let b0 = u32::from(bytes[i]);
    let cont = |k: usize| u32::from(bytes[i + k]) & 0x3F;
    let (u, len) = if b0 < 0xE0 {
        (((b0 & 0x1F) << 6) | cont(1), 2)
    } else if b0 < 0xF0 {
        (((b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2), 3)
    } else {
        (((b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3), 4)
    };
    (char::from_u32(u).unwrap_or(char::REPLACEMENT_CHARACTER), len)
}

/// Decodes the character starting at byte `i` of `text` (a char boundary) and its length.
#[inline]
fn decode_at(text: &str, i: usize) -> (char, usize) {
    let c = text[i..].chars().next().unwrap_or(char::REPLACEMENT_CHARACTER);
    (c, c.len_utf8())
}

/// Appends the normalised form of one character (punctuation stripped, lower-cased) to `word`.
#[inline]
fn push_char(c: char, norm: Normalization, table: &[u8; 256], word: &mut Vec<u8>) {
    let mut buf = [0u8; 4];
    if (c as u32) < 128 {
        let m = table[c as usize];
        if m < 128 {
            word.push(m);
        }
    } else if norm.strip_punctuation && is_unicode_punct(c) {
    } else if norm.lowercase && !caseless(c) {
        match bmp_lower().get(c as usize).copied().and_then(|l| char::from_u32(u32::from(l))) {
            Some(l) if l != '\0' => word.extend_from_slice(l.encode_utf8(&mut buf).as_bytes()),
            _ => {
                for l in c.to_lowercase() {
                    word.extend_from_slice(l.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
    } else {
        word.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }
}

/// Ends a token: NFC of the token if needed, then the hash of the normalised word (if any).
#[inline]
fn flush(
    tok: &str,
    exotic: bool,
    norm: Normalization,
    seed: u64,
    table: &[u8; 256],
    word: &mut Vec<u8>,
    out: &mut Vec<u64>,
) {
    if exotic && norm.nfc && is_nfc_quick(tok.chars()) != IsNormalized::Yes {
        word.clear();
        for c in tok.nfc() {
            push_char(c, norm, table, word);
        }
    }
    if !word.is_empty() {
        out.push(word_hash(word, seed));
        word.clear();
    }
}

/// Word hashes, identical to `normalize(text, norm)` split on whitespace, in one pass over the
/// bytes without building the normalised text.
///
/// A run of characters that normalisation leaves unchanged (ASCII by one table lookup, other Basic
/// Multilingual Plane characters by one property load) is not copied: a whole word of them is
/// hashed in place, otherwise the run is copied into `word` at once. Characters outside ASCII are
/// decoded where they occur, so a mostly ASCII document with a few curly quotes stays on the fast
/// loop. NFC composition never crosses whitespace, so it is applied per word, and only to words
/// with a character that is not NFC-safe (quick check `Yes`, combining class 0) and whose quick
/// check fails (NFC of ASCII is the identity).
///
/// With `SIMD` (AVX2, checked at run time by the caller), the end of a run of bytes that are surely
/// kept (`[a-z0-9]`, and `[A-Z]` without lower-casing) is found from a 64-byte bitmap (compare,
/// movemask, trailing zeros) instead of a branch per byte; any other byte goes through the same
/// per-character logic as without it, so both give the same hashes.
#[inline(always)]
fn words<const SIMD: bool>(
    text: &str,
    norm: Normalization,
    seed: u64,
    table: &[u8; 256],
    word: &mut Vec<u8>,
    out: &mut Vec<u64>,
) {
    let bytes = text.as_bytes();
    let n = bytes.len();
    let mut scan = Scan { base: 0, end: 0, mask: 0 };
    let props = bmp_props();
    // a BMP character is kept as it is when it is none of: a separator, stripped, changed by
    // lower-casing, a reason to run NFC
    let strip = if norm.strip_punctuation { PUNCT } else { 0 };
    let (keep_mask, keep_want) = (
        WS | strip | NFC_SAFE | if norm.lowercase { LOWER_ID } else { 0 },
        NFC_SAFE | if norm.lowercase { LOWER_ID } else { 0 },
    );
    word.clear();
    // `start`: the current token in `text` (for per-word NFC); `run`: the first byte not yet
    // copied into `word` (bytes in `run..i` are kept unchanged)
    let (mut start, mut run, mut exotic) = (0usize, 0usize, false);
    let mut i = 0usize;
    while i < n {
        if SIMD {
            i = scan.next_break(bytes, i, !norm.lowercase);
            if i >= n {
                break;
            }
        }
        let b = bytes[i];
        let t = table[b as usize];
        if t == b {
            i += 1;
            continue;
        }
        let (len, sep) = if t == WIDE {
            let (c, len) = decode_at(text, i);
            let p = if (c as u32) < 0x1_0000 { props[c as usize] } else { 0xFF };
            if p != 0xFF && p & keep_mask == keep_want {
                i += len;
                continue;
            }
            let punct = norm.strip_punctuation && is_unicode_punct(c);
            if c.is_whitespace() && !punct {
                (len, true)
            } else {
                word.extend_from_slice(&bytes[run..i]);
                exotic |= c >= '\u{300}' && !punct && p & NFC_SAFE == 0;
                push_char(c, norm, table, word);
                (len, false)
            }
        } else if t == SEP {
            (1, true)
        } else {
            word.extend_from_slice(&bytes[run..i]);
            if t != SKIP {
                word.push(t);
            }
            (1, false)
        };
        if sep {
            if word.is_empty() && !exotic {
                if i > run {
                    out.push(word_hash_at(bytes, run, i - run, seed));
                }
            } else {
                word.extend_from_slice(&bytes[run..i]);
                flush(&text[start..i], exotic, norm, seed, table, word, out);
            }
            start = i + len;
            exotic = false;
        }
        i += len;
        run = i;
    }
    if word.is_empty() && !exotic {
        if n > run {
            out.push(word_hash_at(bytes, run, n - run, seed));
        }
    } else {
        word.extend_from_slice(&bytes[run..n]);
        flush(&text[start..n], exotic, norm, seed, table, word, out);
    }
}

/// `words` with the AVX2 run scanner.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn words_avx2(
    text: &str,
    norm: Normalization,
    seed: u64,
    table: &[u8; 256],
    word: &mut Vec<u8>,
    out: &mut Vec<u64>,
) {
    words::<true>(text, norm, seed, table, word, out)
}

/// NFC of an exotic token that just ended (`tok`: its text): if the token is not in NFC, its bytes
/// in `buf` (everything after the last separator) are replaced by the normalised characters of
/// its NFC form, exactly as `flush` does for `words`.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn renormalize_token(tok: &str, norm: Normalization, table: &[u8; 256], buf: &mut Vec<u8>) {
    if is_nfc_quick(tok.chars()) != IsNormalized::Yes {
        let start = buf.iter().rposition(|&b| b == b' ').map_or(0, |p| p + 1);
        buf.truncate(start);
        for c in tok.nfc() {
            push_char(c, norm, table, buf);
        }
    }
}

/// `word_hash_at` of eight words (`buf[starts[k]..ends[k]]`, every word non-empty, `buf` readable
/// 16 bytes past every start) in the eight 64-bit lanes: the two 8-byte halves gathered and masked
/// to the word, the 64 x 64 -> 128-bit product from four 32 x 32 -> 64-bit ones, the same fold and
/// finaliser. Words longer than 16 bytes (rare) are hashed one by one with xxh3.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
fn word_hash8(buf: &[u8], starts: &[u32], ends: &[u32], seed: u64) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    assert!(starts.len() >= 8 && ends.len() >= 8);
    // SAFETY: 8 values each (asserted), unaligned loads.
    let (s, e) = unsafe {
        (
            _mm512_cvtepu32_epi64(_mm256_loadu_si256(starts.as_ptr().cast())),
            _mm512_cvtepu32_epi64(_mm256_loadu_si256(ends.as_ptr().cast())),
        )
    };
    let len = _mm512_sub_epi64(e, s);
    let max_start = starts[..8].iter().max().copied().unwrap_or(0) as usize;
    assert!(max_start + 16 <= buf.len());
    // SAFETY: every lane reads 16 bytes from a start, inside `buf` (asserted just above).
    let (lo, hi) = unsafe {
        (
            _mm512_i64gather_epi64::<1>(s, buf.as_ptr().cast()),
            _mm512_i64gather_epi64::<1>(_mm512_add_epi64(s, _mm512_set1_epi64(8)), buf.as_ptr().cast()),
        )
    };
    let ones = _mm512_set1_epi64(-1);
    let bits = _mm512_slli_epi64::<3>(len);
    let bits_b = _mm512_sub_epi64(_mm512_max_epu64(bits, _mm512_set1_epi64(64)), _mm512_set1_epi64(64));
    // shifts by 64 or more give 0: the masks of the low `len` bytes of the two halves
    let a = _mm512_andnot_si512(_mm512_sllv_epi64(ones, bits), lo);
    let b = _mm512_andnot_si512(_mm512_sllv_epi64(ones, bits_b), hi);
    let ka = _mm512_set1_epi64((seed ^ 0x243F_6A88_85A3_08D3) as i64);
    let kb0 = seed.rotate_left(32) ^ 0x1319_8A2E_0370_7344;
    let kb_of = |l: u64| (kb0 ^ l.wrapping_mul(K1)) as i64;
    let t0 =
        _mm512_setr_epi64(kb_of(1), kb_of(2), kb_of(3), kb_of(4), kb_of(5), kb_of(6), kb_of(7), kb_of(8));
    let t1 = _mm512_setr_epi64(
        kb_of(9),
        kb_of(10),
        kb_of(11),
        kb_of(12),
        kb_of(13),
        kb_of(14),
        kb_of(15),
        kb_of(16),
    );
    let kb = _mm512_permutex2var_epi64(t0, _mm512_sub_epi64(len, _mm512_set1_epi64(1)), t1);
    let x = _mm512_xor_si512(a, ka);
    let y = _mm512_xor_si512(b, kb);
    // 128-bit product of x and y from 32-bit halves
    let (xh, yh) = (_mm512_srli_epi64::<32>(x), _mm512_srli_epi64::<32>(y));
    let ll = _mm512_mul_epu32(x, y);
    let lh = _mm512_mul_epu32(x, yh);
    let hl = _mm512_mul_epu32(xh, y);
    let hh = _mm512_mul_epu32(xh, yh);
    let m32 = _mm512_set1_epi64(0xFFFF_FFFF);
    let mid = _mm512_add_epi64(
        _mm512_srli_epi64::<32>(ll),
        _mm512_add_epi64(_mm512_and_si512(lh, m32), _mm512_and_si512(hl, m32)),
    );
    let lo64 = _mm512_or_si512(_mm512_and_si512(ll, m32), _mm512_slli_epi64::<32>(mid));
    let hi64 = _mm512_add_epi64(
        _mm512_add_epi64(hh, _mm512_srli_epi64::<32>(mid)),
        _mm512_add_epi64(_mm512_srli_epi64::<32>(lh), _mm512_srli_epi64::<32>(hl)),
    );
    let mut h = _mm512_xor_si512(lo64, hi64);
    h = _mm512_xor_si512(h, _mm512_srli_epi64::<33>(h));
    h = _mm512_mullo_epi64(h, _mm512_set1_epi64(0xff51_afd7_ed55_8ccd_u64 as i64));
    h = _mm512_xor_si512(h, _mm512_srli_epi64::<33>(h));
    h = _mm512_mullo_epi64(h, _mm512_set1_epi64(0xc4ce_b9fe_1a85_ec53_u64 as i64));
    h = _mm512_xor_si512(h, _mm512_srli_epi64::<33>(h));
    let long = _mm512_cmpgt_epu64_mask(len, _mm512_set1_epi64(16));
    if long != 0 {
        let mut lanes = [0u64; 8];
        // SAFETY: `lanes` holds 8 values; unaligned store and load.
        unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), h) };
        for (j, lane) in lanes.iter_mut().enumerate() {
            if long & (1 << j) != 0 {
                *lane = xxh3_64_with_seed(&buf[starts[j] as usize..ends[j] as usize], seed);
            }
        }
        // SAFETY: as above.
        h = unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) };
    }
    h
}

/// The edges after the first 16 of one block (more than 16 words start or end in it), widened to
/// positions 16 at a time after the first 16 (see `words_avx512`, pass 2).
///
/// # Safety
/// The CPU has AVX-512 F, BW and VBMI2; `starts` and `ends` are valid for writes of
/// `ns + st.count_ones() + 16` and `ne + en.count_ones() + 16` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn edges_rest(
    st: u64,
    en: u64,
    base: usize,
    starts: *mut u32,
    ends: *mut u32,
    ns: usize,
    ne: usize,
    iota: std::arch::x86_64::__m512i,
) {
    use std::arch::x86_64::*;
    let basev = _mm512_set1_epi32(base as i32);
    for (mask, dst, at) in [(st, starts, ns), (en, ends, ne)] {
        let c = _mm512_maskz_compress_epi8(mask, iota);
        let mut bytes = [0u8; 64];
        // SAFETY: `bytes` holds 64 values; unaligned store.
        unsafe { _mm512_storeu_si512(bytes.as_mut_ptr().cast(), c) };
        let count = mask.count_ones() as usize;
        let mut k = 16;
        while k < count {
            // SAFETY: `bytes[k..k + 16]` is inside `bytes` (`k <= 48`); the 16 lanes written from
            // `at + k < at + count` are within what the caller guarantees writable.
            unsafe {
                let off = _mm_loadu_si128(bytes.as_ptr().add(k).cast());
                _mm512_storeu_si512(
                    dst.add(at + k).cast(),
                    _mm512_add_epi32(_mm512_cvtepu8_epi32(off), basev),
                );
            }
            k += 16;
        }
    }
}

/// `words` with AVX-512 (F, BW, DQ, VBMI, VBMI2), in two passes over each document.
///
/// Pass 1 writes the normalised text to `buf`, every separator as one space: 64 ASCII bytes at a
/// time are mapped through the byte table with one permute (lower-casing, separators), stripped
/// punctuation is squeezed out with one compress, and the block is stored whole; characters outside
/// ASCII take the per-character logic of `words` (the same property table, `push_char`, and NFC of
/// a token with a character that is not NFC-safe, redone from the token's text when it ends).
/// Pass 2 finds the edges of the runs of non-space bytes in `buf` from a 64-bit mask per block,
/// compresses their positions into start and end arrays (`edges`, scratch), and hashes the words
/// eight at a time in place (`word_hash8`). No branch per byte and none per word; the hashes equal
/// those of `words` (same table, same word hash).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512vbmi2,bmi1,popcnt")]
fn words_avx512(
    text: &str,
    norm: Normalization,
    seed: u64,
    table: &[u8; 256],
    buf: &mut Vec<u8>,
    edges: &mut Vec<u32>,
    out: &mut Vec<u64>,
) {
    use std::arch::x86_64::*;
    let bytes = text.as_bytes();
    let n = bytes.len();
    let props = bmp_props();
    let strip = if norm.strip_punctuation { PUNCT } else { 0 };
    let (keep_mask, keep_want) = (
        WS | strip | NFC_SAFE | if norm.lowercase { LOWER_ID } else { 0 },
        NFC_SAFE | if norm.lowercase { LOWER_ID } else { 0 },
    );
    // SAFETY: `table` has 256 readable bytes; both loads are unaligned.
    let (tlo, thi) = unsafe {
        (_mm512_loadu_si512(table.as_ptr().cast()), _mm512_loadu_si512(table[64..].as_ptr().cast()))
    };
    let sep_v = _mm512_set1_epi8(SEP as i8);
    let skip_v = _mm512_set1_epi8(SKIP as i8);
    let space = _mm512_set1_epi8(b' ' as i8);
    buf.clear();
    buf.reserve(n + 128);
    // `tok`: start in `text` of the current token (for NFC); `exotic`: it needs the NFC check
    let (mut i, mut tok, mut exotic) = (0usize, 0usize, false);
    while i < n {
        if !exotic {
            // whole ASCII blocks: the next load does not wait for this one (the branch is
            // predicted), the output length stays in a register
            if i + 64 <= n {
                buf.reserve(n - i + 64);
                let dst = buf.as_mut_ptr();
                let mut len = buf.len();
                while i + 64 <= n {
                    // SAFETY: `i + 64 <= n`: 64 readable bytes from `i`.
                    let v = unsafe { _mm512_loadu_si512(bytes.as_ptr().add(i).cast()) };
                    if _mm512_movepi8_mask(v) != 0 {
                        break;
                    }
                    let t = _mm512_permutex2var_epi8(tlo, v, thi);
                    let sep = _mm512_cmpeq_epi8_mask(t, sep_v);
                    let keep = _mm512_cmpneq_epi8_mask(t, skip_v);
                    let packed = _mm512_maskz_compress_epi8(keep, _mm512_mask_mov_epi8(t, sep, space));
                    // SAFETY: a block adds at most 64 bytes and `i` moves by 64, so the 64 bytes
                    // written from `len` end within the `n - i + 64` reserved when the loop began
                    // (`i + 64 <= n`); the kept bytes written are initialised.
                    unsafe { _mm512_storeu_si512(dst.add(len).cast(), packed) };
                    len += keep.count_ones() as usize;
                    if sep != 0 {
                        tok = i + 64 - sep.leading_zeros() as usize;
                    }
                    i += 64;
                }
                // SAFETY: the bytes up to `len` were written above.
                unsafe { buf.set_len(len) };
                if i >= n {
                    break;
                }
            }
            let rem = n - i;
            let lm = if rem >= 64 { u64::MAX } else { (1u64 << rem) - 1 };
            // SAFETY: only the `rem.min(64)` bytes from `i` that `lm` selects are read (masked load).
            let v = unsafe { _mm512_maskz_loadu_epi8(lm, bytes.as_ptr().add(i).cast()) };
            let wide = _mm512_movepi8_mask(v);
            let k = if wide == 0 { rem.min(64) } else { wide.trailing_zeros() as usize };
            if k > 0 {
                let vm = if k >= 64 { u64::MAX } else { (1u64 << k) - 1 };
                let t = _mm512_permutex2var_epi8(tlo, v, thi);
                let sep = _mm512_cmpeq_epi8_mask(t, sep_v) & vm;
                let keep = _mm512_cmpneq_epi8_mask(t, skip_v) & vm;
                let packed = _mm512_maskz_compress_epi8(keep, _mm512_mask_mov_epi8(t, sep, space));
                buf.reserve(64);
                // SAFETY: `buf` has at least 64 bytes of spare capacity (reserved just above); the
                // first `keep.count_ones()` of them are the kept bytes, now initialised.
                unsafe {
                    _mm512_storeu_si512(buf.as_mut_ptr().add(buf.len()).cast(), packed);
                    buf.set_len(buf.len() + keep.count_ones() as usize);
                }
                if sep != 0 {
                    tok = i + 64 - sep.leading_zeros() as usize;
                }
                i += k;
                if wide == 0 {
                    continue;
                }
            }
        }
        // per character: a character outside ASCII, or any byte inside an exotic token; characters
        // kept unchanged are copied as one run (`run..i`) when something else comes
        // (a lone ASCII byte between them, like the space between two words of a non-Latin
        // script, is handled here too rather than by a vector step of one byte)
        let mut run = i;
        while i < n {
            let b = bytes[i];
            if b < 128 {
                if !exotic && bytes.get(i + 1).is_some_and(|&c| c < 128) {
                    break;
                }
                let t = table[b as usize];
                if t == b {
                    i += 1;
                    continue;
                }
                buf.extend_from_slice(&bytes[run..i]);
                if t == SEP {
                    if exotic {
                        renormalize_token(&text[tok..i], norm, table, buf);
                        exotic = false;
                    }
                    buf.push(b' ');
                    tok = i + 1;
                } else if t != SKIP {
                    buf.push(t);
                }
                i += 1;
                run = i;
                continue;
            }
            let (c, len) = decode_utf8(bytes, i);
            let p = if (c as u32) < 0x1_0000 { props[c as usize] } else { 0xFF };
            if p != 0xFF && p & keep_mask == keep_want {
                i += len;
                continue;
            }
            buf.extend_from_slice(&bytes[run..i]);
            {
                let punct = norm.strip_punctuation && is_unicode_punct(c);
                if c.is_whitespace() && !punct {
                    if exotic {
                        renormalize_token(&text[tok..i], norm, table, buf);
                        exotic = false;
                    }
                    buf.push(b' ');
                    tok = i + len;
                } else {
                    exotic |= norm.nfc && c >= '\u{300}' && !punct && p & NFC_SAFE == 0;
                    push_char(c, norm, table, buf);
                }
            }
            i += len;
            run = i;
        }
        buf.extend_from_slice(&bytes[run..i]);
    }
    if exotic {
        renormalize_token(&text[tok..n], norm, table, buf);
    }
    // pass 2: words are the runs of non-space bytes; 64 spaces after the end close the last one
    // and keep every 64-byte load and 16-byte word load inside `buf`
    let len = buf.len();
    buf.extend_from_slice(&[b' '; 64]);
    // the start and end of every word, by compressing the positions of the edges of the runs
    // (no branch per word or per block); at most `len / 2 + 1` words, plus room for the 16 lanes
    // every compressed store writes
    let half = len / 2 + 1 + 16;
    edges.clear();
    edges.reserve(2 * half);
    // the spare capacity of `edges`, not zeroed first (every value read is written before)
    let starts = edges.as_mut_ptr();
    // SAFETY: `edges` has room for `2 * half` values (reserved just above).
    let ends = unsafe { starts.add(half) };
    let (mut ns, mut ne) = (0usize, 0usize);
    let mut carry = 0u64;
    // byte offsets 0..64 in the lanes of one vector
    let iota = _mm512_set_epi64(
        0x3f3e_3d3c_3b3a_3938,
        0x3736_3534_3332_3130,
        0x2f2e_2d2c_2b2a_2928,
        0x2726_2524_2322_2120,
        0x1f1e_1d1c_1b1a_1918,
        0x1716_1514_1312_1110,
        0x0f0e_0d0c_0b0a_0908,
        0x0706_0504_0302_0100,
    );
    let mut base = 0usize;
    while base <= len {
        // SAFETY: `base <= len` and `buf` has 64 bytes after `len`, so 64 bytes from `base` are in it.
        let v = unsafe { _mm512_loadu_si512(buf.as_ptr().add(base).cast()) };
        let w = _mm512_cmpneq_epi8_mask(v, space);
        let before = (w << 1) | carry;
        carry = w >> 63;
        let (st, en) = (w & !before, !w & before);
        let basev = _mm512_set1_epi32(base as i32);
        // the offsets of the edges packed to the front (one byte each), then widened to positions
        // 16 at a time: one step for most blocks (fewer than 17 words start in 64 bytes)
        let (cs, ce) = (_mm512_maskz_compress_epi8(st, iota), _mm512_maskz_compress_epi8(en, iota));
        let (cs, ce) = (_mm512_castsi512_si128(cs), _mm512_castsi512_si128(ce));
        let (nsb, neb) = (st.count_ones() as usize, en.count_ones() as usize);
        // SAFETY: every start and end counted so far is a distinct word (`ns, ne <= len / 2 + 1`),
        // so 16 lanes from `ns` / `ne` stay inside `starts` / `ends` (`len / 2 + 17` each).
        unsafe {
            _mm512_storeu_si512(starts.add(ns).cast(), _mm512_add_epi32(_mm512_cvtepu8_epi32(cs), basev));
            _mm512_storeu_si512(ends.add(ne).cast(), _mm512_add_epi32(_mm512_cvtepu8_epi32(ce), basev));
        }
        if nsb > 16 || neb > 16 {
            // SAFETY: AVX-512 F/BW/VBMI2 are enabled here; `ns + nsb` and `ne + neb` count distinct
            // words (at most `len / 2 + 1`), so 16 more lanes fit in `len / 2 + 17`.
            unsafe { edges_rest(st, en, base, starts, ends, ns, ne, iota) };
        }
        ns += nsb;
        ne += neb;
        base += 64;
    }
    assert_eq!(ns, ne, "every word has a start and an end");
    // SAFETY: the first `ns` values from `starts` and from `ends` were written by the stores above
    // (each store writes 16 values from the count so far), inside the reserved capacity.
    let (starts, ends) =
        unsafe { (std::slice::from_raw_parts(starts, ns), std::slice::from_raw_parts(ends, ns)) };
    out.reserve(ns + 8);
    let mut k = 0;
    while k + 8 <= ns {
        let h = word_hash8(buf, &starts[k..k + 8], &ends[k..k + 8], seed);
        let at = out.len();
        // SAFETY: `out` has room for `ns + 8` more values (reserved above), 8 are written.
        unsafe {
            _mm512_storeu_si512(out.as_mut_ptr().add(at).cast(), h);
            out.set_len(at + 8);
        }
        k += 8;
    }
    for (&s, &e) in starts[k..ns].iter().zip(&ends[k..ns]) {
        let (s, e) = (s as usize, e as usize);
        out.push(word_hash_at(buf, s, e - s, seed));
    }
    buf.truncate(len);
}

/// Bitmap of the bytes `base..end` (`end <= base + 64`) that are not surely kept unchanged.
struct Scan {
    base: usize,
    end: usize,
    mask: u64,
}

impl Scan {
    /// The first position at or after `i` that is not surely kept unchanged (`bytes.len()` if none).
    /// Only called from `words::<true>`, which runs only where AVX2 is present.
    #[inline(always)]
    fn next_break(&mut self, bytes: &[u8], mut i: usize, upper: bool) -> usize {
        loop {
            if i >= self.end {
                if i >= bytes.len() {
                    return bytes.len();
                }
                let mut block = [0xFFu8; 64];
                let take = (bytes.len() - i).min(64);
                let src: &[u8; 64] = if take == 64 {
                    bytes[i..i + 64].try_into().expect("64 bytes")
                } else {
                    // the tail, padded with bytes that are never kept (0xFF is not in any run)
                    block[..take].copy_from_slice(&bytes[i..]);
                    &block
                };
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `next_break` is reached only through `words_avx2` (AVX2 checked).
                let mask = unsafe { unkept64_avx2(src, upper) };
                #[cfg(not(target_arch = "x86_64"))]
                let mask = unkept64(src, upper);
                self.base = i;
                self.end = i + take;
                self.mask = mask;
            }
            let m = self.mask >> (i - self.base);
            if m != 0 {
                return (i + m.trailing_zeros() as usize).min(bytes.len());
            }
            i = self.end;
        }
    }
}

/// Portable `unkept64_avx2` (non-x86 targets).
#[cfg(not(target_arch = "x86_64"))]
fn unkept64(block: &[u8; 64], upper: bool) -> u64 {
    let mut m = 0u64;
    for (k, &b) in block.iter().enumerate() {
        let keep = b.is_ascii_lowercase() || b.is_ascii_digit() || (upper && b.is_ascii_uppercase());
        m |= u64::from(!keep) << k;
    }
    m
}

/// Bit `k`: byte `k` of the block is not in `[a-z0-9]` (nor `[A-Z]` when `upper`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn unkept64_avx2(block: &[u8; 64], upper: bool) -> u64 {
    let lo = unkept32_avx2(&block[..32], upper);
    let hi = unkept32_avx2(&block[32..], upper);
    u64::from(lo) | (u64::from(hi) << 32)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn in_range_avx2(x: std::arch::x86_64::__m256i, lo: u8, hi: u8) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let clamped = _mm256_min_epu8(_mm256_max_epu8(x, _mm256_set1_epi8(lo as i8)), _mm256_set1_epi8(hi as i8));
    _mm256_cmpeq_epi8(clamped, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn unkept32_avx2(half: &[u8], upper: bool) -> u32 {
    use std::arch::x86_64::*;
    assert!(half.len() >= 32);
    // SAFETY: `half` has at least 32 readable bytes (asserted); the load is unaligned.
    let x = unsafe { _mm256_loadu_si256(half.as_ptr().cast()) };
    let mut keep = _mm256_or_si256(in_range_avx2(x, b'a', b'z'), in_range_avx2(x, b'0', b'9'));
    if upper {
        keep = _mm256_or_si256(keep, in_range_avx2(x, b'A', b'Z'));
    }
    !(_mm256_movemask_epi8(keep) as u32)
}

/// The CPU has what `words_avx512` needs (checked once, cached by std).
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx512_words() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512dq")
        && std::arch::is_x86_feature_detected!("avx512vbmi")
        && std::arch::is_x86_feature_detected!("avx512vbmi2")
        && std::arch::is_x86_feature_detected!("bmi1")
        && std::arch::is_x86_feature_detected!("popcnt")
}

/// Unit hashes of `text` (words or characters), in text order.
pub fn unit_hashes(text: &str, cfg: &ShingleConfig, out: &mut Vec<u64>) {
    Shingler::default().unit_hashes(text, cfg, out);
}

/// Reusable buffers for shingling many documents on one thread.
#[derive(Default)]
pub struct Shingler {
    units: Vec<u64>,
    word: Vec<u8>,
    scratch: Vec<u32>,
    /// The byte table of `table_norm` (built once per thread and normalisation, not per document).
    table: Option<Box<[u8; 256]>>,
    table_norm: Option<Normalization>,
}

impl Shingler {
    /// Unit hashes of `text` (words or characters), in text order, written to `out`.
    pub fn unit_hashes(&mut self, text: &str, cfg: &ShingleConfig, out: &mut Vec<u64>) {
        out.clear();
        match cfg.unit {
            ShingleUnit::Words => {
                if self.table.is_none() || self.table_norm != Some(cfg.norm) {
                    self.table = Some(Box::new(byte_table(cfg.norm)));
                    self.table_norm = Some(cfg.norm);
                }
                let table = self.table.as_deref().expect("set just above");
                #[cfg(target_arch = "x86_64")]
                let cap = crate::simd_cap();
                #[cfg(target_arch = "x86_64")]
                if cap >= crate::SimdCap::Avx512 && text.len() < u32::MAX as usize / 4 && has_avx512_words() {
                    // SAFETY: the CPU supports every feature `words_avx512` enables (checked).
                    unsafe {
                        words_avx512(text, cfg.norm, cfg.seed, table, &mut self.word, &mut self.scratch, out)
                    };
                    return;
                }
                #[cfg(target_arch = "x86_64")]
                if cap >= crate::SimdCap::Avx2 && std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2 (checked just above).
                    unsafe { words_avx2(text, cfg.norm, cfg.seed, table, &mut self.word, out) };
                    return;
                }
                words::<false>(text, cfg.norm, cfg.seed, table, &mut self.word, out);
            }
            ShingleUnit::Chars => {
                let mut norm = cfg.norm;
                if norm.nfc && is_nfc_quick(text.chars()) == IsNormalized::Yes {
                    norm.nfc = false;
                }
                let normed = normalize(text, norm);
                out.extend(normed.chars().map(|c| {
                    let mut buf = [0u8; 4];
                    xxh3_64_with_seed(c.encode_utf8(&mut buf).as_bytes(), cfg.seed)
                }));
            }
        }
    }

    /// The shingle hashes of `text` in text order (repeats kept), written to `out`: enough for
    /// MinHash, which ignores repeats.
    pub fn hashes(&mut self, text: &str, cfg: &ShingleConfig, out: &mut Vec<u32>) {
        let mut units = std::mem::take(&mut self.units);
        self.unit_hashes(text, cfg, &mut units);
        windows_into(&units, cfg.ngram.max(1), cfg.seed, out);
        self.units = units;
    }

    /// The sorted distinct shingle hashes of `text`, written to `out`.
    pub fn shingles(&mut self, text: &str, cfg: &ShingleConfig, out: &mut Vec<u32>) {
        self.hashes(text, cfg, out);
        sort_dedup(out, &mut self.scratch);
    }
}

/// The sorted distinct shingle hashes of one text.
pub fn shingles(text: &str, cfg: &ShingleConfig) -> Vec<u32> {
    let mut out = Vec::new();
    Shingler::default().shingles(text, cfg, &mut out);
    out
}

/// Exact Jaccard similarity of two sorted distinct sets.
pub fn jaccard(a: &[u32], b: &[u32]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut inter) = (0usize, 0usize, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter as f64 / (a.len() + b.len() - inter) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow_words(text: &str, cfg: &ShingleConfig) -> Vec<u64> {
        let mut norm = cfg.norm;
        norm.collapse_whitespace = true;
        normalize(text, norm)
            .split(' ')
            .filter(|w| !w.is_empty())
            .map(|w| word_hash(w.as_bytes(), cfg.seed))
            .collect()
    }

    #[test]
    fn ascii_fast_path_matches_normalisation() {
        let cfg = ShingleConfig::default();
        for t in ["Hello, World!  foo\x0Bbar -- baz", "", "   ", "a-b c.d ,,, E", "Tab\tSep\r\nLine"] {
            let mut fast = Vec::new();
            unit_hashes(t, &cfg, &mut fast);
            assert_eq!(fast, slow_words(t, &cfg), "{t:?}");
        }
    }

    #[test]
    fn unicode_path_matches_normalisation() {
        let samples = [
            "Größe straße ÉCOLE — «citation» ¿qué? ¡sí!",
            "caf\u{65}\u{301} déjà vu\u{2009}thin\u{3000}ideo 東京タワー、こんにちは。",
            "Ünïcode\u{00A0}nbsp\u{2028}line İstanbul ΣΊΣΥΦΟΣ",
        ];
        for cfg in [
            ShingleConfig::default(),
            ShingleConfig {
                norm: Normalization {
                    nfc: false,
                    lowercase: false,
                    collapse_whitespace: true,
                    strip_punctuation: false,
                },
                ..Default::default()
            },
        ] {
            for t in samples {
                let mut fast = Vec::new();
                unit_hashes(t, &cfg, &mut fast);
                assert_eq!(fast, slow_words(t, &cfg), "{t:?}");
            }
        }
    }

    #[test]
    fn long_mixed_text_matches_normalisation_across_blocks() {
        // words of every length crossing the 64-byte blocks of the run scanner, mixed scripts
        let pieces = [
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "Hello,",
            "x",
            "déjà",
            "caf\u{65}\u{301}",
            "Straße\u{00A0}ПРИВЕТ мир",
            "東京タワー、",
            "it\u{2019}s",
            "a\tb\r\nc",
            "UPPER lower",
            "\u{1F600}emoji",
        ];
        let mut text = String::new();
        for k in 0..400usize {
            text.push_str(pieces[k * 7 % pieces.len()]);
            text.push_str(if k % 5 == 0 { "  " } else { " " });
            text.push_str(&"q".repeat(k % 19));
        }
        for cfg in [
            ShingleConfig::default(),
            ShingleConfig {
                norm: Normalization {
                    nfc: true,
                    lowercase: false,
                    collapse_whitespace: true,
                    strip_punctuation: false,
                },
                ..Default::default()
            },
        ] {
            let table = byte_table(cfg.norm);
            let expect = slow_words(&text, &cfg);
            for cut in [0, 1, 5, 63, 64, 65, 200] {
                let t = &text[text.char_indices().nth(cut).map_or(0, |(i, _)| i)..];
                let (mut fast, mut plain, mut word) = (Vec::new(), Vec::new(), Vec::new());
                unit_hashes(t, &cfg, &mut fast);
                words::<false>(t, cfg.norm, cfg.seed, &table, &mut word, &mut plain);
                let slow = slow_words(t, &cfg);
                assert_eq!(fast, slow, "cut {cut}");
                assert_eq!(plain, slow, "cut {cut}");
            }
            assert!(expect.len() > 400, "{}", expect.len());
        }
    }

    /// Normalisations the word paths are checked under: the default, none, NFC + punctuation only,
    /// lower case only.
    const TEST_NORMS: [Normalization; 4] = [
        Normalization { nfc: true, lowercase: true, collapse_whitespace: true, strip_punctuation: true },
        Normalization { nfc: false, lowercase: false, collapse_whitespace: true, strip_punctuation: false },
        Normalization { nfc: true, lowercase: false, collapse_whitespace: true, strip_punctuation: true },
        Normalization { nfc: false, lowercase: true, collapse_whitespace: true, strip_punctuation: false },
    ];

    /// The word hashes of `t` on every path this CPU has (dispatch, portable, AVX2, AVX-512) equal
    /// those of `normalize` + split.
    fn check_every_path(t: &str, norm: Normalization) {
        let cfg = ShingleConfig { norm, ..Default::default() };
        let table = byte_table(norm);
        let slow = slow_words(t, &cfg);
        let (mut got, mut word) = (Vec::new(), Vec::new());
        unit_hashes(t, &cfg, &mut got);
        assert_eq!(got, slow, "{norm:?} {t:?}");
        got.clear();
        words::<false>(t, norm, cfg.seed, &table, &mut word, &mut got);
        assert_eq!(got, slow, "scalar {norm:?} {t:?}");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            got.clear();
            // SAFETY: AVX2 checked just above.
            unsafe { words_avx2(t, norm, cfg.seed, &table, &mut word, &mut got) };
            assert_eq!(got, slow, "avx2 {norm:?} {t:?}");
        }
        #[cfg(target_arch = "x86_64")]
        if has_avx512_words() {
            got.clear();
            // SAFETY: the features were checked just above.
            unsafe { words_avx512(t, norm, cfg.seed, &table, &mut word, &mut Vec::new(), &mut got) };
            assert_eq!(got, slow, "avx512 {norm:?} {t:?}");
        }
    }

    #[test]
    fn every_path_matches_normalisation_at_every_length() {
        // every prefix up to 300 bytes: words ending at, before and after each 64-byte block end
        // of the text and of the normalised buffer, exotic tokens (NFC) cut anywhere
        let text = "Hello, World! a b c d e f g h i j k l m n o p q r s t u v w x y z 0 1 2 3 4 5 6 7 8 9 \
                    The quick-brown fox: caf\u{65}\u{301}s déjà  vu\t(ÉCOLE) it\u{2019}s \
                    abcdefghijklmnopqrstuvwxyz0123 x\u{301}y ΣΊΣΥΦΟΣ... end.\r\n東京タワー、 ok; \u{1F600}z \
                    A.B.C. d--e 'quoted' \u{00A0}nbsp last";
        for norm in &TEST_NORMS[..3] {
            for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
                check_every_path(&text[..end], *norm);
            }
        }
    }

    #[test]
    fn window_hashes_match_combine_for_every_length() {
        let units: Vec<u64> = (0..40u64).map(|i| fmix64(i + 1)).collect();
        for n in 1..=10usize {
            for len in 0..units.len() {
                let u = &units[..len];
                let mut got = vec![7];
                windows_into(u, n, 3, &mut got);
                let want: Vec<u32> = if len == 0 {
                    Vec::new()
                } else if len < n {
                    vec![combine(u, 3)]
                } else {
                    u.windows(n).map(|w| combine(w, 3)).collect()
                };
                assert_eq!(got, want, "n {n} len {len}");
            }
        }
    }

    #[test]
    fn eight_word_hashes_match_word_hash() {
        #[cfg(target_arch = "x86_64")]
        if has_avx512_words() {
            let mut buf: Vec<u8> = (0..400u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
            buf.extend_from_slice(&[b' '; 64]);
            for round in 0..50usize {
                let starts: Vec<u32> = (0..8).map(|j| ((round * 37 + j * 41) % 380) as u32).collect();
                let ends: Vec<u32> =
                    starts.iter().enumerate().map(|(j, &s)| s + 1 + ((round + 3 * j) % 24) as u32).collect();
                let mut got = [0u64; 8];
                // SAFETY: the features were checked above; `got` holds 8 values.
                unsafe {
                    let h = word_hash8(&buf, &starts, &ends, round as u64);
                    std::arch::x86_64::_mm512_storeu_si512(got.as_mut_ptr().cast(), h);
                }
                for j in 0..8 {
                    let w = &buf[starts[j] as usize..ends[j] as usize];
                    assert_eq!(got[j], word_hash(w, round as u64), "round {round} lane {j} len {}", w.len());
                }
            }
        }
    }

    #[test]
    fn random_texts_match_normalisation_on_every_path() {
        // characters that take every branch: separators of each kind (and the C0 controls that
        // are not whitespace), punctuation stripped or kept, upper case in and beyond the BMP,
        // combining marks (NFC), multi-character lower case, CJK, emoji, NUL
        let alphabet: Vec<char> = "aZ09 .,-'\t\n\r\u{b}\u{c}\u{1c}\u{1f}\0\u{85}\u{a0}\u{2000}\u{2009}\u{3000}\
                                   éÉßİΣςЖж\u{301}\u{327}\u{1039}\u{FEFF}\u{10400}\u{1F600}東、«¿\u{FF01}\u{2019}"
            .chars()
            .collect();
        let mut state = 0x1234_5678_u64;
        let mut next = move || {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize
        };
        for round in 0..3000 {
            let len = next() % 400;
            // mostly letters so that words get long, sometimes anything from the alphabet
            let text: String = (0..len)
                .map(|_| {
                    if next() % 3 == 0 {
                        alphabet[next() % alphabet.len()]
                    } else {
                        (b'a' + (next() % 26) as u8) as char
                    }
                })
                .collect();
            check_every_path(&text, TEST_NORMS[round % TEST_NORMS.len()]);
        }
    }

    #[test]
    fn word_hash_separates_words() {
        // every word of 1-3 letters over a small alphabet, and longer ones around the 8/16 limits
        let mut words: Vec<Vec<u8>> = Vec::new();
        let alpha = b"ab0z\xc3\xa9";
        for len in 1..=4usize {
            let mut idx = vec![0usize; len];
            loop {
                words.push(idx.iter().map(|&k| alpha[k]).collect());
                let mut p = 0;
                while p < len && idx[p] == alpha.len() - 1 {
                    idx[p] = 0;
                    p += 1;
                }
                if p == len {
                    break;
                }
                idx[p] += 1;
            }
        }
        for len in [7usize, 8, 9, 15, 16, 17, 40] {
            for k in 0..50u8 {
                let mut w = vec![b'q'; len];
                w[usize::from(k) % len] = b'a' + k % 26;
                w[len - 1] = b'0' + k % 10;
                words.push(w);
            }
        }
        words.sort();
        words.dedup();
        let mut hashes: Vec<u64> = words.iter().map(|w| word_hash(w, 1)).collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), words.len());
        // in place (bytes after the word are ignored) equals the copied word
        let text = b"abc defghijklmnopq rs";
        assert_eq!(word_hash_at(text, 0, 3, 1), word_hash(b"abc", 1));
        assert_eq!(word_hash_at(text, 4, 14, 1), word_hash(b"defghijklmnopq", 1));
        assert_eq!(word_hash_at(text, 19, 2, 1), word_hash(b"rs", 1));
        assert_ne!(word_hash(b"abc", 1), word_hash(b"abc", 2));
    }

    #[test]
    fn short_and_empty_documents() {
        let cfg = ShingleConfig::default();
        assert!(shingles("", &cfg).is_empty());
        assert!(shingles(" ,,, ", &cfg).is_empty());
        assert_eq!(shingles("word", &cfg).len(), 1);
        assert_eq!(shingles("two words", &cfg).len(), 1);
        assert_ne!(shingles("word", &cfg), shingles("other", &cfg));
        assert_eq!(shingles("a b c d e f", &cfg).len(), 2);
    }

    #[test]
    fn normalisation_makes_case_and_punctuation_irrelevant() {
        let cfg = ShingleConfig::default();
        assert_eq!(shingles("The cat, sat on the Mat.", &cfg), shingles("the cat sat on the mat", &cfg));
        assert_eq!(shingles("Ünïcode café ok now yes", &cfg), shingles("ünïcode CAFÉ ok now yes", &cfg));
        assert_eq!(shingles("caf\u{e9} a b c d", &cfg), shingles("cafe\u{301} a b c d", &cfg));
    }

    #[test]
    fn chars_unit() {
        let cfg = ShingleConfig { unit: ShingleUnit::Chars, ngram: 3, ..Default::default() };
        assert_eq!(shingles("abcd", &cfg).len(), 2);
        assert_eq!(shingles("ab", &cfg).len(), 1);
        assert!(shingles("", &cfg).is_empty());
    }

    #[test]
    fn radix_sort_dedups() {
        let mut v: Vec<u32> = (0..5000u32).map(|i| (i % 1700).wrapping_mul(0x9E37_79B1)).collect();
        let mut expect = v.clone();
        expect.sort_unstable();
        expect.dedup();
        sort_dedup(&mut v, &mut Vec::new());
        assert_eq!(v, expect);
    }

    #[test]
    fn jaccard_of_sets() {
        assert_eq!(jaccard(&[1, 2, 3], &[2, 3, 4]), 0.5);
        assert_eq!(jaccard(&[], &[]), 1.0);
        assert_eq!(jaccard(&[1], &[]), 0.0);
    }
}

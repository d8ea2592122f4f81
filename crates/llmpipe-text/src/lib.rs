//! Text helpers shared by every llmpipe stage: normalisation and 128-bit content hashing.
//!
//! Nothing here knows about Python; the binding crate calls these on whole batches.

pub mod clean;
pub mod html;
pub mod jsonl;
pub mod swar;
pub mod threads;

use unicode_normalization::{IsNormalized, UnicodeNormalization};
use xxhash_rust::xxh3::xxh3_128_with_seed;

/// How text is normalised before hashing or shingling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Normalization {
    /// Unicode NFC composition.
    pub nfc: bool,
    /// Lower-case every character.
    pub lowercase: bool,
    /// Collapse every run of whitespace to one space and trim the ends.
    pub collapse_whitespace: bool,
    /// Drop Unicode punctuation characters.
    pub strip_punctuation: bool,
}

impl Default for Normalization {
    fn default() -> Self {
        Self { nfc: true, lowercase: true, collapse_whitespace: true, strip_punctuation: false }
    }
}

/// Normalise one text.
pub fn normalize(text: &str, how: Normalization) -> String {
    let mut out = String::with_capacity(text.len());
    normalize_into(text, how, &mut out);
    out
}

/// [`normalize`] into `out` (emptied first), so that a caller can reuse one buffer.
pub fn normalize_into(text: &str, how: Normalization, out: &mut String) {
    out.clear();
    // most texts are NFC already (the normalize stage made them so): a quick check of their
    // non-ASCII runs, then the characters as they are, skips decomposing and recomposing them
    if how.nfc && clean::quick_check(text, clean::Form::Nfc) != IsNormalized::Yes {
        let mut pending_space = false;
        for c in text.nfc() {
            push_char(c, how, out, &mut pending_space);
        }
    } else {
        push_text(text, how, out);
    }
}

/// What [`push_char`] does with an ASCII byte: 0 keep, 1 whitespace (`char::is_whitespace`: tab,
/// LF, VT, FF, CR, space), 2 punctuation.
const ASCII_CLASS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        t[b] = match b as u8 {
            b'\t'..=b'\r' | b' ' => 1,
            c if c.is_ascii_punctuation() => 2,
            _ => 0,
        };
        b += 1;
    }
    t
};

/// [`push_char`] over every character of `text`, ASCII bytes without decoding them: a run of ASCII
/// bytes that are written as they are (lower-cased) is copied at once.
fn push_text(text: &str, how: Normalization, out: &mut String) {
    let b = text.as_bytes();
    // per byte: an ASCII byte written as it is (lower-cased), not dropped or held back
    let mut plain = [false; 256];
    for (c, p) in plain.iter_mut().enumerate().take(128) {
        *p = match ASCII_CLASS[c] {
            1 => !how.collapse_whitespace,
            2 => !how.strip_punctuation,
            _ => true,
        };
    }
    out.reserve(b.len());
    let mut pending_space = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if plain[c as usize] {
            let start = i;
            i += 1;
            loop {
                if i < b.len() && plain[b[i] as usize] {
                    i += 1;
                } else if how.collapse_whitespace
                    && b.get(i) == Some(&b' ')
                    && b.get(i + 1).is_some_and(|&d| d != b' ' && plain[d as usize])
                {
                    i += 2; // one space between written bytes is written as it is
                } else {
                    break;
                }
            }
            if pending_space {
                out.push(' ');
                pending_space = false;
            }
            let at = out.len();
            out.push_str(&text[start..i]);
            if how.lowercase {
                out[at..].make_ascii_lowercase();
            }
            continue;
        }
        if c >= 0x80 {
            let ch = text[i..].chars().next().expect("a character starts here");
            i += ch.len_utf8();
            push_char(ch, how, out, &mut pending_space);
            continue;
        }
        i += 1;
        // not plain: punctuation that is stripped, or whitespace that is collapsed
        if ASCII_CLASS[c as usize] == 1 {
            pending_space = !out.is_empty();
        }
    }
}

/// One character of [`normalize`]: dropped (punctuation), held back (whitespace: one space is
/// written before the next kept character, none at the start or the end), or written (lower-cased).
#[inline]
fn push_char(c: char, how: Normalization, out: &mut String, pending_space: &mut bool) {
    if how.strip_punctuation && (c.is_ascii_punctuation() || is_unicode_punct(c)) {
        return;
    }
    if how.collapse_whitespace && c.is_whitespace() {
        *pending_space = !out.is_empty();
        return;
    }
    if *pending_space {
        out.push(' ');
        *pending_space = false;
    }
    if !how.lowercase {
        out.push(c);
    } else if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
    } else {
        out.extend(c.to_lowercase());
    }
}

fn is_unicode_punct(c: char) -> bool {
    matches!(c, '\u{2000}'..='\u{206F}' | '\u{3000}'..='\u{303F}' | '\u{FF01}'..='\u{FF0F}' | '¡' | '¿' | '«' | '»')
}

/// 128-bit content hash (xxh3-128) of a text, normalised first.
pub fn content_hash(text: &str, how: Normalization, seed: u64) -> u128 {
    thread_local! {
        static NORMED: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    NORMED.with(|buf| {
        let mut buf = buf.borrow_mut();
        normalize_into(text, how, &mut buf);
        let h = xxh3_128_with_seed(buf.as_bytes(), seed);
        if buf.capacity() > 1 << 24 {
            *buf = String::new(); // one huge document does not keep its buffer for the thread's life
        }
        h
    })
}

/// [`content_hash`] of every text, in parallel: `16 * texts.len()` little-endian bytes.
pub fn content_hashes(texts: &[&str], how: Normalization, seed: u64) -> Vec<u8> {
    use rayon::prelude::*;
    let hashes: Vec<[u8; 16]> = texts.par_iter().map(|t| content_hash(t, how, seed).to_le_bytes()).collect();
    hashes.concat()
}

/// 128-bit hash of raw bytes.
pub fn hash128(bytes: &[u8], seed: u64) -> u128 {
    xxh3_128_with_seed(bytes, seed)
}

/// Whitespace exactly as Python's `str.split()` sees it: Unicode White_Space plus the ASCII
/// information separators U+001C..U+001F.
#[inline]
pub fn is_split_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// A deterministic xorshift64 generator for the randomized tests of the workspace's crates (their
/// inputs, not anything that needs good randomness).
#[derive(Clone, Debug)]
pub struct TestRng(u64);

impl TestRng {
    /// A generator from a non-zero seed.
    pub fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "xorshift needs a non-zero seed");
        TestRng(seed)
    }

    /// The next 64 bits.
    pub fn bits(&mut self) -> u64 {
        let x = &mut self.0;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// A number in `0..m`.
    pub fn below(&mut self, m: usize) -> usize {
        (self.bits() % m as u64) as usize
    }
}

/// Byte classes for [`count_words`]: 0 = not whitespace (or a byte inside a character), 1 = ASCII
/// whitespace, 2 = the first byte of a character that may be Unicode whitespace (U+0085, U+00A0,
/// U+1680, U+2000-U+205F, U+3000 start with C2, E1, E2 or E3).
const WORD_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            b' ' | b'\t'..=b'\r' | 0x1c..=0x1f => 1,
            0xc2 | 0xe1 | 0xe2 | 0xe3 => 2,
            _ => 0,
        };
        b += 1;
    }
    t
};

/// Number of whitespace-separated words, equal to `len(text.split())` in Python.
pub fn count_words(text: &str) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if text.len() >= 32 && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is available (checked just above).
        return unsafe { count_words_avx2(text) };
    }
    count_span(text, 0, text.len(), 0, 1).1
}

/// Count words of `text[i..end]` given whether the byte before `i` ended in whitespace
/// (`prev_space`); returns (where it stopped, words so far, prev_space). Steps over whole characters
/// where a character may be whitespace, so it can stop past `end`. `i` may be inside a character
/// (its bytes are never whitespace).
#[inline]
fn count_span(text: &str, mut i: usize, end: usize, mut n: u32, mut prev_space: u32) -> (usize, u32, u32) {
    let bytes = text.as_bytes();
    while i < end {
        let class = WORD_CLASS[bytes[i] as usize];
        let (space, step) = if class == 2 {
            // a lead byte, so a character boundary
            let c = text[i..].chars().next().unwrap_or(' ');
            (u32::from(is_split_whitespace(c)), c.len_utf8())
        } else {
            (u32::from(class), 1)
        };
        n += (space ^ 1) & prev_space; // a word starts where a non-space follows a space
        prev_space = space;
        i += step;
    }
    (i, n, prev_space)
}

/// The bytes of `v` in `lo..=hi`, as a byte mask.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn bytes_in(v: std::arch::x86_64::__m256i, lo: u8, hi: u8) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    _mm256_and_si256(
        _mm256_cmpeq_epi8(_mm256_max_epu8(v, _mm256_set1_epi8(lo as i8)), v),
        _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(hi as i8)), v),
    )
}

/// The 32 bytes of `b` at `i` and the bitmap of their ASCII whitespace (three compares), or `None`
/// when one of them may start a Unicode whitespace character (C2, E1-E3: U+0085, U+00A0, U+1680,
/// U+2000-U+205F, U+3000), which the callers then read one character at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn space_block(b: &[u8], i: usize) -> Option<(std::arch::x86_64::__m256i, u32)> {
    use std::arch::x86_64::*;
    let block: &[u8; 32] = b[i..i + 32].try_into().expect("32 bytes");
    // SAFETY: a 32-byte array, unaligned load.
    let v = unsafe { _mm256_loadu_si256(block.as_ptr().cast()) };
    let lead = _mm256_or_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(0xc2u8 as i8)), bytes_in(v, 0xe1, 0xe3));
    if _mm256_movemask_epi8(lead) != 0 {
        return None;
    }
    let space = _mm256_or_si256(
        _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b' ' as i8)),
        _mm256_or_si256(bytes_in(v, b'\t', b'\r'), bytes_in(v, 0x1c, 0x1f)),
    );
    Some((v, _mm256_movemask_epi8(space) as u32))
}

/// [`count_words`] 32 bytes at a time: word starts are the non-space bits of a [`space_block`] after
/// a space bit. Other blocks go through [`count_span`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn count_words_avx2(text: &str) -> u32 {
    let b = text.as_bytes();
    let (mut i, mut n, mut prev) = (0usize, 0u32, 1u32);
    while i + 32 <= b.len() {
        let Some((_, m)) = space_block(b, i) else {
            (i, n, prev) = count_span(text, i, i + 32, n, prev);
            continue;
        };
        n += (!m & ((m << 1) | prev)).count_ones();
        prev = m >> 31;
        i += 32;
    }
    count_span(text, i, b.len(), n, prev).1
}

/// Where [`for_each_word`] is: the current word's start, whether it is in one, and whether the word
/// has a byte other than an ASCII letter so far.
struct WordScan {
    start: usize,
    in_word: bool,
    other: bool,
}

/// `f(word, letters)` for each piece of Python's `text.split()`, in order (runs of characters that
/// are not [`is_split_whitespace`]); `letters` says the word is all ASCII letters, which most words
/// of English are and which callers test first.
#[inline]
pub fn for_each_word<'a>(text: &'a str, mut f: impl FnMut(&'a str, bool)) {
    let mut st = WordScan { start: 0, in_word: false, other: false };
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    if text.len() >= 32 && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is available (checked just above).
        i = unsafe { words_avx2(text, &mut st, &mut f) };
    }
    scan_words(text, i, text.len(), &mut st, &mut f);
    if st.in_word {
        f(&text[st.start..], !st.other);
    }
}

/// [`for_each_word`] over `text[i..end]` one byte (or one possibly-whitespace character) at a time;
/// returns where it stopped, past `end` when a character crosses it. `i` may be inside a character.
#[inline]
fn scan_words<'a>(
    text: &'a str,
    mut i: usize,
    end: usize,
    st: &mut WordScan,
    f: &mut impl FnMut(&'a str, bool),
) -> usize {
    let b = text.as_bytes();
    while i < end {
        let c = b[i];
        let (space, step) = match WORD_CLASS[c as usize] {
            1 => (true, 1),
            // a lead byte, so a character boundary
            2 => text[i..].chars().next().map_or((false, 1), |ch| (is_split_whitespace(ch), ch.len_utf8())),
            _ => (false, 1),
        };
        if space {
            if st.in_word {
                f(&text[st.start..i], !st.other);
                st.in_word = false;
            }
        } else {
            let other = !c.is_ascii_alphabetic();
            if st.in_word {
                st.other |= other;
            } else {
                *st = WordScan { start: i, in_word: true, other };
            }
        }
        i += step;
    }
    i
}

/// [`for_each_word`] 32 bytes at a time: in a [`space_block`], two more compares give the ASCII
/// letters, and the words' ends are found with bit scans. Other blocks go through [`scan_words`].
/// Returns where the blocks ended (fewer than 32 bytes before the end).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn words_avx2<'a>(text: &'a str, st: &mut WordScan, f: &mut impl FnMut(&'a str, bool)) -> usize {
    use std::arch::x86_64::*;
    let b = text.as_bytes();
    let mut i = 0usize;
    while i + 32 <= b.len() {
        let Some((v, space)) = space_block(b, i) else {
            i = scan_words(text, i, i + 32, st, f);
            continue;
        };
        let letter = bytes_in(_mm256_or_si256(v, _mm256_set1_epi8(0x20)), b'a', b'z');
        let m = space as u64;
        let other = !(_mm256_movemask_epi8(letter) as u32 as u64 | m) & 0xFFFF_FFFF;
        let mut p = 0u32; // the next bit of the block to look at
        loop {
            if st.in_word {
                let ends = m >> p << p;
                if ends == 0 {
                    st.other |= other >> p != 0;
                    break;
                }
                let e = ends.trailing_zeros();
                st.other |= (other & ((1 << e) - 1)) >> p != 0;
                f(&text[st.start..i + e as usize], !st.other);
                st.in_word = false;
                p = e;
            } else {
                let starts = (!m & 0xFFFF_FFFF) >> p << p;
                if starts == 0 {
                    break;
                }
                p = starts.trailing_zeros();
                *st = WordScan { start: i + p as usize, in_word: true, other: false };
            }
        }
        i += 32;
    }
    i
}

/// The byte range of each string of an Arrow string column (its int64 offsets, over a data buffer of
/// `len` bytes), in order; offsets out of range are an error naming the row.
pub fn arrow_ranges(
    offsets: &[i64],
    len: usize,
) -> impl Iterator<Item = Result<std::ops::Range<usize>, String>> + '_ {
    offsets.windows(2).enumerate().map(move |(row, w)| {
        let (s, e) = (w[0], w[1]);
        if s < 0 || e < s || e as usize > len {
            return Err(format!("row {row}: string offsets out of range: {s}..{e}"));
        }
        Ok(s as usize..e as usize)
    })
}

/// The strings of an Arrow string column given as its int64 offsets and data buffer, in order.
/// Offsets out of range, or a string that is not valid UTF-8, is an error naming the row.
pub fn arrow_strs<'a>(
    offsets: &'a [i64],
    data: &'a [u8],
) -> impl Iterator<Item = Result<&'a str, String>> + 'a {
    arrow_ranges(offsets, data.len()).enumerate().map(move |(row, r)| {
        let bytes = &data[r?];
        // SIMD validation; std's only to describe an error
        simdutf8::basic::from_utf8(bytes).map_err(|_| match std::str::from_utf8(bytes) {
            Err(err) => format!("row {row}: text is not valid UTF-8: {err}"),
            Ok(_) => format!("row {row}: text is not valid UTF-8"),
        })
    })
}

/// Word counts of an Arrow string column given as its offsets and data buffer (one call per batch).
pub fn count_words_arrow(offsets: &[i64], data: &[u8]) -> Result<Vec<u32>, String> {
    arrow_strs(offsets, data).map(|t| t.map(count_words)).collect()
}

/// The byte length of the first `n` characters of `b`: where Arrow's `utf8_slice_codeunits(0, n)`
/// ends. Characters are counted by their lead bytes (every byte but 0x80-0xBF), 64 bytes at a time
/// while a block cannot hold the end, so any bytes give an answer (valid UTF-8 the one Arrow gives).
pub fn prefix_len(b: &[u8], n: usize) -> usize {
    if b.len() <= n {
        return b.len(); // a character takes at least one byte
    }
    let lead = |x: &u8| (*x as i8) >= -64;
    let (mut chars, mut i) = (0usize, 0usize);
    while i + 64 <= b.len() {
        let c = b[i..i + 64].iter().filter(|x| lead(x)).count();
        if chars + c > n {
            break;
        }
        chars += c;
        i += 64;
    }
    while i < b.len() {
        if lead(&b[i]) {
            if chars == n {
                return i; // the lead byte of character n + 1
            }
            chars += 1;
        }
        i += 1;
    }
    b.len()
}

/// For each string of an Arrow string column (int64 offsets and data buffer): the byte range of its
/// first `n` characters ([`prefix_len`]). Offsets out of range are an error naming the row.
pub fn prefix_ranges(offsets: &[i64], data: &[u8], n: usize) -> Result<Vec<(usize, usize)>, String> {
    arrow_ranges(offsets, data.len())
        .map(|r| r.map(|r| (r.start, r.start + prefix_len(&data[r], n))))
        .collect()
}

/// How many bytes of `data` equal `byte` (a newline count of a file block: the compiler turns the
/// loop into vector compares, many times `bytes.count` in Python).
pub fn count_byte(data: &[u8], byte: u8) -> usize {
    data.chunks(4096).map(|c| c.iter().fold(0u32, |n, &b| n + u32::from(b == byte)) as usize).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_len_ends_where_the_nth_character_does() {
        let mut rng = TestRng::new(7);
        let alphabet = ["a", " ", "é", "ж", "中", "😀", "\n"];
        for _ in 0..400 {
            let len = rng.below(300);
            let s: String = (0..len).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            for n in [0, 1, 2, 63, 64, 65, 100, 127, 128, 250, 400] {
                let want = s.char_indices().nth(n).map_or(s.len(), |(i, _)| i);
                assert_eq!(prefix_len(s.as_bytes(), n), want, "{s:?} {n}");
            }
        }
        let ranges = prefix_ranges(&[0, 3, 3, 8], "abcdéfg".as_bytes(), 2).unwrap(); // "abc", "", "défg"
        assert_eq!(ranges, vec![(0, 2), (3, 3), (3, 6)]);
        assert!(prefix_ranges(&[0, 20], b"abc", 2).unwrap_err().contains("row 0"));
    }

    #[test]
    fn count_byte_counts_across_blocks() {
        let data: Vec<u8> = (0..10_000u32).map(|i| if i % 7 == 0 { b'\n' } else { b'x' }).collect();
        assert_eq!(count_byte(&data, b'\n'), data.iter().filter(|&&b| b == b'\n').count());
        assert_eq!(count_byte(&data[1..6], b'\n'), 0);
        assert_eq!(count_byte(b"", b'\n'), 0);
    }

    #[test]
    fn normalisation_collapses_case_and_space() {
        let how = Normalization::default();
        assert_eq!(normalize("  Hello\t\tWORLD \n", how), "hello world");
        assert_eq!(normalize("", how), "");
    }

    #[test]
    fn nfc_makes_composed_and_decomposed_equal() {
        let how = Normalization::default();
        assert_eq!(content_hash("caf\u{e9}", how, 0), content_hash("cafe\u{301}", how, 0));
        assert_ne!(content_hash("cafe", how, 0), content_hash("caf\u{e9}", how, 0));
    }

    /// Normalisation character by character, every character decoded: the oracle of the fast paths.
    fn plain(chars: impl Iterator<Item = char>, how: Normalization) -> String {
        let mut out = String::new();
        let mut pending_space = false;
        for c in chars {
            push_char(c, how, &mut out, &mut pending_space);
        }
        out
    }

    #[test]
    fn fast_paths_are_the_plain_loop() {
        // random texts over ASCII of every class (all 128 bytes) and characters that change under
        // each option (Unicode spaces and punctuation, upper case with multi-character lower case,
        // combining marks that NFC composes), under every option
        let pool: Vec<char> = (0u8..128)
            .map(char::from)
            .chain("\u{85}\u{a0}\u{3000}\u{2003}\u{ff01}\u{bf}\u{ab}\u{130}\u{c9}\u{301}\u{e9}\u{1e9e}\u{4e2d}\u{1f600}".chars())
            .collect();
        let mut rng = TestRng::new(0x9E37_79B9_7F4A_7C15);
        let mut next = move |m: usize| rng.below(m);
        // and texts NFC skips the decompose/recompose pass for, or not (combining marks, Hangul
        // jamo, a mark after ASCII)
        let fixed = [
            "Plain ASCII, Mixed CASE\t and  spaces.\n",
            "caf\u{e9} na\u{ef}ve \u{130}stanbul \u{3a3}\u{391}\u{39b}",
            "cafe\u{301} A\u{30a}ngstr\u{f6}m \u{1100}\u{1161}\u{11a8} q\u{307}\u{323}",
            "\u{212b} \u{2126} \u{fb01} \u{2000}x\u{3000}y\u{ff01}",
            "",
        ];
        let random = (0..3000).map(|_| (0..next(40)).map(|_| pool[next(pool.len())]).collect::<String>());
        for t in fixed.into_iter().map(String::from).chain(random) {
            for bits in 0..16u8 {
                let how = Normalization {
                    nfc: bits & 1 != 0,
                    lowercase: bits & 2 != 0,
                    collapse_whitespace: bits & 4 != 0,
                    strip_punctuation: bits & 8 != 0,
                };
                let want = if how.nfc { plain(t.nfc(), how) } else { plain(t.chars(), how) };
                assert_eq!(normalize(&t, how), want, "{t:?} {how:?}");
                assert_eq!(content_hash(&t, how, 7), xxh3_128_with_seed(want.as_bytes(), 7));
            }
        }
    }

    #[test]
    fn punctuation_stripping_is_optional() {
        let mut how = Normalization::default();
        assert_eq!(normalize("a, b!", how), "a, b!");
        how.strip_punctuation = true;
        assert_eq!(normalize("a, b!", how), "a b");
    }

    #[test]
    fn word_counts_match_python_str_split() {
        // expected values are len(s.split()) in CPython 3.11
        for (s, want) in [
            ("", 0),
            ("   ", 0),
            ("a", 1),
            (" a  b\tc\n", 3),
            ("a\u{a0}b\u{3000}c", 3),
            ("x\u{1c}y\u{1f}z", 3),
            ("caf\u{e9} na\u{ef}ve", 2),
            ("\u{200b}", 1), // zero-width space is not whitespace for Python either
        ] {
            assert_eq!(count_words(s), want, "{s:?}");
        }
    }

    #[test]
    fn every_path_splits_and_counts_like_split() {
        // whitespace of every kind (and look-alikes) at every offset around the 32-byte blocks
        let python_split = |s: &str| -> Vec<(String, bool)> {
            s.split(is_split_whitespace)
                .filter(|w| !w.is_empty())
                .map(|w| (w.to_string(), w.bytes().all(|c| c.is_ascii_alphabetic())))
                .collect()
        };
        let words = |s: &str| {
            let mut out = Vec::new();
            for_each_word(s, |w, letters| out.push((w.to_string(), letters)));
            // the same from the byte-at-a-time path alone
            let mut one = Vec::new();
            let mut st = WordScan { start: 0, in_word: false, other: false };
            scan_words(s, 0, s.len(), &mut st, &mut |w, letters| one.push((w.to_string(), letters)));
            if st.in_word {
                one.push((s[st.start..].to_string(), !st.other));
            }
            assert_eq!(out, one, "{s:?}");
            out
        };
        let pieces = [
            " ",
            "\t",
            "\n",
            "\r",
            "\u{b}",
            "\u{1c}",
            "\u{1f}",
            "\u{85}",
            "\u{a0}",
            "\u{1680}",
            "\u{2003}",
            "\u{202f}",
            "\u{3000}",
            "\u{200b}",
            "\u{e9}",
            "\u{4e2d}",
            "\u{1F600}",
            "ab",
            "Zz",
            "@",
            "[",
            "`",
            "{",
            "7",
            "-",
        ];
        let mut rng = TestRng::new(7);
        for a in pieces {
            for b in pieces {
                for at in 0..70 {
                    let mut s = "x".repeat(at);
                    s.push_str(a);
                    s.push_str(&"y ".repeat(at % 7));
                    s.push_str(b);
                    s.push_str(&"z".repeat(40 + at % 3));
                    let want = python_split(&s);
                    assert_eq!(words(&s), want, "{s:?}");
                    assert_eq!(count_words(&s) as usize, want.len(), "{s:?}");
                    assert_eq!(count_span(&s, 0, s.len(), 0, 1).1 as usize, want.len(), "{s:?}");
                }
            }
        }
        // random mixtures of every piece, long enough for many blocks
        for _ in 0..2000 {
            let n = rng.below(200);
            let s: String = (0..n).map(|_| pieces[rng.below(pieces.len())]).collect();
            let want = python_split(&s);
            assert_eq!(words(&s), want, "{s:?}");
            assert_eq!(count_words(&s) as usize, want.len(), "{s:?}");
        }
    }

    #[test]
    fn arrow_buffers_are_checked() {
        let data = b"ab cd e";
        assert_eq!(count_words_arrow(&[0, 5, 7], data).unwrap(), vec![2, 1]);
        assert!(count_words_arrow(&[0, 9], data).is_err());
    }
}

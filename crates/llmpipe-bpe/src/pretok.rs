//! Hand-written pre-tokenizers for the three built-in patterns (gpt2, cl100k, o200k).
//!
//! Each scanner returns exactly the pieces that the regex in `pattern.rs` gives through
//! fancy-regex (leftmost-first alternation with backtracking semantics), in one pass over the
//! characters. The Unicode classes (`\p{L}`, `\p{Lu}`, ..., `\p{M}`, `\p{N}`, `\s`) are read at
//! first use from `regex-syntax`, the crate the regex engine itself compiles them with, so both
//! sides use the same Unicode version. ASCII goes through a 128-entry table. The equivalence with
//! the regex is checked by the tests at the bottom of this file, by `tests/pretok_equivalence.rs`
//! and by `tests/test_tokenizer_pretok.py`.

use std::sync::OnceLock;

// Character categories: exclusive, one per code point.
const OTHER: u8 = 0;
const LU: u8 = 1;
const LL: u8 = 2;
const LT: u8 = 3;
const LM: u8 = 4;
const LO: u8 = 5;
const MARK: u8 = 6;
const NUM: u8 = 7;
const WS: u8 = 8;
/// Past the end of the text: in no class.
const END: u8 = 9;

const fn bit(c: u8) -> u16 {
    1 << c
}
/// `\p{L}`
const M_L: u16 = bit(LU) | bit(LL) | bit(LT) | bit(LM) | bit(LO);
/// `\p{N}`
const M_N: u16 = bit(NUM);
/// `[^\s\p{L}\p{N}]`
const M_O: u16 = bit(OTHER) | bit(MARK);
/// `[^\p{L}\p{N}]` (the prefix class, less `\r` and `\n` which are checked by value)
const M_PRE: u16 = bit(OTHER) | bit(MARK) | bit(WS);
/// o200k's `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`
const M_UP: u16 = bit(LU) | bit(LT) | bit(LM) | bit(LO) | bit(MARK);
/// o200k's `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`
const M_LOW: u16 = bit(LL) | bit(LM) | bit(LO) | bit(MARK);
const M_WS: u16 = bit(WS);

const BLOCK: usize = 128;

/// Two-level table: code point -> category.
struct Tables {
    index: Vec<u16>,
    blocks: Vec<[u8; BLOCK]>,
    ascii: [u8; 128],
}

fn class_ranges(src: &str) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{Class, HirKind};
    let hir = regex_syntax::parse(src).expect("built-in Unicode class");
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => {
            c.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect()
        }
        other => panic!("{src} is not a Unicode class: {other:?}"),
    }
}

fn build_tables() -> Tables {
    let mut flat = vec![OTHER; 0x110000];
    for (src, cat) in [
        (r"\p{Lu}", LU),
        (r"\p{Ll}", LL),
        (r"\p{Lt}", LT),
        (r"\p{Lm}", LM),
        (r"\p{Lo}", LO),
        (r"\p{M}", MARK),
        (r"\p{N}", NUM),
        (r"\s", WS),
    ] {
        for (a, b) in class_ranges(src) {
            for c in a..=b {
                // The general categories are disjoint, and White_Space holds no letter, mark or number.
                assert_eq!(flat[c as usize], OTHER, "U+{c:04X} is in two classes");
                flat[c as usize] = cat;
            }
        }
    }
    let mut index = Vec::with_capacity(flat.len() / BLOCK);
    let mut blocks: Vec<[u8; BLOCK]> = Vec::new();
    let mut seen: ahash::AHashMap<[u8; BLOCK], u16> = ahash::AHashMap::new();
    for chunk in flat.chunks_exact(BLOCK) {
        let blk: [u8; BLOCK] = chunk.try_into().expect("block");
        let id = *seen.entry(blk).or_insert_with(|| {
            blocks.push(blk);
            (blocks.len() - 1) as u16
        });
        index.push(id);
    }
    let mut ascii = [OTHER; 128];
    ascii.copy_from_slice(&flat[..128]);
    Tables { index, blocks, ascii }
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(build_tables)
}

/// Which built-in pattern a scanner implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    Gpt2,
    Cl100k,
    O200k,
}

/// Simple case folding for the letters of the contractions (what `(?i:...)` matches):
/// `ſ` (U+017F) folds to `s` and the Kelvin sign to `k`; ASCII upper case to lower.
#[inline]
fn fold(c: u32) -> u32 {
    match c {
        0x41..=0x5A => c + 32,
        0x17F => 's' as u32,
        0x212A => 'k' as u32,
        _ => c,
    }
}

/// A cursor over the bytes of a `str`.
struct Scan<'a> {
    s: &'a [u8],
    t: &'static Tables,
}

impl Scan<'_> {
    /// (category, char, byte length) at byte `i`; `END` past the end.
    #[inline(always)]
    fn at(&self, i: usize) -> (u8, u32, usize) {
        let Some(&b0) = self.s.get(i) else {
            return (END, u32::MAX, 0);
        };
        if b0 < 0x80 {
            return (self.t.ascii[b0 as usize], b0 as u32, 1);
        }
        let s = self.s;
        let (c, len) = if b0 < 0xE0 {
            (((b0 as u32 & 0x1F) << 6) | (s[i + 1] as u32 & 0x3F), 2)
        } else if b0 < 0xF0 {
            (((b0 as u32 & 0x0F) << 12) | ((s[i + 1] as u32 & 0x3F) << 6) | (s[i + 2] as u32 & 0x3F), 3)
        } else {
            (
                ((b0 as u32 & 0x07) << 18)
                    | ((s[i + 1] as u32 & 0x3F) << 12)
                    | ((s[i + 2] as u32 & 0x3F) << 6)
                    | (s[i + 3] as u32 & 0x3F),
                4,
            )
        };
        let blk = self.t.index[(c as usize) / BLOCK] as usize;
        (self.t.blocks[blk][(c as usize) % BLOCK], c, len)
    }

    #[inline(always)]
    fn is(&self, i: usize, mask: u16) -> bool {
        bit(self.at(i).0) & mask != 0
    }

    /// End of the maximal run of characters in `mask` starting at `i`.
    #[inline(always)]
    fn run(&self, mut i: usize, mask: u16) -> usize {
        loop {
            let (k, _, l) = self.at(i);
            if bit(k) & mask == 0 {
                return i;
            }
            i += l;
        }
    }

    /// End of the run of `\r`, `\n` (and `/` when `slash`) starting at `i`.
    #[inline(always)]
    fn run_crlf(&self, mut i: usize, slash: bool) -> usize {
        while let Some(&b) = self.s.get(i) {
            if b == b'\r' || b == b'\n' || (slash && b == b'/') {
                i += 1;
            } else {
                break;
            }
        }
        i
    }

    /// Up to three `\p{N}` from `i` (the first is known to be one).
    #[inline(always)]
    fn digits3(&self, i: usize, l: usize) -> usize {
        let mut e = i + l;
        for _ in 0..2 {
            let (k, _, l) = self.at(e);
            if k != NUM {
                break;
            }
            e += l;
        }
        e
    }

    /// The whitespace run at `i` (its first char is whitespace): (end, start of its last char,
    /// end of its last `\r`/`\n` if any).
    #[inline(always)]
    fn ws_run(&self, i: usize) -> (usize, usize, Option<usize>) {
        let mut e = i;
        let mut last = i;
        let mut crlf = None;
        loop {
            let (k, c, l) = self.at(e);
            if k != WS {
                return (e, last, crlf);
            }
            if c == '\r' as u32 || c == '\n' as u32 {
                crlf = Some(e + 1);
            }
            last = e;
            e += l;
        }
    }

    /// `\s+(?!\S)|\s+` (and `\s` for cl100k, the same here) after the other whitespace alternatives.
    #[inline(always)]
    fn ws_tail(&self, i: usize, end: usize, last: usize) -> usize {
        if end == self.s.len() || last == i {
            end
        } else {
            last
        }
    }

    /// A contraction `'s|'t|'re|'ve|'m|'ll|'d` at `i` (which holds `'`): its end, if any.
    #[inline(always)]
    fn contraction(&self, i: usize, ci: bool) -> Option<usize> {
        let (_, c1, l1) = self.at(i + 1);
        let c1 = if ci { fold(c1) } else { c1 };
        let two = |want: char| -> Option<usize> {
            let (_, c2, l2) = self.at(i + 1 + l1);
            let c2 = if ci { fold(c2) } else { c2 };
            (c2 == want as u32).then_some(i + 1 + l1 + l2)
        };
        match char::from_u32(c1) {
            Some('s' | 't' | 'm' | 'd') => Some(i + 1 + l1),
            Some('r' | 'v') => two('e'),
            Some('l') => two('l'),
            _ => None,
        }
    }

    fn next_gpt2(&self, i: usize) -> usize {
        let (k, c, l) = self.at(i);
        if c == '\'' as u32 {
            if let Some(e) = self.contraction(i, false) {
                return e;
            }
        }
        if c == ' ' as u32 {
            // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+` with the space
            let (k1, _, l1) = self.at(i + 1);
            let m = bit(k1);
            for mask in [M_L, M_N, M_O] {
                if m & mask != 0 {
                    return self.run(i + 1 + l1, mask);
                }
            }
        }
        let m = bit(k);
        for mask in [M_L, M_N, M_O] {
            if m & mask != 0 {
                return self.run(i + l, mask);
            }
        }
        let (end, last, _) = self.ws_run(i);
        self.ws_tail(i, end, last)
    }

    fn next_cl100k(&self, i: usize) -> usize {
        let (k, c, l) = self.at(i);
        if c == '\'' as u32 {
            if let Some(e) = self.contraction(i, true) {
                return e;
            }
        }
        // [^\r\n\p{L}\p{N}]?+\p{L}++
        if bit(k) & M_L != 0 {
            return self.run(i + l, M_L);
        }
        if bit(k) & M_PRE != 0 && c != '\r' as u32 && c != '\n' as u32 {
            let (k1, _, l1) = self.at(i + l);
            if bit(k1) & M_L != 0 {
                return self.run(i + l + l1, M_L);
            }
        }
        // \p{N}{1,3}
        if k == NUM {
            return self.digits3(i, l);
        }
        // ` ?[^\s\p{L}\p{N}]++[\r\n]*+`
        if c == ' ' as u32 && self.is(i + 1, M_O) {
            return self.run_crlf(self.run(i + 1, M_O), false);
        }
        if bit(k) & M_O != 0 {
            return self.run_crlf(self.run(i + l, M_O), false);
        }
        // whitespace: `\s++$|\s*[\r\n]|\s+(?!\S)|\s`
        let (end, last, crlf) = self.ws_run(i);
        if end == self.s.len() {
            return end;
        }
        if let Some(e) = crlf {
            return e;
        }
        self.ws_tail(i, end, last)
    }

    /// o200k's `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+` from `j`, with
    /// backtracking: the end of the match, if any.
    #[inline(always)]
    fn upper_star_lower_plus(&self, j: usize) -> Option<usize> {
        let mut e = j;
        // end of the last char of the upper run that is also in the lower class
        let mut last_low = None;
        loop {
            let (k, _, l) = self.at(e);
            let m = bit(k);
            if m & M_UP == 0 {
                break;
            }
            e += l;
            if m & M_LOW != 0 {
                last_low = Some(e);
            }
        }
        if self.is(e, M_LOW) {
            return Some(self.run(e, M_LOW));
        }
        // Backtrack the upper run to its last char that is also lower: the lower run is that char.
        last_low
    }

    /// o200k's `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*` from `j`.
    #[inline(always)]
    fn upper_plus_lower_star(&self, j: usize) -> Option<usize> {
        let e = self.run(j, M_UP);
        (e > j).then(|| self.run(e, M_LOW))
    }

    /// o200k's optional `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `e`.
    #[inline(always)]
    fn suffix(&self, e: usize) -> usize {
        if self.s.get(e) == Some(&b'\'') {
            if let Some(x) = self.contraction(e, true) {
                return x;
            }
        }
        e
    }

    fn next_o200k(&self, i: usize) -> usize {
        let (k, c, l) = self.at(i);
        let pre = bit(k) & M_PRE != 0 && c != '\r' as u32 && c != '\n' as u32;
        if pre {
            if let Some(e) = self.upper_star_lower_plus(i + l) {
                return self.suffix(e);
            }
        }
        if let Some(e) = self.upper_star_lower_plus(i) {
            return self.suffix(e);
        }
        if pre {
            if let Some(e) = self.upper_plus_lower_star(i + l) {
                return self.suffix(e);
            }
        }
        if let Some(e) = self.upper_plus_lower_star(i) {
            return self.suffix(e);
        }
        if k == NUM {
            return self.digits3(i, l);
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
        if c == ' ' as u32 && self.is(i + 1, M_O) {
            return self.run_crlf(self.run(i + 1, M_O), true);
        }
        if bit(k) & M_O != 0 {
            return self.run_crlf(self.run(i + l, M_O), true);
        }
        // whitespace: `\s*[\r\n]+|\s+(?!\S)|\s+`
        debug_assert!(bit(k) & M_WS != 0);
        let (end, last, crlf) = self.ws_run(i);
        if let Some(e) = crlf {
            return e;
        }
        self.ws_tail(i, end, last)
    }
}

impl Builtin {
    /// The scanner for a pattern source, if it is one of the built-in patterns.
    pub fn for_source(src: &str) -> Option<Builtin> {
        use crate::pattern::{CL100K, CL100K_TIKTOKEN, GPT2, O200K};
        match src {
            GPT2 => Some(Builtin::Gpt2),
            CL100K | CL100K_TIKTOKEN => Some(Builtin::Cl100k),
            O200K => Some(Builtin::O200k),
            _ => None,
        }
    }

    /// Call `f` on every piece of `text`, in order.
    #[inline]
    pub fn for_each_piece<'t>(self, text: &'t str, mut f: impl FnMut(&'t str)) {
        let sc = Scan { s: text.as_bytes(), t: tables() };
        let n = text.len();
        let mut i = 0;
        while i < n {
            let e = match self {
                Builtin::Gpt2 => sc.next_gpt2(i),
                Builtin::Cl100k => sc.next_cl100k(i),
                Builtin::O200k => sc.next_o200k(i),
            };
            debug_assert!(e > i && text.is_char_boundary(e));
            f(&text[i..e]);
            i = e;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_agree_with_regex_classes() {
        let t = tables();
        let sc = Scan { s: b"", t };
        let classes: [(&str, u16); 8] = [
            (r"\p{L}", M_L),
            (r"\p{N}", M_N),
            (r"\s", M_WS),
            (r"[^\s\p{L}\p{N}]", M_O),
            (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", M_UP),
            (r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", M_LOW),
            (r"\p{Lu}", bit(LU)),
            (r"\p{M}", bit(MARK)),
        ];
        for (src, mask) in classes {
            let re = regex::Regex::new(&format!("^{src}$")).unwrap();
            for c in (0..0x110000u32).filter_map(char::from_u32) {
                let mut buf = [0u8; 4];
                let s = c.encode_utf8(&mut buf);
                let sc = Scan { s: s.as_bytes(), ..sc };
                assert_eq!(re.is_match(s), sc.is(0, mask), "{src} U+{:04X}", c as u32);
            }
        }
    }

    #[test]
    fn fold_matches_case_insensitive_regex() {
        for letter in ['s', 't', 'r', 'e', 'v', 'm', 'l', 'd'] {
            let re = regex::Regex::new(&format!("^(?i:{letter})$")).unwrap();
            for c in (0..0x110000u32).filter_map(char::from_u32) {
                let s = c.to_string();
                assert_eq!(re.is_match(&s), fold(c as u32) == letter as u32, "{letter} U+{:04X}", c as u32);
            }
        }
    }
}

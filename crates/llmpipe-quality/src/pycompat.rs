//! Python `str` semantics the datatrove filters rely on: `isspace`, `strip`, `split`, `splitlines`,
//! `isalpha`, `len` (code points). Porting them exactly is what makes the filters agree with datatrove.

use std::sync::OnceLock;

/// Python's `str.isspace` for one character (Unicode White_Space plus the ASCII separators 0x1c-0x1f).
#[inline]
pub fn is_space(c: char) -> bool {
    if c.is_ascii() {
        matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c' | '\x1c'..='\x1f')
    } else {
        c.is_whitespace()
    }
}

/// `s.strip()`.
#[inline]
pub fn strip(s: &str) -> &str {
    s.trim_matches(is_space)
}

/// `s.split()`: non-empty runs between whitespace.
pub fn split_ws(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_space).filter(|w| !w.is_empty())
}

/// `len(s)`: code points.
#[inline]
pub fn len(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.bytes().filter(|b| (b & 0xC0) != 0x80).count()
    }
}

/// `s.splitlines()` (no ends kept; `\r\n` is one break; no empty last line).
pub fn splitlines(s: &str) -> Vec<&str> {
    Lines::new(s).collect()
}

/// The lines of `s.splitlines()`, one at a time. The breaks are found byte by byte: the ASCII ones
/// (`\n \r \x0b \x0c \x1c \x1d \x1e`) by table, U+0085, U+2028 and U+2029 by their UTF-8 bytes
/// (`C2 85`, `E2 80 A8`, `E2 80 A9`: in valid UTF-8 a lead byte is never a continuation byte).
pub struct Lines<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Lines<'a> {
    pub fn new(s: &'a str) -> Self {
        Lines { s, at: 0 }
    }
}

const ASCII_BREAK: [bool; 256] = {
    let mut t = [false; 256];
    t[b'\n' as usize] = true;
    t[b'\r' as usize] = true;
    t[0x0b] = true;
    t[0x0c] = true;
    t[0x1c] = true;
    t[0x1d] = true;
    t[0x1e] = true;
    // lead bytes of the non-ASCII breaks: checked further below
    t[0xc2] = true;
    t[0xe2] = true;
    t
};

/// Where in the 8 bytes of `x` a line break may start (a byte below 0x1F, or the lead byte C2 or E2):
/// the first such byte, or 8 for none.
#[inline]
fn may_break_at(x: u64) -> usize {
    use llmpipe_text::swar::{any_below, any_eq};
    ((any_below(x, 0x1f) | any_eq(x, 0xc2) | any_eq(x, 0xe2)).trailing_zeros() / 8) as usize
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let b = self.s.as_bytes();
        let start = self.at;
        if start >= b.len() {
            return None;
        }
        let mut i = start;
        while i < b.len() {
            // eight bytes at a time while none of them can start a break (most of a line), then
            // straight to the first byte that may
            if let Some(chunk) = b.get(i..i + 8) {
                let at = may_break_at(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
                i += at;
                if at == 8 {
                    continue;
                }
            }
            let c = b[i];
            if ASCII_BREAK[c as usize] {
                let n = match c {
                    0xc2 => usize::from(b.get(i + 1) == Some(&0x85)) * 2,
                    0xe2 => {
                        usize::from(b.get(i + 1) == Some(&0x80) && matches!(b.get(i + 2), Some(0xa8 | 0xa9)))
                            * 3
                    }
                    b'\r' if b.get(i + 1) == Some(&b'\n') => 2,
                    _ => 1,
                };
                if n > 0 {
                    self.at = i + n;
                    return Some(&self.s[start..i]);
                }
            }
            i += 1;
        }
        self.at = b.len();
        Some(&self.s[start..])
    }
}

fn letter_re() -> &'static regex::Regex {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"^\p{L}$").expect("valid regex"))
}

fn punct_re() -> &'static regex::Regex {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"^\p{P}$").expect("valid regex"))
}

/// `c.isalpha()`: general category L*.
#[inline]
pub fn is_alpha(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphabetic()
    } else if !c.is_alphabetic() {
        false
    } else {
        let mut buf = [0u8; 4];
        letter_re().is_match(c.encode_utf8(&mut buf))
    }
}

/// Unicode general category P* (spaCy's `is_punct` checks every character of a token with it).
#[inline]
pub fn is_punct_category(c: char) -> bool {
    if c.is_ascii() {
        matches!(
            c,
            '!' | '"'
                | '#'
                | '%'
                | '&'
                | '\''
                | '('
                | ')'
                | '*'
                | ','
                | '-'
                | '.'
                | '/'
                | ':'
                | ';'
                | '?'
                | '@'
                | '['
                | '\\'
                | ']'
                | '_'
                | '{'
                | '}'
        )
    } else {
        let mut buf = [0u8; 4];
        punct_re().is_match(c.encode_utf8(&mut buf))
    }
}

/// Python's `str.count(sub)`: non-overlapping occurrences (memchr's SIMD search: `str::matches`
/// took 0.9% of a curate run's CPU for Gopher's two ellipsis counts).
#[inline]
pub fn count(s: &str, sub: &str) -> usize {
    if sub.is_empty() {
        return s.chars().count() + 1; // between every two characters and at both ends
    }
    memchr::memmem::find_iter(s.as_bytes(), sub.as_bytes()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitlines_like_python() {
        assert_eq!(splitlines("a\r\nb\rc\n\nd\n"), vec!["a", "b", "c", "", "d"]);
        assert!(splitlines("").is_empty());
        assert_eq!(splitlines("x\u{2028}y"), vec!["x", "y"]);
        let all = "a\u{85}b\u{2029}c\x1c\x1d\x1e\x0b\x0cd\r\r\ne\u{2027}\u{c5}f\n";
        assert_eq!(splitlines(all), vec!["a", "b", "c", "", "", "", "", "d", "", "e\u{2027}\u{c5}f"]);
        for (s, want) in [("\n", vec![""]), ("a\r", vec!["a"]), ("\r\n\r\n", vec!["", ""]), ("x", vec!["x"])]
        {
            assert_eq!(splitlines(s), want, "{s:?}");
        }
    }

    /// `s.splitlines()` character by character (the oracle of the byte scan).
    fn splitlines_by_char(s: &str) -> Vec<&str> {
        let (mut out, mut start) = (Vec::new(), 0);
        let mut it = s.char_indices().peekable();
        while let Some((i, c)) = it.next() {
            if matches!(
                c,
                '\n' | '\r' | '\x0b' | '\x0c' | '\x1c'..='\x1e' | '\u{85}' | '\u{2028}' | '\u{2029}'
            ) {
                out.push(&s[start..i]);
                start = i + c.len_utf8();
                if c == '\r' && it.peek().is_some_and(|&(_, d)| d == '\n') {
                    it.next();
                    start += 1;
                }
            }
        }
        if start < s.len() {
            out.push(&s[start..]);
        }
        out
    }

    #[test]
    fn splitlines_at_every_offset() {
        // breaks, near-breaks (tab, 0x1F, U+2027, other C2/E2 characters) and plain runs, at every
        // position of the 8-byte steps
        let pieces = [
            "a", "xyzw1234", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\t",
            "\u{85}", "\u{a0}", "\u{2028}", "\u{2029}", "\u{2027}", "\u{2019}", "é", "日本",
        ];
        let mut rng = llmpipe_text::TestRng::new(0x2545_F491_4F6C_DD1D);
        for _ in 0..5000 {
            let mut s = String::new();
            for _ in 0..rng.below(40) {
                let k = rng.below(100);
                s.push_str(pieces[if k < 60 { k % 2 } else { k % pieces.len() }]);
            }
            assert_eq!(splitlines(&s), splitlines_by_char(&s), "{s:?}");
        }
    }

    #[test]
    fn alpha_and_space() {
        assert!(is_alpha('é') && is_alpha('ж') && !is_alpha('1') && !is_alpha('\u{0941}'));
        assert!(is_space('\x1c') && is_space('\u{a0}') && !is_space('\u{200b}'));
        assert_eq!(len("héllo"), 5);
        assert_eq!(count("a...b....", "..."), 2);
    }

    #[test]
    fn count_is_pythons_str_count() {
        // non-overlapping, left to right, as str::matches; an empty needle as Python counts it
        let hay = ["", "a...b....", "......", "……x…", "aaaa", "é…é...…", "ab.a..b...", "…."];
        for h in hay {
            for sub in ["...", "…", "aa", ".", "é…", "x"] {
                assert_eq!(count(h, sub), h.matches(sub).count(), "{h:?} {sub:?}");
            }
        }
        assert_eq!(count("héllo", ""), 6);
        assert_eq!(count("", ""), 1);
    }
}

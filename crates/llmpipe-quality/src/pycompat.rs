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

#[inline]
fn is_line_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\x0b' | '\x0c' | '\x1c' | '\x1d' | '\x1e' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// `s.splitlines()` (no ends kept; `\r\n` is one break; no empty last line).
pub fn splitlines(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if is_line_break(c) {
            out.push(&s[start..i]);
            let mut next = i + c.len_utf8();
            if c == '\r' {
                if let Some(&(j, '\n')) = it.peek() {
                    it.next();
                    next = j + 1;
                }
            }
            start = next;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
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

/// Python's `str.count(sub)`: non-overlapping occurrences.
#[inline]
pub fn count(s: &str, sub: &str) -> usize {
    s.matches(sub).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitlines_like_python() {
        assert_eq!(splitlines("a\r\nb\rc\n\nd\n"), vec!["a", "b", "c", "", "d"]);
        assert!(splitlines("").is_empty());
        assert_eq!(splitlines("x\u{2028}y"), vec!["x", "y"]);
    }

    #[test]
    fn alpha_and_space() {
        assert!(is_alpha('é') && is_alpha('ж') && !is_alpha('1') && !is_alpha('\u{0941}'));
        assert!(is_space('\x1c') && is_space('\u{a0}') && !is_space('\u{200b}'));
        assert_eq!(len("héllo"), 5);
        assert_eq!(count("a...b....", "..."), 2);
    }
}

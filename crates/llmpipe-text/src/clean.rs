//! The `normalize` stage's text cleaning in one pass (it was five Arrow regex passes):
//!
//! 1. Unicode normalisation (NFC by default; text already in the form is not rebuilt);
//! 2. `\r\n` and lone `\r` become `\n`;
//! 3. control characters U+0000-0008, U+000B, U+000C, U+000E-001F, U+007F and U+FEFF are removed;
//! 4. spaces and tabs before a newline are removed;
//! 5. runs of three or more newlines become two;
//! 6. leading and trailing whitespace (Python's `str.isspace`, as Arrow's `utf8_trim_whitespace`)
//!    is trimmed.
//!
//! Equal, character for character, to the Arrow pipeline it replaces (tested against pyarrow).

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::{is_nfc_quick, is_nfd_quick, is_nfkc_quick, is_nfkd_quick, IsNormalized};

use crate::{arrow_strs, is_split_whitespace};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Nfc,
    Nfkc,
    Nfd,
    Nfkd,
}

impl Form {
    pub fn parse(s: &str) -> Option<Form> {
        Some(match s {
            "NFC" => Form::Nfc,
            "NFKC" => Form::Nfkc,
            "NFD" => Form::Nfd,
            "NFKD" => Form::Nfkd,
            _ => return None,
        })
    }
}

/// The quick check of `form` run only over the non-ASCII runs of `text`. Exact: ASCII characters
/// are always allowed and have combining class 0, which resets the check's state, so each run can
/// be checked on its own; most web text is a few non-ASCII characters among ASCII.
pub(crate) fn quick_check(text: &str, form: Form) -> IsNormalized {
    let b = text.as_bytes();
    let mut verdict = IsNormalized::Yes;
    let mut i = 0;
    while i < b.len() {
        if b[i] < 0x80 {
            i = skip_ascii(b, i);
            continue;
        }
        let s = i;
        while i < b.len() && b[i] >= 0x80 {
            i += 1;
        }
        let run = text[s..i].chars();
        match match form {
            Form::Nfc => is_nfc_quick(run),
            Form::Nfkc => is_nfkc_quick(run),
            Form::Nfd => is_nfd_quick(run),
            Form::Nfkd => is_nfkd_quick(run),
        } {
            IsNormalized::No => return IsNormalized::No,
            IsNormalized::Maybe => verdict = IsNormalized::Maybe,
            IsNormalized::Yes => {}
        }
    }
    verdict
}

/// The first index `>= i` holding a non-ASCII byte (or `b.len()`), eight bytes at a time.
#[inline]
fn skip_ascii(b: &[u8], mut i: usize) -> usize {
    while i + 8 <= b.len() {
        let w = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let high = w & 0x8080_8080_8080_8080;
        if high != 0 {
            return i + (high.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && b[i] < 0x80 {
        i += 1;
    }
    i
}

fn unicode_form(text: &str, form: Form) -> Cow<'_, str> {
    if quick_check(text, form) == IsNormalized::Yes {
        return Cow::Borrowed(text);
    }
    Cow::Owned(match form {
        Form::Nfc => text.nfc().collect(),
        Form::Nfkc => text.nfkc().collect(),
        Form::Nfd => text.nfd().collect(),
        Form::Nfkd => text.nfkd().collect(),
    })
}

/// Bytes copied as they are: everything but ASCII controls, space, DEL, and the BOM (EF BB BF).
#[inline(always)]
fn plain_at(b: &[u8], i: usize) -> bool {
    let c = b[i];
    c > 0x20 && c != 0x7f && !(c == 0xef && b.get(i + 1) == Some(&0xbb) && b.get(i + 2) == Some(&0xbf))
}

/// Are all 8 bytes of `x` spaces or bytes that [`plain_at`] keeps? (No byte below 0x20, no DEL, no
/// 0xEF.)
#[inline]
fn plain_or_space(x: u64) -> bool {
    use crate::swar::{any_below, any_eq};
    any_below(x, 0x20) | any_eq(x, 0x7f) | any_eq(x, 0xef) == 0
}

/// Clean `text` into `out` (appended); see the module docs.
pub fn clean_into(text: &str, form: Form, out: &mut String) {
    let text = unicode_form(text, form);
    let b = text.as_bytes();
    let start = out.len();
    let mut spaces = String::new(); // spaces/tabs not yet written (dropped before a newline)
    let mut newlines = 0usize; // newlines just written
    let mut i = 0;
    while i < b.len() {
        if plain_at(b, i) {
            // a run of bytes kept as they are; it starts and ends on character boundaries (it
            // stops only before ASCII bytes or a BOM's lead byte)
            let s = i;
            i += 1;
            loop {
                // eight bytes at a time while all are kept bytes or spaces, then back over the
                // spaces at the end (whether they stay depends on what follows them)
                let from = i;
                while let Some(chunk) = b.get(i..i + 8) {
                    if !plain_or_space(u64::from_le_bytes(chunk.try_into().expect("8 bytes"))) {
                        break;
                    }
                    i += 8;
                }
                while i > from && b[i - 1] == b' ' {
                    i -= 1;
                }
                while i < b.len() && plain_at(b, i) {
                    i += 1;
                }
                // spaces and tabs followed by a kept byte stay in the run (between words)
                let mut j = i;
                while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
                    j += 1;
                }
                if j > i && j < b.len() && plain_at(b, j) {
                    i = j;
                } else {
                    break;
                }
            }
            out.push_str(&spaces);
            spaces.clear();
            out.push_str(&text[s..i]);
            newlines = 0;
            continue;
        }
        match b[i] {
            b'\r' | b'\n' => {
                if b[i] == b'\r' && b.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                spaces.clear();
                if newlines < 2 {
                    out.push('\n');
                }
                newlines += 1;
            }
            c @ (b' ' | b'\t') => spaces.push(c as char),
            0xef => i += 2, // the BOM: removed (3 bytes)
            _ => {}         // other ASCII controls and DEL: removed
        }
        i += 1;
    }
    out.push_str(&spaces); // trailing spaces: trimmed below
                           // trim: leading and trailing whitespace of what was written
    let written = &out[start..];
    let trimmed = written.trim_matches(is_split_whitespace);
    if trimmed.len() != written.len() {
        let lead = written.len() - written.trim_start_matches(is_split_whitespace).len();
        let keep = trimmed.len();
        out.replace_range(start..start + lead, "");
        out.truncate(start + keep);
    }
}

/// Clean one text; see the module docs.
pub fn clean(text: &str, form: Form) -> String {
    let mut out = String::with_capacity(text.len());
    clean_into(text, form, &mut out);
    out
}

/// Clean an Arrow string column (int64 offsets + data): the new offsets and data, and the number
/// of rows that changed. One call per batch.
pub fn clean_arrow(offsets: &[i64], data: &[u8], form: Form) -> Result<(Vec<i64>, Vec<u8>, usize), String> {
    let mut out = String::with_capacity(data.len());
    let mut offs = Vec::with_capacity(offsets.len());
    offs.push(0i64);
    let mut changed = 0usize;
    for t in arrow_strs(offsets, data) {
        let t = t?;
        let at = out.len();
        clean_into(t, form, &mut out);
        changed += usize::from(&out[at..] != t);
        offs.push(out.len() as i64);
    }
    Ok((offs, out.into_bytes(), changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule() {
        let f = Form::Nfc;
        assert_eq!(clean("a\r\nb\rc", f), "a\nb\nc");
        assert_eq!(clean("a\u{0}b\u{7f}c\u{feff}d\u{1b}e", f), "abcde");
        assert_eq!(clean("a \t \nb  c\t", f), "a\nb  c");
        assert_eq!(clean("a\n\n\n\n\nb\n\nc", f), "a\n\nb\n\nc");
        assert_eq!(clean("a \n \n \nb", f), "a\n\nb");
        assert_eq!(clean("\u{3000} \n x \u{a0}\u{2029}", f), "x");
        assert_eq!(clean("e\u{301}", f), "\u{e9}");
        assert_eq!(clean("\r\r\n\r", f), "");
        assert_eq!(clean("a \r\nb", f), "a\nb");
        assert_eq!(clean("", f), "");
    }

    /// The module's rules one after another with plain string operations (the oracle of the scan).
    fn by_the_rules(t: &str) -> String {
        let t = t.replace("\r\n", "\n").replace('\r', "\n");
        let t: String = t
            .chars()
            .filter(|&c| !matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}' | '\u{feff}'))
            .collect();
        let t = t.split('\n').map(|l| l.trim_end_matches([' ', '\t'])).collect::<Vec<_>>().join("\n");
        let (mut out, mut newlines) = (String::new(), 0);
        for c in t.chars() {
            newlines = if c == '\n' { newlines + 1 } else { 0 };
            if newlines <= 2 {
                out.push(c);
            }
        }
        out.trim_matches(is_split_whitespace).to_string()
    }

    #[test]
    fn random_texts_follow_the_rules() {
        // long runs of words (the 8-byte steps), spaces and tabs at their ends, every removed
        // character, the BOM next to other EF-led characters, Unicode spaces
        let pieces = [
            "the quick brown fox ",
            "jumps",
            " ",
            "  ",
            "\t",
            "\n",
            "\r",
            "\r\n",
            "\u{0}",
            "\u{1}",
            "\u{1f}",
            "\u{7f}",
            "\u{feff}",
            "\u{ff0c}",
            "\u{fffd}",
            "é",
            "日本語",
            "\u{3000}",
            "\u{a0}",
            "x",
        ];
        let mut rng = crate::TestRng::new(0x2545_F491_4F6C_DD1D);
        for _ in 0..20_000 {
            let t: String = (0..rng.below(30)).map(|_| pieces[rng.below(pieces.len())]).collect();
            assert_eq!(clean(&t, Form::Nfc), by_the_rules(&t), "{t:?}");
        }
    }

    #[test]
    fn arrow_columns() {
        let data = b"a \nb\xc3\xa9\r\nfine";
        let (o, d, changed) = clean_arrow(&[0, 3, 8, 12], data, Form::Nfc).unwrap();
        assert_eq!(o, vec![0, 1, 4, 8]);
        assert_eq!(&d, b"ab\xc3\xa9fine");
        assert_eq!(changed, 2);
        assert!(clean_arrow(&[0, 2], b"\xff\xfe", Form::Nfc).is_err());
    }
}

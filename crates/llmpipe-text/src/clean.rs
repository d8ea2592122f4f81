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

use crate::is_split_whitespace;

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

fn unicode_form(text: &str, form: Form) -> Cow<'_, str> {
    if text.is_ascii() {
        return Cow::Borrowed(text);
    }
    let quick = match form {
        Form::Nfc => is_nfc_quick(text.chars()),
        Form::Nfkc => is_nfkc_quick(text.chars()),
        Form::Nfd => is_nfd_quick(text.chars()),
        Form::Nfkd => is_nfkd_quick(text.chars()),
    };
    if quick == IsNormalized::Yes {
        return Cow::Borrowed(text);
    }
    Cow::Owned(match form {
        Form::Nfc => text.nfc().collect(),
        Form::Nfkc => text.nfkc().collect(),
        Form::Nfd => text.nfd().collect(),
        Form::Nfkd => text.nfkd().collect(),
    })
}

#[inline]
fn is_removed_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}' | '\u{feff}')
}

/// Clean `text` into `out` (appended); see the module docs.
pub fn clean_into(text: &str, form: Form, out: &mut String) {
    let text = unicode_form(text, form);
    let start = out.len();
    let mut pending = 0usize; // spaces/tabs in `run`, not yet written (dropped before a newline)
    let mut run = String::new();
    let mut newlines = 0usize; // newlines just written
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let c = match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                '\n'
            }
            c if is_removed_control(c) => continue,
            c => c,
        };
        match c {
            ' ' | '\t' => {
                run.push(c);
                pending += 1;
            }
            '\n' => {
                run.clear();
                pending = 0;
                if newlines < 2 {
                    out.push('\n');
                }
                newlines += 1;
            }
            c => {
                if pending > 0 {
                    out.push_str(&run);
                    run.clear();
                    pending = 0;
                }
                out.push(c);
                newlines = 0;
            }
        }
    }
    out.push_str(&run); // trailing spaces: trimmed below
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
    for (row, w) in offsets.windows(2).enumerate() {
        let (s, e) = (w[0], w[1]);
        if s < 0 || e < s || e as usize > data.len() {
            return Err(format!("row {row}: string offsets out of range: {s}..{e}"));
        }
        let t = std::str::from_utf8(&data[s as usize..e as usize])
            .map_err(|err| format!("row {row}: text is not valid UTF-8: {err}"))?;
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

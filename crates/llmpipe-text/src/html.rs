//! How deep an HTML page's elements nest, estimated in one pass over its bytes.
//!
//! Main-content extraction takes time that grows with the square of the nesting depth (a page of
//! 20,000 nested `<div>` takes half a minute), so a page is measured before it is parsed. The scan
//! follows the HTML parser where it matters for depth: void elements and elements whose end tag is
//! optional (`p`, `li`, `td`, ...) never nest, the contents of `script`, `style`, `textarea`, ... are
//! text, a close tag closes every element opened after its match (and is ignored without one), a
//! self-closing tag closes only inside `svg`/`math`, comments and doctypes are skipped.

use memchr::{memchr, memmem};

const VOID: &[&[u8]] = &[
    b"area",
    b"base",
    b"basefont",
    b"bgsound",
    b"br",
    b"col",
    b"embed",
    b"frame",
    b"hr",
    b"image",
    b"img",
    b"input",
    b"keygen",
    b"link",
    b"menuitem",
    b"meta",
    b"param",
    b"source",
    b"track",
    b"wbr",
];
/// Closed by a sibling or their parent's end: they never nest in each other.
const OPTIONAL_END: &[&[u8]] = &[
    b"body",
    b"caption",
    b"colgroup",
    b"dd",
    b"dt",
    b"head",
    b"html",
    b"li",
    b"optgroup",
    b"option",
    b"p",
    b"rb",
    b"rp",
    b"rt",
    b"rtc",
    b"tbody",
    b"td",
    b"tfoot",
    b"th",
    b"thead",
    b"tr",
];
const RAW_TEXT: &[&[u8]] =
    &[b"iframe", b"noembed", b"noframes", b"script", b"style", b"textarea", b"title", b"xmp"];

/// The deepest nesting of elements in `html`; the scan stops once it passes `limit` (so the result
/// is at most `limit + 1`, and the time is linear in the page's length times `limit` at worst).
pub fn html_depth(html: &[u8], limit: usize) -> usize {
    let n = html.len();
    let mut stack: Vec<Vec<u8>> = Vec::new();
    let mut foreign = 0usize; // open svg/math elements
    let mut deepest = 0usize;
    let mut name = Vec::with_capacity(16);
    let mut i = 0;
    while let Some(off) = memchr(b'<', &html[i..]) {
        let mut j = i + off + 1;
        if j >= n {
            break;
        }
        if html[j..].starts_with(b"!--") {
            match memmem::find(&html[j + 3..], b"-->") {
                Some(e) => i = j + 3 + e + 3,
                None => break,
            }
            continue;
        }
        if html[j] == b'!' || html[j] == b'?' {
            match memchr(b'>', &html[j..]) {
                Some(e) => i = j + e + 1,
                None => break,
            }
            continue;
        }
        let close = html[j] == b'/';
        j += close as usize;
        let start = j;
        if j >= n || !html[j].is_ascii_alphabetic() {
            i = start; // a `<` in text
            continue;
        }
        while j < n && !matches!(html[j], b' ' | b'\t' | b'\n' | b'\r' | 0x0c | b'/' | b'>') {
            j += 1;
        }
        name.clear();
        name.extend(html[start..j].iter().map(|c| c.to_ascii_lowercase()));
        let Some(end) = tag_end(html, j) else { break };
        i = end + 1;
        let self_closing = html[end - 1] == b'/' && end > start;
        if close {
            if let Some(at) = stack.iter().rposition(|t| *t == name) {
                foreign -= stack[at..].iter().filter(|t| is_foreign(t)).count();
                stack.truncate(at);
            }
            continue;
        }
        let listed = |l: &[&[u8]]| l.contains(&name.as_slice());
        if (self_closing && foreign > 0) || listed(VOID) || listed(OPTIONAL_END) {
            continue;
        }
        if name == b"plaintext" {
            break;
        }
        if listed(RAW_TEXT) {
            match find_close(&html[i..], &name) {
                Some(e) => i += e,
                None => break,
            }
            continue;
        }
        foreign += is_foreign(&name) as usize;
        stack.push(name.clone());
        deepest = deepest.max(stack.len());
        if deepest > limit {
            break;
        }
    }
    deepest
}

fn is_foreign(name: &[u8]) -> bool {
    name == b"svg" || name == b"math"
}

/// The `>` that ends the tag whose name ends at `j` (quoted attribute values may hold `>`).
fn tag_end(html: &[u8], mut j: usize) -> Option<usize> {
    let mut quote = 0u8;
    while j < html.len() {
        let c = html[j];
        if quote != 0 {
            if c == quote {
                quote = 0;
            }
        } else if c == b'"' || c == b'\'' {
            // a quote opens a value only after `=` (possibly with spaces)
            let before = html[..j].iter().rev().find(|c| !c.is_ascii_whitespace());
            if before == Some(&b'=') {
                quote = c;
            }
        } else if c == b'>' {
            return Some(j);
        }
        j += 1;
    }
    None
}

/// Where `</name` starts in `rest` (case-insensitive).
fn find_close(rest: &[u8], name: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(off) = memmem::find(&rest[at..], b"</") {
        let s = at + off + 2;
        if rest.len() >= s + name.len() && rest[s..s + name.len()].eq_ignore_ascii_case(name) {
            return Some(at + off);
        }
        at = s;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::html_depth;

    #[test]
    fn depth_follows_the_parser() {
        assert_eq!(html_depth(b"", 100), 0);
        assert_eq!(html_depth(b"<html><body><div><span>x</span></div></body></html>", 100), 2);
        // unclosed p, li, td never nest; void elements never open
        assert_eq!(html_depth(&b"<p>a".repeat(5000), 100), 0);
        assert_eq!(html_depth(b"<ul><li>a<li>b<ul><li>c</ul></ul><br><img src=x>", 100), 2);
        // a close tag closes what was left open inside it
        assert_eq!(html_depth(&b"<div><span><b>x</div>".repeat(5000), 100), 3);
        // self-closing only counts inside svg; scripts, comments and attributes are text
        assert_eq!(
            html_depth(&[b"<svg>".as_slice(), &b"<path d='M0'/>".repeat(500), b"</svg>"].concat(), 100),
            1
        );
        assert_eq!(
            html_depth(
                b"<script>if (a<b) { '<div><div>' }</script><!-- <div><div> --><a title='>'>x</a>",
                100
            ),
            1
        );
        // a bomb stops the scan past the limit
        assert_eq!(html_depth(&b"<div>".repeat(100_000), 2000), 2001);
        assert_eq!(html_depth(&b"<div/>".repeat(3000), 2000), 2001);
    }
}

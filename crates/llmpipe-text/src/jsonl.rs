//! JSON Lines read a block of lines at a time: the reader's fast path.
//!
//! A block of whole lines becomes Arrow columns (text, id, metadata) of the lines that hold a plain
//! document, equal byte for byte to what llmpipe's Python reader makes of them: the id as Python's
//! `str(id)`, the metadata (every key but the text and id fields) as Python's
//! `json.dumps(meta, ensure_ascii=False, sort_keys=True)`. Any line this path is not sure about is
//! left to the Python reader (a [`Fallback`]): bytes that are not UTF-8, JSON it does not accept
//! (Python's `json` also takes `NaN`, `Infinity` and lone surrogate escapes), a value that is not an
//! object, a text that is missing, not a string or longer than `max_doc_bytes`, an id that is a list
//! or an object, a number Python would print as `Infinity` or not at all (over 4000 digits).
//! Blank lines (only ASCII whitespace, as Python's `bytes.strip`) hold nothing and are skipped.

/// How lines are read.
#[derive(Clone, Copy, Debug)]
pub struct Fields<'a> {
    /// The key of the document's text.
    pub text: &'a str,
    /// The key of the document's id.
    pub id: &'a str,
    /// Written before every id (`"<source>/"`).
    pub id_prefix: &'a str,
    /// Lines before the block: a line's position is `first` plus its index in the block.
    pub first: i64,
    /// A longer text (UTF-8 bytes) is left to the Python reader (which quarantines it).
    pub max_doc_bytes: usize,
    /// A longer line (without its newline) is left to the Python reader.
    pub max_line_bytes: usize,
}

/// A line the fast path leaves to the Python reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fallback {
    /// Its index in the block.
    pub line: usize,
    /// Its bytes in the block, newline included.
    pub start: usize,
    pub end: usize,
    /// Documents of the block on the lines before it.
    pub docs_before: usize,
}

/// The documents of a block as Arrow string columns (int32 offsets) and their positions.
#[derive(Debug)]
pub struct Block {
    pub positions: Vec<i64>,
    pub text_offsets: Vec<i32>,
    pub text: Vec<u8>,
    pub id_offsets: Vec<i32>,
    pub ids: Vec<u8>,
    pub meta_offsets: Vec<i32>,
    pub meta: Vec<u8>,
    pub fallback: Vec<Fallback>,
    /// Lines in the block (a last line without a newline counts).
    pub lines: usize,
}

/// Parse a block of whole lines (each ends with `\n`, but the last may not).
pub fn parse_block(block: &[u8], f: &Fields<'_>) -> Block {
    let mut out = Block {
        positions: Vec::new(),
        text_offsets: vec![0],
        text: Vec::with_capacity(block.len()),
        id_offsets: vec![0],
        ids: Vec::new(),
        meta_offsets: vec![0],
        meta: Vec::new(),
        fallback: Vec::new(),
        lines: 0,
    };
    let mut scratch = Scratch::default();
    let mut start = 0;
    while start < block.len() {
        let end = memchr::memchr(b'\n', &block[start..]).map_or(block.len(), |i| start + i + 1);
        let line = &block[start..end];
        let content = line.len() - usize::from(line.ends_with(b"\n"));
        let pos = f.first + out.lines as i64;
        if content > f.max_line_bytes || !(is_blank(line) || out.push(line, pos, f, &mut scratch)) {
            let docs_before = out.positions.len();
            out.fallback.push(Fallback { line: out.lines, start, end, docs_before });
        }
        out.lines += 1;
        start = end;
    }
    out
}

/// Python's `bytes.strip()` leaves nothing.
fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
}

/// Buffers reused from line to line.
#[derive(Default)]
struct Scratch {
    key: Vec<u8>,
    id: Vec<u8>,
    value: Vec<u8>,
    meta: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Block {
    /// Add the document of one non-blank line; false (and nothing added) if the line is left to
    /// the Python reader.
    fn push(&mut self, line: &[u8], pos: i64, f: &Fields<'_>, s: &mut Scratch) -> bool {
        let text_start = self.text.len();
        let ok = self.parse_line(line, f, s, text_start).is_some()
            && self.text.len() - text_start <= f.max_doc_bytes
            && self.text.len() <= i32::MAX as usize;
        if !ok {
            self.text.truncate(text_start);
            return false;
        }
        let ids_start = self.ids.len();
        self.ids.extend_from_slice(f.id_prefix.as_bytes());
        if s.id.is_empty() {
            self.ids.extend_from_slice(pos.to_string().as_bytes());
        } else {
            self.ids.extend_from_slice(&s.id[1..]);
        }
        let meta_start = self.meta.len();
        if !s.meta.is_empty() {
            write_object(&mut s.meta, &mut self.meta);
        }
        if self.ids.len() > i32::MAX as usize || self.meta.len() > i32::MAX as usize {
            self.text.truncate(text_start);
            self.ids.truncate(ids_start);
            self.meta.truncate(meta_start);
            return false;
        }
        self.positions.push(pos);
        self.text_offsets.push(self.text.len() as i32);
        self.id_offsets.push(self.ids.len() as i32);
        self.meta_offsets.push(self.meta.len() as i32);
        true
    }

    /// Parse one line: its text goes to `self.text` (from `text_start`), its id to `s.id` (a
    /// leading marker byte then `str(id)`; empty: no id), its other members to `s.meta`.
    fn parse_line(&mut self, line: &[u8], f: &Fields<'_>, s: &mut Scratch, text_start: usize) -> Option<()> {
        simdutf8::basic::from_utf8(line).ok()?;
        s.id.clear();
        s.meta.clear();
        let mut has_text = false;
        let mut p = Parser { b: line, i: 0 };
        p.ws();
        p.eat(b'{')?;
        p.ws();
        if p.peek() == Some(b'}') {
            return None; // no text
        }
        loop {
            p.ws();
            if p.peek() != Some(b'"') {
                return None;
            }
            s.key.clear();
            p.string(&mut s.key)?;
            p.ws();
            p.eat(b':')?;
            p.ws();
            let (is_text, is_id) = (s.key == f.text.as_bytes(), s.key == f.id.as_bytes());
            if is_text || is_id {
                if is_text {
                    self.text.truncate(text_start);
                }
                if p.peek() == Some(b'"') {
                    let from = if is_text { text_start } else { 0 };
                    let into = if is_text { &mut self.text } else { &mut s.value };
                    into.truncate(from);
                    p.string(into)?;
                    has_text |= is_text;
                    if is_id {
                        let v = if is_text { &self.text[from..] } else { &s.value[..] };
                        s.id.clear();
                        s.id.push(b'=');
                        s.id.extend_from_slice(v);
                    }
                } else {
                    s.value.clear();
                    let kind = p.value(&mut s.value, 0)?;
                    if is_text {
                        has_text = false; // null or not a string: the Python reader says which
                    }
                    if is_id {
                        s.id.clear();
                        match kind {
                            Kind::Null => {}
                            Kind::Scalar => {
                                s.id.push(b'=');
                                s.id.extend_from_slice(python_str(&s.value));
                            }
                            Kind::Str | Kind::Container => return None,
                        }
                    }
                }
            } else {
                let mut v = Vec::new();
                p.value(&mut v, 0)?;
                s.meta.push((s.key.clone(), v));
            }
            p.ws();
            match p.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
        p.ws();
        (p.i == line.len() && has_text).then_some(())
    }
}

/// `str()` of a scalar JSON value given in its `json.dumps` form: `true`/`false` print as Python's.
fn python_str(dumped: &[u8]) -> &[u8] {
    match dumped {
        b"true" => b"True",
        b"false" => b"False",
        other => other,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Null,
    /// A number or a boolean.
    Scalar,
    Str,
    Container,
}

/// Nesting deeper than this is left to Python (whose recursion limit decides).
const MAX_DEPTH: usize = 200;
/// Integers longer than this are left to Python (which refuses over 4300 digits).
const MAX_INT_DIGITS: usize = 4000;

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// JSON whitespace (Python's `json` takes exactly these four).
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// A string at `"`, unescaped into `out` (UTF-8). Raw control characters and lone surrogate
    /// escapes are refused.
    fn string(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.i += 1;
        loop {
            let at = find_special(self.b, self.i);
            out.extend_from_slice(&self.b[self.i..at]);
            self.i = at;
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => {
                    let c = match self.next()? {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xdc00..0xe000).contains(&cp) {
                                return None;
                            }
                            if (0xd800..0xdc00).contains(&cp) {
                                if self.next()? != b'\\' || self.next()? != b'u' {
                                    return None;
                                }
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return None;
                                }
                                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                            }
                            let ch = char::from_u32(cp)?;
                            out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                            continue;
                        }
                        _ => return None,
                    };
                    out.push(c);
                }
                _ => return None, // a raw control character
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.b.get(self.i..self.i + 4)?;
        self.i += 4;
        h.iter().try_fold(0u32, |acc, &c| Some(acc * 16 + (c as char).to_digit(16)?))
    }

    /// One value, written to `out` as Python's `json.dumps(..., ensure_ascii=False, sort_keys=True)`.
    fn value(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<Kind> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => {
                let mut s = Vec::new();
                self.string(&mut s)?;
                write_string(&s, out);
                Some(Kind::Str)
            }
            b'{' => {
                self.i += 1;
                let mut members: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                } else {
                    loop {
                        self.ws();
                        if self.peek() != Some(b'"') {
                            return None;
                        }
                        let mut key = Vec::new();
                        self.string(&mut key)?;
                        self.ws();
                        self.eat(b':')?;
                        self.ws();
                        let mut v = Vec::new();
                        self.value(&mut v, depth + 1)?;
                        members.push((key, v));
                        self.ws();
                        match self.next()? {
                            b',' => continue,
                            b'}' => break,
                            _ => return None,
                        }
                    }
                }
                write_object(&mut members, out);
                Some(Kind::Container)
            }
            b'[' => {
                self.i += 1;
                out.push(b'[');
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                } else {
                    let mut first = true;
                    loop {
                        if !first {
                            out.extend_from_slice(b", ");
                        }
                        first = false;
                        self.ws();
                        self.value(out, depth + 1)?;
                        self.ws();
                        match self.next()? {
                            b',' => continue,
                            b']' => break,
                            _ => return None,
                        }
                    }
                }
                out.push(b']');
                Some(Kind::Container)
            }
            b't' => self.literal(b"true", out, Kind::Scalar),
            b'f' => self.literal(b"false", out, Kind::Scalar),
            b'n' => self.literal(b"null", out, Kind::Null),
            b'-' | b'0'..=b'9' => {
                self.number(out)?;
                Some(Kind::Scalar)
            }
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8], out: &mut Vec<u8>, kind: Kind) -> Option<Kind> {
        if !self.b[self.i..].starts_with(word) {
            return None;
        }
        self.i += word.len();
        out.extend_from_slice(word);
        Some(kind)
    }

    /// A JSON number: an integer prints as its digits (`-0` as `0`), a float as Python's
    /// `repr(float(token))`; non-finite floats and very long integers are refused.
    fn number(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let s = p.i;
            while matches!(p.peek(), Some(b'0'..=b'9')) {
                p.i += 1;
            }
            p.i - s
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        let mut float = false;
        if self.peek() == Some(b'.') && matches!(self.b.get(self.i + 1), Some(b'0'..=b'9')) {
            self.i += 1;
            digits(self);
            float = true;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let save = self.i;
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                self.i = save; // not an exponent: the caller sees what follows
            } else {
                float = true;
            }
        }
        let token = &self.b[start..self.i];
        if !float {
            if token.len() > MAX_INT_DIGITS {
                return None;
            }
            out.extend_from_slice(if token == b"-0" { b"0" } else { token });
            return Some(());
        }
        let v: f64 = std::str::from_utf8(token).ok()?.parse().ok()?;
        if !v.is_finite() {
            return None;
        }
        write_float(v, out);
        Some(())
    }
}

/// The first byte at or after `i` that is `"`, `\` or a control character (< 0x20); `b.len()` if none.
#[inline]
fn find_special(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    while i + 8 <= b.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        let x = u64::from_le_bytes(w);
        // a flagged byte above a real hit may be false; the lowest flagged byte is always real
        let m = zero(x ^ (ONES * u64::from(b'"')))
            | zero(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGH);
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && !matches!(b[i], b'"' | b'\\' | 0..=0x1f) {
        i += 1;
    }
    i
}

/// A string as Python's `json.dumps(s, ensure_ascii=False)`: `"` `\` and control characters
/// escaped (`\n \r \t \b \f`, others `\u00XX`), everything else as it is.
pub fn write_string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    let mut i = 0;
    while i < s.len() {
        let at = find_special(s, i);
        out.extend_from_slice(&s[i..at]);
        let Some(&c) = s.get(at) else { break };
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(c >> 4)]);
                out.push(HEX[usize::from(c & 15)]);
            }
        }
        i = at + 1;
    }
    out.push(b'"');
}

/// Members (keys as read, written values) as a Python dict dumped with `sort_keys=True`: a repeated
/// key keeps its last value; keys in code point order (= the order of their UTF-8 bytes).
fn write_object(members: &mut Vec<(Vec<u8>, Vec<u8>)>, out: &mut Vec<u8>) {
    // stable: among equal keys the one read last stays last
    members.sort_by(|a, b| a.0.cmp(&b.0));
    out.push(b'{');
    let mut first = true;
    for (j, (k, v)) in members.iter().enumerate() {
        if members.get(j + 1).is_some_and(|next| next.0 == *k) {
            continue; // a later value for the same key wins
        }
        if !first {
            out.extend_from_slice(b", ");
        }
        first = false;
        write_string(k, out);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
    }
    out.push(b'}');
    members.clear();
}

/// A finite float as Python's `repr`: the shortest digits that read back as the same float, in
/// positional form for decimal exponents -4..16 (`0.0001`, `123.0`), else `1e-05`, `1.5e+16`.
pub fn write_float(v: f64, out: &mut Vec<u8>) {
    // Rust's `{:e}` prints as few digits as read back as `v`; of the numbers with that many digits
    // that do, Python's repr takes the one nearest to `v` (ties to even), Rust not always: the
    // correctly rounded one (Rust rounds exact ties to even) when it reads back as `v`
    let shortest = format!("{v:e}");
    let digits = shortest.split_once('e').map_or(1, |(m, _)| m.bytes().filter(u8::is_ascii_digit).count());
    let nearest = format!("{v:.*e}", digits.saturating_sub(1));
    let s = if nearest.parse::<f64>() == Ok(v) { nearest } else { shortest };
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.as_str()),
    };
    let (mant, exp) = s.split_once('e').unwrap_or((s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: Vec<u8> = mant.bytes().filter(|&c| c != b'.').collect();
    if neg {
        out.push(b'-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            for k in 0..int_len {
                out.push(*digits.get(k).unwrap_or(&b'0'));
            }
            out.push(b'.');
            if digits.len() > int_len {
                out.extend_from_slice(&digits[int_len..]);
            } else {
                out.push(b'0');
            }
        } else {
            out.extend_from_slice(b"0.");
            for _ in 0..(-exp - 1) {
                out.push(b'0');
            }
            out.extend_from_slice(&digits);
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.extend_from_slice(format!("e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs()).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (f64 bits, Python 3.11 `repr(float)`): hand-picked edge values, random bit patterns, random
    /// magnitudes; generated with `struct.unpack('<Q', struct.pack('<d', v))` and `repr(v)`.
    const PYTHON_REPR: &[(u64, &str)] = &[
        (0x0000000000000000, "0.0"),
        (0x4304a39c54cf4532, "726173920913574.2"), // a tie: Python takes the even digit
        (0x8000000000000000, "-0.0"),
        (0x3ff0000000000000, "1.0"),
        (0xbff8000000000000, "-1.5"),
        (0x3fb999999999999a, "0.1"),
        (0x3fd3333333333334, "0.30000000000000004"),
        (0x3ee4f8b588e368f1, "1e-05"),
        (0x3f1a36e2eb1c432d, "0.0001"),
        (0x3f202c9dedbc309d, "0.0001234"),
        (0x405ec00000000000, "123.0"),
        (0x430c6bf526340000, "1000000000000000.0"),
        (0x4341c37937e08000, "1e+16"),
        (0x434aa535d3d0c000, "1.5e+16"),
        (0x4341c37937e07fff, "9999999999999998.0"),
        (0x4480f0cf064dd592, "1e+22"),
        (0x7fe1ccf385ebc8a0, "1e+308"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0x0000000000000001, "5e-324"),
        (0x0010000000000000, "2.2250738585072014e-308"),
        (0x437b69b4ba630f35, "1.2345678901234568e+17"),
        (0x3fd3333333333333, "0.3"),
        (0x3fe5555555555555, "0.6666666666666666"),
        (0x3fd5555555555555, "0.3333333333333333"),
        (0x3e7ad7f29abcaf48, "1e-07"),
        (0x40c81cd6e631f8a1, "12345.6789"),
        (0x4059000000000000, "100.0"),
        (0x0000000000000002, "1e-323"),
        (0x4011666666666666, "4.35"),
        (0x3f201f31f46ed246, "0.000123"),
        (0xbec4f8b588e368f1, "-2.5e-06"),
        (0xf2a74de452e6b438, "-1.989032661366619e+244"),
        (0x6513270e269e0d37, "7.761117632285041e+178"),
        (0x0c5c7fd0a6a3a450, "3.980498358697587e-249"),
        (0xd23f0824128b2f33, "-1.5432835417340557e+88"),
        (0x1818e811892f902b, "1.3647584518757569e-192"),
        (0x9531985d5d9dc9f8, "-1.3701135617873088e-206"),
        (0xe8e25d940ed90475, "-1.7160537630466207e+197"),
        (0x36f675cc81e74ef5, "6.294675241195386e-44"),
        (0x1600a35a099950d8, "1.0613447212142254e-202"),
        (0x6b0d549b6f03675a, "4.708325160387546e+207"),
        (0x3d9c172411e20b8f, "6.387016158513563e-12"),
        (0x8d116ece1738f7d9, "-9.973130378568733e-246"),
        (0x0f21ddb66cad4a26, "8.779753225680271e-236"),
        (0x90c192cfd3ac94af, "-5.795503248498993e-228"),
        (0xf28c105d1fb17c23, "-5.988180159386011e+243"),
        (0xa170b33839263059, "-1.306052388527796e-147"),
        (0x953f48f1a09f76b5, "-2.436117699484841e-206"),
        (0x0fd630f1f29d0da9, "2.233386999150174e-232"),
        (0x95e60af593bd04cf, "-3.51527970626667e-203"),
        (0x0cb1e29c658cda14, "1.5987381841032883e-247"),
        (0x3898d190f9ebdacc, "4.6678633181812096e-36"),
        (0x8e81973e0becd7b0, "-8.441872792105456e-239"),
        (0x2217beaddbc496cb, "1.9015657400796622e-144"),
        (0x6b4cb2424a23d596, "7.370437700706684e+208"),
        (0x8a6a63ec24ede6a4, "-1.7163996725272777e-258"),
        (0x922766581e27a1c0, "-3.2367190832119987e-221"),
        (0x8f6d05584ef8aa38, "-2.2818334634712625e-234"),
        (0xae97ba94d0eda82f, "-3.0536383926309363e-84"),
        (0x1a61dbe22e44158b, "1.3449551894627777e-181"),
        (0x923a736994e3bf91, "-7.317495976062606e-221"),
        (0x301850c5a38fd547, "5.249822308814304e-77"),
        (0x18f135d25f557203, "1.5450754142984396e-188"),
        (0xb64ce4228c38fb29, "-3.953625698224792e-47"),
        (0x907a70c31012f037, "-2.72491267476498e-229"),
        (0x9e7769b10f4205b4, "-6.505141861548772e-162"),
        (0x7f15052434b9b5df, "1.441484839555994e+304"),
        (0x881ed162ae2eb154, "-1.4583679262758548e-269"),
        (0xc6f877186d76b07e, "-7.939416668807721e+33"),
        (0x7731af10506bf2ef, "1.4255183989699612e+266"),
        (0xec66a78795e761d1, "-1.525315701232403e+214"),
        (0xc0f6dbf3f4c54698, "-93631.24725844932"),
        (0xc1187148066c556e, "-400466.0062726353"),
        (0x4121f7aded143b60, "588758.9630449824"),
        (0x41184a93784735a0, "397988.8674591426"),
        (0xc11f3cfbea0a8100, "-511806.9785556942"),
        (0x41022b7b5d383238, "148847.42051734193"),
        (0x40e89b203e7262e0, "50393.00762290298"),
        (0x4126e585fb7799d8, "750274.9911468579"),
        (0x411c022a50c58230, "458890.5788784353"),
        (0xc119e2f1e18140fe, "-424124.4702196269"),
        (0x412d4ebb63d5186e, "960349.6949851641"),
        (0xc1274fb8e3112197, "-763868.4434900758"),
        (0xc103fd52d9f7bbcc, "-163754.35642954556"),
        (0x411f63a76fbfe7cc, "514281.8591304987"),
        (0xc1253dbddc81f4e6, "-696030.9306789904"),
        (0xc0d58e73239bda80, "-22073.799048388842"),
        (0xc12c1fe2f8c88e77, "-921585.4859051247"),
        (0x411488beda2eb478, "336431.71306879027"),
        (0x412025eb77007dde, "529141.7324256261"),
        (0x4101d41f0b604c58, "146051.88055476802"),
        (0x3dd810a09e6d27f8, "8.754778118308883e-11"),
        (0x3e2d375eadf5bb08, "3.401223621911955e-09"),
        (0x4156ac64b158e2df, "5943698.771050184"),
        (0x3a83bae728364608, "7.968919758215943e-27"),
        (0x4625342a205cf3d5, "8.399677805125414e+29"),
        (0x42b88d0378f02bc6, "26993927712811.773"),
        (0x3a4a4f4db47d5783, "6.6415220547467445e-28"),
        (0x3da0140fa676e882, "7.311593346408904e-12"),
        (0x42978adb6b7ff2c0, "6471288545276.6875"),
        (0x3d6ceb3d85f73752, "8.219247866097149e-13"),
    ];

    #[test]
    fn floats_print_as_python_repr() {
        for &(bits, want) in PYTHON_REPR {
            let mut out = Vec::new();
            write_float(f64::from_bits(bits), &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{bits:#x}");
        }
    }

    fn fields() -> Fields<'static> {
        Fields {
            text: "text",
            id: "id",
            id_prefix: "src/",
            first: 10,
            max_doc_bytes: 100,
            max_line_bytes: 1000,
        }
    }

    fn col(offsets: &[i32], data: &[u8]) -> Vec<String> {
        offsets
            .windows(2)
            .map(|w| String::from_utf8(data[w[0] as usize..w[1] as usize].to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn plain_lines_become_columns() {
        let block = concat!(
            "{\"text\": \"a\\nb\\u00e9\\ud83d\\ude00\", \"id\": 7, \"z\": [1.5, 1e16, -0, true], \"b\": {\"y\": null, \"x\": \"\\u0001\\\"\"}}\n",
            "   \n",
            "{\"id\": \"k\", \"text\": \"t\", \"id\": null}\r\n",
            "{\"text\": \"x\", \"text\": \"y\", \"a\": 1, \"a\": 2}",
        );
        let b = parse_block(block.as_bytes(), &fields());
        assert_eq!(b.lines, 4);
        assert_eq!(b.positions, vec![10, 12, 13]);
        assert!(b.fallback.is_empty());
        assert_eq!(col(&b.text_offsets, &b.text), vec!["a\nb\u{e9}\u{1F600}", "t", "y"]);
        assert_eq!(col(&b.id_offsets, &b.ids), vec!["src/7", "src/12", "src/13"]);
        assert_eq!(
            col(&b.meta_offsets, &b.meta),
            vec![
                "{\"b\": {\"x\": \"\\u0001\\\"\", \"y\": null}, \"z\": [1.5, 1e+16, 0, true]}",
                "",
                "{\"a\": 2}"
            ]
        );
    }

    #[test]
    fn unsure_lines_are_left_to_python() {
        let lines = [
            "{\"text\": \"\\ud800\"}",       // lone surrogate
            "{\"text\": \"a\", \"m\": NaN}", // Python takes NaN
            "{\"text\": null}",
            "{\"text\": 3}",
            "{\"id\": 1}",
            "[1]",
            "{\"text\": \"a\", \"id\": [1]}",
            "{\"text\": \"a\", \"m\": 1e400}",
            "{\"text\": \"a\"} x",
            "{\"text\": \"a\",}",
            "{\"text\": \"a\tb\"}", // raw control character
            "{\"text\": \"\\xff\"}",
        ];
        let mut block = lines.join("\n").into_bytes();
        block.extend_from_slice(b"\n{\"text\": \"\xff\"}\n");
        block.extend_from_slice(format!("{{\"text\": \"{}\"}}\n", "x".repeat(101)).as_bytes());
        let b = parse_block(&block, &fields());
        assert!(b.positions.is_empty());
        assert_eq!(b.fallback.len(), lines.len() + 2);
        assert_eq!(
            b.fallback.iter().map(|f| f.line).collect::<Vec<_>>(),
            (0..lines.len() + 2).collect::<Vec<_>>()
        );
        let f = b.fallback[1];
        assert_eq!(&block[f.start..f.end], format!("{}\n", lines[1]).as_bytes());
    }
}

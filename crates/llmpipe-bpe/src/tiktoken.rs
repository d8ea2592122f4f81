//! tiktoken rank files: one `base64(token bytes) rank` per line.

use crate::model::{Special, Tokenizer};
use crate::pattern::PreTokenizer;
use crate::Error;

fn b64_val(c: u8) -> Option<u32> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' | b'-' => 62,
        b'/' | b'_' => 63,
        _ => return None,
    } as u32)
}

/// Decode standard (or URL-safe) base64, padding optional.
pub fn b64decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for &c in s {
        acc = (acc << 6) | b64_val(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Encode bytes as standard base64 with padding.
pub fn b64encode(b: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Parse rank-file text into tokens (index = rank).
pub fn parse_ranks(text: &str) -> Result<Vec<Option<Vec<u8>>>, Error> {
    let mut tokens: Vec<Option<Vec<u8>>> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (tok, rank) = line
            .split_once(' ')
            .ok_or_else(|| Error::Invalid(format!("rank file line {}: expected `base64 rank`", n + 1)))?;
        let bytes =
            b64decode(tok).ok_or_else(|| Error::Invalid(format!("rank file line {}: bad base64", n + 1)))?;
        let rank: usize =
            rank.trim().parse().map_err(|_| Error::Invalid(format!("rank file line {}: bad rank", n + 1)))?;
        if tokens.len() <= rank {
            tokens.resize(rank + 1, None);
        }
        tokens[rank] = Some(bytes);
    }
    Ok(tokens)
}

/// A tokenizer from rank-file text, a pre-tokenizer and special tokens.
pub fn from_ranks_text(text: &str, pre: PreTokenizer, specials: Vec<Special>) -> Result<Tokenizer, Error> {
    Tokenizer::from_ranks(parse_ranks(text)?, specials, pre)
}

/// Rank-file text of a tokenizer's ordinary tokens (rank = id).
pub fn to_ranks_text(t: &Tokenizer) -> String {
    let mut out = String::new();
    for (i, tok) in t.tokens.iter().enumerate() {
        if let Some(tok) = tok {
            if t.specials.iter().any(|s| s.id == i as u32) {
                continue;
            }
            out.push_str(&b64encode(tok));
            out.push(' ');
            out.push_str(&i.to_string());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_roundtrip() {
        for s in [&b""[..], b"a", b"ab", b"abc", b"\x00\xff\x10hello"] {
            assert_eq!(b64decode(&b64encode(s)).unwrap(), s);
        }
        assert_eq!(b64decode("IQ==").unwrap(), b"!");
    }
}

//! GPT-2's reversible byte <-> printable-char mapping used by byte-level BPE files.

/// `BYTE_CHARS[b]` is the char that stands for byte `b` in tokenizer.json vocab and merges.
pub fn byte_to_char() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).unwrap_or('\0')
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap_or('\0')
        };
    }
    out
}

/// The inverse of [`byte_to_char`]: char -> byte, for the 256 chars of the mapping.
pub fn char_to_byte(c: char) -> Option<u8> {
    let u = c as u32;
    if (33..=126).contains(&u) || (161..=172).contains(&u) || (174..=255).contains(&u) {
        return Some(u as u8);
    }
    if (256..256 + 68).contains(&u) {
        let k = u - 256; // k-th non-printable byte, in byte order
        let mut seen = 0;
        for b in 0..256u32 {
            let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
            if !printable {
                if seen == k {
                    return Some(b as u8);
                }
                seen += 1;
            }
        }
    }
    None
}

/// Map raw bytes to the GPT-2 char string.
pub fn bytes_to_string(bytes: &[u8], table: &[char; 256]) -> String {
    bytes.iter().map(|&b| table[b as usize]).collect()
}

/// Map a GPT-2 char string back to bytes; `None` if a char is outside the mapping.
pub fn string_to_bytes(s: &str) -> Option<Vec<u8>> {
    s.chars().map(char_to_byte).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_all_bytes() {
        let t = byte_to_char();
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
    }
}

//! Tests on the eight bytes of a `u64` at once ("SIMD within a register"), for scans that step over
//! text eight bytes at a time while nothing in them needs a look. Each answer is exact for "none":
//! the high bit of some byte of the result is set if and only if some byte of `x` matches, and the
//! lowest such bit is the first matching byte of a little-endian load (the borrows of the subtraction
//! only run upwards from a match, so bytes above the first one may be flagged wrongly).

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Some byte of `x` is below `n` (`n` at most 128).
#[inline]
pub fn any_below(x: u64, n: u8) -> u64 {
    debug_assert!(n <= 128);
    x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH
}

/// Some byte of `x` is `c`.
#[inline]
pub fn any_eq(x: u64, c: u8) -> u64 {
    let y = x ^ (ONES * u64::from(c));
    y.wrapping_sub(ONES) & !y & HIGH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_byte_at_each_place() {
        for place in 0..8 {
            for b in 0..=255u8 {
                for fill in [0x41u8, 0x00, 0xff, 0x80] {
                    let mut bytes = [fill; 8];
                    bytes[place] = b;
                    let x = u64::from_le_bytes(bytes);
                    // the first flagged byte is the first match (8: none)
                    let first = |m: u64| (m.trailing_zeros() / 8) as usize;
                    for n in [1u8, 0x1f, 0x20, 0x80] {
                        let want = bytes.iter().position(|&v| v < n).unwrap_or(8);
                        assert_eq!(first(any_below(x, n)), want, "{bytes:?} < {n}");
                    }
                    for c in [0u8, b' ', 0x7f, 0xc2, 0xef, 0xff] {
                        let want = bytes.iter().position(|&v| v == c).unwrap_or(8);
                        assert_eq!(first(any_eq(x, c)), want, "{bytes:?} == {c}");
                    }
                }
            }
        }
    }
}

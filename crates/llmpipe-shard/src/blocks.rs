//! Per-block checksums of shard files: the CRC-32 (IEEE, the one zlib computes) of every
//! `block`-byte piece of a file, the last piece possibly shorter. The manifest records them when a
//! shard is written; checking them reads every byte once at CRC speed (many GB/s with the CPU's
//! carry-less multiply), in parallel over blocks, and a mismatch names the damaged byte range.

use rayon::prelude::*;

/// CRC-32 of each `block`-byte piece of `data`, in order (`ceil(len / block)` values; none for
/// empty data). `block` must be positive.
pub fn crc32_blocks(data: &[u8], block: usize) -> Vec<u32> {
    assert!(block > 0, "block size must be positive");
    data.par_chunks(block).map(crc32fast::hash).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_known_values() {
        // the standard check value of CRC-32/ISO-HDLC
        assert_eq!(crc32_blocks(b"123456789", 9), vec![0xCBF4_3926]);
        assert_eq!(
            crc32_blocks(b"123456789", 4),
            vec![crc32fast::hash(b"1234"), crc32fast::hash(b"5678"), crc32fast::hash(b"9")]
        );
        assert!(crc32_blocks(b"", 4).is_empty());
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut bad = data.clone();
        bad[5_000] ^= 1;
        let (a, b) = (crc32_blocks(&data, 1024), crc32_blocks(&bad, 1024));
        let differ: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
        assert_eq!(differ, vec![4]);
    }
}

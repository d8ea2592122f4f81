//! MinHash signatures over 32-bit shingle hashes.
//!
//! Shingle hashes are already uniformly distributed (xxh3 + fmix64), so permutation `i` only has to
//! be a cheap bijection that reorders them independently of the others: `x -> (x ^ a_i) * m_i`
//! (wrapping, `m_i` odd) with keys drawn from the seed. All arithmetic is in 32-bit lanes so the
//! inner loop over permutations vectorises (16 lanes with AVX-512, 8 with AVX2, chosen at run time). Signatures are `u32`; the all-`u32::MAX` signature means
//! "no shingles" (an empty document).

/// Derives per-permutation keys from a seed.
#[derive(Clone, Debug)]
pub struct MinHasher {
    xor_keys: Vec<u32>,
    mul_keys: Vec<u32>,
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[inline(always)]
fn perm(x: u32, xk: u32, mk: u32) -> u32 {
    (x ^ xk).wrapping_mul(mk)
}

/// `L` permutations over all shingles with the running minima in registers (`L` a multiple of the
/// vector width: the loop over lanes unrolls into whole-vector xor, multiply and min).
#[inline(always)]
fn fill_block<const L: usize>(xk: &[u32], mk: &[u32], shingles: &[u32], out: &mut [u32]) {
    let xk: &[u32; L] = xk.try_into().expect("L keys");
    let mk: &[u32; L] = mk.try_into().expect("L keys");
    let mut acc = [u32::MAX; L];
    for &x in shingles {
        for ((o, &a), &m) in acc.iter_mut().zip(xk).zip(mk) {
            *o = (*o).min(perm(x, a, m));
        }
    }
    out.copy_from_slice(&acc);
}

#[inline(always)]
fn fill(xk: &[u32], mk: &[u32], shingles: &[u32], out: &mut [u32]) {
    let n = out.len().min(xk.len()).min(mk.len());
    let mut j = 0;
    // blocks of 32 then 16 then 8 permutations: each block reads the shingles once (from L1)
    while j + 32 <= n {
        fill_block::<32>(&xk[j..j + 32], &mk[j..j + 32], shingles, &mut out[j..j + 32]);
        j += 32;
    }
    while j + 8 <= n {
        fill_block::<8>(&xk[j..j + 8], &mk[j..j + 8], shingles, &mut out[j..j + 8]);
        j += 8;
    }
    let (out, xk, mk) = (&mut out[j..n], &xk[j..n], &mk[j..n]);
    out.fill(u32::MAX);
    for &x in shingles {
        for ((o, &a), &m) in out.iter_mut().zip(xk).zip(mk) {
            let h = perm(x, a, m);
            if h < *o {
                *o = h;
            }
        }
    }
}

/// `fill` with AVX-512: up to 128 permutations per pass over the shingles (8 vectors of minima and
/// 16 of keys fit in the 32 registers), so 112 permutations read every shingle once.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fill_avx512(xk: &[u32], mk: &[u32], shingles: &[u32], out: &mut [u32]) {
    let n = out.len().min(xk.len()).min(mk.len());
    let mut j = 0;
    while n - j >= 16 {
        let l = (n - j).min(128) / 16 * 16;
        let (x, m, o) = (&xk[j..j + l], &mk[j..j + l], &mut out[j..j + l]);
        match l {
            128 => fill_block::<128>(x, m, shingles, o),
            112 => fill_block::<112>(x, m, shingles, o),
            96 => fill_block::<96>(x, m, shingles, o),
            80 => fill_block::<80>(x, m, shingles, o),
            64 => fill_block::<64>(x, m, shingles, o),
            48 => fill_block::<48>(x, m, shingles, o),
            32 => fill_block::<32>(x, m, shingles, o),
            _ => fill_block::<16>(x, m, shingles, o),
        }
        j += l;
    }
    fill(&xk[j..n], &mk[j..n], shingles, &mut out[j..n])
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn fill_avx2(xk: &[u32], mk: &[u32], shingles: &[u32], out: &mut [u32]) {
    fill(xk, mk, shingles, out)
}

impl MinHasher {
    pub fn new(num_perm: usize, seed: u64) -> Self {
        let mut s = seed ^ 0x6d69_6e68_6173_6821;
        let mut xor_keys = Vec::with_capacity(num_perm);
        let mut mul_keys = Vec::with_capacity(num_perm);
        for _ in 0..num_perm {
            let r = splitmix64(&mut s);
            xor_keys.push(r as u32);
            mul_keys.push(((r >> 32) as u32) | 1);
        }
        Self { xor_keys, mul_keys }
    }

    pub fn num_perm(&self) -> usize {
        self.xor_keys.len()
    }

    /// Signature of a shingle set (duplicates allowed) into `out` (length `num_perm`).
    pub fn signature_into(&self, shingles: &[u32], out: &mut [u32]) {
        assert_eq!(out.len(), self.num_perm(), "signature buffer has the wrong length");
        #[cfg(target_arch = "x86_64")]
        {
            let cap = crate::simd_cap();
            if cap >= crate::SimdCap::Avx512 && std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU supports AVX-512F (checked just above).
                unsafe { fill_avx512(&self.xor_keys, &self.mul_keys, shingles, out) };
                return;
            }
            if cap >= crate::SimdCap::Avx2 && std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above).
                unsafe { fill_avx2(&self.xor_keys, &self.mul_keys, shingles, out) };
                return;
            }
        }
        fill(&self.xor_keys, &self.mul_keys, shingles, out)
    }

    pub fn signature(&self, shingles: &[u32]) -> Vec<u32> {
        let mut out = vec![0; self.num_perm()];
        self.signature_into(shingles, &mut out);
        out
    }
}

/// The fraction of equal positions: the MinHash estimate of Jaccard similarity.
pub fn estimate_jaccard(a: &[u32], b: &[u32]) -> f64 {
    if a.is_empty() {
        return 0.0;
    }
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_and_portable_paths_agree() {
        let m = MinHasher::new(112, 7);
        let sh: Vec<u32> = (0..1000u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let mut a = vec![0; 112];
        fill(&m.xor_keys, &m.mul_keys, &sh, &mut a);
        assert_eq!(a, m.signature(&sh));
        // the definition, one permutation at a time
        let expect: Vec<u32> = (0..112)
            .map(|i| sh.iter().map(|&x| perm(x, m.xor_keys[i], m.mul_keys[i])).min().unwrap_or(u32::MAX))
            .collect();
        assert_eq!(a, expect);
        for p in [1, 7, 8, 16, 17, 33, 100, 112, 128, 136, 144, 250, 256, 300] {
            let m = MinHasher::new(p, 3);
            let sig = m.signature(&sh[..37]);
            for (i, (&s, (&a, &k))) in sig.iter().zip(m.xor_keys.iter().zip(&m.mul_keys)).enumerate() {
                let e = sh[..37].iter().map(|&x| perm(x, a, k)).min();
                assert_eq!(Some(s), e, "num_perm {p} lane {i}");
            }
        }
    }

    #[test]
    fn estimate_tracks_jaccard() {
        let m = MinHasher::new(256, 1);
        // |A ∩ B| = 600, |A ∪ B| = 1400 -> J = 0.4286
        let a: Vec<u32> = (0..1000u32).map(|i| i.wrapping_mul(0x9E37_79B1)).collect();
        let b: Vec<u32> = (400..1400u32).map(|i| i.wrapping_mul(0x9E37_79B1)).collect();
        let est = estimate_jaccard(&m.signature(&a), &m.signature(&b));
        assert!((est - 600.0 / 1400.0).abs() < 0.08, "{est}");
    }

    #[test]
    fn empty_set_is_all_max_and_seed_matters() {
        let m = MinHasher::new(16, 1);
        assert!(m.signature(&[]).iter().all(|&v| v == u32::MAX));
        assert_ne!(m.signature(&[5, 6]), MinHasher::new(16, 2).signature(&[5, 6]));
    }
}

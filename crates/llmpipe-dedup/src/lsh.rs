//! LSH banding: a signature of `bands * rows` values is cut into `bands` bands; each band hashes to
//! a 64-bit bucket key. Two documents are candidates when they share a bucket in any band.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::DedupError;

/// Bands x rows of the LSH index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lsh {
    pub bands: usize,
    pub rows: usize,
}

impl Default for Lsh {
    /// FineWeb / datatrove: 14 bands of 8 rows (112 hashes).
    fn default() -> Self {
        Self { bands: 14, rows: 8 }
    }
}

impl Lsh {
    pub fn new(bands: usize, rows: usize, num_perm: usize) -> Result<Self, DedupError> {
        if bands == 0 || rows == 0 {
            return Err(DedupError::InvalidParam(format!(
                "bands ({bands}) and rows ({rows}) must be at least 1"
            )));
        }
        if bands * rows > num_perm {
            return Err(DedupError::InvalidParam(format!(
                "bands x rows = {bands} x {rows} = {} exceeds num_perm = {num_perm}",
                bands * rows
            )));
        }
        Ok(Self { bands, rows })
    }

    /// Bucket keys of one signature, one per band, into `out` (length `bands`).
    ///
    /// The band index is part of the hash, so keys of different bands never share a bucket.
    pub fn band_hashes_into(&self, sig: &[u32], seed: u64, out: &mut [u64]) {
        let mut buf = Vec::with_capacity(self.rows * 4);
        for (b, o) in out.iter_mut().enumerate().take(self.bands) {
            buf.clear();
            for v in &sig[b * self.rows..(b + 1) * self.rows] {
                buf.extend_from_slice(&v.to_le_bytes());
            }
            *o = xxh3_64_with_seed(&buf, seed ^ (b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
    }

    /// Probability that a pair with Jaccard `s` becomes a candidate: `1 - (1 - s^r)^b`.
    pub fn candidate_probability(&self, s: f64) -> f64 {
        1.0 - (1.0 - s.powi(self.rows as i32)).powi(self.bands as i32)
    }
}

fn integrate(f: impl Fn(f64) -> f64, a: f64, b: f64) -> f64 {
    // composite Simpson rule; the integrands are smooth polynomials in s
    const N: usize = 2000;
    let h = (b - a) / N as f64;
    let mut sum = f(a) + f(b);
    for i in 1..N {
        let x = a + i as f64 * h;
        sum += if i % 2 == 1 { 4.0 } else { 2.0 } * f(x);
    }
    sum * h / 3.0
}

/// Bands x rows (with `bands * rows <= num_perm`) minimising the weighted area of false positives
/// (pairs below `threshold` that become candidates) and false negatives (pairs above it that do
/// not), as datasketch's `MinHashLSH` does.
pub fn optimal_param(
    threshold: f64,
    num_perm: usize,
    fp_weight: f64,
    fn_weight: f64,
) -> Result<Lsh, DedupError> {
    if !(threshold > 0.0 && threshold < 1.0) {
        return Err(DedupError::InvalidParam(format!("threshold must be in (0, 1), got {threshold}")));
    }
    if num_perm == 0 {
        return Err(DedupError::InvalidParam("num_perm must be at least 1".into()));
    }
    let mut best = (f64::INFINITY, Lsh { bands: 1, rows: 1 });
    for b in 1..=num_perm {
        for r in 1..=num_perm / b {
            let (bf, rf) = (b as f64, r as f64);
            let fp = integrate(|s| 1.0 - (1.0 - s.powf(rf)).powf(bf), 0.0, threshold);
            let fneg = integrate(|s| (1.0 - s.powf(rf)).powf(bf), threshold, 1.0);
            let err = fp * fp_weight + fneg * fn_weight;
            if err < best.0 {
                best = (err, Lsh { bands: b, rows: r });
            }
        }
    }
    Ok(best.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimal_param_is_sensible() {
        let p = optimal_param(0.8, 112, 0.5, 0.5).unwrap();
        assert!(p.bands * p.rows <= 112);
        // the S-curve's steepest point sits near the threshold
        let mid = (1.0 / p.bands as f64).powf(1.0 / p.rows as f64);
        assert!((mid - 0.8).abs() < 0.1, "{p:?} {mid}");
        assert!(optimal_param(1.5, 112, 0.5, 0.5).is_err());
    }

    #[test]
    fn band_keys_differ_per_band() {
        let l = Lsh::default();
        let sig = vec![7u32; 112];
        let mut out = vec![0u64; 14];
        l.band_hashes_into(&sig, 1, &mut out);
        let mut u = out.clone();
        u.sort_unstable();
        u.dedup();
        assert_eq!(u.len(), 14);
    }

    #[test]
    fn rejects_too_many_rows() {
        assert!(Lsh::new(15, 8, 112).is_err());
        assert!(Lsh::new(0, 8, 112).is_err());
    }
}

//! llmpipe-dedup: near-duplicate detection at crawl scale.
//!
//! Pipeline (each step a pure function of its inputs, so an executor can run it anywhere and write
//! its output to disk): shingles -> MinHash signature -> LSH band keys (per document, a map step) ->
//! candidate groups per bucket (per partition of the band keys, a shuffle step) -> edges, optionally
//! verified by exact Jaccard on the shingle sets -> union-find (one `u32` per document) -> keep the
//! smallest document of every cluster.
//!
//! Nothing here knows about Python; `llmpipe-py` converts arguments and releases the GIL.

pub mod cluster;
pub mod decont;
pub mod lines;
pub mod lsh;
pub mod minhash;
pub mod shingle;
pub mod substr;

use rayon::prelude::*;
use std::sync::atomic::AtomicBool;
use xxhash_rust::xxh3::xxh3_64_with_seed;

pub use cluster::{bucket_groups, group_edges, Groups, ShingleStore, UnionFind, MAX_COMPARE};
pub use llmpipe_text::Normalization;
pub use lsh::{optimal_param, Lsh};
pub use minhash::{estimate_jaccard, MinHasher};
pub use shingle::{jaccard, shingles, ShingleConfig, ShingleUnit, Shingler};

/// The widest vector code the dedup kernels may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdCap {
    Scalar,
    Avx2,
    Avx512,
}

/// The cap on vector code: `LLMPIPE_DEDUP_SIMD=scalar` or `=avx2` in the environment (read once per
/// process) keeps the kernels to the portable or AVX2 paths, to check that every path gives the
/// same signatures; otherwise (the default) each kernel uses what the CPU has.
pub fn simd_cap() -> SimdCap {
    static CAP: std::sync::OnceLock<SimdCap> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| match std::env::var("LLMPIPE_DEDUP_SIMD").as_deref() {
        Ok("scalar") => SimdCap::Scalar,
        Ok("avx2") => SimdCap::Avx2,
        _ => SimdCap::Avx512,
    })
}

/// Errors of the dedup core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DedupError {
    /// A parameter is out of range or inconsistent.
    InvalidParam(String),
    /// Verification needed the shingle set of a document that was not loaded.
    MissingShingles(u32),
    /// The caller's stop flag was set (Ctrl-C).
    Interrupted,
}

impl std::fmt::Display for DedupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidParam(m) => write!(f, "{m}"),
            Self::MissingShingles(d) => write!(f, "no shingle set loaded for document {d}"),
            Self::Interrupted => write!(f, "interrupted"),
        }
    }
}

impl std::error::Error for DedupError {}

/// MinHash signatures of a batch (`texts.len() * num_perm` values, row-major), in parallel.
pub fn signatures(texts: &[&str], cfg: &ShingleConfig, hasher: &MinHasher) -> Vec<u32> {
    let p = hasher.num_perm();
    let mut out = vec![0u32; texts.len() * p];
    if p == 0 {
        return out;
    }
    out.par_chunks_mut(p).zip(texts.par_iter()).for_each_init(
        || (Shingler::default(), Vec::new()),
        |(sh, buf), (sig, t)| {
            sh.hashes(t, cfg, buf);
            hasher.signature_into(buf, sig);
        },
    );
    out
}

/// What the map step keeps per document: band keys, shingle count, and optionally the shingle set.
#[derive(Clone, Debug, Default)]
pub struct Sketches {
    /// `n * bands` bucket keys, row-major.
    pub bands: Vec<u64>,
    /// Shingles per document (distinct ones when kept; 0: empty document, never a candidate).
    pub n_shingles: Vec<u32>,
    /// `n + 1` offsets into `shingle_data` (empty when shingles were not kept).
    pub shingle_offsets: Vec<u64>,
    pub shingle_data: Vec<u32>,
}

/// Band keys (and shingle sets if `keep_shingles`) of a batch, in parallel.
pub fn sketch(
    texts: &[&str],
    cfg: &ShingleConfig,
    hasher: &MinHasher,
    lsh: &Lsh,
    keep_shingles: bool,
) -> Result<Sketches, DedupError> {
    let _ = Lsh::new(lsh.bands, lsh.rows, hasher.num_perm())?;
    let per_doc: Vec<(Vec<u64>, Vec<u32>)> = texts
        .par_iter()
        .map_init(
            || (Shingler::default(), vec![0u32; hasher.num_perm()]),
            |(sh, sig), t| {
                let mut set = Vec::new();
                if keep_shingles {
                    sh.shingles(t, cfg, &mut set);
                } else {
                    sh.hashes(t, cfg, &mut set);
                }
                hasher.signature_into(&set, sig);
                let mut bands = vec![0u64; lsh.bands];
                lsh.band_hashes_into(sig, cfg.seed, &mut bands);
                (bands, set)
            },
        )
        .collect();
    let mut out = Sketches {
        bands: Vec::with_capacity(texts.len() * lsh.bands),
        n_shingles: Vec::with_capacity(texts.len()),
        ..Default::default()
    };
    if keep_shingles {
        out.shingle_offsets.push(0);
        out.shingle_data.reserve(per_doc.iter().map(|d| d.1.len()).sum());
    }
    for (bands, set) in per_doc {
        out.bands.extend_from_slice(&bands);
        out.n_shingles.push(set.len() as u32);
        if keep_shingles {
            out.shingle_data.extend_from_slice(&set);
            out.shingle_offsets.push(out.shingle_data.len() as u64);
        }
    }
    Ok(out)
}

/// 64-bit hashes of document ids: the order key inside a bucket.
pub fn id_hashes(ids: &[&[u8]]) -> Vec<u64> {
    ids.par_iter().map(|id| xxh3_64_with_seed(id, 0x6c6c_6d70)).collect()
}

/// Cluster a batch held in memory: the root (smallest index) of every document's cluster.
///
/// `sigs` holds `n * num_perm` values; documents whose signature is all `u32::MAX` (no shingles)
/// are never candidates. With `verify`, candidate pairs must reach the exact Jaccard threshold on
/// the shingle sets in the store (indexed by position).
pub fn cluster_signatures(
    sigs: &[u32],
    num_perm: usize,
    lsh: &Lsh,
    seed: u64,
    verify: Option<(&ShingleStore, f64)>,
    stop: &AtomicBool,
) -> Result<Vec<u32>, DedupError> {
    let lsh = Lsh::new(lsh.bands, lsh.rows, num_perm)?;
    if !sigs.len().is_multiple_of(num_perm) {
        return Err(DedupError::InvalidParam(format!(
            "{} values is not a multiple of num_perm {num_perm}",
            sigs.len()
        )));
    }
    let n = sigs.len() / num_perm;
    let mut uf = UnionFind::new(n)?;
    let keys: Vec<Option<Vec<u64>>> = sigs
        .par_chunks(num_perm)
        .map(|sig| {
            if sig.iter().all(|&v| v == u32::MAX) {
                return None;
            }
            let mut b = vec![0u64; lsh.bands];
            lsh.band_hashes_into(sig, seed, &mut b);
            Some(b)
        })
        .collect();
    let mut rows: Vec<(u64, u64, u32)> = Vec::with_capacity(n * lsh.bands);
    for (d, k) in keys.iter().enumerate() {
        if let Some(k) = k {
            rows.extend(k.iter().map(|&b| (b, d as u64, d as u32)));
        }
    }
    drop(keys);
    let groups = bucket_groups(&mut rows);
    drop(rows);
    for (a, b) in group_edges(&groups, verify, stop)? {
        uf.union(a, b);
    }
    Ok(uf.roots())
}

/// Cluster texts held in memory: the root (smallest index) of every document's cluster. With
/// `verify_threshold`, candidate pairs are verified by exact Jaccard on their shingle sets.
pub fn cluster_texts(
    texts: &[&str],
    cfg: &ShingleConfig,
    hasher: &MinHasher,
    lsh: &Lsh,
    verify_threshold: Option<f64>,
    stop: &AtomicBool,
) -> Result<Vec<u32>, DedupError> {
    let p = hasher.num_perm();
    let per_doc: Vec<(Vec<u32>, Vec<u32>)> = texts
        .par_iter()
        .map_init(Shingler::default, |sh, t| {
            let mut set = Vec::new();
            if verify_threshold.is_some() {
                sh.shingles(t, cfg, &mut set);
            } else {
                sh.hashes(t, cfg, &mut set);
            }
            let sig = hasher.signature(&set);
            if verify_threshold.is_none() {
                set = Vec::new();
            }
            (sig, set)
        })
        .collect();
    let mut sigs = Vec::with_capacity(texts.len() * p);
    let mut offsets = vec![0u64];
    let mut data = Vec::new();
    for (sig, set) in per_doc {
        sigs.extend_from_slice(&sig);
        data.extend_from_slice(&set);
        offsets.push(data.len() as u64);
    }
    let mut store = ShingleStore::default();
    let docs: Vec<u32> = (0..texts.len() as u32).collect();
    store.extend(&docs, &offsets, &data)?;
    drop(data);
    cluster_signatures(&sigs, p, lsh, cfg.seed, verify_threshold.map(|t| (&store, t)), stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_duplicates_cluster_and_unrelated_do_not() {
        let base = "the quick brown fox jumps over the lazy dog while the cat watches from the warm \
                    windowsill and the birds sing in the old oak tree near the river bank today";
        let near = base.replace("warm", "sunny");
        let other = "completely different words appear in this sentence about databases and the \
                     storage engines that keep records durable across crashes and power failures";
        let texts = [other, base, near.as_str(), ""];
        let cfg = ShingleConfig::default();
        let h = MinHasher::new(112, 1);
        let sigs = signatures(&texts, &cfg, &h);
        let mut store = ShingleStore::default();
        let sets: Vec<Vec<u32>> = texts.iter().map(|t| shingles(t, &cfg)).collect();
        let mut offs = vec![0u64];
        let mut data = Vec::new();
        for s in &sets {
            data.extend_from_slice(s);
            offs.push(data.len() as u64);
        }
        store.extend(&[0, 1, 2, 3], &offs, &data).unwrap();
        let lsh = Lsh { bands: 20, rows: 5 };
        let roots =
            cluster_signatures(&sigs, 112, &lsh, 1, Some((&store, 0.5)), &AtomicBool::new(false)).unwrap();
        assert_eq!(roots, vec![0, 1, 1, 3]);
    }

    #[test]
    fn sketch_matches_signatures() {
        let texts = ["a b c d e f g", "", "one"];
        let cfg = ShingleConfig::default();
        let h = MinHasher::new(112, 3);
        let s = sketch(&texts, &cfg, &h, &Lsh::default(), true).unwrap();
        assert_eq!(s.n_shingles, vec![3, 0, 1]);
        assert_eq!(s.shingle_offsets, vec![0, 3, 3, 4]);
        let sigs = signatures(&texts, &cfg, &h);
        let mut b = vec![0u64; 14];
        Lsh::default().band_hashes_into(&sigs[..112], cfg.seed, &mut b);
        assert_eq!(&s.bands[..14], &b[..]);
    }
}

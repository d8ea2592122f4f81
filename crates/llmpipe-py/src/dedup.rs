//! Bindings for llmpipe-dedup: MinHash sketches, LSH groups, verification and union-find.
//!
//! Inputs arrive as buffers (numpy arrays, Arrow buffers), read in place; results leave as
//! little-endian `bytes` that Python wraps with `np.frombuffer`. Every call handles a whole batch
//! with the GIL released and rayon threads inside.

use llmpipe_dedup::{self as core, Lsh, MinHasher, ShingleConfig, ShingleUnit};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffers::{to_bytes, view};
use crate::errors::{enter, enter_interruptible, enter_ok, ConfigError, CoreError};

/// Strings of an Arrow (large_)string column given as int64 offsets and the data buffer.
fn strings<'a>(offsets: &'a [i64], data: &'a [u8]) -> PyResult<Vec<&'a str>> {
    llmpipe_text::arrow_strs(offsets, data).collect::<Result<_, _>>().map_err(ConfigError::new_err)
}

/// How texts become shingles and MinHash signatures: the parameters every call shares
/// (`llmpipe.dedup.Shingling` builds one). Checked once, here.
#[pyclass(frozen, module = "llmpipe._core")]
pub struct Shingling {
    cfg: ShingleConfig,
    num_perm: usize,
}

#[pymethods]
impl Shingling {
    #[new]
    #[pyo3(signature = (num_perm=112, ngram=5, seed=1, unit="words", lowercase=true, strip_punctuation=true, nfc=true))]
    fn new(
        num_perm: usize,
        ngram: usize,
        seed: u64,
        unit: &str,
        lowercase: bool,
        strip_punctuation: bool,
        nfc: bool,
    ) -> PyResult<Self> {
        let unit = match unit {
            "words" => ShingleUnit::Words,
            "chars" => ShingleUnit::Chars,
            other => {
                return Err(ConfigError::new_err(format!("unit must be 'words' or 'chars', got {other:?}")))
            }
        };
        if ngram == 0 {
            return Err(ConfigError::new_err("ngram must be at least 1"));
        }
        if num_perm == 0 {
            return Err(ConfigError::new_err("num_perm must be at least 1"));
        }
        let norm = core::Normalization { nfc, lowercase, collapse_whitespace: true, strip_punctuation };
        Ok(Self { cfg: ShingleConfig { unit, ngram, seed, norm }, num_perm })
    }
}

impl Shingling {
    fn hasher(&self) -> MinHasher {
        MinHasher::new(self.num_perm, self.cfg.seed)
    }
}

/// MinHash signatures of a string column: `n * num_perm` uint32 values as bytes.
#[pyfunction]
fn minhash_signatures<'py>(
    py: Python<'py>,
    offsets: PyBuffer<i64>,
    data: PyBuffer<u8>,
    shingling: PyRef<'py, Shingling>,
) -> PyResult<Bound<'py, PyBytes>> {
    let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
    let sh: &Shingling = &shingling;
    let sigs = enter(py, || -> PyResult<Vec<u32>> {
        let texts = strings(o, d)?;
        Ok(core::signatures(&texts, &sh.cfg, &sh.hasher()))
    })?;
    Ok(to_bytes(py, &sigs))
}

type SketchBytes<'py> = (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>);

/// Band keys of a string column (the map step of near dedup): `(bands u64[n*b], n_shingles u32[n],
/// shingle_offsets u64[n+1], shingle_data u32[..])`; the last two are empty without `keep_shingles`.
#[pyfunction]
#[pyo3(signature = (offsets, data, shingling, bands=14, rows=8, keep_shingles=true))]
fn minhash_sketch<'py>(
    py: Python<'py>,
    offsets: PyBuffer<i64>,
    data: PyBuffer<u8>,
    shingling: PyRef<'py, Shingling>,
    bands: usize,
    rows: usize,
    keep_shingles: bool,
) -> PyResult<SketchBytes<'py>> {
    let sh: &Shingling = &shingling;
    let lsh = Lsh::new(bands, rows, sh.num_perm).map_err(CoreError::into_py)?;
    let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
    let s = enter(py, || -> PyResult<core::Sketches> {
        let texts = strings(o, d)?;
        core::sketch(&texts, &sh.cfg, &sh.hasher(), &lsh, keep_shingles).map_err(CoreError::into_py)
    })?;
    Ok((
        to_bytes(py, &s.bands),
        to_bytes(py, &s.n_shingles),
        to_bytes(py, &s.shingle_offsets),
        to_bytes(py, &s.shingle_data),
    ))
}

/// 64-bit hashes of a string column of ids (the order key inside a bucket), as bytes.
#[pyfunction]
fn id_hashes<'py>(
    py: Python<'py>,
    offsets: PyBuffer<i64>,
    data: PyBuffer<u8>,
) -> PyResult<Bound<'py, PyBytes>> {
    let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
    let h = enter(py, || -> PyResult<Vec<u64>> {
        let ids: Vec<&[u8]> = strings(o, d)?.into_iter().map(str::as_bytes).collect();
        Ok(core::id_hashes(&ids))
    })?;
    Ok(to_bytes(py, &h))
}

/// Candidate groups of one partition of band rows: `(offsets u64[g+1], members u32[..])`.
#[pyfunction]
fn lsh_groups<'py>(
    py: Python<'py>,
    buckets: PyBuffer<u64>,
    order: PyBuffer<u64>,
    docs: PyBuffer<u32>,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let (b, o, d) = (view(&buckets, "buckets")?, view(&order, "order")?, view(&docs, "docs")?);
    if b.len() != o.len() || b.len() != d.len() {
        return Err(ConfigError::new_err("buckets, order and docs must have the same length"));
    }
    let g = enter_ok(py, || {
        let mut rows: Vec<(u64, u64, u32)> = (0..b.len()).map(|i| (b[i], o[i], d[i])).collect();
        core::bucket_groups(&mut rows)
    });
    Ok((to_bytes(py, &g.offsets), to_bytes(py, &g.members)))
}

/// Shingle sets of candidate documents, kept in Rust between calls.
#[pyclass(module = "llmpipe._core", name = "ShingleStore")]
struct PyShingleStore {
    inner: core::ShingleStore,
}

#[pymethods]
impl PyShingleStore {
    #[new]
    fn new() -> Self {
        Self { inner: core::ShingleStore::default() }
    }

    /// Add the sets of `docs` (increasing): set k is `data[offsets[k]:offsets[k+1]]`.
    fn extend(
        &mut self,
        py: Python<'_>,
        docs: PyBuffer<u32>,
        offsets: PyBuffer<u64>,
        data: PyBuffer<u32>,
    ) -> PyResult<()> {
        let (d, o, v) = (view(&docs, "docs")?, view(&offsets, "offsets")?, view(&data, "data")?);
        let inner = &mut self.inner;
        enter(py, || inner.extend(d, o, v))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Bytes held by the store.
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.nbytes()
    }
}

/// Edges inside candidate groups, verified by exact Jaccard when a store is given: `(a, b)` u32 bytes.
#[pyfunction]
#[pyo3(signature = (offsets, members, store=None, threshold=0.7))]
fn group_edges<'py>(
    py: Python<'py>,
    offsets: PyBuffer<u64>,
    members: PyBuffer<u32>,
    store: Option<PyRef<'py, PyShingleStore>>,
    threshold: f64,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let groups = core::Groups { offsets: offsets.to_vec(py)?, members: view(&members, "members")?.to_vec() };
    if groups.offsets.first().is_some_and(|&x| x != 0)
        || groups.offsets.last().is_some_and(|&x| x as usize != groups.members.len())
        || groups.offsets.windows(2).any(|w| w[1] < w[0] + 2)
    {
        return Err(ConfigError::new_err("group offsets must start at 0, end at len(members), step >= 2"));
    }
    let st = store.as_deref().map(|s| (&s.inner, threshold));
    let edges = enter_interruptible(py, |stop| core::group_edges(&groups, st, stop))?;
    let (a, b): (Vec<u32>, Vec<u32>) = edges.into_iter().unzip();
    Ok((to_bytes(py, &a), to_bytes(py, &b)))
}

/// Disjoint sets over `0..n` whose roots are their smallest members (4 bytes per document).
#[pyclass(module = "llmpipe._core", name = "UnionFind")]
struct PyUnionFind {
    inner: core::UnionFind,
}

#[pymethods]
impl PyUnionFind {
    #[new]
    fn new(n: usize) -> PyResult<Self> {
        Ok(Self { inner: core::UnionFind::new(n).map_err(CoreError::into_py)? })
    }

    fn union_edges(&mut self, py: Python<'_>, a: PyBuffer<u32>, b: PyBuffer<u32>) -> PyResult<()> {
        let (x, y) = (view(&a, "a")?, view(&b, "b")?);
        let inner = &mut self.inner;
        enter(py, || inner.union_edges(x, y))
    }

    /// The root of every element as uint32 bytes.
    fn roots<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let inner = &mut self.inner;
        let r = enter_ok(py, || inner.roots());
        to_bytes(py, &r)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// In-memory near-dup clustering of signatures (`n * num_perm` uint32): the root of every document.
#[pyfunction]
#[pyo3(signature = (signatures, num_perm, bands=14, rows=8, seed=1, store=None, threshold=0.7))]
#[allow(clippy::too_many_arguments)]
fn cluster_signatures<'py>(
    py: Python<'py>,
    signatures: PyBuffer<u32>,
    num_perm: usize,
    bands: usize,
    rows: usize,
    seed: u64,
    store: Option<PyRef<'py, PyShingleStore>>,
    threshold: f64,
) -> PyResult<Bound<'py, PyBytes>> {
    let sigs = view(&signatures, "signatures")?;
    let st = store.as_deref().map(|s| (&s.inner, threshold));
    let lsh = Lsh { bands, rows };
    let roots =
        enter_interruptible(py, |stop| core::cluster_signatures(sigs, num_perm, &lsh, seed, st, stop))?;
    Ok(to_bytes(py, &roots))
}

/// In-memory near-dup clustering of a string column: the root of every document (uint32 bytes).
#[pyfunction]
#[pyo3(signature = (offsets, data, shingling, bands=14, rows=8, verify_threshold=None))]
fn cluster_texts<'py>(
    py: Python<'py>,
    offsets: PyBuffer<i64>,
    data: PyBuffer<u8>,
    shingling: PyRef<'py, Shingling>,
    bands: usize,
    rows: usize,
    verify_threshold: Option<f64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let sh: &Shingling = &shingling;
    let lsh = Lsh::new(bands, rows, sh.num_perm).map_err(CoreError::into_py)?;
    let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
    let roots = enter_interruptible(py, |stop| -> PyResult<Vec<u32>> {
        let texts = strings(o, d)?;
        core::cluster_texts(&texts, &sh.cfg, &sh.hasher(), &lsh, verify_threshold, stop)
            .map_err(CoreError::into_py)
    })?;
    Ok(to_bytes(py, &roots))
}

/// Bands x rows minimising weighted false positives and negatives at `threshold` (as datasketch).
#[pyfunction]
#[pyo3(signature = (threshold, num_perm, fp_weight=0.5, fn_weight=0.5))]
fn lsh_optimal_param(
    py: Python<'_>,
    threshold: f64,
    num_perm: usize,
    fp_weight: f64,
    fn_weight: f64,
) -> PyResult<(usize, usize)> {
    let l = enter(py, || core::optimal_param(threshold, num_perm, fp_weight, fn_weight))?;
    Ok((l.bands, l.rows))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(minhash_signatures, m)?)?;
    m.add_function(wrap_pyfunction!(minhash_sketch, m)?)?;
    m.add_function(wrap_pyfunction!(id_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(lsh_groups, m)?)?;
    m.add_function(wrap_pyfunction!(group_edges, m)?)?;
    m.add_function(wrap_pyfunction!(cluster_signatures, m)?)?;
    m.add_function(wrap_pyfunction!(cluster_texts, m)?)?;
    m.add_function(wrap_pyfunction!(lsh_optimal_param, m)?)?;
    m.add_class::<Shingling>()?;
    m.add_class::<PyShingleStore>()?;
    m.add_class::<PyUnionFind>()?;
    Ok(())
}

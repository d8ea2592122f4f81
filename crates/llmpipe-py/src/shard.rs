//! Bindings for llmpipe-shard: the loader's batch stream (a Rust prefetch thread) and the packer.
//! Arrays leave Rust as [`IdBuffer`]s (owned memory behind the buffer protocol: no copy).

use std::sync::Arc;

use llmpipe_shard::pack::{Packed, Packer, Packing, Token};
use llmpipe_shard::{
    build_batch, crc32_blocks as core_crc32_blocks, masked_targets, BatchOut, Id, Prefetch, Samples,
    ShardRows, Tokens,
};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffers::{buffer, to_bytes, view, Data, IdBuffer, Pool, Pooled};
use crate::errors::{enter, enter_ok, ConfigError, CoreError, ShardError};

/// The shards' memory, kept alive (and exported by Python) for as long as a stream reads it.
struct Sources {
    tokens: Vec<TokenBuf>,
    valid: Vec<PyBuffer<i32>>,
    width: usize,
}

enum TokenBuf {
    U16(PyBuffer<u16>),
    U32(PyBuffer<u32>),
}

impl Sources {
    fn samples(&self) -> PyResult<Samples<'_>> {
        let mut shards = Vec::with_capacity(self.tokens.len());
        for (t, v) in self.tokens.iter().zip(&self.valid) {
            let tokens = match t {
                TokenBuf::U16(b) => Tokens::U16(view(b, "tokens")?),
                TokenBuf::U32(b) => Tokens::U32(view(b, "tokens")?),
            };
            shards.push(ShardRows { tokens, valid: view(v, "valid")? });
        }
        Samples::new(shards, self.width).map_err(|e| ShardError::new_err(e.to_string()))
    }
}

/// `(rows, targets or None, doc_ids or None)`; see [`BatchStream`].
type Triple = (IdBuffer, Option<IdBuffer>, Option<IdBuffer>);

fn make_batch<T: Id + Pooled>(
    samples: &Samples<'_>,
    idx: &[i64],
    eos: u32,
    doc_ids: bool,
    pool: &Arc<Pool>,
) -> Result<Triple, String> {
    let w = samples.width();
    let mut rows: Vec<T> = pool.take(idx.len() * w);
    let mut valid = vec![0i32; idx.len()];
    let mut d: Vec<i32> = if doc_ids { pool.take(idx.len() * (w - 1)) } else { Vec::new() };
    let out = BatchOut { rows: &mut rows, valid: &mut valid, doc_ids: doc_ids.then_some(d.as_mut_slice()) };
    build_batch(samples, idx, eos, out).map_err(|e| e.to_string())?;
    let targets = masked_targets(&rows, &valid, w, -100).map(|t| pool.buffer(t));
    Ok((pool.buffer(rows), targets, doc_ids.then(|| pool.buffer(d))))
}

/// Batches of one rank built ahead by a Rust thread (no GIL): batch `k` holds the samples
/// `plan[k * batch_size : (k + 1) * batch_size]`. `next()` returns `(rows, targets, doc_ids)`, or
/// None at the end of the plan: `rows` holds `batch_size * width` ids (inputs `rows[:, :-1]`, targets
/// `rows[:, 1:]`); `targets` (`batch_size * (width - 1)`, -100 at padding) only when a row of the
/// batch is padded, else None; `doc_ids` (`batch_size * (width - 1)` int32) when asked for.
#[pyclass(module = "llmpipe._core")]
pub struct BatchStream {
    // field order matters: the prefetch thread is joined before the sources are released
    prefetch: Prefetch<Triple, String>,
    _sources: Arc<Sources>,
}

#[pymethods]
impl BatchStream {
    #[new]
    #[pyo3(signature = (tokens, valid, width, plan, batch_size, eos_id, *, dtype="int64", doc_ids=true, depth=4))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        tokens: Vec<Bound<'_, PyAny>>,
        valid: Vec<PyBuffer<i32>>,
        width: usize,
        plan: PyBuffer<i64>,
        batch_size: usize,
        eos_id: u32,
        dtype: &str,
        doc_ids: bool,
        depth: usize,
    ) -> PyResult<Self> {
        if tokens.len() != valid.len() {
            return Err(ConfigError::new_err("one valid array per token array"));
        }
        if batch_size == 0 {
            return Err(ConfigError::new_err("batch_size must be at least 1"));
        }
        let wide = match dtype {
            "int32" => false,
            "int64" => true,
            _ => return Err(ConfigError::new_err(format!("dtype must be int32 or int64, not {dtype:?}"))),
        };
        let mut bufs = Vec::with_capacity(tokens.len());
        for t in &tokens {
            bufs.push(match PyBuffer::<u16>::get(t) {
                Ok(b) => TokenBuf::U16(b),
                Err(_) => TokenBuf::U32(PyBuffer::<u32>::get(t).map_err(|_| {
                    ConfigError::new_err("token arrays must be C-contiguous uint16 or uint32")
                })?),
            });
        }
        let sources = Arc::new(Sources { tokens: bufs, valid, width });
        sources.samples()?; // shapes checked here, errors raised to the caller
        let plan: Vec<i64> = view(&plan, "plan")?.to_vec();
        if !plan.len().is_multiple_of(batch_size) {
            return Err(ConfigError::new_err("plan length must be a multiple of batch_size"));
        }
        let src = sources.clone();
        // batches in the queue, one being built, a few held by the caller: then memory is reused
        let pool = Pool::new(3 * (depth + 4));
        let prefetch = enter_ok(py, || {
            Prefetch::spawn(depth, move |k| {
                let idx = plan.get(k * batch_size..(k + 1) * batch_size)?;
                let samples = match src.samples() {
                    Ok(s) => s,
                    Err(e) => return Some(Err(e.to_string())),
                };
                Some(if wide {
                    make_batch::<i64>(&samples, idx, eos_id, doc_ids, &pool)
                } else {
                    make_batch::<i32>(&samples, idx, eos_id, doc_ids, &pool)
                })
            })
        })?;
        Ok(Self { prefetch, _sources: sources })
    }

    fn next(&self, py: Python<'_>) -> PyResult<Option<Triple>> {
        match enter_ok(py, || self.prefetch.next()) {
            None => Ok(None),
            Some(Ok(t)) => Ok(Some(t)),
            Some(Err(e)) => Err(ShardError::new_err(e)),
        }
    }
}

enum AnyPacker {
    U16(Packer<u16>),
    U32(Packer<u32>),
}

/// Packs documents into samples (see llmpipe_shard::pack); `add`/`finish` return `(rows, valid)`.
#[pyclass(module = "llmpipe._core")]
pub struct SamplePacker {
    inner: AnyPacker,
}

fn packed<T: Token>(p: Packed<T>, wrap: fn(Vec<T>) -> Data) -> (IdBuffer, IdBuffer) {
    (buffer(wrap(p.rows)), buffer(Data::I32(p.valid)))
}

#[pymethods]
impl SamplePacker {
    #[new]
    #[pyo3(signature = (seq_len, eos_id, dtype, packing="concat", best_fit_window=512))]
    fn new(
        seq_len: usize,
        eos_id: u32,
        dtype: &str,
        packing: &str,
        best_fit_window: usize,
    ) -> PyResult<Self> {
        let how = match packing {
            "concat" => Packing::Concat,
            "best_fit" => Packing::BestFit { window: best_fit_window },
            _ => {
                return Err(ConfigError::new_err(format!(
                    "packing must be concat or best_fit, not {packing:?}"
                )))
            }
        };
        let inner = match dtype {
            "uint16" => AnyPacker::U16(Packer::new(how, seq_len, eos_id).map_err(CoreError::into_py)?),
            "uint32" => AnyPacker::U32(Packer::new(how, seq_len, eos_id).map_err(CoreError::into_py)?),
            _ => return Err(ConfigError::new_err(format!("dtype must be uint16 or uint32, not {dtype:?}"))),
        };
        Ok(Self { inner })
    }

    /// Add documents `ids[offsets[i]:offsets[i + 1]]` (uint32 ids, int64 offsets, no EOS).
    fn add(
        &mut self,
        py: Python<'_>,
        ids: PyBuffer<u32>,
        offsets: PyBuffer<i64>,
    ) -> PyResult<(IdBuffer, IdBuffer)> {
        let (ids, offsets) = (view(&ids, "ids")?, view(&offsets, "offsets")?);
        let inner = &mut self.inner;
        enter(py, || match inner {
            AnyPacker::U16(p) => p.add(ids, offsets).map(|o| packed(o, Data::U16)),
            AnyPacker::U32(p) => p.add(ids, offsets).map(|o| packed(o, Data::U32)),
        })
    }

    fn finish(&mut self, py: Python<'_>) -> (IdBuffer, IdBuffer) {
        let inner = &mut self.inner;
        enter_ok(py, || match inner {
            AnyPacker::U16(p) => packed(p.finish(), Data::U16),
            AnyPacker::U32(p) => packed(p.finish(), Data::U32),
        })
    }

    /// (documents, tokens including EOS, padding tokens) so far.
    #[getter]
    fn counts(&self) -> (u64, u64, u64) {
        match &self.inner {
            AnyPacker::U16(p) => (p.documents, p.tokens, p.padding),
            AnyPacker::U32(p) => (p.documents, p.tokens, p.padding),
        }
    }
}

/// CRC-32 (zlib's) of every `block_bytes`-byte piece of `data` (a uint8 buffer, e.g. a memory-mapped
/// shard), in parallel with the GIL released: `4 * ceil(len / block_bytes)` little-endian bytes.
#[pyfunction]
fn crc32_blocks<'py>(
    py: Python<'py>,
    data: PyBuffer<u8>,
    block_bytes: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    if block_bytes == 0 {
        return Err(ConfigError::new_err("block_bytes must be positive"));
    }
    let d = view(&data, "data")?;
    let crcs = enter_ok(py, || core_crc32_blocks(d, block_bytes));
    Ok(to_bytes(py, &crcs))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(crc32_blocks, m)?)?;
    m.add_class::<BatchStream>()?;
    m.add_class::<SamplePacker>()?;
    Ok(())
}

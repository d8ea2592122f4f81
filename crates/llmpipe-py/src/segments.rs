//! Bindings for line/paragraph dedup and exact-substring dedup (llmpipe_dedup::lines, ::substr).
//! One call per batch (or per suffix-array partition), the GIL released, rayon threads inside.

use llmpipe_dedup::lines::{SegmentUnit, Segmenting};
use llmpipe_dedup::substr;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffers::{buffer, view, Data, IdBuffer};
use crate::errors::{enter, enter_ok, ConfigError};

fn segmenting(unit: &str, min_chars: usize, seed: u64) -> PyResult<Segmenting> {
    let unit = match unit {
        "line" => SegmentUnit::Line,
        "paragraph" => SegmentUnit::Paragraph,
        other => {
            return Err(ConfigError::new_err(format!("unit must be 'line' or 'paragraph', got {other:?}")))
        }
    };
    Ok(Segmenting { unit, min_chars, seed })
}

fn strs<'a>(offsets: &'a [i64], data: &'a [u8]) -> Result<Vec<&'a str>, String> {
    llmpipe_text::arrow_strs(offsets, data).collect()
}

fn keys16(b: &[u8], what: &str) -> PyResult<Vec<[u8; 16]>> {
    if !b.len().is_multiple_of(16) {
        return Err(ConfigError::new_err(format!("{what}: length {} is not a multiple of 16", b.len())));
    }
    Ok(b.chunks_exact(16).map(|c| c.try_into().expect("16 bytes")).collect())
}

/// Each text's distinct segment keys: `(text index: uint32, keys: 16 bytes each)`, texts in order.
#[pyfunction]
#[pyo3(signature = (offsets, data, unit="line", min_chars=0, seed=0))]
fn segment_keys<'py>(
    py: Python<'py>,
    offsets: PyBuffer<i64>,
    data: PyBuffer<u8>,
    unit: &str,
    min_chars: usize,
    seed: u64,
) -> PyResult<(IdBuffer, Bound<'py, PyBytes>)> {
    let seg = segmenting(unit, min_chars, seed)?;
    let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
    let rows = enter(py, || strs(o, d).map(|t| seg.keys(&t)))?;
    let docs: Vec<u32> = rows.iter().map(|r| r.0).collect();
    let keys: Vec<u8> = rows.iter().flat_map(|r| r.1).collect();
    Ok((buffer(Data::U32(docs)), PyBytes::new(py, &keys)))
}

/// The texts without their segments whose key is in `repeated` (16-byte keys, sorted), except
/// where `(exempt_docs[j], exempt_keys[j])` names the text that keeps it. Returns the new texts as
/// Arrow large-string buffers `(offsets, data)` and per text the segments and bytes removed.
#[pyfunction]
#[pyo3(signature = (offsets, data, repeated, exempt_docs, exempt_keys, unit="line", min_chars=0, seed=0))]
#[allow(clippy::too_many_arguments)]
fn drop_segments(
    py: Python<'_>,
    offsets: PyBuffer<i64>,
    data: PyBuffer<u8>,
    repeated: PyBuffer<u8>,
    exempt_docs: PyBuffer<u32>,
    exempt_keys: PyBuffer<u8>,
    unit: &str,
    min_chars: usize,
    seed: u64,
) -> PyResult<(IdBuffer, IdBuffer, IdBuffer, IdBuffer)> {
    let seg = segmenting(unit, min_chars, seed)?;
    let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
    let rep = keys16(view(&repeated, "repeated")?, "repeated")?;
    if !rep.windows(2).all(|w| w[0] < w[1]) {
        return Err(ConfigError::new_err("repeated: keys must be sorted and distinct"));
    }
    let ed = view(&exempt_docs, "exempt_docs")?;
    let ek = keys16(view(&exempt_keys, "exempt_keys")?, "exempt_keys")?;
    if ed.len() != ek.len() {
        return Err(ConfigError::new_err("exempt_docs and exempt_keys differ in length"));
    }
    let mut exempt: Vec<(u32, [u8; 16])> = ed.iter().copied().zip(ek).collect();
    exempt.sort_unstable();
    let (texts, ns, bs) = enter(py, || strs(o, d).map(|t| seg.drop_repeated(&t, &rep, &exempt)))?;
    let (offs, out) = enter_ok(py, || {
        let mut offs = Vec::with_capacity(texts.len() + 1);
        let mut out = Vec::with_capacity(texts.iter().map(String::len).sum());
        offs.push(0i64);
        for t in &texts {
            out.extend_from_slice(t.as_bytes());
            offs.push(out.len() as i64);
        }
        (offs, out)
    });
    let bs: Vec<i64> = bs.into_iter().map(|b| b as i64).collect();
    Ok((buffer(Data::I64(offs)), buffer(Data::U8(out)), buffer(Data::U32(ns)), buffer(Data::I64(bs))))
}

/// Exact-substring dedup of `text` (documents joined by 0xFF): the merged `(start, end)` spans at
/// or after `start` of at least `min_len` bytes within a document that occur earlier in `text`, as
/// int64 pairs relative to `start`.
#[pyfunction]
#[pyo3(signature = (text, start, min_len))]
fn repeated_spans(py: Python<'_>, text: PyBuffer<u8>, start: usize, min_len: usize) -> PyResult<IdBuffer> {
    let t = view(&text, "text")?;
    if t.len() > substr::MAX_BYTES {
        return Err(ConfigError::new_err(format!(
            "a suffix-array partition holds at most {} bytes, got {}",
            substr::MAX_BYTES,
            t.len()
        )));
    }
    if start > t.len() {
        return Err(ConfigError::new_err("start is past the end of the text"));
    }
    let spans = enter_ok(py, || substr::repeated_spans(t, start, min_len));
    let flat: Vec<i64> = spans.iter().flat_map(|&(s, e)| [(s - start) as i64, (e - start) as i64]).collect();
    Ok(buffer(Data::I64(flat)))
}

/// The suffix array of `text` as int32 (for the benchmark against libdivsufsort).
#[pyfunction]
fn suffix_array(py: Python<'_>, text: PyBuffer<u8>) -> PyResult<IdBuffer> {
    let t = view(&text, "text")?;
    if t.len() > substr::MAX_BYTES {
        return Err(ConfigError::new_err(format!("text over {} bytes", substr::MAX_BYTES)));
    }
    Ok(buffer(Data::I32(enter_ok(py, || substr::suffix_array(t)))))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(segment_keys, m)?)?;
    m.add_function(wrap_pyfunction!(drop_segments, m)?)?;
    m.add_function(wrap_pyfunction!(repeated_spans, m)?)?;
    m.add_function(wrap_pyfunction!(suffix_array, m)?)?;
    Ok(())
}

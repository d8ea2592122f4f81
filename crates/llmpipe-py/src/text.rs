//! Text normalisation and 128-bit content hashes, whole batches at a time.

use llmpipe_text::clean::{clean_arrow, Form};
use llmpipe_text::{content_hash, count_byte, count_words_arrow, normalize, Normalization};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyBytes;

use crate::buffers::{buffer, to_bytes, view, Data, IdBuffer};
use crate::errors::{enter, enter_ok, ConfigError};

fn how(lowercase: bool, collapse_whitespace: bool, strip_punctuation: bool, nfc: bool) -> Normalization {
    Normalization { nfc, lowercase, collapse_whitespace, strip_punctuation }
}

/// Normalise a batch of texts (NFC, lower-case, collapse whitespace by default).
#[pyfunction]
#[pyo3(signature = (texts, lowercase=true, collapse_whitespace=true, strip_punctuation=false, nfc=true))]
fn normalize_batch(
    py: Python<'_>,
    texts: Vec<PyBackedStr>,
    lowercase: bool,
    collapse_whitespace: bool,
    strip_punctuation: bool,
    nfc: bool,
) -> Vec<String> {
    let h = how(lowercase, collapse_whitespace, strip_punctuation, nfc);
    enter_ok(py, || texts.iter().map(|t| normalize(t, h)).collect())
}

/// 128-bit content hashes of a batch, as `16 * len(texts)` little-endian bytes.
#[pyfunction]
#[pyo3(signature = (texts, seed=0, lowercase=true, collapse_whitespace=true, strip_punctuation=false, nfc=true))]
fn content_hashes<'py>(
    py: Python<'py>,
    texts: Vec<PyBackedStr>,
    seed: u64,
    lowercase: bool,
    collapse_whitespace: bool,
    strip_punctuation: bool,
    nfc: bool,
) -> Bound<'py, PyBytes> {
    let h = how(lowercase, collapse_whitespace, strip_punctuation, nfc);
    let out: Vec<u8> = enter_ok(py, || {
        let mut out = Vec::with_capacity(texts.len() * 16);
        for t in &texts {
            out.extend_from_slice(&content_hash(t, h, seed).to_le_bytes());
        }
        out
    });
    PyBytes::new(py, &out)
}

/// Words per document (`len(text.split())`) of an Arrow string column given as its int64 offsets
/// and data buffer; returns `4 * n` bytes of little-endian u32 counts. One call per batch.
#[pyfunction]
fn word_counts<'py>(
    py: Python<'py>,
    offsets: PyBuffer<i64>,
    data: PyBuffer<u8>,
) -> PyResult<Bound<'py, PyBytes>> {
    let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
    let counts = enter(py, || count_words_arrow(o, d))?;
    Ok(to_bytes(py, &counts))
}

/// The normalize stage's cleaning (llmpipe_text::clean) of an Arrow string column given as int64
/// offsets and data: `(offsets, data, changed)`, the new column's buffers and the rows that changed.
#[pyfunction]
#[pyo3(signature = (offsets, data, form="NFC"))]
fn clean_texts(
    py: Python<'_>,
    offsets: PyBuffer<i64>,
    data: PyBuffer<u8>,
    form: &str,
) -> PyResult<(IdBuffer, IdBuffer, usize)> {
    let f = Form::parse(form).ok_or_else(|| ConfigError::new_err(format!("unknown normal form {form:?}")))?;
    let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
    let (offs, out, changed) = enter(py, || clean_arrow(o, d, f))?;
    Ok((buffer(Data::I64(offs)), buffer(Data::U8(out)), changed))
}

/// How many bytes of a buffer (bytes, memoryview, numpy) equal `byte`: one call per file block.
#[pyfunction]
fn count_bytes(py: Python<'_>, data: PyBuffer<u8>, byte: u8) -> PyResult<usize> {
    let d = view(&data, "data")?;
    Ok(enter_ok(py, || count_byte(d, byte)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(count_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(clean_texts, m)?)?;
    m.add_function(wrap_pyfunction!(word_counts, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_batch, m)?)?;
    m.add_function(wrap_pyfunction!(content_hashes, m)?)?;
    Ok(())
}

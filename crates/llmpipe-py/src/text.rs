//! Text normalisation and 128-bit content hashes, whole batches at a time.

use llmpipe_text::clean::{clean_arrow, Form};
use llmpipe_text::html::html_depth;
use llmpipe_text::jsonl::{parse_block, Fields};
use llmpipe_text::{count_byte, count_words_arrow, normalize, prefix_ranges, Normalization};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyList};

use crate::buffers::{buffer, to_bytes, view, Data, IdBuffer};
use crate::errors::{enter, enter_ok, ConfigError};
use crate::quality::Texts;

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

/// How deep the elements of each HTML page nest (`llmpipe_text::html::html_depth`); a page past
/// `limit` reads as `limit + 1` (its scan stops there).
#[pyfunction]
fn html_depths(py: Python<'_>, pages: Vec<PyBackedStr>, limit: usize) -> Vec<usize> {
    enter_ok(py, || pages.iter().map(|p| html_depth(p.as_bytes(), limit)).collect())
}

/// 128-bit content hashes of a batch (a list of str, or an Arrow column's int64 offsets and data),
/// as `16 * len(texts)` little-endian bytes.
#[pyfunction]
#[pyo3(signature = (texts, seed=0, lowercase=true, collapse_whitespace=true, strip_punctuation=false, nfc=true))]
fn content_hashes<'py>(
    py: Python<'py>,
    texts: Texts,
    seed: u64,
    lowercase: bool,
    collapse_whitespace: bool,
    strip_punctuation: bool,
    nfc: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let h = how(lowercase, collapse_whitespace, strip_punctuation, nfc);
    let texts = texts.strs()?;
    let out = enter_ok(py, || llmpipe_text::content_hashes(&texts, h, seed));
    Ok(PyBytes::new(py, &out))
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

/// The first `max_chars` characters of each string of an Arrow string column (int64 offsets and
/// data buffer) as UTF-8 bytes objects, one list per batch: what Arrow's
/// `utf8_slice_codeunits(0, max_chars)` then `to_pylist` gives, without a sliced column (Arrow's
/// way took 0.30 CPU-s against 0.13 for 104,000 web documents in batches of 2,000).
#[pyfunction]
fn utf8_prefixes<'py>(
    py: Python<'py>,
    offsets: PyBuffer<i64>,
    data: PyBuffer<u8>,
    max_chars: usize,
) -> PyResult<Bound<'py, PyList>> {
    let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
    let ranges = enter(py, || prefix_ranges(o, d, max_chars))?;
    PyList::new(py, ranges.into_iter().map(|(s, e)| PyBytes::new(py, &d[s..e])))
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

/// The columns of one block of a JSON Lines file, from `parse_block`.
type JsonlBlock = (
    IdBuffer,
    IdBuffer,
    IdBuffer,
    IdBuffer,
    IdBuffer,
    IdBuffer,
    IdBuffer,
    Vec<(usize, usize, usize, usize)>,
    usize,
);

/// The documents of a block of whole JSON lines (llmpipe_text::jsonl): `(positions, text_offsets,
/// text, id_offsets, ids, meta_offsets, meta, fallback, lines)`, Arrow string columns with int32
/// offsets; `fallback` holds `(line, start, end, documents before)` of each line left to the
/// Python reader.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn parse_jsonl_block(
    py: Python<'_>,
    block: PyBuffer<u8>,
    first: i64,
    text_field: &str,
    id_field: &str,
    id_prefix: &str,
    max_doc_bytes: usize,
    max_line_bytes: usize,
) -> PyResult<JsonlBlock> {
    let data = view(&block, "block")?;
    let fields = Fields { text: text_field, id: id_field, id_prefix, first, max_doc_bytes, max_line_bytes };
    let b = enter_ok(py, || parse_block(data, &fields));
    let fallback = b.fallback.iter().map(|f| (f.line, f.start, f.end, f.docs_before)).collect();
    Ok((
        buffer(Data::I64(b.positions)),
        buffer(Data::I32(b.text_offsets)),
        buffer(Data::U8(b.text)),
        buffer(Data::I32(b.id_offsets)),
        buffer(Data::U8(b.ids)),
        buffer(Data::I32(b.meta_offsets)),
        buffer(Data::U8(b.meta)),
        fallback,
        b.lines,
    ))
}

/// How many bytes of a buffer (bytes, memoryview, numpy) equal `byte`: one call per file block.
#[pyfunction]
fn count_bytes(py: Python<'_>, data: PyBuffer<u8>, byte: u8) -> PyResult<usize> {
    let d = view(&data, "data")?;
    Ok(enter_ok(py, || count_byte(d, byte)))
}

/// Make this process's Rust thread pool with `threads` threads, before anything else uses it; False
/// when it exists already (made here, or inherited through fork: see `llmpipe_text::threads`).
#[pyfunction]
fn claim_thread_pool(threads: usize) -> bool {
    llmpipe_text::threads::claim_global_pool(threads)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(claim_thread_pool, m)?)?;
    m.add_function(wrap_pyfunction!(parse_jsonl_block, m)?)?;
    m.add_function(wrap_pyfunction!(count_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(clean_texts, m)?)?;
    m.add_function(wrap_pyfunction!(word_counts, m)?)?;
    m.add_function(wrap_pyfunction!(utf8_prefixes, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_batch, m)?)?;
    m.add_function(wrap_pyfunction!(content_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(html_depths, m)?)?;
    Ok(())
}

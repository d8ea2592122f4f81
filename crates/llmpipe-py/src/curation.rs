//! Bindings for the URL filter (llmpipe-quality) and benchmark decontamination (llmpipe-dedup).
//! One call per batch, GIL released; verdicts leave as `bytes` (numpy reads them in place).

use std::borrow::Cow;

use llmpipe_dedup::decont;
use llmpipe_quality::url::{self, ListKind};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffers::{buffer, to_bytes, view, Data, IdBuffer};
use crate::errors::{enter_ok, ConfigError};
use crate::quality::Texts;

/// datatrove's URLFilter rules over sorted hashed lists: `add_list` each file, `finish`, then judge
/// batches. Verdict codes: 0 keep, 1 domain, 2 subdomain, 3 url, 4 word, 5 soft word, 6 subword,
/// 7 no URL.
#[pyclass(module = "llmpipe._core")]
pub struct UrlFilter {
    inner: url::UrlFilter,
    finished: bool,
}

#[pymethods]
impl UrlFilter {
    /// `psl_rules`: the ICANN section of the Public Suffix List, one rule per entry.
    #[new]
    fn new(psl_rules: Vec<String>, soft_word_threshold: usize) -> Self {
        let rules: Vec<&str> = psl_rules.iter().map(String::as_str).collect();
        Self { inner: url::UrlFilter::new(&rules, soft_word_threshold), finished: false }
    }

    /// Add one list file's bytes (UTF-8; invalid bytes replaced) to `kind` (domains, urls,
    /// banned_words, banned_subwords, soft_banned_words); returns its entries.
    fn add_list(&mut self, py: Python<'_>, kind: &str, data: &[u8]) -> PyResult<usize> {
        let kind = ListKind::parse(kind)
            .ok_or_else(|| ConfigError::new_err(format!("unknown list kind {kind:?}")))?;
        let inner = &mut self.inner;
        self.finished = false;
        Ok(enter_ok(py, || inner.add_list(kind, &String::from_utf8_lossy(data))))
    }

    /// Sort the lists and build the subword automaton (after the last `add_list`).
    fn finish(&mut self, py: Python<'_>) -> PyResult<()> {
        let inner = &mut self.inner;
        enter_ok(py, || inner.finish()).map_err(ConfigError::new_err)?;
        self.finished = true;
        Ok(())
    }

    /// Entries per list: (domains, urls, banned words, banned subwords, soft-banned words).
    fn sizes(&self) -> (usize, usize, usize, usize, usize) {
        self.inner.sizes()
    }

    /// One verdict code per URL (an empty string: no URL).
    fn judge_urls<'py>(&self, py: Python<'py>, urls: Texts) -> PyResult<Bound<'py, PyBytes>> {
        self.check()?;
        let t = urls.strs()?;
        let v: Vec<Option<&str>> = t.iter().map(|u| (!u.is_empty()).then_some(*u)).collect();
        let out = enter_ok(py, || self.inner.judge_batch(&v));
        Ok(PyBytes::new(py, &out))
    }

    /// One verdict code per document metadata (JSON objects): its URL is the first of `fields`
    /// that holds a non-empty string.
    fn judge_metas<'py>(
        &self,
        py: Python<'py>,
        metas: Texts,
        fields: Vec<String>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.check()?;
        let t = metas.strs()?;
        let f: Vec<&str> = fields.iter().map(String::as_str).collect();
        let out = enter_ok(py, || {
            let urls: Vec<Option<Cow<'_, str>>> =
                t.iter().map(|m| url::url_of(m, &f).filter(|u| !u.is_empty())).collect();
            let refs: Vec<Option<&str>> = urls.iter().map(|u| u.as_deref()).collect();
            self.inner.judge_batch(&refs)
        });
        Ok(PyBytes::new(py, &out))
    }
}

impl UrlFilter {
    fn check(&self) -> PyResult<()> {
        if self.finished {
            Ok(())
        } else {
            Err(ConfigError::new_err("UrlFilter: call finish() after the last add_list()"))
        }
    }
}

/// The n-gram hashes (uint64, as bytes) of every text, normalised as lm-eval's decontamination.
#[pyfunction]
fn decont_ngram_hashes<'py>(py: Python<'py>, texts: Texts, n: usize) -> PyResult<Bound<'py, PyBytes>> {
    let t = texts.strs()?;
    let out = enter_ok(py, || decont::ngram_hashes(&t, n));
    Ok(to_bytes(py, &out))
}

/// Per text (int32, as bytes): the set of its first n-gram found in `table` (sorted uint64
/// hashes, no repeats; `sets` int32, one per hash), or -1.
#[pyfunction]
fn decont_first_match<'py>(
    py: Python<'py>,
    texts: Texts,
    n: usize,
    table: PyBuffer<u64>,
    sets: PyBuffer<i32>,
) -> PyResult<Bound<'py, PyBytes>> {
    let t = texts.strs()?;
    let (table, sets) = (view(&table, "table")?, view(&sets, "sets")?);
    if table.len() != sets.len() {
        return Err(ConfigError::new_err("decont_first_match: table and sets differ in length"));
    }
    let out = enter_ok(py, || decont::first_match(&t, n, table, sets));
    Ok(to_bytes(py, &out))
}

/// The texts without the spans of their n-grams found in `table` (as `decont_first_match`):
/// the new texts as Arrow large-string buffers `(offsets, data)`, and per text the set of its first
/// match (int32, -1: none), the spans (uint32) and bytes (int64) cut.
#[pyfunction]
fn decont_cut_spans(
    py: Python<'_>,
    texts: Texts,
    n: usize,
    table: PyBuffer<u64>,
    sets: PyBuffer<i32>,
) -> PyResult<(IdBuffer, IdBuffer, IdBuffer, IdBuffer, IdBuffer)> {
    let t = texts.strs()?;
    let (table, sets) = (view(&table, "table")?, view(&sets, "sets")?);
    if table.len() != sets.len() {
        return Err(ConfigError::new_err("decont_cut_spans: table and sets differ in length"));
    }
    let (offs, out, first, spans, bytes) = enter_ok(py, || {
        let cuts = decont::cut_matches(&t, n, table, sets);
        let mut offs = Vec::with_capacity(cuts.len() + 1);
        let mut out = Vec::with_capacity(cuts.iter().map(|c| c.text.len()).sum());
        offs.push(0i64);
        let (mut first, mut spans, mut bytes) = (Vec::new(), Vec::new(), Vec::new());
        for c in cuts {
            out.extend_from_slice(c.text.as_bytes());
            offs.push(out.len() as i64);
            first.push(c.first);
            spans.push(c.spans);
            bytes.push(c.bytes as i64);
        }
        (offs, out, first, spans, bytes)
    });
    Ok((
        buffer(Data::I64(offs)),
        buffer(Data::U8(out)),
        buffer(Data::I32(first)),
        buffer(Data::U32(spans)),
        buffer(Data::I64(bytes)),
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<UrlFilter>()?;
    m.add_function(wrap_pyfunction!(decont_ngram_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(decont_first_match, m)?)?;
    m.add_function(wrap_pyfunction!(decont_cut_spans, m)?)?;
    Ok(())
}

//! Bindings for llmpipe-quality: heuristic filters, language ID, the quality classifier, PII.
//!
//! Filter configs arrive as JSON (the Python dataclasses, `json.dumps(asdict(cfg))`) and are parsed
//! by serde into the core's typed configs: an unknown key is an error. Every call takes a whole
//! batch and runs it with the GIL released (rayon threads inside).

use std::path::PathBuf;
use std::sync::Arc;

use llmpipe_quality::{self as core, classifier, pii, C4Outcome};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;

use crate::buffers::{buffer, view, Data, IdBuffer};
use crate::errors::{enter, enter_ok, ConfigError};

fn parse<T: core::DeserializeOwned>(what: &str, json: &str) -> PyResult<T> {
    core::parse_config(json).map_err(|e| ConfigError::new_err(format!("{what} config: {e}")))
}

/// A batch of texts: a list of str, or an Arrow string column as `(int64 offsets, data)` buffers
/// (read in place: no Python string per document).
#[derive(FromPyObject)]
pub(crate) enum Texts {
    List(Vec<PyBackedStr>),
    Arrow((PyBuffer<i64>, PyBuffer<u8>)),
}

impl Texts {
    pub(crate) fn strs(&self) -> PyResult<Vec<&str>> {
        match self {
            Texts::List(v) => Ok(v.iter().map(|t| &**t).collect()),
            Texts::Arrow((o, d)) => {
                let (o, d) = (view(o, "offsets")?, view(d, "data")?);
                llmpipe_text::arrow_strs(o, d).collect::<Result<_, _>>().map_err(ConfigError::new_err)
            }
        }
    }
}

type Verdicts = (Vec<Vec<String>>, Vec<Option<String>>);

/// Run the heuristic filters (a JSON `HeuristicsConfig`): per document the reasons
/// (`filter:reason`, empty = keep) and the C4-cleaned text (None = unchanged).
#[pyfunction]
#[pyo3(signature = (texts, config_json, all_reasons=false))]
fn quality_heuristics(
    py: Python<'_>,
    texts: Texts,
    config_json: &str,
    all_reasons: bool,
) -> PyResult<Verdicts> {
    let cfg: core::HeuristicsConfig = parse("heuristics", config_json)?;
    let t = texts.strs()?;
    let out = enter_ok(py, || core::evaluate_batch(&cfg, &t, all_reasons));
    Ok(out.into_iter().map(|v| (v.reasons, v.text)).unzip())
}

/// One keep/drop filter (`gopher_quality`, `gopher_repetition` or `fineweb`): None or the reason.
#[pyfunction]
fn quality_filter(
    py: Python<'_>,
    name: &str,
    texts: Texts,
    config_json: &str,
) -> PyResult<Vec<Option<String>>> {
    let t = texts.strs()?;
    let own = |v: Vec<Option<&'static str>>| v.into_iter().map(|r| r.map(String::from)).collect();
    match name {
        "gopher_quality" => {
            let cfg = parse(name, config_json)?;
            Ok(own(enter_ok(py, || core::gopher_quality_batch(&cfg, &t))))
        }
        "gopher_repetition" => {
            let cfg = parse(name, config_json)?;
            Ok(enter_ok(py, || core::gopher_repetition_batch(&cfg, &t)))
        }
        "fineweb" => {
            let cfg = parse(name, config_json)?;
            Ok(own(enter_ok(py, || core::fineweb_batch(&cfg, &t))))
        }
        other => Err(ConfigError::new_err(format!(
            "unknown filter {other:?}: expected gopher_quality, gopher_repetition or fineweb"
        ))),
    }
}

/// C4 with line cleaning: per document (drop reason or None, cleaned text or None if dropped).
#[pyfunction]
fn quality_c4(py: Python<'_>, texts: Texts, config_json: &str) -> PyResult<Verdicts2> {
    let cfg = parse("c4", config_json)?;
    let t = texts.strs()?;
    let out = enter_ok(py, || core::c4_batch(&cfg, &t));
    Ok(out
        .into_iter()
        .map(|o| match o {
            C4Outcome::Drop(r) => (Some(r.to_string()), None),
            C4Outcome::Keep(t) => (None, Some(t)),
        })
        .unzip())
}
/// Drop reasons and cleaned texts, per document.
type Verdicts2 = (Vec<Option<String>>, Vec<Option<String>>);

/// Drop reasons, the new text column as (int64 offsets, data) buffers, and the rows whose text changed.
type C4Column = (Vec<Option<String>>, IdBuffer, IdBuffer, usize);

/// C4 with line cleaning, for a whole Arrow column: per document the drop reason (or None), and the
/// column of texts after it (a kept document's cleaned text, a dropped one's text as it was) as
/// int64 offsets and data, with the number of kept documents whose text changed. No Python string
/// is made per document.
#[pyfunction]
fn quality_c4_column(py: Python<'_>, texts: Texts, config_json: &str) -> PyResult<C4Column> {
    let cfg = parse("c4", config_json)?;
    let t = texts.strs()?;
    let (reasons, offs, data, changed) = enter_ok(py, || {
        let outcomes = core::c4_batch(&cfg, &t);
        let size = outcomes
            .iter()
            .zip(&t)
            .map(|(o, x)| match o {
                C4Outcome::Drop(_) => x.len(),
                C4Outcome::Keep(k) => k.len(),
            })
            .sum();
        let (mut offs, mut data) = (Vec::with_capacity(t.len() + 1), Vec::with_capacity(size));
        let (mut reasons, mut changed) = (Vec::with_capacity(t.len()), 0usize);
        offs.push(0i64);
        for (o, x) in outcomes.iter().zip(&t) {
            match o {
                C4Outcome::Drop(r) => {
                    reasons.push(Some(r.to_string()));
                    data.extend_from_slice(x.as_bytes());
                }
                C4Outcome::Keep(k) => {
                    reasons.push(None);
                    changed += usize::from(k != x);
                    data.extend_from_slice(k.as_bytes());
                }
            }
            offs.push(data.len() as i64);
        }
        (reasons, offs, data, changed)
    });
    Ok((reasons, buffer(Data::I64(offs)), buffer(Data::U8(data)), changed))
}

/// datatrove's English word split (spaCy rules) of each text: for tests and tools.
#[pyfunction]
fn english_words(py: Python<'_>, texts: Texts) -> PyResult<Vec<Vec<String>>> {
    let t = texts.strs()?;
    Ok(enter_ok(py, || {
        let tok = core::words::EnglishTokenizer::get();
        t.iter().map(|t| tok.split(t).into_iter().map(String::from).collect()).collect()
    }))
}

/// Language of each text: (ISO 639-3 codes, confidences in [0, 1]).
#[pyfunction]
fn detect_language(py: Python<'_>, texts: Texts) -> PyResult<(Vec<String>, Vec<f64>)> {
    let t = texts.strs()?;
    let out = enter_ok(py, || core::detect_language_batch(&t));
    Ok(out.into_iter().map(|(c, s)| (c.to_string(), s)).unzip())
}

/// The core's default of every filter config, as JSON keyed by filter (compared with Python's in tests).
#[pyfunction]
fn quality_defaults() -> String {
    core::default_configs_json()
}

/// Every language code the detector supports, with its English name.
#[pyfunction]
fn language_codes() -> Vec<(String, String)> {
    core::lang::supported()
        .into_iter()
        .map(|c| (c.to_string(), core::lang::name(c).unwrap_or("").to_string()))
        .collect()
}

/// New texts (None = unchanged) and (emails, ipv4, ipv6, phones) per document.
type Redacted = (Vec<Option<String>>, Vec<(u32, u32, u32, u32)>);

/// PII redaction: per document the new text (None = unchanged) and counts
/// (emails, ipv4, ipv6, phones).
#[pyfunction]
fn pii_redact(py: Python<'_>, texts: Texts, config_json: &str) -> PyResult<Redacted> {
    let cfg: pii::PiiConfig = parse("pii", config_json)?;
    let t = texts.strs()?;
    let out = enter_ok(py, || core::redact_batch(&cfg, &t));
    Ok(out.into_iter().map(|(t, c)| (t, (c.emails, c.ipv4, c.ipv6, c.phones))).unzip())
}

/// The hashed n-gram quality classifier.
#[pyclass(frozen, module = "llmpipe._core")]
pub struct QualityModel {
    inner: Arc<classifier::Model>,
}

#[pymethods]
impl QualityModel {
    /// Train by logistic regression with SGD (JSON `TrainConfig`: bits, epochs, lr, l2, seed).
    #[staticmethod]
    #[pyo3(signature = (positive, negative, config_json="{}"))]
    fn train(py: Python<'_>, positive: Texts, negative: Texts, config_json: &str) -> PyResult<Self> {
        let cfg: classifier::TrainConfig = parse("quality model training", config_json)?;
        let (pos, neg) = (positive.strs()?, negative.strs()?);
        let m = enter(py, || classifier::Model::train(&pos, &neg, &cfg))?;
        Ok(Self { inner: Arc::new(m) })
    }

    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let m = enter(py, || classifier::Model::load(&path))?;
        Ok(Self { inner: Arc::new(m) })
    }

    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let m = self.inner.clone();
        enter(py, || m.save(&path).map_err(|e| format!("{}: {e}", path.display())))
    }

    /// Probability of the positive class for each text.
    fn score(&self, py: Python<'_>, texts: Texts) -> PyResult<Vec<f64>> {
        let m = self.inner.clone();
        let t = texts.strs()?;
        Ok(enter_ok(py, || m.score_batch(&t)))
    }

    #[getter]
    fn bits(&self) -> u32 {
        self.inner.bits
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quality_heuristics, m)?)?;
    m.add_function(wrap_pyfunction!(quality_filter, m)?)?;
    m.add_function(wrap_pyfunction!(quality_c4, m)?)?;
    m.add_function(wrap_pyfunction!(quality_c4_column, m)?)?;
    m.add_function(wrap_pyfunction!(english_words, m)?)?;
    m.add_function(wrap_pyfunction!(detect_language, m)?)?;
    m.add_function(wrap_pyfunction!(language_codes, m)?)?;
    m.add_function(wrap_pyfunction!(quality_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(pii_redact, m)?)?;
    m.add_class::<QualityModel>()?;
    Ok(())
}

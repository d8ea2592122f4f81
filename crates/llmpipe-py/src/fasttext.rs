//! Binding for the fastText predictor (llmpipe_quality::fasttext): load a `.bin`/`.ftz` model, predict
//! a whole batch in one call with the GIL released.

use std::path::PathBuf;
use std::sync::Arc;

use llmpipe_quality::fasttext::FastText;
use pyo3::prelude::*;

use crate::errors::{enter, enter_ok, ConfigError, InputError};
use crate::quality::Texts;

/// Labels (indices into `labels`) and probabilities per text, best first.
type Predictions = (Vec<Vec<u32>>, Vec<Vec<f32>>);

/// A supervised fastText model (`.bin` or quantized `.ftz`).
#[pyclass(frozen, module = "llmpipe._core")]
pub struct FastTextModel {
    inner: Arc<FastText>,
}

#[pymethods]
impl FastTextModel {
    /// Read a model file; a bad file (truncated, wrong magic, wrong version) raises one line.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let m = enter(py, || FastText::load(&path).map_err(InputError::new_err))?; // a bad model file is bad input
        Ok(Self { inner: Arc::new(m) })
    }

    /// Top `k` labels (every label when `k` is -1) with probability >= `threshold`, per text.
    #[pyo3(signature = (texts, k=1, threshold=0.0))]
    fn predict(&self, py: Python<'_>, texts: Texts, k: i32, threshold: f32) -> PyResult<Predictions> {
        if k == 0 || k < -1 {
            return Err(ConfigError::new_err(format!("k must be >= 1 (or -1 for every label), not {k}")));
        }
        let m = self.inner.clone();
        let t = texts.strs()?;
        let out = enter_ok(py, || m.predict_batch(&t, k, threshold));
        Ok(out.into_iter().map(|p| p.into_iter().map(|(s, i)| (i, s)).unzip()).unzip())
    }

    /// Label strings as stored in the model (e.g. `__label__en`).
    #[getter]
    fn labels(&self) -> Vec<String> {
        self.inner.labels().to_vec()
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.args.dim
    }

    /// `softmax`, `hs`, `ns` or `ova`.
    #[getter]
    fn loss(&self) -> &'static str {
        use llmpipe_quality::fasttext::LossKind::*;
        match self.inner.args.loss {
            HierarchicalSoftmax => "hs",
            NegativeSampling => "ns",
            Softmax => "softmax",
            OneVsAll => "ova",
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FastTextModel>()?;
    Ok(())
}

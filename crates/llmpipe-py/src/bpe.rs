//! Bindings for llmpipe-bpe: one class, every batch call runs with the GIL released.

use crate::buffers::view;
use crate::errors::{enter, enter_interruptible, enter_ok, ConfigError, CoreError};
use llmpipe_bpe::{hfjson, pattern, tiktoken, train, Allowed, PreTokenizer, Special, Tokenizer, TrainConfig};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyInt, PyList};
use std::path::PathBuf;
use std::sync::Arc;

/// A pattern name (gpt2, cl100k, o200k) or, if it is none of those, a regex source.
fn pre_for(pattern_or_regex: &str) -> Result<PreTokenizer, llmpipe_bpe::Error> {
    let src = pattern::pattern_by_name(pattern_or_regex)
        .map(str::to_string)
        .unwrap_or(pattern_or_regex.to_string());
    PreTokenizer::new(&src)
}

fn allowed(a: Option<Vec<String>>) -> Allowed {
    match a {
        None => Allowed::None,
        Some(v) => Allowed::Some(v),
    }
}

/// (ids as little-endian u32 bytes, offsets as little-endian i64 bytes), written straight into the
/// bytes objects (a memcpy-speed loop; no intermediate vector).
fn flat_bytes<'py>(
    py: Python<'py>,
    ids: &[u32],
    offs: &[i64],
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let ids = PyBytes::new_with(py, ids.len() * 4, |b| {
        for (d, x) in b.chunks_exact_mut(4).zip(ids) {
            d.copy_from_slice(&x.to_le_bytes());
        }
        Ok(())
    })?;
    let offs = PyBytes::new_with(py, offs.len() * 8, |b| {
        for (d, x) in b.chunks_exact_mut(8).zip(offs) {
            d.copy_from_slice(&x.to_le_bytes());
        }
        Ok(())
    })?;
    Ok((ids, offs))
}

/// Byte-level BPE tokenizer (see llmpipe.tokenizer.Tokenizer for the documented API).
#[pyclass(frozen, module = "llmpipe._core")]
pub struct BpeTokenizer {
    inner: Arc<Tokenizer>,
    /// One Python int per id, made on first use: result lists hold references to these instead
    /// of a new int object per token (allocating and freeing those was ~half of `encode`).
    ints: PyOnceLock<Vec<Py<PyInt>>>,
}

impl BpeTokenizer {
    fn wrap(t: Tokenizer) -> Self {
        BpeTokenizer { inner: Arc::new(t), ints: PyOnceLock::new() }
    }

    /// `ids` as a Python list of ints.
    fn id_list<'py>(&self, py: Python<'py>, ids: &[u32]) -> PyResult<Bound<'py, PyList>> {
        let ints = self.ints.get_or_init(py, || {
            (0..self.inner.vocab_size() as u32).map(|i| PyInt::new(py, i).unbind()).collect()
        });
        PyList::new(
            py,
            ids.iter().map(|&i| match ints.get(i as usize) {
                Some(x) => x.bind(py).clone(),
                None => PyInt::new(py, i),
            }),
        )
    }
}

#[pymethods]
impl BpeTokenizer {
    /// Train on text files (streamed line by line, in parallel).
    #[staticmethod]
    #[pyo3(signature = (files, vocab_size, pattern="gpt2", min_frequency=2, max_token_length=None, special_tokens=vec!["<|endoftext|>".to_string()]))]
    fn train(
        py: Python<'_>,
        files: Vec<PathBuf>,
        vocab_size: usize,
        pattern: &str,
        min_frequency: u64,
        max_token_length: Option<usize>,
        special_tokens: Vec<String>,
    ) -> PyResult<Self> {
        let pre = pre_for(pattern).map_err(CoreError::into_py)?;
        let cfg = TrainConfig { vocab_size, min_frequency, max_token_length, special_tokens };
        let t = enter_interruptible(py, |stop| train::train_files(&files, &cfg, pre, stop))?;
        Ok(BpeTokenizer::wrap(t))
    }

    /// Train on in-memory texts (each split into lines like a file).
    #[staticmethod]
    #[pyo3(signature = (texts, vocab_size, pattern="gpt2", min_frequency=2, max_token_length=None, special_tokens=vec!["<|endoftext|>".to_string()]))]
    fn train_texts(
        py: Python<'_>,
        texts: Vec<PyBackedStr>,
        vocab_size: usize,
        pattern: &str,
        min_frequency: u64,
        max_token_length: Option<usize>,
        special_tokens: Vec<String>,
    ) -> PyResult<Self> {
        let pre = pre_for(pattern).map_err(CoreError::into_py)?;
        let cfg = TrainConfig { vocab_size, min_frequency, max_token_length, special_tokens };
        let t = enter_interruptible(py, |stop| {
            let words = train::count_words_texts(&texts, &pre);
            train::train_from_counts(words, &cfg, pre, stop)
        })?;
        Ok(BpeTokenizer::wrap(t))
    }

    /// Load an HF tokenizer.json (byte-level BPE).
    #[staticmethod]
    fn from_file(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let t = enter(py, || Tokenizer::from_json_file(&path))?;
        Ok(BpeTokenizer::wrap(t))
    }

    /// Parse tokenizer.json text.
    #[staticmethod]
    fn from_json(py: Python<'_>, text: &str) -> PyResult<Self> {
        let text = text.to_string();
        let t = enter(py, || hfjson::from_json(&text))?;
        Ok(BpeTokenizer::wrap(t))
    }

    /// Load a tiktoken rank file with a pattern (name or regex) and special tokens (content, id).
    #[staticmethod]
    #[pyo3(signature = (path, pattern, special_tokens))]
    fn from_tiktoken(
        py: Python<'_>,
        path: PathBuf,
        pattern: &str,
        special_tokens: Vec<(String, u32)>,
    ) -> PyResult<Self> {
        let pre = pre_for(pattern).map_err(CoreError::into_py)?;
        let specials = special_tokens.into_iter().map(|(content, id)| Special { content, id }).collect();
        let t = enter(py, || {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| llmpipe_bpe::Error::Io(format!("{}: {e}", path.display())))?;
            tiktoken::from_ranks_text(&text, pre, specials)
        })?;
        Ok(BpeTokenizer::wrap(t))
    }

    /// Write tokenizer.json.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let t = self.inner.clone();
        enter(py, || t.save_json(&path))
    }

    /// tokenizer.json text.
    fn to_json(&self, py: Python<'_>) -> String {
        let t = self.inner.clone();
        enter_ok(py, || hfjson::to_json(&t))
    }

    /// tiktoken rank-file text of the ordinary tokens (rank = id).
    fn to_tiktoken(&self, py: Python<'_>) -> String {
        let t = self.inner.clone();
        enter_ok(py, || tiktoken::to_ranks_text(&t))
    }

    #[pyo3(signature = (text, allowed_special=None))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        text: PyBackedStr,
        allowed_special: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let a = allowed(allowed_special);
        let ids = enter(py, || self.inner.encode(&text, &a))?;
        self.id_list(py, &ids)
    }

    #[pyo3(signature = (texts, allowed_special=None))]
    fn encode_batch<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<PyBackedStr>,
        allowed_special: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let a = allowed(allowed_special);
        let seqs = enter(py, || self.inner.encode_batch(&texts, &a))?;
        let lists = seqs.iter().map(|ids| self.id_list(py, ids)).collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, lists)
    }

    /// (ids as little-endian u32 bytes, n + 1 offsets as little-endian i64 bytes).
    #[pyo3(signature = (texts, allowed_special=None))]
    fn encode_batch_flat<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<PyBackedStr>,
        allowed_special: Option<Vec<String>>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let a = allowed(allowed_special);
        let (ids, offs) = enter(py, || self.inner.encode_batch_flat(&texts, &a))?;
        flat_bytes(py, &ids, &offs)
    }

    /// [`Self::encode_batch_flat`] of a string column given as its int64 offsets and data buffer,
    /// read in place (no Python string per text, no UTF-8 copy of one).
    #[pyo3(signature = (offsets, data, allowed_special=None))]
    fn encode_arrow_flat<'py>(
        &self,
        py: Python<'py>,
        offsets: PyBuffer<i64>,
        data: PyBuffer<u8>,
        allowed_special: Option<Vec<String>>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
        let a = allowed(allowed_special);
        let inner = &self.inner;
        let (ids, offs) = enter(py, || -> PyResult<_> {
            let texts: Vec<&str> =
                llmpipe_text::arrow_strs(o, d).collect::<Result<_, _>>().map_err(ConfigError::new_err)?;
            inner.encode_batch_flat(&texts, &a).map_err(CoreError::into_py)
        })?;
        flat_bytes(py, &ids, &offs)
    }

    #[pyo3(signature = (ids, skip_special_tokens=false))]
    fn decode(&self, py: Python<'_>, ids: Vec<u32>, skip_special_tokens: bool) -> PyResult<String> {
        enter(py, || self.inner.decode(&ids, skip_special_tokens))
    }

    #[pyo3(signature = (ids, skip_special_tokens=false))]
    fn decode_bytes<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<u32>,
        skip_special_tokens: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let b = enter(py, || self.inner.decode_bytes(&ids, skip_special_tokens))?;
        Ok(PyBytes::new(py, &b))
    }

    #[pyo3(signature = (seqs, skip_special_tokens=false))]
    fn decode_batch(
        &self,
        py: Python<'_>,
        seqs: Vec<Vec<u32>>,
        skip_special_tokens: bool,
    ) -> PyResult<Vec<String>> {
        enter(py, || self.inner.decode_batch(&seqs, skip_special_tokens))
    }

    /// Drop the piece caches that encode calls keep for the next ones.
    fn clear_cache(&self) {
        self.inner.clear_cache();
    }

    /// The pieces the pre-tokenizer cuts `text` into.
    fn pre_tokenize(&self, text: &str) -> Vec<String> {
        self.inner.pre_tokenizer().pieces(text).into_iter().map(str::to_string).collect()
    }

    /// The pieces the regex engine (fancy-regex) gives, also for the built-in patterns that
    /// normally run through hand-written scanners: the reference they are tested against.
    fn pre_tokenize_regex(&self, text: &str) -> Vec<String> {
        self.inner.pre_tokenizer().regex_pieces(text).into_iter().map(str::to_string).collect()
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    fn id_to_bytes<'py>(&self, py: Python<'py>, id: u32) -> Option<Bound<'py, PyBytes>> {
        self.inner.id_to_bytes(id).map(|b| PyBytes::new(py, b))
    }

    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    #[getter]
    fn special_tokens(&self) -> Vec<(String, u32)> {
        self.inner.specials().iter().map(|s| (s.content.clone(), s.id)).collect()
    }

    /// The pre-tokenizer regex source.
    #[getter]
    fn pattern(&self) -> String {
        self.inner.pre_tokenizer().source().to_string()
    }
}

/// Word counts for BPE training, fed an Arrow string column of documents at a time (each document
/// followed by a newline, as in a file of them): training on a sample without writing it to disk.
#[pyclass(module = "llmpipe._core")]
pub struct BpeWordCounts {
    pre: PreTokenizer,
    counts: train::WordCounts,
    bytes: u64,
}

#[pymethods]
impl BpeWordCounts {
    #[new]
    #[pyo3(signature = (pattern="gpt2"))]
    fn new(pattern: &str) -> PyResult<Self> {
        let pre = pre_for(pattern).map_err(CoreError::into_py)?;
        Ok(BpeWordCounts { pre, counts: train::WordCounts::default(), bytes: 0 })
    }

    /// Count the documents of a string column given as its int64 offsets and data buffer.
    fn add_documents(&mut self, py: Python<'_>, offsets: PyBuffer<i64>, data: PyBuffer<u8>) -> PyResult<()> {
        let (o, d) = (view(&offsets, "offsets")?, view(&data, "data")?);
        let (pre, counts) = (&self.pre, &mut self.counts);
        enter(py, || train::count_words_docs(counts, o, d, pre))?;
        if let (Some(first), Some(last)) = (o.first(), o.last()) {
            // each document and its newline
            self.bytes += (last - first) as u64 + (o.len() - 1) as u64;
        }
        Ok(())
    }

    /// Bytes counted so far (documents and their newlines).
    #[getter]
    fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Train on the words counted so far (which are used up).
    #[pyo3(signature = (vocab_size, min_frequency=2, max_token_length=None, special_tokens=vec!["<|endoftext|>".to_string()]))]
    fn train(
        &mut self,
        py: Python<'_>,
        vocab_size: usize,
        min_frequency: u64,
        max_token_length: Option<usize>,
        special_tokens: Vec<String>,
    ) -> PyResult<BpeTokenizer> {
        let cfg = TrainConfig { vocab_size, min_frequency, max_token_length, special_tokens };
        let words = std::mem::take(&mut self.counts);
        let pre = self.pre.clone();
        let t = enter_interruptible(py, |stop| train::train_from_counts(words, &cfg, pre, stop))?;
        Ok(BpeTokenizer::wrap(t))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BpeTokenizer>()?;
    m.add_class::<BpeWordCounts>()?;
    Ok(())
}

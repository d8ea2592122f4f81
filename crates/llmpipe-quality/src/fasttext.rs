//! fastText supervised-model inference (`.bin` and quantized `.ftz`), pure Rust.
//!
//! Reads the model files that fastText 0.9 writes (format versions 11 and 12) and predicts exactly as
//! its `predict` does, so that labels and probabilities match the `fasttext` package:
//!
//! - a text is one line: split on ASCII whitespace (and NUL), then the end-of-sentence token `</s>`;
//!   a literal `</s>` token ends the line early, as in fastText's reader;
//! - an in-vocabulary word contributes its row and its character n-grams' bucket rows, an unknown
//!   word only its n-grams (`<word>` with `minn..=maxn` code points, FNV-1a hashed with fastText's
//!   sign-extended bytes); word n-grams up to `wordNgrams` are hashed into the same buckets;
//! - the hidden vector is the f32 average of those rows (product-quantized rows for `.ftz`, with the
//!   quantized norms when the model was quantized with `-qnorm`);
//! - softmax, one-vs-all / negative sampling (fastText's sigmoid table) or hierarchical softmax
//!   (the Huffman tree built from the label counts, searched depth-first with pruning); scores are
//!   `log(p + 1e-5)` and the reported probability is `exp` of it, the top `k` chosen with the same
//!   heap operations as libstdc++ so that ties come out in the same order.

use std::collections::HashMap;
use std::path::Path;

use rayon::prelude::*;

const MAGIC: i32 = 793_712_314;
const EOS: &[u8] = b"</s>";
const LABEL_PREFIX: &[u8] = b"__label__";
const SIGMOID_TABLE_SIZE: usize = 512;
const MAX_SIGMOID: f32 = 8.0;
const KSUB: usize = 256;
/// Character n-grams longer than this (and word n-grams of more words) are refused: the work per word
/// (per line) grows with them, and fastText's own models use at most 6 and 5.
const MAX_NGRAM: i32 = 64;
/// Depth of the hierarchical-softmax tree (searched recursively at prediction): a tree built from
/// positive label counts is at most ~64 deep; a deeper one comes from a crafted file.
const MAX_TREE_DEPTH: usize = 256;
/// The label counts of a hierarchical-softmax model add up to less than this: fastText's tree uses
/// 1e15 for "no node yet" (`build_tree`).
const MAX_LABEL_COUNTS: i64 = 1_000_000_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossKind {
    HierarchicalSoftmax,
    NegativeSampling,
    Softmax,
    OneVsAll,
}

/// The training arguments stored in the model file (the ones inference needs).
#[derive(Clone, Debug)]
pub struct Args {
    pub dim: usize,
    pub word_ngrams: i32,
    pub loss: LossKind,
    pub bucket: i32,
    pub minn: i32,
    pub maxn: i32,
}

/// A byte reader over the file that names what it was reading when the file ends.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Bytes not read yet: every count in the file is checked against them before anything is allocated.
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// `n` items of at least `item` bytes each must fit in what is left of the file.
    fn fits(&self, n: usize, item: usize, what: &str) -> Result<(), String> {
        match n.checked_mul(item) {
            Some(b) if b <= self.left() => Ok(()),
            _ => Err(format!(
                "truncated fastText model (its {what} needs {n} entries of {item} bytes, {} bytes are left)",
                self.left()
            )),
        }
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.left() < n {
            return Err(format!("truncated fastText model (the file ends inside the {what})"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn i32(&mut self, what: &str) -> Result<i32, String> {
        Ok(i32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn i64(&mut self, what: &str) -> Result<i64, String> {
        Ok(i64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }
    fn f32s(&mut self, n: usize, what: &str) -> Result<Vec<f32>, String> {
        let bytes = n.checked_mul(4).ok_or_else(|| format!("invalid fastText model: {what} too large"))?;
        let raw = self.take(bytes, what)?;
        Ok(raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
    }
    fn cstr(&mut self, what: &str) -> Result<&'a [u8], String> {
        let rest = &self.buf[self.pos..];
        let end = memchr_zero(rest)
            .ok_or_else(|| format!("truncated fastText model (the file ends inside the {what})"))?;
        self.pos += end + 1;
        Ok(&rest[..end])
    }
}

fn memchr_zero(s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == 0)
}

fn dims(m: i64, n: i64, what: &str) -> Result<(usize, usize), String> {
    if m < 0 || n < 0 || m > u32::MAX as i64 || n > u32::MAX as i64 {
        return Err(format!("invalid fastText model: {what} has shape {m}x{n}"));
    }
    Ok((m as usize, n as usize))
}

/// fastText's product quantizer: `nsubq` sub-vectors of `dsub` values (the last one `lastdsub`),
/// 256 centroids each.
#[derive(Clone, Debug)]
struct ProductQuantizer {
    nsubq: usize,
    dsub: usize,
    lastdsub: usize,
    centroids: Vec<f32>,
}

impl ProductQuantizer {
    fn load(r: &mut Reader<'_>, what: &str) -> Result<Self, String> {
        let dim = r.i32(what)?;
        let nsubq = r.i32(what)?;
        let dsub = r.i32(what)?;
        let lastdsub = r.i32(what)?;
        let (d, q, s, l) = (dim as i64, nsubq as i64, dsub as i64, lastdsub as i64);
        if dim <= 0 || nsubq <= 0 || dsub <= 0 || lastdsub <= 0 || (q - 1) * s + l != d {
            return Err(format!(
                "invalid fastText model: {what} quantizer dim={dim} nsubq={nsubq} dsub={dsub} lastdsub={lastdsub}"
            ));
        }
        let n = (dim as usize)
            .checked_mul(KSUB)
            .ok_or_else(|| format!("invalid fastText model: {what} too large"))?;
        let centroids = r.f32s(n, what)?;
        Ok(Self { nsubq: nsubq as usize, dsub: dsub as usize, lastdsub: lastdsub as usize, centroids })
    }

    #[inline]
    fn centroid(&self, m: usize, i: u8) -> &[f32] {
        let i = i as usize;
        if m == self.nsubq - 1 {
            let s = m * KSUB * self.dsub + i * self.lastdsub;
            &self.centroids[s..s + self.lastdsub]
        } else {
            let s = (m * KSUB + i) * self.dsub;
            &self.centroids[s..s + self.dsub]
        }
    }
}

#[derive(Clone, Debug)]
struct QuantMatrix {
    rows: usize,
    codes: Vec<u8>,
    pq: ProductQuantizer,
    /// per-row norm codes and their one-dimensional quantizer (`-qnorm`)
    norms: Option<(Vec<u8>, ProductQuantizer)>,
}

#[derive(Clone, Debug)]
enum Matrix {
    Dense { rows: usize, cols: usize, data: Vec<f32> },
    Quant(QuantMatrix),
}

impl Matrix {
    fn load_dense(r: &mut Reader<'_>, what: &str) -> Result<Self, String> {
        let (rows, cols) = dims(r.i64(what)?, r.i64(what)?, what)?;
        let data = r.f32s(rows.saturating_mul(cols), what)?;
        Ok(Matrix::Dense { rows, cols, data })
    }

    fn load_quant(r: &mut Reader<'_>, what: &str) -> Result<Self, String> {
        let qnorm = r.u8(what)? != 0;
        let (rows, cols) = dims(r.i64(what)?, r.i64(what)?, what)?;
        let codesize = r.i32(what)?;
        if codesize < 0 {
            return Err(format!("invalid fastText model: {what} code size {codesize}"));
        }
        let codes = r.take(codesize as usize, what)?.to_vec();
        let pq = ProductQuantizer::load(r, what)?;
        if pq.nsubq * pq.dsub - pq.dsub + pq.lastdsub != cols
            || rows.checked_mul(pq.nsubq) != Some(codes.len())
        {
            return Err(format!("invalid fastText model: {what} codes do not match its shape"));
        }
        let norms = if qnorm {
            let nc = r.take(rows, what)?.to_vec();
            let npq = ProductQuantizer::load(r, what)?;
            Some((nc, npq))
        } else {
            None
        };
        Ok(Matrix::Quant(QuantMatrix { rows, codes, pq, norms }))
    }

    fn rows(&self) -> usize {
        match self {
            Matrix::Dense { rows, .. } => *rows,
            Matrix::Quant(q) => q.rows,
        }
    }

    fn cols(&self) -> usize {
        match self {
            Matrix::Dense { cols, .. } => *cols,
            Matrix::Quant(q) => q.pq.nsubq * q.pq.dsub - q.pq.dsub + q.pq.lastdsub,
        }
    }

    /// `x += row i` (fastText's `addRowToVector`).
    #[inline]
    fn add_row(&self, x: &mut [f32], i: usize) {
        match self {
            Matrix::Dense { cols, data, .. } => {
                for (a, b) in x.iter_mut().zip(&data[i * cols..(i + 1) * cols]) {
                    *a += *b;
                }
            }
            Matrix::Quant(q) => {
                let alpha = q.norm(i);
                let code = &q.codes[i * q.pq.nsubq..(i + 1) * q.pq.nsubq];
                for (m, &c) in code.iter().enumerate() {
                    let cent = q.pq.centroid(m, c);
                    let off = m * q.pq.dsub;
                    for (n, v) in cent.iter().enumerate() {
                        x[off + n] += alpha * v;
                    }
                }
            }
        }
    }

    /// `row i . x` accumulated in f32 in fastText's order.
    #[inline]
    fn dot_row(&self, x: &[f32], i: usize) -> f32 {
        match self {
            Matrix::Dense { cols, data, .. } => {
                let mut d = 0.0f32;
                for (a, b) in data[i * cols..(i + 1) * cols].iter().zip(x) {
                    d += a * b;
                }
                d
            }
            Matrix::Quant(q) => {
                let alpha = q.norm(i);
                let code = &q.codes[i * q.pq.nsubq..(i + 1) * q.pq.nsubq];
                let mut res = 0.0f32;
                for (m, &c) in code.iter().enumerate() {
                    let cent = q.pq.centroid(m, c);
                    let off = m * q.pq.dsub;
                    for (n, v) in cent.iter().enumerate() {
                        res += x[off + n] * v;
                    }
                }
                res * alpha
            }
        }
    }
}

impl QuantMatrix {
    #[inline]
    fn norm(&self, i: usize) -> f32 {
        match &self.norms {
            Some((codes, npq)) => npq.centroid(0, codes[i])[0],
            None => 1.0,
        }
    }
}

/// fastText's string hash: FNV-1a over the bytes read as *signed* chars.
#[inline]
pub fn hash(s: &[u8]) -> u32 {
    let mut h: u32 = 2_166_136_261;
    for &b in s {
        h ^= b as i8 as i32 as u32;
        h = h.wrapping_mul(16_777_619);
    }
    h
}

#[derive(Clone, Debug)]
struct Node {
    left: i32,
    right: i32,
}

/// Prediction: per requested label, (probability, label index), best first.
pub type Prediction = Vec<(f32, u32)>;

/// A loaded supervised fastText model.
#[derive(Debug)]
pub struct FastText {
    pub args: Args,
    words: HashMap<Vec<u8>, i32, ahash::RandomState>,
    /// per word id: its own row then its n-gram rows (fastText's `initNgrams`)
    subwords: Vec<Vec<i32>>,
    nwords: i32,
    labels: Vec<String>,
    /// pruned bucket -> row (quantized with `-cutoff`); `None` = not pruned
    pruneidx: Option<HashMap<i32, i32, ahash::RandomState>>,
    input: Matrix,
    output: Matrix,
    tree: Vec<Node>,
    sigmoid: Vec<f32>,
}

fn std_log(x: f32) -> f32 {
    ((x as f64) + 1e-5).ln() as f32
}

/// libstdc++'s heap algorithms with fastText's comparator (`a.0 > b.0`: a min-heap on the score),
/// reproduced so that equal scores are kept and ordered as fastText orders them.
mod heap {
    type P = (f32, i32);
    #[inline]
    fn comp(a: &P, b: &P) -> bool {
        a.0 > b.0
    }
    fn push_hole(h: &mut [P], mut hole: usize, top: usize, v: P) {
        while hole > top {
            let parent = (hole - 1) / 2;
            if !comp(&h[parent], &v) {
                break;
            }
            h[hole] = h[parent];
            hole = parent;
        }
        h[hole] = v;
    }
    fn adjust(h: &mut [P], mut hole: usize, len: usize, v: P) {
        let top = hole;
        let mut second = hole;
        while len >= 1 && second < (len - 1) / 2 {
            second = 2 * (second + 1);
            if comp(&h[second], &h[second - 1]) {
                second -= 1;
            }
            h[hole] = h[second];
            hole = second;
        }
        if len & 1 == 0 && len >= 2 && second == (len - 2) / 2 {
            second = 2 * (second + 1);
            h[hole] = h[second - 1];
            hole = second - 1;
        }
        push_hole(h, hole, top, v);
    }
    /// Move the top to position `last` (the heap is `h[..last]` afterwards).
    fn pop_into(h: &mut [P], last: usize) {
        let v = h[last];
        h[last] = h[0];
        adjust(h, 0, last, v);
    }
    pub fn push(h: &mut Vec<P>, v: P) {
        h.push(v);
        let n = h.len();
        push_hole(h, n - 1, 0, v);
    }
    pub fn pop(h: &mut Vec<P>) {
        let n = h.len();
        if n > 1 {
            pop_into(h, n - 1);
        }
        h.pop();
    }
    pub fn sort(h: &mut [P]) {
        let mut last = h.len();
        while last > 1 {
            last -= 1;
            pop_into(h, last);
        }
    }
}

impl FastText {
    /// Read a `.bin` / `.ftz` file; errors are one line, prefixed with the path.
    pub fn load(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn from_bytes(buf: &[u8]) -> Result<Self, String> {
        let mut r = Reader { buf, pos: 0 };
        let magic = r.i32("header")?;
        if magic != MAGIC {
            return Err(format!("not a fastText model (magic number {magic:#x}, expected {MAGIC:#x})"));
        }
        let version = r.i32("header")?;
        if version != 11 && version != 12 {
            return Err(format!("fastText model version {version} is not supported (11 or 12)"));
        }
        let a = "arguments";
        let dim = r.i32(a)?;
        let _ws = r.i32(a)?;
        let _epoch = r.i32(a)?;
        let _min_count = r.i32(a)?;
        let _neg = r.i32(a)?;
        let word_ngrams = r.i32(a)?;
        let loss = match r.i32(a)? {
            1 => LossKind::HierarchicalSoftmax,
            2 => LossKind::NegativeSampling,
            3 => LossKind::Softmax,
            4 => LossKind::OneVsAll,
            other => return Err(format!("invalid fastText model: unknown loss {other}")),
        };
        let model = r.i32(a)?;
        let bucket = r.i32(a)?;
        let minn = r.i32(a)?;
        let mut maxn = r.i32(a)?;
        let _lr_update_rate = r.i32(a)?;
        r.take(8, a)?; // t
        if model != 3 {
            return Err(format!(
                "fastText model is not supervised (model {}): only classifiers can predict",
                match model {
                    1 => "cbow",
                    2 => "skipgram",
                    _ => "unknown",
                }
            ));
        }
        if version == 11 {
            maxn = 0; // fastText: old supervised models have no character n-grams
        }
        if dim <= 0 || bucket < 0 {
            return Err(format!("invalid fastText model: dim {dim}, bucket {bucket}"));
        }
        if maxn > MAX_NGRAM || word_ngrams > MAX_NGRAM {
            return Err(format!(
                "invalid fastText model: n-grams of up to {maxn} characters and {word_ngrams} words (at most {MAX_NGRAM})"
            ));
        }
        let d = "dictionary";
        let size = r.i32(d)?;
        let nwords = r.i32(d)?;
        let nlabels = r.i32(d)?;
        let _ntokens = r.i64(d)?;
        let pruneidx_size = r.i64(d)?;
        if size < 0 || nwords < 0 || nlabels <= 0 || nwords.checked_add(nlabels) != Some(size) {
            return Err(format!(
                "invalid fastText model: dictionary of {size} entries, {nwords} words, {nlabels} labels"
            ));
        }
        // an entry is at least a NUL, a count and a type byte
        r.fits(size as usize, 10, d)?;
        let mut entries: Vec<(&[u8], i64, u8)> = Vec::with_capacity(size as usize);
        for _ in 0..size {
            let w = r.cstr(d)?;
            let count = r.i64(d)?;
            let ty = r.u8(d)?;
            entries.push((w, count, ty));
        }
        if entries.iter().enumerate().any(|(i, e)| (e.2 == 1) != (i as i32 >= nwords)) {
            return Err("invalid fastText model: dictionary entries out of order".into());
        }
        let pruneidx = if pruneidx_size >= 0 {
            r.fits(usize::try_from(pruneidx_size).unwrap_or(usize::MAX), 8, "pruned index")?;
            let mut m = HashMap::with_capacity_and_hasher(pruneidx_size as usize, Default::default());
            for _ in 0..pruneidx_size {
                let first = r.i32(d)?;
                let second = r.i32(d)?;
                if second < 0 {
                    return Err(format!("invalid fastText model: pruned index maps {first} to row {second}"));
                }
                m.insert(first, second);
            }
            Some(m)
        } else {
            None
        };
        let args = Args { dim: dim as usize, word_ngrams, loss, bucket, minn, maxn };
        let quant_input = r.u8("input matrix")? != 0;
        let input = if quant_input {
            Matrix::load_quant(&mut r, "input matrix")?
        } else {
            Matrix::load_dense(&mut r, "input matrix")?
        };
        if !quant_input && pruneidx.as_ref().is_some_and(|p| !p.is_empty()) {
            return Err("invalid fastText model: pruned dictionary with a dense input matrix".into());
        }
        let qout = r.u8("output matrix")? != 0;
        let output = if quant_input && qout {
            Matrix::load_quant(&mut r, "output matrix")?
        } else {
            Matrix::load_dense(&mut r, "output matrix")?
        };
        if input.cols() != args.dim || output.cols() != args.dim || output.rows() != nlabels as usize {
            return Err(format!(
                "invalid fastText model: matrices {}x{} and {}x{} for dim {} and {} labels",
                input.rows(),
                input.cols(),
                output.rows(),
                output.cols(),
                args.dim,
                nlabels
            ));
        }
        // every row a prediction can reach is in the input matrix: n-gram buckets follow the words
        // (pruned: the rows the index maps to)
        let rows = ft_rows_needed(nwords, bucket, pruneidx.as_ref());
        if rows > input.rows() as i64 {
            return Err(format!(
                "invalid fastText model: input matrix has {} rows, the dictionary and buckets need {rows}",
                input.rows()
            ));
        }
        let label_counts: Vec<i64> = entries[nwords as usize..].iter().map(|e| e.1).collect();
        // the Huffman tree is built with 1e15 as "no node yet": counts and their sum stay below it
        let total = label_counts.iter().try_fold(0i64, |t, &c| t.checked_add(c).filter(|_| c > 0));
        if loss == LossKind::HierarchicalSoftmax && total.is_none_or(|t| t >= MAX_LABEL_COUNTS) {
            return Err("invalid fastText model: label counts not positive or too large for its tree".into());
        }
        let mut ft = FastText {
            args,
            words: HashMap::with_capacity_and_hasher(size as usize, Default::default()),
            subwords: Vec::with_capacity(size as usize),
            nwords,
            labels: entries[nwords as usize..]
                .iter()
                .map(|e| String::from_utf8_lossy(e.0).into_owned())
                .collect(),
            pruneidx,
            input,
            output,
            tree: Vec::new(),
            sigmoid: Vec::new(),
        };
        for (i, e) in entries.iter().enumerate() {
            ft.words.entry(e.0.to_vec()).or_insert(i as i32);
            if (i as i32) < nwords {
                let mut sw = vec![i as i32];
                if e.0 != EOS {
                    ft.compute_subwords(e.0, &mut sw);
                }
                ft.subwords.push(sw);
            }
        }
        let max_row = ft.subwords.iter().flatten().copied().max().unwrap_or(0);
        if max_row as usize >= ft.input.rows() {
            return Err(format!(
                "invalid fastText model: input matrix has {} rows, the dictionary needs {}",
                ft.input.rows(),
                max_row + 1
            ));
        }
        match loss {
            LossKind::HierarchicalSoftmax => {
                ft.tree = build_tree(&label_counts);
                if tree_depth(&ft.tree) > MAX_TREE_DEPTH {
                    return Err(format!("invalid fastText model: label tree deeper than {MAX_TREE_DEPTH}"));
                }
            }
            LossKind::NegativeSampling | LossKind::OneVsAll => {
                ft.sigmoid = (0..=SIGMOID_TABLE_SIZE)
                    .map(|i| {
                        let x = (i as f32 * 2.0 * MAX_SIGMOID) / SIGMOID_TABLE_SIZE as f32 - MAX_SIGMOID;
                        (1.0 / (1.0 + (-x).exp() as f64)) as f32
                    })
                    .collect()
            }
            LossKind::Softmax => {}
        }
        Ok(ft)
    }

    /// Label strings in the model's order (prefix included, e.g. `__label__en`).
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    #[inline]
    fn push_hash(&self, out: &mut Vec<i32>, id: i32) {
        match &self.pruneidx {
            None => out.push(self.nwords + id),
            Some(p) if p.is_empty() => {}
            Some(p) => {
                if id < 0 {
                    return;
                }
                if let Some(&j) = p.get(&id) {
                    out.push(self.nwords + j);
                }
            }
        }
    }

    /// Character n-grams of `word` (without the `<`, `>`), as bucket rows.
    fn compute_subwords(&self, word: &[u8], out: &mut Vec<i32>) {
        let (minn, maxn, bucket) = (self.args.minn, self.args.maxn, self.args.bucket);
        if maxn <= 0 || bucket <= 0 {
            return;
        }
        let mut w = Vec::with_capacity(word.len() + 2);
        w.push(b'<');
        w.extend_from_slice(word);
        w.push(b'>');
        let len = w.len();
        for i in 0..len {
            if w[i] & 0xC0 == 0x80 {
                continue;
            }
            let mut j = i;
            let mut n = 1;
            while j < len && n <= maxn {
                j += 1;
                while j < len && w[j] & 0xC0 == 0x80 {
                    j += 1;
                }
                if n >= minn && !(n == 1 && (i == 0 || j == len)) {
                    let h = hash(&w[i..j]) % bucket as u32;
                    self.push_hash(out, h as i32);
                }
                n += 1;
            }
        }
    }

    /// The input rows of one line (fastText's `Dictionary::getLine`); newlines count as spaces.
    pub fn line_rows(&self, text: &[u8], rows: &mut Vec<i32>, hashes: &mut Vec<i32>) {
        rows.clear();
        hashes.clear();
        let is_space = |c: u8| matches!(c, b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c | 0);
        let mut tokens = text.split(|&c| is_space(c)).filter(|t| !t.is_empty()).chain(std::iter::once(EOS));
        for tok in tokens.by_ref() {
            let h = hash(tok);
            match self.words.get(tok) {
                Some(&wid) if wid < self.nwords => {
                    rows.extend_from_slice(&self.subwords[wid as usize]);
                    hashes.push(h as i32);
                }
                Some(_) => {} // a label
                None => {
                    if !tok.starts_with(LABEL_PREFIX) {
                        if tok != EOS {
                            self.compute_subwords(tok, rows);
                        }
                        hashes.push(h as i32);
                    }
                }
            }
            if tok == EOS {
                break;
            }
        }
        let n = self.args.word_ngrams;
        if self.args.bucket > 0 {
            for i in 0..hashes.len() {
                let mut h = hashes[i] as i64 as u64;
                let mut j = i + 1;
                while j < hashes.len() && (j as i64) < i as i64 + n as i64 {
                    h = h.wrapping_mul(116_049_371).wrapping_add(hashes[j] as i64 as u64);
                    self.push_hash(rows, (h % self.args.bucket as u64) as i32);
                    j += 1;
                }
            }
        }
    }

    fn sigmoid(&self, x: f32) -> f32 {
        if x < -MAX_SIGMOID {
            0.0
        } else if x > MAX_SIGMOID {
            1.0
        } else {
            let i = ((x + MAX_SIGMOID) * SIGMOID_TABLE_SIZE as f32 / MAX_SIGMOID / 2.0) as i64;
            self.sigmoid[i as usize]
        }
    }

    /// Top `k` labels (all when `k` < 0) with probability >= `threshold`, best first.
    pub fn predict(&self, text: &str, k: i32, threshold: f32) -> Prediction {
        let mut rows = Vec::new();
        let mut hashes = Vec::new();
        let mut hidden = vec![0.0f32; self.args.dim];
        let mut output = Vec::new();
        self.predict_with(text.as_bytes(), k, threshold, &mut rows, &mut hashes, &mut hidden, &mut output)
    }

    #[allow(clippy::too_many_arguments)]
    fn predict_with(
        &self,
        text: &[u8],
        k: i32,
        threshold: f32,
        rows: &mut Vec<i32>,
        hashes: &mut Vec<i32>,
        hidden: &mut [f32],
        output: &mut Vec<f32>,
    ) -> Prediction {
        self.line_rows(text, rows, hashes);
        if rows.is_empty() {
            return Vec::new();
        }
        hidden.fill(0.0);
        for &r in rows.iter() {
            self.input.add_row(hidden, r as usize);
        }
        let inv = (1.0f64 / rows.len() as f64) as f32;
        for h in hidden.iter_mut() {
            *h *= inv;
        }
        let nl = self.labels.len();
        let k = if k < 0 { nl } else { (k as usize).max(1) };
        let mut heap: Vec<(f32, i32)> = Vec::with_capacity(k + 1);
        match self.args.loss {
            LossKind::HierarchicalSoftmax => {
                self.dfs(k, threshold, 2 * nl as i32 - 2, 0.0, &mut heap, hidden);
            }
            loss => {
                output.clear();
                output.extend((0..nl).map(|i| self.output.dot_row(hidden, i)));
                if loss == LossKind::Softmax {
                    let mut max = output[0];
                    for &o in output.iter() {
                        max = if o > max { o } else { max };
                    }
                    let mut z = 0.0f32;
                    for o in output.iter_mut() {
                        *o = ((*o - max) as f64).exp() as f32;
                        z += *o;
                    }
                    for o in output.iter_mut() {
                        *o /= z;
                    }
                } else {
                    for o in output.iter_mut().take(nl) {
                        *o = self.sigmoid(*o);
                    }
                }
                for (i, &o) in output.iter().enumerate() {
                    if o < threshold {
                        continue;
                    }
                    let s = std_log(o);
                    if heap.len() == k && s < heap[0].0 {
                        continue;
                    }
                    heap::push(&mut heap, (s, i as i32));
                    if heap.len() > k {
                        heap::pop(&mut heap);
                    }
                }
            }
        }
        heap::sort(&mut heap);
        heap.into_iter().map(|(s, i)| (s.exp(), i as u32)).collect()
    }

    fn dfs(
        &self,
        k: usize,
        threshold: f32,
        node: i32,
        score: f32,
        heap: &mut Vec<(f32, i32)>,
        hidden: &[f32],
    ) {
        if score < std_log(threshold) {
            return;
        }
        if heap.len() == k && score < heap[0].0 {
            return;
        }
        let nd = &self.tree[node as usize];
        if nd.left == -1 && nd.right == -1 {
            heap::push(heap, (score, node));
            if heap.len() > k {
                heap::pop(heap);
            }
            return;
        }
        let nl = self.labels.len() as i32;
        let f = self.output.dot_row(hidden, (node - nl) as usize);
        let f = (1.0f64 / (1.0f32 + (-f).exp()) as f64) as f32;
        self.dfs(k, threshold, nd.left, score + std_log((1.0f64 - f as f64) as f32), heap, hidden);
        self.dfs(k, threshold, nd.right, score + std_log(f), heap, hidden);
    }

    /// [`FastText::predict`] over a batch, in parallel, in input order.
    pub fn predict_batch(&self, texts: &[&str], k: i32, threshold: f32) -> Vec<Prediction> {
        texts
            .par_iter()
            .map_init(
                || (Vec::new(), Vec::new(), vec![0.0f32; self.args.dim], Vec::new()),
                |(rows, hashes, hidden, output), t| {
                    self.predict_with(t.as_bytes(), k, threshold, rows, hashes, hidden, output)
                },
            )
            .collect()
    }
}

/// fastText's Huffman tree over the labels (sorted by count, descending): leaves `0..n`, internal
/// nodes `n..2n-1`, the root last.
fn build_tree(counts: &[i64]) -> Vec<Node> {
    let osz = counts.len();
    let mut tree: Vec<(Node, i64)> =
        (0..2 * osz - 1).map(|_| (Node { left: -1, right: -1 }, MAX_LABEL_COUNTS)).collect();
    for i in 0..osz {
        tree[i].1 = counts[i];
    }
    let mut leaf = osz as i64 - 1;
    let mut node = osz;
    for i in osz..2 * osz - 1 {
        let mut mini = [0usize; 2];
        for m in mini.iter_mut() {
            if leaf >= 0 && tree[leaf as usize].1 < tree[node].1 {
                *m = leaf as usize;
                leaf -= 1;
            } else {
                *m = node;
                node += 1;
            }
        }
        tree[i].0 = Node { left: mini[0] as i32, right: mini[1] as i32 };
        tree[i].1 = tree[mini[0]].1.saturating_add(tree[mini[1]].1);
    }
    tree.into_iter().map(|(n, _)| n).collect()
}

/// The depth of the tree from its root (the last node), without recursion.
fn tree_depth(tree: &[Node]) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(tree.len() - 1, 0usize)];
    while let Some((n, d)) = stack.pop() {
        deepest = deepest.max(d);
        let nd = &tree[n];
        for c in [nd.left, nd.right] {
            if c >= 0 && (c as usize) < n {
                stack.push((c as usize, d + 1));
            }
        }
    }
    deepest
}

/// Input rows a prediction can reach: the words' rows, then the n-gram buckets (or, pruned, the
/// rows the index maps to).
fn ft_rows_needed(nwords: i32, bucket: i32, pruneidx: Option<&HashMap<i32, i32, ahash::RandomState>>) -> i64 {
    let extra = match pruneidx {
        None => bucket as i64,
        Some(p) => p.values().map(|&j| j as i64 + 1).max().unwrap_or(0),
    };
    nwords as i64 + extra
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_sign_extends_bytes() {
        assert_eq!(hash(b""), 2_166_136_261);
        // FNV-1a of "a" (ASCII bytes are the same signed or not)
        assert_eq!(hash(b"a"), 0xe40c292c);
        // a byte >= 0x80 is xor-ed as 0xffffff.. (fastText's int8_t cast), unlike plain FNV-1a
        let plain = (2_166_136_261u32 ^ 0xc3).wrapping_mul(16_777_619);
        assert_ne!(hash(&[0xc3]), plain);
        assert_eq!(hash(&[0xc3]), (2_166_136_261u32 ^ 0xffff_ffc3).wrapping_mul(16_777_619));
    }

    #[test]
    fn heap_matches_sorted_descending_order() {
        let mut h = Vec::new();
        for (i, s) in [0.3f32, -1.0, 2.0, 0.5, 0.5, -3.0].iter().enumerate() {
            heap::push(&mut h, (*s, i as i32));
            if h.len() > 3 {
                heap::pop(&mut h);
            }
        }
        heap::sort(&mut h);
        let scores: Vec<f32> = h.iter().map(|p| p.0).collect();
        assert_eq!(scores, vec![2.0, 0.5, 0.5]);
    }

    /// A valid tiny supervised model: 2 words, 2 labels, dim 2, `bucket` n-gram rows, dense matrices.
    fn tiny_model(loss: i32, bucket: i32) -> Vec<u8> {
        let mut b = Vec::new();
        let i32s = |b: &mut Vec<u8>, v: &[i32]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
        i32s(&mut b, &[MAGIC, 12]);
        // dim ws epoch minCount neg wordNgrams loss model bucket minn maxn lrUpdateRate, then t
        i32s(&mut b, &[2, 5, 1, 1, 5, 2, loss, 3, bucket, 1, 2, 100]);
        b.extend_from_slice(&1e-4f64.to_le_bytes());
        i32s(&mut b, &[4, 2, 2]);
        b.extend_from_slice(&10i64.to_le_bytes());
        b.extend_from_slice(&(-1i64).to_le_bytes());
        for (w, count, ty) in [("a", 3i64, 0u8), ("</s>", 2, 0), ("__label__x", 2, 1), ("__label__y", 1, 1)] {
            b.extend_from_slice(w.as_bytes());
            b.push(0);
            b.extend_from_slice(&count.to_le_bytes());
            b.push(ty);
        }
        for (rows, seed) in [(2 + bucket as i64, 1.0f32), (2, -0.5)] {
            b.push(0); // dense
            b.extend_from_slice(&rows.to_le_bytes());
            b.extend_from_slice(&2i64.to_le_bytes());
            for i in 0..rows * 2 {
                b.extend_from_slice(&(seed * (i as f32 - 2.0) / 3.0).to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn every_truncation_and_byte_change_is_an_error_never_a_panic() {
        for loss in [1, 2, 3, 4] {
            let model = tiny_model(loss, 4);
            let ft = FastText::from_bytes(&model).expect("the tiny model is valid");
            assert_eq!(ft.predict("a b a", 2, 0.0).len(), 2);
            for n in 0..model.len() {
                let e = FastText::from_bytes(&model[..n]).expect_err("a truncated model is refused");
                assert!(!e.contains('\n'), "{e}");
            }
            // every byte set to values that make counts huge, negative or zero: an error or a model
            // that predicts without a panic
            for at in 0..model.len() {
                for v in [0x00u8, 0x01, 0x7f, 0x80, 0xff] {
                    let mut m = model.clone();
                    m[at] = v;
                    if let Ok(ft) = FastText::from_bytes(&m) {
                        ft.predict("a b a c </s> d", -1, 0.0);
                    }
                }
                // and every 4 bytes set to counts and sizes that do not fit
                for v in [-1i32, i32::MAX, 1 << 30, 1 << 16] {
                    let mut m = model.clone();
                    let end = (at + 4).min(m.len());
                    m[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
                    if let Ok(ft) = FastText::from_bytes(&m) {
                        ft.predict("a b a c </s> d", -1, 0.0);
                    }
                }
            }
        }
    }

    #[test]
    fn huge_counts_are_refused_before_allocating() {
        let model = tiny_model(3, 4);
        // dictionary size/nwords/nlabels (at 64), the pruned-index size (84), wordNgrams (28), bucket (40)
        let set = |at: usize, v: &[u8]| {
            let mut m = model.clone();
            m[at..at + v.len()].copy_from_slice(v);
            FastText::from_bytes(&m).expect_err("refused")
        };
        let e = set(64, &[0xff, 0xff, 0xff, 0x7f, 0xfe, 0xff, 0xff, 0x7f, 0x01, 0, 0, 0]);
        assert!(e.contains("dictionary"), "{e}");
        let e = set(84, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(e.contains("pruned index"), "{e}");
        let e = set(28, &[0xff, 0xff, 0, 0]); // wordNgrams
        assert!(e.contains("n-grams"), "{e}");
        let e = set(40, &[0xff, 0xff, 0, 0]); // bucket: more rows than the input matrix has
        assert!(e.contains("input matrix has 6 rows"), "{e}");
    }

    #[test]
    fn bad_files_give_one_line_errors() {
        let e = FastText::from_bytes(b"").unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        let e = FastText::from_bytes(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap_err();
        assert!(e.contains("not a fastText model"), "{e}");
        let mut b = MAGIC.to_le_bytes().to_vec();
        b.extend_from_slice(&13i32.to_le_bytes());
        let e = FastText::from_bytes(&b).unwrap_err();
        assert!(e.contains("version 13"), "{e}");
        assert!(!e.contains('\n'));
    }
}

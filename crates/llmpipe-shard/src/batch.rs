//! Training batches from memory-mapped shards: gather rows, widen the ids, shift inputs and targets,
//! mask padding, and number the documents of each row, in one pass over the batch's memory.
//!
//! A shard row holds `width = seq_len + 1` token ids and `valid`, the number of them that are real
//! (the rest is padding). For a row, `input[j] = row[j]` and `target[j] = row[j + 1]` for
//! `j < seq_len`; targets at or after `valid - 1` are `ignore` (padding never becomes a target).
//! `doc_ids[j]` is the number of EOS tokens at positions `< j` of the input: the EOS that ends a
//! document belongs to that document.

use std::fmt;

/// The token ids of one shard: `rows * width` values, row-major.
#[derive(Clone, Copy, Debug)]
pub enum Tokens<'a> {
    U16(&'a [u16]),
    U32(&'a [u32]),
}

impl Tokens<'_> {
    pub fn len(&self) -> usize {
        match self {
            Tokens::U16(t) => t.len(),
            Tokens::U32(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One shard: its token ids and the number of real tokens of every row.
#[derive(Clone, Copy, Debug)]
pub struct ShardRows<'a> {
    pub tokens: Tokens<'a>,
    pub valid: &'a [i32],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// A shard's token count is not `rows * width`.
    Shape { shard: usize, tokens: usize, rows: usize, width: usize },
    /// A sample index outside `0..len`.
    Index { index: i64, len: u64 },
    /// An output buffer of the wrong size.
    Output { what: &'static str, got: usize, want: usize },
    /// A row's `valid` outside `0..=width`.
    Valid { index: i64, valid: i32, width: usize },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Shape { shard, tokens, rows, width } => {
                write!(f, "shard {shard}: {tokens} token ids is not {rows} rows of {width}")
            }
            BatchError::Index { index, len } => {
                write!(f, "sample index {index} outside 0..{len}")
            }
            BatchError::Output { what, got, want } => {
                write!(f, "{what}: buffer of {got} elements, the batch needs {want}")
            }
            BatchError::Valid { index, valid, width } => {
                write!(f, "sample {index}: valid={valid} outside 0..={width} (corrupted shard)")
            }
        }
    }
}

impl std::error::Error for BatchError {}

/// Every sample of a split: shards in order, addressed by a global sample index.
#[derive(Debug)]
pub struct Samples<'a> {
    shards: Vec<ShardRows<'a>>,
    /// `starts[s]` is the global index of shard `s`'s first row; one extra entry holds the total.
    starts: Vec<u64>,
    width: usize,
}

impl<'a> Samples<'a> {
    pub fn new(shards: Vec<ShardRows<'a>>, width: usize) -> Result<Self, BatchError> {
        let mut starts = Vec::with_capacity(shards.len() + 1);
        let mut total = 0u64;
        for (s, sh) in shards.iter().enumerate() {
            let rows = sh.valid.len();
            if width == 0 || sh.tokens.len() != rows * width {
                return Err(BatchError::Shape { shard: s, tokens: sh.tokens.len(), rows, width });
            }
            starts.push(total);
            total += rows as u64;
        }
        starts.push(total);
        Ok(Self { shards, starts, width })
    }

    pub fn len(&self) -> u64 {
        *self.starts.last().unwrap_or(&0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn width(&self) -> usize {
        self.width
    }

    fn locate(&self, index: i64) -> Result<(usize, usize), BatchError> {
        let len = self.len();
        if index < 0 || index as u64 >= len {
            return Err(BatchError::Index { index, len });
        }
        let i = index as u64;
        // the last shard whose start is <= i (empty shards share a start with the next one)
        let s = self.starts.partition_point(|&st| st <= i) - 1;
        Ok((s, (i - self.starts[s]) as usize))
    }
}

/// An output id type: what the trainer's embedding and loss read.
pub trait Id: Copy + Send + 'static {
    fn from_u32(v: u32) -> Self;
    fn from_i64(v: i64) -> Self;
}

impl Id for i32 {
    #[inline(always)]
    fn from_u32(v: u32) -> Self {
        v as i32
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v as i32
    }
}

impl Id for i64 {
    #[inline(always)]
    fn from_u32(v: u32) -> Self {
        v as i64
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v
    }
}

/// Where one batch goes. `rows`: `[n, width]` row-major, the samples' ids widened (inputs are
/// `row[..width - 1]`, targets `row[1..]`); `valid`: `[n]`; `doc_ids`: `[n, width - 1]`.
pub struct BatchOut<'o, T> {
    pub rows: &'o mut [T],
    pub valid: &'o mut [i32],
    pub doc_ids: Option<&'o mut [i32]>,
}

#[inline(always)]
fn widen<S: Copy + Into<u32>, T: Id>(row: &[S], out: &mut [T]) {
    for (o, &v) in out.iter_mut().zip(row) {
        *o = T::from_u32(v.into());
    }
}

/// `out[j]` = EOS tokens at positions `< j`. Blocks without EOS (nearly all of them) are filled
/// with one value by a vectorised compare and fill; only blocks holding an EOS go token by token.
#[inline(always)]
fn doc_row<S: Copy + Into<u32>>(row: &[S], eos: u32, out: &mut [i32]) {
    const BLOCK: usize = 64;
    let mut doc = 0i32;
    for (src, dst) in row.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
        let hit = src.iter().fold(false, |a, &v| a | (v.into() == eos));
        if !hit {
            dst.fill(doc);
            continue;
        }
        for (o, &v) in dst.iter_mut().zip(src) {
            *o = doc;
            doc += i32::from(v.into() == eos);
        }
    }
}

/// Build one batch: row `k` of the outputs is sample `indices[k]`.
pub fn build_batch<T: Id>(
    samples: &Samples<'_>,
    indices: &[i64],
    eos_id: u32,
    out: BatchOut<'_, T>,
) -> Result<(), BatchError> {
    let w = samples.width;
    let l = w - 1;
    let n = indices.len();
    let check =
        |what, got, want| if got == want { Ok(()) } else { Err(BatchError::Output { what, got, want }) };
    check("rows", out.rows.len(), n * w)?;
    check("valid", out.valid.len(), n)?;
    if let Some(d) = &out.doc_ids {
        check("doc_ids", d.len(), n * l)?;
    }
    let BatchOut { rows, valid, mut doc_ids } = out;
    for (k, &index) in indices.iter().enumerate() {
        let (s, r) = samples.locate(index)?;
        let sh = &samples.shards[s];
        let v = sh.valid[r];
        if v < 0 || v as usize > w {
            return Err(BatchError::Valid { index, valid: v, width: w });
        }
        valid[k] = v;
        let dst = &mut rows[k * w..(k + 1) * w];
        let docs = doc_ids.as_deref_mut().map(|d| &mut d[k * l..(k + 1) * l]);
        match sh.tokens {
            Tokens::U16(t) => {
                let row = &t[r * w..(r + 1) * w];
                widen(row, dst);
                if let Some(d) = docs {
                    doc_row(&row[..l], eos_id, d);
                }
            }
            Tokens::U32(t) => {
                let row = &t[r * w..(r + 1) * w];
                widen(row, dst);
                if let Some(d) = docs {
                    doc_row(&row[..l], eos_id, d);
                }
            }
        }
    }
    Ok(())
}

/// Targets `[n, width - 1]` of built rows with every target at or after `valid - 1` set to `ignore`;
/// `None` when no row is padded (the targets are then `rows[:, 1:]` as they are).
pub fn masked_targets<T: Id>(rows: &[T], valid: &[i32], width: usize, ignore: i64) -> Option<Vec<T>> {
    if valid.iter().all(|&v| v as usize >= width) {
        return None;
    }
    let l = width - 1;
    let ignore = T::from_i64(ignore);
    let mut out = Vec::with_capacity(valid.len() * l);
    for (row, &v) in rows.chunks_exact(width).zip(valid) {
        let real = (v.max(1) as usize - 1).min(l);
        out.extend_from_slice(&row[1..=real]);
        out.resize(out.len() + (l - real), ignore);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(rows: &[Vec<u16>], valid: &[i32], idx: &[i64], eos: u32) -> (Vec<i64>, Vec<i64>, Vec<i32>) {
        let (mut x, mut y, mut d) = (vec![], vec![], vec![]);
        for &i in idx {
            let row = &rows[i as usize];
            let l = row.len() - 1;
            let mut doc = 0;
            for j in 0..l {
                x.push(row[j] as i64);
                y.push(if (j as i32) < valid[i as usize] - 1 { row[j + 1] as i64 } else { -100 });
                d.push(doc);
                if row[j] as u32 == eos {
                    doc += 1;
                }
            }
        }
        (x, y, d)
    }

    #[test]
    fn matches_reference_across_shards() {
        let w = 7;
        let rows: Vec<Vec<u16>> = (0..10u16)
            .map(|r| (0..w as u16).map(|j| if (r + j) % 3 == 0 { 9 } else { r * 10 + j }).collect())
            .collect();
        let valid: Vec<i32> = (0..10).map(|r| if r % 4 == 0 { 3 } else { w as i32 }).collect();
        let flat: Vec<u16> = rows.concat();
        // three shards of 4, 0 and 6 rows
        let shards = vec![
            ShardRows { tokens: Tokens::U16(&flat[..4 * w]), valid: &valid[..4] },
            ShardRows { tokens: Tokens::U16(&[]), valid: &[] },
            ShardRows { tokens: Tokens::U16(&flat[4 * w..]), valid: &valid[4..] },
        ];
        let samples = Samples::new(shards, w).unwrap();
        assert_eq!(samples.len(), 10);
        let (rx, ry, rd) = reference(&rows, &valid, &[9, 0, 4, 3, 8, 5], 9);
        let idx = [9i64, 0, 4, 3, 8, 5];
        let n = idx.len();
        let (mut r64, mut v, mut d) = (vec![0i64; n * w], vec![0i32; n], vec![0i32; n * (w - 1)]);
        let out = BatchOut { rows: &mut r64, valid: &mut v, doc_ids: Some(&mut d) };
        build_batch(&samples, &idx, 9, out).unwrap();
        let x: Vec<i64> = r64.chunks(w).flat_map(|r| r[..w - 1].to_vec()).collect();
        assert_eq!(x, rx);
        assert_eq!(masked_targets(&r64, &v, w, -100).unwrap(), ry);
        assert_eq!(d, rd);
        let mut r32 = vec![0i32; n * w];
        build_batch(&samples, &idx, 9, BatchOut { rows: &mut r32, valid: &mut v, doc_ids: None }).unwrap();
        assert_eq!(r32.iter().map(|&t| t as i64).collect::<Vec<_>>(), r64);
        // no padded row: no separate targets
        let full = [1i64, 2, 3];
        let mut rows3 = vec![0i32; 3 * w];
        let mut v3 = vec![0i32; 3];
        build_batch(&samples, &full, 9, BatchOut { rows: &mut rows3, valid: &mut v3, doc_ids: None })
            .unwrap();
        assert!(masked_targets(&rows3, &v3, w, -100).is_none());
    }

    #[test]
    fn doc_ids_across_blocks() {
        // long rows: EOS in some 64-token blocks and not in others
        let w = 300;
        let row: Vec<u32> = (0..w as u32).map(|j| if j % 97 == 5 || j == 64 { 0 } else { 1 + j }).collect();
        let valid = [w as i32];
        let s = Samples::new(vec![ShardRows { tokens: Tokens::U32(&row), valid: &valid }], w).unwrap();
        let (mut r, mut v, mut d) = (vec![0i64; w], vec![0i32; 1], vec![0i32; w - 1]);
        build_batch(&s, &[0], 0, BatchOut { rows: &mut r, valid: &mut v, doc_ids: Some(&mut d) }).unwrap();
        let rows16: Vec<Vec<u16>> = vec![row.iter().map(|&t| t as u16).collect()];
        assert_eq!(d, reference(&rows16, &valid, &[0], 0).2);
    }

    #[test]
    fn errors() {
        let t = [1u32, 2, 3, 4, 5, 6];
        let v = [3i32, 9];
        let s = Samples::new(vec![ShardRows { tokens: Tokens::U32(&t), valid: &v }], 3).unwrap();
        let (mut r, mut vv) = (vec![0i32; 3], vec![0i32; 1]);
        let e = build_batch(&s, &[1], 0, BatchOut { rows: &mut r, valid: &mut vv, doc_ids: None });
        assert_eq!(e, Err(BatchError::Valid { index: 1, valid: 9, width: 3 }));
        let e = build_batch(&s, &[2], 0, BatchOut { rows: &mut r, valid: &mut vv, doc_ids: None });
        assert_eq!(e, Err(BatchError::Index { index: 2, len: 2 }));
        let e = build_batch(&s, &[-1], 0, BatchOut { rows: &mut r, valid: &mut vv, doc_ids: None });
        assert_eq!(e, Err(BatchError::Index { index: -1, len: 2 }));
        let e = build_batch(&s, &[0, 0], 0, BatchOut { rows: &mut r, valid: &mut vv, doc_ids: None });
        assert!(matches!(e, Err(BatchError::Output { what: "rows", .. })));
        assert!(Samples::new(vec![ShardRows { tokens: Tokens::U32(&t), valid: &v }], 4).is_err());
    }
}

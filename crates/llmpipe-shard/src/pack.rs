//! Documents packed into fixed-length samples of `width = seq_len + 1` token ids.
//!
//! Every document is followed by EOS. `Concat` joins them into one stream and cuts it into samples
//! that overlap by one token (the last target of a sample is the first input of the next), so no
//! token is lost between samples and only the very last sample is padded. `BestFit` splits a
//! document only when it is longer than a sample: documents are pooled until the pool holds
//! `window` samples' worth of tokens, then the pieces are placed best-fit decreasing (longest first;
//! into the bin with the least room that fits, the earliest such bin on ties); bins are emitted in
//! the order they opened, their pieces in arrival order, padded with EOS. Both are deterministic.
//! Every sample comes with `valid`, the number of its tokens that are real.

use std::collections::BTreeSet;
use std::fmt;

/// A shard's token type.
pub trait Token: Copy + Send + 'static {
    const MAX: u32;
    fn from_id(v: u32) -> Self;
}

impl Token for u16 {
    const MAX: u32 = u16::MAX as u32;
    #[inline(always)]
    fn from_id(v: u32) -> Self {
        v as u16
    }
}

impl Token for u32 {
    const MAX: u32 = u32::MAX;
    #[inline(always)]
    fn from_id(v: u32) -> Self {
        v
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    Concat,
    BestFit { window: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackError {
    Offsets(String),
    TokenTooLarge { id: u32, max: u32 },
    Config(String),
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackError::Offsets(m) => write!(f, "document offsets: {m}"),
            PackError::TokenTooLarge { id, max } => {
                write!(f, "token id {id} does not fit the shard's token type (max {max})")
            }
            PackError::Config(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PackError {}

/// Samples produced by one call: `valid.len()` rows of `width` ids each.
#[derive(Debug, PartialEq, Eq)]
pub struct Packed<T> {
    pub rows: Vec<T>,
    pub valid: Vec<i32>,
}

impl<T> Default for Packed<T> {
    fn default() -> Self {
        Self { rows: Vec::new(), valid: Vec::new() }
    }
}

/// Stateful packer: feed documents in batches with [`Packer::add`], then [`Packer::finish`].
pub struct Packer<T: Token> {
    packing: Packing,
    width: usize,
    eos: T,
    /// Concat: the stream not yet cut. BestFit: the pooled pieces, back to back.
    buf: Vec<T>,
    /// BestFit: end of each pooled piece in `buf`.
    piece_ends: Vec<usize>,
    pub documents: u64,
    pub tokens: u64,
    pub padding: u64,
}

impl<T: Token> Packer<T> {
    pub fn new(packing: Packing, seq_len: usize, eos_id: u32) -> Result<Self, PackError> {
        if seq_len < 2 {
            return Err(PackError::Config("seq_len must be at least 2".into()));
        }
        if eos_id > T::MAX {
            return Err(PackError::TokenTooLarge { id: eos_id, max: T::MAX });
        }
        if let Packing::BestFit { window: 0 } = packing {
            return Err(PackError::Config("best_fit_window must be at least 1".into()));
        }
        Ok(Self {
            packing,
            width: seq_len + 1,
            eos: T::from_id(eos_id),
            buf: Vec::new(),
            piece_ends: Vec::new(),
            documents: 0,
            tokens: 0,
            padding: 0,
        })
    }

    /// Add documents `ids[offsets[i]..offsets[i + 1]]` (without EOS) in order.
    pub fn add(&mut self, ids: &[u32], offsets: &[i64]) -> Result<Packed<T>, PackError> {
        check_offsets(ids.len(), offsets)?;
        if let Some(&m) = ids.iter().max() {
            if m > T::MAX {
                return Err(PackError::TokenTooLarge { id: m, max: T::MAX });
            }
        }
        let n_docs = offsets.len().saturating_sub(1);
        self.documents += n_docs as u64;
        self.tokens += (ids.len() + n_docs) as u64;
        match self.packing {
            Packing::Concat => Ok(self.add_concat(ids, offsets)),
            Packing::BestFit { window } => Ok(self.add_best_fit(ids, offsets, window)),
        }
    }

    fn add_concat(&mut self, ids: &[u32], offsets: &[i64]) -> Packed<T> {
        self.buf.reserve(ids.len() + offsets.len());
        for d in offsets.windows(2) {
            self.buf.extend(ids[d[0] as usize..d[1] as usize].iter().map(|&v| T::from_id(v)));
            self.buf.push(self.eos);
        }
        let (w, l) = (self.width, self.width - 1);
        let n = if self.buf.len() >= w { (self.buf.len() - 1) / l } else { 0 };
        let mut rows = Vec::with_capacity(n * w);
        for k in 0..n {
            rows.extend_from_slice(&self.buf[k * l..k * l + w]);
        }
        self.buf.drain(..n * l);
        Packed { rows, valid: vec![w as i32; n] }
    }

    fn add_best_fit(&mut self, ids: &[u32], offsets: &[i64], window: usize) -> Packed<T> {
        let w = self.width;
        let mut out = Packed::default();
        for d in offsets.windows(2) {
            let doc = &ids[d[0] as usize..d[1] as usize];
            let total = doc.len() + 1; // with its EOS
            let start = self.buf.len();
            self.buf.extend(doc.iter().map(|&v| T::from_id(v)));
            self.buf.push(self.eos);
            // a document longer than a sample is cut into sample-sized pieces
            let mut at = 0;
            while at < total {
                at = (at + w).min(total);
                self.piece_ends.push(start + at);
            }
            if self.buf.len() >= window * w {
                self.drain_pool(&mut out);
            }
        }
        out
    }

    fn drain_pool(&mut self, out: &mut Packed<T>) {
        let w = self.width;
        let n = self.piece_ends.len();
        if n == 0 {
            return;
        }
        let start = |i: usize| if i == 0 { 0 } else { self.piece_ends[i - 1] };
        let len = |i: usize| self.piece_ends[i] - start(i);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(len(i)), i));
        let mut bins: Vec<Vec<usize>> = Vec::new();
        let mut free: BTreeSet<(usize, usize)> = BTreeSet::new(); // (room left, bin)
        for i in order {
            let m = len(i);
            if let Some(&(room, b)) = free.range((m, 0)..).next() {
                free.remove(&(room, b));
                bins[b].push(i);
                if room > m {
                    free.insert((room - m, b));
                }
            } else {
                bins.push(vec![i]);
                if w > m {
                    free.insert((w - m, bins.len() - 1));
                }
            }
        }
        let first = out.valid.len();
        out.rows.resize((first + bins.len()) * w, self.eos);
        for (k, mut members) in bins.into_iter().enumerate() {
            members.sort_unstable();
            let row = &mut out.rows[(first + k) * w..(first + k + 1) * w];
            let mut at = 0;
            for i in members {
                let piece = &self.buf[start(i)..self.piece_ends[i]];
                row[at..at + piece.len()].copy_from_slice(piece);
                at += piece.len();
            }
            out.valid.push(at as i32);
            self.padding += (w - at) as u64;
        }
        self.buf.clear();
        self.piece_ends.clear();
    }

    /// Pack what is left: the pooled documents, or the tail of the stream as one padded sample.
    pub fn finish(&mut self) -> Packed<T> {
        let mut out = Packed::default();
        match self.packing {
            Packing::BestFit { .. } => self.drain_pool(&mut out),
            Packing::Concat => {
                if self.buf.len() > 1 {
                    let v = self.buf.len();
                    out.rows = std::mem::take(&mut self.buf);
                    out.rows.resize(self.width, self.eos);
                    out.valid.push(v as i32);
                    self.padding += (self.width - v) as u64;
                }
                self.buf.clear();
            }
        }
        out
    }
}

fn check_offsets(n: usize, offsets: &[i64]) -> Result<(), PackError> {
    if offsets.is_empty() {
        return Ok(());
    }
    if offsets[0] != 0 || *offsets.last().unwrap_or(&0) as usize != n {
        return Err(PackError::Offsets(format!("must start at 0 and end at {n} (the number of ids)")));
    }
    if offsets.windows(2).any(|p| p[1] < p[0]) {
        return Err(PackError::Offsets("must not decrease".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(docs: &[Vec<u32>]) -> (Vec<u32>, Vec<i64>) {
        let mut ids = vec![];
        let mut off = vec![0i64];
        for d in docs {
            ids.extend(d);
            off.push(ids.len() as i64);
        }
        (ids, off)
    }

    #[test]
    fn concat_overlaps_by_one_and_pads_the_tail() {
        let mut p: Packer<u16> = Packer::new(Packing::Concat, 4, 0).unwrap();
        let (ids, off) = flat(&[vec![1, 2, 3], vec![4, 5, 6, 7, 8], vec![9]]);
        let a = p.add(&ids, &off).unwrap();
        // stream: 1 2 3 0 4 5 6 7 8 0 9 0  (12 tokens) -> samples start at 0, 4 (two of width 5)
        assert_eq!(a.rows, vec![1, 2, 3, 0, 4, 4, 5, 6, 7, 8]);
        assert_eq!(a.valid, vec![5, 5]);
        let b = p.finish();
        assert_eq!(b.rows, vec![8, 0, 9, 0, 0]);
        assert_eq!(b.valid, vec![4]);
        assert_eq!((p.documents, p.tokens, p.padding), (3, 12, 1));
    }

    #[test]
    fn best_fit_places_longest_first_and_keeps_arrival_order_in_a_bin() {
        let mut p: Packer<u32> = Packer::new(Packing::BestFit { window: 100 }, 5, 99).unwrap();
        // with EOS: lengths 3, 5, 2, 9 (cut into 6 + 3), 4
        let (ids, off) = flat(&[vec![1, 2], vec![3, 4, 5, 6], vec![7], (10..18).collect(), vec![20, 21, 22]]);
        assert!(p.add(&ids, &off).unwrap().valid.is_empty()); // pooled
        let out = p.finish();
        // pieces (len): 0:[1 2 E](3) 1:[3 4 5 6 E](5) 2:[7 E](2) 3:[10..15](6) 4:[16 17 E](3) 5:[20 21 22 E](4)
        // order: 3(6) 1(5) 5(4) 0(3) 4(3) 2(2); bins: A=[3] full; B=[1] room 1; C=[5] room 2;
        // 0 -> new D room 3; 4 -> D (room 3, fits exactly) full; 2 -> C (room 2) full
        assert_eq!(out.valid, vec![6, 5, 6, 6]);
        let w = 6;
        let row = |k: usize| out.rows[k * w..(k + 1) * w].to_vec();
        assert_eq!(row(0), vec![10, 11, 12, 13, 14, 15]);
        assert_eq!(row(1), vec![3, 4, 5, 6, 99, 99]);
        assert_eq!(row(2), vec![7, 99, 20, 21, 22, 99]);
        assert_eq!(row(3), vec![1, 2, 99, 16, 17, 99]);
        assert_eq!(p.padding, 1);
    }

    #[test]
    fn rejects_ids_that_do_not_fit_and_bad_offsets() {
        let mut p: Packer<u16> = Packer::new(Packing::Concat, 4, 0).unwrap();
        assert_eq!(p.add(&[70_000], &[0, 1]), Err(PackError::TokenTooLarge { id: 70_000, max: 65_535 }));
        assert!(p.add(&[1, 2], &[0, 3]).is_err());
        assert!(p.add(&[1, 2], &[0, 2, 1, 2]).is_err());
        assert!(Packer::<u16>::new(Packing::Concat, 4, 70_000).is_err());
    }
}

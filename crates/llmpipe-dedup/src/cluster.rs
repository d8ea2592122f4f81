//! Candidate groups (documents sharing an LSH bucket), verified edges, and union-find clustering.
//!
//! Everything is keyed by a document index `u32` and ordered by a 64-bit order key per document
//! (the hash of its id in the curate stage, its position in the in-memory API), so that the edges
//! and clusters depend only on the set of documents, never on input order, batching or threads.

use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::shingle::jaccard;
use crate::DedupError;

/// How many earlier members of a bucket a document is verified against before giving up on that
/// bucket (it may still be linked through another band).
pub const MAX_COMPARE: usize = 64;

/// Groups of at least two documents sharing a bucket, each group sorted by `(order key, doc)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Groups {
    /// `offsets[g]..offsets[g + 1]` are the members of group `g`.
    pub offsets: Vec<u64>,
    pub members: Vec<u32>,
}

impl Groups {
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn group(&self, g: usize) -> &[u32] {
        &self.members[self.offsets[g] as usize..self.offsets[g + 1] as usize]
    }
}

/// Candidate groups from rows `(bucket, order_key, doc)` (one row per document and band).
pub fn bucket_groups(rows: &mut [(u64, u64, u32)]) -> Groups {
    rows.par_sort_unstable();
    let mut g = Groups { offsets: vec![0], members: Vec::new() };
    let mut i = 0;
    while i < rows.len() {
        let mut j = i + 1;
        while j < rows.len() && rows[j].0 == rows[i].0 {
            j += 1;
        }
        if j - i >= 2 {
            let start = g.members.len();
            for r in &rows[i..j] {
                if g.members.len() == start || *g.members.last().unwrap() != r.2 {
                    g.members.push(r.2);
                }
            }
            if g.members.len() - start >= 2 {
                g.offsets.push(g.members.len() as u64);
            } else {
                g.members.truncate(start);
            }
        }
        i = j;
    }
    g
}

/// Shingle sets of the candidate documents, looked up by document index.
#[derive(Clone, Debug, Default)]
pub struct ShingleStore {
    docs: Vec<u32>,
    starts: Vec<u64>,
    data: Vec<u32>,
}

impl ShingleStore {
    /// Append sets for `docs` (strictly increasing, above every doc added before); set `k` is
    /// `data[offsets[k]..offsets[k + 1]]`.
    pub fn extend(&mut self, docs: &[u32], offsets: &[u64], data: &[u32]) -> Result<(), DedupError> {
        if offsets.len() != docs.len() + 1 {
            return Err(DedupError::InvalidParam("offsets must have one more entry than docs".into()));
        }
        let base = offsets[0];
        for (k, &d) in docs.iter().enumerate() {
            if self.docs.last().is_some_and(|&last| last >= d) {
                return Err(DedupError::InvalidParam(
                    "shingle sets must be added in increasing doc order".into(),
                ));
            }
            let (s, e) = (offsets[k] - base, offsets[k + 1] - base);
            if s > e || e as usize > data.len() {
                return Err(DedupError::InvalidParam("shingle offsets out of range".into()));
            }
            self.docs.push(d);
            self.starts.push(self.data.len() as u64 + s);
        }
        let end = (offsets[docs.len()] - base) as usize;
        self.data.extend_from_slice(&data[..end]);
        Ok(())
    }

    pub fn get(&self, doc: u32) -> Option<&[u32]> {
        let k = self.docs.binary_search(&doc).ok()?;
        let s = self.starts[k] as usize;
        let e = self.starts.get(k + 1).map_or(self.data.len(), |&x| x as usize);
        Some(&self.data[s..e])
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Bytes held.
    pub fn nbytes(&self) -> usize {
        self.docs.len() * 12 + self.data.len() * 4
    }
}

/// Edges inside the candidate groups. Without `verify`, every member links to the first one.
/// With it, a member links to the first earlier member (at most [`MAX_COMPARE`] tried) whose exact
/// Jaccard similarity is at least `threshold`. Groups are processed in parallel; the result is in
/// group order, so it is the same for any number of threads.
/// Stops early with [`DedupError::Interrupted`] when `stop` is set.
pub fn group_edges(
    groups: &Groups,
    verify: Option<(&ShingleStore, f64)>,
    stop: &AtomicBool,
) -> Result<Vec<(u32, u32)>, DedupError> {
    let per_group: Vec<Result<Vec<(u32, u32)>, DedupError>> = (0..groups.len())
        .into_par_iter()
        .map(|g| {
            if stop.load(Ordering::Relaxed) {
                return Err(DedupError::Interrupted);
            }
            let m = groups.group(g);
            let mut edges = Vec::with_capacity(m.len() - 1);
            match verify {
                None => edges.extend(m[1..].iter().map(|&d| (m[0], d))),
                Some((store, t)) => {
                    let sets: Vec<&[u32]> = m
                        .iter()
                        .map(|&d| store.get(d).ok_or(DedupError::MissingShingles(d)))
                        .collect::<Result<_, _>>()?;
                    for j in 1..m.len() {
                        if let Some(i) = (0..j.min(MAX_COMPARE)).find(|&i| jaccard(sets[i], sets[j]) >= t) {
                            edges.push((m[i], m[j]));
                        }
                    }
                }
            }
            Ok(edges)
        })
        .collect();
    let mut out = Vec::new();
    for e in per_group {
        out.extend(e?);
    }
    Ok(out)
}

/// Disjoint sets over `0..n`; the root of a set is always its smallest member.
#[derive(Clone, Debug)]
pub struct UnionFind {
    parent: Vec<u32>,
}

impl UnionFind {
    pub fn new(n: usize) -> Result<Self, DedupError> {
        if n > u32::MAX as usize {
            return Err(DedupError::InvalidParam(format!("{n} documents exceed the u32 index space")));
        }
        Ok(Self { parent: (0..n as u32).collect() })
    }

    pub fn len(&self) -> usize {
        self.parent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    pub fn find(&mut self, mut x: u32) -> u32 {
        while self.parent[x as usize] != x {
            let p = self.parent[x as usize];
            let gp = self.parent[p as usize];
            self.parent[x as usize] = gp;
            x = gp;
        }
        x
    }

    pub fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
            self.parent[hi as usize] = lo;
        }
    }

    pub fn union_edges(&mut self, a: &[u32], b: &[u32]) -> Result<(), DedupError> {
        let n = self.parent.len() as u32;
        if a.len() != b.len() {
            return Err(DedupError::InvalidParam("edge arrays differ in length".into()));
        }
        for (&x, &y) in a.iter().zip(b) {
            if x >= n || y >= n {
                return Err(DedupError::InvalidParam(format!("edge ({x}, {y}) outside 0..{n}")));
            }
            self.union(x, y);
        }
        Ok(())
    }

    /// The root (smallest member) of every element's set.
    pub fn roots(&mut self) -> Vec<u32> {
        (0..self.parent.len() as u32).map(|x| self.find(x)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_need_two_distinct_docs() {
        let mut rows = vec![(5, 2, 1), (5, 1, 0), (9, 0, 3), (7, 4, 2), (7, 4, 2), (5, 3, 4)];
        let g = bucket_groups(&mut rows);
        assert_eq!(g.len(), 1);
        assert_eq!(g.group(0), &[0, 1, 4]);
    }

    #[test]
    fn verification_skips_dissimilar_members() {
        let mut store = ShingleStore::default();
        // doc 0: {1..10}, doc 1: {100..110} (unrelated), doc 2: {1..9} (J = 0.8 with doc 0)
        let sets: Vec<Vec<u32>> = vec![(1..11).collect(), (100..110).collect(), (1..9).collect()];
        let mut offs = vec![0u64];
        let mut data = Vec::new();
        for s in &sets {
            data.extend_from_slice(s);
            offs.push(data.len() as u64);
        }
        store.extend(&[0, 1, 2], &offs, &data).unwrap();
        let g = Groups { offsets: vec![0, 3], members: vec![1, 0, 2] };
        assert_eq!(group_edges(&g, Some((&store, 0.7)), &AtomicBool::new(false)).unwrap(), vec![(0, 2)]);
        assert_eq!(group_edges(&g, None, &AtomicBool::new(false)).unwrap(), vec![(1, 0), (1, 2)]);
    }

    #[test]
    fn union_find_roots_are_smallest() {
        let mut uf = UnionFind::new(6).unwrap();
        uf.union_edges(&[5, 3, 4], &[3, 1, 2]).unwrap();
        assert_eq!(uf.roots(), vec![0, 1, 2, 1, 2, 1]);
        assert!(uf.union_edges(&[9], &[0]).is_err());
    }
}

//! Exact-substring dedup (Lee et al. 2022): a suffix array over the bytes of many documents, their
//! LCP array (Kasai et al.) and, for every position, the longest prefix of its suffix that also
//! starts at an earlier position (the "longest previous factor"). A byte is a repeat when it lies in
//! a span of at least `min_len` bytes, within one document, that occurs earlier in the corpus: the
//! first occurrence of every repeated span is kept, the later ones are removed.
//!
//! Documents are joined with the byte 0xFF between them (never in UTF-8 text), and a match is cut at
//! the end of its document, so no span crosses documents.

/// The byte that separates documents in the joined text.
pub const SEP: u8 = 0xFF;

/// The largest text one suffix array covers (divsufsort's indices are `i32`).
pub const MAX_BYTES: usize = i32::MAX as usize;

/// The suffix array of `text` (libdivsufsort's algorithm, the `divsufsort` crate).
pub fn suffix_array(text: &[u8]) -> Vec<i32> {
    assert!(text.len() <= MAX_BYTES, "suffix array input over {MAX_BYTES} bytes");
    let mut sa = vec![0i32; text.len()];
    divsufsort::sort_in_place(text, &mut sa);
    sa
}

/// Kasai's LCP array: `lcp[r]` = common prefix of the suffixes of ranks `r - 1` and `r` (`lcp[0]` = 0).
pub fn lcp_array(text: &[u8], sa: &[i32]) -> Vec<u32> {
    let n = text.len();
    let mut rank = vec![0u32; n];
    for (r, &p) in sa.iter().enumerate() {
        rank[p as usize] = r as u32;
    }
    let mut lcp = vec![0u32; n];
    let mut h = 0usize;
    for p in 0..n {
        let r = rank[p] as usize;
        if r > 0 {
            let q = sa[r - 1] as usize;
            while p + h < n && q + h < n && text[p + h] == text[q + h] {
                h += 1;
            }
            lcp[r] = h as u32;
            h = h.saturating_sub(1);
        } else {
            h = 0;
        }
    }
    lcp
}

/// For every position `p`: the longest common prefix of suffix `p` with any suffix that starts
/// before `p` (0 for none). The nearest ranks above and below with a smaller position attain it
/// (an LCP between ranks is the minimum over the ranks between them); one stack pass each way.
pub fn longest_previous(sa: &[i32], lcp: &[u32]) -> Vec<u32> {
    let n = sa.len();
    let mut best = vec![0u32; n];
    // (position, lcp with the element above it on the stack, or with the current rank for the top)
    let mut stack: Vec<(i32, u32)> = Vec::new();
    let mut pass = |ranks: &mut dyn Iterator<Item = usize>, h_of: &dyn Fn(usize) -> u32| {
        stack.clear();
        for r in ranks {
            if let Some(top) = stack.last_mut() {
                top.1 = h_of(r);
            }
            let mut carry = u32::MAX;
            while let Some(&(p, l)) = stack.last() {
                if p < sa[r] {
                    break;
                }
                carry = carry.min(l);
                stack.pop();
            }
            if let Some(top) = stack.last_mut() {
                top.1 = top.1.min(carry);
                let b = &mut best[sa[r] as usize];
                *b = (*b).max(top.1);
            }
            stack.push((sa[r], u32::MAX));
        }
    };
    // upwards: lcp(rank r - 1, rank r) = lcp[r]; downwards: lcp(rank r + 1, rank r) = lcp[r + 1]
    pass(&mut (0..n), &|r| lcp[r]);
    pass(&mut (0..n).rev(), &|r| lcp[r + 1]);
    best
}

/// The repeated byte spans of `text` at or after `from`, merged and sorted, as `(start, end)`:
/// every span of at least `min_len` bytes within one document that also starts at an earlier
/// position of `text` (so the bytes before `from` only serve as earlier occurrences).
pub fn repeated_spans(text: &[u8], from: usize, min_len: usize) -> Vec<(usize, usize)> {
    let min_len = min_len.max(1);
    let sa = suffix_array(text);
    let lcp = lcp_array(text, &sa);
    let best = longest_previous(&sa, &lcp);
    drop(lcp);
    drop(sa);
    // forward, one document at a time (its end cuts the matches); starts increase, so each span
    // merges into the last one or opens a new one
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut p = from;
    while p < text.len() {
        let doc_end = memchr::memchr(SEP, &text[p..]).map_or(text.len(), |k| p + k);
        for (q, &b) in best.iter().enumerate().take(doc_end).skip(p) {
            let m = (b as usize).min(doc_end - q);
            if m < min_len {
                continue;
            }
            match out.last_mut() {
                Some(last) if q <= last.1 => last.1 = last.1.max(q + m),
                _ => out.push((q, q + m)),
            }
        }
        p = doc_end + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_sa(t: &[u8]) -> Vec<i32> {
        let mut v: Vec<i32> = (0..t.len() as i32).collect();
        v.sort_by(|&a, &b| t[a as usize..].cmp(&t[b as usize..]));
        v
    }

    #[test]
    fn arrays_match_naive() {
        let t = b"banana\xffbandana\xffanan";
        let sa = suffix_array(t);
        assert_eq!(sa, naive_sa(t));
        let lcp = lcp_array(t, &sa);
        let best = longest_previous(&sa, &lcp);
        for p in 0..t.len() {
            let want = (0..p)
                .map(|q| t[p..].iter().zip(&t[q..]).take_while(|(a, b)| a == b).count())
                .max()
                .unwrap_or(0);
            assert_eq!(best[p] as usize, want, "position {p}");
        }
    }

    #[test]
    fn spans_keep_the_first_occurrence() {
        let t = b"hello world\xffsay hello world\xffhello";
        assert_eq!(repeated_spans(t, 0, 5), vec![(16, 27), (28, 33)]);
        assert_eq!(repeated_spans(t, 12, 6), vec![(16, 27)]);
        assert!(repeated_spans(t, 0, 12).is_empty());
    }
}

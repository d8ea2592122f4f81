//! Timing loop for shingling and signatures on real text (no criterion).
//!
//! Input: a file of length-prefixed UTF-8 documents (`u64` little-endian length, then the bytes),
//! e.g. written from `/work/shared/data/web/cc-main-2019-30-extracted.jsonl.gz` by a few lines of
//! Python. Usage: `cargo run --release -p llmpipe-dedup --example shingle_bench -- FILE [REPS]`.

use std::time::Instant;

use llmpipe_dedup::{
    shingle::{unit_hashes, word_hash},
    MinHasher, Normalization, ShingleConfig, Shingler,
};
use llmpipe_text::normalize;

/// Every document's word hashes must equal those of `normalize` split on spaces (the definition).
fn check_words(docs: &[&str]) {
    let mut units = Vec::new();
    for (nfc, lowercase, strip_punctuation) in
        [(true, true, true), (false, false, false), (true, false, true), (false, true, false)]
    {
        let norm = Normalization { nfc, lowercase, collapse_whitespace: true, strip_punctuation };
        let cfg = ShingleConfig { norm, ..Default::default() };
        for d in docs {
            unit_hashes(d, &cfg, &mut units);
            let slow: Vec<u64> = normalize(d, norm)
                .split(' ')
                .filter(|w| !w.is_empty())
                .map(|w| word_hash(w.as_bytes(), cfg.seed))
                .collect();
            assert_eq!(units, slow, "{norm:?} {d:?}");
        }
    }
    println!("word hashes of {} docs equal normalize + split under 4 normalisations", docs.len());
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: shingle_bench FILE [REPS]");
    let reps: usize = args.next().map_or(5, |r| r.parse().expect("REPS is a number"));
    let raw = std::fs::read(&path).expect("read input");
    let mut docs = Vec::new();
    let mut i = 0;
    while i + 8 <= raw.len() {
        let n = u64::from_le_bytes(raw[i..i + 8].try_into().expect("8 bytes")) as usize;
        docs.push(std::str::from_utf8(&raw[i + 8..i + 8 + n]).expect("UTF-8"));
        i += 8 + n;
    }
    let bytes: usize = docs.iter().map(|d| d.len()).sum();
    if std::env::var_os("CHECK").is_some() {
        check_words(&docs);
    }
    let cfg = ShingleConfig::default();
    let h = MinHasher::new(112, 1);
    let (mut units, mut sh, mut buf, mut sig) =
        (Vec::new(), Shingler::default(), Vec::new(), vec![0u32; 112]);
    let mut check = 0u64;
    let rate = |t: Instant| bytes as f64 * reps as f64 / t.elapsed().as_secs_f64() / 1e6;
    // ONLY=sig: the signature loop only (compare user CPU seconds on a shared machine)
    let only_sig = std::env::var("ONLY").is_ok_and(|v| v == "sig");
    let t = Instant::now();
    for _ in 0..if only_sig { 0 } else { reps } {
        for d in &docs {
            unit_hashes(d, &cfg, &mut units);
            check = check.wrapping_add(units.len() as u64);
        }
    }
    println!("words      {:8.1} MB/s", rate(t));
    let t = Instant::now();
    for _ in 0..if only_sig { 0 } else { reps } {
        for d in &docs {
            sh.hashes(d, &cfg, &mut buf);
            check = check.wrapping_add(buf.len() as u64);
        }
    }
    println!("shingles   {:8.1} MB/s", rate(t));
    let t = Instant::now();
    for _ in 0..reps {
        for d in &docs {
            sh.hashes(d, &cfg, &mut buf);
            h.signature_into(&buf, &mut sig);
            check = check.wrapping_add(u64::from(sig[0]));
        }
    }
    println!(
        "signatures {:8.1} MB/s  ({} docs, {:.1} MB, check {check})",
        rate(t),
        docs.len(),
        bytes as f64 / 1e6
    );
}

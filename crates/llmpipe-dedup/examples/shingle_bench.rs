//! Timing loop for shingling and signatures on real text (no criterion).
//!
//! Input: a file of length-prefixed UTF-8 documents (`u64` little-endian length, then the bytes),
//! e.g. written from `../shared/data/web/cc-main-2019-30-extracted.jsonl.gz` by a few lines of
//! Python. Usage: `cargo run --release -p llmpipe-dedup --example shingle_bench -- FILE [REPS]`.
//!
//! Environment: `ONLY=sig` times the signature loop only; `CHECK=1` checks every document's word
//! hashes against `normalize` + split; `SIGS_OUT=PATH` writes the signatures of every document
//! under `sig_configs` and `SIGS_REF=PATH` compares them byte for byte with such a file (written
//! by an earlier build: speed-ups must not change a signature); `LLMPIPE_DEDUP_SIMD=scalar|avx2`
//! caps the vector paths (all of them must give the same signatures).

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
            let normed = normalize(d, norm);
            let ws: Vec<&str> = normed.split(' ').filter(|w| !w.is_empty()).collect();
            let slow: Vec<u64> = ws.iter().map(|w| word_hash(w.as_bytes(), cfg.seed)).collect();
            if let Some(k) = units
                .iter()
                .zip(&slow)
                .position(|(a, b)| a != b)
                .or((units.len() != slow.len()).then_some(units.len().min(slow.len())))
            {
                panic!(
                    "{norm:?}: word {k} of {} differs, words {:?}",
                    slow.len(),
                    &ws[k.saturating_sub(3)..(k + 3).min(ws.len())]
                );
            }
            assert_eq!(units, slow, "{norm:?} {d:?}");
        }
    }
    println!("word hashes of {} docs equal normalize + split under 4 normalisations", docs.len());
}

/// Configurations whose signatures `SIGS_OUT` writes and `SIGS_REF` compares (byte for byte).
fn sig_configs() -> Vec<(ShingleConfig, usize)> {
    use llmpipe_dedup::ShingleUnit::{Chars, Words};
    let on = ShingleConfig::default().norm;
    let off =
        Normalization { nfc: false, lowercase: false, collapse_whitespace: true, strip_punctuation: false };
    let mixed =
        Normalization { nfc: true, lowercase: false, collapse_whitespace: true, strip_punctuation: true };
    let mixed2 =
        Normalization { nfc: false, lowercase: true, collapse_whitespace: true, strip_punctuation: false };
    let c = |unit, ngram, norm, seed| ShingleConfig { unit, ngram, norm, seed };
    vec![
        (c(Words, 5, on, 1), 112),
        (c(Words, 1, on, 1), 112),
        (c(Words, 5, off, 1), 112),
        (c(Words, 3, mixed, 7), 128),
        (c(Words, 2, mixed2, 3), 100),
        (c(Words, 9, on, 1), 37),
        (c(Words, 13, off, 2), 256),
        (c(Chars, 5, on, 1), 112),
        (c(Chars, 1, off, 1), 112),
        (c(Chars, 4, mixed2, 5), 9),
    ]
}

/// All signatures of `docs` under `sig_configs`, concatenated (little-endian `u32`).
fn all_signatures(docs: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for (cfg, p) in sig_configs() {
        let h = MinHasher::new(p, cfg.seed);
        let sigs = llmpipe_dedup::signatures(docs, &cfg, &h);
        out.extend(sigs.iter().flat_map(|v| v.to_le_bytes()));
    }
    out
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
    if let Some(p) = std::env::var_os("SIGS_OUT") {
        std::fs::write(&p, all_signatures(&docs)).expect("write signatures");
        println!("wrote signatures of {} configs to {p:?}", sig_configs().len());
    }
    if let Some(p) = std::env::var_os("SIGS_REF") {
        let want = std::fs::read(&p).expect("read reference signatures");
        let got = all_signatures(&docs);
        assert_eq!(got.len(), want.len(), "signature bytes");
        if let Some(k) = got.iter().zip(&want).position(|(a, b)| a != b) {
            panic!("signatures differ from {p:?} at byte {k}");
        }
        println!("signatures of {} configs equal {p:?}", sig_configs().len());
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

//! Signatures of real documents equal a straightforward implementation of their definition.
//!
//! The reference below spells out every step the fast path takes shortcuts for: `normalize` the
//! whole text and split it on spaces (or take its characters), hash every unit, combine every
//! window of `n` unit hashes, and take the minimum of every permutation over all shingle hashes
//! one permutation at a time. Documents are read from `../shared/data` by path: English web text
//! (cc-en-head jsonl), French and English books cut into documents, and raw HTML pages in many
//! languages and scripts (markup and punctuation everywhere).

use std::path::PathBuf;

use llmpipe_dedup::{signatures, MinHasher, Normalization, ShingleConfig, ShingleUnit};
use llmpipe_text::normalize;
use xxhash_rust::xxh3::xxh3_64_with_seed;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
}

fn read(rel: &str) -> Vec<u8> {
    let p = data_dir().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Real documents: every jsonl text, books in pieces of ~20 lines, the first HTML pages.
fn documents() -> Vec<String> {
    let mut docs = Vec::new();
    for f in ["web/cc-en-head-0091.jsonl", "web/cc-en-head-0174.jsonl"] {
        for line in String::from_utf8(read(f)).expect("UTF-8").lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("json line");
            docs.push(v["text"].as_str().expect("text").to_owned());
        }
    }
    for f in ["reference/books/wiki-fr-extract.txt", "reference/books/notre-dame-de-paris.txt"] {
        let text = String::from_utf8(read(f)).expect("UTF-8");
        let lines: Vec<&str> = text.lines().take(4000).collect();
        docs.extend(lines.chunks(20).map(|c| c.join("\n")));
    }
    let mut pages: Vec<PathBuf> = std::fs::read_dir(data_dir().join("html/trafilatura-eval"))
        .expect("html dir")
        .map(|e| e.expect("entry").path())
        .collect();
    pages.sort();
    for p in pages.iter().take(40) {
        let raw = std::fs::read(p).expect("page");
        let text = String::from_utf8_lossy(&raw[..raw.len().min(20_000)]).into_owned();
        docs.push(text);
    }
    docs.extend(["".to_owned(), " ,.; ".to_owned(), "one".to_owned(), "Two Words".to_owned()]);
    docs
}

fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

const K1: u64 = 0x9E37_79B9_7F4A_7C15;

/// Hash of one normalised word: xxh3 above 16 bytes, else the two zero-padded 8-byte halves keyed
/// by the seed and the length, multiplied to 128 bits, folded and finalised.
fn word_hash(w: &[u8], seed: u64) -> u64 {
    if w.len() > 16 {
        return xxh3_64_with_seed(w, seed);
    }
    let mut pad = [0u8; 16];
    pad[..w.len()].copy_from_slice(w);
    let a = u64::from_le_bytes(pad[..8].try_into().unwrap());
    let b = u64::from_le_bytes(pad[8..].try_into().unwrap());
    let ka = seed ^ 0x243F_6A88_85A3_08D3;
    let kb = seed.rotate_left(32) ^ 0x1319_8A2E_0370_7344 ^ (w.len() as u64).wrapping_mul(K1);
    let x = u128::from(a ^ ka) * u128::from(b ^ kb);
    fmix64(x as u64 ^ (x >> 64) as u64)
}

const MULS: [u64; 8] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0x85EB_CA77_C2B2_AE63,
    0x27D4_EB2F_1656_67C5,
    0xFF51_AFD7_ED55_8CCD,
    0xC4CE_B9FE_1A85_EC53,
    0x94D0_49BB_1331_11EB,
];

fn combine(window: &[u64], seed: u64) -> u32 {
    let mut h = seed ^ (window.len() as u64).wrapping_mul(K1);
    for (j, &w) in window.iter().enumerate() {
        h = h.wrapping_add(w.wrapping_mul(MULS[j % 8]).rotate_left((j / 8) as u32 * 7));
    }
    let h = fmix64(h);
    (h ^ (h >> 32)) as u32
}

fn units(text: &str, cfg: &ShingleConfig) -> Vec<u64> {
    let mut norm = cfg.norm;
    norm.collapse_whitespace = true;
    let normed = normalize(text, norm);
    match cfg.unit {
        ShingleUnit::Words => {
            normed.split(' ').filter(|w| !w.is_empty()).map(|w| word_hash(w.as_bytes(), cfg.seed)).collect()
        }
        ShingleUnit::Chars => normed
            .chars()
            .map(|c| xxh3_64_with_seed(c.encode_utf8(&mut [0u8; 4]).as_bytes(), cfg.seed))
            .collect(),
    }
}

fn shingle_hashes(text: &str, cfg: &ShingleConfig) -> Vec<u32> {
    let u = units(text, cfg);
    if u.is_empty() {
        return Vec::new();
    }
    if u.len() < cfg.ngram {
        return vec![combine(&u, cfg.seed)];
    }
    u.windows(cfg.ngram).map(|w| combine(w, cfg.seed)).collect()
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Permutation `i`: `x -> (x ^ a_i) * m_i` (32-bit wrapping), keys from splitmix64 of the seed.
fn signature(shingles: &[u32], num_perm: usize, seed: u64) -> Vec<u32> {
    let mut s = seed ^ 0x6d69_6e68_6173_6821;
    (0..num_perm)
        .map(|_| {
            let r = splitmix64(&mut s);
            let (a, m) = (r as u32, ((r >> 32) as u32) | 1);
            shingles.iter().map(|&x| (x ^ a).wrapping_mul(m)).min().unwrap_or(u32::MAX)
        })
        .collect()
}

#[test]
fn signatures_of_real_documents_match_the_definition() {
    let docs = documents();
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let bytes: usize = refs.iter().map(|d| d.len()).sum();
    assert!(docs.len() > 300 && bytes > 1_500_000, "{} docs, {bytes} bytes", docs.len());
    assert!(refs.iter().filter(|d| !d.is_ascii()).count() > 100);
    let on = ShingleConfig::default().norm;
    let off =
        Normalization { nfc: false, lowercase: false, collapse_whitespace: true, strip_punctuation: false };
    let mixed =
        Normalization { nfc: true, lowercase: false, collapse_whitespace: true, strip_punctuation: true };
    let mixed2 =
        Normalization { nfc: false, lowercase: true, collapse_whitespace: true, strip_punctuation: false };
    let c = |unit, ngram, norm, seed| ShingleConfig { unit, ngram, norm, seed };
    use ShingleUnit::{Chars, Words};
    for (cfg, p) in [
        (c(Words, 5, on, 1), 112),
        (c(Words, 1, on, 1), 112),
        (c(Words, 5, off, 1), 112),
        (c(Words, 3, mixed, 7), 128),
        (c(Words, 2, mixed2, 3), 100),
        (c(Words, 9, on, 1), 37),
        (c(Words, 13, off, 2), 256),
        (c(Chars, 5, on, 1), 112),
        (c(Chars, 1, off, 1), 19),
    ] {
        // characters: a quarter of the documents (the reference is slow per character)
        let docs: Vec<&str> =
            if cfg.unit == Chars { refs.iter().step_by(4).copied().collect() } else { refs.clone() };
        let fast = signatures(&docs, &cfg, &MinHasher::new(p, cfg.seed));
        assert_eq!(fast.len(), docs.len() * p);
        for (k, d) in docs.iter().enumerate() {
            let want = signature(&shingle_hashes(d, &cfg), p, cfg.seed);
            assert!(fast[k * p..(k + 1) * p] == want[..], "{cfg:?} num_perm {p}: document {k} differs");
        }
    }
}

/// The same check with the vector kernels capped (AVX2 only, then portable code only), in a child
/// process of this test binary: every path must give the same signatures.
#[test]
fn every_vector_path_gives_the_same_signatures() {
    if std::env::var_os("LLMPIPE_DEDUP_SIMD").is_some() {
        return; // this is the child run
    }
    for cap in ["avx2", "scalar"] {
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "signatures_of_real_documents_match_the_definition", "--nocapture"])
            .env("LLMPIPE_DEDUP_SIMD", cap)
            .output()
            .expect("run the test binary");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{cap}: {text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("1 passed"), "{cap}: {text}");
    }
}

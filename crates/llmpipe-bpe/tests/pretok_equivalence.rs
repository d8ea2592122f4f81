//! The hand-written pre-tokenizers (src/pretok.rs) against the regex they replace (fancy-regex,
//! the engine tiktoken uses): identical pieces on real text in many languages, on generated
//! adversarial strings and on random Unicode, for gpt2, cl100k and o200k.

use llmpipe_bpe::pattern::CL100K_TIKTOKEN;
use llmpipe_bpe::{pattern_by_name, PreTokenizer};
use std::path::PathBuf;

/// The three names, and tiktoken's own cl100k source (`\p{N}{1,3}+`), which shares cl100k's scanner.
const PATTERNS: [&str; 4] = ["gpt2", "cl100k", "o200k", "cl100k-tiktoken"];

fn pre(name: &str) -> PreTokenizer {
    let src = if name == "cl100k-tiktoken" { CL100K_TIKTOKEN } else { pattern_by_name(name).unwrap() };
    let p = PreTokenizer::new(src).unwrap();
    assert!(p.is_builtin(), "{name} should use the hand-written scanner");
    p
}

fn check(p: &PreTokenizer, name: &str, text: &str) {
    let fast = p.pieces(text);
    let slow = p.regex_pieces(text);
    if fast != slow {
        let at = fast.iter().zip(&slow).position(|(a, b)| a != b).unwrap_or(fast.len().min(slow.len()));
        panic!(
            "{name}: pieces differ at piece {at} for {text:?}\n scanner: {:?}\n   regex: {:?}",
            &fast[at.saturating_sub(2)..(at + 3).min(fast.len())],
            &slow[at.saturating_sub(2)..(at + 3).min(slow.len())]
        );
    }
}

/// xorshift64*: a fixed, dependency-free generator so every run tests the same strings.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Snippets chosen to hit every branch of the three patterns: whitespace of every kind (and
/// runs of it before letters, digits, punctuation and the end), CR/LF runs, digits of several
/// scripts, letters of every case class (Lu, Ll, Lt, Lm, Lo), combining marks (Mn, Mc, Me),
/// apostrophes and contractions in both cases (and `ſ`, which `(?i:s)` matches), `/`, emoji,
/// ZWJ and variation selectors.
const SNIPPETS: &[&str] = &[
    " ",
    " ",
    " ",
    "  ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\n\n",
    "\u{b}",
    "\u{c}",
    "\u{85}",
    "\u{a0}",
    "\u{1680}",
    "\u{2000}",
    "\u{2028}",
    "\u{2029}",
    "\u{202f}",
    "\u{3000}",
    "\u{1c}",
    "\u{200b}",
    "0",
    "7",
    "42",
    "12345",
    "٣",
    "४५६",
    "①",
    "Ⅻ",
    "½",
    "a",
    "z",
    "s",
    "t",
    "d",
    "m",
    "l",
    "v",
    "e",
    "r",
    "A",
    "S",
    "T",
    "L",
    "V",
    "E",
    "R",
    "D",
    "M",
    "hello",
    "World",
    "HTML",
    "CamelCase",
    "ſ",
    "\u{212a}",
    "É",
    "ß",
    "ǅ",
    "ǈ",
    "ʰ",
    "ー",
    "Σ",
    "σ",
    "ς",
    "Ж",
    "ж",
    "中文",
    "ب",
    "ש",
    "क",
    "\u{93f}",
    "\u{301}",
    "\u{300}",
    "\u{20dd}",
    "\u{fe0f}",
    "\u{200d}",
    "'",
    "'",
    "’",
    "'s",
    "'S",
    "'t",
    "'re",
    "'RE",
    "'ve",
    "'Ve",
    "'m",
    "'ll",
    "'LL",
    "'lL",
    "'d",
    "'ſ",
    "'x",
    "!",
    "?",
    ".",
    ",",
    "-",
    "_",
    "/",
    "//",
    "<|endoftext|>",
    "😀",
    "👩\u{200d}👩\u{200d}👧",
    "🇫🇷",
    "✊🏽",
    "\u{ffff}",
    "\u{10ffff}",
    "\u{e000}",
    "𝔘",
    "𝟙",
    "\u{1d165}",
];

fn adversarial(rng: &mut Rng) -> String {
    let n = 1 + rng.below(24);
    (0..n).map(|_| SNIPPETS[rng.below(SNIPPETS.len())]).collect()
}

/// Any Unicode scalar, weighted towards ASCII and the BMP.
fn random_unicode(rng: &mut Rng) -> String {
    let n = 1 + rng.below(40);
    let mut s = String::new();
    while s.chars().count() < n {
        let c = match rng.below(4) {
            0 => rng.below(0x80) as u32,
            1 => rng.below(0x800) as u32,
            2 => rng.below(0x10000) as u32,
            _ => rng.below(0x110000) as u32,
        };
        if let Some(c) = char::from_u32(c) {
            s.push(c);
        }
    }
    s
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
}

#[test]
fn same_pieces_on_real_text() {
    let books = data_dir().join("reference/books");
    let mut texts = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&books)
        .unwrap_or_else(|e| panic!("the shared real data is missing at {}: {e}", books.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 3, "expected the books of ../shared/data/reference/books");
    for p in paths {
        let t = std::fs::read_to_string(&p).unwrap();
        let cut = t.char_indices().nth(200_000).map_or(t.len(), |(i, _)| i);
        texts.push(t[..cut].to_string());
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    for e in std::fs::read_dir(src).unwrap() {
        texts.push(std::fs::read_to_string(e.unwrap().path()).unwrap());
    }
    for name in PATTERNS {
        let p = pre(name);
        for t in &texts {
            // whole documents and line by line (how training feeds the pre-tokenizer)
            check(&p, name, t);
            for line in t.split_inclusive('\n').take(2000) {
                check(&p, name, line);
            }
        }
    }
}

#[test]
fn same_pieces_on_adversarial_strings() {
    for name in PATTERNS {
        let p = pre(name);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            check(&p, name, &adversarial(&mut rng));
        }
    }
}

#[test]
fn same_pieces_on_random_unicode() {
    for name in PATTERNS {
        let p = pre(name);
        let mut rng = Rng(0xD1B5_4A32_D192_ED03);
        for _ in 0..20_000 {
            check(&p, name, &random_unicode(&mut rng));
        }
    }
}

#[test]
fn long_runs_are_linear() {
    // a million equal characters of each class: the scanner has no backtracking blow-up
    for name in PATTERNS {
        let p = pre(name);
        for unit in ["a", " ", "1", "!", "\n", "A", "\u{301}", " \n"] {
            let text = unit.repeat(1_000_000 / unit.len());
            let pieces = p.pieces(&text);
            assert_eq!(pieces.concat(), text);
        }
    }
}

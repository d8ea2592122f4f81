//! A fastText-style quality classifier: hashed word unigrams and bigrams and, optionally, the
//! character n-grams of each word (`<word>`, `minn..=maxn` characters, as fastText's subwords); a
//! linear model trained by logistic regression with plain SGD (deterministic: a seeded shuffle, one
//! thread).
//!
//! Model file (little-endian): magic `LLMPQM02`, u32 hash bits, u32 max word n-gram (2), u32 char
//! n-gram min, u32 char n-gram max (0 = none), f32 bias, then 2^bits f32 weights. `LLMPQM01` files
//! (no char n-gram fields, none used) are still read.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use xxhash_rust::xxh3::xxh3_64_with_seed;

const MAGIC: &[u8; 8] = b"LLMPQM02";
const MAGIC_V1: &[u8; 8] = b"LLMPQM01";

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    pub bits: u32,
    pub epochs: usize,
    pub lr: f64,
    pub l2: f64,
    pub seed: u64,
    /// character n-grams of each word, `[min, max]` characters (with `<` `>`); `[0, 0]` = none;
    /// the default is the CLI's (`--char-ngrams 3-5`)
    pub char_ngrams: [u32; 2],
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self { bits: 20, epochs: 5, lr: 0.5, l2: 1e-6, seed: 0, char_ngrams: [3, 5] }
    }
}

#[derive(Clone, Debug)]
pub struct Model {
    pub bits: u32,
    /// `[min, max]` characters of the word n-grams used as features, `[0, 0]` = none
    pub char_ngrams: [u32; 2],
    pub bias: f32,
    pub weights: Vec<f32>,
}

/// The character n-grams of `<word>` with `minn..=maxn` characters, hashed (the whole `<word>` is
/// left out: the word itself is already a feature).
fn char_ngrams(word: &str, [minn, maxn]: [u32; 2], mask: u64, out: &mut Vec<u32>) {
    if maxn == 0 {
        return;
    }
    let mut buf = String::with_capacity(word.len() + 2);
    buf.push('<');
    buf.push_str(word);
    buf.push('>');
    let bounds: Vec<usize> = buf.char_indices().map(|(i, _)| i).chain(std::iter::once(buf.len())).collect();
    let nchars = bounds.len() - 1;
    for i in 0..nchars {
        for n in minn.max(1) as usize..=maxn as usize {
            if i + n > nchars {
                break;
            }
            if n == nchars {
                continue;
            }
            let h = xxh3_64_with_seed(&buf.as_bytes()[bounds[i]..bounds[i + n]], 3);
            out.push((h & mask) as u32);
        }
    }
}

/// Hashed features of a text: lower-cased alphanumeric words, unigrams and bigrams (and the words'
/// character n-grams when `chars` is set), each weighted 1/sqrt(count of features) so that long
/// and short documents are on one scale.
pub fn features(text: &str, bits: u32, chars: [u32; 2]) -> Vec<u32> {
    let mask = (1u64 << bits) - 1;
    let mut out = Vec::new();
    let mut prev: Option<u64> = None;
    let mut word = String::new();
    let flush = |word: &mut String, prev: &mut Option<u64>, out: &mut Vec<u32>| {
        if word.is_empty() {
            return;
        }
        let h = xxh3_64_with_seed(word.as_bytes(), 1);
        out.push((h & mask) as u32);
        if word.chars().next().is_some_and(char::is_alphanumeric) {
            char_ngrams(word, chars, mask, out);
        }
        if let Some(p) = *prev {
            let b = xxh3_64_with_seed(&[p.to_le_bytes(), h.to_le_bytes()].concat(), 2);
            out.push((b & mask) as u32);
        }
        *prev = Some(h);
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        } else {
            flush(&mut word, &mut prev, &mut out);
            if !c.is_whitespace() {
                // punctuation is a token of its own: it says a lot about web boilerplate
                word.push(c);
                flush(&mut word, &mut prev, &mut out);
            }
        }
    }
    flush(&mut word, &mut prev, &mut out);
    out
}

#[inline]
fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

impl Model {
    fn margin(&self, feats: &[u32]) -> f64 {
        if feats.is_empty() {
            return self.bias as f64;
        }
        let s: f64 = feats.iter().map(|&f| self.weights[f as usize] as f64).sum();
        self.bias as f64 + s / (feats.len() as f64).sqrt()
    }

    /// Probability that `text` looks like the positive (reference) class.
    pub fn score(&self, text: &str) -> f64 {
        sigmoid(self.margin(&features(text, self.bits, self.char_ngrams)))
    }

    pub fn score_batch(&self, texts: &[&str]) -> Vec<f64> {
        texts.par_iter().map(|t| self.score(t)).collect()
    }

    /// Train on positive and negative texts; classes are weighted to count equally.
    pub fn train(pos: &[&str], neg: &[&str], cfg: &TrainConfig) -> Result<Model, String> {
        if !(8..=28).contains(&cfg.bits) {
            return Err(format!("bits must be in 8..=28, got {}", cfg.bits));
        }
        let [minn, maxn] = cfg.char_ngrams;
        if maxn > 0 && (minn == 0 || minn > maxn || maxn > 16) {
            return Err(format!(
                "char_ngrams must be [min, max] with 1 <= min <= max <= 16, got [{minn}, {maxn}]"
            ));
        }
        if pos.is_empty() || neg.is_empty() {
            return Err("training needs at least one positive and one negative text".into());
        }
        let mut data: Vec<(Vec<u32>, f64, f64)> = Vec::with_capacity(pos.len() + neg.len());
        let wp = (pos.len() + neg.len()) as f64 / (2.0 * pos.len() as f64);
        let wn = (pos.len() + neg.len()) as f64 / (2.0 * neg.len() as f64);
        let ch = cfg.char_ngrams;
        let fp: Vec<Vec<u32>> = pos.par_iter().map(|t| features(t, cfg.bits, ch)).collect();
        let fnn: Vec<Vec<u32>> = neg.par_iter().map(|t| features(t, cfg.bits, ch)).collect();
        data.extend(fp.into_iter().map(|f| (f, 1.0, wp)));
        data.extend(fnn.into_iter().map(|f| (f, 0.0, wn)));
        let mut model =
            Model { bits: cfg.bits, char_ngrams: ch, bias: 0.0, weights: vec![0.0; 1 << cfg.bits] };
        let mut order: Vec<usize> = (0..data.len()).collect();
        let mut rng = cfg.seed ^ 0x9E37_79B9_7F4A_7C15;
        let total = (cfg.epochs * data.len()).max(1) as f64;
        let mut step = 0usize;
        for _ in 0..cfg.epochs {
            for i in (1..order.len()).rev() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                order.swap(i, (rng % (i as u64 + 1)) as usize);
            }
            for &k in &order {
                let (feats, y, w) = &data[k];
                let lr = cfg.lr * (1.0 - step as f64 / total).max(0.01);
                step += 1;
                let g = (sigmoid(model.margin(feats)) - y) * w;
                let scale = if feats.is_empty() { 0.0 } else { 1.0 / (feats.len() as f64).sqrt() };
                for &f in feats {
                    let wt = &mut model.weights[f as usize];
                    *wt -= (lr * (g * scale + cfg.l2 * *wt as f64)) as f32;
                }
                model.bias -= (lr * g) as f32;
            }
        }
        Ok(model)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(28 + 4 * self.weights.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.bits.to_le_bytes());
        out.extend_from_slice(&2u32.to_le_bytes());
        out.extend_from_slice(&self.char_ngrams[0].to_le_bytes());
        out.extend_from_slice(&self.char_ngrams[1].to_le_bytes());
        out.extend_from_slice(&self.bias.to_le_bytes());
        for w in &self.weights {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    pub fn from_bytes(b: &[u8]) -> Result<Model, String> {
        let header = match b.get(..8) {
            Some(m) if m == MAGIC => 28,
            Some(m) if m == MAGIC_V1 => 20,
            _ => return Err("not an llmpipe quality model (bad magic)".into()),
        };
        if b.len() < header {
            return Err(format!("truncated llmpipe quality model ({} bytes)", b.len()));
        }
        let u = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let bits = u(8);
        if !(8..=28).contains(&bits) || u(12) != 2 {
            return Err(format!("unsupported model header (bits {bits}, ngrams {})", u(12)));
        }
        let char_ngrams = if header == 28 { [u(16), u(20)] } else { [0, 0] };
        let n = 1usize << bits;
        if b.len() != header + 4 * n {
            return Err(format!("model file has {} bytes, expected {}", b.len(), header + 4 * n));
        }
        let bias = f32::from_le_bytes(b[header - 4..header].try_into().expect("4 bytes"));
        let weights =
            b[header..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4"))).collect();
        Ok(Model { bits, char_ngrams, bias, weights })
    }

    pub fn save(&self, path: &std::path::Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::File::create(&tmp)?.write_all(&self.to_bytes())?;
        std::fs::rename(tmp, path)
    }

    pub fn load(path: &std::path::Path) -> Result<Model, String> {
        let mut b = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_end(&mut b))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Model::from_bytes(&b).map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_a_separable_toy_and_round_trips() {
        let pos = ["the cat sat on the mat", "a quiet evening by the river", "the history of the town"];
        let neg = ["BUY NOW!!! cheap $$$", "click here >> free $$$", "login | signup | cart"];
        let m =
            Model::train(&pos, &neg, &TrainConfig { bits: 12, epochs: 20, ..Default::default() }).unwrap();
        assert!(m.score("the cat by the river") > m.score("cheap $$$ click here"));
        let m2 = Model::from_bytes(&m.to_bytes()).unwrap();
        assert_eq!(m.score("hello"), m2.score("hello"));
    }

    #[test]
    fn char_ngrams_generalise_to_unseen_word_forms() {
        let pos = ["the governments negotiated", "historians documented"];
        let neg = ["clickbait freebies", "giveaways sweepstakes"];
        let cfg = TrainConfig { bits: 14, epochs: 30, char_ngrams: [3, 5], ..Default::default() };
        let m = Model::train(&pos, &neg, &cfg).unwrap();
        // unseen words sharing character n-grams with each side
        assert!(m.score("government negotiations") > m.score("freebie giveaway"));
        let m2 = Model::from_bytes(&m.to_bytes()).unwrap();
        assert_eq!(m2.char_ngrams, [3, 5]);
        assert_eq!(m.score("historian"), m2.score("historian"));
        let mut f = Vec::new();
        char_ngrams("ab", [1, 3], u64::MAX, &mut f);
        // "<ab>": 4 of 1 char, 3 of 2, 2 of 3 (the whole "<ab>" of 4 left out)
        assert_eq!(f.len(), 9);
    }
}

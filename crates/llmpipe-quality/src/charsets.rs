//! datatrove's character sets (`datatrove.utils.text`), exported by `data/gen_spacy_en.py`.

use ahash::AHashSet;
use serde::Deserialize;
use std::sync::OnceLock;

#[derive(Deserialize)]
struct Sets {
    punctuation: String,
    terminal_punctuation: String,
}

pub struct CharSets {
    pub punctuation: AHashSet<char>,
    pub terminal: AHashSet<char>,
    ascii_punct: [bool; 128],
}

impl CharSets {
    pub fn get() -> &'static CharSets {
        static S: OnceLock<CharSets> = OnceLock::new();
        S.get_or_init(|| {
            let sets: Sets = serde_json::from_str(include_str!("../data/datatrove_text.json"))
                .expect("data/datatrove_text.json is valid");
            let punctuation: AHashSet<char> = sets.punctuation.chars().collect();
            // gopher.rs takes a word starting with an ASCII letter or digit as non-symbol
            assert!(!punctuation.iter().any(|c| c.is_ascii_alphanumeric()), "punctuation holds a letter");
            let mut ascii_punct = [false; 128];
            for c in punctuation.iter().filter(|c| c.is_ascii()) {
                ascii_punct[*c as usize] = true;
            }
            CharSets { punctuation, terminal: sets.terminal_punctuation.chars().collect(), ascii_punct }
        })
    }

    /// `ch in PUNCTUATION_SET`
    #[inline]
    pub fn is_punct(&self, c: char) -> bool {
        if c.is_ascii() {
            self.ascii_punct[c as usize]
        } else {
            self.punctuation.contains(&c)
        }
    }
}

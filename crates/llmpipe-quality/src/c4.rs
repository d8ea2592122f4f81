//! C4 rules (Raffel et al. 2020) with their line-level cleaning, ported from datatrove's
//! `C4QualityFilter` (split by lines, as C4 does). A kept document's text is rewritten to its kept lines.

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickKind};

use crate::pycompat::{len, split_ws, strip, Lines};
use crate::words::EnglishTokenizer;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct C4Config {
    pub remove_citations: bool,
    pub filter_no_terminal_punct: bool,
    /// -1 disables
    pub min_num_sentences: i64,
    /// -1 disables
    pub min_words_per_line: i64,
    /// -1 disables
    pub max_word_length: i64,
    pub filter_lorem_ipsum: bool,
    pub filter_javascript: bool,
    pub filter_curly_bracket: bool,
    pub filter_policy: bool,
}

impl Default for C4Config {
    fn default() -> Self {
        Self {
            remove_citations: true,
            filter_no_terminal_punct: true,
            min_num_sentences: 5,
            min_words_per_line: 3,
            max_word_length: 1000,
            filter_lorem_ipsum: true,
            filter_javascript: true,
            filter_curly_bracket: true,
            filter_policy: true,
        }
    }
}

const POLICY: [&str; 6] =
    ["terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies"];

fn citation() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\[\d*\]|\[edit\]|\[citation needed\]").expect("valid regex"))
}

/// Pattern ids of [`phrases`]: bit 0 "lorem ipsum", bit 1 "javascript", bits 2.. the policy phrases.
const LOREM: u32 = 1;
const JAVASCRIPT: u32 = 2;
const ANY_POLICY: u32 = !(LOREM | JAVASCRIPT);

/// One automaton for every phrase C4 looks for in a lower-cased line, ASCII case-insensitive: on an
/// ASCII line that is the same as searching `line.to_lowercase()` (other lines are lower-cased
/// first, since some non-ASCII letters lower-case to ASCII ones: KELVIN SIGN -> `k`).
fn phrases() -> &'static AhoCorasick {
    static AC: OnceLock<AhoCorasick> = OnceLock::new();
    AC.get_or_init(|| {
        let pats = ["lorem ipsum", "javascript"].into_iter().chain(POLICY);
        AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .kind(Some(AhoCorasickKind::DFA))
            .build(pats)
            .expect("valid patterns")
    })
}

/// Which phrases (bits, see [`LOREM`]) occur in `line.to_lowercase()`.
fn found_phrases(line: &str) -> u32 {
    let mut bits = 0u32;
    let mut scan = |hay: &str| {
        for m in phrases().find_overlapping_iter(hay) {
            bits |= 1 << m.pattern().as_u32();
        }
    };
    if line.is_ascii() {
        scan(line);
    } else {
        scan(&line.to_lowercase());
    }
    bits
}

/// The outcome for one document: the drop reason, or the cleaned text.
pub enum C4Outcome {
    Drop(&'static str),
    Keep(String),
}

pub fn c4(cfg: &C4Config, text: &str, tok: &EnglishTokenizer) -> C4Outcome {
    c4_words(cfg, text, tok, None).0
}

/// [`c4`], given the document's words when they are known (as [`EnglishTokenizer::words`] splits
/// `text`): a kept line's words are then the document's words within it (the tokenizer splits each
/// run of non-whitespace on its own, and line breaks are whitespace), not a new split. Also returns
/// the words of a kept document's cleaned text, as byte spans in it, when the sentences were counted
/// (its words are those of its kept lines: the lines are joined by `\n` and only whitespace is
/// stripped, so no run of non-whitespace changes).
pub fn c4_words<'a>(
    cfg: &C4Config,
    text: &'a str,
    tok: &EnglishTokenizer,
    doc_words: Option<&[&'a str]>,
) -> (C4Outcome, Option<Vec<(u32, u32)>>) {
    let mut num_sentences: i64 = 0;
    let mut out = String::new();
    let count = cfg.min_num_sentences != -1;
    // the cleaned text's word spans (before its final strip), while the sentences are counted
    let mut spans: Vec<(u32, u32)> = Vec::new();
    let mut split: Vec<&'a str> = Vec::new();
    let mut next_word = 0usize; // first of doc_words not before the current line
    let base = text.as_ptr() as usize;
    let mut first = true;
    for raw in Lines::new(text) {
        let (line, stripped) = (strip(raw), strip(raw));
        // a word has at most as many characters as the line has bytes
        if cfg.max_word_length != -1
            && line.len() as i64 > cfg.max_word_length
            && split_ws(line).any(|w| len(w) as i64 > cfg.max_word_length)
        {
            continue;
        }
        let line = if cfg.remove_citations && line.contains('[') {
            citation().replace_all(line, "")
        } else {
            std::borrow::Cow::Borrowed(line)
        };
        if cfg.filter_no_terminal_punct
            && (!line.ends_with(['.', '?', '!', '"', '\'']) || line.ends_with("..."))
        {
            continue;
        }
        // the words of the line before citations were removed, as `len(line.split())` counts them
        if cfg.min_words_per_line > 0 {
            let need = cfg.min_words_per_line as usize;
            if split_ws(stripped).take(need).count() < need {
                continue;
            }
        }
        let found = found_phrases(&line);
        if cfg.filter_lorem_ipsum && found & LOREM != 0 {
            return (C4Outcome::Drop("lorem_ipsum"), None);
        }
        if cfg.filter_javascript && found & JAVASCRIPT != 0 {
            continue;
        }
        if cfg.filter_curly_bracket && line.contains('{') {
            return (C4Outcome::Drop("curly_bracket"), None);
        }
        if cfg.filter_policy && found & ANY_POLICY != 0 {
            continue;
        }
        if !first {
            out.push('\n');
        }
        first = false;
        let at = out.len();
        out.push_str(&line);
        if count {
            let owned_words: Vec<&str>;
            let line_words: &[&str] = match (&line, doc_words) {
                (std::borrow::Cow::Borrowed(l), Some(words)) => {
                    let (a, b) = (l.as_ptr() as usize - base, l.as_ptr() as usize - base + l.len());
                    while next_word < words.len() && words[next_word].as_ptr() as usize - base < a {
                        next_word += 1;
                    }
                    let from = next_word;
                    while next_word < words.len() && words[next_word].as_ptr() as usize - base < b {
                        next_word += 1;
                    }
                    &words[from..next_word]
                }
                (std::borrow::Cow::Borrowed(l), None) => {
                    split.clear();
                    tok.words(l, &mut split);
                    &split
                }
                (std::borrow::Cow::Owned(l), _) => {
                    owned_words = tok.split(l);
                    &owned_words
                }
            };
            num_sentences += tok.count_sentences_of(line_words) as i64;
            let lp = line.as_ptr() as usize;
            spans.extend(line_words.iter().map(|w| {
                let s = at + (w.as_ptr() as usize - lp);
                (s as u32, (s + w.len()) as u32)
            }));
        }
    }
    if num_sentences < cfg.min_num_sentences {
        return (C4Outcome::Drop("too_few_sentences"), None);
    }
    let kept = strip(&out);
    let (a, b) = (kept.as_ptr() as usize - out.as_ptr() as usize, kept.len());
    out.truncate(a + b);
    out.drain(..a);
    let spans = (count && out.len() <= u32::MAX as usize).then(|| {
        spans.iter_mut().for_each(|s| *s = (s.0 - a as u32, s.1 - a as u32));
        spans
    });
    (C4Outcome::Keep(out), spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pycompat::splitlines;

    /// The rules as datatrove writes them, line by line with a new split and a lower-cased copy:
    /// the oracle of the shared-words, one-automaton version.
    fn reference(cfg: &C4Config, text: &str, tok: &EnglishTokenizer) -> Result<String, &'static str> {
        let mut num_sentences: i64 = 0;
        let mut kept: Vec<std::borrow::Cow<'_, str>> = Vec::new();
        for raw in splitlines(text) {
            let line = strip(raw);
            let n_words = split_ws(line).count() as i64;
            if cfg.max_word_length != -1 && split_ws(line).any(|w| len(w) as i64 > cfg.max_word_length) {
                continue;
            }
            let line = if cfg.remove_citations { citation().replace_all(line, "") } else { line.into() };
            if cfg.filter_no_terminal_punct
                && (!line.ends_with(['.', '?', '!', '"', '\'']) || line.ends_with("..."))
            {
                continue;
            }
            if n_words < cfg.min_words_per_line {
                continue;
            }
            let lower = line.to_lowercase();
            if cfg.filter_lorem_ipsum && lower.contains("lorem ipsum") {
                return Err("lorem_ipsum");
            }
            if cfg.filter_javascript && lower.contains("javascript") {
                continue;
            }
            if cfg.filter_curly_bracket && line.contains('{') {
                return Err("curly_bracket");
            }
            if cfg.filter_policy && POLICY.iter().any(|p| lower.contains(p)) {
                continue;
            }
            if cfg.min_num_sentences != -1 {
                num_sentences += tok.count_sentences(&line) as i64;
            }
            kept.push(line);
        }
        if num_sentences < cfg.min_num_sentences {
            return Err("too_few_sentences");
        }
        Ok(strip(&kept.join("\n")).to_string())
    }

    #[test]
    fn shared_words_match_the_plain_rules() {
        let tok = EnglishTokenizer::get();
        let pieces = [
            "Hello world, this is fine.",
            "  Leading and trailing spaces here too!  ",
            "A cited claim[1] that stays [edit] put.",
            "[citation needed] first, then words follow.",
            "short.",
            "We use COOKIES on this site, sadly.",
            "Enable JavaScript to continue reading please.",
            "Ther\u{212A} is a Kelvin sign: USE COO\u{212A}IES here.",
            "Don't stop... believing in this...",
            "Mr. Smith went to Washington. He said hi! Did he?",
            "U.S.A. e.g., the end of the line \"quoted.\"",
            "Ünïcödé wörds ärë fïnë tóó, ríght?",
            "no terminal punctuation at all",
            "Lorem Ipsum dolor sit amet.",
            "curly { brace } lines drop everything.",
            "",
            "\t",
        ];
        let breaks = ["\n", "\r\n", "\r", "\u{2028}", "\u{85}", "\n\n", "\x0c"];
        let mut rng = llmpipe_text::TestRng::new(0x9E37_79B9_7F4A_7C15);
        let mut next = move |m: usize| rng.below(m);
        let mut cfgs = vec![C4Config::default(), C4Config { min_num_sentences: 1, ..Default::default() }];
        cfgs.push(C4Config { min_words_per_line: -1, filter_no_terminal_punct: false, ..Default::default() });
        cfgs.push(C4Config { max_word_length: 4, min_num_sentences: 0, ..Default::default() });
        cfgs.push(C4Config { min_num_sentences: -1, filter_lorem_ipsum: false, ..Default::default() });
        for round in 0..3000 {
            let mut text = String::new();
            for _ in 0..1 + next(12) {
                text.push_str(pieces[next(pieces.len())]);
                text.push_str(breaks[next(breaks.len())]);
            }
            if round % 3 == 0 {
                text = format!("  {text}");
            }
            let cfg = &cfgs[round % cfgs.len()];
            let words = tok.split(&text);
            let want = reference(cfg, &text, tok);
            for known in [None, Some(&words[..])] {
                let (got, spans) = c4_words(cfg, &text, tok, known);
                match (&want, got) {
                    (Err(a), C4Outcome::Drop(b)) => assert_eq!(*a, b, "{text:?}"),
                    (Ok(a), C4Outcome::Keep(b)) => {
                        assert_eq!(*a, b, "{text:?}");
                        if let Some(spans) = spans {
                            let got: Vec<&str> =
                                spans.iter().map(|&(x, y)| &b[x as usize..y as usize]).collect();
                            assert_eq!(got, tok.split(&b), "{text:?}");
                        } else {
                            assert_eq!(cfg.min_num_sentences, -1);
                        }
                    }
                    (w, _) => panic!("{text:?}: want {w:?}"),
                }
            }
        }
    }
}

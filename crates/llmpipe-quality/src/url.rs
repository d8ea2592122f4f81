//! The URL filter: datatrove's `URLFilter` rules (FineWeb's first step), per batch of URLs.
//!
//! A URL is dropped, first rule first, when
//! 1. its registered domain (domain + public suffix, as tldextract finds it) is a listed domain,
//! 2. its full host name (tldextract's `fqdn`) is a listed domain,
//! 3. the URL itself is a listed URL,
//! 4. one of its words (runs of ASCII letters and digits, case kept) is a banned word,
//! 5. at least `soft_word_threshold` distinct soft-banned words are among its words,
//! 6. a banned subword occurs in the URL stripped to its lowercased ASCII letters and digits
//!    (one Aho-Corasick automaton over all subwords).
//!
//! The host is parsed as tldextract 5 does (`lenient_netloc`, then the longest public-suffix rule of
//! the ICANN section of the Public Suffix List, wildcards and exceptions included). Listed domains
//! and URLs are kept as sorted 64-bit hashes (5M UT1 domains take 40 MB, not a set of strings); a
//! false match needs a 64-bit collision.

use std::collections::{HashMap, HashSet};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use llmpipe_text::is_split_whitespace;
use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

/// Why a URL is dropped (`Keep` = 0: kept). The codes are the Python side's reasons, in rule order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum UrlVerdict {
    Keep = 0,
    Domain = 1,
    Subdomain = 2,
    Url = 3,
    Word = 4,
    SoftWord = 5,
    Subword = 6,
    /// no URL to judge
    Missing = 7,
}

/// The Public Suffix List's rules as a trie of labels read right to left.
#[derive(Default)]
pub struct Psl {
    children: Vec<HashMap<Box<str>, u32>>,
    end: Vec<bool>,
}

impl Psl {
    pub fn new(rules: &[&str]) -> Self {
        let mut p = Psl { children: vec![HashMap::new()], end: vec![false] };
        for rule in rules {
            let mut node = 0usize;
            for label in rule.split('.').rev() {
                let next = match p.children[node].get(label) {
                    Some(&n) => n as usize,
                    None => {
                        let n = p.children.len();
                        p.children.push(HashMap::new());
                        p.end.push(false);
                        p.children[node].insert(label.into(), n as u32);
                        n
                    }
                };
                node = next;
            }
            p.end[node] = true;
        }
        p
    }

    /// tldextract's `suffix_index`: the index of the first label of the public suffix, if any.
    fn suffix_index(&self, labels: &[&str]) -> Option<usize> {
        let mut node = 0usize;
        let mut suffix_idx = labels.len();
        let mut label_idx = labels.len();
        for label in labels.iter().rev() {
            let lowered = label.to_lowercase();
            if let Some(&n) = self.children[node].get(lowered.as_str()) {
                label_idx -= 1;
                node = n as usize;
                if self.end[node] {
                    suffix_idx = label_idx;
                }
                continue;
            }
            if self.children[node].contains_key("*") {
                let exception = format!("!{lowered}");
                let is_exception = self.children[node].contains_key(exception.as_str());
                // label_idx >= 1 here: the label that did not match is still to the left
                return Some(if is_exception { label_idx } else { label_idx - 1 });
            }
            break;
        }
        (suffix_idx < labels.len()).then_some(suffix_idx)
    }
}

/// tldextract's `lenient_netloc`: the host of a URL-like string, leniently.
pub fn lenient_netloc(url: &str) -> &str {
    let rest = schemeless(url);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let rest = &rest[..end];
    let after_userinfo = match rest.rfind('@') {
        Some(i) => &rest[i + 1..],
        None => rest,
    };
    if after_userinfo.starts_with('[') {
        if let Some(i) = after_userinfo.find(']') {
            return &after_userinfo[..=i];
        }
    }
    let host = match after_userinfo.find(':') {
        Some(i) => &after_userinfo[..i],
        None => after_userinfo,
    };
    host.trim_matches(is_split_whitespace).trim_end_matches(['.', '\u{3002}', '\u{ff0e}', '\u{ff61}'])
}

fn schemeless(url: &str) -> &str {
    let Some(d) = url.find("//") else { return url };
    if d == 0 {
        return &url[2..];
    }
    if d < 2
        || url.as_bytes()[d - 1] != b':'
        || !url[..d - 1].bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        return url;
    }
    &url[d + 2..]
}

/// (registered domain, fqdn) as tldextract gives them; empty strings when the host has no public
/// suffix (IP addresses, `localhost`) or no label before it.
pub fn domains(psl_rules: &Psl, host: &str) -> (String, String) {
    let host: std::borrow::Cow<'_, str> = if host.contains(['\u{3002}', '\u{ff0e}', '\u{ff61}']) {
        host.replace(['\u{3002}', '\u{ff0e}', '\u{ff61}'], ".").into()
    } else {
        host.into()
    };
    let labels: Vec<&str> = host.split('.').collect();
    let Some(si) = psl_rules.suffix_index(&labels) else { return (String::new(), String::new()) };
    let domain = if si > 0 { labels[si - 1] } else { "" };
    let suffix = labels[si..].join(".");
    if suffix.is_empty() || domain.is_empty() {
        return (String::new(), String::new());
    }
    let registered = format!("{domain}.{suffix}");
    let fqdn =
        if si >= 2 { format!("{}.{registered}", labels[..si - 1].join(".")) } else { registered.clone() };
    (registered, fqdn)
}

/// Lines of a list file as Python's text-mode iteration gives them (universal newlines), each
/// stripped; lines whose first character is `#` are comments. A blank line is the empty entry.
fn list_lines(data: &str) -> impl Iterator<Item = &str> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (line, next) = match rest.find(['\n', '\r']) {
            Some(i) => {
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                (&rest[..i + skip], &rest[i + skip..])
            }
            None => (rest, ""),
        };
        rest = next;
        Some(line)
    })
    .filter(|l| !l.starts_with('#'))
    .map(|l| l.trim_matches(is_split_whitespace))
}

/// datatrove's `normalize`: ASCII letters and digits only, lowercased.
pub fn normalize(s: &str) -> String {
    s.bytes().filter(u8::is_ascii_alphanumeric).map(|b| b.to_ascii_lowercase() as char).collect()
}

/// The words of a URL: Python's `re.split(r"[^a-zA-Z0-9]+", url)`, empty pieces at the ends kept.
fn url_words(url: &str) -> impl Iterator<Item = &str> {
    url.split(|c: char| !c.is_ascii_alphanumeric()).enumerate().filter_map({
        let n = url.split(|c: char| !c.is_ascii_alphanumeric()).count();
        move |(i, w)| (!w.is_empty() || i == 0 || i + 1 == n).then_some(w)
    })
}

/// A set of 64-bit hashes: sorted, with the start of each run of equal top bits indexed, so that a
/// lookup touches the index and one or two cache lines (a binary search over UT1's 4.6M hashes
/// would take ~22 cache misses).
#[derive(Default)]
struct HashList {
    keys: Vec<u64>,
    starts: Vec<u32>,
    shift: u32,
}

impl HashList {
    fn build(mut keys: Vec<u64>) -> Self {
        keys.par_sort_unstable();
        keys.dedup();
        // about one key per bucket: 2^bits >= len, at most 2^24 buckets (64 MiB of index)
        let bits = (usize::BITS - keys.len().leading_zeros()).clamp(1, 24);
        let shift = 64 - bits;
        let mut starts = vec![0u32; (1usize << bits) + 1];
        let mut i = 0usize;
        for (b, start) in starts.iter_mut().enumerate() {
            while i < keys.len() && ((keys[i] >> shift) as usize) < b {
                i += 1;
            }
            *start = i as u32;
        }
        HashList { keys, starts, shift }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn contains(&self, s: &str) -> bool {
        if self.keys.is_empty() {
            return false;
        }
        let h = xxh3_64(s.as_bytes());
        let b = (h >> self.shift) as usize;
        self.keys[self.starts[b] as usize..self.starts[b + 1] as usize].contains(&h)
    }
}

/// The lists and rules of one URL filter.
pub struct UrlFilter {
    psl: Psl,
    domain_hashes: Vec<u64>,
    url_hashes: Vec<u64>,
    domains: HashList,
    urls: HashList,
    banned_words: HashSet<String>,
    soft_words: HashSet<String>,
    subwords: Vec<String>,
    automaton: Option<AhoCorasick>,
    soft_word_threshold: usize,
}

/// Which list a file adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    Domains,
    Urls,
    BannedWords,
    BannedSubwords,
    SoftBannedWords,
}

impl ListKind {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "domains" => Self::Domains,
            "urls" => Self::Urls,
            "banned_words" => Self::BannedWords,
            "banned_subwords" => Self::BannedSubwords,
            "soft_banned_words" => Self::SoftBannedWords,
            _ => return None,
        })
    }
}

impl UrlFilter {
    /// An empty filter with the ICANN public-suffix rules (`*.ck`, `!www.ck` included).
    pub fn new(psl_rules: &[&str], soft_word_threshold: usize) -> Self {
        UrlFilter {
            psl: Psl::new(psl_rules),
            domain_hashes: Vec::new(),
            url_hashes: Vec::new(),
            domains: HashList::default(),
            urls: HashList::default(),
            banned_words: HashSet::new(),
            soft_words: HashSet::new(),
            subwords: Vec::new(),
            automaton: None,
            soft_word_threshold,
        }
    }

    /// Add the entries of one list file (its text); returns how many lines it held.
    pub fn add_list(&mut self, kind: ListKind, data: &str) -> usize {
        let mut n = 0;
        for line in list_lines(data) {
            n += 1;
            match kind {
                ListKind::Domains => self.domain_hashes.push(xxh3_64(line.as_bytes())),
                ListKind::Urls => self.url_hashes.push(xxh3_64(line.as_bytes())),
                ListKind::BannedWords => drop(self.banned_words.insert(normalize(line))),
                ListKind::SoftBannedWords => drop(self.soft_words.insert(normalize(line))),
                ListKind::BannedSubwords => self.subwords.push(normalize(line)),
            }
        }
        n
    }

    /// Sort the hashed lists and build the subword automaton: call once, after the last `add_list`.
    pub fn finish(&mut self) -> Result<(), String> {
        let mut domains = std::mem::take(&mut self.domain_hashes);
        domains.extend_from_slice(&self.domains.keys);
        let mut urls = std::mem::take(&mut self.url_hashes);
        urls.extend_from_slice(&self.urls.keys);
        self.domains = HashList::build(domains);
        self.urls = HashList::build(urls);
        // an empty subword matches nothing in pyahocorasick; it is left out here too
        let words: HashSet<&str> =
            self.subwords.iter().map(String::as_str).filter(|w| !w.is_empty()).collect();
        self.automaton = if words.is_empty() {
            None
        } else {
            let mut words: Vec<&str> = words.into_iter().collect();
            words.sort_unstable();
            Some(
                AhoCorasickBuilder::new()
                    .match_kind(MatchKind::Standard)
                    .build(words)
                    .map_err(|e| format!("banned subwords: {e}"))?,
            )
        };
        Ok(())
    }

    /// Entries of each list: (domains, urls, banned words, banned subwords, soft-banned words).
    pub fn sizes(&self) -> (usize, usize, usize, usize, usize) {
        (
            self.domains.len(),
            self.urls.len(),
            self.banned_words.len(),
            self.subwords.len(),
            self.soft_words.len(),
        )
    }

    /// The verdict on one URL.
    pub fn judge(&self, url: &str) -> UrlVerdict {
        if !self.domains.is_empty() {
            let (registered, fqdn) = domains(&self.psl, lenient_netloc(url));
            if self.domains.contains(&registered) {
                return UrlVerdict::Domain;
            }
            if self.domains.contains(&fqdn) {
                return UrlVerdict::Subdomain;
            }
        }
        if self.urls.contains(url) {
            return UrlVerdict::Url;
        }
        if !self.banned_words.is_empty() || !self.soft_words.is_empty() || self.soft_word_threshold == 0 {
            let words: HashSet<&str> = url_words(url).collect();
            if words.iter().any(|w| self.banned_words.contains(*w)) {
                return UrlVerdict::Word;
            }
            let soft = words.iter().filter(|w| self.soft_words.contains(**w)).count();
            if soft >= self.soft_word_threshold {
                return UrlVerdict::SoftWord;
            }
        }
        if let Some(ac) = &self.automaton {
            if ac.is_match(&normalize(url)) {
                return UrlVerdict::Subword;
            }
        }
        UrlVerdict::Keep
    }

    /// Verdicts for a batch (None: no URL), in parallel, in input order.
    pub fn judge_batch(&self, urls: &[Option<&str>]) -> Vec<u8> {
        urls.par_iter().map(|u| u.map_or(UrlVerdict::Missing, |u| self.judge(u)) as u8).collect()
    }
}

/// The URL in one document's metadata (a JSON object): the first of `fields` that is a string.
pub fn url_of<'a>(meta: &'a str, fields: &[&str]) -> Option<std::borrow::Cow<'a, str>> {
    let v: HashMap<&str, serde_json::Value> = serde_json::from_str(meta).ok()?;
    fields.iter().find_map(|f| match v.get(f) {
        Some(serde_json::Value::String(s)) => Some(std::borrow::Cow::Owned(s.clone())),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netloc_like_tldextract() {
        assert_eq!(lenient_netloc("http://user@www.Example.com:80/a?b#c"), "www.Example.com");
        assert_eq!(lenient_netloc("example.com/path"), "example.com");
        assert_eq!(lenient_netloc("//example.com."), "example.com");
        assert_eq!(lenient_netloc("http://[::1]:80/"), "[::1]");
    }

    #[test]
    fn suffixes_wildcards_exceptions() {
        let psl = Psl::new(&["com", "uk", "co.uk", "ck", "*.ck", "!www.ck"]);
        assert_eq!(domains(&psl, "a.b.bbc.co.uk"), ("bbc.co.uk".into(), "a.b.bbc.co.uk".into()));
        assert_eq!(domains(&psl, "x.foo.ck"), ("x.foo.ck".into(), "x.foo.ck".into()));
        assert_eq!(domains(&psl, "www.ck"), ("www.ck".into(), "www.ck".into()));
        assert_eq!(domains(&psl, "localhost"), (String::new(), String::new()));
        assert_eq!(domains(&psl, "1.2.3.4"), (String::new(), String::new()));
    }

    #[test]
    fn hash_list_finds_every_key_and_no_other() {
        let words: Vec<String> = (0..5000).map(|i| format!("d{i}.com")).collect();
        let list = HashList::build(words.iter().map(|w| xxh3_64(w.as_bytes())).collect());
        assert!(words.iter().all(|w| list.contains(w)));
        assert!(!(0..5000).any(|i| list.contains(&format!("e{i}.com"))));
        assert!(!HashList::default().contains("x"));
    }

    #[test]
    fn rules_in_order() {
        let mut f = UrlFilter::new(&["com"], 2);
        f.add_list(ListKind::Domains, "# comment\nbad.com\n");
        f.add_list(ListKind::BannedWords, "Porn\n");
        f.add_list(ListKind::SoftBannedWords, "sex\nhot\n");
        f.add_list(ListKind::BannedSubwords, "casino\n");
        f.finish().unwrap();
        assert_eq!(f.judge("https://www.bad.com/x"), UrlVerdict::Domain);
        assert_eq!(f.judge("https://good.com/porn/1"), UrlVerdict::Word);
        assert_eq!(f.judge("https://good.com/PORN/1"), UrlVerdict::Keep);
        assert_eq!(f.judge("https://good.com/sex-hot"), UrlVerdict::SoftWord);
        assert_eq!(f.judge("https://good.com/sex"), UrlVerdict::Keep);
        assert_eq!(f.judge("https://good.com/bestCasinos"), UrlVerdict::Subword);
        assert_eq!(f.judge("https://good.com/"), UrlVerdict::Keep);
    }
}

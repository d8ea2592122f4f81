//! The vendored whatlang (vendor/whatlang: a faster trigram distance) must give exactly what the
//! published whatlang 0.18.0 gives: language, script and confidence, bit for bit, on real text in
//! many languages and scripts (../shared/data), whole and cut at several lengths.

use std::io::Read;
use std::path::PathBuf;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
}

fn texts() -> Vec<String> {
    let mut out = Vec::new();
    let mut gz = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(data().join("web/cc-main-2019-30-extracted.jsonl.gz")).unwrap(),
    )
    .read_to_string(&mut gz)
    .unwrap();
    for name in ["web/cc-en-head-0091.jsonl", "web/cc-en-head-0174.jsonl"] {
        gz.push_str(&std::fs::read_to_string(data().join(name)).unwrap());
    }
    for line in gz.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        out.push(v["text"].as_str().unwrap().to_string());
    }
    for book in ["notre-dame-de-paris.txt", "wiki-fr-extract.txt", "tiny-shakespeare.txt"] {
        let t = std::fs::read_to_string(data().join("reference/books").join(book)).unwrap();
        out.extend(t.split("\n\n").take(400).map(str::to_string));
    }
    out
}

fn cut(t: &str, n: usize) -> &str {
    let mut end = t.len().min(n);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    &t[..end]
}

#[test]
fn vendored_whatlang_equals_the_published_one() {
    let texts = texts();
    assert!(texts.len() > 1500, "{}", texts.len());
    let mut scripts = std::collections::BTreeSet::new();
    let mut checked = 0;
    for t in &texts {
        for n in [24, 100, 500, 4096, usize::MAX] {
            let s = cut(t, n);
            let ours = whatlang::detect(s);
            let theirs = whatlang_upstream::detect(s);
            match (ours, theirs) {
                (None, None) => {}
                (Some(a), Some(b)) => {
                    assert_eq!(a.lang().code(), b.lang().code(), "{s:?}");
                    assert_eq!(a.script().name(), b.script().name(), "{s:?}");
                    assert_eq!(a.confidence().to_bits(), b.confidence().to_bits(), "{s:?}");
                    scripts.insert(a.script().name().to_string());
                }
                (a, b) => panic!("{s:?}: {a:?} vs {b:?}"),
            }
            checked += 1;
        }
    }
    // the crawl sample holds many scripts: the multi-language ones (Latin, Cyrillic, Arabic, ...) too
    assert!(scripts.len() >= 6 && scripts.contains("Latin") && scripts.contains("Cyrillic"), "{scripts:?}");
    assert!(checked > 7000);
}

//! HF `tokenizer.json` for byte-level BPE: write one HF loads, read ones HF (or llmpipe) wrote.

use crate::bytemap::{byte_to_char, bytes_to_string, string_to_bytes};
use crate::model::{Special, Tokenizer};
use crate::pattern::{PreTokenizer, GPT2};
use crate::Error;
use serde_json::{json, Value};

fn bad(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

/// Serialise to tokenizer.json text.
///
/// The bytes are those of serde_json writing the document as a `Value` (keys sorted at every
/// level), but the vocabulary and the merges, nearly all of the file, are written straight from
/// the token strings: building 64k JSON values and a sorted map of 32k keys first cost more than
/// the rest of training's last step.
pub fn to_json(t: &Tokenizer) -> String {
    let table = byte_to_char();
    let mut strings: Vec<Option<String>> = vec![None; t.tokens.len()];
    for (i, tok) in t.tokens.iter().enumerate() {
        if let Some(tok) = tok {
            strings[i] = Some(match t.specials.iter().find(|s| s.id == i as u32) {
                Some(sp) => sp.content.clone(),
                None => bytes_to_string(tok, &table),
            });
        }
    }
    // vocab: an object sorted by key; a key seen twice keeps its last id (a map's insert)
    let mut order: Vec<(&str, usize)> =
        strings.iter().enumerate().filter_map(|(i, s)| s.as_deref().map(|s| (s, i))).collect();
    order.sort_by(|x, y| x.0.cmp(y.0)); // stable: equal keys stay in id order
    let mut vocab = Vec::with_capacity(order.len() * 12);
    vocab.push(b'{');
    for (k, &(s, i)) in order.iter().enumerate() {
        if order.get(k + 1).is_some_and(|n| n.0 == s) {
            continue;
        }
        if vocab.len() > 1 {
            vocab.push(b',');
        }
        write_str(&mut vocab, s);
        vocab.push(b':');
        vocab.extend_from_slice(i.to_string().as_bytes());
    }
    vocab.push(b'}');
    let mut merges = Vec::with_capacity(t.merge_list.len() * 10);
    merges.push(b'[');
    let mut pair = String::new();
    for (k, &(a, b)) in t.merge_list.iter().enumerate() {
        if k > 0 {
            merges.push(b',');
        }
        pair.clear();
        pair.push_str(strings[a as usize].as_deref().unwrap_or_default());
        pair.push(' ');
        pair.push_str(strings[b as usize].as_deref().unwrap_or_default());
        write_str(&mut merges, &pair);
    }
    merges.push(b']');
    let added = added_tokens(t);
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": t.pre.source()}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": t.add_prefix_space, "trim_offsets": true, "use_regex": false}
        ]},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": t.ignore_merges, "vocab": {}, "merges": []}
    });
    let skeleton = serde_json::to_string(&doc).unwrap_or_default();
    // Each marker occurs once: outside strings (quotes inside a JSON string are escaped).
    let out = splice(&skeleton, "\"merges\":[]", "\"merges\":", &merges);
    splice(&out, "\"vocab\":{}", "\"vocab\":", &vocab)
}

/// A JSON string literal, escaped exactly as serde_json writes it.
/// The special tokens as tokenizer.json's `added_tokens` entries.
fn added_tokens(t: &Tokenizer) -> Vec<Value> {
    t.specials
        .iter()
        .map(|s| {
            json!({"id": s.id, "content": s.content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect()
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing to a vector");
}

/// `text` with its one occurrence of `marker` replaced by `head` and `body`.
fn splice(text: &str, marker: &str, head: &str, body: &[u8]) -> String {
    let at = text.find(marker).expect("marker in the skeleton");
    let mut out = String::with_capacity(text.len() + body.len());
    out.push_str(&text[..at]);
    out.push_str(head);
    out.push_str(std::str::from_utf8(body).expect("JSON text is UTF-8"));
    out.push_str(&text[at + marker.len()..]);
    out
}

fn is_null(v: Option<&Value>) -> bool {
    v.is_none_or(Value::is_null)
}

/// (regex source, add_prefix_space) from a supported pre_tokenizer.
fn read_pre(v: &Value) -> Result<(String, bool), Error> {
    let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "ByteLevel" => {
            let aps = v.get("add_prefix_space").and_then(Value::as_bool).unwrap_or(false);
            if v.get("use_regex").and_then(Value::as_bool).unwrap_or(true) {
                Ok((GPT2.to_string(), aps))
            } else {
                Err(bad("pre_tokenizer ByteLevel(use_regex=false) without a Split is not supported"))
            }
        }
        "Sequence" => {
            let items = v
                .get("pretokenizers")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("pre_tokenizer Sequence without pretokenizers"))?;
            match items.as_slice() {
                [one] => read_pre(one),
                [split, bl]
                    if split.get("type").and_then(Value::as_str) == Some("Split")
                        && bl.get("type").and_then(Value::as_str) == Some("ByteLevel") =>
                {
                    if split.get("behavior").and_then(Value::as_str) != Some("Isolated")
                        || split.get("invert").and_then(Value::as_bool).unwrap_or(false)
                    {
                        return Err(bad("only Split(behavior=Isolated, invert=false) is supported"));
                    }
                    let re = split
                        .get("pattern")
                        .and_then(|p| p.get("Regex"))
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad("Split pattern must be a Regex"))?;
                    if bl.get("use_regex").and_then(Value::as_bool).unwrap_or(true) {
                        return Err(bad("Split followed by ByteLevel(use_regex=true) is not supported"));
                    }
                    let aps = bl.get("add_prefix_space").and_then(Value::as_bool).unwrap_or(false);
                    if aps {
                        return Err(bad(
                            "Split followed by ByteLevel(add_prefix_space=true) is not supported",
                        ));
                    }
                    Ok((re.to_string(), false))
                }
                _ => Err(bad("unsupported pre_tokenizer Sequence (expected [Split, ByteLevel])")),
            }
        }
        other => Err(bad(format!("unsupported pre_tokenizer type {other:?} (byte-level BPE expected)"))),
    }
}

/// Parse tokenizer.json text.
pub fn from_json(text: &str) -> Result<Tokenizer, Error> {
    let doc: Value = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let model = doc.get("model").ok_or_else(|| bad("no \"model\""))?;
    if model.get("type").and_then(Value::as_str).unwrap_or("BPE") != "BPE" {
        return Err(bad("model.type is not BPE"));
    }
    if !is_null(doc.get("normalizer")) {
        return Err(bad("a normalizer is not supported (byte-level BPE without normalizer expected)"));
    }
    if model.get("byte_fallback").and_then(Value::as_bool).unwrap_or(false)
        || !is_null(model.get("continuing_subword_prefix"))
        || !is_null(model.get("end_of_word_suffix"))
    {
        return Err(bad("byte_fallback, continuing_subword_prefix and end_of_word_suffix are not supported"));
    }
    if let Some(pp) = doc.get("post_processor").filter(|v| !v.is_null()) {
        if pp.get("type").and_then(Value::as_str) != Some("ByteLevel") {
            return Err(bad("only a ByteLevel (or null) post_processor is supported"));
        }
    }
    let pre = doc.get("pre_tokenizer").filter(|v| !v.is_null()).ok_or_else(|| bad("no pre_tokenizer"))?;
    let (re, aps) = read_pre(pre)?;

    let mut specials = Vec::new();
    if let Some(added) = doc.get("added_tokens").and_then(Value::as_array) {
        for a in added {
            let id = a.get("id").and_then(Value::as_u64).ok_or_else(|| bad("added token without id"))?;
            let content =
                a.get("content").and_then(Value::as_str).ok_or_else(|| bad("added token without content"))?;
            specials.push(Special { content: content.to_string(), id: id as u32 });
        }
    }
    let vocab = model.get("vocab").and_then(Value::as_object).ok_or_else(|| bad("model.vocab missing"))?;
    let max_id = vocab.values().filter_map(Value::as_u64).max().unwrap_or(0) as usize;
    let mut tokens: Vec<Option<Vec<u8>>> = vec![None; max_id + 1];
    let mut by_str = ahash::AHashMap::with_capacity(vocab.len());
    for (s, id) in vocab {
        let id = id.as_u64().ok_or_else(|| bad("vocab id is not an integer"))? as usize;
        by_str.insert(s.as_str(), id as u32);
        if specials.iter().any(|sp| sp.id as usize == id) {
            continue;
        }
        let b = string_to_bytes(s)
            .ok_or_else(|| bad(format!("vocab token {s:?} is not in the byte-level alphabet")))?;
        tokens[id] = Some(b);
    }
    let merges = model.get("merges").and_then(Value::as_array).ok_or_else(|| bad("model.merges missing"))?;
    let mut merge_list = Vec::with_capacity(merges.len());
    for m in merges {
        let (a, b) = match m {
            Value::String(s) => s.split_once(' ').ok_or_else(|| bad(format!("bad merge {s:?}")))?,
            Value::Array(v) if v.len() == 2 => (
                v[0].as_str().ok_or_else(|| bad("bad merge"))?,
                v[1].as_str().ok_or_else(|| bad("bad merge"))?,
            ),
            _ => return Err(bad("bad merge entry")),
        };
        let ia = *by_str.get(a).ok_or_else(|| bad(format!("merge token {a:?} not in vocab")))?;
        let ib = *by_str.get(b).ok_or_else(|| bad(format!("merge token {b:?} not in vocab")))?;
        merge_list.push((ia, ib));
    }
    let ignore = model.get("ignore_merges").and_then(Value::as_bool).unwrap_or(false);
    let pre = PreTokenizer::new(&re)?;
    let mut t = Tokenizer::new(tokens, merge_list, specials, pre, ignore)?;
    t.add_prefix_space = aps;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::{count_words_texts, train_from_counts, TrainConfig};
    use serde_json::Map;
    use std::sync::atomic::AtomicBool;

    /// The writer `to_json` replaced: the whole document as a serde_json `Value`.
    fn to_json_value(t: &Tokenizer) -> String {
        let table = byte_to_char();
        let mut vocab = Map::new();
        let mut strings: Vec<Option<String>> = vec![None; t.tokens.len()];
        for (i, tok) in t.tokens.iter().enumerate() {
            if let Some(tok) = tok {
                let s = match t.specials.iter().find(|s| s.id == i as u32) {
                    Some(sp) => sp.content.clone(),
                    None => bytes_to_string(tok, &table),
                };
                vocab.insert(s.clone(), json!(i));
                strings[i] = Some(s);
            }
        }
        let merges: Vec<Value> = t
            .merge_list
            .iter()
            .map(|&(a, b)| {
                let sa = strings[a as usize].as_deref().unwrap_or_default();
                let sb = strings[b as usize].as_deref().unwrap_or_default();
                json!(format!("{sa} {sb}"))
            })
            .collect();
        let added = added_tokens(t);
        let doc = json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": t.pre.source()}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": t.add_prefix_space, "trim_offsets": true, "use_regex": false}
            ]},
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                      "ignore_merges": t.ignore_merges, "vocab": vocab, "merges": merges}
        });
        serde_json::to_string(&doc).unwrap()
    }

    #[test]
    fn to_json_writes_the_bytes_of_the_value_writer() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/pretok.rs")).unwrap();
        // quotes, backslashes, control and non-ASCII characters in tokens and special tokens; a
        // special token whose content is also an ordinary token's string (the byte "a": a key seen twice)
        let text = format!("{text}\n\"q\" \\\\ \u{1}\u{7f} ünïcödé 😀 tab\there \"\\\"\n");
        for (vocab_size, pattern) in [(600, crate::pattern::GPT2), (400, crate::pattern::O200K)] {
            let pre = PreTokenizer::new(pattern).unwrap();
            let words = count_words_texts(&[text.as_str()], &pre);
            let cfg = TrainConfig {
                vocab_size,
                min_frequency: 2,
                max_token_length: None,
                special_tokens: vec!["<|endoftext|>".into(), "<\"q\\\u{1}>".into(), "a".into()],
            };
            let tok = train_from_counts(words, &cfg, pre, &AtomicBool::new(false)).unwrap();
            let json = to_json(&tok);
            assert_eq!(json, to_json_value(&tok));
            let back = from_json(&json).unwrap();
            assert_eq!(to_json(&back), json);
        }
    }
}

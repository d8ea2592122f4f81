//! PII redaction: e-mail addresses, public IPv4/IPv6 addresses and phone numbers are replaced by
//! placeholders. Private, loopback, link-local, reserved and documentation addresses are left alone,
//! as are dotted numbers that are not exactly four parts (versions like 1.2.3) and dotted quads
//! written right after a version word ("version 1.2.3.4", "v1.2.3.4").

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PiiConfig {
    pub emails: bool,
    pub ip_addresses: bool,
    pub phone_numbers: bool,
    pub email_placeholder: String,
    pub ip_placeholder: String,
    pub phone_placeholder: String,
}

impl Default for PiiConfig {
    fn default() -> Self {
        Self {
            emails: true,
            ip_addresses: true,
            phone_numbers: true,
            email_placeholder: "<EMAIL>".into(),
            ip_placeholder: "<IP_ADDRESS>".into(),
            phone_placeholder: "<PHONE_NUMBER>".into(),
        }
    }
}

/// How many of each kind were replaced in one document.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PiiCounts {
    pub emails: u32,
    pub ipv4: u32,
    pub ipv6: u32,
    pub phones: u32,
}

impl PiiCounts {
    pub fn total(&self) -> u32 {
        self.emails + self.ipv4 + self.ipv6 + self.phones
    }
}

struct Patterns {
    email: Regex,
    ipv4: Regex,
    ipv6: Regex,
    phone: Regex,
    version_before: Regex,
    /// The same patterns without word boundaries: a text without a match of one of these has no
    /// match of the real pattern either (see [`prefilter`]).
    email_pre: Regex,
    ipv4_pre: Regex,
    phone_pre: Regex,
}

const EMAIL: &str =
    r"(?i)\b[a-z0-9][a-z0-9._%+-]{0,63}@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}\b";
const IPV4: &str = r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b";
// +CC groups, or (NNN) NNN-NNNN / NNN-NNN-NNNN / NNN.NNN.NNNN (North American)
const PHONE: &str = r"(?:\+\d{1,3}[\s.-]?(?:\(\d{1,4}\)|\d{1,4})(?:[\s.-]?\d{2,4}){2,4}|(?:\(\d{3}\)\s?|\b\d{3}[.-])\d{3}[.-]\d{4})\b";

/// `pattern` without its word-boundary assertions. Dropping an assertion only adds matches, so a
/// text with no match of the prefilter has none of the pattern, and the prefilter runs on the regex
/// crate's DFA (Unicode `\b` sends any non-ASCII text to the much slower PikeVM).
fn prefilter(pattern: &str) -> Regex {
    Regex::new(&pattern.replace(r"\b", "")).expect("valid regex")
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        email: Regex::new(EMAIL).expect("valid regex"),
        ipv4: Regex::new(IPV4).expect("valid regex"),
        ipv6: Regex::new(r"(?i)[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?:\.\d{1,3}){0,3}").expect("valid regex"),
        phone: Regex::new(PHONE).expect("valid regex"),
        version_before: Regex::new(r"(?i)(?:\bv|\bversion\s|\bver\.?\s?|\brelease\s|\bbuild\s)$")
            .expect("valid regex"),
        email_pre: prefilter(EMAIL),
        ipv4_pre: prefilter(IPV4),
        phone_pre: prefilter(PHONE),
    })
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || o[0] == 0
        || o[0] >= 240
        || (o[0] == 100 && (64..128).contains(&o[1]))
        || (o[0] == 198 && (o[1] == 18 || o[1] == 19)))
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return public_v4(v4);
    }
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] == 0x2001 && s[1] == 0x0db8))
}

fn byte_before(t: &str, i: usize) -> Option<u8> {
    i.checked_sub(1).map(|j| t.as_bytes()[j])
}

/// Replace PII in one text; returns the new text (if anything changed) and the counts.
pub fn redact(cfg: &PiiConfig, text: &str) -> (Option<String>, PiiCounts) {
    redact_with(cfg, text, true)
}

fn redact_with(cfg: &PiiConfig, text: &str, use_prefilter: bool) -> (Option<String>, PiiCounts) {
    let p = patterns();
    let may = |pre: &Regex| !use_prefilter || pre.is_match(text);
    let mut counts = PiiCounts::default();
    // (start, end, placeholder); earlier kinds win overlaps
    let mut spans: Vec<(usize, usize, &str)> = Vec::new();
    let free =
        |spans: &[(usize, usize, &str)], a: usize, b: usize| spans.iter().all(|&(s, e, _)| b <= s || a >= e);
    if cfg.emails && text.contains('@') && may(&p.email_pre) {
        for m in p.email.find_iter(text) {
            spans.push((m.start(), m.end(), &cfg.email_placeholder));
            counts.emails += 1;
        }
    }
    if cfg.ip_addresses {
        let ipv4 = may(&p.ipv4_pre).then(|| p.ipv4.find_iter(text));
        for m in ipv4.into_iter().flatten() {
            let (a, b) = (m.start(), m.end());
            // part of a longer dotted number (1.2.3.4.5) or of a word/identifier
            let before = byte_before(text, a);
            let after = text.as_bytes().get(b).copied();
            let dotted_before = before == Some(b'.') && a >= 2 && text.as_bytes()[a - 2].is_ascii_digit();
            let dotted_after =
                after == Some(b'.') && text.as_bytes().get(b + 1).is_some_and(u8::is_ascii_digit);
            if dotted_before || dotted_after || p.version_before.is_match(&text[..a]) {
                continue;
            }
            let Ok(ip) = m.as_str().parse::<Ipv4Addr>() else { continue };
            if public_v4(ip) && free(&spans, a, b) {
                spans.push((a, b, &cfg.ip_placeholder));
                counts.ipv4 += 1;
            }
        }
        if text.contains(':') {
            for m in p.ipv6.find_iter(text) {
                let (a, b) = (m.start(), m.end());
                let s = m.as_str();
                if s.matches(':').count() < 2 || s.len() < 3 {
                    continue;
                }
                let before = byte_before(text, a);
                let after = text.as_bytes().get(b).copied();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b':')
                    || after.is_some_and(|c| c.is_ascii_alphanumeric() || c == b':')
                {
                    continue;
                }
                let Ok(ip) = s.parse::<Ipv6Addr>() else { continue };
                if public_v6(ip) && free(&spans, a, b) {
                    spans.push((a, b, &cfg.ip_placeholder));
                    counts.ipv6 += 1;
                }
            }
        }
    }
    if cfg.phone_numbers && may(&p.phone_pre) {
        for m in p.phone.find_iter(text) {
            let (a, b) = (m.start(), m.end());
            let digits = m.as_str().bytes().filter(u8::is_ascii_digit).count();
            let before = byte_before(text, a);
            if !(10..=15).contains(&digits) || before.is_some_and(|c| c.is_ascii_alphanumeric()) {
                continue;
            }
            if free(&spans, a, b) {
                spans.push((a, b, &cfg.phone_placeholder));
                counts.phones += 1;
            }
        }
    }
    if spans.is_empty() {
        return (None, counts);
    }
    spans.sort_unstable_by_key(|s| s.0);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (a, b, ph) in spans {
        out.push_str(&text[at..a]);
        out.push_str(ph);
        at = b;
    }
    out.push_str(&text[at..]);
    (Some(out), counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_public_and_keeps_private() {
        let c = PiiConfig::default();
        let t = "Mail jane.doe@example.org or call +1 415 555 0134 / (212) 555-0199. Server 93.184.216.34, \
                 lan 192.168.1.10, lo 127.0.0.1, v6 2a00:1450:4001:81b::200e, ::1, version 1.2.3.4, v2.3.1.";
        let (out, n) = redact(&c, t);
        let out = out.unwrap();
        assert_eq!(n, PiiCounts { emails: 1, ipv4: 1, ipv6: 1, phones: 2 }, "{out}");
        for keep in ["192.168.1.10", "127.0.0.1", "::1", "version 1.2.3.4", "v2.3.1"] {
            assert!(out.contains(keep), "{keep} in {out}");
        }
    }

    #[test]
    fn prefilter_changes_nothing() {
        // non-ASCII word characters next to every boundary, and real crawl text
        let mut texts: Vec<String> = vec![
            "écrire à jean.dupont@exemple.fr ou é1.2.3.4 ou 8.8.8.8é ou 8.8.8.8 ou +33 1 23 45 67 89".into(),
            "Ωjohn@example.comΩ call (555) 123-4567 or 555-123-4567é or é555.123.4567 Kkelvin@x.org".into(),
            "ſ@ſſ.com 1.1.1.1 ver 1.2.3.4 2001:4860:4860::8888 +1 (212) 555-0100 日本123-456-7890".into(),
        ];
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/web");
        for name in ["cc-en-head-0091.jsonl", "cc-en-head-0174.jsonl"] {
            let raw = std::fs::read_to_string(data.join(name)).expect("shared data");
            for line in raw.lines().filter(|l| !l.trim().is_empty()) {
                let v: serde_json::Value = serde_json::from_str(line).expect("json");
                texts.push(v["text"].as_str().unwrap_or_default().to_string());
            }
        }
        let cfg = PiiConfig::default();
        let mut found = 0;
        for t in &texts {
            let (a, ca) = redact_with(&cfg, t, true);
            let (b, cb) = redact_with(&cfg, t, false);
            assert_eq!(a, b, "{t:?}");
            assert_eq!((ca.emails, ca.ipv4, ca.ipv6, ca.phones), (cb.emails, cb.ipv4, cb.ipv6, cb.phones));
            found += ca.total();
        }
        assert!(found > 5, "{found}");
    }
}

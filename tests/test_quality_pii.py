"""PII redaction on real text with planted e-mails, IPs and phone numbers (and decoys to leave alone)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
from llmpipe.curate.stage import StageCounts
from llmpipe.curate.stages.pii import PiiRedact
from llmpipe.quality import PiiConfig, redact_pii

EMAILS = ["jane.doe@example.org", "j_smith+news@mail.co.uk", "Info@Some-Company.de", "x.y.z@sub.domain.com"]
IPV4 = ["93.184.216.34", "8.8.4.4", "151.101.1.69", "203.0.114.7"]
IPV6 = ["2a00:1450:4001:81b::200e", "2606:4700:4700::1111", "2001:4860:4860::8888"]
PHONES = ["+1 415 555 0134", "(212) 555-0199", "+44 20 7946 0958", "415-555-0172", "+49 30 901820"]
# must stay: private/loopback/link-local/documentation addresses, versions, dates, plain numbers
DECOYS = [
    "192.168.1.10", "10.0.0.1", "172.16.5.4", "127.0.0.1", "169.254.3.3", "::1", "fe80::1ff:fe23:4567:890a",
    "version 1.2.3.4", "v2.3.1", "Python 3.11.4", "on 2019-07-15", "in 1984", "ISBN 978-3-16-148410-0",
    "12:30:45", "3.14159",
]  # fmt: skip


def _planted(data_dir: Path, n: int = 40) -> tuple[list[str], list[list[str]]]:
    text = (data_dir / "reference" / "books" / "wonderland.txt").read_text(encoding="utf-8")
    paras = [p for p in text.split("\n\n") if len(p) > 300][:n]
    rng = random.Random(7)
    docs, planted = [], []
    for p in paras:
        pii = [rng.choice(EMAILS), rng.choice(IPV4), rng.choice(IPV6), rng.choice(PHONES)]
        decoys = rng.sample(DECOYS, 3)
        words = p.split(" ")
        for item in pii + decoys:
            words.insert(rng.randrange(len(words)), f"{item},")
        docs.append(" ".join(words))
        planted.append(pii + decoys)
    return docs, planted


def test_planted_pii_is_replaced_and_decoys_kept(data_dir: Path) -> None:
    docs, planted = _planted(data_dir)
    out, counts = redact_pii(docs)
    for text, items, c in zip(out, planted, counts, strict=True):
        for item in items[:4]:
            assert item not in text, (item, text)
        for decoy in items[4:]:
            assert decoy in text, (decoy, text)
        assert c == {"email": 1, "ipv4": 1, "ipv6": 1, "phone": 1}, (c, items)
        assert text.count("<EMAIL>") == 1 and text.count("<PHONE_NUMBER>") == 1
        assert text.count("<IP_ADDRESS>") == 2


def test_plain_text_is_untouched(data_dir: Path) -> None:
    text = (data_dir / "reference" / "books" / "wonderland.txt").read_text(encoding="utf-8")[:20000]
    out, counts = redact_pii([text])
    assert out == [text] and sum(counts[0].values()) == 0


def test_stage_counts_kinds_and_options(data_dir: Path) -> None:
    docs, _ = _planted(data_dir, 10)
    batch = pa.record_batch(
        {"id": [str(i) for i in range(10)], "text": docs, "source": ["b"] * 10, "position": list(range(10))}
    )
    counts = StageCounts("pii")
    out = PiiRedact(PiiRedact.Config()).run(batch, counts)
    counts.check()
    assert out.num_rows == 10 and counts.modified == 10
    assert counts.counters == {
        "replaced_email": 10,
        "replaced_ipv4": 10,
        "replaced_ipv6": 10,
        "replaced_phone": 10,
    }
    only_mail, c2 = redact_pii(
        docs[:1], PiiConfig(ip_addresses=False, phone_numbers=False, email_placeholder="[e]")
    )
    assert "[e]" in only_mail[0] and c2[0]["ipv4"] == 0 and "<IP_ADDRESS>" not in only_mail[0]

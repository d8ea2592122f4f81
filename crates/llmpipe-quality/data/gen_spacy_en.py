"""Regenerate spacy_en.json: spaCy's English tokenizer rules (MIT licence) as plain data.

datatrove's English word and sentence splitting is ``spacy.blank("en")`` (+ the sentencizer); the
Rust port in ``src/words.rs`` reads these rules so that its tokens match spaCy's.
Run: ``python crates/llmpipe-quality/data/gen_spacy_en.py`` (needs spacy).
"""

import json
from pathlib import Path

import spacy
from spacy.pipeline.sentencizer import Sentencizer
from spacy.symbols import ORTH

nlp = spacy.blank("en")
tok = nlp.tokenizer
data = {
    "spacy_version": spacy.__version__,
    "prefix": tok.prefix_search.__self__.pattern,
    "suffix": tok.suffix_search.__self__.pattern,
    "infix": tok.infix_finditer.__self__.pattern,
    "url": tok.url_match.__self__.pattern,
    "specials": {k: [t[ORTH] for t in v] for k, v in sorted(tok.rules.items())},
    "sentence_punct": sorted(Sentencizer.default_punct_chars),
}
out = Path(__file__).with_name("spacy_en.json")
out.write_text(json.dumps(data, ensure_ascii=False, indent=0, sort_keys=True) + "\n")
print(f"wrote {out} ({out.stat().st_size} bytes)")

# datatrove's own character sets (datatrove.utils.text), used by its filters
from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION  # noqa: E402

dt = {"punctuation": "".join(sorted(PUNCTUATION_SET)), "terminal_punctuation": "".join(sorted(TERMINAL_PUNCTUATION))}
out2 = Path(__file__).with_name("datatrove_text.json")
out2.write_text(json.dumps(dt, ensure_ascii=False, sort_keys=True) + "\n")
print(f"wrote {out2}")

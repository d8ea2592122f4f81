"""Tiny randomly initialised Hugging Face models for the model-stage tests (no model hub).

The tokenizer is a WordPiece trained with the ``tokenizers`` library on real crawl text, wrapped in
``BertTokenizerFast`` and saved with ``save_pretrained``; the models are built from a ``BertConfig``
(or ``RobertaConfig``) with a fixed seed and saved as safetensors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

DATA_TEXT = "web/cc-main-2019-30-extracted.jsonl.gz"


def crawl_texts(data_dir: Path, n: int = 400) -> list[str]:
    out = []
    with gzip.open(data_dir / DATA_TEXT, "rt", encoding="utf-8") as fh:
        for line in fh:
            t = json.loads(line).get("text") or ""
            if t.strip():
                out.append(t)
            if len(out) >= n:
                break
    return out


def tokenizer(data_dir: Path, vocab: int = 600, max_length: int = 64):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        crawl_texts(data_dir), trainers.WordPieceTrainer(vocab_size=vocab, special_tokens=special)
    )
    # the trainer picks the same tokens in every process but numbers them in an order that varies
    # (a hash map's): number them in sorted order, so the models' embeddings are the same each run
    trained = set(tok.get_vocab()) - set(special)
    order = special + sorted(trained)
    tok.model = models.WordPiece({t: i for i, t in enumerate(order)}, unk_token="[UNK]")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.decoder = decoders.WordPiece()
    return BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_length,
    )


def bert_config(vocab: int, **kw):  # type: ignore[no-untyped-def]
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        **{"initializer_range": 0.5, **kw},  # 0.5: scores of random weights spread over (0, 1)
    )


def save_classifier(
    out: Path, tok, labels: list[str] | None, seed: int = 0, problem_type: str | None = None
) -> Path:  # type: ignore[no-untyped-def]
    """A BERT sequence classifier: ``labels`` (names) or, with None, a one-output regression head."""
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    if labels is None:
        cfg = bert_config(len(tok), num_labels=1, problem_type=problem_type or "regression")
    else:
        cfg = bert_config(
            len(tok),
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={n: i for i, n in enumerate(labels)},
            problem_type=problem_type,
        )
    BertForSequenceClassification(cfg).eval().save_pretrained(out)
    tok.save_pretrained(out)
    return out


def save_encoder(out: Path, tok, seed: int = 0) -> Path:  # type: ignore[no-untyped-def]
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    # the default initialisation: a random encoder maps a text and its reordered copy close together
    BertModel(bert_config(len(tok), initializer_range=0.02)).eval().save_pretrained(out)
    tok.save_pretrained(out)
    return out

"""Sample text from a trained run.

python -m llmpipe.train.generate RUN_DIR --prompt "ROMEO:" [--max-new-tokens 200] [--temperature 0.8] [--top-k 50]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer

from llmpipe.argtypes import int_at_least, number_at_least
from llmpipe.data.format import MANIFEST, TOKENIZER_FILE, read_manifest
from llmpipe.errors import LlmpipeError
from llmpipe.train.export_hf import load_run
from llmpipe.train.model import Transformer


@torch.no_grad()
def sample(
    model: Transformer,
    ids: list[int],
    *,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    eos_id: int | None,
    generator: torch.Generator,
) -> list[int]:
    """Autoregressive sampling (no KV cache: the context is re-read each step; fine for small models)."""
    window = model.cfg.max_seq_len or len(ids)
    out = list(ids)
    for _ in range(max_new_tokens):
        x = torch.tensor([out[-window:]])
        logits = model(x)[0, -1]
        if temperature <= 0:
            nxt = int(logits.argmax())
        else:
            logits = logits / temperature
            if top_k > 0:
                kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
                logits[logits < kth] = -float("inf")
            nxt = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
        if nxt == eos_id:
            break
        out.append(nxt)
    return out[len(ids) :]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Sample from a training run's latest checkpoint.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--prompt", default="")
    p.add_argument("--max-new-tokens", type=int_at_least(1), default=200)
    p.add_argument("--temperature", type=number_at_least(0.0), default=0.8, help="0: greedy")
    p.add_argument("--top-k", type=int_at_least(0), default=50, help="0: every token")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step", type=int, default=None)
    p.add_argument("--tokenizer", type=Path, default=None)
    args = p.parse_args(argv)
    try:
        cfg, model, _ = load_run(args.run_dir, args.step)
        tok_file = args.tokenizer or (cfg.data.path / TOKENIZER_FILE if cfg.data.path else None)
        if tok_file is None or not tok_file.is_file():
            raise LlmpipeError(f"no tokenizer at {tok_file}; pass --tokenizer FILE")
        tok = Tokenizer.from_file(str(tok_file))
    except LlmpipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        if cfg.data.path is not None and (cfg.data.path / MANIFEST).is_file():
            eos: int | None = read_manifest(cfg.data.path)["tokenizer"]["eos_id"]
        else:
            eos = tok.token_to_id("<|endoftext|>")
    except LlmpipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ids = tok.encode(args.prompt).ids if args.prompt else [eos if eos is not None else 0]
    gen = torch.Generator().manual_seed(args.seed)
    new = sample(model, ids, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                 top_k=args.top_k, eos_id=eos, generator=gen)  # fmt: skip
    print(args.prompt + tok.decode(new))
    return 0


if __name__ == "__main__":
    sys.exit(main())

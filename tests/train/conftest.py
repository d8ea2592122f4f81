"""Helpers for the trainer tests: byte-level shards of real text, and running torchrun as a user would.

Until a trained BPE is needed, the shards hold UTF-8 bytes (ids 0-255) with EOS 256, written by the
real ShardWriter, with a real HF tokenizer.json (byte-level, no merges) so export and generation see
a genuine tokenizer.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from llmpipe.data import ShardWriter  # noqa: E402

EOS = 256


def byte_tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    tok = Tokenizer(BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return tok.to_str()


def write_byte_shards(text_file: Path, out: Path, *, seq_len: int = 64, max_bytes: int | None = None) -> Path:
    """Paragraphs of ``text_file`` as documents, UTF-8 bytes as tokens, through the real ShardWriter."""
    text = text_file.read_text(encoding="utf-8")
    if max_bytes is not None:
        text = text[:max_bytes]
    docs = [p.strip() for p in text.split("\n\n") if p.strip()]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(byte_tokenizer_json())
    w = ShardWriter(
        out,
        seq_len=seq_len,
        vocab_size=257,
        eos_id=EOS,
        tokenizer_file=out / "tokenizer.json",
        samples_per_shard=4096,
        val_fraction=0.05,
        provenance={"source": str(text_file), "tokenizer": "utf-8 bytes"},
    )
    w.add_documents(np.frombuffer(d.encode("utf-8"), dtype=np.uint8).astype(np.uint16) for d in docs)
    w.close()
    return out


@pytest.fixture(scope="session")
def byte_shards(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    src = data_dir / "reference" / "books" / "tiny-shakespeare.txt"
    return write_byte_shards(src, tmp_path_factory.mktemp("shards") / "shakespeare")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(
    nproc: int, *args: str, timeout: int = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``torchrun --nproc_per_node=N train/pretrain.py ARGS`` (or another script given first)."""
    script = args[0] if args and args[0].endswith(".py") else str(ROOT / "train" / "pretrain.py")
    rest = args[1:] if args and args[0].endswith(".py") else args
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1", f"--master_port={free_port()}", script, *rest,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
        )
    return proc


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def train_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir) if "loss" in r}

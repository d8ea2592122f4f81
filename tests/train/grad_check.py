"""Run under torchrun: FSDP2 gradients (sharded and replicated meshes, two micro-batches per rank)
against one process computing the same model on the whole global batch. Exits non-zero on mismatch."""

from __future__ import annotations

import os
import sys

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from llmpipe.data import Batch, ShardDataset, TokenLoader  # noqa: E402
from llmpipe.train.config import RunConfig  # noqa: E402
from llmpipe.train.model import Transformer  # noqa: E402
from llmpipe.train.parallel import build_mesh, init_distributed, resolve_layout  # noqa: E402
from llmpipe.train.pretrain import build_model  # noqa: E402
from llmpipe.train.trainer import count_targets, forward_backward  # noqa: E402
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # noqa: E402


def _say(line: str) -> None:
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def main(shards: str) -> int:
    cfg = RunConfig()
    cfg.model.dim, cfg.model.n_layers, cfg.model.n_heads, cfg.model.n_kv_heads = 64, 2, 4, 2
    cfg.model.doc_mask = True
    cfg.parallel.mixed_precision = "fp32"
    d = init_distributed(cfg.parallel)
    ds = ShardDataset(shards, "train", verify="none")
    cfg.model.vocab_size, cfg.model.max_seq_len = ds.vocab_size, ds.seq_len
    loader = iter(TokenLoader(ds, 4, rank=d.rank, world_size=d.world_size, seed=3, prefetch=1))
    mine = [next(loader), next(loader)]  # two micro-batches per rank
    # every rank's batches, for the single-process reference
    gathered: list[list[Batch]] = [[] for _ in range(d.world_size)]
    dist.all_gather_object(gathered, mine)
    everything = Batch(
        torch.cat([b.input for r in gathered for b in r]),
        torch.cat([b.target for r in gathered for b in r]),
        torch.cat([b.doc_ids for r in gathered for b in r]),
    )
    tokens = count_targets(everything)
    failures = 0
    for sharding in ("full", "none", "hybrid"):
        cfg.parallel.sharding = sharding
        cfg.parallel.shard_size = 2 if sharding == "hybrid" else 0
        d.layout = resolve_layout(cfg.parallel, d.world_size)
        d.mesh = build_mesh(cfg.parallel, d.world_size, "cpu")
        model = build_model(cfg, d)
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        plain = Transformer(cfg.model)
        plain.init_weights(seed=cfg.train.seed)  # the same weights as the sharded init, whatever the mesh
        init_equal = all(torch.equal(full[k], v) for k, v in plain.state_dict().items())
        forward_backward(model, mine, tokens, d.world_size)
        grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
        ref = Transformer(cfg.model)
        ref.load_state_dict(full)
        forward_backward(ref, [everything], tokens, 1)
        worst = 0.0
        for name, p in ref.named_parameters():
            assert p.grad is not None
            rel = float((grads[name] - p.grad).abs().max() / p.grad.abs().max())
            worst = max(worst, rel)
        # one write() per line: both ranks share torchrun's stdout pipe, and print() may split a line
        _say(
            f"rank {d.rank} {sharding}: mesh {tuple(d.mesh.shape)}, {len(grads)} parameters, worst rel diff {worst:.3g}"
        )
        _say(f"rank {d.rank} {sharding}: sharded init equals unsharded init: {init_equal}")
        if not worst <= 1e-5 or not init_equal:
            failures += 1
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""Run under torchrun: the measured peak memory of one rank training the trainer's model at a layout
(``tp=N``, ``pp=N``, ``cp=N``, or the ZeRO stages ``zero=1,2,3`` one after the other; CPU, fp32, two
optimizer steps) next to ``llmpipe plan``'s estimate for that layout. Prints ``rank R: measured M
estimated E`` (``rank R zero=Z: ...`` per stage).

The peak is the most bytes of tensor storage alive at once, counted by a dispatch mode that sees every
tensor an operator returns and is told when its storage is freed or resized (FSDP2 frees its gathered
parameters so); torch's MemTracker does the same but also hooks modules' backward, which the
pipeline's stage-wise ``autograd.grad`` does not allow."""

from __future__ import annotations

import gc
import os
import sys
import weakref

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from llmpipe.data import ShardDataset, TokenLoader  # noqa: E402
from llmpipe.plan import plan_for_run  # noqa: E402
from llmpipe.train.config import RunConfig, load_config  # noqa: E402
from llmpipe.train.optim import build_optimizer  # noqa: E402
from llmpipe.train.parallel import Dist, init_distributed  # noqa: E402
from llmpipe.train.pretrain import build_parallel_model  # noqa: E402
from llmpipe.train.trainer import forward_backward  # noqa: E402
from llmpipe.train.zero import optimizer_mesh  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402


class PeakBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}  # storage address -> bytes
        self.refs: dict[int, weakref.ref[torch.UntypedStorage]] = {}
        self.now = self.peak = 0

    def _freed(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)
        self.refs.pop(key, None)

    def _track(self, st: torch.UntypedStorage) -> None:
        key = id(st)
        if key not in self.refs:
            self.refs[key] = weakref.ref(st, lambda _r, k=key: self._freed(k))
        self.now += st.nbytes() - self.live.get(key, 0)
        self.live[key] = st.nbytes()
        self.peak = max(self.peak, self.now)

    def __enter__(self):  # type: ignore[no-untyped-def]
        # FSDP2 frees and re-allocates its all-gathered parameters by resizing their storage, which no
        # operator sees: count those resizes too (as torch's MemTracker does)
        self._resize = resize = torch.UntypedStorage.resize_

        def resize_(st: torch.UntypedStorage, size: int) -> None:
            resize(st, size)
            if st.device.type != "meta":
                self._track(st)

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign, assignment]
        return super().__enter__()

    def __exit__(self, *exc):  # type: ignore[no-untyped-def]
        torch.UntypedStorage.resize_ = self._resize  # type: ignore[method-assign]
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, DTensor):  # its local shard is the memory
                t = t.to_local()
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            st = t.untyped_storage()
            if id(st) in self.live or st.nbytes() == 0:
                continue
            self._track(st)
        return out


def measure(cfg: RunConfig, d: Dist, ds: ShardDataset) -> int:
    """The peak tensor bytes of building the model and two optimizer steps (the second has the states)."""
    loader = iter(
        TokenLoader(ds, cfg.data.batch_size, rank=d.dp_rank, world_size=d.dp_size, seed=0, prefetch=1)
    )
    tracker = PeakBytes()
    with tracker:  # the model's own allocation counts too
        model, pipe = build_parallel_model(cfg, d)
        opt = build_optimizer(model, cfg.optim, optimizer_mesh(cfg.parallel, d))
        for _ in range(2):
            b = next(loader)
            if d.context_parallel is not None:  # cp: this rank's chunks of each row
                b = d.context_parallel.shard(b)
            tokens = float((b.target != -100).sum())
            if pipe is not None:
                pipe.train_batches([b], torch.tensor(1.0 / tokens))
            else:
                forward_backward(model, [b], tokens, 1)
            opt.step()
            opt.zero_grad(set_to_none=True)
    return tracker.peak


def main(shards: str, config: str, *overrides: str) -> int:
    """``zero=1,2,3`` among the overrides measures each ZeRO stage in turn (one process group)."""
    stages = [o.split("=", 1)[1].split(",") for o in overrides if o.startswith("zero=")]
    rest = [o for o in overrides if not o.startswith("zero=")]
    zero = [f"parallel.zero={z}" for z in stages[0]] if stages else [""]
    ds = ShardDataset(shards, "train", verify="none")
    d: Dist | None = None
    for z in zero:
        cfg = load_config(config, [*rest, *([z] if z else []), "parallel.mixed_precision=fp32"])
        cfg.model.vocab_size, cfg.model.max_seq_len = ds.vocab_size, ds.seq_len
        d = d or init_distributed(cfg.parallel, cfg.model)
        measured = measure(cfg, d, ds)
        gc.collect()
        lay = d.layout
        plan = plan_for_run(
            cfg, world_size=d.world_size, local_world_size=d.world_size, seq_len=ds.seq_len,
            device_memory_gb=80, dp_replicate=lay.dp_replicate, dp_shard=lay.dp_shard, device=d.device.type,
        )  # fmt: skip
        # one write(): both ranks share torchrun's stdout pipe, and print() may split a line
        what = f" {z.split('.')[1]}" if z else ""
        line = f"rank {d.rank}{what}: measured {measured} estimated {int(plan.total_gb * 1e9)}\n"
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), line.encode())
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

"""LoRA and QLoRA: a frozen base (``model.init_from``) with trained low-rank adapters (``lora:``).

Each targeted linear layer becomes a ``LoraLinear``: ``y = x W^T + dropout(x) A^T B^T * alpha / rank``.
``W`` keeps its parameter name (``layers.0.attn.wq.weight``) and is frozen; ``A`` (``.lora_A.weight``,
PEFT's init: Kaiming-uniform) and ``B`` (``.lora_B.weight``, zeros) are the only parameters that train,
so the model starts as the base exactly. Under FSDP2 each block stays one group holding frozen and
trainable parameters (FSDP2 reduces the gradients of those that require them only).

QLoRA (``lora.base_quant: nf4``): ``W`` is held as NF4 with double quantization, as in the QLoRA paper
(``NF4Weight``): 4-bit codes of the 16 NormalFloat levels in blocks of 64 weights, each block's absmax
scale stored as int8 after subtracting the mean of all scales, in blocks of 256 scales with one fp32
factor each. The weight is dequantized in the forward and again in the backward (never kept between
them). The NF4 tensors are buffers (not sharded by FSDP: each data-parallel rank holds the whole base at
about 4.1 bits per weight) and are not saved: a checkpoint holds the adapters and their optimizer state,
and the train state points to the base (its path and a sha256 of its files): a resume against another
base is refused.

``llmpipe export`` writes the adapters as a PEFT directory (``peft_dir``) or merges them into the base
(``merge``: ``W + B @ A * alpha / rank``, from the dequantized base for QLoRA).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from llmpipe.errors import InputError, LlmpipeError
from llmpipe.train import hf
from llmpipe.train.config import LORA_TARGETS, LoraConfig

#: HF module name (``q_proj``) -> ours inside a block (``attn.wq``)
MODULES = {hf.LAYER[ours].split(".")[-1]: ours for ours in hf.LAYER if hf.LAYER[ours].endswith(LORA_TARGETS)}

#: the 16 NormalFloat levels (QLoRA, appendix E; the values bitsandbytes uses)
NF4_LEVELS = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
)  # fmt: skip
BLOCK = 64  # weights per absmax scale
SCALE_BLOCK = 256  # scales per fp32 factor (the second quantization)


def is_adapter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


class NF4Weight(nn.Module):
    """A frozen weight in NF4 with double quantization, in four non-persistent buffers: ``codes`` (two
    4-bit level indices per byte), ``scales`` (int8, one per block of 64), ``factors`` (fp32, one per 256
    scales) and ``mean`` (fp32, the mean scale). A last block of fewer than 64 weights is padded with
    zeros; a last group of fewer than 256 scales has its own factor. For the shapes torchao's
    ``NF4Tensor`` takes, the scales and factors are its values and the codes its codes (but for ties:
    these are the paper's NF4 levels, torchao's are rounded to four decimals)."""

    codes: torch.Tensor
    scales: torch.Tensor
    factors: torch.Tensor
    mean: torch.Tensor

    def __init__(self, shape: tuple[int, int]) -> None:
        super().__init__()
        self.shape = shape
        blocks = math.ceil(math.prod(shape) / BLOCK)
        groups = math.ceil(blocks / SCALE_BLOCK)
        self.register_buffer("codes", torch.zeros(blocks * BLOCK // 2, dtype=torch.uint8), persistent=False)
        self.register_buffer("scales", torch.zeros(blocks, dtype=torch.int8), persistent=False)
        self.register_buffer("factors", torch.ones(groups, dtype=torch.float32), persistent=False)
        self.register_buffer("mean", torch.zeros(1, dtype=torch.float32), persistent=False)

    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers())

    @torch.no_grad()
    def quantize_(self, w: torch.Tensor) -> None:
        """Store ``w`` (the full weight, any float dtype) quantized."""
        if tuple(w.shape) != self.shape:
            raise InputError(f"a weight of shape {tuple(w.shape)} for an NF4 layer of shape {self.shape}")
        flat = w.detach().to(self.factors.device, torch.float32).flatten()
        blocks = F.pad(flat, (0, self.codes.numel() * 2 - flat.numel())).view(-1, BLOCK)
        absmax = blocks.abs().amax(dim=1)
        mean = absmax.mean()
        n = absmax.numel()
        centred = F.pad(absmax - mean, (0, self.factors.numel() * SCALE_BLOCK - n)).view(-1, SCALE_BLOCK)
        factor = 256 / (2 * centred.abs().amax(dim=1).clamp(min=1e-12))
        quantized = (centred * factor[:, None]).round().clamp(-128, 127).flatten()[:n]
        self.scales.copy_(quantized.to(torch.int8))
        self.factors.copy_(factor)
        self.mean.fill_(mean)
        levels = torch.tensor(NF4_LEVELS, device=flat.device)
        normed = (blocks / torch.where(absmax == 0, 1.0, absmax)[:, None]).flatten()
        idx = torch.empty(normed.numel(), dtype=torch.uint8, device=flat.device)
        chunk = 1 << 20  # bounded memory: 16 distances per weight
        for start in range(0, normed.numel(), chunk):
            part = normed[start : start + chunk]
            idx[start : start + chunk] = (part[:, None] - levels).abs().argmin(dim=1).to(torch.uint8)
        self.codes.copy_(idx[0::2] << 4 | idx[1::2])

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        n = self.scales.numel()
        factors = self.factors.repeat_interleave(SCALE_BLOCK)[:n]
        scales = self.scales.float() / factors + self.mean
        levels = torch.tensor(NF4_LEVELS, device=self.codes.device)
        idx = torch.stack([self.codes >> 4, self.codes & 0xF], dim=1).flatten().long()
        w = levels[idx].view(n, BLOCK) * scales[:, None]
        return w.flatten()[: math.prod(self.shape)].view(self.shape).to(dtype)


class _NF4Linear(torch.autograd.Function):
    """``x W^T`` with W dequantized in the forward and again in the backward (QLoRA's memory profile: no
    dequantized weight is kept for the backward). W is frozen: only ``x`` gets a gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: NF4Weight) -> torch.Tensor:
        ctx.weight = weight
        return F.linear(x, weight.dequantize(x.dtype))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad @ ctx.weight.dequantize(grad.dtype), None


class LoraLinear(nn.Module):
    """A frozen linear layer (no bias, as the model's) plus a trained low-rank update."""

    weight: nn.Parameter | None

    def __init__(self, base: nn.Linear, cfg: LoraConfig) -> None:
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.scaling = cfg.alpha / cfg.rank
        self.dropout = cfg.dropout
        if cfg.base_quant == "nf4":
            self.weight = None
            self.nf4: NF4Weight | None = NF4Weight((self.out_features, self.in_features))
        else:
            weight = base.weight
            assert isinstance(weight, nn.Parameter)
            weight.requires_grad_(False)
            self.weight = weight
            self.nf4 = None
        self.lora_A = nn.Linear(self.in_features, cfg.rank, bias=False)
        self.lora_B = nn.Linear(cfg.rank, self.out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.nf4 is not None:
            dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled() else x.dtype
            y = _NF4Linear.apply(x.to(dtype), self.nf4)
        else:
            assert self.weight is not None
            y = F.linear(x, self.weight)
        h = F.dropout(x, self.dropout, self.training)
        return y + self.lora_B(self.lora_A(h)) * self.scaling

    def base_weight(self) -> torch.Tensor:
        """The base weight, dequantized for QLoRA (a plain, unsharded module)."""
        if self.nf4 is not None:
            return self.nf4.dequantize()
        assert self.weight is not None
        return self.weight.detach()

    def delta(self) -> torch.Tensor:
        """``B @ A * scaling``: what the adapter adds to the weight."""
        return (self.lora_B.weight.detach() @ self.lora_A.weight.detach()) * self.scaling


def lora_modules(model: nn.Module) -> dict[str, LoraLinear]:
    """Our module names (``layers.0.attn.wq``) -> the adapted layers."""
    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLinear)}


def apply_lora(model: nn.Module, cfg: LoraConfig) -> None:
    """Freeze every parameter of ``model`` (usually on the meta device, before sharding) and put a
    ``LoraLinear`` in place of each targeted layer of each block."""
    for p in model.parameters():
        p.requires_grad_(False)
    layers = model.get_submodule("layers")
    assert isinstance(layers, nn.ModuleDict | nn.ModuleList)
    for block in list(layers.values()) if isinstance(layers, nn.ModuleDict) else list(layers):
        for target in cfg.targets:
            parent_name, _, attr = MODULES[target].rpartition(".")
            parent = block.get_submodule(parent_name)
            base = getattr(parent, attr)
            assert isinstance(base, nn.Linear)
            setattr(parent, attr, LoraLinear(base, cfg))


@torch.no_grad()
def init_adapters(model: nn.Module, seed: int) -> None:
    """A: uniform in +-1/sqrt(in_features) (PEFT's ``kaiming_uniform_(a=sqrt(5))``); B: zeros. Drawn whole
    from one seeded stream, then sharded: the same adapters on any number of ranks."""
    gen: torch.Generator | None = None
    for _, m in sorted(lora_modules(model).items()):
        for p, bound in ((m.lora_A.weight, 1 / math.sqrt(m.in_features)), (m.lora_B.weight, 0.0)):
            local = p.to_local() if isinstance(p, DTensor) else p
            if gen is None:  # on the CPU whatever the device: the same adapters on CPU and GPU
                gen = torch.Generator().manual_seed(seed)
            full = torch.empty(p.shape, dtype=p.dtype)
            if bound:
                full.uniform_(-bound, bound, generator=gen)
            else:
                full.zero_()
            full = full.to(local.device)
            if isinstance(p, DTensor):
                full = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
            p.copy_(full)


@torch.no_grad()
def load_base(model: nn.Module, hf_dir: Path) -> None:
    """The base weights from ``hf_dir`` (train/hf.py): the frozen parameters, and the NF4 layers
    quantized one full tensor at a time."""
    params = {n: p for n, p in model.named_parameters() if not is_adapter(n)}
    into = {f"{name}.weight": m.nf4.quantize_ for name, m in lora_modules(model).items() if m.nf4 is not None}
    hf.load_weights(model, hf_dir, params=params, into=into)


def trainable_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def nf4_bytes(model: nn.Module) -> int:
    """Bytes of the NF4 tensors this process holds (the quantized base weights)."""
    return sum(m.nf4.nbytes() for m in lora_modules(model).values() if m.nf4 is not None)


def base_sha256(hf_dir: Path) -> str:
    """sha256 over config.json and the weight files of an HF directory (names and bytes, in order)."""
    h = hashlib.sha256()
    for path in sorted({hf_dir / "config.json", *hf.weight_files(hf_dir).values()}):
        h.update(path.name.encode() + b"\0")
        with path.open("rb") as f:
            while block := f.read(1 << 22):
                h.update(block)
    return h.hexdigest()


def base_reference(hf_dir: Path) -> dict[str, str]:
    """What a LoRA checkpoint records of its base."""
    return {"path": str(hf_dir), "sha256": base_sha256(hf_dir)}


def check_base(saved: dict[str, Any], current: dict[str, str], where: Path) -> None:
    """A checkpoint's adapters were trained on ``saved``'s base: refuse any other."""
    ref = saved.get("lora_base")
    if not isinstance(ref, dict):
        raise LlmpipeError(f"{where} holds no LoRA base reference: it is not a checkpoint of a LoRA run")
    if ref.get("sha256") != current["sha256"]:
        raise LlmpipeError(
            f"{where} holds adapters of the base {ref.get('path')} (sha256 {str(ref.get('sha256'))[:12]}), "
            f"not of {current['path']} (sha256 {current['sha256'][:12]}); name that base in model.init_from "
            "or train into a new --out directory"
        )


# -- export ----------------------------------------------------------------------------------------
def peft_name(name: str) -> str:
    """``layers.3.attn.wq.lora_A.weight`` -> ``base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight``."""
    module, _, tail = name.partition(".lora_")
    base = hf.hf_name(f"{module}.weight").removesuffix(".weight")
    return f"base_model.model.{base}.lora_{tail}"


def peft_dir(model: nn.Module, cfg: LoraConfig, base: str, out: Path) -> None:
    """Write the adapters of ``model`` as a PEFT LoRA directory: adapter_config.json and
    adapter_model.safetensors (PEFT's key names) that ``PeftModel.from_pretrained(base, out)`` loads."""
    from safetensors.torch import save_file

    tensors = {
        peft_name(n): p.detach().to(torch.float32).contiguous().clone()
        for n, p in model.named_parameters()
        if is_adapter(n)
    }
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": cfg.rank,
        "lora_alpha": cfg.alpha,
        "lora_dropout": cfg.dropout,
        "target_modules": sorted(cfg.targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
        "layers_to_transform": None,
        "rank_pattern": {},
        "alpha_pattern": {},
    }
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


@torch.no_grad()
def merge(model: nn.Module) -> None:
    """Replace every ``LoraLinear`` of a plain (unsharded) model by an ``nn.Linear`` of weight
    ``W + B @ A * scaling``: the model the adapters trained, as the base architecture."""
    for name, m in lora_modules(model).items():
        parent_name, _, attr = name.rpartition(".")
        linear = nn.Linear(m.in_features, m.out_features, bias=False, device=m.lora_A.weight.device)
        linear.weight.copy_(m.base_weight().float() + m.delta().float())
        setattr(model.get_submodule(parent_name), attr, linear)

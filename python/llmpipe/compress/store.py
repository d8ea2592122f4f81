"""The llmpipe quantized checkpoint: a directory that loads back to the same model as in memory.

    config.json         the HF Llama config of the unquantized model (shapes)
    tokenizer.json      when known
    quantization.json   {"format": "llmpipe-quantized", "version": 1, "method", "bits", "group_size",
                         "tensors": {name: {"kind", "shape", ...}}}
    quantized.safetensors  plain tensors: for a torchao-quantized weight ``W`` its parts ``W.qdata``,
                         ``W.scale`` (fp16) and ``W.zero_point`` unless all zero (symmetric schemes); NF4 buffers
                         ``X.packed``/``X.absmax`` (fp16); everything else (norms) in fp32. 4-bit codes
                         are stored two per byte; every scale is held at fp16 precision in memory too.

transformers' torchao integration cannot load the llmpipe-trained ``Transformer`` layout with NF4/GPTQ
weights, so this directory is read by ``load_quantized``: it rebuilds the model from config.json,
applies the same quantization to a throwaway copy to get the module and tensor types, then writes the
stored parts into them in place. Outputs are bit-identical to the model that was saved.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from llmpipe.compress.names import METHODS
from llmpipe.compress.pack import pack_nibbles, unpack_nibbles
from llmpipe.compress.spec import QuantSpec
from llmpipe.errors import InputError
from llmpipe.outdir import replaced_whole

FORMAT = "llmpipe-quantized"
TENSORS = "quantized.safetensors"
META = "quantization.json"


def _parts(t: torch.Tensor) -> dict[str, torch.Tensor] | None:
    """The inner plain tensors of a torchao tensor subclass, None for a plain tensor."""
    names = getattr(t, "tensor_data_names", None)
    if names is None:
        return None
    out = {n: getattr(t, n) for n in names}
    for n in getattr(t, "optional_tensor_data_names", None) or []:
        if getattr(t, n, None) is not None:
            out[n] = getattr(t, n)
    return out


def save_quantized(
    model: nn.Module, spec: QuantSpec, out: Path, hf_config: dict[str, Any], tokenizer: Path | None
) -> Path:
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    meta: dict[str, dict[str, Any]] = {}
    for name, t in model.state_dict().items():
        parts = _parts(t)
        if parts is None:
            t = t.half() if name.endswith("absmax") else t  # NF4 scales, held at fp16 precision
            tensors[name] = t.detach().contiguous()
            meta[name] = {"kind": "plain", "shape": list(t.shape)}
            continue
        meta[name] = {"kind": type(t).__name__, "shape": list(t.shape), "parts": {}}
        for part, p in parts.items():
            key = f"{name}.{part}"
            packed = spec.bits == 4 and part == "qdata"
            zero = part == "zero_point" and not bool(p.any())
            if packed:  # int4 codes held one per int8 byte by torchao: store two per byte
                tensors[key] = pack_nibbles((p.to(torch.int16) + 8).to(torch.uint8)).contiguous()
            elif part == "scale":  # held at fp16 precision by quantize_model
                tensors[key] = p.detach().half().contiguous()
            elif not zero:  # a symmetric scheme's zero points are all zero: not stored
                tensors[key] = p.detach().contiguous()
            meta[name]["parts"][part] = {"shape": list(p.shape), "nibbles": packed, "zero": zero}
    with replaced_whole(out) as tmp:
        save_file(tensors, str(tmp / TENSORS), metadata={"format": FORMAT})
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
        if tokenizer is not None:
            shutil.copyfile(tokenizer, tmp / "tokenizer.json")
        doc = {"format": FORMAT, "version": 1, "method": spec.method, "bits": spec.bits,
               "group_size": spec.group_size, "tensors": meta}  # fmt: skip
        (tmp / META).write_text(json.dumps(doc, indent=1) + "\n")
    return out / TENSORS


def load_quantized(path: Path) -> tuple[nn.Module, QuantSpec]:
    from safetensors.torch import load_file

    from llmpipe.compress.quantize import quantize_model
    from llmpipe.train.hf import model_config, read_config, read_json

    meta_file = path / META
    if not meta_file.is_file():
        raise InputError(f"{path}: no {META}; not a `llmpipe quantize` output")
    doc = read_json(meta_file)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != 1:
        found = doc if not isinstance(doc, dict) else f"{doc.get('format')!r} version {doc.get('version')!r}"
        raise InputError(f"{meta_file}: unknown format {found}")
    from llmpipe.train.model import Transformer

    method, group = doc.get("method"), doc.get("group_size")
    if method not in METHODS or not (isinstance(group, int) and not isinstance(group, bool) and group > 0):
        raise InputError(
            f"{meta_file}: method {method!r} with group_size {group!r} is not a quantization of llmpipe's"
        )
    spec = QuantSpec(method, group)
    model = Transformer(model_config(read_config(path))).eval()
    if spec.method == "gptq-int4":  # same tensors as int4; GPTQ only chose other codes and scales
        quantize_model(model, QuantSpec("int4", spec.group_size))
    else:
        quantize_model(model, spec)
    stored = load_file(str(path / TENSORS))
    try:
        _fill(model, doc["tensors"], stored, path)
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as e:  # a hand-edited listing
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise InputError(f"{meta_file}: its tensors do not describe {path / TENSORS} ({detail})") from None
    return model, spec


def _fill(model: nn.Module, tensors: dict[str, Any], stored: dict[str, torch.Tensor], path: Path) -> None:
    """Copy the stored tensors into ``model``'s quantized parts, as ``tensors`` (the listing) describes."""
    state = model.state_dict()
    with torch.no_grad():
        for name, info in tensors.items():
            if name not in state:
                raise InputError(f"{path}: tensor {name} does not fit the model of config.json")
            target = state[name]
            if info["kind"] == "plain":
                target.copy_(stored[name])
                continue
            parts = _parts(target) or {}
            for part, pinfo in info["parts"].items():
                if pinfo["zero"]:
                    parts[part].zero_()
                    continue
                src = stored[f"{name}.{part}"]
                if pinfo["nibbles"]:
                    src = (unpack_nibbles(src).to(torch.int16) - 8).to(torch.int8)
                parts[part].copy_(src.reshape(pinfo["shape"]))

"""The compressed-tensors checkpoint: what llmcompressor writes, and transformers and vLLM load.

    config.json         the HF Llama config plus ``quantization_config`` (``quant_method:
                        compressed-tensors``, ``format: pack-quantized``, one config group targeting
                        ``Linear`` with the weight args: num_bits 8 or 4, type int, symmetric,
                        strategy channel (int8) or group with group_size (int4, GPTQ); ``ignore:
                        [lm_head]``), built with the compressed-tensors package's own pydantic models
    model.safetensors   per quantized Linear (HF names): ``weight_packed`` (int32, the signed codes plus
                        2^(bits-1) packed by compressed-tensors' ``pack_to_int32``), ``weight_scale``
                        (fp16, [out, 1] or [out, in/group_size]) and ``weight_shape``; every other
                        tensor (embedding, output head, norms) dense in fp16
    tokenizer.json      when known, with tokenizer_config.json and special_tokens_map.json (as
                        ``llmpipe export`` writes them, so ``AutoTokenizer`` loads the directory too)

The codes and scales are the ones llmpipe's quantizer chose (torchao RTN or GPTQ with the embedding and
output head left dense: ``quantize_model(..., blocks_only=True)``), written as they are: nothing is
re-quantized, so transformers' dequantized weights equal llmpipe's model bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from llmpipe.compress.spec import QuantSpec
from llmpipe.errors import InputError
from llmpipe.outdir import replaced_whole
from llmpipe.quiet import quiet_imports

WEIGHTS = "model.safetensors"
CT_METHODS = ("int8", "int4", "gptq-int4")


def quantization_config(spec: QuantSpec) -> dict[str, Any]:
    """The ``quantization_config`` of config.json, through compressed-tensors' own schema."""
    with quiet_imports():
        from compressed_tensors.quantization import (
            QuantizationArgs,
            QuantizationConfig,
            QuantizationScheme,
            QuantizationStatus,
        )

    if spec.method not in CT_METHODS:
        raise InputError(
            f"--format compressed-tensors holds {', '.join(CT_METHODS)}; {spec.method} needs --format llmpipe"
        )
    if spec.bits == 8:
        weights = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
    else:
        weights = QuantizationArgs(
            num_bits=4, type="int", symmetric=True, strategy="group", group_size=spec.group_size
        )
    cfg = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights)},
        format="pack-quantized",
        quantization_status=QuantizationStatus.COMPRESSED,
        ignore=["lm_head"],
    )
    doc: dict[str, Any] = json.loads(cfg.model_dump_json(exclude_none=False))
    doc["quant_method"] = "compressed-tensors"
    return doc


def ct_state_dict(model: nn.Module, spec: QuantSpec) -> dict[str, torch.Tensor]:
    """HF tensor names -> the tensors of the checkpoint (quantized Linears packed, the rest fp16)."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    from llmpipe.train.hf import hf_name

    cfg: Any = getattr(model, "cfg", None)
    if cfg is not None and cfg.mup_base_dim:
        raise InputError(
            "a muP model cannot be written as compressed-tensors (export it with `llmpipe export` first)"
        )
    tied = bool(cfg is not None and cfg.tie_embeddings)
    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        if name == "output.weight" and tied:
            continue
        key = hf_name(name)
        if not hasattr(t, "tensor_data_names"):
            out[key] = t.detach().half().contiguous()
            continue
        q: Any = t
        if bool(q.zero_point.any()):
            raise InputError(f"{name}: an asymmetric quantization; compressed-tensors holds symmetric ones")
        base = key.removesuffix(".weight")
        scale = q.scale.detach().reshape(q.shape[0], -1)
        out[f"{base}.weight_packed"] = pack_to_int32(q.qdata.detach().to(torch.int8), spec.bits).contiguous()
        out[f"{base}.weight_scale"] = scale.half().contiguous()
        out[f"{base}.weight_shape"] = torch.tensor(list(q.shape), dtype=torch.int64)
    return out


def save_compressed_tensors(
    model: nn.Module,
    spec: QuantSpec,
    out: Path,
    hf_config: dict[str, Any],
    tokenizer: Path | None,
    eos_id: int | None = None,
) -> Path:
    """Write the directory atomically; returns the weights file (for the report's size)."""
    from safetensors.torch import save_file

    from llmpipe.train.export_hf import tokenizer_files

    config = {**hf_config, "torch_dtype": "float16", "quantization_config": quantization_config(spec)}
    tensors = ct_state_dict(model, spec)
    with replaced_whole(out) as tmp:
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        if tokenizer is not None:
            files = tokenizer_files(tokenizer.read_text(), eos_id, hf_config.get("max_position_embeddings"))
            for fname, text in files.items():
                (tmp / fname).write_text(text)
    return out / WEIGHTS

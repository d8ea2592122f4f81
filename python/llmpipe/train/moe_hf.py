"""HuggingFace export of a mixture-of-experts model: ``MixtralForCausalLM`` or ``Qwen2MoeForCausalLM``.

Both route as the trainer does (softmax over the experts, top-k, weights renormalised over the chosen
ones: Mixtral always, Qwen2-MoE with ``norm_topk_prob``), so export is a renaming plus splitting the
stacked expert weights into one linear layer per expert. Mixtral when every block is MoE and there are
no shared experts; otherwise Qwen2-MoE, whose shared expert has the trainer's sigmoid gate and whose
``mlp_only_layers`` are the dense blocks (a model without shared experts gets a zero-width one, which
adds exactly zero). Refused: ``balance=bias`` (neither class has a selection bias in its router).
Capacity limits are a training device only: evaluation and the exported model are dropless.
"""

from __future__ import annotations

import torch

from llmpipe.errors import InputError
from llmpipe.train.model import ModelConfig

ATTN_AND_NORMS = {
    "attn.wq": "self_attn.q_proj",
    "attn.wk": "self_attn.k_proj",
    "attn.wv": "self_attn.v_proj",
    "attn.wo": "self_attn.o_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
TOP = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}  # fmt: skip


def architecture(m: ModelConfig) -> str:
    """``MixtralForCausalLM`` or ``Qwen2MoeForCausalLM`` for this MoE model; InputError if neither fits."""
    if m.moe.balance == "bias":
        raise InputError(
            "model.moe.balance=bias: the exported router would need its selection bias, which neither "
            "MixtralForCausalLM nor Qwen2MoeForCausalLM has; train with balance=aux_loss or none to export"
        )
    if m.mup_base_dim:
        raise InputError("a muP model.moe model does not export (its multipliers are not folded for MoE)")
    all_moe = all(m.moe.is_moe(i) for i in range(m.n_layers))
    return "MixtralForCausalLM" if all_moe and not m.moe.shared_experts else "Qwen2MoeForCausalLM"


def hf_config(m: ModelConfig, base: dict[str, object]) -> dict[str, object]:
    """config.json: the Llama one (``base``) with the MoE class's keys."""
    arch, e = architecture(m), m.moe
    hidden = e.expert_hidden or m.hidden
    cfg = {k: v for k, v in base.items() if k not in ("mlp_bias", "attention_bias", "rope_scaling")}
    cfg["architectures"] = [arch]
    if arch == "MixtralForCausalLM":
        cfg.update(model_type="mixtral", intermediate_size=hidden, num_local_experts=e.experts,
                   num_experts_per_tok=e.top_k, sliding_window=None, router_jitter_noise=0.0,
                   output_router_logits=False, router_aux_loss_coef=e.aux_loss_coef)  # fmt: skip
        return cfg
    cfg.update(model_type="qwen2_moe", intermediate_size=m.hidden, moe_intermediate_size=hidden,
               shared_expert_intermediate_size=e.shared_experts * hidden, num_experts=e.experts,
               num_experts_per_tok=e.top_k, norm_topk_prob=True, decoder_sparse_step=1,
               mlp_only_layers=[i for i in range(m.n_layers) if not e.is_moe(i)], qkv_bias=False,
               use_sliding_window=False, sliding_window=None, max_window_layers=m.n_layers,
               output_router_logits=False, router_aux_loss_coef=e.aux_loss_coef)  # fmt: skip
    return cfg


def hf_state_dict(model: torch.nn.Module, m: ModelConfig) -> dict[str, torch.Tensor]:
    """HF names, fp32 copies, one tensor per expert."""
    arch = architecture(m)
    mixtral = arch == "MixtralForCausalLM"
    moe_name = "block_sparse_moe" if mixtral else "mlp"
    expert = {"w1": "w1", "w3": "w3", "w2": "w2"} if mixtral else {
        "w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}  # fmt: skip
    dense = {"ffn.w1": "mlp.gate_proj", "ffn.w3": "mlp.up_proj", "ffn.w2": "mlp.down_proj"}
    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        t = t.detach().to(torch.float32)
        if name in TOP:
            if not (name == "output.weight" and m.tie_embeddings):
                out[TOP[name]] = t.contiguous().clone()
            continue
        _, i, rest = name.split(".", 2)
        pre = f"model.layers.{i}"
        module, _, param = rest.rpartition(".")
        if module in ATTN_AND_NORMS:
            out[f"{pre}.{ATTN_AND_NORMS[module]}.{param}"] = t.contiguous().clone()
        elif module in dense:
            out[f"{pre}.{dense[module]}.{param}"] = t.contiguous().clone()
        elif rest == "ffn.router.weight":
            out[f"{pre}.{moe_name}.gate.weight"] = t.contiguous().clone()
        elif rest in ("ffn.w1", "ffn.w3", "ffn.w2"):
            for j in range(t.shape[0]):
                out[f"{pre}.{moe_name}.experts.{j}.{expert[param]}.weight"] = t[j].contiguous().clone()
        elif rest.startswith("ffn.shared."):
            proj = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}[rest.split(".")[2]]
            out[f"{pre}.mlp.shared_expert.{proj}.weight"] = t.contiguous().clone()
        elif rest == "ffn.shared_gate.weight":
            out[f"{pre}.mlp.shared_expert_gate.weight"] = t.contiguous().clone()
        else:
            raise InputError(f"{name}: no place for it in {arch}")
    if not mixtral and not m.moe.shared_experts:  # Qwen2-MoE always has one: zero-width, adds zero
        for layer in range(m.n_layers):
            if m.moe.is_moe(layer):
                pre = f"model.layers.{layer}.mlp"
                out[f"{pre}.shared_expert.gate_proj.weight"] = torch.zeros(0, m.dim)
                out[f"{pre}.shared_expert.up_proj.weight"] = torch.zeros(0, m.dim)
                out[f"{pre}.shared_expert.down_proj.weight"] = torch.zeros(m.dim, 0)
                out[f"{pre}.shared_expert_gate.weight"] = torch.zeros(1, m.dim)
    return out

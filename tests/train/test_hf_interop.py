"""The HF Llama interop module (llmpipe.train.hf) against transformers itself: config.json <-> ModelConfig
both ways, tensor names both ways, and weights loaded either way give transformers' logits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from llmpipe.errors import InputError
from llmpipe.train import hf
from llmpipe.train.config import load_config
from llmpipe.train.model import Transformer


def llama_config(tie: bool) -> object:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-5, rope_theta=50000.0,
        tie_word_embeddings=tie, initializer_range=0.05, bos_token_id=96, eos_token_id=96, pad_token_id=96,
    )  # fmt: skip


def llama(tie: bool, seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config(tie)).eval()  # type: ignore[arg-type]


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_config_round_trip(tie: bool) -> None:
    from transformers import LlamaConfig

    theirs = llama_config(tie).to_dict()  # type: ignore[attr-defined]
    m = hf.model_config(theirs)
    assert (m.dim, m.n_layers, m.n_heads, m.kv_heads, m.hidden, m.vocab_size, m.max_seq_len) == (
        32, 2, 4, 2, 80, 97, 48,
    )  # fmt: skip
    assert (m.norm_eps, m.rope_theta, m.tie_embeddings, m.init_std) == (1e-5, 50000.0, tie, 0.05)
    back = hf.hf_config(m, 96)
    assert hf.model_config(back) == m
    again = LlamaConfig(**back).to_dict()  # transformers reads what we write as the same model
    for key in (*hf.SHAPE.values(), "max_position_embeddings", "initializer_range", "head_dim"):
        assert again[key] == theirs[key], key
    # the trainer's --model.* overrides (llmpipe prune --finetune) give the same model (the weights are
    # loaded, so their initialisation scale is not one of them)
    run = load_config(None, [o.removeprefix("--") for o in hf.overrides(theirs)])
    assert dataclasses.replace(run.model, init_std=m.init_std) == m


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_names_both_ways(tie: bool) -> None:
    theirs = set(llama(tie).state_dict()) - ({"lm_head.weight"} if tie else set())
    ours = Transformer(hf.model_config(llama_config(tie).to_dict()))  # type: ignore[attr-defined]
    names = dict(ours.named_parameters())  # a tied output matrix is listed once, as the embedding
    assert {hf.hf_name(n) for n in names} == theirs
    assert {hf.our_name(k) for k in theirs} == set(names)
    assert set(hf.hf_state_dict(ours)) == theirs
    with pytest.raises(InputError, match="unexpected tensor"):
        hf.our_name("model.layers.0.self_attn.rotary_emb.inv_freq")


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_weights_both_ways_give_transformers_logits(tie: bool, tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    theirs = llama(tie, seed=1)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    ours = Transformer(hf.model_config(hf.read_config(tmp_path)))
    ours.init_weights(seed=2)
    hf.load_weights(ours, tmp_path)
    ours.eval()
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = theirs(ids).logits
        torch.testing.assert_close(ours(ids), want, atol=1e-5, rtol=0)
        # and back: our state dict under HF names loads strictly into a fresh LlamaForCausalLM
        fresh = LlamaForCausalLM(LlamaConfig(**hf.hf_config(ours.cfg, 96))).eval()
        fresh.load_state_dict(hf.hf_state_dict(ours), strict=not tie)
        torch.testing.assert_close(fresh(ids).logits, want, atol=1e-5, rtol=0)


def test_a_checkpoint_of_another_shape_is_refused(tmp_path: Path) -> None:
    llama(False).save_pretrained(tmp_path, safe_serialization=True)
    cfg = hf.model_config(hf.read_config(tmp_path))
    cfg.ffn_hidden = 64
    with pytest.raises(InputError, match="has shape"):
        hf.load_weights(Transformer(cfg), tmp_path)
    with pytest.raises(InputError, match="only 'llama' loads"):
        hf.model_config({**hf.hf_config(cfg, None), "model_type": "mistral"})


def test_a_damaged_config_or_index_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stranger's model directory is data: config.json, model.safetensors.index.json and llmpipe's
    own marker are checked value by value, and `llmpipe quantize` of a damaged one says which in one
    line. A real config with a list of end-of-text ids (as Llama 3's) still loads (the first is used)."""
    import json
    import shutil

    from llmpipe.cli import main
    from llmpipe.compress.model_io import load_model

    good_dir = tmp_path / "good"
    llama(False).save_pretrained(good_dir, safe_serialization=True)
    good = json.loads((good_dir / "config.json").read_text())
    configs = [
        ("{x", "config.json: not valid JSON"),
        ("[]", "config.json: not a JSON object"),
        (
            {k: v for k, v in good.items() if k != "hidden_size"},
            "hidden_size is null, not a positive whole number",
        ),
        ({**good, "num_hidden_layers": "2"}, 'num_hidden_layers is "2", not a positive whole number'),
        ({**good, "num_hidden_layers": True}, "num_hidden_layers is true, not a positive whole number"),
        ({**good, "hidden_size": 33}, "num_attention_heads 4 must divide hidden_size 33"),
        ({**good, "num_key_value_heads": 3}, "num_key_value_heads 3 must divide num_attention_heads"),
        ({**good, "rms_norm_eps": -1}, "rms_norm_eps is -1, not a positive number"),
        ({**good, "tie_word_embeddings": "no"}, 'tie_word_embeddings is "no", not true or false'),
        ({**good, "eos_token_id": [1, "x"]}, "eos_token_id is"),
        ({**good, "max_position_embeddings": None}, "no max_position_embeddings"),
    ]
    d = tmp_path / "m"
    for i, (cfg, says) in enumerate(configs):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(good_dir, d)
        (d / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
        assert main(["quantize", str(d), "--method", "int8", "--out", str(tmp_path / f"q{i}")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err and "Traceback" not in err, (says, err)
    # the index of a sharded checkpoint, and llmpipe's marker of the shards a model was measured on
    others = [
        ("model.safetensors.index.json", "{x", "model.safetensors.index.json: not valid JSON"),
        ("model.safetensors.index.json", '{"weight_map": {"a": "../x"}}', "no weight_map of tensor names"),
        ("llmpipe_export.json", "[", "llmpipe_export.json: not valid JSON"),
        ("llmpipe_export.json", '{"shards": 5}', "shards is 5, not a path"),
    ]
    for name, text, says in others:
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(good_dir, d)
        (d / name).write_text(text)
        with pytest.raises(InputError) as e:
            load_model(d)
        assert says in str(e.value), (says, str(e.value))
    shutil.rmtree(d)
    shutil.copytree(good_dir, d)
    (d / "config.json").write_text(json.dumps({**good, "eos_token_id": [96, 95]}))
    assert load_model(d).eos_id == 96

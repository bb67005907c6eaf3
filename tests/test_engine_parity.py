"""Prefill parity against transformers on tiny random checkpoints of every supported architecture."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import strata  # noqa: E402

from hf_models import make_hf_model, reference_logits  # noqa: E402

LIN, FULL = "linear_attention", "full_attention"

CASES = {
    # alternating GDN / attention, GQA 2:1, partial rotary 0.25 (default)
    "next_alt": ("qwen3_next", {}),
    # GDN-only stretch, attention every 4th layer, GQA 4:1, half rotary, tied head, 1 v-head per k-head
    "next_every4_tied": ("qwen3_next", dict(
        num_hidden_layers=4, layer_types=[LIN, LIN, LIN, FULL], num_key_value_heads=1, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        linear_num_value_heads=2)),
    # dense MLP layer among MoE layers, no renormalisation, MHA, head_dim 16, full rotary
    "next_dense_layer": ("qwen3_next", dict(
        mlp_only_layers=[1], norm_topk_prob=False, num_key_value_heads=4, head_dim=16,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 1.0})),
    "q35_text_tied": ("qwen3_5_moe_text", dict(
        num_hidden_layers=3, layer_types=[LIN, FULL, LIN], tie_word_embeddings=True)),
    "q35_nested": ("qwen3_5_moe", dict(num_key_value_heads=1)),
    "q35_nested_tied": ("qwen3_5_moe", dict(tie_word_embeddings=True, num_hidden_layers=2)),
    "moe_gqa": ("qwen3_moe", dict(norm_topk_prob=True)),
    "moe_dense_tied": ("qwen3_moe", dict(norm_topk_prob=False, mlp_only_layers=[0], num_key_value_heads=4,
                                         tie_word_embeddings=True, num_hidden_layers=3)),
}


def _check(out: np.ndarray, ref: np.ndarray) -> None:
    assert out.shape == ref.shape and out.dtype == np.float32
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(out - ref).max())
    assert err <= 1e-4 * scale, f"max abs error {err} (scale {scale})"
    assert (out.argmax(-1) == ref.argmax(-1)).all()


@pytest.mark.parametrize("case", sorted(CASES))
def test_prefill_parity(tmp_path, case):
    arch, over = CASES[case]
    path, model = make_hf_model(str(tmp_path / case), arch, seed=3, **over)
    ids = np.random.default_rng(7).integers(0, 96, 37)
    ref = reference_logits(model, ids)
    eng = strata.load(path, threads=2)
    out = eng.run(ids)
    eng.commit(len(ids))
    _check(out, ref)
    assert eng.pos == len(ids)
    # continuing with single tokens matches the reference on the longer prefix
    nxt = [5, 17, 3]
    rows = []
    for t in nxt:
        rows.append(eng.run([t])[0])
        eng.commit(1)
    ref2 = reference_logits(model, list(ids) + nxt)[-3:]
    _check(np.stack(rows), ref2)


def test_long_prefill_chunked_and_last_only(tmp_path):
    path, model = make_hf_model(str(tmp_path / "m"), "qwen3_next", seed=5)
    ids = np.random.default_rng(1).integers(0, 96, 150)  # > one 64-row chunk
    ref = reference_logits(model, ids)
    eng = strata.load(path, threads=2)
    out = eng.run(ids)
    eng.commit(len(ids))
    _check(out, ref)
    eng.reset()
    last = eng.run(ids, last_only=True)
    eng.commit(len(ids))
    assert last.shape == (1, 96)
    assert np.array_equal(last[0], out[-1])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_checkpoints(tmp_path, dtype):
    # the reference model keeps the rounded weights (saved in dtype, then back to f32)
    path, model = make_hf_model(str(tmp_path / dtype), "qwen3_next", seed=2, dtype=dtype)
    with open(os.path.join(path, "config.json")) as f:
        assert json.load(f)["dtype"] == dtype
    ids = np.random.default_rng(2).integers(0, 96, 20)
    ref = reference_logits(model, ids)
    eng = strata.load(path, threads=2)
    out = eng.run(ids)
    eng.commit(len(ids))
    _check(out, ref)


def test_stacked_experts_and_shards_load_identically(tmp_path):
    from safetensors.numpy import load_file, save_file

    path, _ = make_hf_model(str(tmp_path / "a"), "qwen3_5_moe_text", seed=4)
    tensors = load_file(os.path.join(path, "model.safetensors"))
    E = 8
    stacked = {k: v for k, v in tensors.items() if ".mlp.experts." not in k}
    for layer in range(4):
        p = f"model.layers.{layer}.mlp.experts."
        gate = np.stack([tensors[f"{p}{e}.gate_proj.weight"] for e in range(E)])
        up = np.stack([tensors[f"{p}{e}.up_proj.weight"] for e in range(E)])
        stacked[p + "gate_up_proj"] = np.ascontiguousarray(np.concatenate([gate, up], axis=1))
        stacked[p + "down_proj"] = np.stack([tensors[f"{p}{e}.down_proj.weight"] for e in range(E)])
    b = tmp_path / "b"
    b.mkdir()
    names = sorted(stacked)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for fn, ks in shards.items():
        save_file({k: stacked[k] for k in ks}, str(b / fn))
        weight_map.update({k: fn for k in ks})
    (b / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (b / "config.json").write_text(open(os.path.join(path, "config.json")).read())
    ids = [1, 2, 3, 50, 60, 70, 80]
    e1, e2 = strata.load(path, threads=1), strata.load(str(b), threads=2)
    assert e1.model_id == e2.model_id
    assert np.array_equal(e1.run(ids), e2.run(ids))

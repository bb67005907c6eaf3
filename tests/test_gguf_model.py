"""GGUF models as llama.cpp's converter lays them out: the architecture spec from metadata equals
the one strata derives from the Hugging Face config, tensors map to the engine's canonical names
(stacked experts cut per expert), split sets read as one model, unsupported types are named."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT
from gguf import quants

from gguf_helpers import load_hf, write_gguf
from hf_models import make_hf_model
from strata import config
from strata.errors import ModelError
from strata.gguf import canonical_tensors, open_gguf, spec_from_metadata

ARCHS = ["qwen3_moe", "qwen3_next", "qwen3_5_moe_text", "qwen3_5_moe"]
# Keys where a GGUF spec differs on purpose: eps is stored as f32; the converter stores norms
# with the +1 added, splits qwen3next's fused qkvz, and tiles qwen3.5's value heads.
GGUF_LAYOUT_KEYS = {"eps", "norm_plus_one", "gdn_fused", "linear_v_tiled"}


def hf_model(tmp_path, arch):
    extra = {"norm_topk_prob": True} if arch == "qwen3_moe" else {}
    folder, _ = make_hf_model(str(tmp_path / arch), arch, seed=3, **extra)
    return folder


def read(ref):
    raw = np.fromfile(ref.path, np.uint8, count=ref.nbytes, offset=ref.offset)
    return np.asarray(quants.dequantize(raw, getattr(GT, ref.type)), np.float32).reshape(ref.shape)


@pytest.mark.parametrize("arch", ARCHS)
def test_spec_matches_hf_config(tmp_path, arch):
    folder = hf_model(tmp_path, arch)
    spec = spec_from_metadata(open_gguf(write_gguf(folder, str(tmp_path / "m.gguf"))))
    _, want = config.read_config(folder)
    assert {k: v for k, v in spec.items() if k not in GGUF_LAYOUT_KEYS} == \
        {k: v for k, v in want.items() if k not in GGUF_LAYOUT_KEYS}
    assert spec["eps"] == pytest.approx(want["eps"], rel=1e-6)
    assert spec["norm_plus_one"] is False
    assert spec["linear_v_tiled"] == (arch.startswith("qwen3_5") and want["linear_num_key_heads"] != want["linear_num_value_heads"])


@pytest.mark.parametrize("arch", ARCHS)
def test_tensors_map_to_canonical_names(tmp_path, arch):
    folder = hf_model(tmp_path, arch)
    model = open_gguf(write_gguf(folder, str(tmp_path / "m.gguf")))
    spec = spec_from_metadata(model)
    table = canonical_tensors(model, spec)
    _, hf = load_hf(folder)
    expected = {n.replace(".A_log", ".A") for n in config.required_tensors(spec)}
    if spec["arch"] == "qwen3_next":  # qwen3next files keep b and a fused per key head
        expected = {n for n in expected if not n.endswith((".in_proj_b.weight", ".in_proj_a.weight"))}
        expected |= {f"layers.{l}.linear_attn.in_proj_ba.weight" for l in range(spec["num_layers"])
                     if spec["layer_linear"][l]}
    assert set(table) == expected
    E, L = spec["num_experts"], spec["num_layers"]
    for l in range(L):
        for e in (0, E - 1):
            for kind in ("gate", "up", "down"):
                name = f"layers.{l}.mlp.experts.{e}.{kind}_proj.weight"
                if f"layers.{l}.mlp.experts.gate_up_proj" in hf:
                    gu = hf[f"layers.{l}.mlp.experts.gate_up_proj"][e]
                    I = gu.shape[0] // 2
                    want = {"gate": gu[:I], "up": gu[I:], "down": hf[f"layers.{l}.mlp.experts.down_proj"][e]}[kind]
                else:
                    want = hf[name]
                np.testing.assert_array_equal(read(table[name]), want)
        if spec["layer_linear"][l]:
            a = f"layers.{l}.linear_attn."
            if not spec["linear_v_tiled"]:
                np.testing.assert_array_equal(read(table[a + "A"]), -np.exp(hf[a + "A_log"]))
            np.testing.assert_array_equal(read(table[a + "norm.weight"]), hf[a + "norm.weight"])
        else:
            np.testing.assert_array_equal(read(table[f"layers.{l}.self_attn.k_proj.weight"]),
                                          hf[f"layers.{l}.self_attn.k_proj.weight"])
    np.testing.assert_array_equal(read(table["embed_tokens.weight"]), hf["embed_tokens.weight"])
    plus = 0.0 if spec["arch"] == "qwen3_moe" else 1.0
    np.testing.assert_array_equal(read(table["norm.weight"]), hf["norm.weight"] + np.float32(plus))


def test_split_set_reads_as_one_model(tmp_path):
    folder = hf_model(tmp_path, "qwen3_next")
    single = open_gguf(write_gguf(folder, str(tmp_path / "one.gguf")))
    os.makedirs(tmp_path / "split")
    write_gguf(folder, str(tmp_path / "split" / "m.gguf"), split_max_tensors=20)
    parts = sorted(glob.glob(str(tmp_path / "split" / "m-*-of-*.gguf")))
    assert len(parts) > 2
    split = open_gguf(parts[1])  # any part names the set
    assert split.files == parts
    assert {n: (t.type, t.shape) for n, t in split.tensors.items()} == \
        {n: (t.type, t.shape) for n, t in single.tensors.items()}
    spec = spec_from_metadata(split)
    assert spec == spec_from_metadata(single)
    a, b = canonical_tensors(split, spec), canonical_tensors(single, spec)
    for name in ("embed_tokens.weight", "layers.3.mlp.experts.7.down_proj.weight", "layers.0.linear_attn.A"):
        np.testing.assert_array_equal(read(a[name]), read(b[name]))
    os.remove(parts[-1])
    with pytest.raises(ModelError, match="is missing"):
        open_gguf(parts[0])


def test_missing_and_misshaped_tensors_are_named(tmp_path):
    folder = hf_model(tmp_path, "qwen3_moe")
    model = open_gguf(write_gguf(folder, str(tmp_path / "m.gguf")))
    spec = spec_from_metadata(model)
    del model.tensors["blk.1.attn_k.weight"]
    with pytest.raises(ModelError, match=r"missing tensor for layers\.1\.self_attn\.k_proj\.weight"):
        canonical_tensors(model, spec)
    spec["moe_intermediate_size"] += 1
    with pytest.raises(ModelError, match="tensor blk.0.ffn_gate_exps.weight has shape"):
        canonical_tensors(model, spec)


def test_unsupported_architecture(tmp_path):
    folder = hf_model(tmp_path, "qwen3_moe")
    model = open_gguf(write_gguf(folder, str(tmp_path / "m.gguf")))
    model.metadata["general.architecture"] = "llama"
    with pytest.raises(ModelError, match="architecture 'llama' is not supported"):
        spec_from_metadata(model)


def test_info_reports_format_mix_and_bytes_per_token(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    import strata
    from strata.gguf import gguf_info

    folder = hf_model(tmp_path, "qwen3_moe")
    path = write_gguf(folder, str(tmp_path / "m.gguf"), qtype="Q8_0")
    model = open_gguf(path)
    info = gguf_info(path)
    assert info["model_type"] == "qwen3_moe" and info["format"] == "gguf"
    assert sum(info["formats"].values()) == sum(t.nbytes for t in model.tensors.values())
    assert set(info["formats"]) == {"Q8_0", "F32"}
    spec = spec_from_metadata(model)
    experts = sum(t.nbytes for n, t in model.tensors.items() if "_exps." in n)
    dense = sum(t.nbytes for n, t in model.tensors.items() if "_exps." not in n and n != "token_embd.weight")
    assert info["expert_bytes"] == experts
    assert info["bytes_per_token"] == dense + experts * spec["top_k"] // spec["num_experts"]
    env = {**os.environ, "PYTHONPATH": str(Path(strata.__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-m", "strata", "info", path, "--json"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["formats"] == info["formats"]


@pytest.mark.parametrize("content", [b"JUNK" * 8, b"GGUF" + b"\xff" * 40, b""])
def test_info_on_a_damaged_gguf_names_the_gguf_problem(tmp_path, content):
    # model_info detects the format as loading does (by name too), so a damaged .gguf file gets
    # the GGUF reader's error, never "<file>/config.json: cannot read"
    from strata.runtime import model_info

    path = tmp_path / "m.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelError) as exc:
        model_info(str(path))
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg and "config.json" not in msg

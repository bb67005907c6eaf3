"""devmodel: numpy-only random checkpoints that transformers and strata both load identically."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import strata
from strata.testing.devmodel import write_random_model


@pytest.mark.parametrize("arch", ["qwen3_next", "qwen3_5_moe", "qwen3_moe"])
def test_devmodel_matches_transformers(tmp_path, arch):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    path = write_random_model(tmp_path / arch, arch, seed=3, max_shard_bytes=1 << 20)
    assert os.path.exists(os.path.join(path, "model.safetensors.index.json"))  # sharded
    model, info = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids = np.random.default_rng(0).integers(0, 512, 24)
    with torch.no_grad():
        ref = model(torch.from_numpy(ids)[None]).logits[0].numpy()
    eng = strata.load(path, threads=2)
    out = eng.run(ids)
    assert np.abs(out - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())


def test_devmodel_dtypes_and_determinism(tmp_path):
    a = write_random_model(tmp_path / "a", "qwen3_next", seed=1)
    b = write_random_model(tmp_path / "b", "qwen3_next", seed=1, max_shard_bytes=1 << 19)
    c = write_random_model(tmp_path / "c", "qwen3_next", seed=1, dtype="bfloat16")
    with open(os.path.join(c, "config.json")) as f:
        assert json.load(f)["dtype"] == "bfloat16"
    ids = [1, 2, 3, 4, 5]
    ea, eb, ec = (strata.load(p, threads=1) for p in (a, b, c))
    la, lb, lc = ea.run(ids), eb.run(ids), ec.run(ids)
    assert np.array_equal(la, lb) and ea.model_id == eb.model_id
    assert ec.model_id != ea.model_id
    assert 0 < np.abs(la - lc).max() < 0.3 * np.abs(la).max()  # bf16 rounding, same model
    with pytest.raises(ValueError):
        write_random_model(tmp_path / "d", "llama")

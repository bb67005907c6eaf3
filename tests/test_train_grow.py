"""train/grow.py: new layers with zeroed output projections leave a model's function unchanged,
bit for bit, in transformers and in strata."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))

import grow  # noqa: E402
from strata.testing.devmodel import write_random_model  # noqa: E402


IDS = [int(x) for x in np.random.default_rng(0).integers(1, 500, 40)]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    # layers: linear, full, full, full (the tiny preset's hybrid pattern)
    return Path(write_random_model(tmp_path_factory.mktemp("grow") / "m", "qwen3_next", seed=3, dtype="float32"))


def _logits_hf(folder, ids):
    from transformers import Qwen3NextForCausalLM

    model = Qwen3NextForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].numpy()


def _logits_strata(folder, ids):
    import strata

    eng = strata.load(str(folder), threads=1)
    out = [np.array(eng.run(ids))]
    eng.commit(len(ids))
    for t in (5, 6, 7):  # then one-token steps, the decode path
        out.append(np.array(eng.run([t])))
        eng.commit(1)
    return np.concatenate(out)


def test_grown_model_has_the_same_logits_bit_for_bit(small, tmp_path):
    grown = tmp_path / "grown"
    grow.main(["--model", str(small), "--after", "0,2,2", "--out", str(grown)])
    cfg = json.loads((grown / "config.json").read_text())
    before = json.loads((small / "config.json").read_text())
    assert cfg["num_hidden_layers"] == before["num_hidden_layers"] + 3
    # the new layers (after 0, and two after 2) are full attention, the others keep their types
    types = before["layer_types"]
    assert cfg["layer_types"] == [types[0], "full_attention", types[1], types[2], "full_attention",
                                  "full_attention", types[3]]
    np.testing.assert_array_equal(_logits_hf(small, IDS), _logits_hf(grown, IDS))
    # and the new layers are real: their input projections are the copied layer's, not zero
    from safetensors import safe_open

    with safe_open(str(grown / "model.safetensors"), "pt") as f:
        assert f.get_tensor("model.layers.1.self_attn.q_proj.weight").abs().sum() > 0
        assert f.get_tensor("model.layers.1.self_attn.o_proj.weight").abs().sum() == 0
        assert f.get_tensor("model.layers.1.mlp.shared_expert.down_proj.weight").abs().sum() == 0


def test_grown_model_has_the_same_logits_in_strata(small, tmp_path):
    pytest.importorskip("strata._engine")
    grown = tmp_path / "grown"
    grow.main(["--model", str(small), "--after", "1,3", "--out", str(grown)])
    np.testing.assert_array_equal(_logits_strata(small, IDS), _logits_strata(grown, IDS))


@pytest.mark.parametrize("after, message", [("9", "the model's layers are 0..3"), ("x", "a comma list"),
                                            ("-1", "the model's layers are 0..3")])
def test_bad_growth_requests_are_one_line_errors(small, tmp_path, after, message):
    with pytest.raises(SystemExit, match=message):
        grow.main(["--model", str(small), "--after", after, "--out", str(tmp_path / "g")])
    assert not (tmp_path / "g").exists()

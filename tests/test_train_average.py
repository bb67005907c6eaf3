"""train/average.py (strata-tiny v7 = the average of v6 and the v7 run): every tensor is the float32
mean of the two stored in the first model's dtype, re-running gives the same file byte for byte,
the result loads as the same model in transformers and in strata, and folders of different models
are refused."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "train"))

import average  # noqa: E402

MODEL = ROOT / "app" / "strata" / "models" / "strata-tiny"


def _folder(tmp: Path, name: str, tensors: dict, config: dict) -> Path:
    d = tmp / name
    d.mkdir()
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(config))
    (d / "tokenizer.json").write_text(name)
    return d


def test_average_is_the_f32_mean_in_the_first_dtype_and_reproducible(tmp_path):
    g = torch.Generator().manual_seed(7)
    a = {"w": torch.randn(33, 17, generator=g).to(torch.bfloat16), "n": torch.randn(5, generator=g),
         "i": torch.arange(4, dtype=torch.int64)}
    b = {"w": torch.randn(33, 17, generator=g).to(torch.bfloat16), "n": torch.randn(5, generator=g),
         "i": torch.arange(4, dtype=torch.int64)}
    cfg = {"model_type": "x", "hidden_size": 8, "transformers_version": "1"}
    fa = _folder(tmp_path, "a", a, cfg)
    fb = _folder(tmp_path, "b", b, dict(cfg, transformers_version="2", new_key=1))  # another version wrote it: same model
    digests = []
    for out in ("o1", "o2"):
        average.main(["--a", str(fa), "--b", str(fb), "--out", str(tmp_path / out)])
        digests.append(hashlib.sha256((tmp_path / out / "model.safetensors").read_bytes()).hexdigest())
    assert digests[0] == digests[1]
    got = load_file(str(tmp_path / "o1" / "model.safetensors"))
    assert got["w"].dtype == torch.bfloat16 and got["n"].dtype == torch.float32
    assert torch.equal(got["w"], ((a["w"].float() + b["w"].float()) / 2).to(torch.bfloat16))
    assert torch.equal(got["n"], (a["n"] + b["n"]) / 2) and torch.equal(got["i"], a["i"])
    assert not torch.equal(got["w"], a["w"]) and not torch.equal(got["w"], b["w"])
    assert (tmp_path / "o1" / "tokenizer.json").read_text() == "a"
    # w = 0 and w = 1 give the inputs back exactly
    average.main(["--a", str(fa), "--b", str(fb), "--out", str(tmp_path / "o3"), "--weight", "1"])
    assert torch.equal(load_file(str(tmp_path / "o3" / "model.safetensors"))["w"], b["w"])


def test_average_refuses_different_models(tmp_path):
    t = {"w": torch.ones(2, 2, dtype=torch.bfloat16)}
    cfg = {"hidden_size": 8, "num_experts": 2, "layer_types": ["y"]}
    fa = _folder(tmp_path, "a", t, cfg)
    for other in ({"hidden_size": 16}, dict(cfg, num_experts=4), dict(cfg, layer_types=["x"])):
        fb = _folder(tmp_path, f"b{len(list(tmp_path.iterdir()))}", t, other)
        with pytest.raises(SystemExit):
            average.main(["--a", str(fa), "--b", str(fb), "--out", str(tmp_path / "o")])
    # a value another transformers version writes differently, not a size: noted, --a's config kept
    fe = _folder(tmp_path, "e", t, {"hidden_size": 8, "rope_parameters": {"rope_type": "default"}})
    fa2 = _folder(tmp_path, "a2", t, {"hidden_size": 8, "rope_parameters": {"rope_type": "default", "x": 1}})
    average.main(["--a", str(fa2), "--b", str(fe), "--out", str(tmp_path / "o2")])
    assert (tmp_path / "o2" / "config.json").read_text() == (fa2 / "config.json").read_text()
    fc = _folder(tmp_path, "c", {"w": torch.ones(2, 3, dtype=torch.bfloat16)}, cfg)
    with pytest.raises(ValueError):
        average.main(["--a", str(fa), "--b", str(fc), "--out", str(tmp_path / "o")])
    fd = _folder(tmp_path, "d", {"v": torch.ones(2, 2, dtype=torch.bfloat16)}, cfg)
    with pytest.raises(ValueError):
        average.main(["--a", str(fa), "--b", str(fd), "--out", str(tmp_path / "o")])


def test_average_of_the_shipped_model_with_itself_is_the_shipped_model(tmp_path):
    """The shipped folder averaged with a copy of itself: the same bytes (x + x) / 2 = x in f32,
    and the folder is complete (transformers loads it with the same logits)."""
    transformers = pytest.importorskip("transformers")
    shutil.copytree(MODEL, tmp_path / "copy")
    average.main(["--a", str(MODEL), "--b", str(tmp_path / "copy"), "--out", str(tmp_path / "avg")])
    assert (tmp_path / "avg" / "model.safetensors").read_bytes() == (MODEL / "model.safetensors").read_bytes()
    for name in average.COPIED:
        assert (tmp_path / "avg" / name).read_bytes() == (MODEL / name).read_bytes()
    m = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "avg", dtype=torch.float32)
    assert m.config.model_type == "qwen3_next"

"""Malformed checkpoints raise strata.ModelError with one line naming the file/tensor/key, and never
disturb an engine that is already loaded."""
from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import strata  # noqa: E402
from strata.errors import ModelError  # noqa: E402

from hf_models import make_hf_model  # noqa: E402

TENSOR = "model.layers.0.linear_attn.in_proj_qkvz.weight"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path, _ = make_hf_model(str(tmp_path_factory.mktemp("err") / "good"), "qwen3_next", seed=2, num_hidden_layers=2)
    return path


@pytest.fixture(scope="module")
def live(good):
    eng = strata.load(good, threads=1)
    ids = [3, 1, 4, 1, 5]
    ref = eng.run(ids).copy()
    eng.commit(len(ids))
    return eng, eng.save_state(), ref


def _copy(good, tmp_path):
    dst = tmp_path / "m"
    shutil.copytree(good, dst)
    return dst


def _read(st):
    raw = st.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def _write(st, header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    st.write_bytes(struct.pack("<Q", len(h)) + h + data)


def _assert_still_usable(live):
    eng, blob, ref = live
    eng.load_state(blob)
    eng.reset()
    out = eng.run([3, 1, 4, 1, 5])
    eng.commit(5)
    assert np.array_equal(out, ref)


def _expect(path, pattern, live):
    with pytest.raises(ModelError, match=pattern) as ei:
        strata.load(path)
    assert "\n" not in str(ei.value)
    _assert_still_usable(live)


def test_missing_tensor(good, tmp_path, live):
    m = _copy(good, tmp_path)
    st = m / "model.safetensors"
    hdr, data = _read(st)
    del hdr[TENSOR]
    _write(st, hdr, data)
    _expect(str(m), "missing tensor layers.0.linear_attn.in_proj_qkvz.weight", live)


def test_misshaped_tensor(good, tmp_path, live):
    m = _copy(good, tmp_path)
    st = m / "model.safetensors"
    hdr, data = _read(st)
    r, c = hdr[TENSOR]["shape"]
    hdr[TENSOR]["shape"] = [c, r]
    _write(st, hdr, data)
    _expect(str(m), f"model.safetensors: tensor {TENSOR} has shape", live)


def test_truncated_file(good, tmp_path, live):
    m = _copy(good, tmp_path)
    st = m / "model.safetensors"
    raw = st.read_bytes()
    st.write_bytes(raw[: len(raw) - 100])
    _expect(str(m), "model.safetensors: tensor .* runs past the end of the file", live)


@pytest.mark.parametrize("kind", ["length", "json", "entry"])
def test_bad_header(good, tmp_path, live, kind):
    m = _copy(good, tmp_path)
    st = m / "model.safetensors"
    raw = st.read_bytes()
    if kind == "length":
        st.write_bytes(struct.pack("<Q", 1 << 60) + raw[8:])
        pattern = "bad safetensors header length"
    elif kind == "json":
        (n,) = struct.unpack("<Q", raw[:8])
        st.write_bytes(raw[:8] + b"{" * n + raw[8 + n:])
        pattern = "bad safetensors header"
    else:
        hdr, data = _read(st)
        hdr[TENSOR]["data_offsets"] = [10, 2]
        _write(st, hdr, data)
        pattern = f"tensor {TENSOR}: bad header entry"
    _expect(str(m), pattern, live)


def test_unsupported_dtype(good, tmp_path, live):
    m = _copy(good, tmp_path)
    st = m / "model.safetensors"
    hdr, data = _read(st)
    hdr[TENSOR]["dtype"] = "I32"  # same size as F32: the header stays consistent
    _write(st, hdr, data)
    _expect(str(m), f"tensor {TENSOR} has unsupported dtype I32", live)


def test_unknown_arch_and_bad_config(good, tmp_path, live):
    m = _copy(good, tmp_path)
    cfg = json.loads((m / "config.json").read_text())
    (m / "config.json").write_text(json.dumps(dict(cfg, model_type="llama")))
    _expect(str(m), "unsupported model_type 'llama'", live)
    (m / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers="two")))
    _expect(str(m), "config.json: key 'num_hidden_layers'", live)
    (m / "config.json").write_text("{not json")
    _expect(str(m), "config.json: not valid JSON", live)
    os.remove(m / "config.json")
    _expect(str(m), "no config.json", live)
    _expect(str(tmp_path / "nowhere"), "no such model folder", live)


def test_no_weights_and_bad_index(good, tmp_path, live):
    m = _copy(good, tmp_path)
    os.remove(m / "model.safetensors")
    _expect(str(m), "no \\*.safetensors files", live)
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "model-1.safetensors"}}))
    _expect(str(m), "shard model-1.safetensors is missing", live)
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "../evil.safetensors"}}))
    _expect(str(m), "bad file name", live)

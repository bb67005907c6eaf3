"""Quantized packs: `strata convert file.gguf PACK` keeps the GGUF blocks per expert blob, and the
pack's logits equal the .gguf file's bit for bit at every cache size (T=1 and drafted windows);
`strata convert HF --quantize q8_0|q4_k|q5_k|q6_k` writes valid blocks (Q8_0: gguf-py's, byte for byte)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import strata  # noqa: E402
from strata.errors import ModelError  # noqa: E402
from strata.pack import convert, read_pack  # noqa: E402

from gguf_helpers import write_gguf  # noqa: E402
from test_gguf_engine import wide_model  # noqa: E402


def _decode(eng, seq, drafts):
    """Serial logits of `seq`; with drafts, windows of root + 3 tokens (2 of them right) committing 3."""
    out, i = [], 0
    while i < len(seq):
        if drafts and i + 3 < len(seq):
            window = seq[i:i + 3] + [(seq[i + 3] + 1) % 96]
            rows = np.array(eng.run(window))
            out.extend(rows[:3])
            eng.commit(3)
            i += 3
        else:
            out.append(np.array(eng.run([seq[i]]))[0])
            eng.commit(1)
            i += 1
    return np.stack(out)


@pytest.fixture(scope="module", params=[("Q8_0", "Q4_K"), ("Q4_K", None)])
def gguf_and_pack(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qp")
    qtype, expert_qtype = request.param
    folder, _ = wide_model(tmp / "hf", "qwen3_next", seed=5)
    src = write_gguf(folder, str(tmp / "m.gguf"), qtype=qtype, expert_qtype=expert_qtype)
    pack = str(tmp / "m.strata")
    convert(src, pack)
    return src, pack, expert_qtype or qtype


def test_gguf_pack_keeps_the_blocks(gguf_and_pack):
    from strata.gguf import canonical_tensors, open_gguf, spec_from_metadata

    src, pack, eq = gguf_and_pack
    info = read_pack(pack)
    assert info.header["version"] == 2 and info.dense_path.endswith("dense.gguf")
    assert {f for lf in info.layer_formats for f in lf} == {eq}
    model = open_gguf(src)
    table = canonical_tensors(model, spec_from_metadata(model))
    ex = info.ex
    with open(info.experts_path, "rb") as f:
        for o, layer in enumerate(ex["layers"]):
            for e in (0, ex["num_experts"] - 1):
                f.seek(ex["data_offset"] + (o * ex["num_experts"] + e) * ex["stride"])
                blob = f.read(info.layer_blob_bytes(o))
                want = b""
                for p in ("gate", "up", "down"):
                    r = table[f"layers.{layer}.mlp.experts.{e}.{p}_proj.weight"]
                    with open(r.path, "rb") as g:
                        g.seek(r.offset)
                        want += g.read(r.nbytes)
                assert blob == want, (layer, e)
    # the dense GGUF holds no routed expert tensor and the same metadata
    dense = open_gguf(info.dense_path)
    assert not any("_exps" in n for n in dense.tensors)
    assert dense.get("general.architecture") == model.get("general.architecture")


def test_gguf_pack_logits_equal_the_gguf_at_every_cache_size(gguf_and_pack):
    src, pack, _ = gguf_and_pack
    rng = np.random.default_rng(2)
    seq = rng.integers(0, 96, 14).tolist()
    ref = {d: _decode(strata.load(src, threads=2), seq, d) for d in (False, True)}
    info = read_pack(pack)
    k = strata.load(src, threads=1).config["top_k"]
    assert k < info.ex["num_experts"]  # the smallest cache below holds a fraction of one layer
    for cache in (None, "50%", k * info.ex["stride"]):
        for drafts in (False, True):
            eng = strata.load(pack, threads=2, expert_cache=cache)
            got = _decode(eng, seq, drafts)
            assert np.array_equal(got, ref[drafts]), (cache, drafts)
            assert eng.model_id == strata.load(src, threads=1).model_id


def test_gguf_pack_info_shows_formats_and_bytes_per_token(gguf_and_pack):
    from strata.runtime import model_info

    src, pack, eq = gguf_and_pack
    info = model_info(pack)
    io = info["pack_io"]
    assert eq in info["formats"] and eq in io["expert_formats"]
    pinfo = read_pack(pack)
    assert io["expert_bytes_per_token"] == info["experts_per_token"] * sum(
        pinfo.layer_blob_bytes(o) for o in range(pinfo.ex["num_layers"]))
    r = subprocess.run([sys.executable, "-m", "strata", "info", pack], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": "app"})
    assert r.returncode == 0, r.stderr
    assert "expert mix" in r.stdout and eq in r.stdout


@pytest.mark.parametrize("fmt", ["q8_0", "q4_k", "q5_k", "q6_k"])
def test_hf_quantize(tmp_path, fmt):
    """q8_0 blocks equal gguf-py's quantizer byte for byte; K-quant blocks (gguf-py has no K-quant
    quantizer: the byte-for-byte check against llama.cpp is test_quant_pack_anchors) decode with
    gguf-py's dequantizer to the source weights within the format's error. The pack streams exactly."""
    from gguf import GGMLQuantizationType, quants
    from safetensors.numpy import load_file

    qt = getattr(GGMLQuantizationType, fmt.upper())
    folder, _ = wide_model(tmp_path / "hf", "qwen3_moe", seed=3)
    pack = str(tmp_path / "q.strata")
    convert(folder, pack, quantize=fmt)
    info = read_pack(pack)
    assert info.header["version"] == 2
    assert info.layer_formats == [[fmt.upper()] * 3] * info.ex["num_layers"]
    hf = {}
    for fn in os.listdir(folder):
        if fn.endswith(".safetensors"):
            hf.update(load_file(os.path.join(folder, fn)))
    ex = info.ex
    tol = {"q8_0": 1 / 127, "q6_k": 1 / 31, "q5_k": 1 / 15, "q4_k": 1 / 7}[fmt]
    with open(info.experts_path, "rb") as f:
        for o, layer in enumerate(ex["layers"]):
            for e in range(ex["num_experts"]):
                f.seek(ex["data_offset"] + (o * ex["num_experts"] + e) * ex["stride"])
                blob = np.frombuffer(f.read(info.layer_blob_bytes(o)), np.uint8)
                at = 0
                for p in ("gate", "up", "down"):
                    w = _expert(hf, layer, e, p)
                    n = w.size // 256 * {"q8_0": 8 * 34, "q4_k": 144, "q5_k": 176, "q6_k": 210}[fmt]
                    part = blob[at:at + n].reshape(w.shape[0], -1)
                    at += n
                    if fmt == "q8_0":
                        assert part.tobytes() == quants.quantize(w, qt).tobytes(), (layer, e, p)
                    got = quants.dequantize(part, qt)
                    assert np.abs(got - w).max() <= tol * np.abs(w).max(), (layer, e, p)
                assert at == blob.size
    ids = [1, 5, 7, 2, 9, 33]
    full = np.array(strata.load(pack, threads=2).run(ids))
    small = np.array(strata.load(pack, threads=2, expert_cache=2 * ex["stride"]).run(ids))
    assert np.array_equal(full, small)
    ref = np.array(strata.load(folder, threads=2).run(ids))
    # a tiny random model amplifies weight error; the bound only catches a wrong decode
    assert np.abs(full - ref).max() < {"q8_0": 0.05, "q6_k": 0.1, "q5_k": 0.15, "q4_k": 0.25}[fmt] * np.abs(ref).max()


def _expert(hf, layer, e, part):
    for k, v in hf.items():
        if k.endswith(f"layers.{layer}.mlp.experts.{e}.{part}_proj.weight"):
            return v.astype(np.float32)
    fused = next(v for k, v in hf.items() if k.endswith(f"layers.{layer}.mlp.experts.gate_up_proj")) \
        if part != "down" else next(v for k, v in hf.items() if k.endswith(f"layers.{layer}.mlp.experts.down_proj"))
    m = fused[e].astype(np.float32)
    if part == "down":
        return m
    half = m.shape[0] // 2
    return m[:half] if part == "gate" else m[half:]


def test_bad_quantized_pack_header_is_one_line(gguf_and_pack, tmp_path):
    import shutil

    _, pack, _ = gguf_and_pack
    bad = str(tmp_path / "bad.strata")
    shutil.copytree(pack, bad)
    hp = os.path.join(bad, "strata-pack.json")
    h = json.load(open(hp))
    h["experts"]["formats"][0] = ["Q4_K", "Q9_9", "Q4_K"]
    json.dump(h, open(hp, "w"))
    with pytest.raises(ModelError, match="bad expert formats") as ei:
        strata.load(bad)
    assert "\n" not in str(ei.value)


def test_quantize_refuses_unknown_format_and_gguf_source(gguf_and_pack, tmp_path):
    from strata.errors import UsageError

    src, _, _ = gguf_and_pack
    with pytest.raises(UsageError, match="--quantize"):
        convert(src, str(tmp_path / "x"), quantize="q8_0")
    with pytest.raises(UsageError, match="q3_x") as ei:
        convert(os.path.dirname(src), str(tmp_path / "y"), quantize="q3_x")
    assert "q8_0, q4_k, q5_k, q6_k" in str(ei.value)


def test_f16_gguf_pack_stores_f32_experts_and_gives_the_gguf_logits(tmp_path, monkeypatch):
    # an F16 .gguf (what many downloads are) converted to a pack used to keep F16 expert blobs,
    # which the cpu backend has no kernel for: the first window aborted the process
    # (std::terminate, exit 134). The engine converts mapped F16 matrices to F32, so the pack
    # stores its experts as F32 and gives the file's logits bit for bit.
    from strata.pack import gguf_converter

    folder, _ = wide_model(tmp_path / "hf", "qwen3_next", seed=7)
    src = write_gguf(folder, str(tmp_path / "m.gguf"), qtype="F16")
    pack = str(tmp_path / "m.strata")
    convert(src, pack)
    info = read_pack(pack)
    assert {f for lf in info.layer_formats for f in lf} == {"F32"}
    seq = np.random.default_rng(3).integers(0, 96, 10).tolist()
    ref = {d: _decode(strata.load(src, threads=2), seq, d) for d in (False, True)}
    k = strata.load(src, threads=1).config["top_k"]
    for cache in (None, k * info.ex["stride"]):
        for drafts in (False, True):
            assert np.array_equal(_decode(strata.load(pack, threads=2, expert_cache=cache), seq, drafts),
                                  ref[drafts]), (cache, drafts)
    # a pack written the old way (F16 blobs) is refused at load in one line, not aborted later
    monkeypatch.setattr(gguf_converter, "_stored", lambda fmt: fmt)
    monkeypatch.setattr(gguf_converter, "_stored_bytes", lambda data, fmt: data.tobytes())
    old = str(tmp_path / "old.strata")
    convert(src, old)
    with pytest.raises(ModelError, match="stored as F16, which the cpu backend cannot compute") as ei:
        strata.load(old)
    assert "\n" not in str(ei.value)


def test_an_error_inside_a_pool_task_is_raised_not_an_abort(tmp_path, monkeypatch):
    # an exception thrown by a kernel on a pool worker escaped the thread: std::terminate, the
    # process aborted (exit 134), and a TUI lost its session. A pack of F16 experts without the
    # load-time check (strata-tiny's shape, 2 threads: the expert matmuls run on the pool) must
    # now raise one RuntimeError and leave the process alive.
    from strata.pack import gguf_converter

    src = write_gguf(os.path.join(os.path.dirname(strata.__file__), "models", "strata-tiny"),
                     str(tmp_path / "tiny.gguf"), qtype="F16")
    monkeypatch.setattr(gguf_converter, "_stored", lambda fmt: fmt)
    monkeypatch.setattr(gguf_converter, "_stored_bytes", lambda data, fmt: data.tobytes())
    old = str(tmp_path / "old.strata")
    convert(src, old)
    script = ("import sys, strata, strata.pack.loader as L\n"
              "L._check_expert_formats = lambda info, backend: None\n"
              "eng = strata.load(sys.argv[1], threads=2)\n"
              "try:\n"
              "    eng.run(list(range(1, 40)))\n"
              "except RuntimeError as exc:\n"
              "    print('raised:', exc)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(strata.__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", script, old], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and "terminate called" not in r.stderr, (r.returncode, r.stderr[-500:])
    assert r.stdout.startswith("raised: matmul: the cpu backend has no kernel for F16 weights"), r.stdout

"""Quantized packs on GGUF files made by llama.cpp itself (the anchor models: an f32 GGUF and
llama-quantize's Q8_0 / Q6_K / Q5_K_M / Q4_K_M of it). Skipped unless STRATA_ANCHORS names the
folder that holds them (ANCHORS/qwen3moe-tiny/model-q4_k_m.gguf ...); not part of CI.

- `strata convert model-q4_k_m.gguf` (and q5_k_m, q6_k) keeps llama.cpp's per-layer mix (Q4_K
  gate/up with Q8_0 or Q5_0 down; Q5_K with Q8_0 or Q5_1 down) and its logits equal the .gguf
  file's bit for bit down to one layer's top-k cache;
- strata's Q8_0 / Q6_K / Q4_K / Q5_K quantizers write exactly llama.cpp's blocks for every tensor of
  that type in the Q8_0 / Q6_K / Q4_K_M / Q5_K_M files (llama-quantize without an importance matrix).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import strata
from strata.pack import convert, read_pack

ANCHORS = os.environ.get("STRATA_ANCHORS", "")
MODELS = ["qwen3moe-tiny", "qwen3next-tiny"]

pytestmark = pytest.mark.skipif(
    not ANCHORS, reason="STRATA_ANCHORS is not set (the folder of the anchor models' GGUF files made with "
                        "llama.cpp's tools: ANCHORS/qwen3moe-tiny/model-q4_k_m.gguf ...)")


def _file(model, kind):
    p = os.path.join(ANCHORS, model, f"model-{kind}.gguf")
    if not os.path.isfile(p):
        pytest.skip(f"no anchor file {p}")
    return p


def _decode(eng, seq, drafted):
    out, i = [], 0
    while i < len(seq):
        if drafted and i + 4 < len(seq):
            rows = np.array(eng.run(seq[i:i + 3] + [(seq[i + 3] + 7) % 1000]))
            out.extend(rows[:3])
            eng.commit(3)
            i += 3
        else:
            out.append(np.array(eng.run([seq[i]]))[0])
            eng.commit(1)
            i += 1
    return np.stack(out)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("kind", ["q4_k_m", "q5_k_m", "q6_k"])
def test_llama_cpp_file_as_a_pack_is_bit_identical(tmp_path, model, kind):
    src = _file(model, kind)
    pack = str(tmp_path / "p")
    convert(src, pack)
    info = read_pack(pack)
    if kind in ("q4_k_m", "q5_k_m"):
        assert len({tuple(f) for f in info.layer_formats}) > 1  # llama.cpp's per-layer mix survives
    if kind == "q5_k_m":  # the 128-wide down projections are Q5_1, kept as they are
        assert any(f[2] == "Q5_1" for f in info.layer_formats)
    seq = np.random.default_rng(0).integers(0, 1000, 13).tolist()
    k = strata.load(src, threads=1).config["top_k"]
    for drafted in (False, True):
        ref = _decode(strata.load(src, threads=2), seq, drafted)
        for cache in ("25%", k * info.ex["stride"]):
            got = _decode(strata.load(pack, threads=2, expert_cache=cache), seq, drafted)
            assert np.array_equal(got, ref), (cache, drafted)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("kind, qtype", [("q8_0", "Q8_0"), ("q6_k", "Q6_K"), ("q4_k_m", "Q4_K"),
                                         ("q5_k_m", "Q5_K")])
def test_quantizers_equal_llama_cpp(model, kind, qtype):
    from strata.gguf import open_gguf
    from strata.pack.quantize import QUANTIZERS

    from gguf import GGUFReader

    f32 = open_gguf(_file(model, "f32"))
    q = GGUFReader(_file(model, kind))  # gguf-py's reader: the blocks exactly as llama.cpp wrote them
    checked = 0
    for t in q.tensors:
        name = t.name
        if t.tensor_type.name != qtype:
            continue
        s = f32.tensors[name]
        x = np.memmap(s.path, dtype="<f4", mode="r", offset=s.offset, shape=(s.n_elements,))
        want = np.asarray(t.data).view(np.uint8).tobytes()
        assert QUANTIZERS[qtype](np.asarray(x).reshape(-1, s.shape[-1])) == want, name
        checked += 1
    assert checked > 10

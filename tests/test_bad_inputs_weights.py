"""Bad-input corpus: NaN and Inf weights.

A NaN weight would surface tokens later as NaN logits, far from its cause; the engine checks
every tensor when it maps it (a vectorised scan of the exponent bits) and every streamed expert
blob when it reads it. Cases: each float dtype x each encoding (quiet/signalling NaN, +Inf, -Inf)
x dense tensors of every kind and position, resident experts, and streamed experts of a pack.
"""
from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest

import strata
from strata import pack
from strata.errors import ModelError
from strata.safetensors_io import read_header
from strata.testing.devmodel import write_random_model

BITS = {  # dtype -> {encoding: bytes of one value}
    "float32": {"nan": struct.pack("<I", 0x7FC00000), "snan": struct.pack("<I", 0x7F800001),
                "+inf": struct.pack("<I", 0x7F800000), "-inf": struct.pack("<I", 0xFF800000)},
    "bfloat16": {"nan": struct.pack("<H", 0x7FC0), "snan": struct.pack("<H", 0x7F81),
                 "+inf": struct.pack("<H", 0x7F80), "-inf": struct.pack("<H", 0xFF80)},
    "float16": {"nan": struct.pack("<H", 0x7E00), "snan": struct.pack("<H", 0x7C01),
                "+inf": struct.pack("<H", 0x7C00), "-inf": struct.pack("<H", 0xFC00)},
}
DENSE = ("model.embed_tokens.weight", "model.norm.weight", "model.layers.0.linear_attn.A_log",
         "model.layers.3.self_attn.q_proj.weight", "model.layers.1.mlp.gate.weight",
         "model.layers.2.mlp.shared_expert.down_proj.weight")
EXPERT = "model.layers.1.mlp.experts.5.up_proj.weight"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for dtype in BITS:
        folder = tmp_path_factory.mktemp(dtype)
        write_random_model(folder, "qwen3_next", seed=1, preset="tiny", dtype=dtype)
        out[dtype] = folder
    return out


def _poison(src, dst, tensor: str, value: bytes, where: str) -> None:
    shutil.copytree(src, dst)
    path = dst / "model.safetensors"
    info = read_header(str(path))[tensor]
    n = info.nbytes // len(value)
    index = {"first": 0, "middle": n // 2, "last": n - 1}[where]
    with open(path, "r+b") as f:
        f.seek(info.offset + index * len(value))
        f.write(value)


@pytest.mark.parametrize("dtype", sorted(BITS))
@pytest.mark.parametrize("encoding", ["nan", "snan", "+inf", "-inf"])
@pytest.mark.parametrize("tensor", DENSE + (EXPERT,))
def test_non_finite_weight_is_refused_at_load_naming_the_tensor(models, tmp_path, dtype, encoding, tensor):
    where = ("first", "middle", "last")[hash((dtype, encoding, tensor)) % 3]
    _poison(models[dtype], tmp_path / "m", tensor, BITS[dtype][encoding], where)
    with pytest.raises(ModelError) as info:
        strata.load(str(tmp_path / "m"), threads=1)
    msg = str(info.value)
    # the engine's name of the tensor (the file's, less the "model." prefix) and the file
    assert tensor.removeprefix("model.") in msg and "model.safetensors" in msg, msg
    assert "NaN or Inf" in msg and "\n" not in msg, msg


def test_large_finite_values_are_not_mistaken_for_inf(models, tmp_path):
    shutil.copytree(models["bfloat16"], tmp_path / "m")
    path = tmp_path / "m" / "model.safetensors"
    info = read_header(str(path))["model.norm.weight"]
    with open(path, "r+b") as f:  # the largest finite bf16 and the smallest subnormal
        f.seek(info.offset)
        f.write(struct.pack("<HH", 0x7F7F, 0x0001))
    strata.load(str(tmp_path / "m"), threads=1)


@pytest.mark.parametrize("encoding", ["nan", "-inf"])
def test_streamed_expert_with_nan_names_its_layer_and_expert(models, tmp_path, encoding):
    _poison(models["float32"], tmp_path / "m", EXPERT, BITS["float32"][encoding], "middle")
    dst = tmp_path / "pack"
    pack.convert(str(tmp_path / "m"), str(dst))  # convert copies bytes; the checksum is of them
    info = pack.read_pack(str(dst))
    eng = pack.load_pack(str(dst), expert_cache=info.ex["num_experts"] * info.ex["stride"], io_threads=1)
    rng = np.random.default_rng(0)
    with pytest.raises(ModelError) as err:
        for _ in range(64):  # until routing picks expert 5 of layer 1
            toks = [int(t) for t in rng.integers(0, 512, size=8)]
            eng.run(toks)
            eng.commit(len(toks))
    msg = str(err.value)
    assert "layer 1" in msg and "expert 5" in msg and "NaN or Inf" in msg, msg

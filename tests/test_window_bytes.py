"""Window telemetry `weight_bytes`: the bytes of weights a window touched, counted from the
checkpoint's own tensor table (dense/shared tensors once, the distinct tokens' embedding rows,
each distinct selected expert once; matrices in their stored format)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("strata._engine")

import strata  # noqa: E402
from strata.devmodel import write_random_model  # noqa: E402
from strata.safetensors_io import checkpoint_files, read_header  # noqa: E402

ESIZE = {"F32": 4, "BF16": 2}


def _table(path):
    out = {}
    for f in checkpoint_files(path):
        out.update(read_header(f))
    return out


def _expected(table, tele, tokens, tie):
    dense = 0
    embed_row = 0
    expert = {}
    for name, t in table.items():
        # matrices are read as stored; vectors (norms, biases, conv taps, A/dt) as the f32 the
        # engine converts them to at load
        vector = len(t.shape) == 1 or "conv1d" in name
        n = int(np.prod(t.shape)) * (4 if vector else ESIZE[t.dtype])
        if ".mlp.experts." in name:
            layer = int(name.split(".layers.")[1].split(".")[0])
            expert[layer] = expert.get(layer, 0) + n  # summed over experts, divided below
        elif name.endswith("embed_tokens.weight"):
            embed_row = n // t.shape[0]
            if tie:
                dense += n  # the tied head reads the whole matrix
        else:
            dense += n
    moe_layers = sorted(expert)
    n_experts = max(int(k.split(".mlp.experts.")[1].split(".")[0]) for k in table if ".mlp.experts." in k) + 1
    total = dense + (0 if tie else embed_row * len(set(tokens)))
    for m, layer in enumerate(moe_layers):
        total += tele["union_per_layer"][m] * expert[layer] // n_experts
    return total


@pytest.mark.parametrize("arch,dtype,tie", [("qwen3_next", "float32", False), ("qwen3_moe", "bfloat16", False),
                                            ("qwen3_5_moe", "float32", True)])
def test_weight_bytes_counts_each_weight_once(tmp_path, arch, dtype, tie):
    path = write_random_model(tmp_path / "m", arch=arch, seed=3, dtype=dtype, tie_word_embeddings=tie)
    table = _table(path)
    eng = strata.load(path, threads=2)
    rng = np.random.default_rng(0)
    seen = []
    for T, keep in [(70, 70), (1, 1), (4, 2), (16, 16), (3, 3)]:
        tokens = rng.integers(0, eng.vocab_size, T).tolist()
        if T == 3:
            tokens = [tokens[0]] * 3  # one distinct token: one embedding row
        eng.run(tokens)
        tele = eng.last_telemetry()
        eng.commit(keep)
        assert tele["weight_bytes"] == _expected(table, tele, tokens, tie), (T, tele["union_per_layer"])
        seen.append(tele["weight_bytes"])
    # more rows select more distinct experts: bytes(T) grows with T but far slower than T
    assert seen[1] < seen[3] < 16 * seen[1]

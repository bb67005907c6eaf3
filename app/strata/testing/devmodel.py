"""Random checkpoints with numpy only (no torch): for the CLI when no trained model exists, for
benchmarks (100M+ and multi-GB models) and for tests.

    write_random_model("/tmp/m", arch="qwen3_next", seed=0, preset="tiny", hidden_size=64, ...)

Writes ``config.json`` and ``model.safetensors`` (or ``model-0000i-of-0000n.safetensors`` shards +
``model.safetensors.index.json`` above ``max_shard_bytes``) with the tensor names and layouts that
transformers' ``save_pretrained`` writes for the architecture (per-expert expert tensors). Tensors
are generated and written one at a time, so memory stays at the size of the largest tensor.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Iterator

import numpy as np

from ..config import normalize, required_tensors

__all__ = ["PRESETS", "write_random_model", "random_config"]

PRESETS: dict[str, dict] = {
    # ~1M parameters: fast to load, for tests and the CLI fallback
    "tiny": dict(vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                 shared_expert_intermediate_size=64, intermediate_size=128, linear_num_key_heads=2,
                 linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16),
    # ~145M parameters, the shape of the anchor models the llama.cpp comparisons ran on (bench/README.md)
    "bench": dict(vocab_size=32000, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=64, num_experts=64, num_experts_per_tok=4,
                  moe_intermediate_size=128, shared_expert_intermediate_size=256, intermediate_size=1024,
                  linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64,
                  linear_value_head_dim=64),
    # the layer shape of Qwen3-Next-80B-A3B (hidden 2048, 512 experts top-10, expert width 512)
    # with 8 layers: the realistic GPU decode measurement (bench/h200_webgpu.sh), ~27 GB in bf16
    "a3b": dict(vocab_size=151936, hidden_size=2048, num_hidden_layers=8, num_attention_heads=16,
                num_key_value_heads=2, head_dim=256, num_experts=512, num_experts_per_tok=10,
                moe_intermediate_size=512, shared_expert_intermediate_size=512, intermediate_size=5120,
                linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                linear_value_head_dim=128),
}

_ARCH = {
    "qwen3_next": ("qwen3_next", "Qwen3NextForCausalLM"),
    "qwen3_5_moe": ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM"),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeForCausalLM"),
}


def random_config(arch: str = "qwen3_next", preset: str = "tiny", **overrides) -> dict:
    """config.json contents for a random model of an architecture."""
    if arch not in _ARCH:
        raise ValueError(f"arch must be one of {', '.join(_ARCH)}, not {arch!r}")
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, not {preset!r}")
    model_type, cls = _ARCH[arch]
    p = dict(PRESETS[preset])
    p.update(overrides)
    cfg = {
        "architectures": [cls],
        "model_type": model_type,
        "vocab_size": p["vocab_size"],
        "hidden_size": p["hidden_size"],
        "intermediate_size": p["intermediate_size"],
        "num_hidden_layers": p["num_hidden_layers"],
        "num_attention_heads": p["num_attention_heads"],
        "num_key_value_heads": p["num_key_value_heads"],
        "head_dim": p["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": p.get("max_position_embeddings", 32768),
        "rms_norm_eps": p.get("rms_norm_eps", 1e-6),
        "tie_word_embeddings": p.get("tie_word_embeddings", False),
        "attention_bias": False,
        "num_experts": p["num_experts"],
        "num_experts_per_tok": p["num_experts_per_tok"],
        "moe_intermediate_size": p["moe_intermediate_size"],
        "dtype": p.get("dtype", "float32"),
        "bos_token_id": p.get("bos_token_id"),
        "eos_token_id": p.get("eos_token_id"),
    }
    n = p["num_hidden_layers"]
    if arch == "qwen3_moe":
        cfg.update(norm_topk_prob=p.get("norm_topk_prob", False), decoder_sparse_step=1,
                   mlp_only_layers=p.get("mlp_only_layers", []),
                   rope_parameters={"rope_type": "default", "rope_theta": p.get("rope_theta", 10000.0)})
        cfg["num_local_experts"] = cfg.pop("num_experts")
    else:
        interval = p.get("full_attention_interval", 4)
        layer_types = p.get("layer_types") or [
            "linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)
        ]
        cfg.update(
            layer_types=layer_types,
            linear_conv_kernel_dim=p.get("linear_conv_kernel_dim", 4),
            linear_num_key_heads=p["linear_num_key_heads"],
            linear_num_value_heads=p["linear_num_value_heads"],
            linear_key_head_dim=p["linear_key_head_dim"],
            linear_value_head_dim=p["linear_value_head_dim"],
            shared_expert_intermediate_size=p["shared_expert_intermediate_size"],
            rope_parameters={"rope_type": "default", "rope_theta": p.get("rope_theta", 10000000.0),
                             "partial_rotary_factor": p.get("partial_rotary_factor", 0.25)},
        )
        if arch == "qwen3_next":
            cfg.update(norm_topk_prob=p.get("norm_topk_prob", True), decoder_sparse_step=1,
                       mlp_only_layers=p.get("mlp_only_layers", []))
    return cfg


def _hf_name(canonical: str) -> str:
    return canonical if canonical == "lm_head.weight" else "model." + canonical


def _values(name: str, shape: tuple[int, ...], seed: int, plus_one: bool) -> np.ndarray:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    if name.endswith("A_log"):
        return rng.uniform(0.0, 2.0, shape).astype(np.float32)
    if name.endswith("dt_bias"):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)
    if "linear_attn.norm" in name:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if "norm" in name:
        return ((0.0 if plus_one else 1.0) + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if "embed_tokens" in name:
        return rng.standard_normal(shape, dtype=np.float32)
    if "conv1d" in name:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.4).astype(np.float32)
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / np.sqrt(shape[-1]))).astype(np.float32)


def _to_bf16(a: np.ndarray) -> np.ndarray:
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


_DT = {"float32": ("F32", 4), "bfloat16": ("BF16", 2), "float16": ("F16", 2)}


def _encode(a: np.ndarray, dtype: str) -> bytes:
    if dtype == "float32":
        return a.astype("<f4").tobytes()
    if dtype == "float16":
        return a.astype("<f2").tobytes()
    return _to_bf16(a).astype("<u2").tobytes()


def _tensor_specs(spec: dict) -> Iterator[tuple[str, tuple[int, ...]]]:
    for name, shape in required_tensors(spec).items():
        yield _hf_name(name), tuple(shape)


def write_random_model(path, arch: str = "qwen3_next", seed: int = 0, *, preset: str = "tiny",
                       dtype: str = "float32", max_shard_bytes: int = 2 << 30, tensor_bytes=None,
                       **overrides) -> str:
    """Writes a random checkpoint folder and returns its path. `tensor_bytes(name, shape)` may
    return the encoded bytes of a tensor itself (None: the seeded random values), so a timing
    model of many gigabytes can repeat one random block instead of drawing every value."""
    if dtype not in _DT:
        raise ValueError(f"dtype must be one of {', '.join(_DT)}")
    folder = os.fspath(path)
    os.makedirs(folder, exist_ok=True)
    cfg = random_config(arch, preset, dtype=dtype, **overrides)
    spec = normalize(cfg)
    st_dtype, esize = _DT[dtype]
    tensors = list(_tensor_specs(spec))
    # plan shards
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in tensors:
        nbytes = int(np.prod(shape)) * esize
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    weight_map = {}
    total = 0
    plus_one = spec["norm_plus_one"]
    for fn, shard in zip(names, shards):
        # Matrices start on 64-byte boundaries of the file (the engine maps them in place):
        # the header is padded to 64 bytes and tensors whose size is a multiple of 64 bytes go
        # first (safetensors allows no holes between tensors).
        shard = sorted(shard, key=lambda ns: (int(np.prod(ns[1])) * esize) % 64 != 0)
        header: dict = {"__metadata__": {"format": "pt"}}
        off = 0
        for name, shape in shard:
            nbytes = int(np.prod(shape)) * esize
            header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [off, off + nbytes]}
            off += nbytes
            weight_map[name] = fn
        total += off
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-(8 + len(hb)) % 64)
        tmp = os.path.join(folder, fn + ".tmp")
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            for name, shape in shard:
                data = tensor_bytes(name, shape) if tensor_bytes else None
                f.write(data if data is not None else _encode(_values(name, shape, seed, plus_one), dtype))
        os.replace(tmp, os.path.join(folder, fn))
    if len(shards) > 1:
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return folder

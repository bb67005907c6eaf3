"""Helpers shared by the streaming tests: tiny MoE checkpoints and packs."""
from __future__ import annotations

import json
import os

import numpy as np


def write_checkpoint(folder, *, layers=3, experts=8, hidden=32, inter=16, dtype="bf16", fused=False,
                     seed=0) -> str:
    """A tiny qwen3_moe-shaped checkpoint (config.json + model.safetensors) with random weights.

    Written with torch + safetensors so bf16 stays bf16 on disk; `fused` writes experts as
    3-D `gate_up_proj` / `down_proj` tensors (the transformers v5 in-memory layout).
    """
    import torch
    from safetensors.torch import save_file

    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    g = torch.Generator().manual_seed(seed)
    vocab = 64
    t = {}

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * 0.5).to(tdt)

    t["model.embed_tokens.weight"] = rnd(vocab, hidden)
    t["lm_head.weight"] = rnd(vocab, hidden)
    t["model.norm.weight"] = rnd(hidden)
    for li in range(layers):
        p = f"model.layers.{li}."
        t[p + "input_layernorm.weight"] = rnd(hidden)
        t[p + "self_attn.q_proj.weight"] = rnd(hidden, hidden)
        t[p + "mlp.gate.weight"] = rnd(experts, hidden)
        gate = rnd(experts, inter, hidden)
        up = rnd(experts, inter, hidden)
        down = rnd(experts, hidden, inter)
        if fused:
            t[p + "mlp.experts.gate_up_proj"] = torch.cat([gate, up], dim=1).contiguous()
            t[p + "mlp.experts.down_proj"] = down.contiguous()
        else:
            for e in range(experts):
                t[p + f"mlp.experts.{e}.gate_proj.weight"] = gate[e].clone()
                t[p + f"mlp.experts.{e}.up_proj.weight"] = up[e].clone()
                t[p + f"mlp.experts.{e}.down_proj.weight"] = down[e].clone()
    os.makedirs(folder, exist_ok=True)
    save_file(t, os.path.join(folder, "model.safetensors"))
    cfg = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": hidden,
           "moe_intermediate_size": inter, "num_experts": experts, "num_experts_per_tok": 2,
           "num_hidden_layers": layers, "vocab_size": vocab}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        f.write("{}")
    return str(folder)


def expected_blob(src, layer, expert, out_dtype):
    """The bytes a pack blob must hold, computed from the source with torch (independent of pack.py)."""
    import torch
    from safetensors import safe_open

    with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        p = f"model.layers.{layer}.mlp.experts."
        if p + "gate_up_proj" in keys:
            gu = f.get_tensor(p + "gate_up_proj")[expert]
            half = gu.shape[0] // 2
            mats = [gu[:half], gu[half:], f.get_tensor(p + "down_proj")[expert]]
        else:
            mats = [f.get_tensor(p + f"{expert}.{n}_proj.weight") for n in ("gate", "up", "down")]
    tdt = torch.bfloat16 if out_dtype == "bf16" else torch.float32
    return b"".join(m.to(tdt).contiguous().view(torch.uint8).numpy().tobytes() for m in mats)


def open_store(pack_path, cache_bytes, **kw):
    from strata import _engine, pack

    info = pack.read_pack(pack_path)
    ex = info.ex
    return _engine.StreamingExpertStore(
        info.experts_path, ex["data_offset"], ex["stride"], ex["blob_bytes"], ex["num_experts"],
        ex["hidden_size"], ex["moe_intermediate_size"], ex["dtype"], ex["layers"], info.crcs,
        cache_bytes, **kw)


def blob_of(views, dtype) -> bytes:
    g, u, d = views
    return np.ascontiguousarray(g).tobytes() + np.ascontiguousarray(u).tobytes() + np.ascontiguousarray(d).tobytes()

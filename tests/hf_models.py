"""Tiny random Hugging Face checkpoints for tests (transformers + torch, CPU, f32).

    path, model = make_hf_model(tmp_dir, "qwen3_next", seed=0, **config_overrides)

Archs: "qwen3_next", "qwen3_5_moe_text" (text-only), "qwen3_5_moe" (full checkpoint with a nested
text_config and a small vision tower), "qwen3_moe". Weights are re-drawn with larger scales than
the transformers init so that every block (GDN decay, gates, norms, experts) visibly matters.
Other test files reuse these helpers.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

BASE_TEXT = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
)
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16)
LINEAR = dict(
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    linear_conv_kernel_dim=4,
)


def hf_config_kwargs(arch: str, **overrides) -> dict[str, Any]:
    kw: dict[str, Any] = dict(BASE_TEXT)
    kw.update(MOE)
    if arch in ("qwen3_next", "qwen3_5_moe_text", "qwen3_5_moe"):
        kw.update(LINEAR)
        kw["shared_expert_intermediate_size"] = 24
    if arch == "qwen3_next":
        kw["norm_topk_prob"] = True
    kw.update(overrides)
    if arch != "qwen3_moe" and "layer_types" not in kw:
        n = kw["num_hidden_layers"]
        kw["layer_types"] = ["linear_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    if "layer_types" in kw and len(kw["layer_types"]) != kw["num_hidden_layers"]:
        raise ValueError("layer_types must match num_hidden_layers")
    return kw


def _build(arch: str, kw: dict):
    import torch  # noqa: F401
    import transformers as tf

    if arch == "qwen3_next":
        return tf.Qwen3NextForCausalLM(tf.Qwen3NextConfig(**kw))
    if arch == "qwen3_moe":
        return tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(**kw))
    if arch == "qwen3_5_moe_text":
        return tf.Qwen3_5MoeForCausalLM(tf.Qwen3_5MoeTextConfig(**kw))
    if arch == "qwen3_5_moe":
        vision = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=16, out_hidden_size=kw["hidden_size"])
        cfg = tf.Qwen3_5MoeConfig(text_config=kw, vision_config=vision,
                                  tie_word_embeddings=kw.get("tie_word_embeddings", False))
        return tf.Qwen3_5MoeForConditionalGeneration(cfg)
    raise ValueError(arch)


def _redraw(model, seed: int, plus_one_norms: bool) -> None:
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".visual." in name or name.startswith("visual") or "model.visual" in name:
                continue
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.0, 2.0, generator=g))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif "linear_attn.norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "norm" in name:
                base = 0.0 if plus_one_norms else 1.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "conv1d" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.4)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / fan_in**0.5))


def make_hf_model(folder: str, arch: str, *, seed: int = 0, dtype: str = "float32", **overrides):
    """Builds, re-draws, saves (save_pretrained) and returns (folder, model in eval mode, f32)."""
    import torch

    kw = hf_config_kwargs(arch, **overrides)
    torch.manual_seed(seed)
    model = _build(arch, kw)
    _redraw(model, seed, plus_one_norms=arch != "qwen3_moe")
    model.eval()
    if kw.get("tie_word_embeddings"):
        model.tie_weights()
    os.makedirs(folder, exist_ok=True)
    if dtype == "float32":
        model.save_pretrained(folder)
    else:
        model.to(getattr(torch, dtype)).save_pretrained(folder)
        model.to(torch.float32)
    return folder, model


def reference_logits(model, ids) -> np.ndarray:
    """(T, vocab) f32 logits of one forward over ids (no cache)."""
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.tensor([list(ids)], dtype=torch.long))
    return out.logits[0].float().numpy()


def rewrite_config(folder: str, **changes) -> None:
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(changes)
    with open(path, "w") as f:
        json.dump(cfg, f)

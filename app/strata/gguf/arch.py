"""GGUF metadata -> the engine's architecture spec (the same dict strata.config.normalize makes
from a Hugging Face config.json), for the architectures llama.cpp calls qwen3next, qwen35moe and
qwen3moe."""
from __future__ import annotations

from typing import Any

from ..errors import ModelError
from .reader import GGUFModel

# llama.cpp architecture name -> strata's (Hugging Face) architecture name
ARCHS = {"qwen3next": "qwen3_next", "qwen35moe": "qwen3_5_moe", "qwen3moe": "qwen3_moe"}
# Upper bounds far above any real model: a value beyond them is a corrupt file, and the engine
# sizes buffers from these numbers.
LIMITS = {"block_count": 4096, "embedding_length": 1 << 17, "attention.head_count": 4096,
          "attention.head_count_kv": 4096, "attention.key_length": 1 << 14, "expert_count": 1 << 16,
          "expert_used_count": 1 << 16, "expert_feed_forward_length": 1 << 20,
          "expert_shared_feed_forward_length": 1 << 20, "feed_forward_length": 1 << 20,
          "context_length": 1 << 26, "rope.dimension_count": 1 << 14, "ssm.conv_kernel": 64,
          "ssm.state_size": 1 << 14, "ssm.group_count": 4096, "ssm.time_step_rank": 4096,
          "ssm.inner_size": 1 << 20, "full_attention_interval": 4096, "nextn_predict_layers": 64}


class _Meta:
    def __init__(self, model: GGUFModel, arch: str) -> None:
        self.model, self.arch, self.where = model, arch, model.path

    def raw(self, key: str) -> Any:
        return self.model.get(f"{self.arch}.{key}")

    def int(self, key: str, default: int | None = None, *, minimum: int = 0) -> int:
        v = self.raw(key)
        if v is None:
            if default is None:
                raise ModelError(f"{self.where}: missing metadata key {self.arch}.{key}")
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum or v > LIMITS.get(key, 1 << 40):
            raise ModelError(f"{self.where}: metadata key {self.arch}.{key} = {v!r} is out of range")
        return v

    def float(self, key: str, default: float) -> float:
        v = self.raw(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v == v) or abs(v) > 1e30:
            raise ModelError(f"{self.where}: metadata key {self.arch}.{key} = {v!r} is not a number")
        return float(v)


def architecture(model: GGUFModel) -> str:
    arch = model.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelError(f"{model.path}: missing metadata key general.architecture")
    if arch not in ARCHS:
        raise ModelError(f"{model.path}: architecture {arch!r} is not supported ({', '.join(ARCHS)})")
    return arch


def spec_from_metadata(model: GGUFModel) -> dict:
    """The engine spec of a GGUF model. Layout facts that differ from a Hugging Face checkpoint
    (how llama.cpp's converter stores the weights) are recorded in the spec, see tensor_names."""
    arch = architecture(model)
    m = _Meta(model, arch)
    where = model.path
    n_blocks = m.int("block_count", minimum=1)
    n_mtp = m.int("nextn_predict_layers", 0)
    n_layers = n_blocks - n_mtp
    if n_layers < 1:
        raise ModelError(f"{where}: {arch}.nextn_predict_layers ({n_mtp}) leaves no layers of {n_blocks}")
    hidden = m.int("embedding_length", minimum=1)
    n_heads = m.int("attention.head_count", minimum=1)
    n_kv = m.int("attention.head_count_kv", n_heads, minimum=1)
    if n_heads % n_kv:
        raise ModelError(f"{where}: head_count ({n_heads}) is not a multiple of head_count_kv ({n_kv})")
    head_dim = m.int("attention.key_length", hidden // n_heads, minimum=1)
    rot = m.int("rope.dimension_count", head_dim, minimum=2)
    if rot % 2 or rot > head_dim:
        raise ModelError(f"{where}: {arch}.rope.dimension_count {rot} does not fit head size {head_dim}")
    embd = model.tensors.get("token_embd.weight")
    if embd is None or len(embd.shape) != 2 or embd.shape[1] != hidden:
        raise ModelError(f"{where}: tensor token_embd.weight is missing or not [vocab, {hidden}]")
    vocab = embd.shape[0]

    if arch == "qwen3moe":
        linear = [0] * n_layers
    else:
        rec = m.raw("attention.recurrent_layers")
        if rec is not None:
            if not isinstance(rec, list) or len(rec) < n_layers:
                raise ModelError(f"{where}: {arch}.attention.recurrent_layers must list {n_layers} layers")
            linear = [1 if bool(x) else 0 for x in rec[:n_layers]]
        else:
            interval = m.int("full_attention_interval", 4, minimum=1)
            linear = [0 if (i + 1) % interval == 0 else 1 for i in range(n_layers)]
    has_linear = any(linear)

    n_exp = m.int("expert_count", 0)
    top_k = m.int("expert_used_count", 0) if n_exp else 0
    if n_exp and not 1 <= top_k <= n_exp:
        raise ModelError(f"{where}: {arch}.expert_used_count ({top_k}) must be 1..expert_count ({n_exp})")
    moe = [1 if n_exp and f"blk.{l}.ffn_gate_inp.weight" in model.tensors else 0 for l in range(n_layers)]
    has_dense = not all(moe)

    nk = m.int("ssm.group_count", minimum=1) if has_linear else 0
    nv = m.int("ssm.time_step_rank", minimum=1) if has_linear else 0
    dk = m.int("ssm.state_size", minimum=1) if has_linear else 0
    inner = m.int("ssm.inner_size", minimum=1) if has_linear else 0
    if has_linear and (inner % nv or nv % nk):
        raise ModelError(f"{where}: {arch}.ssm.inner_size / time_step_rank / group_count do not divide")
    dv = inner // nv if has_linear else 0

    first_linear = next((l for l in range(n_layers) if linear[l]), None)
    fused_qkvz = first_linear is not None and f"blk.{first_linear}.ssm_in.weight" in model.tensors
    spec = {
        "arch": ARCHS[arch],
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_layers": n_layers,
        "layer_types": ["linear_attention" if x else "full_attention" for x in linear],
        "layer_linear": linear,
        "layer_moe": moe,
        "num_heads": n_heads,
        "num_kv_heads": n_kv,
        "head_dim": head_dim,
        "rotary_dim": rot,
        "rope_theta": m.float("rope.freq_base", 10000.0),
        "eps": m.float("attention.layer_norm_rms_epsilon", 1e-6),
        "attn_gated": arch != "qwen3moe",
        "attn_bias": f"blk.{next((l for l in range(n_layers) if not linear[l]), 0)}.attn_q.bias" in model.tensors,
        # llama.cpp's converter stores the (1 + w) of these RMSNorms already added
        "norm_plus_one": False,
        "linear_num_key_heads": nk,
        "linear_num_value_heads": nv,
        "linear_key_head_dim": dk,
        "linear_value_head_dim": dv,
        "linear_conv_kernel": m.int("ssm.conv_kernel", 4, minimum=1) if has_linear else 4,
        "gdn_fused": bool(fused_qkvz),
        # qwen35moe files order value heads tiled over key heads (v0 of every key head, then v1..)
        "linear_v_tiled": arch == "qwen35moe" and has_linear and nk != nv,
        "num_experts": n_exp if any(moe) else 0,
        "top_k": top_k if any(moe) else 0,
        # llama.cpp normalises the top-k weights of all three unless the file says otherwise
        "norm_topk_prob": bool(m.raw("expert_weights_norm")) if m.raw("expert_weights_norm") is not None else True,
        "moe_intermediate_size": m.int("expert_feed_forward_length", minimum=1) if any(moe) else 0,
        "shared_expert_intermediate_size": m.int("expert_shared_feed_forward_length", 0) if any(moe) else 0,
        "intermediate_size": m.int("feed_forward_length", minimum=1) if has_dense else 0,
        "tie_word_embeddings": "output.weight" not in model.tensors,
        "max_position_embeddings": m.int("context_length", 32768, minimum=1),
    }
    if spec["shared_expert_intermediate_size"] and f"blk.{moe.index(1)}.ffn_up_shexp.weight" not in model.tensors:
        spec["shared_expert_intermediate_size"] = 0
    return spec

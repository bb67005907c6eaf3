"""Architecture config parsing: turns a Hugging Face ``config.json`` into the engine's spec.

Supported: ``qwen3_next``, ``qwen3_5_moe`` (text-only ``qwen3_5_moe_text`` or a full checkpoint
with a nested ``text_config``; vision weights are ignored) and ``qwen3_moe``.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Iterable

from .errors import ModelError

ARCHS = ("qwen3_next", "qwen3_5_moe", "qwen3_moe")
# The engine keeps sizes in 32-bit ints; a config value past this is not a model.
INT_MAX = 2**31 - 1
# Without tensors to check against (a config alone), counts past these are refused before any
# list of that length is built: a 1 KB config.json must never allocate gigabytes.
MAX_LAYERS = 1 << 12
MAX_EXPERTS = 1 << 16
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EXPERT_RE = re.compile(r"\.mlp\.experts\.(\d+)\.")
_STACKED_RE = re.compile(r"\.mlp\.experts\.(gate_up_proj|gate_proj|up_proj|down_proj)(\.weight)?$")


def _arch_of(cfg: dict, where: str = "config.json") -> tuple[str, dict]:
    mt = cfg.get("model_type")
    if mt == "qwen3_5_moe" and isinstance(cfg.get("text_config"), dict):
        text = dict(cfg["text_config"])
        # the composite model ties its LM head by the top-level flag
        if "tie_word_embeddings" in cfg:
            text["tie_word_embeddings"] = cfg["tie_word_embeddings"]
        return "qwen3_5_moe", text
    if mt in ("qwen3_5_moe", "qwen3_5_moe_text"):
        return "qwen3_5_moe", cfg
    if mt in ("qwen3_next", "qwen3_moe"):
        return mt, cfg
    raise ModelError(f"{where}: unsupported model_type {_short(mt)} (strata supports {', '.join(ARCHS)})")


def _get(cfg: dict, key: str, default: Any = None, *, where: str, required: bool = False):
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    if required:
        raise ModelError(f"{where}: missing key {key!r}")
    return default


def _int(cfg: dict, key: str, where: str, default: int | None = None, *, minimum: int = 0,
         maximum: int = INT_MAX) -> int:
    v = _get(cfg, key, default, where=where, required=default is None)
    if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= maximum:
        raise ModelError(f"{where}: key {key!r} must be an integer from {minimum} to {maximum}, "
                         f"got {_short(v)}")
    return v


def _float(cfg: dict, key: str, where: str, default: float, *, positive: bool = True) -> float:
    v = _get(cfg, key, default, where=where)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)) \
            or (positive and float(v) <= 0):
        what = "a finite number > 0" if positive else "a finite number"
        raise ModelError(f"{where}: key {key!r} must be {what}, got {_short(v)}")
    return float(v)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def tensor_bounds(names: Iterable[str], stacked_experts: Iterable[int] = ()) -> dict[str, int]:
    """What a checkpoint's tensor names can back: {"layers": 1 + the largest layer index,
    "experts": 1 + the largest expert index (or the leading size of a stacked expert tensor)}.
    `normalize` refuses config counts beyond these before it builds anything."""
    layers = experts = 0
    for name in names:
        m = _LAYER_RE.search(name)
        if m:
            layers = max(layers, int(m.group(1)) + 1)
        m = _EXPERT_RE.search(name)
        if m:
            experts = max(experts, int(m.group(1)) + 1)
    for n in stacked_experts:
        experts = max(experts, int(n))
    return {"layers": layers, "experts": experts}


def checkpoint_bounds(tensors: Iterable) -> dict[str, int]:
    """tensor_bounds of TensorInfo objects (stacked [E, ...] expert tensors count E experts)."""
    infos = list(tensors)
    stacked = [t.shape[0] for t in infos if _STACKED_RE.search(t.name) and len(t.shape) == 3]
    return tensor_bounds((t.name for t in infos), stacked)


def _rope(cfg: dict, where: str) -> tuple[float, float]:
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(rp, dict):
        raise ModelError(f"{where}: key 'rope_parameters' must be an object")
    rtype = rp.get("rope_type", rp.get("type", "default"))
    if rtype not in ("default", None, "mrope"):
        raise ModelError(f"{where}: rope_type {rtype!r} is not supported (only default rotary)")
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    partial = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", None))
    for key, v in (("rope_theta", theta), ("partial_rotary_factor", partial)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v))
                              or float(v) <= 0 or (key == "partial_rotary_factor" and float(v) > 1)):
            raise ModelError(f"{where}: key {key!r} must be a finite number > 0"
                             + (" and <= 1" if key == "partial_rotary_factor" else "") + f", got {_short(v)}")
    return float(theta), (None if partial is None else float(partial))


def normalize(cfg: dict, where: str = "config.json", bounds: dict[str, int] | None = None) -> dict:
    """Normalised engine spec (plain ints/bools/floats/lists) from a parsed config.json.

    `bounds` (see `tensor_bounds`): the layers and experts the weights hold; a config that asks
    for more is refused here, before any per-layer or per-expert table is built."""
    if not isinstance(cfg, dict):
        raise ModelError(f"{where}: top level must be a JSON object")
    arch, c = _arch_of(cfg, where)
    max_layers = MAX_LAYERS if bounds is None else max(1, bounds.get("layers", 0))
    n_layers = _int(c, "num_hidden_layers", where, minimum=1, maximum=max_layers if bounds is None else INT_MAX)
    if bounds is not None and n_layers > max_layers:
        raise ModelError(f"{where}: num_hidden_layers is {n_layers}, but the weights hold "
                         f"{bounds.get('layers', 0)} layers")
    hidden = _int(c, "hidden_size", where, minimum=1)
    n_heads = _int(c, "num_attention_heads", where, minimum=1)
    n_kv = _int(c, "num_key_value_heads", where, n_heads, minimum=1)
    if n_heads % n_kv:
        raise ModelError(f"{where}: num_attention_heads ({n_heads}) is not a multiple of num_key_value_heads ({n_kv})")
    head_dim = _int(c, "head_dim", where, hidden // n_heads, minimum=1)
    theta, partial = _rope(c, where)
    if partial is None:
        partial = 0.25 if arch == "qwen3_5_moe" else 1.0
    rot = int(head_dim * partial)
    if rot % 2 or rot > head_dim:
        raise ModelError(f"{where}: partial_rotary_factor {partial} gives an odd rotary size {rot}")
    if arch == "qwen3_moe":
        layer_types = ["full_attention"] * n_layers
    else:
        layer_types = c.get("layer_types")
        if layer_types is None:
            interval = _int(c, "full_attention_interval", where, 4, minimum=1)
            layer_types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n_layers)]
    if not isinstance(layer_types, list) or len(layer_types) != n_layers or any(
        t not in ("linear_attention", "full_attention") for t in layer_types
    ):
        raise ModelError(f"{where}: key 'layer_types' must list {n_layers} of linear_attention/full_attention")
    n_exp = c.get("num_experts", c.get("num_local_experts"))
    n_exp = 0 if n_exp is None else n_exp  # only a missing key means "dense"; [] or false is an error
    if isinstance(n_exp, bool) or not isinstance(n_exp, int) or not 0 <= n_exp <= INT_MAX:
        raise ModelError(f"{where}: key 'num_experts' must be an integer from 0 to {INT_MAX}, got {_short(n_exp)}")
    if bounds is None and n_exp > MAX_EXPERTS:
        raise ModelError(f"{where}: num_experts is {n_exp}, more than strata takes ({MAX_EXPERTS})")
    if bounds is not None and n_exp > bounds.get("experts", 0) and bounds.get("experts", 0) > 0:
        raise ModelError(f"{where}: num_experts is {n_exp}, but the weights hold {bounds['experts']} experts")
    if arch == "qwen3_5_moe":
        layer_moe = [1 if n_exp > 0 else 0] * n_layers
    else:
        step = _int(c, "decoder_sparse_step", where, 1, minimum=1)
        mlp_only = c.get("mlp_only_layers") or []
        if not isinstance(mlp_only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in mlp_only):
            raise ModelError(f"{where}: key 'mlp_only_layers' must be a list of layer numbers")
        mlp_only = set(mlp_only)
        layer_moe = [1 if (i not in mlp_only and n_exp > 0 and (i + 1) % step == 0) else 0 for i in range(n_layers)]
    has_moe = any(layer_moe)
    has_dense = not all(layer_moe)
    has_linear = any(t == "linear_attention" for t in layer_types)
    act = c.get("hidden_act", "silu")
    if act != "silu":
        raise ModelError(f"{where}: hidden_act {act!r} is not supported (silu only)")
    spec = {
        "arch": arch,
        "vocab_size": _int(c, "vocab_size", where, minimum=1),
        "hidden_size": hidden,
        "num_layers": n_layers,
        "layer_types": list(layer_types),
        "layer_linear": [1 if t == "linear_attention" else 0 for t in layer_types],
        "layer_moe": layer_moe,
        "num_heads": n_heads,
        "num_kv_heads": n_kv,
        "head_dim": head_dim,
        "rotary_dim": rot,
        "rope_theta": theta,
        "eps": _float(c, "rms_norm_eps", where, 1e-6),
        "attn_gated": arch != "qwen3_moe",
        "attn_bias": bool(c.get("attention_bias", False)),
        "norm_plus_one": arch != "qwen3_moe",
        "linear_num_key_heads": _int(c, "linear_num_key_heads", where, minimum=1) if has_linear else 0,
        "linear_num_value_heads": _int(c, "linear_num_value_heads", where, minimum=1) if has_linear else 0,
        "linear_key_head_dim": _int(c, "linear_key_head_dim", where, minimum=1) if has_linear else 0,
        "linear_value_head_dim": _int(c, "linear_value_head_dim", where, minimum=1) if has_linear else 0,
        "linear_conv_kernel": _int(c, "linear_conv_kernel_dim", where, 4, minimum=1) if has_linear else 4,
        "gdn_fused": arch == "qwen3_next",
        "num_experts": n_exp if has_moe else 0,
        "top_k": _int(c, "num_experts_per_tok", where, minimum=1) if has_moe else 0,
        "norm_topk_prob": True if arch == "qwen3_5_moe" else bool(c.get("norm_topk_prob", arch == "qwen3_next")),
        "moe_intermediate_size": _int(c, "moe_intermediate_size", where, minimum=1) if has_moe else 0,
        "shared_expert_intermediate_size": (
            _int(c, "shared_expert_intermediate_size", where, 0) if (has_moe and arch != "qwen3_moe") else 0
        ),
        "intermediate_size": _int(c, "intermediate_size", where, minimum=1) if has_dense else 0,
        "tie_word_embeddings": bool(c.get("tie_word_embeddings", False)),
        "max_position_embeddings": _int(c, "max_position_embeddings", where, 32768, minimum=1),
    }
    if has_moe and spec["top_k"] > n_exp:
        raise ModelError(f"{where}: num_experts_per_tok ({spec['top_k']}) exceeds num_experts ({n_exp})")
    if has_linear and spec["linear_num_value_heads"] % spec["linear_num_key_heads"]:
        raise ModelError(f"{where}: linear_num_value_heads is not a multiple of linear_num_key_heads")
    return spec


# A config.json is a few KB; anything this large is not one (and is not parsed into memory).
MAX_CONFIG_BYTES = 16 << 20


def read_config_json(folder: str | os.PathLike) -> dict:
    """The parsed config.json of a model folder (a checkpoint or a pack): the one reader of it.
    ModelError (one line, naming the file) when it is missing, too large, not JSON or not an object."""
    path = os.path.join(os.fspath(folder), "config.json")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ModelError(f"{folder}: no config.json (not a Hugging Face checkpoint folder or a strata pack)") from None
    except IsADirectoryError:
        raise ModelError(f"{path}: is a folder, not a JSON file") from None
    except OSError as e:
        raise ModelError(f"{path}: cannot read ({e.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ModelError(f"{path}: more than {MAX_CONFIG_BYTES >> 20} MiB, not a model config")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise ModelError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise ModelError(f"{path}: top level must be a JSON object")
    return raw


def read_config(folder: str, bounds: dict[str, int] | None = None) -> tuple[dict, dict]:
    """(raw config dict, normalised spec) of a model folder; `bounds`: what its weights hold."""
    raw = read_config_json(folder)
    return raw, normalize(raw, where=os.path.join(folder, "config.json"), bounds=bounds)


def required_tensors(spec: dict, *, experts: bool = True) -> dict[str, tuple[int, ...]]:
    """Canonical tensor name -> expected shape for a spec (experts per (layer, expert))."""
    H, V = spec["hidden_size"], spec["vocab_size"]
    req: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (V, H), "norm.weight": (H,)}
    if not spec["tie_word_embeddings"]:
        req["lm_head.weight"] = (V, H)
    nk, nv = spec["linear_num_key_heads"], spec["linear_num_value_heads"]
    dk, dv = spec["linear_key_head_dim"], spec["linear_value_head_dim"]
    kd, vd = nk * dk, nv * dv
    hd, nh, nkv = spec["head_dim"], spec["num_heads"], spec["num_kv_heads"]
    for l in range(spec["num_layers"]):
        p = f"layers.{l}."
        req[p + "input_layernorm.weight"] = (H,)
        req[p + "post_attention_layernorm.weight"] = (H,)
        if spec["layer_linear"][l]:
            a = p + "linear_attn."
            if spec["gdn_fused"]:
                req[a + "in_proj_qkvz.weight"] = (2 * kd + 2 * vd, H)
                req[a + "in_proj_ba.weight"] = (2 * nv, H)
            else:
                req[a + "in_proj_qkv.weight"] = (2 * kd + vd, H)
                req[a + "in_proj_z.weight"] = (vd, H)
                req[a + "in_proj_b.weight"] = (nv, H)
                req[a + "in_proj_a.weight"] = (nv, H)
            req[a + "conv1d.weight"] = (2 * kd + vd, 1, spec["linear_conv_kernel"])
            req[a + "A_log"] = (nv,)
            req[a + "dt_bias"] = (nv,)
            req[a + "norm.weight"] = (dv,)
            req[a + "out_proj.weight"] = (H, vd)
        else:
            a = p + "self_attn."
            req[a + "q_proj.weight"] = (nh * hd * (2 if spec["attn_gated"] else 1), H)
            req[a + "k_proj.weight"] = (nkv * hd, H)
            req[a + "v_proj.weight"] = (nkv * hd, H)
            req[a + "o_proj.weight"] = (H, nh * hd)
            req[a + "q_norm.weight"] = (hd,)
            req[a + "k_norm.weight"] = (hd,)
            if spec["attn_bias"]:
                req[a + "q_proj.bias"] = (req[a + "q_proj.weight"][0],)
                req[a + "k_proj.bias"] = (nkv * hd,)
                req[a + "v_proj.bias"] = (nkv * hd,)
                req[a + "o_proj.bias"] = (H,)
        m = p + "mlp."
        if spec["layer_moe"][l]:
            req[m + "gate.weight"] = (spec["num_experts"], H)
            si = spec["shared_expert_intermediate_size"]
            if si:
                req[m + "shared_expert.gate_proj.weight"] = (si, H)
                req[m + "shared_expert.up_proj.weight"] = (si, H)
                req[m + "shared_expert.down_proj.weight"] = (H, si)
                req[m + "shared_expert_gate.weight"] = (1, H)
            if experts:
                I = spec["moe_intermediate_size"]
                for e in range(spec["num_experts"]):
                    req[f"{m}experts.{e}.gate_proj.weight"] = (I, H)
                    req[f"{m}experts.{e}.up_proj.weight"] = (I, H)
                    req[f"{m}experts.{e}.down_proj.weight"] = (H, I)
        else:
            I = spec["intermediate_size"]
            req[m + "gate_proj.weight"] = (I, H)
            req[m + "up_proj.weight"] = (I, H)
            req[m + "down_proj.weight"] = (H, I)
    return req

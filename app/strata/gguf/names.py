"""GGUF tensor names and layouts (as llama.cpp's converter writes them) -> the engine's canonical
tensors (Hugging Face names without the ``model.`` prefix).

Differences from a Hugging Face checkpoint that the engine is told about rather than copied:
- ``ssm_a`` holds A = -exp(A_log): it becomes ``linear_attn.A``;
- ``attn_qkv`` + ``attn_gate`` are the q/k/v and z rows of in_proj_qkvz, split by head kind;
  ``ssm_ba`` stays the fused per-key-head b/a projection (``linear_attn.in_proj_ba``);
- ``ssm_conv1d`` is [channels, kernel] (the same bytes as [channels, 1, kernel]);
- stacked experts ``ffn_{gate,up,down}_exps`` [E, rows, cols] are cut into per-expert views;
  a block format's rows are whole blocks, so each expert is a contiguous byte range.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .. import config as _config
from ..errors import ModelError
from .reader import GGUFModel, GGUFTensor

_GLOBAL = {"token_embd.weight": "embed_tokens.weight", "output_norm.weight": "norm.weight",
           "output.weight": "lm_head.weight"}
_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight", "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ssm_in.weight": "linear_attn.in_proj_qkvz.weight",
    "attn_qkv.weight": "linear_attn.in_proj_qkv.weight",
    "attn_gate.weight": "linear_attn.in_proj_z.weight",
    "ssm_ba.weight": "linear_attn.in_proj_ba.weight",
    "ssm_beta.weight": "linear_attn.in_proj_b.weight",
    "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_a": "linear_attn.A",
    "ssm_dt.bias": "linear_attn.dt_bias",
    "ssm_norm.weight": "linear_attn.norm.weight",
    "ssm_out.weight": "linear_attn.out_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")
_STACKED = re.compile(r"^ffn_(gate|up|down|gate_up)_exps\.weight$")
_SPLIT_EXPERT = re.compile(r"^ffn_(gate|up|down)\.(\d+)\.weight$")  # older per-expert files


@dataclass(frozen=True)
class WeightRef:
    """Where the bytes of one canonical tensor live."""
    name: str
    source: str          # the GGUF tensor it comes from
    path: str
    offset: int
    type: str            # GGUF type name
    shape: tuple[int, ...]
    nbytes: int


def _ref(name: str, t: GGUFTensor, offset: int, shape: tuple[int, ...], nbytes: int) -> WeightRef:
    return WeightRef(name, t.name, t.path, offset, t.type, shape, nbytes)


def _split_stacked(spec: dict, t: GGUFTensor, layer: int, kind: str) -> list[WeightRef]:
    from ..model import stacked_expert_slices  # noqa: PLC0415 - the safetensors loader's geometry

    slices = stacked_expert_slices(spec, kind, t.shape, t.offset, t.nbytes, f"{t.path}: tensor {t.name}")
    return [_ref(f"layers.{layer}.{name}", t, off, shape, nb) for name, off, shape, nb in slices]


def canonical_tensors(model: GGUFModel, spec: dict, *, experts: bool = True) -> dict[str, WeightRef]:
    """Canonical name -> WeightRef for every tensor the engine reads, checked for presence and shape
    (without the routed experts when `experts` is False: a pack streams those)."""
    n_layers = spec["num_layers"]
    have: dict[str, WeightRef] = {}
    for t in model.tensors.values():
        if t.name in _GLOBAL:
            have[_GLOBAL[t.name]] = _ref(_GLOBAL[t.name], t, t.offset, t.shape, t.nbytes)
            continue
        m = _BLK.match(t.name)
        if not m:
            continue  # vision / other extras are not text weights
        layer, rest = int(m.group(1)), m.group(2)
        if layer >= n_layers:
            continue  # MTP (nextn) layers follow the decoder layers
        p = f"layers.{layer}."
        sm = _STACKED.match(rest)
        if sm:
            for r in _split_stacked(spec, t, layer, sm.group(1)):
                have[r.name] = r
            continue
        em = _SPLIT_EXPERT.match(rest)
        if em:
            name = f"{p}mlp.experts.{int(em.group(2))}.{em.group(1)}_proj.weight"
            have[name] = _ref(name, t, t.offset, t.shape, t.nbytes)
            continue
        if rest in _LAYER:
            name = p + _LAYER[rest]
            shape = t.shape
            if rest == "ssm_conv1d.weight" and len(shape) == 2:
                shape = (shape[0], 1, shape[1])
            if rest == "ffn_gate_inp_shexp.weight" and len(shape) == 1:
                shape = (1, shape[0])
            have[name] = _ref(name, t, t.offset, shape, t.nbytes)
    table: dict[str, WeightRef] = {}
    for name, shape in required_tensors(spec, have, experts=experts).items():
        ref = have.get(name)
        if ref is None:
            raise ModelError(f"{model.path}: missing tensor for {name}")
        if tuple(ref.shape) != tuple(shape):
            raise ModelError(f"{ref.path}: tensor {ref.source} has shape {list(ref.shape)}, expected {list(shape)}")
        table[name] = ref
    return table


def required_tensors(spec: dict, have: dict, *, experts: bool = True) -> dict[str, tuple[int, ...]]:
    """strata.config.required_tensors with the GGUF forms of the linear-attention tensors."""
    req = _config.required_tensors(spec, experts=experts)
    nv = spec["linear_num_value_heads"]
    for l in range(spec["num_layers"]):
        if not spec["layer_linear"][l]:
            continue
        a = f"layers.{l}.linear_attn."
        req[a + "A"] = req.pop(a + "A_log")
        if not spec["gdn_fused"] and (a + "in_proj_ba.weight") in have:
            del req[a + "in_proj_b.weight"], req[a + "in_proj_a.weight"]
            req[a + "in_proj_ba.weight"] = (2 * nv, spec["hidden_size"])
    return req

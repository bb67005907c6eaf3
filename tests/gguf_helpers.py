"""Test helpers: write a tiny Hugging Face checkpoint as a GGUF file laid out the way llama.cpp's
converter lays it out (our own code, written from the converter's documented behaviour), plus a
Q4_K encoder for test weights (gguf-py has no Q4_K quantizer; these blocks need only be valid,
the references dequantize them with gguf-py).

    write_gguf(hf_folder, "m.gguf", qtype="Q8_0", tokenizer_json=path)
"""
from __future__ import annotations

import json
import os
import re

import numpy as np
from gguf import GGMLQuantizationType as GT
from gguf import GGUFWriter, quants

ARCH_NAMES = {"qwen3_next": "qwen3next", "qwen3_5_moe": "qwen35moe", "qwen3_5_moe_text": "qwen35moe",
              "qwen3_moe": "qwen3moe"}
_PREFIXES = ("model.language_model.", "model.")


def ggml_activation_blocks(xb, block, sums=False):
    """(q, d) per block as llama.cpp's CPU backend quantizes an activation row for the weight
    type, in float32 NumPy. 32-blocks (ggml's x86 quantize_row_q8_0): d = f16(amax / 127) and
    q = round-half-even(x * (127 / amax)). 256-blocks (ggml's Q8_K reference): max = the first
    value of largest magnitude, iscale = -127 / max, q = min(127, round-half-even(iscale * x)),
    d = 1 / iscale. sums=True (32-blocks, ggml's x86 quantize_row_q8_1, the Q5_1 partner): (q, d, s)
    with s = f16((amax / 127) * sum of q), the f32 scale before its f16 rounding."""
    xb = np.asarray(xb, np.float32)
    amax = np.abs(xb).max(axis=1)
    nz = amax != 0
    safe = np.where(nz, amax, np.float32(1))
    if block == 32:
        d = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
        mul = np.where(nz, np.float32(127) / safe, np.float32(0)).astype(np.float32)
    else:
        mx = xb[np.arange(len(xb)), np.abs(xb).argmax(axis=1)]
        mul = np.where(nz, np.float32(-127) / np.where(nz, mx, np.float32(1)), np.float32(0)).astype(np.float32)
        d = np.where(nz, np.float32(1) / np.where(nz, mul, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint((xb * mul[:, None]).astype(np.float32)), -127, 127).astype(np.int8)
    if sums:
        assert block == 32, "Q8_1 sums are for 32-blocks"
        d32 = (amax / np.float32(127)).astype(np.float32)
        s = (d32 * q.astype(np.int32).sum(axis=1).astype(np.float32)).astype(np.float32)
        return q, d.astype(np.float32), s.astype(np.float16).astype(np.float32)
    return q, d.astype(np.float32)


def load_hf(folder: str) -> tuple[dict, dict[str, np.ndarray]]:
    from safetensors.numpy import load_file

    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "model_type": "qwen3_5_moe"}
    tensors: dict[str, np.ndarray] = {}
    for fn in sorted(os.listdir(folder)):
        if fn.endswith(".safetensors"):
            try:
                items = load_file(os.path.join(folder, fn)).items()
            except TypeError:  # bfloat16, which NumPy has no type for: through torch, exactly
                from safetensors.torch import load_file as load_torch

                items = [(k, v.float().numpy()) for k, v in load_torch(os.path.join(folder, fn)).items()]
            for k, v in items:
                if "visual" in k or k.startswith("mtp."):
                    continue
                for p in _PREFIXES:
                    if k.startswith(p):
                        k = k[len(p):]
                        break
                tensors[k] = v.astype(np.float32)
    return cfg, tensors


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """Rows of f32 (cols a multiple of 256) -> Q4_K blocks (uint8 [rows, cols/256*144])."""
    rows, cols = x.shape
    b = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(b.min(axis=2), 0.0)
    scale = (b.max(axis=2) - lo) / 15.0
    d = (scale.max(axis=1) / 63.0).astype(np.float16)
    dmin = ((-lo).max(axis=1) / 63.0).astype(np.float16)
    df, dminf = d.astype(np.float32), dmin.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.rint(np.where(df[:, None] > 0, scale / df[:, None], 0)), 0, 63).astype(np.uint8)
        mn = np.clip(np.rint(np.where(dminf[:, None] > 0, -lo / dminf[:, None], 0)), 0, 63).astype(np.uint8)
        step = df[:, None] * sc
        q = np.rint(np.where(step[..., None] > 0, (b + (dminf[:, None] * mn)[..., None]) / step[..., None], 0))
    q = np.clip(q, 0, 15).astype(np.uint8)
    packed = np.zeros((b.shape[0], 12), np.uint8)
    packed[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), packed, qs], axis=1)
    return out.reshape(rows, cols // 256 * 144)


IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def quantize_iq4_xs(x: np.ndarray) -> np.ndarray:
    """IQ4_XS blocks of a (rows, cols) f32 matrix, cols a multiple of 256: a plain quantizer of
    our own (not llama.cpp's search), enough for tests: each 32-weight sub-block's scale is its
    largest magnitude over 127, as a multiple m (1..31, negated in odd sub-blocks) of the block's
    d = largest of them / 31; each weight the nearest of the 16 levels times d * m. Block: f16 d, u16 high scale bits, 4 bytes of low
    scale nibbles, 128 bytes of level nibbles (low nibbles weights 0-15 of a sub-block, high
    16-31); a stored scale is m + 32."""
    rows, cols = x.shape
    b = x.astype(np.float32).reshape(-1, 8, 32)
    sub = np.abs(b).max(axis=2) / 127.0                                   # (blocks, 8)
    d = (sub.max(axis=1) / 31.0).astype(np.float16)                       # (blocks,)
    df = d.astype(np.float32)
    m = np.clip(np.rint(np.divide(sub, df[:, None], out=np.zeros_like(sub), where=df[:, None] > 0)), 1, 31)
    m[:, 1::2] *= -1  # odd sub-blocks with negative scales (stored below 32), as real files have
    step = (df[:, None] * m)[..., None]                                   # (blocks, 8, 1)
    target = np.divide(b, step, out=np.zeros_like(b), where=step > 0)
    q = np.abs(target[..., None] - IQ4_LEVELS).argmin(axis=-1).astype(np.uint8)  # (blocks, 8, 32)
    ls = (m + 32).astype(np.uint16)                                       # (blocks, 8), 6 bits
    high = np.zeros(len(b), np.uint16)
    for j in range(8):
        high |= ((ls[:, j] >> 4) & 3) << (2 * j)
    low = (ls[:, 0::2] & 15) | ((ls[:, 1::2] & 15) << 4)                  # (blocks, 4)
    qs = (q[:, :, :16] | (q[:, :, 16:] << 4)).reshape(-1, 128)
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), high.view(np.uint8).reshape(-1, 2),
                          low.astype(np.uint8), qs], axis=1)
    return out.reshape(rows, cols // 256 * 136)


def encode(x: np.ndarray, qtype: str, fallback: str = "F32") -> tuple[np.ndarray, GT]:
    """A 2-D f32 matrix in the requested format, or in `fallback` (F32; F16 as llama.cpp's
    quantizer does at Q8_0; Q5_0 / Q5_1 / Q8_0, as it does for K-quant rows of 32-multiples)
    where its rows are not whole blocks."""
    if x.ndim == 2 and qtype == "Q4_K" and x.shape[1] % 256 == 0:
        return quantize_q4_k(x), GT.Q4_K
    if x.ndim == 2 and qtype in ("Q5_K", "Q6_K") and x.shape[1] % 256 == 0:
        from strata.pack import kquants  # noqa: PLC0415

        quantize = kquants.quantize_q5_k if qtype == "Q5_K" else kquants.quantize_q6_k
        return np.frombuffer(quantize(x), np.uint8).reshape(x.shape[0], -1), getattr(GT, qtype)
    if x.ndim == 2 and qtype == "IQ4_XS" and x.shape[1] % 256 == 0:
        return quantize_iq4_xs(x), GT.IQ4_XS
    if x.ndim >= 2 and qtype in ("Q8_0", "Q5_0", "Q5_1", "F16", "BF16") and x.shape[-1] % 32 == 0:
        t = getattr(GT, qtype)
        return quants.quantize(x, t), t
    if x.ndim >= 2 and qtype != "F32" and fallback == "F16":
        return quants.quantize(x, GT.F16), GT.F16
    if x.ndim >= 2 and qtype != "F32" and fallback in ("Q8_0", "Q5_0", "Q5_1") and x.shape[-1] % 32 == 0:
        return quants.quantize(x, getattr(GT, fallback)), getattr(GT, fallback)
    return np.ascontiguousarray(x, dtype=np.float32), GT.F32


def _reorder_v_tiled(x: np.ndarray, axis: int, nk: int, r: int, width: int) -> np.ndarray:
    """Value heads grouped by key head [k0: v0..v(r-1), k1: ...] -> tiled [v0 of every k, v1 ...]."""
    x = np.moveaxis(x, axis, 0)
    shape = x.shape
    y = x.reshape(nk, r, width, *shape[1:]).swapaxes(0, 1).reshape(shape)
    return np.moveaxis(y, 0, axis)


def converted_tensors(cfg: dict, hf: dict[str, np.ndarray], *, fused_qkvz: bool = False,
                      split_experts: bool = False) -> dict[str, np.ndarray]:
    """GGUF name -> f32 array, transformed as llama.cpp's converter does for the architecture.
    fused_qkvz: qwen3next's in_proj_qkvz kept whole as ssm_in (older converters); split_experts:
    one tensor per expert, blk.N.ffn_gate.E.weight (older files)."""
    mt = cfg["model_type"]
    arch = ARCH_NAMES[mt]
    L = cfg["num_hidden_layers"]
    out: dict[str, np.ndarray] = {"token_embd.weight": hf["embed_tokens.weight"]}
    plus_one = arch != "qwen3moe"

    def norm(w):
        return (w + np.float32(1.0)).astype(np.float32) if plus_one else w

    out["output_norm.weight"] = norm(hf["norm.weight"])
    if "lm_head.weight" in hf and not cfg.get("tie_word_embeddings"):
        out["output.weight"] = hf["lm_head.weight"]
    nk, nv = cfg.get("linear_num_key_heads", 0), cfg.get("linear_num_value_heads", 0)
    dk, dv = cfg.get("linear_key_head_dim", 0), cfg.get("linear_value_head_dim", 0)
    r = nv // nk if nk else 1
    tiled = arch == "qwen35moe" and nk != nv
    for l in range(L):
        p, b = f"layers.{l}.", f"blk.{l}."
        out[b + "attn_norm.weight"] = norm(hf[p + "input_layernorm.weight"])
        out[b + ("ffn_norm.weight" if arch == "qwen3moe" else "post_attention_norm.weight")] = norm(
            hf[p + "post_attention_layernorm.weight"])
        if p + "self_attn.q_proj.weight" in hf:
            a = p + "self_attn."
            for hn, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
                out[f"{b}{gn}.weight"] = hf[a + hn + ".weight"]
                if a + hn + ".bias" in hf:
                    out[f"{b}{gn}.bias"] = hf[a + hn + ".bias"]
            out[b + "attn_q_norm.weight"] = norm(hf[a + "q_norm.weight"])
            out[b + "attn_k_norm.weight"] = norm(hf[a + "k_norm.weight"])
        else:
            a = p + "linear_attn."
            if a + "in_proj_qkvz.weight" in hf and fused_qkvz:
                out[b + "ssm_in.weight"] = hf[a + "in_proj_qkvz.weight"]
                out[b + "ssm_ba.weight"] = hf[a + "in_proj_ba.weight"]
                conv = hf[a + "conv1d.weight"][:, 0, :]
                alog, dt = hf[a + "A_log"], hf[a + "dt_bias"]
                outp = hf[a + "out_proj.weight"]
            elif a + "in_proj_qkvz.weight" in hf:  # qwen3next: split the per-key-head groups by kind
                w = hf[a + "in_proj_qkvz.weight"]
                g = w.reshape(nk, 2 * dk + 2 * r * dv, -1)
                q, k = g[:, :dk], g[:, dk:2 * dk]
                v, z = g[:, 2 * dk:2 * dk + r * dv], g[:, 2 * dk + r * dv:]
                H = w.shape[1]
                out[b + "attn_qkv.weight"] = np.concatenate([q.reshape(-1, H), k.reshape(-1, H), v.reshape(-1, H)])
                out[b + "attn_gate.weight"] = z.reshape(-1, H)
                out[b + "ssm_ba.weight"] = hf[a + "in_proj_ba.weight"]
                conv = hf[a + "conv1d.weight"][:, 0, :]
                alog, dt = hf[a + "A_log"], hf[a + "dt_bias"]
                outp = hf[a + "out_proj.weight"]
            else:  # qwen3.5: separate projections; value heads reordered to tiled when nk != nv
                qkv = hf[a + "in_proj_qkv.weight"]
                zz, bb, aa = hf[a + "in_proj_z.weight"], hf[a + "in_proj_b.weight"], hf[a + "in_proj_a.weight"]
                conv = hf[a + "conv1d.weight"][:, 0, :]
                alog, dt = hf[a + "A_log"], hf[a + "dt_bias"]
                outp = hf[a + "out_proj.weight"]
                if tiled:
                    kd = nk * dk
                    qkv = np.concatenate([qkv[:2 * kd], _reorder_v_tiled(qkv[2 * kd:], 0, nk, r, dv)])
                    zz = _reorder_v_tiled(zz, 0, nk, r, dv)
                    bb, aa = _reorder_v_tiled(bb, 0, nk, r, 1), _reorder_v_tiled(aa, 0, nk, r, 1)
                    alog, dt = _reorder_v_tiled(alog, 0, nk, r, 1), _reorder_v_tiled(dt, 0, nk, r, 1)
                    conv = np.concatenate([conv[:2 * kd], _reorder_v_tiled(conv[2 * kd:], 0, nk, r, dv)])
                    outp = _reorder_v_tiled(outp, 1, nk, r, dv)
                out[b + "attn_qkv.weight"] = qkv
                out[b + "attn_gate.weight"] = zz
                out[b + "ssm_beta.weight"] = bb
                out[b + "ssm_alpha.weight"] = aa
            out[b + "ssm_conv1d.weight"] = conv
            out[b + "ssm_a"] = (-np.exp(alog)).astype(np.float32)
            out[b + "ssm_dt.bias"] = dt
            out[b + "ssm_norm.weight"] = hf[a + "norm.weight"]
            out[b + "ssm_out.weight"] = outp
        m = p + "mlp."
        if m + "gate.weight" in hf:
            out[b + "ffn_gate_inp.weight"] = hf[m + "gate.weight"]
            if m + "experts.gate_up_proj" in hf:
                gu = hf[m + "experts.gate_up_proj"]
                I = gu.shape[1] // 2
                out[b + "ffn_gate_exps.weight"], out[b + "ffn_up_exps.weight"] = gu[:, :I], gu[:, I:]
                out[b + "ffn_down_exps.weight"] = hf[m + "experts.down_proj"]
                if split_experts:
                    for kind in ("gate", "up", "down"):
                        stacked = out.pop(f"{b}ffn_{kind}_exps.weight")
                        for e in range(stacked.shape[0]):
                            out[f"{b}ffn_{kind}.{e}.weight"] = stacked[e]
            else:
                E = cfg.get("num_experts", cfg.get("num_local_experts"))
                for kind in ("gate", "up", "down"):
                    if split_experts:
                        for e in range(E):
                            out[f"{b}ffn_{kind}.{e}.weight"] = hf[f"{m}experts.{e}.{kind}_proj.weight"]
                    else:
                        out[f"{b}ffn_{kind}_exps.weight"] = np.stack(
                            [hf[f"{m}experts.{e}.{kind}_proj.weight"] for e in range(E)])
            if m + "shared_expert.gate_proj.weight" in hf:
                out[b + "ffn_gate_shexp.weight"] = hf[m + "shared_expert.gate_proj.weight"]
                out[b + "ffn_up_shexp.weight"] = hf[m + "shared_expert.up_proj.weight"]
                out[b + "ffn_down_shexp.weight"] = hf[m + "shared_expert.down_proj.weight"]
                out[b + "ffn_gate_inp_shexp.weight"] = hf[m + "shared_expert_gate.weight"][0]
        else:
            for kind in ("gate", "up", "down"):
                out[f"{b}ffn_{kind}.weight"] = hf[f"{m}{kind}_proj.weight"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def add_tokenizer(w: GGUFWriter, tokenizer_json: str, chat_template: str | None = None, pre: str = "qwen2") -> None:
    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    vocab = dict(tj["model"]["vocab"])
    added = {t["content"]: t for t in tj.get("added_tokens", [])}
    for t in added.values():
        vocab[t["content"]] = t["id"]
    n = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [5] * n  # unused
    for tok, i in vocab.items():
        tokens[i] = tok
        types[i] = (3 if added[tok].get("special") else 4) if tok in added else 1
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if chat_template is not None:
        w.add_chat_template(chat_template)


def write_gguf(hf_folder: str, path: str, *, qtype: str = "F32", tokenizer_json: str | None = None,
               chat_template: str | None = None, split_max_tensors: int = 0, expert_qtype: str | None = None,
               dequantized: bool = False, fused_qkvz: bool = False, split_experts: bool = False,
               keep_f32: str | None = None, fallback: str = "F32", qtype_for: dict[str, str] | None = None) -> str:
    """Writes hf_folder as a GGUF (all 2-D matrices in qtype where rows are whole blocks).
    keep_f32: a regex; tensors whose GGUF name it matches stay F32 (llama.cpp's quantizer keeps
    the router, ffn_gate_inp, in F32). fallback: the format of matrices whose rows are not whole
    blocks ("F16" is what llama.cpp's quantizer writes for them at Q8_0, "Q5_0" at Q4_K). qtype_for: {regex: qtype}
    for mixes such as Q4_K_M (Q4_K, with Q6_K where the regex matches the GGUF name).

    dequantized=True writes the same model with every tensor replaced by gguf-py's dequantization
    of its blocks, in F32: the reference a quantized file must match."""
    cfg, hf = load_hf(hf_folder)
    arch = ARCH_NAMES[cfg["model_type"]]
    tensors = converted_tensors(cfg, hf, fused_qkvz=fused_qkvz, split_experts=split_experts)
    w = GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    L = cfg["num_hidden_layers"]
    w.add_block_count(L)
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(cfg["hidden_size"])
    if cfg.get("intermediate_size"):
        w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    rp = cfg.get("rope_parameters") or {}
    w.add_rope_freq_base(float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0))))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_expert_count(cfg.get("num_experts", cfg.get("num_local_experts")))
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if arch != "qwen3moe":
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
        w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
        w.add_ssm_state_size(cfg["linear_key_head_dim"])
        w.add_ssm_group_count(cfg["linear_num_key_heads"])
        w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
        w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
        # gguf-py 0.19 has no add_recurrent_layers yet: the key llama.cpp reads
        w.add_array(f"{arch}.attention.recurrent_layers", [t == "linear_attention" for t in cfg["layer_types"]])
        w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
        partial = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
        w.add_rope_dimension_count(int(hd * partial))
    if tokenizer_json:
        add_tokenizer(w, tokenizer_json, chat_template)
    for name, x in tensors.items():
        q = (expert_qtype or qtype) if ("_exps." in name or re.match(r"blk\.\d+\.ffn_(gate|up|down)\.\d+\.", name)) else qtype
        for pattern, qt in (qtype_for or {}).items():
            if re.search(pattern, name):
                q = qt
        if keep_f32 and re.search(keep_f32, name):
            q = "F32"
        if x.ndim == 3:  # stacked experts: every [rows, cols] slab in the same format
            parts = [encode(x[e], q, fallback) for e in range(x.shape[0])]
            data, t = np.stack([p[0] for p in parts]), parts[0][1]
        else:
            data, t = encode(x, q, fallback) if x.ndim == 2 else (x, GT.F32)
        if dequantized and t != GT.F32:
            data, t = np.asarray(quants.dequantize(data, t), np.float32).reshape(x.shape), GT.F32
        w.add_tensor(name, data, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

"""A faster chunked gated delta rule for training (our own implementation; same inputs, outputs
and math as transformers' `torch_chunk_gated_delta_rule`, so a model trained with it exports the
same weights and computes the same function).

Why it is faster on long rows (transformers' PyTorch path ran at 57k tokens/s on 16k rows):
- the chunk length is 128 instead of 64, so the sequential scan over chunks is half as long;
- everything that does not depend on the carried state is computed for all chunks at once:
  the decays, the intra-chunk attention, and ONE batched triangular solve for both right-hand
  sides of the UT transform (values and decayed keys stacked along the last axis);
- the loop over chunks carries only the state: per chunk one fused `baddbmm` for the delta
  correction and one for the state update; the chunk outputs (read of the carried state plus the
  intra-chunk attention) are computed after the loop for all chunks in two batched products;
- per-chunk inputs are unbound once and chunk results collected in lists and stacked once, so
  autograd keeps no per-chunk slice reads or in-place slice writes (transformers writes
  `out[:, :, i] = ...`; each such write or `x[:, :, i]` read costs a full-size gradient copy
  or zero-fill per chunk in the backward).

Per chunk (length C) with carried state S (k_dim x v_dim), as in the DeltaNet/GDN papers:
  u  = (I + L)^-1 (beta * v),  w = (I + L)^-1 (beta * k * exp(gamma)),  L = strict-lower(beta k k^T * Gamma)
  v' = u - w S
  o  = (q * exp(gamma)) S + (q k^T * Gamma) v'
  S' = exp(gamma_C) S + (k * exp(gamma_C - gamma))^T v'
where gamma is the cumulative log decay inside the chunk and Gamma_ij = exp(gamma_i - gamma_j)
for j <= i (0 above the diagonal).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 128


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # the same normalisation as transformers / fla: x / sqrt(sum(x^2) + eps)
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size: int = CHUNK, initial_state=None,
                           output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                           **_unused):
    """query, key: (B, T, Hk, Dk); value: (B, T, Hv, Dv); g, beta: (B, T, Hv); initial_state:
    (B, Hv, Dk, Dv) or None. Returns (out (B, T, Hv, Dv) in query's dtype, final state or None).
    Computed in fp32 even under autocast: the state is carried across every chunk of the row,
    and bf16 products there would lose what the delta rule stores."""
    with torch.autocast(device_type=query.device.type, enabled=False):
        return _chunk_gated_delta_rule(query, key, value, g, beta, chunk_size, initial_state,
                                       output_final_state, use_qk_l2norm_in_kernel)


def _chunk_gated_delta_rule(query, key, value, g, beta, chunk_size, initial_state, output_final_state,
                            use_qk_l2norm_in_kernel):
    out_dtype = query.dtype
    b, t, hk, dk = key.shape
    hv, dv = value.shape[-2:]
    if hk != hv:  # grouped value heads: each q/k head serves hv // hk consecutive value heads
        query = query.repeat_interleave(hv // hk, dim=2)
        key = key.repeat_interleave(hv // hk, dim=2)
    q, k, v, beta, g = (x.transpose(1, 2).float() for x in (query, key, value, beta, g))
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    q = q * dk ** -0.5

    c = chunk_size
    pad = (c - t % c) % c
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        beta, g = (F.pad(x, (0, pad)) for x in (beta, g))
    n = (t + pad) // c
    q, k, v = (x.reshape(b, hv, n, c, x.shape[-1]) for x in (q, k, v))
    beta, g = beta.reshape(b, hv, n, c), g.reshape(b, hv, n, c)

    gamma = g.cumsum(-1)                                   # (B, H, N, C), all <= 0
    upper = torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1)
    decay = (gamma.unsqueeze(-1) - gamma.unsqueeze(-2)).masked_fill(upper, float("-inf")).exp()
    k_beta = k * beta.unsqueeze(-1)
    # UT transform: one triangular solve for both right-hand sides (the solver ignores the
    # diagonal and the masked upper triangle is 0)
    system = (k_beta @ k.transpose(-1, -2)) * decay
    rhs = torch.cat((v * beta.unsqueeze(-1), k_beta * gamma.exp().unsqueeze(-1)), dim=-1)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u, w = solved[..., :dv], solved[..., dv:]
    attn = (q @ k.transpose(-1, -2)) * decay               # intra-chunk attention, causal incl. diagonal
    q_dec = q * gamma.exp().unsqueeze(-1)
    k_dec = k * (gamma[..., -1:] - gamma).exp().unsqueeze(-1)
    chunk_decay = gamma[..., -1].exp()                     # (B, H, N)

    # the sequential part: only the carried state, flattened to (B*H, Dk, Dv) for baddbmm
    bh = b * hv
    u, w = u.reshape(bh, n, c, dv), w.reshape(bh, n, c, dk)
    k_dec_t = k_dec.reshape(bh, n, c, dk).transpose(-1, -2)
    chunk_decay = chunk_decay.reshape(bh, n, 1, 1)
    if initial_state is None:
        state = torch.zeros(bh, dk, dv, dtype=torch.float32, device=q.device)
    else:
        state = initial_state.float().reshape(bh, dk, dv)
    states, corrected = [], []
    # unbind once: indexing chunk i inside the loop would make autograd allocate and zero a
    # full-size gradient for every chunk (SelectBackward), unbind's backward stacks them once
    for u_i, w_i, k_i, decay_i in zip(u.unbind(1), w.unbind(1), k_dec_t.unbind(1), chunk_decay.unbind(1)):
        states.append(state)
        v_new = torch.baddbmm(u_i, w_i, state, alpha=-1.0)
        corrected.append(v_new)
        state = torch.baddbmm(state * decay_i, k_i, v_new)
    states = torch.stack(states, dim=1).reshape(b, hv, n, dk, dv)
    corrected = torch.stack(corrected, dim=1).reshape(b, hv, n, c, dv)
    out = q_dec @ states + attn @ corrected                 # (B, H, N, C, Dv)
    out = out.reshape(b, hv, n * c, dv)[:, :, :t].transpose(1, 2).contiguous().to(out_dtype)
    final = state.reshape(b, hv, dk, dv) if output_final_state else None
    return out, final


def install() -> None:
    """Make every Qwen3NextGatedDeltaNet run this function for its chunked (prefill/training) path.
    In transformers 5.17 and 5.24 the layer's forward calls the module-level name
    `torch_chunk_gated_delta_rule` (there is no per-instance attribute), so the name is replaced
    in the modeling module. Weights and the exported model do not depend on it."""
    from transformers.models.qwen3_next import modeling_qwen3_next as mq

    mq.torch_chunk_gated_delta_rule = chunk_gated_delta_rule

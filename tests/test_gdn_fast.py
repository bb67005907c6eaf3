"""train/gdn_fast.py (the chunked gated delta rule used for training) against transformers'
PyTorch reference: outputs, final state and every input gradient, in fp32, for several shapes,
chunk sizes, grouped value heads, an initial state, and lengths that are not a multiple of the
chunk; and that installing it makes a Qwen3Next model compute the same loss and gradients."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
mq = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))
import gdn_fast  # noqa: E402

REFERENCE = getattr(mq.torch_chunk_gated_delta_rule, "__wrapped__", mq.torch_chunk_gated_delta_rule)


def _reference(query, key, value, g, beta, **kw):
    # transformers 5.17 repeats grouped q/k heads before the call, 5.24 inside it: repeat here
    # so the reference sees equal head counts in both versions
    rep = value.shape[2] // key.shape[2]
    if rep > 1:
        query, key = query.repeat_interleave(rep, dim=2), key.repeat_interleave(rep, dim=2)
    return REFERENCE(query, key, value, g=g, beta=beta, **kw)


def _inputs(b, t, hk, hv, d, with_state, a_max, seed):
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    a = torch.rand(hv, generator=gen) * a_max + 0.01
    tensors = dict(
        query=rnd(b, t, hk, d), key=rnd(b, t, hk, d), value=rnd(b, t, hv, d),
        g=-a * torch.nn.functional.softplus(rnd(b, t, hv) + 1.0),
        beta=torch.rand(b, t, hv, generator=gen),
    )
    if with_state:
        tensors["initial_state"] = rnd(b, hv, d, d) * 0.3
    return {k: v.requires_grad_() for k, v in tensors.items()}


def _run(fn, inputs, weight_seed, **kw):
    out, state = fn(**inputs, output_final_state=True, use_qk_l2norm_in_kernel=True, **kw)
    gen = torch.Generator().manual_seed(weight_seed)
    loss = (out * torch.randn(out.shape, generator=gen)).sum() + (state * torch.randn(state.shape, generator=gen)).sum()
    grads = torch.autograd.grad(loss, list(inputs.values()))
    return [out, state, *grads]


@pytest.mark.parametrize("b,t,hk,hv,d,with_state,a_max,chunk", [
    (2, 300, 2, 4, 32, False, 16.0, 128),   # not a multiple of the chunk, grouped heads
    (1, 128, 2, 2, 16, True, 1.0, 128),     # exactly one chunk, slow decay, initial state
    (2, 517, 4, 8, 64, True, 2.0, 128),     # several chunks + a partial one, the model's head sizes
    (1, 77, 1, 2, 16, False, 0.5, 64),      # shorter than a chunk, transformers' chunk size
    (1, 200, 2, 2, 16, True, 4.0, 32),      # small chunks: many loop steps
])
def test_matches_transformers_reference(b, t, hk, hv, d, with_state, a_max, chunk):
    inputs = _inputs(b, t, hk, hv, d, with_state, a_max, seed=t)
    ref = _run(_reference, inputs, weight_seed=7)
    ours = _run(gdn_fast.chunk_gated_delta_rule, inputs, weight_seed=7, chunk_size=chunk)
    names = ["out", "final_state"] + ["d_" + k for k in inputs]
    assert ours[0].shape == ref[0].shape and ours[1].shape == ref[1].shape
    for name, got, want in zip(names, ours, ref):
        scale = want.abs().max().item()
        assert scale > 0, name
        torch.testing.assert_close(got, want, rtol=1e-4, atol=2e-5 * scale, msg=name)


def test_no_final_state_and_dtype_kept():
    inputs = _inputs(1, 40, 2, 2, 16, False, 1.0, seed=3)
    with torch.no_grad():
        out, state = gdn_fast.chunk_gated_delta_rule(**{k: v.bfloat16() for k, v in inputs.items()})
    assert state is None and out.dtype == torch.bfloat16 and out.shape == (1, 40, 2, 16)


def test_installed_in_a_qwen3next_model_gives_the_same_loss_and_gradients(monkeypatch):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    cfg = Qwen3NextConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16,
        intermediate_size=16, max_position_embeddings=512)
    torch.manual_seed(0)
    model = Qwen3NextForCausalLM(cfg).float()
    ids = torch.randint(0, 97, (2, 150))

    def loss_and_grads():
        model.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    monkeypatch.setattr(mq, "torch_chunk_gated_delta_rule", REFERENCE)
    want_loss, want_grads = loss_and_grads()
    gdn_fast.install()  # monkeypatch restores the module attribute afterwards
    assert mq.torch_chunk_gated_delta_rule is gdn_fast.chunk_gated_delta_rule
    got_loss, got_grads = loss_and_grads()
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-6)
    assert len(got_grads) == len(want_grads)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5 * max(want.abs().max().item(), 1e-3))

"""Quantized GGUF files on the webgpu backend (lavapipe in CI): tiny random qwen3_next and
qwen3_moe models in the mixes people download (Q4_K_M-like: Q4_K with Q6_K; Q5_K_M-like: Q5_K
with Q6_K; Q8_0; Q5_0 / Q5_1; IQ4_XS with a Q6_K head), loaded and decoded on the GPU. Each window row is bit-identical to
serial one-token decoding on the GPU with forced rejections, a row does not depend on the other
rows of its window, and logits and greedy tokens agree with the cpu backend."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import strata  # noqa: E402
from gguf_helpers import write_gguf  # noqa: E402
from hf_models import make_hf_model  # noqa: E402
from webgpu_helpers import assert_windows_equal_serial, gpu, gpu_with_env, open_test_device, prefilled  # noqa: E402

# Both backends quantize each activation row to the same int8 blocks (bit for bit where the
# inputs are equal) and sum integer block products exactly; they differ only in whether the f32
# `fma` of each block's scale product is fused (lavapipe's is not), so a row's logits differ by a
# few 1e-7 relative (max |gpu - cpu| / max |cpu|, measured on lavapipe: at most 3.5e-7 per row).
# Such a difference upstream can move an activation across an int8 rounding boundary, and one
# code that rounds the other way moves the row by ~1/127 of a block's share: measured 2.6e-4 on
# one row of 65 (qwen3_moe Q5_0+Q5_1). So: the median row within ROW_REL, every row within
# FLIP_REL (~4x the measured flip).
ROW_REL = 1e-6
FLIP_REL = 1e-3

# rows of 256 weights everywhere, so that every matrix can be a K-quant (as tests/test_gguf_engine.py)
WIDE = dict(hidden_size=256, head_dim=64, moe_intermediate_size=256, intermediate_size=256)
WIDE_LINEAR = dict(shared_expert_intermediate_size=256, linear_key_head_dim=64, linear_value_head_dim=64)

# what llama.cpp's Q4_K_M / Q5_K_M give the tensors that matter most (attention v, ffn_down, the
# output head) in our tiny models; the router stays F32 as llama.cpp keeps it
MIXES = {
    "Q4_K_M": dict(qtype="Q4_K", qtype_for={r"attn_v|ffn_down|^output\.": "Q6_K"}),
    "Q5_K_M": dict(qtype="Q5_K", qtype_for={r"attn_v|ffn_down|^output\.": "Q6_K"}),
    "Q8_0": dict(qtype="Q8_0"),
    "Q5_0+Q5_1": dict(qtype="Q5_0", expert_qtype="Q5_1"),
    "IQ4_XS": dict(qtype="IQ4_XS", qtype_for={r"^output\.": "Q6_K"}),
}
CASES = [("qwen3_next", "Q4_K_M"), ("qwen3_moe", "Q4_K_M"), ("qwen3_next", "Q5_K_M"), ("qwen3_next", "Q8_0"),
         ("qwen3_moe", "Q5_0+Q5_1"), ("qwen3_next", "IQ4_XS"), ("qwen3_moe", "IQ4_XS")]
# IQ4_XS on qwen3_moe agrees with the cpu backend except where an activation code flips (above):
# one row of 29 in three of four seeds, by 1.3e-3 to 1.8e-2 (lavapipe), more than FLIP_REL, as
# IQ4_XS's levels reach 127 where a K-quant's codes stop at 15 or 63. Its cross-backend check is
# on qwen3_next; qwen3_moe's IQ4_XS file is checked on the GPU alone (window rows, rejections).
MATCH_CASES = [c for c in CASES if c != ("qwen3_moe", "IQ4_XS")]
PROMPT = [3, 14, 15, 92, 65, 35]


@pytest.fixture(scope="module", autouse=True)
def adapter():
    open_test_device()  # skips the module when this machine has no WebGPU adapter


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    root = tmp_path_factory.mktemp("webgpu_gguf")
    out = {}
    for arch, mix in CASES:
        kw = dict(WIDE)
        kw.update({"norm_topk_prob": True} if arch == "qwen3_moe" else WIDE_LINEAR)
        folder, _ = make_hf_model(str(root / f"hf-{arch}"), arch, seed=4, **kw)
        out[(arch, mix)] = write_gguf(folder, str(root / f"{arch}-{mix}.gguf"), keep_f32=r"ffn_gate_inp",
                                      **MIXES[mix])
    return out


def _types(path):
    from strata.gguf import open_gguf

    return {t.type for t in open_gguf(path).tensors.values()}


@pytest.mark.parametrize("arch,mix", MATCH_CASES)
def test_quantized_logits_match_cpu_backend(ggufs, arch, mix):
    path = ggufs[(arch, mix)]
    want = {"Q4_K_M": {"Q4_K", "Q6_K"}, "Q5_K_M": {"Q5_K", "Q6_K"}, "Q8_0": {"Q8_0"}, "Q5_0+Q5_1": {"Q5_0", "Q5_1"},
            "IQ4_XS": {"IQ4_XS", "Q6_K"}}
    assert want[mix] <= _types(path)
    ids = np.random.default_rng(0).integers(0, 96, 10)
    cpu = strata.load(path, threads=1)
    dev = gpu(path)
    assert dev.backend == "webgpu"
    rel = []
    for window in (ids, [7, 8, 9]):
        ref, out = np.array(cpu.run(window)), np.array(dev.run(window))
        rel += list(np.abs(out - ref).max(axis=1) / np.abs(ref).max())
        cpu.commit(len(window))
        dev.commit(len(window))
    assert np.median(rel) <= ROW_REL and max(rel) <= FLIP_REL, rel


@pytest.mark.parametrize("arch,mix", [("qwen3_next", "Q4_K_M"), ("qwen3_moe", "Q5_0+Q5_1"), ("qwen3_moe", "IQ4_XS")])
def test_quantized_window_rows_equal_serial_decode_with_rejections(ggufs, arch, mix):
    path = ggufs[(arch, mix)]
    serial, windowed = prefilled(PROMPT, gpu(path), gpu(path))
    assert_windows_equal_serial(serial, windowed, [([10, 11, 12, 13], 2), ([20, 21, 22], 1), ([30, 31, 32, 33, 34], 5), ([40, 41], 1)])


def test_quantized_rows_do_not_depend_on_the_other_rows(ggufs):
    """Row i of a window equals row i of another window with the same prefix and other rows
    after it (up to 16 rows)."""
    path = ggufs[("qwen3_next", "Q4_K_M")]
    eng = strata.load(path, threads=1, backend="webgpu")
    eng.run(PROMPT)
    eng.commit(len(PROMPT))
    state = eng.save_state()
    rng = np.random.default_rng(5)
    for T in (16, 9):
        window = rng.integers(0, 96, T).tolist()
        full = np.array(eng.run(window))
        eng.commit(1)
        eng.load_state(state)
        i = int(rng.integers(1, T))
        part = np.array(eng.run(window[:i + 1] + rng.integers(0, 96, 3).tolist()))
        eng.commit(1)
        eng.load_state(state)
        np.testing.assert_array_equal(part[: i + 1], full[: i + 1], err_msg=f"T={T} rows 0..{i}")


def test_quantized_greedy_tokens_agree_with_cpu(ggufs):
    path = ggufs[("qwen3_next", "Q4_K_M")]
    tokens = []
    for backend in ("cpu", "webgpu"):
        eng = strata.load(path, threads=1, backend=backend)
        logits = np.array(eng.run(PROMPT))
        eng.commit(len(PROMPT))
        out, tok = [], int(np.argmax(logits[-1]))
        for _ in range(12):
            out.append(tok)
            tok = int(np.argmax(np.array(eng.run([tok]))[0]))
            eng.commit(1)
        tokens.append(out)
    assert tokens[0] == tokens[1]


def test_strata_run_with_a_quantized_gguf_on_webgpu(tmp_path, monkeypatch, capsys):
    """`strata run -m file.gguf --backend webgpu`: the same tokens as --backend cpu."""
    import io
    import json
    import sys

    from strata.cli import app
    from strata.cli.runner import run_app
    from test_gguf_tokenizer import STRATA_TINY

    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    kw = dict(WIDE, **WIDE_LINEAR)
    folder, _ = make_hf_model(str(tmp_path / "hf"), "qwen3_next", seed=1, vocab_size=8192, **kw)
    path = write_gguf(folder, str(tmp_path / "m.gguf"), tokenizer_json=STRATA_TINY, keep_f32=r"ffn_gate_inp",
                      **MIXES["Q4_K_M"])
    tokens = {}
    for backend in ("cpu", "webgpu"):
        with pytest.raises(SystemExit) as info:
            run_app(app, ["run", "--model", path, "--prompt", "def add(a, b):", "--max-new", "8", "--json",
                          "--threads", "1", "--backend", backend])
        out, err = capsys.readouterr()
        assert info.value.code == 0, err
        tokens[backend] = json.loads(out)["tokens"]
    assert tokens["webgpu"] == tokens["cpu"] and len(tokens["cpu"]) == 8


def test_iq4_xs_rows_do_not_depend_on_the_other_rows(ggufs):
    """IQ4_XS (shaders/matmul_quant.wgsl's FMT 6) keeps a row's bits whatever the window's length."""
    path = ggufs[("qwen3_moe", "IQ4_XS")]
    eng = gpu(path)
    eng.run(PROMPT)
    eng.commit(len(PROMPT))
    state = eng.save_state()
    window = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    full = np.array(eng.run(window))
    eng.commit(1)
    for T in (1, 3, 8):
        eng.load_state(state)
        np.testing.assert_array_equal(np.array(eng.run(window[:T])), full[:T], err_msg=f"T={T}")
        eng.commit(1)


def test_streamed_pack_of_quantized_experts_equals_the_gguf_on_webgpu(ggufs, tmp_path):
    """`strata convert file.gguf PACK` keeps the blocks per expert; streamed through a cache that
    holds a fraction of a layer (slots refilled, their device copies rewritten when reads land),
    the webgpu logits equal the resident .gguf's on webgpu bit for bit, with drafted windows too."""
    from strata.pack import convert, read_pack

    src = ggufs[("qwen3_next", "Q4_K_M")]
    pack = str(tmp_path / "m.strata")
    convert(src, pack)
    info = read_pack(pack)
    seq = np.random.default_rng(2).integers(0, 96, 10).tolist()

    def decode(eng):
        out, i = [], 0
        while i < len(seq):  # windows of root + 3 tokens, the last one wrong: commit 3
            window = seq[i:i + 3] + [(seq[i + 3] + 1) % 96] if i + 3 < len(seq) else seq[i:i + 1]
            rows = np.array(eng.run(window))
            keep = 3 if len(window) == 4 else 1
            out.extend(rows[:keep])
            eng.commit(keep)
            i += keep
        return np.stack(out)

    ref = decode(strata.load(src, threads=1, backend="webgpu"))
    k = strata.load(src, threads=1).config["top_k"]
    eng = strata.load(pack, threads=1, backend="webgpu", expert_cache=k * info.ex["stride"])
    got = decode(eng)
    np.testing.assert_array_equal(got, ref)
    # the windows (the first pass's too) ran their acquired experts through matmul_quant_routed,
    # from device slots written when the reads landed
    c = dict(eng.backend_counters())
    assert c["moe_streamed_on_device"] > 0 and c["slot_uploads_at_fill"] > 0 and c["slot_uploads_at_use"] == 0


@pytest.mark.parametrize("arch,mix", [("qwen3_moe", "Q4_K_M"), ("qwen3_next", "Q8_0"), ("qwen3_moe", "Q5_0+Q5_1")])
def test_quantized_experts_chosen_on_the_device_change_no_bit(ggufs, arch, mix, monkeypatch):
    """Resident quantized experts run routed on the GPU (matmul_quant_routed: no readback of the
    router's ids, so one submit fewer per MoE layer, and the GGUF head orders of a qwen3next file's
    GDN projections are put right by copies on the GPU: a window is one submit); every
    value equals the host-grouped path's (STRATA_WEBGPU_FUSE=0), and the telemetry names the same
    experts."""
    path = ggufs[(arch, mix)]
    device, host = prefilled(PROMPT, gpu(path), gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_FUSE", "0"))
    for window, keep in [([10, 11, 12, 13], 2), ([20], 1), ([30, 31, 32], 3)]:
        before, host_before = device.backend_counters(), host.backend_counters()
        np.testing.assert_array_equal(np.array(device.run(window)), np.array(host.run(window)))
        after, host_after = device.backend_counters(), host.backend_counters()
        routed = after["moe_on_device"] - before["moe_on_device"]
        assert routed == 4, window  # every layer of these models is MoE
        submits, host_submits = after["submits"] - before["submits"], host_after["submits"] - host_before["submits"]
        assert submits == host_submits - routed, window
        assert submits == 1, window
        td, th = device.last_telemetry(), host.last_telemetry()
        for key in ("union_per_layer", "expert_ids", "weight_bytes"):
            assert td[key] == th[key], key
        device.commit(keep)
        host.commit(keep)
    assert host.backend_counters()["moe_on_device"] == 0


@pytest.mark.parametrize("fmt", ["Q8_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"])
def test_activation_blocks_and_integer_dots_equal_the_cpus(fmt):
    """Where no f32 sum runs over blocks in one float lane (a 32-block format with at most four
    blocks per row, a K-quant with one), the GPU's matmul equals the cpu backend's bit for bit:
    the int8 codes and scales of each activation block (correctly rounded divisions, f16 rounding),
    the integer dot products, the scale products and the CPU's lane tree. Rows with edge cases:
    zeros, values so small that the f16 scale is subnormal, large values, the largest magnitude
    negative and repeated, halves that round to even."""
    from strata import _engine
    from test_backend_ops import make_weights

    ops = _engine.ops
    block = 256 if fmt.endswith("_K") else 32
    rng = np.random.default_rng(11)
    for cols in ([block] if block == 256 else [32, 64, 128]):
        raw, _ = make_weights(rng, fmt, 40, cols)
        x = rng.standard_normal((16, cols)).astype(np.float32)
        x[1] = 0.0
        x[2] *= 1e-4
        x[3] *= 3e4
        x[4, :] = np.float32(0.25)
        x[4, 5] = x[4, 9] = np.float32(-127.0)  # the first of largest magnitude decides the sign
        # scale 1 in every block (largest magnitude 127, negative, first), the rest halfway
        # between two codes: round half to even decides them
        x[5] = np.round(rng.standard_normal(cols) * 20).clip(-100, 100) + np.float32(0.5)
        x[5, ::32] = np.float32(-127.0)
        x[6] *= np.float32(1e-37)
        want = ops.matmul("cpu", x, raw, fmt, 40, cols)
        got = ops.matmul("webgpu", x, raw, fmt, 40, cols)
        np.testing.assert_array_equal(got, want, err_msg=f"{fmt} cols={cols}")


@pytest.mark.parametrize("arch,mix", [("qwen3_next", "Q4_K_M"), ("qwen3_moe", "Q5_0+Q5_1")])
def test_gathered_quantized_matmuls_change_no_bit(ggufs, arch, mix, monkeypatch):
    """The block-format jobs of one matmul call over one x (q/k/v, the shared expert's gate and
    up) run as one matmul_quant_gathered dispatch over one quantize_rows, the f32 router and
    shared gate as one matmul_f32_gathered: every logit equals the one-dispatch-per-job path's (STRATA_WEBGPU_QUANT_GATHER=0) bit for bit, with fewer
    dispatches per window."""
    path = ggufs[(arch, mix)]
    gathered, single = prefilled(PROMPT, gpu(path), gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_QUANT_GATHER", "0"))
    for window, keep in [([10, 11, 12, 13], 2), ([20], 1), ([30, 31, 32], 3)]:
        before, single_before = gathered.backend_counters()["dispatches"], single.backend_counters()["dispatches"]
        np.testing.assert_array_equal(np.array(gathered.run(window)), np.array(single.run(window)))
        fewer = (single.backend_counters()["dispatches"] - single_before) - (
            gathered.backend_counters()["dispatches"] - before)
        # per layer at least one (q/k/v or gate/up); qwen3_next: also its f32 router with the shared gate
        assert fewer >= (8 if arch == "qwen3_next" else 4), (window, fewer)
        gathered.commit(keep)
        single.commit(keep)


@pytest.mark.parametrize("arch,mix", [("qwen3_next", "Q4_K_M"), ("qwen3_moe", "Q5_0+Q5_1"), ("qwen3_next", "Q8_0")])
def test_producers_that_quantize_their_rows_change_no_bit(ggufs, arch, mix, monkeypatch):
    """Once a block-format matmul has quantized an op's output, that op (the norms, the residual
    add with the next norm, the GDN output's gated norm, SwiGLU; the routed experts' SwiGLU
    always) quantizes its rows as it
    writes them (norm_quant.wgsl, STRATA_WEBGPU_QUANT_FOLD=1) and the matmul, or the routed
    experts, take those codes instead of a quantize_rows dispatch: every logit equals the unfolded
    path's (STRATA_WEBGPU_QUANT_FOLD=0) bit for bit, with fewer dispatches per window, one submit."""
    path = ggufs[(arch, mix)]
    # (the MoE combine folds into the next norm only where that norm does not quantize: the plain
    # engine would fold it and the other not; STRATA_WEBGPU_FOLD=0 keeps this count about quantizing)
    monkeypatch.setenv("STRATA_WEBGPU_FOLD", "0")
    folded = gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_QUANT_FOLD", "1")
    folded, plain = prefilled(PROMPT, folded, gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_QUANT_FOLD", "0"))
    # the prefill taught every producer (its MoE layers run on the device too: an engine's first
    # pass has its scratch blocks attached), so the first window folds as much as the later ones
    for window, keep in [([10, 11, 12, 13], 2), ([20], 1), ([30, 31, 32], 3), ([40, 41], 1)]:
        before, plain_before = folded.backend_counters(), plain.backend_counters()
        np.testing.assert_array_equal(np.array(folded.run(window)), np.array(plain.run(window)))
        after, plain_after = folded.backend_counters(), plain.backend_counters()
        fewer = (plain_after["dispatches"] - plain_before["dispatches"]) - (after["dispatches"] - before["dispatches"])
        # per layer (4): the input norm's, the post-attention norm's (one for the shared and the
        # routed experts) and the routed SwiGLU's quantize_rows; then the final norm's
        assert fewer >= 4 * 3 + 1, (window, fewer)
        assert after["submits"] - before["submits"] == 1, window
        folded.commit(keep)
        plain.commit(keep)


@pytest.mark.parametrize("mix,folds", [("Q4_K_M", True), ("Q8_0", False)])
def test_producers_fold_by_default_for_the_k_quants_only(ggufs, mix, folds, monkeypatch):
    """Unset, STRATA_WEBGPU_QUANT_FOLD folds the 256-value (K-quant) formats, where it paid on the
    H200, and not the 32-value ones: the default window dispatches exactly as =1 does for Q4_K_M
    and as =0 does for Q8_0, with the same logits as both."""
    path = ggufs[("qwen3_next", mix)]
    monkeypatch.delenv("STRATA_WEBGPU_QUANT_FOLD", raising=False)
    default = gpu(path)
    on = gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_QUANT_FOLD", "1")
    off = gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_QUANT_FOLD", "0")
    engines = prefilled(PROMPT, default, on, off)
    for window, keep in [([10, 11, 12, 13], 2), ([20], 1), ([30, 31, 32], 3)]:
        before = [e.backend_counters()["dispatches"] for e in engines]
        logits = [np.array(e.run(window)) for e in engines]
        spent = [e.backend_counters()["dispatches"] - b for e, b in zip(engines, before)]
        np.testing.assert_array_equal(logits[0], logits[1])
        np.testing.assert_array_equal(logits[0], logits[2])
        assert spent[1] < spent[2], (window, spent)  # folding saves dispatches on both formats
        assert spent[0] == (spent[1] if folds else spent[2]), (window, spent)
        for e in engines:
            e.commit(keep)


@pytest.mark.parametrize("norm_wg", ["", "64"], ids=["norm-wg-256", "norm-wg-64"])
@pytest.mark.parametrize("mix", ["Q4_K_M", "Q8_0"])
def test_producers_quantize_wide_rows_as_quantize_rows_does(tmp_path, mix, norm_wg, monkeypatch):
    """Rows of 2048 (hidden) and 512 (expert width) values: the producers map 32 or 8 values to a
    thread (a whole 32-value sum in one thread, or a tree over threads), unlike quantize_rows'
    4 or 1; the logits still equal the unfolded path's bit for bit, with the hidden-size norms in
    workgroups of 256 (the default) or 64 (STRATA_WEBGPU_NORM_WG), which both paths then take."""
    if norm_wg:
        monkeypatch.setenv("STRATA_WEBGPU_NORM_WG", norm_wg)
    kw = dict(hidden_size=2048, head_dim=64, num_hidden_layers=2, num_experts=4, moe_intermediate_size=512,
              shared_expert_intermediate_size=512, linear_key_head_dim=64, linear_value_head_dim=64)
    folder, _ = make_hf_model(str(tmp_path / "hf"), "qwen3_next", seed=5, **kw)
    path = write_gguf(folder, str(tmp_path / f"wide-{mix}.gguf"), keep_f32=r"ffn_gate_inp", **MIXES[mix])
    folded = gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_QUANT_FOLD", "1")
    folded, plain = prefilled(PROMPT, folded, gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_QUANT_FOLD", "0"))
    for window, keep in [([10, 11, 12], 2), ([20], 1), ([30, 31], 2)]:
        before = folded.backend_counters()["dispatches"]
        plain_before = plain.backend_counters()["dispatches"]
        np.testing.assert_array_equal(np.array(folded.run(window)), np.array(plain.run(window)))
        fewer = (plain.backend_counters()["dispatches"] - plain_before) - (folded.backend_counters()["dispatches"] - before)
        assert fewer > 0, window
        folded.commit(keep)
        plain.commit(keep)

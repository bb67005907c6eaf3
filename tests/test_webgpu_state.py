"""Model state on the GPU (lavapipe in CI): the webgpu backend keeps the KV cells, the GDN
recurrence and conv history, and every activation of a window on the device. Commit, eager and
lazy folds, save/load through the state blob and reset all act there; these tests check each
against serial decoding or the CPU backend, and that a window goes back to the host only
where the engine reads: the logits, and the router's choices per MoE layer only where the host
groups rows (f32 experts, STRATA_WEBGPU_FUSE=0); resident half-precision experts are chosen on
the GPU."""
from __future__ import annotations

import re

import numpy as np

import pytest

import strata
from strata.testing.devmodel import write_random_model
from webgpu_helpers import assert_windows_equal_serial, gpu, gpu_with_env, open_test_device, prefilled

# max |gpu - cpu| relative to max |cpu| logits (test_webgpu_engine measures ~3e-6 on lavapipe)
LOGITS_REL = 3e-5
PROMPT = [3, 14, 15, 92, 65, 35]
WINDOWS = [([10, 11, 12, 13], 2), ([20, 21, 22], 1), ([30, 31, 32, 33, 34], 5), ([40, 41], 1)]


@pytest.fixture(scope="module", autouse=True)
def adapter():
    open_test_device()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_random_model(tmp_path_factory.mktemp("webgpu_state") / "m", "qwen3_next", seed=5)


def decode(eng, windows=WINDOWS):
    """Runs windows with forced rejections; returns the kept rows' logits."""
    out = []
    for window, keep in windows:
        logits = eng.run(window)
        eng.commit(keep)
        out.extend(np.array(logits[t]) for t in range(keep))
    return out


def same_windows(a, b):
    """Runs WINDOWS on both engines (commit after each) and checks their logits bit for bit."""
    for window, keep in WINDOWS:
        np.testing.assert_array_equal(a.run(window), b.run(window), err_msg=f"window {window}")
        a.commit(keep)
        b.commit(keep)


def test_lazy_fold_rows_equal_serial_decode(model):
    serial, windowed = gpu(model), gpu(model, fold="lazy")
    assert windowed.fold == "lazy"
    for eng in (serial, windowed):
        eng.run(PROMPT)
        eng.commit(len(PROMPT))
    assert_windows_equal_serial(serial, windowed, WINDOWS)


@pytest.mark.parametrize("fold", ["eager", "lazy"])
def test_save_load_continues_bit_identically(model, fold):
    a = gpu(model, fold=fold)
    a.run(PROMPT)
    a.commit(len(PROMPT))
    decode(a, WINDOWS[:2])  # a lazy fold is pending here: save must flush it first
    blob = a.save_state()
    rest = decode(a, WINDOWS[2:])
    b = gpu(model, fold=fold)
    b.load_state(blob)
    for x, y in zip(decode(b, WINDOWS[2:]), rest):
        np.testing.assert_array_equal(x, y)
    a.load_state(blob)  # back over state the GPU has moved past
    for x, y in zip(decode(a, WINDOWS[2:]), rest):
        np.testing.assert_array_equal(x, y)


def test_state_blob_holds_the_device_state(model):
    # a blob saved on the GPU, continued on the CPU: only right if save read the device copies
    g, c = gpu(model), strata.load(model, threads=1)
    for eng in (g, c):
        eng.run(PROMPT)
        eng.commit(len(PROMPT))
        decode(eng, WINDOWS[:2])
    c2 = strata.load(model, threads=1)
    c2.load_state(g.save_state())
    for x, y in zip(decode(c2, WINDOWS[2:]), decode(c, WINDOWS[2:])):
        assert np.abs(x - y).max() <= LOGITS_REL * np.abs(y).max()
    # and the other way: a CPU blob loaded into the GPU's state
    g2 = gpu(model)
    g2.load_state(c2.save_state())
    ref = strata.load(model, threads=1)
    ref.load_state(c2.save_state())
    for x, y in zip(decode(g2, [([7, 8], 2)]), decode(ref, [([7, 8], 2)])):
        assert np.abs(x - y).max() <= LOGITS_REL * np.abs(y).max()


def test_reset_clears_the_device_state(model):
    fresh = gpu(model)
    first = fresh.run(PROMPT)
    used = gpu(model)
    used.run(PROMPT)
    used.commit(len(PROMPT))
    decode(used)
    used.reset()
    np.testing.assert_array_equal(used.run(PROMPT), first)


def test_a_window_reads_back_once_per_moe_layer_and_for_the_logits(model):
    eng = gpu(model)
    eng.run(PROMPT)
    eng.commit(len(PROMPT))
    import json
    import os

    with open(os.path.join(model, "config.json")) as f:
        moe_layers = json.load(f)["num_hidden_layers"]  # every layer of this model is MoE
    for T in (1, 4):
        before = eng.backend_counters()
        eng.run(list(range(50, 50 + T)))
        eng.commit(1)
        after = eng.backend_counters()
        assert after["submits"] - before["submits"] <= moe_layers + 1
        assert after["dispatches"] > before["dispatches"]


def test_cpu_backend_counts_nothing(model):
    assert strata.load(model, threads=1).backend_counters() == {}


def test_long_prefill_cut_short_matches_cpu(model):
    # past kExactRows the run is a prefill pass; committing a prefix replays it on the exact
    # kernels (a second pass over device-resident state)
    ids = [int(i) for i in np.random.default_rng(2).integers(0, 500, 90)]
    g, c = gpu(model), strata.load(model, threads=1)
    for eng in (g, c):
        eng.run(ids)
        eng.commit(70)
    x, y = g.run([5, 6]), c.run([5, 6])
    assert np.abs(x - y).max() <= LOGITS_REL * np.abs(y).max()


@pytest.mark.parametrize("T", [6, 90])
def test_a_first_pass_outside_the_arena_stays_on_the_device(bf16_model, T):
    # an engine's first pass has no scratch arena yet (it grows to the pass's high-water mark
    # afterwards): its activations go to blocks of their own, attached like the arena, so the
    # pass is one waiting submit with the experts chosen on the device, and its logits are the
    # arena pass's, bit for bit
    import json
    import os

    with open(os.path.join(bf16_model, "config.json")) as f:
        moe_layers = json.load(f)["num_hidden_layers"]  # every layer of this model is MoE
    ids = [int(i) for i in np.random.default_rng(4).integers(0, 500, T)]
    eng = gpu(bf16_model)
    before = eng.backend_counters()
    first = np.array(eng.run(ids))
    after = eng.backend_counters()
    assert after["submits"] - before["submits"] == 1
    assert after["moe_on_device"] - before["moe_on_device"] == moe_layers
    eng.reset()
    np.testing.assert_array_equal(eng.run(ids), first)  # the arena now holds the pass


@pytest.mark.parametrize("options", [dict(readahead=True), dict(routing="protect=1,bonus=8"),
                                     dict(readahead=True, routing="root-readahead")])
def test_streamed_experts_with_readahead_and_cache_aware_routing_match_cpu(model, tmp_path, options):
    # the host reads the read-ahead router's choices and, with cache-aware routing, the logits
    # and writes the weights it chose: each a to_host / from_host of the device arrays
    from strata import pack

    dst = str(tmp_path / "m.strata")
    pack.convert(model, dst)
    g = pack.load_pack(dst, threads=1, backend="webgpu", expert_cache="0.5", **options)
    c = pack.load_pack(dst, threads=1, expert_cache="0.5", **options)
    assert g.backend == "webgpu"
    for window, keep in [(PROMPT, len(PROMPT))] + WINDOWS:
        x, y = g.run(window), c.run(window)
        assert np.abs(x - y).max() <= LOGITS_REL * np.abs(y).max()
        g.commit(keep)
        c.commit(keep)


@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory):
    return write_random_model(tmp_path_factory.mktemp("webgpu_bf16") / "m", "qwen3_next", seed=6, dtype="bfloat16")


def test_grouped_matmuls_change_no_bit(bf16_model, monkeypatch):
    # the backend gathers consecutive half-precision jobs into one dispatch (every selected
    # expert's gate and up, then their down projections, router + shared expert, q/k/v), runs
    # the GDN reorderings as one copy_many and each residual add with the next norm; each value
    # must equal the unfused ops' (STRATA_WEBGPU_FUSE=0)
    grouped, single = prefilled(PROMPT, gpu(bf16_model), gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_FUSE", "0"))
    counts = [0, 0]
    for window, keep in WINDOWS:
        before = [e.backend_counters()["dispatches"] for e in (grouped, single)]
        np.testing.assert_array_equal(grouped.run(window), single.run(window))
        counts = [c + e.backend_counters()["dispatches"] - b for c, e, b in zip(counts, (grouped, single), before)]
        grouped.commit(keep)
        single.commit(keep)
    assert counts[0] < counts[1]  # grouping really happened


def test_gdn_history_advance_is_one_copy_dispatch(bf16_model, monkeypatch):
    # a GDN layer's conv history advance (the last K-1 rows of [history; the window's rows]) is one
    # copy_many from two sources whatever T (T < K-1 took two copies), and the fold after a partial
    # commit writes the new history straight into the scratch array, which becomes the history
    # (it took three copies in place through a temporary): per window the copy_rows count does not
    # depend on T > 1 or on a fold, and a fold adds exactly one copy_many per GDN layer
    import json
    import os

    with open(os.path.join(bf16_model, "config.json")) as f:
        n_gdn = json.load(f)["layer_types"].count("linear_attention")
    assert n_gdn > 0
    (eng,) = prefilled(PROMPT, gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_PROFILE", "1"))

    def copies(T, keep):
        before = eng.backend_counters()
        eng.run(list(range(50, 50 + T)))
        eng.commit(keep)
        after = eng.backend_counters()
        return tuple(after.get(k, 0) - before.get(k, 0) for k in ("gpu_n:copy_rows", "gpu_n:copy_many"))

    one, two, four = copies(1, 1), copies(2, 2), copies(4, 1)
    four_after_fold = copies(4, 4)  # the fold of the 4-row window's 1 kept row runs first
    one_again, eight = copies(1, 1), copies(8, 1)
    one_after_fold = copies(1, 1)
    assert two[0] == four[0] == four_after_fold[0] == eight[0]
    assert one[0] == one_again[0] == one_after_fold[0]
    assert two[1] == four[1] == eight[1] and one[1] == one_again[1]
    assert four_after_fold[1] == four[1] + n_gdn
    assert one_after_fold[1] == one[1] + n_gdn


def test_grouped_windows_equal_serial_decode(bf16_model):
    serial, windowed = prefilled(PROMPT, gpu(bf16_model), gpu(bf16_model))
    assert_windows_equal_serial(serial, windowed, WINDOWS)


def test_resident_experts_are_chosen_on_the_device_one_submit_per_window(bf16_model, monkeypatch):
    # every expert resident and half-precision: the router's ids stay on the GPU (the routed
    # matmuls read them there), so a window is one submit (the logits), and the telemetry still
    # names the experts each layer used (read back with the logits), as the host path does
    import json
    import os

    with open(os.path.join(bf16_model, "config.json")) as f:
        moe_layers = json.load(f)["num_hidden_layers"]  # every layer of this model is MoE
    device, host = prefilled(PROMPT, gpu(bf16_model), gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_FUSE", "0"))
    for T in (1, 1, 3, 4):
        before = device.backend_counters()
        host_before = host.backend_counters()
        window = list(range(60, 60 + T))
        np.testing.assert_array_equal(device.run(window), host.run(window))
        after = device.backend_counters()
        assert after["submits"] - before["submits"] == 1, f"T={T}"
        assert after["moe_on_device"] - before["moe_on_device"] == moe_layers
        assert host.backend_counters()["submits"] - host_before["submits"] == moe_layers + 1
        assert host.backend_counters()["moe_on_device"] == 0
        td, th = device.last_telemetry(), host.last_telemetry()
        for key in ("union_per_layer", "expert_ids", "expert_offsets", "weight_bytes"):
            assert td[key] == th[key], f"T={T} {key}"
        device.commit(1)
        host.commit(1)


@pytest.mark.parametrize("chunk", [32768, 8192])
def test_weights_over_many_arenas_change_no_bit(bf16_model, monkeypatch, chunk):
    # small weight chunks: the pool's arenas are that small too, so a MoE layer's experts lie in
    # many arenas. 32 KiB: a layer's gates and ups span 2-3 arenas (the routed matmuls bind
    # them all); 8 KiB: more than the 4 a dispatch binds, so the layer goes back to the host
    # path and its gathered groups split whenever a 5th arena would join. Logits unchanged.
    ref, small = prefilled(PROMPT, gpu(bf16_model), gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_CHUNK_BYTES", str(chunk)))
    same_windows(small, ref)
    on_device = small.backend_counters()["moe_on_device"]
    assert (on_device > 0) == (chunk == 32768)


@pytest.mark.parametrize("xload", ["lanes", "lanes4", "direct", "staged"])
def test_each_row_loop_windows_equal_serial_decode(bf16_model, monkeypatch, xload):
    # STRATA_WEBGPU_XLOAD picks the half-precision row loop: lanes (the default: 4 weight rows
    # per workgroup, 16 threads per row), direct (one row per workgroup), staged (x in workgroup
    # memory); with each, a window's rows equal serial decoding bit for bit (forced rejections),
    # and the logits stay within the CPU backend's tolerance
    windowed, serial = prefilled(PROMPT, gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_XLOAD", xload),
                                 gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_XLOAD", xload))
    cpu = strata.load(bf16_model, threads=1, backend="cpu")
    cpu.run(PROMPT)
    cpu.commit(len(PROMPT))
    for window, keep in WINDOWS:
        logits = windowed.run(window)
        ref = cpu.run(window)
        assert np.max(np.abs(np.asarray(logits) - ref)) <= LOGITS_REL * np.max(np.abs(ref))
        windowed.commit(keep)
        cpu.commit(keep)
        for t in range(keep):
            one = serial.run([window[t]])
            serial.commit(1)
            np.testing.assert_array_equal(logits[t], one[0], err_msg=f"window {window} row {t}")


def test_staged_row_loop_changes_no_bit(bf16_model, monkeypatch):
    # STRATA_WEBGPU_XLOAD=staged (matmul_rows.wgsl) has the per-thread order and tree of the
    # direct loop, so the same logits; the lanes loop (the default) sums in its own order
    direct, staged = prefilled(PROMPT, gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_XLOAD", "direct"),
                               gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_XLOAD", "staged"))
    same_windows(staged, direct)


def test_lanes4_row_loop_changes_no_bit(bf16_model, monkeypatch):
    # STRATA_WEBGPU_XLOAD=lanes4 (matmul_rows_lanes4.wgsl): 4 weight rows per thread, each row
    # summed as the lanes loop (the default) sums it, so the same logits
    lanes, lanes4 = prefilled(PROMPT, gpu(bf16_model), gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_XLOAD", "lanes4"))
    same_windows(lanes4, lanes)


def test_window_row_split_changes_no_bit(bf16_model, monkeypatch):
    # every matrix of the tiny model is narrow (far fewer than 2048 row groups), so at T > 1 its
    # matmuls (single and gathered) spread the window rows over more workgroups; the logits are
    # those of STRATA_WEBGPU_ROW_SPLIT=0, bit for bit, and the profile's labels show the split
    split, whole = prefilled(PROMPT, gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_PROFILE", "1"),
                             gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_ROW_SPLIT", "0"))
    same_windows(split, whole)
    labels = [k[6:] for k in split.backend_counters() if k.startswith("gpu_n:")]
    assert any(k.startswith("matmul_half_v4 ") and " split " in k for k in labels)
    assert any(k.startswith("matmul_gathered ") and " split " in k for k in labels)
    assert not any(" T1 split " in k for k in labels)


def test_folded_ops_change_no_bit(bf16_model, monkeypatch):
    # the SwiGLU folded into the down projections that read it (the routed experts' and the shared
    # expert's: each x value computed in the matmul as the swiglu kernel writes it), the attention
    # output gate into the attention kernel, the MoE combine into the residual add and next norm
    # and the q and k rotary into their norms give the logits of STRATA_WEBGPU_FOLD=0 bit for bit,
    # with no swiglu, sigmoid_mul, moe_combine or rotary dispatch left: 3 fewer dispatches per MoE
    # layer and 3 per gated attention layer (this model has no dense FFN layer); in a T=1 window
    # (no step inputs kept) also the conv and gdn_inputs into gdn_step, 2 per GDN layer
    import json
    import os

    with open(os.path.join(bf16_model, "config.json")) as f:
        cfg = json.load(f)
    moe_layers = cfg["num_hidden_layers"]  # every layer of this model is MoE
    attention_layers = cfg["layer_types"].count("full_attention")
    assert attention_layers > 0
    monkeypatch.setenv("STRATA_WEBGPU_PROFILE", "1")
    folded = gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_FOLD", "1")
    monkeypatch.delenv("STRATA_WEBGPU_PROFILE")
    folded, apart = prefilled(PROMPT, folded, gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_FOLD", "0"))
    start = folded.backend_counters()
    for window, keep in WINDOWS:
        before = [e.backend_counters()["dispatches"] for e in (folded, apart)]
        np.testing.assert_array_equal(folded.run(window), apart.run(window), err_msg=f"window {window}")
        saved = [e.backend_counters()["dispatches"] - b for e, b in zip((folded, apart), before)]
        assert saved[1] - saved[0] == 3 * moe_layers + 3 * attention_layers, f"window {window}"
        folded.commit(keep)
        apart.commit(keep)
    # a T=1 window keeps no GDN step inputs: the causal conv and gdn_inputs go into gdn_step, two
    # more per GDN layer
    gdn_layers = cfg["layer_types"].count("linear_attention")
    assert gdn_layers > 0
    for token in (50, 51):
        before = [e.backend_counters()["dispatches"] for e in (folded, apart)]
        np.testing.assert_array_equal(folded.run([token]), apart.run([token]), err_msg=f"token {token}")
        saved = [e.backend_counters()["dispatches"] - b for e, b in zip((folded, apart), before)]
        assert saved[1] - saved[0] == 3 * moe_layers + 3 * attention_layers + 2 * gdn_layers, f"token {token}"
        folded.commit(1)
        apart.commit(1)
    counters = folded.backend_counters()
    for op in ("swiglu", "sigmoid_mul", "moe_combine", "rotary"):  # (the prefill ran some: host-grouped MoE layers)
        assert counters.get("gpu_n:" + op, 0) == start.get("gpu_n:" + op, 0), op
    labels = [k[6:] for k in counters if k.startswith("gpu_n:") and counters[k] > start.get(k, 0)]
    assert any(k.startswith("matmul_routed swiglu+down ") for k in labels)
    assert any(k.startswith("matmul_half_v4 swiglu ") for k in labels)
    assert "moe_combine_add_rmsnorm" in labels and "rmsnorm_rotary" in labels and "conv_gdn_inputs_step" in labels


def test_each_named_fold_alone_changes_no_bit(bf16_model, monkeypatch):
    # STRATA_WEBGPU_FOLD=NAME turns on that fold alone (a GPU A/B of each fold's share): the
    # logits of FOLD=0 bit for bit, and a T=1 window saves that fold's dispatches and no others
    import json
    import os

    from strata.webgpu import FOLDS

    with open(os.path.join(bf16_model, "config.json")) as f:
        cfg = json.load(f)
    m, a = cfg["num_hidden_layers"], cfg["layer_types"].count("full_attention")
    g = cfg["layer_types"].count("linear_attention")
    share = {"swiglu": 2 * m, "moe_norm": m, "qk_norm": 2 * a, "gate": a, "gdn": g, "conv_gdn": 2 * g}
    assert set(share) == set(FOLDS)
    (apart,) = prefilled(PROMPT, gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_FOLD", "0"))
    base = apart.save_state()
    for name in FOLDS:
        (one,) = prefilled(PROMPT, gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_FOLD", name))
        apart.load_state(base)
        for window in ([10, 11, 12], [13]):
            before = [e.backend_counters()["dispatches"] for e in (one, apart)]
            np.testing.assert_array_equal(one.run(window), apart.run(window), err_msg=f"{name} {window}")
            saved = [e.backend_counters()["dispatches"] - b for e, b in zip((one, apart), before)]
            if len(window) == 1:
                assert saved[1] - saved[0] == share[name], name
            one.commit(len(window))
            apart.commit(len(window))
    # two names: both folds (and only they)
    (both,) = prefilled(PROMPT, gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_FOLD", "gate,qk_norm"))
    apart.load_state(base)
    before = [e.backend_counters()["dispatches"] for e in (both, apart)]
    np.testing.assert_array_equal(both.run([13]), apart.run([13]))
    saved = [e.backend_counters()["dispatches"] - b for e, b in zip((both, apart), before)]
    assert saved[1] - saved[0] == share["gate"] + share["qk_norm"]


def test_folded_swiglu_dense_ffn_changes_no_bit(tmp_path, monkeypatch):
    # a dense FFN layer (qwen3_moe's mlp_only_layers): the same fold of its SwiGLU into the down
    # projection, the same logits, one dispatch fewer per window (and two per MoE layer: the
    # routed SwiGLU, the combine; two per attention layer: the q and k rotary)
    path = write_random_model(tmp_path / "dense", "qwen3_moe", seed=7, dtype="bfloat16", mlp_only_layers=[0])
    folded, apart = prefilled(PROMPT, gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_FOLD", "1"),
                              gpu_with_env(monkeypatch, path, "STRATA_WEBGPU_FOLD", "0"))
    for window, keep in WINDOWS:
        before = [e.backend_counters()["dispatches"] for e in (folded, apart)]
        np.testing.assert_array_equal(folded.run(window), apart.run(window), err_msg=f"window {window}")
        n = [e.backend_counters()["dispatches"] - b for e, b in zip((folded, apart), before)]
        assert n[1] - n[0] == 1 + 2 * 3 + 2 * 4, f"window {window}"  # the dense layer, 3 MoE layers, 4 attention
        folded.commit(keep)
        apart.commit(keep)


@pytest.mark.parametrize("value", ["yes", "gate,", "gate,bogus", "GATE"])
def test_unknown_fold_is_refused(bf16_model, monkeypatch, value):
    # the engine's own check (what the CLI checks first, webgpu.backend_config) names every fold
    from strata.webgpu import FOLDS

    with pytest.raises(Exception, match=f"STRATA_WEBGPU_FOLD='{value}': use 0, 1 or a comma list of {','.join(FOLDS)} "):
        gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_FOLD", value)


def test_unknown_row_split_is_refused(bf16_model, monkeypatch):
    with pytest.raises(Exception, match="STRATA_WEBGPU_ROW_SPLIT='yes'"):
        gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_ROW_SPLIT", "yes")


def test_unknown_row_loop_is_refused(bf16_model, monkeypatch):
    with pytest.raises(Exception, match="STRATA_WEBGPU_XLOAD='fast'"):
        gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_XLOAD", "fast")


def test_profile_times_every_dispatch_and_changes_no_bit(bf16_model, monkeypatch):
    # STRATA_WEBGPU_PROFILE=1: every dispatch timed with timestamp queries (lavapipe has them),
    # summed per label in the counters; the logits are those of an engine without profiling
    plain, prof = prefilled(PROMPT, gpu(bf16_model), gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_PROFILE", "1"))
    assert "gpu_profile" not in plain.backend_counters()
    c0 = prof.backend_counters()
    assert c0["gpu_profile"] in (1, 2)
    same_windows(prof, plain)
    c1 = prof.backend_counters()
    labels = {k[7:] for k in c1 if k.startswith("gpu_us:")}
    timed = sum(c1["gpu_n:" + k] - c0.get("gpu_n:" + k, 0) for k in labels)
    assert timed == c1["dispatches"] - c0["dispatches"]  # every dispatch has a label
    assert all(c1["gpu_us:" + k] >= 0 for k in labels)
    assert sum(c1["gpu_us:" + k] for k in labels) > 0
    assert c1["gpu_span_us"] > c0["gpu_span_us"]
    routed = [k for k in labels if k.startswith("matmul_routed")]
    assert routed and all(c1["gpu_bytes:" + k] > 0 for k in routed)  # weight bytes for GB/s


def test_repeat_records_the_named_kernels_again_for_timing(bf16_model, monkeypatch):
    # STRATA_WEBGPU_REPEAT=ENTRY:N (a timing tool: a decode's time with and without it is the
    # kernel's real cost in the pipelined window) records every dispatch of that entry point N
    # times and no other; router_topk writes the ids and weights from the router's logits only,
    # so repeating it changes no bit of the logits
    monkeypatch.setenv("STRATA_WEBGPU_PROFILE", "1")
    plain = gpu(bf16_model)
    again = gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_REPEAT", "router_topk:3")
    monkeypatch.delenv("STRATA_WEBGPU_PROFILE")
    for window, keep in WINDOWS[:2]:
        before = [e.backend_counters() for e in (plain, again)]
        np.testing.assert_array_equal(plain.run(window), again.run(window), err_msg=f"window {window}")
        after = [e.backend_counters() for e in (plain, again)]
        n = [{k[6:]: a[k] - b.get(k, 0) for k in a if k.startswith("gpu_n:")} for a, b in zip(after, before)]
        assert n[0]["router_topk"] > 0 and n[1]["router_topk"] == 3 * n[0]["router_topk"]
        assert {k: v for k, v in n[1].items() if k != "router_topk" and v} == \
            {k: v for k, v in n[0].items() if k != "router_topk" and v}
        plain.commit(keep)
        again.commit(keep)


@pytest.mark.parametrize("value", ["add_rmsnorm:1", "add_rmsnorm:65", "Add", "x:", ",", "a b", "gdn_step:2x"])
def test_repeat_refuses_a_malformed_value_in_one_line(bf16_model, monkeypatch, value):
    # the CLI's check (webgpu.backend_config) and the device's own give the same line
    from strata.errors import UsageError
    from strata.webgpu import open_device

    want = rf"^STRATA_WEBGPU_REPEAT='{re.escape(value)}': use a comma list of kernel entry points, each with an optional :N"
    with pytest.raises(UsageError, match=want):
        gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_REPEAT", value)
    monkeypatch.setenv("STRATA_WEBGPU_REPEAT", value)
    with pytest.raises(ValueError, match=want):
        open_device("software")
    monkeypatch.setenv("STRATA_WEBGPU_REPEAT", "add_rmsnorm,router_topk:64")
    assert open_device("software") is not None


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
    # hidden 1024: the norms over the hidden size take STRATA_WEBGPU_NORM_WG (Kernels::kNormWideRow)
    return write_random_model(tmp_path_factory.mktemp("webgpu_wide") / "m", "qwen3_next", seed=8, dtype="bfloat16",
                              hidden_size=1024, num_hidden_layers=2)


@pytest.mark.parametrize("norm_wg", ["", "64", "1024"], ids=["default-256", "64", "1024"])
def test_wide_norm_workgroups_keep_windows_exact(wide_model, monkeypatch, norm_wg):
    # the hidden-size norms in workgroups of 256 (the default) or STRATA_WEBGPU_NORM_WG's size:
    # window rows still equal serial decoding bit for bit, every fold gives the unfolded bits,
    # and the setting takes effect (another reduction order than 64's)
    if norm_wg:
        monkeypatch.setenv("STRATA_WEBGPU_NORM_WG", norm_wg)
    serial, windowed = prefilled(PROMPT, gpu(wide_model), gpu(wide_model))
    assert_windows_equal_serial(serial, windowed, WINDOWS)
    folded, apart = prefilled(PROMPT, gpu_with_env(monkeypatch, wide_model, "STRATA_WEBGPU_FOLD", "1"), gpu(wide_model))
    for window, keep in WINDOWS + [([60], 1), ([61], 1)]:
        np.testing.assert_array_equal(folded.run(window), apart.run(window), err_msg=f"window {window}")
        folded.commit(keep)
        apart.commit(keep)
    monkeypatch.delenv("STRATA_WEBGPU_NORM_WG", raising=False)
    if norm_wg == "64":
        return
    narrow, wide = prefilled(PROMPT, gpu_with_env(monkeypatch, wide_model, "STRATA_WEBGPU_NORM_WG", "64"),
                             gpu_with_env(monkeypatch, wide_model, "STRATA_WEBGPU_NORM_WG", norm_wg or "256"))
    a, b = np.array(narrow.run([5, 6, 7])), np.array(wide.run([5, 6, 7]))
    assert not np.array_equal(a, b) and np.allclose(a, b, rtol=1e-3, atol=1e-3)
    if not norm_wg:  # unset is 256
        default, explicit = prefilled(PROMPT, gpu(wide_model),
                                      gpu_with_env(monkeypatch, wide_model, "STRATA_WEBGPU_NORM_WG", "256"))
        np.testing.assert_array_equal(np.array(default.run([5, 6, 7])), np.array(explicit.run([5, 6, 7])))


@pytest.mark.parametrize("value", ["32", "100", "2048", "wide"])
def test_norm_workgroup_size_is_checked(bf16_model, monkeypatch, value):
    with pytest.raises(Exception, match=f"STRATA_WEBGPU_NORM_WG='{value}': use 64, 128, 256, 512 or 1024"):
        gpu_with_env(monkeypatch, bf16_model, "STRATA_WEBGPU_NORM_WG", value)

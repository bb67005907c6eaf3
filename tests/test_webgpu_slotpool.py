"""Streamed experts on the webgpu backend: the expert cache's slots have device copies (the slot
pool, written when the IO pool's reads land), and after the host reads the router's ids a MoE
layer's acquired experts run through the same routed kernels as resident experts, with a
per-window table of (arena binding, offset) per expert. Logits equal the resident model's bit for
bit at every cache size, windows keep the window contract, and the telemetry is the host path's."""
from __future__ import annotations

import numpy as np
import pytest

import strata
from strata import pack
from strata.testing.devmodel import write_random_model
from webgpu_helpers import assert_windows_equal_serial, gpu, open_test_device, prefilled

PROMPT = [5, 17, 33, 2, 9, 41]
# windows of root + drafts, each partly accepted (forced rejections), then a full accept
WINDOWS = [([1, 2, 3], 2), ([4], 1), ([7, 8, 9, 10], 1), ([11, 12], 2), ([20, 21, 22, 23, 24], 5)]


@pytest.fixture(scope="module", autouse=True)
def adapter():
    open_test_device()  # skips the module when this machine has no WebGPU adapter


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(bf16 checkpoint, its pack, pack info)."""
    root = tmp_path_factory.mktemp("slotpool")
    src = write_random_model(root / "m", "qwen3_next", seed=5, dtype="bfloat16")
    dst = str(root / "m.strata")
    pack.convert(src, dst)
    info = pack.read_pack(dst)
    assert info.ex["dtype"] == "bf16"
    return src, dst, info


def _decode(eng):
    """Logits of every committed row: the prompt's last, then each window's kept rows."""
    out = [np.array(eng.run(PROMPT))[-1:]]
    eng.commit(len(PROMPT))
    for window, keep in WINDOWS:
        out.append(np.array(eng.run(window))[:keep])
        eng.commit(keep)
    return np.concatenate(out)


def _counters(eng):
    return dict(eng.backend_counters())


def _slots(info, n):
    return n * info.ex["stride"]


@pytest.mark.parametrize("slots", ["one", "top_k", "layer", "all"])
def test_streamed_pack_equals_resident_model_at_every_cache_size(model, slots):
    src, dst, info = model
    E, L = int(info.ex["num_experts"]), int(info.ex["num_layers"])
    ref = _decode(gpu(src))
    k = strata.load(src, threads=1).config["top_k"]
    n = {"one": 1, "top_k": k, "layer": E, "all": E * L}[slots]
    eng = gpu(dst, expert_cache=_slots(info, n))
    got = _decode(eng)
    np.testing.assert_array_equal(got, ref)
    c = _counters(eng)
    # every MoE layer of every window, the prompt's too (an engine's first pass runs in scratch
    # blocks attached like the arena), ran its acquired experts through the routed kernels
    assert c["moe_streamed_on_device"] == (len(WINDOWS) + 1) * L and c["moe_on_device"] == 0
    # each read that landed was copied to its device slot then, none at use
    assert c["slot_uploads_at_fill"] > 0 and c["slot_uploads_at_use"] == 0


def test_streamed_windows_equal_serial_decode_with_rejections(model):
    src, dst, info = model
    k = strata.load(src, threads=1).config["top_k"]
    cache = _slots(info, k)
    serial, windowed = prefilled(PROMPT, gpu(dst, expert_cache=cache), gpu(dst, expert_cache=cache))
    assert_windows_equal_serial(serial, windowed, WINDOWS)


def test_streamed_rows_do_not_depend_on_the_other_rows(model):
    src, dst, info = model
    k = strata.load(src, threads=1).config["top_k"]
    cache = _slots(info, k)
    a, b = prefilled(PROMPT, gpu(dst, expert_cache=cache), gpu(dst, expert_cache=cache))
    # the same root with different drafts beside it (other experts routed, other slots refilled)
    ra = np.array(a.run([3, 40, 41, 42, 43, 44, 45, 46]))
    rb = np.array(b.run([3, 7]))
    np.testing.assert_array_equal(ra[0], rb[0])


def test_routed_streamed_layers_change_no_bit_and_fewer_dispatches(model, monkeypatch):
    """Against the host-grouped path of the same commit (STRATA_WEBGPU_FUSE=0): equal logits and
    window telemetry (cache hits, misses, experts), the same submits (the router's ids are still
    read once per MoE layer: the host decides what to stream), fewer dispatches."""
    src, dst, info = model
    k = strata.load(src, threads=1).config["top_k"]
    L = int(info.ex["num_layers"])
    routed = gpu(dst, expert_cache=_slots(info, k))
    monkeypatch.setenv("STRATA_WEBGPU_FUSE", "0")
    try:
        host = gpu(dst, expert_cache=_slots(info, k))
    finally:
        monkeypatch.delenv("STRATA_WEBGPU_FUSE")
    keys = ("hits", "cold_misses", "urgent_loads", "bytes_read", "experts", "cold_experts", "union_per_layer")
    for eng in (routed, host):
        eng.run(PROMPT)
        eng.commit(len(PROMPT))
    for window, keep in WINDOWS:
        before = {id(e): _counters(e) for e in (routed, host)}
        a, b = np.array(routed.run(window)), np.array(host.run(window))
        np.testing.assert_array_equal(a, b)
        ta, tb = routed.last_telemetry(), host.last_telemetry()
        for key in keys:
            assert ta[key] == tb[key], key
        ca, cb = _counters(routed), _counters(host)
        da = {x: ca[x] - before[id(routed)][x] for x in ("submits", "dispatches", "moe_streamed_on_device")}
        db = {x: cb[x] - before[id(host)][x] for x in ("submits", "dispatches", "moe_streamed_on_device")}
        assert da["submits"] == db["submits"] == L + 1
        assert da["moe_streamed_on_device"] == L and db["moe_streamed_on_device"] == 0
        assert da["dispatches"] < db["dispatches"], (window, da, db)
        routed.commit(keep)
        host.commit(keep)


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_read_ahead_fills_land_while_the_window_records(model, eviction):
    """With read-ahead the next layer's predicted experts are read (and copied to their device
    slots) on IO threads while this layer records: the logits still equal the resident model's."""
    src, dst, info = model
    E = int(info.ex["num_experts"])
    ref = _decode(gpu(src))
    eng = gpu(dst, expert_cache=_slots(info, E), readahead=True, io_threads=4, eviction=eviction)
    out = [np.array(eng.run(PROMPT))[-1:]]
    eng.commit(len(PROMPT))
    issued = 0
    for window, keep in WINDOWS:
        out.append(np.array(eng.run(window))[:keep])
        issued += eng.last_telemetry()["prefetch_issued"]
        eng.commit(keep)
    np.testing.assert_array_equal(np.concatenate(out), ref)
    c = _counters(eng)
    assert issued > 0 and c["moe_streamed_on_device"] > 0 and c["slot_uploads_at_fill"] > 0


def test_slots_over_more_arenas_than_a_dispatch_binds_take_the_host_path(model, monkeypatch):
    """Arenas of one slot each (16 KiB chunks): a window whose experts lie in more than four
    arenas groups its rows on the host, from the same device slots; no bit changes."""
    src, dst, info = model
    E, L = int(info.ex["num_experts"]), int(info.ex["num_layers"])
    ref = _decode(gpu(src))
    monkeypatch.setenv("STRATA_WEBGPU_CHUNK_BYTES", "16384")
    try:
        eng = gpu(dst, expert_cache=_slots(info, E))
    finally:
        monkeypatch.delenv("STRATA_WEBGPU_CHUNK_BYTES")
    np.testing.assert_array_equal(_decode(eng), ref)
    c = _counters(eng)
    # a one-row window (two experts) still fits: both paths ran
    assert 0 < c["moe_streamed_on_device"] < (len(WINDOWS) + 1) * L and c["slot_uploads_at_use"] == 0

"""StreamingExpertStore on its own: exact blob contents under a tiny cache, pin safety under a
multi-threaded stress test, telemetry, read-ahead, eviction policies and faults."""
from __future__ import annotations

import os
import shutil

import pytest

from _stream_util import blob_of, expected_blob, open_store, write_checkpoint
from strata import pack
from strata.errors import ModelError

_engine = pytest.importorskip("strata._engine")

L, E = 4, 16


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ck") / "m", layers=L, experts=E, hidden=32, inter=16)


@pytest.fixture(scope="module")
def packed(src, tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("pk") / "p")
    pack.convert(src, dst)
    return dst


@pytest.fixture(scope="module")
def blobs(src):
    return {(li, e): expected_blob(src, li, e, "bf16") for li in range(L) for e in range(E)}


def _stride(packed):
    return pack.read_pack(packed).ex["stride"]


@pytest.mark.parametrize("io_mode", ["direct", "page_cache"])
@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_contents_exact_under_tiny_cache(packed, blobs, io_mode, eviction):
    import random

    st = open_store(packed, 3 * _stride(packed), io_mode=io_mode, eviction=eviction, io_threads=3)
    assert st.slots == 3
    assert st.io_mode in (("direct", "buffered+dontneed") if io_mode == "direct" else ("page_cache",))
    rng = random.Random(1)
    for _ in range(60):
        li = rng.randrange(L)
        ex = rng.sample(range(E), rng.randint(1, 6))  # sometimes larger than the cache
        views = st.acquire(li, ex, ex[:1])
        for e, v in zip(ex, views):
            assert blob_of(v, "bf16") == blobs[(li, e)]
        st.release(li)
    t = st.drain_telemetry()
    assert t["cache_slots_total"] == 3 and 0 < t["cache_slots_used"] <= 3
    assert t["hits"] + t["cold_misses"] > 0
    assert t["bytes_read"] == t["urgent_loads"] * _stride(packed)
    assert st.drain_telemetry()["hits"] == 0  # drained


def test_counters(packed):
    stride = _stride(packed)
    st = open_store(packed, 4 * stride)
    st.acquire(0, [1, 2, 3], [1])
    st.release(0)
    t = st.drain_telemetry()
    assert (t["hits"], t["cold_misses"], t["urgent_loads"], t["extra_cold"]) == (0, 3, 3, 2)
    assert t["bytes_read"] == 3 * stride and t["late_wait_us"] > 0
    st.acquire(0, [1, 2, 4], [4])
    st.release(0)
    t = st.drain_telemetry()
    assert (t["hits"], t["cold_misses"], t["extra_cold"]) == (2, 1, 0)
    assert sorted(st.resident(0)) == [1, 2, 3, 4]
    # a union bigger than the whole cache borrows temporary slots and still returns exact data
    st.acquire(1, list(range(9)), [0])
    st.release(1)
    assert st.overflow_high_water >= 5
    assert st.slots_used <= 4


def test_pins_survive_stress(packed):
    st = open_store(packed, 3 * _stride(packed), io_threads=4)
    assert st.stress(threads=L, iterations=1500, max_union=5, seed=7) == 0
    t = st.drain_telemetry()
    assert t["cold_misses"] > 1000  # the tiny cache really was churning
    st2 = open_store(packed, 5 * _stride(packed), io_threads=2, eviction="lfu", io_mode="page_cache")
    assert st2.stress(threads=2, iterations=1500, max_union=4, seed=3) == 0


def test_lfu_keeps_a_popular_expert_that_lru_evicts(packed):
    stride = _stride(packed)
    results = {}
    for policy in ("lru", "lfu"):
        st = open_store(packed, 3 * stride, eviction=policy)
        for _ in range(6):
            st.acquire(0, [0], [0])
            st.release(0)
        for e in (1, 2, 3):  # a burst of one-off experts
            st.acquire(0, [e], [e])
            st.release(0)
        results[policy] = 0 in st.resident(0)
    assert results == {"lru": False, "lfu": True}


def test_readahead(packed, blobs):
    st = open_store(packed, 8 * _stride(packed), readahead=True)
    st.prefetch(2, [5, 6])
    st.acquire(2, [5, 6, 7], [5])
    st.release(2)
    t = st.drain_telemetry()
    assert t["prefetch_issued"] == 2 and t["prefetch_used"] == 2
    assert t["prefetched_bytes"] == 2 * _stride(packed)
    st.readahead = False
    st.prefetch(3, [1])
    assert st.drain_telemetry()["prefetch_issued"] == 0
    # a prefetched expert that is evicted unused counts as wasted
    small = open_store(packed, 2 * _stride(packed), readahead=True)
    small.prefetch(1, [9])
    _wait_ready(small, 1, 9)
    small.acquire(0, [1, 2], [1])  # both slots are needed: the prefetched one goes
    small.release(0)
    t = small.drain_telemetry()
    assert t["prefetch_wasted"] == 1 and t["prefetch_used"] == 0


def _wait_ready(st, layer, expert):
    import time

    deadline = time.monotonic() + 10
    while not st.is_ready(layer, expert):
        assert time.monotonic() < deadline, "prefetch never completed"
        time.sleep(0.001)


def _flip_byte(packed, tmp_path, layer, expert, at=100):
    p = str(tmp_path / "bad")
    shutil.copytree(packed, p)
    info = pack.read_pack(p)
    ex = info.ex
    off = ex["data_offset"] + (layer * ex["num_experts"] + expert) * ex["stride"] + at
    with open(info.experts_path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 1]))
    return p


@pytest.mark.parametrize("io_mode", ["direct", "page_cache"])
def test_flipped_byte_is_a_checksum_error(packed, blobs, tmp_path, io_mode):
    p = _flip_byte(packed, tmp_path, 2, 11)
    st = open_store(p, 4 * _stride(packed), io_mode=io_mode)
    with pytest.raises(ModelError, match=r"layer 2 expert 11: checksum mismatch"):
        st.acquire(2, [3, 11], [3])
    # nothing stays pinned or half-loaded; other experts still load exactly
    views = st.acquire(2, [3, 4, 5, 6], [3])
    assert [blob_of(v, "bf16") for v in views] == [blobs[(2, e)] for e in (3, 4, 5, 6)]
    st.release(2)
    with pytest.raises(ModelError, match="checksum"):  # still corrupt on retry, never cached
        st.acquire(2, [11], [11])


def test_injected_read_error(packed, blobs):
    st = open_store(packed, 4 * _stride(packed))
    st.inject_read_error(1, 7, times=1)
    with pytest.raises(ModelError, match=r"layer 1 expert 7: read error: Input/output error"):
        st.acquire(1, [6, 7], [6])
    views = st.acquire(1, [6, 7], [6])  # the fault is gone: the retry succeeds
    assert [blob_of(v, "bf16") for v in views] == [blobs[(1, 6)], blobs[(1, 7)]]
    st.release(1)
    with pytest.raises(ModelError, match="no experts for layer 9"):
        st.acquire(9, [0], [0])
    with pytest.raises(ModelError, match="out of range"):
        st.acquire(0, [E], [])


def test_truncated_file_refused_at_open(packed, tmp_path):
    p = str(tmp_path / "t")
    shutil.copytree(packed, p)
    info = pack.read_pack(p)
    with open(info.experts_path, "r+b") as f:
        f.truncate(os.path.getsize(info.experts_path) - 1)
    ex = info.ex
    with pytest.raises(ModelError, match="truncated expert file"):
        _engine.StreamingExpertStore(info.experts_path, ex["data_offset"], ex["stride"], ex["blob_bytes"],
                                     E, ex["hidden_size"], ex["moe_intermediate_size"], "bf16", ex["layers"],
                                     info.crcs, 4 * ex["stride"])


def test_crc32_matches_zlib():
    import zlib

    data = os.urandom(1 << 16)
    # short inputs take the table path, long ones the carry-less-multiply path plus a table tail
    for n in list(range(0, 200)) + [4095, 4096, 4097, 50001, len(data) - 7]:
        for off in (0, 3):
            d = data[off:off + n]
            assert _engine.crc32(d) == zlib.crc32(d), (n, off)
            assert _engine.crc32(d, 0xDEADBEEF) == zlib.crc32(d, 0xDEADBEEF), (n, off)
    assert _engine.crc32(data[5000:], _engine.crc32(data[:5000])) == zlib.crc32(data)

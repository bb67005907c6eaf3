"""The engine end to end on the webgpu backend (lavapipe in CI): logits against the CPU
backend with a written tolerance, and the window contract on the GPU: every row of a window
bit-identical to serial one-token decoding, with forced rejections."""
from __future__ import annotations

import numpy as np
import pytest

import strata
from strata.testing.devmodel import write_random_model
from webgpu_helpers import assert_windows_equal_serial, open_test_device

# max |gpu - cpu| / max|cpu| over the logits of a 12-token prefill, measured on lavapipe:
# 1.8e-6 (qwen3_next f32), 3.2e-6 (qwen3_5_moe f32), 3.3e-7 (qwen3_moe f32), 3.3e-6 (qwen3_next
# bf16); the bound is ~10x the largest.
LOGITS_REL = 3e-5


@pytest.fixture(scope="module", autouse=True)
def adapter():
    open_test_device()  # skips the module when this machine has no WebGPU adapter


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("webgpu_models")
    return {
        (arch, dtype): write_random_model(root / f"{arch}-{dtype}", arch, seed=3, dtype=dtype)
        for arch, dtype in [("qwen3_next", "float32"), ("qwen3_5_moe", "float32"), ("qwen3_moe", "float32"),
                            ("qwen3_next", "bfloat16")]
    }


@pytest.mark.parametrize("arch,dtype", [("qwen3_next", "float32"), ("qwen3_5_moe", "float32"),
                                        ("qwen3_moe", "float32"), ("qwen3_next", "bfloat16")])
def test_logits_match_cpu_backend(models, arch, dtype):
    path = models[(arch, dtype)]
    ids = np.random.default_rng(0).integers(0, 512, 12)
    cpu = strata.load(path, threads=1)
    gpu = strata.load(path, threads=1, backend="webgpu")
    assert gpu.backend == "webgpu"
    ref, out = cpu.run(ids), gpu.run(ids)
    assert np.abs(out - ref).max() <= LOGITS_REL * np.abs(ref).max()
    cpu.commit(len(ids))
    gpu.commit(len(ids))
    ref, out = cpu.run([7, 8, 9]), gpu.run([7, 8, 9])
    assert np.abs(out - ref).max() <= LOGITS_REL * np.abs(ref).max()


@pytest.mark.parametrize("arch", ["qwen3_next", "qwen3_5_moe"])
def test_window_rows_equal_serial_decode_with_rejections(models, arch):
    path = models[(arch, "float32")]
    prompt = [3, 14, 15, 92, 65, 35]
    serial = strata.load(path, threads=1, backend="webgpu")
    windowed = strata.load(path, threads=1, backend="webgpu")
    serial.run(prompt)
    serial.commit(len(prompt))
    windowed.run(prompt)
    windowed.commit(len(prompt))
    # windows with drafts, each only partly accepted (forced rejections), then a full accept
    assert_windows_equal_serial(serial, windowed, [([10, 11, 12, 13], 2), ([20, 21, 22], 1), ([30, 31, 32, 33, 34], 5), ([40, 41], 1)])


def test_logits_read_back_into_a_caller_array(models):
    # the readback writes the logits straight into run's array (the caller's with out=): the
    # same bits as the engine's own array, for every row and for last_only
    path = models[("qwen3_next", "float32")]
    a, b = strata.load(path, threads=1, backend="webgpu"), strata.load(path, threads=1, backend="webgpu")
    ids = [4, 8, 15, 16, 23]
    buf = np.full((len(ids), a.vocab_size), np.nan, np.float32)
    assert a.run(ids, out=buf) is buf
    np.testing.assert_array_equal(buf, b.run(ids))
    a.commit(2)
    b.commit(2)
    one = np.full((1, a.vocab_size), np.nan, np.float32)
    for tok in (42, 7):
        a.run([tok], last_only=True, out=one)
        np.testing.assert_array_equal(one, b.run([tok], last_only=True))
        a.commit(1)
        b.commit(1)
    with pytest.raises(ValueError, match="float32"):
        a.run([1], out=np.zeros((1, a.vocab_size), np.float16))


def test_greedy_tokens_agree_with_cpu(models):
    path = models[("qwen3_next", "float32")]
    cpu = strata.load(path, threads=1)
    gpu = strata.load(path, threads=1, backend="webgpu")
    ids = [1, 2, 3, 4]
    cpu_tokens, gpu_tokens = [], []
    for eng, out in ((cpu, cpu_tokens), (gpu, gpu_tokens)):
        tok = int(np.argmax(eng.run(ids)[-1]))
        eng.commit(len(ids))
        for _ in range(8):
            out.append(tok)
            tok = int(np.argmax(eng.run([tok])[0]))
            eng.commit(1)
    assert gpu_tokens == cpu_tokens


def test_streamed_experts_through_a_tiny_cache_match_resident_weights(models, tmp_path):
    # a cache of one layer's worth of slots refills the same addresses with other layers'
    # experts all the time: the backend's device copies of weights must follow the new bytes
    from strata import pack

    src = models[("qwen3_next", "float32")]
    dst = str(tmp_path / "m.strata")
    pack.convert(src, dst)
    info = pack.read_pack(dst)
    slots = int(info.ex["num_experts"])
    streamed = strata.load(dst, threads=1, backend="webgpu", expert_cache=slots * info.ex["stride"])
    assert int(info.ex["num_layers"]) > 1  # so the slots are refilled
    resident = strata.load(src, threads=1, backend="webgpu")
    ids = [5, 17, 33, 2, 9, 41]
    for eng in (streamed, resident):
        eng.run(ids)
        eng.commit(len(ids))
    for window, keep in [([1, 2, 3], 2), ([4], 1), ([7, 8, 9, 10], 4)]:
        a, b = streamed.run(window), resident.run(window)
        np.testing.assert_array_equal(a, b)
        streamed.commit(keep)
        resident.commit(keep)


def test_earlier_first_batch_changes_no_bit(models, monkeypatch):
    """STRATA_WEBGPU_EARLY_FIRST=1 sends each window's first dispatch to the GPU at once (more
    early submits; the backend reads it when made and again at every wait, so it is set around
    the early engine's calls only): the same logits as the default batching, every row of a
    window still equal to serial decoding under forced rejection, one waiting submit per window."""
    from webgpu_helpers import gpu

    def early(fn):
        monkeypatch.setenv("STRATA_WEBGPU_EARLY_FIRST", "1")
        try:
            return fn()
        finally:
            monkeypatch.delenv("STRATA_WEBGPU_EARLY_FIRST")

    path = models[("qwen3_next", "bfloat16")]
    prompt = [int(i) for i in np.random.default_rng(1).integers(0, 512, 12)]
    plain, fast = gpu(path), early(lambda: gpu(path))
    plain.run(prompt)
    plain.commit(len(prompt))
    early(lambda: (fast.run(prompt), fast.commit(len(prompt))))
    c0 = {id(e): e.backend_counters() for e in (plain, fast)}
    for window, keep in [([3, 4, 5, 6], 2), ([7], 1), ([8, 9], 1), ([10, 11, 12], 3)]:
        a = early(lambda: np.array(fast.run(window)))
        np.testing.assert_array_equal(a, np.array(plain.run(window)))
        early(lambda: fast.commit(keep))
        plain.commit(keep)
    c1 = {id(e): e.backend_counters() for e in (plain, fast)}
    d = {i: {k: c1[i][k] - c0[i][k] for k in ("submits", "early_submits", "dispatches")} for i in c0}
    assert d[id(fast)]["submits"] == d[id(plain)]["submits"] == 4
    assert d[id(fast)]["dispatches"] == d[id(plain)]["dispatches"]
    assert d[id(fast)]["early_submits"] > d[id(plain)]["early_submits"]
    serial = gpu(path)
    serial.run(prompt)
    serial.commit(len(prompt))
    fast.reset()
    early(lambda: (fast.run(prompt), fast.commit(len(prompt)),
                   assert_windows_equal_serial(serial, fast, [([3, 4, 5, 6], 1), ([9, 8], 2), ([1, 2, 3], 1)])))

"""Shared helpers for the WebGPU tests: one device per test module, skipped only when this
machine has no WebGPU adapter at all (CI installs lavapipe, so there it always runs)."""
from __future__ import annotations

import numpy as np
import pytest

from strata import StrataError


def open_test_device(**options):
    from strata import webgpu

    try:
        webgpu.native_module()
    except StrataError as exc:
        pytest.skip(f"no WebGPU in this build: {exc}")
    try:
        return webgpu.open_device("any", **options)
    except StrataError as exc:
        if "no adapter found" in str(exc):
            pytest.skip(f"no WebGPU adapter on this machine: {exc}")
        raise


def gpu(path, **kw):
    """A one-thread engine on the webgpu backend."""
    import strata

    return strata.load(path, threads=1, backend="webgpu", **kw)


def gpu_with_env(monkeypatch, path, name, value):
    """An engine made while environment variable `name` is `value` (the backend reads it when made)."""
    monkeypatch.setenv(name, value)
    try:
        return gpu(path)
    finally:
        monkeypatch.delenv(name)


def prefilled(prompt, *engines):
    """The engines, each after `prompt`'s prefill."""
    for eng in engines:
        eng.run(prompt)
        eng.commit(len(prompt))
    return engines


def assert_windows_equal_serial(serial, windowed, windows):
    """Each (window, keep): the windowed engine runs the window and keeps its first `keep` rows
    (the rest rejected); every kept row's logits equal the serial engine's for that token alone,
    bit for bit."""
    for window, keep in windows:
        logits = np.array(windowed.run(window))
        windowed.commit(keep)
        for t in range(keep):
            one = np.array(serial.run([window[t]]))
            serial.commit(1)
            np.testing.assert_array_equal(logits[t], one[0], err_msg=f"window {window} row {t}")


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def weights_in(fmt: str, rows: int, cols: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(stored array passed to the device, the exact float64 values it holds)."""
    w = rng.standard_normal((rows, cols)).astype(np.float32) * 0.5
    if fmt == "f32":
        return w, w.astype(np.float64)
    if fmt == "f16":
        h = w.astype(np.float16)
        return h, h.astype(np.float64)
    b = bf16_bits(w)
    return b, bf16_to_f32(b).astype(np.float64)

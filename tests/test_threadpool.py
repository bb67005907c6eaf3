"""The thread pool through the engine: results never depend on the thread count, and the pool
stays correct when its workers sleep (idle engines) or are preempted (a competing busy process)."""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

import strata
from strata.testing.devmodel import write_random_model

# big enough that matmuls and attention go through the pool (small jobs run inline)
SHAPE = dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=128, shared_expert_intermediate_size=256,
             num_experts=16, num_experts_per_tok=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
             vocab_size=2048)


@pytest.fixture(scope="module", params=["qwen3_next", "qwen3_moe"])
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    return write_random_model(str(path), request.param, seed=3, preset="tiny", **SHAPE)


def run_script(eng, prompt, windows):
    """Prefill, then windows of several sizes with partial commits; every logits row."""
    eng.reset()
    out = [eng.run(prompt)]
    eng.commit(len(prompt))
    for w in windows:
        out.append(eng.run(w))
        eng.commit(max(1, len(w) // 2))
    return out


def test_results_do_not_depend_on_the_thread_count(model):
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 2048, 40).tolist()
    windows = [rng.integers(0, 2048, T).tolist() for T in (1, 3, 8, 16, 1)]
    ref = run_script(strata.load(model, threads=1), prompt, windows)
    for n in (2, 3, 5):
        got = run_script(strata.load(model, threads=n), prompt, windows)
        for a, b in zip(ref, got):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("adapt", ["1", "0"])
def test_pool_after_sleeping_and_next_to_a_busy_process(model, adapt, monkeypatch):
    """Workers that went to sleep (idle past their spin) must wake for the next call; with a
    busy process taking a core, preempted workers must still finish every task exactly once
    (with the fallback to the caller alone on, the default, and off)."""
    monkeypatch.setenv("STRATA_POOL_ADAPT", adapt)
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 2048, 24).tolist()
    windows = [rng.integers(0, 2048, T).tolist() for T in (2, 1, 4, 1, 1, 8)]
    ref = run_script(strata.load(model, threads=1), prompt, windows)
    eng = strata.load(model, threads=3)
    time.sleep(0.05)  # far past the spin: every worker sleeps
    for a, b in zip(ref, run_script(eng, prompt, windows)):
        np.testing.assert_array_equal(a, b)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for _ in range(3):
            for a, b in zip(ref, run_script(eng, prompt, windows)):
                np.testing.assert_array_equal(a, b)
            time.sleep(0.01)
    finally:
        busy.terminate()
        busy.wait()


def test_results_while_the_pool_falls_back_and_tries_its_workers_again(model):
    """Next to a busy process the pool may run calls on the caller alone for a while (when its
    threads get about one core) and then hand them to its workers again; over a second of decode,
    long enough for several of its 50 ms windows, every step must equal the one-thread engine's
    bit for bit, whichever way each call ran (nothing is asserted about which way that was)."""
    rng = np.random.default_rng(2)
    prompt = rng.integers(0, 2048, 16).tolist()
    steps = rng.integers(0, 2048, 64).tolist()

    def decode(eng):
        eng.reset()
        out = [eng.run(prompt)]
        eng.commit(len(prompt))
        for t in steps:
            out.append(eng.run([t]))
            eng.commit(1)
        return out

    ref = decode(strata.load(model, threads=1))
    eng = strata.load(model, threads=2)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        t0, runs = time.monotonic(), 0
        while runs < 3 or time.monotonic() - t0 < 1.0:
            for a, b in zip(ref, decode(eng)):
                np.testing.assert_array_equal(a, b)
            runs += 1
    finally:
        busy.terminate()
        busy.wait()


def test_pool_fallback_setting_is_0_or_1(model, monkeypatch, capsys, tmp_path):
    """STRATA_POOL_ADAPT takes 0 or 1; another value is a one-line error when an engine is made
    (the API's UsageError, the CLI's one line, not an internal error), not silently one of them."""
    from strata.cli import app
    from strata.cli.runner import run_app

    monkeypatch.setenv("STRATA_POOL_ADAPT", "yes")
    with pytest.raises(strata.UsageError) as info:
        strata.load(model, threads=2)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("STRATA_POOL_ADAPT='yes': use 0 or 1")
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_DEBUG", "0")
    with pytest.raises(SystemExit) as code:
        run_app(app, ["run", "-m", model, "--prompt", "x", "--max-new", "1"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("strata:")]
    assert code.value.code != 0 and len(lines) == 1
    assert "STRATA_POOL_ADAPT='yes': use 0 or 1" in lines[0] and "internal error" not in lines[0]
    monkeypatch.setenv("STRATA_POOL_ADAPT", "0")
    assert strata.load(model, threads=2).threads == 2


def test_huge_pages_setting_is_0_or_1(model, monkeypatch):
    """STRATA_HUGE_PAGES takes 0 or 1, checked at every load (it was read only where a weight copy
    is made, and any other value silently meant 1)."""
    monkeypatch.setenv("STRATA_HUGE_PAGES", "bogus")
    with pytest.raises(strata.UsageError) as info:
        strata.load(model, threads=1)
    assert str(info.value).startswith("STRATA_HUGE_PAGES='bogus': use 0 or 1") and "\n" not in str(info.value)
    for ok in ("0", "1"):
        monkeypatch.setenv("STRATA_HUGE_PAGES", ok)
        assert strata.load(model, threads=1).threads == 1


def test_engines_with_sleeping_workers_shut_down(model):
    for _ in range(5):
        eng = strata.load(model, threads=4)
        eng.run([1, 2, 3])
        eng.commit(3)
        time.sleep(0.002)
        del eng

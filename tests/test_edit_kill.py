"""Killing strata mid-write never loses or truncates the file being edited."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

APP = str(Path(__file__).resolve().parents[1] / "app")

WRITER = r"""
import sys
from strata.store.atomic import atomic_write_bytes
path = sys.argv[1]
a = b"A" * (3 << 20) + b"\nend of version A\n"
b = (b"B" * 977 + b"\n") * 3000 + b"end of version B\n"
print("ready", flush=True)
i = 0
while True:
    atomic_write_bytes(path, a if i % 2 else b)
    i += 1
"""

A = b"A" * (3 << 20) + b"\nend of version A\n"
B = (b"B" * 977 + b"\n") * 3000 + b"end of version B\n"


def test_sigkill_during_atomic_writes_leaves_old_or_new_content(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_bytes(A)
    env = dict(os.environ)
    env["PYTHONPATH"] = APP + os.pathsep + env.get("PYTHONPATH", "")
    for delay in (0.05, 0.13, 0.21, 0.34, 0.55):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, env=env)
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        data = target.read_bytes()
        assert data in (A, B), f"file damaged after kill at {delay}s: {len(data)} bytes"
        # leftovers are only temp files beside it, never a partial target
        for p in tmp_path.iterdir():
            assert p == target or p.name.startswith(".strata-precious.txt."), p


def test_sigkill_during_edit_accept_keeps_the_file(tmp_path):
    # a whole headless `strata edit --yes` killed at varying points: the file is always the
    # original or the complete rewrite
    original = "".join(f"line {i}\n" for i in range(350))  # fits the fake's context
    target = tmp_path / "big.txt"
    env = dict(os.environ, STRATA_ALLOW_FAKE="1", STRATA_HOME=str(tmp_path / "home"))
    env["PYTHONPATH"] = APP + os.pathsep + env.get("PYTHONPATH", "")
    rewritten = original.replace("line", "LINE")
    killed = 0
    for delay in (0.3, 1.0, None):
        target.write_text(original)
        proc = subprocess.Popen([sys.executable, "-m", "strata", "edit", str(target), "-m", "fake",
                                 "-i", "replace line with LINE", "--yes", "--no-save"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        if delay is not None:
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
        killed += proc.wait(timeout=60) == -signal.SIGKILL
        text = target.read_text()
        assert text in (original, rewritten)
    # the last run was not killed: the edit really happens
    assert text == rewritten
    assert killed >= 1

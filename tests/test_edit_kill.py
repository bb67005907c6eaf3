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


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    # the child creates `path` when it reaches the hold point and then blocks there for good;
    # waiting on it (not on a clock) makes the kill land at that point on any machine
    while not path.exists():
        assert proc.poll() is None, f"strata edit exited ({proc.returncode}) before the hold point"
        time.sleep(0.01)


def test_sigkill_during_edit_accept_keeps_the_file(tmp_path):
    # a whole headless `strata edit --yes` killed at known points (first window, mid-rewrite,
    # the last window just before the accept): the file is always the original or the
    # complete rewrite, and the run that is not killed really writes it
    original = "".join(f"line {i}\n" for i in range(350))  # fits the fake's context
    target = tmp_path / "big.txt"
    base_env = dict(os.environ, STRATA_ALLOW_FAKE="1", STRATA_HOME=str(tmp_path / "home"))
    base_env["PYTHONPATH"] = APP + os.pathsep + base_env.get("PYTHONPATH", "")
    rewritten = original.replace("line", "LINE")
    for hold in ("1", "40", "end", None):
        target.write_text(original)
        marker = tmp_path / f"held-{hold}"
        env = dict(base_env)
        if hold is not None:
            env["STRATA_FAKE_HOLD"] = f"{hold}:{marker}"
        proc = subprocess.Popen([sys.executable, "-m", "strata", "edit", str(target), "-m", "fake",
                                 "-i", "replace line with LINE", "--yes", "--no-save"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        if hold is not None:
            _wait_for(marker, proc)
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=60) == -signal.SIGKILL
            assert target.read_text() == original, f"file changed by a run killed at window {hold}"
        else:
            err = proc.communicate(timeout=120)[1]
            assert proc.returncode == 0, err.decode()
            assert target.read_text() == rewritten

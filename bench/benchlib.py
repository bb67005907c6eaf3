"""What every bench/ script shares: finding strata (installed or a dev build), the quiet-machine
options, a competing busy process, and the T=1 decode timings (greedy and a fixed random stream).

Only the standard library is imported at module level (numpy lazily), so engine workers that run
in another interpreter (llama.cpp's venv) can import it too.

Quiet-machine options (add_quiet_args): before a measurement, wait up to --wait-quiet s until the
rest of the machine uses fewer than --quiet-cores cores; while it runs, record how many cores the
rest of the machine used ("others"); a measurement during which others used more than
--max-others cores is re-run up to --retry-busy times, else marked busy. These machines are
shared and noisy: compare only ratios from one run.
"""
from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


# ---------------------------------------------------------------- finding strata

def import_strata():
    """The strata Python finds (an install, or a checkout on PYTHONPATH with STRATA_DEV_BUILD);
    without one, this repository's app/ folder (then STRATA_DEV_BUILD must name a dev build).
    Exits with a one-line message when neither has the compiled engine."""
    try:
        import strata
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "app"))
        import strata
    try:
        from strata import _engine  # noqa: F401
    except ImportError as e:
        where = os.path.dirname(os.path.abspath(strata.__file__))
        sys.exit(f"strata at {where} has no compiled engine ({e}); install it (pip install .) or build one "
                 "(scripts/dev-build.sh NAME) and set STRATA_DEV_BUILD=build/dev-NAME")
    return strata


def build_env(build: str) -> dict:
    """The environment of a child process that imports the strata of `build`: "installed" (the
    installed package, no dev build) or a dev-build folder (this checkout's app/ with it)."""
    env = dict(os.environ)
    env.pop("STRATA_DEV_BUILD", None)
    if build != "installed":
        env["STRATA_DEV_BUILD"] = build
        env["PYTHONPATH"] = os.path.join(REPO, "app")
    return env


def strata_info(strata) -> dict:
    """Where the strata under test comes from, for the report."""
    from strata import _engine

    pkg = os.path.dirname(os.path.abspath(strata.__file__))
    src = os.path.dirname(pkg)
    return {"package": pkg, "engine": os.path.abspath(_engine.__file__), "git": git_describe(src),
            "dev_build": os.environ.get("STRATA_DEV_BUILD"),
            "installed": "site-packages" in pkg or "dist-packages" in pkg}


def git_describe(root: str = REPO) -> str:
    """Short HEAD of the checkout at root, '+dirty' when its engine sources have local changes."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return "not a git checkout"
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "engine_ext", "app/strata"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


# ---------------------------------------------------------------- quiet machine

def add_quiet_args(ap) -> None:
    ap.add_argument("--wait-quiet", type=float, default=120.0,
                    help="before each measurement, wait up to this many seconds for the machine to quiet down "
                         "(0: never)")
    ap.add_argument("--max-others", type=float, default=0.25,
                    help="a measurement during which other processes used more cores than this is re-run "
                         "(--retry-busy times), else marked busy and left out of the medians")
    ap.add_argument("--retry-busy", type=int, default=2)
    ap.add_argument("--quiet-cores", type=float, default=0.3,
                    help="'quiet' = other processes use fewer cores than this over 2 s")


def cpu_busy_s() -> float | None:
    """CPU seconds spent busy on the whole machine since boot (all CPUs), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def children_cpu_s() -> float:
    return own_cpu_s(resource.RUSAGE_CHILDREN)


def wait_for_quiet(max_wait: float, threshold: float) -> float | None:
    """Wait (up to max_wait s) until other processes use less than `threshold` cores over 2 s.
    Returns the last measured use in cores (None where /proc/stat is missing)."""
    if max_wait <= 0:
        return None
    deadline = time.time() + max_wait
    while True:
        b0 = cpu_busy_s()
        if b0 is None:
            return None
        time.sleep(2.0)
        use = (cpu_busy_s() - b0) / 2.0
        if use < threshold or time.time() >= deadline:
            return use
        print(f"  machine busy ({use:.1f} cores in use), waiting ...", file=sys.stderr, flush=True)


class OthersMeter:
    """Cores used by the rest of the machine while the block ran: machine busy time minus this
    process's own time and that of its reaped children (a busy process we started counts as ours)."""

    def __enter__(self):
        self.b0, self.o0, self.t0 = cpu_busy_s(), own_cpu_s() + children_cpu_s(), time.time()
        return self

    def __exit__(self, *exc):
        wall = time.time() - self.t0
        b1, o1 = cpu_busy_s(), own_cpu_s() + children_cpu_s()
        self.cores = None
        if self.b0 is not None and b1 is not None and wall > 0:
            self.cores = max(0.0, ((b1 - self.b0) - (o1 - self.o0)) / wall)
        return False


def quiet_measure(fn, args, label: str = ""):
    """Run fn() on a quiet machine per the quiet options: returns (result, others_cores, busy)."""
    res, others, busy = None, None, False
    for attempt in range(args.retry_busy + 1):
        wait_for_quiet(args.wait_quiet, args.quiet_cores)
        with OthersMeter() as m:
            res = fn()
        others = m.cores
        busy = others is not None and others > args.max_others
        if not busy:
            break
        print(f"  {label}: other processes used {others:.2f} cores, "
              + ("re-running" if attempt < args.retry_busy else "kept, marked busy"), file=sys.stderr, flush=True)
    return res, others, busy


# ---------------------------------------------------------------- a competing busy process

BUSY_CODE = "while True: pass"


@contextlib.contextmanager
def busy_process(n: int = 1):
    """n single-threaded busy loops next to the measurement (what a browser tab or a build does to
    a laptop), stopped and reaped on exit so their CPU time counts as ours in OthersMeter."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_CODE], stdin=subprocess.DEVNULL) for _ in range(n)]
    try:
        time.sleep(0.3)  # let them reach the loop
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ---------------------------------------------------------------- T=1 decode

def random_stream(vocab: int, n: int, seed: int = 3) -> list[int]:
    """The fixed random token stream for forced decode: every engine sees the same ids. Greedy
    decode of a random model repeats a few tokens (and so a few experts); this does not."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


def time_greedy(step, first_logits, n: int) -> tuple[float, list[int]]:
    """n greedy T=1 steps (step(token) -> logits row, committed); returns (tok/s, tokens)."""
    import numpy as np

    tok = int(np.argmax(first_logits))
    out = [tok]
    t = time.perf_counter()
    for _ in range(n):
        tok = int(np.argmax(step(tok)))
        out.append(tok)
    return n / (time.perf_counter() - t), out


def time_forced(step, tokens: list[int]) -> float:
    """T=1 steps over a fixed token stream; tok/s (the argmax is still taken, as a decoder would)."""
    import numpy as np

    t = time.perf_counter()
    for tok in tokens:
        int(np.argmax(step(tok)))
    return len(tokens) / (time.perf_counter() - t)


# ---------------------------------------------------------------- verification windows

WINDOW_TS = (1, 2, 4, 8, 16)
WINDOW_PREFIX = 256


def window_tokens(vocab: int) -> tuple[list[int], list[int]]:
    """The prefix and the 16 window ids every window-cost measurement uses (vs_anchors.py and
    window_cost.py alike): a 256-id random prefix (seed 1) and 16 random window ids (seed 2)."""
    import numpy as np

    return (np.random.default_rng(1).integers(0, vocab, WINDOW_PREFIX).tolist(),
            np.random.default_rng(2).integers(0, vocab, max(WINDOW_TS)).tolist())


def window_rounds(restore, window, accept, tokens: list[int], rounds: int, clock=time.perf_counter,
                  window_bytes=None) -> dict:
    """The one window-cost procedure. Each round runs T = 1, 2, 4, 8, 16 in turn, each from the
    restored prefix state (restore() is not timed), timing window(tokens[:T]) alone; accept(T)
    is untimed bookkeeping. Round 0 is a warm-up. window_bytes(), where given, returns the weight
    bytes the last window touched (its bytes floor).

    cost_ms: median over rounds per T. ratio: median over rounds of cost_r(T)/cost_r(1), the
    ratio paired within each round, so a load that comes and goes between rounds cancels (a ratio
    of medians taken from different rounds does not); ratio_min/ratio_max: their spread."""
    import statistics

    costs = {T: [] for T in WINDOW_TS}
    nbytes = {}
    for r in range(rounds + 1):
        for T in WINDOW_TS:
            restore()
            t = clock()
            window(tokens[:T])
            dt = clock() - t
            if window_bytes is not None:
                nbytes[T] = window_bytes(T)
            accept(T)
            if r > 0:
                costs[T].append(dt)
    ratios = {T: [c / c1 for c, c1 in zip(costs[T], costs[1])] for T in WINDOW_TS}
    out = {"cost_ms": {T: statistics.median(costs[T]) * 1e3 for T in WINDOW_TS},
           "cost_min_ms": {T: min(costs[T]) * 1e3 for T in WINDOW_TS},
           "ratio": {T: statistics.median(ratios[T]) for T in WINDOW_TS},
           "ratio_min": {T: min(ratios[T]) for T in WINDOW_TS},
           "ratio_max": {T: max(ratios[T]) for T in WINDOW_TS},
           "cost_ms_all": {T: [c * 1e3 for c in costs[T]] for T in WINDOW_TS}}
    if window_bytes is not None:
        out["bytes"] = nbytes
        b1 = nbytes.get(1)
        out["excess"] = {T: (out["ratio"][T] / (nbytes[T] / b1) - 1.0) if b1 and nbytes.get(T) else None
                         for T in WINDOW_TS}
    return out

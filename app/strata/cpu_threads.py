"""The engine's default thread count: one thread per physical core this process may run on,
leaving one core free on machines with more than four.

Why: the engine's kernels are FMA-bound, so a second hyperthread on a core adds little and makes
the fork-join pool wait on the slower sibling (llama.cpp also defaults to physical cores); and a
laptop always runs something else (a browser, the TUI, the expert IO threads), so on larger
machines one core is left for them. On small machines (<= 4 cores) every core is used: the pool
sleeps when it has no work, and while its threads together get only about one core (2 threads
on 2 cores next to one busy process, where 2 threads decode no faster than 1) it runs its calls
on the calling thread alone for a while (engine_ext/threadpool.h), so the default loses little
there and keeps the quiet machine's 1.9x.
"""
from __future__ import annotations

import os

from .errors import UsageError

_TOPOLOGY = "/sys/devices/system/cpu/cpu{}/topology/{}"


def usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def physical_cores(cpus: list[int]) -> int:
    """Distinct (package, core) pairs among cpus; len(cpus) where the topology is not readable."""
    cores = set()
    for c in cpus:
        try:
            with open(_TOPOLOGY.format(c, "core_id")) as f:
                core = f.read().strip()
            with open(_TOPOLOGY.format(c, "physical_package_id")) as f:
                pkg = f.read().strip()
        except OSError:
            return len(cpus)
        cores.add((pkg, core))
    return len(cores) or len(cpus)


def default_threads() -> int:
    n = physical_cores(usable_cpus())
    return max(1, n - 1 if n > 4 else n)


def check_pool_setting() -> None:
    """The engine's 0/1 switches, read in C++: STRATA_POOL_ADAPT (the thread pool: unset or 1, fall
    back to the calling thread while the pool's threads get about one core; 0, never) and
    STRATA_HUGE_PAGES (unset or 1, weight copies on 2 MiB pages; 0, small pages). Another value is
    a one-line error here rather than the engine's exception."""
    for name, what in (("STRATA_POOL_ADAPT", "one thread while the pool gets about one core"),
                       ("STRATA_HUGE_PAGES", "weight copies on 2 MiB pages")):
        v = os.environ.get(name)
        if v is not None and v not in ("0", "1"):
            raise UsageError(f"{name}={v!r}: use 0 or 1 (1, the default: {what})")

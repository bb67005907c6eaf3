"""Default engine thread count: physical cores of the affinity mask, one left free above 4."""
from __future__ import annotations

import pytest

from strata import cpu_threads


def fake_topology(tmp_path, cores):
    """cores[i] = (package, core) of cpu i, written as /sys/devices/system/cpu/cpuN/topology."""
    for cpu, (pkg, core) in enumerate(cores):
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "core_id").write_text(f"{core}\n")
        (d / "physical_package_id").write_text(f"{pkg}\n")
    return str(tmp_path / "cpu{}" / "topology" / "{}")


@pytest.mark.parametrize("cores,cpus,want", [
    ([(0, 0), (0, 1)], [0, 1], 2),                                   # 2-core VM: both
    ([(0, 0), (0, 0), (0, 1), (0, 1)], [0, 1, 2, 3], 2),             # 2 cores with SMT: one per core
    ([(0, c) for c in range(8)], list(range(8)), 7),                 # 8 cores: leave one
    ([(0, c) for c in range(4)] * 2, list(range(8)), 4),             # 4 cores x 2 threads: 4
    ([(p, c) for p in range(2) for c in range(3)], list(range(6)), 5),  # two packages, same core ids
    ([(0, c) for c in range(8)], [2, 5], 2),                         # affinity mask of 2 cpus
])
def test_default_threads(tmp_path, monkeypatch, cores, cpus, want):
    monkeypatch.setattr(cpu_threads, "_TOPOLOGY", fake_topology(tmp_path, cores))
    monkeypatch.setattr(cpu_threads, "usable_cpus", lambda: cpus)
    assert cpu_threads.default_threads() == want


def test_unreadable_topology_counts_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_threads, "_TOPOLOGY", str(tmp_path / "missing{}" / "{}"))
    monkeypatch.setattr(cpu_threads, "usable_cpus", lambda: [0, 1, 2])
    assert cpu_threads.default_threads() == 3


def test_engine_uses_the_default(tmp_path):
    import strata
    from strata.devmodel import write_random_model

    write_random_model(str(tmp_path / "m"), "qwen3_moe", seed=0, preset="tiny")
    assert strata.load(str(tmp_path / "m")).threads == cpu_threads.default_threads()

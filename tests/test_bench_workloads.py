"""bench/make_workloads.py: the real-file edits are exactly the asked change (checked with ast on
a file written here), and the real-file workloads build from the installed packages when their
pinned versions are there."""
from __future__ import annotations

import ast
import importlib.metadata
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import make_workloads as mw  # noqa: E402

SOURCE = '''"""A module."""
from __future__ import annotations

import os
from typing import Any


def helper(x: int) -> int:
    return x + 1


@staticmethod
def gone(y):
    """Goes."""
    return helper(y)


class Thing:
    def use(self) -> int:
        return helper(2)
'''


def test_add_import_goes_after_future_imports():
    out = mw.apply_edit(SOURCE, "add_import", "math")
    lines = out.splitlines()
    assert lines.index("import math") == lines.index("import os") - 1
    assert lines.index("from __future__ import annotations") < lines.index("import math")
    assert out.replace("import math\n", "", 1) == SOURCE


def test_rename_everywhere():
    out = mw.apply_edit(SOURCE, "rename", ("helper", "assist"))
    assert "helper" not in out and out.count("assist") == SOURCE.count("helper")
    with pytest.raises(ValueError):
        mw.apply_edit(SOURCE, "rename", ("helper", "Thing"))  # the new name is taken


def test_delete_takes_the_decorators_and_the_blank_lines_after():
    out = mw.apply_edit(SOURCE, "delete", "gone")
    tree = ast.parse(out)
    assert [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))] == ["helper", "Thing"]
    assert "@staticmethod" not in out and "\n\n\n\n" not in out
    assert out.startswith(SOURCE[:SOURCE.index("@staticmethod")])


def test_unchanged_is_the_file():
    assert mw.apply_edit(SOURCE, "unchanged", None) == SOURCE


def test_mid_block_cut_lands_inside_a_function():
    lines = SOURCE.splitlines(keepends=True)
    cut = mw._mid_block_cut(lines, 0)
    assert lines[cut - 1].startswith("    ") and lines[cut].startswith("    ")


def _pinned_installed() -> bool:
    try:
        return all(importlib.metadata.version(p) == v for p, v in mw.PINNED.items())
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.skipif(not _pinned_installed(), reason="the pinned rich/click/jinja2/networkx are not installed")
def test_real_workloads_build_and_record_their_sources(tmp_path):
    paths = mw.build_real(tmp_path)
    edits = [p for p in paths if p.suffix == ".jsonl"]
    conts = [p for p in paths if p.suffix == ".json"]
    assert len(edits) == len(mw.REAL_EDITS) and len(conts) == len(mw.REAL_CONTINUATIONS)
    from strata.session_format import read_session_file

    for p in edits:
        rec = read_session_file(p)
        (turn,) = rec.turns
        ast.parse(turn.output)
        head = json.loads(p.read_text(encoding="utf-8").splitlines()[0])
        assert head["source"]["version"] == mw.PINNED[head["source"]["package"]]
        assert (turn.output == turn.file_content) == (head["edit_kind"] == "unchanged")
    for p in conts:
        obj = json.loads(p.read_text(encoding="utf-8"))
        assert obj["kind"] == "continue" and obj["prompt"] and obj["answer"]

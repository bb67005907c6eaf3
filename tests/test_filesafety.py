"""strata edit writes files the way a careful editor does: symlinks followed (the link stays),
read-only files and hard links refused (or, with --force, written in place), killed runs'
temp files cleaned up, and a rewrite that breaks a file that parsed refused unless forced."""
import io
import json
import os
import subprocess
import sys

import pytest

from strata.cli import ExitCode, app
from strata.cli.runner import run_app
from strata.edit import EditSession
from strata.errors import EditError
from strata.testing.fake import FakeGenerator
from strata.editscope import asked_renames, missing_imports, unexplained_changes, unfinished_renames
from strata.filesafety import clean_stale_temps, rewrite_checks, rewrite_warnings, write_target
from strata.store.atomic import atomic_write_bytes, stale_temp_files
from strata.undefnames import newly_undefined

PY = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(12))


@pytest.fixture
def cli_env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    monkeypatch.setenv("STRATA_DEBUG", "0")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))


def run(capsys, *args):
    with pytest.raises(SystemExit) as info:
        run_app(app, list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def _one_line(err):
    assert "Traceback" not in err
    assert len([x for x in err.splitlines() if x.startswith("strata: error")]) == 1, err


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# -- symlinks ----------------------------------------------------------------------------------
def test_symlink_edits_the_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "real" / "calc.py"
    real.parent.mkdir()
    real.write_text(PY)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    ed = EditSession(FakeGenerator(), link)
    assert any("symlink" in n for n in ed.notes)
    list(ed.propose("replace x + 1 with x * 100"))
    ed.accept()
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == PY.replace("x + 1", "x * 100")
    ed.undo()
    assert link.is_symlink() and real.read_text() == PY
    assert stale_temp_files(real) == [] and stale_temp_files(link) == []


def test_relative_and_chained_symlinks(tmp_path):
    (tmp_path / "d").mkdir()
    real = tmp_path / "d" / "a.txt"
    real.write_text("one\n")
    (tmp_path / "d" / "b.txt").symlink_to("a.txt")          # relative
    (tmp_path / "c.txt").symlink_to(tmp_path / "d" / "b.txt")  # a link to a link
    ed = EditSession(FakeGenerator(), tmp_path / "c.txt")
    list(ed.propose("replace one with two"))
    ed.accept()
    assert real.read_text() == "two\n"
    assert (tmp_path / "c.txt").is_symlink() and (tmp_path / "d" / "b.txt").is_symlink()


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_broken_symlinks_are_one_line_errors(tmp_path, kind):
    link = tmp_path / "x.py"
    if kind == "dangling":
        link.symlink_to(tmp_path / "missing.py")
    else:
        link.symlink_to(tmp_path / "y.py")
        (tmp_path / "y.py").symlink_to(link)
    with pytest.raises(EditError, match="x.py"):
        EditSession(FakeGenerator(), link)


# -- read-only and hard links -------------------------------------------------------------------
@pytest.mark.parametrize("mode", [0o444, 0o400, 0o555])
def test_read_only_files_are_not_written(tmp_path, mode):
    f = tmp_path / "ro.py"
    f.write_text(PY)
    f.chmod(mode)
    ed = EditSession(FakeGenerator(), f)
    assert any("read-only" in n for n in ed.notes)
    list(ed.propose("replace x + 1 with x * 2"))
    with pytest.raises(EditError, match="read-only"):
        ed.accept()
    assert f.read_text() == PY and (f.stat().st_mode & 0o777) == mode


def test_cli_yes_on_a_read_only_file_refuses_before_loading(capsys, cli_env, tmp_path):
    f = tmp_path / "ro.py"
    f.write_text(PY)
    f.chmod(0o444)
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace x with y", "--yes")
    assert code == ExitCode.EDIT and "read-only" in err
    _one_line(err)
    assert f.read_text() == PY


def test_hard_links_are_refused_or_written_in_place(tmp_path):
    a = tmp_path / "a.py"
    a.write_text(PY)
    b = tmp_path / "b.py"
    os.link(a, b)
    ed = EditSession(FakeGenerator(), a)
    list(ed.propose("replace x + 1 with x * 2"))
    with pytest.raises(EditError, match="hard links"):
        ed.accept()
    assert a.read_text() == b.read_text() == PY
    inode = a.stat().st_ino
    ed = EditSession(FakeGenerator(), a, force=True)
    assert any("in place" in n for n in ed.notes)
    list(ed.propose("replace x + 1 with x * 2"))
    ed.accept()
    assert a.read_text() == b.read_text() == PY.replace("x + 1", "x * 2")
    assert a.stat().st_ino == inode and a.stat().st_nlink == 2
    assert stale_temp_files(a) == []


def test_folder_without_write_permission(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes in any folder")
    d = tmp_path / "ro"
    d.mkdir()
    f = d / "x.py"
    f.write_text(PY)
    d.chmod(0o555)
    try:
        assert "cannot write in the folder" in (write_target(f).refusal or "")
    finally:
        d.chmod(0o755)


# -- stale temp files ---------------------------------------------------------------------------
def test_stale_temps_of_killed_writers_are_removed_live_ones_kept(tmp_path):
    f = tmp_path / "calc.py"
    f.write_text(PY)
    dead = _dead_pid()
    stale = [tmp_path / f".strata-calc.py.{dead}.abcd1234.tmp",
             tmp_path / ".strata-calc.py.oldformat.tmp"]
    live = tmp_path / f".strata-calc.py.{os.getpid()}.zz.tmp"
    other = tmp_path / f".strata-calc.pyc.{dead}.q.tmp"    # another file's temp: not ours
    for p in stale + [live, other]:
        p.write_text("half")
    notes = clean_stale_temps(f)
    assert notes and "removed 2 temp files" in notes[0]
    assert not any(p.exists() for p in stale)
    assert live.exists() and other.exists() and f.read_text() == PY


def test_a_backup_of_an_interrupted_in_place_write_is_never_deleted(tmp_path):
    f = tmp_path / "calc.py"
    f.write_text(PY[:40])
    backup = tmp_path / f".strata-calc.py.{_dead_pid()}.bak"
    backup.write_text(PY)
    with pytest.raises(EditError, match="interrupted in-place write"):
        EditSession(FakeGenerator(), f)
    assert backup.read_text() == PY


def test_temp_names_carry_the_pid(tmp_path):
    f = tmp_path / "x"
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(os.path.basename(src))
        return real_replace(src, dst)

    os.replace = spy
    try:
        atomic_write_bytes(f, b"data")
    finally:
        os.replace = real_replace
    assert seen and seen[0].startswith(f".strata-x.{os.getpid()}.")


# -- never write a broken file ------------------------------------------------------------------
BROKEN = {
    "x.py": ("def f(x):\n    return x\n", "def f(x:\n    return x\n"),
    # these parse into an AST but Python refuses to compile them: the file would not import
    # (strata-tiny put `import math` above `from __future__ import annotations` on a real file)
    "future.py": ("from __future__ import annotations\nimport re\n",
                  "import math\nfrom __future__ import annotations\nimport re\n"),
    "ret.py": ("def f():\n    return 1\n", "def f():\n    pass\nreturn 1\n"),
    "brk.py": ("for i in x:\n    break\n", "for i in x:\n    pass\nbreak\n"),
    "x.json": ('{"a": [1, 2]}\n', '{"a": [1, 2}\n'),
    "x.toml": ('[a]\nb = 1\n', '[a\nb = 1\n'),
    "x.yaml": ("a:\n  - 1\n  - 2\n", "a:\n  - 1\n - 2: [\n"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_rewrite_that_stops_parsing_is_refused_unless_forced(tmp_path, name):
    old, new = BROKEN[name]
    warnings = rewrite_warnings(name, old, new)
    if name.endswith(".yaml"):
        pytest.importorskip("yaml")
    assert len(warnings) == 1 and "not valid" in warnings[0] and "line" in warnings[0]
    assert warnings[0].endswith("the original was valid")  # a whole sentence, not cut off
    f = tmp_path / name
    f.write_text(old)
    ed = EditSession(FakeGenerator(responder=lambda ctx, s: new + "<|endoftext|>"), f)
    list(ed.propose("break it"))
    assert ed.proposal.warnings == warnings
    with pytest.raises(EditError, match="--force"):
        ed.accept()
    assert f.read_text() == old
    ed.accept(force=True)
    assert f.read_text() == new


@pytest.mark.parametrize("name,old,new", [
    ("x.py", "def f(:\n", "def f():\n    pass\n"),        # it did not parse before
    ("x.py", "a = 1\n", "a = 2\n"),
    ("x.json", "{}", '{"a": 1}'),
    ("x.txt", "(\n", ")\n"),                               # no parser for text
    ("x.md", "# t\n" * 20, "# t\n"),                      # small? no: 20 lines -> 1 is a deletion
])
def test_no_false_alarms(name, old, new):
    got = rewrite_warnings(name, old, new)
    if name == "x.md":
        assert got and "deletes most" in got[0]
    else:
        assert got == []


def test_deleting_the_function_that_is_most_of_the_file_is_no_alarm():
    """Three of this machine's 200 held-out tasks delete a function that is most of its file:
    asked for, and every removed line is that function's, so "deletes most of the file" is no
    warning there; the same deletion under another instruction still is."""
    big = "import os\n\n\ndef big(x):\n" + "".join(f"    x += {i}\n" for i in range(30)) + "    return x\n\n\nY = 1\n"
    new = "import os\n\n\nY = 1\n"
    assert rewrite_warnings("m.py", big, new, "delete the function big") == []
    # also where another step is one no check reads: every line gone is big's (seen on v7's
    # held-out multi edits, "remove `f` and add a function g(a) that ...; remove `import x`")
    assert rewrite_warnings("m.py", big, new, "delete the function big and fix Y") == []
    assert any("deletes most" in w for w in rewrite_warnings("m.py", big, new, "fix Y"))
    assert any("deletes most" in w for w in rewrite_warnings("m.py", big, new, None))
    # a deletion that also takes lines the instruction does not name is warned about as before
    got = rewrite_warnings("m.py", big, "Y = 1\n", "delete the function big")
    assert any("does not explain" in w for w in got) and any("deletes most" in w for w in got), got


@pytest.mark.parametrize("n_old,n_new,warn", [(40, 3, True), (40, 19, True), (40, 21, False),
                                              (40, 40, False), (7, 0, False), (8, 0, True)])
def test_deleting_most_of_the_file(n_old, n_new, warn):
    old = "".join(f"line {i}\n" for i in range(n_old))
    new = "".join(f"line {i}\n" for i in range(n_new))
    assert bool(rewrite_warnings("notes.txt", old, new)) == warn


def test_cli_yes_refuses_a_broken_rewrite_and_force_writes_it(capsys, cli_env, tmp_path):
    f = tmp_path / "calc.py"
    f.write_text(PY)
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace (x) with (x", "--yes", "--no-save")
    assert code == ExitCode.EDIT and "not valid Python" in err and "--force" in err
    _one_line(err)
    assert f.read_text() == PY
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace (x) with (x", "--yes",
                       "--force", "--no-save")
    assert code == 0, err
    assert "warning" in err and f.read_text() == PY.replace("(x)", "(x")


def test_deeply_nested_json_is_checked_without_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    got = rewrite_warnings("x.json", "[1]", deep)
    assert got and "nested too deeply" in got[0]
    assert rewrite_warnings("x.py", "a = 1\n", "a = " + "(" * 10_000 + ")" * 10_000 + "\n")


def test_the_new_core_modules_do_not_import_textual_or_rich():
    code = ("import sys\n"
            "import strata.filesafety, strata.templates, strata.textcheck\n"
            "from strata.templates import render\n"
            "render('{{ messages[0].content }}', [{'role': 'user', 'content': 'x'}])\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))))\n")
    env = dict(os.environ, PYTHONPATH=str(__import__("pathlib").Path(__file__).resolve().parents[1] / "app"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


# A Python rewrite that drops a function or class the instruction does not name: strata-tiny,
# asked to rename rgb_to_hsv in colorsys.py, left out hls_to_rgb, and `--yes` wrote it (it parsed).
COLORS = ('__all__ = ["rgb_to_hsv", "hls_to_rgb"]\n\n\ndef rgb_to_hsv(r, g, b):\n    return r, g, b\n\n\n'
          'def hls_to_rgb(h, l, s):\n    return _v(h, l, s)\n\n\ndef _v(m1, m2, hue):\n    return m1\n\n\n'
          'class Palette:\n    def add(self, c):\n        pass\n\n    def clear(self):\n        pass\n')


@pytest.mark.parametrize("instruction,new,dropped", [
    # the rename, done right: the old name is gone, and the instruction names it
    ("rename rgb_to_hsv to rgb_to_hsv_color", COLORS.replace("rgb_to_hsv", "rgb_to_hsv_color"), []),
    # the rename, with another function left out
    ("rename rgb_to_hsv to rgb_to_hsv_color",
     COLORS.replace("rgb_to_hsv", "rgb_to_hsv_color").replace(
         "def hls_to_rgb(h, l, s):\n    return _v(h, l, s)\n\n\n", ""), ["hls_to_rgb"]),
    # deleting what was asked for, in any case and with backticks
    ("Delete the function `HLS_TO_RGB`.", COLORS.replace("def hls_to_rgb(h, l, s):\n    return _v(h, l, s)\n\n\n", ""), []),
    # a method is named with its class; a dropped class is named once, not with its methods
    ("add a docstring", COLORS.replace("    def clear(self):\n        pass\n", "    pass\n"), ["Palette.clear"]),
    ("add a docstring", COLORS[:COLORS.index("class Palette")], ["Palette"]),
    # a name that is only part of a word in the instruction does not count as named
    ("remove the _v_helper call", COLORS.replace("def _v(m1, m2, hue):\n    return m1\n\n\n", ""), ["_v"]),
    # a second definition of a name added: nothing dropped
    ("tidy up", COLORS + "\n\ndef _v(a, b, c):\n    return a\n", []),
])
def test_a_python_rewrite_that_drops_a_definition_the_instruction_does_not_name(instruction, new, dropped):
    got = [w for w in rewrite_warnings("colorsys.py", COLORS, new, instruction) if "drops" in w]
    if not dropped:
        assert got == []
    else:
        assert len(got) == 1 and got[0].endswith("which the instruction does not name"), got
        names = got[0].split("drops the definition")[1].split(",")[0].split()
        assert names == dropped, got


def test_many_dropped_definitions_are_counted_not_all_listed():
    old = "".join(f"def f{i}(x):\n    return x\n\n\n" for i in range(10))
    got = rewrite_warnings("m.py", old, "def f0(x):\n    return x\n", "keep f0")
    assert any("drops the definitions f1, f2, f3, f4 and 5 more," in w for w in got), got
    # two definitions of one name, one of them left: still a drop
    twice = old + "def f0(x):\n    return -x\n"
    assert any("drops the definition f0," in w for w in rewrite_warnings("m.py", twice, old, "tidy up"))
    # not Python, or not parsing before: no such check
    assert not any("drops" in w for w in rewrite_warnings("m.txt", old, "", "x"))
    assert not any("drops" in w for w in rewrite_warnings("m.py", old + "def (:\n", "", "x"))


def test_cli_yes_refuses_a_rewrite_that_drops_an_unnamed_function(capsys, cli_env, tmp_path):
    src = "def keep(x):\n    return x\n\n\ndef lost(x):\n    pass\n"
    f = tmp_path / "two.py"
    f.write_text(src)
    # the fake model applies `replace A with B`: `def lost(x):` becomes `while False: #ost(x):`
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace def l with while False: #",
                       "--yes", "--no-save")
    assert code == ExitCode.EDIT and "drops the definition lost," in err and "--force" in err, err
    _one_line(err)
    assert f.read_text() == src
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace def l with while False: #",
                       "--yes", "--force", "--no-save")
    assert code == 0, err
    assert "while False: #ost(x):" in f.read_text()


# A rename the rewrite did not finish: strata-tiny, asked to rename insort_left in bisect.py,
# renamed nothing (and changed another function), and `--yes` wrote it; asked to rename
# rgb_to_hsv in colorsys.py, it missed the `__all__` entry.
@pytest.mark.parametrize("instruction,pairs", [
    ("rename insort_left to insort_before", [("insort_left", "insort_before")]),
    ("Rename the function `foo` to `bar`.", [("foo", "bar")]),
    ("please rename method add as append, thanks", [("add", "append")]),
    ("change the name of x to y", [("x", "y")]),
    ("a -> b and `c` -> `d`", [("a", "b"), ("c", "d")]),
    ("call the class Bar instead of Foo", [("Foo", "Bar")]),
    ("foo should be called bar", [("foo", "bar")]),
    ("replace every use of f1 with g1", [("f1", "g1")]),
    # not renames: a plain "replace" (one spot or a value), a signature, a file, the same name
    ("replace f1 with g1", []),
    ("add a function f(x) -> int", []),
    # quoted names are string literals: '"a" -> "b"' changes a string, even one that is a name too
    ('"find_triple" -> "signal_key"', []),
    ("`'a'` -> `'b'`, thanks", []),
    ("`cell_table` should be called `message`.", [("cell_table", "message")]),
    ("rename the file", []),
    ("rename a to a", []),
])
def test_the_renames_an_instruction_asks_for(instruction, pairs):
    assert asked_renames(instruction) == pairs


def test_a_rename_the_rewrite_did_not_finish():
    done = COLORS.replace("rgb_to_hsv", "to_hsv")
    ask = "rename rgb_to_hsv to to_hsv"
    assert [w for w in rewrite_warnings("colorsys.py", COLORS, done, ask) if "rename" in w] == []
    # the `__all__` string left behind
    left = done.replace('"to_hsv"', '"rgb_to_hsv"')
    assert rewrite_warnings("colorsys.py", COLORS, left, ask) == [
        "the rewrite still uses rgb_to_hsv (line 1), which the instruction renames to to_hsv"]
    # nothing renamed: the def is "dropped" (the instruction names it) and still there by its name
    got = rewrite_warnings("colorsys.py", COLORS, COLORS.replace("m1\n", "m2\n"), ask)
    assert got == ["the rewrite still uses rgb_to_hsv (lines 1, 4), which the instruction renames to to_hsv",
                   "the rewrite also changes line 13, which the rename does not explain"]
    # a name only in a comment or after a dot (another object's attribute) is not a use
    assert unfinished_renames("x = 1  # see f\nd.f()\n", "y = 1  # see f\nd.f()\n", "rename f to g") == [
        "the instruction renames f, which the file never uses"]
    assert unfinished_renames("def f():\n    pass\n# f\nd.f()\n", "def g():\n    pass\n# f\nd.f()\n",
                              "rename f to g") == []
    # ... but a method of the file's own class called through self (or cls) is a use of it
    cls = "class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return self.f() + d.f()\n"
    half = cls.replace("def f(", "def h(")
    assert unfinished_renames(cls, half, "rename f to h") == [
        "the rewrite still uses f (line 6), which the instruction renames to h"]
    assert unfinished_renames(cls, half.replace("self.f()", "self.h()"), "rename f to h") == []
    attr = "class B:\n    def __init__(self):\n        self.size = 1\n\n    def grow(self):\n        self.size += 1\n"
    assert unfinished_renames(attr, attr.replace("self.size = 1", "self.length = 1"), "rename size to length") == [
        "the rewrite still uses size (line 6), which the instruction renames to length"]
    # a name the file never uses: said, when the rewrite changed anything
    assert unfinished_renames("def f():\n    pass\n", "def g():\n    pass\n", "rename ff to g") == [
        "the instruction renames ff, which the file never uses"]
    assert unfinished_renames("def f():\n    pass\n", "def f():\n    pass\n", "rename ff to g") == []
    # other files: whole words
    assert unfinished_renames("name: foo\nfoo_x: 1\n", "name: foo\nfoo_x: 1\n", "rename foo to bar",
                              python=False) == ["the rewrite still uses foo (line 1), which the instruction renames to bar"]
    # a line that uses the name three times is named once
    assert unfinished_renames("def _v(a):\n    return _v(_v(a))\n", "def _value(a):\n    return _v(_v(_v(a)))\n",
                              "rename _v to _value") == [
        "the rewrite still uses _v (line 2), which the instruction renames to _value"]
    # long lists of lines end in "..."
    many = "".join(f"f{i} = f\n" for i in range(8))
    assert unfinished_renames("f = 1\n" + many, "f = 1\n" + many, "rename f to g") == [
        "the rewrite still uses f (lines 1, 2, 3, 4, 5, ...), which the instruction renames to g"]


BISECT = ("def bisect_right(a, x, lo=0, hi=None):\n    while lo < hi:\n        mid = (lo + hi) // 2\n"
          "        if x < a[mid]:\n            hi = mid\n        else:\n            lo = mid + 1\n    return lo\n\n\n"
          "def insort_left(a, x):\n    a.insert(bisect_right(a, x), x)  # see insort_left\n")


@pytest.mark.parametrize("instruction,new,lines", [
    # the rename alone, comments included or not: nothing else changed
    ("rename insort_left to insort_before", BISECT.replace("insort_left", "insort_before"), []),
    ("Please rename `insort_left` to `insort_before` everywhere, thanks.",
     BISECT.replace("def insort_left", "def insort_before"), []),
    # strata-tiny on bisect.py: the rename, and bisect_right's comparison turned into bisect_left's
    ("rename insort_left to insort_before",
     BISECT.replace("insort_left", "insort_before").replace("if x < a[mid]:", "if a[mid] < x:"), [4]),
    # a line added or deleted is a change too
    ("insort_left -> insort_before", BISECT.replace("insort_left", "insort_before") + "\nprint(1)\n", [13, 14]),
    ("insort_left -> insort_before", BISECT.replace("    return lo\n", ""), [8]),
    # an instruction that asks for more than renames: no such check
    ("rename insort_left to insort_before and fix bisect_right",
     BISECT.replace("if x < a[mid]:", "if a[mid] < x:"), []),
])
def test_a_rename_that_changes_other_lines(instruction, new, lines):
    what, got = unexplained_changes(BISECT, new, instruction)
    assert got == lines and what == ("rename" if "fix" not in instruction else ""), (what, got)
    got = [w for w in rewrite_warnings("bisect.py", BISECT, new, instruction) if "does not explain" in w]
    assert bool(got) == bool(lines), got


IMPORTS = ('"""Doc."""\nimport os\nfrom typing import (\n    Any,\n    Dict,\n)\n\n\ndef f():\n'
           '    return os.sep\n')


@pytest.mark.parametrize("instruction,new,lines", [
    # each phrasing of an import-only request, done right: nothing else changed
    ("Add `import math` to the imports.", IMPORTS.replace("import os\n", "import math\nimport os\n"), []),
    ("import math", IMPORTS.replace("import os\n", "import math\nimport os\n\n"), []),
    ("drop the import of typing", IMPORTS.replace("from typing import (\n    Any,\n    Dict,\n)\n", ""), []),
    ("sort the imports, thanks!", IMPORTS.replace("import os\nfrom typing import (\n    Any,\n    Dict,\n)\n",
                                                  "from typing import (\n    Any,\n    Dict,\n)\nimport os\n"), []),
    # the import added, and the function body changed too (the model's prior beat the file)
    ("Add `import math` to the imports.",
     IMPORTS.replace("import os\n", "import math\nimport os\n").replace("os.sep", "os.pathsep"), [11]),
    # the docstring dropped with the import: the old line is gone, said where it was
    ("remove import os", IMPORTS.replace('"""Doc."""\nimport os\n', ""), [1]),
    # more than imports asked for, or not about imports: no such check
    ("add import math and use it in f", IMPORTS.replace("os.sep", "math.pi"), []),
    ("add a function that imports things", IMPORTS + "\n\ndef g():\n    pass\n", []),
])
def test_an_import_change_that_changes_other_lines(instruction, new, lines):
    what, got = unexplained_changes(IMPORTS, new, instruction)
    assert got == lines and (what == "import change" or not lines), (what, got)
    warned = [w for w in rewrite_warnings("m.py", IMPORTS, new, instruction) if "does not explain" in w]
    assert bool(warned) == bool(lines), warned
    # only Python files have this check
    assert unexplained_changes(IMPORTS, new, instruction, python=False) == ("", [])


FNMATCH = "import os\nimport posixpath\nimport re\nimport functools\nfrom typing import (\n    Any,\n    Dict,\n)\n\nx = 1\n"


@pytest.mark.parametrize("instruction,new,lines", [
    # stdlib fnmatch.py, seen with strata-tiny v6: the asked import gone, and `import os` turned
    # into a second `import posixpath`: an import line, but not one the instruction names
    ("Delete the line `import functools`.", FNMATCH.replace("import os\n", "import posixpath\n")
     .replace("import functools\n", ""), [1]),
    ("Delete the line `import functools`.", FNMATCH.replace("import functools\n", ""), []),
    # an import added that nobody asked for, or a name dropped from another statement
    ("Add `import math` to the imports.", FNMATCH.replace("import re\n", "import math\nimport re\nimport sys\n"), [5]),
    ("Add `import math` to the imports.", FNMATCH.replace("import re\n", "import math\nimport re\n")
     .replace("    Dict,\n", ""), [8]),
    # a name added to an existing statement, named: explained, however it is wrapped
    ("add `from typing import List`", FNMATCH.replace("    Dict,\n", "    Dict,\n    List,\n"), []),
    ("add `from typing import List`", FNMATCH.replace("from typing import (\n    Any,\n    Dict,\n)\n",
                                                      "from typing import Any, Dict, List\n"), []),
    # sorting moves statements; it adds and removes none
    ("sort the imports", "from typing import Any, Dict\nimport functools\nimport os\nimport posixpath\nimport re\n"
     "\nx = 1\n", []),
    ("sort the imports", "import functools\nimport os\nimport re\nfrom typing import Any, Dict\n\nx = 1\n", [3]),
    # "unused" names no import: any removal is explained, and what is left of a statement
    ("remove unused imports", "import os\nfrom typing import Any\n\nx = 1\n", []),
    ("remove unused imports", "import os\nimport sys\n\nx = 1\n", [2]),
    # seen with v6a: "the unused import exceptions" names one, so another removal is not explained
    ("remove the unused import re", FNMATCH.replace("import re\n", "").replace("import functools\n", ""), [3]),
])
def test_an_import_change_that_changes_import_lines_it_does_not_name(instruction, new, lines):
    assert unexplained_changes(FNMATCH, new, instruction) == ("import change", lines)


CONFIG = 'TIMEOUT = 10\nNAME = "abc"\n\n\ndef f(x):\n    return x + 1\n'


@pytest.mark.parametrize("instruction,new,what,lines", [
    # a literal changed, in each phrasing and quote style, and nothing else
    ("change 10 to 20", CONFIG.replace("10", "20"), "literal change", []),
    ("Please update the number `10` to `20`, thanks", CONFIG.replace("10", "20"), "literal change", []),
    ("use 'xyz' instead of 'abc'", CONFIG.replace("abc", "xyz"), "literal change", []),
    ("`10` -> `20`", CONFIG.replace("10", "20"), "literal change", []),
    ("set 20 where it says 10", CONFIG.replace("10", "20"), "literal change", []),
    # the literal changed, and the function body too (the literal check of the held-out tasks)
    ("change 10 to 20", CONFIG.replace("10", "20").replace("x + 1", "x + 2"), "literal change", [6]),
    # a new definition added, and nothing else changed
    ("add a function g(a) that returns a times 2", CONFIG + "\n\ndef g(a):\n    return a * 2\n", "addition", []),
    ("at the end of the file, add `g(a)`, which doubles a", CONFIG + "\n\ndef g(a):\n    return a * 2\n",
     "addition", []),
    # added, but an old line changed on the way, or gone
    ("add a helper g(a) that returns a times 2",
     CONFIG.replace("x + 1", "x + 3") + "\n\ndef g(a):\n    return a * 2\n", "addition", [6]),
    ("new function g(a): doubles a", CONFIG.replace('NAME = "abc"\n', "") + "\n\ndef g(a):\n    return a * 2\n",
     "addition", [2]),
    # added, but not the definition the instruction names, or lines inside old code as well
    ("add a function g(a) that returns a times 2", CONFIG + "\n\ndef h(a):\n    return a * 2\n", "addition", [9, 10]),
    ("add a function g(a) that returns a times 2",
     CONFIG.replace("    return x + 1\n", "    return x + 1\n    x += 1\n") + "\n\ndef g(a):\n    return a * 2\n",
     "addition", [7]),
    # with a decorator, an import it needs and a comment above it: all part of the addition
    ("add a function g(a) that returns a times 2",
     "import functools\n" + CONFIG + "\n\n# doubles\n@functools.cache\ndef g(a):\n    return a * 2\n", "addition", []),
    # adding to an existing definition changes it, and other edits named: no such check
    ("add type hints to the function f", CONFIG.replace("f(x):", "f(x: int) -> int:"), "", []),
    ("add a parameter y to f(x)", CONFIG.replace("f(x):", "f(x, y):"), "", []),
    ("add a type hint to f and rename f to h", CONFIG.replace("x + 1", "x + 3"), "", []),
    ("change 10 to 20 and fix f", CONFIG.replace("x + 1", "x + 3"), "", []),
])
def test_literal_changes_and_additions_that_change_other_lines(instruction, new, what, lines):
    assert unexplained_changes(CONFIG, new, instruction) == (what, lines)
    assert bool([w for w in rewrite_warnings("c.py", CONFIG, new, instruction) if "does not explain" in w]) == bool(lines)


@pytest.mark.parametrize("instruction,new,lines", [
    # each step a mechanical edit: what any of them explains is explained
    ("change 10 to 20, then rename f to h", CONFIG.replace("10", "20").replace("f(x)", "h(x)"), []),
    ("add `import math` and delete f", "import math\n" + CONFIG.replace("def f(x):\n    return x + 1\n", ""), []),
    ("add a function g(a) that doubles a; change 10 to 20",
     CONFIG.replace("10", "20") + "\n\ndef g(a):\n    return a * 2\n", []),
    # a step done and another line changed that no step explains
    ("change 10 to 20, then rename f to h",
     CONFIG.replace("10", "20").replace("f(x)", "h(x)").replace('"abc"', '"abd"'), [2]),
    ("add a function g(a) and rename f to h", CONFIG.replace("x + 1", "x + 3").replace("f(x)", "h(x)"), [6]),
])
def test_a_multi_step_instruction_that_changes_other_lines(instruction, new, lines):
    what, got = unexplained_changes(CONFIG, new, instruction)
    assert got == lines and what in ("multi-step edit", "addition"), (what, got)


@pytest.mark.parametrize("instruction,what", [
    # the openers of the task maker's phrasings (and of people): the request after them is read
    ("Hey, drop the function `_v`", "deletion"),
    ("I'd like you to delete _v", "deletion"),
    ("Go ahead and remove _v, thanks", "deletion"),
    ("I need you to delete _v and add `import math`", "multi-step edit"),
    ("Hey, leave the file exactly as it is", "request for no change"),
    # seen on held-out tasks with v7: these openers hid the request, and the changes were written
    ("Kindly keep the file as is.", "request for no change"),
    ("Can you leave it unchanged, thanks!", "request for no change"),
    ("Could you please delete _v?", "deletion"),
    ("please don't touch it", "request for no change"),
])
def test_a_request_after_an_opener_is_read(instruction, what):
    new = COLORS.replace("def _v(m1, m2, hue):\n    return m1\n\n\n", "").replace("return r, g, b", "return b")
    assert unexplained_changes(COLORS, new, instruction) == (what, [5] if what != "request for no change" else [5, 10])


def test_a_block_the_diff_shows_moved_is_not_a_change():
    """A function deleted above the `if __name__` block and one added after it: difflib may pair
    the block with the deleted lines and show it gone at the end; it came back, so it is kept
    (the task maker's multi-step rewrite that showed this)."""
    old = 'import os\n\n\ndef main():\n    return os.sep\n\n\nif __name__ == "__main__":\n    main()\n'
    new = 'import os\n\n\nif __name__ == "__main__":\n    main()\n\n\ndef g(a):\n    return a * 2\n'
    assert unexplained_changes(old, new, "remove `main`; add `g(a)` which doubles a") == ("multi-step edit", [])
    # the block changed on the way is still a change
    what, lines = unexplained_changes(old, new.replace("main()\n", "main(1)\n"), "remove `main`; add `g(a)` which doubles a")
    assert what == "multi-step edit" and lines, lines



@pytest.mark.parametrize("instruction,new,what,lines", [
    # deleting named definitions: the def (with its decorator) and blank lines may go, nothing else
    ("delete the function hls_to_rgb", COLORS.replace("def hls_to_rgb(h, l, s):\n    return _v(h, l, s)\n\n\n", ""),
     "deletion", []),
    ("`_v` is dead code, remove it", COLORS.replace("def _v(m1, m2, hue):\n    return m1\n\n\n", ""), "deletion", []),
    ("remove clear from class Palette", COLORS.replace("    def clear(self):\n        pass\n", ""), "deletion", []),
    ("delete _v", COLORS.replace("def _v(m1, m2, hue):\n    return m1\n\n\n", "").replace("return r, g, b", "return b"),
     "deletion", [5]),
    # a docstring added, or another line changed on the way
    ('add the docstring "Convert." to rgb_to_hsv', COLORS.replace("g, b):\n", 'g, b):\n    """Convert."""\n'),
     "docstring", []),
    # seen with v6a: the docstring given to another function than the one named
    ('add the docstring "Convert." to rgb_to_hsv', COLORS.replace("def _v(m1, m2, hue):\n", 'def _v(m1, m2, hue):\n    """Convert."""\n'),
     "docstring", [COLORS.splitlines().index("def _v(m1, m2, hue):") + 2]),
    ("rgb_to_hsv needs a docstring: 'Convert and return.'",
     COLORS.replace("g, b):\n    return r, g, b", 'g, b):\n    """Convert and return."""\n    return r, r, b'),
     "docstring", [6]),
    # "change nothing": every change is unexplained
    ("Leave the file exactly as it is.", COLORS.replace("return m1", "return m2"), "request for no change", [13]),
    ("don't change anything, thanks", COLORS, "request for no change", []),
    # more than that asked for, or words that are not names in the file: no check
    ("delete hls_to_rgb and add a test", COLORS.replace("return m1", "return m2"), "", []),
    ("remove the trailing whitespace", COLORS.replace("return m1", "return m2"), "", []),
    ("document how to use rgb_to_hsv in the README", COLORS.replace("return m1", "return m2"), "", []),
    ("leave the tests alone and fix _v", COLORS.replace("return m1", "return m2"), "", []),
])
def test_deletions_docstrings_and_no_change_that_change_other_lines(instruction, new, what, lines):
    assert unexplained_changes(COLORS, new, instruction) == (what, lines)


def test_cli_yes_refuses_an_unfinished_rename(capsys, cli_env, tmp_path):
    src = '__all__ = ["area"]\n\n\ndef area(r):\n    return 3 * r * r\n'
    f = tmp_path / "shapes.py"
    f.write_text(src)
    # the fake model renames nothing: it puts a comment line naming the instruction on top
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "rename area to size", "--yes", "--no-save")
    assert code == ExitCode.EDIT and "still uses area (lines 2, 5)" in err and "--force" in err, err
    assert "also changes line 1, which the rename does not explain" in err, err
    _one_line(err)
    assert f.read_text() == src
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "rename area to size", "--yes", "--force",
                       "--no-save")
    assert code == 0, err
    assert f.read_text() == "# strata: rename area to size\n" + src


def test_cli_a_rewrite_that_changes_nothing_says_only_that(capsys, cli_env, tmp_path, monkeypatch):
    # a rename the model did not do at all: nothing is written, and "changes nothing" says so;
    # the unfinished-rename warning beside it was noise (warnings stay in --json)
    from strata import prompts
    from strata.testing import fake

    def unchanged(context, settings):
        head = context[:context.rfind(prompts.REWRITE)]
        body = head[head.rfind(prompts.FILE) + len(prompts.FILE):head.rfind(prompts.INSTRUCTION)]
        return body.partition("\n")[2] + prompts.ENDOFTEXT

    monkeypatch.setattr(fake, "default_responder", unchanged)
    src = '__all__ = ["area"]\n\n\ndef area(r):\n    return 3 * r * r\n'
    f = tmp_path / "shapes.py"
    f.write_text(src)
    code, out, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "rename area to size", "--yes", "--no-save")
    assert code == 0 and out == "" and f.read_text() == src, err
    assert "the rewrite changes nothing" in err and "warning" not in err, err
    code, out, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "rename area to size", "--json", "--no-save")
    assert code == 0 and '"changed": false' in out and "still uses area" in out, out


# Names a rewrite still uses and no longer defines: the file parses and fails when the line runs
# (NameError). strata-tiny, asked to delete `import functools` from fnmatch.py, also turned
# `import os` into a second `import posixpath`, and os is used further down.
APP = ("import os\nimport re\n\n\ndef helper(path):\n    return os.path.basename(path)\n\n\n"
       "def main(paths):\n    names = [helper(p) for p in paths]\n    return [n for n in names if re.match('a', n)]\n\n\n"
       "if __name__ == '__main__':\n    print(main(os.listdir('.')))\n")
WITHOUT_HELPER = APP.replace("def helper(path):\n    return os.path.basename(path)\n\n\n", "")
WITHOUT_OS = APP.replace("import os\n", "")


def _undefined(old, new, instruction):
    got = rewrite_checks("app.py", old, new, instruction)
    return [w for w in got[0] if "still uses" in w], got[1]


def test_a_rewrite_that_deletes_a_function_it_still_calls():
    # not asked for: a warning (besides "drops the definition"), with the lines that still call it
    warned, notes = _undefined(APP, WITHOUT_HELPER, "tidy up main")
    assert warned == ["the rewrite still uses helper (line 6), which it no longer defines"] and notes == []
    assert any("drops the definition helper," in w for w in rewrite_warnings("app.py", APP, WITHOUT_HELPER, "tidy up"))
    # asked for: the rewrite did what was asked, so a note that the file still calls it, no warning
    for instruction in ("Delete the function `helper`.", "remove helper, it is dead code", "drop HELPER"):
        assert rewrite_warnings("app.py", APP, WITHOUT_HELPER, instruction) == [], instruction
        assert _undefined(APP, WITHOUT_HELPER, instruction) == (
            [], ["the rewrite still uses helper (line 6), which the instruction deletes"]), instruction
    # naming it without asking to delete it asks for nothing of the kind
    assert _undefined(APP, WITHOUT_HELPER, "make helper faster")[0] == [
        "the rewrite still uses helper (line 6), which it no longer defines"]


def test_a_rewrite_that_deletes_an_import_it_still_uses():
    assert _undefined(APP, WITHOUT_OS, "sort the imports") == (
        ["the rewrite still uses os (lines 5, 14), which it no longer defines"], [])
    # asked for: the import's name, or the module it imports under another name
    assert _undefined(APP, WITHOUT_OS, "Delete the line `import os`.") == (
        [], ["the rewrite still uses os (lines 5, 14), which the instruction deletes"])
    src = "import networkx as nx\nfrom email import encoders\nfrom email.mime.base import MIMEBase\n\n" \
          "G = nx.Graph()\nE = encoders, MIMEBase\n"
    new = src.replace("import networkx as nx\n", "")
    assert _undefined(src, new, "drop the import of networkx")[1] == [
        "the rewrite still uses nx (line 4), which the instruction deletes"]
    # `from email import encoders` named: MIMEBase, imported from email too, was not asked for
    new = src.replace("from email import encoders\nfrom email.mime.base import MIMEBase\n", "")
    assert _undefined(src, new, "remove `from email import encoders`") == (
        ["the rewrite still uses MIMEBase (line 4), which it no longer defines"],
        ["the rewrite still uses encoders (line 4), which the instruction deletes"])


def test_fnmatch_as_strata_tiny_rewrote_it():
    old = ('"""Filename matching."""\nimport os\nimport posixpath\nimport re\nimport functools\n\n'
           '__all__ = ["fnmatch"]\n\n\ndef fnmatch(name, pat):\n    name = os.path.normcase(name)\n'
           '    return _compile(pat)(name) is not None\n\n\n@functools.lru_cache(maxsize=256)\n'
           'def _compile(pat):\n    return re.compile(posixpath.normcase(pat)).match\n')
    new = old.replace("import os\nimport posixpath\n", "import posixpath\nimport posixpath\n").replace(
        "import functools\n", "")
    warned, notes = _undefined(old, new, "Delete the line `import functools`.")
    assert warned == ["the rewrite still uses os (line 10), which it no longer defines"]
    assert notes == ["the rewrite still uses functools (line 14), which the instruction deletes"]


def test_many_undefined_names_are_counted_and_their_lines_cut_short():
    old = "".join(f"def f{i}():\n    pass\n\n\n" for i in range(6)) + "".join(f"f{i}()\n" for i in range(6)) * 7
    new = "".join(f"f{i}()\n" for i in range(6)) * 7
    warned, _ = _undefined(old, new, "tidy up")
    assert warned == ["the rewrite still uses f0 (lines 1, 7, 13, 19, 25, ...), f1 (lines 2, 8, 14, 20, 26, ...), "
                      "f2 (lines 3, 9, 15, 21, 27, ...), f3 (lines 4, 10, 16, 22, 28, ...) and 2 more, which it "
                      "no longer defines"], warned
    two = _undefined(old, new.replace("f2()\nf3()\nf4()\nf5()\n", ""), "tidy up")[0]
    assert two[0].startswith("the rewrite still uses f0 (lines 1, 3, 5, 7, 9, ...) and f1 (lines 2, 4, "), two


def test_a_rename_left_half_done_is_said_once():
    """"rename helper to fetch" with the def renamed and a call left: the rename check says it
    (the old name of an asked rename), the undefined-name check does not say it again."""
    new = APP.replace("def helper(", "def fetch(")
    got = rewrite_warnings("app.py", APP, new, "rename helper to fetch")
    assert got == ["the rewrite still uses helper (line 10), which the instruction renames to fetch"], got
    # a rename of something else that leaves a dropped name used: that one is warned about
    got = rewrite_warnings("app.py", APP, new.replace("import re\n", ""), "rename helper to fetch")
    assert any(w == "the rewrite still uses re (line 10), which it no longer defines" for w in got), got


@pytest.mark.parametrize("old,new", [
    # defined by `global x` in a function
    ("x = 1\n\n\ndef f():\n    return x\n", "def setup():\n    global x\n    x = 2\n\n\ndef f():\n    return x\n"),
    # a try/except ImportError fallback, and a conditional definition
    ("import json\n\n\ndef f():\n    return json.dumps(1)\n",
     "try:\n    import simplejson as json\nexcept ImportError:\n    json = None\n\n\ndef f():\n    return json.dumps(1)\n"),
    ("def f():\n    pass\n\n\nf()\n", "import sys\nif sys.platform == 'x':\n    def f():\n        pass\nelse:\n    f = print\nf()\n"),
    # a lazy import behind a module __getattr__: the module itself never uses the name bare
    ("from json import JSONDecoder\n__all__ = ['JSONDecoder']\n",
     "__all__ = ['JSONDecoder']\n\n\ndef __getattr__(name):\n    if name == 'JSONDecoder':\n"
     "        from json import JSONDecoder\n        return JSONDecoder\n    raise AttributeError(name)\n"),
    # a class attribute of the same name goes, the module's stays; a method never sees class names
    ("limit = 1\n\n\nclass A:\n    limit = 2\n\n    def m(self):\n        return limit\n",
     "limit = 1\n\n\nclass A:\n    def m(self):\n        return limit\n"),
    # comprehension variables, `del`, `except ... as`, an enclosing function's name, builtins
    ("x = 0\nys = [x for x in range(3)]\n", "ys = [x for x in range(3)]\n"),
    # a comprehension's first iterable runs in the class body, which has its own xs
    ("xs = [0]\n\n\nclass A:\n    xs = [1]\n    ys = [x for x in xs]\n", "class A:\n    xs = [1]\n    ys = [x for x in xs]\n"),
    # gettext.install() puts `_` among the builtins at run time
    ("for _ in range(3):\n    pass\nprint(_('hi'))\n", "print(_('hi'))\n"),
    ("x = 1\nprint(x)\n", "x = 1\ndel x\nprint(x)\n"),
    ("e = None\ntry:\n    pass\nexcept OSError as e:\n    print(e)\n", "try:\n    pass\nexcept OSError as e:\n    print(e)\n"),
    ("def f():\n    v = 1\n\n    def g():\n        return v\n    return g\n",
     "def f():\n    v = 2\n\n    def g():\n        return v\n    return g\n"),
    ("len = 3\nprint(len)\n", "print(len)\n"),
    # an import used only in annotations that are never evaluated
    ("from __future__ import annotations\nfrom typing import Any\n\n\ndef f(x: Any) -> Any:\n    return x\n",
     "from __future__ import annotations\n\n\ndef f(x: Any) -> Any:\n    return x\n"),
    ("from typing import Any\n\n\ndef f():\n    y: Any = 1\n    return y\n", "def f():\n    y: Any = 1\n    return y\n"),
    # a name the file already used without defining it at module level (set at run time)
    ("def f():\n    return TABLE\n\n\ndef g():\n    TABLE = {}\n    return TABLE\n\n\nglobals()['TABLE'] = {}\n",
     "def f():\n    return TABLE\n\n\nglobals()['TABLE'] = {}\n"),
    # `import *` in the new file: any name may come from there; a new exec() may define any
    ("from os.path import join\nprint(join('a'))\n", "from os.path import *\nprint(join('a'))\n"),
    ("def helper():\n    pass\nhelper()\n", "exec('def helper():\\n    pass')\nhelper()\n"),
    # either side does not parse: the parse check speaks (or the old file was broken)
    ("def helper():\n    pass\nhelper()\n", "helper(\n"),
    ("def helper(:\n", "helper()\n"),
])
def test_no_false_alarms_about_undefined_names(old, new):
    assert newly_undefined(old, new) == [], (old, new)
    assert not any("still uses" in w for w in rewrite_warnings("m.py", old, new, "tidy up"))


@pytest.mark.parametrize("old,new,name,lines", [
    # a local the rewrite no longer assigns; a default argument, a decorator and a class body
    # run where they are written
    ("def f():\n    total = 0\n    return total\n", "def f():\n    return total\n", "total", (2,)),
    ("D = 1\n\n\ndef f(a=D):\n    return a\n", "def f(a=D):\n    return a\n", "D", (1,)),
    ("import functools\n\n\n@functools.cache\ndef f():\n    pass\n", "@functools.cache\ndef f():\n    pass\n",
     "functools", (1,)),
    ("class A:\n    x = 1\n    y = x + 1\n", "class A:\n    y = x + 1\n", "x", (2,)),
    # a method does not see its class's names: the module's name is the one it uses
    ("helper = 1\n\n\nclass A:\n    helper = 2\n\n    def m(self):\n        return helper\n",
     "class A:\n    helper = 2\n\n    def m(self):\n        return helper\n", "helper", (5,)),
    # a comprehension's first iterable runs outside it; `import a.b` binds a
    ("xs = [1]\nys = [x for x in xs]\n", "ys = [x for x in xs]\n", "xs", (1,)),
    ("import os.path\nos.path.join('a')\n", "os.path.join('a')\n", "os", (1,)),
    # annotations are evaluated without `from __future__ import annotations`
    ("from typing import Any\n\n\ndef f(x: Any):\n    return x\n", "def f(x: Any):\n    return x\n", "Any", (1,)),
])
def test_undefined_names_in_every_scope(old, new, name, lines):
    assert [(u.name, u.lines) for u in newly_undefined(old, new)] == [(name, lines)]


def test_cli_yes_refuses_a_rewrite_that_uses_a_name_it_no_longer_defines(capsys, cli_env, tmp_path):
    src = "import os\n\n\ndef cwd():\n    return os.getcwd()\n"
    f = tmp_path / "where.py"
    f.write_text(src)
    # the fake model applies `replace A with B`
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace import os with import sys", "--yes",
                       "--no-save")
    assert code == ExitCode.EDIT and "still uses os (line 5), which it no longer defines" in err, err
    assert "--force" in err
    _one_line(err)
    assert f.read_text() == src
    # asked to drop it: written, with a note that the file still uses it
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace import os with # drop os", "--yes",
                       "--no-save")
    assert code == 0, err
    assert "note: " in err and "still uses os (line 5), which the instruction deletes" in err, err
    assert f.read_text() == src.replace("import os", "# drop os")
    # --json carries the notes beside the warnings
    f.write_text(src)
    code, out, _ = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace import os with # drop os", "--yes",
                       "--json", "--no-save")
    got = json.loads(out)
    assert code == 0 and got["written"] and got["warnings"] == []
    assert got["notes"] == ["the rewrite still uses os (line 5), which the instruction deletes"]


def test_a_literal_change_that_starts_the_instruction_is_read():
    # '"_it" -> "offset_mode"': the opener's strip took the first quote, and no check ran (v7 wrote
    # a __slots__ line with another string replaced); a string that is also a name is no rename
    old = 'class A:\n    __slots__ = ("_edges", "_it", "_curr")\n\n    def _it(self):\n        return self._it\n'
    right = old.replace('"_it", "_curr"', '"offset_mode", "_curr"')
    wrong = old.replace('("_edges", "_it", "_curr")', '("offset_mode", "_it", "_curr")')
    for said in ('"_it" -> "offset_mode"', '`"_it"` -> `"offset_mode"`, thanks!'):
        assert unexplained_changes(old, right, said) == ("literal change", [])
        assert unexplained_changes(old, wrong, said) == ("literal change", [2])
        assert rewrite_warnings("a.py", old, right, said) == []
        assert rewrite_warnings("a.py", old, wrong, said)


IMPORTING = "import os\nfrom typing import Optional\n\n\ndef f(x: Optional[int]):\n    return os.sep\n"


@pytest.mark.parametrize("instruction,new,missing", [
    # the statement asked for is there, as written or merged into a line that imports more
    ("add `from typing import Any`", IMPORTING.replace("import Optional", "import Any, Optional"), None),
    ("add `import json`", "import json\n" + IMPORTING, None),
    ("we need json, add `import json as j`", "import json as j\n" + IMPORTING, None),
    # "import typing" reads as the statement or as "import from typing": either is there
    ("Could you import typing, thanks!", IMPORTING.replace("import Optional", "import Any, Optional"), None),
    ("also import `os.path`!", "from os.path import join\n" + IMPORTING, None),
    # not there: another name, or another module
    ("add `from typing import Any`", IMPORTING.replace("import Optional", "import Dict, Optional"), "from typing import Any"),
    ("add `import json`", "import jsonschema\n" + IMPORTING, "import json"),
    ("1) add a line `import typing` 2) rename variable `x` as `y`", IMPORTING.replace("x", "y"), "import typing"),
    ("add `import json` and rename f to g", IMPORTING.replace("def f", "def g"), "import json"),
    # "import Path from pathlib", as other languages say it, is `from pathlib import Path`
    ("add import Path from pathlib", "from pathlib import Path\n" + IMPORTING, None),
    # an alias is part of what the statement binds
    ("add `import numpy as np`", "import numpy as np\n" + IMPORTING, None),
    ("add `import numpy as np`", "import numpy\n" + IMPORTING, "import numpy as np"),
    # no import to add: sorting, deleting, or a module another step removes
    ("Could you sort the import block, thanks", "from typing import Optional\nimport os\n\n\ndef f(x: Optional[int]):\n    return os.sep\n", None),
    ("remove `import os`", IMPORTING.replace("import os\n", ""), None),
    ("add `import json`, then remove `import json`", IMPORTING, None),
])
def test_an_import_the_instruction_asks_for_must_be_in_the_rewrite(instruction, new, missing):
    # seen with v7: "add `from typing import Any`" answered with `from typing import Optional`
    got = missing_imports(IMPORTING, new, instruction)
    assert got == ([] if missing is None else [f"the rewrite does not have `{missing}`, which the instruction asks for"])
    assert (f"the rewrite does not have `{missing}`, which the instruction asks for" in
            rewrite_warnings("a.py", IMPORTING, new, instruction)) == (missing is not None)


def test_a_deleted_function_that_ends_like_the_one_before_is_no_alarm():
    # the diff may show the previous function's last line removed and the deleted one's kept
    # (both end in `assert nd == answer`): the same file, so the deletion explains it
    old = ("class T:\n    def test_a(self):\n        nd = 1\n        assert nd == answer\n\n"
           "    def test_b(self):\n        nd = 2\n        nd += 1\n        assert nd == answer\n\n"
           "    def test_c(self):\n        pass\n")
    new = old.replace("    def test_b(self):\n        nd = 2\n        nd += 1\n        assert nd == answer\n\n", "")
    assert unexplained_changes(old, new, "I'd like you to delete `test_b`!") == ("deletion", [])
    # a line of test_a really gone is still found
    wrong = new.replace("        nd = 1\n", "")
    assert unexplained_changes(old, wrong, "delete test_b")[1]


def test_renaming_what_an_earlier_step_adds_is_no_alarm():
    old = "import os\n\n\ndef f(a):\n    return a\n"
    new = old + "\n\ndef label(level):\n    return level.split(',')\n"
    said = "1) new function `get_buffer(level)`: returns level split on commas 2) change the name of `get_buffer` to `label`"
    assert not any("never uses" in w for w in rewrite_warnings("m.py", old, new, said))
    # one step alone: a rename of a name the file never had is still one
    assert any("never uses" in w for w in rewrite_warnings("m.py", old, new, "rename get_buffer to label"))


def test_deleting_named_imports_and_a_function_that_are_most_of_the_file():
    big = ("from os.path import join\nimport sys\n\n\ndef cells(x):\n" + "".join(f"    x += {i}\n" for i in range(30))
           + "    return x\n\n\nY = 1\n")
    new = "import sys\n\n\nY = 1\n\n\ndef emit(a, b):\n    return max(a, b)\n"
    said = "Remove `cells` and add a function `emit(a, b)` that returns the larger; `join` is not used, remove `from os.path import join`!"
    assert not any("deletes most" in w for w in rewrite_warnings("m.py", big, new, said))
    # sys was not named: its line gone is no longer only what was asked
    assert any("deletes most" in w for w in rewrite_warnings("m.py", big, new.replace("import sys\n", ""), said))


def test_a_numbered_multi_step_instruction_is_read_step_by_step():
    # "1) ... 2) ..." was one unreadable step, so no check ran (v7 wrote a doctest line of another
    # function changed, and a license header cut, under such instructions)
    said = '1) add the docstring "Convert." to rgb_to_hsv 2) remove the function _v'
    right = COLORS.replace("g, b):\n", 'g, b):\n    """Convert."""\n').replace("def _v(m1, m2, hue):\n    return m1\n\n\n", "")
    assert unexplained_changes(COLORS, right, said) == ("multi-step edit", [])
    wrong = right.replace("return r, g, b", "return b")
    what, lines = unexplained_changes(COLORS, wrong, said)
    assert what == "multi-step edit" and lines


IMPORTING_COLORS = "import colorsys\n\n\n" + COLORS


@pytest.mark.parametrize("instruction,new,warning", [
    # the other steps done, the deletion not (v7 on three held-out multi-step edits)
    ("1) get rid of _v 2) append a function g(a) that doubles a", IMPORTING_COLORS + "\n\ndef g(a):\n    return 2 * a\n",
     "the rewrite still defines _v, which the instruction deletes"),
    ("Please delete the function _v + delete import colorsys", IMPORTING_COLORS.replace("import colorsys\n", ""),
     "the rewrite still defines _v, which the instruction deletes"),
    ("Please delete the function _v + delete import colorsys",
     IMPORTING_COLORS.replace("def _v(m1, m2, hue):\n    return m1\n\n\n", ""),
     "the rewrite still has `import colorsys`, which the instruction removes"),
    # done: the method gone (the class is only where it was), the function gone
    ("remove clear from class Palette", IMPORTING_COLORS.replace("    def clear(self):\n        pass\n", ""), None),
    ("delete the function _v", IMPORTING_COLORS.replace("def _v(m1, m2, hue):\n    return m1\n\n\n", ""), None),
])
def test_a_deletion_the_rewrite_did_not_do(instruction, new, warning):
    from strata.editscope import undone_deletions

    got = undone_deletions(IMPORTING_COLORS, new, instruction)
    assert (warning in got) if warning else not got, got
    # a name defined twice: deleting one of them is the deletion done
    two = IMPORTING_COLORS + "\n\nclass Other:\n    def add(self):\n        pass\n"
    one = two.replace("    def add(self, c):\n        pass\n\n", "")
    assert undone_deletions(two, one, "remove add from class Palette") == []
    assert undone_deletions(two, two + "# done\n", "remove add from class Palette")


def test_an_import_statement_without_a_verb_continues_the_step_before():
    # "remove import os and import sys" removes both: "import sys" is no request to add it
    old = "import os\nimport sys\n\n\ndef f():\n    return 1\n"
    gone = "\n\ndef f():\n    return 1\n"
    for said in ("remove import os and import sys", "remove `import os` and `import sys`"):
        assert missing_imports(old, gone, said) == []
        assert rewrite_warnings("a.py", old, gone, said) == []
        assert "the rewrite still has `import sys`, which the instruction removes" in rewrite_warnings("a.py", old, old.replace("import os\n", ""), said)
    # after an added import, a bare statement is added too; after a removal, "add" starts adding
    assert missing_imports(old, old, "add import json and import re") == [
        "the rewrite does not have `import json`, which the instruction asks for",
        "the rewrite does not have `import re`, which the instruction asks for"]
    assert missing_imports(old, old.replace("import os\n", ""), "remove import os and add import json") == [
        "the rewrite does not have `import json`, which the instruction asks for"]


def test_a_word_of_the_request_that_is_also_a_name_is_no_deletion_asked():
    # "delete the helper function `_v`" in a file that also defines `helper`: `_v` gone is the
    # deletion done; with neither gone, both are named
    from strata.editscope import undone_deletions

    old = IMPORTING_COLORS + "\n\ndef helper():\n    return 0\n"
    done = old.replace("def _v(m1, m2, hue):\n    return m1\n\n\n", "")
    said = "delete the helper function `_v`"
    assert undone_deletions(old, done, said) == []
    assert undone_deletions(old, old + "# x\n", said) == [
        "the rewrite still defines _v, which the instruction deletes",
        "the rewrite still defines helper, which the instruction deletes"]


def test_deleting_something_next_to_a_definition_is_no_deletion_of_it():
    # "delete the comment above f" names f and asks to delete no f
    from strata.editscope import undone_deletions

    old = "# old note\ndef f():\n    return 1\n"
    new = "def f():\n    return 1\n"
    for said in ("delete the comment above f", "remove the print in `f`", "Could you drop the blank line after f?"):
        assert undone_deletions(old, new, said) == [], said
        assert not any("still defines" in w for w in rewrite_warnings("a.py", old, new, said)), said


WALKS = '''import networkx as nx


def number_of_walks(G, walk_length):
    """Count the walks."""
    return {n: walk_length for n in G}
'''


def test_a_new_definition_with_other_parameters_than_the_instruction_spells_is_refused():
    # v8 on a held-out multi edit: the old function renamed, with its old parameters, and the asked
    # one appended after it (two definitions of make_text); --yes wrote it before this check
    from strata.editscope import mismatched_signatures

    said = "1) get rid of number_of_walks 2) append a function make_text(depth) that returns the keys of the dict depth"
    asked = "\n\ndef make_text(depth):\n    return list(depth)\n"
    right = WALKS.split("\n\ndef number_of_walks")[0] + "\n" + asked
    renamed = WALKS.replace("number_of_walks", "make_text")
    assert mismatched_signatures(WALKS, right, said) == []
    assert mismatched_signatures(WALKS, renamed, said) == [
        "the rewrite defines make_text(G, walk_length), the instruction asks for make_text(depth)"]
    assert mismatched_signatures(WALKS, renamed + asked, said) == [
        "the rewrite defines make_text(G, walk_length) and make_text(depth), the instruction asks for make_text(depth)"]
    assert any("make_text(G, walk_length)" in w for w in rewrite_warnings("walks.py", WALKS, renamed + asked, said))
    assert not any("instruction asks for" in w for w in rewrite_warnings("walks.py", WALKS, right, said))


@pytest.mark.parametrize("said, new", [
    ("add `area(r: float = 1.0)`", "def area(r: float = 1.0) -> float:\n    return r\n"),
    ("add a method area(r) to a new class B", "class B:\n    def area(self, r):\n        return r\n"),
    ("add f(*args, **kw) please", "def f(*args, **kw):\n    return 1\n"),
    ("add `f(x: dict[str, int], y=0)`", "def f(x: dict[str, int], y=0):\n    return y\n"),
    ("add f(x) that calls number_of_walks(G, 3)", "def f(x):\n    return number_of_walks(x, 3)\n"),
    ("add a function g that returns len(x)", "def g(x):\n    return len(x)\n"),
])
def test_spelled_signatures_that_match_and_calls_of_existing_names_pass(said, new):
    from strata.editscope import mismatched_signatures

    assert mismatched_signatures(WALKS, WALKS + "\n\n" + new, said) == []


def test_a_spelled_signature_is_checked_for_every_parameter_form():
    from strata.editscope import mismatched_signatures

    new = WALKS + "\n\ndef f(x):\n    return 1\n"
    assert mismatched_signatures(WALKS, new, "add f() that returns 1") == [
        "the rewrite defines f(x), the instruction asks for f()"]
    assert mismatched_signatures(WALKS, new, "add `f(x, y)`") == [
        "the rewrite defines f(x), the instruction asks for f(x, y)"]
    assert mismatched_signatures(WALKS, new, "add `f(y)`") == [
        "the rewrite defines f(x), the instruction asks for f(y)"]


RATES = "RATE = 1.5\nLIMIT = 21\nNAME = 'utf-8'\n\n\ndef scaled(n):\n    return n * 1.5\n"


def test_a_literal_change_left_undone_is_refused():
    """v9 wrote a multi-step rewrite that added the asked function and left `1.5` where the
    instruction said to set `3.0` (2026-12-05, the v9 call's held-out tasks)."""
    said = "Hey, set `3.0` where it says `1.5`. also add `double(x)` which returns x twice thx"
    undone = RATES + "\n\ndef double(x):\n    return 2 * x\n"
    checks = rewrite_checks("rates.py", RATES, undone, said)[0]
    assert "the rewrite still has 1.5 wherever the original does; the instruction asks for 3.0" in checks
    done = undone.replace("RATE = 1.5", "RATE = 3.0").replace("n * 1.5", "n * 3.0")
    assert not any("still has" in w for w in rewrite_checks("rates.py", RATES, done, said)[0])


@pytest.mark.parametrize("said, new", [
    ("make it 42 instead of 21", RATES.replace("21", "42")),
    ("`'utf-8'` -> `'ascii'`", RATES.replace("'utf-8'", '"ascii"')),  # either quote counts
    ("change 1.5 to 2", RATES.replace("RATE = 1.5", "RATE = 2")),  # one of two changed: not "undone"
    ("change 7 to 8", RATES),  # the original has no 7: nothing to leave undone
    ("rename scaled to grown", RATES.replace("scaled", "grown")),  # no literal asked for
])
def test_literal_changes_made_or_not_asked_pass(said, new):
    from strata.editscope import unchanged_literals

    assert unchanged_literals(RATES, new, said) == []


def test_every_undone_literal_pair_is_named():
    from strata.editscope import unchanged_literals

    assert unchanged_literals(RATES, RATES, "pls make it 42 instead of 21, and change 'utf-8' to 'ascii'") == [
        "the rewrite still has 21 wherever the original does; the instruction asks for 42",
        "the rewrite still has 'utf-8' wherever the original does; the instruction asks for 'ascii'"]

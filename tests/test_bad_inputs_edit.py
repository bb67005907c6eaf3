"""Bad-input corpus, edit and text: generated file names, file kinds and contents, instructions
and messages that are not valid UTF-8, and rewrites that break Python/JSON/TOML/YAML files or
delete most of them. Each ends as one error line with its documented exit code (or works when
the input is fine), never a traceback, and the file on disk is the old one or the new one."""
from __future__ import annotations

import json
import os
import socket
import sys
import tomllib

import pytest

from bad_input_helpers import CODES, FakeGenerator, assert_clean, rng, run
from strata.edit import EditSession
from strata.errors import StrataError
from strata.filesafety import rewrite_warnings

GOOD = "".join(f"def f{i}(x):\n    return (x + {i})\n\n" for i in range(6))


@pytest.fixture(autouse=True)
def cli_env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    monkeypatch.setenv("STRATA_DEBUG", "0")


def edit(capsys, path, *extra, instruction="replace (x + 1) with (x - 1)"):
    return run(capsys, "edit", os.fsdecode(path), "-m", "fake", "-i", instruction, "--yes", "--no-save", *extra)


# -- file names -----------------------------------------------------------------------------------
NAMES = {  # raw bytes of the name -> the exit code strata must give
    b"\xff.py": CODES.EDIT, b"a\xfe\xfd.txt": CODES.EDIT, b"\xc3(.py": CODES.EDIT,
    b"\xed\xa0\x80.py": CODES.EDIT, b"ok\x80ok": CODES.EDIT, b"\xe2\x82.py": CODES.EDIT,
    b"-x.py": 0, b"--yes.py": 0,
    b"a\nb.py": 0, b"tab\there.py": 0, b"sp ace.py": 0, "ünïcödé.py".encode(): 0,
    "文件.py".encode(): 0, b"[red]x[bold].py": 0, b".hidden.py": 0, b"x" * 200 + b".py": 0,
    b"no_suffix": 0, b"a.b.c.py": 0, b"$(echo hi).py": 0, b"%s%n.py": 0, "emoji-\U0001f600.py".encode(): 0,
}


@pytest.mark.parametrize("raw", sorted(NAMES), ids=[repr(n)[:30] for n in sorted(NAMES)])
def test_file_names(capsys, tmp_path, raw):
    path = os.path.join(os.fsencode(tmp_path), raw)
    with open(path, "wb") as f:
        f.write(GOOD.encode())
    code, _, err = edit(capsys, path)
    assert_clean(code, err, (CODES.EDIT, CODES.USAGE), repr(raw))
    assert code == NAMES[raw], (raw, err)
    with open(path, "rb") as f:
        data = f.read()
    assert data == (GOOD.replace("(x + 1)", "(x - 1)") if code == 0 else GOOD).encode()


def test_a_name_that_looks_like_an_option(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-x.py").write_text(GOOD)
    code, _, err = run(capsys, "edit", "-x.py", "-m", "fake", "-i", "replace (x + 1) with (x - 1)", "--yes")
    assert_clean(code, err, (CODES.USAGE,), "-x.py")
    assert code == CODES.USAGE and (tmp_path / "-x.py").read_text() == GOOD
    code, _, err = run(capsys, "edit", "-m", "fake", "-i", "replace (x + 1) with (x - 1)", "--yes", "--", "-x.py")
    assert code == 0, err


# -- file kinds -----------------------------------------------------------------------------------
def _kinds(tmp_path):
    (tmp_path / "dir").mkdir()
    yield "directory", tmp_path / "dir"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    yield "fifo", fifo
    yield "dev-null", "/dev/null"
    yield "missing", tmp_path / "missing.py"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    yield "dangling-link", tmp_path / "dangling"
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    yield "link-loop", tmp_path / "loop1"
    (tmp_path / "to-dir").symlink_to(tmp_path / "dir")
    yield "link-to-dir", tmp_path / "to-dir"
    (tmp_path / "plain.py").write_text(GOOD)
    yield "through-a-file", tmp_path / "plain.py" / "x.py"
    yield "dot", "."
    yield "empty-name", ""
    sock = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    yield "socket", sock
    s.close()


def test_file_kinds(capsys, tmp_path):
    seen = 0
    for name, path in _kinds(tmp_path):
        code, _, err = edit(capsys, path)
        assert_clean(code, err, (CODES.EDIT, CODES.USAGE, CODES.IO), name)
        assert code != 0, name
        seen += 1
    assert seen == 11


# -- contents ------------------------------------------------------------------------------------
def contents():
    r = rng(3)
    base = GOOD.encode()
    for k in range(8):
        at = r.randrange(len(base))
        yield f"nul@{at}", base[:at] + b"\x00" + base[at:], CODES.EDIT
    for k, bad in enumerate((b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80")):
        for where in (0, len(base) // 2, len(base)):
            yield f"utf8-{k}@{where}", base[:where] + bad + base[where:], CODES.EDIT
    yield "utf16", GOOD.encode("utf-16"), CODES.EDIT
    yield "latin1", "café = 1\n".encode("latin-1"), CODES.EDIT
    yield "too-large", b"x = 1\n" * 200_000, CODES.EDIT
    yield "too-many-tokens", ("y = 'a'\n" * 1200).encode(), CODES.EDIT  # fits 1 MiB, not the fake's context
    yield "empty", b"", 0
    yield "newline-only", b"\n", 0
    yield "crlf", GOOD.replace("\n", "\r\n").encode(), 0
    yield "lone-cr", GOOD.replace("\n", "\r").encode(), 0
    yield "bom", b"\xef\xbb\xbf" + base, 0
    yield "one-long-line", b"x = (1)" + b" + (1)" * 500 + b"\n", 0
    yield "control-chars", b"# \x1b[2J \x07 \x08\n" + base, 0
    yield "no-final-newline", base.rstrip(b"\n"), 0


@pytest.mark.parametrize("name,data,want", list(contents()), ids=[c[0] for c in contents()])
def test_file_contents(capsys, tmp_path, name, data, want):
    f = tmp_path / "f.py"
    f.write_bytes(data)
    code, _, err = edit(capsys, f, instruction="replace (x + 1) with (x - 1)" if want else "add a header")
    assert_clean(code, err, (CODES.EDIT,), name)
    assert code == want, (name, err)
    if code != 0:
        assert f.read_bytes() == data


# -- instructions and messages -----------------------------------------------------------------------
def bad_texts():
    for at in (0, 3, 10):
        for ch in ("\udcff", "\udc80", "\udcc3"):
            yield f"surrogate{ord(ch):x}@{at}", "replace x with y"[:at] + ch + "replace x with y"[at:]
    yield "only-surrogate", "\udcff"


@pytest.mark.parametrize("name,text", list(bad_texts()), ids=[c[0] for c in bad_texts()])
def test_instructions_and_messages_that_are_not_utf8(capsys, tmp_path, name, text):
    f = tmp_path / "f.py"
    f.write_text(GOOD)
    code, _, err = edit(capsys, f, instruction=text)
    assert_clean(code, err, (CODES.USAGE,), name)
    assert code == CODES.USAGE and "not valid UTF-8" in err and f.read_text() == GOOD
    code, _, err = run(capsys, "chat", "-m", "fake", "--no-save", "--message", text)
    assert_clean(code, err, (CODES.USAGE,), name)
    assert code == CODES.USAGE


@pytest.mark.parametrize("data", [b"\xff", b"hi \xfe there", b"\xc3", "ok".encode() + b"\xed\xa0\x80",
                                  b"\x00\xff\x00", "fine\n".encode("utf-16")])
def test_stdin_that_is_not_utf8(capsys, data):
    code, _, err = run(capsys, "chat", "-m", "fake", "--no-save", "--no-input", stdin=data)
    assert_clean(code, err, (CODES.USAGE,), repr(data))
    assert code == CODES.USAGE


@pytest.mark.parametrize("text", ["", " ", "\n\n", "\t"])
def test_empty_instructions_and_messages(capsys, tmp_path, text):
    f = tmp_path / "f.py"
    f.write_text(GOOD)
    code, _, err = edit(capsys, f, instruction=text)
    assert_clean(code, err, (CODES.USAGE, CODES.EDIT), repr(text))
    assert code != 0 and f.read_text() == GOOD
    code, _, err = run(capsys, "chat", "-m", "fake", "--no-save", "--no-input", stdin=text)
    assert_clean(code, err, (CODES.USAGE,), repr(text))


# -- rewrites that break a file --------------------------------------------------------------------
SOURCES = {
    "x.py": GOOD + "class C:\n    items = [1, {'a': (2, 3)}]\n    text = \"quoted\"\n",
    "x.json": json.dumps({"name": "strata", "list": [1, 2, {"deep": [True, None]}], "s": "q\"x"}, indent=2) + "\n",
    "x.toml": '[tool]\nname = "strata"\nlist = [1, 2, 3]\n\n[tool.sub]\nflag = true\ntext = "a \\"b\\""\n',
    "x.yaml": "name: strata\nlist:\n  - 1\n  - {a: [2, 3]}\ntext: \"quoted\"\nblock: |\n  line\n",
}


def _parses(name: str, text: str) -> bool:
    try:
        if name.endswith(".py"):
            compile(text, name, "exec", flags=0x400, dont_inherit=True)
        elif name.endswith(".json"):
            json.loads(text)
        elif name.endswith(".toml"):
            tomllib.loads(text)
        else:
            import yaml

            list(yaml.safe_load_all(text))
        return True
    except Exception:  # noqa: BLE001 - the reference parser's verdict is all that matters here
        return False


def rewrites(name: str, text: str):
    """Generated rewrites of `text`: truncations, a character deleted or added at each
    bracket/quote/colon, lines dropped or indented."""
    r = rng(len(name))
    for k in range(1, 10):
        yield f"cut{k}", text[:len(text) * k // 10]
    spots = [i for i, c in enumerate(text) if c in "()[]{}\"':=,"]
    for i in r.sample(spots, min(36, len(spots))):
        yield f"del@{i}", text[:i] + text[i + 1:]
        yield f"dup@{i}", text[:i] + text[i] + text[i:]
    lines = text.splitlines(keepends=True)
    for n in range(0, len(lines), max(1, len(lines) // 8)):
        yield f"drop-line{n}", "".join(lines[:n] + lines[n + 1:])
        yield f"indent-line{n}", "".join(lines[:n] + ["   " + lines[n]] + lines[n + 1:])


CASES = [(name, label, new) for name, text in SOURCES.items() for label, new in rewrites(name, text)]


def test_rewrite_corpus_is_large():
    assert len(CASES) > 300


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_syntax_warnings_agree_with_the_real_parsers(name):
    if name.endswith(".yaml"):
        pytest.importorskip("yaml")
    old = SOURCES[name]
    assert _parses(name, old)
    broken = fine = 0
    for fname, label, new in CASES:
        if fname != name:
            continue
        syntax = [w for w in rewrite_warnings(name, old, new) if "not valid" in w]
        assert bool(syntax) == (not _parses(name, new)), (label, new[-80:])
        broken += bool(syntax)
        fine += not syntax
    assert broken > 10 and fine > 3, (broken, fine)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_accept_refuses_every_broken_rewrite_unless_forced(tmp_path, name):
    if name.endswith(".yaml"):
        pytest.importorskip("yaml")
    f = tmp_path / name
    for k, (fname, label, new) in enumerate(c for c in CASES if c[0] == name):
        if k % 3:
            continue  # a third of them through the whole edit loop (the rest: test above)
        f.write_text(SOURCES[name])
        ed = EditSession(FakeGenerator(responder=lambda ctx, s, new=new: new + "<|endoftext|>"), f)
        list(ed.propose("rewrite it"))
        if ed.proposal.warnings:
            with pytest.raises(StrataError, match="--force"):
                ed.accept()
            assert f.read_text() == SOURCES[name], label
        elif new != SOURCES[name]:
            ed.accept()
            assert f.read_text() == new, label


@pytest.mark.parametrize("instruction", ["replace (x + 1) with (x + 1", "replace def f2 with def f2(",
                                         "replace return with return )", "replace :\n with \n",
                                         "replace return ( with return (("])
def test_cli_yes_refuses_broken_python_and_force_writes_it(capsys, tmp_path, instruction):
    f = tmp_path / "calc.py"
    f.write_text(GOOD)
    code, _, err = edit(capsys, f, instruction=instruction)
    assert_clean(code, err, (CODES.EDIT,), instruction)
    assert code == CODES.EDIT and "--force" in err and f.read_text() == GOOD
    code, _, err = edit(capsys, f, "--force", instruction=instruction)
    assert code == 0 and f.read_text() != GOOD


@pytest.mark.parametrize("old_lines,new_lines", [(n, m) for n in (4, 8, 9, 20, 100) for m in (0, 1, n // 3, n // 2, n - 1)])
def test_deletion_warning_follows_its_rule(old_lines, new_lines):
    old = "".join(f"line {i}\n" for i in range(old_lines))
    new = "".join(f"line {i}\n" for i in range(new_lines))
    want = old_lines >= 8 and new_lines < old_lines / 2
    assert bool(rewrite_warnings("notes.txt", old, new)) == want


@pytest.mark.parametrize("depth", [100, 1000, 10_000, 200_000])
def test_deeply_nested_rewrites_never_crash_the_checker(depth):
    for name, new in (("x.json", "[" * depth + "]" * depth), ("x.py", "x = " + "(" * depth + ")" * depth),
                      ("x.toml", "a = " + "[" * depth + "]" * depth), ("x.yaml", "[" * depth + "]" * depth)):
        if name.endswith(".yaml") and "yaml" not in sys.modules:
            pytest.importorskip("yaml")
        rewrite_warnings(name, SOURCES[name] if name in SOURCES else "a = 1\n", new)  # must return

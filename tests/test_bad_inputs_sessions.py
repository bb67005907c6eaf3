"""Bad-input corpus, sessions: generated session ids, mutated session files (truncated, lines
dropped or repeated, every field given every wrong type, bytes that are not UTF-8, deep
nesting) and damaged or foreign stores. Each must end as one error line with exit 2 or 4 (or
work, when the mutation happens to be valid), never a traceback, never a partial import, never
a changed store file."""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from bad_input_helpers import CODES, FakeGenerator, assert_clean, rng, run, sized_fifo
from strata.chat import ChatSession
from strata.edit import EditSession
from strata.errors import StrataError
from strata.replay import Replay
from strata.session_format import import_session, parse_lines, recording_from_store, write_session_file
from strata.store import SessionStore


@pytest.fixture(autouse=True)
def cli_env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    monkeypatch.setenv("STRATA_DEBUG", "0")
    monkeypatch.setenv("STRATA_STORE_TIMEOUT", "0.2")


def _db(tmp_path) -> Path:
    return tmp_path / "home" / "data" / "sessions.sqlite3"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A chat and an edit session exported as files: the seeds every mutation starts from."""
    root = tmp_path_factory.mktemp("rec")
    store = SessionStore(root / "s.db")
    small = dict(n_layers=2, n_experts=8, top_k=2)  # small telemetry: the corpus parses it thousands of times
    chat = ChatSession(FakeGenerator(**small), store=store, system="be brief")
    for text in ("hello there", "again, please", "one more"):
        list(chat.send(text))
    f = root / "calc.py"
    f.write_text("".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(3)))
    ed = EditSession(FakeGenerator(**small), f, store=store)
    list(ed.propose("replace x + 1 with x * 2"))
    ed.accept()
    list(ed.propose("add a header"))
    ed.reject()
    out = {}
    for name, sid in (("chat", chat.session_id), ("edit", ed.session_id)):
        path = root / f"{name}.jsonl"
        rec = recording_from_store(store, sid)
        rec.windows = {turn: windows[:3] for turn, windows in rec.windows.items()}  # a few per turn
        write_session_file(rec, path)
        out[name] = path.read_bytes()
    store.close()
    return out


# -- session ids --------------------------------------------------------------------------------
BAD_IDS = ["", " ", "  ", "\t", "\n", "%", "_", "a%", "%%", "*", "?", "[a]", "\\", "\\%",
           "'; DROP TABLE sessions; --", "\" OR 1=1 --", "\x00", "a\x00b", "\x1b[2J", "é", "ß" * 3,
           "\udcff", "a\udcffb", "0" * 10_000, "../../etc/passwd", "/", ".", "..", "-", "--",
           "-x", "--yes", "NULL", "None", "0", "-1", "1e9", "１２３"]


@pytest.fixture(scope="module")
def base_store(tmp_path_factory):
    """A store with two chat sessions, built once; each test gets a copy of the file."""
    db = tmp_path_factory.mktemp("base") / "sessions.sqlite3"
    store = SessionStore(db)
    for msg in ("alpha", "beta"):
        list(ChatSession(FakeGenerator(), store=store).send(msg))
    store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store._conn.execute("PRAGMA journal_mode = DELETE")  # one self-contained file to copy
    store.close()
    return db.read_bytes()


def _two_sessions(tmp_path, base_store) -> Path:
    db = _db(tmp_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(base_store)
    return db


@pytest.mark.parametrize("bad", BAD_IDS, ids=[repr(b)[:24] for b in BAD_IDS])
def test_bad_session_ids(capsys, tmp_path, base_store, bad):
    _two_sessions(tmp_path, base_store)
    ids = [s.id for s in SessionStore(_db(tmp_path)).list_sessions()]
    if bad and any(i.startswith(bad) for i in ids):
        # a short hex id ("0") is a real unique prefix when a random session id starts with it:
        # use a first digit that no id starts with, so the case stays a non-matching prefix
        bad = next(c for c in "0123456789abcdef" if not any(i.startswith(c) for i in ids)) + bad[1:]
    before = _db(tmp_path).read_bytes()
    commands = [("sessions", "show", bad), ("sessions", "export", bad), ("sessions", "delete", bad, "--yes"),
                ("chat", "-m", "fake", "--session", bad, "--message", "x"),
                ("edit", "--session", bad, "-m", "fake", "-i", "x", "--yes"),
                ("replay", bad, "-m", "fake", "--no-input")]
    for args in commands:
        code, _, err = run(capsys, *args)
        assert_clean(code, err, (CODES.USAGE, CODES.SESSION, CODES.EDIT), f"{args!r}")
        assert code != 0, f"{args!r} matched a session"
    assert len(SessionStore(_db(tmp_path)).list_sessions()) == 2
    assert _db(tmp_path).exists() and before  # nothing deleted


# -- session file mutations -----------------------------------------------------------------------
WRONG = [None, "", "x", 0, -1, 1, 2 ** 70, -(2 ** 70), 1.5, 1e308, float("nan"), float("inf"), True,
         [], [1, "a"], {}, {"a": 1}, "\ud800", "A" * 5000]
SKIP_KEYS = {"settings"}  # setting values are the settings module's corpus (GenerationSettings)


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8").splitlines()


def field_mutations(data: bytes):
    """Every top-level field of every line replaced by every wrong value; then fields removed."""
    lines = _lines(data)
    window_seen = False
    for n, line in enumerate(lines):
        obj = json.loads(line)
        values = WRONG
        if obj.get("type") == "window":  # hundreds alike: the first one, and fewer values
            if window_seen:
                continue
            window_seen, values = True, WRONG[::3]
        for key in obj:
            if key in SKIP_KEYS:
                continue
            for value in values:
                changed = dict(obj)
                changed[key] = value
                text = json.dumps(changed, ensure_ascii=False, allow_nan=True)
                yield f"line{n}.{key}={value!r:.20}", "\n".join(lines[:n] + [text] + lines[n + 1:])
            removed = {k: v for k, v in obj.items() if k != key}
            yield f"line{n}.-{key}", "\n".join(lines[:n] + [json.dumps(removed)] + lines[n + 1:])
        for nested in ("file", "edit", "model"):
            if isinstance(obj.get(nested), dict):
                for sub in list(obj[nested]):
                    for value in (None, 5, [], "\ud800"):
                        changed = json.loads(line)
                        changed[nested][sub] = value
                        yield (f"line{n}.{nested}.{sub}={value!r:.10}",
                               "\n".join(lines[:n] + [json.dumps(changed)] + lines[n + 1:]))


def structure_mutations(data: bytes):
    lines = _lines(data)
    for cut in sorted({int(len(data) * k / 29) for k in range(29)}):
        yield f"truncated@{cut}", data[:cut]
    for n in range(len(lines)):
        yield f"drop{n}", "\n".join(lines[:n] + lines[n + 1:])
        yield f"dup{n}", "\n".join(lines[:n + 1] + [lines[n]] + lines[n + 1:])
        if n + 1 < len(lines):
            yield f"swap{n}", "\n".join(lines[:n] + [lines[n + 1], lines[n]] + lines[n + 2:])
    r = rng(12)
    for k in range(16):
        at = r.randrange(len(data))
        yield f"badbyte{k}", data[:at] + bytes([r.choice([0x80, 0xC3, 0xFF, 0xFE, 0xED])]) + data[at + 1:]
    for k in range(8):
        at = r.randrange(len(data))
        yield f"nul{k}", data[:at] + b"\x00" + data[at:]
    yield "bom", b"\xef\xbb\xbf" + data
    yield "crlf", data.replace(b"\n", b"\r\n")
    yield "blank-lines", data.replace(b"\n", b"\n\n\n")
    yield "empty", b""
    yield "spaces", b"   \n\n  \n"
    yield "not-json", b"hello\n"
    yield "array-header", b"[1, 2, 3]\n" + data
    yield "deep-header", b"[" * 100_000 + b"]" * 100_000 + b"\n"
    yield "deep-field", ('{"format":"strata-session","version":1,"kind":"chat","model":'
                         + "[" * 50_000 + "]" * 50_000 + "}").encode()
    header = json.loads(lines[0])
    for version in (0, 2, -1, 10 ** 30, "1", 1.0, None):
        h = dict(header, version=version)
        yield f"version={version!r}", "\n".join([json.dumps(h)] + lines[1:])
    for fmt in ("", "strata", "STRATA-SESSION", None, 1):
        h = dict(header, format=fmt)
        yield f"format={fmt!r}", "\n".join([json.dumps(h)] + lines[1:])
    yield "huge-line", "\n".join(lines[:1] + ['{"type":"turn","index":0,"input":"' + "x" * 2_000_000 + '"}'])
    yield "unknown-types", "\n".join(lines + ['{"type":"future-thing","a":1}', '{"type":"window","turn":99}'])


def _as_bytes(text) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")


def _corpus(recorded):
    for kind, data in recorded.items():
        for name, mutated in list(structure_mutations(data)) + list(field_mutations(data)):
            yield f"{kind}:{name}", _as_bytes(mutated)


def test_corpus_is_large(recorded):
    assert sum(1 for _ in _corpus(recorded)) > 500


def test_every_mutation_parses_imports_and_replays_or_says_why(recorded, tmp_path):
    """Core level, the whole corpus: parse -> import -> replay either works or raises one
    StrataError (one line); a failed import adds nothing to the store."""
    store = SessionStore(tmp_path / "corpus.db")
    outcomes = {"ok": 0, "refused": 0}
    for k, (name, data) in enumerate(_corpus(recorded)):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # the byte-level cases go through read_session_file below
        before = store._read("SELECT COUNT(*) FROM sessions")[0][0]
        try:
            rec = parse_lines(text.splitlines(), name)
            import_session(store, rec)
            if k % 8 == 0:  # replaying is the slow part: every eighth case runs it
                list(Replay(FakeGenerator(), rec).events())
            outcomes["ok"] += 1
        except StrataError as exc:
            assert "\n" not in str(exc), name
            outcomes["refused"] += 1
            after = store._read("SELECT COUNT(*) FROM sessions")[0][0]
            assert after in (before, before + 1), name  # an import either landed whole or not at all
        sid_rows = store._read("SELECT id FROM sessions")
        for (sid,) in sid_rows[-1:]:
            recording_from_store(store, sid)  # whatever landed reads back
    assert outcomes["refused"] > 300 and outcomes["ok"] > 10, outcomes


def _sample(recorded, n, seed):
    cases = list(_corpus(recorded))
    picked = rng(seed).sample(cases, n)
    # always include the byte-level and deep ones
    picked += [c for c in cases if any(k in c[0] for k in ("badbyte", "deep", "bom", "nul", "empty"))]
    return picked


@pytest.mark.parametrize("seed", [1, 2])
def test_cli_import_and_replay_of_mutated_files(capsys, tmp_path, recorded, seed):
    for k, (name, data) in enumerate(_sample(recorded, 25, seed)):
        path = tmp_path / f"case{k}.jsonl"
        path.write_bytes(data)
        before = len(SessionStore(_db(tmp_path)).list_sessions()) if _db(tmp_path).exists() else 0
        code, _, err = run(capsys, "sessions", "import", str(path))
        assert_clean(code, err, (CODES.SESSION,), f"import {name}")
        after = len(SessionStore(_db(tmp_path)).list_sessions())
        assert after == before + (1 if code == 0 else 0) or (code == 0 and after == before), name
        code, _, err = run(capsys, "replay", str(path), "-m", "fake", "--no-input", "--compare")
        assert_clean(code, err, (CODES.SESSION, CODES.EDIT, CODES.MISMATCH, CODES.MODEL, CODES.USAGE),
                     f"replay {name}")


# -- damaged and foreign stores -------------------------------------------------------------------
def damages():
    for frac in (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95):
        yield f"truncate{frac}", ("truncate", frac)
    for seed in range(12):
        yield f"page{seed}", ("page", seed)
    for at in (16, 18, 20, 24, 28, 44, 56, 60, 92, 96):
        yield f"header{at}", ("header", at)


def _damage(db: Path, how) -> None:
    raw = bytearray(db.read_bytes())
    kind, arg = how
    if kind == "truncate":
        db.write_bytes(bytes(raw[:max(100, int(len(raw) * arg))]))
        return
    r = rng(arg if kind == "page" else arg + 1000)
    if kind == "page":
        page = r.randrange(1, max(2, len(raw) // 4096))
        at = page * 4096 + r.randrange(0, 3000)
        raw[at:at + 512] = bytes(r.randrange(256) for _ in range(512))
    else:
        raw[arg:arg + 4] = bytes(r.randrange(256) for _ in range(4))
    db.write_bytes(bytes(raw))


@pytest.mark.parametrize("name,how", list(damages()), ids=[n for n, _ in damages()])
def test_damaged_stores(capsys, tmp_path, base_store, name, how):
    db = _two_sessions(tmp_path, base_store)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # read-only: the copy stays as it is
    sid = con.execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
    con.close()
    _damage(db, how)
    first = True
    for args in (("sessions", "list"), ("sessions", "show", sid), ("sessions", "export", sid),
                 ("chat", "-m", "fake", "--message", "after the damage")):
        before = db.read_bytes()
        code, _, err = run(capsys, *args)
        assert_clean(code, err, (CODES.SESSION,), f"{name} {args}")
        if code != 0:
            assert db.read_bytes() == before, f"{name} {args}: a store strata refused was changed"
        if first and code == 0:
            # the copy is not in WAL mode yet: opening it switched modes, which strata does only
            # after a whole-file check, so the file it wrote to was undamaged
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            assert con.execute("PRAGMA quick_check(1)").fetchone()[0] == "ok", name
            con.close()
        first = False


FOREIGN = {
    "random": bytes(rng(5).randrange(256) for _ in range(8192)),
    "text": b"just some notes\n" * 100,
    "empty-header": b"SQLite format 3\x00",
    "header-only": b"SQLite format 3\x00" + b"\x00" * 84,
    "zeros": b"\x00" * 4096,
}


@pytest.mark.parametrize("name", sorted(FOREIGN) + ["other-app", "future-schema", "bad-version-row",
                                                    "directory"])
def test_foreign_stores_are_refused_and_kept(capsys, tmp_path, name):
    db = _db(tmp_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    if name in FOREIGN:
        db.write_bytes(FOREIGN[name])
    elif name == "directory":
        db.mkdir()
    else:
        con = sqlite3.connect(db)
        if name == "other-app":
            con.execute("CREATE TABLE notes (body TEXT)")
        else:
            con.execute("CREATE TABLE schema_version (version)")
            con.execute("INSERT INTO schema_version VALUES (?)", (999 if name == "future-schema" else "x",))
        con.commit()
        con.close()
    before = db.read_bytes() if db.is_file() else None
    for args in (("sessions", "list"), ("chat", "-m", "fake", "--message", "hi"),
                 ("edit", str(tmp_path / "nofile.py"), "-m", "fake", "-i", "x", "--yes")):
        code, _, err = run(capsys, *args)
        assert_clean(code, err, (CODES.SESSION, CODES.EDIT, CODES.IO), f"{name} {args}")
    if before is not None:
        assert db.read_bytes() == before
    assert run(capsys, "sessions", "list")[0] != 0


def test_an_empty_store_file_is_a_new_store(capsys, tmp_path):
    db = _db(tmp_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(b"")
    assert run(capsys, "chat", "-m", "fake", "--message", "hi")[0] == 0
    assert len(SessionStore(db).list_sessions()) == 1
    os.sync()


@pytest.mark.parametrize("command", [["replay"], ["sessions", "import"], ["bench"]])
def test_a_session_file_past_the_limit_is_refused_without_reading_it_all(capsys, monkeypatch, tmp_path, command):
    # the size was checked with stat(), which says 0 for /dev/zero: reading it ended in an
    # internal MemoryError (exit 1)
    from strata import session_format

    monkeypatch.setattr(session_format, "MAX_FILE_BYTES", 1000)
    fifo = sized_fifo(tmp_path / "pipe.jsonl", b"x" * 5000)  # stat() says 0, as for /dev/zero, but finite
    code, out, err = run(capsys, *command, str(fifo), *(["-m", "fake"] if command != ["sessions", "import"] else []))
    assert "internal error" not in err and "Traceback" not in err
    assert code == CODES.SESSION and "too large for a session file" in err, err

"""The session store never loses data: empty/ambiguous ids match nothing, resumed turns are
deleted only when confirmed, imports are one transaction and idempotent, and a locked, full or
damaged store is a one-line error that leaves the file as it was."""
import io
import sqlite3
import sys

import pytest

from strata.chat import ChatSession, StoredTurnError
from strata.cli import ExitCode, app
from strata.cli.runner import run_app
from strata.errors import SessionError
try:
    from strata.testing.fake import FakeGenerator
except ImportError:  # before the test doubles moved into strata.testing
    from strata.fake import FakeGenerator
from strata.session_format import (import_recording, import_session, read_session_file,
                                   recording_from_store, write_session_file)
from strata.store import SessionStore, TurnRecord

MODEL = {"name": "m", "id": "abc123", "context_limit": 100}


@pytest.fixture
def store(tmp_path):
    s = SessionStore(tmp_path / "s.db")
    yield s
    s.close()


@pytest.fixture
def cli_env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    monkeypatch.setenv("STRATA_DEBUG", "0")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    return tmp_path / "home" / "data" / "sessions.sqlite3"


def run(capsys, *args):
    with pytest.raises(SystemExit) as info:
        run_app(app, list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def _chat(store, n=2):
    chat = ChatSession(FakeGenerator(), store=store)
    for i in range(n):
        list(chat.send(f"message {i}"))
    return chat.session_id


# -- ids ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["", " ", "\t", "\n", "  a", "a ", "a\x00", "\x1b[2J"])
def test_empty_or_odd_ids_never_match(store, bad):
    store.create_session("chat", MODEL, session_id="a1b2c3")
    with pytest.raises(SessionError, match="empty|spaces or control"):
        store.resolve_id(bad)
    with pytest.raises(SessionError):
        store.delete_session(bad)
    assert len(store.list_sessions()) == 1


def test_cli_delete_with_empty_or_ambiguous_id_deletes_nothing(capsys, cli_env):
    for msg in ("one", "two"):
        assert run(capsys, "chat", "-m", "fake", "--message", msg)[0] == 0
    code, out, _ = run(capsys, "sessions", "list", "--json")
    import json
    ids = [r["id"] for r in json.loads(out)]
    assert len(ids) == 2
    for bad in ("", " ", ids[0][:0]):
        code, _, err = run(capsys, "sessions", "delete", bad, "--yes")
        assert code == ExitCode.SESSION, err
        assert err.count("\n") == 1 and "Traceback" not in err and "empty" in err
    common = 0
    while ids[0][:common + 1] == ids[1][:common + 1]:
        common += 1
    if common:
        code, _, err = run(capsys, "sessions", "delete", ids[0][:common], "--yes")
        assert code == ExitCode.SESSION and "ambiguous" in err
    assert len(json.loads(run(capsys, "sessions", "list", "--json")[1])) == 2


# -- resume + undo -------------------------------------------------------------------------------
def test_undo_of_a_resumed_turn_needs_a_yes(store):
    sid = _chat(store, 2)
    chat = ChatSession(FakeGenerator(), store=store, session_id=sid)
    assert chat.undo_deletes_stored()
    with pytest.raises(StoredTurnError, match="recorded before this run"):
        chat.undo()
    with pytest.raises(StoredTurnError):
        list(chat.retry())
    assert len(store.turns(sid)) == 2 and len(chat.turns) == 2  # nothing changed
    # a turn of this run undoes freely; the resumed one still asks
    list(chat.send("fresh"))
    assert not chat.undo_deletes_stored()
    chat.undo()
    assert len(store.turns(sid)) == 2
    chat.undo(delete_stored=True)
    assert [t.index for t in store.turns(sid)] == [0]


# -- import --------------------------------------------------------------------------------------
def _exported(tmp_path, n=3):
    src = SessionStore(tmp_path / "src.db")
    sid = _chat(src, n)
    path = tmp_path / "chat.jsonl"
    write_session_file(recording_from_store(src, sid), path)
    src.close()
    return path, sid


@pytest.mark.parametrize("fail_at", [0, 1, 2])
def test_interrupted_import_leaves_nothing(store, tmp_path, monkeypatch, fail_at):
    path, _ = _exported(tmp_path)
    rec = read_session_file(path)
    calls = {"n": 0}
    real = store.add_windows

    def dying(*args, **kw):
        if calls["n"] == fail_at:
            raise KeyboardInterrupt  # what Ctrl-C (or a crash) does half way
        calls["n"] += 1
        return real(*args, **kw)

    monkeypatch.setattr(store, "add_windows", dying)
    with pytest.raises(KeyboardInterrupt):
        import_recording(store, rec)
    monkeypatch.setattr(store, "add_windows", real)
    assert store.list_sessions() == []
    assert store._read("SELECT COUNT(*) FROM turns")[0][0] == 0
    assert store._read("SELECT COUNT(*) FROM imports")[0][0] == 0
    # and the store still works: the import goes through afterwards
    sid = import_recording(store, rec)
    assert len(store.turns(sid)) == 3


def test_importing_the_same_file_twice_is_idempotent(store, tmp_path):
    path, original_id = _exported(tmp_path)
    first = import_session(store, read_session_file(path))
    second = import_session(store, read_session_file(path))
    assert first.created and not second.created
    assert first.session_id == second.session_id == original_id
    assert len(store.list_sessions()) == 1
    # deleting the import and importing again brings it back
    store.delete_session(first.session_id)
    assert import_session(store, read_session_file(path)).created


def test_cli_import_twice(capsys, cli_env, tmp_path):
    path, _ = _exported(tmp_path)
    code, out1, _ = run(capsys, "sessions", "import", str(path))
    assert code == 0
    code, out2, err = run(capsys, "sessions", "import", str(path))
    assert code == 0 and out1 == out2 and "already in the store" in err
    assert len(SessionStore(cli_env).list_sessions()) == 1


# -- locked, full, damaged -----------------------------------------------------------------------
def test_locked_store_is_one_line_error(tmp_path):
    path = tmp_path / "s.db"
    s = SessionStore(path)
    sid = s.create_session("chat", MODEL)
    s.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(SessionError, match="locked by another process"):
            store = SessionStore(path, timeout=0.05)
            store.add_turn(sid, TurnRecord(index=0, input="x", output="y"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert SessionStore(path).get_session(sid).n_turns == 0


def test_cli_locked_store(capsys, cli_env, monkeypatch):
    assert run(capsys, "chat", "-m", "fake", "--message", "hi")[0] == 0
    monkeypatch.setenv("STRATA_STORE_TIMEOUT", "0.05")
    holder = sqlite3.connect(cli_env, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        # reading goes on while another process writes (WAL); writing waits, then says so
        assert run(capsys, "sessions", "list")[0] == 0
        for args in (("chat", "-m", "fake", "--message", "again"), ("sessions", "delete", "-y",
                                                                  SessionStore(cli_env).list_sessions()[0].id)):
            code, _, err = run(capsys, *args)
            assert code == ExitCode.SESSION, err
            assert "locked" in err and "Traceback" not in err and err.count("\n") == 1
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_full_store_is_one_line_error_and_keeps_data(store):
    sid = _chat(store, 1)
    pages = store._read("PRAGMA page_count")[0][0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + 1}")
    with pytest.raises(SessionError, match="disk is full"):
        store.add_turn(sid, TurnRecord(index=1, input="x" * 200_000, output="y"))
    assert [t.input for t in store.turns(sid)] == ["message 0"]


def _damage(path, at, data):
    raw = bytearray(path.read_bytes())
    raw[at:at + len(data)] = data
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("where", ["page2", "page1_tail", "schema", "truncated"])
def test_damaged_store_is_refused_and_left_as_it_is(tmp_path, capsys, cli_env, where):
    assert run(capsys, "chat", "-m", "fake", "--message", "hi")[0] == 0
    db = cli_env
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    for side in ("-wal", "-shm"):
        p = db.with_name(db.name + side)
        if p.exists():
            p.unlink()
    size = db.stat().st_size
    if where == "page2":
        _damage(db, 4096, b"\xff" * 4096)
    elif where == "page1_tail":
        _damage(db, 100, b"\x07" * 400)
    elif where == "schema":
        _damage(db, 4096 + 8, b"\x00\x00" * 200)
    else:
        db.write_bytes(db.read_bytes()[:size // 3])
    before = db.read_bytes()
    for args in (("sessions", "list"), ("chat", "-m", "fake", "--message", "again")):
        code, _, err = run(capsys, *args)
        if code == 0 and args[1] == "list" and where == "truncated":
            continue  # the pages a listing needs are intact; writing (below) still refuses
        assert code == ExitCode.SESSION, err
        assert "Traceback" not in err and err.count("\n") == 1
        assert "damaged" in err or "corrupt" in err
    assert db.read_bytes() == before

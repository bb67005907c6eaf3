import sqlite3
import threading

import pytest

from strata.errors import SessionError, UsageError
from strata.protocol import GenerationSettings, WindowStats
from strata.store import (SCHEMA_VERSION, BlobStore, CheckpointRing, SessionStore, TurnRecord,
                          sha256_bytes)
from strata.store.migrations import MIGRATIONS

MODEL = {"name": "m", "id": "abc123", "context_limit": 100}


@pytest.fixture
def store(tmp_path):
    s = SessionStore(tmp_path / "s.db")
    yield s
    s.close()


def test_new_store_is_at_latest_schema(store):
    assert store.schema_version == SCHEMA_VERSION == MIGRATIONS[-1][0]
    rows = store._conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()
    assert rows == (1,)


def test_migration_from_version_1_keeps_data(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE schema_version (version INTEGER NOT NULL);"
                       "INSERT INTO schema_version VALUES (1);" + MIGRATIONS[0][1])
    conn.execute("INSERT INTO sessions VALUES ('s1','chat','t',1,2,'m','abc123','{\"name\":\"m\",\"id\":\"abc123\"}','{}')")
    conn.execute("INSERT INTO turns VALUES ('s1',0,'user','hi',NULL,NULL,NULL,'yo','eos',NULL,3)")
    conn.commit()
    conn.close()
    with SessionStore(path) as s:
        assert s.schema_version == SCHEMA_VERSION
        assert [t.output for t in s.turns("s1")] == ["yo"]
        s.add_windows("s1", 0, [WindowStats(pos0=5, T=2, emitted=2)])  # table from migration 2
        assert s.windows("s1")[0][1].pos0 == 5


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "new.db"
    SessionStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = 999")
    conn.commit()
    conn.close()
    with pytest.raises(SessionError, match="newer than this strata"):
        SessionStore(path)


def test_foreign_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE songs (title TEXT)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(SessionError, match="not a strata session store"):
        SessionStore(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("content", [b"hello, not a database at all\n" * 10, b"SQLite format 3\x00" + b"\xff" * 200])
def test_corrupt_file_is_refused_and_never_overwritten(tmp_path, content):
    path = tmp_path / "sessions.sqlite3"
    path.write_bytes(content)
    with pytest.raises(SessionError) as info:
        SessionStore(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert path.read_bytes() == content


def test_sessions_turns_messages_edits_settings(store):
    sid = store.create_session("chat", MODEL, GenerationSettings(seed=7), title="first")
    store.add_turn(sid, TurnRecord(0, "hi", "hello", stop_reason="eos"))
    store.add_message(sid, 0, "user", "hi")
    store.add_turn(sid, TurnRecord(1, "more", "sure", settings={"draft": "none"}))
    info = store.get_session(sid[:6])
    assert info.id == sid and info.n_turns == 2 and info.settings["seed"] == 7
    assert info.model_id == "abc123"
    assert [t.input for t in store.turns(sid)] == ["hi", "more"]
    assert store.turns(sid)[1].settings == {"draft": "none"}
    eid = store.add_edit(sid, 1, "f.py", "a" * 64, "b" * 64)
    store.set_edit_status(eid, "accepted")
    assert store.edits(sid)[0].status == "accepted"
    with pytest.raises(SessionError):
        store.set_edit_status(eid, "maybe")
    store.set_setting("checkpoint_ring_size", 3)
    assert store.get_setting("checkpoint_ring_size") == 3
    assert store.get_setting("missing", "x") == "x"
    store.truncate_turns(sid, 1)
    assert [t.index for t in store.turns(sid)] == [0]
    assert store.edits(sid) == []
    with pytest.raises(SessionError, match="already exists"):
        store.create_session("chat", MODEL, session_id=sid)
    with pytest.raises(SessionError):
        store.create_session("poem", MODEL)


def test_ambiguous_and_unknown_ids(store):
    store.create_session("chat", MODEL, session_id="aaa1")
    store.create_session("chat", MODEL, session_id="aaa2")
    with pytest.raises(SessionError, match="ambiguous"):
        store.get_session("aaa")
    with pytest.raises(SessionError, match="no session"):
        store.get_session("zzz")
    with pytest.raises(SessionError, match="no session"):
        store.get_session("%")  # LIKE wildcards are literal


def test_window_rows_round_trip(store):
    sid = store.create_session("edit", MODEL)
    stats = [WindowStats(pos0=i, T=3, n_drafted=2, n_accept=1, emitted=2, experts=[[1, 2], [3]],
                         union_per_layer=[2, 1], drafter="suffix") for i in range(5)]
    assert store.add_windows(sid, 0, stats) == 5
    got = [s for _, s in store.windows(sid, 0)]
    assert got == stats


def test_blob_round_trip_and_corruption(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    ref = blobs.write(b"state bytes" * 100, "model-a")
    assert blobs.read(ref, "model-a") == b"state bytes" * 100
    with pytest.raises(SessionError, match="model-a.*model-b"):
        blobs.read(ref, "model-b")
    path = blobs.path(ref)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SessionError, match="checksum"):
        blobs.read(ref, "model-a")
    # a damaged file is never overwritten, even by a write of the same content
    with pytest.raises(SessionError):
        blobs.write(b"state bytes" * 100, "model-a")
    assert path.read_bytes() == bytes(data)
    path.write_bytes(b"garbage")
    with pytest.raises(SessionError, match="bad magic"):
        blobs.read(ref)
    path.write_bytes(path.read_bytes()[:3])
    with pytest.raises(SessionError):
        blobs.read(ref)
    path.unlink()
    with pytest.raises(SessionError, match="missing"):
        blobs.read(ref)
    with pytest.raises(SessionError, match="reference"):
        blobs.read("../../etc/passwd")


def test_checkpoint_ring_evicts_oldest_and_deletes_blobs(store):
    sid = store.create_session("chat", MODEL)
    ring = CheckpointRing(3, model_id="abc123", store=store, session_id=sid)
    for turn in range(5):
        ring.push(turn, turn * 10, f"state {turn}".encode())
    assert [cp.turn for cp in ring.entries] == [2, 3, 4]
    files = sorted(p.name for p in store.blobs.directory.iterdir())
    assert files == sorted(f"{sha256_bytes(f'state {t}'.encode())}.state" for t in (2, 3, 4))
    # reopened from the store: the same ring
    again = CheckpointRing(3, model_id="abc123", store=store, session_id=sid)
    assert [(cp.turn, cp.pos) for cp in again.entries] == [(2, 20), (3, 30), (4, 40)]
    assert again.load(again.find(turn=3)) == b"state 3"
    again.drop_after(2)
    assert [cp.turn for cp in again.entries] == [2]
    assert len(list(store.blobs.directory.iterdir())) == 1
    # a ring of another model refuses the stored blobs
    other = CheckpointRing(3, model_id="other", store=store, session_id=sid)
    with pytest.raises(SessionError, match="refusing"):
        other.load(other.entries[0])


def test_delete_session_removes_blobs_but_keeps_shared_ones(store):
    a = store.create_session("chat", MODEL)
    b = store.create_session("chat", MODEL)
    store.add_checkpoint(a, 0, "turn", 1, b"shared", "abc123")
    store.add_checkpoint(b, 0, "turn", 1, b"shared", "abc123")
    store.add_checkpoint(a, 1, "turn", 2, b"only a", "abc123")
    store.delete_session(a)
    names = {p.name for p in store.blobs.directory.iterdir()}
    assert names == {f"{sha256_bytes(b'shared')}.state"}
    assert [s.id for s in store.list_sessions()] == [b]


def test_save_and_load_state(store):
    sid = store.create_session("chat", MODEL)
    assert store.load_state(sid, "abc123") is None
    store.save_state(sid, 0, 5, b"one", "abc123")
    store.save_state(sid, 1, 9, b"two", "abc123")
    rec, payload = store.load_state(sid, "abc123")
    assert payload == b"two" and rec.pos == 9
    assert len(store.checkpoints(sid, label="state")) == 1
    with pytest.raises(SessionError):
        store.load_state(sid, "someone-else")


def test_store_is_usable_from_worker_threads(store):
    sid = store.create_session("chat", MODEL)
    errors = []

    def work(k):
        try:
            for i in range(20):
                store.add_message(sid, k, "user", f"{k}-{i}")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(store.messages(sid)) == 80


def test_ring_size_comes_from_argument_env_then_store(store, monkeypatch):
    monkeypatch.delenv("STRATA_CHECKPOINTS", raising=False)
    sid = store.create_session("chat", MODEL)
    assert CheckpointRing.for_session(store, sid, "abc123").capacity == 8
    store.set_setting("checkpoint_ring_size", 5)
    assert CheckpointRing.for_session(store, sid, "abc123").capacity == 5
    monkeypatch.setenv("STRATA_CHECKPOINTS", "3")
    assert CheckpointRing.for_session(store, sid, "abc123").capacity == 3
    assert CheckpointRing.for_session(store, sid, "abc123", capacity=2).capacity == 2
    monkeypatch.setenv("STRATA_CHECKPOINTS", "lots")
    with pytest.raises(UsageError, match="STRATA_CHECKPOINTS"):
        CheckpointRing.for_session(None, None, "abc123")
    with pytest.raises(SessionError, match="at least 1"):
        CheckpointRing(0, model_id="abc123")

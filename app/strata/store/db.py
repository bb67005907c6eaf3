"""The SQLite session store: sessions, turns, messages, edits, settings, model identity,
per-window telemetry and checkpoint records. Engine-state bytes live in blob files beside it
(see blobs.py); the database holds only their checksums.

One connection, guarded by a lock, so the TUI's worker threads and its message handlers can
share a store. Every write is one transaction.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import SessionError, UsageError
from ..protocol import GenerationSettings, WindowStats
from .blobs import BlobRef, BlobStore
from .migrations import LATEST, MIGRATIONS

KINDS = ("chat", "edit")
TIMEOUT_ENV = "STRATA_STORE_TIMEOUT"  # seconds to wait for a store another process has locked


def busy_timeout() -> float:
    """$STRATA_STORE_TIMEOUT in seconds (unset: 10); a value that is not a number from 0 to 3600
    is a usage error (exit 2), not silently 10."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return 10.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:  # nan too
        raise UsageError(f"{TIMEOUT_ENV}={raw!r}: use a number of seconds from 0 to 3600 (unset: 10)")
    return value
EDIT_STATUSES = ("proposed", "accepted", "rejected", "undone")


@dataclass
class SessionInfo:
    id: str
    kind: str
    title: str | None
    created_at: float
    updated_at: float
    model: dict[str, Any]
    settings: dict[str, Any]
    n_turns: int = 0

    @property
    def model_name(self) -> str:
        return str(self.model.get("name", ""))

    @property
    def model_id(self) -> str:
        return str(self.model.get("id", ""))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "title": self.title,
                "created_at": self.created_at, "updated_at": self.updated_at,
                "model": self.model, "settings": self.settings, "turns": self.n_turns}


@dataclass
class TurnRecord:
    """One recorded turn: what went in, what came out, under which settings."""

    index: int
    input: str
    output: str
    role: str = "user"
    instruction: str | None = None
    file_path: str | None = None
    file_content: str | None = None
    stop_reason: str | None = None
    settings: dict[str, Any] | None = None
    created_at: float = field(default_factory=time.time)


@dataclass
class EditRecord:
    id: int
    turn_idx: int
    path: str
    before_sha256: str
    after_sha256: str
    status: str
    created_at: float


@dataclass
class CheckpointRecord:
    id: int
    session_id: str
    turn_idx: int
    label: str
    pos: int
    ref: BlobRef
    created_at: float


def model_identity(generator: Any, **extra: Any) -> dict[str, Any]:
    """The identity a session records for a generator (name, id hash, context limit)."""
    ident = {"name": str(getattr(generator, "model_name", "")),
             "id": str(getattr(generator, "model_id", "")),
             "context_limit": int(getattr(generator, "context_limit", 0) or 0)}
    if getattr(generator, "model_path", None):
        ident["path"] = str(generator.model_path)
    routing = getattr(generator, "routing", None)
    if routing:  # cache-aware routing (MoCE) and friends: the mode, and whether it changes output
        ident["routing"] = dict(routing)
        ident["approximate"] = bool(getattr(generator, "approximate", False))
    ident.update({k: v for k, v in extra.items() if v is not None})
    return ident


def _shown(session_id: str) -> str:
    # an id as an error message shows it: quoted, escaped, and short
    text = repr(session_id)
    return text if len(text) <= 42 else text[:36] + "...'"


def _settings_dict(settings: GenerationSettings | dict[str, Any] | None) -> dict[str, Any]:
    if settings is None:
        return GenerationSettings().to_dict()
    if isinstance(settings, GenerationSettings):
        return settings.to_dict()
    return dict(settings)


class SessionStore:
    """Open (creating and migrating as needed) the store at `path`; default: paths.session_db()."""

    def __init__(self, path: str | os.PathLike | None = None,
                 blob_dir: str | os.PathLike | None = None, *, timeout: float | None = None) -> None:
        from .. import paths

        self.path = Path(path) if path is not None else paths.session_db()
        self.blobs = BlobStore(blob_dir if blob_dir is not None else self.path.parent / "blobs")
        self._lock = threading.RLock()
        self._depth = 0  # open transactions of this store (nested ones join the outer one)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SessionError(f"{self.path.parent}: cannot create the session folder ({exc.strerror})") from None
        self._check_header()
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                         timeout=busy_timeout() if timeout is None else timeout)
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._conn.execute("PRAGMA synchronous = FULL")
            self._migrate()
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def _error(self, exc: sqlite3.Error) -> SessionError:
        """One line that says what is wrong with the store and that it was left as it is."""
        text = str(exc)
        low = text.lower()
        if "locked" in low or "busy" in low:
            return SessionError(f"{self.path}: the session store is locked by another process (is another "
                                "strata writing to it?); nothing was changed, try again")
        if "full" in low:
            return SessionError(f"{self.path}: the disk is full; the session store was not changed "
                                "(free some space and try again)")
        if "readonly" in low or "read-only" in low:
            return SessionError(f"{self.path}: the session store is read-only ({text})")
        if "unable to open" in low:
            return SessionError(f"{self.path}: cannot open the session store ({text})")
        return SessionError(f"{self.path}: the session store is damaged ({text}); it was left as it is: "
                            "move it away or set STRATA_HOME to start a new one")

    def _read(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._conn.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                raise self._error(exc) from None

    def _check_header(self) -> None:
        # refuse a foreign file before SQLite touches it (it could otherwise add a journal)
        try:
            with open(self.path, "rb") as f:
                head = f.read(16)
        except FileNotFoundError:
            return
        if head and head != b"SQLite format 3\x00":
            raise SessionError(f"{self.path}: not a strata session store (not an SQLite file); "
                               "move it away or set STRATA_HOME")

    # -- schema ------------------------------------------------------------------------------
    @property
    def schema_version(self) -> int:
        return int(self._read("SELECT version FROM schema_version")[0][0])

    def _migrate(self, target: int = LATEST) -> None:
        with self._lock:
            tables = {r[0] for r in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")}
            if "schema_version" not in tables:
                if tables:
                    raise SessionError(f"{self.path}: SQLite file is not a strata session store "
                                       f"(has tables {', '.join(sorted(tables))})")
                version = 0
            else:
                rows = self._conn.execute("SELECT version FROM schema_version").fetchall()
                if len(rows) != 1 or not isinstance(rows[0][0], int):
                    raise SessionError(f"{self.path}: schema_version row is corrupt")
                version = rows[0][0]
            if version > LATEST:
                raise SessionError(f"{self.path}: session store has schema version {version}, "
                                   f"newer than this strata understands ({LATEST}); upgrade strata")
            # only now that the file is known to be ours, and whole, may anything write to it
            mode = self._conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":  # switching modes writes the header: check the pages first
                check = " ".join(str(self._conn.execute("PRAGMA quick_check(1)").fetchone()[0]).split())
                if check != "ok":
                    raise SessionError(f"{self.path}: the session store is damaged ({check}); it was left "
                                       "as it is: move it away or set STRATA_HOME to start a new one")
                self._conn.execute("PRAGMA journal_mode = WAL")
            for number, sql in MIGRATIONS:
                if number <= version or number > target:
                    continue
                setup = ("CREATE TABLE schema_version (version INTEGER NOT NULL);"
                         "INSERT INTO schema_version VALUES (0);") if number == 1 else ""
                try:
                    self._conn.executescript(
                        f"BEGIN IMMEDIATE; {setup} {sql}; UPDATE schema_version SET version = {number}; COMMIT;")
                except sqlite3.Error as exc:
                    self._rollback()
                    if isinstance(exc, sqlite3.OperationalError):
                        raise self._error(exc) from None
                    raise SessionError(f"{self.path}: migration {number} failed ({exc})") from None

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._depth:  # inside transaction(): one commit at the end of the outer block
                yield self._conn
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._error(exc) from None
            self._depth += 1
            try:
                yield self._conn
            except sqlite3.Error as exc:
                self._rollback()
                raise self._error(exc) from None
            except BaseException:
                self._rollback()
                raise
            else:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._rollback()
                    raise self._error(exc) from None
            finally:
                self._depth -= 1

    def _rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite rolls back on its own when a statement fails hard

    def transaction(self):
        """Group several writes into one transaction: all of them land, or none does (a
        killed process leaves nothing half done)."""
        return self._tx()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "SessionStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ----------------------------------------------------------------------------
    def create_session(self, kind: str, model: dict[str, Any],
                       settings: GenerationSettings | dict[str, Any] | None = None,
                       title: str | None = None, session_id: str | None = None,
                       created_at: float | None = None) -> str:
        if kind not in KINDS:
            raise SessionError(f"session kind must be one of {', '.join(KINDS)}, not {kind!r}")
        sid = session_id or uuid.uuid4().hex[:12]
        now = created_at if created_at is not None else time.time()
        with self._tx() as c:
            if c.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone():
                raise SessionError(f"session {sid} already exists")
            c.execute("INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?)",
                      (sid, kind, title, now, now, str(model.get("name", "")),
                       str(model.get("id", "")), json.dumps(model), json.dumps(_settings_dict(settings))))
        return sid

    def _row_to_info(self, row: tuple) -> SessionInfo:
        sid, kind, title, created, updated, _name, _mid, model_json, settings_json, n = row
        model = self._json(model_json, f"session {sid} model record")
        settings = self._json(settings_json, f"session {sid} settings record")
        if not isinstance(model, dict) or not isinstance(settings, dict):
            raise SessionError(f"{self.path}: session {sid} has corrupt model/settings records")
        return SessionInfo(sid, kind, title, created, updated, model, settings, n)

    _INFO_SQL = ("SELECT s.id, s.kind, s.title, s.created_at, s.updated_at, s.model_name, s.model_id, "
                 "s.model_json, s.settings_json, (SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id) "
                 "FROM sessions s")

    def list_sessions(self, limit: int | None = None, kind: str | None = None) -> list[SessionInfo]:
        sql, args = self._INFO_SQL, []
        if kind:
            sql += " WHERE s.kind = ?"
            args.append(kind)
        sql += " ORDER BY s.updated_at DESC, s.id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [self._row_to_info(r) for r in self._read(sql, args)]

    def resolve_id(self, session_id: str) -> str:
        """A full id, or a unique prefix of one (as git does with commits). An empty id never
        matches (it would be a prefix of every id)."""
        if not isinstance(session_id, str) or not session_id.strip():
            raise SessionError("the session id is empty; give an id or a prefix of one "
                               "(see `strata sessions list`)")
        if session_id != session_id.strip() or not session_id.isprintable():
            raise SessionError(f"session id {_shown(session_id)} has spaces or control characters; "
                               "session ids never do")
        escaped = session_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._read("SELECT id FROM sessions WHERE id LIKE ? ESCAPE '\\' LIMIT 2", (escaped,))
        exact = self._read("SELECT id FROM sessions WHERE id = ?", (session_id,))
        if exact:
            return exact[0][0]
        if not rows:
            raise SessionError(f"no session {_shown(session_id)} in {self.path} (see `strata sessions list`)")
        if len(rows) > 1:
            raise SessionError(f"session id prefix {_shown(session_id)} is ambiguous; give more characters")
        return rows[0][0]

    def get_session(self, session_id: str) -> SessionInfo:
        sid = self.resolve_id(session_id)
        rows = self._read(self._INFO_SQL + " WHERE s.id = ?", (sid,))
        return self._row_to_info(rows[0])

    def update_session(self, session_id: str, *, settings: GenerationSettings | dict | None = None,
                       title: str | None = None) -> None:
        with self._tx() as c:
            if settings is not None:
                c.execute("UPDATE sessions SET settings_json = ? WHERE id = ?",
                          (json.dumps(_settings_dict(settings)), session_id))
            if title is not None:
                c.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))
            c.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (time.time(), session_id))

    def delete_session(self, session_id: str) -> None:
        sid = self.resolve_id(session_id)
        with self._tx() as c:
            shas = [r[0] for r in c.execute("SELECT blob_sha256 FROM checkpoints WHERE session_id = ?", (sid,))]
            c.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        for sha in shas:
            self._drop_blob_if_unused(sha)

    # -- imports -----------------------------------------------------------------------------
    def imported_as(self, digest: str) -> str | None:
        """The session an earlier import of a recording with this digest created, if it is still here."""
        rows = self._read("SELECT session_id FROM imports WHERE digest = ?", (digest,))
        return rows[0][0] if rows else None

    def record_import(self, digest: str, session_id: str, source: str) -> None:
        with self._tx() as c:
            c.execute("INSERT OR REPLACE INTO imports VALUES (?,?,?,?)", (digest, session_id, source, time.time()))

    # -- turns and messages ------------------------------------------------------------------
    def add_turn(self, session_id: str, turn: TurnRecord) -> None:
        with self._tx() as c:
            if c.execute("SELECT 1 FROM turns WHERE session_id = ? AND idx = ?", (session_id, turn.index)).fetchone():
                raise SessionError(f"session {session_id} already has a turn {turn.index} "
                                   "(was it continued by another strata meanwhile?)")
            c.execute("INSERT INTO turns VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                      (session_id, turn.index, turn.role, turn.input, turn.instruction,
                       turn.file_path, turn.file_content, turn.output, turn.stop_reason,
                       json.dumps(turn.settings) if turn.settings is not None else None,
                       turn.created_at))
            c.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (time.time(), session_id))

    def turns(self, session_id: str) -> list[TurnRecord]:
        rows = self._read(
            "SELECT idx, role, input, instruction, file_path, file_content, output, stop_reason, "
            "settings_json, created_at FROM turns WHERE session_id = ? ORDER BY idx", (session_id,))
        out = []
        for idx, role, inp, instr, fpath, fcontent, output, stop, sj, created in rows:
            out.append(TurnRecord(index=idx, input=inp, output=output, role=role, instruction=instr,
                                  file_path=fpath, file_content=fcontent, stop_reason=stop,
                                  settings=self._json(sj, f"session {session_id} turn {idx} settings") if sj else None,
                                  created_at=created))
        return out

    def _json(self, text: str, what: str) -> Any:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            raise SessionError(f"{self.path}: {what} is corrupt (not JSON)") from None

    def truncate_turns(self, session_id: str, keep: int) -> None:
        """Drop turns (and their messages, windows, edits, checkpoints) with index >= keep."""
        with self._tx() as c:
            shas = [r[0] for r in c.execute(
                "SELECT blob_sha256 FROM checkpoints WHERE session_id = ? AND turn_idx >= ?", (session_id, keep))]
            for table, col in (("turns", "idx"), ("messages", "turn_idx"), ("windows", "turn_idx"),
                               ("edits", "turn_idx"), ("checkpoints", "turn_idx")):
                c.execute(f"DELETE FROM {table} WHERE session_id = ? AND {col} >= ?", (session_id, keep))
        for sha in shas:
            self._drop_blob_if_unused(sha)

    def add_message(self, session_id: str, turn_idx: int, role: str, content: str) -> None:
        with self._tx() as c:
            c.execute("INSERT INTO messages (session_id, turn_idx, role, content) VALUES (?,?,?,?)",
                      (session_id, turn_idx, role, content))

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        rows = self._read("SELECT turn_idx, role, content FROM messages WHERE session_id = ? "
                          "ORDER BY id", (session_id,))
        return [{"turn": t, "role": r, "content": c} for t, r, c in rows]

    # -- telemetry ---------------------------------------------------------------------------
    def add_windows(self, session_id: str, turn_idx: int, stats: Iterable[WindowStats]) -> int:
        rows = []
        for seq, s in enumerate(stats):
            rows.append((session_id, turn_idx, seq, s.pos0, s.T, s.n_drafted, s.n_accept, s.emitted,
                         s.window_us, s.cold_misses, json.dumps(s.to_dict(), separators=(",", ":"))))
        with self._tx() as c:
            c.execute("DELETE FROM windows WHERE session_id = ? AND turn_idx = ?", (session_id, turn_idx))
            c.executemany("INSERT INTO windows VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        return len(rows)

    def windows(self, session_id: str, turn_idx: int | None = None) -> list[tuple[int, WindowStats]]:
        sql = "SELECT turn_idx, stats_json FROM windows WHERE session_id = ?"
        args: list[Any] = [session_id]
        if turn_idx is not None:
            sql += " AND turn_idx = ?"
            args.append(turn_idx)
        out = []
        for t, js in self._read(sql + " ORDER BY turn_idx, seq", args):
            try:
                out.append((t, WindowStats.from_dict(self._json(js, f"session {session_id} window record"))))
            except (TypeError, ValueError):
                raise SessionError(f"{self.path}: session {session_id} has a corrupt window record") from None
        return out

    # -- edits -------------------------------------------------------------------------------
    def add_edit(self, session_id: str, turn_idx: int, path: str, before_sha256: str,
                 after_sha256: str, status: str = "proposed") -> int:
        if status not in EDIT_STATUSES:
            raise SessionError(f"edit status must be one of {', '.join(EDIT_STATUSES)}")
        with self._tx() as c:
            cur = c.execute("INSERT INTO edits (session_id, turn_idx, path, before_sha256, after_sha256, "
                            "status, created_at) VALUES (?,?,?,?,?,?,?)",
                            (session_id, turn_idx, path, before_sha256, after_sha256, status, time.time()))
            return int(cur.lastrowid)

    def set_edit_status(self, edit_id: int, status: str) -> None:
        if status not in EDIT_STATUSES:
            raise SessionError(f"edit status must be one of {', '.join(EDIT_STATUSES)}")
        with self._tx() as c:
            c.execute("UPDATE edits SET status = ? WHERE id = ?", (status, edit_id))

    def edits(self, session_id: str) -> list[EditRecord]:
        rows = self._read("SELECT id, turn_idx, path, before_sha256, after_sha256, status, "
                          "created_at FROM edits WHERE session_id = ? ORDER BY id", (session_id,))
        return [EditRecord(*r) for r in rows]

    # -- app settings ------------------------------------------------------------------------
    def set_setting(self, key: str, value: Any) -> None:
        with self._tx() as c:
            c.execute("INSERT INTO settings VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                      (key, json.dumps(value)))

    def get_setting(self, key: str, default: Any = None) -> Any:
        rows = self._read("SELECT value FROM settings WHERE key = ?", (key,))
        if not rows:
            return default
        return self._json(rows[0][0], f"setting {key!r}")

    # -- engine state (checkpoints and saved state) -----------------------------------------
    def add_checkpoint(self, session_id: str, turn_idx: int, label: str, pos: int,
                       payload: bytes, model_id: str) -> CheckpointRecord:
        ref = self.blobs.write(payload, model_id)
        now = time.time()
        with self._tx() as c:
            cur = c.execute("INSERT INTO checkpoints (session_id, turn_idx, label, pos, blob_sha256, size, "
                            "model_id, created_at) VALUES (?,?,?,?,?,?,?,?)",
                            (session_id, turn_idx, label, pos, ref.sha256, ref.size, model_id, now))
            cid = int(cur.lastrowid)
        return CheckpointRecord(cid, session_id, turn_idx, label, pos, ref, now)

    def checkpoints(self, session_id: str, label: str | None = None) -> list[CheckpointRecord]:
        sql = ("SELECT id, session_id, turn_idx, label, pos, blob_sha256, size, model_id, created_at "
               "FROM checkpoints WHERE session_id = ?")
        args: list[Any] = [session_id]
        if label is not None:
            sql += " AND label = ?"
            args.append(label)
        rows = self._read(sql + " ORDER BY id", args)
        return [CheckpointRecord(i, s, t, lab, p, BlobRef(sha, size, mid), created)
                for i, s, t, lab, p, sha, size, mid, created in rows]

    def load_checkpoint(self, record: CheckpointRecord, model_id: str) -> bytes:
        return self.blobs.read(record.ref, model_id)

    def delete_checkpoint(self, record: CheckpointRecord) -> None:
        with self._tx() as c:
            c.execute("DELETE FROM checkpoints WHERE id = ?", (record.id,))
        self._drop_blob_if_unused(record.ref.sha256)

    def _drop_blob_if_unused(self, sha: str) -> None:
        used = self._read("SELECT 1 FROM checkpoints WHERE blob_sha256 = ? LIMIT 1", (sha,))
        if not used:
            self.blobs.delete(sha)

    def save_state(self, session_id: str, turn_idx: int, pos: int, payload: bytes, model_id: str) -> None:
        """The session's saved engine state (label "state": one per session, replaced atomically)."""
        old = self.checkpoints(session_id, label="state")
        self.add_checkpoint(session_id, turn_idx, "state", pos, payload, model_id)
        for rec in old:
            self.delete_checkpoint(rec)

    def load_state(self, session_id: str, model_id: str) -> tuple[CheckpointRecord, bytes] | None:
        recs = self.checkpoints(session_id, label="state")
        if not recs:
            return None
        return recs[-1], self.load_checkpoint(recs[-1], model_id)

"""Numbered schema migrations of the session store. Append only: never edit a released step.

Each step runs in one transaction together with the `schema_version` update, so a store is
always at exactly one version.
"""
from __future__ import annotations

MIGRATIONS: list[tuple[int, str]] = [
    (1, """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('chat', 'edit')),
        title TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        model_name TEXT NOT NULL,
        model_id TEXT NOT NULL,
        model_json TEXT NOT NULL,
        settings_json TEXT NOT NULL
    );
    CREATE TABLE turns (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        role TEXT NOT NULL,
        input TEXT NOT NULL,
        instruction TEXT,
        file_path TEXT,
        file_content TEXT,
        output TEXT NOT NULL,
        stop_reason TEXT,
        settings_json TEXT,
        created_at REAL NOT NULL,
        PRIMARY KEY (session_id, idx)
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn_idx INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL
    );
    CREATE TABLE edits (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn_idx INTEGER NOT NULL,
        path TEXT NOT NULL,
        before_sha256 TEXT NOT NULL,
        after_sha256 TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('proposed', 'accepted', 'rejected', 'undone')),
        created_at REAL NOT NULL
    );
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """),
    (2, """
    CREATE TABLE windows (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn_idx INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        pos0 INTEGER NOT NULL,
        t INTEGER NOT NULL,
        n_drafted INTEGER NOT NULL,
        n_accept INTEGER NOT NULL,
        emitted INTEGER NOT NULL,
        window_us REAL NOT NULL,
        cold_misses INTEGER NOT NULL,
        stats_json TEXT NOT NULL,
        PRIMARY KEY (session_id, turn_idx, seq)
    );
    CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn_idx INTEGER NOT NULL,
        label TEXT NOT NULL,
        pos INTEGER NOT NULL,
        blob_sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        model_id TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX checkpoints_by_session ON checkpoints(session_id, id);
    CREATE INDEX messages_by_session ON messages(session_id, turn_idx);
    CREATE INDEX edits_by_session ON edits(session_id, id);
    """),
    (3, """
    CREATE TABLE imports (
        digest TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        source TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    """),
]

LATEST = MIGRATIONS[-1][0]

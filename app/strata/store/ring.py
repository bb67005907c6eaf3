"""The checkpoint ring: the last N engine-state snapshots taken at turn boundaries, so undo and
retry restore state instead of prefilling again.

Without a store the snapshots live in memory; with one they are checksummed blob files
recorded in the `checkpoints` table, so a resumed session can still undo.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SessionError, UsageError

if TYPE_CHECKING:
    from .db import CheckpointRecord, SessionStore

DEFAULT_CAPACITY = 8
MAX_CAPACITY = 1024  # each is a full engine state: more would not fit any disk budget
SETTING_KEY = "checkpoint_ring_size"
ENV_KEY = "STRATA_CHECKPOINTS"


def env_capacity() -> int | None:
    """$STRATA_CHECKPOINTS as a ring size (None when unset); UsageError (one line, exit 2) for a
    value --checkpoints would refuse, so that a typo is not read as 'no checkpoints' or a million."""
    env = os.environ.get(ENV_KEY, "").strip()
    if not env:
        return None
    try:
        n = int(env)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_CAPACITY:
        raise UsageError(f"{ENV_KEY}={env!r}: use a whole number of checkpoints from 1 to {MAX_CAPACITY} "
                         f"(unset: the store's setting, else {DEFAULT_CAPACITY})")
    return n


@dataclass
class Checkpoint:
    turn: int          # the turn boundary: state after turn `turn` (-1 = before the first turn)
    label: str         # "turn" (end of a turn) or "file" (edit: after the file was read)
    pos: int           # engine position at the snapshot
    key: str | None = None          # caller's tag, e.g. the sha256 of the file an edit read
    _payload: bytes | None = None
    _record: "CheckpointRecord | None" = None


class CheckpointRing:
    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, model_id: str,
                 store: "SessionStore | None" = None, session_id: str | None = None) -> None:
        if capacity < 1:
            raise SessionError(f"checkpoint ring size must be at least 1, not {capacity}")
        if store is not None and session_id is None:
            raise ValueError("a stored checkpoint ring needs a session id")
        self.capacity = capacity
        self.model_id = model_id
        self.store = store
        self.session_id = session_id
        self._entries: list[Checkpoint] = []
        if store is not None:
            for rec in store.checkpoints(session_id):  # type: ignore[arg-type]
                if rec.label == "state":
                    continue
                label, _, key = rec.label.partition(":")
                self._entries.append(Checkpoint(rec.turn_idx, label, rec.pos, key or None, _record=rec))
            self._trim()

    @classmethod
    def for_session(cls, store: "SessionStore | None", session_id: str | None, model_id: str,
                    capacity: int | None = None) -> "CheckpointRing":
        """Ring size: `capacity`, else $STRATA_CHECKPOINTS, else the store's
        `checkpoint_ring_size` setting, else 8."""
        if capacity is None:
            capacity = env_capacity()
        if capacity is None:
            capacity = DEFAULT_CAPACITY if store is None else int(store.get_setting(SETTING_KEY, DEFAULT_CAPACITY))
        return cls(capacity, model_id=model_id, store=store, session_id=session_id)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> list[Checkpoint]:
        return list(self._entries)

    def push(self, turn: int, pos: int, payload: bytes, *, label: str = "turn",
             key: str | None = None) -> Checkpoint:
        cp = Checkpoint(turn, label, pos, key)
        if self.store is not None:
            tag = f"{label}:{key}" if key else label
            cp._record = self.store.add_checkpoint(self.session_id, turn, tag, pos, payload, self.model_id)  # type: ignore[arg-type]
        else:
            cp._payload = bytes(payload)
        self._entries.append(cp)
        self._trim()
        return cp

    def _trim(self) -> None:
        while len(self._entries) > self.capacity:
            self._forget(self._entries.pop(0))

    def _forget(self, cp: Checkpoint) -> None:
        if self.store is not None and cp._record is not None:
            self.store.delete_checkpoint(cp._record)

    def find(self, *, turn: int | None = None, label: str | None = None,
             key: str | None = None) -> Checkpoint | None:
        """The most recent checkpoint matching every given field."""
        for cp in reversed(self._entries):
            if ((turn is None or cp.turn == turn) and (label is None or cp.label == label)
                    and (key is None or cp.key == key)):
                return cp
        return None

    def drop_after(self, turn: int) -> None:
        """Forget checkpoints taken after turn `turn` (their turns were undone)."""
        keep = []
        for cp in self._entries:
            if cp.turn > turn:
                self._forget(cp)
            else:
                keep.append(cp)
        self._entries = keep

    def load(self, cp: Checkpoint) -> bytes:
        if cp._payload is not None:
            return cp._payload
        assert self.store is not None and cp._record is not None
        return self.store.load_checkpoint(cp._record, self.model_id)

    def restore(self, generator: Any, cp: Checkpoint) -> None:
        """Put `generator` back into the state of `cp` (checked against the model)."""
        generator.restore(self.load(cp))
        if generator.pos != cp.pos:
            raise SessionError(f"checkpoint of turn {cp.turn} restored to position {generator.pos}, "
                               f"expected {cp.pos}")

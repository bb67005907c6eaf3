#!/usr/bin/env python3
"""Record the demo sessions in sessions/demo/ (JSONL, docs/session-format.md).

    python scripts/record_demo_sessions.py [--model PATH|alias] [--out sessions/demo] [--demo arith|client]

The inputs are fixed here; the outputs and telemetry come from the model that records them.
`--model fake` (with STRATA_ALLOW_FAKE=1) records with the deterministic fake engine, which
is what the test suite replays; record again with a real model to get real outputs.

Two input sets: `client` (an HTTP client module and "replace X with Y" edits, which the fake
engine carries out; `sessions/demo/*.jsonl` were recorded with `--demo client --model fake`) and
`arith` (the default: small edits and questions that the bundled strata-tiny gets right, picked
by trying them; `sessions/demo/strata-tiny/` was recorded with it and the bundled model).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from strata.chat import ChatSession  # noqa: E402
from strata.edit import EditSession  # noqa: E402
from strata.protocol import GenerationSettings  # noqa: E402
from strata.runtime import open_generator  # noqa: E402
from strata.session_format import recording_from_store, write_session_file  # noqa: E402
from strata.store import SessionStore  # noqa: E402
from demo_files import ARITH  # noqa: E402  (scripts/ is the script's own folder on sys.path)

SERVICE = '''"""A small HTTP client wrapper used by the demo edit session."""
import json
import time
import urllib.request

DEFAULT_TIMEOUT = 30
RETRIES = 3


def fetch(url, timeout=DEFAULT_TIMEOUT):
    print("fetching", url)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def fetch_json(url, timeout=DEFAULT_TIMEOUT):
    print("fetching json", url)
    return json.loads(fetch(url, timeout=timeout))


def fetch_with_retries(url, timeout=DEFAULT_TIMEOUT):
    for attempt in range(RETRIES):
        try:
            return fetch(url, timeout=timeout)
        except OSError as exc:
            print("attempt", attempt, "failed:", exc)
            time.sleep(2 ** attempt)
    raise RuntimeError("giving up on " + url)
'''


EDIT_ROUNDS = [
    "replace DEFAULT_TIMEOUT = 30 with DEFAULT_TIMEOUT = 60",
    "replace print( with log.info(",
    "add a module docstring note that retries back off exponentially",
    "replace RETRIES = 3 with RETRIES = 5",
]

CHAT_TURNS = [
    "What does strata do when a draft token is rejected?",
    "And how does the expert cache decide what to keep?",
    "What does strata do when a draft token is rejected?",
]

SCALE_QUESTION = ('Explain this function:\n\n```python\ndef scale(values, factor):\n'
                  '    """Multiply every value by factor."""\n    return [v * factor for v in values]\n```')

# file name, its text, edit instructions (applied in turn, each accepted), chat turns
DEMOS = {
    "client": ("client.py", SERVICE, EDIT_ROUNDS, CHAT_TURNS),
    # asked twice, so the repeat shows suffix drafting over the first answer
    "arith": ("arith.py", ARITH, ["Add `import math`.", "Add `import json`.", "Leave the file exactly as it is."],
              [SCALE_QUESTION, "What arguments does it take?", SCALE_QUESTION]),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "sessions" / "demo"))
    ap.add_argument("--demo", choices=sorted(DEMOS), default="arith")
    args = ap.parse_args()
    file_name, source, edit_rounds, chat_turns = DEMOS[args.demo]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gen = open_generator(args.model)
    settings = GenerationSettings(max_new=512, draft="suffix")
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(Path(tmp) / "s.db")
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            Path(file_name).write_text(source)
            edit = EditSession(gen, file_name, settings, store=store, title=f"demo: repeated edits of {file_name}")
            for instruction in edit_rounds:
                for _ in edit.propose(instruction):
                    pass
                # shown so whoever records can check that the demo edits are right
                print(f"--- {instruction!r}:\n{edit.diff() or '(no change)'}", flush=True)
                edit.accept()
        finally:
            os.chdir(cwd)
        chat = ChatSession(gen, settings, store=store, title="demo: a short chat")
        for text in chat_turns:
            for _ in chat.send(text):
                pass
        names = ((edit.session_id, f"edit-{Path(file_name).stem}.jsonl"), (chat.session_id, "chat-intro.jsonl"))
        for sid, name in names:
            rec = recording_from_store(store, sid)
            write_session_file(rec, out / name, overwrite=True)
            print(f"wrote {out / name} ({len(rec.turns)} turns, model {rec.model.get('name')})")
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

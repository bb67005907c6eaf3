"""Replay in the TUI feeds the transcript and the panels through the same worker and messages
as a live run: the panels see exactly the windows the replay produced."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strata.chat import ChatSession
from strata.testing.fake import FakeGenerator
from strata.replay import Replay
from strata.session_format import recording_from_store
from strata.store import SessionStore
from strata.tui.app import StrataApp
from strata.tui.widgets.transcript import Transcript

from tui_helpers import asynctest, frozen_reply, settle

SIZE = (130, 40)


def fake(**kwargs) -> FakeGenerator:
    """The shared fake engine, with the tests' own text (tui_helpers.frozen_reply)."""
    return FakeGenerator(responder=frozen_reply, **kwargs)
MESSAGES = ["alpha beta gamma", "alpha beta gamma again", "and delta"]


@pytest.fixture
def recording(tmp_path):
    store = SessionStore(tmp_path / "s.db")
    chat = ChatSession(fake(), store=store)
    for text in MESSAGES:
        for _ in chat.send(text):
            pass
    return recording_from_store(store, chat.session_id)


@asynctest
async def test_replay_with_drafting_off_is_identical_and_feeds_the_panels(recording):
    replay = Replay(fake(), recording, {"draft": "none"})
    app = StrataApp(replay.generator, mode="replay", replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.screen
        msgs = screen.query_one(Transcript).messages()
        assert [t for r, t in msgs if r == "user"] == MESSAGES
        assert [t for r, t in msgs if r == "assistant"] == [t.output for t in recording.turns]
        assert replay.report.identical
        assert "outputs identical to the recording" in screen.report_lines
        # panels saw exactly the replayed windows: drafting off means T=1 everywhere
        replayed = replay.report.total("replayed")
        assert len(app.telemetry.windows) == replayed.windows
        assert all(w.T == 1 and w.n_drafted == 0 for w in app.telemetry.windows)
        await pilot.press("ctrl+r")                # replay again: fresh report, same result
        await settle(app, pilot)
        assert app.replay is not replay and app.replay.report.identical
        assert len(app.telemetry.windows) == replayed.windows


@asynctest
async def test_recorded_telemetry_reaches_the_panels_unchanged(recording):
    app = StrataApp(fake(), mode="replay", replay=recording)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        recorded = [s for i in sorted(recording.windows) for s in recording.windows[i]]
        # the same windows, field for field (the log keeps counters; the heatmap took the experts)
        slim = [replace(s, experts=[], union_per_layer=[], cold_experts=[]) for s in recorded]
        assert app.telemetry.windows == slim
        assert app.telemetry.heat.last_union == recorded[-1].union_per_layer
        msgs = app.screen.query_one(Transcript).messages()
        assert [t for r, t in msgs if r == "assistant"] == [t.output for t in recording.turns]
        app.repaint_panels(force=True)
        await pilot.pause()
        assert app.screen.report_lines[0].startswith(f"recorded telemetry: {len(recorded)} windows")


@asynctest
async def test_replay_of_an_edit_session_never_touches_the_users_file(tmp_path):
    from strata.edit import EditSession

    target = tmp_path / "calc.py"
    source = "def f(x):\n    return x + 1\n"
    target.write_text(source)
    store = SessionStore(tmp_path / "s.db")
    session = EditSession(fake(), target, store=store)
    for _ in session.propose("replace x + 1 with x + 2"):
        pass
    session.accept()
    edited = target.read_text()
    recording = recording_from_store(store, session.session_id)
    replay = Replay(fake(), recording)
    app = StrataApp(replay.generator, mode="replay", replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        msgs = app.screen.query_one(Transcript).messages()
        assert msgs[0] == ("user", f"[{target}] replace x + 1 with x + 2")
        assert msgs[1] == ("assistant", source.replace("x + 1", "x + 2"))
        assert replay.report.identical
    assert target.read_text() == edited


@asynctest
async def test_replay_marks_replies_that_differ_from_the_recording(recording):
    recording.turns[1].output = recording.turns[1].output.replace("again", "AGAIN")
    replay = Replay(fake(), recording)
    app = StrataApp(replay.generator, mode="replay", replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        from strata.tui.widgets.transcript import MessageBlock

        replies = [b for b in app.screen.query(MessageBlock) if b.role == "assistant"]
        assert [str(b.border_title) for b in replies][0] == "assistant \u00b7 identical"
        assert "DIFFERENT at char" in str(replies[1].border_title)
        assert replies[1].has_class("-different") and not replies[0].has_class("-different")
        assert "outputs DIFFER from the recording" in app.screen.report_lines

from pathlib import Path

import pytest

from strata.chat import ChatSession
from strata.edit import EditSession
from strata.errors import SessionError
from strata.testing.fake import FakeGenerator
from strata.protocol import GenerationSettings, WindowEvent, WindowStats
from strata.replay import Replay, load_recording, recorded_events, turn_settings
from strata.session_format import read_session_file
from strata.store import SessionStore

DEMO = Path(__file__).resolve().parents[1] / "sessions" / "demo"


@pytest.fixture
def store(tmp_path):
    with SessionStore(tmp_path / "s.db") as s:
        yield s


def _chat(store):
    chat = ChatSession(FakeGenerator(), store=store)
    for text in ("hello", "more please", "hello"):
        list(chat.send(text))
    return chat.session_id


def _edit(store, tmp_path):
    f = tmp_path / "code.py"
    f.write_text("".join(f"value_{i} = compute({i})\n" for i in range(30)))
    ed = EditSession(FakeGenerator(), f, store=store)
    for instruction in ("replace compute with evaluate", "add a header", "replace value_1 with item_1"):
        list(ed.propose(instruction))
        ed.accept()
    return ed.session_id, f


@pytest.mark.parametrize("draft", [None, "none", "suffix"])
def test_chat_replay_is_identical_with_drafting_on_or_off(store, draft):
    rec = load_recording(_chat(store), store)
    rep = Replay(FakeGenerator(), rec, {"draft": draft} if draft else {})
    events = list(rep.events())
    assert all(isinstance(ev, WindowEvent) and isinstance(ev.stats, WindowStats) for _, ev in events)
    report = rep.report
    assert report.identical and report.same_model and len(report.turns) == 3
    if draft == "none":
        assert report.total("replayed").drafted == 0
        assert report.total("replayed").windows == report.total("replayed").emitted
    else:
        # the recording drafted: replay reproduces its windows exactly
        assert report.total("replayed").to_dict() == report.total("recorded_stats").to_dict()


def test_edit_replay_uses_recorded_files_and_never_touches_the_real_one(store, tmp_path):
    sid, f = _edit(store, tmp_path)
    final = f.read_text()
    rec = load_recording(sid, store)
    assert [t.file_content != rec.turns[0].file_content for t in rec.turns] == [False, True, True]
    report = Replay(FakeGenerator(), rec, {"draft": "none"}).run()
    assert report.identical, report.lines()
    assert f.read_text() == final
    assert "outputs identical to the recording" in report.lines()[-1]


def test_changed_settings_are_reported_as_different(store):
    rec = load_recording(_chat(store), store)
    report = Replay(FakeGenerator(), rec, {"temperature": 0.7, "seed": 11}).run()
    assert not report.identical
    diff = report.turns[0]
    assert diff.first_difference == len("You said: hello")
    assert any("DIFFERENT at char" in line for line in report.lines())
    assert report.to_dict()["turns"][0]["identical"] is False


def test_another_model_is_noted(store):
    rec = load_recording(_chat(store), store)
    report = Replay(FakeGenerator(model_name="other-moe"), rec).run()
    assert not report.same_model
    assert "not expected to match" in report.lines()[1]


def test_bad_overrides_are_refused_before_running(store):
    rec = load_recording(_chat(store), store)
    with pytest.raises(SessionError, match="cannot be overridden"):
        Replay(FakeGenerator(), rec, {"repetition_penalty": 2.0})
    assert turn_settings(rec, 0, {"draft": "none"}).draft == "none"


def test_stop_midway(store):
    rec = load_recording(_chat(store), store)
    calls = iter([False] * 10 + [True] * 1000)
    report = Replay(FakeGenerator(), rec).run(should_stop=lambda: next(calls))
    assert report.stopped and not report.identical


def test_recorded_events_feed_the_stored_telemetry(store):
    sid = _chat(store)
    rec = load_recording(sid, store)
    gen = FakeGenerator()
    events = list(recorded_events(rec, gen))
    assert [ev.stats for _, ev in events] == [s for _, s in store.windows(sid)]
    for turn in rec.turns:
        text = "".join(ev.text for i, ev in events if i == turn.index)
        assert text == turn.output
    finals = [ev for _, ev in events if ev.finished]
    assert len(finals) == 3 and all(ev.stop_reason == "eos" for ev in finals)


def test_live_and_replayed_windows_are_the_same_objects_and_values(store):
    gen = FakeGenerator()
    chat = ChatSession(gen, store=store)
    live = [ev.stats for ev in chat.send("compare me") if ev.tokens]
    rec = load_recording(chat.session_id, store)
    replayed = [ev.stats for _, ev in Replay(FakeGenerator(), rec).events() if ev.tokens]
    assert live == replayed == rec.windows[0]


@pytest.mark.parametrize("name", ["edit-client.jsonl", "chat-intro.jsonl"])
def test_demo_sessions_parse_and_replay_identically(name):
    rec = read_session_file(DEMO / name)
    assert rec.turns and rec.windows
    if rec.model.get("id") != FakeGenerator().model_id:
        pytest.skip("demo re-recorded with a real model (scripts/record_demo_sessions.py)")
    report = Replay(FakeGenerator(), rec).run()
    assert report.identical, report.lines()
    suffix = report.total("replayed")
    assert suffix.tokens_per_window > 1.5  # repeated edits are where suffix drafting shines


def test_load_recording_errors(tmp_path):
    with pytest.raises(SessionError, match="no such session file"):
        load_recording(tmp_path / "missing.jsonl")
    with pytest.raises(SessionError, match="no such session file"):
        load_recording("abc")

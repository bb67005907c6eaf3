import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.chat import ChatSession
from strata.errors import AlreadyExistsError, SessionError
from strata.testing.fake import FakeGenerator
from strata.session_format import (FORMAT, VERSION, import_recording, parse_lines, read_session_file,
                                   recording_from_store, write_session_file)
from strata.store import SessionStore


@pytest.fixture
def store(tmp_path):
    with SessionStore(tmp_path / "s.db") as s:
        yield s


def _recorded_chat(store):
    chat = ChatSession(FakeGenerator(), store=store, title="demo")
    for text in ("hello there", "tell me more", "hello there"):
        list(chat.send(text))
    return chat.session_id


def test_export_import_round_trip(store, tmp_path):
    sid = _recorded_chat(store)
    rec = recording_from_store(store, sid)
    path = tmp_path / "chat.jsonl"
    write_session_file(rec, path)
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == FORMAT and header["version"] == VERSION and header["kind"] == "chat"
    assert header["model"]["id"] == FakeGenerator().model_id
    assert sum(1 for x in lines if json.loads(x).get("type") == "turn") == 3
    back = read_session_file(path)
    assert [(t.input, t.output, t.stop_reason) for t in back.turns] == \
        [(t.input, t.output, t.stop_reason) for t in rec.turns]
    assert back.windows == rec.windows
    # into the store it came from: nothing to add, it is that session
    assert import_recording(store, back) == sid
    assert len(store.list_sessions()) == 1
    # a changed recording under a taken id gets a new id
    back.title = "changed"
    new_id = import_recording(store, back)
    assert new_id != sid
    again = recording_from_store(store, new_id)
    assert [t.output for t in again.turns] == [t.output for t in rec.turns]
    assert again.windows == rec.windows


def test_export_never_replaces_a_file_unless_asked(store, tmp_path):
    rec = recording_from_store(store, _recorded_chat(store))
    path = tmp_path / "x.jsonl"
    path.write_text("precious")
    with pytest.raises(AlreadyExistsError, match="already exists"):  # exit 2, like convert's
        write_session_file(rec, path)
    assert path.read_text() == "precious"
    write_session_file(rec, path, overwrite=True)
    assert read_session_file(path).turns


HEADER = '{"format":"strata-session","version":1,"kind":"edit","model":{"name":"m","id":"x"},"settings":{}}'
TURN = '{"type":"turn","index":0,"role":"user","input":"go","file":{"path":"a.py","content":"x=1\\n"},"instruction":"go","output":"x=2\\n"}'


@pytest.mark.parametrize("lines, message", [
    ([], "empty file"),
    (['{"format":"something-else"}'], "not a strata session file"),
    (['[1,2]'], "expected a JSON object"),
    (['{"format":"strata-session","version":2,"kind":"chat"}'], "newer than this strata"),
    (['{"format":"strata-session","version":1,"kind":"poem"}'], '"kind"'),
    ([HEADER, '{"type":"turn","index":1,"input":"a","output":"b"}'], ":2: turn index 1, expected 0"),
    ([HEADER, TURN, "{not json"], ":3: not valid JSON"),
    ([HEADER, TURN.replace('"output":"x=2\\n"', '"output":5')], 'turn "output" must be a string'),
    ([HEADER, TURN.replace('"file":{"path":"a.py","content":"x=1\\n"}', '"file":null')], "needs \"file\""),
    ([HEADER, '{"type":"window","turn":0,"pos0":1}'], "does not precede it"),
    ([HEADER, TURN, '{"type":"window","turn":0,"pos0":-4}'], "bad window record"),
    ([HEADER, TURN, '{"type":"window","turn":0,"experts":"lots"}'], "bad window record"),
    ([HEADER.replace('"settings":{}', '"settings":{"draft":"magic"}')], 'setting "draft"'),
    ([HEADER.replace('"settings":{}', '"settings":{"max_new":"many"}')], 'setting "max_new"'),
    ([HEADER, '{"index":0}'], 'record has no "type"'),
])
def test_bad_files_give_one_line_with_the_line_number(lines, message):
    with pytest.raises(SessionError) as info:
        parse_lines(lines, "f.jsonl")
    text = str(info.value)
    assert message in text and "\n" not in text and text.startswith("f.jsonl")


def test_later_record_types_are_skipped_and_fields_kept():
    rec = parse_lines([HEADER, TURN, '{"type":"annotation","text":"from a later strata"}',
                       '{"type":"window","turn":0,"pos0":3,"T":2,"emitted":2,"future_field":1}'], "f")
    assert rec.turns[0].file_content == "x=1\n" and rec.windows[0][0].pos0 == 3


def test_non_utf8_and_missing_files(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"format":"strata-session"}\n\xff\xfe')
    with pytest.raises(SessionError, match="not UTF-8"):
        read_session_file(p)
    with pytest.raises(SessionError, match="no such session file"):
        read_session_file(tmp_path / "nope.jsonl")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.text(max_size=40),
    st.just(HEADER), st.just(TURN),
    st.dictionaries(st.sampled_from(["type", "index", "turn", "input", "output", "file", "pos0", "format",
                                     "version", "kind", "settings", "instruction", "experts"]),
                    st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=5), st.sampled_from(
                        ["turn", "window", "strata-session", "chat", "edit"]),
                        st.lists(st.integers(0, 3), max_size=2)), max_size=6).map(json.dumps),
), max_size=6))
def test_fuzzed_files_only_ever_raise_session_error(lines):
    try:
        rec = parse_lines(lines, "fuzz.jsonl")
    except SessionError as exc:
        assert "\n" not in str(exc)
        return
    assert rec.kind in ("chat", "edit")
    assert [t.index for t in rec.turns] == list(range(len(rec.turns)))


def test_edit_statuses_travel_with_the_file(store, tmp_path):
    from strata.edit import EditSession

    f = tmp_path / "code.py"
    f.write_text("x = 1\n")
    ed = EditSession(FakeGenerator(), f, store=store)
    list(ed.propose("replace 1 with 2"))
    ed.accept()
    list(ed.propose("add a header"))
    ed.reject()
    rec = recording_from_store(store, ed.session_id)
    assert [rec.edits[i]["status"] for i in (0, 1)] == ["accepted", "rejected"]
    path = tmp_path / "edit.jsonl"
    write_session_file(rec, path)
    back = read_session_file(path)
    assert back.edits == rec.edits
    sid = import_recording(store, back)
    assert [e.status for e in store.edits(sid)] == ["accepted", "rejected"]
    bad = path.read_text().replace('"status":"accepted"', '"status":"maybe"')
    with pytest.raises(SessionError, match=':2: turn "edit"'):
        parse_lines(bad.splitlines(), "x.jsonl")

import pytest

from strata import prompts
from strata.chat import ChatSession, render_chat
from strata.errors import ModelError, SessionError
from strata.testing.fake import FakeGenerator
from strata.protocol import GenerationSettings
from strata.store import SessionStore


class CountingFake(FakeGenerator):
    """Counts the prompt tokens fed to the engine (what a prefill costs)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.prefilled = 0

    def stream(self, prompt_ids, settings, should_stop=None):
        self.prefilled += len(prompt_ids)
        return super().stream(prompt_ids, settings, should_stop)


@pytest.fixture
def store(tmp_path):
    with SessionStore(tmp_path / "s.db") as s:
        yield s


def _text(events):
    return "".join(e.text for e in events)


def test_turns_stream_incrementally_and_match_a_fresh_prefill():
    gen = CountingFake()
    chat = ChatSession(gen)
    assert "hello" in _text(chat.send("hello"))
    after_one = gen.prefilled
    second = _text(chat.send("again"))
    # the second turn only feeds the new message, not the whole conversation
    assert gen.prefilled - after_one < len(gen.encode(render_chat(chat.messages, add_generation_prompt=False))) // 2
    # and the engine holds exactly what a fresh prefill of the conversation would
    fresh = FakeGenerator()
    text = render_chat(chat.messages[:-1], add_generation_prompt=True) + second + prompts.IM_END
    assert gen.tokens == fresh.encode(text)


def test_undo_and_retry_restore_from_checkpoints_without_prefill():
    gen = CountingFake()
    chat = ChatSession(gen)
    replies = [_text(chat.send(m)) for m in ("one", "two", "three")]
    pos_after_two = len(gen.encode(chat._context_after(2)))
    before = gen.prefilled
    undone = chat.undo()
    assert undone.input == "three" and len(chat.turns) == 2
    assert gen.pos == pos_after_two and gen.prefilled == before  # restored, no prefill
    again = _text(chat.retry())
    assert again == replies[1]
    assert [t.input for t in chat.turns] == ["one", "two"]
    # retried with other settings: sampled output depends on the seed
    sampled = _text(chat.retry(GenerationSettings(temperature=0.8, seed=3)))
    assert sampled != replies[1] and chat.turns[-1].settings["seed"] == 3
    chat.undo()
    chat.undo()
    assert gen.pos == 0 and chat.turns == []
    with pytest.raises(SessionError, match="nothing to undo"):
        chat.undo()


def test_undo_past_the_ring_falls_back_to_prefill():
    gen = CountingFake()
    chat = ChatSession(gen, ring_size=1)
    for m in ("a", "b", "c"):
        list(chat.send(m))
    before = gen.prefilled
    chat.undo()  # the ring only holds the last turn: turn 1's state must be rebuilt
    assert gen.prefilled > before
    assert gen.tokens == FakeGenerator().encode(chat._context_after(2))


def test_stopping_early_records_the_partial_turn(store):
    gen = FakeGenerator()
    chat = ChatSession(gen, store=store)
    stream = chat.send("hello")
    first = next(stream)
    stream.close()
    assert chat.turns[-1].stop_reason == "stopped" and chat.turns[-1].output == first.text
    assert store.turns(chat.session_id)[-1].stop_reason == "stopped"
    # the engine is usable again and the conversation continues
    assert "again" in _text(chat.send("again"))


def test_should_stop_ends_the_turn():
    chat = ChatSession(FakeGenerator())
    events = list(chat.send("hello", should_stop=lambda: True))
    assert events[-1].finished and events[-1].stop_reason == "stopped"


def test_recorded_session_resumes_with_state_and_telemetry(store):
    gen = FakeGenerator()
    chat = ChatSession(gen, store=store, system="be brief")
    for m in ("first", "second"):
        list(chat.send(m))
    tokens = gen.tokens
    assert store.windows(chat.session_id, 1)
    resumed_gen = CountingFake()
    resumed = ChatSession(resumed_gen, store=store, session_id=chat.session_id)
    assert resumed.system == "be brief" and [t.input for t in resumed.turns] == ["first", "second"]
    assert resumed_gen.tokens == tokens and resumed_gen.prefilled == 0  # from the stored checkpoint
    assert "third" in _text(resumed.send("third"))
    assert len(store.turns(chat.session_id)) == 3


def test_damaged_checkpoint_falls_back_to_prefill(store):
    chat = ChatSession(FakeGenerator(), store=store)
    list(chat.send("first"))
    for blob in store.blobs.directory.iterdir():
        blob.write_bytes(blob.read_bytes()[:-3] + b"xyz")
    gen = CountingFake()
    resumed = ChatSession(gen, store=store, session_id=chat.session_id)
    assert gen.prefilled > 0 and gen.tokens == FakeGenerator().encode(resumed._context_after(1))


def test_resume_with_another_model_is_refused(store):
    chat = ChatSession(FakeGenerator(), store=store)
    list(chat.send("first"))
    with pytest.raises(SessionError, match="recorded with model fake-moe"):
        ChatSession(FakeGenerator(model_name="other"), store=store, session_id=chat.session_id)


def test_chat_template_runs_sandboxed():
    evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(Exception) as info:
        render_chat([{"role": "user", "content": "x"}], add_generation_prompt=True, template=evil)
    assert isinstance(info.value, ModelError)
    refusing = "{{ raise_exception('no system role') }}"
    with pytest.raises(ModelError, match="no system role"):
        render_chat([{"role": "user", "content": "x"}], add_generation_prompt=False, template=refusing)
    with pytest.raises(ModelError, match="empty conversation"):  # as apply_chat_template refuses it
        render_chat([], add_generation_prompt=False, template=refusing)


def test_a_model_ending_turns_with_another_token_keeps_the_context_exact():
    # the template closes replies with <|im_end|>; this model stops on <|endoftext|>: the engine
    # must not be assumed to hold text it never saw, so the next turn starts from the template text
    gen = FakeGenerator(responder=lambda ctx, s: f"reply {ctx.count(prompts.IM_START)}" + prompts.ENDOFTEXT)
    chat = ChatSession(gen)
    for m in ("a", "b", "c"):
        list(chat.send(m))
    chat.undo()
    list(chat.send("d"))
    expected = render_chat(chat.messages[:-1], add_generation_prompt=True)
    assert gen.decode(gen.tokens) == expected + chat.turns[-1].output + prompts.ENDOFTEXT


def test_saved_state_is_used_when_the_ring_has_no_checkpoint(store):
    gen = FakeGenerator()
    chat = ChatSession(gen, store=store)
    for m in ("a", "b"):
        list(chat.send(m))
    chat.save_state()
    for rec in store.checkpoints(chat.session_id, label="turn"):
        store.delete_checkpoint(rec)  # as if the ring had been smaller
    resumed_gen = CountingFake()
    ChatSession(resumed_gen, store=store, session_id=chat.session_id)
    assert resumed_gen.prefilled == 0 and resumed_gen.tokens == gen.tokens
    with pytest.raises(SessionError, match="not recorded"):
        ChatSession(FakeGenerator()).save_state()


from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402

_OPS = st.lists(st.one_of(st.tuples(st.just("send"), st.sampled_from(["hi", "again", "hi", "more text"])),
                          st.just(("undo",)), st.just(("retry",))), min_size=1, max_size=10)


@hsettings(max_examples=40, deadline=None)
@given(ops=_OPS, ring=st.integers(1, 4))
def test_any_sequence_of_sends_undos_and_retries_keeps_the_engine_exact(ops, ring):
    gen = FakeGenerator()
    chat = ChatSession(gen, ring_size=ring)
    expected_outputs: list[str] = []
    for op in ops:
        if op[0] == "send":
            expected_outputs.append(_text(chat.send(op[1])))
        elif not chat.turns:
            continue
        elif op[0] == "undo":
            chat.undo()
            expected_outputs.pop()
        else:
            out = _text(chat.retry())
            assert out == expected_outputs[-1]  # greedy: a retry writes the same reply
        # the engine always holds exactly the conversation so far, however it got there
        assert gen.tokens == FakeGenerator().encode(chat._context_after(len(chat.turns)))
        assert [t.output for t in chat.turns] == expected_outputs
        assert len(chat.ring) <= ring

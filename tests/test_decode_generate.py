"""strata.generate.Generator over the fake model with a real byte-level BPE tokenizer: events,
incremental text, stop, snapshot/restore, aggregates; and strata.tokenizer."""
from __future__ import annotations

import json

import pytest

E = pytest.importorskip("strata._engine")
tokenizers = pytest.importorskip("tokenizers")

from strata import prompts  # noqa: E402
from strata.errors import ModelError, UsageError, WindowError  # noqa: E402
from strata.generate import Generator, summarize  # noqa: E402
from strata.protocol import GenerationSettings, WindowStats  # noqa: E402
from strata.tokenizer import IncrementalDecoder, Tokenizer  # noqa: E402

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "Grüße aus Köln — naïve café, 東京 and 🙂 emoji.\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
] * 20


@pytest.fixture(scope="module")
def tok_folder(tmp_path_factory):
    from tokenizers import Tokenizer as HFTok
    from tokenizers import decoders, models, pre_tokenizers, trainers

    t = HFTok(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(prompts.SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.train_from_iterator(CORPUS, trainer)
    folder = tmp_path_factory.mktemp("tok")
    t.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": prompts.CHAT_TEMPLATE}))
    return folder


@pytest.fixture()
def gen(tok_folder):
    tok = Tokenizer.from_folder(tok_folder)
    lm = E.FakeLM(tok.vocab_size, seed=1, context_limit=2048, copy_bias=14.0)
    return Generator(lm, tok, model_name="fake", model_id="fake-1")


def collect(gen, ids, settings, should_stop=None):
    events = list(gen.stream(ids, settings, should_stop))
    return events, [t for e in events for t in e.tokens]


def test_special_tokens_and_chat_template(tok_folder):
    tok = Tokenizer.from_folder(tok_folder)
    text = tok.render_chat([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(text)
    assert ids[0] == tok.special_ids[prompts.IM_START]
    assert tok.decode(ids) == text
    assert set(tok.eos_ids) == {tok.special_ids[prompts.ENDOFTEXT], tok.special_ids[prompts.IM_END]}


def test_chat_template_runs_in_a_sandbox(tok_folder, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((tok_folder / "tokenizer.json").read_bytes())
    evil = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": evil}))
    with pytest.raises(ModelError, match="chat template"):
        Tokenizer.from_folder(tmp_path).render_chat([{"role": "user", "content": "x"}])


def test_bad_tokenizer_file_is_one_clear_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelError, match="tokenizer.json"):
        Tokenizer.from_folder(tmp_path)
    assert Tokenizer.from_folder(tmp_path / "missing") is None


def test_incremental_decoder_never_splits_a_character(tok_folder):
    tok = Tokenizer.from_folder(tok_folder)
    text = "naïve 東京 🙂🙂 done"
    ids = tok.encode(text)
    det = IncrementalDecoder(tok.decode)
    pieces = [det.push([i]) for i in ids] + [det.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert sum(1 for p in pieces if p == "") > 0  # some tokens had to wait for the rest of a character


def test_stream_events_and_text(gen):
    ids = gen.encode("def add(a, b):\n    return a + b\n" * 3)
    events, tokens = collect(gen, ids, GenerationSettings(max_new=80))
    assert len(tokens) == 80 and events[-1].finished and events[-1].stop_reason == "max_new"
    assert all(not e.finished for e in events[:-1])
    assert "".join(e.text for e in events) == gen.decode(tokens, skip_special=True)
    assert sum(e.stats.emitted for e in events) == 80
    assert gen.pos == len(ids) + 80
    s = summarize(gen.last_stats, gen.last_prefill_s)
    assert s.tokens == 80 and s.windows == len(events) and 0 <= s.acceptance <= 1


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_drafting_on_off_identical_through_generator(tok_folder, temperature):
    tok = Tokenizer.from_folder(tok_folder)
    ids = tok.encode(CORPUS[0] + CORPUS[2] + CORPUS[0])
    outs = []
    for draft, k in (("none", None), ("suffix", None), ("suffix", 15), ("baseline", 3)):
        g = Generator(E.FakeLM(tok.vocab_size, seed=2, copy_bias=14.0), tok, model_id="f")
        settings = GenerationSettings(max_new=100, temperature=temperature, seed=9,
                                      draft="none" if draft == "none" else "suffix",
                                      drafter="baseline" if draft == "baseline" else "suffix", max_draft=k)
        outs.append(g.generate(ids, settings))
    assert all(o == outs[0] for o in outs)


def test_should_stop_and_continue(gen):
    ids = gen.encode(CORPUS[2] * 2)
    calls = {"n": 0}

    def stop():
        calls["n"] += 1
        return calls["n"] > 3

    events, tokens = collect(gen, ids, GenerationSettings(max_new=200), stop)
    assert events[-1].stop_reason == "stopped" and events[-1].finished
    assert gen.pos == len(ids) + len(tokens)
    more, _ = gen.generate([], GenerationSettings(max_new=5))
    assert len(more) == 5


def test_abandoned_stream_leaves_a_usable_generator(gen):
    it = gen.stream(gen.encode("class Point:"), GenerationSettings(max_new=50))
    next(it)
    with pytest.raises(WindowError, match="in progress"):
        gen.snapshot()
    it.close()
    assert gen.snapshot()
    gen.generate([], GenerationSettings(max_new=3))


def test_prefill_only_and_eos(gen):
    ids = gen.encode(CORPUS[0])
    events, tokens = collect(gen, ids, GenerationSettings(max_new=0))
    assert tokens == [] and events[-1].stop_reason == "max_new" and gen.pos == len(ids)
    ref, _ = gen.generate(gen.encode("x"), GenerationSettings(max_new=30))
    # make the 5th output token an EOS: generation stops right there
    g2 = Generator(E.FakeLM(gen.vocab_size, seed=1, context_limit=2048, copy_bias=14.0), gen.tokenizer,
                   model_id="fake-1", eos_ids=[ref[4]])
    g2.generate(ids, GenerationSettings(max_new=0))
    out, reason = g2.generate(g2.encode("x"), GenerationSettings(max_new=30))
    assert out == ref[:ref.index(ref[4]) + 1] and reason == "eos"


def test_snapshot_restore_round_trip(gen):
    ids = gen.encode(CORPUS[1])
    gen.generate(ids, GenerationSettings(max_new=12))
    blob, pos = gen.snapshot(), gen.pos
    after, _ = gen.generate(gen.encode(" more"), GenerationSettings(max_new=20, temperature=0.7, seed=3))
    gen.reset()
    assert gen.pos == 0
    gen.restore(blob)
    assert gen.pos == pos
    again, _ = gen.generate(gen.encode(" more"), GenerationSettings(max_new=20, temperature=0.7, seed=3))
    assert again == after
    with pytest.raises(ModelError, match="not a strata generator state"):
        gen.restore(b"garbage")
    other = Generator(E.FakeLM(gen.vocab_size, seed=1), gen.tokenizer, model_id="other")
    with pytest.raises(ModelError, match="saved by model"):
        other.restore(blob)
    assert gen.pos == pos + 1 + len(gen.encode(" more")) + 19  # untouched by the failed restores


def test_settings_are_checked(gen):
    ids = gen.encode("x")
    for bad in (dict(top_p=0.0), dict(max_draft=16), dict(min_match=0), dict(draft="maybe"), dict(temperature=-1)):
        with pytest.raises(UsageError):
            gen.stream(ids, GenerationSettings(**bad))
    with pytest.raises(WindowError, match="context"):
        gen.stream(list(range(5)) * 500, GenerationSettings())


def test_summarize_guards_every_ratio():
    s = summarize([])
    assert s.tokens == 0 and s.acceptance == 0 and s.tokens_per_s == 0 and s.window_p95_ms == 0
    s = summarize([WindowStats(T=0, emitted=1), WindowStats(T=4, n_drafted=3, n_accept=0, keep=1, emitted=1)])
    assert s.windows == 1 and s.tokens == 2 and s.acceptance == 0 and s.tokens_per_s == 0
    s = summarize([WindowStats(T=3, n_drafted=2, n_accept=2, keep=3, emitted=3, window_us=1000),
                   WindowStats(T=1, keep=1, emitted=1, window_us=3000)], prefill_s=0.5)
    assert s.acceptance == 1.0 and s.mean_keep == 2.0 and s.tokens_per_s == pytest.approx(1000.0)
    assert s.t_hist == {1: 1, 3: 1} and s.window_p50_ms == pytest.approx(2.0)

"""strata renders chat templates exactly as transformers' apply_chat_template does, in one
sandboxed environment: the published Qwen3 / Qwen3-Next / Qwen3.5 templates (fixtures, see
fixtures/chat_templates/SOURCES.md) through multi-turn conversations with system prompts,
thinking, tool calls and tool results, under the template keywords they read."""
import copy
import json
import sys
import shutil
from pathlib import Path

import pytest

from strata import prompts, templates
from strata.chat import ChatSession
from strata.errors import ModelError
from strata.testing.fake import FakeGenerator
from strata.templates import TemplateRefused
from strata.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")
from jinja2.exceptions import TemplateError  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "chat_templates"
TINY = Path(__file__).resolve().parents[1] / "app" / "strata" / "models" / "strata-tiny"
TEMPLATES = {p.stem: p.read_text(encoding="utf-8") for p in sorted(FIXTURES.glob("*.jinja"))}
QWEN_SPECIAL = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather at a place <now> & \"later\"",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "Zürich, 東京 ..."},
            "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Web search",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]

SYSTEM = {"role": "system", "content": "You are terse. Use <b>bold</b> & \"quotes\" sparingly."}


def conversations():
    """(name, messages) pairs: each a realistic multi-turn chat."""
    u1 = {"role": "user", "content": "What is the weather in Zürich and in 東京?"}
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}},
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "東京"}}}]}
    call_str_args = {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": '{"q": "weather <today>"}'}}]}
    results = [{"role": "tool", "content": '{"temp": 21, "sky": "clear"}'},
               {"role": "tool", "content": '{"temp": 27, "sky": "rain"}'}]
    answer = {"role": "assistant", "content": "Zürich: 21 °C, clear. 東京: 27 °C, rain."}
    thought = {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello!"}
    reasoned = {"role": "assistant", "content": "Four.", "reasoning_content": "2 + 2 = 4, simple."}
    reasoning_alias = {"role": "assistant", "content": "Six.", "reasoning": "3 + 3"}
    yield "one user turn", [{"role": "user", "content": "Hi"}]
    yield "system and two turns", [SYSTEM, {"role": "user", "content": "Hi"}, thought,
                                   {"role": "user", "content": "2+2?"}, reasoned]
    yield "tool round trip", [SYSTEM, u1, call, *results, answer]
    yield "tool call with string arguments", [u1, call_str_args, results[0]]
    yield "reasoning under another name", [{"role": "user", "content": "3+3?"}, reasoning_alias,
                                          {"role": "user", "content": "and 4+4?"}]
    yield "long multi-turn", [SYSTEM] + [m for i in range(6) for m in (
        {"role": "user", "content": f"step {i}: add {i} to the list"},
        {"role": "assistant", "content": f"<think>\nadding {i}\n</think>\n\nlist now ends with {i}"})]
    yield "content None is dropped", [{"role": "user", "content": "call it"},
                                     {"role": "assistant", "content": None, "tool_calls": call["tool_calls"][:1]},
                                     results[0]]


CASES = [(t, name, msgs, kw) for t in TEMPLATES for name, msgs in conversations()
         for kw in ({"add_generation_prompt": True}, {"add_generation_prompt": False},
                    {"add_generation_prompt": True, "enable_thinking": False},
                    {"add_generation_prompt": True, "enable_thinking": True},
                    {"add_generation_prompt": True, "tools": TOOLS})]


def _folder(tmp_path_factory, template: str) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    shutil.copy(TINY / "tokenizer.json", folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", **QWEN_SPECIAL, "chat_template": template}))
    return folder


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    out = {}
    for name, template in TEMPLATES.items():
        folder = _folder(tmp_path_factory, template)
        out[name] = (transformers.AutoTokenizer.from_pretrained(str(folder)), Tokenizer.from_folder(folder))
    return out


def _reference(hf, messages, kw):
    kw = dict(kw)
    tools = kw.pop("tools", None)
    try:
        return hf.apply_chat_template(copy.deepcopy(messages), tools=tools, tokenize=False, **kw), None
    except TemplateError as exc:
        # exactly TemplateError: the template's raise_exception; a subclass (UndefinedError,
        # SecurityError ...): the template failed on this conversation
        return None, TemplateRefused if type(exc) is TemplateError else ModelError
    except (TypeError, ValueError) as exc:  # the template meets data it cannot handle
        return None, ModelError


@pytest.mark.parametrize("template,name,messages,kw", CASES,
                         ids=[f"{t}-{n}-{'-'.join(f'{k}={v}' for k, v in kw.items() if k != 'tools')}"
                              f"{'-tools' if 'tools' in kw else ''}" for t, n, _, kw in CASES])
def test_render_matches_transformers(tokenizers, template, name, messages, kw):
    hf, ours = tokenizers[template]
    want, refused = _reference(hf, messages, kw)
    kw = dict(kw)
    tools = kw.pop("tools", None)
    agp = kw.pop("add_generation_prompt")
    if refused is not None:  # transformers fails: strata fails too, in one line
        with pytest.raises(refused) as info:
            ours.render_chat(copy.deepcopy(messages), add_generation_prompt=agp, tools=tools, **kw)
        assert "\n" not in str(info.value)
        return
    got = ours.render_chat(copy.deepcopy(messages), add_generation_prompt=agp, tools=tools, **kw)
    assert got == want
    # the module function directly, with the same special tokens
    assert templates.render(TEMPLATES[template], messages, add_generation_prompt=agp, tools=tools,
                            special_tokens=ours.special_tokens_map, **kw) == want


def test_the_cases_exercise_what_they_claim(tokenizers):
    # guards against a comparison of empty strings: the fixtures really render thinking,
    # tool calls, tool results and the enable_thinking switch
    hf, _ = tokenizers["qwen3"]
    msgs = dict(conversations())["tool round trip"]
    text = hf.apply_chat_template(msgs, tools=TOOLS, tokenize=False, add_generation_prompt=True,
                                  enable_thinking=False)
    for part in ("<tools>", '"Zürich"', "<tool_call>", "<tool_response>", "<think>\n\n</think>",
                 "<b>bold</b> &"):
        assert part in text, part
    hf35, _ = tokenizers["qwen3.5"]
    text = hf35.apply_chat_template(msgs, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert "<function=get_weather>" in text and "<parameter=city>" in text
    nxt, _ = tokenizers["qwen3-next-thinking"]
    assert nxt.apply_chat_template(msgs[:2], tokenize=False, add_generation_prompt=True).endswith(
        "<|im_start|>assistant\n<think>\n")


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_refusals_match_transformers(tokenizers, template):
    hf, ours = tokenizers[template]
    bad = [  # system not first; no user message at all; an unknown role
        [{"role": "user", "content": "a"}, {"role": "system", "content": "late"}],
        [{"role": "assistant", "content": "alone"}],
        [{"role": "user", "content": "a"}, {"role": "narrator", "content": "b"}],
    ]
    for msgs in bad:
        want, refused = _reference(hf, msgs, {"add_generation_prompt": True})
        if refused is None:
            assert ours.render_chat(msgs) == want
        else:
            with pytest.raises(refused):
                ours.render_chat(msgs)


def test_content_parts_and_unicode_qwen35(tokenizers):
    hf, ours = tokenizers["qwen3.5"]
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Describe "},
                                          {"type": "text", "text": "ünïcode ✓"}]},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "again"}]
    assert ours.render_chat(msgs) == hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def test_chat_template_jinja_file_wins_like_transformers(tmp_path):
    folder = _folder(type("F", (), {"mktemp": lambda self, n: tmp_path})(), TEMPLATES["qwen3"])
    (folder / "chat_template.jinja").write_text(TEMPLATES["qwen3.5"], encoding="utf-8")
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    ours = Tokenizer.from_folder(folder)
    msgs = [{"role": "user", "content": "hi"}]
    assert ours.render_chat(msgs) == hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert ours.chat_template == TEMPLATES["qwen3.5"]


def test_strata_tiny_renders_like_transformers():
    hf = transformers.AutoTokenizer.from_pretrained(str(TINY))
    ours = Tokenizer.from_folder(TINY)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"}, {"role": "user", "content": "again"}]
    for agp in (True, False):
        assert ours.render_chat(msgs, add_generation_prompt=agp) == \
            hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=agp)
    assert ours.special_tokens_map["eos_token"] == hf.eos_token


def test_helpers_behave_as_documented():
    t = ("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true, separators=(',', ':')) }}"
         "|{{ strftime_now('%Y') | length }}|{% set ns = namespace(a=1) %}{% set ns.a = 2 %}{{ ns.a }}"
         "|{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}"
         "|{% generation %}kept{% endgeneration %}|{{ dict(a=1) | tojson }}")
    x = {"b": "<é>", "a": [1, 2]}
    got = templates.render(t, [{"role": "user", "content": ""}], x=x)
    parts = got.split("|")
    assert parts[0] == json.dumps(x, ensure_ascii=False)
    assert parts[1] == json.dumps(x, ensure_ascii=False, indent=2)
    assert parts[2] == '{"a":[1,2],"b":"<é>"}'
    assert parts[3:] == ["4", "2", "01", "kept", '{"a": 1}']


@pytest.mark.parametrize("bad,match", [
    ("{{ raise_exception('nope') }}", "refused the conversation: nope"),
    ("{% for %}", "does not compile"),
    ("{{ messages.__class__.__mro__ }}", "failed"),
    ("{{ ''.__class__.__subclasses__() }}", "failed"),
    ("{% set ns = namespace(_x=1) %}", "failed"),
    ("{{ 1 / 0 }}", "failed"),
    ("{{ messages[5].content.strip() }}", "failed"),
    ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recursed|failed"),
])
def test_bad_templates_are_one_line_model_errors(bad, match):
    with pytest.raises(ModelError, match=match) as info:
        templates.render(bad, [{"role": "user", "content": "x"}])
    assert "\n" not in str(info.value)


def test_unsafe_attributes_render_as_nothing():
    # the sandbox hides internals instead of failing: nothing of them reaches the prompt
    for t in ("{{ messages[0].content.upper.__globals__ }}", "{{ messages.__class__ }}",
              "{{ raise_exception.__code__ }}"):
        assert templates.render(t, [{"role": "user", "content": "x"}]) == ""


def test_one_environment_for_every_caller():
    # chat.render_chat and Tokenizer.render_chat both compile in templates.environment()
    from strata import chat as chat_mod
    from strata import tokenizer as tok_mod

    for mod in (chat_mod, tok_mod):
        src = Path(mod.__file__).read_text()
        assert "SandboxedEnvironment" not in src and "templates import render" in src


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("enable_thinking", [None, False])
def test_a_chat_session_feeds_the_engine_what_transformers_renders(tokenizers, template, enable_thinking):
    # a multi-turn ChatSession: before every reply, the engine holds exactly the text
    # apply_chat_template makes of the conversation so far (plus the generation prompt)
    hf, _ = tokenizers[template]
    gen = FakeGenerator()
    gen.chat_template = TEMPLATES[template]
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    chat = ChatSession(gen, system="Be brief.", template_kwargs=kwargs)
    history = [{"role": "system", "content": "Be brief."}]
    for text in ("first question", "second one", "and a third"):
        history.append({"role": "user", "content": text})
        want = hf.apply_chat_template(history, tokenize=False, add_generation_prompt=True, **kwargs)
        list(chat.send(text))
        reply = chat.turns[-1].output
        held = gen.decode(gen._tokens)
        assert held.startswith(want) and held[len(want):].startswith(reply)
        history.append({"role": "assistant", "content": reply})
    assert prompts.IM_END in held


def test_a_template_that_loops_without_writing_is_stopped(monkeypatch):
    # nested loops that write nothing never reach the output cap; the render deadline stops them
    monkeypatch.setattr(templates, "MAX_RENDER_SECONDS", 0.3)
    slow = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}done"
    before = sys.gettrace()
    with pytest.raises(ModelError, match="ran for more than 0.3 s") as info:
        templates.render(slow, [{"role": "user", "content": "x"}])
    assert "\n" not in str(info.value)
    assert sys.gettrace() is before  # the caller's tracing is put back
    # a quick template with loops still renders, and the trace is gone afterwards
    quick = "{% for i in range(1000) %}{% for j in range(10) %}{% endfor %}{% endfor %}done"
    assert templates.render(quick, [{"role": "user", "content": "x"}]) == "done"
    assert sys.gettrace() is before

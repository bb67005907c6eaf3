"""Bad-input corpus, chat templates: the published Qwen templates mutated (truncated, tags
dropped, names misspelt, hostile expressions inserted) and hostile templates written from
scratch. Rendering one either works or is one ModelError line naming the template; the
sandbox never lets a template reach Python internals."""
from __future__ import annotations

from pathlib import Path

import pytest

from bad_input_helpers import rng
from strata import templates
from strata.errors import ModelError

FIXTURES = Path(__file__).parent / "fixtures" / "chat_templates"
SOURCES = {p.stem: p.read_text(encoding="utf-8") for p in sorted(FIXTURES.glob("*.jinja"))}
CHAT = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "<think>\nx\n</think>\n\nyo", "reasoning_content": "r"},
        {"role": "user", "content": "again"}]
HOSTILE = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}", "{{ cycler.__init__.__globals__.os }}",
    "{{ self.__init__.__globals__ }}", "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "{{ namespace.__init__.__globals__ }}", "{% set ns = namespace(_private=1) %}",
    "{{ raise_exception.__globals__ }}", "{{ messages.pop() }}", "{{ messages.append(1) }}",
    "{{ messages[0].update({'role': 'x'}) }}", "{{ dict.__class__ }}", "{{ tojson.__code__ }}",
    "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "{{ 'x' * 100000000 }}",
    "{{ range(10**9) | list }}", "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
    "{{ raise_exception('I refuse') }}", "{{ undefined_function() }}", "{{ messages[99].content }}",
    "{{ 1/0 }}", "{{ strftime_now(5) }}", "{{ messages | tojson(indent='x') }}", "{% include 'x' %}",
    "{% import 'os' as os %}", "{% extends 'base' %}", "{{ (1).__class__.__bases__ }}",
]


def mutations(name: str, text: str):
    r = rng(len(text))
    for k in range(1, 16):
        yield f"cut{k}", text[:len(text) * k // 16]
    for tag in ("{%", "%}", "{{", "}}", "endif", "endfor", "endmacro", "(", ")", "'", "|"):
        spots = [i for i in range(len(text)) if text.startswith(tag, i)]
        for i in r.sample(spots, min(3, len(spots))):
            yield f"drop{tag}@{i}", text[:i] + text[i + len(tag):]
    for word in ("message", "content", "messages", "loop", "ns", "tool_call", "render_content"):
        if word in text:
            yield f"misspell-{word}", text.replace(word, word + "_x", 3)
    for k, bad in enumerate(HOSTILE):
        at = r.choice([0, len(text) // 2, len(text)])
        yield f"insert{k}", text[:at] + bad + text[at:]


CASES = [(n, label, t) for n, src in SOURCES.items() for label, t in mutations(n, src)]


def test_corpus_is_large():
    assert len(CASES) > 150


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_mutated_templates_render_or_fail_in_one_line(name):
    ok = failed = 0
    for tname, label, text in CASES:
        if tname != name:
            continue
        for agp in (True, False):
            try:
                out = templates.render(text, CHAT, add_generation_prompt=agp, source=f"{name}:{label}",
                                       enable_thinking=False)
            except ModelError as exc:
                assert "\n" not in str(exc) and f"{name}:{label}" in str(exc) or "refused" in str(exc), label
                failed += 1
                continue
            assert isinstance(out, str)
            for leak in ("<class", "<function", "<module", "uid=", "__globals__"):
                assert leak not in out, (label, leak)
            ok += 1
    assert ok > 10 and failed > 10, (ok, failed)


@pytest.mark.parametrize("bad", HOSTILE, ids=[h[:30] for h in HOSTILE])
def test_hostile_templates_alone(bad):
    try:
        out = templates.render(bad, CHAT)
    except ModelError as exc:
        assert "\n" not in str(exc)
        return
    for leak in ("<class", "<function", "<module", "uid="):
        assert leak not in out
    assert CHAT[0]["role"] == "system" and len(CHAT) == 4  # the caller's messages are untouched

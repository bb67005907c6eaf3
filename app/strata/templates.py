"""Chat templates: the one Jinja environment strata renders every model's chat template in.

A chat template comes from a model folder (`tokenizer_config.json` or `chat_template.jinja`),
so it is untrusted code: it runs in Jinja's immutable sandbox and sees only plain JSON data.
Within that, it must render exactly as Hugging Face `transformers`' `apply_chat_template`
does, because the model was trained on that text. That means the same environment settings
and helpers as transformers documents for chat templates:

- `trim_blocks` and `lstrip_blocks` on (a block tag eats the newline after it and the
  indentation before it), no trailing newline kept, the `loopcontrols` extension
  (`{% break %}`, `{% continue %}`) and a `{% generation %}` block that renders its body;
- `tojson` that leaves non-ASCII text and HTML characters alone and takes `indent`,
  `separators`, `sort_keys`, `ensure_ascii`; `raise_exception(msg)`; `strftime_now(fmt)`;
  `namespace()` that refuses underscore names; `dict()`;
- the variables: `messages`, `tools`, `documents`, `add_generation_prompt`, the tokenizer's
  special tokens (`bos_token`, `eos_token`, ...) and any template keywords (e.g.
  `enable_thinking=False`), keywords winning over special tokens;
- messages as plain data: keys whose value is None dropped, and an assistant's reasoning
  given under `reasoning_content` (and `thinking`) whichever of `reasoning_content`,
  `thinking` or `reasoning` the caller used.

No textual or rich here.
"""
from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping

from .errors import ModelError

# a chat template is a few KiB; anything this large is not one (and would be slow to compile)
MAX_TEMPLATE_CHARS = 1 << 20
MAX_OUTPUT_CHARS = 64 << 20  # far beyond any context; a prompt that long is a broken template
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
# a real template renders in milliseconds; one that loops for longer (nested loops that write
# nothing never reach the output cap) is stopped, not waited on
MAX_RENDER_SECONDS = 5.0
_TEMPLATE_FILENAME = "<template>"  # what Jinja names code compiled from a string


class TemplateRefused(ModelError):
    """The template itself rejected the conversation (its raise_exception)."""


class _TooSlow(Exception):
    """Raised inside a template frame when rendering ran past MAX_RENDER_SECONDS."""


class _Deadline:
    """A trace function that watches only frames of compiled template code and stops them once
    the render has run too long. Tracing is scoped to the render (the caller's own trace, e.g.
    a debugger or coverage, is put back after) and checks the clock every 256 lines."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.lines = 0

    def __call__(self, frame, event, arg):  # global trace: choose which frames to follow
        if frame.f_code.co_filename == _TEMPLATE_FILENAME:
            return self.line
        return None

    def line(self, frame, event, arg):
        self.lines += 1
        if (self.lines & 255) == 0 and time.monotonic() > self.end:
            raise _TooSlow
        return self.line


def _tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; prompts need the plain JSON text
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise_exception(message: Any) -> None:
    raise TemplateRefused(f"the chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=1)
def environment():
    """The sandboxed environment every chat template is compiled in (built once)."""
    from jinja2 import nodes
    from jinja2.exceptions import SecurityError
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace

    class GenerationBlock(Extension):
        # `{% generation %}...{% endgeneration %}` marks the assistant's text for training
        # masks; rendering a prompt just needs the text inside
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class SafeNamespace(Namespace):
        # attributes set from a template never start with "_" (no reaching into internals)
        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - Namespace's own signature trick
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for key in attrs:
                SafeNamespace.check(key)
            Namespace.__init__(self, attrs)

        def __setitem__(self, key: str, value: Any) -> None:
            SafeNamespace.check(key)
            Namespace.__setitem__(self, key, value)

        @staticmethod
        def check(key: Any) -> None:
            if isinstance(key, str) and key.startswith("_"):
                raise SecurityError(f"a chat template may not set the namespace attribute {key!r}")

    class PlainDict:
        # `dict(...)` in a template builds a plain dict; nothing else of the type is reachable
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return dict.fromkeys(*args, **kwargs)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                       namespace=SafeNamespace, dict=PlainDict())
    return env


@lru_cache(maxsize=16)
def _compiled(template: str):
    return environment().from_string(template)


def plain(value: Any, depth: int = 0) -> Any:
    """`value` rebuilt from JSON types only (what a template may see); anything else becomes a
    placeholder naming its type, so no object with methods reaches the sandbox."""
    if depth > 64:
        raise ModelError("chat messages are nested too deeply to render")
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v, depth + 1) for v in value)
    return f"<{type(value).__name__}>"


def _message(msg: Any) -> dict[str, Any]:
    if not isinstance(msg, Mapping):
        raise ModelError(f"a chat message must be a mapping with role and content, not {type(msg).__name__}")
    out = {k: v for k, v in plain(msg).items() if v is not None}
    reasoning = next((out[k] for k in REASONING_KEYS if out.get(k) is not None), None)
    if reasoning is not None:
        out = {"thinking": reasoning, **out, "reasoning_content": reasoning}
    return out


def render(template: str, messages: list[Mapping[str, Any]], *, add_generation_prompt: bool = False,
           tools: list[Mapping[str, Any]] | None = None, documents: list[Mapping[str, Any]] | None = None,
           special_tokens: Mapping[str, Any] | None = None, source: str = "chat template",
           **template_kwargs: Any) -> str:
    """The prompt text `template` makes of `messages` (what apply_chat_template(tokenize=False)
    returns). ModelError (one line naming `source`) when the template does not compile or fails;
    TemplateRefused when it raises on purpose."""
    from jinja2.exceptions import TemplateError

    if not isinstance(template, str):
        raise ModelError(f"{source}: the chat template is not a string")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise ModelError(f"{source}: the chat template is {len(template)} characters, too large to be one")
    if not messages:
        raise ModelError("cannot render an empty conversation")
    if tools is not None and not all(isinstance(t, Mapping) for t in tools):
        raise ModelError("tools must be JSON schemas (mappings)")
    if documents is not None and not all(isinstance(d, Mapping) for d in documents):
        raise ModelError("documents must be mappings with title and text")
    variables = {**plain(dict(special_tokens or {})), **plain(template_kwargs)}
    try:
        compiled = _compiled(template)
    except TemplateError as exc:
        raise ModelError(f"{source}: the chat template does not compile ({_first_line(exc)})") from None
    previous = sys.gettrace()
    sys.settrace(_Deadline(MAX_RENDER_SECONDS))
    try:
        return _generate(compiled, messages, tools, documents, add_generation_prompt, variables, source)
    except _TooSlow:
        raise ModelError(f"{source}: the chat template ran for more than {MAX_RENDER_SECONDS:g} s "
                         "without finishing; not a prompt") from None
    finally:
        sys.settrace(previous)


def _generate(compiled, messages, tools, documents, add_generation_prompt, variables, source) -> str:
    from jinja2.exceptions import TemplateError

    try:
        chunks = compiled.generate(messages=[_message(m) for m in messages], tools=plain(tools),
                                   documents=plain(documents),
                                   add_generation_prompt=bool(add_generation_prompt), **variables)
        out: list[str] = []
        size = 0
        for chunk in chunks:  # a template that writes without end is stopped, not followed
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise ModelError(f"{source}: the chat template wrote more than {MAX_OUTPUT_CHARS} "
                                 "characters; not a prompt")
            out.append(chunk)
        return "".join(out)
    except ModelError:
        raise
    except TemplateError as exc:
        raise ModelError(f"{source}: the chat template failed ({_first_line(exc)})") from None
    except (RecursionError, MemoryError):
        raise ModelError(f"{source}: the chat template recursed or grew too deep to render") from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError,
            OverflowError) as exc:
        # template bugs meeting this conversation: one line, not a traceback
        raise ModelError(f"{source}: the chat template failed ({exc.__class__.__name__}: "
                         f"{_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else exc.__class__.__name__

"""Synthetic code-assistant conversations from permissively licensed code and package metadata.

Every answer is grounded in the source: a docstring's own words (explain, what it returns),
the function's real signature from `ast` (what it takes), its real source (write a function
from its description, show the code), its module path (where it is), or a distribution's
METADATA summary (what is this package). Conversations have 1-3 user turns with follow-ups
and are rendered with strata.prompts.CHAT_TEMPLATE (ChatML), the model's own template.
"""
from __future__ import annotations

import ast
import random
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "app"))
from strata import prompts  # noqa: E402

SYSTEMS = ("You are a helpful coding assistant.", "You are strata, a local coding assistant.",
           "Answer briefly and precisely.", "You help with Python code.")
THANKS = ("thanks", "Thanks!", "thank you", "great, thanks", "ok thx", "Perfect, thank you.")
WELCOME = ("You're welcome!", "Glad to help.", "You're welcome. Anything else?", "Happy to help!")


def render(messages: list[dict]) -> str:
    """ChatML exactly as CHAT_TEMPLATE renders it, ending after the last assistant turn."""
    out = "".join(f"{prompts.IM_START}{m['role']}\n{m['content']}{prompts.IM_END}\n" for m in messages)
    return out + prompts.ENDOFTEXT


def third_person(sentence: str) -> str:
    """'Return the x.' -> 'returns the x.' (docstrings are usually imperative)."""
    word, _, rest = sentence.partition(" ")
    low = word.lower()
    if not word.isalpha() or low in ("this", "the", "a", "an", "if", "for", "it", "used", "internal"):
        return sentence[:1].lower() + sentence[1:] if word.isalpha() else sentence
    if low.endswith("s") and not low.endswith("ss"):
        verb = low
    elif low.endswith(("sh", "ch", "x", "ss", "o")):
        verb = low + "es"
    elif low.endswith("y") and low[-2:-1] not in "aeiou":
        verb = low[:-1] + "ies"
    else:
        verb = low + "s"
    return f"{verb} {rest}" if rest else verb


def signature(node) -> str:
    a = node.args
    parts = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for arg, d in zip(pos, defaults):
        parts.append(arg.arg + (f"={ast.unparse(d)}" if d is not None else ""))
    if a.vararg:
        parts.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        parts.append("*")
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        parts.append(arg.arg + (f"={ast.unparse(d)}" if d is not None else ""))
    if a.kwarg:
        parts.append("**" + a.kwarg.arg)
    return f"{node.name}({', '.join(parts)})"


def describe_args(node) -> str:
    a = node.args
    pos = [x for x in a.posonlyargs + a.args if x.arg not in ("self", "cls")]
    n_def = len(a.defaults)
    req = [x.arg for x in pos[:len(pos) - n_def]] if n_def else [x.arg for x in pos]
    opt = [(x.arg, d) for x, d in zip(pos[len(pos) - n_def:], a.defaults)] if n_def else []
    opt += [(x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
    req += [x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    bits = []
    if req:
        bits.append(", ".join(f"`{r}`" for r in req) + (" (required)" if opt else ""))
    if opt:
        bits.append("optional " + ", ".join(f"`{n}` (default `{ast.unparse(d)}`)" for n, d in opt))
    if a.vararg:
        bits.append(f"extra positional arguments `*{a.vararg.arg}`")
    if a.kwarg:
        bits.append(f"keyword arguments `**{a.kwarg.arg}`")
    if not bits:
        return f"`{node.name}` takes no arguments" + (" besides `self`." if a.args and a.args[0].arg == "self" else ".")
    return f"`{node.name}` takes " + "; ".join(bits) + "."


def module_name(path: str) -> str:
    head, _, rest = path.partition("/")
    rel = rest if head != "stdlib" else rest
    mod = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return mod


def candidates(text: str):
    """(node, source, summary, doc) for documented functions of 3-40 lines."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith(("_", "test")):
            continue
        doc = ast.get_docstring(node)
        if not doc or len(doc) < 20 or len(doc) > 1200:
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        if not 3 <= node.end_lineno - first <= 40:
            continue
        para = doc.strip().split("\n\n")[0]
        summary = " ".join(para.split())
        if not re.match(r"[A-Z][a-z]", summary) or len(summary) > 300 or ">>>" in summary \
                or not summary.endswith("."):
            continue
        source = textwrap.dedent("".join(lines[first:node.end_lineno]))
        out.append((node, source, summary, doc))
    return out


def ask_explain(name, source, rng, module):
    tick = f"`{name}`" if rng.random() < 0.7 else name
    forms = [f"What does {tick} do?", f"explain {tick}", f"what does the function {tick} in {module} do",
             f"Can you explain {tick} from `{module}`?", f"What is {tick} for?", f"how does {tick} work?"]
    q = rng.choice(forms)
    if rng.random() < 0.4:
        q = rng.choice(("What does this do?", "Explain this function:", "what does this function do?",
                        "Can you explain this code?")) + f"\n\n```python\n{source.rstrip()}\n```"
    return q


def conversation(row: dict, rng: random.Random) -> list[dict] | None:
    path, text = row["path"], row["text"]
    if path.endswith("/METADATA"):
        dist = re.split(r"-\d", path.split("/")[0], maxsplit=1)[0]
        summary = row.get("summary") or ""
        if not summary or len(summary) < 10:
            return None
        q = rng.choice((f"What is {dist}?", f"what's the {dist} package?", f"What does {dist} do?",
                        f"Tell me about the Python package {dist}."))
        s = summary.rstrip(".")
        a = f"{dist} is a Python package: {s[:1].lower() + s[1:]}." if rng.random() < 0.5 \
            else f"`{dist}`: {s}."
        return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    if not path.endswith(".py"):
        return None
    cands = candidates(text)
    if not cands:
        return None
    node, source, summary, doc = rng.choice(cands)
    module = module_name(path)
    name = node.name
    sig = signature(node)
    msgs = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
    shape = rng.choice(("explain", "explain", "write", "args", "returns", "where"))
    if shape == "explain":
        msgs.append({"role": "user", "content": ask_explain(name, source, rng, module)})
        msgs.append({"role": "assistant", "content": f"`{sig}` {third_person(summary)}"})
    elif shape == "write":
        want = summary[:1].lower() + summary[1:]
        q = rng.choice((f"Write a Python function `{sig}` that does this: {summary}",
                        f"write a function {name} that {third_person(summary).rstrip('.')}",
                        f"I need a function called `{name}`. {summary}",
                        f"Can you write `{sig}`? It should {want.rstrip('.')}."))
        msgs.append({"role": "user", "content": q})
        msgs.append({"role": "assistant", "content": f"Here is `{name}`:\n\n```python\n{source.rstrip()}\n```"})
    elif shape == "args":
        msgs.append({"role": "user", "content": rng.choice((f"What arguments does `{name}` take?",
                                                              f"what are the parameters of {name}?",
                                                              f"How do I call `{name}`?"))})
        msgs.append({"role": "assistant", "content": describe_args(node) + f" The signature is `{sig}`."})
    elif shape == "returns":
        sent = next((s for s in re.split(r"(?<=\.)\s+", " ".join(doc.split())) if re.match(r"Returns?\b", s)), None)
        if sent is None:
            return None
        msgs.append({"role": "user", "content": rng.choice((f"What does `{name}` return?",
                                                              f"what's the return value of {name}?"))})
        msgs.append({"role": "assistant", "content": f"`{name}` {third_person(sent)}"})
    else:
        msgs.append({"role": "user", "content": rng.choice((f"Where is `{name}` defined?",
                                                              f"which module has {name}?"))})
        msgs.append({"role": "assistant", "content": f"`{name}` is defined in `{module}` (`{path.split('/', 1)[1]}`)."})
    # follow-up turns
    for _ in range(rng.choice((0, 1, 1, 2))):
        follow = rng.choice(("code", "args", "where", "thanks", "doc"))
        if follow == "code" and shape != "write":
            msgs.append({"role": "user", "content": rng.choice(("Show me the code.", "can I see the source?",
                                                                  "show me its implementation"))})
            msgs.append({"role": "assistant", "content": f"```python\n{source.rstrip()}\n```"})
        elif follow == "args" and shape != "args":
            msgs.append({"role": "user", "content": rng.choice(("What arguments does it take?",
                                                                  "and its parameters?"))})
            msgs.append({"role": "assistant", "content": describe_args(node)})
        elif follow == "where" and shape != "where":
            msgs.append({"role": "user", "content": rng.choice(("Which module is it in?", "where is it defined?"))})
            msgs.append({"role": "assistant", "content": f"In `{module}`."})
        elif follow == "doc":
            msgs.append({"role": "user", "content": rng.choice(("What does its docstring say?",
                                                                  "show me the docstring"))})
            msgs.append({"role": "assistant", "content": doc.strip()})
        elif follow == "thanks":
            msgs.append({"role": "user", "content": rng.choice(THANKS)})
            msgs.append({"role": "assistant", "content": rng.choice(WELCOME)})
            break
    return msgs


def chats_for_file(row: dict, n: int, seed: int) -> list[str]:
    rng = random.Random(f"chat:{seed}:{row['sha256']}")
    out = []
    for _ in range(n):
        msgs = conversation(row, rng)
        if msgs:
            out.append(render(msgs))
    return out

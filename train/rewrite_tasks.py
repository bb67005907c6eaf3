"""Mechanical whole-file rewrite tasks for strata-tiny, checkable by exact match.

Each task is (filename, original, instruction, rewritten) where `rewritten` is produced by a
deterministic rule from `original`, so the model has exactly one right answer. Targets are
chosen with `ast`/`tokenize`; every rewritten file is re-parsed before it is kept.

Kinds: rename (identifier everywhere), literal (one number or short string), delete_function,
add_function (from a small set of described templates), sort_imports, add_docstring,
add_import, delete_import.

Snippets: whole .py files of at most MAX_CHARS characters, and windows of consecutive
top-level statements of larger files (also at most MAX_CHARS), so a whole example fits the
training context.

    python train/rewrite_tasks.py --corpus .devdata/corpus/heldout.jsonl.gz --out tasks.jsonl.gz
"""
from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import io
import json
import keyword
import random
import re
import sys
import tokenize
from pathlib import Path

MAX_CHARS = 1500
MIN_CHARS = 120
WINDOWS_PER_FILE = 2
KINDS = ("rename", "literal", "delete_function", "add_function", "sort_imports",
         "add_docstring", "add_import", "delete_import")

# Sampling weight of each kind when a snippet admits more than per_snippet edits.
KIND_WEIGHT = {"rename": 1.5, "literal": 1.0, "delete_function": 2.0, "add_function": 0.7,
               "sort_imports": 4.0, "add_docstring": 2.0, "add_import": 1.5, "delete_import": 3.0}
WORDS = ("value", "item", "count", "total", "index", "name", "data", "result", "buffer", "node",
         "entry", "record", "key", "path", "size", "limit", "offset", "token", "state", "config",
         "options", "target", "source", "handler", "parser", "reader", "writer", "cache", "queue",
         "stack", "text", "line", "word", "field", "column", "row", "table", "label", "score",
         "weight", "flag", "mode", "level", "depth", "width", "height", "payload", "message",
         "request", "response", "client", "server", "session", "context", "event", "signal",
         "block", "chunk", "frame", "span", "window", "batch", "group", "part", "piece", "slot")
VERBS = ("get", "make", "build", "load", "read", "parse", "check", "find", "compute", "update",
         "format", "render", "collect", "resolve", "apply", "merge", "split", "scan", "emit")
MODULES = ("os", "sys", "re", "json", "math", "time", "random", "itertools", "functools",
           "collections", "pathlib", "typing", "logging", "string", "struct", "shutil",
           "textwrap", "operator", "dataclasses", "contextlib")
BUILTIN_NAMES = set(dir(__builtins__) if isinstance(__builtins__, dict) is False else __builtins__)


def snake(rng: random.Random, parts: int) -> str:
    return "_".join(rng.choice(WORDS) for _ in range(parts))


def new_identifier(rng: random.Random, old: str, taken: set[str]) -> str | None:
    for _ in range(20):
        if old[:1].isupper() and "_" not in old:
            cand = "".join(w.capitalize() for w in (rng.choice(WORDS), rng.choice(WORDS)))
        elif old.isupper():
            cand = snake(rng, rng.randint(1, 2)).upper()
        else:
            cand = rng.choice((snake(rng, 1), snake(rng, 2), f"{rng.choice(VERBS)}_{rng.choice(WORDS)}"))
            if old.startswith("_") and not cand.startswith("_"):
                cand = "_" + cand
        if cand != old and cand not in taken and not keyword.iskeyword(cand) and cand not in BUILTIN_NAMES:
            return cand
    return None


def tokens_of(text: str) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None


def parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False


def line_offsets(text: str) -> list[int]:
    offs = [0]
    for line in text.splitlines(keepends=True):
        offs.append(offs[-1] + len(line))
    return offs


# ---------------------------------------------------------------------------------- edits

def edit_rename(text: str, tree: ast.AST, toks, rng: random.Random):
    names = [t.string for t in toks if t.type == tokenize.NAME]
    taken = set(names)
    defined: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.append((node.name, "function"))
            defined += [(a.arg, "parameter") for a in node.args.args + node.args.kwonlyargs]
        elif isinstance(node, ast.ClassDef):
            defined.append((node.name, "class"))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.append((node.id, "variable"))
    candidates = sorted({(n, k) for n, k in defined
                         if len(n) >= 3 and not (n.startswith("__") and n.endswith("__"))
                         and n not in ("self", "cls") and not keyword.iskeyword(n)})
    rng.shuffle(candidates)
    for old, what in candidates[:6]:
        pattern = re.compile(rf"(?<![\w]){re.escape(old)}(?![\w])")
        # Every textual occurrence must be a NAME token (none inside strings or comments).
        if len(pattern.findall(text)) != names.count(old):
            continue
        new = new_identifier(rng, old, taken)
        if new is None:
            continue
        out = pattern.sub(new, text)
        if not parses(out):
            continue
        instr = rng.choice((f"Rename `{old}` to `{new}`.",
                            f"Rename the {what} `{old}` to `{new}` everywhere in the file.",
                            f"rename {old} -> {new}"))
        return instr, out
    return None


def edit_literal(text: str, tree: ast.AST, toks, rng: random.Random):
    counts: dict[str, int] = {}
    for t in toks:
        if t.type in (tokenize.NUMBER, tokenize.STRING):
            counts[t.string] = counts.get(t.string, 0) + 1
    cands = [t for t in toks if t.type in (tokenize.NUMBER, tokenize.STRING) and counts[t.string] == 1
             and t.start[0] == t.end[0]]
    rng.shuffle(cands)
    offs = line_offsets(text)
    for t in cands[:8]:
        s = t.string
        if t.type == tokenize.NUMBER:
            if not re.fullmatch(r"\d+", s) and not re.fullmatch(r"\d+\.\d+", s):
                continue
            if "." in s:
                val = float(s)
                new = repr(rng.choice((val * 2, val / 2, val + 1, round(val * 10) / 100 or 0.5)))
            else:
                val = int(s)
                if len(s) > 1 and s.startswith("0"):
                    continue
                new = str(rng.choice((val + 1, val * 2, max(val - 1, 0), rng.randint(0, 100), val * 10)))
            what = "number"
        else:
            m = re.fullmatch(r"([rbuRBU]?)(['\"])([A-Za-z0-9_ .:/-]{1,30})\2", s)
            if m is None:
                continue
            word = rng.choice(WORDS)
            body = rng.choice((word, word.upper(), f"{word}_{rng.choice(WORDS)}", f"{word}-{rng.randint(1, 9)}"))
            new = f"{m.group(1)}{m.group(2)}{body}{m.group(2)}"
            what = "string"
        if new == s or counts.get(new):
            continue
        start = offs[t.start[0] - 1] + t.start[1]
        end = offs[t.end[0] - 1] + t.end[1]
        out = text[:start] + new + text[end:]
        if not parses(out):
            continue
        instr = rng.choice((f"Change the {what} {s} to {new}.", f"Replace {s} with {new}.",
                            f"change {s} to {new}"))
        return instr, out
    return None


def functions(tree: ast.AST):
    """(node, parent body) for every function definition."""
    for parent in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(parent, field, None)
            if isinstance(body, list):
                for node in body:
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        yield node, body, parent


def without_lines(lines: list[str], first: int, last: int) -> str:
    """The text with lines[first:last] removed together with the blank lines after them (or,
    at the end of the file, the blank lines before them), so no gap is left behind."""
    after = last
    while after < len(lines) and not lines[after].strip():
        after += 1
    if after < len(lines):
        return "".join(lines[:first] + lines[after:])
    before = first
    while before > 0 and not lines[before - 1].strip():
        before -= 1
    return "".join(lines[:before] + lines[last:after])


def edit_delete_function(text: str, tree: ast.AST, toks, rng: random.Random):
    lines = text.splitlines(keepends=True)
    defs = list(functions(tree))
    counts: dict[str, int] = {}
    for node, _, _ in defs:
        counts[node.name] = counts.get(node.name, 0) + 1
    rng.shuffle(defs)
    for node, body, parent in defs:
        if counts[node.name] != 1 or len(body) < 2:
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        last = node.end_lineno  # exclusive index
        if last - first > 25:
            continue
        if first > 0 and lines[first - 1].lstrip().startswith("#"):
            continue  # an attached comment makes the extent ambiguous
        out = without_lines(lines, first, last)
        if not out.strip() or not parses(out):
            continue
        owner = f" from class `{parent.name}`" if isinstance(parent, ast.ClassDef) else ""
        kind = "method" if owner else "function"
        instr = rng.choice((f"Delete the {kind} `{node.name}`{owner}.", f"Remove `{node.name}`.",
                            f"delete {kind} {node.name}"))
        return instr, out
    return None


ADD_TEMPLATES = (
    ("returns `{a}` doubled", 1, "return {a} * 2"),
    ("returns the square of `{a}`", 1, "return {a} * {a}"),
    ("returns whether `{a}` is None", 1, "return {a} is None"),
    ("returns the sum of `{a}` and `{b}`", 2, "return {a} + {b}"),
    ("returns the difference `{a}` minus `{b}`", 2, "return {a} - {b}"),
    ("returns the length of `{a}`", 1, "return len({a})"),
    ("returns the first element of `{a}`", 1, "return {a}[0]"),
    ("returns the last element of `{a}`", 1, "return {a}[-1]"),
    ("returns a sorted copy of `{a}`", 1, "return sorted({a})"),
    ("returns the larger of `{a}` and `{b}`", 2, "return max({a}, {b})"),
    ("returns the smaller of `{a}` and `{b}`", 2, "return min({a}, {b})"),
    ("returns `{a}` reversed", 1, "return {a}[::-1]"),
    ("returns `{a}` in upper case", 1, "return {a}.upper()"),
    ("returns whether `{a}` is empty", 1, "return not {a}"),
    ("returns the keys of the dict `{a}` as a list", 1, "return list({a}.keys())"),
    ("returns whether `{a}` is greater than `{b}`", 2, "return {a} > {b}"),
    ("returns whether `{a}` equals `{b}`", 2, "return {a} == {b}"),
    ("prints `{a}`", 1, "print({a})"),
    ("returns `{a}` plus one", 1, "return {a} + 1"),
    ("returns `{a}` as a string", 1, "return str({a})"),
    ("returns `{a}` as an integer", 1, "return int({a})"),
    ("returns `{a}` with surrounding whitespace stripped", 1, "return {a}.strip()"),
    ("returns the absolute value of `{a}`", 1, "return abs({a})"),
    ("returns a tuple of `{a}` and `{b}`", 2, "return ({a}, {b})"),
    ("returns `{a}` split on commas", 1, "return {a}.split(\",\")"),
)


def appended_function(text: str, toks, rng: random.Random):
    """A new small function appended at the end of `text`: (signature, what it does, new text),
    or None when the drawn name is taken or the result does not parse. Shared by the snippet
    (v1) and whole-file (v2) add_function edits, so both draw from `rng` in the same order."""
    taken = {t.string for t in toks if t.type == tokenize.NAME}
    desc, arity, body = rng.choice(ADD_TEMPLATES)
    name = f"{rng.choice(VERBS)}_{rng.choice(WORDS)}"
    params = []
    while len(params) < arity:
        p = rng.choice(WORDS)
        if p not in params:
            params.append(p)
    if name in taken:
        return None
    fmt = dict(a=params[0], b=params[-1])
    code = f"def {name}({', '.join(params)}):\n    {body.format(**fmt)}\n"
    out = text.rstrip("\n") + "\n\n\n" + code
    if not parses(out):
        return None
    return f"{name}({', '.join(params)})", desc.format(**fmt), out


def edit_add_function(text: str, tree: ast.AST, toks, rng: random.Random):
    made = appended_function(text, toks, rng)
    if made is None:
        return None
    sig, what, out = made
    instr = rng.choice((f"Add a function `{sig}` that {what}.",
                        f"At the end of the file, add `{sig}`, which {what}."))
    return instr, out


def import_block(tree: ast.Module, lines: list[str]):
    """The first run of consecutive single-line top-level imports: (start, end) line indexes."""
    body = tree.body
    for i, node in enumerate(body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            j = i
            while j + 1 < len(body) and isinstance(body[j + 1], (ast.Import, ast.ImportFrom)) \
                    and body[j + 1].lineno == body[j].end_lineno + 1:
                j += 1
            nodes = body[i:j + 1]
            if any(n.lineno != n.end_lineno or n.col_offset != 0 for n in nodes):
                return None
            return nodes
    return None


def edit_sort_imports(text: str, tree: ast.AST, toks, rng: random.Random):
    lines = text.splitlines(keepends=True)
    nodes = import_block(tree, lines)
    if not nodes or len(nodes) < 3:
        return None
    if any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in nodes):
        return None
    a, b = nodes[0].lineno - 1, nodes[-1].end_lineno
    block = lines[a:b]
    if not all(line.endswith("\n") for line in block):
        return None
    ordered = sorted(block)
    if ordered == block:
        return None
    out = "".join(lines[:a] + ordered + lines[b:])
    if not parses(out):
        return None
    instr = rng.choice(("Sort the import statements alphabetically.", "Sort the imports.",
                        "sort imports"))
    return instr, out


def edit_add_docstring(text: str, tree: ast.AST, toks, rng: random.Random):
    lines = text.splitlines(keepends=True)
    defs = [(n, b, p) for n, b, p in functions(tree)]
    rng.shuffle(defs)
    counts: dict[str, int] = {}
    for node, _, _ in defs:
        counts[node.name] = counts.get(node.name, 0) + 1
    for node, _, _ in defs:
        first = node.body[0]
        if counts[node.name] != 1 or ast.get_docstring(node) is not None:
            continue
        if first.lineno <= node.lineno or first.col_offset <= node.col_offset:
            continue
        header_end = first.lineno - 1  # index of the body's first line
        prev = lines[header_end - 1].rstrip()
        if not prev.endswith(":") or "#" in prev:
            continue
        if first.lineno - 1 >= len(lines) or not lines[first.lineno - 1][:first.col_offset].isspace():
            continue
        indent = lines[first.lineno - 1][:first.col_offset]
        words = [w for w in re.split(r"_+", node.name) if w] or [node.name]
        doc = rng.choice((f"{rng.choice(VERBS).capitalize()} the {' '.join(words).lower()}.",
                          f"Return the {rng.choice(WORDS)} for {' '.join(words).lower()}.",
                          f"Helper for {node.name}."))
        out = "".join(lines[:header_end] + [f'{indent}"""{doc}"""\n'] + lines[header_end:])
        if not parses(out):
            continue
        instr = rng.choice((f'Add the docstring "{doc}" to `{node.name}`.',
                            f'Give `{node.name}` the docstring "{doc}".'))
        return instr, out
    return None


def edit_add_import(text: str, tree: ast.AST, toks, rng: random.Random):
    lines = text.splitlines(keepends=True)
    nodes = import_block(tree, lines)
    if not nodes:
        return None
    if any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in nodes):
        return None
    present = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    present |= {t.string for t in toks if t.type == tokenize.NAME}
    choices = [m for m in MODULES if m not in present]
    if not choices:
        return None
    mod = rng.choice(choices)
    a = nodes[0].lineno - 1
    out = "".join(lines[:a] + [f"import {mod}\n"] + lines[a:])
    if not parses(out):
        return None
    instr = rng.choice((f"Add `import {mod}`.", f"Import the `{mod}` module.", f"add import {mod}"))
    return instr, out


def edit_delete_import(text: str, tree: ast.AST, toks, rng: random.Random):
    lines = text.splitlines(keepends=True)
    cands = [n for n in tree.body if isinstance(n, ast.Import) and len(n.names) == 1
             and n.names[0].asname is None and n.lineno == n.end_lineno and n.col_offset == 0]
    rng.shuffle(cands)
    for n in cands:
        name = n.names[0].name
        if sum(1 for m in cands if m.names[0].name == name) != 1:
            continue
        i = n.lineno - 1
        if lines[i].rstrip("\n") != f"import {name}":
            continue
        out = "".join(lines[:i] + lines[i + 1:])
        if not out.strip() or not parses(out):
            continue
        instr = rng.choice((f"Remove `import {name}`.", f"Delete the import of `{name}`.",
                            f"remove import {name}"))
        return instr, out
    return None


EDITS = {
    "rename": edit_rename,
    "literal": edit_literal,
    "delete_function": edit_delete_function,
    "add_function": edit_add_function,
    "sort_imports": edit_sort_imports,
    "add_docstring": edit_add_docstring,
    "add_import": edit_add_import,
    "delete_import": edit_delete_import,
}


# ---------------------------------------------------------------------------------- snippets

def snippets(path: str, text: str, rng: random.Random, windows: int = WINDOWS_PER_FILE):
    """Whole small files, or windows of consecutive top-level statements of larger ones."""
    if not path.endswith(".py") or "\r" in text or "\t" in text:
        return
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return
    if len(text) <= MAX_CHARS:
        if len(text) >= MIN_CHARS:
            yield text if text.endswith("\n") else text + "\n"
        return
    lines = text.splitlines(keepends=True)
    starts = [min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]) - 1 for n in tree.body]
    if len(starts) < 2:
        return
    bounds = starts[1:] + [len(lines)]
    picks = list(range(len(starts)))
    rng.shuffle(picks)
    made = 0
    for i in picks:
        if made >= windows:
            break
        chunk, j = "", i
        while j < len(starts):
            piece = "".join(lines[starts[j]:bounds[j]])
            if len(chunk) + len(piece) > MAX_CHARS:
                break
            chunk += piece
            j += 1
        chunk = chunk.rstrip("\n") + "\n"
        if len(chunk) >= MIN_CHARS and parses(chunk):
            made += 1
            yield chunk


def tasks_for_file(row: dict, per_snippet: int, seed: int) -> list[dict]:
    """Deterministic in (seed, file content)."""
    rng = random.Random(f"{seed}:{row['sha256']}")
    parts = row["path"].split("/")
    filename = "/".join(parts[-2:]) if len(parts) > 2 else parts[-1]
    out = []
    for snip in snippets(row["path"], row["text"], rng):
        toks = tokens_of(snip)
        if toks is None:
            continue
        tree = ast.parse(snip)
        found = []
        for kind in KINDS:
            result = EDITS[kind](snip, tree, toks, rng)
            if result is not None and result[1] != snip:
                found.append((kind, result))
        # Keep up to per_snippet of the applicable edits, preferring the kinds that apply rarely.
        keyed = sorted(found, key=lambda kr: -rng.random() ** (1.0 / KIND_WEIGHT[kr[0]]))
        for kind, (instr, rewritten) in keyed[:per_snippet]:
            out.append({"kind": kind, "filename": filename, "original": snip,
                        "instruction": instr, "rewritten": rewritten, "sha256": row["sha256"]})
    return out


def iter_corpus(path: Path):
    import lzma

    opener = lzma.open if str(path).endswith(".xz") else gzip.open
    with opener(path, "rt") as f:
        for line in f:
            yield json.loads(line)


def _work(args):
    row, per_snippet, seed = args
    return tasks_for_file(row, per_snippet, seed)


def generate(corpus: Path, per_snippet: int, seed: int, workers: int = 1):
    rows = ((r, per_snippet, seed) for r in iter_corpus(corpus) if r["path"].endswith(".py"))
    if workers <= 1:
        for args in rows:
            yield from _work(args)
        return
    import multiprocessing as mp
    with mp.get_context("fork").Pool(workers) as pool:
        for tasks in pool.imap(_work, rows, chunksize=32):
            yield from tasks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-snippet", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--per-kind", type=int, default=0, help="keep at most this many per kind (0: all)")
    args = ap.parse_args()
    kept: dict[str, int] = {}
    with gzip.open(args.out, "wt") as f:
        for task in generate(args.corpus, args.per_snippet, args.seed, args.workers):
            if args.per_kind and kept.get(task["kind"], 0) >= args.per_kind:
                continue
            kept[task["kind"]] = kept.get(task["kind"], 0) + 1
            f.write(json.dumps(task) + "\n")
    print(json.dumps(kept), file=sys.stderr)


if __name__ == "__main__":
    main()

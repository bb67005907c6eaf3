"""Whole-file edit tasks (strata-tiny v2): a real file, an instruction, the whole rewritten file.

Unlike rewrite_tasks.py (v1: snippets of at most 1500 characters), the unit here is a whole
file of up to MAX_CHARS characters, so copying a long file exactly is what most of the
training tokens teach. Every edit is computed with ast/tokenize, has exactly one right answer,
and the result is re-parsed. Instructions come from phrasing.py (structured spec -> many
phrasings). Kinds:

  add_import, delete_import, sort_imports, rename (function, class, method, variable, parameter
  everywhere), delete_function, add_function, add_docstring, literal, unchanged, multi (2-3 of
  the others in sequence, one instruction)

Deterministic in (seed, file content).

    python train/file_tasks.py --corpus heldout.jsonl.gz --out tasks.jsonl.gz --per-kind 20 \
        --min-chars 2000 --max-chars 10000
"""
from __future__ import annotations

import argparse
import ast
import gzip
import json
import keyword
import random
import re
import sys
import tokenize
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import phrasing  # noqa: E402
from rewrite_tasks import (BUILTIN_NAMES, MODULES, VERBS, WORDS, appended_function, functions, import_block,  # noqa: E402
                           iter_corpus, line_offsets, new_identifier, parses, tokens_of, without_lines)

MAX_CHARS = 24_000
MIN_CHARS = 200
SINGLE_KINDS = ("add_import", "delete_import", "sort_imports", "rename", "delete_function",
                "add_function", "add_docstring", "literal")
KINDS = SINGLE_KINDS + ("unchanged", "multi")
FROM_MODULES = (("typing", "Any"), ("typing", "Optional"), ("pathlib", "Path"),
                ("collections", "defaultdict"), ("dataclasses", "dataclass"),
                ("functools", "lru_cache"), ("itertools", "chain"), ("os.path", "join"),
                ("collections", "OrderedDict"), ("contextlib", "contextmanager"))


# Training only: the share of renames and string-literal edits whose new value is a rare piece
# of the tokenizer's vocabulary (make_rows.rare_vocab). The tokenizer was trained on a corpus
# that included the held-out packages, so tokens such as "NetworkX", "DiGraph" or "multigraph"
# never occur in the training rows; v4 gives them probability ~0 even where the file it copies
# has them, and one such token anywhere in a file makes the whole rewrite wrong.
VOCAB_SHARE = 0.5
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def vocab_identifier(rng: random.Random, old: str, taken: set[str], vocab) -> str | None:
    """A new name for `old` built from a rare vocabulary piece (leading space dropped), alone or
    joined to a common word the way the old name is joined (CamelCase, snake_case), or None."""
    pieces = [v.strip() for v in vocab if _IDENT.fullmatch(v.strip())]
    for _ in range(10 if pieces else 0):
        p = rng.choice(pieces)
        w = rng.choice(WORDS)
        if old[:1].isupper() and "_" not in old:
            cand = rng.choice((p[:1].upper() + p[1:], w.capitalize() + p[:1].upper() + p[1:]))
        else:
            cand = rng.choice((p, f"{w}_{p}", f"{p}_{w}"))
            if old.startswith("_") and not cand.startswith("_"):
                cand = "_" + cand
        if cand != old and cand not in taken and not keyword.iskeyword(cand) and cand not in BUILTIN_NAMES:
            return cand
    return None


def _top_imports(tree: ast.Module):
    return [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
            and n.lineno == n.end_lineno and n.col_offset == 0]


def _stmt(node) -> str:
    if isinstance(node, ast.Import):
        return "import " + ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
    names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
    return f"from {'.' * node.level}{node.module or ''} import {names}"


# -------------------------------------------------------------------------------- edits
# Each returns (spec, new_text) or None. spec["kind"] is the edit kind; the other keys feed
# phrasing.TEMPLATES.

def add_import(text, tree, toks, rng):
    lines = text.splitlines(keepends=True)
    nodes = import_block(tree, lines)
    if not nodes or any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in nodes):
        return None
    names = {t.string for t in toks if t.type == tokenize.NAME}
    if rng.random() < 0.65:
        choices = [m for m in MODULES if m not in names]
        if not choices:
            return None
        mod = rng.choice(choices)
        stmt = f"import {mod}"
    else:
        choices = [(m, n) for m, n in FROM_MODULES if n not in names]
        if not choices:
            return None
        mod, name = rng.choice(choices)
        stmt = f"from {mod} import {name}"
    a = nodes[0].lineno - 1
    out = "".join(lines[:a] + [stmt + "\n"] + lines[a:])
    return ({"kind": "add_import", "stmt": stmt, "mod": mod}, out) if parses(out) else None


# How often a delete_import / delete_function task takes an unused import or a dead private
# function (nothing else refers to it), when the file has one (otherwise any). People mostly delete what is unused; the
# task maker used to pick blindly, and 342 of 351 held-out files' deleted imports were still in
# use, phrased as often as not "remove the unused import X" (v7 recipe).
PREFER_UNUSED = 0.6


def _refs(tree: ast.AST) -> Counter:
    """How often each name is referred to under `tree`: a name, an attribute (`self.name`), or a
    string that is exactly the name (`__all__`, getattr)."""
    seen = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            seen[node.id] += 1
        elif isinstance(node, ast.Attribute):
            seen[node.attr] += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            seen[node.value] += 1
    return seen


def _bound_name(node) -> str:
    """The name an import statement of one alias binds (`import a.b` binds `a`)."""
    alias = node.names[0]
    if alias.asname:
        return alias.asname
    return alias.name.split(".")[0] if isinstance(node, ast.Import) else alias.name


def _unused_first(cands, unused, rng: random.Random):
    """cands (already shuffled) with the unused ones first, PREFER_UNUSED of the time."""
    if rng.random() < PREFER_UNUSED:
        return sorted(cands, key=lambda c: not unused(c))
    return cands


def delete_import(text, tree, toks, rng):
    lines = text.splitlines(keepends=True)
    cands = [n for n in _top_imports(tree) if len(n.names) == 1 and not (
        isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    rng.shuffle(cands)
    refs = _refs(tree)
    for n in _unused_first(cands, lambda c: not refs[_bound_name(c)], rng):
        stmt = _stmt(n)
        i = n.lineno - 1
        if lines[i].rstrip("\n") != stmt or sum(1 for line in lines if line.rstrip("\n") == stmt) != 1:
            continue
        out = "".join(lines[:i] + lines[i + 1:])
        if out.strip() and parses(out):
            mod = n.names[0].name if isinstance(n, ast.Import) else n.names[0].name
            return {"kind": "delete_import", "stmt": stmt, "mod": mod,
                    "unused": not refs[_bound_name(n)]}, out
    return None


def sort_imports(text, tree, toks, rng):
    lines = text.splitlines(keepends=True)
    nodes = import_block(tree, lines)
    if not nodes or len(nodes) < 3 or any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                                          for n in nodes):
        return None
    a, b = nodes[0].lineno - 1, nodes[-1].end_lineno
    block = lines[a:b]
    ordered = sorted(block)
    if ordered == block or not all(line.endswith("\n") for line in block):
        return None
    out = "".join(lines[:a] + ordered + lines[b:])
    return ({"kind": "sort_imports"}, out) if parses(out) else None


# v7: a rename is done everywhere the name occurs as a whole word, in `__all__` and getattr-style
# strings and in comment and docstring mentions too (what a person means by renaming
# `parse_header`; v6's rewrites left such mentions and strata's edit guard flags that), unless
# the name is a plain lowercase word ("path", "result"), whose mentions in prose may be the word
# itself: such names are renamed only where no string or comment has them. The held-out tasks
# use the same rule, so rename tasks from v7 on differ from v6's.
_PLAIN_WORD = re.compile(r"[a-z]+")


# v9: nor is a name that the file also reads as an attribute of another object (`line.style`
# where `style` is a parameter here; `options.max_width`): whether "rename style everywhere"
# reaches another class's attribute is ambiguous, and renaming it changes what the code reads.
# v8's renames did; strata's edit guard does not ask it, and 2 of v8's 3 wrong files written
# by `strata edit --yes` were the model leaving such an attribute alone. `self.x` and `cls.x`
# are this file's own and do not count.
def _foreign_attributes(tree) -> set[str]:
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))}


def rename(text, tree, toks, rng, vocab=()):
    names = [t.string for t in toks if t.type == tokenize.NAME]
    taken = set(names) | set(re.findall(r"[A-Za-z_]\w*", text))  # a new name is no word of the file, prose included
    defined = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.append((node.name, "function"))
            defined += [(a.arg, "parameter") for a in node.args.args + node.args.kwonlyargs]
        elif isinstance(node, ast.ClassDef):
            defined.append((node.name, "class"))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.append((node.id, "variable"))
    foreign = _foreign_attributes(tree)
    cands = sorted({(n, k) for n, k in defined if len(n) >= 3 and n not in ("self", "cls")
                    and not (n.startswith("__") and n.endswith("__")) and n not in foreign})
    # functions and classes are what people rename most; weight them up
    cands.sort(key=lambda nk: -rng.random() ** (1 / (3.0 if nk[1] in ("function", "class") else 1.0)))
    for old, what in cands[:8]:
        pattern = re.compile(rf"(?<![\w]){re.escape(old)}(?![\w])")
        if len(pattern.findall(text)) != names.count(old) and _PLAIN_WORD.fullmatch(old):
            continue  # a plain word in a string or comment may mean the word: "everywhere" would be ambiguous
        new = vocab_identifier(rng, old, taken, vocab) if vocab and rng.random() < VOCAB_SHARE else None
        new = new or new_identifier(rng, old, taken)
        if new is None:
            continue
        out = pattern.sub(new, text)
        if parses(out):
            return {"kind": "rename", "old": old, "new": new, "what": what}, out
    return None


def delete_function(text, tree, toks, rng):
    lines = text.splitlines(keepends=True)
    defs = list(functions(tree))
    counts = {}
    for node, _, _ in defs:
        counts[node.name] = counts.get(node.name, 0) + 1
    rng.shuffle(defs)
    refs = _refs(tree)
    # dead: private (a public function may be the module's API), not a dunder (called implicitly),
    # and referred to nowhere apart from its own body (a recursive call is no use)
    unused = {id(node): node.name.startswith("_") and not node.name.endswith("__")
              and refs[node.name] == _refs(node)[node.name] for node, _, _ in defs}
    for node, body, parent in _unused_first(defs, lambda d: unused[id(d[0])], rng):
        if counts[node.name] != 1 or len(body) < 2:
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        last = node.end_lineno
        if last - first > 80 or (first > 0 and lines[first - 1].lstrip().startswith("#")):
            continue
        out = without_lines(lines, first, last)
        if not out.strip() or not parses(out):
            continue
        owner = parent.name if isinstance(parent, ast.ClassDef) else ""
        return {"kind": "delete_function", "name": node.name, "what": "method" if owner else "function",
                "owner": owner, "unused": unused[id(node)]}, out
    return None


def add_function(text, tree, toks, rng):
    made = appended_function(text, toks, rng)
    if made is None:
        return None
    sig, what, out = made
    return {"kind": "add_function", "sig": sig, "d": what.replace("`", "")}, out


def add_docstring(text, tree, toks, rng):
    lines = text.splitlines(keepends=True)
    defs = list(functions(tree)) + [(n, None, None) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    counts = {}
    for node, _, _ in defs:
        counts[node.name] = counts.get(node.name, 0) + 1
    rng.shuffle(defs)
    for node, _, _ in defs:
        first = node.body[0]
        if counts[node.name] != 1 or ast.get_docstring(node) is not None:
            continue
        if first.lineno <= node.lineno or first.col_offset <= node.col_offset:
            continue
        header_end = first.lineno - 1
        prev = lines[header_end - 1].rstrip()
        if not prev.endswith(":") or "#" in prev or not lines[header_end][:first.col_offset].isspace():
            continue
        indent = lines[header_end][:first.col_offset]
        words = " ".join(w for w in re.split(r"_+|(?<=[a-z])(?=[A-Z])", node.name) if w).lower() or node.name
        doc = rng.choice((f"{rng.choice(VERBS).capitalize()} the {words}.",
                          f"Return the {rng.choice(WORDS)} for {words}.", f"Helper for {node.name}.",
                          f"{words.capitalize()}.", f"Handle {words} for the {rng.choice(WORDS)}."))
        out = "".join(lines[:header_end] + [f'{indent}"""{doc}"""\n'] + lines[header_end:])
        if parses(out):
            return {"kind": "add_docstring", "name": node.name, "d": doc}, out
    return None


def literal(text, tree, toks, rng, vocab=()):
    counts = {}
    for t in toks:
        if t.type in (tokenize.NUMBER, tokenize.STRING):
            counts[t.string] = counts.get(t.string, 0) + 1
    cands = [t for t in toks if t.type in (tokenize.NUMBER, tokenize.STRING) and counts[t.string] == 1
             and t.start[0] == t.end[0]]
    rng.shuffle(cands)
    offs = line_offsets(text)
    for t in cands[:10]:
        s = t.string
        if t.type == tokenize.NUMBER:
            if re.fullmatch(r"[1-9]\d*|0", s):
                val = int(s)
                new = str(rng.choice((val + 1, val * 2, max(val - 1, 0), rng.randint(0, 100), val * 10)))
            elif re.fullmatch(r"\d+\.\d+", s):
                val = float(s)
                new = repr(rng.choice((val * 2, val / 2, val + 1, 0.5)))
            else:
                continue
            what = "number"
        else:
            m = re.fullmatch(r"([rbuRBU]?)(['\"])([A-Za-z0-9_ .:/-]{1,30})\2", s)
            if m is None:
                continue
            texts = [v for v in vocab if v.isprintable() and not set(v) & set("'\"\\")] if vocab else []
            if texts and rng.random() < VOCAB_SHARE:
                body = rng.choice(texts)
            else:
                word = rng.choice(WORDS)
                body = rng.choice((word, word.upper(), f"{word}_{rng.choice(WORDS)}", f"{word}-{rng.randint(1, 9)}"))
            new = f"{m.group(1)}{m.group(2)}{body}{m.group(2)}"
            what = "string"
        if new == s or counts.get(new):
            continue
        start, end = offs[t.start[0] - 1] + t.start[1], offs[t.end[0] - 1] + t.end[1]
        out = text[:start] + new + text[end:]
        if parses(out):
            return {"kind": "literal", "old": s, "new": new, "what": what}, out
    return None


EDITS = {"add_import": add_import, "delete_import": delete_import, "sort_imports": sort_imports,
         "rename": rename, "delete_function": delete_function, "add_function": add_function,
         "add_docstring": add_docstring, "literal": literal}


# Training only (make_rows.py --p-scramble): v5's misses with the pruned tokenizer are mostly in
# copied text where the model's guess of what code usually says beats the file in front of it
# (held-out "bipartite matching" copied as "bipartite similar", " NetworkX" as " nx"). A
# scrambled file has a share of its names replaced everywhere (code, strings, comments) by
# names from other files, so the rewrite can only be right by copying.
SCRAMBLE_SHARE = 0.3


def scramble_names(text: str, rng: random.Random, pool, share: float = SCRAMBLE_SHARE) -> str | None:
    """`text` with about `share` of its distinct names (3+ characters, not keywords, soft
    keywords, dunders, builtins, self or cls) replaced consistently, as whole words, by names from `pool` (alone, or
    two joined like the old name: CamelCase or snake_case); None when nothing was replaced or
    the result does not parse."""
    toks = tokens_of(text)
    if toks is None:
        return None
    names = sorted({t.string for t in toks if t.type == tokenize.NAME and len(t.string) >= 3
                    and not keyword.iskeyword(t.string) and not keyword.issoftkeyword(t.string)
                    and not (t.string.startswith("__") and t.string.endswith("__"))
                    and t.string not in BUILTIN_NAMES and t.string not in ("self", "cls")})
    pool = [p for p in pool if _IDENT.fullmatch(p) and not keyword.iskeyword(p)]
    taken, mapping = set(_IDENT.findall(text)), {}
    for old in names:
        if not pool or rng.random() >= share:
            continue
        for _ in range(10):
            a, b = rng.choice(pool), rng.choice(pool)
            if old[:1].isupper() and "_" not in old:
                cand = rng.choice((a[:1].upper() + a[1:], a[:1].upper() + a[1:] + b[:1].upper() + b[1:]))
            else:
                cand = rng.choice((a, f"{a}_{b}"))
            if old.startswith("_") != cand.startswith("_"):
                cand = "_" + cand.lstrip("_") if old.startswith("_") else cand.lstrip("_")
            if len(cand) >= 3 and cand not in taken and not keyword.iskeyword(cand):
                mapping[old] = cand
                taken.add(cand)
                break
    if not mapping:
        return None
    pattern = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, sorted(mapping, key=len, reverse=True))) + r")(?![\w])")
    out = pattern.sub(lambda m: mapping[m.group(1)], text)
    return out if parses(out) else None


def apply(kind, text, rng, vocab=()):
    toks = tokens_of(text)
    if toks is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    result = EDITS[kind](text, tree, toks, rng, vocab) if vocab and kind in ("rename", "literal") \
        else EDITS[kind](text, tree, toks, rng)
    if result is None or result[1] == text:
        return None
    return result


def make_task(text: str, kind: str, rng: random.Random, vocab=()):
    """(instruction, rewritten, specs) for one kind on a whole file, or None. `vocab`: rare
    vocabulary pieces (see VOCAB_SHARE) that renames and string literals may take as new values."""
    if kind == "unchanged":
        spec = {"kind": "unchanged"}
        return phrasing.phrase([spec], rng), text, [spec]
    if kind == "multi":
        steps = rng.sample(SINGLE_KINDS, rng.choice((2, 2, 3)))
        specs, cur, states = [], text, {text}
        for k in steps:
            r = apply(k, cur, rng, vocab)
            if r is None or r[1] in states:  # a step that undoes an earlier one (delete what it added)
                continue
            specs.append(r[0])
            cur = r[1]
            states.add(cur)
        if len(specs) < 2:
            return None
        return phrasing.phrase(specs, rng), cur, specs
    r = apply(kind, text, rng, vocab)
    if r is None:
        return None
    return phrasing.phrase([r[0]], rng), r[1], [r[0]]


# Training mix of kinds (before applicability); unchanged and multi get real weight because
# "change nothing" must be perfect and people chain requests.
KIND_WEIGHT = {"add_import": 1.0, "delete_import": 1.0, "sort_imports": 0.8, "rename": 1.6,
               "delete_function": 1.2, "add_function": 0.9, "add_docstring": 1.0, "literal": 1.2,
               "unchanged": 0.9, "multi": 1.6}


def filename_of(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[-2:]) if len(parts) > 2 else parts[-1]


def usable(row: dict, min_chars: int, max_chars: int) -> bool:
    text = row["text"]
    return (row["path"].endswith(".py") and min_chars <= len(text) <= max_chars
            and "\r" not in text and "\t" not in text and text.endswith("\n"))


def tasks_for_file(row: dict, n: int, seed: int, kinds=KINDS, vocab=()) -> list[dict]:
    """Up to n tasks of different kinds on one whole file (deterministic in seed and file).
    `vocab` (training only; the held-out tasks never pass it): rare vocabulary pieces for
    renames and string literals, see VOCAB_SHARE."""
    rng = random.Random(f"{seed}:{row['sha256']}")
    if not parses(row["text"]):
        return []
    order = sorted(kinds, key=lambda k: -rng.random() ** (1 / KIND_WEIGHT[k]))
    out = []
    for kind in order:
        if len(out) >= n:
            break
        t = make_task(row["text"], kind, rng, vocab)
        if t is None:
            continue
        instr, rewritten, specs = t
        out.append({"kind": kind, "filename": filename_of(row["path"]), "path": row["path"],
                    "original": row["text"], "instruction": instr, "rewritten": rewritten,
                    "specs": specs, "sha256": row["sha256"]})
    return out


def heldout_tasks(corpus: Path, per_kind: int, seed: int, min_chars: int, max_chars: int):
    """Evaluation tasks: per kind, per_kind files (each file used once per kind), taken round
    robin over the held-out packages so that no one package dominates."""
    groups = {}
    for r in sorted((r for r in iter_corpus(corpus) if usable(r, min_chars, max_chars)),
                    key=lambda r: r["sha256"]):
        head, _, rest = r["path"].partition("/")
        groups.setdefault(head if head != "stdlib" else "stdlib/" + rest.split("/")[0], []).append(r)
    rows = []
    for i in range(max((len(g) for g in groups.values()), default=0)):
        rows += [g[i] for _, g in sorted(groups.items()) if i < len(g)]
    tasks = []
    for k_i, kind in enumerate(KINDS):
        got = 0
        start = (k_i * 37) % max(len(rows), 1)
        for j in range(len(rows)):
            if got >= per_kind:
                break
            row = rows[(start + j) % len(rows)]
            made = tasks_for_file(row, 1, seed + k_i, kinds=(kind,))
            if made:
                tasks += made
                got += 1
    return tasks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-kind", type=int, default=20)
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--min-chars", type=int, default=2000)
    ap.add_argument("--max-chars", type=int, default=10000)
    args = ap.parse_args()
    tasks = heldout_tasks(args.corpus, args.per_kind, args.seed, args.min_chars, args.max_chars)
    with gzip.open(args.out, "wt") as f:
        for t in tasks:
            f.write(json.dumps(t) + "\n")
    counts = {}
    for t in tasks:
        counts[t["kind"]] = counts.get(t["kind"], 0) + 1
    print(json.dumps(counts), file=sys.stderr)


if __name__ == "__main__":
    main()

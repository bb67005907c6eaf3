"""Edit instructions the way people type them, generated from an edit's structured spec.

Each edit kind has several sentence shapes; on top of those come the habits of people typing
into a terminal: a polite opener or none, identifiers with or without backticks, all lowercase
or capitalised, a trailing period or "thanks" or nothing. The combinations run into the
thousands per kind, so the model learns what the instruction says, not a handful of strings.
Identifiers and literals are never re-cased: lowercasing applies to the template words only.
"""
from __future__ import annotations

import random

OPENERS = ("", "", "", "", "Please ", "please ", "Could you ", "Can you ", "I'd like you to ",
           "pls ", "Kindly ", "Go ahead and ", "I need you to ", "Hey, ")
CLOSERS = ("", "", ".", ".", ".", " please", " please.", ", thanks", ", thanks!", " thx", "!")

# {x} are code items (backticked or not), {d} are free text (descriptions, docstrings).
TEMPLATES = {
    "add_import": (
        "add {stmt}", "add {stmt} to the imports", "add an import of {mod}", "import {mod}",
        "the file needs {stmt}", "insert {stmt} with the other imports", "add the import {stmt}",
        "add a line {stmt}", "also import {mod}", "we need {mod}, add {stmt}",
    ),
    "delete_import": (
        "remove {stmt}", "delete {stmt}", "drop the import of {mod}", "delete the {mod} import",
        "get rid of {stmt}", "remove the unused import {mod}", "{mod} is not used, remove {stmt}",
        "take out {stmt}", "remove the line {stmt}",
    ),
    "sort_imports": (
        "sort the imports", "sort imports", "sort the import lines alphabetically",
        "put the imports in alphabetical order", "order the imports alphabetically",
        "alphabetize the imports", "sort the import block", "the imports should be sorted",
    ),
    "rename": (
        "rename {old} to {new}", "rename the {what} {old} to {new}", "{old} -> {new}",
        "change the name of {old} to {new}", "rename {old} to {new} everywhere",
        "call the {what} {new} instead of {old}", "replace every use of {old} with {new}",
        "rename {what} {old} as {new}", "{old} should be called {new}",
        "rename {old} to {new} throughout the file",
    ),
    "delete_function": (
        "delete {name}", "remove the {what} {name}", "delete the {what} {name}{owner}",
        "get rid of {name}", "{name} is dead code, remove it", "drop the {what} {name}",
        "remove {name}{owner}", "delete {what} {name}",
    ),
    "add_function": (
        "add a function {sig} that {d}", "at the end of the file, add {sig}, which {d}",
        "append a function {sig} that {d}", "write {sig} at the bottom: it {d}",
        "add {sig} which {d}", "add a helper {sig} that {d}", "new function {sig}: {d}",
    ),
    "add_docstring": (
        "add the docstring \"{d}\" to {name}", "give {name} the docstring \"{d}\"",
        "document {name} with \"{d}\"", "{name} needs a docstring: \"{d}\"",
        "add a docstring to {name} saying \"{d}\"", "put \"{d}\" as the docstring of {name}",
    ),
    "literal": (
        "change {old} to {new}", "replace {old} with {new}", "change the {what} {old} to {new}",
        "use {new} instead of {old}", "make it {new} instead of {old}", "{old} -> {new}",
        "update the {what} {old} to {new}", "set {new} where it says {old}",
    ),
    "unchanged": (
        "leave the file exactly as it is", "don't change anything", "no changes",
        "keep the file as is", "return the file unchanged", "make no edits",
        "this file is fine, leave it alone", "change nothing", "output the file without changes",
        "do not modify the file", "leave it unchanged", "nothing to change here",
    ),
}
# Templates that say the thing is unused: only for an edit whose spec has "unused" (file_tasks
# checks that nothing else in the file refers to it); before the v7 recipe they were picked for
# imports the file still used.
SAYS_UNUSED = frozenset({"remove the unused import {mod}", "{mod} is not used, remove {stmt}",
                         "{name} is dead code, remove it"})
JOINERS = (" and ", ", then ", "; ", ". then ", ", and also ", ", after that ", ". also ", " + ")


def _code(item: str, rng: random.Random, tick: bool) -> str:
    return f"`{item}`" if tick else item


VERBS = {"add", "insert", "remove", "delete", "drop", "get", "take", "sort", "put", "order",
         "alphabetize", "rename", "change", "call", "replace", "write", "append", "give", "document",
         "use", "make", "set", "update", "leave", "keep", "return", "output", "do", "also", "import"}


def is_request(clause: str) -> bool:
    """Whether a clause is an imperative ("rename x to y") that takes "please"/"could you" in
    front, rather than a statement ("x -> y", "the file needs ...", "no changes")."""
    return clause.split(" ", 1)[0].lower() in VERBS


def phrase_one(spec: dict, rng: random.Random, tick: bool | None = None) -> str:
    """One clause (no opener or closer) for one edit."""
    if tick is None:
        tick = rng.random() < 0.55
    lower = rng.random() < 0.35
    templates = TEMPLATES[spec["kind"]]
    if not spec.get("unused"):
        templates = [t for t in templates if t not in SAYS_UNUSED]
    if spec["kind"] == "add_import" and spec["stmt"] != f"import {spec['mod']}":
        # "import typing" for `from typing import Any` names no Any: only the statement says it
        # (v8; before, v7's held-out tasks had such instructions no model can get right)
        templates = [t for t in templates if "{stmt}" in t]
    template = rng.choice(templates)
    fields = {}
    for key, value in spec.items():
        if key in ("kind", "unused"):
            continue
        if key in ("d", "what", "owner"):
            fields[key] = value
        else:
            fields[key] = _code(str(value), rng, tick)
    if "owner" in spec and spec["owner"]:
        fields["owner"] = f" from class {_code(spec['owner'], rng, tick)}" if rng.random() < 0.7 else ""
    else:
        fields["owner"] = ""
    if lower:
        template = template.lower()
    return template.format(**fields)


def finish(clause: str, rng: random.Random) -> str:
    opener = rng.choice(OPENERS) if is_request(clause) else ""
    text = opener + clause
    first = clause.split(" ", 1)[0].lower()
    if not opener and (is_request(clause) or first in ("the", "we", "this", "no", "nothing", "new")) \
            and rng.random() < 0.6:
        text = text[:1].upper() + text[1:]
    closer = rng.choice(CLOSERS)
    if closer.startswith(".") and text.endswith((".", "!", "?", "\"")):
        closer = ""
    if opener.startswith(("Could", "Can")) and closer in (".", " please."):
        closer = "?"
    return text + closer


def phrase(specs: list[dict], rng: random.Random) -> str:
    """The whole instruction for one edit or a sequence of edits (applied in order)."""
    tick = rng.random() < 0.55
    clauses = [phrase_one(s, rng, tick) for s in specs]
    if len(clauses) == 1:
        return finish(clauses[0], rng)
    if rng.random() < 0.25:
        return " ".join(f"{i + 1}) {c}" for i, c in enumerate(clauses))
    joined = clauses[0]
    for c in clauses[1:]:
        joined += rng.choice(JOINERS) + c
    return finish(joined, rng)

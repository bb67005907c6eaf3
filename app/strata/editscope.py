"""What an instruction asks of a rewrite, and whether the rewrite stayed within it.

`strata edit` asks a model for a whole new file; a small model can do what was asked and change
something else on the way (its own idea of a function beats the file), and the result still
parses. For instructions whose whole effect can be read off the text (a rename, an import
change, deleting named definitions, adding a docstring, "change nothing"), these checks find
the lines a rewrite changed that the instruction does not explain, and renames left half done.
An instruction that asks for anything else gets no check (never a false alarm from guessing):
the words around the request must all be ones such requests are made of.
"""

from __future__ import annotations

import ast
import collections
import difflib
import io
import re
import tokenize
import warnings

# how many line numbers a "still uses the old name" warning lists
MAX_NAMED_LINES = 5

# the ways people ask for a rename ("rename `a` to `b`", "a -> b", "change the name of the class
# a to b", "call it b instead of a", "a should be called b", "replace every use of a with b");
# names may carry backticks or quotes. Only whole identifiers count: "rename the file" is no rename.
_ID = r"[`'\"]?([A-Za-z_][A-Za-z0-9_]*)[`'\"]?"
_KIND = r"(?:(?:the\s+)?(?:function|class|method|variable|parameter|argument|constant|attribute|name)\s+)?"
# the bare arrow form ("a -> b") takes names bare or in backticks only: '"a" -> "b"' asks to change
# a string literal (_LITERALS), even where the string is also a name in the file
_IDA = r"`?([A-Za-z_][A-Za-z0-9_]*)`?"
_RENAMES = [re.compile(p, re.IGNORECASE) for p in (
    rf"\brename\s+{_KIND}{_ID}\s+(?:to|as|into)\s+{_ID}",
    rf"\bchange\s+the\s+name\s+of\s+{_KIND}{_ID}\s+to\s+{_ID}",
    rf"(?<![\w`'\"]){_IDA}\s*(?:->|=>|→)\s*{_IDA}(?![\w'\"])",
    rf"(?<![\w`'\"]){_ID}\s+should\s+be\s+(?:called|named)\s+{_ID}",
    rf"\breplace\s+(?:every|each|all)\s+uses?\s+of\s+{_ID}\s+with\s+{_ID}",
)]
_RENAMES_NEW_FIRST = re.compile(rf"\bcall\s+{_KIND}(?:it\s+)?{_ID}\s+instead\s+of\s+{_ID}", re.IGNORECASE)
# what may surround the renames in an instruction that asks for nothing else ("please rename a
# to b everywhere, thanks")
_RENAME_FILLER = re.compile(
    r"\b(?:please|pls|thanks|thank\s+you|thx|could\s+you|can\s+you|would\s+you|kindly|and|then|also|"
    r"everywhere|throughout(?:\s+the\s+(?:file|module|code))?|in\s+the\s+(?:file|module|code)|"
    r"all\s+(?:uses|occurrences|references)|the\s+(?:file|module))\b|\d\)|[\s.,;:!?()]",
    re.IGNORECASE)
# the ways people ask to change one literal ("change 10 to 20", "replace 'a' with 'b'", "10 -> 20",
# "use 20 instead of 10", "set 20 where it says 10"): numbers and quoted strings, maybe in backticks
_LIT = r"`?(-?\d+(?:\.\d+)?|\"[^\"\n]*\"|'[^'\n]*')`?"
_LIT_KIND = r"(?:the\s+(?:number|string|value|constant|literal|default)\s+)?"
_LITERALS = [re.compile(p, re.IGNORECASE) for p in (
    rf"\b(?:change|update|replace|set)\s+{_LIT_KIND}{_LIT}\s+(?:to|with|into|by)\s+{_LIT}",
    rf"(?<![\w`'\"]){_LIT}\s*(?:->|=>|→)\s*{_LIT}",
)]
_LITERALS_NEW_FIRST = re.compile(
    rf"\b(?:use|make\s+it|set)\s+{_LIT}\s+(?:instead\s+of|where\s+it\s+says)\s+{_LIT}", re.IGNORECASE)
# a request to add a new definition and nothing else ("add a function area(r) that returns ...",
# "append a helper `clamp(x)`", "new function f(a): ..."): its description is free text, so any
# word of another edit, or "to <definition>" (adding to an existing one changes it), turns the check off
_ADD_DEF = re.compile(
    r"^\W*(?:(?:please|pls|could\s+you|can\s+you|would\s+you)\s+)?(?:at\s+the\s+end\s+of\s+the\s+file,?\s+)?"
    r"(?:add|append|write|create|define|implement|new)\b.*?"
    r"(?:\b(?:function|method|class|helper)\s+`?[A-Za-z_]\w*|`?\b[A-Za-z_]\w*\([^()]*\)`?)",
    re.IGNORECASE | re.DOTALL)
_ADD_DEF_NOT = re.compile(
    r"\b(?:delete|remove|drop|rename|replace|change|fix|update|modify|sort|import|imports|docstrings?|"
    r"instead|refactor|move|rewrite|convert|hints?|annotations?|types?|parameters?|arguments?|"
    r"decorators?|comments?|logging|to\s+(?:the\s+)?(?:function|method|class))\b|->|=>|→|;",
    re.IGNORECASE)


def _asked_pairs(instruction: str | None, old_first, new_first: re.Pattern) -> list[tuple[str, str]]:
    """The distinct (old, new) pairs these patterns find, in the order the instruction names them;
    `new_first` matches name the new one first ("call it b instead of a")."""
    said = instruction or ""
    found = [(m.start(), m.group(1), m.group(2)) for p in old_first for m in p.finditer(said)]
    found += [(m.start(), m.group(2), m.group(1)) for m in new_first.finditer(said)]
    out: list[tuple[str, str]] = []
    for _, old, new in sorted(found):
        if old != new and (old, new) not in out:
            out.append((old, new))
    return out


def asked_literals(instruction: str | None) -> list[tuple[str, str]]:
    """The (old, new) literal pairs an instruction asks to change, in the order it names them."""
    return _asked_pairs(instruction, _LITERALS, _LITERALS_NEW_FIRST)


def _only(instruction: str, patterns) -> bool:
    """Whether the instruction is these patterns' matches and filler words, nothing else."""
    spans = [m.span() for p in patterns for m in p.finditer(instruction)]
    if not spans:
        return False
    keep = list(instruction)
    for a, b in spans:
        keep[a:b] = [" "] * (b - a)
    return _RENAME_FILLER.sub("", "".join(keep)) == ""


def _literal_mask(literals) -> re.Pattern:
    """A pattern for every written form of these literals: numbers as whole numbers, strings in
    either quotes."""
    forms = set()
    for lit in literals:
        if lit[0] in "'\"":
            forms.update({f"'{lit[1:-1]}'", f'"{lit[1:-1]}"'})
        else:
            forms.add(lit)
    alts = "|".join(re.escape(f) if f[0] in "'\"" else rf"(?<![\w.]){re.escape(f)}(?![\w.])"
                    for f in sorted(forms, key=len, reverse=True))
    return re.compile(alts)


# an import statement as people type it in an instruction, and the words import requests are made of
_IMPORT_STMT = re.compile(r"\b(?:from\s+[A-Za-z_][\w.]*\s+)?import\s+(?!of\b)[A-Za-z_][\w.]*"
                          r"(?:\s+as\s+\w+)?(?:\s*,\s*[A-Za-z_][\w.]*(?:\s+as\s+\w+)?)*")
_IMPORT_WORDS = re.compile(
    r"\b(?:add|insert|include|also|imports?|importing|of|the|an?|to|with|other|needs?|we|file|module|"
    r"lines?|remove|delete|drop|get|rid|take|out|unused|is|isn't|not|used|sort|sorted|put|in|"
    r"alphabetical|alphabetically|order|alphabeti[sz]e|block|should|be|statements?|top|at|please|pls|"
    r"thanks|thank|you|thx|and|then|could|can|would|kindly)\b|\d\)|[.,;:!?()]", re.IGNORECASE)
# how many line numbers an "also changes" warning lists
MAX_NAMED_CHANGES = 5


# the words around a request to delete definitions, add a docstring, or change nothing
_POLITE = r"please|pls|thanks|thank|you|thx|could|can|would|kindly"
_DELETE_VERB = re.compile(r"\b(?:delete|remove|drop|get\s+rid\s+of|take\s+out|strip)\b", re.IGNORECASE)
_DELETE_WORDS = re.compile(
    rf"\b(?:delete|remove|drop|get|rid|of|take|out|strip|the|a|an|function|functions|method|methods|class|"
    rf"classes|def|from|in|it|them|is|are|dead|code|unused|not|used|no|longer|needed|and|both|{_POLITE})\b"
    rf"|[.,;:!?()`'\"]", re.IGNORECASE)
_DOCSTRING = re.compile(r"\bdocstrings?\b|\bdocument\b", re.IGNORECASE)
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'|“[^”]*”")
_DOCSTRING_WORDS = re.compile(
    rf"\b(?:add|give|put|write|insert|document|docstrings?|the|a|an|one|with|to|of|for|as|needs?|saying|"
    rf"says|that|reads|function|method|class|module|it|{_POLITE})\b|[.,;:!?()`]", re.IGNORECASE)
_NO_CHANGE = re.compile(
    r"^\W*(?:(?:please|pls)\s+)?(?:leave\s+(?:the\s+file\s+|it\s+|this\s+(?:file\s+)?|everything\s+)?(?:exactly\s+)?"
    r"(?:as\s+it\s+is|as[\s-]is|alone|unchanged|untouched)|"
    r"(?:don'?t|do\s+not)\s+(?:change|touch|modify|edit)\s+(?:anything|it|the\s+file|this\s+file)|no\s+(?:changes|edits)|"
    r"keep\s+(?:the\s+file|it|this\s+file|everything)\s+(?:as\s+(?:it\s+)?is|as-is|unchanged)|"
    r"return\s+the\s+file\s+unchanged|make\s+no\s+(?:edits|changes)|change\s+nothing|"
    r"output\s+the\s+file\s+without\s+changes|do\s+not\s+modify\s+(?:the\s+file|it)|"
    r"this\s+file\s+is\s+fine,?\s+leave\s+it\s+alone|nothing\s+to\s+change(?:\s+here)?)"
    r"(?:[\s,]*(?:please|thanks|thank\s+you|thx))?\W*$", re.IGNORECASE)


def asks_to_delete(instruction: str | None) -> bool:
    """Whether the instruction asks to delete, remove or drop something."""
    return _DELETE_VERB.search(instruction or "") is not None


def asked_renames(instruction: str | None) -> list[tuple[str, str]]:
    """The (old, new) identifier pairs an instruction asks to rename, in the order it names them."""
    return _asked_pairs(instruction, _RENAMES, _RENAMES_NEW_FIRST)


def _only_renames(instruction: str | None) -> bool:
    """Whether the instruction asks for renames and nothing else."""
    return _only(instruction or "", (*_RENAMES, _RENAMES_NEW_FIRST))


def _only_imports(instruction: str | None, old: str, new: str) -> bool:
    """Whether the instruction asks only to add, remove or sort imports ("add `import math` to the
    imports", "drop the import of os", "sort the imports, thanks"): once the import statements,
    the words such requests are made of and the module names the file imports are taken out,
    nothing is left."""
    plain = (instruction or "").replace("`", " ")
    said = _IMPORT_STMT.sub(" ", plain)
    if said == plain and not re.search(r"\bimports?\b|\balphabeti[sz]e\b", plain, re.IGNORECASE):
        return False  # no import statement, no word about imports: not an import request
    rest = _IMPORT_WORDS.sub(" ", said).split()
    named = {w for line in (old + "\n" + new).splitlines() if line.startswith(("import ", "from "))
             for w in re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", line)}
    return all(w.strip(".,;:!?()'\"") in named for w in rest)


def _name_lines(text: str, name: str, python: bool, own_attribute: bool = False) -> list[int] | None:
    """The lines where `name` is used: in Python, as an identifier or as a whole string literal
    (an `__all__` entry, `getattr(obj, "name")`), not in comments or prose, and not after a dot
    (`d.items()` may be another object's attribute of the same name) unless own_attribute and the
    dot follows `self` or `cls`; elsewhere, as a whole word. None when Python source does not
    tokenize."""
    if not python:
        word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")
        return [text.count("\n", 0, m.start()) + 1 for m in word.finditer(text)]
    lines = []
    after_dot = after_own = False
    prev = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
                            tokenize.DEDENT):
                continue
            dot, after_dot = after_dot, tok.type == tokenize.OP and tok.string == "."
            own, after_own = after_own, after_dot and prev is not None and prev.type == tokenize.NAME \
                and prev.string in ("self", "cls")
            prev = tok
            if tok.type == tokenize.NAME and tok.string == name and (not dot or (own and own_attribute)):
                lines.append(tok.start[0])
            elif tok.type == tokenize.STRING and tok.string[-1:] in "'\"" and \
                    tok.string.lstrip("rRbBuU").strip("'\"") == name:
                lines.append(tok.start[0])
    except (tokenize.TokenError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return lines


def _own_attribute(tree: ast.Module, name: str) -> bool:
    """Whether a class of the file defines `name` as a method or assigns `self.name`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name == name for d in node.body):
            return True
        if isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            return True
    return False


def unfinished_renames(old: str, new: str, instruction: str | None, python: bool = True) -> list[str]:
    """One line per rename the instruction asks for that the rewrite did not finish: the old name
    is still used (with the lines), or was never in the file. Empty when nothing was asked."""
    out = []
    renames = asked_renames(instruction)
    tree = parse_python(old) if python and renames else None
    for was, becomes in renames:
        # a method or an instance attribute of the file's own classes: `self.was` is a use of it
        own = tree is not None and _own_attribute(tree, was)
        before = _name_lines(old, was, python, own)
        after = _name_lines(new, was, python, own)
        if before is None or after is None:
            continue
        if not before:
            # (a step before the rename may add what it renames: "1) new function f ... 2) rename f to g")
            added_then_renamed = len(_split_steps(instruction or "")) > 1
            if new != old and not (added_then_renamed and _name_lines(new, becomes, python)):
                out.append(f"the instruction renames {was}, which the file never uses")
            continue
        if after:
            at = sorted(set(after))  # a line that uses the name three times is one line
            shown = ", ".join(str(n) for n in at[:MAX_NAMED_LINES])
            more = ", ..." if len(at) > MAX_NAMED_LINES else ""
            where = "line" if len(at) == 1 else "lines"
            out.append(f"the rewrite still uses {was} ({where} {shown}{more}), which the instruction "
                       f"renames to {becomes}")
    return out


# a request to sort or order the imports names no import to add ("sort the import block")
_SORT_WORDS = re.compile(r"\b(?:sort|sorted|order|alphabeti[sz]e|alphabetical(?:ly)?)\b", re.IGNORECASE)
# words that follow an import statement in an instruction without being part of it ("import os, thanks")
_NOT_MODULES = frozenset({"thanks", "thank", "thx", "please", "pls", "then", "and", "also", "too"})


def _bindings(node: ast.AST) -> set[tuple]:
    """What one import statement binds: ("import", module, as) or ("from", level, module, name, as)."""
    if isinstance(node, ast.Import):
        return {("import", a.name, a.asname) for a in node.names if a.name not in _NOT_MODULES}
    if isinstance(node, ast.ImportFrom):
        return {("from", node.level, node.module, a.name, a.asname) for a in node.names if a.name not in _NOT_MODULES}
    return set()


def _tree_bindings(tree: ast.AST | None) -> collections.Counter:
    """Every import statement's bindings in a tree (_bindings), counted; empty for no tree."""
    out: collections.Counter = collections.Counter()
    for node in ast.walk(tree) if tree is not None else ():
        out.update(_bindings(node))
    return out


# a step's own verb of adding ("add", "insert", "we need", "also", ...); a step with neither it nor a
# delete verb continues the step before ("remove import os and import sys")
_ADD_VERB = re.compile(r"\b(?:add|insert|include|need|needs|append|put|also|want|bring\s+in)\b", re.IGNORECASE)


def _import_steps(instruction: str | None):
    """(step, [(statement text, ast node)], deletes) for each step of the instruction, with the
    import statements it names (maybe none); `deletes`: the step asks to remove (its own delete
    verb, or no verb of its own after a step that did)."""
    deleting = False
    for step in _split_steps(instruction or ""):
        plain = step.replace("`", " ")
        found = []
        for m in _IMPORT_STMT.finditer(plain):
            text = m.group(0).strip()
            # "import Path from pathlib", as other languages write it: `from pathlib import Path`
            after = re.match(r"\s+from\s+([A-Za-z_][\w.]*)", plain[m.end():])
            if after and text.startswith("import "):
                text = f"from {after.group(1)} {text}"
            try:
                found.append((text, ast.parse(text).body[0]))
            except (SyntaxError, IndexError):
                continue
        rest = _IMPORT_STMT.sub(" ", plain)
        if asks_to_delete(rest):
            deleting = True
        elif _ADD_VERB.search(rest) or (not found and rest.strip(" .,;!?")):
            deleting = False
        yield step, found, deleting


def missing_imports(old: str, new: str, instruction: str | None) -> list[str]:
    """One line per import statement that a request to add imports names ("add `import os`",
    "also import typing", "we need json, add `from json import loads`") and the rewrite does not
    have, as that statement binds it: `from typing import Optional` is no `import typing`, while
    `from typing import Any, Optional` has `from typing import Any`. Only steps that ask for
    imports and nothing else count, and never a module another step removes."""
    tree = parse_python(new)
    if tree is None:
        return []
    want: list[tuple[str, set[tuple]]] = []
    dropped: set[str] = set()
    for step, found, deletes in _import_steps(instruction):
        if not found:
            continue
        if deletes:
            dropped |= {b[1] if b[0] == "import" else b[2] for _, node in found for b in _bindings(node)}
        elif _only_imports(step, old, new) and not _SORT_WORDS.search(step):
            want += [(text, _bindings(node)) for text, node in found]
    if not want:
        return []
    have = set(_tree_bindings(tree))
    # "import typing" may mean the statement or "import something from typing" (people and
    # strata's training tasks both say it so): a bare `import M` is there where M is imported, or
    # where the rewrite imports a name from M that the original did not
    before = set(_tree_bindings(parse_python(old)))
    have |= {("import", b[2], None) for b in have - before if b[0] == "from" and b[1] == 0}
    out = []
    for text, need in want:
        need = {b for b in need if (b[1] if b[0] == "import" else b[2]) not in dropped}
        if need and not need <= have:
            shown = text.split(",")[0] if all(b[0] == "import" for b in need) and len(need) == 1 else text
            out.append(f"the rewrite does not have `{shown}`, which the instruction asks for")
    return out


def undone_deletions(old: str, new: str, instruction: str | None) -> list[str]:
    """One line per definition or import statement a step of the instruction asks to delete
    ("remove `f`", "1) get rid of f 2) ...", "delete `import os`") that the rewrite still has as
    often as the original: a multi-step rewrite that did the other steps and kept it. A name is
    counted over every definition of it (deleting one of two methods named `f` leaves one)."""
    tree_a, tree_b = parse_python(old), parse_python(new)
    if tree_a is None or tree_b is None:
        return []
    defs_a = collections.Counter(d.name for d in _definitions(tree_a))
    defs_b = collections.Counter(d.name for d in _definitions(tree_b))
    binds_a, binds_b = _tree_bindings(tree_a), _tree_bindings(tree_b)
    out: list[str] = []
    for step, found, deletes in _import_steps(instruction):
        if not deletes:
            continue
        plain = step.replace("`", " ")
        for text, node in found:
            binds = _bindings(node)
            if binds and all(binds_b[b] >= binds_a[b] > 0 for b in binds):
                out.append(f"the rewrite still has `{text}`, which the instruction removes")
        if not asks_to_delete(step):
            continue  # ("and import sys" after "remove import os": the statements only)
        # ("remove f from class A": A is where f is, not what goes)
        where = re.sub(r"\b(?:from|in|inside|within)\s+(?:the\s+)?(?:class\s+)?[A-Za-z_]\w*|\bof\s+(?:the\s+)?class\s+`?\w+",
                       " ",
                       _IMPORT_STMT.sub(" ", plain), flags=re.IGNORECASE)
        # only a step that is a deletion of named definitions and nothing else ("delete the
        # comment above f" names f and deletes no f), as the deletion scope reads it
        rest = _leftover_words(_OPENER.sub("", where, count=1), _DELETE_WORDS)
        if not rest or not all(w in defs_a for w in rest):
            continue
        named = sorted(set(rest))
        kept = [name for name in named if defs_b[name] >= defs_a[name]]
        # only where none of the step's named definitions went: "delete the helper function `_v`"
        # in a file that also defines `helper` deleted what it asked for once `_v` is gone
        if kept and len(kept) == len(named):
            out += [f"the rewrite still defines {name}, which the instruction deletes" for name in kept]
    return out


# a signature the instruction spells: `name(a, b=1, *rest)`, parameters as plain names, maybe
# with an annotation or a default ("make_text(depth)", "`area(r: float)`", "f()")
_PARAM = r"\s*(?:\*{0,2}[A-Za-z_]\w*(?:\s*:\s*[\w.\[\], ]+?)?(?:\s*=\s*[^,()]+)?)\s*"
_SIGNATURE = re.compile(rf"(?<![\w.])([A-Za-z_]\w*)\(((?:{_PARAM}(?:,{_PARAM})*)?,?\s*)\)")


def _param_names(text: str) -> list[str]:
    """The parameter names of a spelled signature's list, split at the commas outside brackets
    (`x: dict[str, int], y` is x and y)."""
    parts, depth, cur = [], 0, ""
    for ch in text + ",":
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth <= 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [re.match(r"\*{0,2}([A-Za-z_]\w*)", p).group(1) for p in parts if p]


def mismatched_signatures(old: str, new: str, instruction: str | None) -> list[str]:
    """One line per definition that the rewrite adds (a name the original does not define) whose
    parameters are not the ones the instruction spells for it: "append a function
    make_text(depth)" answered with `def make_text(G, walk_length)`, or with that and a second
    `def make_text(depth)`. A method's self or cls may go unsaid; names that the original already
    defines (a call written in an instruction) are never checked."""
    if not instruction or "(" not in instruction:
        return []
    tree_a, tree_b = parse_python(old), parse_python(new)
    if tree_a is None or tree_b is None:
        return []
    had = {d.name for d in _definitions(tree_a)}
    added = {}
    for d in _definitions(tree_b):
        if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name not in had:
            added.setdefault(d.name, []).append(d)
    out: list[str] = []
    for m in _SIGNATURE.finditer(instruction):
        name, asked = m.group(1), _param_names(m.group(2))
        if name not in added:
            continue
        shapes = []
        for d in added.pop(name):
            a = d.args
            shapes.append([x.arg for x in a.posonlyargs + a.args + ([a.vararg] if a.vararg else [])
                           + a.kwonlyargs + ([a.kwarg] if a.kwarg else [])])
        wrong = [s for s in shapes if not (s == asked or (s[:1] in (["self"], ["cls"]) and s[1:] == asked))]
        if wrong:  # every new definition of the name: a second one with other parameters shadows or is shadowed
            got = " and ".join(f"{name}({', '.join(s)})" for s in shapes)
            out.append(f"the rewrite defines {got}, the instruction asks for {m.group(0).strip()}")
    return out


def unchanged_literals(old: str, new: str, instruction: str | None) -> list[str]:
    """One line per literal change the instruction asks for ("set 3.0 where it says 1.5", "change
    'utf-8' to 'ascii'") that the rewrite left undone: the original has the old literal, the
    rewrite has it at least as often and the new one no more often than the original did. Any
    occurrence changed (or the old one gone with a deleted block) counts as done."""
    out: list[str] = []
    for was, to in asked_literals(instruction):
        mask_was, mask_to = _literal_mask({was}), _literal_mask({to})
        before = len(mask_was.findall(old))
        if before and len(mask_was.findall(new)) >= before and len(mask_to.findall(new)) <= len(mask_to.findall(old)):
            out.append(f"the rewrite still has {was} wherever the original does; the instruction asks for {to}")
    return out


def deleted_definition_lines(old: str, instruction: str | None) -> set[int]:
    """The lines (1-based) of the definitions and top-level imports of `old` that the instruction
    asks to delete: it has a delete verb and names them (whole words, maybe in backticks). Empty
    otherwise."""
    if not asks_to_delete(instruction):
        return set()
    tree = parse_python(old)
    if tree is None:
        return set()
    said = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", instruction or ""))
    lines = {i for d in _definitions(tree) if d.name in said for i in _span(d)}
    # and the import statements it names ("remove `from networkx.utils import groups`")
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(a.name.split(".")[-1] in said for a in node.names):
            lines |= set(_span(node))
    return lines


def parse_python(text: str) -> ast.Module | None:
    """The module's tree, or None where it does not parse (its SyntaxWarnings silenced)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _span(node: ast.AST) -> range:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return range(first, (node.end_lineno or node.lineno) + 1)


def _definitions(tree: ast.Module) -> list[ast.AST]:
    """Every function and class, nested ones too (no recursion: deep files must not blow the stack)."""
    out, stack = [], [tree]
    while stack:
        for child in ast.iter_child_nodes(stack.pop()):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append(child)
            stack.append(child)
    return out


def _imports(tree: ast.Module) -> list[tuple[str, set[str], range]]:
    """The top-level import statements: each as its form without positions or layout (`from t
    import (a,\n b)` is `from t import a, b`), the names it touches (modules, their first part,
    imported names, aliases) and its lines, continuation lines included."""
    out = []
    for n in tree.body:
        if not isinstance(n, (ast.Import, ast.ImportFrom)):
            continue
        names = {a.name for a in n.names} | {a.asname for a in n.names if a.asname}
        modules = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module] if n.module else []
        names |= {m.split(".")[0] for m in modules} | set(modules)
        out.append((ast.dump(n), names, _span(n)))
    return out


def _explained_imports(ta: ast.Module, tb: ast.Module, instruction: str) -> tuple[set[int], set[int]]:
    """For an import-only request: the lines of the old and new import statements that the
    request explains. A statement on both sides (moved or re-wrapped, as sorting does) is
    explained; one added or removed only when it touches a name the instruction names ("delete
    the line `import functools`" does not explain `import os` becoming a second `import
    posixpath`). A request for "unused" imports that names none of them explains any removal,
    and an added statement that only keeps names of removed ones (`from t import a` left of
    `from t import a, b`)."""
    said = {w.strip(".") for w in re.findall(r"[A-Za-z_][\w.]*", instruction)}
    old, new = _imports(ta), _imports(tb)
    count_a = collections.Counter(form for form, _, _ in old)
    count_b = collections.Counter(form for form, _, _ in new)
    # "remove unused imports" names none; "remove the unused import exceptions" names one
    touched = {n for _, names, _ in old + new for n in names}
    unused = re.search(r"\bunused\b", instruction, re.IGNORECASE) is not None and not said & touched
    removed = {n for form, names, _ in old if count_a[form] > count_b[form] for n in names}
    ok_a = {i for form, names, span in old
            if count_a[form] <= count_b[form] or names & said or unused for i in span}
    ok_b = {i for form, names, span in new
            if count_b[form] <= count_a[form] or names & said or (unused and names <= removed) for i in span}
    return ok_a, ok_b


def _docstring_lines(tree: ast.Module, names: set[str] | None = None) -> set[int]:
    """The lines of the module's, classes' and functions' docstrings; with `names`, only those of
    the definitions of these names."""
    out: set[int] = set()
    nodes = [tree, *_definitions(tree)] if not names else [d for d in _definitions(tree) if d.name in names]
    for node in nodes:
        body = getattr(node, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            out.update(_span(body[0]))
    return out


def _leftover_words(text: str, *patterns: re.Pattern) -> list[str]:
    for p in patterns:
        text = p.sub(" ", text)
    return text.split()


def _blank(lines: list[str]) -> set[int]:
    return {i + 1 for i, line in enumerate(lines) if not line.strip()}


# the joints of a multi-step instruction ("rename a to b, then add `import math`; delete f")
_STEPS = re.compile(r"\s+and\s+(?:then\s+|also\s+)?|,\s*(?:and\s+)?(?:then|also|after\s+that)\s+|;\s*|"
                    r"\.\s+(?:then|also)\s+|\s+\+\s+", re.IGNORECASE)


def _split_steps(said: str) -> list[str]:
    """The steps of a multi-step instruction: joined by "and", "then", ";" ... (_STEPS) or numbered
    ("1) add ... 2) rename ...")."""
    parts = re.split(r"(?:^|\s)\d\)\s*", said)
    return [q for p in parts for q in _STEPS.split(p) if q.strip(" .,;")]


# how people open a request ("Hey, drop ...", "I'd like you to rename ...", "Go ahead and ...",
# "Could you ..."); a quote or backtick that starts the instruction is its first literal or name
_OPENER = re.compile(r"^[^\w`'\"]*(?:(?:hey|hi|ok|okay)\b[\s,!]*)?(?:(?:please|pls|kindly|just)\s+)?"
                     r"(?:(?:i'?d\s+like|i\s+need|i\s+want)\s+you\s+to|go\s+ahead\s+and|"
                     r"(?:could|can|would|will)\s+you(?:\s+(?:please|kindly|just))?)?\s*", re.IGNORECASE)


def _scope(said: str, old: str, new: str, a: list[str], b: list[str], parsed, whole: str = ""):
    """What one mechanical edit explains: (its name, a pattern masked in both files' lines or
    None, the old lines and the new lines it explains), or None when `said` asks for something
    else (or a Python check has no trees). `whole`: the instruction `said` is a step of."""
    said = _OPENER.sub("", said, count=1)
    if _only_renames(said):
        names = sorted({n for pair in asked_renames(said) for n in pair}, key=len, reverse=True)
        word = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(re.escape(n) for n in names) + r")(?![A-Za-z0-9_])")
        return "rename", word, set(), set()
    if _only(said, (*_LITERALS, _LITERALS_NEW_FIRST)):
        return "literal change", _literal_mask({lit for pair in asked_literals(said) for lit in pair}), set(), set()
    if _ADD_DEF.match(said) and not _ADD_DEF_NOT.search(said):
        return "addition", None, _blank(a), _added_lines(said, whole or said, b, parsed)
    ta, tb = parsed()
    if ta is None or tb is None:
        return None
    if _only_imports(said, old, new):
        ok_a, ok_b = _explained_imports(ta, tb, said)
        return "import change", None, ok_a | _blank(a), ok_b | _blank(b)
    if _DELETE_VERB.search(said):
        defs = _definitions(ta)
        rest = _leftover_words(said, _DELETE_WORDS)
        if not rest or not all(w in {d.name for d in defs} for w in rest):
            return None
        return "deletion", None, {i for d in defs if d.name in rest for i in _span(d)} | _blank(a), _blank(b)
    if _DOCSTRING.search(said):
        rest = _leftover_words(said, _QUOTED, _DOCSTRING_WORDS)
        if not all(w in {d.name for d in _definitions(ta)} for w in rest):
            return None
        named = set(rest)  # "add the docstring ... to f": f's, not another definition's
        return "docstring", None, _docstring_lines(ta, named) | _blank(a), _docstring_lines(tb, named) | _blank(b)
    return None


_DEF_NAMES = re.compile(r"\b(?:function|method|class|helper)\s+`?([A-Za-z_]\w*)|\b([A-Za-z_]\w*)\(")


def _added_lines(said: str, whole: str, b: list[str], parsed) -> set[int]:
    """The new lines an addition explains: in Python, the definitions it names (or the names a
    later step renames them to) that the old file does not have (decorators included), import
    lines (a new function may need one), comments and blank lines; every line where the names or
    the trees are not to be had."""
    every = set(range(1, len(b) + 1))
    names = {m.group(1) or m.group(2) for m in _DEF_NAMES.finditer(said)}
    names |= {becomes for was, becomes in asked_renames(whole) if was in names}
    ta, tb = parsed()
    if not names or ta is None or tb is None:
        return every
    had = collections.Counter(d.name for d in _definitions(ta))
    defs = _definitions(tb)
    now = collections.Counter(d.name for d in defs)
    lines = {i for d in defs if d.name in names and now[d.name] > had[d.name] for i in _span(d)}
    lines |= {i for node in tb.body if isinstance(node, (ast.Import, ast.ImportFrom)) for i in _span(node)}
    return lines | _blank(b) | {j for j, line in enumerate(b, 1) if line.lstrip().startswith("#")}


def _slides(lines: list[str], i1: int, i2: int):
    """Where else a removed block [i1, i2) of `lines` could be: a diff that removes a function
    ending in `assert x == y` after another ending the same way may show the other's last line
    removed and the function's kept; sliding the block by whole lines that repeat gives the same
    file (the slides, (start, end) 0-based, the block's own place first)."""
    yield i1, i2
    a, b = i1, i2
    while b < len(lines) and lines[a] == lines[b]:
        a, b = a + 1, b + 1
        yield a, b
    a, b = i1, i2
    while a > 0 and lines[a - 1] == lines[b - 1]:
        a, b = a - 1, b - 1
        yield a, b


def unexplained_changes(old: str, new: str, instruction: str | None, python: bool = True) -> tuple[str, list[int]]:
    """For an instruction whose whole effect can be read off the text: what it asks for (its name
    in a warning) and the lines of `new` that changed for another reason; ("", []) for any other
    instruction, or when the old or new Python does not parse.

    - renames only: a changed line is explained when it equals the old one once every old and
      new name in both is masked;
    - (Python) import changes only: a changed line is blank or part of a top-level import
      statement that is on both sides or touches a name the instruction names (any removal for
      "unused" imports), on its side;
    - (Python) deleting named functions, methods or classes only: a removed line belongs to one
      of them (decorators included) or is blank; nothing is added but blank lines;
    - (Python) adding or changing docstrings only: a changed line is part of a docstring (of the
      definitions named, when the instruction names some) or blank;
    - changing literals only ("change 10 to 20"): a changed line equals the old one once every
      form of the old and new literals is masked in both;
    - adding a new definition only ("add a function f(a) that ..."): lines are only added, and
      (Python) belong to a definition of a name the instruction gives that the old file lacks, an
      import, a comment or a blank line; an old line that is not blank may not change or go;
    - "change nothing": every changed line;
    - several of these joined ("rename a to b, then add `import math`"): what any step explains."""
    a, b = old.splitlines(), new.splitlines()
    said = instruction or ""
    trees: list = []

    def parsed():  # both files' trees, parsed once and only when a check needs them
        if not trees:
            trees.extend((parse_python(old), parse_python(new)) if python else (None, None))
        return trees

    if _NO_CHANGE.match(_OPENER.sub("", said, count=1)):
        scopes = [("request for no change", None, set(), set())]
    else:
        one = _scope(said, old, new, a, b, parsed)
        scopes = [one] if one else []
        pieces = _split_steps(said)
        if not one and len(pieces) >= 2:  # "rename a to b, then add `import math`": every step
            got = [_scope(p, old, new, a, b, parsed, said) for p in pieces]
            scopes = got if all(got) else []
        if not scopes:
            return "", []
    what = scopes[0][0] if len(scopes) == 1 else "multi-step edit"
    ma, mb = a, b
    ok_a: set[int] = set()
    ok_b: set[int] = set()
    for _, mask, more_a, more_b in scopes:
        if mask is not None:
            ma, mb = [mask.sub("\0", line) for line in ma], [mask.sub("\0", line) for line in mb]
        ok_a |= more_a
        ok_b |= more_b
    out: set[int] = set()
    ops = difflib.SequenceMatcher(None, ma, mb, autojunk=False).get_opcodes()
    # an old line that the diff shows gone but that comes back, explained, among the changed new
    # lines only moved (a function added after the `if __name__` block can read as that block
    # replaced and written again)
    back = {mb[j] for tag, _, _, j1, j2 in ops if tag != "equal" for j in range(j1, j2) if j + 1 in ok_b}
    if any(scope[0] == "addition" for scope in scopes):
        # an addition explains only its own lines, so a line the diff shows gone in one place and
        # written again in another is a move of the diff's making (a large deletion beside it),
        # each gone line once: a duplicated old line is still a change
        gone = collections.Counter(ma[i] for tag, i1, i2, _, _ in ops if tag != "equal" for i in range(i1, i2)
                                   if ma[i].strip())
        for tag, _, _, j1, j2 in ops:
            for j in range(j1, j2) if tag != "equal" else ():
                if j + 1 not in ok_b and gone[mb[j]] > 0:
                    gone[mb[j]] -= 1
                    ok_b.add(j + 1)
                    back.add(mb[j])
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            continue
        bad_old = [i for i in range(i1 + 1, i2 + 1) if i not in ok_a and ma[i - 1] not in back]
        if bad_old and tag == "delete" and any(all(i in ok_a for i in range(x + 1, y + 1)) for x, y in _slides(ma, i1, i2)):
            bad_old = []  # the same lines removed a few lines on, where the instruction explains them
        bad_new = [j for j in range(j1 + 1, j2 + 1) if j not in ok_b]
        out.update(bad_new)
        if bad_old and not bad_new:  # an old line gone: said where it was, in the new file
            out.add(min(j1 + 1, max(1, len(b))))
    return what, sorted(out)

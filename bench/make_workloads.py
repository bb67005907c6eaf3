"""Builds the decoding benchmark workloads.

    python bench/make_workloads.py                 # rewrites sessions/workloads/*.jsonl
    python bench/make_workloads.py --real [DIR]    # real-file workloads into DIR (build/workloads-real)

sessions/workloads/ holds edit sessions made from real source files of this repository (several
languages and styles; each turn asks for a small change and its recorded output is the file with
exactly that change) and one prose (chat) workload. The files are copied into the workloads, so
later changes to the sources do not move the benchmark.

`--real` builds workloads from modules of installed third-party packages (rich, click, jinja2,
networkx: held out of strata-tiny's training data, so the model never saw them). They are
written outside git, because they are other projects' code; each records the package version
and the file's sha256, and the build refuses a package whose version differs from the pinned
one (the numbers would not be comparable). Two kinds:
- `real-edit-*.jsonl`: edit sessions (one turn each) with mechanical instructions the way people
  type them: add an import, rename a function everywhere, delete a function, leave the file as
  it is; the recorded output is the file with exactly that change (done with `ast`, re-parsed).
- `real-continue-*.json`: free continuation: the prompt is the first part of a module, the
  recorded answer is the rest of it (for --forced runs); a model's own continuation is what
  drafting meets when nothing repeats.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sessions" / "workloads"
REAL_OUT = ROOT / "build" / "workloads-real"

SETTINGS = {"max_new": 4096, "temperature": 0.0, "draft": "suffix", "drafter": "suffix", "max_draft": None,
            "min_match": 4}

# (workload name, source file, [(instruction, old, new), ...]); each edit applies to the previous
# turn's output, and `old` must occur in it
EDITS = [
    ("edit-python-tokenizer", "app/strata/tokenizer.py", [
        ("rename _REPLACEMENT to REPLACEMENT_CHAR", "_REPLACEMENT", "REPLACEMENT_CHAR"),
        ("use a context window of 8 tokens in IncrementalDecoder", "window: int = 6", "window: int = 8"),
    ]),
    ("edit-cpp-sampler", "engine_ext/sampler.cpp", [
        ("rename the comparator ByValue to HigherFirst", "ByValue", "HigherFirst"),
        ("start the nucleus search with 128 candidates instead of 64",
         "int k = std::min(n, 64);", "int k = std::min(n, 128);"),
    ]),
    ("edit-cmake", "CMakeLists.txt", [
        ("require CMake 3.20", "cmake_minimum_required(VERSION 3.18)", "cmake_minimum_required(VERSION 3.20)"),
        ("use C++20", "set(CMAKE_CXX_STANDARD 17)", "set(CMAKE_CXX_STANDARD 20)"),
    ]),
    ("edit-shell-devbuild", "scripts/dev-build.sh", [
        ("build with 4 jobs", "-j2", "-j4"),
    ]),
    ("edit-header-telemetry", "engine_ext/telemetry.h", [
        ("add an int field n_rejected after n_accept in WindowTelemetry",
         "    int n_accept = 0;\n", "    int n_accept = 0;\n    int n_rejected = 0;\n"),
    ]),
    ("edit-python-errors", "app/strata/errors.py", [
        ("add a PackError(ModelError) class for strata pack problems at the end",
         'class UsageError(StrataError):\n    """Bad command-line input (an option value out of range, a conflicting combination)."""\n',
         'class UsageError(StrataError):\n    """Bad command-line input (an option value out of range, a conflicting combination)."""\n'
         '\n\nclass PackError(ModelError):\n    """A strata pack is missing, truncated or does not match its model."""\n'),
    ]),
]

PROSE = [
    ("Write a short essay about why old harbours still matter to the towns around them.",
     "Old harbours are easy to overlook. The fishing fleets that built them have mostly gone, the "
     "warehouses have become flats or galleries, and the quays that once smelled of tar and diesel now "
     "host weekend markets. Yet the towns that grew around them keep returning to the water's edge, as "
     "if the harbour still set the rhythm of the day.\n\nPart of the pull is practical. A harbour is a "
     "place where the land stops pretending to be endless, where tides and weather announce themselves "
     "twice a day and no timetable can argue with them. People who live beside one learn to read the "
     "sky, to notice when the wind backs to the south, to hear the difference between a calm evening "
     "and the hush before a storm.\n\nPart of it is memory. Every stone wall records a decision made by "
     "people who could not afford to be wrong: where the swell would break, how high the spring tides "
     "would climb, which corner would shelter a boat in January. Walking along those walls is a lesson "
     "in patience and in the value of work done carefully once.\n\nAnd part of it is simply company. A "
     "harbour gathers people who have no other reason to meet: the retired engineer who repaints his "
     "dinghy every spring, the children with crab lines, the visitor who came for an afternoon and "
     "stayed a decade. Towns change, industries leave, but a good harbour keeps giving them a place to "
     "stand together and look outward."),
    ("Describe a morning walk through a city just before it wakes up.",
     "At half past five the city belongs to the delivery vans and the pigeons. Street lamps are still on, "
     "but the sky behind the rooftops has turned the colour of weak tea, and the first trams move almost "
     "silently, lit and empty, like aquariums on rails.\n\nThe bakery on the corner is the only shop "
     "awake. Its door is propped open with a flour sack, and the smell of bread reaches halfway down the "
     "block. A man in a white apron carries trays to a waiting bicycle; he nods without speaking, because "
     "at this hour nobody wastes words.\n\nFurther on, the river is flat and grey. A rowing crew slides "
     "under the bridge, eight backs moving as one, the cox's voice carrying clearly over the water. On "
     "the far bank a street sweeper pushes leaves into neat heaps that the wind will undo by noon.\n\n"
     "By six the light has changed. Windows brighten one by one, a radio plays somewhere above a "
     "courtyard, and the first commuters appear with their collars up and their coffee held like "
     "something precious. The city has not woken so much as remembered itself, and the walk, which "
     "felt like trespassing a moment ago, becomes just another way of being on time."),
]


def _header(kind: str) -> dict:
    return {"format": "strata-session", "version": 1, "kind": kind,
            "model": {"name": "workload", "note": "recorded answers, not a model's output"},
            "settings": SETTINGS, "title": None}


def build() -> list[Path]:
    OUT.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rel, edits in EDITS:
        text = (ROOT / rel).read_text(encoding="utf-8")
        lines = [_header("edit")]
        for i, (instruction, old, new) in enumerate(edits):
            if old not in text:
                sys.exit(f"{rel}: {old!r} not found for workload {name}")
            out = text.replace(old, new)
            lines.append({"type": "turn", "index": i, "role": "user", "input": instruction,
                          "file": {"path": rel, "content": text}, "instruction": instruction, "output": out})
            text = out
        path = OUT / f"{name}.jsonl"
        path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
        written.append(path)
    lines = [_header("chat")]
    for i, (question, answer) in enumerate(PROSE):
        lines.append({"type": "turn", "index": i, "role": "user", "input": question, "file": None,
                      "instruction": None, "output": answer})
    path = OUT / "prose-chat.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    written.append(path)
    return written


# ---------------------------------------------------------------- real files of other projects

# the versions the README's numbers were measured on; another version is another benchmark
PINNED = {"rich": "15.0.0", "click": "8.5.1", "jinja2": "3.1.6", "networkx": "3.6.1"}

# (package, module path inside it, edit kind, argument, instruction as typed)
REAL_EDITS = [
    ("rich", "padding.py", "add_import", "math", "Add `import math` to the imports."),
    ("jinja2", "meta.py", "rename", ("find_undeclared_variables", "find_free_variables"),
     "rename find_undeclared_variables to find_free_variables everywhere"),
    ("networkx", "algorithms/bridges.py", "delete", "local_bridges", "Delete the function `local_bridges`."),
    ("rich", "containers.py", "unchanged", None, "Leave the file exactly as it is."),
    ("click", "_textwrap.py", "add_import", "os", "please add import os"),
    ("rich", "rule.py", "rename", ("Rule", "HorizontalRule"), "Rename the class Rule to HorizontalRule."),
    ("networkx", "utils/union_find.py", "unchanged", None, "change nothing"),
    ("jinja2", "debug.py", "delete", "get_template_locals", "delete get_template_locals"),
]

# (package, module path, share of the lines in the prompt); the answer is the rest (capped)
REAL_CONTINUATIONS = [
    ("rich", "measure.py", 0.5),
    ("jinja2", "tests.py", 0.5),
    ("networkx", "algorithms/chains.py", 0.5),
    ("rich", "control.py", 0.5),
]
CONTINUE_CHARS = 1600   # recorded answer for --forced runs
CONTINUE_MAX_NEW = 256  # tokens a model writes on its own


def _package_file(package: str, rel: str) -> tuple[Path, str]:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"{package}: not installed in this Python ({sys.executable}); install {package}=={PINNED[package]}")
    version = importlib.metadata.version(package)
    if version != PINNED[package]:
        sys.exit(f"{package}: version {version} is installed, the workloads are pinned to {PINNED[package]}")
    return Path(list(spec.submodule_search_locations)[0]) / rel, version


def _source(package: str, rel: str, text: str, version: str) -> dict:
    return {"package": package, "version": version, "path": f"{package}/{rel}",
            "sha256": hashlib.sha256(text.encode()).hexdigest()}


def apply_edit(text: str, kind: str, arg) -> str:
    """The file with exactly the asked change (checked to parse)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    if kind == "unchanged":
        out = text
    elif kind == "add_import":
        if re.search(rf"^import {arg}$", text, re.M):
            raise ValueError(f"already imports {arg}")
        first = next(n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                     and not (isinstance(n, ast.ImportFrom) and n.module == "__future__"))
        at = first.lineno - 1
        out = "".join(lines[:at]) + f"import {arg}\n" + "".join(lines[at:])
    elif kind == "rename":
        old, new = arg
        if not re.search(rf"\b{old}\b", text) or re.search(rf"\b{new}\b", text):
            raise ValueError(f"cannot rename {old} to {new}")
        out = re.sub(rf"\b{old}\b", new, text)
    elif kind == "delete":
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == arg)
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        end = node.end_lineno
        while end < len(lines) and not lines[end].strip():
            end += 1  # the blank lines after it go too; the ones before it stay
        out = "".join(lines[:start]) + "".join(lines[end:])
    else:
        raise ValueError(f"unknown edit kind {kind}")
    ast.parse(out)
    return out


def _mid_block_cut(lines: list[str], start: int) -> int:
    """The first line from `start` on that sits inside an indented block after another such line:
    the prompt then stops mid-function, where a model has something to continue (at a block's
    end a small model may just end the file)."""
    inside = [ln.startswith((" ", "\t")) and ln.strip() != "" for ln in lines]
    for i in range(max(start, 1), len(lines)):
        if inside[i - 1] and inside[i]:
            return i
    return start


def build_real(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for package, rel, kind, arg, instruction in REAL_EDITS:
        path, version = _package_file(package, rel)
        text = path.read_text(encoding="utf-8")
        try:
            new = apply_edit(text, kind, arg)
        except (ValueError, StopIteration, SyntaxError) as exc:
            sys.exit(f"{package}/{rel}: edit {kind} {arg!r} does not apply ({exc})")
        head = _header("edit")
        head["source"] = _source(package, rel, text, version)
        head["edit_kind"] = kind
        display = f"{package}/{rel}"
        turn = {"type": "turn", "index": 0, "role": "user", "input": instruction,
                "file": {"path": display, "content": text}, "instruction": instruction, "output": new}
        name = f"real-edit-{kind}-{package}-{Path(rel).stem}"
        dest = out_dir / f"{name}.jsonl"
        dest.write_text(json.dumps(head, ensure_ascii=False) + "\n" + json.dumps(turn, ensure_ascii=False) + "\n",
                        encoding="utf-8")
        written.append(dest)
    for package, rel, share in REAL_CONTINUATIONS:
        path, version = _package_file(package, rel)
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        cut = _mid_block_cut(lines, int(len(lines) * share))
        prompt, rest = "".join(lines[:cut]), "".join(lines[cut:])
        obj = {"format": "strata-workload", "version": 1, "kind": "continue",
               "source": _source(package, rel, text, version), "max_new": CONTINUE_MAX_NEW,
               "prompt": prompt, "answer": rest[:CONTINUE_CHARS]}
        dest = out_dir / f"real-continue-{package}-{Path(rel).stem}.json"
        dest.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written.append(dest)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", nargs="?", type=Path, const=REAL_OUT, default=None, metavar="DIR",
                    help=f"build the real-file workloads into DIR (default {REAL_OUT.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    paths = build_real(args.real) if args.real else build()
    for p in paths:
        print(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

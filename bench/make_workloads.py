"""Builds the decoding benchmark workloads in sessions/workloads/ from real source files of this
repository (several languages and styles): each is an edit session whose turns ask for a small
change and whose recorded output is the file with exactly that change. Plus one prose (chat)
workload. The files are copied into the workloads, so later changes to the sources do not move
the benchmark.

    python bench/make_workloads.py            # rewrites sessions/workloads/*.jsonl
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sessions" / "workloads"

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


if __name__ == "__main__":
    for p in build():
        print(p.relative_to(ROOT))

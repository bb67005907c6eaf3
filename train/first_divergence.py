"""Where each wrong rewrite of an `evaluate.py --engine strata` run first leaves the right one, in
free generation (what users get; `copy_misses.py` looks at the same question teacher-forced):
the first character that differs, classed as a newline, other whitespace, a word character or
punctuation, the rewrite ending too early or going on past the right one's end; and whether the
rewrite there goes on as the original file does (it copied instead of changing).

    python train/first_divergence.py --tasks TASKS.jsonl.gz --samples OUT/edit_samples.jsonl
"""
from __future__ import annotations

import re
from collections import Counter

COPY_PROBE = 20  # characters of the rewrite compared with the original after the divergence


def divergence(original: str, want: str, got: str) -> tuple[str, bool]:
    """(class of the first differing character, whether `got` follows `original` from there)."""
    k = 0
    n = min(len(want), len(got))
    while k < n and want[k] == got[k]:
        k += 1
    w, g = want[k:k + 1], got[k:k + 1]
    if not g:
        what = "ended early"
    elif not w:
        what = "went on past the end"
    elif "\n" in (w, g):
        what = "newline"
    elif w.isspace() or g.isspace():
        what = "whitespace"
    elif re.match(r"\w", w) and re.match(r"\w", g):
        what = "word"
    else:
        what = "punctuation"
    # the original's place of the common prefix: its last 200 characters found there
    tail = want[max(0, k - 200):k]
    j = original.find(tail) if tail else 0
    after = original[j + len(tail):j + len(tail) + COPY_PROBE] if j >= 0 else None
    copied = after is not None and bool(got[k:k + COPY_PROBE]) and got[k:k + COPY_PROBE] == after \
        and got[k:k + COPY_PROBE] != want[k:k + COPY_PROBE]
    return what, copied


def main() -> None:
    from guard_outcomes import task_samples

    per_kind: dict[str, Counter] = {}
    for t, s in task_samples(__doc__.split("\n\n")[0]):
        if s["exact"]:
            continue
        what, copied = divergence(t["original"], t["rewritten"], s["output"])
        per_kind.setdefault(s["kind"], Counter())[what + (", copying the original" if copied else "")] += 1
    total = Counter()
    for kind, c in per_kind.items():
        total += c
        print(f"{kind}: " + ", ".join(f"{k} {v}" for k, v in c.most_common()))
    print(f"all ({sum(total.values())} wrong): " + ", ".join(f"{k} {v}" for k, v in total.most_common()))


if __name__ == "__main__":
    main()

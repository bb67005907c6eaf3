"""Produce strata-tiny v2 training rows, shard by shard, while training runs.

Reads the training corpus (build_data.py), visits its files in a seeded order and, on a pool of
worker processes, turns each into:
- whole-file edit examples (file_tasks.py): the whole file, an instruction, the whole rewrite,
  `prompts.edit_example`; files of MIN..MAX_CHARS characters, one or two kinds per file;
- code-assistant conversations (chat_data.py) from documented functions and METADATA;
- plain text for the code stream (every file: code, docs, METADATA).

Beside each shard of rows goes a shard of marks (marks_NNNN.npy, uint8, same shape, written
first): 1 on the tokens of an edit's rewrite and its <|endoftext|>, 2 on the rewrite tokens that
carry a change (change_marks(): the characters that differ from the original, the first token
after a deletion, the newline tokens at each join (v7), and --mark-after tokens after each
change), 0 elsewhere (prompts, chats, code).
train.py --changed-weight reads them; the rows themselves do not depend on them.

--copies: a third shard, copies_NNNN.npy (uint16, written before the rows): at each rewrite token
the token that `strata edit`'s copy bias boosts when predicting it (copy_tokens(), copy_index.py
over the example's prompt), NO_COPY elsewhere; train.py --copy-bias reads it.

--rare-vocab N (v5): before the first pass, every eighth file is tokenized and the vocabulary
pieces seen at most N times (rare_vocab()) are handed to file_tasks, whose renames and string
literals then take them as new values half of the time (file_tasks.VOCAB_SHARE), so that tokens
the corpus never uses still occur in rewrites as something to produce and to copy.

--p-scramble P (v6): a share P of the edit files are scrambled before their tasks are drawn: about
30% of their names replaced everywhere by names from the other files of the chunk
(file_tasks.scramble_names), so that copying is the only way to get the rewrite right.

Rows are seq_len+1 tokens. An edit/chat row starts with a whole example at position 0, takes
further whole examples while they fit and is topped up from the code stream; about
code_row_frac of the rows are pure code. Rows go to <out>/rows_NNNN.npy (uint16, written
atomically) every --shard-rows rows, so train.py can start on the first shard; when the
corpus is used up a new pass starts with a new seed (fresh edits of the same files).
<out>/producer.json has the counts so far.

    python train/make_rows.py --corpus .devdata/corpus/train.jsonl.gz --tok .devdata/tok \
        --out .devdata/rows --seq-len 16384 --max-tokens 300e6
"""
from __future__ import annotations

import argparse
import difflib
import json
import multiprocessing as mp
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "app"))

import chat_data  # noqa: E402
import file_tasks  # noqa: E402
from copy_index import CopyIndex, special_ids  # noqa: E402
from rewrite_tasks import iter_corpus  # noqa: E402
from strata import prompts  # noqa: E402

_TOK = None

MARK_REWRITE, MARK_CHANGED, MARK_JOIN = 1, 2, 3
CHAR_DIFF_LIMIT = 4000  # replaced blocks longer than this (either side) are marked whole


def changed_spans(original: str, rewritten: str) -> list[tuple[int, int]]:
    """Character spans [a, b) of `rewritten` that differ from `original`; a deletion is the
    empty span (p, p) at the place it happened. Lines are aligned first (difflib); inside a
    block of replaced lines the characters are aligned, so a rename marks the new name, not the
    whole line."""
    old, new = original.splitlines(keepends=True), rewritten.splitlines(keepends=True)
    starts = [0]
    for line in new:
        starts.append(starts[-1] + len(line))
    spans = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        a, b = starts[j1], starts[j2]
        if op == "delete":
            spans.append((a, a))
        elif op == "insert":
            spans.append((a, b))
        else:
            o, n = "".join(old[i1:i2]), rewritten[a:b]
            if len(o) > CHAR_DIFF_LIMIT or len(n) > CHAR_DIFF_LIMIT:
                spans.append((a, b))
                continue
            for cop, k1, k2, l1, l2 in difflib.SequenceMatcher(None, o, n, autojunk=False).get_opcodes():
                if cop != "equal":
                    spans.append((a + l1, a + l2))
    return spans


def _newline_run(text: str, s: int, e: int) -> bool:
    """A token of only whitespace with a newline in it (`\n`, `\n\n`, `\n\n    `, ...)."""
    piece = text[s:e]
    return bool(piece) and "\n" in piece and not piece.strip()


def change_marks(offsets, rewrite_start: int, spans, after: int = 0, text: str | None = None) -> np.ndarray:
    """Marks for one tokenized edit example: MARK_REWRITE on every token from `rewrite_start`
    (a character offset: the rewrite, then <|endoftext|>), MARK_CHANGED on the rewrite tokens
    that overlap a changed span of `changed_spans` (relative to rewrite_start), on the first
    token that ends after an empty span (a deletion), and on the `after` tokens that follow
    each such run. With `text` (the example the offsets index; v7) the newline run at each join
    is part of the change too: the whitespace tokens with a newline right before and right after
    a changed run. BPE has single tokens for `\n`, `\n\n`, `\n\n    `, so which one comes at a
    join depends on the change, and v5/v6 missed most often by copying the original's there.
    Those join tokens get MARK_JOIN (v8), unless another span marks them changed: train.py weighs
    them with --join-weight, which defaults to --changed-weight (the v7 weighting)."""
    starts = np.fromiter((o[0] for o in offsets), dtype=np.int64, count=len(offsets))
    ends = np.fromiter((o[1] for o in offsets), dtype=np.int64, count=len(offsets))
    marks = np.zeros(len(offsets), dtype=np.uint8)
    first = int(np.searchsorted(starts, rewrite_start))  # special tokens never straddle it
    marks[first:] = MARK_REWRITE
    rs, re_ = starts[first:], ends[first:]
    for a, b in spans:
        a, b = a + rewrite_start, b + rewrite_start
        if a == b:
            hit = np.flatnonzero(re_ > a)[:1]
        else:
            hit = np.flatnonzero((re_ > a) & (rs < b))
        if len(hit):
            lo0, hi0 = first + int(hit[0]), first + int(hit[-1]) + 1
            lo, hi = lo0, hi0
            if text is not None:
                while lo > first and _newline_run(text, starts[lo - 1], ends[lo - 1]):
                    lo -= 1
                while hi < len(marks) and _newline_run(text, starts[hi], ends[hi]):
                    hi += 1
            for a_, b_ in ((lo, lo0), (hi0, hi)):
                join = marks[a_:b_]
                join[join != MARK_CHANGED] = MARK_JOIN
            marks[lo0:hi0] = MARK_CHANGED
            marks[hi:min(hi + after, len(marks))] = MARK_CHANGED
    return marks


def parse_kind_weights(spec: str) -> dict[str, float]:
    """`KIND=W,KIND=W` -> {kind: weight}; every kind one of file_tasks.KINDS, every weight > 0
    (a kind is left out of the mix by not being asked for elsewhere, not by weight 0: tasks_for_file
    draws every kind's key from its weight). Empty: no change."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        kind, sep, w = part.partition("=")
        if not sep or kind not in file_tasks.KINDS:
            raise ValueError(f"{part!r}: want KIND=WEIGHT with KIND one of {', '.join(file_tasks.KINDS)}")
        try:
            weight = float(w)
        except ValueError:
            weight = float("nan")
        if not weight > 0 or weight == float("inf"):
            raise ValueError(f"{part!r}: the weight must be a number > 0")
        out[kind] = weight
    return out


def rare_vocab(tokenizer, texts, max_count: int) -> list[str]:
    """The vocabulary pieces that occur at most `max_count` times when `texts` are tokenized,
    as text (file_tasks.VOCAB_SHARE says why): special tokens, and pieces that are not whole
    characters on their own (a part of a UTF-8 sequence), left out. Sorted by id."""
    counts = np.zeros(tokenizer.get_vocab_size(), dtype=np.int64)
    for e in tokenizer.encode_batch(texts):
        counts += np.bincount(np.asarray(e.ids, dtype=np.int64), minlength=len(counts))
    out = []
    for i in np.flatnonzero(counts <= max_count):
        text = tokenizer.decode([int(i)], skip_special_tokens=False)
        if text and "\ufffd" not in text and text not in prompts.SPECIAL_TOKENS and text.strip():
            out.append(text)
    return out


def _init(tok_path: str) -> None:
    global _TOK
    from tokenizers import Tokenizer

    _TOK = Tokenizer.from_file(tok_path)


def scrambled(row: dict, rng: random.Random, names: list[str]) -> dict | None:
    """The file with a share of its names replaced by names of the other files of its chunk
    (file_tasks.scramble_names), as a corpus row of its own; None if that did not work."""
    own = set(file_tasks._IDENT.findall(row["text"]))
    text = file_tasks.scramble_names(row["text"], rng, [n for n in names if n not in own])
    return dict(row, text=text, sha256=row["sha256"] + ":scrambled") if text else None


NO_COPY = 65535  # copies channel: no copy token at this position (uint16 like the rows)


def copy_tokens(ids: np.ndarray, marks: np.ndarray, skip=()) -> np.ndarray:
    """The copies channel of one edit example: at each rewrite token (marks > 0), the token the
    copy bias of `strata edit` would boost when predicting it (copy_index.py over the prompt, the
    tokens before the rewrite; never one in skip, the control tokens); NO_COPY elsewhere."""
    out = np.full(len(ids), NO_COPY, dtype=np.uint16)
    at = np.flatnonzero(marks > 0)
    if len(at):
        first = int(at[0])
        seq = ids.tolist()
        pred = np.asarray(CopyIndex(seq[:first]).predictions(seq[:-1], first, skip), dtype=np.int64)
        out[first:] = np.where(pred >= 0, pred, NO_COPY)
        out[marks == 0] = NO_COPY
    return out


def work(job):
    """One chunk of files -> token arrays of edit examples (ids, marks, copies or None), chats
    and code."""
    rows, seed, p_two, p_chat, n_chat, p_code, max_chars, after, vocab, p_scramble, *rest = job
    copies = bool(rest and rest[0])
    edits, spans, chats, code, kinds = [], [], [], [], {}
    names = sorted({n for r in rows for n in file_tasks._IDENT.findall(r["text"]) if len(n) >= 3}) if p_scramble else []
    for row in rows:
        rng = random.Random(f"mix:{seed}:{row['sha256']}")
        if file_tasks.usable(row, file_tasks.MIN_CHARS, max_chars):
            n = 2 if rng.random() < p_two else 1
            task_row = scrambled(row, rng, names) if p_scramble and rng.random() < p_scramble else None
            for t in file_tasks.tasks_for_file(task_row or row, n, seed, vocab=vocab):
                if task_row:
                    kinds["scrambled"] = kinds.get("scrambled", 0) + 1
                edits.append(prompts.edit_example(t["filename"], t["original"], t["instruction"], t["rewritten"]))
                spans.append((len(prompts.edit_prompt(t["filename"], t["original"], t["instruction"])),
                              changed_spans(t["original"], t["rewritten"])))
                kinds[t["kind"]] = kinds.get(t["kind"], 0) + 1
        if rng.random() < p_chat or row["path"].endswith("/METADATA"):
            chats += chat_data.chats_for_file(row, n_chat, seed)
        if rng.random() < p_code:
            code.append(row["text"])
    enc = lambda texts: [np.asarray(e.ids, dtype=np.uint16) for e in _TOK.encode_batch(texts)] if texts else []
    edit_enc = _TOK.encode_batch(edits) if edits else []
    edit_out = []
    skip = special_ids(_TOK) if copies else ()
    for e, text, (r, sp) in zip(edit_enc, edits, spans):
        ids, marks = np.asarray(e.ids, dtype=np.uint16), change_marks(e.offsets, r, sp, after, text)
        edit_out.append((ids, marks, copy_tokens(ids, marks, skip) if copies else None))
    return edit_out, enc(chats), enc(code), kinds


class Packer:
    def __init__(self, width: int, eos: int, code_row_frac: float, seed: int):
        self.width, self.eos = width, eos
        self.p_code = code_row_frac / (1 - code_row_frac)
        self.rng = random.Random(seed)
        self.code: list[np.ndarray] = []
        self.code_len = 0
        self.cur: list[np.ndarray] = []
        self.cur_marks: list[np.ndarray] = []
        self.used = 0
        self.rows: list[np.ndarray] = []
        self.marks: list[np.ndarray] = []  # one per row, uint8 (see change_marks)
        self.cur_copies: list[np.ndarray] = []
        self.copies: list[np.ndarray] = []  # one per row, uint16 (copy_tokens; NO_COPY where none)
        self.stats = {"edit_tokens": 0, "chat_tokens": 0, "code_tokens": 0, "dropped_long": 0}

    def add_code(self, ids: np.ndarray) -> None:
        self.code.append(np.append(ids, np.uint16(self.eos)))
        self.code_len += len(ids) + 1

    def take_code(self, n: int) -> np.ndarray:
        out, need = [], n
        while need > 0:
            if not self.code:
                out.append(np.full(need, self.eos, dtype=np.uint16))  # only before any code exists
                break
            piece = self.code[0]
            if len(piece) <= need:
                out.append(piece)
                self.code.pop(0)
                need -= len(piece)
            else:
                out.append(piece[:need])
                self.code[0] = piece[need:]
                need = 0
        self.code_len -= n
        self.stats["code_tokens"] += n
        return np.concatenate(out) if out else np.zeros(0, dtype=np.uint16)

    def close(self) -> None:
        self.cur.append(self.take_code(self.width - self.used))
        self.rows.append(np.concatenate(self.cur))
        self.marks.append(np.concatenate(self.cur_marks + [np.zeros(self.width - self.used, dtype=np.uint8)]))
        self.copies.append(np.concatenate(self.cur_copies + [np.full(self.width - self.used, NO_COPY, dtype=np.uint16)]))
        self.cur, self.cur_marks, self.cur_copies, self.used = [], [], [], 0
        if self.rng.random() < self.p_code and self.code_len > 2 * self.width:
            self.rows.append(self.take_code(self.width))
            self.marks.append(np.zeros(self.width, dtype=np.uint8))
            self.copies.append(np.full(self.width, NO_COPY, dtype=np.uint16))

    def add_example(self, ids: np.ndarray, what: str, marks: np.ndarray | None = None,
                    copies: np.ndarray | None = None) -> None:
        if len(ids) > self.width:
            self.stats["dropped_long"] += 1
            return
        if self.used + len(ids) > self.width:
            self.close()
        self.cur.append(ids)
        self.cur_marks.append(np.zeros(len(ids), dtype=np.uint8) if marks is None else marks)
        self.cur_copies.append(np.full(len(ids), NO_COPY, dtype=np.uint16) if copies is None else copies)
        self.used += len(ids)
        self.stats[what + "_tokens"] += len(ids)
        if marks is not None:
            self.stats["changed_tokens"] = self.stats.get("changed_tokens", 0) + int((marks >= MARK_CHANGED).sum())
            self.stats["join_tokens"] = self.stats.get("join_tokens", 0) + int((marks == MARK_JOIN).sum())
            self.stats["rewrite_tokens"] = self.stats.get("rewrite_tokens", 0) + int((marks > 0).sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--tok", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seq-len", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--shard-rows", type=int, default=256)
    ap.add_argument("--max-tokens", type=float, default=300e6)
    ap.add_argument("--max-chars", type=int, default=file_tasks.MAX_CHARS)
    ap.add_argument("--p-two", type=float, default=0.35, help="share of files that get two edit tasks")
    ap.add_argument("--p-chat", type=float, default=0.8, help="share of files that give conversations")
    ap.add_argument("--chats-per-file", type=int, default=2)
    ap.add_argument("--p-code", type=float, default=0.3, help="share of files that go to the code stream")
    ap.add_argument("--code-row-frac", type=float, default=0.12)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 4))
    ap.add_argument("--chunk", type=int, default=24)
    ap.add_argument("--rare-vocab", type=int, default=0,
                    help="renames and string literals may take as new values vocabulary pieces that occur at most "
                         "this often in every eighth file of the corpus (rare_vocab; 0: never, v4 and before)")
    ap.add_argument("--p-scramble", type=float, default=0.0,
                    help="share of edit files whose names are scrambled first (file_tasks.scramble_names; 0: v5 and before)")
    ap.add_argument("--mark-after", type=int, default=2,
                    help="marks: this many rewrite tokens after each change are marked changed too")
    ap.add_argument("--kind-weights", default="",
                    help="KIND=W,...: change the training mix of edit kinds (file_tasks.KIND_WEIGHT), "
                         "e.g. delete_function=2.4,multi=2.4 (v8)")
    ap.add_argument("--copies", action="store_true",
                    help="also write copies_NNNN.npy: at each rewrite token, the token strata edit's copy bias "
                         "boosts there (copy_tokens), for train.py --copy-bias")
    args = ap.parse_args()
    try:
        file_tasks.KIND_WEIGHT.update(parse_kind_weights(args.kind_weights))  # the forked workers inherit it
    except ValueError as e:
        raise SystemExit(f"--kind-weights: {e}")
    args.out.mkdir(parents=True, exist_ok=True)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(args.tok / "tokenizer.json"))
    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    corpus = list(iter_corpus(args.corpus))
    vocab = tuple(rare_vocab(tokenizer, [r["text"] for r in corpus[::8]], args.rare_vocab)) if args.rare_vocab else ()
    counts_vocab = {"rare_vocab": len(vocab), "rare_vocab_sample": list(vocab[:40])}
    if vocab:
        print(f"{len(vocab)} rare vocabulary pieces, e.g. {list(vocab[:12])}", flush=True)
    packer = Packer(args.seq_len + 1, eos, args.code_row_frac, args.seed)
    shard, total_rows, kinds, t0 = 0, 0, {}, time.time()
    counts = {"edit_examples": 0, "chats": 0, "passes": 0}

    def flush(final=False):
        nonlocal shard, total_rows
        while len(packer.rows) >= args.shard_rows or (final and packer.rows):
            part, packer.rows = packer.rows[:args.shard_rows], packer.rows[args.shard_rows:]
            mpart, packer.marks = packer.marks[:args.shard_rows], packer.marks[args.shard_rows:]
            cpart, packer.copies = packer.copies[:args.shard_rows], packer.copies[args.shard_rows:]
            arr = np.stack(part).astype(np.uint16)
            if args.copies:  # before the rows, as the marks: a reader finds all three
                tmp = args.out / f"copies_{shard:04d}.tmp.npy"
                np.save(tmp, np.stack(cpart).astype(np.uint16))
                os.replace(tmp, args.out / f"copies_{shard:04d}.npy")
            tmp = args.out / f"marks_{shard:04d}.tmp.npy"  # before the rows: a reader finds both
            np.save(tmp, np.stack(mpart).astype(np.uint8))
            os.replace(tmp, args.out / f"marks_{shard:04d}.npy")
            tmp = args.out / f"rows_{shard:04d}.tmp.npy"
            np.save(tmp, arr)
            os.replace(tmp, args.out / f"rows_{shard:04d}.npy")
            shard += 1
            total_rows += len(arr)
            info = {"shards": shard, "rows": total_rows, "tokens": total_rows * (args.seq_len + 1),
                    "seconds": round(time.time() - t0, 1), "kinds": kinds, **counts, **packer.stats,
                    "seq_len": args.seq_len, "seed": args.seed, "corpus_files": len(corpus), **counts_vocab,
                    "kind_weight": file_tasks.KIND_WEIGHT,
                    "args": {k: str(v) for k, v in vars(args).items()}}
            (args.out / "producer.json").write_text(json.dumps(info, indent=1))
            print(f"shard {shard}: {total_rows} rows, {time.time() - t0:.0f}s", flush=True)

    with mp.get_context("fork").Pool(args.workers, initializer=_init, initargs=(str(args.tok / "tokenizer.json"),)) as pool:
        p = 0
        while total_rows * (args.seq_len + 1) < args.max_tokens:
            order = list(range(len(corpus)))
            random.Random(args.seed + p).shuffle(order)
            jobs = [([corpus[i] for i in order[s:s + args.chunk]], args.seed * 100 + p, args.p_two,
                     args.p_chat, args.chats_per_file, args.p_code, args.max_chars, args.mark_after, vocab, args.p_scramble,
                     args.copies) for s in range(0, len(order), args.chunk)]
            counts["passes"] = p + 1
            for edits, chats, code, k in pool.imap(work, jobs):
                for ids in code:
                    packer.add_code(ids)
                examples = [(e, "edit", m, c) for e, m, c in edits] + [(c, "chat", None, None) for c in chats]
                packer.rng.shuffle(examples)
                for ids, what, marks, copies in examples:
                    packer.add_example(ids, what, marks, copies)
                counts["edit_examples"] += len(edits)
                counts["chats"] += len(chats)
                for key, v in k.items():
                    kinds[key] = kinds.get(key, 0) + v
                flush()
                if total_rows * (args.seq_len + 1) >= args.max_tokens:
                    break
            p += 1
        flush(final=True)
    print("producer done", flush=True)


if __name__ == "__main__":
    main()

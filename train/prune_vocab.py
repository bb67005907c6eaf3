"""Prune the BPE merges of strata-tiny's tokenizer whose pieces the model never learned.

The tokenizer was trained (for v1) on a corpus that still had the packages v2 holds out, so some
vocabulary pieces (` NetworkX`, `NetworkXError`, `multigraph`, ...) never occur in the training
rows; their embedding rows were never trained and the model gives them probability ~0 even when
the file it copies has them. This script removes the merges that produce such pieces, so that
text is tokenized into smaller pieces the model has seen many times. The vocabulary (ids,
embedding matrix, config) does not change: a pruned piece keeps its id, it is just never
produced by encoding any more (decoding it still works).

Which merges stay (`needed`): a piece is needed when
- it is a base piece (a byte of the byte-level alphabet: the output of no merge) or an added
  (special) token, or
- it occurs at least `--min-count` N times as a final token when the training text is encoded, or
- (with --model) its row of the model's input embedding has a norm of at least `--min-norm`: the
  row was trained, on a corpus this machine may have only part of (build_data.py collects what
  is installed; the GPU machine has more packages). Rows that no training text reached decay to
  about a quarter of a trained row's norm (weight decay), so the norm tells them apart, or
- it is an input of a kept merge whose output is needed (closure over the merge graph).
- it is an input of a kept merge whose output is needed (closure over the merge graph).
A merge is kept when its output is needed.

Why N=1 leaves the training text's tokenization unchanged: BPE encodes a word by applying, again
and again, the lowest-ranked merge among its adjacent pairs. A merge that was never applied while
encoding a text was, at every step, either absent from the word or not the lowest-ranked present,
so removing it changes no choice. Every merge that is applied produces a piece that is either a
final token (count >= 1) or an input of a later applied merge, so by induction from the final
tokens every applied merge is kept. For N > 1 tokenization changes only where a piece that occurs
fewer than N times (and is no part of a needed piece) occurred.

The training text counted (`training_texts`): every file of the training corpus (build_data.py,
the code stream and the files inside the edit prompts), plus the edit examples and conversations
make_rows.py builds from every `--examples-every`-th file (prompt templates, instructions, chat
turns), with the seeds of the v2-v5 runs. The renames and literals that v5 drew from rare
pieces (`make_rows.py --rare-vocab`) are not counted: the model did not learn those pieces from
them (train/README.md, v5 run).

    python train/prune_vocab.py --tok app/strata/models/strata-tiny --corpus .devdata/corpus/train.jsonl.gz \\
        --min-count 1 --out /tmp/tok-pruned
Writes <out>/tokenizer.json (the pruned merges), <out>/tokenizer_config.json (copied) and
<out>/prune.json (N, the corpus counted, every pruned piece with its id and count).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "app"))

RUN_SEEDS = (2024, 2026, 2027)  # make_rows.py --seed of v2/v3, v4, v5


def merge_pairs(tj: dict) -> list[tuple[str, str]]:
    """The merges of a tokenizer.json as (left, right) pairs (either serialization)."""
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in tj["model"]["merges"]]


def training_texts(rows: list[dict], examples_every: int, seeds=RUN_SEEDS):
    """The text to count (module docstring): each file, then the edit examples and chats
    make_rows.work builds from every `examples_every`-th file, once per seed."""
    import chat_data
    import file_tasks
    from strata import prompts

    for row in rows:
        yield row["text"]
    if examples_every <= 0:
        return
    for seed in seeds:
        for row in rows[::examples_every]:
            if file_tasks.usable(row, file_tasks.MIN_CHARS, 15_000):
                for t in file_tasks.tasks_for_file(row, 1, seed * 100):
                    yield prompts.edit_example(t["filename"], t["original"], t["instruction"], t["rewritten"])
            yield from chat_data.chats_for_file(row, 2, seed * 100)


def count_tokens(tokenizer, texts, vocab_size: int, batch: int = 256) -> np.ndarray:
    """How often each id occurs as a final token when `texts` are encoded."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    buf: list[str] = []

    def flush():
        for e in tokenizer.encode_batch(buf, add_special_tokens=False):
            counts[:] += np.bincount(np.asarray(e.ids, dtype=np.int64), minlength=vocab_size)
        buf.clear()

    for text in texts:
        buf.append(text)
        if len(buf) >= batch:
            flush()
    flush()
    return counts


def needed_pieces(tj: dict, counts: np.ndarray, min_count: int, trained=None) -> set[str]:
    """The pieces to keep (module docstring), as vocabulary strings; `trained`: ids whose
    embedding rows were trained (kept whatever their count), or None."""
    vocab: dict[str, int] = tj["model"]["vocab"]
    pairs = merge_pairs(tj)
    outputs = {a + b for a, b in pairs}
    needed = {p for p in vocab if p not in outputs}  # the base alphabet
    needed |= {t["content"] for t in tj.get("added_tokens", [])}
    needed |= {p for p, i in vocab.items() if i < len(counts) and counts[i] >= min_count}
    if trained is not None:
        needed |= {p for p, i in vocab.items() if i in trained}
    changed = True
    while changed:  # one pass in reverse merge order suffices for a trained BPE; loop to be sure
        changed = False
        for a, b in reversed(pairs):
            if a + b in needed and not (a in needed and b in needed):
                needed |= {a, b}
                changed = True
    return needed


def trained_ids(model: Path, min_norm: float) -> set[int]:
    """The ids whose input-embedding row in `model` (a folder with model.safetensors) has a norm
    of at least `min_norm`."""
    from safetensors import safe_open

    with safe_open(str(model / "model.safetensors"), framework="pt") as f:
        name = next((k for k in f.keys() if k.endswith("embed_tokens.weight")), None)
        if name is None:
            raise SystemExit(f"{model}: no embed_tokens.weight in model.safetensors")
        norms = f.get_tensor(name).float().norm(dim=1).numpy()
    return set(np.flatnonzero(norms >= min_norm).tolist())


def prune(tj: dict, counts: np.ndarray, min_count: int, trained=None) -> tuple[dict, list[dict]]:
    """A copy of tokenizer.json `tj` without the merges whose output is not needed, and the
    pruned pieces ({"id", "piece", "count"}), by id."""
    vocab = tj["model"]["vocab"]
    pairs = merge_pairs(tj)
    for a, b in pairs:
        if a + b not in vocab or a not in vocab or b not in vocab:
            raise SystemExit(f"merge {a!r} + {b!r}: a piece that is not in the vocabulary")
    needed = needed_pieces(tj, counts, min_count, trained)
    out = json.loads(json.dumps(tj))
    merges = tj["model"]["merges"]
    out["model"]["merges"] = [m for m, (a, b) in zip(merges, pairs) if a + b in needed]
    gone = sorted({vocab[a + b] for a, b in pairs if a + b not in needed})
    inv = {i: p for p, i in vocab.items()}
    return out, [{"id": i, "piece": inv[i], "count": int(counts[i])} for i in gone]


def main() -> None:
    from tokenizers import Tokenizer

    from rewrite_tasks import iter_corpus

    ap = argparse.ArgumentParser()
    ap.add_argument("--tok", type=Path, required=True, help="folder with tokenizer.json (the unpruned one)")
    ap.add_argument("--corpus", type=Path, required=True, help="build_data.py's train.jsonl.gz")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--min-count", type=int, default=1, help="N: keep pieces seen at least this often")
    ap.add_argument("--examples-every", type=int, default=8,
                    help="count the edit examples and chats of every k-th file too (0: files only)")
    ap.add_argument("--counts", type=Path, help="a counts .npy to reuse (written there if it does not exist)")
    ap.add_argument("--model", type=Path, help="keep the pieces whose embedding rows this model trained (--min-norm)")
    ap.add_argument("--min-norm", type=float, default=0.8,
                    help="with --model: an input-embedding row norm at least this counts as trained")
    args = ap.parse_args()
    if args.min_count < 1:
        raise SystemExit("--min-count must be at least 1")
    src = args.tok / "tokenizer.json"
    tj = json.loads(src.read_text(encoding="utf-8"))
    if tj["model"].get("type") != "BPE" or tj["model"].get("ignore_merges"):
        raise SystemExit(f"{src}: not a BPE tokenizer that applies every merge")
    tokenizer = Tokenizer.from_file(str(src))
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    rows = list(iter_corpus(args.corpus))
    if args.counts and args.counts.is_file():
        counts = np.load(args.counts)
    else:
        counts = count_tokens(tokenizer, training_texts(rows, args.examples_every), vocab_size)
        if args.counts:
            np.save(args.counts, counts)
    trained = trained_ids(args.model, args.min_norm) if args.model else None
    pruned, gone = prune(tj, counts, args.min_count, trained)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tokenizer.json").write_text(json.dumps(pruned, ensure_ascii=False, indent=2), encoding="utf-8")
    if args.tok.resolve() != args.out.resolve():
        shutil.copy(args.tok / "tokenizer_config.json", args.out / "tokenizer_config.json")
    report = {"min_count": args.min_count, "model": str(args.model) if args.model else None,
              "min_norm": args.min_norm if args.model else None, "corpus": str(args.corpus), "corpus_files": len(rows),
              "examples_every": args.examples_every, "seeds": list(RUN_SEEDS),
              "tokens_counted": int(counts.sum()), "merges": len(tj["model"]["merges"]),
              "merges_kept": len(pruned["model"]["merges"]), "pruned": gone}
    (args.out / "prune.json").write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"N={args.min_count}: {len(gone)} of {len(tj['model']['merges'])} merges pruned "
          f"({int(counts.sum())} tokens counted over {len(rows)} files); e.g. "
          + ", ".join(repr(tokenizer.decode([g["id"]])) for g in gone[:12]))


if __name__ == "__main__":
    main()

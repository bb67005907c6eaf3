"""train/prune_vocab.py: merges whose pieces the counted text never produces are removed, the text
that was counted tokenizes exactly as before (N=1), a pruned piece is never produced again, text
still round-trips, and the pruned tokenizer loads and agrees in tokenizers, transformers,
strata's own Tokenizer and strata's GGUF tokenizer."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "train"))

import prune_vocab  # noqa: E402
from strata import prompts  # noqa: E402

MODEL = ROOT / "app" / "strata" / "models" / "strata-tiny"
# the counted "training text": a few of this repository's own modules and an edit example
COUNTED = [(ROOT / "train" / name).read_text(encoding="utf-8") for name in ("file_tasks.py", "chat_data.py")] + [
    prompts.edit_example("util.py", "import os\n", "Add `import sys`.", "import os\nimport sys\n")]
OTHER = [
    "import networkx as nx\n\nwith pytest.raises(nx.NetworkXError):\n    G = nx.DiGraph(multigraph=True)\n",
    "Ünïcödé: café, 日本語, emoji 🎉🚀\r\n\tindent  trailing   ",
    (ROOT / "README.md").read_text(encoding="utf-8")[:20000],
    (ROOT / "app" / "strata" / "tokenizer.py").read_text(encoding="utf-8"),
]


@pytest.fixture(scope="module")
def original():
    tj = json.loads((MODEL / "tokenizer.json").read_text(encoding="utf-8"))
    return tj, Tokenizer.from_str(json.dumps(tj))


def pruned_at(original, n):
    tj, tok = original
    counts = prune_vocab.count_tokens(tok, COUNTED, tok.get_vocab_size())
    out, gone = prune_vocab.prune(tj, counts, n)
    return out, Tokenizer.from_str(json.dumps(out)), gone, counts


def ids(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


def test_n1_keeps_the_counted_text_exactly_and_prunes_the_rest(original):
    tj, tok = original
    out, new, gone, counts = pruned_at(original, 1)
    assert len(gone) > 2000  # a small text uses few of the 7,930 merges
    assert len(out["model"]["merges"]) == len(tj["model"]["merges"]) - len(gone)
    assert out["model"]["vocab"] == tj["model"]["vocab"]  # ids (and the model's matrices) unchanged
    assert all(counts[g["id"]] == 0 and g["count"] == 0 for g in gone)
    for text in COUNTED:
        assert ids(new, text) == ids(tok, text)


@pytest.mark.parametrize("n", [1, 3])
def test_pruned_pieces_are_never_produced_and_text_round_trips(original, n):
    _, tok = original
    _, new, gone, _ = pruned_at(original, n)
    gone_ids = {g["id"] for g in gone}
    texts = COUNTED + OTHER + ["".join(g["piece"] for g in gone[:400])]
    texts.append(tok.decode(sorted(gone_ids)[:400]))  # the pruned pieces' own text, back to back
    changed = 0
    for text in texts:
        got = ids(new, text)
        assert not gone_ids & set(got), text[:60]
        assert new.decode(got, skip_special_tokens=False) == text
        changed += got != ids(tok, text)
    assert changed >= 2


def test_n_above_1_changes_only_words_that_had_a_pruned_piece(original):
    """Word by word (the pre-tokenizer's pieces): a word whose old encoding used no pruned piece
    encodes as before; the words that did use one now encode without it."""
    _, tok = original
    _, new, gone, counts = pruned_at(original, 3)
    gone_ids = {g["id"] for g in gone}
    assert any(0 < counts[i] < 3 for i in gone_ids)  # N=3 prunes pieces the text does use
    old_model, new_model = tok.model, new.model
    had, same = 0, 0
    for text in COUNTED + OTHER:
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(text):
            before = [t.id for t in old_model.tokenize(word)]
            after = [t.id for t in new_model.tokenize(word)]
            if gone_ids & set(before):
                had += 1
                assert before != after and not gone_ids & set(after)
            else:
                same += 1
                assert before == after, word
    assert had > 0 and same > 0


def test_kept_merges_are_closed_and_special_tokens_stay(original):
    tj, _ = original
    out, new, gone, counts = pruned_at(original, 2)
    pairs = prune_vocab.merge_pairs(out)
    made = {a + b for a, b in prune_vocab.merge_pairs(tj)}
    kept_outputs = {a + b for a, b in pairs}
    for a, b in pairs:  # every input of a kept merge is a base piece or made by a kept merge
        for part in (a, b):
            assert part not in made or part in kept_outputs, part
    for i, special in enumerate(prompts.SPECIAL_TOKENS):
        assert new.token_to_id(special) == i
    text = prompts.edit_example("a.py", "x = 1\n", "Leave it.", "x = 1\n")
    assert ids(new, text)[0] == new.token_to_id(prompts.FILE)


def write_folder(folder: Path, tokenizer_json: dict) -> Path:
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json, ensure_ascii=False), encoding="utf-8")
    shutil.copy(MODEL / "tokenizer_config.json", folder / "tokenizer_config.json")
    return folder


def test_pruned_tokenizer_agrees_in_transformers_strata_and_gguf(original, tmp_path):
    from gguf import GGUFWriter
    from transformers import AutoTokenizer

    from gguf_helpers import add_tokenizer
    from strata.gguf import load_tokenizer, open_gguf
    from strata.tokenizer import Tokenizer as StrataTokenizer

    out, new, gone, _ = pruned_at(original, 1)
    folder = write_folder(tmp_path / "tok", out)
    hf = AutoTokenizer.from_pretrained(str(folder))
    ours = StrataTokenizer.from_folder(folder)
    path = str(tmp_path / "tok.gguf")
    w = GGUFWriter(path, "qwen3moe")
    add_tokenizer(w, str(folder / "tokenizer.json"), None, pre="gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    from_gguf = load_tokenizer(open_gguf(path))
    for text in COUNTED + OTHER:
        want = ids(new, text)
        assert hf.encode(text, add_special_tokens=False) == want
        assert ours.encode(text) == want
        assert from_gguf.encode(text) == want
        assert hf.decode(want) == ours.decode(want) == text


def test_cli_writes_the_pruned_folder_and_its_record(tmp_path, original):
    corpus = tmp_path / "train.jsonl.gz"
    with gzip.open(corpus, "wt") as f:
        for i, text in enumerate(COUNTED):
            f.write(json.dumps({"path": f"pkg/m{i}.py", "source": "t", "text": text, "sha256": str(i)}) + "\n")
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "train" / "prune_vocab.py"), "--tok", str(MODEL), "--corpus", str(corpus),
           "--out", str(out), "--min-count", "1", "--examples-every", "0", "--counts", str(tmp_path / "c.npy")]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    record = json.loads((out / "prune.json").read_text(encoding="utf-8"))
    pruned, _, gone, _ = pruned_at(original, 1)
    assert [g["id"] for g in record["pruned"]] == [g["id"] for g in gone]
    assert record["corpus_files"] == len(COUNTED) and record["min_count"] == 1
    assert json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))["model"]["merges"] == \
        pruned["model"]["merges"]
    assert np.load(tmp_path / "c.npy").sum() == record["tokens_counted"]
    assert (out / "tokenizer_config.json").read_bytes() == (MODEL / "tokenizer_config.json").read_bytes()
    bad = subprocess.run(cmd[:-4] + ["--min-count", "0"], capture_output=True, text=True)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1] == "--min-count must be at least 1"


def test_trained_rows_are_kept_whatever_their_count(original):
    tj, tok = original
    _, _, gone, counts = pruned_at(original, 1)
    keep = {g["id"] for g in gone[::2]}
    out, still_gone = prune_vocab.prune(tj, counts, 1, trained=keep)
    assert {g["id"] for g in still_gone} == {g["id"] for g in gone} - keep - closure_inputs(tj, keep)
    new = Tokenizer.from_str(json.dumps(out))
    for i in sorted(keep)[:50]:  # a kept piece's own text encodes to it again
        assert ids(new, tok.decode([i])) == ids(tok, tok.decode([i]))
    vocab_size = tok.get_vocab_size()
    assert prune_vocab.trained_ids(MODEL, 0.0) == set(range(vocab_size))
    assert prune_vocab.trained_ids(MODEL, 1e9) == set()


def closure_inputs(tj, keep):
    """The pieces (ids) that the kept ones are made of, recursively."""
    vocab = tj["model"]["vocab"]
    made_of = {a + b: (a, b) for a, b in prune_vocab.merge_pairs(tj)}
    inv = {i: p for p, i in vocab.items()}
    out, todo = set(), [inv[i] for i in keep]
    while todo:
        for part in made_of.get(todo.pop(), ()):
            if vocab[part] not in out:
                out.add(vocab[part])
                todo.append(part)
    return out


def test_the_bundled_tokenizer_is_the_recorded_pruning():
    """The shipped tokenizer.json is v5's with the merges of train/runs/prune/prune.json removed:
    none of those pieces is made by a merge or produced by encoding, even from their own text."""
    record = json.loads((ROOT / "train" / "runs" / "prune" / "prune.json").read_text(encoding="utf-8"))
    tj, tok = (json.loads((MODEL / "tokenizer.json").read_text(encoding="utf-8")),
               Tokenizer.from_file(str(MODEL / "tokenizer.json")))
    assert len(tj["model"]["merges"]) == record["merges_kept"] == record["merges"] - len(record["pruned"])
    gone = {g["id"] for g in record["pruned"]}
    assert {tj["model"]["vocab"][g["piece"]] for g in record["pruned"]} == gone
    assert not {a + b for a, b in prune_vocab.merge_pairs(tj)} & {g["piece"] for g in record["pruned"]}
    text = tok.decode(sorted(gone)) + "\nraise nx.NetworkXError('not a multigraph')\n"
    got = ids(tok, text)
    assert not gone & set(got) and tok.decode(got) == text

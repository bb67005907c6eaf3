"""strata-tiny's training recipe (train/): whole-file edit tasks have exactly the rewrite their
instruction asks for, instructions vary, the held-out split is by package, conversations are
in the model's own chat template, and packed rows keep every example whole."""
from __future__ import annotations

import ast
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))

import build_data  # noqa: E402
import chat_data  # noqa: E402
import file_tasks  # noqa: E402
import make_rows  # noqa: E402
import phrasing  # noqa: E402
from strata import prompts  # noqa: E402

MODULE = '''"""A small module to edit."""
import sys
import os
import json
from pathlib import Path

LIMIT = 42
GREETING = "hello"


def load_config(path, default=None):
    """Read the JSON config at path."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def scale_values(values, factor):
    result = []
    for value in values:
        result.append(value * factor)
    return result


class Counter:
    def __init__(self, start):
        self.count = start

    def increment(self, step=1):
        self.count += step
        return self.count

    def reset(self):
        self.count = 0


def main(argv):
    counter = Counter(LIMIT)
    print(GREETING, counter.increment(), os.getcwd(), Path(argv[0]).name)
    return scale_values([1, 2, 3], 2)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''


def names(text):
    out = set()
    for n in ast.walk(ast.parse(text)):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            out.add(n.name)
    return out


def tasks_of(kind, seeds=range(40)):
    out = []
    for seed in seeds:
        t = file_tasks.make_task(MODULE, kind, random.Random(seed))
        if t is not None:
            out.append(t)
    assert out, f"no {kind} task on the sample module"
    return out


@pytest.mark.parametrize("kind", file_tasks.KINDS)
def test_every_kind_applies_and_the_rewrite_parses(kind):
    for instr, rewritten, specs in tasks_of(kind):
        ast.parse(rewritten)
        assert instr.strip() and "\n" not in instr
        assert (rewritten == MODULE) == (kind == "unchanged")
        if kind == "multi":
            assert len(specs) >= 2


def test_each_edit_does_exactly_what_its_spec_says():
    lines = MODULE.splitlines()
    for kind in file_tasks.SINGLE_KINDS:
        for _, out, (spec,) in tasks_of(kind):
            new_lines = out.splitlines()
            if kind == "rename":
                assert spec["old"] not in names(out) and spec["new"] in names(out)
                assert re.sub(rf"\b{re.escape(spec['new'])}\b", spec["old"], out) == MODULE
            elif kind == "add_import":
                assert new_lines.count(spec["stmt"]) == 1 and spec["stmt"] not in lines
                assert len(new_lines) == len(lines) + 1
            elif kind == "delete_import":
                assert spec["stmt"] in lines and spec["stmt"] not in new_lines
                assert len(new_lines) == len(lines) - 1
            elif kind == "sort_imports":
                block = [line for line in new_lines[1:6] if line.startswith(("import", "from"))]
                assert block == sorted(block) and sorted(new_lines) == sorted(lines)
            elif kind == "delete_function":
                assert f"def {spec['name']}(" in MODULE and f"def {spec['name']}(" not in out
            elif kind == "add_docstring":
                assert f'"""{spec["d"]}"""' in out and len(new_lines) == len(lines) + 1
            elif kind == "add_function":
                assert out.startswith(MODULE.rstrip("\n")) and f"def {spec['sig']}:" in out
            elif kind == "literal":
                assert MODULE.count(spec["old"]) == 1
                start = MODULE.index(spec["old"])
                assert out == MODULE[:start] + spec["new"] + MODULE[start + len(spec["old"]):]


def test_instructions_come_in_many_phrasings_and_name_the_right_things():
    seen = set()
    for seed in range(300):
        rng = random.Random(seed)
        spec = {"kind": "rename", "old": "scale_values", "new": "scaled", "what": "function"}
        text = phrasing.phrase([spec], rng)
        assert "scale_values" in text and "scaled" in text
        seen.add(text)
    assert len(seen) > 150
    lowered = [s for s in seen if s == s.lower()]
    ticked = [s for s in seen if "`scale_values`" in s]
    assert lowered and ticked and len(ticked) < len(seen)


def test_openers_only_go_before_requests():
    for seed in range(200):
        text = phrasing.finish("x -> y", random.Random(seed))
        assert text.startswith("x -> y")
    assert phrasing.is_request("rename a to b") and not phrasing.is_request("no changes")


def test_heldout_split_is_by_package_and_vendored_copies_are_dropped():
    assert build_data.is_heldout("rich-15.0.0/rich/console.py")
    assert build_data.is_heldout("Jinja2-3.1.6/jinja2/lexer.py")
    assert build_data.is_heldout("stdlib/email/message.py")
    assert build_data.is_heldout("stdlib/test/test_asyncio/test_tasks.py")
    assert build_data.is_heldout("stdlib/zipfile.py")
    assert not build_data.is_heldout("stdlib/json/__init__.py")
    assert not build_data.is_heldout("richtext-1.0/richtext/x.py")
    assert not build_data.is_heldout("numpy-2.0.0/numpy/core/fromnumeric.py")
    assert build_data.VENDORED.search("pip/_vendor/rich/console.py")
    assert not build_data.VENDORED.search("vendor_tools/x.py")


def test_conversations_use_the_models_chat_template():
    jinja2 = pytest.importorskip("jinja2.sandbox")
    row = {"path": "demo-1.0/demo/config.py", "text": MODULE, "sha256": "ab" * 32}
    convs = [c for seed in range(30) for c in chat_data.chats_for_file(row, 2, seed)]
    assert convs
    env = jinja2.ImmutableSandboxedEnvironment()
    for text in convs:
        assert text.endswith(prompts.IM_END + "\n" + prompts.ENDOFTEXT)
        turns = re.findall(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>\n", text, re.S)
        msgs = [{"role": r, "content": c} for r, c in turns]
        assert msgs[-1]["role"] == "assistant"
        rendered = env.from_string(prompts.CHAT_TEMPLATE).render(messages=msgs, add_generation_prompt=False)
        assert rendered + prompts.ENDOFTEXT == text
    answers = " ".join(convs)
    assert "`load_config(path, default=None)` reads the JSON config at path." in answers or \
        "def load_config(path, default=None):" in answers


def test_packed_rows_keep_examples_whole_and_start_rows_with_one():
    packer = make_rows.Packer(width=64, eos=0, code_row_frac=0.2, seed=3)
    for i in range(40):
        packer.add_code(np.arange(1, 30, dtype=np.uint16) + i)
    examples = [np.full(n, 1000 + n, dtype=np.uint16) for n in (10, 50, 30, 64, 7, 80, 33, 20)]
    for ex in examples:
        packer.add_example(ex, "edit")
    packer.close()
    assert packer.stats["dropped_long"] == 1  # the 80-token example does not fit a row
    assert all(len(r) == 64 for r in packer.rows)
    starts = [int(r[0]) for r in packer.rows if int(r[0]) >= 1000]
    assert starts and all(s - 1000 in (10, 50, 30, 64, 7, 33, 20) for s in starts)
    flat = np.concatenate(packer.rows)
    for ex in examples[:5] + examples[6:]:
        hits = np.flatnonzero(flat == ex[0])
        assert len(hits) == len(ex), "an example was split across rows or lost"


def test_training_config_is_the_shipped_model_and_strata_reads_it():
    """train.py's model config is the shape that ships (a hybrid: >= 2 DeltaNet layers, attention
    in the rest, an explicit layer_types list), and strata's config reader accepts it."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import json

    import train
    from strata.config import normalize, read_config_json
    from strata.models import bundled_model_path
    from tokenizers import Tokenizer

    folder = bundled_model_path()
    cfg = train.make_config(Tokenizer.from_file(str(folder / "tokenizer.json"))).to_dict()
    shipped = json.loads((folder / "config.json").read_text())
    for key in ("hidden_size", "num_hidden_layers", "layer_types", "num_experts", "num_experts_per_tok",
                "moe_intermediate_size", "shared_expert_intermediate_size", "linear_num_value_heads",
                "num_attention_heads", "num_key_value_heads", "vocab_size", "eos_token_id"):
        assert cfg[key] == shipped[key], key
    types = cfg["layer_types"]
    assert types.count("linear_attention") >= 2 and types.count("full_attention") == 8
    assert normalize(read_config_json(folder))["layer_types"] == types


def test_answer_only_loss_masks_prompts_and_user_turns_but_not_code():
    """--loss-on answer: an edit example's file + instruction and a chat's system/user turns carry
    no loss; the rewrite, its <|endoftext|>, assistant replies with <|im_end|>, and the code that
    tops a row up (or a whole code row) do."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import train
    from strata.models import bundled_model_path
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
    ids = train.prompt_ids(tok)
    edit = prompts.edit_example("a.py", "import os\nx = 1\n", "add import sys", "import os\nimport sys\nx = 1\n")
    chat = chat_data.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q one?"},
                             {"role": "assistant", "content": "A one."}, {"role": "user", "content": "Q two?"},
                             {"role": "assistant", "content": "A two."}])
    code = "def f(a):\n    return a + 1\n"
    cases = [(edit + code, "import os\nimport sys\nx = 1\n" + prompts.ENDOFTEXT + code),
             (chat + code, "A one." + prompts.IM_END + "\nA two." + prompts.IM_END + "\n" + prompts.ENDOFTEXT + code),
             (edit + chat, "import os\nimport sys\nx = 1\n" + prompts.ENDOFTEXT
              + "A one." + prompts.IM_END + "\nA two." + prompts.IM_END + "\n" + prompts.ENDOFTEXT)]
    rows = [tok.encode(text).ids for text, _ in cases]
    width = max(map(len, rows)) + 5
    batch = torch.tensor([r + [ids["eos"]] * (width - len(r)) for r in rows])  # padding: code-like, full loss
    mask = train.loss_mask(batch, ids)
    assert mask.shape == (len(rows), width - 1)
    for i, (_, want) in enumerate(cases):
        kept = [int(t) for t, k in zip(batch[i, 1:], mask[i]) if k]
        n = len(rows[i]) - 1
        assert tok.decode(kept[: len(kept) - (width - len(rows[i]))], skip_special_tokens=False) == want
        assert mask[i, n:].all()
    plain = torch.tensor([tok.encode(code * 3).ids])
    assert train.loss_mask(plain, ids).all()  # a pure code row keeps its whole loss


def _marked(tok, original, rewritten, after=0):
    ex = prompts.edit_example("a.py", original, "do it", rewritten)
    start = len(prompts.edit_prompt("a.py", original, "do it"))
    enc = tok.encode(ex)
    marks = make_rows.change_marks(enc.offsets, start, make_rows.changed_spans(original, rewritten), after)
    return enc, marks


def test_change_marks_land_on_exactly_the_changed_tokens():
    """make_rows marks an edit's rewrite (1) and, within it, the tokens that carry a change (2):
    an added line, a renamed identifier, a changed literal, the first token after a deletion
    (plus --mark-after tokens); nothing in the prompt and nothing for "leave unchanged"."""
    from strata.models import bundled_model_path
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
    src = "import os\nimport sys\n\n\ndef foo(a):\n    x = 10\n    return foo(a) + x\n"
    cases = [
        ("import os\nimport math\nimport sys\n\n\ndef foo(a):\n    x = 10\n    return foo(a) + x\n", ["import", " math", "\n"]),
        (src.replace("foo", "bar_baz"), [" bar", "_", "baz", " bar", "_", "baz"]),
        (src.replace("10", "11"), [" 11"]),
        (src.replace("import sys\n", ""), ["\n\n"]),  # the blank lines now follow "import os\n"
        (src, []),
    ]
    for rewritten, want in cases:
        enc, marks = _marked(tok, src, rewritten)
        assert len(marks) == len(enc.ids)
        changed = [tok.decode([t], skip_special_tokens=False) for t, m in zip(enc.ids, marks) if m == 2]
        assert changed == want, (rewritten, changed)
        rewrite = [t for t, m in zip(enc.ids, marks) if m > 0]
        assert tok.decode(rewrite, skip_special_tokens=False) == rewritten + prompts.ENDOFTEXT
        assert marks[0] == 0 and (marks[: len(enc.ids) - len(rewrite)] == 0).all()
    # --mark-after: the tokens right after each change are marked too, and no others
    enc, marks = _marked(tok, src, src.replace("10", "11"), after=2)
    pos = np.flatnonzero(marks == 2)
    assert len(pos) == 3 and tok.decode([enc.ids[pos[0]]]) == " 11" and list(pos) == list(range(pos[0], pos[0] + 3))
    # a deletion at the very end marks the <|endoftext|> (stopping there is the change)
    enc, marks = _marked(tok, "x = 1\ny = 2\n", "x = 1\n")
    assert [enc.ids[i] for i in np.flatnonzero(marks == 2)] == [tok.token_to_id(prompts.ENDOFTEXT)]


def test_change_marks_take_the_newline_run_at_each_join():
    """v7: given the example's text, change_marks also marks the whitespace tokens with a newline
    right before and right after each changed run (BPE's `\n`, `\n\n`, `\n\n    ` at a join
    depend on the change); without the text, marks are as before."""
    from strata.models import bundled_model_path
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
    src = "import os\nimport sys\n\n\ndef foo(a):\n    x = 10\n    return foo(a) + x\n"
    cls = "class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n"
    cases = [
        (src, src.replace("import sys\n", "import math\nimport sys\n"), ["\n", "import", " math", "\n"]),
        (src, src.replace("import sys\n", ""), ["\n\n", "\n"]),
        (src, src.replace("foo", "bar_baz"), [" bar", "_", "baz", " bar", "_", "baz"]),  # no newline next to them
        (src, src, []),
        ("x = 1\ny = 2\n", "x = 1\n", ["\n", prompts.ENDOFTEXT]),  # the file now ends after "1\n"
        (cls, cls.replace("\n\n    def g(self):\n        return 2\n", "\n"), ["\n", prompts.ENDOFTEXT]),
    ]
    for original, rewritten, want in cases:
        ex = prompts.edit_example("a.py", original, "do it", rewritten)
        start = len(prompts.edit_prompt("a.py", original, "do it"))
        enc = tok.encode(ex)
        spans = make_rows.changed_spans(original, rewritten)
        marks = make_rows.change_marks(enc.offsets, start, spans, 0, ex)
        changed = [tok.decode([t], skip_special_tokens=False) for t, m in zip(enc.ids, marks) if m >= 2]
        assert changed == want, (rewritten, changed)
        plain = make_rows.change_marks(enc.offsets, start, spans, 0)
        assert ((marks >= 2) >= (plain == 2)).all() and ((marks > 0) == (plain > 0)).all()
        # v8: the tokens the text added are MARK_JOIN (3), newline runs only; the rest stay 2
        assert np.array_equal(marks == 3, (marks >= 2) & (plain != 2))
        assert all(not tok.decode([t], skip_special_tokens=False).strip()
                   for t, m in zip(enc.ids, marks) if m == 3)
    # the rewrite's first token is never extended back into the prompt
    ex = prompts.edit_example("a.py", "x = 1\n", "do it", "\nx = 1\n")
    start = len(prompts.edit_prompt("a.py", "x = 1\n", "do it"))
    enc = tok.encode(ex)
    marks = make_rows.change_marks(enc.offsets, start, make_rows.changed_spans("x = 1\n", "\nx = 1\n"), 0, ex)
    assert (marks[: int(np.flatnonzero(marks)[0])] == 0).all() and tok.decode(
        [t for t, m in zip(enc.ids, marks) if m > 0], skip_special_tokens=False) == "\nx = 1\n" + prompts.ENDOFTEXT


RENAME_MODULE = '''"""Helpers around parse_header."""
__all__ = ["parse_header", "Reader"]


def parse_header(line):
    # parse_header splits one line
    return line.split(":")


class Reader:
    """Reads headers with parse_header."""

    def read(self, stream):
        fn = getattr(self, "parse_header", None)
        return [parse_header(x) for x in stream], fn
'''


def test_rename_reaches_strings_and_comments_unless_the_name_is_a_plain_word():
    """v7: a rename also renames the name in `__all__` and getattr-style strings and in comment
    and docstring mentions; a plain lowercase word that a comment or string has ("line") is
    never picked, since there the word may be meant."""
    toks = file_tasks.tokens_of(RENAME_MODULE)
    tree = ast.parse(RENAME_MODULE)
    seen = {}
    for seed in range(80):
        r = file_tasks.rename(RENAME_MODULE, tree, toks, random.Random(seed))
        assert r is not None
        spec, out = r
        ast.parse(out)
        assert spec["old"] != "line"
        assert not re.search(rf"(?<!\w){re.escape(spec['old'])}(?!\w)", out)
        assert re.sub(rf"(?<!\w){re.escape(spec['new'])}(?!\w)", spec["old"], out) == RENAME_MODULE
        seen[spec["old"]] = (spec["new"], out)
    assert {"parse_header", "Reader"} <= set(seen)
    # the two docstrings, __all__, the def, the comment, getattr's string, the call
    new, out = seen["parse_header"]
    assert RENAME_MODULE.count("parse_header") == 7 and out.count(new) == 7
    new, out = seen["Reader"]
    assert f'__all__ = ["parse_header", "{new}"]' in out and "class Reader" not in out


FOREIGN_ATTRIBUTE_MODULE = '''def render(lines, line_style, max_width):
    out = []
    for line in lines:
        chosen = line_style if line_style == line.next_style else line.line_style
        out.append((line, chosen, max_width))
    return out


class Box:
    def __init__(self, box_width):
        self.box_width = box_width

    def grow(self, options):
        return self.box_width + options.max_width
'''


def test_rename_skips_names_that_the_file_reads_as_another_objects_attribute():
    """v9: `line_style` is a parameter here and `line.line_style` another object's attribute, so
    "rename line_style everywhere" is ambiguous and never asked (nor `max_width`, read as
    `options.max_width`); `box_width`, read as `self.box_width` only, is."""
    toks = file_tasks.tokens_of(FOREIGN_ATTRIBUTE_MODULE)
    tree = ast.parse(FOREIGN_ATTRIBUTE_MODULE)
    picked = set()
    for seed in range(120):
        spec, out = file_tasks.rename(FOREIGN_ATTRIBUTE_MODULE, tree, toks, random.Random(seed))
        picked.add(spec["old"])
        assert re.search(r"\.line_style\b", out) and re.search(r"\.max_width\b", out)
    assert not picked & {"line_style", "max_width"} and {"box_width", "render", "Box"} <= picked


SIZES = (10, 50, 30, 7, 33, 20)


def _packed():
    """A Packer fed code, edits of SIZES (marks and copies on their second half) and chats."""
    packer = make_rows.Packer(width=64, eos=0, code_row_frac=0.3, seed=5)
    for i in range(30):
        packer.add_code(np.arange(1, 30, dtype=np.uint16) + i)
    for n in SIZES:
        marks = np.zeros(n, dtype=np.uint8)
        marks[n // 2:] = 1
        marks[n - 2] = 2
        copies = np.where(marks > 0, 2000 + n, make_rows.NO_COPY).astype(np.uint16)
        packer.add_example(np.full(n, 1000 + n, dtype=np.uint16), "edit", marks, copies)
        packer.add_example(np.full(5, 3000, dtype=np.uint16), "chat")
    packer.close()
    return packer


def test_packer_keeps_marks_and_copies_aligned_with_tokens():
    packer = _packed()
    assert len(packer.rows) == len(packer.marks) == len(packer.copies)
    for row, marks, copies in zip(packer.rows, packer.marks, packer.copies):
        assert row.shape == marks.shape == copies.shape == (64,)
        for n in SIZES:
            at = np.flatnonzero(row == 1000 + n)
            if len(at):
                assert list(marks[at]) == [0] * (n // 2) + [1] * (n - n // 2 - 2) + [2, 1]
                assert list(copies[at]) == [make_rows.NO_COPY] * (n // 2) + [2000 + n] * (n - n // 2)
        assert not marks[row == 3000].any() and not marks[row < 1000].any()
        assert (copies[row == 3000] == make_rows.NO_COPY).all() and (copies[row < 1000] == make_rows.NO_COPY).all()


def test_changed_tokens_weigh_more_in_the_loss():
    """train.loss_weights: changed_weight on marked changed tokens, 1 on copied rewrite tokens,
    code_weight on other answer tokens, 0 where the prompt mask says so; with marks from a real
    edit example the weighted labels are exactly the changed tokens."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import train
    from strata.models import bundled_model_path
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
    ids = train.prompt_ids(tok)
    src = "import os\nx = 1\n\n\ndef f():\n    return x\n"
    new = "import os\nimport math\nx = 1\n\n\ndef f():\n    return x\n"
    enc, marks = _marked(tok, src, new)
    code = tok.encode("def g(a):\n    return a\n").ids
    row = torch.tensor([enc.ids + code])
    m = torch.from_numpy(np.concatenate([marks, np.zeros(len(code), dtype=np.uint8)]).astype(np.int64))[None]
    keep = train.loss_mask(row, ids)
    w = train.loss_weights(keep, m[:, 1:], 8.0, 0.5)
    labels = row[0, 1:]
    heavy = [int(t) for t, x in zip(labels, w[0]) if x == 8.0]
    assert tok.decode(heavy) == "import math\n"
    one = [int(t) for t, x in zip(labels, w[0]) if x == 1.0]
    assert tok.decode(one, skip_special_tokens=False) == "import os\nx = 1\n\n\ndef f():\n    return x\n" + prompts.ENDOFTEXT
    half = [int(t) for t, x in zip(labels, w[0]) if x == 0.5]
    assert tok.decode(half) == "def g(a):\n    return a\n"
    assert (w[0][~keep[0]] == 0).all() and set(w[0].tolist()) == {0.0, 0.5, 1.0, 8.0}
    # the default objective (weights 1) is the plain answer mask
    assert torch.equal(train.loss_weights(keep, m[:, 1:], 1.0, 1.0), keep.float())
    # v8: the join marks (3, given the text) weigh --join-weight, by default --changed-weight
    ex = prompts.edit_example("a.py", src, "do it", new)
    jm = make_rows.change_marks(enc.offsets, len(prompts.edit_prompt("a.py", src, "do it")),
                                make_rows.changed_spans(src, new), 0, ex)
    mj = torch.from_numpy(np.concatenate([jm, np.zeros(len(code), dtype=np.uint8)]).astype(np.int64))[None]
    wj = train.loss_weights(keep, mj[:, 1:], 8.0, 0.5, 12.0)
    joins = [int(t) for t, x in zip(labels, wj[0]) if x == 12.0]
    assert joins and all(not tok.decode([t]).strip() for t in joins)
    assert torch.equal(train.loss_weights(keep, mj[:, 1:], 8.0, 0.5), torch.where(mj[:, 1:] == 3, 8.0, wj) * keep)
    assert torch.equal(train.loss_weights(keep, mj[:, 1:], 8.0, 0.5, 12.0)[mj[:, 1:] != 3],
                       train.loss_weights(keep, m[:, 1:], 8.0, 0.5)[mj[:, 1:] != 3])


def test_rare_vocabulary_pieces_become_new_names_and_literals_only_when_asked():
    """v5: renames and string literals may take rare vocabulary pieces (tokens that never occur
    in the training rows, e.g. held-out packages' names) as new values, so that every token is
    trained as something to copy; the edit still does exactly what its spec says. Without
    `vocab` (the held-out tasks) nothing changes, draw for draw."""
    vocab = ("NetworkXError", " multigraph", "DiGraph", "\u2581\u2581\u2581\u2581", "\x07", "it's")
    got = {"rename": set(), "literal": set()}
    for seed in range(120):
        for kind in ("rename", "literal"):
            t = file_tasks.make_task(MODULE, kind, random.Random(seed), vocab)
            plain = file_tasks.make_task(MODULE, kind, random.Random(seed))
            assert plain == file_tasks.make_task(MODULE, kind, random.Random(seed), ())
            if t is None:
                continue
            _, out, (spec,) = t
            ast.parse(out)
            if kind == "rename":
                assert spec["old"] not in names(out) and spec["new"] in names(out)
                assert re.sub(rf"\b{re.escape(spec['new'])}\b", spec["old"], out) == MODULE
                got[kind].update(v.strip() for v in vocab if v.strip() in spec["new"])
            elif spec["what"] == "string":
                start = MODULE.index(spec["old"])
                assert out == MODULE[:start] + spec["new"] + MODULE[start + len(spec["old"]):]
                got[kind].update(v for v in vocab if spec["new"][1:-1] == v)
    assert got["rename"] >= {"NetworkXError", "multigraph", "DiGraph"}
    assert "\u2581\u2581\u2581\u2581" in got["literal"] and "\x07" not in got["literal"] and "it's" not in got["literal"]
    # the held-out evaluation tasks never pass a vocabulary: same tasks as without one
    row = {"path": "pkg/mod.py", "text": MODULE, "sha256": "0" * 64}
    assert file_tasks.tasks_for_file(row, 2, 777) == file_tasks.tasks_for_file(row, 2, 777, vocab=())


def test_rare_vocab_finds_the_pieces_a_corpus_never_uses():
    from strata.models import bundled_model_path
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
    texts = ["def f(x):\n    return x + 1\n", "import os\nprint(os.getcwd())\n"] * 3
    rare = make_rows.rare_vocab(tok, texts, 0)
    used = {tok.decode([i]) for t in texts for i in tok.encode(t).ids}
    assert rare and not used & set(rare)
    assert not set(prompts.SPECIAL_TOKENS) & set(rare)
    assert all("\ufffd" not in r and r.strip() for r in rare)
    assert len(rare) > tok.get_vocab_size() // 2  # nearly everything is rare in six lines
    # every piece occurs at most 10**9 times: all of them but the whitespace-only ones
    assert set(make_rows.rare_vocab(tok, texts, 10**9)) >= {u for u in used if u.strip()}


def test_scrambled_files_rename_names_consistently_and_still_parse():
    """v6 (make_rows --p-scramble): a scrambled file is the same file token for token, with a
    share of its names replaced by other names, one new name per old name everywhere (strings
    and comments too), so copying is the only way to reproduce it; keywords, dunders, builtins,
    self/cls and the names a file does not have are never touched."""
    pool = ["graph_node", "Widget", "matching", "bipartite", "frobnicate", "for", "9bad"]
    seen = set()
    for seed in range(40):
        out = file_tasks.scramble_names(MODULE, random.Random(seed), pool, share=0.5)
        if out is None:
            continue
        ast.parse(out)
        a = [t for t in file_tasks.tokens_of(MODULE) if t.type != 4]
        b = [t for t in file_tasks.tokens_of(out) if t.type != 4]
        assert [t.type for t in a] == [t.type for t in b]
        mapping = {}
        for ta, tb in zip(a, b):
            if ta.type == 1 and ta.string != tb.string:  # NAME
                assert mapping.setdefault(ta.string, tb.string) == tb.string
                assert ta.string not in ("self", "cls", "open", "def", "return") and len(ta.string) >= 3
                assert not (ta.string.startswith("__") and ta.string.endswith("__"))
        assert mapping and len(set(mapping.values())) == len(mapping)
        assert not set(mapping.values()) & set(file_tasks._IDENT.findall(MODULE))
        assert all(any(p.lower() in new.lower() for p in pool[:5]) for new in mapping.values())
        for old, new in mapping.items():  # whole words only, everywhere
            assert not re.search(rf"(?<!\w){re.escape(old)}(?!\w)", out)
            assert len(re.findall(rf"(?<!\w){re.escape(new)}(?!\w)", out)) == \
                len(re.findall(rf"(?<!\w){re.escape(old)}(?!\w)", MODULE))
        seen.update(mapping)
    assert {"load_config", "LIMIT", "path"} <= seen
    assert file_tasks.scramble_names(MODULE, random.Random(0), [], share=1.0) is None
    assert file_tasks.scramble_names("def f(:\n", random.Random(0), pool, share=1.0) is None


def test_producer_scrambles_only_when_asked():
    """make_rows.work with --p-scramble 0 makes the same examples as before it existed; with 1,
    every edit example is on a scrambled copy of its file (counted as "scrambled")."""
    make_rows._init(str(Path(__file__).resolve().parent.parent / "app/strata/models/strata-tiny/tokenizer.json"))
    rows = [{"path": f"pkg/m{i}.py", "text": MODULE.replace("LIMIT", f"LIMIT{i}"), "sha256": f"{i:064d}"}
            for i in range(3)]
    base = (rows, 7, 0.35, 0.0, 1, 0.0, 24_000, 2, ())
    plain = make_rows.work(base + (0.0,))
    mixed = make_rows.work(base + (1.0,))
    assert "scrambled" not in plain[3] and mixed[3]["scrambled"] == len(mixed[0]) > 0
    assert plain[0] and all(file_tasks.usable(r, 0, 10**6) for r in rows)
    tok = make_rows._TOK
    for ids, *_ in mixed[0]:
        text = tok.decode(ids.tolist(), skip_special_tokens=False)
        assert not any(r["text"] in text for r in rows)
    for ids, *_ in plain[0]:
        assert any(r["text"] in tok.decode(ids.tolist(), skip_special_tokens=False) for r in rows)


def test_producer_marks_the_newline_run_at_joins():
    """make_rows.work hands each example's text to change_marks (v7), so the producer's marks
    are the join-extended ones: the same as change_marks with the text, never fewer than without."""
    make_rows._init(str(Path(__file__).resolve().parent.parent / "app/strata/models/strata-tiny/tokenizer.json"))
    rows = [{"path": f"pkg/m{i}.py", "text": MODULE.replace("LIMIT", f"LIMIT{i}"), "sha256": f"{i:064d}"}
            for i in range(6)]
    edits = make_rows.work((rows, 11, 0.35, 0.0, 1, 0.0, 24_000, 0, (), 0.0))[0]
    tok = make_rows._TOK
    extended = 0
    for ids, marks, copies in edits:
        assert copies is None  # only with --copies
        text = tok.decode(ids.tolist(), skip_special_tokens=False)
        enc = tok.encode(text)
        assert enc.ids == ids.tolist()
        cut = text.rindex(prompts.REWRITE) + len(prompts.REWRITE)
        prompt, rewritten = text[:cut], text[cut:-len(prompts.ENDOFTEXT)]
        original = next(r["text"] for r in rows if r["text"] in prompt)
        spans = make_rows.changed_spans(original, rewritten)
        assert np.array_equal(marks, make_rows.change_marks(enc.offsets, cut, spans, 0, text))
        plain = make_rows.change_marks(enc.offsets, cut, spans, 0)
        extended += int((marks >= 2).sum() - (plain == 2).sum())
        assert int((marks == 3).sum()) == int((marks >= 2).sum() - (plain == 2).sum())
    assert edits and extended > 0


@pytest.mark.parametrize("source", ["MODULE", "colorsys", "bisect", "fnmatch"])
def test_the_edit_guard_passes_every_right_rewrite(source):
    """`strata edit`'s scope checks (app/strata/editscope.py) and its undefined-name check raise
    no alarm on the task maker's own rewrites, which are right by construction: every kind, many
    phrasings, this module and a few stdlib files. The task maker deletes imports and functions
    that the file still uses: the undefined-name check says so in a note (the rewrite did what
    was asked), never in a warning."""
    from strata.editscope import unexplained_changes, unfinished_renames
    from strata.filesafety import undefined_name_checks
    if source == "MODULE":
        text = MODULE
    else:
        text = Path(__import__(source).__file__).read_text()
    checked = noted = 0
    for kind in file_tasks.KINDS:
        for seed in range(12):
            t = file_tasks.make_task(text, kind, random.Random(seed))
            if t is None:
                continue
            instr, rewritten, specs = t
            what, lines = unexplained_changes(text, rewritten, instr)
            assert lines == [], (kind, instr, what, lines)
            assert unfinished_renames(text, rewritten, instr) == [], (kind, instr)
            warned, notes = undefined_name_checks(text, rewritten, instr)
            assert warned == [], (kind, instr, warned)
            assert not notes or any(s["kind"] in ("delete_import", "delete_function") for s in specs), (kind, notes)
            checked += bool(what)
            noted += bool(notes)
    assert checked >= 30  # most kinds' instructions get a scope check
    assert noted > 0 or source == "bisect"  # an import or function deleted that the file still uses


DEAD = MODULE.replace("import json\n", "import json\nimport shutil\n").replace(
    "class Counter:", "def _old_helper(x):\n    return _old_helper(x - 1) if x else 0\n\n\nclass Counter:")


def test_deletions_prefer_what_is_unused_and_say_unused_only_when_it_is():
    """The task maker picks an unused import / a dead private function (recursion does not count
    as a use) most of the time when there is one, marks it, and only then may the instruction call
    it unused or dead code; the sample module's other imports and functions are all used."""
    picked = {"delete_import": [], "delete_function": []}
    for kind, key in (("delete_import", "stmt"), ("delete_function", "name")):
        for seed in range(200):
            t = file_tasks.make_task(DEAD, kind, random.Random(seed))
            if t is None:
                continue
            instr, out, (spec,) = t
            unused = spec[key] in ("import shutil", "_old_helper")
            assert spec["unused"] == unused, (seed, spec)
            says = ("unused" in instr.lower() or "not used" in instr.lower() or "dead code" in instr.lower())
            assert unused or not says, (seed, instr)
            picked[kind].append(unused)
    for kind, flags in picked.items():
        share = sum(flags) / len(flags)
        assert 0.5 < share < 0.9, (kind, share)  # PREFER_UNUSED (0.6) plus the blind picks that land on it
    # on the sample module nothing is unused: no task says so
    for kind in ("delete_import", "delete_function"):
        for instr, _, (spec,) in tasks_of(kind, range(100)):
            assert spec["unused"] is False
            assert "unused" not in instr.lower() and "dead code" not in instr.lower() and "not used" not in instr.lower()
    assert phrasing.SAYS_UNUSED <= {t for ts in phrasing.TEMPLATES.values() for t in ts}


def test_kind_weights_change_the_training_mix_and_bad_ones_are_refused(monkeypatch):
    """v8: make_rows --kind-weights KIND=W,... changes file_tasks.KIND_WEIGHT (the mix tasks_for_file
    draws from); unknown kinds and weights that are not numbers > 0 are one-line errors."""
    assert make_rows.parse_kind_weights("") == {}
    assert make_rows.parse_kind_weights("delete_function=2.4, multi=3") == {"delete_function": 2.4, "multi": 3.0}
    for bad in ("delete_fn=2", "multi", "multi=0", "multi=-1", "multi=x", "multi=inf", "multi=nan"):
        with pytest.raises(ValueError, match="multi|delete_fn"):
            make_rows.parse_kind_weights(bad)
    rows = [{"path": f"pkg/m{i}.py", "text": MODULE.replace("LIMIT", f"LIMIT{i}"), "sha256": f"{i:064d}"}
            for i in range(40)]

    def share_of_deletions():
        kinds = [t["kind"] for r in rows for t in file_tasks.tasks_for_file(r, 1, 5)]
        return kinds.count("delete_function") / len(kinds)

    before = share_of_deletions()
    monkeypatch.setitem(file_tasks.KIND_WEIGHT, "delete_function", 50.0)
    after = share_of_deletions()
    assert after > 0.8 > before, (before, after)


def test_make_rows_refuses_bad_kind_weights_in_one_line(tmp_path):
    import subprocess

    script = Path(__file__).resolve().parent.parent / "train/make_rows.py"
    r = subprocess.run([sys.executable, str(script), "--corpus", str(tmp_path / "c.jsonl.gz"), "--tok", str(tmp_path),
                        "--out", str(tmp_path / "rows"), "--kind-weights", "delete_fn=2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1].startswith("--kind-weights: 'delete_fn=2'")


def test_guard_outcomes_says_what_strata_edit_yes_would_do():
    """train/guard_outcomes.py: each evaluated rewrite as `strata edit --yes` treats it."""
    import guard_outcomes

    task = {"path": "pkg/m.py", "original": MODULE, "instruction": "add `import math`",
            "rewritten": MODULE.replace("import sys\n", "import math\nimport sys\n")}
    right = {"exact": True, "stopped": True, "output": None}
    assert guard_outcomes.outcome(task, right) == "written-right"
    wrong = {"exact": False, "stopped": True, "output": MODULE.replace("import sys\n", "import maths\nimport sys\n")}
    assert guard_outcomes.outcome(task, wrong) == "refused-guard"  # `import math` is not in it
    # "also import math" may mean `from math import ...`: the guard lets it through, and it is wrong
    loose = dict(task, instruction="also import math")
    other = {"exact": False, "stopped": True, "output": MODULE.replace("import sys\n", "from math import pi\nimport sys\n")}
    assert guard_outcomes.outcome(loose, other) == "written-wrong"
    assert guard_outcomes.outcome(task, dict(wrong, stopped=False)) == "refused-incomplete"
    assert guard_outcomes.outcome(task, dict(wrong, output=MODULE)) == "nothing-to-write"
    broken = dict(wrong, output=MODULE.replace("def load_config(path, default=None):", "def load_config(path"))
    assert guard_outcomes.outcome(task, broken) == "refused-guard"


def test_an_added_from_import_is_always_named_whole():
    """v8: "import typing" / "also import typing" for `from typing import Any` does not say Any, so
    an add_import of a from-statement is always phrased with the statement itself."""
    rng = random.Random(4)
    for i in range(300):
        spec = {"kind": "add_import", "stmt": "from typing import Any", "mod": "typing"}
        assert "Any" in phrasing.phrase([spec], rng), i
    said = {phrasing.phrase([{"kind": "add_import", "stmt": "import json", "mod": "json"}], rng) for _ in range(300)}
    assert any("import json" not in s.replace("`", "") for s in said)  # "add an import of json" still comes


def test_first_divergence_classes_where_a_rewrite_leaves_the_right_one():
    import first_divergence

    original = "def a():\n    return 1\n\n\ndef b():\n    return 2\n"
    want = "def b():\n    return 2\n"  # "delete a"
    assert first_divergence.divergence(original, want, original) == ("word", True)  # wrote a anyway
    assert first_divergence.divergence(original, want, "def b():\n    return 3\n") == ("word", False)
    assert first_divergence.divergence(original, want, "def b():\n    return 2") == ("ended early", False)
    assert first_divergence.divergence(original, want, want + "\n") == ("went on past the end", False)
    assert first_divergence.divergence(original, want, "def b():\n\n    return 2\n")[0] == "newline"
    assert first_divergence.divergence(original, want, "def  b():\n    return 2\n")[0] == "whitespace"
    assert first_divergence.divergence(original, want, "def b();\n    return 2\n")[0] == "punctuation"


def test_producer_copies_are_the_engines_copy_bias_tokens():
    """make_rows --copies: at every rewrite token, the token the engine's copy bias boosts when it
    predicts that token (its CopyIndex over the example's prompt); NO_COPY elsewhere."""
    E = pytest.importorskip("strata._engine")
    make_rows._init(str(Path(__file__).resolve().parent.parent / "app/strata/models/strata-tiny/tokenizer.json"))
    rows = [{"path": f"pkg/m{i}.py", "text": MODULE.replace("LIMIT", f"LIMIT{i}"), "sha256": f"{i:064d}"}
            for i in range(4)]
    edits = make_rows.work((rows, 11, 0.35, 0.0, 1, 0.0, 24_000, 0, (), 0.0, True))[0]
    assert edits
    for ids, marks, copies in edits:
        assert copies.shape == ids.shape and copies.dtype == np.uint16
        first = int(np.flatnonzero(marks > 0)[0])
        seq = ids.tolist()
        engine = E.CopyIndex(seq[:first]).predictions(seq[:-1], first)
        specials = {make_rows._TOK.token_to_id(t) for t in prompts.SPECIAL_TOKENS}
        engine = [-1 if t in specials else t for t in engine]  # strata's copy_skip
        want = np.full(len(ids), make_rows.NO_COPY)
        want[first:] = [t if t >= 0 else make_rows.NO_COPY for t in engine]
        want[marks == 0] = make_rows.NO_COPY
        assert np.array_equal(copies, want)
        assert (copies[marks > 0] != make_rows.NO_COPY).mean() > 0.9  # a rewrite copies its prompt


def test_train_reads_the_copies_and_adds_the_bias_before_the_loss(tmp_path):
    import torch

    import train

    packer = _packed()
    np.save(tmp_path / "marks_0000.npy", np.stack(packer.marks))
    np.save(tmp_path / "copies_0000.npy", np.stack(packer.copies))
    np.save(tmp_path / "rows_0000.npy", np.stack(packer.rows))
    feed = train.ShardFeed(tmp_path, 2, 0, print, marks=True, copies=True)
    feed.wait_first(timeout=1)
    batch = feed.next_batch()
    assert batch.shape == (2, 3, 64)
    for b in batch:
        k = next(i for i, r in enumerate(packer.rows) if np.array_equal(r, b[0]))
        assert np.array_equal(b[1], packer.marks[k]) and np.array_equal(b[2], packer.copies[k])
    (tmp_path / "copies_0000.npy").unlink()
    with pytest.raises(SystemExit, match="copies_0000.npy: missing .*--copies"):
        train.ShardFeed(tmp_path, 2, 0, print, marks=True, copies=True).wait_first(timeout=1)

    # the loss sees the logits strata edit samples from: +bias on the copy token, nowhere else
    logits = torch.randn(2, 5, 11)
    copies = torch.tensor([[3, train.NO_COPY, 0, 10, train.NO_COPY], [train.NO_COPY] * 5])
    got = train.with_copy_bias(logits, copies, 2.0)
    want = logits.clone()
    for i, j in ((0, 0), (0, 2), (0, 3)):
        want[i, j, copies[i, j]] += 2.0
    assert torch.equal(got, want)


def test_copy_misses_classes_the_first_miss_under_the_copy_bias():
    """copy_misses.py --copy-bias: rows are copy_bias.margins()' (reference logit, copy token is
    the reference, best other logit, copy token's logit)."""
    torch = pytest.importorskip("torch")  # copy_misses imports it at the top
    import copy_misses

    inf = float("inf")
    rows = lambda *r: np.array(r, dtype=np.float64)  # noqa: E731
    # the reference wins every row: 5 + 2 over 4, then 3 over the other 1 and the copy's 0 + 2
    assert copy_misses.first_miss_class(rows([5, 1, 4, 5], [3, 0, 1, 0]), 2) is None
    # the copy is right and the model beats it by more than the bias
    assert copy_misses.first_miss_class(rows([1, 1, 4, 1]), 2)[1:] == ("model overrides the copy", 1.0)
    # the model had the change right (3 over 2 and 1), the bias put the copy (2 + 2) above it
    assert copy_misses.first_miss_class(rows([9, 1, 0, 9], [3, 0, 2, 2]), 2) == (1, "bias pulls off a change", 1.0)
    # the copy is wrong and the model prefers it anyway
    assert copy_misses.first_miss_class(rows([1, 0, 0, 3]), 2)[1] == "model follows a wrong copy"
    # no copy token, another token wins
    assert copy_misses.first_miss_class(rows([1, 0, 3, -inf]), 2)[1] == "model's own error"
    assert copy_misses.misses(rows([5, 1, 4, 5], [3, 0, 2, 2], [1, 0, 3, -inf]), 2) == [1, 2]


def test_gate_tasks_are_the_readme_first_command_and_the_demo_turns():
    """gate_tasks.py (the check every training call runs before a model may ship) must ask
    exactly what the README's first command asks, and its rewrites must be the right ones."""
    import gate_tasks

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    first, json_turn, same = gate_tasks.gate_tasks()
    assert f"strata edit examples/arith.py --instruction '{first['instruction']}'" in readme
    src = gate_tasks.EXAMPLE.read_text()
    assert first["original"] == src and first["rewritten"] == src.replace("import os\n", "import math\nimport os\n", 1)
    assert json_turn["original"] == first["rewritten"]
    assert json_turn["rewritten"].splitlines()[1:4] == ["import json", "import math", "import os"]
    assert same["original"] == same["rewritten"] == json_turn["rewritten"]
    for t in (first, json_turn, same):
        assert ast.parse(t["rewritten"]) and set(t) >= {"kind", "path", "filename", "original", "instruction", "rewritten"}

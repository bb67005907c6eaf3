"""The GPU call scripts (train/gpu/*.sh) before a GPU machine runs them: a device call costs a
session's GPU time, so a typo found there is expensive. Every script parses (`bash -n`), every
command word a script starts a line with is a function it or common.sh defines or a command this
machine has, and every flag a script, its *_ARGS defaults or a command in train/README.md passes to
a train/*.py script is one that script's argparse defines. The whole call is rehearsed on a CPU by
train/gpu/dry_run.sh (train/README.md, "v7 recipe"); these checks are the part that runs in
seconds."""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "train"
SCRIPTS = sorted((TRAIN / "gpu").glob("*.sh"))
COMMON = TRAIN / "gpu" / "common.sh"
# a python script of train/ named on a command line: python3 $D/train/x.py, python train/x.py
PY_CALL = re.compile(r"(?:\$D/train/|\.devtrain/train/|(?<![\w/])train/)(\w+)\.py\b")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
FUNC_DEF = re.compile(r"^(\w+)\(\)\s*\{", re.M)
ARGS_VAR = re.compile(r"\$\{?([A-Z_]+_ARGS)\b")
# a command's end on its line: a redirection, a pipe, a list operator or the end of a $( ... )
CMD_END = re.compile(r"\s[0-9]?>|\s\|\s|;|\s&(?!&)|\s&&|\s\|\||\)\s*(?:$|[>|&;])")
# VAR="--flag ..." (a command line, README) or VAR=${VAR:---flag ...} (a script's default)
ARGS_SET = re.compile(r'\b([A-Z_]+_ARGS)=(?:"([^"]*)"|\$\{[A-Z_]+:-(.*?)\}\s*$)')
GPU_ONLY = {"nvidia-smi"}  # commands the GPU machine has and a CPU-only one may not


def argparse_flags(script: str) -> set[str]:
    tree = ast.parse((TRAIN / f"{script}.py").read_text())
    flags = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return flags


def logical_lines(text: str) -> list[str]:
    """Lines with their backslash continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    return [re.sub(r"(^|\s)#.*", "", line) for line in joined.splitlines()]


def command(line: str, start: int) -> str:
    """The rest of the command that starts at start: up to its redirection, pipe or list operator."""
    end = CMD_END.search(line, start)
    return line[start:end.start() if end else len(line)]


def forwarders(text: str) -> dict[str, str]:
    """Shell functions that pass their arguments ("$@", $1) on to a train/ script: name -> script."""
    out = {}
    for m in FUNC_DEF.finditer(text):
        body = text[m.end():text.find("\n}", m.end())]
        call = PY_CALL.search(body)
        if call and re.search(r'"\$@"|(?<![\w-]) \$1\b', body[call.end():]):
            out[m.group(1)] = call.group(1)
    return out


def uses(text: str, funcs: dict[str, str]):
    """(script, flags, line, the *_ARGS variables on it) for every call of a train/ script."""
    for line in logical_lines(text):
        for m in PY_CALL.finditer(line):
            rest = command(line, m.end())
            yield m.group(1), FLAG.findall(rest), line, ARGS_VAR.findall(rest)
        head = re.match(r"\s*(\w+)\b", line)
        if head and head.group(1) in funcs and not re.match(r"\s*\w+\(\)", line):
            rest = command(line, head.end())
            yield funcs[head.group(1)], FLAG.findall(rest), line, ARGS_VAR.findall(rest)


def all_uses():
    for path in SCRIPTS:
        text = path.read_text()
        funcs = forwarders(COMMON.read_text() if "common.sh" in text else "")
        funcs.update(forwarders(text))  # a script's own definition wins (call1.sh's start_training)
        for use in uses(text, funcs):
            yield path.name, *use


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_call_script_parses(path):
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_every_command_a_script_starts_a_line_with_exists():
    known = set(subprocess.run(["bash", "-c", "compgen -abck"], capture_output=True, text=True).stdout.split())
    known |= GPU_ONLY | set(FUNC_DEF.findall(COMMON.read_text()))
    missing = []
    for path in SCRIPTS:
        text = path.read_text()
        defined = set(FUNC_DEF.findall(text))
        for line in logical_lines(text):
            m = re.match(r"\s*[({]?\s*([a-z_][\w.-]*)(?=\s|$)", line)
            if m and m.group(1) not in known | defined and not re.match(r"\s*\w+=", line):
                missing.append(f"{path.name}: {m.group(1)!r} in {line.strip()[:80]!r}")
    assert not missing, missing


def test_every_flag_a_call_script_passes_is_one_its_target_accepts():
    seen, wrong = set(), []
    for name, script, flags, line, _ in all_uses():
        seen.add(script)
        bad = sorted(set(flags) - argparse_flags(script))
        if bad:
            wrong.append(f"{name}: {script}.py has no {bad}: {line.strip()[:100]!r}")
    assert not wrong, wrong
    # the v7 call reaches every step: the parser must have found them, or this test checks nothing
    assert {"build_data", "make_rows", "train", "file_tasks", "evaluate", "export", "average"} <= seen


def args_targets() -> dict[str, set[str]]:
    """*_ARGS variable -> the train/ scripts whose command lines carry it."""
    out: dict[str, set[str]] = {}
    for _, script, _, _, variables in all_uses():
        for v in variables:
            out.setdefault(v, set()).add(script)
    return out


def test_the_args_variables_carry_only_flags_their_scripts_accept():
    targets = args_targets()
    assert {"TRAIN_ARGS", "EVAL_ARGS"} <= set(targets)
    texts = {p.name: p.read_text() for p in SCRIPTS}
    for block in re.findall(r"```sh\n(.*?)```", (TRAIN / "README.md").read_text(), re.S):
        texts.setdefault("train/README.md", "")
        texts["train/README.md"] += block + "\n"
    wrong, checked = [], 0
    for name, text in texts.items():
        for line in logical_lines(text):
            for var, quoted, default in ARGS_SET.findall(line):
                value = quoted or default
                for script in targets.get(var, ()):
                    checked += 1
                    bad = sorted(set(FLAG.findall(value)) - argparse_flags(script))
                    if bad:
                        wrong.append(f"{name}: {var} -> {script}.py has no {bad}")
    assert not wrong, wrong
    assert checked >= 4


def test_every_train_command_in_the_readme_passes_flags_its_script_accepts():
    wrong, checked = [], 0
    for block in re.findall(r"```sh\n(.*?)```", (TRAIN / "README.md").read_text(), re.S):
        for line in logical_lines(block):
            for m in PY_CALL.finditer(line):
                if not (TRAIN / f"{m.group(1)}.py").exists():
                    wrong.append(f"no train/{m.group(1)}.py: {line.strip()[:100]!r}")
                    continue
                checked += 1
                bad = sorted(set(FLAG.findall(command(line, m.end()))) - argparse_flags(m.group(1)))
                if bad:
                    wrong.append(f"{m.group(1)}.py has no {bad}: {line.strip()[:100]!r}")
    assert not wrong, wrong
    assert checked >= 10


class _OracleModel:
    """Predicts the reference token at every position of the tasks it knows; stops the run
    (as a time limit would) at the first task it does not know."""

    def __init__(self, known: list[list[int]], vocab: int):
        self.known, self.vocab = {tuple(ids[:-1]): ids for ids in known}, vocab

    def __call__(self, input_ids):
        import types

        import torch

        key = tuple(input_ids[0].tolist())
        if key not in self.known:
            raise KeyboardInterrupt("time limit")
        ids = self.known[key]
        logits = torch.zeros(1, len(ids) - 1, self.vocab)
        logits[0, torch.arange(len(ids) - 1), torch.tensor(ids[1:])] = 1.0
        return types.SimpleNamespace(logits=logits)


def test_a_forced_evaluation_stopped_by_its_time_limit_keeps_the_tasks_it_did(tmp_path):
    # call_v7.sh runs each evaluation under `timeout`: the rows of the tasks done before the limit
    # must be on disk, not only in a list that dies with the process
    import sys

    from tokenizers import Tokenizer

    sys.path.insert(0, str(TRAIN))
    import evaluate
    from strata import prompts

    tok = Tokenizer.from_file(str(ROOT / "app" / "strata" / "models" / "strata-tiny" / "tokenizer.json"))
    original = "import os\n\n\ndef f(x):\n    return x + 1\n"
    tasks = [{"kind": kind, "path": f"pkg/{kind}.py", "filename": f"{kind}.py", "original": original,
              "instruction": instruction, "rewritten": rewritten}
             for kind, instruction, rewritten in (
                 ("delete_import", "Delete the line `import os`.", "def f(x):\n    return x + 1\n"),
                 ("unchanged", "Leave the file unchanged.", original),
                 ("literal", "Change 1 to 2.", original.replace("1", "2")))]
    ids = [tok.encode(prompts.edit_example(t["filename"], t["original"], t["instruction"], t["rewritten"])).ids
           for t in tasks]
    model = _OracleModel(ids[:2], tok.get_vocab_size())
    rows_path = tmp_path / "forced_tasks.jsonl"
    with pytest.raises(KeyboardInterrupt):
        evaluate.eval_forced(model, tok, tasks, "cpu", lambda msg: None, rows_path)
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    assert [(r["kind"], r["exact"]) for r in rows] == [("delete_import", True), ("unchanged", True)]
    res, rows = evaluate.eval_forced(_OracleModel(ids, tok.get_vocab_size()), tok, tasks, "cpu", lambda msg: None)
    assert res["tasks"] == 3 and res["overall"] == 1.0

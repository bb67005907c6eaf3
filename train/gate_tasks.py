"""The README's own edits as edit tasks, for a gate before a model ships: the README's first
command (`strata edit examples/arith.py --instruction 'Add `import math`.'`) and the demo
session's next two turns (`scripts/record_demo_sessions.py`: add `import json` to the result, then
leave it unchanged). A model that gets one of them wrong teacher-forced under `strata edit`'s copy
bias would get it wrong in `strata edit` too (v9's 0.5 mean did: train/README.md, "v9 run").

    python train/gate_tasks.py --out gate.jsonl.gz     # then evaluate.py --forced --tasks gate.jsonl.gz

Same fields as file_tasks.py's tasks; kind "gate".
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "arith.py"


def gate_tasks(example: Path = EXAMPLE) -> list[dict]:
    src = example.read_text(encoding="utf-8")
    if "import os\n" not in src:
        raise SystemExit(f"{example}: no `import os` line to add imports before")
    with_math = src.replace("import os\n", "import math\nimport os\n", 1)
    with_json = with_math.replace("import math\n", "import json\nimport math\n", 1)
    steps = [(src, "Add `import math`.", with_math),
             (with_math, "Add `import json`.", with_json),
             (with_json, "Leave the file exactly as it is.", with_json)]
    return [{"kind": "gate", "path": "examples/arith.py", "filename": example.name, "original": old,
             "instruction": said, "rewritten": new} for old, said, new in steps]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--example", type=Path, default=EXAMPLE,
                    help="the README's example file (default: the checkout's, next to train/)")
    args = ap.parse_args()
    tasks = gate_tasks(args.example)
    with gzip.open(args.out, "wt", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps(t) + "\n")
    print(f"{len(tasks)} gate tasks -> {args.out}")


if __name__ == "__main__":
    main()

"""The element-wise average of two exported strata-tiny folders (v7: the shipped v6 and the v7 run's
final weights): every tensor as (1 - w) * a + w * b computed in float32 and stored in a's dtype
(bf16 for strata-tiny, rounded to nearest even), so the result is deterministic: the same two
inputs give the same model.safetensors byte for byte. Both folders must hold the same tensors
(names, shapes, dtypes) and the same model (config.json: sizes, layer types, expert counts); config.json, generation_config.json and the
tokenizer files are copied from --a.

    python train/average.py --a app/strata/models/strata-tiny --b /work/v7run/model --out /tmp/v7avg

Why: the v7 run alone (v6 trained on for ~6 minutes on fresh rows) gained exact rewrites but lost
two "leave unchanged" tasks; the average of the two kept v6's "unchanged" and gained more
(train/README.md, "v7 run").
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
from pathlib import Path

import torch

COPIED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
# config.json keys that only say how or where a folder was written
CONFIG_NOISE = ("transformers_version", "dtype", "torch_dtype", "_name_or_path")
# config.json keys that say what the model is (its shape and kind); another difference is only noted
_ARCH_KEY = re.compile(r"(_size|_dim|heads|layers|experts|_types|model_type|architectures|_tok|_step)$")


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{folder}: no *.safetensors")
    out: dict[str, torch.Tensor] = {}
    for f in files:
        part = load_file(str(f))
        if set(part) & set(out):
            raise SystemExit(f"{f}: tensors repeated across files")
        out.update(part)
    return out


def model_config(folder: Path) -> dict:
    cfg = json.loads((folder / "config.json").read_text())
    return {k: v for k, v in cfg.items() if k not in CONFIG_NOISE}


def average(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], w: float = 0.5) -> dict[str, torch.Tensor]:
    if set(a) != set(b):
        raise ValueError(f"different tensors: only in a {sorted(set(a) - set(b))[:5]}, only in b {sorted(set(b) - set(a))[:5]}")
    out = {}
    for name in sorted(a):
        x, y = a[name], b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            raise ValueError(f"{name}: {tuple(x.shape)} {x.dtype} vs {tuple(y.shape)} {y.dtype}")
        if not x.is_floating_point():
            if not torch.equal(x, y):
                raise ValueError(f"{name}: integer tensors differ")
            out[name] = x.clone()
            continue
        mean = x.to(torch.float32) * (1.0 - w) + y.to(torch.float32) * w
        out[name] = mean.to(x.dtype).contiguous()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", type=Path, required=True, help="exported folder (its dtype and files are kept)")
    ap.add_argument("--b", type=Path, required=True, help="exported folder of the same model")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--weight", type=float, default=0.5, help="w: the share of --b")
    args = ap.parse_args(argv)
    from safetensors.torch import save_file

    ca, cb = model_config(args.a), model_config(args.b)
    differ = sorted(k for k in set(ca) & set(cb) if ca[k] != cb[k])  # a key only one version writes is no difference
    if [k for k in differ if _ARCH_KEY.search(k)]:
        raise SystemExit(f"{args.a} and {args.b} are different models (config.json: {differ[:5]})")
    if differ:  # e.g. how another transformers version writes rope settings; the result takes --a's config
        print(f"note: config.json values that differ (--a's kept): {differ}")
    avg = average(read_weights(args.a), read_weights(args.b), args.weight)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.safetensors*"):  # e.g. a sharded model.safetensors.index.json
        if args.out.resolve() not in (args.a.resolve(), args.b.resolve()):
            old.unlink()
    tmp = args.out / "model.safetensors.tmp"
    save_file(avg, str(tmp), metadata={"format": "pt"})
    tmp.replace(args.out / "model.safetensors")
    for name in COPIED:
        if (args.a / name).exists() and (args.a / name).resolve() != (args.out / name).resolve():
            shutil.copy(args.a / name, args.out / name)
    digest = hashlib.sha256((args.out / "model.safetensors").read_bytes()).hexdigest()
    print(f"averaged {len(avg)} tensors (w={args.weight}) -> {args.out / 'model.safetensors'} sha256 {digest}")


if __name__ == "__main__":
    main()

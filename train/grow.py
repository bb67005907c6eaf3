"""A deeper strata-tiny with the same function: new gated-attention + MoE decoder layers inserted
into an exported folder, each a copy of the nearest full-attention layer before it (the first one
after it where none is before) with its output projections set to zero (`self_attn.o_proj`, every
expert's `down_proj` and the shared expert's `down_proj`). Such a layer adds exactly zero to the
residual stream, so the grown model's logits are the original's bit for bit (in transformers and
in strata: tests/test_train_grow.py); training then opens the new layers up, since the zeroed
projections still get gradients ("A larger model from v8", train/README.md). The result is a
normal exported folder (config.json with the new layer count and layer types; the other files
copied) and is deterministic.

    python train/grow.py --model app/strata/models/strata-tiny --after 3,3,7,7 --out /tmp/grown
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
from pathlib import Path

import torch

from average import COPIED, read_weights

_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")
# the projections whose output goes straight into the residual stream
_ZEROED = re.compile(r"self_attn\.o_proj\.weight|mlp\.experts\.\d+\.down_proj\.weight|mlp\.shared_expert\.down_proj\.weight")


def grow(weights: dict[str, torch.Tensor], config: dict, after: list[int]) -> tuple[dict[str, torch.Tensor], dict]:
    """(weights, config) with a new full-attention layer after each original layer index in
    `after` (an index may repeat: several layers there); ValueError for an index out of range or
    a model without a full-attention layer to copy."""
    types = list(config["layer_types"])
    n = config["num_hidden_layers"]
    if len(types) != n:
        raise ValueError(f"config.json: {len(types)} layer_types for {n} layers")
    if not after:
        raise ValueError("no layer to add (--after)")
    bad = [i for i in after if not 0 <= i < n]
    if bad:
        raise ValueError(f"--after {bad[0]}: the model's layers are 0..{n - 1}")
    if config.get("mlp_only_layers"):
        raise ValueError("config.json: mlp_only_layers is not empty; growing such a model is not supported")
    attention = [i for i, t in enumerate(types) if t == "full_attention"]
    if not attention:
        raise ValueError("the model has no full-attention layer to copy")
    per_layer: dict[int, dict[str, torch.Tensor]] = {}
    out: dict[str, torch.Tensor] = {}
    for name, t in weights.items():
        m = _LAYER.fullmatch(name)
        if m:
            per_layer.setdefault(int(m.group(1)), {})[m.group(2)] = t
        else:
            out[name] = t
    order: list[tuple[int, bool]] = []  # (the original layer copied, whether it is a new one)
    for i in range(n):
        order.append((i, False))
        for _ in range(after.count(i)):
            before = [a for a in attention if a <= i]
            order.append((before[-1] if before else attention[0], True))
    for k, (src, new) in enumerate(order):
        for suffix, t in per_layer[src].items():
            out[f"model.layers.{k}.{suffix}"] = torch.zeros_like(t) if new and _ZEROED.fullmatch(suffix) else t.clone()
    cfg = dict(config)
    cfg["num_hidden_layers"] = len(order)
    cfg["layer_types"] = ["full_attention" if new else types[src] for src, new in order]
    return out, cfg


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="an exported folder")
    ap.add_argument("--after", required=True, help="comma list of original layer indices, a new layer after each")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from safetensors.torch import save_file

    try:
        after = [int(x) for x in args.after.split(",")]
    except ValueError:
        raise SystemExit(f"--after: a comma list of layer indices, not {args.after!r}")
    if args.out.resolve() == args.model.resolve():
        raise SystemExit("--out must be another folder than --model")
    config = json.loads((args.model / "config.json").read_text())
    try:
        weights, cfg = grow(read_weights(args.model), config, after)
    except ValueError as exc:
        raise SystemExit(f"{args.model}: {exc}")
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.safetensors*"):
        old.unlink()
    tmp = args.out / "model.safetensors.tmp"
    save_file(weights, str(tmp), metadata={"format": "pt"})
    tmp.replace(args.out / "model.safetensors")
    for name in COPIED:
        if name != "config.json" and (args.model / name).exists():
            shutil.copy(args.model / name, args.out / name)
    (args.out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    params = sum(t.numel() for t in weights.values())
    digest = hashlib.sha256((args.out / "model.safetensors").read_bytes()).hexdigest()
    print(f"grown to {cfg['num_hidden_layers']} layers ({params:,} parameters) -> {args.out / 'model.safetensors'} "
          f"sha256 {digest}")


if __name__ == "__main__":
    main()

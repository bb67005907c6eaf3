"""Turn a training checkpoint (config.json + ckpt_N.safetensors from train/train.py) into the shipped
Hugging Face folder app/strata/models/strata-tiny: config.json, model.safetensors (bf16, saved by
transformers' save_pretrained so the layout is the standard qwen3_next one), tokenizer.json,
tokenizer_config.json (chat template = strata.prompts.CHAT_TEMPLATE), generation_config.json.

    python train/export.py --ckpt /work/.device/N/run --tok .devdata/tok --out app/strata/models/strata-tiny
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "app"))

import train as T  # noqa: E402
from strata import prompts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", type=Path, required=True)
    ap.add_argument("--tok", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import GenerationConfig, Qwen3NextConfig, Qwen3NextForCausalLM

    tokenizer = Tokenizer.from_file(str(args.tok / "tokenizer.json"))
    config = Qwen3NextConfig.from_json_file(str(args.ckpt / "config.json"))
    config.dtype = torch.bfloat16
    model = Qwen3NextForCausalLM(config)
    sd = T.read_checkpoint(args.ckpt)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise SystemExit(f"checkpoint does not match the model: missing {missing}, unexpected {unexpected}")
    model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id, do_sample=False, max_new_tokens=1024)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, max_shard_size="100MB")
    for name in ("tokenizer.json", "tokenizer_config.json"):  # --tok may be --out itself (v3 re-export)
        if (args.tok / name).resolve() != (args.out / name).resolve():
            shutil.copy(args.tok / name, args.out / name)
    cfg = json.loads((args.out / "tokenizer_config.json").read_text())
    assert cfg["chat_template"] == prompts.CHAT_TEMPLATE
    print("saved", sorted(p.name for p in args.out.iterdir()))


if __name__ == "__main__":
    main()

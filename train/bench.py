"""Time one strata-tiny training step (forward, backward, AdamW) on random tokens, the first v2
run's setup against this one, interleaved, on a GPU or a CPU. Prints one line per variant:

- before: attention in every second layer (4 Gated DeltaNet layers), transformers' PyTorch
  chunked gated delta rule (chunk 64);
- after: attention in 6 of 8 layers (2 Gated DeltaNet layers), train/gdn_fast.py (chunk 128).

    python train/bench.py --device cpu --batch 1 --seq 2048 --rounds 3
    python train/bench.py --device cuda --batch 16 --seq 8192
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gdn_fast  # noqa: E402
import train as T  # noqa: E402

BEFORE_LAYERS = ["linear_attention", "full_attention"] * 4


class _Tok:
    def get_vocab_size(self):
        return T.MODEL_CONFIG["vocab_size"]

    def token_to_id(self, s):
        return 0


def make(variant, device):
    from transformers import Qwen3NextForCausalLM

    torch.manual_seed(0)
    config = T.make_config(_Tok())
    if variant == "before":
        config.layer_types = list(BEFORE_LAYERS)
    model = Qwen3NextForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device == "cuda")
    return model, opt


def step(model, opt, x, device):
    with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
        h = model.model(input_ids=x[:, :-1]).last_hidden_state
        logits = model.lm_head(h)
    loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers
    from transformers.models.qwen3_next import modeling_qwen3_next as mq

    print("torch", torch.__version__, "transformers", transformers.__version__, args.device, flush=True)
    T.patch_experts()
    T.force_torch_gdn()
    reference = mq.torch_chunk_gated_delta_rule
    gdn = {"before": reference, "after": gdn_fast.chunk_gated_delta_rule}
    models = {v: make(v, args.device) for v in ("before", "after")}
    x = torch.randint(0, T.MODEL_CONFIG["vocab_size"], (args.batch, args.seq + 1), device=args.device)
    times = {v: [] for v in models}
    for r in range(args.rounds + 1):  # round 0 warms up
        for v, (model, opt) in models.items():
            mq.torch_chunk_gated_delta_rule = gdn[v]
            if args.device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step(model, opt, x, args.device)
            if args.device == "cuda":
                torch.cuda.synchronize()
            if r:
                times[v].append(time.perf_counter() - t0)
    mq.torch_chunk_gated_delta_rule = reference
    best = {v: min(t) for v, t in times.items()}
    for v, t in best.items():
        print(f"{v}: batch {args.batch} x {args.seq}: best {t * 1000:.0f} ms/step of {args.rounds}, "
              f"{args.batch * args.seq / t:.0f} tok/s", flush=True)
    print(f"after/before speed-up: {best['before'] / best['after']:.2f}x", flush=True)


if __name__ == "__main__":
    main()

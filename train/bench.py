"""Measure strata-tiny training step time on the GPU for a few batch sizes, eager and with the
decoder layers compiled, on random tokens. Prints one line per variant (used to size the run).

    python train/bench.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train as T  # noqa: E402


class _Tok:
    def get_vocab_size(self):
        return T.MODEL_CONFIG["vocab_size"]

    def token_to_id(self, s):
        return 0


def bench(batch, seq, compiled, steps=6):
    from transformers import Qwen3NextForCausalLM

    torch.manual_seed(0)
    model = Qwen3NextForCausalLM(T.make_config(_Tok())).cuda()
    if compiled:
        for i in range(len(model.model.layers)):
            model.model.layers[i] = torch.compile(model.model.layers[i])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x = torch.randint(0, 8192, (batch, seq + 1), device="cuda")
    times = []
    t_first = None
    for s in range(steps + 2):
        torch.cuda.synchronize()
        t0 = time.time()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = model.model(input_ids=x[:, :-1]).last_hidden_state
            logits = model.lm_head(h)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        dt = time.time() - t0
        if s == 0:
            t_first = dt
        if s >= 2:
            times.append(dt)
    times.sort()
    med = times[len(times) // 2]
    mem = torch.cuda.max_memory_allocated() / 2**30
    print(f"batch {batch} seq {seq} compiled {compiled}: first {t_first:.1f}s, median {med * 1000:.0f} ms/step, "
          f"{batch * seq / med:.0f} tok/s, peak {mem:.1f} GiB", flush=True)
    torch.cuda.reset_peak_memory_stats()
    del model, opt


def main():
    import transformers

    print("torch", torch.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name())
    T.patch_experts()
    variants = [(32, 1024, False), (64, 1024, False), (128, 1024, False), (128, 1024, True)]
    if len(sys.argv) > 1:
        variants = [(int(b), int(s), c == "1") for b, s, c in (v.split(",") for v in sys.argv[1:])]
    for b, s, c in variants:
        try:
            bench(b, s, c)
        except Exception as exc:  # report and go on to the next variant
            print(f"batch {b} seq {s} compiled {c}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

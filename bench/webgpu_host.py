"""Host work per window on the webgpu backend: dispatches, submits and host encoding time per
window of T rows (run T tokens, commit 1), from the backend's own counters. Runs anywhere an
adapter exists (lavapipe included): the counts do not depend on the GPU, the encode time is the
host's.

    python bench/webgpu_host.py MODEL_DIR [--windows 1,4,8] [--steps 8] [--prompt-len 16]
    python bench/webgpu_host.py PACK --expert-cache-slots N   # a pack's experts streamed

Prints one JSON line per T: dispatches, submits (waiting + early), bind groups made, host
encode seconds per window and per dispatch; for a pack also the MoE layers run routed from
device slots and the slot uploads per window.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "app"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--windows", default="1,4,8")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--expert-cache-slots", type=int, default=0,
                    help="stream a pack's experts through a cache of this many slots (0: all resident)")
    args = ap.parse_args()
    import numpy as np

    import strata

    kw = {}
    if args.expert_cache_slots > 0:
        from strata import pack

        kw["expert_cache"] = args.expert_cache_slots * int(pack.read_pack(args.model).ex["stride"])
    eng = strata.load(args.model, threads=1, backend="webgpu", **kw)
    vocab = int(eng.vocab_size)
    rng = np.random.default_rng(3)
    prompt = [int(t) for t in rng.integers(0, vocab, args.prompt_len)]
    eng.run(prompt)
    eng.commit(len(prompt))
    for T in [int(t) for t in args.windows.split(",")]:
        for warm in (True, False):
            c0 = eng.backend_counters()
            steps = 2 if warm else args.steps
            for _ in range(steps):
                eng.run([int(t) for t in rng.integers(0, vocab, T)])
                eng.commit(1)
            if warm:
                continue
            c1 = eng.backend_counters()
            d = {k: (c1[k] - c0[k]) / steps for k in c1}
            print(json.dumps({"T": T, "dispatches": d["dispatches"], "submits": d["submits"],
                              "early_submits": d["early_submits"], "bind_groups_made": d["bind_groups_made"],
                              "encode_us": d["encode_s"] * 1e6,
                              "encode_us_per_dispatch": d["encode_s"] * 1e6 / max(d["dispatches"], 1),
                              **{k: d[k] for k in ("moe_streamed_on_device", "slot_uploads_at_fill",
                                                   "slot_uploads_at_use") if k in d}}), flush=True)


if __name__ == "__main__":
    main()

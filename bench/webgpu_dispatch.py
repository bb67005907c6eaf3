"""The floor a window pays per dispatch on the webgpu backend: a tiny elementwise add (--n
floats) dispatched --iters times in one submit, timed from the submit to its completion
(encoding excluded), in three arrangements:

  chain     each dispatch reads the previous one's output (a true dependency every time)
  shared    each reads one input and writes the same output buffer: no data dependency, but one
            buffer written by every dispatch, as the engine's scratch arena is
  distinct  each writes its own output buffer: nothing for the queue to order

    PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME python bench/webgpu_dispatch.py \
        [--adapter auto|software|any] [--n 64] [--iters 400] [--json]

If "shared" costs what "chain" does and "distinct" much less, the time is the barriers the
driver inserts between dispatches that write one buffer; if all three cost the same, it is the
launch itself. Run it with and without STRATA_WEBGPU_PROFILE=1 to see what timestamps add.
"""
from __future__ import annotations

import argparse
import json
import os

from strata import webgpu

MODES = ("chain", "shared", "distinct")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", default="auto", choices=webgpu.ADAPTER_CHOICES)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3, help="best of this many timed submits per mode")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dev = webgpu.open_device(args.adapter)
    info = dev.info()
    us = {m: 1e6 * min(dev.bench_dispatch(args.n, args.iters, m) for _ in range(args.repeats)) for m in MODES}
    result = {"what": "dispatch", "adapter": info["device"], "backend": info["backend"], "n": args.n,
              "iters": args.iters, "profile": os.environ.get("STRATA_WEBGPU_PROFILE", ""), "us_per_dispatch": us}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{info['device']} ({info['backend']}): {args.iters} dispatches of a {args.n}-float add per submit")
    for m in MODES:
        print(f"  {m:9s} {us[m]:8.2f} us per dispatch")


if __name__ == "__main__":
    main()

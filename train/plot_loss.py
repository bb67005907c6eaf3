"""Combine the loss.csv files of the training stages into one CSV and draw it as an SVG
(no plotting library needed).

    python train/plot_loss.py train/runs/stage1/loss.csv train/runs/stage2/loss.csv \
        --csv app/strata/models/strata-tiny/loss.csv --svg app/strata/models/strata-tiny/loss_curve.svg
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

W, H, PAD = 720, 360, 50
COLORS = ("#1f77b4", "#d62728", "#2ca02c")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stages", type=Path, nargs="+")
    ap.add_argument("--csv", type=Path, required=True)
    ap.add_argument("--svg", type=Path, required=True)
    args = ap.parse_args()
    rows, step0, tok0 = [], 0, 0
    for n, path in enumerate(args.stages, 1):
        last = None
        with open(path) as f:
            for r in csv.DictReader(f):
                last = r
                rows.append({"stage": n, "step": step0 + int(r["step"]), "tokens": tok0 + int(r["tokens"]),
                             "lr": float(r["lr"]), "loss": float(r["loss"]), "aux": float(r["aux"])})
        step0 += int(last["step"])
        tok0 += int(last["tokens"])
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    xmax = max(r["step"] for r in rows)
    ymax = 10.0
    ymin = 0.0

    def x(s):
        return PAD + (W - 2 * PAD) * s / xmax

    def y(v):
        return H - PAD - (H - 2 * PAD) * (min(v, ymax) - ymin) / (ymax - ymin)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="black"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="black"/>']
    for v in range(0, 11, 2):
        parts.append(f'<text x="{PAD - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
        parts.append(f'<line x1="{PAD}" y1="{y(v):.1f}" x2="{W - PAD}" y2="{y(v):.1f}" stroke="#ddd"/>')
    for s in range(0, xmax + 1, 500):
        parts.append(f'<text x="{x(s):.1f}" y="{H - PAD + 16}" text-anchor="middle">{s}</text>')
    for n in sorted({r["stage"] for r in rows}):
        pts = " ".join(f"{x(r['step']):.1f},{y(r['loss']):.1f}" for r in rows if r["stage"] == n)
        parts.append(f'<polyline fill="none" stroke="{COLORS[(n - 1) % 3]}" stroke-width="1.5" points="{pts}"/>')
        parts.append(f'<text x="{W - PAD - 150}" y="{PAD + 16 * n}" fill="{COLORS[(n - 1) % 3]}">stage {n}</text>')
    parts.append(f'<text x="{W / 2}" y="{H - 10}" text-anchor="middle">step (64 x 1024 tokens)</text>')
    parts.append(f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" text-anchor="middle">'
                 'training loss (nats/token)</text>')
    parts.append(f'<text x="{W / 2}" y="20" text-anchor="middle">strata-tiny training loss</text>')
    parts.append("</svg>")
    args.svg.write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Draws a figure from flashcl-bench --json output (docs/PERFORMANCE.md, Method).

Left: softmax throughput per shape, with the copy reference measured in the same run (and
oneDNN's softmax where its output is given). Right: attention on a roofline, arithmetic
intensity (flops per useful byte) against achieved GFLOP/s, under the copy bandwidth and a
nominal float32 peak.

usage: plot_performance.py BENCH.json OUT.png [--onednn ONEDNN.txt] [--peak-gflops G] [--title T]
Needs matplotlib (pip install matplotlib); not part of the build.
"""
import argparse
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_onednn(path):
    rates = {}
    if path:
        for line in open(path):
            m = re.match(r"onednn softmax f32 (\d+x\d+): [\d.]+ ms, ([\d.]+) GB/s", line)
            if m:
                rates[m.group(1)] = float(m.group(2))
    return rates


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("out")
    ap.add_argument("--onednn")
    ap.add_argument("--peak-gflops", type=float, default=0.0)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    data = json.load(open(args.bench))
    onednn = read_onednn(args.onednn)
    softmax = [c for c in data["cases"] if c["case"].startswith("softmax")]
    attention = [c for c in data["cases"] if c["case"].startswith("attention")]

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    names = [c["case"].split()[-1] for c in softmax]
    x = range(len(softmax))
    left.bar([i - 0.27 for i in x], [c["gbs"] for c in softmax], 0.27, label="flashcl")
    left.bar(list(x), [c["copy_gbs"] for c in softmax], 0.27, label="copy (same run)")
    if onednn:
        left.bar([i + 0.27 for i in x], [onednn.get(n, 0.0) for n in names], 0.27, label="oneDNN")
    for i, c in enumerate(softmax):
        left.annotate(f'{c["copy_pct"]:.0f}%', (i - 0.27, c["gbs"]), ha="center", va="bottom",
                      fontsize=8)
    left.set_xticks(list(x))
    left.set_xticklabels(names, rotation=20, fontsize=8)
    left.set_ylabel("useful GB/s (read once + write once)")
    left.set_title("softmax f32 (label: % of copy)")
    left.legend(fontsize=8)

    if attention:
        bw = max(c["copy_gbs"] for c in data["cases"])  # GB/s
        ai = [c["flops"] / c["bytes"] for c in attention]
        perf = [c["tflops"] * 1e3 for c in attention]  # GFLOP/s
        lo, hi = min(ai) / 4, max(ai) * 4
        xs = [lo * (hi / lo) ** (k / 50) for k in range(51)]
        roof = [bw * a if not args.peak_gflops else min(bw * a, args.peak_gflops) for a in xs]
        right.loglog(xs, roof, "k--", label=f"roof: copy {bw:.0f} GB/s"
                     + (f", peak {args.peak_gflops:.0f} GFLOP/s" if args.peak_gflops else ""))
        right.loglog(ai, perf, "o", label="flashcl attention")
        for a, p, c in zip(ai, perf, attention):
            right.annotate(c["case"].replace("attention f32 ", ""), (a, p), fontsize=7)
        right.set_xlabel("flops per useful byte")
        right.set_ylabel("GFLOP/s")
        right.set_title("attention f32 on the roofline")
        right.legend(fontsize=8)
    fig.suptitle(args.title or data.get("device", ""))
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Medians of timeline.c's lines: for each sequence of commands (a call's kernels), when each
was queued, started and ended, microseconds after the bench's marker; the first 2 calls of
each (warm-up) are left out where there are more than 4."""
import statistics
import sys

calls = {}
for line in open(sys.argv[1]):
    words = line.split()
    if not words or words[0] != "TLCALL" or len(words) == 1:
        continue
    commands = [words[i:i + 4] for i in range(1, len(words), 4)]
    key = " ".join(c[0] for c in commands)
    calls.setdefault(key, []).append([[float(x) for x in c[1:]] for c in commands])
for key, runs in calls.items():
    runs = runs[2:] if len(runs) > 4 else runs
    parts = []
    for i, name in enumerate(key.split()):
        queued, start, end = (statistics.median(r[i][j] for r in runs) for j in range(3))
        parts.append(f"{name}: queued {queued:.1f} start {start:.1f} end {end:.1f} "
                     f"({end - start:.1f})")
    print(f"{len(runs)} calls | " + " | ".join(parts))

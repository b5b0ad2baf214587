#!/bin/sh
# H200: build, the whole suite on the GPU, demo, bench preset h200; POCL 5 on the 16 cores.
set -u
cd "$(dirname "$0")/../.."
sh scripts/h200/h200.sh
echo "== POCL on the host CPU"
FLASHCL_DEVICE=cpu timeout 300 build/tools/flashcl-bench --preset cpu --json > "$OUT/bench-pocl-h200-machine.json" 2> "$OUT/bench-pocl.err"
echo "pocl bench rc=$?"; cat "$OUT/bench-pocl-h200-machine.json"

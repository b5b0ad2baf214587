#!/bin/sh
# Runs the kernel-variant test (tests/test_kernel_variants.c) under Oclgrind, which simulates
# a GPU with 32 KiB of local memory and reports every out-of-bounds access, data race and
# OpenCL API misuse; any report, or a failed check, fails this script. Four runs cover every
# kernel the planner can pick:
#   1. the simulator as it is: softmax in registers, in local memory, online and split; the
#      attention tiles of head dims 64 and 128 with their decode kernels, the rows kernel for
#      256 and 576 (Oclgrind counts three times the local memory a tile declares, so no tile
#      fits 32 KiB there), split-KV and the merge kernels;
#   2. 128 KiB of local memory, where tiles and decode kernels fit every head dim (576 as
#      well), and softmax on one work-item per row (FLASHCL_TUNE), as CPUs run it;
#   3. and 4. 128 KiB, tiles in groups of 32 work-items (4 x 8, as on Mesa's llvmpipe) and of
#      16 (4 x 4), by FLASHCL_TUNE.
# Oclgrind's uninitialized-value plugin is left off: it reports float2 literals.
# usage: oclgrind.sh OCLGRIND TEST_PROGRAM WORK_DIR
set -eu
oclgrind=$1
program=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
status=0
run() { # name, then oclgrind options
  name=$1
  shift
  if ! FLASHCL_CACHE_DIR="$work/cache-$name" "$oclgrind" --data-races --check-api \
      --log "$work/$name.log" "$@" "$program" > "$work/$name.out" 2>&1; then
    cat "$work/$name.out"
    echo "oclgrind.sh: $name: the test failed" >&2
    status=1
  fi
  if [ -s "$work/$name.log" ]; then
    head -c 20000 "$work/$name.log"
    echo "oclgrind.sh: $name: Oclgrind reported $(grep -c -i -e error -e race "$work/$name.log") problems" >&2
    status=1
  fi
}
run simulator
FLASHCL_TUNE=softmax_rows=1 run local128k --local-mem-size 131072
FLASHCL_TUNE=attention_group=32 run group32 --local-mem-size 131072
FLASHCL_TUNE=attention_group=16 run group16 --local-mem-size 131072
exit "$status"

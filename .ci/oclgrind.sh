#!/bin/sh
# Runs flashcl's test programs under Oclgrind, the OpenCL simulator, which reports every
# out-of-bounds access, data race and OpenCL API misuse; any report, or a failed check, fails
# this script. Oclgrind simulates a GPU with 32 KiB of local memory (and counts three times
# the local memory a tile declares, so no tile of head dims 256 and 576 fits there).
#
# RUN is one of nine runs, each a CTest test (oclgrind_RUN) of its own, so that CTest can
# spread them over the cores. The kernel-variant test (tests/test_kernel_variants.c) four
# times covers every kernel the planner can pick:
#   simulator: the simulator as it is: softmax in registers, in local memory, online and
#      split; the attention tiles with their decode kernels (at head dim 576 tiles of 4 x 8
#      work-items), split-KV and the merge kernels;
#   local128k: 128 KiB of local memory, where tiles and decode kernels fit every head dim
#      (576 as well), and softmax on one work-item per row (FLASHCL_TUNE), as CPUs run it,
#      with the tiles that prefetch K and V, 48 elements of each a work-item (as on NVIDIA;
#      the planner's CPU entry prefetches nothing);
#   group32, group16: 128 KiB, tiles in groups of 32 work-items (4 x 8, as on Mesa's
#      llvmpipe; the prefetching tiles again) and of 16 (4 x 4), by FLASHCL_TUNE; with 16,
#      no tile fits head dim 576, and the rows kernel and its decoding form run there.
# softmax, attention, attention_v2, kv and clamps run tests of the softmax and attention suites
# (FLASHCL_TEST_ONLY) with the simulator as their device, in their small-size mode
# (FLASHCL_TEST_SMALL=1, which leaves out rows over 65536 columns and gives MLA fewer keys):
# the checks against the float64 reference with the hard cases (special values, magnitudes,
# strides, masks, every dtype, causal, GQA and paged, varlen, softcap, window, sinks, MLA,
# merging, K/V formats and fcl_kv_write); the long rows and sequences run on POCL and rusticl.
# The test that gives the kernels bad device-side indices runs without the race check: the
# clamped indices of overlapping sequences make work-groups write the same rows of out's
# view, which is what clamping promises (no access outside a buffer), not a race to report.
# Oclgrind's uninitialized-value plugin is left off: it reports float2 literals.
# usage: oclgrind.sh OCLGRIND TESTS_DIR WORK_DIR RUN
set -eu
oclgrind=$1
tests=$2
work=$3
mode=$4
rm -rf "$work"
mkdir -p "$work"
# One program cache for the runs (an entry is named by its source, options and device, so the
# runs' different plans never share a wrong binary): a run finds the programs the runs before
# it built, where each compiled its own.
cache=$(dirname "$work")/oclgrind-program-cache
failed="$work/failed"
races=--data-races
run() { # name, program, then oclgrind options
  name=$1
  program=$2
  shift 2
  if ! FLASHCL_CACHE_DIR="$cache" "$oclgrind" $races --check-api \
      --log "$work/$name.log" "$@" "$tests/$program" > "$work/$name.out" 2>&1; then
    cat "$work/$name.out"
    echo "oclgrind.sh: $name: the test failed" >&2
    touch "$failed"
  fi
  if [ -s "$work/$name.log" ]; then
    head -c 20000 "$work/$name.log"
    echo "oclgrind.sh: $name: Oclgrind reported $(grep -c -i -e error -e race "$work/$name.log") problems" >&2
    touch "$failed"
  fi
}
export FLASHCL_TEST_SMALL=1
case $mode in
simulator) run simulator test_kernel_variants ;;
local128k) FLASHCL_TUNE=softmax_rows=1,attention_prefetch=1,attention_prefetch_items=48 run local128k test_kernel_variants --local-mem-size 131072 ;;
group32) FLASHCL_TUNE=attention_group=32,attention_prefetch=1 run group32 test_kernel_variants --local-mem-size 131072 ;;
group16) FLASHCL_TUNE=attention_group=16 run group16 test_kernel_variants --local-mem-size 131072 ;;
softmax)
  FLASHCL_TEST_ONLY=test_worked_checks,test_special_values,test_magnitudes,test_mask_and_scale,test_strides_and_in_place,test_half_storage,test_sinks_special_values \
    run softmax test_softmax
  ;;
attention) FLASHCL_TEST_ONLY=test_causal,test_storage_types,test_nan_stays_in_its_row run attention test_attention ;;
attention_v2)
  FLASHCL_TEST_ONLY=test_paged,test_varlen,test_softcap,test_window,test_sinks,test_mla_and_head_sizes,test_combined,test_merge \
    run attention_v2 test_attention_v2
  ;;
clamps) races= FLASHCL_TEST_ONLY=test_device_clamps_bad_indices run clamps test_attention_v2 ;;
kv)
  FLASHCL_TEST_ONLY=test_paged,test_fp8_codes_and_nan,test_write_device_skips_bad_slots \
    run kv test_kv
  ;;
*)
  echo "usage: oclgrind.sh OCLGRIND TESTS_DIR WORK_DIR simulator|local128k|group32|group16|softmax|attention|attention_v2|clamps|kv" >&2
  exit 2
  ;;
esac
grep -h -E "PASSED|FAILED" "$work"/*.out || true
[ ! -e "$failed" ]

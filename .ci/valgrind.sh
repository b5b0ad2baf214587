#!/bin/sh
# valgrind memcheck over the test programs on POCL, run by CTest.
# POCL compiles kernels for the CPU it finds, and valgrind emulates an older one, so under
# valgrind POCL would compile flashcl's program again inside valgrind (more than an hour).
# tests/valgrind_cpu.c (preloaded) makes POCL see valgrind's CPU natively too:
# 1. record the CPU features valgrind emulates;
# 2. natively, compile the kernels for that CPU into this script's own caches (about 80 s);
# 3. run the test programs under memcheck; the kernels come from those caches.
# Left out: test_softmax and test_attention (their long rows and sequences take more than
# 15 minutes each under valgrind; the guard test runs every plan on small shapes),
# test_faults (its two hundred context creations take 5 minutes there) and test_threads
# (47 s; valgrind runs one thread at a time, so it would check the threaded paths' memory,
# not their races). ASan + UBSan run all of them (sanitizers.sh).
# The only suppressions (.ci/valgrind.supp) are two of the dynamic loader's, in the OpenCL
# ICD loader's dlopen of POCL and in POCL's dlopen of the kernels it compiled; each is
# justified there.
# usage: valgrind.sh SOURCE_DIR BUILD_DIR VALGRIND CPU_PRELOAD
set -eu
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
valgrind=$3
preload=$4
work=$build/valgrind
. "$src/.ci/pin-icd.sh"
rm -rf "$work"
mkdir -p "$work/pocl-cache" "$work/program-cache"
export POCL_CACHE_DIR="$work/pocl-cache" FLASHCL_CACHE_DIR="$work/program-cache"
features=$work/cpu-features

# 1. Any program that starts POCL ends in the preload once the features are written.
LD_PRELOAD=$preload FCL_VALGRIND_CPU_RECORD=$features "$valgrind" --tool=none -q \
  "$build/tests/test_arguments" > "$work/record.log" 2>&1 || { cat "$work/record.log"; exit 1; }
echo "valgrind's CPU: $(cat "$features")"

export LD_PRELOAD="$preload" FCL_VALGRIND_CPU_REPLAY="$features"
# 2. Natively first, every test that builds kernels: the guard test most of them; POCL
#    compiles each kernel again for each work-group size it is launched with, so the
#    kernel-variant test (launch shapes of its own) too; and the cache test, whose programs
#    took memcheck 119 s to compile.
for t in guards kernel_variants cache; do
  "$build/tests/test_$t" > "$work/native-$t.log" 2>&1 || { cat "$work/native-$t.log"; exit 1; }
done

# 3. But test_cache's failing build, which no cache holds: POCL's compiler under memcheck
#    (33 of the test's 97 s); ASan runs it.
export FLASHCL_TEST_SKIP=test_build_failure_reports_log
for t in plan arguments cache guards kernel_variants; do
  start=$(date +%s)
  "$valgrind" --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite,indirect \
    --show-leak-kinds=definite,indirect --suppressions="$src/.ci/valgrind.supp" -q \
    "$build/tests/test_$t" > "$work/$t.log" 2>&1 || { cat "$work/$t.log"; exit 1; }
  grep -q "PASSED" "$work/$t.log" || { cat "$work/$t.log"; exit 1; }
  echo "valgrind memcheck test_$t: clean ($(( $(date +%s) - start )) s)"
done

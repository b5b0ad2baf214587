#!/bin/sh
# Memory and undefined-behaviour checks, run by CTest:
# 1. every test program again, built with AddressSanitizer (leaks included) and UBSan, on the
#    default device (POCL in CI); the kernels come from the main build's program cache
#    (FLASHCL_CACHE_DIR), so nothing is compiled twice. The only suppressions are the
#    driver's leaks (.ci/lsan.supp, each justified there);
# 2. valgrind memcheck over the host-only planner tests. The device tests are not run under
#    valgrind: POCL's LLVM did not finish creating a context within 12 minutes there.
# usage: sanitizers.sh SOURCE_DIR BUILD_DIR [VALGRIND]
set -eu
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
valgrind=${3:-}
asan=$build/sanitize
cmake -S "$src" -B "$asan" -DCMAKE_BUILD_TYPE=Debug -DFLASHCL_SANITIZE=ON > "$asan.configure.log" 2>&1 ||
  { cat "$asan.configure.log"; exit 1; }
cmake --build "$asan" -j 2 > "$asan.build.log" 2>&1 || { cat "$asan.build.log"; exit 1; }
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS="suppressions=$src/.ci/lsan.supp:print_suppressions=0"
# The offline AMD compile, static analysis and packaging checks do not run flashcl's code;
# the fuzz test builds its own sanitized binary.
ctest --test-dir "$asan" -j 2 --output-on-failure -E "amd_offline_check|static_analysis|package|fuzz"
echo "ASan + UBSan: clean"
if [ -z "$valgrind" ]; then
  echo "valgrind memcheck: not run (valgrind is not installed)"
  exit 0
fi
"$valgrind" --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite,indirect \
  --show-leak-kinds=definite,indirect -q "$build/tests/test_plan" > "$build/valgrind.log" 2>&1 ||
  { cat "$build/valgrind.log"; exit 1; }
echo "valgrind memcheck (test_plan): clean"

#!/bin/sh
# Memory and undefined-behaviour checks, run by CTest: every test program again, built with
# AddressSanitizer (leaks included) and UBSan, on the default device (POCL in CI); the
# kernels come from the main build's program cache (FLASHCL_CACHE_DIR), so nothing is
# compiled twice. The only suppressions are the driver's leaks (.ci/lsan.supp, each justified
# there). valgrind memcheck is .ci/valgrind.sh.
# usage: sanitizers.sh SOURCE_DIR BUILD_DIR
set -eu
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
asan=$build/sanitize
. "$src/.ci/pin-icd.sh"
# Optimized (-O2 -g): the float64 references, instrumented at -O0, took most of this run's
# six minutes (test_attention 73 s against 23 s); ASan and UBSan instrument the optimized code
# all the same.
cmake -S "$src" -B "$asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHCL_SANITIZE=ON > "$asan.configure.log" 2>&1 ||
  { cat "$asan.configure.log"; exit 1; }
cmake --build "$asan" -j 2 > "$asan.build.log" 2>&1 || { cat "$asan.build.log"; exit 1; }
# intercept_tls_get_addr=0: LeakSanitizer's own thread scan crashed ("Tracer caught signal
# 11", a bogus dynamic-TLS range) after POCL had loaded and unloaded its compiler for a program
# that fails to build (test_cache). Dynamic TLS belongs to dlopen'ed libraries, POCL's and
# LLVM's; flashcl, linked statically into the tests, has only static TLS, still scanned.
export ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The suites' small-size mode (tests/support.h): the same host code on smaller shapes, whose
# float64 references are what takes the time under ASan.
export FLASHCL_TEST_SMALL=1
export LSAN_OPTIONS="suppressions=$src/.ci/lsan.supp:print_suppressions=0"
# The offline AMD and NVIDIA compiles, static analysis and packaging checks do not run
# flashcl's numerics (the compiles print kernel sources, which the suites build too);
# Oclgrind preloads its own OpenCL runtime, which ASan (first in the preload list) forbids;
# the fuzz test builds its own sanitized binary; the *_rusticl runs need the loader this
# script pins to POCL (and they run the same code as the POCL runs checked here); the Python
# package's test loads the sanitized library into an interpreter without ASan's runtime.
# The GPU configuration's runs of the softmax, attention and K/V suites are left out too: their
# host code is the default runs' but for the plans, and attention_v2_gpu_like and
# guards_gpu_like (every plan on small shapes) run those plans' launch code here.
ctest --test-dir "$asan" -j 2 --output-on-failure \
  -E "amd_offline_check|nvptx_offline_check|static_analysis|package|fuzz|oclgrind|_rusticl|python|^(softmax|attention|kv)_gpu_like$"
echo "ASan + UBSan: clean"

#!/bin/sh
# libFuzzer over the public calls' descriptors and sizes (tests/fuzz_descriptors.c), built
# with clang-15, ASan and UBSan, for a bounded time; run by CTest. Kernels come from the main
# build's program cache (FLASHCL_CACHE_DIR). Any crash, sanitizer report or failed check
# fails the test, and the input that caused it is left in BUILD_DIR/fuzz.
# usage: fuzz.sh SOURCE_DIR BUILD_DIR SECONDS
set -eu
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
seconds=$3
out=$build/fuzz
. "$src/.ci/pin-icd.sh"
mkdir -p "$out/corpus"
clang-15 -g -O1 -std=c11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DCL_TARGET_OPENCL_VERSION=120 -I"$src/include" -I"$src/src" -I"$src/cl" "$src"/src/*.c \
  "$build/generated/flashcl_kernels.c" "$src/tests/fuzz_descriptors.c" -lOpenCL -lpthread -lm \
  -o "$out/fuzz_descriptors"
cd "$out"
export LSAN_OPTIONS="suppressions=$src/.ci/lsan.supp:print_suppressions=0"
./fuzz_descriptors -max_total_time="$seconds" -timeout=60 -print_final_stats=1 corpus

#!/bin/sh
# Static analysis of src/ and tools/, run by CTest: cppcheck (warnings, performance,
# portability) and clang-tidy (the checks in .clang-tidy, warnings as errors). Any finding
# fails. usage: static-analysis.sh SOURCE_DIR BUILD_DIR (with compile_commands.json)
set -eu
src=$1
build=$2
cd "$src"
cppcheck --enable=warning,performance,portability --std=c11 --inline-suppr --quiet \
  --error-exitcode=1 -I include -I src -I cl -I tools src tools
echo "cppcheck: clean"
clang-tidy -p "$build" --quiet src/*.c tools/*.c 2> "$build/clang-tidy.log" || {
  cat "$build/clang-tidy.log"
  echo "clang-tidy: findings above" >&2
  exit 1
}
echo "clang-tidy: clean"

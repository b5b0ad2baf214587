#!/bin/sh
# Packaging check, run by CTest: `cmake --install` of the build tree into a temporary prefix
# gives the header, the shared library (with its SONAME) and the static one, the CMake
# package, flashcl.pc and the tools (each answering --help); a program outside flashcl builds
# and runs against it through find_package(flashcl), shared and static, and through
# pkg-config; and a project embedding flashcl with add_subdirectory() builds and runs with no
# flashcl test defined.
# usage: package-check.sh SOURCE_DIR BUILD_DIR
set -eu
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
example=$src/examples/softmax_host.c
fail() { echo "package-check: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
[ -f "$prefix/include/flashcl.h" ] || fail "no include/flashcl.h"
libdir=$(dirname "$(find "$prefix" -name libflashcl.a | head -1)")
[ -f "$libdir/libflashcl.a" ] || fail "no static library"
soname=$(readelf -d "$libdir/libflashcl.so" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$soname" = "libflashcl.so.0.3" ] || fail "SONAME is '$soname', not libflashcl.so.0.3"
[ -f "$libdir/$soname" ] || fail "no $soname"
[ -f "$libdir/cmake/flashcl/flashclConfig.cmake" ] || fail "no CMake package"
[ -f "$libdir/pkgconfig/flashcl.pc" ] || fail "no flashcl.pc"
for tool in flashcl-probe flashcl-demo flashcl-bench; do
  "$prefix/bin/$tool" --help | grep -q "usage" || fail "$tool --help prints no usage"
done
echo "installed: header, libflashcl.so ($soname), libflashcl.a, CMake package, flashcl.pc, tools"

export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake -S "$src/tests/package/find_package" -B "$tmp/find_package" -DCMAKE_PREFIX_PATH="$prefix" \
  -DEXAMPLE="$example" > "$tmp/find_package.log" || { cat "$tmp/find_package.log"; fail "find_package(flashcl)"; }
cmake --build "$tmp/find_package" > "$tmp/find_package-build.log" || { cat "$tmp/find_package-build.log"; fail "building the find_package consumer"; }
"$tmp/find_package/consumer_shared" > /dev/null || fail "the find_package consumer (shared) failed"
"$tmp/find_package/consumer_static" > /dev/null || fail "the find_package consumer (static) failed"
ldd "$tmp/find_package/consumer_shared" | grep -q "libflashcl.so.0.3 => $libdir" || fail "consumer_shared does not load the installed libflashcl.so.0.3"
echo "find_package(flashcl): shared and static consumers ran"

export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046 # the flags are meant to split
cc "$example" $(pkg-config --cflags --libs flashcl) -lm -o "$tmp/consumer_pc" || fail "building with pkg-config"
"$tmp/consumer_pc" > /dev/null || fail "the pkg-config consumer failed"
echo "pkg-config flashcl: consumer ran"

cmake -S "$src/tests/package/subdirectory" -B "$tmp/subdirectory" -DFLASHCL_SOURCE="$src" \
  -DEXAMPLE="$example" > "$tmp/subdirectory.log" || { cat "$tmp/subdirectory.log"; fail "add_subdirectory(flashcl)"; }
cmake --build "$tmp/subdirectory" --target embedder -j 2 > "$tmp/subdirectory-build.log" || { cat "$tmp/subdirectory-build.log"; fail "building the embedder"; }
"$tmp/subdirectory/embedder" > /dev/null || fail "the add_subdirectory embedder failed"
echo "add_subdirectory(flashcl): no flashcl tests defined; embedder ran"

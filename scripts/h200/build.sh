#!/bin/sh
# On the H200 machine: OpenCL from .device, then a Release build in build/ (logs in $OUT).
cd "$(dirname "$0")/../.."
sh .device/setup.sh
cmake -B build -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build -j16 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }

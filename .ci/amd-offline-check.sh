#!/bin/sh
# AMD offline compile check: every kernel flashcl would build for a 64 KiB-LDS wave64 GPU
# (gfx90a) and a wave32 GPU (gfx1030) compiles with Debian's clang-15 and rocm-device-libs,
# with no scratch memory (no VGPR spills, no private arrays left in memory) and LDS within
# 64 KiB. SGPR spills are reported but allowed: they go to VGPR lanes, not to memory.
# Prints a register/LDS report.
# usage: amd-offline-check.sh BUILD_DIR REPORT_FILE
set -eu
build=$1
report=$2
libs=${ROCM_DEVICE_LIBS:-/usr/lib/x86_64-linux-gnu/amdgcn/bitcode}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
printf '%-8s %-28s %6s %6s %6s %8s %7s %7s %8s %9s\n' target kernel SGPRs VGPRs AGPRs \
  scratch sspill vspill LDS occupancy > "$report"
for target in gfx90a gfx1030; do
  "$build/tools/flashcl-source" "$target" > "$tmp/$target.cl"
  if ! clang-15 -x cl -cl-std=CL1.2 -target amdgcn-amd-amdhsa -mcpu="$target" \
      --rocm-device-lib-path="$libs" -O3 -Rpass-analysis=kernel-resource-usage \
      -c "$tmp/$target.cl" -o "$tmp/$target.o" 2> "$tmp/$target.log"; then
    cat "$tmp/$target.log" >&2
    echo "amd-offline-check: $target: the kernels did not compile" >&2
    status=1
    continue
  fi
  # One remark per line: "Function Name: k", "SGPRs: 12", ..., "LDS Size [bytes/block]: 256".
  awk -v target="$target" -v lds_limit=65536 '
    function flush() {
      if (name == "" || (sgpr == 0 && vgpr == 0)) return  # a helper, not emitted as a kernel
      bad = (scratch > 0 || vspill > 0 || lds > lds_limit)
      printf "%-8s %-28s %6d %6d %6d %8d %7d %7d %8d %9d%s\n", target, name, sgpr, vgpr, agpr,
             scratch, sspill, vspill, lds, occ, bad ? "  FAIL" : ""
      failed += bad
    }
    /remark: Function Name:/ { flush(); name = $(NF - 1); sgpr = vgpr = agpr = scratch = sspill = vspill = lds = occ = 0; next }
    /remark: +SGPRs Spill:/ { sspill = $(NF - 1); next }
    /remark: +VGPRs Spill:/ { vspill = $(NF - 1); next }
    /remark: +SGPRs:/ { sgpr = $(NF - 1); next }
    /remark: +VGPRs:/ { vgpr = $(NF - 1); next }
    /remark: +AGPRs:/ { agpr = $(NF - 1); next }
    /remark: +ScratchSize/ { scratch = $(NF - 1); next }
    /remark: +Occupancy/ { occ = $(NF - 1); next }
    /remark: +LDS Size/ { lds = $(NF - 1); next }
    END { flush(); exit failed ? 1 : 0 }
  ' "$tmp/$target.log" >> "$report" || status=1
done
cat "$report"
[ "$status" -eq 0 ] || echo "amd-offline-check: a kernel uses scratch memory or exceeds 64 KiB of LDS" >&2
exit "$status"

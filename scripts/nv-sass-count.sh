#!/bin/sh
# Instructions a chunk of 16 keys in the 8-bit decode kernel's main loop (NVIDIA's SASS for
# sm_90), for each K/V format given, without a GPU: flashcl-source's NVIDIA program of one
# head-dim bucket, with the kernel's formats made constants and the features of a plain
# split-KV decode, through clang-15 with libclc to PTX, ptxas and cuobjdump. clang's PTX is
# not NVIDIA's OpenCL compiler's, so the counts compare trees, not the driver's code; a
# chunk's count takes in the code of branches it rarely runs (fp8's non-finite V codes).
# Needs clang-15 and libclc-15 (Debian), ptxas and cuobjdump (the CUDA toolkit, or PyPI's
# nvidia-cuda-cuobjdump for the latter) on the PATH.
# usage: [DIRECT=1] scripts/nv-sass-count.sh BUILD_DIR [d64|d128|d256] [FORMAT ...]
#   (FORMAT: q8_0, int8, ...; DIRECT=1: the direct build, int8 and fp8 at d64 and d128)
set -eu
build=$1
bucket=${2:-d128}
shift $(($# < 2 ? $# : 2))
formats=${*:-q8_0 q4_0 int8 fp8_e4m3}
libclc=${LIBCLC:-/usr/lib/clc/nvptx64--nvidiacl.bc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/tools/flashcl-source" sm_90-mma kvdec > "$tmp/all.cl"
kernel=attention_kvdec_$bucket${DIRECT:+_direct}
for format in $formats; do
  constant=FCL_KV_$(echo "$format" | tr '[:lower:]' '[:upper:]')
  # in the f16-q build only: formats as constants, FA_FLAG_KV | FA_FLAG_PARTIAL
  awk -v f="$constant" -v k="kvdec_$bucket" '
    $0 == "#define FA_NAME " k { inside = 1 }
    inside && $0 == "#undef FA_NAME" { inside = 0 }
    inside && /^#define FA_FEATURES / { $0 = "#define FA_FEATURES 0x18000u" }
    inside && /const uint f[kv] = FA_KVD_FORMAT \? FA_KVD_FORMAT : p->format_[kv];/ {
      sub(/p->format_[kv];/, f ";"); found++ }
    { print }
    END { if (found != 2) { print "no format lines in the kernel" > "/dev/stderr"; exit 1 } }
  ' "$tmp/all.cl" > "$tmp/$format.cl"
  clang-15 -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -target-cpu -Xclang sm_80 \
    -Xclang -mlink-builtin-bitcode -Xclang "$libclc" -O2 -S -o "$tmp/$format.ptx" "$tmp/$format.cl" \
    2> "$tmp/clang.log" || { cat "$tmp/clang.log" >&2; exit 1; }
  sed -i 's/^\.target sm_80/.target sm_90/; s/^\.version .*/.version 8.0/' "$tmp/$format.ptx"
  ptxas -arch=sm_90 -e "$kernel" -v -o "$tmp/$format.cubin" "$tmp/$format.ptx" > "$tmp/ptxas.log" 2>&1 ||
    { cat "$tmp/ptxas.log" >&2; exit 1; }
  registers=$(grep -o "Used [0-9]* registers" "$tmp/ptxas.log" | grep -o "[0-9]*")
  cuobjdump -sass -fun "$kernel" "$tmp/$format.cubin" > "$tmp/$format.sass"
  # The loop: the shortest backward branch around every HMMA; its instructions by opcode.
  python3 - "$tmp/$format.sass" "$format" "$registers" <<'EOF'
import collections, re, sys
path, name, registers = sys.argv[1:4]
code = [(int(m.group(1), 16), m.group(2).split())
        for m in (re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*?);', l) for l in open(path)) if m]
mma = [a for a, ops in code if any(op.startswith('HMMA') for op in ops)]
loops = [(int(m.group(1), 16), a) for a, ops in code
         for m in [re.search(r'BRA (0x[0-9a-f]+)', ' '.join(ops))]
         if m and 'BRA.DIV' not in ops and int(m.group(1), 16) < mma[0] and a >= mma[-1]]
start, end = min(loops, key=lambda loop: loop[1] - loop[0])
mix = collections.Counter((ops[1] if ops[0].startswith('@') else ops[0]).split('.')[0]
                          for a, ops in code if start <= a <= end)
print(f"{name:10} {registers:>3} registers  {sum(mix.values()):5} instructions a chunk: " +
      ' '.join(f'{op} {n}' for op, n in mix.most_common(12)))
EOF
done

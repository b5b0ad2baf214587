#!/bin/sh
# NVIDIA offline compile check of the NVIDIA programs (cl/attention_mma_nv.cl, with its inline
# PTX mma.sync, ldmatrix, cp.async and shfl.sync, cl/attention_decode_nv.cl,
# cl/attention_decode_kv_nv.cl and cl/softmax_nv.cl): Debian's clang-15 compiles it for sm_80
# (nvptx64-nvidia-nvcl, OpenCL's NVIDIA target) with the assembler strings in place;
# every kernel must come out, with no local-memory frame (a spilled fragment array would be
# one) and its mma.sync instructions all unrolled. NVIDIA's own compiler (ptxas) runs on the
# GPU machine: scripts/gpu-check.sh.
# usage: nvptx-offline-check.sh BUILD_DIR
set -eu
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The self-check, softmax, the 8-bit K/V decode kernels and each head-dim bucket's kernels as
# programs of their own (the library builds them a few kernels at a time), so that one that
# needs another's code fails here; their PTX is checked together below.
for program in check softmax kvdec d64 d128 d256; do
  "$build/tools/flashcl-source" sm_80-mma "$program" > "$tmp/$program.cl"
  if ! clang-15 -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -target-cpu -Xclang sm_80 \
      -O2 -S -o "$tmp/$program.ptx" "$tmp/$program.cl" 2> "$tmp/log"; then
    cat "$tmp/log" >&2
    echo "nvptx-offline-check: the NVIDIA program '$program' did not compile" >&2
    exit 1
  fi
  cat "$tmp/$program.ptx" >> "$tmp/mma.ptx"
done
status=0
kernels="attention_decode_nv_d64 attention_decode_nv_d64_all attention_decode_nv_d128 attention_decode_nv_d128_all
  attention_decode_nv_d256 attention_decode_nv_d256_all
  softmax_nv8_f32 softmax_nv16_f32 softmax_nv8_f16 softmax_nv8_bf16 fcl_mma_check
  attention_kvdec_d64 attention_kvdec_d128 attention_kvdec_d256
  attention_kvdec_q32_d64 attention_kvdec_q32_d128 attention_kvdec_q32_d256
  attention_kvdec_d64_q8_0 attention_kvdec_d128_q8_0 attention_kvdec_d256_q8_0"
for t in f32 f16 bf16; do
  kernels="$kernels softmax_nv_online_$t softmax_nv_split_stats_$t softmax_nv_split_write_$t"
done
for d in 64 128 256; do
  [ "$d" = 256 ] || kernels="$kernels attention_mma_d${d}_f32 attention_mma_d${d}_tf32
    attention_mma_d${d}_f16q32 attention_mma_rows_d${d}_f16q32 attention_mma_d${d}_f16q32_kv"
  for t in f16 bf16; do
    kernels="$kernels attention_mma_d${d}_$t attention_mma_rows_d${d}_$t"
    kernels="$kernels attention_mma_d${d}_${t}_kv attention_mma_rows_d${d}_${t}_kv"
  done
  kernels="$kernels attention_mma_d${d}_f16_kv_q8_0" # a build for one pair of formats
done
for k in $kernels; do
  grep -q "^.entry $k(" "$tmp/mma.ptx" || { echo "nvptx-offline-check: no kernel $k" >&2; status=1; }
done
if grep -q "__local_depot" "$tmp/mma.ptx"; then
  echo "nvptx-offline-check: a kernel keeps an array in local (spill) memory" >&2
  status=1
fi
# S = q K^T and O += P V of one tile, fully unrolled: (keys/8) x (D/16) + (keys/16) x (D/8)
# mma.sync per kernel, 64 at D = 64 and 128 at D = 128 and 256 (32-key tiles), for f16 and
# bf16 in the prefill and the one-warp builds, of v0.2's features and of K/V formats; and 2
# in the self-check (a loop the compiler did not unroll would leave fewer).
mmas=$(grep -c "mma.sync.aligned.m16n8k16" "$tmp/mma.ptx")
[ "$mmas" -ge $((8 * (64 + 128 + 128) + 2)) ] || { echo "nvptx-offline-check: $mmas mma.sync, want 2562 or more" >&2; status=1; }
# The _kv builds copy coded rows 8 and 4 bytes at a time (cp.async.ca): compiled in.
grep -q "cp.async.ca.shared.global.*, 4," "$tmp/mma.ptx" ||
  { echo "nvptx-offline-check: no 4-byte cp.async: the _kv builds lack their coded rows" >&2; status=1; }
# Float32 storage, 8 columns a product: (keys/8) x (D/8) x 2 products a tile, 128 at both
# head dims (64 keys at 64, 32 at 128), times 3 for 3xTF32 and 1 for TF32, in the prefill
# builds of both buckets; and 1 in the self-check.
tf32=$(grep -c "mma.sync.aligned.m16n8k8.row.col.f32.tf32" "$tmp/mma.ptx")
[ "$tf32" -ge $((2 * 128 * 3 + 2 * 128 + 1)) ] || { echo "nvptx-offline-check: $tf32 TF32 mma.sync, want 1025 or more" >&2; status=1; }
echo "nvptx-offline-check: $(echo $kernels | wc -w) kernels, $mmas + $tf32 mma.sync, no local-memory frame"
exit "$status"

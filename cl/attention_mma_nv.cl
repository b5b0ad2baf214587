/* Attention on NVIDIA's tensor cores (compute capability 8.0 and later), through inline PTX:
 * FlashAttention-2's forward kernel in OpenCL C. A vendor fast path: the planner builds this
 * file only for such devices (src/plan.c, fcl_plan_mma), after a self-check of the mma
 * fragment layouts (fcl_mma_check, mma_check_nv.cl), and runs it only for the calls it takes
 * (q, k and v of one storage type, or float32 q over f16 K and V, with rows at multiples of 8
 * elements, head dims up to 256, float32 q's up to 128, multiples of 8; in the _kv builds,
 * f16 or bf16 q with K and V each of q's type or coded, float32 q with K and V each f16 or
 * coded, FA_MMA_KV below); the portable
 * kernels (attention_tile.cl) are its reference and serve everything else.
 * Compiled after common.cl, common_nv.cl, attention_args.h and attention_common.cl, once per
 * head-dim bucket and product type, with
 *   FA_NAME     kernel name suffix (mma_d64_f16, ...)
 *   FA_D        largest head_dim and head_dim_v of the bucket (64, 128 or 256)
 *   FA_MMA_T    the products' type in PTX: f16 or bf16 (16-bit storage, m16n8k16), or tf32
 *               (float32 storage, m16n8k8)
 *   FA_MMA_SPLIT with tf32: 1 for float32 accuracy by 3xTF32 (FCL_PRECISION_F32), 0 for one
 *               TF32 product (FCL_PRECISION_TF32)
 *   FA_MMA_Q32  with f16: 1 where q (and the output) is float32 and K and V f16 or (the _kv
 *               build) coded (llama.cpp's types): q and p each split into two f16 parts, two
 *               products where one was (fa_mma_q32_row), float32's accuracy with f16 tiles;
 *               else 0
 *   FA_MMA_WARPS warps a work-group, FA_MMA_KWARPS of them a row tile (each taking its
 *               share of every key tile), FA_MMA_MT tiles of 16 query rows a warp and
 *               FA_MMA_BK keys a tile (by head dim and type: src/plan.c, fcl_plan_mma_shape)
 *   FA_MMA_L2_LINES 1 where the K and V tiles' copies ask the L2 for whole 128-byte lines
 *               (fa_mma_copy16_line: the GQA decoding builds), else 0
 *   FA_FEATURES the features compiled in (attention_args.h)
 *   FA_MMA_FORMAT_K, FA_MMA_FORMAT_V  in a _kv prefill build for one pair of formats, K's
 *               and V's (fcl_kv_format); 0 where the build reads them at run time
 *
 * A work-group of FA_MMA_WARPS warps owns FA_MMA_BQ query rows of one (batch, head), 16
 * FA_MMA_MT rows a warp. Each warp keeps its rows of q in registers as mma A fragments (each
 * K and V fragment it reads then feeds FA_MMA_MT products). Prefill gives each warp rows of
 * its own; GQA decoding (a group's heads as the rows of one tile) gives FA_MMA_KWARPS warps
 * the same rows and each a share of the keys, whose states are merged at the end. K and V
 * tiles of FA_MMA_BK keys are copied into local memory by cp.async (the V tile while the
 * scores of the K tile are computed, the next K tile while the V tile is used; coded tiles as
 * bytes, decoded in local memory, but K in the builds for one format with f16 q, whose codes
 * each work-item reads from global memory during P V and decodes into the tile after it,
 * FA_MMA_K_DIRECT); S = q K^T
 * and O += P V are mma.sync with float32 accumulators; the online softmax (m, l) of each row
 * runs in the registers of the 4 lanes that hold the row, reduced by shfl.sync; P is rounded
 * to the storage type for the second product, as FlashAttention-2 does (float32 storage:
 * split as q, k and v are). Fragment layouts: PTX ISA, "Matrix Fragments for mma.m16n8k16" and
 * "mma.m16n8k8": lane = 4 g + t holds rows g and g + 8 of the accumulators, columns 2t and
 * 2t + 1, whatever the type.
 */
#ifndef FA_MMA_HELPERS
#define FA_MMA_HELPERS
#define FA_MMA_V_VALUES_f16 1
#define FA_MMA_V_VALUES_bf16 0

FCL_INLINE uint fa_mma_local_address(__local const void *p)
{
    return (uint)(size_t)p; /* a __local pointer's value is its offset in shared memory */
}

/* 16 bytes from global src into local dst, asynchronously; only the first `bytes` are read
 * (0: the 16 bytes become zeros, and src is not read). */
FCL_INLINE void fa_mma_copy16(__local void *dst, __global const void *src, uint bytes)
{
    __asm__ volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :
                     : "r"(fa_mma_local_address(dst)), "l"(src), "r"(bytes)
                     : "memory");
}

/* The same, asking the L2 for the whole 128-byte line around src (.L2::128B) where it has
 * to fetch it from memory, for the kernels that stream the cache once (decoding): H200, B8
 * H32/8 D128 at 32K keys, same call, int8 K/V 0.182-0.184 -> 0.175-0.176 ms, f16 0.284-0.288
 * -> 0.277-0.279 (.L2::256B: int8 0.191-0.193). */
FCL_INLINE void fa_mma_copy16_line(__local void *dst, __global const void *src, uint bytes)
{
    __asm__ volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;"
                     :
                     : "r"(fa_mma_local_address(dst)), "l"(src), "r"(bytes)
                     : "memory");
}

/* The same for 8 and 4 bytes (cp.async.ca: .cg takes 16 only), for the bytes of coded K/V
 * rows, whose starts may be 8- or 4-byte aligned only. */
FCL_INLINE void fa_mma_copy8(__local void *dst, __global const void *src, uint bytes)
{
    __asm__ volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;"
                     :
                     : "r"(fa_mma_local_address(dst)), "l"(src), "r"(bytes)
                     : "memory");
}

FCL_INLINE void fa_mma_copy4(__local void *dst, __global const void *src, uint bytes)
{
    __asm__ volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                     :
                     : "r"(fa_mma_local_address(dst)), "l"(src), "r"(bytes)
                     : "memory");
}

/* A copy of chunk (16, 8 or 4) bytes, of which the first `bytes` are read (the rest zeros). */
FCL_INLINE void fa_mma_copy(__local void *dst, __global const void *src, uint chunk, uint bytes)
{
    if (chunk == 16)
        fa_mma_copy16(dst, src, bytes);
    else if (chunk == 8)
        fa_mma_copy8(dst, src, bytes);
    else
        fa_mma_copy4(dst, src, bytes);
}

FCL_INLINE void fa_mma_copies_commit(void) { __asm__ volatile("cp.async.commit_group;" ::: "memory"); }

/* Waits for this work-item's copies; the barrier after it makes every work-item's visible. */
FCL_INLINE void fa_mma_copies_wait(void) { __asm__ volatile("cp.async.wait_all;" ::: "memory"); }

/* Four 8x8 matrices of 16-bit values: lanes 8i to 8i + 7 give the addresses of matrix i's
 * rows; each lane gets, of each matrix, the elements (g, 2t) and (g, 2t + 1). */
FCL_INLINE void fa_mma_load(__local const ushort *row, uint *r0, uint *r1, uint *r2, uint *r3)
{
    __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(*r0), "=r"(*r1), "=r"(*r2), "=r"(*r3)
                     : "r"(fa_mma_local_address(row))
                     : "memory");
}

/* Four 8x8 matrices of 16-bit values, transposed: lanes 8i to 8i + 7 give the addresses of
 * matrix i's rows; each lane gets, of each matrix, the elements (2t, g) and (2t + 1, g). */
FCL_INLINE void fa_mma_load_transposed(__local const ushort *row, uint *r0, uint *r1, uint *r2,
                                       uint *r3)
{
    __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(*r0), "=r"(*r1), "=r"(*r2), "=r"(*r3)
                     : "r"(fa_mma_local_address(row))
                     : "memory");
}

/* The 32-bit word of two 16-bit values d and d + 1 (d even) of a global row, zeros for those
 * at or past dim. */
FCL_INLINE uint fa_mma_global_pair(__global const ushort *row, uint d, uint dim)
{
    const uint lo = d < dim ? row[d] : 0, hi = d + 1 < dim ? row[d + 1] : 0;
    return lo | hi << 16;
}

/* The power of two e that puts a float32 row's largest magnitude in [2^14, 2^15), the row
 * held by 4 lanes (t = 0-3 of a group g), top the largest of this lane's part: the row times
 * 2^e neither overflows f16 nor loses its small elements to f16's subnormals (a row of large
 * values) or to 0; 0 for a row of zeros, infinities or NaNs. Every lane of the warp calls it. */
FCL_INLINE int fa_mma_f16_exponent(float top)
{
    top = fmax(top, fcl_nv_shuffle_xor(top, 1));
    top = fmax(top, fcl_nv_shuffle_xor(top, 2));
    return top > 0.0f && isfinite(top) ? clamp(14 - ilogb(top), -100, 100) : 0;
}

/* The power of two e (its exponent, -40 .. 40) that P's weights times V's factors (TOKEN
 * scales, ggml's d) are multiplied by before they are rounded to f16, so that the largest
 * factor among the keys of a warp's product (top: the largest of this lane's share of them)
 * sits in [2^14, 2^15): p is at most 1, and small factors (a cache of small values) would
 * otherwise put the weights among f16's subnormals or below, which keep few of their bits or
 * none. The output then holds 2^e times its value until a change of e rescales it; within
 * -40 .. 40 no change makes it overflow. 0 for factors all 0 or some not finite. Every lane
 * of the warp calls it. */
FCL_INLINE int fa_mma_weight_unit(float top)
{
    uint bits; /* the warp's largest: magnitudes order as their bits do (NaN's above inf's) */
    __asm__ volatile("redux.sync.max.u32 %0, %1, 0xffffffff;" : "=r"(bits) : "r"(as_uint(fabs(top))));
    /* its exponent, as ilogb's for normal floats (a subnormal one's is clamped either way) */
    const int e = (int)(bits >> 23) - 127;
    return bits != 0 && bits < 0x7f800000u ? clamp(14 - e, -40, 40) : 0;
}

/* 2^e, e in -126 .. 127. */
FCL_INLINE float fa_mma_pow2(int e) { return as_float((uint)(e + 127) << 23); }

/* a and b as two f16 pairs: the big parts f16(x) (returned) and the small ones f16(x - big)
 * into small (0 where the big part is not finite): 22 of float32's 24 bits, as 3xTF32 splits
 * float32 into TF32 parts. */
FCL_INLINE uint fa_mma_split_f16(float a, float b, uint *small)
{
    const uint big = fcl_nv_pack_f16(a, b);
    const float2 h = fcl_nv_halves_f16(big);
    *small = fcl_nv_pack_f16(isfinite(h.x) ? a - h.x : 0.0f, isfinite(h.y) ? b - h.y : 0.0f);
    return big;
}

/* x from lane `from` of the warp (every lane must take part). */
FCL_INLINE uint fa_mma_shuffle_from(uint x, uint from)
{
    uint y;
    __asm__ volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(y) : "r"(x), "r"(from));
    return y;
}

/* ---- coded K/V rows in local memory (the _kv builds): a row's bytes as cp.async copied
 * them, 4-byte aligned ---- */
/* The little-endian 32-bit word at byte `at` (even) of a row, and the binary16 there. */
FCL_INLINE uint fa_raw_word(__local const uchar *row, uint at)
{
    __local const ushort *h = (__local const ushort *)(row + at);
    return h[0] | (uint)h[1] << 16;
}
/* The 8 bytes at b as two words, in one load: b a multiple of 8, as int8's and fp8's codes
 * from a column that is, in a staged row (theirs start at multiples of 8: head_dim bytes or
 * FA_D apart). */
FCL_INLINE void fa_raw_8(uint *w, __local const uchar *b)
{
    const uint2 x = *(__local const uint2 *)b;
    w[0] = x.x, w[1] = x.y;
}
FCL_INLINE float fa_raw_half(__local const uchar *row, uint at)
{
    return vload_half(0, (__local const half *)(row + at));
}

/* Bytes a copy of a coded tensor's rows may move (16, 8, 4 or 2: what every row start and
 * the row's length allow; the planner takes no call where it is less than 2), rows of rb
 * bytes. Paged and packed rows start at sums of these. */
FCL_INLINE uint fa_mma_raw_chunk(ulong offset, ulong batch, ulong head, ulong token, uint rb)
{
    const ulong any = offset | batch | head | token | rb;
    return any % 16 == 0 ? 16 : any % 8 == 0 ? 8 : any % 4 == 0 ? 4 : 2;
}

/* What values [col, col + 8) (col a multiple of 8) of a row of 4- or 5-bit ggml blocks
 * (q4_0, q4_1, q5_0, q5_1, iq4_nl) are made of: the 8 bytes whose low (i < 16) or high
 * nibbles (i, 0, 8, 16 or 24, the first value's place in its block) are their codes, the qh
 * bits from bit i (0 without), the codes' bias (8, or 16 with a fifth bit), d, and m centred
 * (q4_1, q5_1: d n + m as d (n - bias) + (m + bias d): small codes, so that a product's
 * rounding is relative to what they add; else 0). */
typedef struct {
    uint w[2], h, bias;
    float d, m;
} fa_nibbles;

FCL_INLINE fa_nibbles fa_nibble_block(__local const uchar *row, uint format, uint col)
{
    const uint i = col % 32;
    const fcl_nibble_layout l = fcl_nibble_layout_of(format);
    fa_nibbles n;
    n.bias = l.centre;
    __local const uchar *b = row + col / 32 * l.bytes;
    n.w[0] = fa_raw_word(b, l.qs + i % 16), n.w[1] = fa_raw_word(b, l.qs + i % 16 + 4);
    n.h = l.qh ? fa_raw_word(b, l.qh) >> i : 0;
    n.d = fa_raw_half(b, 0);
    n.m = l.has_m ? fma((float)n.bias, n.d, fa_raw_half(b, 2)) : 0.0f;
    return n;
}

/* Values [col, col + 8) of a row of a coded format (col a multiple of 8, so that they lie in
 * one ggml block) as d c + m: the codes c (small integers, exact in f16 and bf16) into x,
 * the block's factors into d and m (fp8, int8: c is the value, d 1 and m 0), read once, the
 * codes as two words; fcl_kv_decode (attention_common.cl) is the reference. An unknown format
 * gives NaN. */
FCL_INLINE void fa_kv_codes8_local(float *x, float *d, float *m, __local const uchar *row,
                                   uint format, uint col)
{
    const uint i = col % 32; /* the first value's place in its block */
    *d = 1.0f, *m = 0.0f;
    if (format >= FCL_KV_FP8_E4M3) { /* a byte a value */
        const uint w[2] = {fa_raw_word(row, col), fa_raw_word(row, col + 4)};
        #pragma unroll
        for (uint e = 0; e < 8; e++) {
            const uint c = (w[e / 4] >> (8 * (e % 4))) & 0xffu;
            x[e] = format == FCL_KV_INT8 ? (float)(char)c
                   : format == FCL_KV_FP8_E4M3 ? fcl_fp8_e4m3_value(c) : fcl_fp8_e5m2_value(c);
        }
        *d = format <= FCL_KV_INT8 ? 1.0f : NAN;
        return;
    }
    if (format == FCL_KV_Q8_0) {
        __local const uchar *b = row + col / 32 * 34;
        const uint w[2] = {fa_raw_word(b, 2 + i), fa_raw_word(b, 6 + i)};
        *d = fa_raw_half(b, 0);
        #pragma unroll
        for (uint e = 0; e < 8; e++)
            x[e] = (float)(char)(w[e / 4] >> (8 * (e % 4)));
        return;
    }
    const fa_nibbles blk = fa_nibble_block(row, format, col); /* 4- and 5-bit blocks */
    *d = format >= FCL_KV_Q4_0 && format <= FCL_KV_IQ4_NL ? blk.d : NAN;
    *m = blk.m;
    #pragma unroll
    for (uint e = 0; e < 8; e++) {
        const uint byte = blk.w[e / 4] >> (8 * (e % 4));
        const uint n = (i < 16 ? byte & 15u : (byte >> 4) & 15u) | ((blk.h >> e) & 1u) << 4;
        x[e] = format == FCL_KV_IQ4_NL ? fcl_iq4_nl_values[n] : (float)((int)n - (int)blk.bias);
    }
}

/* The same values decoded: d c + m. */
FCL_INLINE void fa_kv_decode8_local(float *x, __local const uchar *row, uint format, uint col)
{
    float d, m;
    fa_kv_codes8_local(x, &d, &m, row, format, col);
    #pragma unroll
    for (uint e = 0; e < 8; e++)
        x[e] = fma(d, x[e], m);
}

/* Bytes of a word picked by a prmt selector (4: a zero byte). */
FCL_INLINE uint fa_prmt(uint a, uint selector)
{
    uint r;
    __asm__("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(0u), "r"(selector));
    return r;
}
FCL_INLINE uint fa_f16x2_sub(uint a, uint b)
{
    uint r;
    __asm__("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
FCL_INLINE uint fa_f16x2_mul(uint a, uint b)
{
    uint r;
    __asm__("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

/* E4M3 codes `upper` of w (0: bytes 0 and 1; 1: bytes 2 and 3) as an f16 pair by the
 * hardware's conversion (compute capability 8.9 and later): exact, NaN codes to NaN. */
FCL_INLINE uint fa_e4m3_pair_cvt(uint w, uint upper)
{
    uint r;
    if (upper)
        __asm__("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, h;}"
                : "=r"(r) : "r"(w));
    else
        __asm__("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, l;}"
                : "=r"(r) : "r"(w));
    return r;
}

/* fp8 codes `upper` of w (0: bytes 0 and 1; 1: bytes 2 and 3) as an f16 pair: E5M2's as f16's
 * top byte; E4M3's by fa_e4m3_pair_cvt where the program has it (FA_NV_FP8_CVT: the
 * planner's fcl_plan_fp8_cvt), else its bits as f16's shifted by one (the value times 2^-8,
 * subnormals too) times 256. Exact for finite codes. A NaN or infinite one is the caller's to
 * find: E4M3's come out finite without the instruction. */
FCL_INLINE uint fa_fp8_pair_f16(uint w, uint upper, int e5m2)
{
    if (FA_NV_FP8_CVT && !e5m2)
        return fa_e4m3_pair_cvt(w, upper);
    const uint t = fa_prmt(w, upper ? 0x3424u : 0x1404u); /* codes << 8 */
    return e5m2 ? t : fa_f16x2_mul(((t >> 1) & 0x3f803f80u) | (t & 0x80008000u), 0x5c005c00u);
}

/* The byte codes of w that are fp8 NaN or infinite, as bits (0 for other formats). */
FCL_INLINE uint fa_fp8_nonfinite(uint w, uint format)
{
    const int e5m2 = format == FCL_KV_FP8_E5M2;
    const uint top = e5m2 ? 0x7c7c7c7cu : 0x7f7f7f7fu, one = e5m2 ? 0x04040404u : 0x01010101u;
    return format == FCL_KV_FP8_E4M3 || e5m2 ? ((w & top) + one) & 0x80808080u : 0u;
}

/* Whether both 16-bit values of an f16 pair are finite. */
FCL_INLINE int fa_f16x2_finite(uint w)
{
    return (w & 0x7c00u) != 0x7c00u && (w & 0x7c000000u) != 0x7c000000u;
}

/* fa_kv_codes8_local's codes as f16 pairs, without float conversions, where that is exact and
 * cheap: a byte c as f16(1024 + (c ^ 0x80)) - 1152 (int8, q8_0), a nibble n (and fifth bit) as
 * f16(1024 + n) - 1024 - bias (q4_x, q5_x), an E5M2 code as f16's top byte, an E4M3 code's bits
 * as f16's shifted by one (the value times 2^-8, subnormals too) times 256. 0 where it does
 * not apply (iq4_nl; fp8's NaN and infinite codes): the caller takes the float path. */
FCL_INLINE int fa_kv_codes8_fast_f16(uint4 *out, float *d, float *m, __local const uchar *row,
                                     uint format, uint col)
{
    const uint i = col % 32;
    uint w[2], r[4];
    int ok = 1;
    *d = 1.0f, *m = 0.0f;
    if (format == FCL_KV_INT8 || format == FCL_KV_Q8_0) {
        if (format == FCL_KV_Q8_0) {
            __local const uchar *b = row + col / 32 * 34;
            w[0] = fa_raw_word(b, 2 + i), w[1] = fa_raw_word(b, 6 + i);
            *d = fa_raw_half(b, 0);
        } else {
            fa_raw_8(w, row + col);
        }
        #pragma unroll
        for (uint k = 0; k < 4; k++)
            r[k] = fa_f16x2_sub((fa_prmt(w[k / 2], k % 2 ? 0x4342u : 0x4140u) ^ 0x00800080u) |
                                    0x64006400u,
                                0x64806480u);
    } else if (format == FCL_KV_FP8_E4M3 || format == FCL_KV_FP8_E5M2) {
        const int e5m2 = format == FCL_KV_FP8_E5M2;
        fa_raw_8(w, row + col);
        /* no NaN or infinite code (tested after the conversion, so that a caller's copies
         * stay free of branches) */
        ok = !(fa_fp8_nonfinite(w[0], format) | fa_fp8_nonfinite(w[1], format));
        #pragma unroll
        for (uint k = 0; k < 4; k++)
            r[k] = fa_fp8_pair_f16(w[k / 2], k % 2, e5m2);
    } else if (format >= FCL_KV_Q4_0 && format <= FCL_KV_Q5_1) {
        const fa_nibbles blk = fa_nibble_block(row, format, col);
        const uint bias = (0x6400u + blk.bias) * 0x10001u; /* f16 1024 + bias, twice */
        *d = blk.d, *m = blk.m;
        #pragma unroll
        for (uint k = 0; k < 4; k++) {
            uint n = (fa_prmt(blk.w[k / 2], k % 2 ? 0x4342u : 0x4140u) >> (i < 16 ? 0 : 4)) &
                     0x000f000fu;
            n |= ((blk.h >> (2 * k)) & 1u) << 4 | ((blk.h >> (2 * k + 1)) & 1u) << 20;
            r[k] = fa_f16x2_sub(n | 0x64006400u, bias);
        }
    } else {
        return 0;
    }
    *out = (uint4)(r[0], r[1], r[2], r[3]);
    return ok;
}

/* bf16 tiles take the float path (bf16 holds the codes, not these bit patterns). */
FCL_INLINE int fa_kv_codes8_fast_bf16(uint4 *out, float *d, float *m, __local const uchar *row,
                                      uint format, uint col)
{
    return 0;
}

/* Values col and col + 1 (col even) of such a row: a call, so that the slow path that reads
 * them (fa_mma_add_nonfinite) stays small enough to unroll over its registers. */
__attribute__((noinline)) float2 fa_kv_pair_local(__local const uchar *row, uint format, uint col)
{
    float x[8];
    fa_kv_decode8_local(x, row, format, col / 8 * 8);
    float2 v = (float2)(x[0], x[1]);
    #pragma unroll
    for (uint e = 2; e < 8; e += 2)
        v = col % 8 == e ? (float2)(x[e], x[e + 1]) : v;
    return v;
}

/* 2^x, results below 2^-126 flushed to zero: one instruction (MUFU.EX2), where OpenCL's exp2
 * keeps subnormal results at the cost of three more. The probabilities it gives are at most
 * 1 and each row has one near 1, so what the flush drops is below float32's rounding of l. */
FCL_INLINE float fa_mma_exp2(float x)
{
    float y;
    __asm__("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* x cut to TF32 (its sign, exponent and first 10 mantissa bits: what the tensor cores read),
 * toward zero, so that no finite x becomes infinite. */
FCL_INLINE float fa_tf32_big(float x) { return as_float(as_uint(x) & 0xffffe000u); }

/* What fa_tf32_big(x) = big drops, itself cut to TF32: big + small is x within 2^-20 |x|
 * (the 3xTF32 split). An infinite x has a NaN small part (inf - inf), so that every product
 * it enters is NaN: keeping it infinite instead (a test and a select a value) cost 14-17% of
 * the kernel's time on the H100, where the splits, not the tensor cores, set the pace. */
FCL_INLINE float fa_tf32_small(float x, float big) { return fa_tf32_big(x - big); }

/* d += a b in float32 by three TF32 products: the big parts' product and each big part times
 * the other's small part, the small terms first (the small parts' product, below 2^-20 of
 * the whole, is left out). a: the A fragment's big parts and small parts, b0, b1 as float32. */
FCL_INLINE void fa_mma_3xtf32(float *d, const float *a_big, const float *a_small, float b0,
                              float b1)
{
    const float b0_big = fa_tf32_big(b0), b1_big = fa_tf32_big(b1);
    fa_mma_tf32(d, a_small, b0_big, b1_big);
    fa_mma_tf32(d, a_big, fa_tf32_small(b0, b0_big), fa_tf32_small(b1, b1_big));
    fa_mma_tf32(d, a_big, b0_big, b1_big);
}
#endif /* FA_MMA_HELPERS */
/* FA_MMA_HELPERS_ONLY: the helpers above alone, for a program of the 8-bit decode kernel
 * (cl/attention_decode_kv_nv.cl) without a build of this file's kernel */
#ifndef FA_MMA_HELPERS_ONLY

#define FA_MMA_ROWS (2 * FA_MMA_MT)    /* query rows a lane holds */
/* Score x of a lane, x < FA_MMA_SCORES, is element e = x % 4 of 8-key block j = x / 4 % NKEYS
 * of row tile mt = x / (4 NKEYS): its row (of the lane's FA_MMA_ROWS) is 2 mt + e / 2, its key
 * k0 + 8 j + 2 t + e % 2. */
#define FA_MMA_SCORES (FA_MMA_MT * FA_MMA_NKEYS * 4)
#define FA_MMA_S(x) s[(x) / (FA_MMA_NKEYS * 4)][(x) / 4 % FA_MMA_NKEYS][(x) % 4]
#define FA_MMA_ROW_OF(x) ((x) / (FA_MMA_NKEYS * 4) * 2 + (x) % 4 / 2)
#define FA_MMA_KEY(x) (k0 + kw * FA_MMA_WKEYS + (x) / 4 % FA_MMA_NKEYS * 8 + 2 * t + (x) % 2)
/* ALiBi's slope of the lane's row r (the kernel's slope[]: one a row in the GQA builds),
 * and the i of its query's position p(i) (fa_query_index: rows may be heads only there; in
 * the prefill builds its test a score took the H200's B4 H16/4 L4096 D128 causal ALiBi
 * prefill from 1.46 to 1.49 ms) */
#define FA_MMA_SLOPE(r) slope[FA_MMA_KWARPS > 1 ? (r) : 0]
#define FA_MMA_QUERY_INDEX(qi) (FA_MMA_KWARPS > 1 ? fa_query_index(p, qi) : (qi))
/* A lane's row r in its work-group's block of FA_MMA_BQ: row g + 8 (r % 2) of row tile r / 2
 * of the warp's row tiles */
#define FA_MMA_BLOCK_ROW(r) ((rw * FA_MMA_MT + (r) / 2) * 16 + g + 8 * ((r) % 2))
#define FA_MMA_ROW_WARPS (FA_MMA_WARPS / FA_MMA_KWARPS) /* warps with rows of their own */
#define FA_MMA_BQ (FA_MMA_ROW_WARPS * 16 * FA_MMA_MT)    /* queries a work-group */
#define FA_MMA_WKEYS (FA_MMA_BK / FA_MMA_KWARPS)         /* keys of a tile a warp takes */
#define FA_MMA_NKEYS (FA_MMA_WKEYS / 8)                  /* 8-key blocks of a warp's scores */
#define FA_MMA_NDIMS (FA_D / 8)   /* 8-column blocks of the output */
/* The builds for K/V formats (v0.3, 16-bit products only): a K or V of q's type is copied
 * into its tile as in the other builds; one of a coded format goes by its bytes into the
 * staging buffer raw (one tile's rows of FA_MMA_RAW_ROW bytes at most, q8_0's), and is
 * decoded from there into the tile. Scales stay out of the tiles: TENSOR and HEAD factors
 * scale the scores and the output, TOKEN ones each key's score and p. Where V's factors join
 * p in f16 (TOKEN scales; ggml's d under float32 q), p carries a power of two per tile that
 * puts the largest factor near f16's top (fa_mma_v_unit), and o with it until the end. */
#define FA_MMA_KV ((FA_FEATURES >> FA_FLAG_KV_BIT & 1) && !FA_MMA_F32)
#define FA_MMA_RAW_ROW (FA_D / 32 * 34)
/* A build for one format's (FA_MMA_FORMAT_K, K's and V's) row bytes at FA_D: the distance of
 * its staged rows, a multiple of every copy's size (a power of two that divides the bytes of
 * a row of head_dim <= FA_D values, FA_D a power of two) */
#define FA_MMA_PITCH_CASE(NAME, name, value, dtype, elems, bytes, roles)                        \
    +((value) == FA_MMA_FORMAT_K ? FA_D / (elems) * (bytes) : 0)
#define FA_MMA_FIXED_PITCH (0 FCL_KV_FORMATS(FA_MMA_PITCH_CASE))
/* Whether the tiles are f16 (the common formats' decoding then takes the format as a
 * constant: fa_mma_decode_tile) */
#define FA_MMA_F16_TILES FCL_CAT(FA_MMA_V_VALUES, FA_MMA_T)
/* Whether V's ggml blocks are decoded to values (d c + m rounded once) rather than codes:
 * in f16 tiles, whose 11 bits keep them within the half-precision rule (bf16's 8 would not);
 * not under float32 q, whose output keeps float32's (codes are exact in f16, the factors
 * apply in float32) */
#define FA_MMA_VALUES (FA_MMA_F16_TILES && !FA_MMA_Q32)
/* K decoded from global memory beside the second product (fa_mma_k_fetch): the builds for
 * one format with f16 tiles and f16 q (H200, B4 H16 L4096 causal prefill, one call, two
 * rounds, ms: D128 q8_0 2.65 -> 2.57, fp8_e4m3 1.98-2.00 -> 1.82, int8 with TOKEN scales
 * 2.41-2.44 -> 2.25, int8 1.87-1.88 -> 1.89-1.91; D64 q8_0 1.58-1.60 -> 1.45, int8 1.19-1.20
 * -> 1.14; float32 q over q8_0 at D64 2.48-2.49 -> 2.61, which keeps K's staging) */
#if FA_MMA_KV && FA_MMA_FORMAT_K && FA_MMA_F16_TILES && !FA_MMA_Q32
#define FA_MMA_K_DIRECT 1
#else
#define FA_MMA_K_DIRECT 0
#endif

/* ---- what depends on the storage type: the elements of the tiles and of q's fragments, the
 * q.k columns of one product (FA_MMA_KDIMS), q's fragments, and the two products ---- */
#if FA_MMA_F32
#define FA_MMA_ELEM float /* storage element */
#define FA_MMA_CHUNK 4     /* elements a 16-byte copy moves */
#define FA_MMA_QWORD float /* a register of q's A fragments: one float32 value */
#define FA_MMA_KDIMS 8
/* Floats per local row: rows 16 bytes apart (cp.async), and a fragment load's 32 lanes in 32
 * banks: K's (row g, column t) at bank 4 g + t, V's (row 2 t, column g) at 8 t + g. */
#define FA_MMA_ROW(d) ((d) + 4)
#else
#define FA_MMA_ELEM ushort
#define FA_MMA_CHUNK 8
#define FA_MMA_QWORD uint /* two 16-bit values */
#define FA_MMA_KDIMS 16
/* Halves per local row: rows start 16 bytes apart (ldmatrix and cp.async need it), and the
 * 8 rows a fragment load touches fall 4 banks apart, in 32 different banks. */
#define FA_MMA_ROW(d) ((d) + 8)
#endif
#define FA_MMA_KSTEPS (FA_D / FA_MMA_KDIMS) /* products along q.k */
#define FA_MMA_QPARTS (1 + FA_MMA_Q32)      /* f16 parts of q's (and p's) fragments */
/* The next tile's rows are looked up before the scores (16-bit types: 2-8% faster on the H100
 * than after) or after them (float32, whose registers are fuller: 15% faster at head dim 64
 * than before, and no spill at 128). */
#define FA_MMA_EARLY_ROWS (!FA_MMA_F32)
#define FA_MMA_ROW_CHUNKS (FA_D / FA_MMA_CHUNK)         /* 16-byte copies a tile row */
#define FA_MMA_THREADS (FA_MMA_WARPS * 32)
#if FA_MMA_THREADS % FA_MMA_ROW_CHUNKS || FA_MMA_BK * FA_MMA_ROW_CHUNKS % FA_MMA_THREADS
#error "the tile copies of fa_mma_load_tile do not divide among the work-items"
#endif
#if FA_MMA_WARPS % FA_MMA_KWARPS || FA_MMA_WKEYS % (FA_MMA_F32 ? 8 : 16) ||                   \
    (FA_MMA_KWARPS > 1 &&                                                                      \
     FA_MMA_BQ * FA_D * 4 > FA_MMA_BK * FA_MMA_ROW(FA_D) * (FA_MMA_F32 ? 4 : 2))
#error "the key warps' shares of a tile, or their merge in the K tile, do not fit"
#endif

/* Where rows [k0, k0 + FA_MMA_BK) of K and V start (k0 < end; rows past end repeat row k0),
 * for the tile copies: one lookup a key for both (a block-table load where paged), made once
 * a tile rather than by each of the copies of a row, which then waited on it. The caller
 * orders the writes after the reads of the tile that used k_at and v_at before (a barrier
 * since its copies were issued) and before the reads (a barrier before the copies; for the
 * TOKEN scales, copied, a wait for this work-item's copies before that barrier). */
FCL_INLINE void FCL_CAT(fa_mma_tile_rows, FA_NAME)(__local ulong *k_at, __local ulong *v_at,
                                                  __local float *k_sc, __local float *v_sc,
                                                  const fa_params *p, const fa_io *io,
                                                  const fa_seq *s, ulong k0, ulong end)
{
    for (uint t = get_local_id(0); t < FA_MMA_BK; t += FA_MMA_THREADS) {
        const fa_place at = fa_place_of(p, io, &s->k, k0 + t < end ? k0 + t : k0);
        k_at[t] = fa_row_at(&s->k, at);
        v_at[t] = fa_row_at(&s->v, at);
#if FA_MMA_KV /* ... and the rows' TOKEN scales by cp.async, waited for with the tile's rows */
        if (p->flags & FA_FLAG_K_TOKEN_SCALES)
            fa_mma_copy4(&k_sc[t], io->k_scales + fa_row_at(&s->ks, at), 4u);
        if (p->flags & FA_FLAG_V_TOKEN_SCALES)
            fa_mma_copy4(&v_sc[t], io->v_scales + fa_row_at(&s->vs, at), 4u);
#endif
    }
}

/* Copies rows [k0, k0 + FA_MMA_BK) of a K or V tensor (row t at src + row_at[t]) into tile,
 * 16 bytes a copy; rows past end and columns past dim become zeros. */
FCL_INLINE void FCL_CAT(fa_mma_load_tile, FA_NAME)(__local FA_MMA_ELEM (*tile)[FA_MMA_ROW(FA_D)],
                                                  __global const FA_MMA_ELEM *src,
                                                  __local const ulong *row_at, ulong k0,
                                                  ulong end, uint dim)
{
    /* Copy i of a work-item is chunk lid + i FA_MMA_THREADS: the same column each time, rows
     * FA_MMA_THREADS / FA_MMA_ROW_CHUNKS apart (both divide: the #error by the defines), so
     * the unrolled loop's rows and addresses are constant offsets (on the H100 13-19% faster
     * in f16 and 6-8% in float32 than a loop that divided each chunk index). */
    const uint lid = get_local_id(0), row0 = lid / FA_MMA_ROW_CHUNKS;
    const uint col = lid % FA_MMA_ROW_CHUNKS * FA_MMA_CHUNK;
    const ulong rows_left = end - k0;
    #pragma unroll
    for (uint i = 0; i < FA_MMA_BK * FA_MMA_ROW_CHUNKS / FA_MMA_THREADS; i++) {
        const uint row = row0 + i * (FA_MMA_THREADS / FA_MMA_ROW_CHUNKS);
        const int inside = row < rows_left && col < dim;
        __global const FA_MMA_ELEM *from = inside ? src + row_at[row] + col : src;
#if FA_MMA_L2_LINES
        fa_mma_copy16_line(&tile[row][col], from, inside ? 16 : 0);
#else
        fa_mma_copy16(&tile[row][col], from, inside ? 16 : 0);
#endif
    }
}

#if FA_MMA_KV
/* Work-items a row of fa_mma_stage_tile: each looks its row up once and takes every
 * FA_MMA_STAGERS-th copy of it. */
#define FA_MMA_STAGERS (FA_MMA_THREADS / FA_MMA_BK)
#if FA_MMA_THREADS % FA_MMA_BK
#error "fa_mma_stage_tile gives each row the same number of work-items"
#endif

/* The bytes of rows [k0, k0 + FA_MMA_BK) of a coded K or V (row t at byte row_at[t] of src,
 * rb bytes) into raw, pitch bytes apart, chunk bytes a copy (a constant where
 * fa_mma_stage_tile calls it); rows past end become zeros (which decode to 0 in every
 * format). Their row_at repeats row k0's, so every address read is a row's. */
FCL_INLINE void FCL_CAT(fa_mma_stage_rows, FA_NAME)(__local uchar *raw, __global const uchar *src,
                                                   __local const ulong *row_at, ulong k0,
                                                   ulong end, uint rb, uint pitch, uint chunk)
{
    const uint lid = get_local_id(0), row = lid / FA_MMA_STAGERS;
    const uint bytes = row < end - k0 ? chunk : 0;
    __global const uchar *from = src + row_at[row];
    __local uchar *to = raw + row * pitch;
    for (uint at = lid % FA_MMA_STAGERS * chunk; at < rb; at += FA_MMA_STAGERS * chunk)
        fa_mma_copy(to + at, from + at, chunk, bytes);
}

/* ... rows that start or end 2 bytes past a multiple of 4 (ggml's rows of an odd number of
 * 34-, 18- or 22-byte blocks: q8_0, q4_0, q5_0 or iq4_nl at head dim 96), which cp.async
 * (4 bytes at least, between multiples of 4) cannot copy: 4 bytes a work-item at a time by
 * two 2-byte loads and a store (pitch a multiple of 4), which waits here for its loads. */
FCL_INLINE void FCL_CAT(fa_mma_stage_rows2, FA_NAME)(__local uchar *raw, __global const uchar *src,
                                                    __local const ulong *row_at, ulong k0,
                                                    ulong end, uint rb, uint pitch)
{
    const uint lid = get_local_id(0), row = lid / FA_MMA_STAGERS;
    const int inside = row < end - k0;
    __global const ushort *from = (__global const ushort *)(src + row_at[row]);
    __local uint *to = (__local uint *)(raw + row * pitch);
    for (uint w = lid % FA_MMA_STAGERS; 4 * w < rb; w += FA_MMA_STAGERS) {
        const uint lo = inside ? from[2 * w] : 0u;
        const uint hi = inside && 4 * w + 2 < rb ? from[2 * w + 1] : 0u;
        to[w] = lo | hi << 16;
    }
}

/* ... with the copy's size a constant in each loop (H200, B4 H16 L4096 D128 causal prefill:
 * a copy took about 58 instructions when each work-item's copies ran over the tile's, with
 * a division, a row lookup and a size test each, and q8_0's 17 copies a row cost a quarter
 * of its kernel's instructions). */
FCL_INLINE void FCL_CAT(fa_mma_stage_tile, FA_NAME)(__local uchar *raw, __global const uchar *src,
                                                   __local const ulong *row_at, ulong k0,
                                                   ulong end, uint rb, uint pitch, uint chunk)
{
    if (chunk == 16)
        FCL_CAT(fa_mma_stage_rows, FA_NAME)(raw, src, row_at, k0, end, rb, pitch, 16);
    else if (chunk == 8)
        FCL_CAT(fa_mma_stage_rows, FA_NAME)(raw, src, row_at, k0, end, rb, pitch, 8);
    else if (chunk == 4)
        FCL_CAT(fa_mma_stage_rows, FA_NAME)(raw, src, row_at, k0, end, rb, pitch, 4);
    else
        FCL_CAT(fa_mma_stage_rows2, FA_NAME)(raw, src, row_at, k0, end, rb, pitch);
}

/* The staged rows of a coded K or V into tile, 8 columns a work-item at a time (columns
 * past dim zeros), format a constant where fa_mma_decode_tile calls it:
 * - with values (f16 tiles of ggml blocks, V): each value d c + m rounded once to f16, so
 *   that the second product is fa_mma_accumulate's; where one is not finite in f16 (a block
 *   factor too large for f16 values, or not finite) *redo is set, and the caller decodes the
 *   tile again as codes;
 * - else codes: integers (or fp8 values), exact in the 16-bit type, so that what the products
 *   round is only q and p; ggml blocks' factors into blk_d and blk_m ([block][key]:
 *   fa_mma_scores_of and fa_mma_accumulate_blocks apply them in float32). K's NaN and
 *   infinite fp8 codes stay in the tile (its key's scores are NaN or infinite, and hidden
 *   keys' scores become -inf). V's (where bad is given) become 0 there and set their row's
 *   bit in bad: a key hidden from some rows (weight 0) must add nothing to them, which 0
 *   times NaN in a product would not; fa_mma_add_nonfinite adds them where the weight is not
 *   0 (bad cleared before, a barrier between). */
FCL_INLINE void FCL_CAT(fa_mma_decode_tile_of, FA_NAME)(__local ushort (*tile)[FA_MMA_ROW(FA_D)],
                                                       __local float (*blk_d)[FA_MMA_BK],
                                                       __local float (*blk_m)[FA_MMA_BK],
                                                       __local const uchar *raw, uint format,
                                                       uint pitch, uint dim, __local uint *bad,
                                                       int values, __local uint *redo)
{
#define FA_MMA_COPIES (FA_MMA_BK * FA_MMA_ROW_CHUNKS / FA_MMA_THREADS) /* a work-item's */
#define FA_MMA_COPY_ROW(n) ((get_local_id(0) + (n) * FA_MMA_THREADS) / FA_MMA_ROW_CHUNKS)
#define FA_MMA_COPY_COL(n) ((get_local_id(0) + (n) * FA_MMA_THREADS) % FA_MMA_ROW_CHUNKS * 8)
    /* The codes of every copy without a branch, then one branch for the work-item where one
     * needs the float path (a NaN or infinite fp8 code, iq4_nl, values with an m). */
    uint4 codes[FA_MMA_COPIES];
    float d[FA_MMA_COPIES], m[FA_MMA_COPIES];
    int fast = 1;
    #pragma unroll
    for (uint n = 0; n < FA_MMA_COPIES; n++) {
        codes[n] = (uint4)(0);
        d[n] = m[n] = 0.0f;
        if (FA_MMA_COPY_COL(n) < dim)
            fast &= FCL_CAT(fa_kv_codes8_fast, FA_MMA_T)(&codes[n], &d[n], &m[n],
                                                          raw + FA_MMA_COPY_ROW(n) * pitch, format,
                                                          FA_MMA_COPY_COL(n));
    }
    const int with_m = format == FCL_KV_Q4_1 || format == FCL_KV_Q5_1;
    if (!fast || (values && with_m)) {
        #pragma unroll
        for (uint n = 0; n < FA_MMA_COPIES; n++) {
            const uint row = FA_MMA_COPY_ROW(n);
            float x[8];
            int finite = 1;
            if (FA_MMA_COPY_COL(n) >= dim)
                continue;
            fa_kv_codes8_local(x, &d[n], &m[n], raw + row * pitch, format, FA_MMA_COPY_COL(n));
            #pragma unroll
            for (uint e = 0; e < 8; e++) {
                x[e] = values ? fma(d[n], x[e], m[n]) : x[e];
                finite &= isfinite(x[e]);
                x[e] = bad && !isfinite(x[e]) ? 0.0f : x[e];
            }
            if (bad && !finite)
                atomic_or(&bad[row / 32], 1u << row % 32);
            codes[n] = (uint4)(FCL_CAT(fcl_nv_pack, FA_MMA_T)(x[0], x[1]),
                               FCL_CAT(fcl_nv_pack, FA_MMA_T)(x[2], x[3]),
                               FCL_CAT(fcl_nv_pack, FA_MMA_T)(x[4], x[5]),
                               FCL_CAT(fcl_nv_pack, FA_MMA_T)(x[6], x[7]));
        }
    } else if (values) { /* codes times d, rounded once */
        #pragma unroll
        for (uint n = 0; n < FA_MMA_COPIES; n++) {
            const uint dd = fcl_nv_pack_f16(d[n], d[n]);
            codes[n] = (uint4)(fa_f16x2_mul(codes[n].x, dd), fa_f16x2_mul(codes[n].y, dd),
                               fa_f16x2_mul(codes[n].z, dd), fa_f16x2_mul(codes[n].w, dd));
        }
    }
    int finite_all = 1;
    #pragma unroll
    for (uint n = 0; n < FA_MMA_COPIES; n++) {
        const uint row = FA_MMA_COPY_ROW(n), col = FA_MMA_COPY_COL(n);
        finite_all &= fa_f16x2_finite(codes[n].x) & fa_f16x2_finite(codes[n].y) &
                      fa_f16x2_finite(codes[n].z) & fa_f16x2_finite(codes[n].w);
        if (!values && col % 32 == 0) {
            blk_d[col / 32][row] = d[n];
            if (with_m) /* (blk_m has one row in the builds for one format) */
                blk_m[col / 32][row] = m[n];
        }
        *(__local uint4 *)&tile[row][col] = codes[n];
    }
    if (values && !finite_all)
        atomic_or(redo, 1u);
}

/* fa_mma_decode_tile_of with the format a constant for the common formats: each one's loop is
 * then free of branches, and the compiler interleaves its copies' loads and conversions (H200,
 * B4 H16 L4096 D128 causal prefill: a format read at run time made the fp8 calls 27% and the
 * q8_0 calls 68% slower), in f16 tiles. The other formats, and bf16 tiles, read it at run time:
 * a case each would make the compile of these programs about twice as long. */
FCL_INLINE void FCL_CAT(fa_mma_decode_tile, FA_NAME)(__local ushort (*tile)[FA_MMA_ROW(FA_D)],
                                                    __local float (*blk_d)[FA_MMA_BK],
                                                    __local float (*blk_m)[FA_MMA_BK],
                                                    __local const uchar *raw, uint format,
                                                    uint pitch, uint dim, __local uint *bad,
                                                    int values, __local uint *redo)
{
#define FA_MMA_DECODE_AS(f)                                                                    \
    FCL_CAT(fa_mma_decode_tile_of, FA_NAME)(tile, blk_d, blk_m, raw, f, pitch, dim, bad, values,  \
                                            redo)
#if FA_MMA_F16_TILES
    switch (format) {
    case FCL_KV_Q8_0: FA_MMA_DECODE_AS(FCL_KV_Q8_0); break;
    case FCL_KV_Q4_0: FA_MMA_DECODE_AS(FCL_KV_Q4_0); break;
    case FCL_KV_FP8_E4M3: FA_MMA_DECODE_AS(FCL_KV_FP8_E4M3); break;
    case FCL_KV_FP8_E5M2: FA_MMA_DECODE_AS(FCL_KV_FP8_E5M2); break;
    case FCL_KV_INT8: FA_MMA_DECODE_AS(FCL_KV_INT8); break;
    default: FA_MMA_DECODE_AS(format);
    }
#else
    FA_MMA_DECODE_AS(format);
#endif
#undef FA_MMA_DECODE_AS
}
#endif

#if FA_MMA_K_DIRECT
/* K's tile straight from global memory, in a build for one format (FA_MMA_FORMAT_K) with f16
 * tiles: each work-item reads its copies' codes into registers (fa_mma_k_fetch) before the
 * second product of the tile before and writes them to the tile after it (fa_mma_k_store), so
 * that K's decoding runs beside that product, with neither K's staging nor its barriers. Its
 * copies are fa_mma_decode_tile_of's (FA_MMA_COPIES). */
/* Two words from 16-bit loads (an address 2 bytes past a multiple of 4: ggml's blocks of 34
 * and 18 bytes), or one 8-byte load where wide. */
FCL_INLINE uint2 fa_mma_k_word_pair(__global const uchar *at, int wide)
{
    if (wide)
        return *(__global const uint2 *)at;
    __global const ushort *h = (__global const ushort *)at;
    return (uint2)(h[0] | (uint)h[1] << 16, h[2] | (uint)h[3] << 16);
}

/* The codes of values [col, col + 8) of each of the work-item's copies of rows [k0, k0 +
 * FA_MMA_BK) of K (row r at byte row_at[r] of src, in format FA_MMA_FORMAT_K) as two words,
 * and their block's d (1 for int8 and fp8); rows past end and columns past dim read row k0's
 * first codes, which fa_mma_k_store makes zeros. wide: int8's and fp8's rows at multiples of
 * 8 bytes. */
FCL_INLINE void FCL_CAT(fa_mma_k_fetch, FA_NAME)(uint2 *words, float *d, __global const uchar *src,
                                                __local const ulong *row_at, ulong k0,
                                                ulong end, uint format, uint dim, int wide)
{
    #pragma unroll
    for (uint n = 0; n < FA_MMA_COPIES; n++) {
        const int inside = FA_MMA_COPY_ROW(n) < end - k0 && FA_MMA_COPY_COL(n) < dim;
        const uint col = inside ? FA_MMA_COPY_COL(n) : 0, i = col % 32;
        __global const uchar *row = src + row_at[inside ? FA_MMA_COPY_ROW(n) : 0];
        if (format == FCL_KV_Q8_0 || format == FCL_KV_Q4_0) {
            __global const uchar *b = row + col / 32 * (format == FCL_KV_Q8_0 ? 34 : 18);
            words[n] = fa_mma_k_word_pair(b + 2 + (format == FCL_KV_Q8_0 ? i : i % 16), 0);
            d[n] = vload_half(0, (__global const half *)b);
        } else {
            words[n] = fa_mma_k_word_pair(row + col, wide);
            d[n] = 1.0f;
        }
    }
}

/* The copies fa_mma_k_fetch read, as f16 codes (fa_kv_codes8_fast_f16's conversions), into
 * tile, and the blocks' d into blk_d (ggml's formats); an E4M3 NaN code without the hardware's
 * conversion by the float path (fcl_fp8_e4m3_value), so that K keeps NaN where its codes do. */
FCL_INLINE void FCL_CAT(fa_mma_k_store, FA_NAME)(__local ushort (*tile)[FA_MMA_ROW(FA_D)],
                                                __local float (*blk_d)[FA_MMA_BK],
                                                const uint2 *words, const float *d, ulong k0,
                                                ulong end, uint format, uint dim)
{
    #pragma unroll
    for (uint n = 0; n < FA_MMA_COPIES; n++) {
        const uint row = FA_MMA_COPY_ROW(n), col = FA_MMA_COPY_COL(n);
        const int inside = row < end - k0 && col < dim;
        const uint w[2] = {words[n].x, words[n].y};
        uint r[4];
        #pragma unroll
        for (uint k = 0; k < 4; k++) {
            const uint pair = fa_prmt(w[k / 2], k % 2 ? 0x4342u : 0x4140u); /* 2 codes, 16 bits */
            if (format == FCL_KV_INT8 || format == FCL_KV_Q8_0)
                r[k] = fa_f16x2_sub((pair ^ 0x00800080u) | 0x64006400u, 0x64806480u);
            else if (format == FCL_KV_Q4_0) /* low nibbles for values 0-15 of a block */
                r[k] = fa_f16x2_sub((pair >> (col % 32 < 16 ? 0 : 4) & 0x000f000fu) | 0x64006400u,
                                    0x64086408u);
            else
                r[k] = fa_fp8_pair_f16(w[k / 2], k % 2, format == FCL_KV_FP8_E5M2);
        }
        if (!FA_NV_FP8_CVT && format == FCL_KV_FP8_E4M3 &&
            (fa_fp8_nonfinite(w[0], format) | fa_fp8_nonfinite(w[1], format))) {
            #pragma unroll
            for (uint k = 0; k < 4; k++) {
                const uint at = 16 * (k % 2); /* the pair's first byte's bit */
                r[k] = fcl_nv_pack_f16(fcl_fp8_e4m3_value(w[k / 2] >> at & 0xffu),
                                       fcl_fp8_e4m3_value(w[k / 2] >> (at + 8) & 0xffu));
            }
        }
        if ((format == FCL_KV_Q8_0 || format == FCL_KV_Q4_0) && col % 32 == 0)
            blk_d[col / 32][row] = inside ? d[n] : 0.0f;
        *(__local uint4 *)&tile[row][col] = inside ? (uint4)(r[0], r[1], r[2], r[3]) : (uint4)(0);
    }
}
#endif
#if FA_MMA_KV
#undef FA_MMA_COPIES
#undef FA_MMA_COPY_ROW
#undef FA_MMA_COPY_COL
#endif

#if FA_MMA_F32
/* q's A fragments of one row (r % 2: the fragment's row g or g + 8) straight from global
 * memory (read once; columns past dim are zeros): (g, 8 ks + t) and (g, 8 ks + t + 4). */
FCL_INLINE void FCL_CAT(fa_mma_q_row, FA_NAME)(float (*qf)[4], __global const float *row,
                                              uint r, uint t, uint dim)
{
    #pragma unroll
    for (uint ks = 0; ks < FA_MMA_KSTEPS; ks++) {
        const uint d = ks * 8 + t;
        qf[ks][r % 2] = d < dim ? row[d] : 0.0f;
        qf[ks][2 + r % 2] = d + 4 < dim ? row[d + 4] : 0.0f;
    }
}

/* a's TF32 parts (big, and with FA_MMA_SPLIT small) for fa_mma_f32. */
FCL_INLINE void FCL_CAT(fa_mma_split4, FA_NAME)(const float *a, float *big, float *small)
{
    #pragma unroll
    for (uint e = 0; e < 4; e++) {
        big[e] = fa_tf32_big(a[e]);
        small[e] = FA_MMA_SPLIT ? fa_tf32_small(a[e], big[e]) : 0.0f;
    }
}

/* d += a b: 3xTF32 (float32's accuracy) with FA_MMA_SPLIT, else one TF32 product. */
FCL_INLINE void FCL_CAT(fa_mma_f32, FA_NAME)(float *d, const float *a_big, const float *a_small,
                                            float b0, float b1)
{
#if FA_MMA_SPLIT
    fa_mma_3xtf32(d, a_big, a_small, b0, b1);
#else
    fa_mma_tf32(d, a_big, fa_tf32_big(b0), fa_tf32_big(b1));
#endif
}

/* s = q K^T over the tile: for each 8 columns of q.k, q's fragments are split once and each
 * K fragment (key 8 j + g, columns 8 ks + t and + 4) feeds every row tile. */
FCL_INLINE void FCL_CAT(fa_mma_scores, FA_NAME)(float (*s)[FA_MMA_NKEYS][4],
                                               float (*qf)[FA_MMA_KSTEPS][4],
                                               __local const float (*k_tile)[FA_MMA_ROW(FA_D)],
                                               uint lane)
{
    const uint g = lane / 4, t = lane % 4;
    #pragma unroll
    for (uint ks = 0; ks < FA_MMA_KSTEPS; ks++) {
        float big[FA_MMA_MT][4], small[FA_MMA_MT][4];
        #pragma unroll
        for (uint mt = 0; mt < FA_MMA_MT; mt++)
            FCL_CAT(fa_mma_split4, FA_NAME)(qf[mt][ks], big[mt], small[mt]);
        #pragma unroll
        for (uint j = 0; j < FA_MMA_NKEYS; j++) {
            const float b0 = k_tile[j * 8 + g][ks * 8 + t], b1 = k_tile[j * 8 + g][ks * 8 + t + 4];
            #pragma unroll
            for (uint mt = 0; mt < FA_MMA_MT; mt++)
                FCL_CAT(fa_mma_f32, FA_NAME)(s[mt][j], big[mt], small[mt], b0, b1);
        }
    }
}

/* o += p V over the tile, 8 keys a product. The accumulators hold keys 2t and 2t + 1 of each
 * 8-key block where an A fragment wants columns t and t + 4: the product's column c stands
 * for key 2c (c < 4) and 2(c - 4) + 1, on both sides, so V's B fragment takes rows 2t and
 * 2t + 1 (column g) and no lane exchanges scores. */
FCL_INLINE void FCL_CAT(fa_mma_accumulate, FA_NAME)(float (*o)[FA_MMA_NDIMS][4],
                                                   float (*s)[FA_MMA_NKEYS][4],
                                                   __local const float (*v_tile)[FA_MMA_ROW(FA_D)],
                                                   uint lane)
{
    const uint g = lane / 4, t = lane % 4;
    #pragma unroll
    for (uint j = 0; j < FA_MMA_NKEYS; j++) {
        float big[FA_MMA_MT][4], small[FA_MMA_MT][4];
        #pragma unroll
        for (uint mt = 0; mt < FA_MMA_MT; mt++) {
            const float a[4] = {s[mt][j][0], s[mt][j][2], s[mt][j][1], s[mt][j][3]};
            FCL_CAT(fa_mma_split4, FA_NAME)(a, big[mt], small[mt]);
        }
        #pragma unroll
        for (uint n = 0; n < FA_MMA_NDIMS; n++) {
            const float b0 = v_tile[j * 8 + 2 * t][n * 8 + g];
            const float b1 = v_tile[j * 8 + 2 * t + 1][n * 8 + g];
            #pragma unroll
            for (uint mt = 0; mt < FA_MMA_MT; mt++)
                FCL_CAT(fa_mma_f32, FA_NAME)(o[mt][n], big[mt], small[mt], b0, b1);
        }
    }
}
#else
/* q's A fragments of one row (r % 2: the fragment's row g or g + 8) straight from global
 * memory (read once; columns past dim are zeros): pairs (g, 16 ks + 2t) and (g, 16 ks + 2t + 8). */
FCL_INLINE void FCL_CAT(fa_mma_q_row, FA_NAME)(uint (*qf)[4], __global const ushort *row,
                                              uint r, uint t, uint dim)
{
    #pragma unroll
    for (uint ks = 0; ks < FA_MMA_KSTEPS; ks++) {
        qf[ks][r % 2] = fa_mma_global_pair(row, ks * 16 + 2 * t, dim);
        qf[ks][2 + r % 2] = fa_mma_global_pair(row, ks * 16 + 8 + 2 * t, dim);
    }
}

#if FA_MMA_Q32
/* The same fragments of a float32 row x, as the big and small f16 parts of x 2^e
 * (fa_mma_f16_exponent, fa_mma_split_f16), and 2^-e, the factor of the row's scores. Every
 * lane of the warp calls it. */
FCL_INLINE float FCL_CAT(fa_mma_q32_row, FA_NAME)(uint (*big)[4], uint (*small)[4],
                                                 __global const float *row, uint r, uint t,
                                                 uint dim)
{
    float x[FA_MMA_KSTEPS][4], top = 0.0f;
    #pragma unroll
    for (uint ks = 0; ks < FA_MMA_KSTEPS; ks++)
        #pragma unroll
        for (uint e = 0; e < 4; e++) { /* pairs (2t, 2t + 1) and (8 + 2t, 9 + 2t) */
            const uint d = ks * 16 + e / 2 * 8 + 2 * t + e % 2;
            x[ks][e] = d < dim ? row[d] : 0.0f;
            top = fmax(top, fabs(x[ks][e]));
        }
    const int e = fa_mma_f16_exponent(top);
    #pragma unroll
    for (uint ks = 0; ks < FA_MMA_KSTEPS; ks++)
        #pragma unroll
        for (uint i = 0; i < 2; i++)
            big[ks][2 * i + r % 2] = fa_mma_split_f16(ldexp(x[ks][2 * i], e),
                                                      ldexp(x[ks][2 * i + 1], e),
                                                      &small[ks][2 * i + r % 2]);
    return ldexp(1.0f, -e);
}
#endif

/* s = q K^T over the tile: ldmatrix gives the B fragments of 8 keys for two products (32
 * columns of q.k: matrix i holds columns 8i to 8i + 7), each fed to every row tile. With
 * blk_d (a tile of ggml codes, fa_mma_codes_tile), each such 32-column block (one ggml block)
 * of each key is q.c times the key's d there, plus its m times q's sum there (has_m: q4_1,
 * q5_1), in float32 (keys: the warp's first key of the tile); without, a constant NULL, the
 * compiler removes that. */
FCL_INLINE void FCL_CAT(fa_mma_scores_of, FA_NAME)(float (*s)[FA_MMA_NKEYS][4],
                                                  uint (*qf)[FA_MMA_KSTEPS][4],
                                                  __local const ushort (*k_tile)[FA_MMA_ROW(FA_D)],
                                                  __local const float (*blk_d)[FA_MMA_BK],
                                                  __local const float (*blk_m)[FA_MMA_BK],
                                                  float (*qsum)[FA_D / 32], uint keys,
                                                  int has_m, uint lane)
{
    const uint t = lane % 4;
    #pragma unroll
    for (uint j = 0; j < FA_MMA_NKEYS; j++)
        #pragma unroll
        for (uint ks = 0; ks < FA_MMA_KSTEPS; ks += 2) {
            uint b[4];
            fa_mma_load(&k_tile[j * 8 + lane % 8][ks * 16 + lane / 8 * 8], &b[0], &b[1], &b[2],
                        &b[3]);
            if (!blk_d) { /* qf: FA_MMA_QPARTS parts of FA_MMA_MT row tiles */
                #pragma unroll
                for (uint mt = 0; mt < FA_MMA_QPARTS * FA_MMA_MT; mt++) {
                    FCL_CAT(fa_mma, FA_MMA_T)(s[mt % FA_MMA_MT][j], qf[mt][ks], b[0], b[1]);
                    FCL_CAT(fa_mma, FA_MMA_T)(s[mt % FA_MMA_MT][j], qf[mt][ks + 1], b[2], b[3]);
                }
                continue;
            }
            const uint key = keys + j * 8 + 2 * t; /* and key + 1 */
            const float2 d = (float2)(blk_d[ks / 2][key], blk_d[ks / 2][key + 1]);
            const float2 m =
                has_m ? (float2)(blk_m[ks / 2][key], blk_m[ks / 2][key + 1]) : (float2)(0.0f);
            #pragma unroll
            for (uint mt = 0; mt < FA_MMA_MT; mt++) {
                float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                #pragma unroll
                for (uint qp = 0; qp < FA_MMA_QPARTS; qp++) {
                    FCL_CAT(fa_mma, FA_MMA_T)(part, qf[qp * FA_MMA_MT + mt][ks], b[0], b[1]);
                    FCL_CAT(fa_mma, FA_MMA_T)(part, qf[qp * FA_MMA_MT + mt][ks + 1], b[2], b[3]);
                }
                /* (one FFMA a score where there is no m: s += d part compiled to an FFMA
                 * and an FADD: 6% of q8_0's instructions) */
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    s[mt][j][e] = fma(e % 2 ? d.y : d.x, part[e],
                                      has_m ? fma(e % 2 ? m.y : m.x, qsum[2 * mt + e / 2][ks / 2],
                                                  s[mt][j][e])
                                            : s[mt][j][e]);
            }
        }
}

FCL_INLINE void FCL_CAT(fa_mma_scores, FA_NAME)(float (*s)[FA_MMA_NKEYS][4],
                                               uint (*qf)[FA_MMA_KSTEPS][4],
                                               __local const ushort (*k_tile)[FA_MMA_ROW(FA_D)],
                                               uint lane)
{
    FCL_CAT(fa_mma_scores_of, FA_NAME)(s, qf, k_tile, NULL, NULL, NULL, 0, 0, lane);
}

#if FA_MMA_KV
/* The sums of q's columns over each 32-column block, for the lane's rows (r as
 * FA_MMA_BLOCK_ROW's), from its fragments (every part of them) and its row's other 3 lanes:
 * the m part of K's scores (fa_mma_scores_of). */
FCL_INLINE void FCL_CAT(fa_mma_q_block_sums, FA_NAME)(float (*qsum)[FA_D / 32],
                                                     uint (*qf)[FA_MMA_KSTEPS][4])
{
    #pragma unroll
    for (uint r = 0; r < FA_MMA_ROWS; r++)
        #pragma unroll
        for (uint b = 0; b < FA_D / 32; b++) {
            float sum = 0.0f;
            #pragma unroll
            for (uint k = 0; k < 4 * FA_MMA_QPARTS; k++) { /* k-steps 2b, 2b + 1; columns 2t, 8 + 2t */
                const uint part = k / 4 * FA_MMA_MT + r / 2, ks = 2 * b + k % 4 / 2;
                const float2 h =
                    FCL_CAT(fcl_nv_halves, FA_MMA_T)(qf[part][ks][r % 2 + 2 * (k % 2)]);
                sum += h.x + h.y;
            }
            sum += fcl_nv_shuffle_xor(sum, 1);
            qsum[r][b] = sum + fcl_nv_shuffle_xor(sum, 2);
        }
}

#endif

/* o += p V over the tile, 16 keys a step: the score fragments of two 8-key blocks, rounded
 * to the storage type, are the A fragment of p (with FA_MMA_Q32, p's big and small f16 parts,
 * as q's); ldmatrix.trans gives V's B fragments for 16 output columns, each fed to every row
 * tile. */
FCL_INLINE void FCL_CAT(fa_mma_accumulate, FA_NAME)(float (*o)[FA_MMA_NDIMS][4],
                                                   float (*s)[FA_MMA_NKEYS][4],
                                                   __local const ushort (*v_tile)[FA_MMA_ROW(FA_D)],
                                                   uint lane)
{
    #pragma unroll
    for (uint kk = 0; kk < FA_MMA_WKEYS / 16; kk++) {
        uint pf[FA_MMA_QPARTS * FA_MMA_MT][4]; /* as qf: parts of the row tiles */
        #pragma unroll
        for (uint mt = 0; mt < FA_MMA_MT; mt++)
            #pragma unroll
            for (uint i = 0; i < 4; i++) { /* blocks 2kk, 2kk + 1; elements 0-1, 2-3 */
                const float a = s[mt][2 * kk + i / 2][2 * (i % 2)];
                const float b = s[mt][2 * kk + i / 2][2 * (i % 2) + 1];
#if FA_MMA_Q32
                pf[mt][i] = fa_mma_split_f16(a, b, &pf[FA_MMA_MT + mt][i]);
#else
                pf[mt][i] = FCL_CAT(fcl_nv_pack, FA_MMA_T)(a, b);
#endif
            }
        const uint matrix = lane / 8;
        #pragma unroll
        for (uint n2 = 0; n2 < FA_MMA_NDIMS / 2; n2++) {
            uint b0, b1, b2, b3;
            fa_mma_load_transposed(
                &v_tile[kk * 16 + matrix % 2 * 8 + lane % 8][n2 * 16 + matrix / 2 * 8], &b0, &b1,
                &b2, &b3);
            #pragma unroll
            for (uint mt = 0; mt < FA_MMA_QPARTS * FA_MMA_MT; mt++) {
                FCL_CAT(fa_mma, FA_MMA_T)(o[mt % FA_MMA_MT][2 * n2], pf[mt], b0, b1);
                FCL_CAT(fa_mma, FA_MMA_T)(o[mt % FA_MMA_MT][2 * n2 + 1], pf[mt], b2, b3);
            }
        }
    }
}
#endif

#if FA_MMA_KV
/* The values fa_mma_codes_tile left out of the V tile (not finite) of the warp's keys, each
 * times its row's TOKEN scale (v_sc, or 1) and o's unit (2^e, fa_mma_v_unit), added to o
 * where the key's weight (p, the probabilities before those scales) is not 0: only whether
 * it is matters, for inf or NaN times it is itself. Rare (a cache of NaN or infinite values):
 * a slow path.
 * fa_mma_weighed_keys first gathers, from the 4 lanes of each of the lane's rows, the keys
 * of the warp's share the row weighs (bit key % 32 of word key / 32); a lane's columns are
 * n 8 + 2t + e. */
FCL_INLINE void FCL_CAT(fa_mma_weighed_keys, FA_NAME)(uint (*seen)[2], float (*s)[FA_MMA_NKEYS][4],
                                                     uint lane)
{
    const uint t = lane % 4;
    #pragma unroll
    for (uint r = 0; r < FA_MMA_ROWS; r++) {
        seen[r][0] = seen[r][1] = 0;
        #pragma unroll
        for (uint j = 0; j < FA_MMA_NKEYS; j++)
            #pragma unroll
            for (uint e = 0; e < 2; e++)
                if (s[r / 2][j][2 * (r % 2) + e] != 0.0f)
                    seen[r][j / 4] |= 1u << (j % 4 * 8 + 2 * t + e);
        #pragma unroll
        for (uint w = 0; w < 2; w++) {
            seen[r][w] |= fa_mma_shuffle_from(seen[r][w], lane ^ 1);
            seen[r][w] |= fa_mma_shuffle_from(seen[r][w], lane ^ 2);
        }
    }
}

FCL_INLINE void FCL_CAT(fa_mma_add_nonfinite, FA_NAME)(float (*o)[FA_MMA_NDIMS][4],
                                                      uint (*seen)[2], __local const uchar *raw,
                                                      uint format, uint pitch, uint dim,
                                                      __local const uint *bad,
                                                      __local const float *v_sc, int token,
                                                      float unit, uint kw, uint lane)
{
    const uint t = lane % 4;
    for (uint jj = 0; jj < FA_MMA_WKEYS; jj++) {
        const uint key = kw * FA_MMA_WKEYS + jj;
        if (!((bad[key / 32] >> key % 32) & 1u))
            continue; /* the same for the whole warp */
        const float scale = (token ? v_sc[key] : 1.0f) * unit;
        #pragma unroll
        for (uint n = 0; n < FA_MMA_NDIMS; n++) {
            const float2 pair = n * 8 < dim
                                    ? fa_kv_pair_local(raw + key * pitch, format, n * 8 + 2 * t)
                                    : (float2)(0.0f);
            const float v[2] = {pair.x, pair.y};
            #pragma unroll
            for (uint r = 0; r < FA_MMA_ROWS; r++)
                #pragma unroll
                for (uint e = 0; e < 2; e++)
                    if ((((jj < 32 ? seen[r][0] : seen[r][1]) >> jj % 32) & 1u) && !isfinite(v[e]))
                        o[r / 2][n][2 * (r % 2) + e] += v[e] * scale;
        }
    }
}
#endif

#if FA_MMA_KV
/* o += p V over a tile of ggml codes (fa_mma_codes_tile): each 32-column block of the output
 * takes p times its keys' d there times unit (o's power of two, fa_mma_v_unit; 0 stays 0, so
 * that a hidden key adds nothing even where d is not finite), rounded to the storage type as
 * A fragment, then as fa_mma_accumulate; with m (has_m), each row's sum of p m over its keys
 * (times unit) adds to the block's columns. keys: the warp's first key of the tile. */
FCL_INLINE void FCL_CAT(fa_mma_accumulate_blocks, FA_NAME)(float (*o)[FA_MMA_NDIMS][4],
                                                          float (*s)[FA_MMA_NKEYS][4],
                                                          __local const ushort (*v_tile)[FA_MMA_ROW(FA_D)],
                                                          __local const float (*v_d)[FA_MMA_BK],
                                                          __local const float (*v_m)[FA_MMA_BK],
                                                          float unit, uint keys, int has_m,
                                                          uint lane)
{
    const uint t = lane % 4, matrix = lane / 8;
    float pm[FA_MMA_ROWS][FA_D / 32]; /* the lane's part of p m per row and block */
    #pragma unroll
    for (uint r = 0; r < FA_MMA_ROWS; r++)
        #pragma unroll
        for (uint cb = 0; cb < FA_D / 32; cb++)
            pm[r][cb] = 0.0f;
    #pragma unroll
    for (uint kk = 0; kk < FA_MMA_WKEYS / 16; kk++)
        #pragma unroll
        for (uint cb = 0; cb < FA_D / 32; cb++) {
            /* the lane's keys: 2t, 2t + 1 of 8-key blocks 2kk (e = 0, 1) and 2kk + 1 (2, 3) */
            float d[4], m[4];
            #pragma unroll
            for (uint e = 0; e < 4; e++) {
                const uint key = keys + kk * 16 + e / 2 * 8 + 2 * t + e % 2;
                d[e] = v_d[cb][key] * unit;
                m[e] = has_m ? v_m[cb][key] : 0.0f;
            }
            uint pf[FA_MMA_QPARTS * FA_MMA_MT][4]; /* as fa_mma_accumulate's */
            #pragma unroll
            for (uint mt = 0; mt < FA_MMA_MT; mt++) {
                float x[8]; /* p of (row g, g + 8) x (the 4 keys), weighed by d */
                #pragma unroll
                for (uint e = 0; e < 8; e++) {
                    const uint blk = 2 * kk + e / 4, key = e / 4 * 2 + e % 2, row = e / 2 % 2;
                    const float pv = s[mt][blk][2 * row + e % 2];
                    x[e] = pv == 0.0f ? 0.0f : pv * d[key];
                    if (pv != 0.0f)
                        pm[2 * mt + row][cb] = fma(pv, m[key], pm[2 * mt + row][cb]);
                }
                #pragma unroll
                for (uint i = 0; i < 4; i++)
#if FA_MMA_Q32
                    pf[mt][i] = fa_mma_split_f16(x[2 * i], x[2 * i + 1], &pf[FA_MMA_MT + mt][i]);
#else
                    pf[mt][i] = FCL_CAT(fcl_nv_pack, FA_MMA_T)(x[2 * i], x[2 * i + 1]);
#endif
            }
            #pragma unroll
            for (uint n2 = 2 * cb; n2 < 2 * cb + 2; n2++) {
                uint b0, b1, b2, b3;
                fa_mma_load_transposed(
                    &v_tile[kk * 16 + matrix % 2 * 8 + lane % 8][n2 * 16 + matrix / 2 * 8], &b0,
                    &b1, &b2, &b3);
                #pragma unroll
                for (uint mt = 0; mt < FA_MMA_QPARTS * FA_MMA_MT; mt++) {
                    FCL_CAT(fa_mma, FA_MMA_T)(o[mt % FA_MMA_MT][2 * n2], pf[mt], b0, b1);
                    FCL_CAT(fa_mma, FA_MMA_T)(o[mt % FA_MMA_MT][2 * n2 + 1], pf[mt], b2, b3);
                }
            }
        }
    if (!has_m)
        return;
    #pragma unroll
    for (uint r = 0; r < FA_MMA_ROWS; r++)
        #pragma unroll
        for (uint cb = 0; cb < FA_D / 32; cb++) {
            float sum = pm[r][cb] + fcl_nv_shuffle_xor(pm[r][cb], 1);
            sum += fcl_nv_shuffle_xor(sum, 2);
            sum *= unit;
            #pragma unroll
            for (uint n = 4 * cb; n < 4 * cb + 4; n++)
                #pragma unroll
                for (uint e = 0; e < 2; e++)
                    o[r / 2][n][2 * (r % 2) + e] += sum;
        }
}
#endif

#if FA_MMA_KV
/* The exponent (fa_mma_weight_unit) of the warp's keys of the tile (from keys): their largest
 * factor, a key's TOKEN scale (v_sc, or NULL: 1) times, where blocks (V's ggml codes, whose d
 * join p), its d of any column block (v_d): one exponent for all of o. Lane l reads keys l,
 * l + 32, ... of them (its loads apart from fa_mma_accumulate_blocks', which keep theirs). */
FCL_INLINE int FCL_CAT(fa_mma_v_unit, FA_NAME)(__local const float *v_sc,
                                              __local const float (*v_d)[FA_MMA_BK], int blocks,
                                              uint keys, uint lane)
{
    float top = 0.0f;
    #pragma unroll
    for (uint i = 0; i < (FA_MMA_WKEYS + 31) / 32; i++) {
        const uint key = keys + min(lane + 32 * i, FA_MMA_WKEYS - 1u);
        float d = 1.0f;
        if (blocks) {
            d = 0.0f;
            #pragma unroll
            for (uint cb = 0; cb < FA_D / 32; cb++)
                d = fmax(d, fabs(v_d[cb][key]));
        }
        top = fmax(top, fabs(v_sc ? v_sc[key] : 1.0f) * d);
    }
    return fa_mma_weight_unit(top);
}
#endif

#if FA_MMA_KWARPS > 1
/* The (m, l, o) of the key warps that share a row tile (each saw its share of every key
 * tile) made one, as split-KV's partial results are (docs/ALGORITHMS.md section 5): every
 * warp gets each row's m and l over all of them, its o rescaled to that m, and the last
 * warp the sum of the o's, added up in acc (the K tile's memory, free after the loop) one
 * warp after another. m in base 2, l summed over a row's lanes. */
FCL_INLINE void FCL_CAT(fa_mma_merge_key_warps, FA_NAME)(float *m, float *l,
                                                        float (*o)[FA_MMA_NDIMS][4],
                                                        __local float (*part_m)[FA_MMA_BQ],
                                                        __local float (*part_l)[FA_MMA_BQ],
                                                        __local float (*acc)[FA_D], uint rw,
                                                        uint kw, uint lane)
{
    const uint g = lane / 4, t = lane % 4;
    #pragma unroll
    for (uint r = 0; r < FA_MMA_ROWS; r++) {
        const uint row = FA_MMA_BLOCK_ROW(r);
        part_m[kw][row] = m[r];
        part_l[kw][row] = l[r];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (uint r = 0; r < FA_MMA_ROWS; r++) {
        const uint row = FA_MMA_BLOCK_ROW(r);
        float m_all = -INFINITY, l_all = 0.0f;
        for (uint other = 0; other < FA_MMA_KWARPS; other++)
            m_all = fmax(m_all, part_m[other][row]);
        /* A warp whose m is -inf adds its l as it is: 0 where it saw no key, NaN where its
         * scores were NaN (fmax passed them over), which the row's lse must keep. */
        for (uint other = 0; other < FA_MMA_KWARPS; other++)
            l_all += part_m[other][row] == -INFINITY
                         ? part_l[other][row]
                         : part_l[other][row] * fa_mma_exp2(part_m[other][row] - m_all);
        const float scale = m[r] == -INFINITY ? 0.0f : fa_mma_exp2(m[r] - m_all);
        m[r] = m_all;
        l[r] = l_all;
        #pragma unroll
        for (uint n = 0; n < FA_MMA_NDIMS; n++)
            #pragma unroll
            for (uint e = 0; e < 2; e++)
                o[r / 2][n][2 * (r % 2) + e] *= scale;
    }
    for (uint turn = 0; turn < FA_MMA_KWARPS; turn++) {
        if (kw == turn) {
            #pragma unroll
            for (uint r = 0; r < FA_MMA_ROWS; r++) {
                const uint row = FA_MMA_BLOCK_ROW(r);
                #pragma unroll
                for (uint n = 0; n < FA_MMA_NDIMS; n++)
                    #pragma unroll
                    for (uint e = 0; e < 2; e++) {
                        float *x = &o[r / 2][n][2 * (r % 2) + e];
                        if (turn > 0)
                            *x += acc[row][n * 8 + 2 * t + e];
                        if (turn < FA_MMA_KWARPS - 1)
                            acc[row][n * 8 + 2 * t + e] = *x;
                    }
            }
        }
        if (turn < FA_MMA_KWARPS - 1)
            barrier(CLK_LOCAL_MEM_FENCE);
    }
}
#endif

/* The copies of rows [k0, k0 + FA_MMA_BK) of K (into k_tile) or V (v_tile) at rows: as they
 * are, or (a coded tensor of a _kv build) their bytes into raw. */
#if FA_MMA_KV
#define FA_MMA_FETCH(tile, all, coded, rows, k0, dim, rb, pitch, chunk)                         \
    do {                                                                                       \
        if (coded)                                                                             \
            FCL_CAT(fa_mma_stage_tile, FA_NAME)(raw, (__global const uchar *)(all), rows, k0,    \
                                                w.kv_end, rb, pitch, chunk);                   \
        else                                                                                   \
            FCL_CAT(fa_mma_load_tile, FA_NAME)(tile, all, rows, k0, w.kv_end, dim);             \
    } while (0)
#define FA_MMA_FETCH_K(rows, k0)                                                               \
    FA_MMA_FETCH(k_tile, k_all, coded_k, rows, k0, (uint)p->head_dim, rb_k, pitch_k, chunk_k)
#define FA_MMA_FETCH_V(rows, k0)                                                               \
    FA_MMA_FETCH(v_tile, v_all, coded_v, rows, k0, (uint)p->head_dim_v, rb_v, pitch_v, chunk_v)
#else
#define FA_MMA_FETCH_K(rows, k0) FCL_CAT(fa_mma_load_tile, FA_NAME)(k_tile, k_all, rows, k0, w.kv_end, (uint)p->head_dim)
#define FA_MMA_FETCH_V(rows, k0) FCL_CAT(fa_mma_load_tile, FA_NAME)(v_tile, v_all, rows, k0, w.kv_end, (uint)p->head_dim_v)
#endif

__kernel __attribute__((reqd_work_group_size(FA_MMA_WARPS * 32, 1, 1)))
void FCL_CAT(attention, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local FA_MMA_ELEM k_tile[FA_MMA_BK][FA_MMA_ROW(FA_D)] __attribute__((aligned(16)));
    __local FA_MMA_ELEM v_tile[FA_MMA_BK][FA_MMA_ROW(FA_D)] __attribute__((aligned(16)));
    /* The rows of the tile in use and of the next (fa_mma_tile_rows): the next tile's are
     * looked up while the scores are computed, ordered by the barriers the loop has anyway. */
    __local ulong k_at[2][FA_MMA_BK], v_at[2][FA_MMA_BK];
#if FA_MMA_KV /* coded rows' bytes, the rows' TOKEN scales, V's rows with values not finite */
    __local uchar raw[FA_MMA_BK * FA_MMA_RAW_ROW] __attribute__((aligned(16)));
    __local float k_sc[2][FA_MMA_BK], v_sc[2][FA_MMA_BK];
    /* ... the block factors of the tile of ggml codes decoded last (K's during the scores,
     * V's during the second product) */
    __local float blk_d[FA_D / 32][FA_MMA_BK];
    /* (m: q4_1's and q5_1's, which no build for one format takes) and K's factors where K
     * comes from global memory (FA_MMA_K_DIRECT: V's are in use meanwhile) */
    __local float blk_m[FA_MMA_FORMAT_K ? 1 : FA_D / 32][FA_MMA_BK];
    __local float k_blk[FA_MMA_K_DIRECT ? FA_D / 32 : 1][FA_MMA_BK];
    __local uint bad[3]; /* ... and (word 2) whether V's tile is to be decoded again as codes */
#else
    __local float k_sc[2][1], v_sc[2][1];
#endif
#if FA_MMA_KWARPS > 1 && FA_MMA_KV /* the key warps' states, merged after the loop: in raw */
    __local float (*part_m)[FA_MMA_BQ] = (__local float (*)[FA_MMA_BQ])raw;
    __local float (*part_l)[FA_MMA_BQ] = part_m + FA_MMA_KWARPS;
#elif FA_MMA_KWARPS > 1
    __local float part_m[FA_MMA_KWARPS][FA_MMA_BQ], part_l[FA_MMA_KWARPS][FA_MMA_BQ];
#endif
    const uint lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane / 4, t = lane % 4;
    const uint rw = warp / FA_MMA_KWARPS, kw = warp % FA_MMA_KWARPS; /* row tiles, key share */
#if FA_MMA_Q32
    __global const float *q_all = (__global const float *)io->q;
#else
    __global const FA_MMA_ELEM *q_all = (__global const FA_MMA_ELEM *)io->q;
#endif
    __global const FA_MMA_ELEM *k_all = (__global const FA_MMA_ELEM *)io->k;
    __global const FA_MMA_ELEM *v_all = (__global const FA_MMA_ELEM *)io->v;
    const ulong steps = (ulong)p->q_tiles * p->batch * p->heads_q * p->splits;
#if FA_MMA_KV
    /* K's and V's formats: constants in a build for one pair (FA_MMA_FORMAT_K and _V, which
     * leaves out every other format's decoding and products: H200, B4 H16 L4096 D128 causal
     * prefill, int8 2.89 -> 2.12 ms, fp8 3.08 -> 2.26, q8_0 4.04 -> 3.48, and NVIDIA's
     * compile of it a tenth as long), else read at run time (0) */
    const uint k_format = FA_MMA_FORMAT_K ? FA_MMA_FORMAT_K : p->format_k;
    const uint v_format = FA_MMA_FORMAT_V ? FA_MMA_FORMAT_V : p->format_v;
    /* K and V each: of q's type (copied as it is) or coded (staged and decoded); the bytes
     * of a coded row and of its copies */
    const int coded_k = k_format > FCL_KV_BF16, coded_v = v_format > FCL_KV_BF16;
    /* K's tiles fetched by copies into k_tile or raw, else read and decoded beside the second
     * product (FA_MMA_K_DIRECT) */
    const int k_staged = !FA_MMA_K_DIRECT;
    /* ... K in ggml blocks: codes in the tile, the blocks' factors applied to the scores (as
     * f16 values d c, as V's below, the H200's q8_0 prefill took 3.67 ms instead of 4.01, but
     * lse moved by 1.8e-5 relative, past the contract's 1e-5, and fp8 lost 14%) */
    const int k_blocks = k_format >= FCL_KV_Q8_0 && k_format <= FCL_KV_IQ4_NL;
    const int k_has_m = k_format == FCL_KV_Q4_1 || k_format == FCL_KV_Q5_1;
    const int v_blocks = v_format >= FCL_KV_Q8_0 && v_format <= FCL_KV_IQ4_NL;
    const int v_has_m = v_format == FCL_KV_Q4_1 || v_format == FCL_KV_Q5_1;
    /* ... V's blocks decoded to f16 values where they fit (FA_MMA_VALUES), else the same */
    const int v_values = v_blocks && FA_MMA_VALUES;
    const int v_by_token = (p->flags & FA_FLAG_V_TOKEN_SCALES) != 0;
    const uint rb_k = (uint)fa_row_units(p, 0), rb_v = (uint)fa_row_units(p, 1);
    const uint chunk_k = fa_mma_raw_chunk(p->k_offset, p->k_batch, p->k_head, p->k_token, rb_k);
    const uint chunk_v = fa_mma_raw_chunk(p->v_offset, p->v_batch, p->v_head, p->v_token, rb_v);
    /* ... and the distance of the staged rows in raw: in a build for one format its rows'
     * bytes at FA_D, a constant, so that the decoding's addresses fold into its loads (H200,
     * B4 H16 L4096 causal prefill, ms: D128 int8 2.02 -> 1.94, q8_0 2.80 -> 2.71, q4_0 2.82 ->
     * 2.67; D64 fp8 1.28 -> 1.21), else rb_k and rb_v rounded up to multiples of 4 (rows of
     * 2 mod 4 bytes: fa_mma_stage_rows2), which the decoding's loads of a row's start need */
    const uint pitch_k = FA_MMA_FORMAT_K ? FA_MMA_FIXED_PITCH : (rb_k + 3) & ~3u;
    const uint pitch_v = FA_MMA_FORMAT_K ? FA_MMA_FIXED_PITCH : (rb_v + 3) & ~3u;
#else
    const int coded_k = 0, coded_v = 0, k_staged = 1;
#endif

    for (ulong step = get_group_id(0); step < steps; step += get_num_groups(0)) {
        const fa_work w = fa_locate(p, io, step, FA_MMA_BQ, 1);
        if (w.q0 >= w.s.len_q)
            continue; /* the whole group takes the same step: no barrier is skipped by some */
        /* q_scale and K's factor (TENSOR, HEAD: 1 without), applied to the scores as one */
        const float qk_scale = FA_MMA_KV ? p->q_scale * w.s.k_scale : p->q_scale;
        /* This lane's rows and the keys each may see. */
        ulong qi[FA_MMA_ROWS];
        int2 vis[FA_MMA_ROWS];
        #pragma unroll
        for (uint r = 0; r < FA_MMA_ROWS; r++) {
            qi[r] = w.q0 + FA_MMA_BLOCK_ROW(r);
            vis[r] = fa_visible_keys(p, &w, qi[r]);
        }
        /* ALiBi's slope (0 without): of each row in the GQA builds, whose rows may be a
         * group's heads (FA_FLAG_HEAD_ROWS: the planner gives GQA rows key warps, src/plan.c's
         * fcl_plan_mma_shape), else of the tile's head (a register, not one a row) */
        float slope[FA_MMA_KWARPS > 1 ? FA_MMA_ROWS : 1];
        #pragma unroll
        for (uint r = 0; r < (FA_MMA_KWARPS > 1 ? FA_MMA_ROWS : 1); r++)
            slope[r] = fa_slope(p, io, &w.s, qi[r]);
#if FA_MMA_K_DIRECT
        uint2 k_words[FA_MMA_BK * FA_MMA_ROW_CHUNKS / FA_MMA_THREADS]; /* K's next codes */
        float k_d[FA_MMA_BK * FA_MMA_ROW_CHUNKS / FA_MMA_THREADS];
#endif
        if (w.kv_begin < w.kv_end) {
            FCL_CAT(fa_mma_tile_rows, FA_NAME)(k_at[0], v_at[0], k_sc[0], v_sc[0], p, io, &w.s,
                                               w.kv_begin, w.kv_end);
            barrier(CLK_LOCAL_MEM_FENCE);
#if FA_MMA_K_DIRECT
            FCL_CAT(fa_mma_k_fetch, FA_NAME)(k_words, k_d, (__global const uchar *)k_all, k_at[0],
                                             w.kv_begin, w.kv_end, k_format, (uint)p->head_dim,
                                             chunk_k >= 8);
            FCL_CAT(fa_mma_k_store, FA_NAME)(k_tile, k_blk, k_words, k_d, w.kv_begin, w.kv_end,
                                             k_format, (uint)p->head_dim);
#else
            FA_MMA_FETCH_K(k_at[0], w.kv_begin);
            fa_mma_copies_commit();
#endif
        }

        /* q as A fragments, straight from global memory (read once); with FA_MMA_Q32 big
         * parts, then small ones, and each row's factor of its scores (else 1). */
        FA_MMA_QWORD qf[FA_MMA_QPARTS * FA_MMA_MT][FA_MMA_KSTEPS][4];
        float q_factor[FA_MMA_ROWS];
        #pragma unroll
        for (uint r = 0; r < FA_MMA_ROWS; r++) {
            const int inside = qi[r] < w.s.len_q;
            const ulong row = inside ? fa_row(p, io, &w.s.q, qi[r]) : 0;
#if FA_MMA_Q32
            q_factor[r] = FCL_CAT(fa_mma_q32_row, FA_NAME)(qf[r / 2], qf[FA_MMA_MT + r / 2],
                                                           q_all + row, r, t,
                                                           inside ? (uint)p->head_dim : 0);
#else
            FCL_CAT(fa_mma_q_row, FA_NAME)(qf[r / 2], q_all + row, r, t,
                                           inside ? (uint)p->head_dim : 0);
            q_factor[r] = 1.0f;
#endif
        }
#if FA_MMA_KV
        float qsum[FA_MMA_ROWS][FA_D / 32] = {{0}};
        if (k_has_m)
            FCL_CAT(fa_mma_q_block_sums, FA_NAME)(qsum, qf);
#endif
        /* Each row's (m, l) in base 2: m the largest c s so far and l (this lane's part)
         * the sum of 2^(c s - m), s the score as the modifiers leave it, c log2(e); one FFMA
         * and one ex2 a score, as FlashAttention-2's softmax_scale_log2. Without modifiers
         * q_scale joins c and the scores are not scaled one by one (for q_scale > 0 the
         * largest q.k gives the largest score); not in float32, whose build at head dim 128
         * then spilled (255 registers, ptxas -v) and ran 8% slower on the H100. */
        const int scale_in_c = !FA_MMA_F32 && !(p->flags & FA_SCORE_MODIFIERS) && qk_scale > 0.0f;
        float c[FA_MMA_ROWS], scale[FA_MMA_ROWS]; /* each row's c, and its scores' factor */
        float m[FA_MMA_ROWS], l[FA_MMA_ROWS];
        float o[FA_MMA_MT][FA_MMA_NDIMS][4];
        #pragma unroll
        for (uint r = 0; r < FA_MMA_ROWS; r++) {
            scale[r] = qk_scale * q_factor[r];
            c[r] = scale_in_c ? scale[r] * M_LOG2E_F : M_LOG2E_F;
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        #pragma unroll
        for (uint mt = 0; mt < FA_MMA_MT; mt++)
            #pragma unroll
            for (uint n = 0; n < FA_MMA_NDIMS; n++)
                o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
        /* o holds 2^o_unit times its value (fa_mma_v_unit): where V's factors join p in f16
         * (TOKEN scales; ggml codes under float32 q) */
        int o_unit = 0;

        uint at = 0; /* k_at[at], v_at[at]: this tile's rows */
        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_MMA_BK, at ^= 1) {
            const int last = k0 + FA_MMA_BK >= w.kv_end;
            fa_mma_copies_wait();
            barrier(CLK_LOCAL_MEM_FENCE); /* K tile in; every warp is done with the last V tile */
#if FA_MMA_KV
#if !FA_MMA_K_DIRECT
            if (coded_k) { /* K's bytes into its tile, then raw is free for V's */
                FCL_CAT(fa_mma_decode_tile, FA_NAME)(k_tile, blk_d, blk_m, raw, k_format, pitch_k,
                                                     (uint)p->head_dim, NULL, 0, NULL);
                barrier(CLK_LOCAL_MEM_FENCE);
            }
#endif
            if (lid == 0)
                bad[0] = bad[1] = bad[2] = 0; /* for the V tile's decoding, after a barrier */
#endif
            FA_MMA_FETCH_V(v_at[at], k0);
            fa_mma_copies_commit();
            if (FA_MMA_EARLY_ROWS && !last)
                FCL_CAT(fa_mma_tile_rows, FA_NAME)(k_at[at ^ 1], v_at[at ^ 1], k_sc[at ^ 1],
                                                   v_sc[at ^ 1], p, io, &w.s, k0 + FA_MMA_BK,
                                                   w.kv_end);

            float s[FA_MMA_MT][FA_MMA_NKEYS][4];
            #pragma unroll
            for (uint mt = 0; mt < FA_MMA_MT; mt++)
                #pragma unroll
                for (uint j = 0; j < FA_MMA_NKEYS; j++)
                    s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#if FA_MMA_KV
            if (k_blocks && k_has_m) /* (has_m a constant in each call) */
                FCL_CAT(fa_mma_scores_of, FA_NAME)(s, qf, &k_tile[kw * FA_MMA_WKEYS], blk_d, blk_m,
                                                   qsum, kw * FA_MMA_WKEYS, 1, lane);
            else if (k_blocks)
                FCL_CAT(fa_mma_scores_of, FA_NAME)(s, qf, &k_tile[kw * FA_MMA_WKEYS],
                                                   FA_MMA_K_DIRECT ? k_blk : blk_d, blk_m, qsum,
                                                   kw * FA_MMA_WKEYS, 0, lane);
            else
#endif
                FCL_CAT(fa_mma_scores, FA_NAME)(s, qf, &k_tile[kw * FA_MMA_WKEYS], lane);

            if (!FA_MMA_EARLY_ROWS && !last)
                FCL_CAT(fa_mma_tile_rows, FA_NAME)(k_at[at ^ 1], v_at[at ^ 1], k_sc[at ^ 1],
                                                   v_sc[at ^ 1], p, io, &w.s, k0 + FA_MMA_BK,
                                                   w.kv_end);
#if FA_MMA_KV
            if (p->flags & FA_FLAG_K_TOKEN_SCALES) { /* each key's own factor */
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) *= k_sc[at][FA_MMA_KEY(x) - k0];
            }
#endif

            /* Scores: q_scale q.k (or q.k, where the scale is in c), then the modifiers one
             * at a time, in the contract's order, a branch per tile rather than per score (as
             * attention_tile.cl: on the H100 the softcap and ALiBi builds ran at 73 and 90
             * TFLOP/s with a call per score, against 132 plain), and -inf where hidden
             * (checked key by key only where the tile is not all visible to this lane's rows). */
            if (!scale_in_c) {
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) *= scale[FA_MMA_ROW_OF(x)];
            }
            if (p->flags & FA_FLAG_SOFTCAP) {
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) = fa_softcap(p->softcap, FA_MMA_S(x));
            }
            if (p->flags & FA_FLAG_ALIBI) {
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) -= FA_MMA_SLOPE(FA_MMA_ROW_OF(x)) *
                                   fa_alibi_distance(&w, FA_MMA_QUERY_INDEX(qi[FA_MMA_ROW_OF(x)]),
                                                     FA_MMA_KEY(x));
            }
            if (p->flags & FA_MASKS) {
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) = fa_masked(p, io, &w, FA_MMA_S(x), qi[FA_MMA_ROW_OF(x)], FA_MMA_KEY(x),
                                            FA_MMA_SLOPE(FA_MMA_ROW_OF(x)),
                                            !fa_hidden(vis[FA_MMA_ROW_OF(x)], FA_MMA_KEY(x)));
            }
            const long first = k0 + kw * FA_MMA_WKEYS, final = first + FA_MMA_WKEYS - 1;
            int sees_all = 1;
            #pragma unroll
            for (uint r = 0; r < FA_MMA_ROWS; r++)
                sees_all &= first >= vis[r].x && final <= vis[r].y;
            if (!sees_all) {
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) = fa_hidden(vis[FA_MMA_ROW_OF(x)], FA_MMA_KEY(x)) ? -INFINITY : FA_MMA_S(x);
            }

            /* V tile in; every warp is done with the K tile; the next tile's rows are known.
             * The statistics come between this barrier and V's decoding, with no branch
             * between them in a build for one format, so that the compiler interleaves the
             * two (the work-group, one an SM at 251-255 registers, has no other warps to run
             * while its warps decode: ncu, scripts/nv-replay/phases.py). H200,
             * B4 H16 L4096 causal prefill, one call, against the statistics after the
             * decoding and the modifiers after this barrier, ms: D128 q8_0 2.89 -> 2.67, q4_0
             * 2.75 -> 2.63, int8 1.95 -> 1.90, fp8 2.03-2.05 -> 1.98-1.99, f16 1.38 -> 1.36-1.37;
             * D64 q8_0 1.70 -> 1.58-1.59, fp8 1.21-1.22 -> 1.22-1.24. Then K's next tile. */
            fa_mma_copies_wait();
            barrier(CLK_LOCAL_MEM_FENCE);
            if (!coded_v && !last) { /* (never where K is not staged: V is coded as K there) */
                FA_MMA_FETCH_K(k_at[at ^ 1], k0 + FA_MMA_BK);
                fa_mma_copies_commit();
            }
            /* Online statistics (docs/ALGORITHMS.md section 4): each row's max over its 4
             * lanes, then p = 2^(c s - m). */
            float alpha[FA_MMA_ROWS], under[FA_MMA_ROWS], sum[FA_MMA_ROWS];
            #pragma unroll
            for (uint r = 0; r < FA_MMA_ROWS; r++) {
                float top = -INFINITY;
                #pragma unroll
                for (uint j = 0; j < FA_MMA_NKEYS; j++)
                    top = fmax(top, fmax(s[r / 2][j][2 * (r % 2)], s[r / 2][j][2 * (r % 2) + 1]));
                top = fmax(top, fcl_nv_shuffle_xor(top, 1));
                top = fmax(top, fcl_nv_shuffle_xor(top, 2));
                const float m_new = fmax(m[r], top * c[r]);
                alpha[r] = m_new == -INFINITY ? 1.0f : fa_mma_exp2(m[r] - m_new);
                under[r] = m_new == -INFINITY ? 0.0f : m_new;
                m[r] = m_new;
                sum[r] = 0.0f;
            }
            #pragma unroll
            for (uint x = 0; x < FA_MMA_SCORES; x++) {
                FA_MMA_S(x) = fa_mma_exp2(fma(FA_MMA_S(x), c[FA_MMA_ROW_OF(x)], -under[FA_MMA_ROW_OF(x)]));
                sum[FA_MMA_ROW_OF(x)] += FA_MMA_S(x);
            }
            #pragma unroll
            for (uint r = 0; r < FA_MMA_ROWS; r++)
                l[r] = l[r] * alpha[r] + sum[r];
            int v_nonfinite = 0; /* V's decoding left values out of the tile: raw keeps them */
#if FA_MMA_KV
            int v_as_values = 0;
            if (coded_v) {
                FCL_CAT(fa_mma_decode_tile, FA_NAME)(v_tile, blk_d, blk_m, raw, v_format, pitch_v,
                                                     (uint)p->head_dim_v, v_values ? NULL : bad,
                                                     v_values, &bad[2]);
                barrier(CLK_LOCAL_MEM_FENCE);
                v_as_values = v_values && !bad[2];
                if (v_values && !v_as_values) { /* a factor too large for f16 values: codes */
                    FCL_CAT(fa_mma_decode_tile_of, FA_NAME)(v_tile, blk_d, blk_m, raw, v_format,
                                                            pitch_v, (uint)p->head_dim_v, bad, 0,
                                                            NULL); /* (rare: no format switch) */
                    barrier(CLK_LOCAL_MEM_FENCE);
                }
                v_nonfinite = (bad[0] | bad[1]) != 0;
                if (k_staged && !last && !v_nonfinite) {
                    FA_MMA_FETCH_K(k_at[at ^ 1], k0 + FA_MMA_BK);
                    fa_mma_copies_commit();
                }
            }
            /* V's ggml codes in the tile, whose d join p (fa_mma_accumulate_blocks) */
            const int v_codes = v_blocks && !v_as_values;
#endif
            /* o's unit for this tile, and o rescaled by its change */
            int unit = 0;
#if FA_MMA_KV && FA_MMA_F16_TILES
            if (v_by_token || v_codes)
                unit = FCL_CAT(fa_mma_v_unit, FA_NAME)(v_by_token ? v_sc[at] : NULL, blk_d, v_codes,
                                                       kw * FA_MMA_WKEYS, lane);
#endif
            const float change = fa_mma_pow2(unit - o_unit);
            o_unit = unit;
            #pragma unroll
            for (uint r = 0; r < FA_MMA_ROWS; r++)
                alpha[r] *= change;
            #pragma unroll
            for (uint mt = 0; mt < FA_MMA_MT; mt++)
                #pragma unroll
                for (uint n = 0; n < FA_MMA_NDIMS; n++)
                    #pragma unroll
                    for (uint e = 0; e < 4; e++)
                        o[mt][n][e] *= alpha[2 * mt + e / 2];

#if FA_MMA_K_DIRECT
            /* K's next tile: its codes read now, written to the tile (free since V's barrier)
             * after the second product */
            if (!last)
                FCL_CAT(fa_mma_k_fetch, FA_NAME)(k_words, k_d, (__global const uchar *)k_all,
                                                 k_at[at ^ 1], k0 + FA_MMA_BK, w.kv_end, k_format,
                                                 (uint)p->head_dim, chunk_k >= 8);
#endif
#if FA_MMA_KV
            uint seen[FA_MMA_ROWS][2];
            if (v_nonfinite)
                FCL_CAT(fa_mma_weighed_keys, FA_NAME)(seen, s, lane);
            if (v_by_token) { /* p times each key's factor (0 stays 0), and the unit where V's
                               * d do not join p after it */
                const float p_unit = v_codes ? 1.0f : fa_mma_pow2(unit);
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) = FA_MMA_S(x) == 0.0f
                                      ? 0.0f
                                      : FA_MMA_S(x) * (v_sc[at][FA_MMA_KEY(x) - k0] * p_unit);
            }
#endif
#if FA_MMA_KV
            if (v_codes && v_has_m)
                FCL_CAT(fa_mma_accumulate_blocks, FA_NAME)(o, s, &v_tile[kw * FA_MMA_WKEYS], blk_d,
                                                           blk_m, fa_mma_pow2(unit),
                                                           kw * FA_MMA_WKEYS, 1, lane);
            else if (v_codes)
                FCL_CAT(fa_mma_accumulate_blocks, FA_NAME)(o, s, &v_tile[kw * FA_MMA_WKEYS], blk_d,
                                                           blk_m, fa_mma_pow2(unit),
                                                           kw * FA_MMA_WKEYS, 0, lane);
            else
#endif
                FCL_CAT(fa_mma_accumulate, FA_NAME)(o, s, &v_tile[kw * FA_MMA_WKEYS], lane);
#if FA_MMA_KV
            if (v_nonfinite) { /* then the next K tile's bytes, which overwrite V's */
                FCL_CAT(fa_mma_add_nonfinite, FA_NAME)(o, seen, raw, v_format, pitch_v,
                                                       (uint)p->head_dim_v, bad,
                                                       v_sc[at], v_by_token, fa_mma_pow2(unit),
                                                       kw, lane);
                barrier(CLK_LOCAL_MEM_FENCE);
                if (k_staged && !last) {
                    FA_MMA_FETCH_K(k_at[at ^ 1], k0 + FA_MMA_BK);
                    fa_mma_copies_commit();
                }
            }
#endif
#if FA_MMA_K_DIRECT
            if (!last)
                FCL_CAT(fa_mma_k_store, FA_NAME)(k_tile, k_blk, k_words, k_d, k0 + FA_MMA_BK,
                                                 w.kv_end, k_format, (uint)p->head_dim);
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next step's first K tile overwrites what this read */
        #pragma unroll
        for (uint mt = 0; mt < FA_MMA_MT; mt++) /* o in its own units */
            #pragma unroll
            for (uint n = 0; n < FA_MMA_NDIMS; n++)
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    o[mt][n][e] *= fa_mma_pow2(-o_unit);

        /* l of each row: the sum of its 4 lanes' parts; then the key warps' states merged
         * and the rows written, with m in natural units (l is the sum of e^(s - m ln 2)). */
        #pragma unroll
        for (uint r = 0; r < FA_MMA_ROWS; r++) {
            l[r] += fcl_nv_shuffle_xor(l[r], 1);
            l[r] += fcl_nv_shuffle_xor(l[r], 2);
        }
#if FA_MMA_KWARPS > 1
        FCL_CAT(fa_mma_merge_key_warps, FA_NAME)(m, l, o, part_m, part_l,
                                                 (__local float (*)[FA_D])k_tile, rw, kw, lane);
        if (kw != FA_MMA_KWARPS - 1)
            continue; /* the last key warp writes the rows */
#endif
        const uint dim_v = (uint)p->head_dim_v;
        #pragma unroll
        for (uint r = 0; r < FA_MMA_ROWS; r++) {
            if (qi[r] >= w.s.len_q)
                continue;
            /* V's factor (TENSOR, HEAD) where a key has weight: a row that weighs none is 0 */
            const float v_factor = FA_MMA_KV && l[r] != 0.0f ? w.s.v_scale : 1.0f;
            const fa_dest dst = fa_finish_row(p, io, &w, qi[r], m[r] * M_LN2_F, l[r], t == 0);
            #pragma unroll
            for (uint n = 0; n < FA_MMA_NDIMS; n++)
                #pragma unroll
                for (uint e = 0; e < 2; e++)
                    if (n * 8 + 2 * t + e < dim_v)
                        fa_store(p, io, dst, n * 8 + 2 * t + e, o[r / 2][n][2 * (r % 2) + e] * v_factor);
        }
    }
}

#undef FA_MMA_ROWS
#undef FA_MMA_SCORES
#undef FA_MMA_S
#undef FA_MMA_ROW_OF
#undef FA_MMA_KEY
#undef FA_MMA_SLOPE
#undef FA_MMA_QUERY_INDEX
#undef FA_MMA_BLOCK_ROW
#undef FA_MMA_BQ
#undef FA_MMA_WKEYS
#undef FA_MMA_ROW_WARPS
#undef FA_MMA_KSTEPS
#undef FA_MMA_QPARTS
#undef FA_MMA_NKEYS
#undef FA_MMA_NDIMS
#undef FA_MMA_ELEM
#undef FA_MMA_QWORD
#undef FA_MMA_KDIMS
#undef FA_MMA_ROW
#undef FA_MMA_CHUNK
#undef FA_MMA_ROW_CHUNKS
#undef FA_MMA_THREADS
#undef FA_MMA_EARLY_ROWS
#undef FA_MMA_KV
#undef FA_MMA_RAW_ROW
#undef FA_MMA_PITCH_CASE
#undef FA_MMA_FIXED_PITCH
#undef FA_MMA_STAGERS
#undef FA_MMA_FETCH
#undef FA_MMA_VALUES
#undef FA_MMA_K_DIRECT
#undef FA_MMA_F16_TILES
#undef FA_MMA_FETCH_K
#undef FA_MMA_FETCH_V
#endif /* FA_MMA_HELPERS_ONLY */

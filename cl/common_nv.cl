/* PTX helpers shared by the NVIDIA kernels (attention_mma_nv.cl, attention_decode_nv.cl,
 * softmax_nv.cl): the NVIDIA program compiles this once, after common.cl. Inline PTX is
 * accepted by NVIDIA's OpenCL compiler (driver 525 and later); the planner builds this program
 * only there (src/plan.c, fcl_plan_mma). */

/* x from the lane whose index differs by mask (every lane of the warp must take part). */
FCL_INLINE float fcl_nv_shuffle_xor(float x, uint mask)
{
    uint y;
    __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                     : "=r"(y)
                     : "r"(as_uint(x)), "r"(mask));
    return as_float(y);
}

/* The two 16-bit values of a 32-bit word as floats, the low one first (exact). */
FCL_INLINE float2 fcl_nv_halves_f16(uint w)
{
    float lo, hi;
    __asm__("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;}"
            : "=f"(lo), "=f"(hi)
            : "r"(w));
    return (float2)(lo, hi);
}

FCL_INLINE float2 fcl_nv_halves_bf16(uint w)
{
    return (float2)(as_float(w << 16), as_float(w & 0xffff0000u));
}

/* The eight 16-bit values of w (16 bytes) as floats: bfloat16 where bf16, else float16. */
FCL_INLINE void fcl_nv_unpack8(float *x, uint4 w, int bf16)
{
    const uint words[4] = {w.x, w.y, w.z, w.w};
    #pragma unroll
    for (uint k = 0; k < 4; k++) {
        const float2 f = bf16 ? fcl_nv_halves_bf16(words[k]) : fcl_nv_halves_f16(words[k]);
        x[2 * k] = f.x, x[2 * k + 1] = f.y;
    }
}

/* Two floats rounded to the storage type (to nearest even; a NaN stays a NaN) in one word,
 * lo in the low half. */
FCL_INLINE uint fcl_nv_pack_f16(float lo, float hi)
{
    uint r;
    __asm__ volatile("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

FCL_INLINE uint fcl_nv_pack_bf16(float lo, float hi)
{
    uint r;
    __asm__ volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* The tensor-core products, shared by the attention kernels and the self-check
 * (mma_check_nv.cl), which run in different programs. */
/* Per storage type T (f16, bf16): fa_mma_T(d, a, b0, b1) is d += a b for one 16x16 A fragment
 * (a) and one 16x8 B fragment (b0, b1) with float32 d. */
#define FA_MMA_DEFINE(T)                                                                       \
    FCL_INLINE void fa_mma_##T(float *d, const uint *a, uint b0, uint b1)                      \
    {                                                                                          \
        __asm__ volatile("mma.sync.aligned.m16n8k16.row.col.f32." #T "." #T ".f32 "            \
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"     \
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                      \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));      \
    }
FA_MMA_DEFINE(f16)
FA_MMA_DEFINE(bf16)
#undef FA_MMA_DEFINE

/* d += a b for one 16x8 A fragment and one 8x8 B fragment (b0, b1) of TF32 values. */
FCL_INLINE void fa_mma_tf32(float *d, const float *a, float b0, float b1)
{
    __asm__ volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(as_uint(a[0])), "r"(as_uint(a[1])), "r"(as_uint(a[2])),
                       "r"(as_uint(a[3])), "r"(as_uint(b0)), "r"(as_uint(b1)));
}

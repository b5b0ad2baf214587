/* The tensor-core path's self-check (src/program.c runs it once when it builds
 * attention_mma_nv.cl): one m16n8k16 product per 16-bit storage type and one m16n8k8 TF32
 * product of small integers (exact in each), built from the fragment layouts the attention
 * kernels assume; the host compares each lane's accumulators with its own product. A driver
 * that compiled the PTX but runs it differently turns the path off rather than giving wrong
 * attention. */
#define FA_MMA_CHECK_A(i, k) ((float)((int)(((i) + 2 * (k)) % 5) - 2))
#define FA_MMA_CHECK_B(k, n) ((float)((int)((3 * (k) + (n)) % 7) - 3))
#define FA_MMA_CHECK(T)                                                                        \
    {                                                                                          \
        const uint a[4] = {                                                                    \
            FCL_CAT(fcl_nv_pack, T)(FA_MMA_CHECK_A(g, 2 * t), FA_MMA_CHECK_A(g, 2 * t + 1)),   \
            FCL_CAT(fcl_nv_pack, T)(FA_MMA_CHECK_A(g + 8, 2 * t), FA_MMA_CHECK_A(g + 8, 2 * t + 1)), \
            FCL_CAT(fcl_nv_pack, T)(FA_MMA_CHECK_A(g, 2 * t + 8), FA_MMA_CHECK_A(g, 2 * t + 9)), \
            FCL_CAT(fcl_nv_pack, T)(FA_MMA_CHECK_A(g + 8, 2 * t + 8),                          \
                                    FA_MMA_CHECK_A(g + 8, 2 * t + 9))};                        \
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                 \
        FCL_CAT(fa_mma, T)(d, a,                                                               \
                           FCL_CAT(fcl_nv_pack, T)(FA_MMA_CHECK_B(2 * t, g),                   \
                                                   FA_MMA_CHECK_B(2 * t + 1, g)),              \
                           FCL_CAT(fcl_nv_pack, T)(FA_MMA_CHECK_B(2 * t + 8, g),               \
                                                   FA_MMA_CHECK_B(2 * t + 9, g)));             \
        for (uint e = 0; e < 4; e++)                                                           \
            out[at++] = d[e];                                                                  \
    }

/* out[lane * 12 + e]: f16's accumulator e, then bf16's, then TF32's (A 16 x 8: (g, t),
 * (g + 8, t), (g, t + 4), (g + 8, t + 4); B 8 x 8: (t, g), (t + 4, g)). */
__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void fcl_mma_check(__global float *out)
{
    const uint lane = get_local_id(0), g = lane / 4, t = lane % 4;
    uint at = lane * 12;
    FA_MMA_CHECK(f16)
    FA_MMA_CHECK(bf16)
    const float a[4] = {FA_MMA_CHECK_A(g, t), FA_MMA_CHECK_A(g + 8, t), FA_MMA_CHECK_A(g, t + 4),
                        FA_MMA_CHECK_A(g + 8, t + 4)};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    fa_mma_tf32(d, a, FA_MMA_CHECK_B(t, g), FA_MMA_CHECK_B(t + 4, g));
    for (uint e = 0; e < 4; e++)
        out[at++] = d[e];
}
#undef FA_MMA_CHECK
#undef FA_MMA_CHECK_A
#undef FA_MMA_CHECK_B

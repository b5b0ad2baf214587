/* Softmax on NVIDIA GPUs: FUSED for rows of up to SM_NV_COLS elements, held in registers and
 * reduced by warp shuffles. A vendor fast path in the NVIDIA program (src/program.c), chosen by
 * the planner (src/plan.c) for rows whose starts and length are multiples of 16 bytes; the
 * portable softmax_block (softmax.c) is its reference and serves everything else. Compiled
 * per storage type and build after common.cl, common_nv.cl, softmax_args.h and
 * softmax_common.cl, with
 *   FCL_DT        f32, f16 or bf16
 *   FCL_SNV_VECS  16-byte vectors a work-item holds (SM_NV_VECS, or twice that for long
 *                 float32 rows); the kernel is softmax_nv<vecs>_<type>
 *
 * As softmax_block: `lanes` work-items share a row (a power of two, at most SM_NV_LWS), a
 * work-group takes SM_NV_LWS / lanes rows at once; vector v of a lane is the row's 16-byte
 * vector lane + v * lanes, so a warp's loads are contiguous. Each work-item keeps exp(s - its
 * own max) and its own (m, d); the lanes merge (m, d) by shfl.sync within a warp and, for
 * rows longer than a warp's share, through one word of local memory a warp and one barrier.
 * The portable kernel reduces through local memory, log2(lanes) + 2 barriers a row.
 */
#ifndef SNV_HELPERS
#define SNV_HELPERS
#define snv_vw_f32 4 /* elements in 16 bytes */
#define snv_vw_f16 8
#define snv_vw_bf16 8

/* The 16-byte vector i of a row as floats, x[0 .. vw). */
FCL_INLINE void snv_load_f32(float *x, __global const float *row, uint i)
{
    const float4 v = ((__global const float4 *)row)[i];
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}

FCL_INLINE void snv_load_f16(float *x, __global const half *row, uint i)
{
    const uint4 w = ((__global const uint4 *)row)[i];
    const uint words[4] = {w.x, w.y, w.z, w.w};
    #pragma unroll
    for (uint k = 0; k < 4; k++) {
        const float2 f = fcl_nv_halves_f16(words[k]);
        x[2 * k] = f.x, x[2 * k + 1] = f.y;
    }
}

FCL_INLINE void snv_load_bf16(float *x, __global const ushort *row, uint i)
{
    const uint4 w = ((__global const uint4 *)row)[i];
    const uint words[4] = {w.x, w.y, w.z, w.w};
    #pragma unroll
    for (uint k = 0; k < 4; k++) {
        const float2 f = fcl_nv_halves_bf16(words[k]);
        x[2 * k] = f.x, x[2 * k + 1] = f.y;
    }
}

/* x[0 .. vw) rounded to the storage type into the 16-byte vector i of a row. */
FCL_INLINE void snv_store_f32(__global float *row, uint i, const float *x)
{
    ((__global float4 *)row)[i] = (float4)(x[0], x[1], x[2], x[3]);
}

FCL_INLINE void snv_store_f16(__global half *row, uint i, const float *x)
{
    ((__global uint4 *)row)[i] = (uint4)(fcl_nv_pack_f16(x[0], x[1]), fcl_nv_pack_f16(x[2], x[3]),
                                         fcl_nv_pack_f16(x[4], x[5]),
                                         fcl_nv_pack_f16(x[6], x[7]));
}

FCL_INLINE void snv_store_bf16(__global ushort *row, uint i, const float *x)
{
    ((__global uint4 *)row)[i] = (uint4)(fcl_nv_pack_bf16(x[0], x[1]),
                                         fcl_nv_pack_bf16(x[2], x[3]),
                                         fcl_nv_pack_bf16(x[4], x[5]),
                                         fcl_nv_pack_bf16(x[6], x[7]));
}

FCL_INLINE float2 snv_shuffle_merge(float2 st, uint mask)
{
    const float2 other = (float2)(fcl_nv_shuffle_xor(st.x, mask), fcl_nv_shuffle_xor(st.y, mask));
    return fcl_stat_merge(st, other);
}

/* Merges the (m, d) of the `lanes` work-items of each row; every one gets its row's result.
 * Every lane of the merges is taken in the same order on every work-item (merging is
 * commutative bit for bit), so all of a row's work-items agree exactly. warp_states: one
 * float2 a warp, not used by the previous call (the caller alternates two). */
FCL_INLINE float2 snv_reduce(float2 st, uint lanes, __local float2 *warp_states)
{
    for (uint mask = 1; mask < lanes && mask < 32; mask <<= 1)
        st = snv_shuffle_merge(st, mask);
    if (lanes <= 32)
        return st;
    const uint lid = get_local_id(0), warp = lid / 32, warps = lanes / 32;
    if (lid % 32 == 0)
        warp_states[warp] = st;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* Lane i of each warp takes warp i (modulo the row's warps) of its row, then the lanes
     * merge as above. */
    st = warp_states[(warp & ~(warps - 1)) + (lid & (warps - 1))];
    for (uint mask = 1; mask < warps; mask <<= 1)
        st = snv_shuffle_merge(st, mask);
    return st;
}
#endif /* SNV_HELPERS */

#define SNV_T FCL_CAT(fcl_storage, FCL_DT)
#define SNV_VW FCL_CAT(snv_vw, FCL_DT)
#define SNV_VECS FCL_SNV_VECS            /* vectors a work-item holds */
#define SNV_ITEMS (SNV_VECS * SNV_VW)    /* ... and elements */
#define FCL_T SNV_T                     /* softmax_common.cl's argument list */

__kernel __attribute__((reqd_work_group_size(SM_NV_LWS, 1, 1))) void
FCL_CAT(FCL_PASTE(softmax_nv, FCL_SNV_VECS), FCL_DT)(SM_ROW_ARGS, uint lanes)
{
    __local float2 warp_states[2][SM_NV_LWS / 32];
    const uint lid = get_local_id(0), lane = lid & (lanes - 1);
    const ulong rows_per_pass = SM_NV_LWS / lanes;
    const uint row_vecs = (uint)cols / SNV_VW; /* cols: a multiple of SNV_VW, at most LWS * ITEMS */
    const int keep_exp = !(flags & SM_FLAG_LOG);
    uint parity = 0;
    /* The loop bound is the same for the whole group: every work-item reaches each barrier. */
    for (ulong r0 = get_group_id(0) * rows_per_pass; r0 < rows;
         r0 += get_num_groups(0) * rows_per_pass, parity ^= 1) {
        const ulong r = r0 + lid / lanes;
        const int live = r < rows;
        /* Rows of up to a warp meet no barrier: a warp past the last row leaves. Its spare
         * work-items read the row of the warp's first (every load is unconditional, so all
         * are issued before the first use), which that warp writes only after the shuffles
         * that wait for those loads; for longer rows they read the group's first row, which
         * is written only after the reduction's barrier. */
        const ulong warp_row = r0 + (lid & ~31u) / lanes;
        if (lanes <= 32 && warp_row >= rows)
            break;
        const ulong row_read = live ? r : lanes <= 32 ? warp_row : r0;
        __global const SNV_T *in_row = in + row_read * in_stride;
        float x[SNV_ITEMS];
        #pragma unroll
        for (uint v = 0; v < SNV_VECS; v++) {
            const uint at = lane + v * lanes; /* past the row's end: the lane's first again */
            FCL_CAT(snv_load, FCL_DT)(x + v * SNV_VW, in_row, at < row_vecs ? at : lane);
        }
        /* The score is sm_score's, in the same two roundings. */
        #pragma unroll
        for (uint i = 0; i < SNV_ITEMS; i++)
            x[i] *= scale;
        if (flags & SM_FLAG_MASK) {
            const sm_row mask_row = softmax_row(row_read);
            #pragma unroll
            for (uint v = 0; v < SNV_VECS; v++) {
                const uint at = lane + v * lanes < row_vecs ? lane + v * lanes : lane;
                #pragma unroll
                for (uint e = 0; e < SNV_VW; e++)
                    x[v * SNV_VW + e] += sm_mask(mask_row, (ulong)at * SNV_VW + e, flags);
            }
        }
        float m_own = -INFINITY; /* NaN never becomes the max (fmax); it turns d into NaN */
        #pragma unroll
        for (uint v = 0; v < SNV_VECS; v++) {
            const int held = live && lane + v * lanes < row_vecs;
            #pragma unroll
            for (uint e = 0; e < SNV_VW; e++) {
                x[v * SNV_VW + e] = held ? x[v * SNV_VW + e] : -INFINITY;
                m_own = fmax(m_own, x[v * SNV_VW + e]);
            }
        }
        const float shift_own = m_own == -INFINITY ? 0.0f : m_own;
        float d_own = 0.0f;
        #pragma unroll
        for (uint i = 0; i < SNV_ITEMS; i++) {
            const float e = exp(x[i] - shift_own);
            d_own += e;
            if (keep_exp)
                x[i] = e;
        }
        const float2 st = snv_reduce((float2)(m_own, d_own), lanes, warp_states[parity]);
        /* The sink is read here, not with the mask: live across the reduction it would cost
         * registers. */
        const fcl_row_norm n = sm_row_norm(st, softmax_row(row_read), flags);
        if (!live)
            continue;
        if (lane == 0 && (flags & SM_FLAG_LSE))
            lse[r] = n.lse;
        /* exp(s - m) / d = exp(s - m_own) * exp(m_own - m) / d; a work-item that saw only -inf
         * holds zeros, which a NaN d still turns NaN. */
        const float factor = (m_own == -INFINITY ? 0.0f : exp(m_own - n.shift)) * n.inv_d;
        #pragma unroll
        for (uint i = 0; i < SNV_ITEMS; i++)
            x[i] = keep_exp ? x[i] * factor : sm_normalize(x[i], n, flags);
        __global SNV_T *out_row = out + r * out_stride;
        #pragma unroll
        for (uint v = 0; v < SNV_VECS; v++)
            if (lane + v * lanes < row_vecs)
                FCL_CAT(snv_store, FCL_DT)(out_row, lane + v * lanes, x + v * SNV_VW);
    }
}

#undef SNV_T
#undef SNV_VW
#undef SNV_VECS
#undef SNV_ITEMS
#undef FCL_T

/* Softmax on NVIDIA GPUs: FUSED for rows of up to SM_NV_COLS elements, held in registers and
 * reduced by warp shuffles, and ONLINE and SPLIT for longer rows with 16-byte loads and stores.
 * A vendor fast path in the NVIDIA program (src/program.c), chosen by the planner (src/plan.c)
 * for rows whose starts and length are multiples of 16 bytes; the portable kernels
 * (softmax.cl) are its reference and serve everything else. Compiled per storage type and
 * build after common.cl, common_nv.cl, softmax_args.h and softmax_common.cl, with
 *   FCL_DT        f32, f16 or bf16
 *   FCL_SNV_VECS  16-byte vectors a work-item holds (SM_NV_VECS, or twice that for long
 *                 float32 rows); the kernel is softmax_nv<vecs>_<type>, and the build of
 *                 SM_NV_VECS adds softmax_nv_online_<type> and softmax_nv_split_*_<type>
 *
 * FUSED (softmax_nv<vecs>):
 * as softmax_block, `lanes` work-items share a row (a power of two, at most SM_NV_LWS), a
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
    fcl_nv_unpack8(x, ((__global const uint4 *)row)[i], 0);
}

FCL_INLINE void snv_load_bf16(float *x, __global const ushort *row, uint i)
{
    fcl_nv_unpack8(x, ((__global const uint4 *)row)[i], 1);
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

#if FCL_SNV_VECS == SM_NV_VECS /* once per storage type */
/* ONLINE and SPLIT for rows of 16-byte vectors: the portable kernels' passes (softmax.cl) with
 * 16-byte loads and stores and shuffle reductions. The work-items of a group stride over a
 * range of the row's vectors, SNV_BATCH at a time, all loaded before the first is used. */
#define SNV_BATCH (32 / SNV_VW) /* 32 elements a work-item in flight */

/* Vector b of the batch from v on (SM_NV_LWS apart); past end, v again (v < end). */
#define SNV_AT(v, b, end) ((v) + (b) * SM_NV_LWS < (end) ? (v) + (b) * SM_NV_LWS : (v))

/* The batch's scores (sm_score's, in the same two roundings); those of vectors at or past end
 * are -inf. */
FCL_INLINE void FCL_CAT(snv_scores, FCL_DT)(float *x, __global const SNV_T *in_row, sm_row row,
                                            uint v, uint end, float scale, uint flags)
{
    #pragma unroll
    for (uint b = 0; b < SNV_BATCH; b++)
        FCL_CAT(snv_load, FCL_DT)(x + b * SNV_VW, in_row, SNV_AT(v, b, end));
    #pragma unroll
    for (uint i = 0; i < SNV_BATCH * SNV_VW; i++) {
        const uint b = i / SNV_VW;
        x[i] *= scale;
        if (flags & SM_FLAG_MASK)
            x[i] += sm_mask(row, (ulong)SNV_AT(v, b, end) * SNV_VW + i % SNV_VW, flags);
        x[i] = v + b * SM_NV_LWS < end ? x[i] : -INFINITY;
    }
}

/* This work-item's (m, d) over the vectors [begin, end) of in_row: the online update once a
 * batch (one exp an element; the sum rescaled when the max grows), the batches' sums added
 * with compensation (rows of millions). */
FCL_INLINE float2 FCL_CAT(snv_stream_stats, FCL_DT)(__global const SNV_T *in_row, sm_row row,
                                                    uint begin, uint end, float scale, uint flags)
{
    float m = -INFINITY, d = 0.0f, comp = 0.0f;
    for (uint v = begin + get_local_id(0); v < end; v += SNV_BATCH * SM_NV_LWS) {
        float x[SNV_BATCH * SNV_VW];
        FCL_CAT(snv_scores, FCL_DT)(x, in_row, row, v, end, scale, flags);
        float top = -INFINITY;
        #pragma unroll
        for (uint i = 0; i < SNV_BATCH * SNV_VW; i++)
            top = fmax(top, x[i]); /* NaN never becomes the max; it turns d into NaN */
        if (top > m) {
            const float r = exp(m - top); /* 0 while m is -inf, when d and comp are 0 */
            d *= r;
            comp *= r;
            m = top;
        }
        const float shift = m == -INFINITY ? 0.0f : m;
        float sum = 0.0f;
        #pragma unroll
        for (uint i = 0; i < SNV_BATCH * SNV_VW; i++)
            sum += exp(x[i] - shift);
        fcl_kahan_add(&d, &comp, sum);
    }
    return (float2)(m, d - comp);
}

/* Writes the vectors [begin, end) of out_row from scores recomputed from in_row. */
FCL_INLINE void FCL_CAT(snv_stream_write, FCL_DT)(__global const SNV_T *in_row, sm_row row,
                                                  __global SNV_T *out_row, uint begin, uint end,
                                                  float scale, uint flags, fcl_row_norm n)
{
    for (uint v = begin + get_local_id(0); v < end; v += SNV_BATCH * SM_NV_LWS) {
        float x[SNV_BATCH * SNV_VW];
        FCL_CAT(snv_scores, FCL_DT)(x, in_row, row, v, end, scale, flags);
        #pragma unroll
        for (uint i = 0; i < SNV_BATCH * SNV_VW; i++)
            x[i] = sm_normalize(x[i], n, flags);
        #pragma unroll
        for (uint b = 0; b < SNV_BATCH; b++)
            if (v + b * SM_NV_LWS < end)
                FCL_CAT(snv_store, FCL_DT)(out_row, v + b * SM_NV_LWS, x + b * SNV_VW);
    }
}

/* ONLINE: a work-group a row; pass 1 keeps (m, d), pass 2 reads the row again and writes it.
 * (Fewer groups, so that their rows stay in the L2 cache for the second read, were slower on
 * the H100.) */
__kernel __attribute__((reqd_work_group_size(SM_NV_LWS, 1, 1))) void
FCL_CAT(softmax_nv_online, FCL_DT)(SM_ROW_ARGS)
{
    __local float2 warp_states[2][SM_NV_LWS / 32];
    const uint row_vecs = (uint)(cols / SNV_VW);
    uint parity = 0;
    for (ulong r = get_group_id(0); r < rows; r += get_num_groups(0), parity ^= 1) {
        __global const SNV_T *in_row = in + r * in_stride;
        const sm_row row = softmax_row(r);
        float2 st = FCL_CAT(snv_stream_stats, FCL_DT)(in_row, row, 0, row_vecs, scale, flags);
        const fcl_row_norm n =
            sm_row_norm(snv_reduce(st, SM_NV_LWS, warp_states[parity]), row, flags);
        if (get_local_id(0) == 0 && (flags & SM_FLAG_LSE))
            lse[r] = n.lse;
        FCL_CAT(snv_stream_write, FCL_DT)(in_row, row, out + r * out_stride, 0, row_vecs, scale,
                                          flags, n);
    }
}

/* SPLIT, step 1: work-group g takes slice g % slices (slice_cols elements, a multiple of
 * 16 bytes) of row g / slices and writes its (m, d) to partial[g]. */
__kernel __attribute__((reqd_work_group_size(SM_NV_LWS, 1, 1))) void
FCL_CAT(softmax_nv_split_stats, FCL_DT)(SM_ROW_ARGS, ulong slices, ulong slice_cols,
                                        __global float2 *partial)
{
    __local float2 warp_states[2][SM_NV_LWS / 32];
    const uint row_vecs = (uint)(cols / SNV_VW), slice_vecs = (uint)(slice_cols / SNV_VW);
    uint parity = 0;
    for (ulong g = get_group_id(0); g < rows * slices; g += get_num_groups(0), parity ^= 1) {
        const ulong r = g / slices;
        const uint begin = (uint)(g % slices) * slice_vecs;
        const uint end = min(row_vecs, begin + slice_vecs);
        float2 st = FCL_CAT(snv_stream_stats, FCL_DT)(in + r * in_stride, softmax_row(r), begin,
                                                      end, scale, flags);
        st = snv_reduce(st, SM_NV_LWS, warp_states[parity]);
        if (get_local_id(0) == 0)
            partial[g] = st;
    }
}

/* SPLIT, step 2: each work-group merges all partial states of its row, then writes its own
 * slice. The group holding slice 0 writes the row's lse. */
__kernel __attribute__((reqd_work_group_size(SM_NV_LWS, 1, 1))) void
FCL_CAT(softmax_nv_split_write, FCL_DT)(SM_ROW_ARGS, ulong slices, ulong slice_cols,
                                        __global const float2 *partial)
{
    __local float2 warp_states[2][SM_NV_LWS / 32];
    const uint row_vecs = (uint)(cols / SNV_VW), slice_vecs = (uint)(slice_cols / SNV_VW);
    uint parity = 0;
    for (ulong g = get_group_id(0); g < rows * slices; g += get_num_groups(0), parity ^= 1) {
        const ulong r = g / slices, slice = g % slices;
        float2 st = (float2)(-INFINITY, 0.0f);
        for (ulong k = get_local_id(0); k < slices; k += SM_NV_LWS)
            st = fcl_stat_merge(st, partial[r * slices + k]);
        const sm_row row = softmax_row(r);
        const fcl_row_norm n =
            sm_row_norm(snv_reduce(st, SM_NV_LWS, warp_states[parity]), row, flags);
        if (slice == 0 && get_local_id(0) == 0 && (flags & SM_FLAG_LSE))
            lse[r] = n.lse;
        const uint begin = (uint)slice * slice_vecs;
        FCL_CAT(snv_stream_write, FCL_DT)(in + r * in_stride, row, out + r * out_stride, begin,
                                          min(row_vecs, begin + slice_vecs), scale, flags, n);
    }
}
#undef SNV_BATCH
#undef SNV_AT
#endif

#undef SNV_T
#undef SNV_VW
#undef SNV_VECS
#undef SNV_ITEMS
#undef FCL_T

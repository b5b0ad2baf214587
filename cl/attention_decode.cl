/* Decode attention: one query per work-group, for len_q of a few tokens, where a query tile
 * would be mostly empty and the work is streaming K and V once. Compiled per head-dim bucket
 * (FA_NAME, FA_D <= FA_DEC_MAX_D) beside the tile kernel; needs attention_common.cl.
 * FA_DEC_C work-items split the head dimensions (d = c, c + FA_DEC_C, ...: each load
 * instruction of a row of them reads consecutive elements), FA_DEC_R rows of them take
 * different keys, FA_DEC_KEYS keys per step. A step: partial dot products into local memory,
 * one work-item per key adds them up and applies the modifiers, every work-item updates the
 * running max from all the step's scores and accumulates its keys' p * v into its own output
 * columns; the rows' (l, o) are added up at the end (they share the max). Same arguments and
 * results as the tile kernel, with q_tiles = len_q. */
#define FA_DEC_C (FA_D / 4)
#define FA_DEC_R (FA_DEC_LWS / FA_DEC_C)
#define FA_DEC_U 4 /* keys per work-item per step */
#define FA_DEC_KEYS (FA_DEC_R * FA_DEC_U)

/* x[u * 4 + e] = element c + e * FA_DEC_C of key k0 + r + u * FA_DEC_R of rows: work-item
 * (r, c)'s share of a step, zero for keys at or past kv_end and columns at or past dim. Every
 * load is unconditional (at an index inside the buffer) and dtype a constant per call, so
 * all of them are issued before the first is used. */
FCL_INLINE void FCL_CAT(fa_dec_gather_typed, FA_NAME)(__private float *x, const fa_params *p,
                                                     const fa_io *io, __global const void *src,
                                                     const uint dtype,
                                                     const fa_rows *rows, ulong k0, uint r,
                                                     uint c, ulong kv_end, uint dim)
{
    #pragma unroll
    for (uint u = 0; u < FA_DEC_U; u++) {
        const ulong kj = k0 + r + u * FA_DEC_R;
        const ulong at = kj < kv_end ? fa_row(p, io, rows, kj) : 0;
        #pragma unroll
        for (uint e = 0; e < 4; e++) {
            const uint d = c + e * FA_DEC_C;
            const int inside = kj < kv_end && d < dim;
            const float val = fcl_load_any(src, dtype, inside ? at + d : 0);
            x[u * 4 + e] = inside ? val : 0.0f;
        }
    }
}

FCL_INLINE void FCL_CAT(fa_dec_gather, FA_NAME)(__private float *x, const fa_params *p,
                                               const fa_io *io, __global const void *src,
                                               uint dtype,
                                               const fa_rows *rows, ulong k0, uint r, uint c,
                                               ulong kv_end, uint dim)
{
    if (dtype == FCL_DTYPE_F32)
        FCL_CAT(fa_dec_gather_typed, FA_NAME)(x, p, io, src, FCL_DTYPE_F32, rows, k0, r, c, kv_end, dim);
    else if (dtype == FCL_DTYPE_F16)
        FCL_CAT(fa_dec_gather_typed, FA_NAME)(x, p, io, src, FCL_DTYPE_F16, rows, k0, r, c, kv_end, dim);
    else
        FCL_CAT(fa_dec_gather_typed, FA_NAME)(x, p, io, src, FCL_DTYPE_BF16, rows, k0, r, c, kv_end,
                                              dim);
}

__kernel __attribute__((reqd_work_group_size(FA_DEC_LWS, 1, 1)))
void FCL_CAT(attention_decode, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local float dots[FA_DEC_KEYS][FA_DEC_C + 1];
    __local float scores[FA_DEC_KEYS];
    __local float sum_o[FA_DEC_R][FA_D], sum_l[FA_DEC_R];
    const uint lid = get_local_id(0), c = lid % FA_DEC_C, r = lid / FA_DEC_C;
    const ulong steps = (ulong)p->q_tiles * p->batch * p->heads_q * p->splits;

    for (ulong g = get_group_id(0); g < steps; g += get_num_groups(0)) {
        const fa_work w = fa_locate(p, io, g, 1);
        const ulong qi = w.q0;
        if (qi >= w.s.len_q)
            continue; /* the whole group takes the same step: no barrier is skipped by some */
        const ulong q_at = fa_row(p, io, &w.s.q, qi);
        float qv[4], o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (uint e = 0; e < 4; e++) {
            ulong d = c + e * FA_DEC_C;
            qv[e] = d < p->head_dim ? p->q_scale * fcl_load_any(io->q, p->dtype_q, q_at + d) : 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
        const int2 vis = fa_visible_keys(p, &w, qi);

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_DEC_KEYS) {
            /* The step's K and V shares are loaded together, before the first barrier. */
            float kx[FA_DEC_U * 4], vx[FA_DEC_U * 4];
            FCL_CAT(fa_dec_gather, FA_NAME)(kx, p, io, io->k, p->dtype_kv, &w.s.k, k0, r, c, w.kv_end,
                                            (uint)p->head_dim);
            FCL_CAT(fa_dec_gather, FA_NAME)(vx, p, io, io->v, p->dtype_kv, &w.s.v, k0, r, c, w.kv_end,
                                            (uint)p->head_dim_v);
            #pragma unroll
            for (uint u = 0; u < FA_DEC_U; u++) {
                float dot = 0.0f;
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    dot = fma(qv[e], kx[u * 4 + e], dot);
                dots[r + u * FA_DEC_R][c] = dot;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid < FA_DEC_KEYS) {
                float score = 0.0f;
                for (uint cc = 0; cc < FA_DEC_C; cc++)
                    score += dots[lid][cc];
                scores[lid] = fa_score(p, io, &w, vis, score, qi, k0 + lid);
            }
            barrier(CLK_LOCAL_MEM_FENCE);

            /* Online statistics as in the tile kernel: -inf contributes 0, NaN spreads. */
            float m_new = m;
            for (uint t = 0; t < FA_DEC_KEYS; t++)
                m_new = fmax(m_new, scores[t]);
            const float alpha = m_new == -INFINITY ? 1.0f : exp(m - m_new);
            l *= alpha;
            #pragma unroll
            for (uint e = 0; e < 4; e++)
                o[e] *= alpha;
            #pragma unroll
            for (uint u = 0; u < FA_DEC_U; u++) {
                const float sc = scores[r + u * FA_DEC_R];
                const float ex = sc == -INFINITY ? 0.0f : exp(sc - m_new);
                l += ex;
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    o[e] = fma(ex, vx[u * 4 + e], o[e]);
            }
            m = m_new;
            barrier(CLK_LOCAL_MEM_FENCE); /* dots and scores are rewritten by the next step */
        }

        #pragma unroll
        for (uint e = 0; e < 4; e++)
            sum_o[r][c + e * FA_DEC_C] = o[e];
        if (c == 0)
            sum_l[r] = l;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (r == 0) {
            float l_all = 0.0f;
            for (uint rr = 0; rr < FA_DEC_R; rr++)
                l_all += sum_l[rr];
            const fa_dest dst = fa_finish_row(p, io, &w, qi, m, l_all, c == 0);
            #pragma unroll
            for (uint e = 0; e < 4; e++) {
                const ulong d = c + e * FA_DEC_C;
                if (d >= p->head_dim_v)
                    continue;
                float acc = 0.0f;
                for (uint rr = 0; rr < FA_DEC_R; rr++)
                    acc += sum_o[rr][d];
                fa_store(p, io, dst, d, acc);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* sum_o and sum_l are rewritten for the next query */
    }
}

#undef FA_DEC_C
#undef FA_DEC_R
#undef FA_DEC_U
#undef FA_DEC_KEYS

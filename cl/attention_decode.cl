/* Decode attention: one query token per work-group, for len_q of a few tokens, where a query
 * tile would be mostly empty and the work is streaming K and V once. Compiled per head-dim
 * bucket (FA_NAME, FA_D <= FA_DEC_MAX_D) beside the tile kernel; needs attention_common.cl.
 * Compiled twice, after #define FA_DEC_G 1 and FA_DEC_G FA_DEC_HEADS: a work-group takes
 * heads_step (<= FA_DEC_G) query heads that share a kv head (GQA), so their K and V stream is
 * read once, not once per head; the one-head build keeps the registers of that state free
 * for plain multi-head decoding.
 * FA_DEC_C work-items split the head dimensions (d = c, c + FA_DEC_C, ...: each load
 * instruction of a row of them reads consecutive elements), FA_DEC_R rows of them take
 * different keys, FA_DEC_KEYS keys per step. A step: partial dot products of every head into
 * local memory, one work-item per (head, key) adds them up and applies the modifiers, every
 * work-item updates each head's running max from all the step's scores and accumulates its
 * keys' p * v into its own output columns; the rows' (l, o) are added up at the end (they
 * share the max). Same arguments and results as the tile kernel, with q_tiles = len_q. */
#if FA_DEC_G == 1
#define FA_DEC_NAME FA_NAME
#else
#define FA_DEC_NAME FCL_CAT(FA_NAME, FCL_PASTE(g, FA_DEC_G)) /* attention_decode_d128_g4 */
#endif
#define FA_DEC_C (FA_D / 4)
#define FA_DEC_R (FA_DEC_LWS / FA_DEC_C)
#define FA_DEC_U 4 /* keys per work-item per step */
#define FA_DEC_KEYS (FA_DEC_R * FA_DEC_U)
#if FA_DEC_G * FA_DEC_KEYS > FA_DEC_LWS
#error "a decode step's scores need one work-item per (head, key)"
#endif

/* x[u * 4 + e] = element c + e * FA_DEC_C of key k0 + r + u * FA_DEC_R of rows: work-item
 * (r, c)'s share of a step, zero for keys at or past kv_end and columns at or past dim. Every
 * load is unconditional (at an index inside the buffer) and dtype a constant per call, so
 * all of them are issued before the first is used. */
FCL_INLINE void FCL_CAT(fa_dec_gather_typed, FA_DEC_NAME)(__private float *x, const fa_params *p,
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

FCL_INLINE void FCL_CAT(fa_dec_gather, FA_DEC_NAME)(__private float *x, const fa_params *p,
                                               const fa_io *io, __global const void *src,
                                               uint dtype,
                                               const fa_rows *rows, ulong k0, uint r, uint c,
                                               ulong kv_end, uint dim)
{
    if (dtype == FCL_DTYPE_F32)
        FCL_CAT(fa_dec_gather_typed, FA_DEC_NAME)(x, p, io, src, FCL_DTYPE_F32, rows, k0, r, c, kv_end, dim);
    else if (dtype == FCL_DTYPE_F16)
        FCL_CAT(fa_dec_gather_typed, FA_DEC_NAME)(x, p, io, src, FCL_DTYPE_F16, rows, k0, r, c, kv_end, dim);
    else
        FCL_CAT(fa_dec_gather_typed, FA_DEC_NAME)(x, p, io, src, FCL_DTYPE_BF16, rows, k0, r, c, kv_end,
                                              dim);
}

/* The K and V shares of a step at once, for a paged cache: one block-table lookup per key
 * for both (the lookup's latency comes before the loads that need it, so it is paid once, not
 * twice). Not used unpaged: interleaving the two streams' loads there costs registers. */
FCL_INLINE void FCL_CAT(fa_dec_gather_paged_typed, FA_DEC_NAME)(__private float *kx, __private float *vx,
                                                           const fa_params *p, const fa_io *io,
                                                           const uint dtype, const fa_seq *s,
                                                           ulong k0, uint r, uint c, ulong kv_end)
{
    #pragma unroll
    for (uint u = 0; u < FA_DEC_U; u++) {
        const ulong kj = k0 + r + u * FA_DEC_R;
        const fa_place at = fa_place_of(p, io, &s->k, kj < kv_end ? kj : 0);
        const ulong k_at = fa_row_at(&s->k, at), v_at = fa_row_at(&s->v, at);
        #pragma unroll
        for (uint e = 0; e < 4; e++) {
            const uint d = c + e * FA_DEC_C;
            const int k_in = kj < kv_end && d < p->head_dim, v_in = kj < kv_end && d < p->head_dim_v;
            const float kval = fcl_load_any(io->k, dtype, k_in ? k_at + d : 0);
            const float vval = fcl_load_any(io->v, dtype, v_in ? v_at + d : 0);
            kx[u * 4 + e] = k_in ? kval : 0.0f;
            vx[u * 4 + e] = v_in ? vval : 0.0f;
        }
    }
}

/* A step's K and V shares (kx, vx) in the storage type of the call. Unpaged, each tensor's
 * gather dispatches on the type itself: one dispatch around both gathers made the H100's GQA
 * decode 3-6% slower (NVIDIA's compiler scheduled the two streams' loads worse). */
FCL_INLINE void FCL_CAT(fa_dec_gather_kv, FA_DEC_NAME)(__private float *kx, __private float *vx,
                                                  const fa_params *p, const fa_io *io,
                                                  const fa_work *w, ulong k0, uint r, uint c)
{
    const uint dt = p->dtype_kv;
    if (!(p->flags & FA_FLAG_PAGED)) {
        FCL_CAT(fa_dec_gather, FA_DEC_NAME)(kx, p, io, io->k, dt, &w->s.k, k0, r, c, w->kv_end,
                                            (uint)p->head_dim);
        FCL_CAT(fa_dec_gather, FA_DEC_NAME)(vx, p, io, io->v, dt, &w->s.v, k0, r, c, w->kv_end,
                                            (uint)p->head_dim_v);
    } else if (dt == FCL_DTYPE_F32) {
        FCL_CAT(fa_dec_gather_paged_typed, FA_DEC_NAME)(kx, vx, p, io, FCL_DTYPE_F32, &w->s, k0, r, c,
                                                        w->kv_end);
    } else if (dt == FCL_DTYPE_F16) {
        FCL_CAT(fa_dec_gather_paged_typed, FA_DEC_NAME)(kx, vx, p, io, FCL_DTYPE_F16, &w->s, k0, r, c,
                                                        w->kv_end);
    } else {
        FCL_CAT(fa_dec_gather_paged_typed, FA_DEC_NAME)(kx, vx, p, io, FCL_DTYPE_BF16, &w->s, k0, r, c,
                                                        w->kv_end);
    }
}

/* The step's work for head j of the work-group's heads: the same keys, its own head index
 * (the score modifiers and sinks look it up). */
FCL_INLINE fa_work FCL_CAT(fa_dec_head, FA_DEC_NAME)(const fa_work *w, uint j)
{
    fa_work wj = *w;
    wj.s.h += j;
    return wj;
}

__kernel __attribute__((reqd_work_group_size(FA_DEC_LWS, 1, 1)))
void FCL_CAT(attention_decode, FA_DEC_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local float dots[FA_DEC_G][FA_DEC_KEYS][FA_DEC_C + 1];
    __local float scores[FA_DEC_G][FA_DEC_KEYS];
    __local float sum_o[FA_DEC_R][FA_D], sum_l[FA_DEC_R];
    const uint lid = get_local_id(0), c = lid % FA_DEC_C, r = lid / FA_DEC_C;
    /* 1 to FA_DEC_G, the same for every step; a constant in the one-head build, so that no
     * branch on it is left there (one cost the H100 15% of its decode speed). */
    const uint heads = FA_DEC_G == 1 ? 1 : (uint)p->heads_step;
    const ulong steps = (ulong)p->q_tiles * p->batch * (p->heads_q / heads) * p->splits;

    for (ulong g = get_group_id(0); g < steps; g += get_num_groups(0)) {
        const fa_work w = fa_locate(p, io, g, 1, heads);
        const ulong qi = w.q0;
        if (qi >= w.s.len_q)
            continue; /* the whole group takes the same step: no barrier is skipped by some */
        /* Each head's query, from its own sequence view (packed rows are cut per head). */
        float qv[FA_DEC_G][4], o[FA_DEC_G][4], m[FA_DEC_G], l[FA_DEC_G];
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            const fa_seq sj =
                FA_DEC_G == 1 ? w.s : fa_sequence(p, io, w.s.b, w.s.h + min(j, heads - 1));
            const int real = FA_DEC_G == 1 || (j < heads && qi < sj.len_q);
            const ulong q_at = real ? fa_row(p, io, &sj.q, qi) : 0;
            #pragma unroll
            for (uint e = 0; e < 4; e++) {
                const ulong d = c + e * FA_DEC_C;
                qv[j][e] = real && d < p->head_dim
                               ? p->q_scale * fcl_load_any(io->q, p->dtype_q, q_at + d)
                               : 0.0f;
                o[j][e] = 0.0f;
            }
            m[j] = -INFINITY;
            l[j] = 0.0f;
        }
        const int2 vis = fa_visible_keys(p, &w, qi);

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_DEC_KEYS) {
            /* The step's K and V shares are loaded together, before the first barrier. */
            float kx[FA_DEC_U * 4], vx[FA_DEC_U * 4];
            FCL_CAT(fa_dec_gather_kv, FA_DEC_NAME)(kx, vx, p, io, &w, k0, r, c);
            #pragma unroll
            for (uint j = 0; j < FA_DEC_G; j++) {
                if (j >= heads)
                    continue; /* not break: a loop of constant trip count is unrolled, and its
                               * arrays stay registers (AMD: no scratch) */
                #pragma unroll
                for (uint u = 0; u < FA_DEC_U; u++) {
                    float dot = 0.0f;
                    #pragma unroll
                    for (uint e = 0; e < 4; e++)
                        dot = fma(qv[j][e], kx[u * 4 + e], dot);
                    dots[j][r + u * FA_DEC_R][c] = dot;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid < heads * FA_DEC_KEYS) { /* one work-item per (head, key) */
                const uint j = lid / FA_DEC_KEYS, key = lid % FA_DEC_KEYS;
                float score = 0.0f;
                for (uint cc = 0; cc < FA_DEC_C; cc++)
                    score += dots[j][key][cc];
                const fa_work wj = FCL_CAT(fa_dec_head, FA_DEC_NAME)(&w, j);
                scores[j][key] = fa_score(p, io, &wj, vis, score, qi, k0 + key);
            }
            barrier(CLK_LOCAL_MEM_FENCE);

            /* Online statistics as in the tile kernel: -inf contributes 0, NaN spreads. */
            #pragma unroll
            for (uint j = 0; j < FA_DEC_G; j++) {
                if (j >= heads)
                    continue;
                float m_new = m[j];
                for (uint t = 0; t < FA_DEC_KEYS; t++)
                    m_new = fmax(m_new, scores[j][t]);
                const float alpha = m_new == -INFINITY ? 1.0f : exp(m[j] - m_new);
                l[j] *= alpha;
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    o[j][e] *= alpha;
                #pragma unroll
                for (uint u = 0; u < FA_DEC_U; u++) {
                    const float sc = scores[j][r + u * FA_DEC_R];
                    const float ex = sc == -INFINITY ? 0.0f : exp(sc - m_new);
                    l[j] += ex;
                    #pragma unroll
                    for (uint e = 0; e < 4; e++)
                        o[j][e] = fma(ex, vx[u * 4 + e], o[j][e]);
                }
                m[j] = m_new;
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* dots and scores are rewritten by the next step */
        }

        /* Each head's rows' (l, o) added up and written, one head at a time. */
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            if (j >= heads)
                continue;
            #pragma unroll
            for (uint e = 0; e < 4; e++)
                sum_o[r][c + e * FA_DEC_C] = o[j][e];
            if (c == 0)
                sum_l[r] = l[j];
            barrier(CLK_LOCAL_MEM_FENCE);
            fa_work wj = w;
            if (FA_DEC_G > 1)
                wj.s = fa_sequence(p, io, w.s.b, w.s.h + j);
            if (r == 0 && (FA_DEC_G == 1 || qi < wj.s.len_q)) {
                float l_all = 0.0f;
                for (uint rr = 0; rr < FA_DEC_R; rr++)
                    l_all += sum_l[rr];
                const fa_dest dst = fa_finish_row(p, io, &wj, qi, m[j], l_all, c == 0);
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
            barrier(CLK_LOCAL_MEM_FENCE); /* sum_o and sum_l are rewritten next */
        }
    }
}

#undef FA_DEC_NAME
#undef FA_DEC_C
#undef FA_DEC_R
#undef FA_DEC_U
#undef FA_DEC_KEYS

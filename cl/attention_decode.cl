/* Decode attention: one query token per work-group, for len_q of a few tokens, where a query
 * tile would be mostly empty and the work is streaming K and V once. Compiled per head-dim
 * bucket (FA_NAME, FA_D) beside the tile kernel; needs attention_common.cl. Compiled twice,
 * after #define FA_DEC_G 1 and FA_DEC_G FA_DEC_HEADS: a work-group takes heads_step
 * (<= FA_DEC_G) query heads that share a kv head (GQA), so their K and V stream is read
 * once, not once per head.
 *
 * The keys go by in chunks of FA_DEC_KEYS (one per work-item), each in three phases with a
 * barrier between them, so that a chunk costs a few barriers and no work-item sums long
 * lists (the online softmax of docs/ALGORITHMS.md, section 4):
 * 1. dots: FA_DEC_C1 work-items share a key, each multiplying dims c, c + FA_DEC_C1, ... of
 *    its K row with every head's query (held in local memory), partial sums to `part`;
 * 2. scores: work-item t adds up key t's partial sums, applies the modifiers, and the heads'
 *    running maxima are updated from all the chunk's scores (a two-level reduction); the
 *    work-item turns its scores into p = exp(s - m) and looks up key t's V row for phase 3;
 * 3. p.V: FA_DEC_C2 work-items across V's dims (c, c + FA_DEC_C2, ...: each load instruction
 *    of a warp reads consecutive elements), FA_DEC_R2 rows of them over the keys.
 * The rows' (l, o) are added up at the end (they share the max). Same arguments and results
 * as the tile kernel, with q_tiles = len_q. */
#if FA_DEC_G == 1
#define FA_DEC_NAME FA_NAME
#else
#define FA_DEC_NAME FCL_CAT(FA_NAME, FCL_PASTE(g, FA_DEC_G)) /* attention_decode_d128_g4 */
#endif
#define FA_DEC_C1 8                             /* phase 1: work-items per key */
#define FA_DEC_K1 (FA_DEC_LWS / FA_DEC_C1)      /* phase 1: keys per pass */
#define FA_DEC_E1 (FA_D / FA_DEC_C1)            /* phase 1: dims per work-item */
/* ... loaded at once: MLA's 72 in blocks of 8, which AMD's RDNA holds without spilling */
#define FA_DEC_E1B (FA_DEC_E1 > 32 ? 8 : FA_DEC_E1)
#define FA_DEC_DV (FA_D < 512 ? FA_D : 512)     /* head_dim_v's bucket */
#define FA_DEC_C2 (FA_DEC_DV / 4)               /* phase 3: work-items across V's dims */
#define FA_DEC_R2 (FA_DEC_LWS / FA_DEC_C2)      /* phase 3: keys at once */
#define FA_DEC_MAX_PARTS 16                     /* phase 2: maxima of 8 scores each */
#if FA_DEC_KEYS != FA_DEC_LWS || FA_D % FA_DEC_C1 || FA_DEC_E1 % FA_DEC_E1B || FA_DEC_LWS % FA_DEC_C2 || FA_DEC_MAX_PARTS * 8 != FA_DEC_KEYS
#error "the decode kernel's shape does not divide its head dims"
#endif

/* Phase 1 for one pass of keys: part[(j * KEYS + t) * C1 + c] = head j's q . k_t over dims
 * c, c + C1, ... (0 for keys at or past kv_end); dtype is a constant per call. The one-head
 * build skips the loads of absent elements, the GQA build loads every element at an index
 * inside the buffer and discards the absent ones: NVIDIA's compiler schedules each build's
 * loads better that way (on the H100, one head: 9% faster at 8K keys, 7% at 32K; GQA and
 * MLA: 6-35% slower the other way round), and both are plain OpenCL. */
FCL_INLINE void FCL_CAT(fa_dec_dots_typed, FA_DEC_NAME)(__local float *part, __local const float *qs,
                                                   const fa_params *p, const fa_io *io,
                                                   const uint dtype, const fa_work *w, ulong k0,
                                                   uint heads)
{
    const uint lid = get_local_id(0), c = lid % FA_DEC_C1;
    for (uint t = lid / FA_DEC_C1; t < FA_DEC_KEYS; t += FA_DEC_K1) {
        const ulong kj = k0 + t;
        const int live = kj < w->kv_end;
#if FA_DEC_G == 1
        const ulong at = live ? fa_row(p, io, &w->s.k, kj) + c : 0;
#else
        const ulong at = live ? fa_row(p, io, &w->s.k, kj) : 0;
#endif
        float dot[FA_DEC_G];
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++)
            dot[j] = 0.0f;
        #pragma unroll 1
        for (uint i0 = 0; i0 < FA_DEC_E1; i0 += FA_DEC_E1B) {
            float x[FA_DEC_E1B];
            #pragma unroll
            for (uint i = 0; i < FA_DEC_E1B; i++) {
                const uint d = c + (i0 + i) * FA_DEC_C1;
                const int inside = live && d < p->head_dim;
#if FA_DEC_G == 1
                x[i] = inside ? fcl_load_any(io->k, dtype, at + (i0 + i) * FA_DEC_C1) : 0.0f;
#else
                const float val = fcl_load_any(io->k, dtype, inside ? at + d : 0);
                x[i] = inside ? val : 0.0f;
#endif
            }
            #pragma unroll
            for (uint j = 0; j < FA_DEC_G; j++) {
                if (j >= heads)
                    continue; /* not break: a loop of constant trip count is unrolled, and
                               * its arrays stay registers (AMD: no scratch) */
                #pragma unroll
                for (uint i = 0; i < FA_DEC_E1B; i++)
                    dot[j] = fma(qs[j * FA_D + c + (i0 + i) * FA_DEC_C1], x[i], dot[j]);
            }
        }
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++)
            if (j < heads)
                part[(j * FA_DEC_KEYS + t) * FA_DEC_C1 + c] = dot[j];
    }
}

/* Phase 3: work-item (r, c) adds p_t * v_t over dims c + e * C2 of keys t = r, r + R2, ...
 * below n into o, and p_t into l, for each head (p_t of head j at pv[t * G + j]). */
FCL_INLINE void FCL_CAT(fa_dec_pv_typed, FA_DEC_NAME)(float o[FA_DEC_G][4], float *l,
                                                 __local const float *pv,
                                                 __local const ulong *v_at, const fa_params *p,
                                                 const fa_io *io, const uint dtype, uint n,
                                                 uint heads)
{
    const uint lid = get_local_id(0), c = lid % FA_DEC_C2;
    #pragma unroll 4
    for (uint t = lid / FA_DEC_C2; t < n; t += FA_DEC_R2) {
        float x[4];
        const ulong at = v_at[t];
        #pragma unroll
        for (uint e = 0; e < 4; e++) {
            const uint d = c + e * FA_DEC_C2;
            const int inside = d < p->head_dim_v;
            const float val = fcl_load_any(io->v, dtype, inside ? at + d : 0);
            x[e] = inside ? val : 0.0f;
        }
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            if (j >= heads)
                continue;
            const float pj = pv[t * FA_DEC_G + j];
            l[j] += pj;
            #pragma unroll
            for (uint e = 0; e < 4; e++)
                o[j][e] = fma(pj, x[e], o[j][e]);
        }
    }
}

/* The storage type's dispatch around each phase's loads, once per chunk. */
FCL_INLINE void FCL_CAT(fa_dec_dots, FA_DEC_NAME)(__local float *part, __local const float *qs,
                                             const fa_params *p, const fa_io *io,
                                             const fa_work *w, ulong k0, uint heads)
{
    if (p->dtype_kv == FCL_DTYPE_F32)
        FCL_CAT(fa_dec_dots_typed, FA_DEC_NAME)(part, qs, p, io, FCL_DTYPE_F32, w, k0, heads);
    else if (p->dtype_kv == FCL_DTYPE_F16)
        FCL_CAT(fa_dec_dots_typed, FA_DEC_NAME)(part, qs, p, io, FCL_DTYPE_F16, w, k0, heads);
    else
        FCL_CAT(fa_dec_dots_typed, FA_DEC_NAME)(part, qs, p, io, FCL_DTYPE_BF16, w, k0, heads);
}

FCL_INLINE void FCL_CAT(fa_dec_pv, FA_DEC_NAME)(float o[FA_DEC_G][4], float *l, __local const float *pv,
                                           __local const ulong *v_at, const fa_params *p,
                                           const fa_io *io, uint n, uint heads)
{
    if (p->dtype_kv == FCL_DTYPE_F32)
        FCL_CAT(fa_dec_pv_typed, FA_DEC_NAME)(o, l, pv, v_at, p, io, FCL_DTYPE_F32, n, heads);
    else if (p->dtype_kv == FCL_DTYPE_F16)
        FCL_CAT(fa_dec_pv_typed, FA_DEC_NAME)(o, l, pv, v_at, p, io, FCL_DTYPE_F16, n, heads);
    else
        FCL_CAT(fa_dec_pv_typed, FA_DEC_NAME)(o, l, pv, v_at, p, io, FCL_DTYPE_BF16, n, heads);
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
    __local float qs[FA_DEC_G * FA_D];                       /* q_scale * q, per head */
    __local float part[FA_DEC_G * FA_DEC_KEYS * FA_DEC_C1]; /* phase 1's sums; at the end, o's */
    __local float pv[FA_DEC_KEYS * FA_DEC_G];               /* scores, then p, per key and head */
    __local float maxima[FA_DEC_G * FA_DEC_MAX_PARTS];
    __local ulong v_at[FA_DEC_KEYS];                         /* V's rows of the chunk */
    __local float sum_l[FA_DEC_G * FA_DEC_R2];
    const uint lid = get_local_id(0), c2 = lid % FA_DEC_C2, r2 = lid / FA_DEC_C2;
    /* 1 to FA_DEC_G, the same for every step; a constant in the one-head build, so that no
     * branch on it is left there. */
    const uint heads = FA_DEC_G == 1 ? 1 : (uint)p->heads_step;
    const ulong steps = (ulong)p->q_tiles * p->batch * (p->heads_q / heads) * p->splits;

    for (ulong g = get_group_id(0); g < steps; g += get_num_groups(0)) {
        const fa_work w = fa_locate(p, io, g, 1, heads);
        const ulong qi = w.q0;
        if (qi >= w.s.len_q)
            continue; /* the whole group takes the same step: no barrier is skipped by some */
        /* Each head's query, from its own sequence view (packed rows are cut per head). */
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            const fa_seq sj =
                FA_DEC_G == 1 ? w.s : fa_sequence(p, io, w.s.b, w.s.h + min(j, heads - 1));
            const int real = FA_DEC_G == 1 || (j < heads && qi < sj.len_q);
            const ulong q_at = real ? fa_row(p, io, &sj.q, qi) : 0;
            for (uint d = lid; d < FA_D; d += FA_DEC_LWS)
                qs[j * FA_D + d] = real && d < p->head_dim
                                       ? p->q_scale * fcl_load_any(io->q, p->dtype_q, q_at + d)
                                       : 0.0f;
        }
        float o[FA_DEC_G][4], m[FA_DEC_G], l[FA_DEC_G];
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            #pragma unroll
            for (uint e = 0; e < 4; e++)
                o[j][e] = 0.0f;
            m[j] = -INFINITY;
            l[j] = 0.0f;
        }
        const int2 vis = fa_visible_keys(p, &w, qi);
        barrier(CLK_LOCAL_MEM_FENCE); /* qs */

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_DEC_KEYS) {
            FCL_CAT(fa_dec_dots, FA_DEC_NAME)(part, qs, p, io, &w, k0, heads);
            barrier(CLK_LOCAL_MEM_FENCE);

            /* Phase 2: key t = lid's scores (-inf where hidden or past the chunk's end). */
            const ulong kj = k0 + lid;
            float s[FA_DEC_G];
            #pragma unroll
            for (uint j = 0; j < FA_DEC_G; j++) {
                s[j] = -INFINITY;
                if (j >= heads)
                    continue;
                float dot = 0.0f;
                #pragma unroll
                for (uint cc = 0; cc < FA_DEC_C1; cc++)
                    dot += part[(j * FA_DEC_KEYS + lid) * FA_DEC_C1 + cc];
                const fa_work wj = FCL_CAT(fa_dec_head, FA_DEC_NAME)(&w, j);
                s[j] = fa_score(p, io, &wj, vis, dot, qi, kj);
                pv[lid * FA_DEC_G + j] = s[j];
            }
            if (kj < w.kv_end)
                v_at[lid] = fa_row(p, io, &w.s.v, kj);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid < heads * FA_DEC_MAX_PARTS) { /* one work-item per (head, 8 keys) */
                const uint j = lid / FA_DEC_MAX_PARTS, first = lid % FA_DEC_MAX_PARTS * 8;
                float mx = -INFINITY;
                for (uint t = first; t < first + 8; t++)
                    mx = fmax(mx, pv[t * FA_DEC_G + j]);
                maxima[lid] = mx;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* Online statistics as in the tile kernel: -inf contributes 0, NaN spreads. */
            #pragma unroll
            for (uint j = 0; j < FA_DEC_G; j++) {
                if (j >= heads)
                    continue;
                float m_new = m[j];
                for (uint i = 0; i < FA_DEC_MAX_PARTS; i++)
                    m_new = fmax(m_new, maxima[j * FA_DEC_MAX_PARTS + i]);
                const float alpha = m_new == -INFINITY ? 1.0f : exp(m[j] - m_new);
                l[j] *= alpha;
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    o[j][e] *= alpha;
                m[j] = m_new;
                pv[lid * FA_DEC_G + j] = s[j] == -INFINITY ? 0.0f : exp(s[j] - m_new);
            }
            barrier(CLK_LOCAL_MEM_FENCE);

            const uint n = (uint)min((ulong)FA_DEC_KEYS, w.kv_end - k0);
            FCL_CAT(fa_dec_pv, FA_DEC_NAME)(o, l, pv, v_at, p, io, n, heads);
            /* The next chunk's phase 1 writes part, which only phase 2 read; its phase 2
             * rewrites pv and v_at after a barrier that every work-item reaches after this
             * phase 3. */
        }

        /* Each head's rows' (l, o) added up and written (part is free after phase 2). */
        __local float *sum_o = part;
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            #pragma unroll
            for (uint e = 0; e < 4; e++)
                sum_o[(j * FA_DEC_R2 + r2) * FA_DEC_DV + c2 + e * FA_DEC_C2] = o[j][e];
            if (c2 == 0)
                sum_l[j * FA_DEC_R2 + r2] = l[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            if (j >= heads)
                continue;
            fa_work wj = w;
            if (FA_DEC_G > 1)
                wj.s = fa_sequence(p, io, w.s.b, w.s.h + j);
            if (lid >= p->head_dim_v || (FA_DEC_G > 1 && qi >= wj.s.len_q))
                continue;
            float l_all = 0.0f;
            for (uint rr = 0; rr < FA_DEC_R2; rr++)
                l_all += sum_l[j * FA_DEC_R2 + rr];
            const fa_dest dst = fa_finish_row(p, io, &wj, qi, m[j], l_all, lid == 0);
            for (uint d = lid; d < p->head_dim_v; d += FA_DEC_LWS) {
                float acc = 0.0f;
                for (uint rr = 0; rr < FA_DEC_R2; rr++)
                    acc += sum_o[(j * FA_DEC_R2 + rr) * FA_DEC_DV + d];
                fa_store(p, io, dst, d, acc);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* local memory is rewritten by the next step */
    }
}

#undef FA_DEC_NAME
#undef FA_DEC_C1
#undef FA_DEC_K1
#undef FA_DEC_E1
#undef FA_DEC_E1B
#undef FA_DEC_DV
#undef FA_DEC_C2
#undef FA_DEC_R2
#undef FA_DEC_MAX_PARTS

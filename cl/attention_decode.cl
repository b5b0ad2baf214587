/* Decode attention: one query token per work-group, for len_q of a few tokens, where a query
 * tile would be mostly empty and the work is streaming K and V once. Compiled per head-dim
 * bucket (FA_NAME, FA_D) beside the tile kernel; needs attention_common.cl. Compiled per
 * storage type of K and V (FA_DEC_DT: f32, f16 or bf16), so that a work-item loads vectors
 * of FA_DEC_W elements of it, and for each twice, after #define FA_DEC_G 1 and FA_DEC_G
 * FA_DEC_HEADS: a work-group takes heads_step (<= FA_DEC_G) query heads that share a kv
 * head (GQA), so their K and V stream is read once, not once per head.
 *
 * The keys go by in chunks of FA_DEC_KEYS (one per work-item), each in three phases with a
 * barrier between them, so that a chunk costs a few barriers and no work-item sums long
 * lists (the online softmax of docs/ALGORITHMS.md, section 4):
 * 1. dots: FA_DEC_C1 work-items share a key, each multiplying vectors c, c + FA_DEC_C1, ...
 *    of FA_DEC_W elements of its K row with every head's query (held in local memory),
 *    partial sums to `part`;
 * 2. scores: work-item t adds up key t's partial sums, applies the modifiers, and the heads'
 *    running maxima are updated from all the chunk's scores (a two-level reduction); the
 *    work-item turns its scores into p = exp(s - m) and looks up key t's V row for phase 3
 *    (and the next chunk's K row for phase 1: the block-table loads of a paged cache once
 *    per key, not once per work-item that reads it);
 * 3. p.V: FA_DEC_C2 work-items across V's dims, a vector of FA_DEC_W each (a warp's loads
 *    read whole rows), FA_DEC_R2 rows of them over the keys.
 * The rows' (l, o) are added up at the end (they share the max). Same arguments and results
 * as the tile kernel, with q_tiles = len_q. */
#if FA_DEC_G == 1
#define FA_DEC_NAME FCL_CAT(FA_NAME, FA_DEC_DT) /* attention_decode_d128_f16 */
#else
#define FA_DEC_NAME FCL_CAT(FA_NAME, FCL_CAT(FCL_PASTE(g, FA_DEC_G), FA_DEC_DT)) /* ..._d128_g4_f16 */
#endif
#define fa_dec_bytes_f32 4
#define fa_dec_bytes_f16 2
#define fa_dec_bytes_bf16 2
#define FA_DEC_BYTES FCL_PASTE(fa_dec_bytes_, FA_DEC_DT)
#if FA_DEC_WIDTH(FA_DEC_BYTES, FA_DEC_G > 1) == 8 /* elements a load (attention_args.h) */
#define FA_DEC_W 8
#else
#define FA_DEC_W 4
#endif
#define fa_dec_vec FCL_PASTE(float, FA_DEC_W)
#define FA_DEC_C1 8                             /* phase 1: work-items per key */
#define FA_DEC_K1 (FA_DEC_LWS / FA_DEC_C1)      /* phase 1: keys per pass */
#define FA_DEC_E1 (FA_D / FA_DEC_C1)            /* phase 1: elements of a key per work-item */
#define FA_DEC_N1 (FA_DEC_E1 / FA_DEC_W)        /* ... in vectors */
/* ... loaded at once: MLA's 72 elements in blocks of 8, which AMD's RDNA holds without
 * spilling */
#define FA_DEC_B1 ((FA_DEC_E1 > 32 ? 8 : FA_DEC_E1) / FA_DEC_W)
/* ... keys a work-item takes at once (loads in flight): in the one-head build 4 at head dim
 * 64, else 1; in the GQA build, whose accumulators are FA_DEC_G times as many, 2 up to head
 * dim 128 (NVIDIA H200: the fastest of 1, 2 and 4 at head dims 64, 128 and 256) */
#define FA_DEC_U1 (FA_DEC_E1 > 16 ? 1 : FA_DEC_G > 1 ? 2 : FA_DEC_E1 <= 8 ? 4 : 1)
#define FA_DEC_DV (FA_D < 512 ? FA_D : 512)     /* head_dim_v's bucket */
#define FA_DEC_C2 (FA_DEC_DV / FA_DEC_W)        /* phase 3: work-items across V's dims */
#define FA_DEC_R2 (FA_DEC_LWS / FA_DEC_C2)      /* phase 3: keys at once */
#define FA_DEC_MAX_PARTS 16                     /* phase 2: maxima of 8 scores each */
#if FA_DEC_KEYS != FA_DEC_LWS || FA_D % (FA_DEC_C1 * FA_DEC_W) || FA_DEC_B1 < 1 || FA_DEC_N1 % FA_DEC_B1 || FA_DEC_KEYS % (FA_DEC_K1 * FA_DEC_U1) || FA_DEC_LWS % FA_DEC_C2 || FA_DEC_MAX_PARTS * 8 != FA_DEC_KEYS || FA_DEC_W > FA_DEC_C1 || FA_DEC_W % 4
#error "the decode kernel's shape does not divide its head dims"
#endif

/* W elements of a storage type as floats (vloadn needs element alignment only). */
#define fa_dec_vload4_f32(row) vload4(0, row)
#define fa_dec_vload4_f16(row) vload_half4(0, row)
#define fa_dec_vload8_f16(row) vload_half8(0, row)
#define fa_dec_vload4_bf16(row) as_float4(convert_uint4(vload4(0, row)) << 16)
#define fa_dec_vload8_bf16(row) as_float8(convert_uint8(vload8(0, row)) << 16)
#define FA_DEC_VLOAD FCL_CAT(FCL_PASTE(fa_dec_vload, FA_DEC_W), FA_DEC_DT)

/* Elements d0 to d0 + W - 1 of the row of K or V at `at` where d0 < n, else 0. n is the row's
 * head dim, which the planner takes only in multiples of W (FA_DEC_WIDTH), or 0 for a key
 * past the split's end. A vector outside the row is loaded from element 0 and dropped (the
 * buffer holds a row, so at least W elements): without a branch, so that the compiler
 * issues the loads of a pass together. */
FCL_INLINE fa_dec_vec FCL_CAT(fa_dec_load, FA_DEC_NAME)(__global const void *base, ulong at,
                                                       uint d0, uint n)
{
    __global const FCL_PASTE(fcl_storage_, FA_DEC_DT) *kv = base;
    const int inside = d0 < n;
    const fa_dec_vec x = FA_DEC_VLOAD(kv + (inside ? at + d0 : 0));
    return inside ? x : (fa_dec_vec)0.0f;
}

/* The same in a FA_FLAG_KV call: the row's values decoded from its format, times its factor
 * (elements past n are 0 and read nothing). */
FCL_INLINE fa_dec_vec FCL_CAT(fa_dec_load_kv, FA_DEC_NAME)(__global const void *base, uint format,
                                                          float scale, ulong at, uint d0, uint n)
{
    if (d0 >= n)
        return 0.0f;
#if FA_DEC_W == 8
    return (float8)(fcl_kv_decode4(base, format, at, d0), fcl_kv_decode4(base, format, at, d0 + 4)) *
           scale;
#else
    return fcl_kv_decode4(base, format, at, d0) * scale;
#endif
}

/* Where key kj's K (kv 0) or V (kv 1) row starts, and in a FA_FLAG_KV call its factor: once
 * per key for every work-item that reads the row (one page lookup serves both). */
FCL_INLINE void FCL_CAT(fa_dec_locate, FA_DEC_NAME)(const fa_params *p, const fa_io *io,
                                                   const fa_seq *s, int kv, ulong kj,
                                                   __local ulong *at, __local float *scale)
{
    const fa_rows *r = kv ? &s->v : &s->k;
    const fa_place place = fa_place_of(p, io, r, kj);
    *at = fa_row_at(r, place);
    if (p->flags & FA_FLAG_KV)
        *scale = fa_kv_row_scale(p, io, s, kv, place);
}

/* acc += a * b, in four lanes (a sum of products, so that the accumulators are few). */
FCL_INLINE float4 FCL_CAT(fa_dec_fma, FA_DEC_NAME)(fa_dec_vec a, fa_dec_vec b, float4 acc)
{
#if FA_DEC_W == 8
    return fma(a.hi, b.hi, fma(a.lo, b.lo, acc));
#else
    return fma(a, b, acc);
#endif
}

/* Phase 1 for one pass of keys: part[(j * KEYS + t) * C1 + c] = head j's q . k_t over the
 * vectors c, c + C1, ... of the row (0 for keys at or past kv_end), U keys at once. */
FCL_INLINE void FCL_CAT(fa_dec_dots, FA_DEC_NAME)(__local float *part, __local const float *qs,
                                             __local const ulong *k_at,
                                             __local const float *k_sc, const fa_params *p,
                                             const fa_io *io, const fa_work *w, ulong k0,
                                             uint heads)
{
    const uint lid = get_local_id(0), c = lid % FA_DEC_C1;
    for (uint t0 = lid / FA_DEC_C1; t0 < FA_DEC_KEYS; t0 += FA_DEC_K1 * FA_DEC_U1) {
        ulong at[FA_DEC_U1];
        uint n[FA_DEC_U1];
        float sc[FA_DEC_U1];
        float4 qk[FA_DEC_U1][FA_DEC_G];
        #pragma unroll
        for (uint u = 0; u < FA_DEC_U1; u++) {
            const uint t = t0 + u * FA_DEC_K1;
            const int live = k0 + t < w->kv_end;
            at[u] = live ? k_at[t] : 0;
            n[u] = live ? (uint)p->head_dim : 0;
            sc[u] = live && (p->flags & FA_FLAG_KV) ? k_sc[t] : 0.0f;
            #pragma unroll
            for (uint j = 0; j < FA_DEC_G; j++)
                qk[u][j] = 0.0f;
        }
        #pragma unroll 1
        for (uint i0 = 0; i0 < FA_DEC_N1; i0 += FA_DEC_B1) {
            fa_dec_vec x[FA_DEC_U1][FA_DEC_B1];
            #pragma unroll
            for (uint u = 0; u < FA_DEC_U1; u++)
                #pragma unroll
                for (uint i = 0; i < FA_DEC_B1; i++)
                    x[u][i] = p->flags & FA_FLAG_KV
                                  ? FCL_CAT(fa_dec_load_kv, FA_DEC_NAME)(
                                        io->k, p->format_k, sc[u], at[u],
                                        (c + (i0 + i) * FA_DEC_C1) * FA_DEC_W, n[u])
                                  : FCL_CAT(fa_dec_load, FA_DEC_NAME)(
                                        io->k, at[u], (c + (i0 + i) * FA_DEC_C1) * FA_DEC_W, n[u]);
            #pragma unroll
            for (uint j = 0; j < FA_DEC_G; j++) {
                if (j >= heads)
                    continue; /* not break: a loop of constant trip count is unrolled, and
                               * its arrays stay registers (AMD: no scratch) */
                #pragma unroll
                for (uint i = 0; i < FA_DEC_B1; i++) {
                    const fa_dec_vec qv = FCL_PASTE(vload, FA_DEC_W)(
                        0, qs + j * FA_D + (c + (i0 + i) * FA_DEC_C1) * FA_DEC_W);
                    #pragma unroll
                    for (uint u = 0; u < FA_DEC_U1; u++)
                        qk[u][j] = FCL_CAT(fa_dec_fma, FA_DEC_NAME)(qv, x[u][i], qk[u][j]);
                }
            }
        }
        #pragma unroll
        for (uint u = 0; u < FA_DEC_U1; u++)
            #pragma unroll
            for (uint j = 0; j < FA_DEC_G; j++)
                if (j < heads)
                    part[(j * FA_DEC_KEYS + t0 + u * FA_DEC_K1) * FA_DEC_C1 + c] =
                        (qk[u][j].x + qk[u][j].y) + (qk[u][j].z + qk[u][j].w);
    }
}

/* Phase 3: work-item (r, c) adds p_t * v_t over dims c * W to c * W + W - 1 of keys t = r,
 * r + R2, ... below n into o, and p_t into l, for each head (p_t of head j at pv[t * G + j]). */
FCL_INLINE void FCL_CAT(fa_dec_pv, FA_DEC_NAME)(fa_dec_vec o[FA_DEC_G], float *l,
                                           __local const float *pv, __local const ulong *v_at,
                                           __local const float *v_sc, const fa_params *p,
                                           const fa_io *io, uint n, uint heads)
{
    const uint lid = get_local_id(0), c = lid % FA_DEC_C2;
    #pragma unroll 4
    for (uint t = lid / FA_DEC_C2; t < n; t += FA_DEC_R2) {
        const fa_dec_vec x =
            p->flags & FA_FLAG_KV
                ? FCL_CAT(fa_dec_load_kv, FA_DEC_NAME)(io->v, p->format_v, v_sc[t], v_at[t],
                                                       c * FA_DEC_W, (uint)p->head_dim_v)
                : FCL_CAT(fa_dec_load, FA_DEC_NAME)(io->v, v_at[t], c * FA_DEC_W,
                                                    (uint)p->head_dim_v);
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            if (j >= heads)
                continue;
            const float pj = pv[t * FA_DEC_G + j];
            l[j] += pj;
            /* a key of weight 0 adds nothing, also a V row of NaN codes (as the tile kernel) */
            if (!(p->flags & FA_FLAG_KV) || pj != 0.0f)
                o[j] = fma((fa_dec_vec)pj, x, o[j]);
        }
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
    __local float qs[FA_DEC_G * FA_D];                       /* q_scale * q, per head */
    __local float part[FA_DEC_G * FA_DEC_KEYS * FA_DEC_C1]; /* phase 1's sums; at the end, o's */
    __local float pv[FA_DEC_KEYS * FA_DEC_G];               /* scores, then p, per key and head */
    __local float maxima[FA_DEC_G * FA_DEC_MAX_PARTS];
    __local ulong k_at[FA_DEC_KEYS], v_at[FA_DEC_KEYS]; /* K's and V's rows of the chunk */
    /* ... and their factors, in the builds for K/V formats */
    __local float k_sc[FA_FEATURES & FA_FLAG_KV ? FA_DEC_KEYS : 1];
    __local float v_sc[FA_FEATURES & FA_FLAG_KV ? FA_DEC_KEYS : 1];
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
            const int real = j < heads && qi < sj.len_q;
            const ulong q_at = real ? fa_row(p, io, &sj.q, qi) : 0;
            for (uint d = lid; d < FA_D; d += FA_DEC_LWS)
                qs[j * FA_D + d] = real && d < p->head_dim
                                       ? p->q_scale * fcl_load_any(io->q, p->dtype_q, q_at + d)
                                       : 0.0f;
        }
        fa_dec_vec o[FA_DEC_G];
        float m[FA_DEC_G], l[FA_DEC_G];
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            o[j] = 0.0f;
            m[j] = -INFINITY;
            l[j] = 0.0f;
        }
        const int2 vis = fa_visible_keys(p, &w, qi);
        if (w.kv_begin + lid < w.kv_end)
            FCL_CAT(fa_dec_locate, FA_DEC_NAME)(p, io, &w.s, 0, w.kv_begin + lid, &k_at[lid],
                                                &k_sc[lid]);
        barrier(CLK_LOCAL_MEM_FENCE); /* qs, k_at */

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_DEC_KEYS) {
            FCL_CAT(fa_dec_dots, FA_DEC_NAME)(part, qs, k_at, k_sc, p, io, &w, k0, heads);
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
            /* Key t's V row, and the next chunk's K row (phase 1 has read this one's). */
            if (kj < w.kv_end)
                FCL_CAT(fa_dec_locate, FA_DEC_NAME)(p, io, &w.s, 1, kj, &v_at[lid], &v_sc[lid]);
            if (kj + FA_DEC_KEYS < w.kv_end)
                FCL_CAT(fa_dec_locate, FA_DEC_NAME)(p, io, &w.s, 0, kj + FA_DEC_KEYS, &k_at[lid],
                                                    &k_sc[lid]);
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
                o[j] *= alpha;
                m[j] = m_new;
                pv[lid * FA_DEC_G + j] = s[j] == -INFINITY ? 0.0f : exp(s[j] - m_new);
            }
            barrier(CLK_LOCAL_MEM_FENCE);

            const uint n = (uint)min((ulong)FA_DEC_KEYS, w.kv_end - k0);
            FCL_CAT(fa_dec_pv, FA_DEC_NAME)(o, l, pv, v_at, v_sc, p, io, n, heads);
            /* The next chunk's phase 1 writes part, which only phase 2 read, and reads k_at,
             * written before the barriers above; its phase 2 rewrites pv, v_at and k_at after
             * a barrier that every work-item reaches after this phase 3. */
        }

        /* Each head's rows' (l, o) added up and written (part is free after phase 2). */
        __local float *sum_o = part;
        #pragma unroll
        for (uint j = 0; j < FA_DEC_G; j++) {
            FCL_PASTE(vstore, FA_DEC_W)(o[j], 0,
                                        sum_o + (j * FA_DEC_R2 + r2) * FA_DEC_DV + c2 * FA_DEC_W);
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
            if (lid >= p->head_dim_v || qi >= wj.s.len_q)
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
#undef FA_DEC_BYTES
#undef FA_DEC_W
#undef fa_dec_vec
#undef FA_DEC_VLOAD
#undef FA_DEC_C1
#undef FA_DEC_K1
#undef FA_DEC_E1
#undef FA_DEC_N1
#undef FA_DEC_B1
#undef FA_DEC_U1
#undef FA_DEC_DV
#undef FA_DEC_C2
#undef FA_DEC_R2
#undef FA_DEC_MAX_PARTS

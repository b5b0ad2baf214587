/* Single-pass ("flash") attention in tiles, for one head-dim bucket (docs/ALGORITHMS.md,
 * section 4). The host compiles this text once per bucket whose tile fits the device, after
 *   FA_NAME  kernel name suffix (d64, d128, d256, d576)
 *   FA_D     largest head_dim and head_dim_v of the bucket
 *   FA_BQ    queries per tile (a multiple of FA_TQ)
 *   FA_BK    keys per tile (a multiple of FA_TK)
 *   FA_TQ    work-item rows of a work-group (8, or 4 where the driver allows fewer than 64)
 *   FA_TK    work-item columns: FA_TQ x FA_TK work-items
 *   FA_PREFETCH  1: each K and V tile fetched into registers during the product before
 *            its use; 0: each loaded when it is needed (fcl_attention_tile_prefetch says
 *            which). K and V take turns in one local buffer either way.
 *   FA_PF_MAX    elements of each fetched tile a work-item holds at most (the device
 *            table's attention_prefetch_items); the rest is loaded when the tile is stored
 *   FA_PV_VEC    1: o += P V reads p as float4s of 4 keys (the device table's choice)
 * Needs attention_common.cl. A work-group of FA_TQ x FA_TK work-items owns FA_BQ query rows
 * of one (batch, head): the scaled Q tile stays in local memory, K and V tiles stream
 * through local memory, scores live in registers and one local tile, and each row keeps
 * its running (m, l) and an output accumulator o in float32, in the registers of the
 * work-items that own the row's scores and output columns. Both products read local memory
 * in float4s: S = Q K^T along the head dim, o += P V along V's rows. The len_q x len_kv
 * scores never reach global memory. With several key splits, each work-group writes its
 * unnormalised partial (m, l, o) and attention_merge_splits combines them.
 */
#define FA_SQ (FA_BQ / FA_TQ)
#define FA_SK (FA_BK / FA_TK)
/* A work-item's output columns: FA_SD4 float4s, float4 tk + j * FA_TK of the row (the
 * FA_TK work-items of a row read neighbouring float4s of a V row: no bank conflict). */
#define FA_SD4 (FA_D / 4 / FA_TK)
#if FA_D % (4 * FA_TK) || FA_BK % 4
#error "attention_tile.cl: FA_D must be a multiple of 4 * FA_TK and FA_BK of 4"
#endif
/* Padded local rows: a multiple of 4 floats, so both products read float4s, and rows 4
 * banks apart, so the rows a warp reads at once fall in different banks. */
#define FA_ROW (FA_D + 4)
#define FA_PROW (FA_BK + 4)
/* o + p v for a key's weight p and 4 elements of its V row. In the builds for K/V formats a
 * key of weight 0 (hidden, past the end, or underflowed) adds nothing even where its V row
 * decodes to NaN (an fp8 NaN code): the contract lets such a NaN reach only the rows that
 * see the key. */
#define FA_PV_ADD(p, v, o)                                                                     \
    ((FA_FEATURES & FA_FLAG_KV) && (p) == 0.0f ? (o) : fma((float4)(p), (v), (o)))
/* Loops over the per-work-item blocks (s, o, qv, kv, vv) carry #pragma unroll: the blocks
 * must be registers, and an array indexed in a loop the compiler did not unroll goes to
 * scratch memory (checked for AMD GPUs by .ci/amd-offline-check.sh). */

/* at[c] = the element where row row0 + c of r starts, for the FA_BK rows of a K or V tile
 * below row_end, where the kernel lists them (at is not NULL): a paged cache's block-table
 * read and division once a row of a tile, not once an element each work-item loads (paged
 * prefill at head dim 128 ran at 40% of the contiguous speed with them per element). */
FCL_INLINE void FCL_CAT(fa_tile_rows, FA_NAME)(__local ulong *at, const fa_params *p,
                                              const fa_io *io, const fa_rows *r, ulong row0,
                                              ulong row_end)
{
    if (!at)
        return;
    #pragma unroll
    for (uint i = 0; i < (FA_BK + FA_TQ * FA_TK - 1) / (FA_TQ * FA_TK); i++) {
        const uint c = get_local_id(0) + i * FA_TQ * FA_TK;
        if (c < FA_BK && row0 + c < row_end)
            at[c] = fa_row(p, io, r, row0 + c);
    }
}

/* Where row row0 + c of r starts: from at (fa_tile_rows), or computed where at is NULL. */
FCL_INLINE ulong FCL_CAT(fa_tile_row, FA_NAME)(const fa_params *p, const fa_io *io,
                                               const fa_rows *r, __local const ulong *at,
                                               ulong row0, uint c)
{
    return at ? at[c] : fa_row(p, io, r, row0 + c);
}

/* tile[c][d] = factor * element d of row row0 + c of r (at: fa_tile_row), for c < rows and
 * d < FA_D; zero at or past row_end or dim: the score and output loops run over all FA_D
 * columns. The tile indices are 32-bit with FA_D a constant, and each work-item issues
 * FA_LOAD_BATCH loads before storing any (loads that wait for one another cost a memory
 * latency each). dtype is a constant in each call below, so no branch is left between the
 * loads either. rows * FA_D is a multiple of the batch (tiles of 8 or more rows, FA_D >= 64). */
#define FA_LOAD_BATCH 8
FCL_INLINE void FCL_CAT(fa_load_typed, FA_NAME)(__local float (*tile)[FA_ROW], uint rows,
                                               const fa_params *p, const fa_io *io,
                                               __global const void *src, const uint dtype,
                                               const fa_rows *r, __local const ulong *at,
                                               ulong row0, ulong row_end, uint dim, float factor,
                                               uint first)
{
    for (uint e0 = first + get_local_id(0); e0 < rows * FA_D; e0 += FA_LOAD_BATCH * FA_TQ * FA_TK) {
        float x[FA_LOAD_BATCH];
        #pragma unroll
        for (uint i = 0; i < FA_LOAD_BATCH; i++) {
            const uint e = e0 + i * FA_TQ * FA_TK, c = e / FA_D, d = e % FA_D;
            const int inside = row0 + c < row_end && d < dim;
            x[i] = fcl_load_any(
                src, dtype, inside ? FCL_CAT(fa_tile_row, FA_NAME)(p, io, r, at, row0, c) + d : 0);
            x[i] = inside ? factor * x[i] : 0.0f;
        }
        #pragma unroll
        for (uint i = 0; i < FA_LOAD_BATCH; i++) {
            const uint e = e0 + i * FA_TQ * FA_TK;
            tile[e / FA_D][e % FA_D] = x[i];
        }
    }
}

/* The same for K (kv 0) or V (kv 1) in a FA_FLAG_KV call, FA_BK rows:
 * each element decoded from its format and scaled, its row found where it is loaded (the
 * build for K/V formats does not prefetch: coded formats take this kernel only off NVIDIA's
 * paths and the decode kernels, as their reference, not their fast path). */
FCL_INLINE void FCL_CAT(fa_load_kv, FA_NAME)(__local float (*tile)[FA_ROW], const fa_params *p,
                                            const fa_io *io, const fa_seq *s, int kv, ulong row0,
                                            ulong row_end, uint dim)
{
    const fa_rows *r = kv ? &s->v : &s->k;
    /* not unrolled: each element's decoding is a switch over the formats */
    #pragma unroll 1
    for (uint e = get_local_id(0); e < FA_BK * FA_D; e += FA_TQ * FA_TK) {
        const uint c = e / FA_D, d = e % FA_D;
        tile[c][d] = row0 + c < row_end && d < dim
                         ? fa_kv_value(p, io, s, kv, fa_place_of(p, io, r, row0 + c), d)
                         : 0.0f;
    }
}

/* A tile of q (kv -1, with factor) or of K or V (kv 0 or 1, from the sequence s). */
FCL_INLINE void FCL_CAT(fa_load_tile, FA_NAME)(__local float (*tile)[FA_ROW], uint rows,
                                              const fa_params *p, const fa_io *io,
                                              __global const void *src, uint dtype,
                                              const fa_seq *s, int kv, const fa_rows *r,
                                              __local const ulong *at, ulong row0,
                                              ulong row_end, uint dim, float factor)
{
    if (kv >= 0 && (p->flags & FA_FLAG_KV))
        FCL_CAT(fa_load_kv, FA_NAME)(tile, p, io, s, kv, row0, row_end, dim);
    else if (dtype == FCL_DTYPE_F32)
        FCL_CAT(fa_load_typed, FA_NAME)(tile, rows, p, io, src, FCL_DTYPE_F32, r, at, row0,
                                        row_end, dim, factor, 0);
    else if (dtype == FCL_DTYPE_F16)
        FCL_CAT(fa_load_typed, FA_NAME)(tile, rows, p, io, src, FCL_DTYPE_F16, r, at, row0,
                                        row_end, dim, factor, 0);
    else
        FCL_CAT(fa_load_typed, FA_NAME)(tile, rows, p, io, src, FCL_DTYPE_BF16, r, at, row0,
                                        row_end, dim, factor, 0);
}

/* FA_PREFETCH: the next K or V tile is fetched into registers before the work that precedes
 * its use, so that its loads' latency passes under that work: FA_PF elements of each
 * work-item (all of them where a tile holds at most FA_PF_MAX per work-item); fa_put stores
 * them and loads the rest at once. */
#define FA_KV_ITEMS (FA_BK * FA_D / (FA_TQ * FA_TK))
#define FA_PF (FA_KV_ITEMS < FA_PF_MAX ? FA_KV_ITEMS : FA_PF_MAX)
FCL_INLINE void FCL_CAT(fa_fetch_typed, FA_NAME)(float *x, const fa_params *p, const fa_io *io,
                                                __global const void *src, const uint dtype,
                                                const fa_rows *r, __local const ulong *at,
                                                ulong row0, ulong row_end, uint dim)
{
    #pragma unroll
    for (uint i = 0; i < FA_PF; i++) {
        const uint e = get_local_id(0) + i * FA_TQ * FA_TK, c = e / FA_D, d = e % FA_D;
        const int inside = row0 + c < row_end && d < dim;
        x[i] = fcl_load_any(src, dtype,
                            inside ? FCL_CAT(fa_tile_row, FA_NAME)(p, io, r, at, row0, c) + d : 0);
        x[i] = inside ? x[i] : 0.0f;
    }
}

FCL_INLINE void FCL_CAT(fa_fetch, FA_NAME)(float *x, const fa_params *p, const fa_io *io,
                                          __global const void *src, uint dtype, const fa_rows *r,
                                          __local const ulong *at, ulong row0, ulong row_end,
                                          uint dim)
{
    if (dtype == FCL_DTYPE_F32)
        FCL_CAT(fa_fetch_typed, FA_NAME)(x, p, io, src, FCL_DTYPE_F32, r, at, row0, row_end, dim);
    else if (dtype == FCL_DTYPE_F16)
        FCL_CAT(fa_fetch_typed, FA_NAME)(x, p, io, src, FCL_DTYPE_F16, r, at, row0, row_end, dim);
    else
        FCL_CAT(fa_fetch_typed, FA_NAME)(x, p, io, src, FCL_DTYPE_BF16, r, at, row0, row_end, dim);
}

FCL_INLINE void FCL_CAT(fa_put, FA_NAME)(__local float (*tile)[FA_ROW], const float *x,
                                        const fa_params *p, const fa_io *io,
                                        __global const void *src, uint dtype, const fa_rows *r,
                                        __local const ulong *at, ulong row0, ulong row_end,
                                        uint dim)
{
    #pragma unroll
    for (uint i = 0; i < FA_PF; i++) {
        const uint e = get_local_id(0) + i * FA_TQ * FA_TK;
        tile[e / FA_D][e % FA_D] = x[i];
    }
    if (FA_PF < FA_KV_ITEMS) {
        const uint first = FA_PF * FA_TQ * FA_TK;
        if (dtype == FCL_DTYPE_F32)
            FCL_CAT(fa_load_typed, FA_NAME)(tile, FA_BK, p, io, src, FCL_DTYPE_F32, r, at,
                                            row0, row_end, dim, 1.0f, first);
        else if (dtype == FCL_DTYPE_F16)
            FCL_CAT(fa_load_typed, FA_NAME)(tile, FA_BK, p, io, src, FCL_DTYPE_F16, r, at,
                                            row0, row_end, dim, 1.0f, first);
        else
            FCL_CAT(fa_load_typed, FA_NAME)(tile, FA_BK, p, io, src, FCL_DTYPE_BF16, r, at,
                                            row0, row_end, dim, 1.0f, first);
    }
}
#undef FA_LOAD_BATCH

__kernel __attribute__((reqd_work_group_size(FA_TQ * FA_TK, 1, 1)))
void FCL_CAT(attention, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local float q_tile[FA_BQ][FA_ROW] __attribute__((aligned(16)));  /* q_scale * q */
    /* K and V take turns in one buffer: with a buffer each, prefetching 32 x 32 tiles did not
     * fit 48 KiB at head dim 128, and 32 x 16 ran 8-11% slower in float32 (NVIDIA H200) */
    __local float k_tile[FA_BK][FA_ROW] __attribute__((aligned(16)));
    __local float (*const v_tile)[FA_ROW] = k_tile;
    __local float p_tile[FA_BQ][FA_PROW] __attribute__((aligned(16)));
    __local float row_parts[FA_BQ][FA_TK + 1]; /* per row, one value per work-item column */
    /* Where the rows of the next K and V tiles start, listed during the tile before
     * (fa_tile_rows) by prefetching tiles that read a paged cache. The first tile of a step
     * computes them as it loads, as do the other calls: unpaged ones, where a row costs a
     * multiply-add, and tiles without prefetching, whose listing POCL 3.1 miscompiles (wrong
     * results on the CPU, where Oclgrind finds no race; so does a barrier more ahead of the
     * first tile, with which its work-group compiler also aborts). */
    __local ulong k_rows[FA_BK], v_rows[FA_BK];
    const int listed = FA_PREFETCH && (p->flags & FA_FLAG_PAGED);
    __local ulong *const k_list = listed ? k_rows : 0, *const v_list = listed ? v_rows : 0;
    const uint lid = get_local_id(0), tq = lid / FA_TK, tk = lid % FA_TK;
    const ulong steps = (ulong)p->q_tiles * p->batch * p->heads_q * p->splits;

    for (ulong g = get_group_id(0); g < steps; g += get_num_groups(0)) {
        const fa_work w = fa_locate(p, io, g, FA_BQ, 1);
        const ulong q0 = w.q0, len_q = w.s.len_q;
        if (q0 >= len_q)
            continue; /* the whole group takes the same step: no barrier is skipped by some */

        FCL_CAT(fa_load_tile, FA_NAME)(q_tile, FA_BQ, p, io, io->q, p->dtype_q, &w.s, -1, &w.s.q,
                                       0, q0, len_q, (uint)p->head_dim, p->q_scale);
        /* Each work-item keeps the running max of its rows (the same in the FA_TK work-items
         * of a row) and the sum over its own columns; the sums are added up at the end. */
        float m_run[FA_SQ], l_own[FA_SQ];
        #pragma unroll
        for (uint i = 0; i < FA_SQ; i++) {
            m_run[i] = -INFINITY;
            l_own[i] = 0.0f;
        }
        float4 o[FA_SQ][FA_SD4];
        #pragma unroll
        for (uint i = 0; i < FA_SQ; i++)
            #pragma unroll
            for (uint j = 0; j < FA_SD4; j++)
                o[i][j] = 0.0f;
#if FA_PREFETCH
        FCL_CAT(fa_load_tile, FA_NAME)(k_tile, FA_BK, p, io, io->k, p->dtype_kv, &w.s, 0, &w.s.k,
                                       0, w.kv_begin, w.kv_end, (uint)p->head_dim, 1.0f);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_BK) {
            const ulong k1 = k0 + FA_BK;
#if FA_PREFETCH
            /* The V tile's rows: listed, except in a step's first tile */
            __local const ulong *const v_at = k0 == w.kv_begin ? 0 : v_list;
            float vx[FA_PF]; /* the V tile's, while the scores are computed */
            FCL_CAT(fa_fetch, FA_NAME)(vx, p, io, io->v, p->dtype_kv, &w.s.v, v_at, k0, w.kv_end,
                                       (uint)p->head_dim_v);
#else
            FCL_CAT(fa_load_tile, FA_NAME)(k_tile, FA_BK, p, io, io->k, p->dtype_kv, &w.s, 0,
                                           &w.s.k, 0, k0, w.kv_end, (uint)p->head_dim, 1.0f);
            barrier(CLK_LOCAL_MEM_FENCE);
#endif
            /* The next K tile's rows: the list was last read before the previous tile's last
             * barrier, and is read after the next barrier. */
            FCL_CAT(fa_tile_rows, FA_NAME)(k_list, p, io, &w.s.k, k1, w.kv_end);

            /* Scores of this work-item's FA_SQ x FA_SK block, then the modifiers. */
            float s[FA_SQ][FA_SK];
            #pragma unroll
            for (uint i = 0; i < FA_SQ; i++)
                #pragma unroll
                for (uint j = 0; j < FA_SK; j++)
                    s[i][j] = 0.0f;
            /* All FA_D columns (the tiles are zero past head_dim), 4 at a time: one float4
             * read from local memory feeds 4 FMAs per partner, and the constant trip count
             * lets the compiler unroll. The columns are added in order, as one at a time. */
            #pragma unroll 2
            for (uint d4 = 0; d4 < FA_D / 4; d4++) {
                float4 qv[FA_SQ], kv[FA_SK];
                #pragma unroll
                for (uint i = 0; i < FA_SQ; i++)
                    qv[i] = ((__local const float4 *)q_tile[tq + i * FA_TQ])[d4];
                #pragma unroll
                for (uint j = 0; j < FA_SK; j++)
                    kv[j] = ((__local const float4 *)k_tile[tk + j * FA_TK])[d4];
                #pragma unroll
                for (uint i = 0; i < FA_SQ; i++)
                    #pragma unroll
                    for (uint j = 0; j < FA_SK; j++) {
                        float acc = fma(qv[i].x, kv[j].x, s[i][j]);
                        acc = fma(qv[i].y, kv[j].y, acc);
                        acc = fma(qv[i].z, kv[j].z, acc);
                        s[i][j] = fma(qv[i].w, kv[j].w, acc);
                    }
            }
            /* Each row's visible keys, recomputed per tile (a few operations) rather than
             * kept in registers the accumulators need, and whether this work-item's rows
             * see every key of the tile (then no score needs hiding). */
            int2 vis[FA_SQ];
            int sees_all = 1;
            #pragma unroll
            for (uint i = 0; i < FA_SQ; i++) {
                vis[i] = fa_visible_keys(p, &w, q0 + tq + i * FA_TQ);
                sees_all &= (long)k0 >= vis[i].x && (long)(k0 + FA_BK - 1) <= vis[i].y;
            }
            /* The modifiers one at a time over the block, in the contract's order: a branch
             * per tile, not per score (on the H100 softcap and ALiBi cost 6-9% of the
             * prefill time this way, 13-16% with a branch per score). Softcap and ALiBi are
             * arithmetic and run on every score; the mask is read where visible only. */
            if (p->flags & FA_FLAG_SOFTCAP) {
                #pragma unroll
                for (uint i = 0; i < FA_SQ; i++)
                    #pragma unroll
                    for (uint j = 0; j < FA_SK; j++)
                        s[i][j] = fa_softcap(p->softcap, s[i][j]);
            }
            const float slope = fa_slope(p, io, &w.s, q0); /* (every row's head's) */
            if (p->flags & FA_FLAG_ALIBI) {
                #pragma unroll
                for (uint i = 0; i < FA_SQ; i++)
                    #pragma unroll
                    for (uint j = 0; j < FA_SK; j++)
                        s[i][j] -= slope * fa_alibi_distance(&w, q0 + tq + i * FA_TQ,
                                                             k0 + tk + j * FA_TK);
            }
            if (p->flags & FA_MASKS) {
                #pragma unroll
                for (uint i = 0; i < FA_SQ; i++)
                    #pragma unroll
                    for (uint j = 0; j < FA_SK; j++)
                        s[i][j] = fa_masked(p, io, &w, s[i][j], q0 + tq + i * FA_TQ,
                                            k0 + tk + j * FA_TK, slope,
                                            !fa_hidden(vis[i], k0 + tk + j * FA_TK));
            }
            if (!sees_all) {
                #pragma unroll
                for (uint i = 0; i < FA_SQ; i++)
                    #pragma unroll
                    for (uint j = 0; j < FA_SK; j++)
                        s[i][j] = fa_hidden(vis[i], k0 + tk + j * FA_TK) ? -INFINITY : s[i][j];
            }

            /* Online statistics (docs/ALGORITHMS.md section 4), spread over all work-items:
             * the row max from the FA_TK parts of each row, then p = exp(s - m) for this
             * work-item's own scores into p_tile. -inf (masked) gives p = 0, also when the
             * whole row is still -inf; a NaN score stays NaN and spreads through l and o. */
            #pragma unroll
            for (uint i = 0; i < FA_SQ; i++) {
                float part = -INFINITY;
                #pragma unroll
                for (uint j = 0; j < FA_SK; j++)
                    part = fmax(part, s[i][j]);
                row_parts[tq + i * FA_TQ][tk] = part;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            float alpha[FA_SQ];
            #pragma unroll
            for (uint i = 0; i < FA_SQ; i++) {
                const uint r = tq + i * FA_TQ;
                float m_new = m_run[i], sum = 0.0f;
                for (uint t = 0; t < FA_TK; t++)
                    m_new = fmax(m_new, row_parts[r][t]);
                alpha[i] = m_new == -INFINITY ? 1.0f : exp(m_run[i] - m_new);
                m_run[i] = m_new;
                const float m_finite = m_new == -INFINITY ? 0.0f : m_new;
                #pragma unroll
                for (uint j = 0; j < FA_SK; j++) {
                    float e = fa_exp_under(s[i][j], m_finite);
                    p_tile[r][tk + j * FA_TK] = e;
                    sum += e;
                }
                l_own[i] = l_own[i] * alpha[i] + sum;
            }
            /* Every read of the K tile was done before the barrier above: the V tile may
             * take its place. */
#if FA_PREFETCH
            FCL_CAT(fa_put, FA_NAME)(v_tile, vx, p, io, io->v, p->dtype_kv, &w.s.v, v_at, k0,
                                     w.kv_end, (uint)p->head_dim_v);
            float kx[FA_PF]; /* the next K tile's, while o += P V */
            if (k1 < w.kv_end)
                FCL_CAT(fa_fetch, FA_NAME)(kx, p, io, io->k, p->dtype_kv, &w.s.k, k_list, k1,
                                           w.kv_end, (uint)p->head_dim);
#else
            FCL_CAT(fa_load_tile, FA_NAME)(v_tile, FA_BK, p, io, io->v, p->dtype_kv, &w.s, 1,
                                           &w.s.v, 0, k0, w.kv_end, (uint)p->head_dim_v, 1.0f);
#endif
            barrier(CLK_LOCAL_MEM_FENCE); /* p_tile and the V tile are whole */

            #pragma unroll
            for (uint i = 0; i < FA_SQ; i++)
                #pragma unroll
                for (uint j = 0; j < FA_SD4; j++)
                    o[i][j] *= alpha[i];
#if FA_PV_VEC
            /* o += P V, 4 keys a step: a float4 of each row's p and a float4 of each of
             * the 4 V rows feed 4 x FA_SD4 x 4 FMAs per row, so local memory is read in
             * 16-byte words, about one a 16 FMAs (the keys are added in order). */
            for (uint c4 = 0; c4 < FA_BK / 4; c4++) {
                float4 pv[FA_SQ];
                #pragma unroll
                for (uint i = 0; i < FA_SQ; i++)
                    pv[i] = ((__local const float4 *)p_tile[tq + i * FA_TQ])[c4];
                #pragma unroll
                for (uint e = 0; e < 4; e++) {
                    float4 vv[FA_SD4];
                    #pragma unroll
                    for (uint j = 0; j < FA_SD4; j++)
                        vv[j] = ((__local const float4 *)v_tile[4 * c4 + e])[tk + j * FA_TK];
                    #pragma unroll
                    for (uint i = 0; i < FA_SQ; i++) {
                        const float pe = e == 0 ? pv[i].x : e == 1 ? pv[i].y : e == 2 ? pv[i].z : pv[i].w;
                        #pragma unroll
                        for (uint j = 0; j < FA_SD4; j++)
                            o[i][j] = FA_PV_ADD(pe, vv[j], o[i][j]);
                    }
                }
            }
#else
            /* o += P V one key at a time: fewer values live than 4 keys a step (AMD's
             * compiler loads all 4 keys' V at once and spills). */
            for (uint c = 0; c < FA_BK; c++) {
                float4 vv[FA_SD4];
                #pragma unroll
                for (uint j = 0; j < FA_SD4; j++)
                    vv[j] = ((__local const float4 *)v_tile[c])[tk + j * FA_TK];
                #pragma unroll
                for (uint i = 0; i < FA_SQ; i++) {
                    const float pe = p_tile[tq + i * FA_TQ][c];
                    #pragma unroll
                    for (uint j = 0; j < FA_SD4; j++)
                        o[i][j] = FA_PV_ADD(pe, vv[j], o[i][j]);
                }
            }
#endif
            /* The next V tile's rows: the list was read before the barrier ahead of P V. */
            FCL_CAT(fa_tile_rows, FA_NAME)(v_list, p, io, &w.s.v, k1, w.kv_end);
#if FA_PREFETCH
            barrier(CLK_LOCAL_MEM_FENCE); /* P V's reads of the V tile are done */
            if (k1 < w.kv_end)
                FCL_CAT(fa_put, FA_NAME)(k_tile, kx, p, io, io->k, p->dtype_kv, &w.s.k, k_list,
                                         k1, w.kv_end, (uint)p->head_dim);
#endif
            barrier(CLK_LOCAL_MEM_FENCE); /* P V's reads are done (and the next K tile whole) */
        }

        /* l of each row: the sum of its FA_TK work-items' parts. */
        #pragma unroll
        for (uint i = 0; i < FA_SQ; i++)
            row_parts[tq + i * FA_TQ][tk] = l_own[i];
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (uint i = 0; i < FA_SQ; i++) {
            const uint r = tq + i * FA_TQ;
            const ulong qi = q0 + r;
            if (qi >= len_q)
                continue;
            float l = 0.0f;
            for (uint t = 0; t < FA_TK; t++)
                l += row_parts[r][t];
            const fa_dest dst = fa_finish_row(p, io, &w, qi, m_run[i], l, tk == 0);
            #pragma unroll
            for (uint j = 0; j < FA_SD4; j++) {
                const uint d = 4 * (tk + j * FA_TK);
                const float ov[4] = {o[i][j].x, o[i][j].y, o[i][j].z, o[i][j].w};
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    if (d + e < p->head_dim_v)
                        fa_store(p, io, dst, d + e, ov[e]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next tile of this group reuses the local tiles */
    }
}

#undef FA_SQ
#undef FA_SK
#undef FA_SD4
#undef FA_ROW
#undef FA_PROW
#undef FA_KV_ITEMS
#undef FA_PF
#undef FA_PV_ADD

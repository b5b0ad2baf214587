/* Single-pass ("flash") attention for one head-dim bucket (ALGORITHMS.md section 4).
 *
 * The host compiles this text once per bucket, each time after defining
 *   FA_NAME  kernel name suffix (d64, d128, d256)
 *   FA_D     largest head_dim and head_dim_v of the bucket
 *   FA_BQ    queries per tile (a multiple of FA_TQ)
 *   FA_BK    keys per tile (a multiple of FA_TK)
 * Needs common.cl. A work-group of FA_TQ x FA_TK work-items owns FA_BQ query rows of one
 * (batch, head): the scaled Q tile stays in local memory, K and V tiles stream through one
 * local buffer, scores live in registers and one local tile, and each row keeps its running
 * (m, l) and an output accumulator o in float32, in the registers of the work-items that own
 * the row's scores and output columns. The len_q x len_kv scores never reach
 * global memory. With several key splits, each work-group writes its unnormalised partial
 * (m, l, o) and attention_merge combines them.
 */
#ifndef FA_NAME
#define FA_NAME d64
#define FA_D 64
#define FA_BQ 32
#define FA_BK 32
#endif
#define FA_TQ 8 /* work-item rows: each owns queries tq, tq + FA_TQ, ... */
#define FA_TK 8 /* work-item columns: keys (or output columns) tk, tk + FA_TK, ... */
#define FA_SQ (FA_BQ / FA_TQ)
#define FA_SK (FA_BK / FA_TK)
#define FA_SD ((FA_D + FA_TK - 1) / FA_TK)
/* Padded local rows: a multiple of 4 floats, so the score loop reads float4s, and rows 4
 * banks apart, so the 8 rows a warp reads at once fall in different banks. */
#define FA_ROW (FA_D + 4)
/* Loops over the per-work-item blocks (s, o, qv, kv, vv) carry #pragma unroll: the blocks
 * must be registers, and an array indexed in a loop the compiler did not unroll goes to
 * scratch memory (checked for AMD GPUs by .ci/amd-offline-check.sh). */

#define FA_FLAG_MASK_ADD 1u
#define FA_FLAG_MASK_BOOL 2u
#define FA_FLAG_CAUSAL 4u
#define FA_FLAG_LSE 8u
#define FA_FLAG_PARTIAL 16u /* write (m, l, o) for attention_merge instead of the output */

#ifndef FA_LOCATE_DEFINED /* this file is compiled once per bucket; these once in all */
#define FA_LOCATE_DEFINED
/* The arguments of both attention kernels, in the order set_attention_args (attention.c)
 * sets them. */
#define FA_KERNEL_ARGS                                                                         \
    __global const void *q, __global const void *k, __global const void *v,                  \
        __global const void *mask, __global void *out, __global float *lse,                   \
        __global float *partial_o, __global float2 *partial_ml, uint dtype_q, uint dtype_kv,  \
        uint dtype_o, uint flags, ulong heads_q, ulong group, ulong len_q, ulong len_kv,      \
        ulong head_dim, ulong head_dim_v, ulong4 q_strides, ulong4 k_strides,                 \
        ulong4 v_strides, ulong4 o_strides, ulong4 mask_strides, float scale,                 \
        long causal_offset, ulong q_tiles, ulong heads_total, ulong splits, ulong split_len

/* What step g of a kernel's grid-stride loop owns: block_q queries from q0 of one
 * (batch, head), one key split, their offsets, and the keys it visits (its split, cut short
 * where causality hides the rest). */
typedef struct {
    ulong q0, bh, b, h, split;
    ulong q_base, k_base, v_base, m_base;
    ulong kv_begin, kv_end;
} fa_work;

fa_work fa_locate(ulong g, ulong block_q, ulong q_tiles, ulong heads_total, ulong heads_q,
                  ulong group, ulong len_q, ulong len_kv, ulong4 q_strides, ulong4 k_strides,
                  ulong4 v_strides, ulong4 mask_strides, ulong split_len, long causal_offset,
                  uint flags)
{
    fa_work w;
    w.q0 = (g % q_tiles) * block_q;
    w.bh = (g / q_tiles) % heads_total;
    w.split = g / (q_tiles * heads_total);
    w.b = w.bh / heads_q;
    w.h = w.bh % heads_q;
    const ulong hk = w.h / group;
    w.q_base = w.b * q_strides.x + w.h * q_strides.y;
    w.k_base = w.b * k_strides.x + hk * k_strides.y;
    w.v_base = w.b * v_strides.x + hk * v_strides.y;
    w.m_base = w.b * mask_strides.x + w.h * mask_strides.y;
    w.kv_begin = w.split * split_len;
    w.kv_end = min(len_kv, w.kv_begin + split_len);
    if (flags & FA_FLAG_CAUSAL) {
        long last_visible = (long)min(w.q0 + block_q, len_q) - 1 + causal_offset;
        w.kv_end = last_visible < 0 ? 0 : min(w.kv_end, (ulong)last_visible + 1);
    }
    return w;
}

/* A score after causality and the mask: -inf where key kj is past kv_end, in query qi's causal
 * future or masked out; plus the additive mask elsewhere. */
float fa_masked_score(float score, ulong qi, ulong kj, ulong kv_end, long causal_offset,
                      __global const void *mask, ulong m_base, ulong mask_stride_q, uint flags)
{
    int visible = kj < kv_end && (!(flags & FA_FLAG_CAUSAL) || (long)kj <= (long)qi + causal_offset);
    if (visible && (flags & (FA_FLAG_MASK_ADD | FA_FLAG_MASK_BOOL))) {
        ulong at = m_base + qi * mask_stride_q + kj;
        if (flags & FA_FLAG_MASK_ADD)
            score += ((__global const float *)mask)[at];
        else
            visible = ((__global const uchar *)mask)[at] != 0;
    }
    return visible ? score : -INFINITY;
}
#endif

/* tile[c][d] = factor * src[base + (row0 + c) * row_stride + d] for c < rows, d < FA_D, and
 * zero at or past row_end or dim: the score and output loops run over all FA_D columns. The
 * indices are 32-bit and FA_D a power of two, so no division is left, and each work-item
 * issues FA_LOAD_BATCH loads before storing any (loads that wait for one another cost a
 * memory latency each). dtype is a constant in each call below, so no branch is left
 * between the loads either. rows * FA_D is a multiple of the batch (tiles of 8 or more
 * rows, FA_D >= 64). */
#define FA_LOAD_BATCH 8
void FCL_CAT(fa_load_typed, FA_NAME)(__local float (*tile)[FA_ROW], uint rows,
                                     __global const void *src, const uint dtype, ulong base,
                                     ulong row_stride, ulong row0, ulong row_end, uint dim,
                                     float factor)
{
    for (uint e0 = get_local_id(0); e0 < rows * FA_D; e0 += FA_LOAD_BATCH * FA_TQ * FA_TK) {
        float x[FA_LOAD_BATCH];
        #pragma unroll
        for (uint i = 0; i < FA_LOAD_BATCH; i++) {
            const uint e = e0 + i * FA_TQ * FA_TK, c = e / FA_D, d = e % FA_D;
            const int inside = row0 + c < row_end && d < dim;
            x[i] = fcl_load_any(src, dtype, base + (inside ? (row0 + c) * row_stride + d : 0));
            x[i] = inside ? factor * x[i] : 0.0f;
        }
        #pragma unroll
        for (uint i = 0; i < FA_LOAD_BATCH; i++) {
            const uint e = e0 + i * FA_TQ * FA_TK;
            tile[e / FA_D][e % FA_D] = x[i];
        }
    }
}

void FCL_CAT(fa_load_tile, FA_NAME)(__local float (*tile)[FA_ROW], uint rows,
                                    __global const void *src, uint dtype, ulong base,
                                    ulong row_stride, ulong row0, ulong row_end, uint dim,
                                    float factor)
{
    if (dtype == FCL_DTYPE_F32)
        FCL_CAT(fa_load_typed, FA_NAME)(tile, rows, src, FCL_DTYPE_F32, base, row_stride, row0,
                                        row_end, dim, factor);
    else if (dtype == FCL_DTYPE_F16)
        FCL_CAT(fa_load_typed, FA_NAME)(tile, rows, src, FCL_DTYPE_F16, base, row_stride, row0,
                                        row_end, dim, factor);
    else
        FCL_CAT(fa_load_typed, FA_NAME)(tile, rows, src, FCL_DTYPE_BF16, base, row_stride, row0,
                                        row_end, dim, factor);
}
#undef FA_LOAD_BATCH

__kernel __attribute__((reqd_work_group_size(FA_TQ * FA_TK, 1, 1)))
void FCL_CAT(attention, FA_NAME)(FA_KERNEL_ARGS)
{
    __local float q_tile[FA_BQ][FA_ROW] __attribute__((aligned(16)));  /* scale * q */
    __local float kv_tile[FA_BK][FA_ROW] __attribute__((aligned(16))); /* K tile, then V tile */
    __local float p_tile[FA_BQ][FA_BK + 1];
    __local float row_parts[FA_BQ][FA_TK + 1]; /* per row, one value per work-item column */
    const uint lid = get_local_id(0), tq = lid / FA_TK, tk = lid % FA_TK;

    for (ulong g = get_group_id(0); g < q_tiles * heads_total * splits; g += get_num_groups(0)) {
        const fa_work w = fa_locate(g, FA_BQ, q_tiles, heads_total, heads_q, group, len_q, len_kv,
                                    q_strides, k_strides, v_strides, mask_strides, split_len,
                                    causal_offset, flags);
        const ulong q0 = w.q0, bh = w.bh, split = w.split, b = w.b, h = w.h;
        const ulong q_base = w.q_base, k_base = w.k_base, v_base = w.v_base, m_base = w.m_base;
        const ulong kv_begin = w.kv_begin, kv_end = w.kv_end;

        FCL_CAT(fa_load_tile, FA_NAME)(q_tile, FA_BQ, q, dtype_q, q_base, q_strides.z, q0, len_q,
                                       (uint)head_dim, scale);
        /* Each work-item keeps the running max of its rows (the same in the FA_TK work-items
         * of a row) and the sum over its own columns; the sums are added up at the end. */
        float m_run[FA_SQ], l_own[FA_SQ];
        #pragma unroll
        for (uint i = 0; i < FA_SQ; i++) {
            m_run[i] = -INFINITY;
            l_own[i] = 0.0f;
        }
        float o[FA_SQ][FA_SD];
        #pragma unroll
        for (uint i = 0; i < FA_SQ; i++)
            #pragma unroll
            for (uint j = 0; j < FA_SD; j++)
                o[i][j] = 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);

        for (ulong k0 = kv_begin; k0 < kv_end; k0 += FA_BK) {
            FCL_CAT(fa_load_tile, FA_NAME)(kv_tile, FA_BK, k, dtype_kv, k_base, k_strides.z, k0,
                                           kv_end, (uint)head_dim, 1.0f);
            barrier(CLK_LOCAL_MEM_FENCE);

            /* Scores of this work-item's FA_SQ x FA_SK block, then mask and causality. */
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
                    kv[j] = ((__local const float4 *)kv_tile[tk + j * FA_TK])[d4];
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
            #pragma unroll
            for (uint i = 0; i < FA_SQ; i++) {
                ulong r = tq + i * FA_TQ, qi = q0 + r;
                #pragma unroll
                for (uint j = 0; j < FA_SK; j++)
                    s[i][j] = qi < len_q ? fa_masked_score(s[i][j], qi, k0 + tk + j * FA_TK, kv_end,
                                                           causal_offset, mask, m_base,
                                                           mask_strides.z, flags)
                                         : -INFINITY;
            }

            /* Online statistics (ALGORITHMS.md section 4), spread over all work-items: the
             * row max from the FA_TK parts of each row, then p = exp(s - m) for this
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
                #pragma unroll
                for (uint j = 0; j < FA_SK; j++) {
                    float p = s[i][j] == -INFINITY ? 0.0f : exp(s[i][j] - m_new);
                    p_tile[r][tk + j * FA_TK] = p;
                    sum += p;
                }
                l_own[i] = l_own[i] * alpha[i] + sum;
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* p_tile is whole; every read of the K tile is done */

            FCL_CAT(fa_load_tile, FA_NAME)(kv_tile, FA_BK, v, dtype_kv, v_base, v_strides.z, k0,
                                           kv_end, (uint)head_dim_v, 1.0f);
            barrier(CLK_LOCAL_MEM_FENCE);

            #pragma unroll
            for (uint i = 0; i < FA_SQ; i++)
                #pragma unroll
                for (uint j = 0; j < FA_SD; j++)
                    o[i][j] *= alpha[i];
            for (uint c = 0; c < FA_BK; c++) {
                float vv[FA_SD];
                #pragma unroll
                for (uint j = 0; j < FA_SD; j++)
                    vv[j] = tk + j * FA_TK < FA_D ? kv_tile[c][tk + j * FA_TK] : 0.0f;
                #pragma unroll
                for (uint i = 0; i < FA_SQ; i++) {
                    float p = p_tile[tq + i * FA_TQ][c];
                    #pragma unroll
                    for (uint j = 0; j < FA_SD; j++)
                        o[i][j] = fma(p, vv[j], o[i][j]);
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* the next tile overwrites kv_tile and p_tile */
        }

        /* l of each row: the sum of its FA_TK work-items' parts. */
        #pragma unroll
        for (uint i = 0; i < FA_SQ; i++)
            row_parts[tq + i * FA_TQ][tk] = l_own[i];
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (uint i = 0; i < FA_SQ; i++) {
            ulong r = tq + i * FA_TQ, qi = q0 + r;
            if (qi >= len_q)
                continue;
            float m = m_run[i], l = 0.0f;
            for (uint t = 0; t < FA_TK; t++)
                l += row_parts[r][t];
            ulong row = bh * len_q + qi; /* [batch][head][query], as lse */
            if (flags & FA_FLAG_PARTIAL) {
                ulong slot = row * splits + split;
                #pragma unroll
                for (uint j = 0; j < FA_SD; j++)
                    if (tk + j * FA_TK < head_dim_v)
                        partial_o[slot * head_dim_v + tk + j * FA_TK] = o[i][j];
                if (tk == 0)
                    partial_ml[slot] = (float2)(m, l);
                continue;
            }
            /* No visible key: l = 0, output 0 and lse -inf (never NaN). */
            const fcl_row_norm n = fcl_row_norm_from((float2)(m, l));
            ulong o_base = b * o_strides.x + h * o_strides.y + qi * o_strides.z;
            #pragma unroll
            for (uint j = 0; j < FA_SD; j++)
                if (tk + j * FA_TK < head_dim_v)
                    fcl_store_any(out, dtype_o, o_base + tk + j * FA_TK, o[i][j] * n.inv_d);
            if (tk == 0 && (flags & FA_FLAG_LSE))
                lse[row] = n.lse;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next tile of this group reuses the local tiles */
    }
}

/* ---- Decode: one query per work-group, for len_q of a few tokens, where a query tile
 * would be mostly empty and the work is streaming K and V once. FA_DEC_C work-items split
 * the head dimensions (d = c, c + FA_DEC_C, ...: each load instruction of a row of them
 * reads consecutive elements), FA_DEC_R rows of them take different keys, FA_DEC_KEYS keys
 * per step. A step: partial dot products into local memory, one work-item per key adds them
 * up and applies mask and causality, every work-item updates the running max from all the
 * step's scores and accumulates its keys' p * v into its own output columns; the rows' (l, o)
 * are added up at the end (they share the max). Same arguments and results as the tile
 * kernel, with q_tiles = len_q. Built where the tile kernel is (its barriers suit GPUs). ---- */
#if !FCL_ATTENTION_ROWS
#define FA_DEC_LWS 128 /* FCL_ATTENTION_DECODE_WORK_GROUP in internal.h */
#define FA_DEC_C (FA_D / 4)
#define FA_DEC_R (FA_DEC_LWS / FA_DEC_C)
#define FA_DEC_U 4 /* keys per work-item per step */
#define FA_DEC_KEYS (FA_DEC_R * FA_DEC_U)

/* x[u * 4 + e] = element c + e * FA_DEC_C of key k0 + r + u * FA_DEC_R: work-item (r, c)'s
 * share of a step, zero for keys at or past kv_end and columns at or past dim. Every load is
 * unconditional (at an index inside the head) and dtype a constant per call, so all of them
 * are issued before the first is used. */
void FCL_CAT(fa_dec_gather_typed, FA_NAME)(__private float *x, __global const void *src,
                                           const uint dtype, ulong base, ulong stride, ulong k0,
                                           uint r, uint c, ulong kv_end, uint dim)
{
    #pragma unroll
    for (uint u = 0; u < FA_DEC_U; u++) {
        #pragma unroll
        for (uint e = 0; e < 4; e++) {
            const ulong kj = k0 + r + u * FA_DEC_R;
            const uint d = c + e * FA_DEC_C;
            const int inside = kj < kv_end && d < dim;
            const float val = fcl_load_any(src, dtype, base + (inside ? kj * stride + d : 0));
            x[u * 4 + e] = inside ? val : 0.0f;
        }
    }
}

void FCL_CAT(fa_dec_gather, FA_NAME)(__private float *x, __global const void *src, uint dtype,
                                     ulong base, ulong stride, ulong k0, uint r, uint c,
                                     ulong kv_end, uint dim)
{
    if (dtype == FCL_DTYPE_F32)
        FCL_CAT(fa_dec_gather_typed, FA_NAME)(x, src, FCL_DTYPE_F32, base, stride, k0, r, c,
                                              kv_end, dim);
    else if (dtype == FCL_DTYPE_F16)
        FCL_CAT(fa_dec_gather_typed, FA_NAME)(x, src, FCL_DTYPE_F16, base, stride, k0, r, c,
                                              kv_end, dim);
    else
        FCL_CAT(fa_dec_gather_typed, FA_NAME)(x, src, FCL_DTYPE_BF16, base, stride, k0, r, c,
                                              kv_end, dim);
}

__kernel __attribute__((reqd_work_group_size(FA_DEC_LWS, 1, 1)))
void FCL_CAT(attention_decode, FA_NAME)(FA_KERNEL_ARGS)
{
    __local float dots[FA_DEC_KEYS][FA_DEC_C + 1];
    __local float scores[FA_DEC_KEYS];
    __local float sum_o[FA_DEC_R][FA_D], sum_l[FA_DEC_R];
    const uint lid = get_local_id(0), c = lid % FA_DEC_C, r = lid / FA_DEC_C;

    for (ulong g = get_group_id(0); g < q_tiles * heads_total * splits; g += get_num_groups(0)) {
        const fa_work w = fa_locate(g, 1, q_tiles, heads_total, heads_q, group, len_q, len_kv,
                                    q_strides, k_strides, v_strides, mask_strides, split_len,
                                    causal_offset, flags);
        const ulong qi = w.q0;
        float qv[4], o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (uint e = 0; e < 4; e++) {
            ulong d = c + e * FA_DEC_C;
            qv[e] = d < head_dim ? scale * fcl_load_any(q, dtype_q, w.q_base + qi * q_strides.z + d)
                                 : 0.0f;
        }
        float m = -INFINITY, l = 0.0f;

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_DEC_KEYS) {
            /* The step's K and V shares are loaded together, before the first barrier. */
            float kx[FA_DEC_U * 4], vx[FA_DEC_U * 4];
            FCL_CAT(fa_dec_gather, FA_NAME)(kx, k, dtype_kv, w.k_base, k_strides.z, k0, r, c,
                                            w.kv_end, (uint)head_dim);
            FCL_CAT(fa_dec_gather, FA_NAME)(vx, v, dtype_kv, w.v_base, v_strides.z, k0, r, c,
                                            w.kv_end, (uint)head_dim_v);
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
                scores[lid] = fa_masked_score(score, qi, k0 + lid, w.kv_end, causal_offset, mask,
                                              w.m_base, mask_strides.z, flags);
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
                const float p = sc == -INFINITY ? 0.0f : exp(sc - m_new);
                l += p;
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    o[e] = fma(p, vx[u * 4 + e], o[e]);
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
            const ulong row = w.bh * len_q + qi; /* [batch][head][query], as lse */
            const ulong slot = row * splits + w.split;
            const fcl_row_norm n = fcl_row_norm_from((float2)(m, l_all)); /* no key: 0, -inf */
            const ulong o_base = w.b * o_strides.x + w.h * o_strides.y + qi * o_strides.z;
            #pragma unroll
            for (uint e = 0; e < 4; e++) {
                ulong d = c + e * FA_DEC_C;
                if (d >= head_dim_v)
                    continue;
                float acc = 0.0f;
                for (uint rr = 0; rr < FA_DEC_R; rr++)
                    acc += sum_o[rr][d];
                if (flags & FA_FLAG_PARTIAL)
                    partial_o[slot * head_dim_v + d] = acc;
                else
                    fcl_store_any(out, dtype_o, o_base + d, acc * n.inv_d);
            }
            if (c == 0 && (flags & FA_FLAG_PARTIAL))
                partial_ml[slot] = (float2)(m, l_all);
            else if (c == 0 && (flags & FA_FLAG_LSE))
                lse[row] = n.lse;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* sum_o and sum_l are rewritten for the next query */
    }
}

#undef FA_DEC_LWS
#undef FA_DEC_C
#undef FA_DEC_R
#undef FA_DEC_U
#undef FA_DEC_KEYS
#endif /* !FCL_ATTENTION_ROWS */

/* ---- One block of queries per work-item, for devices whose local memory is ordinary
 * memory (CPU drivers such as POCL run a work-group as a loop and pay for every barrier per
 * work-item). No barrier and no local memory: a work-item takes FA_RQ queries of one
 * (batch, head, split) and walks the keys FCL_VEC at a time, with the K block transposed in
 * private memory so that the scores of FCL_VEC keys are one vector, and the V block
 * accumulated into each query's output row with vector FMAs. Same arguments and results as
 * the tile kernel above (q_tiles counts blocks of FA_RQ queries). ---- */
#if FCL_ATTENTION_ROWS /* prelude: only where the plan uses it (its private blocks would
                          * spill to scratch on a GPU) */
#define FA_RQ 16
#define FA_RV ((FA_D + FCL_VEC - 1) / FCL_VEC) /* vectors per output row */

#ifndef FA_LOAD_ROW_DEFINED
#define FA_LOAD_ROW_DEFINED
/* dst[0, n) = src[at, at + n) converted to float, dst[n, cap) = 0: the storage type is
 * decided once per row, so each copy loop is plain (and vectorised by CPU compilers). */
void fa_load_row(__private float *dst, __global const void *src, uint dtype, ulong at, uint n,
                 uint cap)
{
    if (dtype == FCL_DTYPE_F32) {
        __global const float *p = (__global const float *)src + at;
        for (uint d = 0; d < n; d++)
            dst[d] = p[d];
    } else if (dtype == FCL_DTYPE_F16) {
        for (uint d = 0; d < n; d++)
            dst[d] = vload_half(at + d, (__global const half *)src);
    } else {
        __global const ushort *p = (__global const ushort *)src + at;
        for (uint d = 0; d < n; d++)
            dst[d] = as_float((uint)p[d] << 16);
    }
    for (uint d = n; d < cap; d++)
        dst[d] = 0.0f;
}
#endif

__kernel void FCL_CAT(attention_rows, FA_NAME)(FA_KERNEL_ARGS)
{
    float qs[FA_RQ][FA_D];                /* scale * q */
    floatv o[FA_RQ][FA_RV];
    float row_m[FA_RQ], row_l[FA_RQ];
    float k_t[FA_D][FCL_VEC];             /* the K block, transposed */
    floatv v_blk[FCL_VEC][FA_RV];         /* the V block */

    for (ulong g = get_global_id(0); g < q_tiles * heads_total * splits; g += get_global_size(0)) {
        const fa_work w = fa_locate(g, FA_RQ, q_tiles, heads_total, heads_q, group, len_q, len_kv,
                                    q_strides, k_strides, v_strides, mask_strides, split_len,
                                    causal_offset, flags);
        const ulong q0 = w.q0, bh = w.bh, split = w.split, b = w.b, h = w.h;
        const ulong q_base = w.q_base, k_base = w.k_base, v_base = w.v_base, m_base = w.m_base;
        const ulong kv_begin = w.kv_begin, kv_end = w.kv_end;
        for (uint i = 0; i < FA_RQ; i++) {
            for (uint d = 0; d < FA_D; d++)
                qs[i][d] = q0 + i < len_q && d < head_dim
                               ? scale * fcl_load_any(q, dtype_q, q_base + (q0 + i) * q_strides.z + d)
                               : 0.0f;
            for (uint c = 0; c < FA_RV; c++)
                o[i][c] = 0.0f;
            row_m[i] = -INFINITY;
            row_l[i] = 0.0f;
        }

        for (ulong k0 = kv_begin; k0 < kv_end; k0 += FCL_VEC) {
            for (uint j = 0; j < FCL_VEC; j++) {
                const int in_range = k0 + j < kv_end; /* keys past the end are zero */
                float row[FA_RV * FCL_VEC];
                fa_load_row(row, k, dtype_kv, k_base + (k0 + j) * k_strides.z,
                            in_range ? (uint)head_dim : 0, FA_D);
                for (uint d = 0; d < FA_D; d++)
                    k_t[d][j] = row[d];
                fa_load_row(row, v, dtype_kv, v_base + (k0 + j) * v_strides.z,
                            in_range ? (uint)head_dim_v : 0, FA_RV * FCL_VEC);
                for (uint c = 0; c < FA_RV; c++)
                    v_blk[j][c] = FCL_VLOADN(c, row);
            }
            for (uint i = 0; i < FA_RQ && q0 + i < len_q; i++) {
                const ulong qi = q0 + i;
                floatv s = 0.0f;
                for (uint d = 0; d < head_dim; d++)
                    s = fma((floatv)qs[i][d], FCL_VLOADN(0, k_t[d]), s);
                float sc[FCL_VEC];
                FCL_VSTOREN(s, 0, sc);
                for (uint j = 0; j < FCL_VEC; j++)
                    sc[j] = fa_masked_score(sc[j], qi, k0 + j, kv_end, causal_offset, mask, m_base,
                                            mask_strides.z, flags);
                s = FCL_VLOADN(0, sc);
                /* Online statistics as in the tile kernel: -inf contributes 0, NaN spreads. */
                float m_new = fmax(row_m[i], fcl_hmax(s));
                floatv p = select(exp(s - m_new), (floatv)0.0f, s == (floatv)(-INFINITY));
                float alpha = m_new == -INFINITY ? 1.0f : exp(row_m[i] - m_new);
                row_l[i] = row_l[i] * alpha + fcl_hsum(p);
                row_m[i] = m_new;
                float pj[FCL_VEC];
                FCL_VSTOREN(p, 0, pj);
                for (uint c = 0; c < FA_RV; c++) {
                    floatv acc = o[i][c] * alpha;
                    for (uint j = 0; j < FCL_VEC; j++)
                        acc = fma((floatv)pj[j], v_blk[j][c], acc);
                    o[i][c] = acc;
                }
            }
        }

        for (uint i = 0; i < FA_RQ && q0 + i < len_q; i++) {
            const ulong qi = q0 + i, row = bh * len_q + qi;
            float out_row[FA_RV * FCL_VEC];
            for (uint c = 0; c < FA_RV; c++)
                FCL_VSTOREN(o[i][c], c, out_row);
            if (flags & FA_FLAG_PARTIAL) {
                ulong slot = row * splits + split;
                for (uint d = 0; d < head_dim_v; d++)
                    partial_o[slot * head_dim_v + d] = out_row[d];
                partial_ml[slot] = (float2)(row_m[i], row_l[i]);
                continue;
            }
            const fcl_row_norm n = fcl_row_norm_from((float2)(row_m[i], row_l[i]));
            ulong o_base = b * o_strides.x + h * o_strides.y + qi * o_strides.z;
            for (uint d = 0; d < head_dim_v; d++)
                fcl_store_any(out, dtype_o, o_base + d, out_row[d] * n.inv_d);
            if (flags & FA_FLAG_LSE)
                lse[row] = n.lse;
        }
    }
}

#undef FA_RQ
#undef FA_RV
#endif /* FCL_ATTENTION_ROWS */
#undef FA_SQ
#undef FA_SK
#undef FA_SD
#undef FA_ROW

/* Decode attention on NVIDIA GPUs: one query row (of len_q <= 4) of one head per work-group,
 * K and V streamed once at the memory's speed. A vendor fast path beside the tensor-core
 * kernel, in the same program (src/program.c); the planner takes it for one query head per kv
 * head read (no GQA group of 2 or more heads: the portable decode kernel reads their K and V
 * once for the group) and K and V of any storage type with rows at multiples of 8 elements and
 * head dims up to 256 in multiples of 8. The portable decode kernel (attention_decode.cl) is its
 * reference. Compiled per head-dim bucket and feature set after common_nv.cl and
 * attention_mma_nv.cl, with
 *   FA_NAME     kernel name suffix (decode_nv_d128, decode_nv_d128_all)
 *   FA_D        largest head_dim and head_dim_v of the bucket (64, 128 or 256)
 *   FA_FEATURES the features compiled in (attention_args.h)
 *
 * Where the portable kernel passes every key through local memory in three phases with
 * barriers, here a key row belongs to FA_DNV_LANES lanes of one warp, 8 dims a lane, loaded
 * as 16 or 32 bytes: the row's dot product with the query is the lanes' partial sums added by
 * shfl.sync, every lane of the row then holds the score, and the same lanes add p times their
 * 8 dims of the V row to their output. Each row group (the lanes of one row) runs its own
 * online softmax (docs/ALGORITHMS.md, section 4) over chunks of FA_DNV_KC keys, so that a lane
 * has that many K or V loads in flight and no barrier in the loop; the row groups' (m, l, o)
 * are merged through local memory at the end. */
#define FA_DNV_LANES (FA_D / 8)                   /* lanes a key row */
#define FA_DNV_GROUPS (FA_DNV_LWS / FA_DNV_LANES) /* rows at once: row groups */
#define FA_DNV_BK (FA_DNV_GROUPS * FA_DNV_KC)     /* keys a work-group's step */
#if FA_DNV_BK != FA_DNV_KEYS(FA_D) || FA_DNV_LANES > 32 || FA_DNV_LWS % 32
#error "the NVIDIA decode kernel's shape does not match attention_args.h"
#endif

#ifndef FA_DNV_HELPERS
#define FA_DNV_HELPERS
/* Elements [at, at + 8) of a tensor of storage type dtype (a constant per call: the kernel
 * branches on it once a chunk) as floats; at is a multiple of 8, so each load is one aligned
 * 16-byte vector (two for float32). Zeros where !live, and no load. */
FCL_INLINE void fa_dnv_load8(float *x, __global const void *src, uint dtype, ulong at, int live)
{
    if (dtype == FCL_DTYPE_F32) {
        const float4 z = (float4)(0.0f), a = live ? ((__global const float4 *)src)[at / 4] : z;
        const float4 b = live ? ((__global const float4 *)src)[at / 4 + 1] : z;
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
        x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
        return;
    }
    fcl_nv_unpack8(x, live ? ((__global const uint4 *)src)[at / 8] : (uint4)(0),
                   dtype == FCL_DTYPE_BF16);
}
#endif /* FA_DNV_HELPERS */

/* One chunk of a row group's keys [kc, kc + KC) (those at or past kv_end count as hidden):
 * scores, the online softmax update of (m, l, o), and p.V. dtype: K's and V's storage type, a
 * constant of each call site. */
FCL_INLINE void FCL_CAT(fa_dnv_chunk, FA_NAME)(const fa_params *p, const fa_io *io,
                                              const fa_work *w, uint dtype, const float q[8],
                                              int2 vis, ulong qi, ulong kc, uint d0, float *m,
                                              float *l, float o[8])
{
    float s[FA_DNV_KC];
    ulong v_at[FA_DNV_KC];
    #pragma unroll
    for (uint i = 0; i < FA_DNV_KC; i++) {
        const ulong kj = kc + i;
        const int live = kj < w->kv_end;
        const fa_place at = fa_place_of(p, io, &w->s.k, live ? kj : 0); /* K and V share it */
        v_at[i] = fa_row_at(&w->s.v, at) + d0;
        float x[8];
        fa_dnv_load8(x, io->k, dtype, fa_row_at(&w->s.k, at) + d0, live && d0 < p->head_dim);
        s[i] = 0.0f;
        #pragma unroll
        for (uint e = 0; e < 8; e++)
            s[i] = fma(q[e], x[e], s[i]);
    }
    /* The row's dot products: every lane of the row group gets the sum of its lanes. */
    #pragma unroll
    for (uint mask = FA_DNV_LANES / 2; mask > 0; mask /= 2)
        #pragma unroll
        for (uint i = 0; i < FA_DNV_KC; i++)
            s[i] += fcl_nv_shuffle_xor(s[i], mask);
    float m_new = *m;
    #pragma unroll
    for (uint i = 0; i < FA_DNV_KC; i++) {
        s[i] = fa_score(p, io, w, vis, s[i], qi, kc + i);
        m_new = fmax(m_new, s[i]);
    }
    /* -inf scores contribute 0; NaN (which fmax passes over) spreads through p */
    const float alpha = m_new == -INFINITY ? 1.0f : fa_exp_under(*m, m_new);
    *l *= alpha;
    #pragma unroll
    for (uint e = 0; e < 8; e++)
        o[e] *= alpha;
    *m = m_new;
    const float under = m_new == -INFINITY ? 0.0f : m_new; /* fa_exp_under's rule */
    #pragma unroll
    for (uint i = 0; i < FA_DNV_KC; i++) {
        s[i] = fa_exp_under(s[i], under);
        *l += s[i];
    }
    #pragma unroll
    for (uint i = 0; i < FA_DNV_KC; i++) {
        float x[8];
        fa_dnv_load8(x, io->v, dtype, v_at[i], kc + i < w->kv_end && d0 < p->head_dim_v);
        #pragma unroll
        for (uint e = 0; e < 8; e++)
            o[e] = fma(s[i], x[e], o[e]);
    }
}

__kernel __attribute__((reqd_work_group_size(FA_DNV_LWS, 1, 1)))
void FCL_CAT(attention, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local float part_m[FA_DNV_GROUPS], part_l[FA_DNV_GROUPS], part_o[FA_DNV_GROUPS][FA_D];
    const uint lid = get_local_id(0), row_group = lid / FA_DNV_LANES;
    const uint d0 = lid % FA_DNV_LANES * 8; /* this lane's dims of K and V rows */
    const ulong steps = (ulong)p->q_tiles * p->batch * p->heads_q * p->splits;

    for (ulong g = get_group_id(0); g < steps; g += get_num_groups(0)) {
        const fa_work w = fa_locate(p, io, g, 1, 1);
        const ulong qi = w.q0;
        if (qi >= w.s.len_q)
            continue; /* the whole group takes the same step: no barrier is skipped by some */
        float q[8], o[8], m = -INFINITY, l = 0.0f; /* q: this lane's dims, q_scale applied */
        const ulong q_at = fa_row(p, io, &w.s.q, qi);
        #pragma unroll
        for (uint e = 0; e < 8; e++) {
            q[e] = d0 + e < p->head_dim ? p->q_scale * fcl_load_any(io->q, p->dtype_q, q_at + d0 + e)
                                        : 0.0f;
            o[e] = 0.0f;
        }
        const int2 vis = fa_visible_keys(p, &w, qi);
        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_DNV_BK) {
            const ulong kc = k0 + row_group * FA_DNV_KC;
            if (p->dtype_kv == FCL_DTYPE_F32)
                FCL_CAT(fa_dnv_chunk, FA_NAME)(p, io, &w, FCL_DTYPE_F32, q, vis, qi, kc, d0, &m, &l, o);
            else if (p->dtype_kv == FCL_DTYPE_F16)
                FCL_CAT(fa_dnv_chunk, FA_NAME)(p, io, &w, FCL_DTYPE_F16, q, vis, qi, kc, d0, &m, &l, o);
            else
                FCL_CAT(fa_dnv_chunk, FA_NAME)(p, io, &w, FCL_DTYPE_BF16, q, vis, qi, kc, d0, &m, &l, o);
        }

        /* The row groups' states merged: each group's (m, l) and o into local memory, then
         * one work-item an output element rescales them to the largest m and adds them up. */
        #pragma unroll
        for (uint e = 0; e < 8; e++)
            part_o[row_group][d0 + e] = o[e];
        if (d0 == 0) {
            part_m[row_group] = m;
            part_l[row_group] = l;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint d = lid; d < p->head_dim_v; d += FA_DNV_LWS) {
            float m_all = -INFINITY, l_all = 0.0f, o_all = 0.0f;
            for (uint r = 0; r < FA_DNV_GROUPS; r++)
                m_all = fmax(m_all, part_m[r]);
            for (uint r = 0; r < FA_DNV_GROUPS; r++) {
                const float scale = part_m[r] == -INFINITY ? 0.0f : fa_exp_under(part_m[r], m_all);
                l_all = fma(part_l[r], scale, l_all);
                o_all = fma(part_o[r][d], scale, o_all);
            }
            const fa_dest dst = fa_finish_row(p, io, &w, qi, m_all, l_all, d == 0);
            fa_store(p, io, dst, d, o_all);
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* local memory is rewritten by the next step */
    }
}

#undef FA_DNV_LANES
#undef FA_DNV_GROUPS
#undef FA_DNV_BK

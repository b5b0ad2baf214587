/* Split-KV (flash-decoding) merge: the partial (m, l, o) of each key split of a query row,
 * written by an attention kernel with FA_FLAG_PARTIAL, are combined with
 *   m = max m_s,  l = sum l_s e^(m_s - m),  o = sum o_s e^(m_s - m)
 * and the row's output o / l and lse = m + log l are written. Needs common.cl. */
#define FA_MERGE_LWS 64
#define FA_MAX_SPLITS 256 /* the host never plans more */
#define FA_MERGE_FLAG_LSE 8u

__kernel __attribute__((reqd_work_group_size(FA_MERGE_LWS, 1, 1))) void attention_merge(
    __global const float *partial_o, __global const float2 *partial_ml, __global void *out,
    __global float *lse, uint dtype_o, uint flags, ulong heads_q, ulong len_q, ulong head_dim_v,
    ulong4 o_strides, ulong rows, ulong splits)
{
    __local float weight[FA_MAX_SPLITS];
    const uint lid = get_local_id(0);
    for (ulong row = get_group_id(0); row < rows; row += get_num_groups(0)) {
        __global const float2 *ml = partial_ml + row * splits;
        float m = -INFINITY;
        for (ulong s = 0; s < splits; s++)
            m = fmax(m, ml[s].x);
        for (ulong s = lid; s < splits; s += FA_MERGE_LWS) /* all -inf: l and o are 0 (or NaN) */
            weight[s] = m == -INFINITY ? 1.0f : exp(ml[s].x - m);
        barrier(CLK_LOCAL_MEM_FENCE);
        float l = 0.0f;
        for (ulong s = 0; s < splits; s++)
            l += ml[s].y * weight[s];
        const fcl_row_norm n = fcl_row_norm_from((float2)(m, l)); /* no key: 0 and -inf */

        ulong bh = row / len_q, qi = row % len_q, b = bh / heads_q, h = bh % heads_q;
        ulong o_base = b * o_strides.x + h * o_strides.y + qi * o_strides.z;
        __global const float *po = partial_o + row * splits * head_dim_v;
        for (ulong d = lid; d < head_dim_v; d += FA_MERGE_LWS) {
            float acc = 0.0f;
            for (ulong s = 0; s < splits; s++)
                acc = fma(po[s * head_dim_v + d], weight[s], acc);
            fcl_store_any(out, dtype_o, o_base + d, acc * n.inv_d);
        }
        if (lid == 0 && (flags & FA_MERGE_FLAG_LSE))
            lse[row] = n.lse;
        barrier(CLK_LOCAL_MEM_FENCE); /* weight is rewritten for the next row */
    }
}

/* Merging partial attention results (docs/ALGORITHMS.md, section 4): the states (m, l, o)
 * or (lse, o) of disjoint sets of keys combine exactly as
 *   m = max m_s,  l = sum l_s e^(m_s - m),  o = sum o_s e^(m_s - m).
 * Needs attention_common.cl. Both kernels take any work-group size: the host launches
 * FA_MERGE_LWS work-items, or as many as the kernel allows where that is fewer (Mesa's
 * llvmpipe: 32). */

/* Split-KV: the partial (m, l, o) of each key split of a query row, written by an attention
 * kernel with FA_FLAG_PARTIAL, combined into the row's output and lse (sinks included). One
 * work-group per row of [batch][heads_q][len_q]; rows past L_q(b) are skipped. The host
 * passes the attention kernel's arguments without FA_FLAG_PARTIAL. */
__kernel void attention_merge_splits(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local float weight[FA_MAX_SPLITS];
    const uint lid = get_local_id(0), lws = get_local_size(0);
    const ulong per_batch = (ulong)p->heads_q * p->len_q, rows = per_batch * p->batch;
    for (ulong row = get_group_id(0); row < rows; row += get_num_groups(0)) {
        fa_work w;
        w.s = fa_sequence(p, io, row / per_batch, (row / p->len_q) % p->heads_q);
        w.split = 0;
        const ulong qi = row % p->len_q;
        if (qi >= w.s.len_q)
            continue; /* the whole group skips together */
        __global const float2 *ml = io->partial_ml + row * p->splits;
        float m = -INFINITY;
        for (ulong s = 0; s < p->splits; s++)
            m = fmax(m, ml[s].x);
        for (ulong s = lid; s < p->splits; s += lws) /* all -inf: l and o are 0 (or NaN) */
            weight[s] = m == -INFINITY ? 1.0f : exp(ml[s].x - m);
        barrier(CLK_LOCAL_MEM_FENCE);
        float l = 0.0f;
        for (ulong s = 0; s < p->splits; s++)
            l += ml[s].y * weight[s];
        const fa_dest dst = fa_finish_row(p, io, &w, qi, m, l, lid == 0);
        __global const float *po = io->partial_o + row * p->splits * p->head_dim_v;
        for (ulong d = lid; d < p->head_dim_v; d += lws) {
            float acc = 0.0f;
            for (ulong s = 0; s < p->splits; s++)
                acc = fma(po[s * p->head_dim_v + d], weight[s], acc);
            fa_store(p, io, dst, d, acc);
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* weight is rewritten for the next row */
    }
}

/* fcl_attention_merge: (out, lse) = the merge of part a and, where has_b, part b, float32
 * [rows][dim] with lse [rows]. A part with lse -inf contributes nothing; all -inf gives 0
 * and -inf. out may be a or b: each element is read before it is written, by one work-item. */
__kernel void attention_merge_parts(__global const float *a_out, __global const float *a_lse,
                           __global const float *b_out, __global const float *b_lse,
                           __global float *out, __global float *lse, uint has_b, ulong rows,
                           ulong dim)
{
    for (ulong row = get_group_id(0); row < rows; row += get_num_groups(0)) {
        const float la = a_lse[row], lb = has_b ? b_lse[row] : -INFINITY;
        const float m = isnan(la) || isnan(lb) ? NAN : fmax(la, lb); /* fmax would drop a NaN */
        /* The weights e^(lse_s - m) / sum: -inf parts weigh 0; a NaN lse makes the row NaN. */
        const float wa = m == -INFINITY ? 0.0f : exp(la - m);
        const float wb = !has_b || m == -INFINITY ? 0.0f : exp(lb - m); /* (no b: never read) */
        const float total = wa + wb;
        const float inv = total > 0.0f ? 1.0f / total : (isnan(total) ? NAN : 0.0f);
        barrier(CLK_GLOBAL_MEM_FENCE); /* every work-item read lse before work-item 0 writes it */
        for (ulong d = get_local_id(0); d < dim; d += get_local_size(0)) {
            const float oa = wa == 0.0f ? 0.0f : a_out[row * dim + d] * wa;
            const float ob = wb == 0.0f ? 0.0f : b_out[row * dim + d] * wb;
            out[row * dim + d] = (oa + ob) * inv;
        }
        if (get_local_id(0) == 0)
            lse[row] = m == -INFINITY ? -INFINITY : m + log(total);
    }
}

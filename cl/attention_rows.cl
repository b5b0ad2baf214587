/* Attention as one block of FA_RQ queries per work-item, compiled per head-dim bucket
 * (FA_NAME, FA_D, FA_RQ); needs attention_common.cl. For devices whose local memory is ordinary memory (CPU
 * drivers such as POCL run a work-group as a loop and pay for every barrier per work-item),
 * and the fallback for a bucket whose tile does not fit a device. No barrier and no local
 * memory: a work-item takes FA_RQ queries of one (batch, head, split) and walks the keys
 * FCL_VEC at a time, with the K block transposed in private memory so that the scores of
 * FCL_VEC keys are one vector, and the V block accumulated into each query's output row with
 * vector FMAs. Same arguments and results as the tile kernel (q_tiles counts blocks of FA_RQ
 * queries). */
#define FA_RV ((FA_D + FCL_VEC - 1) / FCL_VEC) /* vectors per output row */

__kernel void FCL_CAT(attention_rows, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    float qs[FA_RQ][FA_D];        /* q_scale * q */
    floatv o[FA_RQ][FA_RV];
    float row_m[FA_RQ], row_l[FA_RQ];
    float k_t[FA_D][FCL_VEC];     /* the K block, transposed */
    floatv v_blk[FCL_VEC][FA_RV]; /* the V block */
    const ulong steps = (ulong)p->q_tiles * p->batch * p->heads_q * p->splits;

    for (ulong g = get_global_id(0); g < steps; g += get_global_size(0)) {
        const fa_work w = fa_locate(p, io, g, FA_RQ, 1);
        const ulong q0 = w.q0, len_q = w.s.len_q;
        const uint head_dim = (uint)p->head_dim, head_dim_v = (uint)p->head_dim_v;
        for (uint i = 0; i < FA_RQ; i++) {
            const int real = q0 + i < len_q;
            fa_load_row(qs[i], io->q, p->dtype_q,
                        real ? fa_row(p, io, &w.s.q, q0 + i) : 0, real ? head_dim : 0, FA_D);
            for (uint d = 0; d < FA_D; d++)
                qs[i][d] *= p->q_scale;
            for (uint c = 0; c < FA_RV; c++)
                o[i][c] = 0.0f;
            row_m[i] = -INFINITY;
            row_l[i] = 0.0f;
        }

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FCL_VEC) {
            for (uint j = 0; j < FCL_VEC; j++) {
                const int in_range = k0 + j < w.kv_end; /* keys past the end are zero */
                float row[FA_RV * FCL_VEC];
                fa_load_row(row, io->k, p->dtype_kv,
                            in_range ? fa_row(p, io, &w.s.k, k0 + j) : 0,
                            in_range ? head_dim : 0, FA_D);
                for (uint d = 0; d < FA_D; d++)
                    k_t[d][j] = row[d];
                fa_load_row(row, io->v, p->dtype_kv,
                            in_range ? fa_row(p, io, &w.s.v, k0 + j) : 0,
                            in_range ? head_dim_v : 0, FA_RV * FCL_VEC);
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
                const int2 vis = fa_visible_keys(p, &w, qi);
                for (uint j = 0; j < FCL_VEC; j++)
                    sc[j] = fa_score(p, io, &w, vis, sc[j], qi, k0 + j);
                s = FCL_VLOADN(0, sc);
                /* Online statistics as in the tile kernel: -inf contributes 0, NaN spreads. */
                float m_new = fmax(row_m[i], fcl_hmax(s));
                floatv e = select(exp(s - m_new), (floatv)0.0f, s == (floatv)(-INFINITY));
                float alpha = m_new == -INFINITY ? 1.0f : exp(row_m[i] - m_new);
                row_l[i] = row_l[i] * alpha + fcl_hsum(e);
                row_m[i] = m_new;
                float ej[FCL_VEC];
                FCL_VSTOREN(e, 0, ej);
                for (uint c = 0; c < FA_RV; c++) {
                    floatv acc = o[i][c] * alpha;
                    for (uint j = 0; j < FCL_VEC; j++)
                        acc = fma((floatv)ej[j], v_blk[j][c], acc);
                    o[i][c] = acc;
                }
            }
        }

        for (uint i = 0; i < FA_RQ && q0 + i < len_q; i++) {
            float out_row[FA_RV * FCL_VEC];
            for (uint c = 0; c < FA_RV; c++)
                FCL_VSTOREN(o[i][c], c, out_row);
            const fa_dest dst = fa_finish_row(p, io, &w, q0 + i, row_m[i], row_l[i], 1);
            for (uint d = 0; d < head_dim_v; d++)
                fa_store(p, io, dst, d, out_row[d]);
        }
    }
}

#undef FA_RV

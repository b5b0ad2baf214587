/* Attention as a block of FA_RN query rows per work-item, compiled per head-dim bucket
 * (FA_NAME, FA_D); needs attention_common.cl. For devices whose local memory is ordinary
 * memory (CPU drivers such as POCL run a work-group as a loop and pay for every barrier per
 * work-item), and the fallback for a bucket whose tile does not fit a device.
 *
 * A work-item's rows are the lanes of FA_RV vectors: FA_RN / heads_step queries from q0 of
 * each of heads_step query heads that share a kv head (GQA: their K and V are read once).
 * Every product is a vector FMA across the rows, as in a CPU GEMM's micro-kernel:
 * - q is held transposed (qt.v[d]: dim d of every row), loaded once a step;
 * - a block of FA_RK keys is converted to float32 rows (kb, vb), once for all the rows;
 * - scores: s[j] += qt.v[d] * k_j[d], FA_RK x FA_RV independent accumulators, each element of
 *   k_j read once for the FA_RV vectors;
 * - the online softmax (docs/ALGORITHMS.md, section 4) runs lane by lane: no horizontal
 *   reduction anywhere;
 * - o: ot.v[d] = ot.v[d] * alpha + sum_j p[j] * v_j[d], four dims at a time.
 * FA_RK is half the device's vector width, so that the accumulators fill about 8 of its
 * registers a vector of rows (AVX2: 4 keys of two registers each; AVX-512: 8 of one, and two
 * vectors of rows). No barrier and no local memory. Same arguments and results as the tile
 * kernel (q_tiles counts blocks of FA_RN / heads_step queries). */
#ifndef FA_ROWS_HELPERS /* once, before the first bucket's kernel */
#define FA_ROWS_HELPERS
#define rowv float16 /* FA_ROWS_LANES lanes */
#define introwv int16
#define FA_RK FA_ROWS_KEYS(FCL_VEC)
#define FA_RV FA_ROWS_VECS(FCL_VEC)
#define FA_RN FA_ROWS(FCL_VEC)
#if FA_RN != FA_ROWS_LANES * FA_RV
#error "attention_rows.cl: FA_ROWS must be FA_ROWS_LANES x FA_ROWS_VECS"
#endif

/* The per-head view *wh of a step's work w: query head `head` of the step's heads, and that
 * head's q rows. (Written through a pointer: Oclgrind 21.10 cannot run the noalias scopes
 * that inlining a struct-returning helper leaves.) */
FCL_INLINE void fa_rows_head(const fa_params *p, const fa_work *w, uint head, fa_work *wh)
{
    *wh = *w;
    wh->s.h += head;
    wh->s.q.base += head * p->q_head;
}

/* Key k's K row into k_row (dim elements, zeros to cap_k) and V row into v_row (dim_v, zeros
 * to cap_v), both zeros for keys past the step's end; one page lookup serves both. */
FCL_INLINE void fa_rows_load_key(const fa_params *p, const fa_io *io, const fa_work *w, ulong k,
                                 uint dim, uint cap_k, __private float *k_row, uint dim_v,
                                 uint cap_v, __private float *v_row)
{
    const int in_range = k < w->kv_end;
    const fa_place at = fa_place_of(p, io, &w->s.k, in_range ? k : 0);
    if (p->flags & FA_FLAG_KV) {
        fa_load_kv_row(k_row, p, io, &w->s, 0, at, in_range ? dim : 0, cap_k);
        fa_load_kv_row(v_row, p, io, &w->s, 1, at, in_range ? dim_v : 0, cap_v);
        return;
    }
    fa_load_row(k_row, io->k, p->dtype_kv, in_range ? fa_row_at(&w->s.k, at) : 0,
                in_range ? dim : 0, cap_k);
    fa_load_row(v_row, io->v, p->dtype_kv, in_range ? fa_row_at(&w->s.v, at) : 0,
                in_range ? dim_v : 0, cap_v);
}

/* With FA_CACHE_PREFETCH (the device table's: CPUs whose compiler emits their own code), asks
 * the caches for key k's K and V rows, a 64-byte line at a time, before they are loaded: rows
 * of a [batch][len][heads][dim] cache lie heads * row bytes apart, a stride the CPU's own
 * prefetchers do not follow. */
FCL_INLINE void fa_rows_prefetch_key(const fa_params *p, const fa_io *io, const fa_work *w,
                                     ulong k)
{
#if FA_CACHE_PREFETCH
    if (k >= w->kv_end)
        return;
    const fa_place at = fa_place_of(p, io, &w->s.k, k);
    for (int v = 0; v < 2; v++) {
        const uint unit = fa_unit_bytes(p, v), bytes = (uint)fa_row_units(p, v) * unit;
        __global const uchar *row = (__global const uchar *)(v ? io->v : io->k) +
                                    fa_row_at(v ? &w->s.v : &w->s.k, at) * unit;
        for (uint b = 0; b < bytes; b += 64)
            __builtin_prefetch(row + b);
    }
#endif
}

/* The scores of a block with the modifiers of the contract's order applied: softcap and
 * ALiBi on whole vectors (each lane's slope and position), a mask row by row, entry by entry.
 * Hidden keys' scores are replaced afterwards. */
FCL_INLINE void fa_rows_modify(const fa_params *p, const fa_io *io, const fa_work *w, ulong k0,
                               uint queries, const int *lo, const int *hi, const float *slope,
                               const introwv *pos, rowv (*s)[FA_RV])
{
    if (p->flags & FA_FLAG_SOFTCAP) {
        #pragma unroll
        for (uint j = 0; j < FA_RK; j++) /* fa_softcap on every lane */
            #pragma unroll
            for (uint h = 0; h < FA_RV; h++)
                s[j][h] = p->softcap -
                          2.0f * p->softcap / (exp2(s[j][h] * (2.0f * M_LOG2E_F)) + 1.0f);
    }
    if (p->flags & FA_FLAG_ALIBI) {
        #pragma unroll
        for (uint h = 0; h < FA_RV; h++) {
            const rowv slopes = vload16(h, slope);
            #pragma unroll
            for (uint j = 0; j < FA_RK; j++) /* |p(i) - j| as fa_alibi_distance */
                s[j][h] -= slopes * convert_float16(abs(pos[h] - (introwv)(int)(k0 + j)));
        }
    }
    if (!(p->flags & FA_MASKS))
        return;
    float sc[FA_RK][FA_RN];
    for (uint j = 0; j < FA_RK; j++)
        for (uint h = 0; h < FA_RV; h++)
            vstore16(s[j][h], h, sc[j]);
    for (uint r = 0; r < FA_RN; r++) {
        fa_work wh;
        fa_rows_head(p, w, r / queries, &wh);
        const ulong qi = w->q0 + r % queries;
        for (uint j = 0; j < FA_RK; j++) {
            const long kj = (long)(k0 + j);
            if (kj >= lo[r] && kj <= hi[r])
                sc[j][r] = fa_masked(p, io, &wh, sc[j][r], qi, k0 + j, slope[r], 1);
        }
    }
    for (uint j = 0; j < FA_RK; j++)
        for (uint h = 0; h < FA_RV; h++)
            s[j][h] = vload16(h, sc[j]);
}

#endif

/* Vectors d of the rows' dims, whose lanes are also written and read one at a time. */
typedef union {
    rowv v[FA_D][FA_RV];
    float lane[FA_D * FA_RN];
} FCL_CAT(fa_lanes, FA_NAME);

__kernel void FCL_CAT(attention_rows, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    FCL_CAT(fa_lanes, FA_NAME) qt; /* q_scale * q, transposed: vector d holds dim d of every row */
    FCL_CAT(fa_lanes, FA_NAME) ot; /* the rows' unnormalised outputs, transposed */
    float kb[FA_RK][FA_D], vb[FA_RK][FA_D]; /* a block of K and V rows in float32 */
    float row[FA_D];
    int lo[FA_RN], hi[FA_RN]; /* each row's visible keys */
    int at[FA_RN];            /* ... and position p(i) among the keys */
    float slope[FA_RN];       /* ... and ALiBi slope */
    const uint heads = (uint)p->heads_step, queries = FA_RN / heads;
    const uint dim = (uint)p->head_dim, dim_v = (uint)p->head_dim_v;
    const uint dim_v4 = (dim_v + 3) / 4 * 4; /* V's dims to a multiple of 4, zeros past dim_v */
    const ulong steps = (ulong)p->q_tiles * p->batch * (p->heads_q / heads) * p->splits;

    for (ulong g = get_global_id(0); g < steps; g += get_global_size(0)) {
        const fa_work w = fa_locate(p, io, g, queries, heads);
        for (uint r = 0; r < FA_RN; r++) {
            const ulong qi = w.q0 + r % queries;
            const int real = qi < w.s.len_q;
            fa_work wh;
            fa_rows_head(p, &w, r / queries, &wh);
            fa_load_row(row, io->q, p->dtype_q, real ? fa_row(p, io, &wh.s.q, qi) : 0,
                        real ? dim : 0, dim);
            for (uint d = 0; d < dim; d++)
                qt.lane[d * FA_RN + r] = row[d] * p->q_scale;
            const int2 vis = fa_visible_keys(p, &w, qi);
            lo[r] = vis.x;
            hi[r] = vis.y;
            at[r] = (int)((uint)qi + (uint)w.s.pos_offset);
            slope[r] = fa_slope(p, io, &wh.s, qi);
        }
        for (uint d = 0; d < dim_v4; d++)
            for (uint h = 0; h < FA_RV; h++)
                ot.v[d][h] = 0.0f;
        introwv row_lo[FA_RV], row_hi[FA_RV], pos[FA_RV];
        rowv m[FA_RV], l[FA_RV];
        #pragma unroll
        for (uint h = 0; h < FA_RV; h++) {
            row_lo[h] = vload16(h, lo);
            row_hi[h] = vload16(h, hi);
            pos[h] = vload16(h, at);
            m[h] = -INFINITY;
            l[h] = 0.0f;
        }

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_RK) {
            for (uint j = 0; j < FA_RK; j++)
                fa_rows_load_key(p, io, &w, k0 + j, dim, dim, kb[j], dim_v, dim_v4, vb[j]);
            rowv s[FA_RK][FA_RV];
            #pragma unroll
            for (uint j = 0; j < FA_RK; j++)
                #pragma unroll
                for (uint h = 0; h < FA_RV; h++)
                    s[j][h] = 0.0f;
            for (uint d = 0; d < dim; d++) {
                rowv qd[FA_RV];
                #pragma unroll
                for (uint h = 0; h < FA_RV; h++)
                    qd[h] = qt.v[d][h];
                #pragma unroll
                for (uint j = 0; j < FA_RK; j++) {
                    const rowv kd = (rowv)kb[j][d];
                    #pragma unroll
                    for (uint h = 0; h < FA_RV; h++)
                        s[j][h] = fma(qd[h], kd, s[j][h]);
                }
            }
            if (p->flags & FA_SCORE_MODIFIERS)
                fa_rows_modify(p, io, &w, k0, queries, lo, hi, slope, pos, s);
            rowv alpha[FA_RV];
            #pragma unroll
            for (uint h = 0; h < FA_RV; h++) {
                #pragma unroll
                for (uint j = 0; j < FA_RK; j++) {
                    const introwv kj = (introwv)(int)(k0 + j);
                    s[j][h] = select(s[j][h], (rowv)(-INFINITY), kj < row_lo[h] || kj > row_hi[h]);
                }
                /* Online statistics per lane: -inf contributes 0, NaN spreads. */
                rowv m_new = m[h];
                #pragma unroll
                for (uint j = 0; j < FA_RK; j++)
                    m_new = fmax(m_new, s[j][h]);
                alpha[h] = select(exp(m[h] - m_new), (rowv)1.0f, m_new == (rowv)(-INFINITY));
                l[h] *= alpha[h];
                #pragma unroll
                for (uint j = 0; j < FA_RK; j++) {
                    s[j][h] = select(exp(s[j][h] - m_new), (rowv)0.0f,
                                     s[j][h] == (rowv)(-INFINITY));
                    l[h] += s[j][h];
                }
                m[h] = m_new;
            }
            /* four dims at once: four chains of FMAs in flight, not one */
            for (uint d = 0; d < dim_v4; d += 4) {
                rowv acc[4][FA_RV];
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    #pragma unroll
                    for (uint h = 0; h < FA_RV; h++)
                        acc[e][h] = ot.v[d + e][h] * alpha[h];
                #pragma unroll
                for (uint j = 0; j < FA_RK; j++) {
                    #pragma unroll
                    for (uint e = 0; e < 4; e++) {
                        const rowv vd = (rowv)vb[j][d + e];
                        #pragma unroll
                        for (uint h = 0; h < FA_RV; h++)
                            acc[e][h] = p->flags & FA_FLAG_KV /* weight 0 adds nothing (tile) */
                                            ? select(fma(s[j][h], vd, acc[e][h]), acc[e][h],
                                                     s[j][h] == (rowv)0.0f)
                                            : fma(s[j][h], vd, acc[e][h]);
                    }
                }
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    #pragma unroll
                    for (uint h = 0; h < FA_RV; h++)
                        ot.v[d + e][h] = acc[e][h];
            }
        }

        float row_m[FA_RN], row_l[FA_RN];
        for (uint h = 0; h < FA_RV; h++) {
            vstore16(m[h], h, row_m);
            vstore16(l[h], h, row_l);
        }
        for (uint r = 0; r < FA_RN; r++) {
            const ulong qi = w.q0 + r % queries;
            if (qi >= w.s.len_q)
                continue;
            fa_work wh;
            fa_rows_head(p, &w, r / queries, &wh);
            const fa_dest dst = fa_finish_row(p, io, &wh, qi, row_m[r], row_l[r], 1);
            for (uint d = 0; d < dim_v; d++)
                fa_store(p, io, dst, d, ot.lane[d * FA_RN + r]);
        }
    }
}

/* Decoding on the same devices: one query of heads_step (up to FA_DEC_HEADS) query heads that
 * share a kv head a step, where the lanes above would mostly hold absent rows. Vectors run
 * along the head dims instead: a key's score is a dot product of FCL_VEC-wide pieces and one
 * horizontal sum, a block of FCL_VEC keys' scores is a vector for the online softmax, and o
 * takes each V row in pieces. The K and V blocks are converted once for every head of the
 * step. Same arguments and results as the tile kernel (q_tiles = len_q). */
#define FA_ONE_VECS ((FA_D + FCL_VEC - 1) / FCL_VEC) /* pieces of a row */
__kernel void FCL_CAT(attention_rows_one, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    floatv qv[FA_DEC_HEADS][FA_ONE_VECS], ov[FA_DEC_HEADS][FA_ONE_VECS];
    float kb[FCL_VEC][FA_ONE_VECS * FCL_VEC], vb[FCL_VEC][FA_ONE_VECS * FCL_VEC];
    float row[FA_ONE_VECS * FCL_VEC], pj[FCL_VEC], m[FA_DEC_HEADS], l[FA_DEC_HEADS];
    const uint heads = (uint)p->heads_step;
    const uint dim = (uint)p->head_dim, dim_v = (uint)p->head_dim_v;
    const uint nq = (dim + FCL_VEC - 1) / FCL_VEC, nv = (dim_v + FCL_VEC - 1) / FCL_VEC;
    const ulong steps = (ulong)p->q_tiles * p->batch * (p->heads_q / heads) * p->splits;

    for (ulong g = get_global_id(0); g < steps; g += get_global_size(0)) {
        const fa_work w = fa_locate(p, io, g, 1, heads);
        const ulong qi = w.q0;
        if (qi >= w.s.len_q)
            continue;
        const int2 vis = fa_visible_keys(p, &w, qi);
        for (uint h = 0; h < heads; h++) {
            fa_work wh;
            fa_rows_head(p, &w, h, &wh);
            fa_load_row(row, io->q, p->dtype_q, fa_row(p, io, &wh.s.q, qi), dim, nq * FCL_VEC);
            for (uint c = 0; c < nq; c++)
                qv[h][c] = FCL_VLOADN(c, row) * p->q_scale;
            for (uint c = 0; c < nv; c++)
                ov[h][c] = 0.0f;
            m[h] = -INFINITY;
            l[h] = 0.0f;
        }
        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FCL_VEC) {
            for (uint j = 0; j < FCL_VEC; j++) /* two blocks ahead */
                fa_rows_prefetch_key(p, io, &w, k0 + 2 * FCL_VEC + j);
            for (uint j = 0; j < FCL_VEC; j++)
                fa_rows_load_key(p, io, &w, k0 + j, dim, nq * FCL_VEC, kb[j], dim_v, nv * FCL_VEC,
                                 vb[j]);
            for (uint h = 0; h < heads; h++) {
                fa_work wh;
                fa_rows_head(p, &w, h, &wh);
                for (uint j = 0; j < FCL_VEC; j++) {
                    floatv acc = 0.0f;
                    for (uint c = 0; c < nq; c++)
                        acc = fma(qv[h][c], FCL_VLOADN(c, kb[j]), acc);
                    pj[j] = fa_score(p, io, &wh, vis, fcl_hsum(acc), qi, k0 + j);
                }
                /* Online statistics as in the kernel above: -inf contributes 0, NaN spreads. */
                const floatv s = FCL_VLOADN(0, pj);
                const float m_new = fmax(m[h], fcl_hmax(s));
                const floatv e = select(exp(s - m_new), (floatv)0.0f, s == (floatv)(-INFINITY));
                const float alpha = m_new == -INFINITY ? 1.0f : exp(m[h] - m_new);
                l[h] = l[h] * alpha + fcl_hsum(e);
                m[h] = m_new;
                FCL_VSTOREN(e, 0, pj);
                /* Keys of weight 0 add nothing, as in the tile kernel (K/V formats: V's NaN and
                 * infinite values there), tested a key only in blocks that have such a key: a
                 * branch a key and piece everywhere took POCL's 2-core q8_0 decode 11.2 ms
                 * against 7.9 (B4 H8/2 Lk 8192 D128). */
                const int skip_zero = (p->flags & FA_FLAG_KV) && any(e == (floatv)0.0f);
                for (uint c = 0; c < nv; c++) {
                    floatv acc = ov[h][c] * alpha;
                    for (uint j = 0; j < FCL_VEC; j++)
                        if (!skip_zero || pj[j] != 0.0f)
                            acc = fma((floatv)pj[j], FCL_VLOADN(c, vb[j]), acc);
                    ov[h][c] = acc;
                }
            }
        }
        for (uint h = 0; h < heads; h++) {
            fa_work wh;
            fa_rows_head(p, &w, h, &wh);
            for (uint c = 0; c < nv; c++)
                FCL_VSTOREN(ov[h][c], c, row);
            const fa_dest dst = fa_finish_row(p, io, &wh, qi, m[h], l[h], 1);
            for (uint d = 0; d < dim_v; d++)
                fa_store(p, io, dst, d, row[d]);
        }
    }
}
#undef FA_ONE_VECS

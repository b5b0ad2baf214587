/* Attention on NVIDIA's tensor cores (compute capability 8.0 and later), through inline PTX:
 * FlashAttention-2's forward kernel in OpenCL C. A vendor fast path: the planner builds this
 * file only for such devices (src/plan.c, fcl_plan_mma_because), after a self-check of the
 * mma fragment layout (fcl_mma_check below), and runs it only for the calls it takes
 * (f16 or bf16 q, k and v with rows at multiples of 8 elements, head dims up to 128, multiples
 * of 8); the portable kernels (attention_tile.cl) are its reference and serve everything else.
 * Compiled after common.cl, attention_args.h and attention_common.cl, once per head-dim bucket
 * and storage type, with
 *   FA_NAME     kernel name suffix (mma_d64_f16, ...)
 *   FA_D        largest head_dim and head_dim_v of the bucket (64 or 128)
 *   FA_MMA_T    the storage type's name in PTX: f16 or bf16
 *   FA_MMA_WARPS warps a work-group (4 or 8, by head dim: src/plan.c, fcl_plan_mma_warps)
 *   FA_FEATURES the features compiled in (attention_args.h)
 *
 * A work-group of FA_MMA_WARPS warps owns FA_MMA_BQ query rows of one (batch, head), 16 rows a
 * warp. Each warp keeps its rows of q in registers as mma A fragments; K and V tiles of
 * FA_MMA_BK keys are copied into local memory by cp.async (the V tile while the scores of
 * the K tile are computed, the next K tile while the V tile is used); S = q K^T and O += P V
 * are m16n8k16 mma.sync with float32 accumulators; the online softmax (m, l) of each row runs
 * in the registers of the 4 lanes that hold the row, reduced by shfl.sync; P is rounded to the
 * storage type for the second product, as FlashAttention-2 does. Fragment layouts: PTX ISA,
 * "Matrix Fragments for mma.m16n8k16": lane = 4 g + t holds rows g and g + 8, columns 2t and
 * 2t + 1 (and 2t + 8, 2t + 9 of A).
 */
#ifndef FA_MMA_HELPERS
#define FA_MMA_HELPERS

/* Halves per local row: rows start 16 bytes apart (ldmatrix and cp.async need it), and the
 * 8 rows a fragment load touches fall 4 banks apart, in 32 different banks. */
#define FA_MMA_ROW(d) ((d) + 8)

FCL_INLINE uint fa_mma_local_address(__local const void *p)
{
    return (uint)(size_t)p; /* a __local pointer's value is its offset in shared memory */
}

/* x from the lane whose index differs by mask (the 4 lanes of a row: mask 1 and 2). */
FCL_INLINE float fa_mma_shuffle_xor(float x, uint mask)
{
    uint y;
    __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                     : "=r"(y)
                     : "r"(as_uint(x)), "r"(mask));
    return as_float(y);
}

/* 16 bytes from global src into local dst, asynchronously; only the first `bytes` are read
 * (0: the 16 bytes become zeros, and src is not read). */
FCL_INLINE void fa_mma_copy16(__local void *dst, __global const void *src, uint bytes)
{
    __asm__ volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :
                     : "r"(fa_mma_local_address(dst)), "l"(src), "r"(bytes)
                     : "memory");
}

FCL_INLINE void fa_mma_copies_commit(void) { __asm__ volatile("cp.async.commit_group;" ::: "memory"); }

/* Waits for this work-item's copies; the barrier after it makes every work-item's visible. */
FCL_INLINE void fa_mma_copies_wait(void) { __asm__ volatile("cp.async.wait_all;" ::: "memory"); }

/* Four 8x8 matrices of 16-bit values, transposed: lanes 8i to 8i + 7 give the addresses of
 * matrix i's rows; each lane gets, of each matrix, the elements (2t, g) and (2t + 1, g). */
FCL_INLINE void fa_mma_load_transposed(__local const ushort *row, uint *r0, uint *r1, uint *r2,
                                       uint *r3)
{
    __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(*r0), "=r"(*r1), "=r"(*r2), "=r"(*r3)
                     : "r"(fa_mma_local_address(row))
                     : "memory");
}

/* A 32-bit word of two 16-bit values at p (an even index of a 4-byte aligned row). */
FCL_INLINE uint fa_mma_pair(__local const ushort *p) { return *(__local const uint *)p; }

/* The same from global memory, where the pair may lie past the end of the row (zeros). */
FCL_INLINE uint fa_mma_global_pair(__global const ushort *row, uint d, uint dim)
{
    const uint lo = d < dim ? row[d] : 0, hi = d + 1 < dim ? row[d + 1] : 0;
    return lo | hi << 16;
}

/* Per storage type T (f16, bf16): fa_mma_T(d, a, b0, b1) is d += a b for one 16x16 A fragment
 * (a) and one 16x8 B fragment (b0, b1) with float32 d; fa_mma_pack_T(lo, hi) rounds two
 * floats to T (to nearest even) into one word, lo in the low half. */
#define FA_MMA_DEFINE(T)                                                                       \
    FCL_INLINE void fa_mma_##T(float *d, const uint *a, uint b0, uint b1)                      \
    {                                                                                          \
        __asm__ volatile("mma.sync.aligned.m16n8k16.row.col.f32." #T "." #T ".f32 "            \
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"     \
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                      \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));      \
    }                                                                                          \
    FCL_INLINE uint fa_mma_pack_##T(float lo, float hi)                                        \
    {                                                                                          \
        uint r;                                                                                \
        __asm__ volatile("cvt.rn." #T "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));      \
        return r;                                                                              \
    }
FA_MMA_DEFINE(f16)
FA_MMA_DEFINE(bf16)
#undef FA_MMA_DEFINE
#endif /* FA_MMA_HELPERS */

#define FA_MMA_BQ (FA_MMA_WARPS * 16) /* queries a work-group */
#define FA_MMA_KSTEPS (FA_D / 16) /* 16-column steps of q.k */
#define FA_MMA_NKEYS (FA_MMA_BK / 8)  /* 8-key blocks of a score tile */
#define FA_MMA_NDIMS (FA_D / 8)   /* 8-column blocks of the output */

/* Copies rows [k0, k0 + FA_MMA_BK) of a K or V tensor into tile, 16 bytes a copy; rows past
 * end and columns past dim become zeros. */
FCL_INLINE void FCL_CAT(fa_mma_load_tile, FA_NAME)(__local ushort (*tile)[FA_MMA_ROW(FA_D)],
                                                  const fa_params *p, const fa_io *io,
                                                  __global const ushort *src, const fa_rows *r,
                                                  ulong k0, ulong end, uint dim)
{
    for (uint c = get_local_id(0); c < FA_MMA_BK * (FA_D / 8); c += FA_MMA_WARPS * 32) {
        const uint row = c / (FA_D / 8), col = c % (FA_D / 8) * 8;
        const int inside = k0 + row < end && col < dim;
        __global const ushort *from = inside ? src + fa_row(p, io, r, k0 + row) + col : src;
        fa_mma_copy16(&tile[row][col], from, inside ? 16 : 0);
    }
}

__kernel __attribute__((reqd_work_group_size(FA_MMA_WARPS * 32, 1, 1)))
void FCL_CAT(attention, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local ushort k_tile[FA_MMA_BK][FA_MMA_ROW(FA_D)] __attribute__((aligned(16)));
    __local ushort v_tile[FA_MMA_BK][FA_MMA_ROW(FA_D)] __attribute__((aligned(16)));
    const uint lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane / 4, t = lane % 4;
    __global const ushort *q_all = (__global const ushort *)io->q;
    __global const ushort *k_all = (__global const ushort *)io->k;
    __global const ushort *v_all = (__global const ushort *)io->v;
    const ulong steps = (ulong)p->q_tiles * p->batch * p->heads_q * p->splits;

    for (ulong step = get_group_id(0); step < steps; step += get_num_groups(0)) {
        const fa_work w = fa_locate(p, io, step, FA_MMA_BQ, 1);
        if (w.q0 >= w.s.len_q)
            continue; /* the whole group takes the same step: no barrier is skipped by some */
        /* This lane's two rows, and the keys each may see. */
        const ulong qa = w.q0 + warp * 16 + g, qb = qa + 8;
        const int2 vis_a = fa_visible_keys(p, &w, qa), vis_b = fa_visible_keys(p, &w, qb);
        const float slope = fa_slope(p, io, &w.s); /* ALiBi's, 0 without */
        if (w.kv_begin < w.kv_end) {
            FCL_CAT(fa_mma_load_tile, FA_NAME)(k_tile, p, io, k_all, &w.s.k, w.kv_begin, w.kv_end,
                                               (uint)p->head_dim);
            fa_mma_copies_commit();
        }

        /* q as A fragments, straight from global memory (read once). */
        uint qf[FA_MMA_KSTEPS][4];
        {
            const uint dim = (uint)p->head_dim;
            __global const ushort *row_a = q_all + (qa < w.s.len_q ? fa_row(p, io, &w.s.q, qa) : 0);
            __global const ushort *row_b = q_all + (qb < w.s.len_q ? fa_row(p, io, &w.s.q, qb) : 0);
            const uint dim_a = qa < w.s.len_q ? dim : 0, dim_b = qb < w.s.len_q ? dim : 0;
            #pragma unroll
            for (uint ks = 0; ks < FA_MMA_KSTEPS; ks++) {
                qf[ks][0] = fa_mma_global_pair(row_a, ks * 16 + 2 * t, dim_a);
                qf[ks][1] = fa_mma_global_pair(row_b, ks * 16 + 2 * t, dim_b);
                qf[ks][2] = fa_mma_global_pair(row_a, ks * 16 + 8 + 2 * t, dim_a);
                qf[ks][3] = fa_mma_global_pair(row_b, ks * 16 + 8 + 2 * t, dim_b);
            }
        }
        float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f; /* l: this lane's part */
        float o[FA_MMA_NDIMS][4];
        #pragma unroll
        for (uint n = 0; n < FA_MMA_NDIMS; n++)
            o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_MMA_BK) {
            fa_mma_copies_wait();
            barrier(CLK_LOCAL_MEM_FENCE); /* K tile in; every warp is done with the last V tile */
            FCL_CAT(fa_mma_load_tile, FA_NAME)(v_tile, p, io, v_all, &w.s.v, k0, w.kv_end,
                                               (uint)p->head_dim_v);
            fa_mma_copies_commit();

            float s[FA_MMA_NKEYS][4];
            #pragma unroll
            for (uint j = 0; j < FA_MMA_NKEYS; j++) {
                s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
                #pragma unroll
                for (uint ks = 0; ks < FA_MMA_KSTEPS; ks++)
                    FCL_CAT(fa_mma, FA_MMA_T)(s[j], qf[ks],
                                              fa_mma_pair(&k_tile[j * 8 + g][ks * 16 + 2 * t]),
                                              fa_mma_pair(&k_tile[j * 8 + g][ks * 16 + 8 + 2 * t]));
            }

            fa_mma_copies_wait();
            barrier(CLK_LOCAL_MEM_FENCE); /* V tile in; every warp is done with the K tile */
            if (k0 + FA_MMA_BK < w.kv_end) {
                FCL_CAT(fa_mma_load_tile, FA_NAME)(k_tile, p, io, k_all, &w.s.k, k0 + FA_MMA_BK,
                                                   w.kv_end, (uint)p->head_dim);
                fa_mma_copies_commit();
            }

            /* Scores: q_scale q.k, then the modifiers one at a time, in the contract's order,
             * a branch per tile rather than per score (as attention_tile.cl: on the H100 the
             * softcap and ALiBi builds ran at 73 and 90 TFLOP/s with a call per score, against
             * 132 plain), and -inf where hidden (checked key by key only where the tile is
             * not all visible to this lane's rows). Element e of block j: row e < 2 ? a : b,
             * key k0 + 8 j + 2 t + e % 2. */
            #pragma unroll
            for (uint j = 0; j < FA_MMA_NKEYS; j++)
                #pragma unroll
                for (uint e = 0; e < 4; e++)
                    s[j][e] *= p->q_scale;
            if (p->flags & FA_FLAG_SOFTCAP) {
                #pragma unroll
                for (uint j = 0; j < FA_MMA_NKEYS; j++)
                    #pragma unroll
                    for (uint e = 0; e < 4; e++)
                        s[j][e] = fa_softcap(p->softcap, s[j][e]);
            }
            if (p->flags & FA_FLAG_ALIBI) {
                #pragma unroll
                for (uint j = 0; j < FA_MMA_NKEYS; j++)
                    #pragma unroll
                    for (uint e = 0; e < 4; e++)
                        s[j][e] -= slope * fa_alibi_distance(&w, e < 2 ? qa : qb, k0 + j * 8 + 2 * t + e % 2);
            }
            if (p->flags & FA_MASKS) {
                #pragma unroll
                for (uint j = 0; j < FA_MMA_NKEYS; j++)
                    #pragma unroll
                    for (uint e = 0; e < 4; e++) {
                        const ulong kj = k0 + j * 8 + 2 * t + e % 2;
                        s[j][e] = fa_masked(p, io, &w, s[j][e], e < 2 ? qa : qb, kj, slope,
                                            !fa_hidden(e < 2 ? vis_a : vis_b, kj));
                    }
            }
            const int sees_all = (long)k0 >= vis_a.x && (long)(k0 + FA_MMA_BK - 1) <= vis_a.y &&
                                 (long)k0 >= vis_b.x && (long)(k0 + FA_MMA_BK - 1) <= vis_b.y;
            if (!sees_all) {
                #pragma unroll
                for (uint j = 0; j < FA_MMA_NKEYS; j++)
                    #pragma unroll
                    for (uint e = 0; e < 4; e++)
                        s[j][e] = fa_hidden(e < 2 ? vis_a : vis_b, k0 + j * 8 + 2 * t + e % 2)
                                      ? -INFINITY
                                      : s[j][e];
            }

            /* Online statistics (docs/ALGORITHMS.md section 4): each row's max over its 4
             * lanes, then p = exp(s - m), as in attention_tile.cl. */
            float max_a = -INFINITY, max_b = -INFINITY;
            #pragma unroll
            for (uint j = 0; j < FA_MMA_NKEYS; j++) {
                max_a = fmax(max_a, fmax(s[j][0], s[j][1]));
                max_b = fmax(max_b, fmax(s[j][2], s[j][3]));
            }
            max_a = fmax(max_a, fa_mma_shuffle_xor(max_a, 1));
            max_a = fmax(max_a, fa_mma_shuffle_xor(max_a, 2));
            max_b = fmax(max_b, fa_mma_shuffle_xor(max_b, 1));
            max_b = fmax(max_b, fa_mma_shuffle_xor(max_b, 2));
            const float new_a = fmax(m_a, max_a), new_b = fmax(m_b, max_b);
            const float alpha_a = new_a == -INFINITY ? 1.0f : exp(m_a - new_a);
            const float alpha_b = new_b == -INFINITY ? 1.0f : exp(m_b - new_b);
            m_a = new_a;
            m_b = new_b;
            const float under_a = new_a == -INFINITY ? 0.0f : new_a;
            const float under_b = new_b == -INFINITY ? 0.0f : new_b;
            float sum_a = 0.0f, sum_b = 0.0f;
            #pragma unroll
            for (uint j = 0; j < FA_MMA_NKEYS; j++) {
                s[j][0] = fa_exp_under(s[j][0], under_a);
                s[j][1] = fa_exp_under(s[j][1], under_a);
                s[j][2] = fa_exp_under(s[j][2], under_b);
                s[j][3] = fa_exp_under(s[j][3], under_b);
                sum_a += s[j][0] + s[j][1];
                sum_b += s[j][2] + s[j][3];
            }
            l_a = l_a * alpha_a + sum_a;
            l_b = l_b * alpha_b + sum_b;
            #pragma unroll
            for (uint n = 0; n < FA_MMA_NDIMS; n++) {
                o[n][0] *= alpha_a;
                o[n][1] *= alpha_a;
                o[n][2] *= alpha_b;
                o[n][3] *= alpha_b;
            }

            /* O += P V, 16 keys a step: the score fragments of two 8-key blocks are the A
             * fragment of P; ldmatrix.trans gives V's B fragments for 16 output columns. */
            #pragma unroll
            for (uint kk = 0; kk < FA_MMA_BK / 16; kk++) {
                const uint pf[4] = {FCL_CAT(fa_mma_pack, FA_MMA_T)(s[2 * kk][0], s[2 * kk][1]),
                                    FCL_CAT(fa_mma_pack, FA_MMA_T)(s[2 * kk][2], s[2 * kk][3]),
                                    FCL_CAT(fa_mma_pack, FA_MMA_T)(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    FCL_CAT(fa_mma_pack, FA_MMA_T)(s[2 * kk + 1][2], s[2 * kk + 1][3])};
                const uint matrix = lane / 8;
                #pragma unroll
                for (uint n2 = 0; n2 < FA_MMA_NDIMS / 2; n2++) {
                    uint b0, b1, b2, b3;
                    fa_mma_load_transposed(&v_tile[kk * 16 + matrix % 2 * 8 + lane % 8]
                                                  [n2 * 16 + matrix / 2 * 8],
                                           &b0, &b1, &b2, &b3);
                    FCL_CAT(fa_mma, FA_MMA_T)(o[2 * n2], pf, b0, b1);
                    FCL_CAT(fa_mma, FA_MMA_T)(o[2 * n2 + 1], pf, b2, b3);
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next step's first K tile overwrites what this read */

        /* l of each row: the sum of its 4 lanes' parts; then the rows are written. */
        l_a += fa_mma_shuffle_xor(l_a, 1);
        l_a += fa_mma_shuffle_xor(l_a, 2);
        l_b += fa_mma_shuffle_xor(l_b, 1);
        l_b += fa_mma_shuffle_xor(l_b, 2);
        const uint dim_v = (uint)p->head_dim_v;
        #pragma unroll
        for (uint row = 0; row < 2; row++) { /* row a: accumulators 0 and 1; row b: 2 and 3 */
            const ulong qi = row ? qb : qa;
            if (qi >= w.s.len_q)
                continue;
            const fa_dest dst = fa_finish_row(p, io, &w, qi, row ? m_b : m_a, row ? l_b : l_a, t == 0);
            #pragma unroll
            for (uint n = 0; n < FA_MMA_NDIMS; n++)
                #pragma unroll
                for (uint e = 0; e < 2; e++)
                    if (n * 8 + 2 * t + e < dim_v)
                        fa_store(p, io, dst, n * 8 + 2 * t + e, o[n][2 * row + e]);
        }
    }
}

#undef FA_MMA_BQ
#undef FA_MMA_KSTEPS
#undef FA_MMA_NKEYS
#undef FA_MMA_NDIMS

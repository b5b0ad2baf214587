/* Attention on NVIDIA's tensor cores (compute capability 8.0 and later), through inline PTX:
 * FlashAttention-2's forward kernel in OpenCL C. A vendor fast path: the planner builds this
 * file only for such devices (src/plan.c, fcl_plan_mma), after a self-check of the
 * mma fragment layout (fcl_mma_check, mma_check_nv.cl), and runs it only for the calls it takes
 * (f16 or bf16 q, k and v with rows at multiples of 8 elements, head dims up to 128, multiples
 * of 8); the portable kernels (attention_tile.cl) are its reference and serve everything else.
 * Compiled after common.cl, common_nv.cl, attention_args.h and attention_common.cl, once per
 * head-dim bucket and storage type, with
 *   FA_NAME     kernel name suffix (mma_d64_f16, ...)
 *   FA_D        largest head_dim and head_dim_v of the bucket (64 or 128)
 *   FA_MMA_T    the storage type's name in PTX: f16 or bf16
 *   FA_MMA_WARPS warps a work-group, and FA_MMA_MT tiles of 16 query rows a warp (by head
 *               dim: src/plan.c, fcl_plan_mma_warps and fcl_plan_mma_row_tiles)
 *   FA_FEATURES the features compiled in (attention_args.h)
 *
 * A work-group of FA_MMA_WARPS warps owns FA_MMA_BQ query rows of one (batch, head), 16
 * FA_MMA_MT rows a warp. Each warp keeps its rows of q in registers as mma A fragments (each
 * K and V fragment it reads then feeds FA_MMA_MT products); K and V tiles of
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
 * (a) and one 16x8 B fragment (b0, b1) with float32 d. */
#define FA_MMA_DEFINE(T)                                                                       \
    FCL_INLINE void fa_mma_##T(float *d, const uint *a, uint b0, uint b1)                      \
    {                                                                                          \
        __asm__ volatile("mma.sync.aligned.m16n8k16.row.col.f32." #T "." #T ".f32 "            \
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"     \
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                      \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));      \
    }
FA_MMA_DEFINE(f16)
FA_MMA_DEFINE(bf16)
#undef FA_MMA_DEFINE
#endif /* FA_MMA_HELPERS */

#define FA_MMA_ROWS (2 * FA_MMA_MT)    /* query rows a lane holds */
/* Score x of a lane, x < FA_MMA_SCORES, is element e = x % 4 of 8-key block j = x / 4 % NKEYS
 * of row tile mt = x / (4 NKEYS): its row (of the lane's FA_MMA_ROWS) is 2 mt + e / 2, its key
 * k0 + 8 j + 2 t + e % 2. */
#define FA_MMA_SCORES (FA_MMA_MT * FA_MMA_NKEYS * 4)
#define FA_MMA_S(x) s[(x) / (FA_MMA_NKEYS * 4)][(x) / 4 % FA_MMA_NKEYS][(x) % 4]
#define FA_MMA_ROW_OF(x) ((x) / (FA_MMA_NKEYS * 4) * 2 + (x) % 4 / 2)
#define FA_MMA_KEY(x) (k0 + (x) / 4 % FA_MMA_NKEYS * 8 + 2 * t + (x) % 2)
#define FA_MMA_BQ (FA_MMA_WARPS * 16 * FA_MMA_MT) /* queries a work-group */
#define FA_MMA_KSTEPS (FA_D / 16) /* 16-column steps of q.k */
#define FA_MMA_NKEYS (FA_MMA_BK / 8)  /* 8-key blocks of a score tile */
#define FA_MMA_NDIMS (FA_D / 8)   /* 8-column blocks of the output */

/* Where rows [k0, k0 + FA_MMA_BK) of K and V start (k0 < end; rows past end repeat row k0),
 * for the tile copies: one lookup a key for both (a block-table load where paged), made once
 * a tile rather than by each of the copies of a row, which then waited on it. The caller's
 * barrier before (every copy of the last tiles issued) and this one after order the table's
 * writes and reads. */
FCL_INLINE void FCL_CAT(fa_mma_tile_rows, FA_NAME)(__local ulong *k_at, __local ulong *v_at,
                                                  const fa_params *p, const fa_io *io,
                                                  const fa_seq *s, ulong k0, ulong end)
{
    for (uint t = get_local_id(0); t < FA_MMA_BK; t += FA_MMA_WARPS * 32) {
        const fa_place at = fa_place_of(p, io, &s->k, k0 + t < end ? k0 + t : k0);
        k_at[t] = fa_row_at(&s->k, at);
        v_at[t] = fa_row_at(&s->v, at);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Copies rows [k0, k0 + FA_MMA_BK) of a K or V tensor (row t at src + row_at[t]) into tile,
 * 16 bytes a copy; rows past end and columns past dim become zeros. */
FCL_INLINE void FCL_CAT(fa_mma_load_tile, FA_NAME)(__local ushort (*tile)[FA_MMA_ROW(FA_D)],
                                                  __global const ushort *src,
                                                  __local const ulong *row_at, ulong k0,
                                                  ulong end, uint dim)
{
    for (uint c = get_local_id(0); c < FA_MMA_BK * (FA_D / 8); c += FA_MMA_WARPS * 32) {
        const uint row = c / (FA_D / 8), col = c % (FA_D / 8) * 8;
        const int inside = k0 + row < end && col < dim;
        __global const ushort *from = inside ? src + row_at[row] + col : src;
        fa_mma_copy16(&tile[row][col], from, inside ? 16 : 0);
    }
}

__kernel __attribute__((reqd_work_group_size(FA_MMA_WARPS * 32, 1, 1)))
void FCL_CAT(attention, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local ushort k_tile[FA_MMA_BK][FA_MMA_ROW(FA_D)] __attribute__((aligned(16)));
    __local ushort v_tile[FA_MMA_BK][FA_MMA_ROW(FA_D)] __attribute__((aligned(16)));
    __local ulong k_at[FA_MMA_BK], v_at[FA_MMA_BK]; /* the tile's rows (fa_mma_tile_rows) */
    const uint lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane / 4, t = lane % 4;
    __global const ushort *q_all = (__global const ushort *)io->q;
    __global const ushort *k_all = (__global const ushort *)io->k;
    __global const ushort *v_all = (__global const ushort *)io->v;
    const ulong steps = (ulong)p->q_tiles * p->batch * p->heads_q * p->splits;

    for (ulong step = get_group_id(0); step < steps; step += get_num_groups(0)) {
        const fa_work w = fa_locate(p, io, step, FA_MMA_BQ, 1);
        if (w.q0 >= w.s.len_q)
            continue; /* the whole group takes the same step: no barrier is skipped by some */
        /* This lane's rows (row r: row g + 8 (r % 2) of the warp's 16-row tile r / 2), and
         * the keys each may see. */
        ulong qi[FA_MMA_ROWS];
        int2 vis[FA_MMA_ROWS];
        #pragma unroll
        for (uint r = 0; r < FA_MMA_ROWS; r++) {
            qi[r] = w.q0 + (warp * FA_MMA_MT + r / 2) * 16 + g + 8 * (r % 2);
            vis[r] = fa_visible_keys(p, &w, qi[r]);
        }
        const float slope = fa_slope(p, io, &w.s); /* ALiBi's, 0 without */
        if (w.kv_begin < w.kv_end) {
            FCL_CAT(fa_mma_tile_rows, FA_NAME)(k_at, v_at, p, io, &w.s, w.kv_begin, w.kv_end);
            FCL_CAT(fa_mma_load_tile, FA_NAME)(k_tile, k_all, k_at, w.kv_begin, w.kv_end,
                                               (uint)p->head_dim);
            fa_mma_copies_commit();
        }

        /* q as A fragments, straight from global memory (read once). */
        uint qf[FA_MMA_MT][FA_MMA_KSTEPS][4];
        #pragma unroll
        for (uint r = 0; r < FA_MMA_ROWS; r++) {
            const int inside = qi[r] < w.s.len_q;
            __global const ushort *row = q_all + (inside ? fa_row(p, io, &w.s.q, qi[r]) : 0);
            const uint dim = inside ? (uint)p->head_dim : 0;
            #pragma unroll
            for (uint ks = 0; ks < FA_MMA_KSTEPS; ks++) {
                qf[r / 2][ks][r % 2] = fa_mma_global_pair(row, ks * 16 + 2 * t, dim);
                qf[r / 2][ks][2 + r % 2] = fa_mma_global_pair(row, ks * 16 + 8 + 2 * t, dim);
            }
        }
        float m[FA_MMA_ROWS], l[FA_MMA_ROWS]; /* l: this lane's part of the row's sum */
        float o[FA_MMA_MT][FA_MMA_NDIMS][4];
        #pragma unroll
        for (uint r = 0; r < FA_MMA_ROWS; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        #pragma unroll
        for (uint mt = 0; mt < FA_MMA_MT; mt++)
            #pragma unroll
            for (uint n = 0; n < FA_MMA_NDIMS; n++)
                o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;

        for (ulong k0 = w.kv_begin; k0 < w.kv_end; k0 += FA_MMA_BK) {
            fa_mma_copies_wait();
            barrier(CLK_LOCAL_MEM_FENCE); /* K tile in; every warp is done with the last V tile */
            FCL_CAT(fa_mma_load_tile, FA_NAME)(v_tile, v_all, v_at, k0, w.kv_end,
                                               (uint)p->head_dim_v);
            fa_mma_copies_commit();

            /* S = q K^T: each K fragment read from local memory feeds every row tile. */
            float s[FA_MMA_MT][FA_MMA_NKEYS][4];
            #pragma unroll
            for (uint mt = 0; mt < FA_MMA_MT; mt++)
                #pragma unroll
                for (uint j = 0; j < FA_MMA_NKEYS; j++)
                    s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
            #pragma unroll
            for (uint j = 0; j < FA_MMA_NKEYS; j++)
                #pragma unroll
                for (uint ks = 0; ks < FA_MMA_KSTEPS; ks++) {
                    const uint b0 = fa_mma_pair(&k_tile[j * 8 + g][ks * 16 + 2 * t]);
                    const uint b1 = fa_mma_pair(&k_tile[j * 8 + g][ks * 16 + 8 + 2 * t]);
                    #pragma unroll
                    for (uint mt = 0; mt < FA_MMA_MT; mt++)
                        FCL_CAT(fa_mma, FA_MMA_T)(s[mt][j], qf[mt][ks], b0, b1);
                }

            fa_mma_copies_wait();
            barrier(CLK_LOCAL_MEM_FENCE); /* V tile in; every warp is done with the K tile */
            if (k0 + FA_MMA_BK < w.kv_end) {
                FCL_CAT(fa_mma_tile_rows, FA_NAME)(k_at, v_at, p, io, &w.s, k0 + FA_MMA_BK, w.kv_end);
                FCL_CAT(fa_mma_load_tile, FA_NAME)(k_tile, k_all, k_at, k0 + FA_MMA_BK, w.kv_end,
                                                   (uint)p->head_dim);
                fa_mma_copies_commit();
            }

            /* Scores: q_scale q.k, then the modifiers one at a time, in the contract's order,
             * a branch per tile rather than per score (as attention_tile.cl: on the H100 the
             * softcap and ALiBi builds ran at 73 and 90 TFLOP/s with a call per score, against
             * 132 plain), and -inf where hidden (checked key by key only where the tile is
             * not all visible to this lane's rows). */
            #pragma unroll
            for (uint x = 0; x < FA_MMA_SCORES; x++)
                FA_MMA_S(x) *= p->q_scale;
            if (p->flags & FA_FLAG_SOFTCAP) {
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) = fa_softcap(p->softcap, FA_MMA_S(x));
            }
            if (p->flags & FA_FLAG_ALIBI) {
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) -= slope * fa_alibi_distance(&w, qi[FA_MMA_ROW_OF(x)], FA_MMA_KEY(x));
            }
            if (p->flags & FA_MASKS) {
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) = fa_masked(p, io, &w, FA_MMA_S(x), qi[FA_MMA_ROW_OF(x)], FA_MMA_KEY(x),
                                            slope, !fa_hidden(vis[FA_MMA_ROW_OF(x)], FA_MMA_KEY(x)));
            }
            int sees_all = 1;
            #pragma unroll
            for (uint r = 0; r < FA_MMA_ROWS; r++)
                sees_all &= (long)k0 >= vis[r].x && (long)(k0 + FA_MMA_BK - 1) <= vis[r].y;
            if (!sees_all) {
                #pragma unroll
                for (uint x = 0; x < FA_MMA_SCORES; x++)
                    FA_MMA_S(x) = fa_hidden(vis[FA_MMA_ROW_OF(x)], FA_MMA_KEY(x)) ? -INFINITY : FA_MMA_S(x);
            }

            /* Online statistics (docs/ALGORITHMS.md section 4): each row's max over its 4
             * lanes, then p = exp(s - m), as in attention_tile.cl. */
            float alpha[FA_MMA_ROWS], under[FA_MMA_ROWS], sum[FA_MMA_ROWS];
            #pragma unroll
            for (uint r = 0; r < FA_MMA_ROWS; r++) {
                float top = -INFINITY;
                #pragma unroll
                for (uint j = 0; j < FA_MMA_NKEYS; j++)
                    top = fmax(top, fmax(s[r / 2][j][2 * (r % 2)], s[r / 2][j][2 * (r % 2) + 1]));
                top = fmax(top, fcl_nv_shuffle_xor(top, 1));
                top = fmax(top, fcl_nv_shuffle_xor(top, 2));
                const float m_new = fmax(m[r], top);
                alpha[r] = m_new == -INFINITY ? 1.0f : exp(m[r] - m_new);
                under[r] = m_new == -INFINITY ? 0.0f : m_new;
                m[r] = m_new;
                sum[r] = 0.0f;
            }
            #pragma unroll
            for (uint x = 0; x < FA_MMA_SCORES; x++) {
                FA_MMA_S(x) = fa_exp_under(FA_MMA_S(x), under[FA_MMA_ROW_OF(x)]);
                sum[FA_MMA_ROW_OF(x)] += FA_MMA_S(x);
            }
            #pragma unroll
            for (uint r = 0; r < FA_MMA_ROWS; r++)
                l[r] = l[r] * alpha[r] + sum[r];
            #pragma unroll
            for (uint mt = 0; mt < FA_MMA_MT; mt++)
                #pragma unroll
                for (uint n = 0; n < FA_MMA_NDIMS; n++)
                    #pragma unroll
                    for (uint e = 0; e < 4; e++)
                        o[mt][n][e] *= alpha[2 * mt + e / 2];

            /* O += P V, 16 keys a step: the score fragments of two 8-key blocks are the A
             * fragment of P; ldmatrix.trans gives V's B fragments for 16 output columns,
             * each fed to every row tile. */
            #pragma unroll
            for (uint kk = 0; kk < FA_MMA_BK / 16; kk++) {
                uint pf[FA_MMA_MT][4];
                #pragma unroll
                for (uint mt = 0; mt < FA_MMA_MT; mt++) {
                    pf[mt][0] = FCL_CAT(fcl_nv_pack, FA_MMA_T)(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pf[mt][1] = FCL_CAT(fcl_nv_pack, FA_MMA_T)(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pf[mt][2] = FCL_CAT(fcl_nv_pack, FA_MMA_T)(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pf[mt][3] = FCL_CAT(fcl_nv_pack, FA_MMA_T)(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
                const uint matrix = lane / 8;
                #pragma unroll
                for (uint n2 = 0; n2 < FA_MMA_NDIMS / 2; n2++) {
                    uint b0, b1, b2, b3;
                    fa_mma_load_transposed(&v_tile[kk * 16 + matrix % 2 * 8 + lane % 8]
                                                  [n2 * 16 + matrix / 2 * 8],
                                           &b0, &b1, &b2, &b3);
                    #pragma unroll
                    for (uint mt = 0; mt < FA_MMA_MT; mt++) {
                        FCL_CAT(fa_mma, FA_MMA_T)(o[mt][2 * n2], pf[mt], b0, b1);
                        FCL_CAT(fa_mma, FA_MMA_T)(o[mt][2 * n2 + 1], pf[mt], b2, b3);
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next step's first K tile overwrites what this read */

        /* l of each row: the sum of its 4 lanes' parts; then the rows are written. */
        const uint dim_v = (uint)p->head_dim_v;
        #pragma unroll
        for (uint r = 0; r < FA_MMA_ROWS; r++) {
            l[r] += fcl_nv_shuffle_xor(l[r], 1);
            l[r] += fcl_nv_shuffle_xor(l[r], 2);
            if (qi[r] >= w.s.len_q)
                continue;
            const fa_dest dst = fa_finish_row(p, io, &w, qi[r], m[r], l[r], t == 0);
            #pragma unroll
            for (uint n = 0; n < FA_MMA_NDIMS; n++)
                #pragma unroll
                for (uint e = 0; e < 2; e++)
                    if (n * 8 + 2 * t + e < dim_v)
                        fa_store(p, io, dst, n * 8 + 2 * t + e, o[r / 2][n][2 * (r % 2) + e]);
        }
    }
}

#undef FA_MMA_ROWS
#undef FA_MMA_SCORES
#undef FA_MMA_S
#undef FA_MMA_ROW_OF
#undef FA_MMA_KEY
#undef FA_MMA_BQ
#undef FA_MMA_KSTEPS
#undef FA_MMA_NKEYS
#undef FA_MMA_NDIMS

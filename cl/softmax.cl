/* Row softmax kernels for one storage type.
 *
 * The host compiles this text once per storage type, each time after
 *   #define FCL_DT f32   (or f16, bf16)
 * so every kernel name carries the type: softmax_fused_f32, softmax_online_bf16, ...
 * Needs common.cl. Work-groups loop over rows (grid-stride), so any row count fits in a
 * launch of bounded size; every index is 64-bit.
 */
#ifndef FCL_DT
#define FCL_DT f32
#endif
#define FCL_T FCL_CAT(fcl_storage, FCL_DT)
#define FCL_LOAD FCL_CAT(fcl_load, FCL_DT)
#define FCL_STORE FCL_CAT(fcl_store, FCL_DT)
#define FCL_VLOAD FCL_CAT(fcl_vload, FCL_DT)
#define FCL_VSTORE FCL_CAT(fcl_vstore, FCL_DT)
#define FCL_KERNEL(name) __kernel __attribute__((reqd_work_group_size(FCL_LWS, 1, 1))) void FCL_CAT(name, FCL_DT)

/* Each work-item takes FCL_VEC consecutive elements at a time, FCL_LWS * FCL_VEC apart; the
 * one vector that straddles the end of a range is finished element by element. Every
 * work-item therefore touches the same indices in each pass of a row. */
#define FCL_FIRST(begin) ((begin) + get_local_id(0) * FCL_VEC)
#define FCL_STEP (FCL_LWS * FCL_VEC)
/* The streaming loops load FCL_BATCH vectors, `step` apart, before using the first: loads
 * followed at once by their use (and by the branches of the online update) would wait for
 * one another, one memory latency per vector. */
#define FCL_BATCH 4
#define FCL_BATCH_FITS(j, step, end) ((j) + (FCL_BATCH - 1) * (step) + FCL_VEC <= (end))

/* x[b] = the vector of in_row at j + b * step, for each b of a batch. */
void FCL_CAT(softmax_load_batch, FCL_DT)(floatv *x, __global const FCL_T *in_row, ulong j,
                                         ulong step)
{
    #pragma unroll
    for (uint b = 0; b < FCL_BATCH; b++)
        x[b] = FCL_VLOAD(in_row, j + b * step);
}

/* Statistics of the vectors of in[row] from `first` on, `step` apart, before `end`: this
 * work-item's share of a row (FCL_FIRST, FCL_STEP) or a whole row (0, FCL_VEC). */
FCL_INLINE float2 FCL_CAT(softmax_stats, FCL_DT)(__global const FCL_T *in_row,
                                      sm_row row, ulong first, ulong step,
                                      ulong end, float scale, uint flags)
{
    float m = -INFINITY, d = 0.0f, comp = 0.0f;
    floatv dv = 0.0f, cv = 0.0f;
    ulong j = first;
    for (; FCL_BATCH_FITS(j, step, end); j += FCL_BATCH * step) {
        floatv x[FCL_BATCH];
        FCL_CAT(softmax_load_batch, FCL_DT)(x, in_row, j, step);
        #pragma unroll
        for (uint b = 0; b < FCL_BATCH; b++)
            fcl_stat_add_vec(&m, &dv, &cv, sm_score_vec(x[b], scale, row, j + b * step, flags));
    }
    for (; j + FCL_VEC <= end; j += step)
        fcl_stat_add_vec(&m, &dv, &cv,
                         sm_score_vec(FCL_VLOAD(in_row, j), scale, row, j, flags));
    /* The tail joins under the same max: rescale the lanes if it raises it. */
    float m_lanes = m;
    for (; j < end; j++)
        fcl_stat_add(&m, &d, &comp, sm_score(FCL_LOAD(in_row, j), scale, row, j, flags));
    if (m > m_lanes) {
        float r = exp(m_lanes - m);
        dv *= r;
        cv *= r;
    }
    return fcl_stat_lanes(m, d, comp, dv, cv);
}

/* Writes the same share of out[row] from scores recomputed from the input. */
FCL_INLINE void FCL_CAT(softmax_write, FCL_DT)(__global const FCL_T *in_row,
                                    sm_row row, __global FCL_T *out_row,
                                    ulong first, ulong step, ulong end, float scale, uint flags,
                                    fcl_row_norm n)
{
    ulong j = first;
    for (; FCL_BATCH_FITS(j, step, end); j += FCL_BATCH * step) {
        floatv x[FCL_BATCH];
        FCL_CAT(softmax_load_batch, FCL_DT)(x, in_row, j, step);
        #pragma unroll
        for (uint b = 0; b < FCL_BATCH; b++) {
            floatv s = sm_score_vec(x[b], scale, row, j + b * step, flags);
            FCL_VSTORE(out_row, j + b * step, sm_normalize_vec(s, n, flags));
        }
    }
    for (; j + FCL_VEC <= end; j += step) {
        floatv s = sm_score_vec(FCL_VLOAD(in_row, j), scale, row, j, flags);
        FCL_VSTORE(out_row, j, sm_normalize_vec(s, n, flags));
    }
    for (; j < end; j++)
        FCL_STORE(out_row, j, sm_normalize(sm_score(FCL_LOAD(in_row, j), scale, row, j, flags),
                                            n, flags));
}

/* FUSED: the row's scores are kept in local memory (row_buf, cols floats), so the input
 * is read once, and one exp per element suffices: pass 1 loads the scores and finds the
 * max, pass 2 turns them into exp(s - m) (kept, unless log) and sums, pass 3 scales. */
FCL_KERNEL(softmax_fused)(SM_ROW_ARGS, __local float *row_buf)
{
    __local float2 scratch[FCL_LWS];
    for (ulong r = get_group_id(0); r < rows; r += get_num_groups(0)) {
        __global const FCL_T *in_row = in + r * in_stride;
        const sm_row row = softmax_row(r);
        floatv mv = -INFINITY;
        ulong j = FCL_FIRST(0);
        for (; FCL_BATCH_FITS(j, FCL_STEP, cols); j += FCL_BATCH * FCL_STEP) {
            floatv x[FCL_BATCH];
            FCL_CAT(softmax_load_batch, FCL_DT)(x, in_row, j, FCL_STEP);
            #pragma unroll
            for (uint b = 0; b < FCL_BATCH; b++) {
                floatv s = sm_score_vec(x[b], scale, row, j + b * FCL_STEP, flags);
                FCL_VSTOREN(s, 0, row_buf + j + b * FCL_STEP);
                mv = fmax(mv, s);
            }
        }
        for (; j + FCL_VEC <= cols; j += FCL_STEP) {
            floatv s = sm_score_vec(FCL_VLOAD(in_row, j), scale, row, j, flags);
            FCL_VSTOREN(s, 0, row_buf + j);
            mv = fmax(mv, s);
        }
        float m = fcl_hmax(mv);
        for (; j < cols; j++) {
            float s = sm_score(FCL_LOAD(in_row, j), scale, row, j, flags);
            row_buf[j] = s;
            m = fmax(m, s);
        }
        /* A NaN never becomes the max (fmax skips it); it turns d into NaN below. */
        m = fcl_stat_reduce((float2)(m, 0.0f), scratch).x;
        const float shift = m == -INFINITY ? 0.0f : m; /* all -inf: every exp is 0 */
        const int keep_exp = !(flags & SM_FLAG_LOG);
        float d = 0.0f, comp = 0.0f;
        floatv dv = 0.0f, cv = 0.0f;
        for (j = FCL_FIRST(0); j + FCL_VEC <= cols; j += FCL_STEP) {
            floatv e = exp(FCL_VLOADN(0, row_buf + j) - shift);
            if (keep_exp)
                FCL_VSTOREN(e, 0, row_buf + j);
            fcl_kahan_add_vec(&dv, &cv, e);
        }
        for (; j < cols; j++) {
            float e = exp(row_buf[j] - shift);
            if (keep_exp)
                row_buf[j] = e;
            fcl_kahan_add(&d, &comp, e);
        }
        fcl_row_norm n = sm_row_norm(
            fcl_stat_reduce(fcl_stat_lanes(m, d, comp, dv, cv), scratch), row, flags);
        if (get_local_id(0) == 0 && (flags & SM_FLAG_LSE))
            lse[r] = n.lse;
        const float factor = sm_kept_factor(shift, m != -INFINITY, n);
        __global FCL_T *out_row = out + r * out_stride;
        for (j = FCL_FIRST(0); j + FCL_VEC <= cols; j += FCL_STEP) {
            floatv v = FCL_VLOADN(0, row_buf + j);
            FCL_VSTORE(out_row, j, keep_exp ? v * factor : sm_normalize_vec(v, n, flags));
        }
        for (; j < cols; j++)
            FCL_STORE(out_row, j, keep_exp ? row_buf[j] * factor : sm_normalize(row_buf[j], n, flags));
    }
}

#if FCL_BLOCK_ITEMS > 0
/* Element i of a work-item in softmax_block; past the row's end, its first element again. */
#define FCL_BLOCK_INDEX(i) (lane + (i) * lanes <= last ? lane + (i) * lanes : lane)

/* FUSED for rows of up to FCL_LWS * FCL_BLOCK_ITEMS elements, held in registers: `lanes`
 * work-items share a row (a power of two dividing FCL_LWS), so a group takes FCL_LWS / lanes
 * rows at once and short rows still fill it. Element j of a row is item j / lanes of lane
 * j % lanes: neighbouring work-items read neighbouring elements. Each work-item keeps
 * exp(s - its own max) and its own (m, d); one merge over the lanes gives the row's (m, d),
 * so the input is read once, with one exp per element and one reduction per row. */
FCL_KERNEL(softmax_block)(SM_ROW_ARGS, uint lanes)
{
    __local float2 scratch[FCL_LWS];
    const uint lane = get_local_id(0) & (lanes - 1);
    const ulong rows_per_pass = FCL_LWS / lanes;
    const int keep_exp = !(flags & SM_FLAG_LOG);
    const uint last = (uint)cols - 1; /* cols <= FCL_LWS * FCL_BLOCK_ITEMS */
    /* The loop bound is the same for the whole group: every work-item reaches each barrier. */
    for (ulong r0 = get_group_id(0) * rows_per_pass; r0 < rows;
         r0 += get_num_groups(0) * rows_per_pass) {
        const ulong r = r0 + get_local_id(0) / lanes;
        const int live = r < rows;
        /* Every load is unconditional, so the compiler issues them all before the first use:
         * a branch, around each or around all, costs NVIDIA's compiler 30 registers and the
         * H100 10-25% of its speed. A work-item reads only elements of its own row (indices
         * past its end read its element `lane` again; the planner keeps lanes <= cols), or,
         * past the last row, those of the group's first row of this pass (r0 < rows): that
         * row is written only by this group, after the reduction's barrier, which fences
         * global memory, so no read races a write even in place. */
        const ulong row_read = live ? r : r0;
        __global const FCL_T *in_row = in + row_read * in_stride;
        float x[FCL_BLOCK_ITEMS];
        /* The score is sm_score's, in the same two roundings. */
        #pragma unroll
        for (uint i = 0; i < FCL_BLOCK_ITEMS; i++)
            x[i] = scale * FCL_LOAD(in_row, FCL_BLOCK_INDEX(i));
        if (flags & SM_FLAG_MASK) {
            const sm_row mask_row = softmax_row(row_read);
            #pragma unroll
            for (uint i = 0; i < FCL_BLOCK_ITEMS; i++)
                x[i] += sm_mask(mask_row, FCL_BLOCK_INDEX(i), flags);
        }
        float m_own = -INFINITY;
        #pragma unroll
        for (uint i = 0; i < FCL_BLOCK_ITEMS; i++) {
            x[i] = live && lane + i * lanes <= last ? x[i] : -INFINITY;
            m_own = fmax(m_own, x[i]); /* NaN never becomes the max; it turns d into NaN */
        }
        const float shift_own = m_own == -INFINITY ? 0.0f : m_own;
        float d_own = 0.0f;
        #pragma unroll
        for (uint i = 0; i < FCL_BLOCK_ITEMS; i++) {
            float e = exp(x[i] - shift_own);
            d_own += e;
            if (keep_exp)
                x[i] = e;
        }
        /* The sink is read here, not with the mask: live across the reduction it would cost
         * registers. */
        fcl_row_norm n = sm_row_norm(fcl_stat_reduce_lanes((float2)(m_own, d_own), lanes, scratch),
                                     softmax_row(row_read), flags);
        if (!live)
            continue;
        if (lane == 0 && (flags & SM_FLAG_LSE))
            lse[r] = n.lse;
        /* exp(s - m) / d = exp(s - m_own) * exp(m_own - m) / d. A work-item that saw only
         * -inf holds zeros (exp(-inf - -inf) would be NaN), which a NaN d still turns NaN. */
        const float factor = (m_own == -INFINITY ? 0.0f : exp(m_own - n.shift)) * n.inv_d;
        __global FCL_T *out_row = out + r * out_stride;
        #pragma unroll
        for (uint i = 0; i < FCL_BLOCK_ITEMS; i++) {
            uint j = lane + i * lanes;
            if (j <= last)
                FCL_STORE(out_row, j, keep_exp ? x[i] * factor : sm_normalize(x[i], n, flags));
        }
    }
}
#undef FCL_BLOCK_INDEX
#endif

/* ONLINE: pass 1 streams the row keeping (m, d), pass 2 streams it again and writes. */
FCL_KERNEL(softmax_online)(SM_ROW_ARGS)
{
    __local float2 scratch[FCL_LWS];
    for (ulong r = get_group_id(0); r < rows; r += get_num_groups(0)) {
        __global const FCL_T *in_row = in + r * in_stride;
        const sm_row row = softmax_row(r);
        float2 st = FCL_CAT(softmax_stats, FCL_DT)(in_row, row, FCL_FIRST(0), FCL_STEP, cols,
                                                   scale, flags);
        fcl_row_norm n = sm_row_norm(fcl_stat_reduce(st, scratch), row, flags);
        if (get_local_id(0) == 0 && (flags & SM_FLAG_LSE))
            lse[r] = n.lse;
        FCL_CAT(softmax_write, FCL_DT)(in_row, row, out + r * out_stride, FCL_FIRST(0),
                                       FCL_STEP, cols, scale, flags, n);
    }
}

/* ONLINE, one work-item per row: for devices whose local memory is ordinary memory (CPU
 * drivers such as POCL run a work-group as a loop and pay for every barrier per work-item).
 * No barrier and no local memory; the later passes find the row in the cache when it fits.
 * One exp per element: pass 1 finds the max, pass 2 sums exp(s - m) (and, for float32
 * softmax, keeps it in out), pass 3 scales out (or writes s - m - log d, or recomputes the
 * exp for half outputs, which must not be rounded twice). Any work-group size. */
__kernel void FCL_CAT(softmax_rows, FCL_DT)(SM_ROW_ARGS)
{
    const int keep_exp = FCL_CAT(fcl_is_f32, FCL_DT) && !(flags & SM_FLAG_LOG);
    for (ulong r = get_global_id(0); r < rows; r += get_global_size(0)) {
        __global const FCL_T *in_row = in + r * in_stride;
        const sm_row row = softmax_row(r);
        __global FCL_T *out_row = out + r * out_stride;
        floatv mv = -INFINITY;
        float m = -INFINITY;
        ulong j = 0;
        for (; j + FCL_VEC <= cols; j += FCL_VEC)
            mv = fmax(mv, sm_score_vec(FCL_VLOAD(in_row, j), scale, row, j, flags));
        for (; j < cols; j++)
            m = fmax(m, sm_score(FCL_LOAD(in_row, j), scale, row, j, flags));
        m = fmax(m, fcl_hmax(mv)); /* NaN never becomes the max; it turns d into NaN */
        const float shift = m == -INFINITY ? 0.0f : m;

        floatv dv = 0.0f, cv = 0.0f;
        float d = 0.0f, comp = 0.0f;
        for (j = 0; j + FCL_VEC <= cols; j += FCL_VEC) {
            floatv e = exp(sm_score_vec(FCL_VLOAD(in_row, j), scale, row, j, flags) - shift);
            if (keep_exp)
                FCL_VSTORE(out_row, j, e);
            fcl_kahan_add_vec(&dv, &cv, e);
        }
        for (; j < cols; j++) {
            float e = exp(sm_score(FCL_LOAD(in_row, j), scale, row, j, flags) - shift);
            if (keep_exp)
                FCL_STORE(out_row, j, e);
            fcl_kahan_add(&d, &comp, e);
        }
        fcl_row_norm n = sm_row_norm(fcl_stat_lanes(m, d, comp, dv, cv), row, flags);
        if (flags & SM_FLAG_LSE)
            lse[r] = n.lse;
        if (!keep_exp) {
            FCL_CAT(softmax_write, FCL_DT)(in_row, row, out_row, 0, FCL_VEC, cols, scale,
                                           flags, n);
            continue;
        }
        const float factor = sm_kept_factor(shift, m != -INFINITY, n);
        for (j = 0; j + FCL_VEC <= cols; j += FCL_VEC)
            FCL_VSTORE(out_row, j, FCL_VLOAD(out_row, j) * factor);
        for (; j < cols; j++)
            FCL_STORE(out_row, j, FCL_LOAD(out_row, j) * factor);
    }
}

/* SPLIT, step 1: work-group g handles slice g % slices of row g / slices and writes that
 * slice's (m, d) to partial[g]. */
FCL_KERNEL(softmax_split_stats)(SM_ROW_ARGS, ulong slices, ulong slice_cols,
                                __global float2 *partial)
{
    __local float2 scratch[FCL_LWS];
    for (ulong g = get_group_id(0); g < rows * slices; g += get_num_groups(0)) {
        ulong r = g / slices, begin = (g % slices) * slice_cols;
        ulong end = min(cols, begin + slice_cols);
        float2 st = FCL_CAT(softmax_stats, FCL_DT)(in + r * in_stride, softmax_row(r),
                                                   FCL_FIRST(begin), FCL_STEP, end, scale, flags);
        st = fcl_stat_reduce(st, scratch);
        if (get_local_id(0) == 0)
            partial[g] = st;
    }
}

/* SPLIT, step 2: each work-group merges all partial states of its row, then writes its
 * own slice. The group holding slice 0 writes the row's lse. */
FCL_KERNEL(softmax_split_write)(SM_ROW_ARGS, ulong slices, ulong slice_cols,
                                __global const float2 *partial)
{
    __local float2 scratch[FCL_LWS];
    for (ulong g = get_group_id(0); g < rows * slices; g += get_num_groups(0)) {
        ulong r = g / slices, slice = g % slices, begin = slice * slice_cols;
        float2 st = (float2)(-INFINITY, 0.0f);
        for (ulong k = get_local_id(0); k < slices; k += FCL_LWS)
            st = fcl_stat_merge(st, partial[r * slices + k]);
        const sm_row row = softmax_row(r);
        fcl_row_norm n = sm_row_norm(fcl_stat_reduce(st, scratch), row, flags);
        if (slice == 0 && get_local_id(0) == 0 && (flags & SM_FLAG_LSE))
            lse[r] = n.lse;
        FCL_CAT(softmax_write, FCL_DT)(in + r * in_stride, row,
                                       out + r * out_stride, FCL_FIRST(begin), FCL_STEP,
                                       min(cols, begin + slice_cols), scale, flags, n);
    }
}

#undef FCL_T
#undef FCL_LOAD
#undef FCL_STORE
#undef FCL_VLOAD
#undef FCL_VSTORE
#undef FCL_FIRST
#undef FCL_STEP
#undef FCL_BATCH
#undef FCL_BATCH_FITS
#undef FCL_KERNEL

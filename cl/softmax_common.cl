/* What every softmax kernel shares, whatever its storage type: the argument list (from
 * softmax_args.h), where a row's mask, slope and sink are (softmax_row), the score of an
 * element, and its normalised output. Compiled once, after common.cl; softmax.cl follows
 * once per storage type. */

enum { SM_FLAGS(SM_FLAG_ENUM_ENTRY) };

/* Every softmax kernel's first arguments (SM_ARGS); FCL_T is the storage type of the
 * softmax.cl copy that expands it. */
#define SM_ARG_IN __global const FCL_T *
#define SM_ARG_OUT __global FCL_T *
#define SM_ARG_MASK __global const void *
#define SM_ARG_F32_IN __global const float *
#define SM_ARG_F32_OUT __global float *
#define SM_ARG_U32 uint
#define SM_ARG_U64 ulong
#define SM_ARG_F32 float
#define SM_ARG(kind, name) SM_ARG_##kind name,
#define SM_ARG_LAST(kind, name) SM_ARG_##kind name
#define SM_ROW_ARGS SM_ARGS(SM_ARG, SM_ARG_LAST)

/* What row r adds to its scores and its denominator. */
typedef struct {
    __global const uchar *mask; /* the row's mask (float32 or float16 by flag) */
    float slope;                /* mask multiplier: ALiBi's slope(h(r)), else 1 */
    float sink;                 /* extra logit of h(r); -inf: none */
} sm_row;

FCL_INLINE sm_row softmax_row_of(ulong r, __global const void *mask, ulong mask_stride, ulong mask_rows,
                      __global const float *sinks, __global const float *alibi_slopes,
                      ulong heads, ulong head_rows, uint flags)
{
    sm_row row;
    /* Divisions only where a feature needs them: a row's own work can be as little as 16
     * elements a work-item. mask_rows is rows when each row has its own mask row. */
    ulong mask_row = 0, h = 0;
    if ((flags & SM_FLAG_MASK) && mask_rows > 1)
        mask_row = r < mask_rows ? r : fcl_mod(r, mask_rows);
    const ulong elem = (flags & SM_FLAG_MASK_F16) ? 2 : 4;
    row.mask = (__global const uchar *)mask + mask_row * mask_stride * elem;
    if (flags & (SM_FLAG_SINKS | SM_FLAG_ALIBI_MASK)) /* the host requires heads with either */
        h = fcl_mod(fcl_div(r, head_rows), heads);
    row.slope = (flags & SM_FLAG_ALIBI_MASK) ? alibi_slopes[h] : 1.0f;
    row.sink = (flags & SM_FLAG_SINKS) ? sinks[h] : -INFINITY;
    return row;
}

/* softmax_row(r) inside a kernel: its arguments are the kernel's own (SM_ROW_ARGS). */
#define softmax_row(r)                                                                         \
    softmax_row_of((r), mask, mask_stride, mask_rows, sinks, alibi_slopes, heads, head_rows, flags)

/* What the mask adds to element j's score: mask, or slope * mask (a -inf entry stays -inf:
 * with a slope of 0 it would become NaN). */
FCL_INLINE float sm_mask(sm_row row, ulong j, uint flags)
{
    const float m = (flags & SM_FLAG_MASK_F16) ? vload_half(j, (__global const half *)row.mask)
                                               : ((__global const float *)row.mask)[j];
    return (flags & SM_FLAG_ALIBI_MASK) && m != -INFINITY ? row.slope * m : m;
}

FCL_INLINE floatv sm_mask_vec(sm_row row, ulong j, uint flags)
{
    const floatv m = (flags & SM_FLAG_MASK_F16)
                         ? FCL_PASTE(vload_half, FCL_VEC)(0, (__global const half *)row.mask + j)
                         : FCL_VLOADN(0, (__global const float *)row.mask + j);
    if (!(flags & SM_FLAG_ALIBI_MASK))
        return m;
    return select(row.slope * m, m, m == (floatv)(-INFINITY));
}

/* The score of element j: scale * x + the mask's share. One function (scalar and vector) so
 * that every pass of every algorithm rounds it identically. */
FCL_INLINE float sm_score(float x, float scale, sm_row row, ulong j, uint flags)
{
    const float s = scale * x;
    return (flags & SM_FLAG_MASK) ? s + sm_mask(row, j, flags) : s;
}

FCL_INLINE floatv sm_score_vec(floatv x, float scale, sm_row row, ulong j, uint flags)
{
    const floatv s = scale * x;
    return (flags & SM_FLAG_MASK) ? s + sm_mask_vec(row, j, flags) : s;
}

/* A row's normalisation from its final state (m, d), the sink joining the denominator. */
FCL_INLINE fcl_row_norm sm_row_norm(float2 st, sm_row row, uint flags)
{
    if (flags & SM_FLAG_SINKS)
        st = fcl_stat_merge(st, fcl_sink_state(row.sink));
    return fcl_row_norm_from(st);
}

/* The factor that turns exp(s - shift), kept from before the sink joined, into out: inv_d
 * under the final max. A row that kept only zeros (its max was -inf) gets 0 * inv_d: 0, or
 * NaN for a NaN row, never exp(-shift) overflowing to inf. */
float sm_kept_factor(float shift, int kept_any, fcl_row_norm n)
{
    return (kept_any ? exp(shift - n.shift) : 0.0f) * n.inv_d;
}

float sm_normalize(float s, fcl_row_norm n, uint flags)
{
    if (flags & SM_FLAG_LOG)
        return n.empty ? -INFINITY : (s - n.shift) - n.log_d;
    return exp(s - n.shift) * n.inv_d;
}

floatv sm_normalize_vec(floatv s, fcl_row_norm n, uint flags)
{
    if (flags & SM_FLAG_LOG)
        return n.empty ? (floatv)(-INFINITY) : (s - n.shift) - n.log_d;
    return exp(s - n.shift) * n.inv_d;
}

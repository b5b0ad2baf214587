/* Attention descriptors: validation, defaults, and resolution into the one addressing form
 * every attention kernel uses (fcl_attention_params, cl/attention_args.h). Views, packed
 * (varlen) and paged sequences and the score modifiers are all settled here, once; the
 * kernels never branch on where the data came from beyond the helpers of
 * attention_common.cl. */
#include "internal.h"

#include <math.h>
#include <string.h>

/* Window sides beyond this are unbounded: the kernels add them to signed 64-bit positions. */
#define WINDOW_CAP ((size_t)1 << 62)
#define INT32_LIMIT ((size_t)INT32_MAX)

static fcl_status check_shape(fcl_context *ctx, fcl_attention_desc *d)
{
    if (d->batch == 0 || d->heads_q == 0 || d->len_q == 0 || d->len_kv == 0)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "batch (%zu), heads_q (%zu), len_q (%zu) and len_kv (%zu) must all be at "
                        "least 1 (they are capacities: sequences may be shorter, even empty)",
                        d->batch, d->heads_q, d->len_q, d->len_kv);
    if (d->len_q > INT32_LIMIT || d->len_kv > INT32_LIMIT || d->batch > INT32_LIMIT ||
        d->heads_q > INT32_LIMIT)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "batch (%zu), heads_q (%zu), len_q (%zu) and len_kv (%zu) must be at most "
                        "%zu (the index buffers are int32)",
                        d->batch, d->heads_q, d->len_q, d->len_kv, INT32_LIMIT);
    if (d->heads_kv == 0)
        d->heads_kv = d->heads_q;
    if (d->heads_q % d->heads_kv != 0)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "heads_kv (%zu) must divide heads_q (%zu) (GQA/MQA group a whole number "
                        "of query heads per kv head)",
                        d->heads_kv, d->heads_q);
    if (d->head_dim_v == 0)
        d->head_dim_v = d->head_dim;
    if (d->head_dim == 0 || d->head_dim > FCL_ATTENTION_MAX_HEAD_DIM)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "head_dim (%zu) must be between 1 and %d",
                        d->head_dim, FCL_ATTENTION_MAX_HEAD_DIM);
    if (d->head_dim_v > FCL_ATTENTION_MAX_HEAD_DIM_V)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "head_dim_v (%zu) must be between 1 and %d", d->head_dim_v,
                        FCL_ATTENTION_MAX_HEAD_DIM_V);
    if (d->kv_splits > FA_MAX_SPLITS)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "kv_splits (%zu) must be at most %d",
                        d->kv_splits, FA_MAX_SPLITS);
    return FCL_SUCCESS;
}

static fcl_status check_options(fcl_context *ctx, fcl_attention_desc *d)
{
    if (!isfinite(d->scale))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "scale (%g) must be finite",
                        (double)d->scale);
    if (d->scale == 0.0f)
        d->scale = (float)(1.0 / sqrt((double)d->head_dim));
    if (!isfinite(d->softcap) || d->softcap < 0.0f)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "softcap (%g) must be 0 (none) or finite and positive", (double)d->softcap);
    if ((unsigned)d->causal > FCL_CAUSAL_BOTTOM_RIGHT)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "causal (%u) is not an fcl_causal",
                        (unsigned)d->causal);
    if ((unsigned)d->precision > FCL_PRECISION_TF32)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "precision (%u) is not an fcl_precision",
                        (unsigned)d->precision);
    if ((unsigned)d->mask_type > FCL_MASK_ADD_F16)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "mask_type (%u) is not an fcl_mask_type",
                        (unsigned)d->mask_type);
    if ((unsigned)d->layout > FCL_LAYOUT_BLHD)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "layout (%u) is not an fcl_layout",
                        (unsigned)d->layout);
    const fcl_dtype types[3] = {d->dtype_q, d->dtype_kv, d->dtype_o};
    const char *names[3] = {"dtype_q", "dtype_kv", "dtype_o"};
    for (int i = 0; i < 3; i++)
        if ((unsigned)types[i] > FCL_DTYPE_BF16)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "%s (%d) is not FCL_DTYPE_F32, FCL_DTYPE_F16 or FCL_DTYPE_BF16",
                            names[i], (int)types[i]);
    if (d->mask_type != FCL_MASK_NONE && d->mask_stride_q && d->mask_stride_q < d->len_kv)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "mask_stride_q (%zu) is smaller than len_kv (%zu): mask rows would overlap",
                        d->mask_stride_q, d->len_kv);
    return FCL_SUCCESS;
}

/* The optional buffers agree with the descriptor: each feature has what it needs. */
static fcl_status check_features(fcl_context *ctx, const fcl_attention_desc *d,
                                 const fcl_attention_given *g)
{
    if ((d->mask_type != FCL_MASK_NONE) != g->mask)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        g->mask ? "a mask was given but mask_type is FCL_MASK_NONE"
                                : "mask is NULL but mask_type is set");
    if (g->seqlens_kv && g->cu_seqlens_kv)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "seqlens_kv and cu_seqlens_kv are both given: give one");
    if (g->leftpad_kv && (d->page_size || g->cu_seqlens_kv))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "leftpad_kv is given with %s K/V: it takes contiguous or strided K/V",
                        d->page_size ? "paged" : "packed (cu_seqlens_kv)");
    if (d->page_size == 0 && g->block_table)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "a block_table was given but page_size is 0 (K/V not paged)");
    if (d->page_size) {
        size_t pages_per_seq = (d->len_kv + d->page_size - 1) / d->page_size;
        if (!g->block_table)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "page_size is %zu but block_table is NULL", d->page_size);
        if (g->cu_seqlens_kv)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "paged K/V takes seqlens_kv, not cu_seqlens_kv");
        if (d->num_pages == 0 || d->num_pages > INT32_LIMIT || d->page_size > INT32_LIMIT ||
            d->block_table_stride > INT32_LIMIT)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "num_pages (%zu) must be between 1 and %zu for paged K/V, and "
                            "page_size (%zu) and block_table_stride (%zu) at most that",
                            d->num_pages, INT32_LIMIT, d->page_size, d->block_table_stride);
        if (d->block_table_stride < pages_per_seq)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "block_table_stride (%zu) is smaller than the %zu pages len_kv (%zu) "
                            "takes at page_size %zu",
                            d->block_table_stride, pages_per_seq, d->len_kv, d->page_size);
    }
    if (d->alibi_from_mask && !g->alibi_slopes)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "alibi_from_mask is set but alibi_slopes is NULL");
    if (d->alibi_from_mask && d->mask_type != FCL_MASK_ADD_F32 && d->mask_type != FCL_MASK_ADD_F16)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "alibi_from_mask needs an additive mask (mask_type FCL_MASK_ADD_F32 or "
                        "FCL_MASK_ADD_F16)");
    if (g->alibi_slopes && !d->alibi_from_mask && d->len_q + d->len_kv > INT32_LIMIT)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "with ALiBi distances, len_q + len_kv (%zu + %zu) must be at most %zu: "
                        "the kernels hold query-key distances in 32 bits",
                        d->len_q, d->len_kv, INT32_LIMIT);
    if (d->alibi_slopes_batch_stride > INT32_LIMIT)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "alibi_slopes_batch_stride (%zu) must be at most %zu",
                        d->alibi_slopes_batch_stride, INT32_LIMIT);
    if (d->alibi_slopes_batch_stride && d->alibi_slopes_batch_stride < d->heads_q)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "alibi_slopes_batch_stride (%zu) is smaller than heads_q (%zu): slope "
                        "rows would overlap",
                        d->alibi_slopes_batch_stride, d->heads_q);
    return FCL_SUCCESS;
}

/* ---- K and V formats and scales (v0.3) ---- */

int fcl_attention_kv_coded(const fcl_attention_desc *d)
{
    const unsigned fk = d->format_k ? (unsigned)d->format_k : fcl_format_of_dtype(d->dtype_kv);
    const unsigned fv = d->format_v ? (unsigned)d->format_v : fcl_format_of_dtype(d->dtype_kv);
    const fcl_format_traits *t = fcl_format(fk);
    return fk != fv || !t || !(t->roles & FCL_ROLE_FLOAT) || d->scale_mode_k || d->scale_mode_v;
}

int fcl_kv_scale_has_buffer(fcl_kv_scale mode)
{
    return mode == FCL_KV_SCALE_HEAD || mode == FCL_KV_SCALE_TOKEN;
}

fcl_status fcl_check_kv_coding(fcl_context *ctx, const char *x, fcl_kv_format *format,
                               fcl_dtype dtype, const char *dim_name, size_t dim,
                               fcl_kv_scale mode, float scale, int has_scales)
{
    if ((unsigned)*format > FCL_KV_FORMAT_MAX)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "format_%s (%u) is not an fcl_kv_format",
                        x, (unsigned)*format);
    if (*format == FCL_KV_FORMAT_DTYPE)
        *format = (fcl_kv_format)fcl_format_of_dtype(dtype);
    const fcl_format_traits *f = fcl_format(*format);
    if (dim % f->elems)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "format_%s %s holds %zu values a block: %s (%zu) must be a multiple of %zu",
                        x, f->name, f->elems, dim_name, dim, f->elems);
    if ((unsigned)mode > FCL_KV_SCALE_TOKEN)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "scale_mode_%s (%u) is not an fcl_kv_scale",
                        x, (unsigned)mode);
    if (!isfinite(scale) || (scale != 0.0f && mode != FCL_KV_SCALE_TENSOR))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s_scale (%g) must be finite, and 0 unless scale_mode_%s is "
                        "FCL_KV_SCALE_TENSOR",
                        x, (double)scale, x);
    if (fcl_kv_scale_has_buffer(mode) != has_scales)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        has_scales ? "%s_scales was given but scale_mode_%s is neither "
                                     "FCL_KV_SCALE_HEAD nor FCL_KV_SCALE_TOKEN"
                                   : "%s_scales is NULL but scale_mode_%s needs it",
                        x, x);
    return FCL_SUCCESS;
}

/* One of K's or V's coding: its format (0 becomes dtype_kv's) with the head dim it needs, and
 * its scale mode with what that mode needs and nothing it does not. */
typedef struct kv_side {
    const char *x;          /* "k" or "v" */
    fcl_kv_format *format;
    fcl_kv_scale mode;
    float scale;
    size_t dim, batch_stride;
    const fcl_tensor_view *scales_view;
    int has_scales;         /* io's k_scales / v_scales */
} kv_side;

static int view_is_zero(const fcl_tensor_view *v)
{
    return !v->offset && !v->batch_stride && !v->head_stride && !v->token_stride;
}

static fcl_status check_kv_side(fcl_context *ctx, const fcl_attention_desc *d, kv_side x,
                                int packed)
{
    fcl_status s = fcl_check_kv_coding(ctx, x.x, x.format, d->dtype_kv,
                                       *x.x == 'v' ? "head_dim_v" : "head_dim", x.dim, x.mode,
                                       x.scale, x.has_scales);
    if (s != FCL_SUCCESS)
        return s;
    if (x.batch_stride && x.mode != FCL_KV_SCALE_HEAD)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s_scales_batch_stride (%zu) is set but scale_mode_%s is not "
                        "FCL_KV_SCALE_HEAD",
                        x.x, x.batch_stride, x.x);
    if (x.mode == FCL_KV_SCALE_HEAD && x.batch_stride && x.batch_stride < d->heads_kv)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s_scales_batch_stride (%zu) is smaller than heads_kv (%zu): scale rows "
                        "would overlap",
                        x.x, x.batch_stride, d->heads_kv);
    if (!view_is_zero(x.scales_view) && x.mode != FCL_KV_SCALE_TOKEN)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s_scales_view is set but scale_mode_%s is not FCL_KV_SCALE_TOKEN", x.x, x.x);
    if (x.mode == FCL_KV_SCALE_TOKEN && packed && !x.scales_view->batch_stride &&
        !x.scales_view->head_stride && !x.scales_view->token_stride)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s_scales_view needs strides with cu_seqlens_kv (packed K/V have no "
                        "default scale layout)", x.x);
    return FCL_SUCCESS;
}

/* A ggml format's blocks are 2-byte aligned: the view's offset and strides (bytes) even. */
static fcl_status check_kv_alignment(fcl_context *ctx, const char *x, unsigned format,
                                     const fcl_tensor_view *v)
{
    const fcl_format_traits *f = fcl_format(format);
    if (!(f->roles & FCL_ROLE_GGML))
        return FCL_SUCCESS;
    const size_t at[4] = {v->offset, v->batch_stride, v->head_stride, v->token_stride};
    const char *names[4] = {"offset", "batch_stride", "head_stride", "token_stride"};
    for (int i = 0; i < 4; i++)
        if (at[i] % 2)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "%s_view.%s (%zu bytes) is odd: %s blocks are 2-byte aligned", x,
                            names[i], at[i], f->name);
    return FCL_SUCCESS;
}

/* A TOKEN scales view: zero strides are [page or batch][heads][tokens]. */
static fcl_tensor_view resolve_scales_view(fcl_tensor_view v, int packed, size_t heads,
                                           size_t tokens)
{
    if (!v.batch_stride && !v.head_stride && !v.token_stride) {
        v.batch_stride = heads * tokens;
        v.head_stride = tokens;
        v.token_stride = 1;
    }
    if (packed)
        v.batch_stride = 0;
    return v;
}

/* A view whose strides are all 0 takes them from the layout: for `tokens` tokens per batch
 * entry (per page when paged), or [total][heads][dim] when packed. A packed view's batch
 * stride is ignored (0). */
fcl_tensor_view fcl_view_resolve(fcl_tensor_view v, fcl_layout layout, int packed, size_t heads,
                                 size_t tokens, size_t dim)
{
    if (!v.batch_stride && !v.head_stride && !v.token_stride) {
        int bhld = layout == FCL_LAYOUT_BHLD && !packed;
        v.batch_stride = heads * tokens * dim;
        v.head_stride = bhld ? tokens * dim : dim;
        v.token_stride = bhld ? dim : heads * dim;
    }
    if (packed)
        v.batch_stride = 0;
    return v;
}

fcl_status fcl_kv_views_resolve(fcl_context *ctx, const char *x, unsigned format, fcl_kv_scale mode,
                                size_t dim, fcl_layout layout, int packed, size_t heads,
                                size_t tokens, fcl_tensor_view *view, fcl_tensor_view *scales_view)
{
    *view = fcl_view_resolve(*view, layout, packed, heads, tokens, fcl_format_row_units(format, dim));
    if (mode == FCL_KV_SCALE_TOKEN)
        *scales_view = resolve_scales_view(*scales_view, packed, heads, tokens);
    return check_kv_alignment(ctx, x, format, view);
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

fcl_status fcl_attention_resolve(fcl_context *ctx, const fcl_attention_desc *desc,
                                 const fcl_attention_given *given, fcl_attention_problem *pr)
{
    if (!desc)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "the attention descriptor is NULL");
    fcl_attention_desc d = *desc;
    fcl_status s = check_shape(ctx, &d);
    if (s == FCL_SUCCESS)
        s = check_options(ctx, &d);
    if (s == FCL_SUCCESS)
        s = check_features(ctx, &d, given);
    if (s != FCL_SUCCESS)
        return s;
    const int packed_kv = given->cu_seqlens_kv;
    const kv_side sides[2] = {
        {"k", &d.format_k, d.scale_mode_k, d.k_scale, d.head_dim, d.k_scales_batch_stride,
         &d.k_scales_view, given->k_scales},
        {"v", &d.format_v, d.scale_mode_v, d.v_scale, d.head_dim_v, d.v_scales_batch_stride,
         &d.v_scales_view, given->v_scales}};
    for (int i = 0; i < 2 && s == FCL_SUCCESS; i++)
        s = check_kv_side(ctx, &d, sides[i], packed_kv);
    if (s != FCL_SUCCESS)
        return s;
    const int coded = fcl_attention_kv_coded(&d);
    if (!coded)
        d.dtype_kv = (fcl_dtype)fcl_format(d.format_k)->dtype;
    const int paged = d.page_size > 0;
    const size_t kv_tokens = paged ? d.page_size : d.len_kv;
    d.q_view = fcl_view_resolve(d.q_view, d.layout, given->cu_seqlens_q, d.heads_q, d.len_q, d.head_dim);
    d.o_view = fcl_view_resolve(d.o_view, d.layout, given->cu_seqlens_q, d.heads_q, d.len_q, d.head_dim_v);
    s = fcl_kv_views_resolve(ctx, "k", d.format_k, d.scale_mode_k, d.head_dim, d.layout, packed_kv,
                             d.heads_kv, kv_tokens, &d.k_view, &d.k_scales_view);
    if (s == FCL_SUCCESS)
        s = fcl_kv_views_resolve(ctx, "v", d.format_v, d.scale_mode_v, d.head_dim_v, d.layout,
                                 packed_kv, d.heads_kv, kv_tokens, &d.v_view, &d.v_scales_view);
    if (s != FCL_SUCCESS)
        return s;
    /* Without query_offsets a query's position p(i) = i + L_kv(b) - L_q(b) is at most
     * L_kv(b) - 1 - (L_q(b) - 1 - i): a window reaching len_q - 1 keys past it reaches the
     * last key, as any wider one does. So cut, the window keeps its keys and tells the
     * planner how many a block of queries may see (plan.c's visible_span: decoding with an
     * unbounded right side, for one, then splits the window's keys, not the cache's). */
    if (d.window && !given->query_offsets)
        d.window_right = min_size(d.window_right, d.len_q - 1);
    pr->d = d;

    fcl_attention_params *p = &pr->params;
    memset(p, 0, sizeof *p);
    p->flags = (d.mask_type == FCL_MASK_ADD_F32 ? FA_FLAG_MASK_ADD : 0) |
               (d.mask_type == FCL_MASK_ADD_F16 ? FA_FLAG_MASK_ADD_F16 : 0) |
               (d.mask_type == FCL_MASK_BOOL_U8 ? FA_FLAG_MASK_BOOL : 0) |
               (d.causal != FCL_CAUSAL_NONE ? FA_FLAG_CAUSAL : 0) |
               (d.causal == FCL_CAUSAL_BOTTOM_RIGHT ? FA_FLAG_BOTTOM_RIGHT : 0) |
               (d.window ? FA_FLAG_WINDOW : 0) | (d.softcap > 0.0f ? FA_FLAG_SOFTCAP : 0) |
               (given->alibi_slopes ? (d.alibi_from_mask ? FA_FLAG_ALIBI_MASK : FA_FLAG_ALIBI) : 0) |
               (given->sinks ? FA_FLAG_SINKS : 0) | (given->seqlens_kv ? FA_FLAG_SEQLENS_KV : 0) |
               (given->cu_seqlens_q ? FA_FLAG_CU_Q : 0) |
               (given->cu_seqlens_kv ? FA_FLAG_CU_KV : 0) | (paged ? FA_FLAG_PAGED : 0) |
               (given->lse ? FA_FLAG_LSE : 0) | (coded ? FA_FLAG_KV : 0) |
               (d.scale_mode_k == FCL_KV_SCALE_HEAD ? FA_FLAG_K_HEAD_SCALES : 0) |
               (d.scale_mode_v == FCL_KV_SCALE_HEAD ? FA_FLAG_V_HEAD_SCALES : 0) |
               (d.scale_mode_k == FCL_KV_SCALE_TOKEN ? FA_FLAG_K_TOKEN_SCALES : 0) |
               (d.scale_mode_v == FCL_KV_SCALE_TOKEN ? FA_FLAG_V_TOKEN_SCALES : 0) |
               (given->leftpad_kv ? FA_FLAG_LEFTPAD_KV : 0) |
               (given->query_offsets ? FA_FLAG_QUERY_OFFSETS : 0);
    p->dtype_q = d.dtype_q;
    p->dtype_kv = d.dtype_kv;
    p->dtype_o = d.dtype_o;
    p->batch = d.batch;
    p->heads_q = d.heads_q;
    p->group = d.heads_q / d.heads_kv;
    p->len_q = d.len_q;
    p->len_kv = d.len_kv;
    p->head_dim = d.head_dim;
    p->head_dim_v = d.head_dim_v;
#define FCL_SET_VIEW(x)                                                                        \
    (p->x##_offset = d.x##_view.offset, p->x##_batch = d.x##_view.batch_stride,                \
     p->x##_head = d.x##_view.head_stride, p->x##_token = d.x##_view.token_stride)
    FCL_SET_VIEW(q);
    FCL_SET_VIEW(k);
    FCL_SET_VIEW(v);
    FCL_SET_VIEW(o);
#undef FCL_SET_VIEW
    p->mask_batch = d.mask_stride_batch;
    p->mask_head = d.mask_stride_head;
    p->mask_q = d.mask_stride_q;
    p->page_size = d.page_size;
    p->num_pages = d.num_pages;
    p->block_table_stride = d.block_table_stride;
    p->alibi_batch = d.alibi_slopes_batch_stride;
    p->window_left = min_size(d.window_left, WINDOW_CAP);
    p->window_right = min_size(d.window_right, WINDOW_CAP);
    /* With softcap the kernels compute softcap * tanh(q_scale * q.k). */
    p->q_scale = d.softcap > 0.0f ? d.scale / d.softcap : d.scale;
    p->softcap = d.softcap;
    p->format_k = d.format_k;
    p->format_v = d.format_v;
    p->k_scale = d.k_scale != 0.0f ? d.k_scale : 1.0f; /* TENSOR's, 0 = 1 (else 0) */
    p->v_scale = d.v_scale != 0.0f ? d.v_scale : 1.0f;
    /* HEAD scales: b * stride + h; TOKEN scales: their view. */
    p->ks_batch = d.k_scales_batch_stride;
    p->vs_batch = d.v_scales_batch_stride;
    if (d.scale_mode_k == FCL_KV_SCALE_TOKEN)
        (p->ks_offset = d.k_scales_view.offset, p->ks_batch = d.k_scales_view.batch_stride,
         p->ks_head = d.k_scales_view.head_stride, p->ks_token = d.k_scales_view.token_stride);
    if (d.scale_mode_v == FCL_KV_SCALE_TOKEN)
        (p->vs_offset = d.v_scales_view.offset, p->vs_batch = d.v_scales_view.batch_stride,
         p->vs_head = d.v_scales_view.head_stride, p->vs_token = d.v_scales_view.token_stride);
    return FCL_SUCCESS;
}

/* ---- extents ---- */

/* *acc += n * stride, 0 (failure) on overflow. */
static int add_product(size_t *acc, size_t n, size_t stride)
{
    if (stride && n > (SIZE_MAX - *acc) / stride)
        return 0;
    *acc += n * stride;
    return 1;
}

/* a * b, SIZE_MAX on overflow. */
static size_t product(size_t a, size_t b)
{
    size_t p = 0;
    return add_product(&p, a, b) ? p : SIZE_MAX;
}

/* Elements from the buffer start to one past the last element of a view with `outer` batch
 * entries (or pages), `heads` heads and `tokens` tokens each; 0 when it has no row, SIZE_MAX
 * when that overflows. */
size_t fcl_view_extent(const fcl_tensor_view *v, size_t outer, size_t heads, size_t tokens,
                       size_t dim)
{
    if (!outer || !heads || !tokens)
        return 0;
    size_t e = v->offset;
    if (!add_product(&e, 1, dim) || !add_product(&e, outer - 1, v->batch_stride) ||
        !add_product(&e, heads - 1, v->head_stride) || !add_product(&e, tokens - 1, v->token_stride))
        return SIZE_MAX;
    return e;
}

/* The floats K's or V's scales reach: a row of heads_kv a sequence (HEAD), or their view
 * over every page or sequence (TOKEN); 0 without. */
static size_t scales_extent(fcl_kv_scale mode, const fcl_tensor_view *v, size_t batch_stride,
                            const fcl_attention_desc *d, size_t outer, size_t tokens)
{
    size_t e = d->heads_kv;
    if (mode == FCL_KV_SCALE_HEAD)
        return add_product(&e, d->batch - 1, batch_stride) ? e : SIZE_MAX;
    return mode == FCL_KV_SCALE_TOKEN ? fcl_view_extent(v, outer, d->heads_kv, tokens, 1) : 0;
}

static size_t mask_extent(const fcl_attention_desc *d)
{
    size_t e = 0;
    if (!add_product(&e, 1, d->len_kv) || !add_product(&e, d->batch - 1, d->mask_stride_batch) ||
        !add_product(&e, d->heads_q - 1, d->mask_stride_head) ||
        !add_product(&e, d->len_q - 1, d->mask_stride_q))
        return SIZE_MAX;
    return e;
}

fcl_status fcl_attention_extents_of(fcl_context *ctx, const fcl_attention_problem *pr,
                                    size_t total_q, size_t total_kv, fcl_attention_extents *e)
{
    const fcl_attention_desc *d = &pr->d;
    const cl_uint f = pr->params.flags;
    const int packed_q = (f & FA_FLAG_CU_Q) != 0, packed_kv = (f & FA_FLAG_CU_KV) != 0;
    const size_t outer_q = packed_q ? 1 : d->batch, tokens_q = packed_q ? total_q : d->len_q;
    size_t outer_kv = d->batch, tokens_kv = d->len_kv;
    if (f & FA_FLAG_PAGED)
        outer_kv = d->num_pages, tokens_kv = d->page_size;
    else if (packed_kv)
        outer_kv = 1, tokens_kv = total_kv;
    memset(e, 0, sizeof *e);
    e->q = fcl_view_extent(&d->q_view, outer_q, d->heads_q, tokens_q, d->head_dim);
    e->out = fcl_view_extent(&d->o_view, outer_q, d->heads_q, tokens_q, d->head_dim_v);
    e->k = fcl_view_extent(&d->k_view, outer_kv, d->heads_kv, tokens_kv,
                       fcl_format_row_units(d->format_k, d->head_dim));
    e->v = fcl_view_extent(&d->v_view, outer_kv, d->heads_kv, tokens_kv,
                       fcl_format_row_units(d->format_v, d->head_dim_v));
    e->k_scales = scales_extent(d->scale_mode_k, &d->k_scales_view, d->k_scales_batch_stride, d,
                                outer_kv, tokens_kv);
    e->v_scales = scales_extent(d->scale_mode_v, &d->v_scales_view, d->v_scales_batch_stride, d,
                                outer_kv, tokens_kv);
    e->mask = d->mask_type != FCL_MASK_NONE ? mask_extent(d) : 0;
    e->lse = packed_q ? product(d->heads_q, total_q) : product(product(d->batch, d->heads_q), d->len_q);
    e->seqlens_kv = d->batch;
    e->cu_seqlens = d->batch + 1;
    e->block_table = product(d->batch, d->block_table_stride);
    e->alibi_slopes = d->heads_q;
    if (d->alibi_slopes_batch_stride && !add_product(&e->alibi_slopes, d->batch - 1,
                                                     d->alibi_slopes_batch_stride))
        e->alibi_slopes = SIZE_MAX;
    e->sinks = d->heads_q;
    const size_t all[] = {e->q,    e->out,         e->k,           e->v,        e->mask,
                          e->lse, e->block_table, e->alibi_slopes, e->k_scales, e->v_scales};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] == SIZE_MAX || (all[i] && all[i] > SIZE_MAX / 4))
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "batch (%zu) x heads (%zu) x lengths (%zu, %zu) x head dims (%zu, %zu) "
                            "or the view and mask strides overflow the address space",
                            d->batch, d->heads_q, d->len_q, d->len_kv, d->head_dim, d->head_dim_v);
    return FCL_SUCCESS;
}

/* ---- the host call's index arrays ---- */

/* cu[0] = 0, non-decreasing, each sequence at most cap long; *total = cu[batch]. */
static fcl_status check_packed(fcl_context *ctx, const char *name, const int32_t *cu, size_t batch,
                               size_t cap, const char *cap_name, size_t *total)
{
    if (cu[0] != 0)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "%s[0] (%d) must be 0", name, (int)cu[0]);
    for (size_t b = 0; b < batch; b++) {
        if (cu[b + 1] < cu[b])
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "%s[%zu] (%d) is smaller than %s[%zu] (%d): it must not decrease",
                            name, b + 1, (int)cu[b + 1], name, b, (int)cu[b]);
        if ((size_t)(cu[b + 1] - cu[b]) > cap)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "sequence %zu of %s has %lld tokens, more than %s (%zu)", b, name,
                            (long long)cu[b + 1] - cu[b], cap_name, cap);
    }
    *total = (size_t)cu[batch];
    return FCL_SUCCESS;
}

fcl_status fcl_attention_check_indices(fcl_context *ctx, const fcl_attention_problem *pr,
                                       const fcl_attention_host_io *io, size_t *total_q,
                                       size_t *total_kv)
{
    const fcl_attention_desc *d = &pr->d;
    fcl_status s = FCL_SUCCESS;
    *total_q = *total_kv = 0;
    if (io->cu_seqlens_q)
        s = check_packed(ctx, "cu_seqlens_q", io->cu_seqlens_q, d->batch, d->len_q, "len_q", total_q);
    if (s == FCL_SUCCESS && io->cu_seqlens_kv)
        s = check_packed(ctx, "cu_seqlens_kv", io->cu_seqlens_kv, d->batch, d->len_kv, "len_kv",
                         total_kv);
    for (size_t b = 0; s == FCL_SUCCESS && io->seqlens_kv && b < d->batch; b++)
        if (io->seqlens_kv[b] < 0 || (size_t)io->seqlens_kv[b] > d->len_kv)
            s = fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                         "seqlens_kv[%zu] (%d) must be between 0 and len_kv (%zu)", b,
                         (int)io->seqlens_kv[b], d->len_kv);
    for (size_t b = 0; s == FCL_SUCCESS && io->leftpad_kv && b < d->batch; b++) {
        const int32_t len = io->seqlens_kv ? io->seqlens_kv[b] : (int32_t)d->len_kv;
        if (io->leftpad_kv[b] < 0 || io->leftpad_kv[b] > len)
            s = fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                         "leftpad_kv[%zu] (%d) must be between 0 and sequence %zu's length (%d)",
                         b, (int)io->leftpad_kv[b], b, (int)len);
    }
    for (size_t b = 0; s == FCL_SUCCESS && io->query_offsets && io->alibi_slopes && b < d->batch; b++)
        if ((size_t)llabs((long long)io->query_offsets[b]) + d->len_q + d->len_kv > INT32_LIMIT)
            s = fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                         "query_offsets[%zu] (%d) with ALiBi: |offset| + len_q + len_kv must be "
                         "at most %zu",
                         b, (int)io->query_offsets[b], INT32_LIMIT);
    for (size_t b = 0; s == FCL_SUCCESS && d->page_size && b < d->batch; b++) {
        size_t len = io->seqlens_kv ? (size_t)io->seqlens_kv[b] : d->len_kv;
        size_t pages = (len + d->page_size - 1) / d->page_size;
        for (size_t i = 0; i < pages; i++) {
            int32_t page = io->block_table[b * d->block_table_stride + i];
            if (page < 0 || (size_t)page >= d->num_pages)
                return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                                "block_table[%zu] (%d, page %zu of sequence %zu) must be a page "
                                "between 0 and num_pages - 1 (%zu)",
                                b * d->block_table_stride + i, (int)page, i, b, d->num_pages - 1);
        }
    }
    return s;
}

/* ---- overlap ---- */

int fcl_attention_out_overlaps(const fcl_attention_problem *pr, const fcl_attention_extents *e,
                               int input)
{
    const fcl_attention_desc *d = &pr->d;
    const fcl_tensor_view *views[3] = {&d->q_view, &d->k_view, &d->v_view};
    const size_t ends[3] = {e->q, e->k, e->v};
    const size_t in_bytes = input == 0 ? fcl_dtype_size(d->dtype_q)
                                       : fcl_format_unit_bytes(input == 1 ? d->format_k : d->format_v);
    const size_t out_bytes = fcl_dtype_size(d->dtype_o);
    const size_t o_first = d->o_view.offset * out_bytes, o_end = e->out * out_bytes;
    const size_t i_first = views[input]->offset * in_bytes, i_end = ends[input] * in_bytes;
    return o_first < i_end && i_first < o_end;
}

/* ---- GQA decoding as rows of one kv head ---- */

int fcl_attention_gqa_rows(const fcl_attention_problem *pr, fcl_attention_problem *rows)
{
    const fcl_attention_desc *d = &pr->d;
    const fcl_attention_params *p = &pr->params;
    const size_t group = d->heads_q / d->heads_kv;
    /* What the rewrite keeps: the kv side's addressing, softcap, lse, split-KV, masks
     * (their head stride becomes the rows' and the group's: llama.cpp decodes under an f16
     * mask, one row a sequence for every head), and, through FA_FLAG_HEAD_ROWS (the kernels'
     * fa_query_pos and fa_query_head), the window, ALiBi (from the mask too) and sinks
     * (gpt-oss's). The rest that depends on the query's position (top-left causality, query
     * offsets, packed queries) would change meaning. Bottom-right causality shows one query
     * every key of its sequence: it becomes no rule. */
    const cl_uint kept = FA_FLAG_CAUSAL | FA_FLAG_BOTTOM_RIGHT | FA_FLAG_SOFTCAP |
                         FA_FLAG_SEQLENS_KV | FA_FLAG_CU_KV | FA_FLAG_PAGED | FA_FLAG_LSE |
                         FA_FLAG_KV | FA_FLAG_K_HEAD_SCALES | FA_FLAG_V_HEAD_SCALES |
                         FA_FLAG_K_TOKEN_SCALES | FA_FLAG_V_TOKEN_SCALES | FA_FLAG_LEFTPAD_KV |
                         FA_FLAG_MASK_ADD | FA_FLAG_MASK_ADD_F16 | FA_FLAG_MASK_BOOL |
                         FA_FLAG_WINDOW | FA_FLAG_SINKS | FA_FLAG_ALIBI | FA_FLAG_ALIBI_MASK;
    const int top_left = (p->flags & FA_FLAG_CAUSAL) && !(p->flags & FA_FLAG_BOTTOM_RIGHT);
    /* K/V formats: groups of one head too (no other NVIDIA kernel reads them) */
    const size_t least = p->flags & FA_FLAG_KV ? 1 : 2;
    if (d->len_q != 1 || group < least || (p->flags & ~kept) || top_left)
        return 0;
    *rows = *pr;
    /* Query head h = hk * group + j becomes row j of head hk: rows q_head apart, heads
     * group * q_head apart; out likewise. lse's [batch][heads][1] is [batch][heads_kv][group]. */
    rows->d.heads_q = d->heads_kv;
    rows->d.len_q = group;
    rows->d.causal = FCL_CAUSAL_NONE;
    rows->params.flags &= ~(cl_uint)(FA_FLAG_CAUSAL | FA_FLAG_BOTTOM_RIGHT);
    rows->params.flags |= FA_FLAG_HEAD_ROWS;
    rows->params.heads_q = d->heads_kv;
    rows->params.group = 1;
    rows->params.len_q = group;
    rows->params.q_token = p->q_head;
    rows->params.q_head = p->q_head * group;
    rows->params.o_token = p->o_head;
    rows->params.o_head = p->o_head * group;
    rows->params.mask_q = p->mask_head;
    rows->params.mask_head = p->mask_head * group;
    return 1;
}

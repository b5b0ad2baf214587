/* Attention: descriptor validation, planning, and the enqueueing of attention.cl. */
#include "internal.h"

#include <math.h>
#include <string.h>

#define FA_FLAG_MASK_ADD 1u
#define FA_FLAG_MASK_BOOL 2u
#define FA_FLAG_CAUSAL 4u
#define FA_FLAG_LSE 8u
#define FA_FLAG_PARTIAL 16u

/* A validated descriptor with defaults filled in, and the bytes each buffer needs. */
typedef struct attention_shape {
    fcl_attention_desc d;
    size_t q_bytes, k_bytes, v_bytes, out_bytes, lse_bytes, mask_bytes;
} attention_shape;

/* a * b * c * d, or 0 when that overflows size_t. */
static size_t product(size_t a, size_t b, size_t c, size_t d)
{
    size_t factors[4] = {a, b, c, d}, p = 1;
    for (int i = 0; i < 4; i++) {
        if (factors[i] && p > SIZE_MAX / factors[i])
            return 0;
        p *= factors[i];
    }
    return p;
}

/* Elements from the first to one past the last mask element addressed, 0 on overflow. */
static size_t mask_extent(const fcl_attention_desc *d)
{
    size_t last[3] = {d->batch - 1, d->heads_q - 1, d->len_q - 1};
    size_t stride[3] = {d->mask_stride_batch, d->mask_stride_head, d->mask_stride_q};
    size_t extent = d->len_kv;
    for (int i = 0; i < 3; i++) {
        if (stride[i] && last[i] > (SIZE_MAX - extent) / stride[i])
            return 0;
        extent += last[i] * stride[i];
    }
    return extent;
}

static fcl_status invalid(fcl_context *ctx, const char *fmt, size_t value)
{
    return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, fmt, value);
}

static fcl_status check_shape(fcl_context *ctx, fcl_attention_desc *d)
{
    if (d->batch == 0 || d->heads_q == 0 || d->len_q == 0 || d->len_kv == 0)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "batch (%zu), heads_q (%zu), len_q (%zu) and len_kv (%zu) must all be at "
                        "least 1",
                        d->batch, d->heads_q, d->len_q, d->len_kv);
    if (d->heads_kv == 0)
        d->heads_kv = d->heads_q;
    if (d->heads_q % d->heads_kv != 0)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "heads_kv (%zu) must divide heads_q (%zu) (GQA/MQA group a whole number "
                        "of query heads per kv head)",
                        d->heads_kv, d->heads_q);
    if (d->head_dim_v == 0)
        d->head_dim_v = d->head_dim;
    if (d->head_dim == 0 || d->head_dim > 256)
        return invalid(ctx, "head_dim (%zu) must be between 1 and 256", d->head_dim);
    if (d->head_dim_v > 256)
        return invalid(ctx, "head_dim_v (%zu) must be between 1 and 256", d->head_dim_v);
    if (d->kv_splits > FCL_ATTENTION_MAX_SPLITS)
        return invalid(ctx, "kv_splits (%zu) must be at most 256", d->kv_splits);
    return FCL_SUCCESS;
}

static fcl_status check_options(fcl_context *ctx, fcl_attention_desc *d)
{
    if (!isfinite(d->scale))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "scale (%g) must be finite",
                        (double)d->scale);
    if (d->scale == 0.0f)
        d->scale = (float)(1.0 / sqrt((double)d->head_dim));
    if ((unsigned)d->causal > FCL_CAUSAL_BOTTOM_RIGHT)
        return invalid(ctx, "causal (%zu) is not an fcl_causal", (size_t)d->causal);
    if ((unsigned)d->mask_type > FCL_MASK_BOOL_U8)
        return invalid(ctx, "mask_type (%zu) is not an fcl_mask_type", (size_t)d->mask_type);
    if ((unsigned)d->layout > FCL_LAYOUT_BLHD)
        return invalid(ctx, "layout (%zu) is not an fcl_layout", (size_t)d->layout);
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

static fcl_status check_desc(fcl_context *ctx, const fcl_attention_desc *desc, attention_shape *sh)
{
    if (!desc)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "the attention descriptor is NULL");
    fcl_attention_desc d = *desc;
    fcl_status s = check_shape(ctx, &d);
    if (s == FCL_SUCCESS)
        s = check_options(ctx, &d);
    if (s != FCL_SUCCESS)
        return s;
    size_t qn = product(d.batch, d.heads_q, d.len_q, d.head_dim);
    size_t kn = product(d.batch, d.heads_kv, d.len_kv, d.head_dim);
    size_t vn = product(d.batch, d.heads_kv, d.len_kv, d.head_dim_v);
    size_t on = product(d.batch, d.heads_q, d.len_q, d.head_dim_v);
    size_t ln = product(d.batch, d.heads_q, d.len_q, 1);
    size_t mn = d.mask_type == FCL_MASK_NONE ? 1 : mask_extent(&d);
    sh->d = d;
    sh->q_bytes = product(qn, fcl_dtype_size(d.dtype_q), 1, 1);
    sh->k_bytes = product(kn, fcl_dtype_size(d.dtype_kv), 1, 1);
    sh->v_bytes = product(vn, fcl_dtype_size(d.dtype_kv), 1, 1);
    sh->out_bytes = product(on, fcl_dtype_size(d.dtype_o), 1, 1);
    sh->lse_bytes = product(ln, sizeof(float), 1, 1);
    sh->mask_bytes = product(mn, d.mask_type == FCL_MASK_BOOL_U8 ? 1 : sizeof(float), 1, 1);
    if (!sh->q_bytes || !sh->k_bytes || !sh->v_bytes || !sh->out_bytes || !sh->lse_bytes ||
        !sh->mask_bytes)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "batch (%zu) x heads (%zu) x lengths (%zu, %zu) x head dims (%zu, %zu) "
                        "or the mask strides overflow the address space",
                        d.batch, d.heads_q, d.len_q, d.len_kv, d.head_dim, d.head_dim_v);
    return FCL_SUCCESS;
}

static fcl_status plan(fcl_context *ctx, const attention_shape *sh, fcl_attention_launch *launch)
{
    if (fcl_plan_attention(&ctx->info, &sh->d, launch) != FCL_SUCCESS)
        return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED,
                        "no attention tile for head dims (%zu, %zu) fits the %llu bytes of local "
                        "memory of this device",
                        sh->d.head_dim, sh->d.head_dim_v,
                        (unsigned long long)ctx->info.local_mem_size);
    return FCL_SUCCESS;
}

fcl_status fcl_attention_plan(fcl_context *ctx, const fcl_attention_desc *d,
                              fcl_attention_plan_info *info)
{
    attention_shape sh;
    fcl_attention_launch launch;
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (!info)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "info (the result) is NULL");
    fcl_status s = check_desc(ctx, d, &sh);
    if (s == FCL_SUCCESS)
        s = plan(ctx, &sh, &launch);
    if (s == FCL_SUCCESS) {
        info->block_q = launch.block_q;
        info->block_kv = launch.block_kv;
        info->kv_splits = launch.splits;
        info->work_group_size = launch.work_group_size;
    }
    return s;
}

/* ---- device buffers ---- */

static fcl_status check_buffers(fcl_context *ctx, const attention_shape *sh, cl_mem q, cl_mem k,
                                cl_mem v, cl_mem mask, cl_mem out, cl_mem lse, cl_uint n_wait,
                                const cl_event *wait)
{
    if (n_wait && !wait)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                        (unsigned)n_wait);
    if (sh->d.mask_type == FCL_MASK_NONE && mask)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "a mask was given but mask_type is FCL_MASK_NONE");
    fcl_status s = fcl_check_buffer(ctx, "q", q, sh->q_bytes);
    if (s == FCL_SUCCESS)
        s = fcl_check_buffer(ctx, "k", k, sh->k_bytes);
    if (s == FCL_SUCCESS)
        s = fcl_check_buffer(ctx, "v", v, sh->v_bytes);
    if (s == FCL_SUCCESS)
        s = fcl_check_buffer(ctx, "out", out, sh->out_bytes);
    if (s == FCL_SUCCESS && (out == q || out == k || out == v))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "out must not be q, k or v");
    if (s == FCL_SUCCESS && sh->d.mask_type != FCL_MASK_NONE)
        s = fcl_check_buffer(ctx, "mask (mask_type is set)", mask, sh->mask_bytes);
    if (s == FCL_SUCCESS && lse)
        s = fcl_check_buffer(ctx, "lse", lse, sh->lse_bytes);
    return s;
}

/* Element strides (batch, head, token) of a [batch][heads][len][dim] tensor in layout. */
static cl_ulong4 strides(fcl_layout layout, size_t heads, size_t len, size_t dim)
{
    cl_ulong4 s = {{0}};
    s.s[0] = (cl_ulong)heads * len * dim;
    s.s[1] = layout == FCL_LAYOUT_BHLD ? (cl_ulong)len * dim : dim;
    s.s[2] = layout == FCL_LAYOUT_BHLD ? dim : (cl_ulong)heads * dim;
    return s;
}

typedef struct attention_buffers {
    cl_mem q, k, v, mask, out, lse, partial_o, partial_ml;
} attention_buffers;

static cl_int set_attention_args(cl_kernel kern, const fcl_attention_desc *d,
                                 const fcl_attention_launch *l, const attention_buffers *b)
{
    cl_uint dq = d->dtype_q, dkv = d->dtype_kv, dout = d->dtype_o;
    cl_uint flags = (d->mask_type == FCL_MASK_ADD_F32 ? FA_FLAG_MASK_ADD : 0) |
                    (d->mask_type == FCL_MASK_BOOL_U8 ? FA_FLAG_MASK_BOOL : 0) |
                    (d->causal != FCL_CAUSAL_NONE ? FA_FLAG_CAUSAL : 0) |
                    (b->lse ? FA_FLAG_LSE : 0) | (l->splits > 1 ? FA_FLAG_PARTIAL : 0);
    cl_ulong heads_q = d->heads_q, group = d->heads_q / d->heads_kv, len_q = d->len_q;
    cl_ulong len_kv = d->len_kv, head_dim = d->head_dim, head_dim_v = d->head_dim_v;
    cl_ulong4 qs = strides(d->layout, d->heads_q, d->len_q, d->head_dim);
    cl_ulong4 ks = strides(d->layout, d->heads_kv, d->len_kv, d->head_dim);
    cl_ulong4 vs = strides(d->layout, d->heads_kv, d->len_kv, d->head_dim_v);
    cl_ulong4 os = strides(d->layout, d->heads_q, d->len_q, d->head_dim_v);
    cl_ulong4 ms = {{d->mask_stride_batch, d->mask_stride_head, d->mask_stride_q, 0}};
    cl_long offset = d->causal == FCL_CAUSAL_BOTTOM_RIGHT ? (cl_long)d->len_kv - (cl_long)d->len_q : 0;
    cl_ulong q_tiles = l->q_tiles, heads_total = (cl_ulong)d->batch * d->heads_q;
    cl_ulong splits = l->splits, split_len = l->split_len;
    const void *args[] = {&b->q,       &b->k,       &b->v,      &b->mask,   &b->out,
                          &b->lse,     &b->partial_o, &b->partial_ml, &dq,   &dkv,
                          &dout,       &flags,      &heads_q,   &group,     &len_q,
                          &len_kv,     &head_dim,   &head_dim_v, &qs,       &ks,
                          &vs,         &os,         &ms,        &d->scale,  &offset,
                          &q_tiles,    &heads_total, &splits,   &split_len};
    const size_t sizes[] = {sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem),
                            sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem),
                            sizeof dq, sizeof dkv, sizeof dout, sizeof flags, sizeof heads_q,
                            sizeof group, sizeof len_q, sizeof len_kv, sizeof head_dim,
                            sizeof head_dim_v, sizeof qs, sizeof ks, sizeof vs, sizeof os,
                            sizeof ms, sizeof d->scale, sizeof offset, sizeof q_tiles,
                            sizeof heads_total, sizeof splits, sizeof split_len};
    cl_int err = CL_SUCCESS;
    for (cl_uint i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        err |= clSetKernelArg(kern, i, sizes[i], args[i]);
    return err;
}

static cl_int set_merge_args(cl_kernel kern, const fcl_attention_desc *d,
                             const fcl_attention_launch *l, const attention_buffers *b)
{
    cl_uint dout = d->dtype_o, flags = b->lse ? FA_FLAG_LSE : 0;
    cl_ulong heads_q = d->heads_q, len_q = d->len_q, head_dim_v = d->head_dim_v;
    cl_ulong4 os = strides(d->layout, d->heads_q, d->len_q, d->head_dim_v);
    cl_ulong rows = (cl_ulong)d->batch * d->heads_q * d->len_q, splits = l->splits;
    cl_int err = clSetKernelArg(kern, 0, sizeof(cl_mem), &b->partial_o);
    err |= clSetKernelArg(kern, 1, sizeof(cl_mem), &b->partial_ml);
    err |= clSetKernelArg(kern, 2, sizeof(cl_mem), &b->out);
    err |= clSetKernelArg(kern, 3, sizeof(cl_mem), &b->lse);
    err |= clSetKernelArg(kern, 4, sizeof dout, &dout);
    err |= clSetKernelArg(kern, 5, sizeof flags, &flags);
    err |= clSetKernelArg(kern, 6, sizeof heads_q, &heads_q);
    err |= clSetKernelArg(kern, 7, sizeof len_q, &len_q);
    err |= clSetKernelArg(kern, 8, sizeof head_dim_v, &head_dim_v);
    err |= clSetKernelArg(kern, 9, sizeof os, &os);
    err |= clSetKernelArg(kern, 10, sizeof rows, &rows);
    err |= clSetKernelArg(kern, 11, sizeof splits, &splits);
    return err;
}

static cl_int launch(fcl_context *ctx, cl_kernel k, size_t groups, size_t local, cl_uint n_wait,
                     const cl_event *wait, cl_event *done)
{
    size_t global = groups * local;
    return clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, n_wait, wait, done);
}

/* Enqueues the attention kernel, and with split-KV the merge; the caller holds ctx->lock. */
static fcl_status enqueue(fcl_context *ctx, const attention_shape *sh,
                          const fcl_attention_launch *l, attention_buffers *b, cl_uint n_wait,
                          const cl_event *wait, cl_event *done)
{
    const fcl_attention_desc *d = &sh->d;
    cl_kernel kern = (l->per_item ? ctx->attention_rows
                      : l->decode ? ctx->attention_decode
                                  : ctx->attention)[l->bucket];
    cl_event first = NULL;
    cl_int err = CL_SUCCESS;
    size_t rows = d->batch * d->heads_q * d->len_q;
    if (l->splits > 1) {
        /* Released right after enqueueing: OpenCL keeps them until the kernels finish. */
        b->partial_o = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE,
                                      rows * l->splits * d->head_dim_v * sizeof(float), NULL, &err);
        if (err == CL_SUCCESS)
            b->partial_ml = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE,
                                           rows * l->splits * 2 * sizeof(float), NULL, &err);
        if (err != CL_SUCCESS) {
            fcl_status s = fcl_fail_cl(ctx, err, "allocating the split-KV partial results");
            if (b->partial_o)
                clReleaseMemObject(b->partial_o);
            return s;
        }
    }
    err = set_attention_args(kern, d, l, b);
    if (err == CL_SUCCESS && l->splits == 1)
        err = launch(ctx, kern, l->groups, l->work_group_size, n_wait, wait, done);
    if (err == CL_SUCCESS && l->splits > 1) {
        err = set_merge_args(ctx->attention_merge, d, l, b);
        if (err == CL_SUCCESS)
            err = launch(ctx, kern, l->groups, l->work_group_size, n_wait, wait, &first);
        /* Chained by event, so an out-of-order queue keeps the order too. */
        if (err == CL_SUCCESS)
            err = launch(ctx, ctx->attention_merge,
                         rows < (size_t)ctx->info.compute_units * 32 ? rows
                                                                     : (size_t)ctx->info.compute_units * 32,
                         FCL_ATTENTION_WORK_GROUP, 1, &first, done);
    }
    if (first)
        clReleaseEvent(first);
    if (b->partial_o)
        clReleaseMemObject(b->partial_o);
    if (b->partial_ml)
        clReleaseMemObject(b->partial_ml);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the attention kernels");
}

fcl_status fcl_attention(fcl_context *ctx, const fcl_attention_desc *d, cl_mem q, cl_mem k,
                         cl_mem v, cl_mem mask, cl_mem out, cl_mem lse, cl_uint n_wait,
                         const cl_event *wait, cl_event *done)
{
    attention_shape sh;
    fcl_attention_launch l;
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    fcl_status s = check_desc(ctx, d, &sh);
    if (s == FCL_SUCCESS)
        s = check_buffers(ctx, &sh, q, k, v, mask, out, lse, n_wait, wait);
    if (s == FCL_SUCCESS)
        s = plan(ctx, &sh, &l);
    if (s != FCL_SUCCESS)
        return s;
    attention_buffers b = {q, k, v, mask, out, lse, NULL, NULL};
    pthread_mutex_lock(&ctx->lock);
    s = enqueue(ctx, &sh, &l, &b, n_wait, wait, done);
    pthread_mutex_unlock(&ctx->lock);
    return s;
}

/* ---- host memory ---- */

fcl_status fcl_attention_host(fcl_context *ctx, const fcl_attention_desc *d, const void *q,
                              const void *k, const void *v, const void *mask, void *out,
                              float *lse)
{
    attention_shape sh;
    fcl_attention_launch l;
    cl_int err = CL_SUCCESS;
    cl_event done = NULL;
    attention_buffers b = {0};
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    fcl_status s = check_desc(ctx, d, &sh);
    if (s == FCL_SUCCESS)
        s = plan(ctx, &sh, &l); /* an unsupported shape fails before any allocation */
    if (s != FCL_SUCCESS)
        return s;
    const void *host[] = {q, k, v, out};
    const char *names[] = {"q", "k", "v", "out"};
    for (int i = 0; i < 4; i++)
        if (!host[i])
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "%s is NULL", names[i]);
    if ((sh.d.mask_type != FCL_MASK_NONE) != (mask != NULL))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        mask ? "a mask was given but mask_type is FCL_MASK_NONE"
                             : "mask is NULL but mask_type is set");

    b.q = fcl_host_buffer(ctx, CL_MEM_READ_ONLY, sh.q_bytes, q, &err);
    b.k = fcl_host_buffer(ctx, CL_MEM_READ_ONLY, sh.k_bytes, k, &err);
    b.v = fcl_host_buffer(ctx, CL_MEM_READ_ONLY, sh.v_bytes, v, &err);
    if (mask)
        b.mask = fcl_host_buffer(ctx, CL_MEM_READ_ONLY, sh.mask_bytes, mask, &err);
    b.out = fcl_host_buffer(ctx, CL_MEM_WRITE_ONLY, sh.out_bytes, NULL, &err);
    if (lse)
        b.lse = fcl_host_buffer(ctx, CL_MEM_WRITE_ONLY, sh.lse_bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        s = fcl_fail_cl(ctx, err, "allocating device buffers for fcl_attention_host");
        goto release;
    }
    s = fcl_attention(ctx, d, b.q, b.k, b.v, b.mask, b.out, b.lse, 0, NULL, &done);
    if (s != FCL_SUCCESS)
        goto release;
    err = clEnqueueReadBuffer(ctx->queue, b.out, CL_TRUE, 0, sh.out_bytes, out, 1, &done, NULL);
    if (err == CL_SUCCESS && lse)
        err = clEnqueueReadBuffer(ctx->queue, b.lse, CL_TRUE, 0, sh.lse_bytes, lse, 1, &done, NULL);
    if (err != CL_SUCCESS)
        s = fcl_fail_cl(ctx, err, "running attention and reading the result back");
release:
    if (done)
        clReleaseEvent(done);
    cl_mem all[] = {b.q, b.k, b.v, b.mask, b.out, b.lse};
    for (int i = 0; i < 6; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    return s;
}

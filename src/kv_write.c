/* fcl_kv_write and fcl_kv_write_host: new tokens' K and V encoded into a cache of any format
 * (the v0.3 contract). The descriptor is validated and resolved into the kv_write kernel's
 * arguments (cl/kv_write_args.h, shared with cl/kv_write.cl) once; program.c builds it. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "kv_write_args.h"

#define FCL_KW_HOST_IN cl_mem
#define FCL_KW_HOST_OUT cl_mem
#define FCL_KW_HOST_I32_IN cl_mem
#define FCL_KW_HOST_F32_OUT cl_mem
#define FCL_KW_HOST_U32 cl_uint
#define FCL_KW_HOST_U64 cl_ulong
#define FCL_KW_HOST_F32 cl_float
#define FCL_KW_FIELD(kind, name) FCL_KW_HOST_##kind name;
typedef struct kw_args {
    KW_ARGS(FCL_KW_FIELD, FCL_KW_FIELD)
} kw_args;

#define INT32_LIMIT ((size_t)INT32_MAX)

/* A write resolved: its descriptor with defaults filled in, and the extents each buffer must
 * have (units of its type: elements, or bytes of a coded format; floats for scales). */
typedef struct kw_problem {
    fcl_kv_write_desc d;
    size_t k_in, v_in, k, v, k_scales, v_scales;
} kw_problem;

/* One side (K or V) of the cache: what attention checks of it (fcl_check_kv_coding; format 0
 * is dtype_in's), then what the writer can encode. */
static fcl_status check_side(fcl_context *ctx, const char *x, const fcl_kv_write_desc *d,
                             fcl_kv_format *format, const char *dim_name, size_t dim,
                             fcl_kv_scale mode, float scale, size_t batch_stride, int has_scales)
{
    fcl_status s = fcl_check_kv_coding(ctx, x, format, d->dtype_in, dim_name, dim, mode, scale,
                                       has_scales);
    if (s != FCL_SUCCESS)
        return s;
    const fcl_format_traits *f = fcl_format(*format);
    if (!(f->roles & FCL_ROLE_WRITE))
        return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED, "format_%s %s is read-only: fcl_kv_write "
                        "does not encode it", x, f->name);
    if (mode == FCL_KV_SCALE_TOKEN && !(f->roles & FCL_ROLE_TOKEN_WRITE))
        return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED,
                        "format_%s %s with FCL_KV_SCALE_TOKEN: fcl_kv_write derives a row's scale "
                        "for fp8 and int8 only", x, f->name);
    if (batch_stride)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s_scales_batch_stride (%zu) must be 0: the writer has no sequence index, "
                        "so HEAD scales are one [heads_kv] row", x, batch_stride);
    return FCL_SUCCESS;
}

/* The floats a scale mode's buffer spans: HEAD's [heads_kv] row, or TOKEN's view. */
static size_t scales_extent(const fcl_kv_write_desc *d, fcl_kv_scale mode, const fcl_tensor_view *v)
{
    if (mode == FCL_KV_SCALE_HEAD)
        return d->heads_kv;
    return mode == FCL_KV_SCALE_TOKEN ? fcl_view_extent(v, d->num_pages, d->heads_kv, d->page_size, 1)
                                      : 0;
}

/* desc validated and resolved; k_scales and v_scales given or not (the io's). */
static fcl_status resolve(fcl_context *ctx, const fcl_kv_write_desc *desc, int k_scales,
                          int v_scales, kw_problem *pr)
{
    if (!desc)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "the kv_write descriptor is NULL");
    fcl_kv_write_desc d = *desc;
    if (!d.head_dim_v)
        d.head_dim_v = d.head_dim;
    if (d.heads_kv == 0 || d.heads_kv > INT32_LIMIT || d.tokens > INT32_LIMIT ||
        d.head_dim == 0 || d.head_dim > FCL_ATTENTION_MAX_HEAD_DIM ||
        d.head_dim_v > FCL_ATTENTION_MAX_HEAD_DIM_V)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "heads_kv (%zu) must be between 1 and %zu, tokens (%zu) at most that, "
                        "head_dim (%zu) between 1 and %d and head_dim_v (%zu) at most %d",
                        d.heads_kv, INT32_LIMIT, d.tokens, d.head_dim, FCL_ATTENTION_MAX_HEAD_DIM,
                        d.head_dim_v, FCL_ATTENTION_MAX_HEAD_DIM_V);
    if (d.page_size == 0 || d.num_pages == 0 || d.page_size > INT32_LIMIT ||
        d.num_pages > INT32_LIMIT || d.page_size * d.num_pages > INT32_LIMIT + 1)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "page_size (%zu) and num_pages (%zu) must be at least 1, with at most "
                        "2^31 slots in all (slots are int32)", d.page_size, d.num_pages);
    if ((unsigned)d.dtype_in > FCL_DTYPE_BF16)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "dtype_in (%d) is not FCL_DTYPE_F32, FCL_DTYPE_F16 or FCL_DTYPE_BF16",
                        (int)d.dtype_in);
    if ((unsigned)d.layout > FCL_LAYOUT_BLHD)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "layout (%u) is not an fcl_layout",
                        (unsigned)d.layout);
    fcl_status s = check_side(ctx, "k", &d, &d.format_k, "head_dim", d.head_dim, d.scale_mode_k,
                              d.k_scale, d.k_scales_batch_stride, k_scales);
    if (s == FCL_SUCCESS)
        s = check_side(ctx, "v", &d, &d.format_v, "head_dim_v", d.head_dim_v, d.scale_mode_v,
                       d.v_scale, d.v_scales_batch_stride, v_scales);
    if (s != FCL_SUCCESS)
        return s;
    const size_t k_row = fcl_format_row_units(d.format_k, d.head_dim);
    const size_t v_row = fcl_format_row_units(d.format_v, d.head_dim_v);
    /* the new rows: [tokens][heads_kv][dim] by default (a packed view) */
    d.k_in_view = fcl_view_resolve(d.k_in_view, d.layout, 1, d.heads_kv, d.tokens, d.head_dim);
    d.v_in_view = fcl_view_resolve(d.v_in_view, d.layout, 1, d.heads_kv, d.tokens, d.head_dim_v);
    s = fcl_kv_views_resolve(ctx, "k", d.format_k, d.scale_mode_k, d.head_dim, d.layout, 0,
                             d.heads_kv, d.page_size, &d.k_view, &d.k_scales_view);
    if (s == FCL_SUCCESS)
        s = fcl_kv_views_resolve(ctx, "v", d.format_v, d.scale_mode_v, d.head_dim_v, d.layout, 0,
                                 d.heads_kv, d.page_size, &d.v_view, &d.v_scales_view);
    if (s != FCL_SUCCESS)
        return s;

    pr->d = d;
    pr->k_in = fcl_view_extent(&d.k_in_view, 1, d.heads_kv, d.tokens, d.head_dim);
    pr->v_in = fcl_view_extent(&d.v_in_view, 1, d.heads_kv, d.tokens, d.head_dim_v);
    pr->k = fcl_view_extent(&d.k_view, d.num_pages, d.heads_kv, d.page_size, k_row);
    pr->v = fcl_view_extent(&d.v_view, d.num_pages, d.heads_kv, d.page_size, v_row);
    pr->k_scales = scales_extent(&d, d.scale_mode_k, &d.k_scales_view);
    pr->v_scales = scales_extent(&d, d.scale_mode_v, &d.v_scales_view);
    const size_t all[] = {pr->k_in, pr->v_in, pr->k, pr->v, pr->k_scales, pr->v_scales};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] > SIZE_MAX / 4)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "the views of the new rows, the cache or its scales overflow the "
                            "address space");
    return FCL_SUCCESS;
}

/* The kernel's arguments for a resolved write and its buffers. */
static kw_args args_of(const kw_problem *pr, const fcl_kv_write_io *io)
{
    const fcl_kv_write_desc *d = &pr->d;
    kw_args a = {
        .k_in = io->k_in, .v_in = io->v_in, .slots = io->slots, .k = io->k, .v = io->v,
        .k_scales = io->k_scales, .v_scales = io->v_scales,
        .dtype_in = d->dtype_in, .format_k = d->format_k, .format_v = d->format_v,
        .scale_mode_k = d->scale_mode_k, .scale_mode_v = d->scale_mode_v,
        .k_scale = d->k_scale != 0.0f ? d->k_scale : 1.0f,
        .v_scale = d->v_scale != 0.0f ? d->v_scale : 1.0f,
        .tokens = d->tokens, .heads_kv = d->heads_kv, .head_dim = d->head_dim,
        .head_dim_v = d->head_dim_v, .page_size = d->page_size, .num_pages = d->num_pages,
        .k_in_offset = d->k_in_view.offset, .k_in_head = d->k_in_view.head_stride,
        .k_in_token = d->k_in_view.token_stride, .v_in_offset = d->v_in_view.offset,
        .v_in_head = d->v_in_view.head_stride, .v_in_token = d->v_in_view.token_stride,
        .k_offset = d->k_view.offset, .k_page = d->k_view.batch_stride,
        .k_head = d->k_view.head_stride, .k_token = d->k_view.token_stride,
        .v_offset = d->v_view.offset, .v_page = d->v_view.batch_stride,
        .v_head = d->v_view.head_stride, .v_token = d->v_view.token_stride,
        .ks_head = 1, .vs_head = 1}; /* HEAD scales: [heads_kv] */
    if (d->scale_mode_k == FCL_KV_SCALE_TOKEN)
        a.ks_offset = d->k_scales_view.offset, a.ks_page = d->k_scales_view.batch_stride,
        a.ks_head = d->k_scales_view.head_stride, a.ks_token = d->k_scales_view.token_stride;
    if (d->scale_mode_v == FCL_KV_SCALE_TOKEN)
        a.vs_offset = d->v_scales_view.offset, a.vs_page = d->v_scales_view.batch_stride,
        a.vs_head = d->v_scales_view.head_stride, a.vs_token = d->v_scales_view.token_stride;
    return a;
}

static cl_int set_args(cl_kernel kern, const kw_args *a)
{
    cl_uint i = 0;
    cl_int err = CL_SUCCESS;
#define FCL_KW_SET(kind, name)                                                                 \
    if (err == CL_SUCCESS)                                                                     \
        err = clSetKernelArg(kern, i++, sizeof(FCL_KW_HOST_##kind), &a->name);
    KW_ARGS(FCL_KW_SET, FCL_KW_SET)
#undef FCL_KW_SET
    return err;
}

fcl_status fcl_kv_write(fcl_context *ctx, const fcl_kv_write_desc *desc, const fcl_kv_write_io *io,
                        cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    kw_problem pr;
    fcl_status s = fcl_check_call(ctx, io, n_wait, wait);
    if (s == FCL_SUCCESS)
        s = resolve(ctx, desc, io->k_scales != NULL, io->v_scales != NULL, &pr);
    if (s != FCL_SUCCESS)
        return s;
    const fcl_kv_write_desc *d = &pr.d;
    const size_t in_bytes = fcl_dtype_size(d->dtype_in);
    const struct {
        const char *name;
        cl_mem buf;
        size_t bytes;
        int required; /* the scales: where given (resolve checked that their modes have them) */
    } need[] = {
        {"k_in", io->k_in, pr.k_in * in_bytes, 1},
        {"v_in", io->v_in, pr.v_in * in_bytes, 1},
        {"slots", io->slots, d->tokens * sizeof(cl_int), 1},
        {"k", io->k, pr.k * fcl_format_unit_bytes(d->format_k), 1},
        {"v", io->v, pr.v * fcl_format_unit_bytes(d->format_v), 1},
        {"k_scales", io->k_scales, pr.k_scales * sizeof(float), 0},
        {"v_scales", io->v_scales, pr.v_scales * sizeof(float), 0},
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0] && s == FCL_SUCCESS; i++)
        if (need[i].required || need[i].buf)
            s = fcl_check_buffer(ctx, need[i].name, need[i].buf, need[i].bytes);
    if (s != FCL_SUCCESS)
        return s;
    if (d->tokens == 0) { /* nothing to write: done when what it waits for is */
        cl_int err = done ? clEnqueueMarkerWithWaitList(ctx->queue, n_wait, wait, done) : CL_SUCCESS;
        return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing a marker");
    }
    cl_kernel kern;
    pthread_mutex_lock(&ctx->build_lock);
    s = fcl_build_kv_write(ctx, &kern);
    pthread_mutex_unlock(&ctx->build_lock);
    if (s != FCL_SUCCESS)
        return s;
    const kw_args a = args_of(&pr, io);
    const size_t rows = 2 * d->tokens * d->heads_kv, local = ctx->kv_write_group;
    const size_t groups = (rows + local - 1) / local;
    const size_t global = local * (groups < 4096 ? groups : 4096);
    pthread_mutex_lock(&ctx->lock);
    cl_int err = set_args(kern, &a);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, kern, 1, NULL, &global, &local, n_wait, wait, done);
    pthread_mutex_unlock(&ctx->lock);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the kv_write kernel");
}

/* ---- host memory ---- */

static int ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes)
{
    const char *pa = a, *pb = b;
    return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

/* A device copy of host's bytes (NULL where host is NULL), or where host is the same pointer
 * as shared's, shared's buffer (retained). */
static cl_mem copy_or_share(fcl_context *ctx, cl_mem_flags flags, const void *host, size_t bytes,
                            const void *shared_host, cl_mem shared, cl_int *err)
{
    if (!host || *err != CL_SUCCESS)
        return NULL;
    if (host == shared_host && shared) {
        clRetainMemObject(shared);
        return shared;
    }
    return fcl_host_buffer(ctx, flags, bytes ? bytes : 1, host, err);
}

fcl_status fcl_kv_write_host(fcl_context *ctx, const fcl_kv_write_desc *desc,
                             const fcl_kv_write_host_io *io)
{
    kw_problem pr;
    fcl_status s = fcl_check_call(ctx, io, 0, NULL);
    if (s == FCL_SUCCESS)
        s = resolve(ctx, desc, io->k_scales != NULL, io->v_scales != NULL, &pr);
    if (s != FCL_SUCCESS)
        return s;
    const fcl_kv_write_desc *d = &pr.d;
    const void *required[] = {io->k_in, io->v_in, io->slots, io->k, io->v};
    const char *names[] = {"k_in", "v_in", "slots", "k", "v"};
    for (int i = 0; i < 5; i++)
        if (!required[i] && d->tokens)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "%s is NULL", names[i]);
    const size_t capacity = d->page_size * d->num_pages;
    for (size_t t = 0; t < d->tokens; t++)
        if (io->slots[t] >= 0 && (size_t)io->slots[t] >= capacity)
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "slots[%zu] (%d) must be below num_pages x page_size (%zu), or "
                            "negative (skipped)", t, (int)io->slots[t], capacity);
    const size_t in_bytes = fcl_dtype_size(d->dtype_in);
    const size_t k_bytes = pr.k * fcl_format_unit_bytes(d->format_k);
    const size_t v_bytes = pr.v * fcl_format_unit_bytes(d->format_v);
    const size_t ks_bytes = pr.k_scales * sizeof(float), vs_bytes = pr.v_scales * sizeof(float);
    if (io->k != io->v && ranges_overlap(io->k, k_bytes, io->v, v_bytes))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "k and v overlap in memory: give one cache the same pointer for both, with "
                        "their views");
    if (io->k_scales != io->v_scales && ranges_overlap(io->k_scales, ks_bytes, io->v_scales, vs_bytes))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "k_scales and v_scales overlap in memory: give the same pointer for both, "
                        "with their views");
    if (d->tokens == 0)
        return FCL_SUCCESS;

    cl_int err = CL_SUCCESS;
    fcl_kv_write_io b = {0};
    cl_event done = NULL;
    const size_t kv_bytes = io->k == io->v && v_bytes > k_bytes ? v_bytes : k_bytes;
    const size_t scale_bytes = io->k_scales == io->v_scales && vs_bytes > ks_bytes ? vs_bytes : ks_bytes;
    b.k_in = copy_or_share(ctx, CL_MEM_READ_ONLY, io->k_in, pr.k_in * in_bytes, NULL, NULL, &err);
    b.v_in = copy_or_share(ctx, CL_MEM_READ_ONLY, io->v_in, pr.v_in * in_bytes, NULL, NULL, &err);
    b.slots = copy_or_share(ctx, CL_MEM_READ_ONLY, io->slots, d->tokens * sizeof(int32_t), NULL,
                            NULL, &err);
    b.k = copy_or_share(ctx, CL_MEM_READ_WRITE, io->k, kv_bytes, NULL, NULL, &err);
    b.v = copy_or_share(ctx, CL_MEM_READ_WRITE, io->v, v_bytes, io->k, b.k, &err);
    /* the scales where given (resolve checked: where their modes have them) */
    b.k_scales = copy_or_share(ctx, CL_MEM_READ_WRITE, io->k_scales, scale_bytes, NULL, NULL, &err);
    b.v_scales = copy_or_share(ctx, CL_MEM_READ_WRITE, io->v_scales, vs_bytes, io->k_scales,
                               b.k_scales, &err);
    if (err != CL_SUCCESS) {
        s = fcl_fail_cl(ctx, err, "allocating device buffers for fcl_kv_write_host");
        goto release;
    }
    s = fcl_kv_write(ctx, desc, &b, 0, NULL, &done);
    if (s != FCL_SUCCESS)
        goto release;
    /* Back: the cache (rows not written come back as they were) and TOKEN scales. */
    err = clEnqueueReadBuffer(ctx->queue, b.k, CL_TRUE, 0, kv_bytes, io->k, 1, &done, NULL);
    if (err == CL_SUCCESS && b.v != b.k)
        err = clEnqueueReadBuffer(ctx->queue, b.v, CL_TRUE, 0, v_bytes, io->v, 1, &done, NULL);
    const int k_token = d->scale_mode_k == FCL_KV_SCALE_TOKEN;
    const int v_token = d->scale_mode_v == FCL_KV_SCALE_TOKEN, shared = b.v_scales == b.k_scales;
    if (err == CL_SUCCESS && b.k_scales && (k_token || (v_token && shared)))
        err = clEnqueueReadBuffer(ctx->queue, b.k_scales, CL_TRUE, 0, scale_bytes, io->k_scales, 1,
                                  &done, NULL);
    if (err == CL_SUCCESS && v_token && !shared)
        err = clEnqueueReadBuffer(ctx->queue, b.v_scales, CL_TRUE, 0, vs_bytes, io->v_scales, 1,
                                  &done, NULL);
    if (err != CL_SUCCESS)
        s = fcl_fail_cl(ctx, err, "writing the cache and reading it back");
release:
    if (done)
        clReleaseEvent(done);
    cl_mem all[] = {b.k_in, b.v_in, b.slots, b.k, b.v, b.k_scales, b.v_scales};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    return s;
}

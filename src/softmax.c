/* Softmax: descriptor validation, planning, and the enqueueing of the row kernels. */
#include "internal.h"

#include <math.h>
#include <string.h>

/* A validated descriptor with every default filled in, and the bytes each buffer needs. */
typedef struct softmax_shape {
    fcl_softmax_desc d; /* mask_stride and mask_rows resolved: row r's mask row is r % mask_rows */
    size_t in_bytes, out_bytes, mask_bytes, lse_bytes, head_bytes;
} softmax_shape;

/* Bytes spanned by rows of cols elements stride apart; 0 when that overflows size_t. */
static size_t span_bytes(size_t rows, size_t stride, size_t cols, size_t elem)
{
    size_t last = rows - 1;
    if (stride && last > (SIZE_MAX - cols) / stride)
        return 0;
    size_t elems = last * stride + cols;
    return elems > SIZE_MAX / elem ? 0 : elems * elem;
}

static fcl_status check_stride(fcl_context *ctx, const char *name, size_t *stride, size_t cols)
{
    if (*stride == 0)
        *stride = cols;
    else if (*stride < cols)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s (%zu) is smaller than cols (%zu): rows would overlap", name, *stride,
                        cols);
    return FCL_SUCCESS;
}

/* The v0.2 fields: heads, the mask's type and rows. */
static fcl_status check_heads_and_mask(fcl_context *ctx, fcl_softmax_desc *d)
{
    if (!d->heads != !d->head_rows)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "heads (%zu) and head_rows (%zu) must both be 0 (no heads) or both "
                        "be at least 1",
                        d->heads, d->head_rows);
    if (d->mask_dtype != FCL_DTYPE_F32 && d->mask_dtype != FCL_DTYPE_F16)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "mask_dtype (%d) is not FCL_DTYPE_F32 or FCL_DTYPE_F16", (int)d->mask_dtype);
    d->alibi_from_mask = d->alibi_from_mask != 0;
    /* v0: a mask_stride gives each row its own mask row, else all share row 0. Mask rows
     * past the last row are never read (r % mask_rows == r). */
    if (!d->mask_rows)
        d->mask_rows = d->mask_stride ? d->rows : 1;
    d->mask_rows = d->mask_rows < d->rows ? d->mask_rows : d->rows;
    return check_stride(ctx, "mask_stride", &d->mask_stride, d->cols);
}

static fcl_status check_desc(fcl_context *ctx, const fcl_softmax_desc *desc, softmax_shape *sh)
{
    if (!desc)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "the softmax descriptor is NULL");
    fcl_softmax_desc d = *desc;
    if (d.rows == 0 || d.cols == 0)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "rows (%zu) and cols (%zu) must both be at least 1", d.rows, d.cols);
    if ((unsigned)d.dtype > FCL_DTYPE_BF16)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "dtype (%d) is not FCL_DTYPE_F32, FCL_DTYPE_F16 or FCL_DTYPE_BF16",
                        (int)d.dtype);
    if ((unsigned)d.algo > FCL_SOFTMAX_SPLIT)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "algo (%d) is not an fcl_softmax_algo",
                        (int)d.algo);
    if (!isfinite(d.scale))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "scale (%g) must be finite",
                        (double)d.scale);
    if (d.scale == 0.0f)
        d.scale = 1.0f;
    d.log = d.log != 0;
    fcl_status s = check_stride(ctx, "in_stride", &d.in_stride, d.cols);
    if (s == FCL_SUCCESS)
        s = check_stride(ctx, "out_stride", &d.out_stride, d.cols);
    if (s == FCL_SUCCESS)
        s = check_heads_and_mask(ctx, &d);
    if (s != FCL_SUCCESS)
        return s;
    size_t elem = fcl_dtype_size(d.dtype);
    sh->d = d;
    sh->in_bytes = span_bytes(d.rows, d.in_stride, d.cols, elem);
    sh->out_bytes = span_bytes(d.rows, d.out_stride, d.cols, elem);
    sh->mask_bytes = span_bytes(d.mask_rows, d.mask_stride, d.cols, fcl_dtype_size(d.mask_dtype));
    sh->lse_bytes = span_bytes(d.rows, 1, 1, sizeof(float));
    sh->head_bytes = d.heads ? span_bytes(d.heads, 1, 1, sizeof(float)) : sizeof(float);
    if (!sh->in_bytes || !sh->out_bytes || !sh->mask_bytes || !sh->lse_bytes || !sh->head_bytes)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "rows (%zu) x strides (in %zu, out %zu, mask %zu) or heads (%zu) "
                        "overflow the address space",
                        d.rows, d.in_stride, d.out_stride, d.mask_stride, d.heads);
    return FCL_SUCCESS;
}

/* in == out (in place) works only where every row starts at the same place in both. */
static fcl_status check_in_place(fcl_context *ctx, const softmax_shape *sh, int in_place)
{
    if (in_place && sh->d.in_stride != sh->d.out_stride)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "in place (in == out) needs in_stride (%zu) == out_stride (%zu)",
                        sh->d.in_stride, sh->d.out_stride);
    return FCL_SUCCESS;
}

/* Which optional buffers a call has, against what the descriptor needs of them. */
static fcl_status check_features(fcl_context *ctx, const softmax_shape *sh, int has_mask,
                                 int has_sinks, int has_slopes)
{
    const fcl_softmax_desc *d = &sh->d;
    if ((has_sinks || has_slopes) && !d->heads)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s needs heads and head_rows (they are 0): it holds one value per head",
                        has_sinks ? "sinks" : "alibi_slopes");
    if (d->alibi_from_mask && (!has_slopes || !has_mask))
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "alibi_from_mask needs both alibi_slopes and mask (%s is NULL)",
                        has_slopes ? "mask" : "alibi_slopes");
    if (has_slopes && !d->alibi_from_mask)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "alibi_slopes is given but alibi_from_mask is 0: softmax has no token "
                        "positions, so its ALiBi scales the mask");
    return FCL_SUCCESS;
}

static fcl_status plan_built(fcl_context *ctx, const softmax_shape *sh, fcl_softmax_launch *launch)
{
    if (fcl_plan_softmax(&ctx->info, &sh->d, launch) == FCL_SUCCESS)
        return FCL_SUCCESS;
    /* The limit that ruled the plan out: local memory, else the driver's loop cap. */
    if (sh->d.algo == FCL_SOFTMAX_FUSED && sh->d.cols > ctx->info.softmax_fused_max_cols)
        return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED,
                        "algo FCL_SOFTMAX_FUSED needs cols (%zu) <= %zu, the longest row that "
                        "fits the %llu bytes of local memory of this device%s",
                        sh->d.cols, ctx->info.softmax_fused_max_cols,
                        (unsigned long long)ctx->info.local_mem_size,
                        sh->d.cols <= ctx->info.softmax_nv_cols
                            ? " (NVIDIA's registers hold it where cols, in_stride and out_stride "
                              "are multiples of 16 bytes)"
                            : "");
    return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED,
                    "algo %s on rows of %zu columns takes more loop iterations per work-item than "
                    "the %u this driver allows (loop_iteration_cap)%s",
                    fcl_softmax_algo_name(sh->d.algo), sh->d.cols,
                    (unsigned)ctx->info.loop_iteration_cap,
                    sh->d.algo == FCL_SOFTMAX_AUTO || sh->d.algo == FCL_SOFTMAX_SPLIT
                        ? ", even in " FCL_STR(FCL_SPLIT_MAX_SLICES) " slices"
                        : "; FCL_SOFTMAX_AUTO and FCL_SOFTMAX_SPLIT serve them");
}

/* The launch for sh, after the softmax kernels' build on their first use (under
 * ctx->build_lock, as the plan fields it writes). */
static fcl_status plan(fcl_context *ctx, const softmax_shape *sh, fcl_softmax_launch *launch)
{
    pthread_mutex_lock(&ctx->build_lock);
    fcl_status s = fcl_build_softmax(ctx);
    if (s == FCL_SUCCESS)
        s = plan_built(ctx, sh, launch);
    pthread_mutex_unlock(&ctx->build_lock);
    return s;
}

fcl_status fcl_softmax_plan(fcl_context *ctx, const fcl_softmax_desc *d, fcl_softmax_algo *algo)
{
    softmax_shape sh;
    fcl_softmax_launch launch;
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (!algo)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "algo (the result) is NULL");
    fcl_status s = check_desc(ctx, d, &sh);
    if (s == FCL_SUCCESS)
        s = plan(ctx, &sh, &launch);
    if (s == FCL_SUCCESS)
        *algo = launch.algo;
    return s;
}

const char *fcl_softmax_algo_name(fcl_softmax_algo a)
{
    static const char *const names[] = {"auto", "fused", "online", "split"};
    return (unsigned)a <= FCL_SOFTMAX_SPLIT ? names[a] : "unknown";
}

/* ---- device buffers ---- */

static fcl_status check_buffers(fcl_context *ctx, const softmax_shape *sh, const fcl_softmax_io *io,
                                cl_uint n_wait, const cl_event *wait)
{
    if (!io)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "io (the buffers) is NULL");
    fcl_status s = check_in_place(ctx, sh, io->in == io->out && io->in);
    if (s != FCL_SUCCESS)
        return s;
    if (n_wait && !wait)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                        (unsigned)n_wait);
    s = check_features(ctx, sh, io->mask != NULL, io->sinks != NULL, io->alibi_slopes != NULL);
    if (s == FCL_SUCCESS)
        s = fcl_check_buffer(ctx, "in", io->in, sh->in_bytes);
    if (s == FCL_SUCCESS)
        s = fcl_check_buffer(ctx, "out", io->out, sh->out_bytes);
    if (s == FCL_SUCCESS && io->mask)
        s = fcl_check_buffer(ctx, "mask", io->mask, sh->mask_bytes);
    if (s == FCL_SUCCESS && io->lse)
        s = fcl_check_buffer(ctx, "lse", io->lse, sh->lse_bytes);
    if (s == FCL_SUCCESS && io->sinks)
        s = fcl_check_buffer(ctx, "sinks", io->sinks, sh->head_bytes);
    if (s == FCL_SUCCESS && io->alibi_slopes)
        s = fcl_check_buffer(ctx, "alibi_slopes", io->alibi_slopes, sh->head_bytes);
    return s;
}

/* The kernels' first arguments (cl/softmax_args.h), generated from the same list: each kind's
 * host type. */
#define SM_HOST_IN cl_mem
#define SM_HOST_OUT cl_mem
#define SM_HOST_MASK cl_mem
#define SM_HOST_F32_IN cl_mem
#define SM_HOST_F32_OUT cl_mem
#define SM_HOST_U32 cl_uint
#define SM_HOST_U64 cl_ulong
#define SM_HOST_F32 cl_float
#define SM_HOST_FIELD(kind, name) SM_HOST_##kind name;
#define SM_ARG_INDEX(kind, name) SM_ARG_##name,
typedef struct softmax_args {
    SM_ARGS(SM_HOST_FIELD, SM_HOST_FIELD)
} softmax_args;
enum { SM_ARGS(SM_ARG_INDEX, SM_ARG_INDEX) SM_ARG_COUNT }; /* the kernels' next argument */
enum { SM_FLAGS(SM_FLAG_ENUM_ENTRY) };

static softmax_args args_of(const softmax_shape *sh, const fcl_softmax_io *io)
{
    const fcl_softmax_desc *d = &sh->d;
    softmax_args a = {
        .in = io->in, .in_stride = d->in_stride, .out = io->out, .out_stride = d->out_stride,
        .mask = io->mask, .mask_stride = d->mask_stride, .mask_rows = d->mask_rows,
        .lse = io->lse, .sinks = io->sinks, .alibi_slopes = io->alibi_slopes,
        .heads = d->heads, .head_rows = d->head_rows, .rows = d->rows, .cols = d->cols,
        .scale = d->scale};
    a.flags = (d->log ? SM_FLAG_LOG : 0u) | (io->mask ? SM_FLAG_MASK : 0u) |
              (io->lse ? SM_FLAG_LSE : 0u) | (io->sinks ? SM_FLAG_SINKS : 0u) |
              (io->mask && d->mask_dtype == FCL_DTYPE_F16 ? SM_FLAG_MASK_F16 : 0u) |
              (d->alibi_from_mask ? SM_FLAG_ALIBI_MASK : 0u);
    return a;
}

/* clSetKernelArg after err, only while nothing failed: the first failure is the one reported
 * (OR-ing error codes together would name another error). */
static cl_int set_arg(cl_int err, cl_kernel k, cl_uint index, size_t size, const void *value)
{
    return err != CL_SUCCESS ? err : clSetKernelArg(k, index, size, value);
}

/* The arguments every softmax kernel takes first (a NULL cl_mem is a NULL pointer). */
static cl_int set_row_args(cl_kernel k, const softmax_args *a)
{
    cl_int err = CL_SUCCESS;
    cl_uint index = 0;
#define SM_SET_ARG(kind, name) err = set_arg(err, k, index++, sizeof(SM_HOST_##kind), &a->name);
    SM_ARGS(SM_SET_ARG, SM_SET_ARG)
#undef SM_SET_ARG
    return err;
}

static cl_int set_split_args(cl_kernel k, const fcl_softmax_launch *launch, cl_mem partial)
{
    cl_ulong slices = launch->slices, slice_cols = launch->slice_cols;
    cl_int err = clSetKernelArg(k, SM_ARG_COUNT, sizeof slices, &slices);
    err = set_arg(err, k, SM_ARG_COUNT + 1, sizeof slice_cols, &slice_cols);
    err = set_arg(err, k, SM_ARG_COUNT + 2, sizeof(cl_mem), &partial);
    return err;
}

static cl_int launch_kernel(fcl_context *ctx, cl_kernel k, const fcl_softmax_launch *launch,
                            cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    size_t local = launch->work_group_size, global = launch->groups * local;
    return clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, n_wait, wait, done);
}

/* SPLIT: the statistics kernel writes each slice's partial (max, sum) into the context's
 * scratch memory (after the last kernel that used it), the write kernel merges them and
 * writes the rows; the caller holds ctx->lock. */
static fcl_status enqueue_split(fcl_context *ctx, cl_kernel *kernels, const softmax_shape *sh,
                                const fcl_softmax_launch *launch, const softmax_args *a,
                                cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    cl_kernel stats = kernels[FCL_K_SOFTMAX_SPLIT_STATS];
    cl_kernel write = kernels[FCL_K_SOFTMAX_SPLIT_WRITE];
    cl_mem partial;
    fcl_wait_list after;
    fcl_status s = fcl_scratch_buffer(ctx, FCL_SCRATCH_STATS,
                                      sh->d.rows * launch->slices * 2 * sizeof(float), &partial);
    if (s == FCL_SUCCESS)
        s = fcl_scratch_wait_list(ctx, n_wait, wait, &after);
    if (s != FCL_SUCCESS)
        return s;
    cl_event first = NULL, written = NULL;
    cl_int err = set_row_args(stats, a);
    if (err == CL_SUCCESS)
        err = set_split_args(stats, launch, partial);
    if (err == CL_SUCCESS)
        err = set_row_args(write, a);
    if (err == CL_SUCCESS)
        err = set_split_args(write, launch, partial);
    if (err == CL_SUCCESS)
        err = launch_kernel(ctx, stats, launch, after.n, after.events, fcl_first_event(ctx, &first));
    fcl_wait_list_free(&after);
    const cl_event *after_first;
    const cl_uint n_after = fcl_after_launch(ctx, &first, &after_first);
    if (err == CL_SUCCESS)
        err = launch_kernel(ctx, write, launch, n_after, after_first,
                            fcl_second_event(ctx, &written, done));
    fcl_scratch_pair_done(ctx, first, written, done);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the softmax kernels");
}

/* Enqueues the planned kernels; the caller holds ctx->lock. */
static fcl_status enqueue(fcl_context *ctx, const softmax_shape *sh,
                          const fcl_softmax_launch *launch, const softmax_args *a,
                          cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    cl_kernel fast[FCL_K_SOFTMAX_COUNT];
    cl_kernel *kernels = ctx->softmax[sh->d.dtype];
    if (launch->nv_stream || launch->nv_build) {
        fcl_nvidia_path.softmax_kernels(ctx, launch, sh->d.dtype, fast);
        kernels = fast;
    }
    if (launch->algo == FCL_SOFTMAX_SPLIT)
        return enqueue_split(ctx, kernels, sh, launch, a, n_wait, wait, done);
    cl_int err;
    if (launch->algo == FCL_SOFTMAX_FUSED && launch->lanes) {
        cl_kernel k = kernels[FCL_K_SOFTMAX_BLOCK];
        cl_uint lanes = (cl_uint)launch->lanes;
        err = set_row_args(k, a);
        err = set_arg(err, k, SM_ARG_COUNT, sizeof lanes, &lanes);
        if (err == CL_SUCCESS)
            err = launch_kernel(ctx, k, launch, n_wait, wait, done);
    } else if (launch->algo == FCL_SOFTMAX_FUSED) {
        cl_kernel k = kernels[FCL_K_SOFTMAX_FUSED];
        err = set_row_args(k, a);
        err = set_arg(err, k, SM_ARG_COUNT, sh->d.cols * sizeof(float), NULL);
        if (err == CL_SUCCESS)
            err = launch_kernel(ctx, k, launch, n_wait, wait, done);
    } else { /* ONLINE */
        cl_kernel k = kernels[launch->per_item ? FCL_K_SOFTMAX_ROWS : FCL_K_SOFTMAX_ONLINE];
        err = set_row_args(k, a);
        if (err == CL_SUCCESS)
            err = launch_kernel(ctx, k, launch, n_wait, wait, done);
    }
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the softmax kernel");
}

fcl_status fcl_softmax_run(fcl_context *ctx, const fcl_softmax_desc *d, const fcl_softmax_io *io,
                           cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    softmax_shape sh;
    fcl_softmax_launch launch;
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    fcl_status s = check_desc(ctx, d, &sh);
    if (s == FCL_SUCCESS)
        s = check_buffers(ctx, &sh, io, n_wait, wait);
    if (s == FCL_SUCCESS)
        s = plan(ctx, &sh, &launch);
    if (s != FCL_SUCCESS)
        return s;
    const softmax_args args = args_of(&sh, io);
    pthread_mutex_lock(&ctx->lock);
    s = enqueue(ctx, &sh, &launch, &args, n_wait, wait, done);
    pthread_mutex_unlock(&ctx->lock);
    return s;
}

fcl_status fcl_softmax(fcl_context *ctx, const fcl_softmax_desc *d, cl_mem in, cl_mem mask,
                       cl_mem out, cl_mem lse, cl_uint n_wait, const cl_event *wait,
                       cl_event *done)
{
    const fcl_softmax_io io = {.in = in, .mask = mask, .out = out, .lse = lse};
    return fcl_softmax_run(ctx, d, &io, n_wait, wait, done);
}

/* ---- host memory ---- */

static void release(cl_mem *bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (bufs[i])
            clReleaseMemObject(bufs[i]);
}

fcl_status fcl_softmax_run_host(fcl_context *ctx, const fcl_softmax_desc *d,
                                const fcl_softmax_host_io *io)
{
    softmax_shape sh = {0};
    cl_int err = CL_SUCCESS;
    cl_event done = NULL;
    fcl_softmax_io dev = {0};
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    fcl_status s = check_desc(ctx, d, &sh);
    if (s != FCL_SUCCESS)
        return s;
    if (!io)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "io (the buffers) is NULL");
    if (!io->in || !io->out)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "%s is NULL", io->in ? "out" : "in");
    int in_place = (io->in == io->out);
    s = check_in_place(ctx, &sh, in_place);
    if (s == FCL_SUCCESS)
        s = check_features(ctx, &sh, io->mask != NULL, io->sinks != NULL,
                           io->alibi_slopes != NULL);
    if (s != FCL_SUCCESS)
        return s;

    dev.in = fcl_host_buffer(ctx, in_place ? CL_MEM_READ_WRITE : CL_MEM_READ_ONLY, sh.in_bytes,
                             io->in, &err);
    if (io->mask)
        dev.mask = fcl_host_buffer(ctx, CL_MEM_READ_ONLY, sh.mask_bytes, io->mask, &err);
    if (in_place)
        clRetainMemObject(dev.out = dev.in);
    else /* rows with padding: upload out too, so the padding reads back unchanged */
        dev.out = fcl_host_buffer(ctx, CL_MEM_READ_WRITE, sh.out_bytes,
                                  sh.d.out_stride > sh.d.cols ? io->out : NULL, &err);
    if (io->lse)
        dev.lse = fcl_host_buffer(ctx, CL_MEM_WRITE_ONLY, sh.lse_bytes, NULL, &err);
    if (io->sinks)
        dev.sinks = fcl_host_buffer(ctx, CL_MEM_READ_ONLY, sh.head_bytes, io->sinks, &err);
    if (io->alibi_slopes)
        dev.alibi_slopes =
            fcl_host_buffer(ctx, CL_MEM_READ_ONLY, sh.head_bytes, io->alibi_slopes, &err);
    if (err != CL_SUCCESS) {
        s = fcl_fail_cl(ctx, err, "allocating device buffers for fcl_softmax_run_host");
        goto release;
    }
    s = fcl_softmax_run(ctx, d, &dev, 0, NULL, &done);
    if (s != FCL_SUCCESS)
        goto release;
    err = clEnqueueReadBuffer(ctx->queue, dev.out, CL_TRUE, 0, sh.out_bytes, io->out, 1, &done,
                              NULL);
    if (err == CL_SUCCESS && io->lse)
        err = clEnqueueReadBuffer(ctx->queue, dev.lse, CL_TRUE, 0, sh.lse_bytes, io->lse, 1,
                                  &done, NULL);
    if (err != CL_SUCCESS)
        s = fcl_fail_cl(ctx, err, "running softmax and reading the result back");
release:
    if (done)
        clReleaseEvent(done);
    release((cl_mem[]){dev.in, dev.mask, dev.out, dev.lse, dev.sinks, dev.alibi_slopes}, 6);
    return s;
}

fcl_status fcl_softmax_host(fcl_context *ctx, const fcl_softmax_desc *d, const void *in,
                            const float *mask, void *out, float *lse)
{
    const fcl_softmax_host_io io = {.in = in, .mask = mask, .out = out, .lse = lse};
    return fcl_softmax_run_host(ctx, d, &io);
}

/* Softmax: descriptor validation, planning, and the enqueueing of the row kernels. */
#include "internal.h"

#include <math.h>
#include <string.h>

/* A validated descriptor with every default filled in, and the bytes each buffer needs. */
typedef struct softmax_shape {
    fcl_softmax_desc d;
    size_t in_bytes, out_bytes, mask_bytes, lse_bytes;
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
    if (s == FCL_SUCCESS && d.mask_stride)
        s = check_stride(ctx, "mask_stride", &d.mask_stride, d.cols);
    if (s != FCL_SUCCESS)
        return s;
    size_t elem = fcl_dtype_size(d.dtype);
    sh->d = d;
    sh->in_bytes = span_bytes(d.rows, d.in_stride, d.cols, elem);
    sh->out_bytes = span_bytes(d.rows, d.out_stride, d.cols, elem);
    sh->mask_bytes = span_bytes(d.mask_stride ? d.rows : 1, d.mask_stride, d.cols, sizeof(float));
    sh->lse_bytes = span_bytes(d.rows, 1, 1, sizeof(float));
    if (!sh->in_bytes || !sh->out_bytes || !sh->mask_bytes || !sh->lse_bytes)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "rows (%zu) x strides (in %zu, out %zu, mask %zu) overflow the address "
                        "space",
                        d.rows, d.in_stride, d.out_stride, d.mask_stride);
    return FCL_SUCCESS;
}

static fcl_status plan(fcl_context *ctx, const softmax_shape *sh, fcl_softmax_launch *launch)
{
    if (fcl_plan_softmax(&ctx->info, &sh->d, launch) != FCL_SUCCESS)
        return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED,
                        "algo FCL_SOFTMAX_FUSED needs cols (%zu) <= %zu, the longest row that "
                        "fits the %llu bytes of local memory of this device",
                        sh->d.cols, ctx->info.softmax_fused_max_cols,
                        (unsigned long long)ctx->info.local_mem_size);
    return FCL_SUCCESS;
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

static fcl_status check_buffers(fcl_context *ctx, const softmax_shape *sh, cl_mem in,
                                cl_mem mask, cl_mem out, cl_mem lse, cl_uint n_wait,
                                const cl_event *wait)
{
    if (in == out && in && sh->d.in_stride != sh->d.out_stride)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "in place (in == out) needs in_stride (%zu) == out_stride (%zu)",
                        sh->d.in_stride, sh->d.out_stride);
    if (n_wait && !wait)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                        (unsigned)n_wait);
    fcl_status s = fcl_check_buffer(ctx, "in", in, sh->in_bytes);
    if (s == FCL_SUCCESS)
        s = fcl_check_buffer(ctx, "out", out, sh->out_bytes);
    if (s == FCL_SUCCESS && mask)
        s = fcl_check_buffer(ctx, "mask", mask, sh->mask_bytes);
    if (s == FCL_SUCCESS && lse)
        s = fcl_check_buffer(ctx, "lse", lse, sh->lse_bytes);
    return s;
}

/* clSetKernelArg after err, only while nothing failed: the first failure is the one reported
 * (OR-ing error codes together would name another error). */
static cl_int set_arg(cl_int err, cl_kernel k, cl_uint index, size_t size, const void *value)
{
    return err != CL_SUCCESS ? err : clSetKernelArg(k, index, size, value);
}

/* Arguments 0-10, common to every softmax kernel (see FCL_ROW_ARGS in softmax.cl). */
static cl_int set_row_args(cl_kernel k, const fcl_softmax_desc *d, cl_mem in, cl_mem mask,
                           cl_mem out, cl_mem lse)
{
    cl_ulong in_stride = d->in_stride, out_stride = d->out_stride, mask_stride = d->mask_stride;
    cl_ulong rows = d->rows, cols = d->cols;
    cl_uint flags = (d->log ? 1u : 0u) | (mask ? 2u : 0u) | (lse ? 4u : 0u);
    cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &in);
    err = set_arg(err, k, 1, sizeof in_stride, &in_stride);
    err = set_arg(err, k, 2, sizeof(cl_mem), &out);
    err = set_arg(err, k, 3, sizeof out_stride, &out_stride);
    err = set_arg(err, k, 4, sizeof(cl_mem), &mask); /* a NULL cl_mem is a NULL pointer */
    err = set_arg(err, k, 5, sizeof mask_stride, &mask_stride);
    err = set_arg(err, k, 6, sizeof(cl_mem), &lse);
    err = set_arg(err, k, 7, sizeof rows, &rows);
    err = set_arg(err, k, 8, sizeof cols, &cols);
    err = set_arg(err, k, 9, sizeof d->scale, &d->scale);
    err = set_arg(err, k, 10, sizeof flags, &flags);
    return err;
}

static cl_int set_split_args(cl_kernel k, const fcl_softmax_launch *launch, cl_mem partial)
{
    cl_ulong slices = launch->slices, slice_cols = launch->slice_cols;
    cl_int err = clSetKernelArg(k, 11, sizeof slices, &slices);
    err = set_arg(err, k, 12, sizeof slice_cols, &slice_cols);
    err = set_arg(err, k, 13, sizeof(cl_mem), &partial);
    return err;
}

static cl_int launch_kernel(fcl_context *ctx, cl_kernel k, const fcl_softmax_launch *launch,
                            cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    size_t local = launch->work_group_size, global = launch->groups * local;
    return clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, n_wait, wait, done);
}

/* Enqueues the planned kernels; the caller holds ctx->lock. */
static fcl_status enqueue(fcl_context *ctx, const softmax_shape *sh,
                          const fcl_softmax_launch *launch, cl_mem in, cl_mem mask, cl_mem out,
                          cl_mem lse, cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    cl_kernel *kernels = ctx->softmax[sh->d.dtype];
    cl_int err;
    cl_event first = NULL;
    cl_mem partial = NULL;
    fcl_status s = FCL_SUCCESS;

    if (launch->algo == FCL_SOFTMAX_FUSED && launch->lanes) {
        cl_kernel k = kernels[FCL_K_SOFTMAX_BLOCK];
        cl_uint lanes = (cl_uint)launch->lanes;
        err = set_row_args(k, &sh->d, in, mask, out, lse);
        err = set_arg(err, k, 11, sizeof lanes, &lanes);
        if (err == CL_SUCCESS)
            err = launch_kernel(ctx, k, launch, n_wait, wait, done);
    } else if (launch->algo == FCL_SOFTMAX_FUSED) {
        cl_kernel k = kernels[FCL_K_SOFTMAX_FUSED];
        err = set_row_args(k, &sh->d, in, mask, out, lse);
        err = set_arg(err, k, 11, sh->d.cols * sizeof(float), NULL);
        if (err == CL_SUCCESS)
            err = launch_kernel(ctx, k, launch, n_wait, wait, done);
    } else if (launch->algo == FCL_SOFTMAX_ONLINE) {
        cl_kernel k = kernels[launch->per_item ? FCL_K_SOFTMAX_ROWS : FCL_K_SOFTMAX_ONLINE];
        err = set_row_args(k, &sh->d, in, mask, out, lse);
        if (err == CL_SUCCESS)
            err = launch_kernel(ctx, k, launch, n_wait, wait, done);
    } else {
        cl_kernel stats = kernels[FCL_K_SOFTMAX_SPLIT_STATS];
        cl_kernel write = kernels[FCL_K_SOFTMAX_SPLIT_WRITE];
        /* Released right after enqueueing: OpenCL keeps it until the kernels finish. */
        partial = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE,
                                 sh->d.rows * launch->slices * 2 * sizeof(float), NULL, &err);
        if (err != CL_SUCCESS)
            return fcl_fail_cl(ctx, err, "allocating the SPLIT partial statistics");
        err = set_row_args(stats, &sh->d, in, mask, out, lse);
        if (err == CL_SUCCESS)
            err = set_split_args(stats, launch, partial);
        if (err == CL_SUCCESS)
            err = set_row_args(write, &sh->d, in, mask, out, lse);
        if (err == CL_SUCCESS)
            err = set_split_args(write, launch, partial);
        if (err == CL_SUCCESS)
            err = launch_kernel(ctx, stats, launch, n_wait, wait, &first);
        /* Chained by event, so an out-of-order queue keeps the order too. */
        if (err == CL_SUCCESS)
            err = launch_kernel(ctx, write, launch, 1, &first, done);
    }
    if (err != CL_SUCCESS)
        s = fcl_fail_cl(ctx, err, "enqueueing the softmax kernels");
    if (first)
        clReleaseEvent(first);
    if (partial)
        clReleaseMemObject(partial);
    return s;
}

fcl_status fcl_softmax(fcl_context *ctx, const fcl_softmax_desc *d, cl_mem in, cl_mem mask,
                       cl_mem out, cl_mem lse, cl_uint n_wait, const cl_event *wait,
                       cl_event *done)
{
    softmax_shape sh;
    fcl_softmax_launch launch;
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    fcl_status s = check_desc(ctx, d, &sh);
    if (s == FCL_SUCCESS)
        s = check_buffers(ctx, &sh, in, mask, out, lse, n_wait, wait);
    if (s == FCL_SUCCESS)
        s = plan(ctx, &sh, &launch);
    if (s != FCL_SUCCESS)
        return s;
    pthread_mutex_lock(&ctx->lock);
    s = enqueue(ctx, &sh, &launch, in, mask, out, lse, n_wait, wait, done);
    pthread_mutex_unlock(&ctx->lock);
    return s;
}

/* ---- host memory ---- */

fcl_status fcl_softmax_host(fcl_context *ctx, const fcl_softmax_desc *d, const void *in,
                            const float *mask, void *out, float *lse)
{
    softmax_shape sh = {0};
    cl_int err = CL_SUCCESS;
    cl_event done = NULL;
    cl_mem in_buf = NULL, mask_buf = NULL, out_buf = NULL, lse_buf = NULL;
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    fcl_status s = check_desc(ctx, d, &sh);
    if (s != FCL_SUCCESS)
        return s;
    if (!in || !out)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "%s is NULL", in ? "out" : "in");
    int in_place = (in == out);
    if (in_place && sh.d.in_stride != sh.d.out_stride)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "in place (in == out) needs in_stride (%zu) == out_stride (%zu)",
                        sh.d.in_stride, sh.d.out_stride);

    in_buf = fcl_host_buffer(ctx, in_place ? CL_MEM_READ_WRITE : CL_MEM_READ_ONLY, sh.in_bytes, in, &err);
    if (mask)
        mask_buf = fcl_host_buffer(ctx, CL_MEM_READ_ONLY, sh.mask_bytes, mask, &err);
    if (in_place)
        clRetainMemObject(out_buf = in_buf);
    else /* rows with padding: upload out too, so the padding reads back unchanged */
        out_buf = fcl_host_buffer(ctx, CL_MEM_READ_WRITE, sh.out_bytes,
                              sh.d.out_stride > sh.d.cols ? out : NULL, &err);
    if (lse)
        lse_buf = fcl_host_buffer(ctx, CL_MEM_WRITE_ONLY, sh.lse_bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        s = fcl_fail_cl(ctx, err, "allocating device buffers for fcl_softmax_host");
        goto release;
    }
    s = fcl_softmax(ctx, d, in_buf, mask_buf, out_buf, lse_buf, 0, NULL, &done);
    if (s != FCL_SUCCESS)
        goto release;
    err = clEnqueueReadBuffer(ctx->queue, out_buf, CL_TRUE, 0, sh.out_bytes, out, 1, &done, NULL);
    if (err == CL_SUCCESS && lse)
        err = clEnqueueReadBuffer(ctx->queue, lse_buf, CL_TRUE, 0, sh.lse_bytes, lse, 1, &done,
                                  NULL);
    if (err != CL_SUCCESS)
        s = fcl_fail_cl(ctx, err, "running softmax and reading the result back");
release:
    if (done)
        clReleaseEvent(done);
    if (lse_buf)
        clReleaseMemObject(lse_buf);
    if (out_buf)
        clReleaseMemObject(out_buf);
    if (mask_buf)
        clReleaseMemObject(mask_buf);
    if (in_buf)
        clReleaseMemObject(in_buf);
    return s;
}

/* Contexts: device selection, OpenCL objects, and the kernels built for the device. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Probes the device and builds the kernels; on failure the reason moves to the calling
 * thread's last error, since the caller gets no context to ask. */
static fcl_status finish_create(fcl_context *ctx, const fcl_context_options *opts,
                                fcl_context **out)
{
    cl_command_queue_properties queue_props = 0;
    fcl_status s = fcl_probe_device(ctx->device, &ctx->info);
    cl_int err = CL_SUCCESS;
    if (s == FCL_SUCCESS)
        err = clGetCommandQueueInfo(ctx->queue, CL_QUEUE_PROPERTIES, sizeof queue_props,
                                    &queue_props, NULL);
    if (err != CL_SUCCESS)
        s = fcl_fail_cl(ctx, err, "clGetCommandQueueInfo(CL_QUEUE_PROPERTIES)");
    ctx->queue_in_order = !(queue_props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
    if (s == FCL_SUCCESS)
        s = fcl_probe_kernels(ctx);
    if (s == FCL_SUCCESS)
        s = fcl_build_kernels(ctx, opts);
    if (s != FCL_SUCCESS) {
        if (ctx->last_error[0])
            fcl_record_failure(NULL, "%s", ctx->last_error);
        fcl_context_destroy(ctx);
        return s;
    }
    *out = ctx;
    return FCL_SUCCESS;
}

static fcl_context *new_context(void)
{
    fcl_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    if (pthread_mutex_init(&ctx->lock, NULL) != 0)
        goto no_lock;
    if (pthread_mutex_init(&ctx->error_lock, NULL) != 0)
        goto no_error_lock;
    if (pthread_mutex_init(&ctx->build_lock, NULL) != 0)
        goto no_build_lock;
    return ctx;
no_build_lock:
    pthread_mutex_destroy(&ctx->error_lock);
no_error_lock:
    pthread_mutex_destroy(&ctx->lock);
no_lock:
    free(ctx);
    return NULL;
}

static cl_command_queue create_queue(fcl_context *ctx, cl_int *err)
{
    return clCreateCommandQueue(ctx->cl_ctx, ctx->device, CL_QUEUE_PROFILING_ENABLE, err);
}

fcl_status fcl_context_create(const fcl_context_options *opts, fcl_context **out)
{
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    if (!out)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "out is NULL: nowhere to return the context");
    *out = NULL;
    fcl_status s = fcl_select_device(opts ? opts->device : NULL, &platform, &device);
    if (s != FCL_SUCCESS)
        return s;
    fcl_context *ctx = new_context();
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_OUT_OF_HOST_MEMORY, "no host memory for a context");
    clRetainDevice(device); /* a no-op for root devices; destroy releases it */
    ctx->device = device;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
    ctx->cl_ctx = clCreateContext(props, 1, &device, NULL, NULL, &err);
    if (err == CL_SUCCESS)
        ctx->queue = create_queue(ctx, &err);
    if (err != CL_SUCCESS) {
        s = fcl_fail_cl(NULL, err, "creating the OpenCL context and queue");
        fcl_context_destroy(ctx);
        return s;
    }
    return finish_create(ctx, opts, out);
}

fcl_status fcl_context_create_from_cl(cl_context c, cl_device_id d, cl_command_queue q,
                                      const fcl_context_options *opts, fcl_context **out)
{
    cl_int err = CL_SUCCESS;
    if (!out)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "out is NULL: nowhere to return the context");
    *out = NULL;
    if (!c || !d)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT,
                        "the cl_context and cl_device_id must not be NULL");
    fcl_context *ctx = new_context();
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_OUT_OF_HOST_MEMORY, "no host memory for a context");
    /* Our own references: destroy releases exactly these, never the caller's. */
    clRetainContext(c);
    ctx->cl_ctx = c;
    clRetainDevice(d);
    ctx->device = d;
    if (q) {
        clRetainCommandQueue(q);
        ctx->queue = q;
    } else {
        ctx->queue = create_queue(ctx, &err);
    }
    if (err != CL_SUCCESS) {
        fcl_status s = fcl_fail_cl(NULL, err, "creating a command queue on the given context");
        fcl_context_destroy(ctx);
        return s;
    }
    return finish_create(ctx, opts, out);
}

void fcl_context_destroy(fcl_context *ctx)
{
    if (!ctx)
        return;
    fcl_release_kernels(ctx);
    fcl_scratch_release(ctx);
    if (ctx->queue)
        clReleaseCommandQueue(ctx->queue);
    if (ctx->device)
        clReleaseDevice(ctx->device);
    if (ctx->cl_ctx)
        clReleaseContext(ctx->cl_ctx);
    pthread_mutex_destroy(&ctx->build_lock);
    pthread_mutex_destroy(&ctx->error_lock);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

fcl_status fcl_context_device_info(const fcl_context *ctx, fcl_device_info *out)
{
    if (!ctx || !out)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT,
                        "fcl_context_device_info: %s is NULL", ctx ? "out" : "ctx");
    /* Kernels built on first use write their plan fields meanwhile: copy under the build
     * lock (not a change the caller sees: the lock is not part of the context's value). */
    pthread_mutex_t *build_lock = (pthread_mutex_t *)&ctx->build_lock;
    pthread_mutex_lock(build_lock);
    *out = ctx->info;
    pthread_mutex_unlock(build_lock);
    return FCL_SUCCESS;
}

fcl_status fcl_context_get_cl(const fcl_context *ctx, cl_context *c, cl_device_id *d,
                              cl_command_queue *q)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "fcl_context_get_cl: ctx is NULL");
    if (c)
        *c = ctx->cl_ctx;
    if (d)
        *d = ctx->device;
    if (q)
        *q = ctx->queue;
    return FCL_SUCCESS;
}

fcl_status fcl_check_buffer(fcl_context *ctx, const char *name, cl_mem buf, size_t need)
{
    size_t size;
    return fcl_check_buffer_size(ctx, name, buf, need, &size);
}

fcl_status fcl_check_buffer_size(fcl_context *ctx, const char *name, cl_mem buf, size_t need,
                                 size_t *bytes)
{
    size_t size = 0;
    *bytes = 0;
    cl_context owner = NULL;
    if (!buf)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
    cl_int err = clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(buf, CL_MEM_CONTEXT, sizeof(cl_context), &owner, NULL);
    if (err == CL_INVALID_MEM_OBJECT)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "%s is not a valid cl_mem", name);
    if (err != CL_SUCCESS) /* the driver failed, not the caller */
        return fcl_fail_cl(ctx, err, "clGetMemObjectInfo(%s)", name);
    if (owner != ctx->cl_ctx)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s belongs to another cl_context than this flashcl context", name);
    if (size < need)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s holds %zu bytes but the descriptor needs %zu", name, size, need);
    *bytes = size;
    return FCL_SUCCESS;
}

cl_mem fcl_host_buffer(fcl_context *ctx, cl_mem_flags flags, size_t bytes, const void *init,
                       cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    /* OpenCL's own limit on one buffer, checked here: some drivers (NVIDIA's) go past it and
     * copy the whole host array before failing, or succeed on some machines only. */
    if (bytes > ctx->info.max_alloc_size) {
        *err = CL_INVALID_BUFFER_SIZE;
        return NULL;
    }
    if (init)
        flags |= CL_MEM_COPY_HOST_PTR;
    return clCreateBuffer(ctx->cl_ctx, flags, bytes, (void *)init, err);
}

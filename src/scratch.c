/* Device scratch memory that one call's kernels pass between them (split-KV's partial
 * results, SPLIT softmax's statistics, a merge's lse where the caller gives none): kept by
 * the context and reused, grown when a call needs more, released with the context.
 *
 * Why not a buffer a call: creating one and releasing it right after enqueueing made each
 * such call return only when its kernels had finished, on NVIDIA's driver (580, H100: a GQA
 * decoding call spent 0.138 ms in fcl_attention_run, its kernels' whole time), so the host
 * could never queue ahead of the GPU. Reuse has one cost on an out-of-order queue: a call's
 * first kernel that writes scratch waits for the last kernel of the call before that used
 * it, which the queue would otherwise run at the same time (an in-order queue runs them in
 * order itself, and no event is waited on there: fcl_after_launch).
 * Everything here runs under ctx->lock. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

fcl_status fcl_scratch_buffer(fcl_context *ctx, fcl_scratch_slot slot, size_t bytes, cl_mem *buf)
{
    fcl_scratch *s = &ctx->scratch;
    if (s->bytes[slot] < bytes) {
        if (s->buffer[slot])
            clReleaseMemObject(s->buffer[slot]); /* OpenCL keeps it for kernels still using it */
        s->buffer[slot] = NULL;
        s->bytes[slot] = 0;
        cl_int err = CL_SUCCESS;
        /* counts start at zero, from a host copy: no command to order before the kernels */
        void *zeros = slot == FCL_SCRATCH_COUNTS ? calloc(1, bytes) : NULL;
        if (slot == FCL_SCRATCH_COUNTS && !zeros)
            return fcl_fail(ctx, FCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for counts");
        const cl_mem_flags flags = CL_MEM_READ_WRITE | (zeros ? CL_MEM_COPY_HOST_PTR : 0);
        cl_mem grown = clCreateBuffer(ctx->cl_ctx, flags, bytes, zeros, &err);
        free(zeros);
        if (err != CL_SUCCESS)
            return fcl_fail_cl(ctx, err, "allocating %zu bytes of scratch memory", bytes);
        s->buffer[slot] = grown;
        s->bytes[slot] = bytes;
    }
    *buf = s->buffer[slot];
    return FCL_SUCCESS;
}

fcl_status fcl_scratch_wait_list(fcl_context *ctx, cl_uint n_wait, const cl_event *wait,
                                 fcl_wait_list *list)
{
    const cl_event last = ctx->scratch.last_use;
    *list = (fcl_wait_list){.n = n_wait, .events = wait, .owned = NULL};
    if (!last || ctx->queue_in_order)
        return FCL_SUCCESS;
    list->owned = malloc((n_wait + 1u) * sizeof(cl_event));
    if (!list->owned)
        return fcl_fail(ctx, FCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a wait list");
    if (n_wait)
        memcpy(list->owned, wait, n_wait * sizeof(cl_event));
    list->owned[n_wait] = last;
    list->n = n_wait + 1u;
    list->events = list->owned;
    return FCL_SUCCESS;
}

cl_uint fcl_after_launch(const fcl_context *ctx, const cl_event *prev, const cl_event **wait)
{
    *wait = ctx->queue_in_order ? NULL : prev;
    return ctx->queue_in_order ? 0u : 1u;
}

cl_event *fcl_first_event(const fcl_context *ctx, cl_event *slot)
{
    return ctx->queue_in_order ? NULL : slot;
}

cl_event *fcl_second_event(const fcl_context *ctx, cl_event *slot, const cl_event *done)
{
    return ctx->queue_in_order && !done ? NULL : slot;
}

void fcl_wait_list_free(fcl_wait_list *list)
{
    free(list->owned);
    list->owned = NULL;
}

void fcl_scratch_used(fcl_context *ctx, cl_event last)
{
    clRetainEvent(last);
    if (ctx->scratch.last_use)
        clReleaseEvent(ctx->scratch.last_use);
    ctx->scratch.last_use = last;
}

void fcl_scratch_pair_done(fcl_context *ctx, cl_event first, cl_event second, cl_event *done)
{
    if (second || first) /* where the second launch failed, the first still wrote scratch */
        fcl_scratch_used(ctx, second ? second : first);
    if (first)
        clReleaseEvent(first);
    if (second && done)
        *done = second;
    else if (second)
        clReleaseEvent(second);
}

void fcl_scratch_release(fcl_context *ctx)
{
    fcl_scratch *s = &ctx->scratch;
    for (int i = 0; i < FCL_SCRATCH_SLOTS; i++)
        if (s->buffer[i])
            clReleaseMemObject(s->buffer[i]);
    if (s->last_use)
        clReleaseEvent(s->last_use);
    memset(s, 0, sizeof *s);
}

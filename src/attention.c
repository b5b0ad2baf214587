/* Attention: the public calls, checking the caller's buffers, and launching the kernels of
 * a resolved descriptor (attention_desc.c resolves it; plan.c chooses the kernel). */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which optional buffers an io (device or host: the fields have the same names) gives. */
#define FCL_GIVEN_BY(io)                                                                       \
    {(io)->mask != NULL,          (io)->lse != NULL,           (io)->seqlens_kv != NULL,      \
     (io)->cu_seqlens_q != NULL,  (io)->cu_seqlens_kv != NULL, (io)->block_table != NULL,     \
     (io)->alibi_slopes != NULL,  (io)->sinks != NULL,         (io)->k_scales != NULL,        \
     (io)->v_scales != NULL,      (io)->leftpad_kv != NULL,    (io)->query_offsets != NULL}

/* Whether rows of K or V (strides: their view's offset and strides or'd) suit the NVIDIA
 * kernels' copies: at multiples of 8 elements (16 bytes of half storage); of a coded format
 * (a FA_FLAG_KV call) at multiples of 2 bytes, the row's bytes too (the tensor cores' _kv
 * builds stage rows of 2 mod 4 bytes by loads, the others by cp.async; the 8-bit decode
 * kernel needs multiples of 4: kv_rows_at). */
static int kv_rows_aligned(const fcl_attention_params *p, cl_ulong strides, unsigned format,
                           size_t dim)
{
    const fcl_format_traits *f = fcl_format(format);
    if (!(p->flags & FA_FLAG_KV) || !f || (f->roles & FCL_ROLE_FLOAT))
        return strides % 8 == 0;
    return (strides | fcl_format_row_units(format, dim)) % 2 == 0;
}

/* K's (v 0) or V's view offset and strides or'd: every row of it starts at a multiple of
 * what divides this. */
static cl_ulong kv_starts(const fcl_attention_params *p, int v)
{
    return v ? p->v_offset | p->v_batch | p->v_head | p->v_token
             : p->k_offset | p->k_batch | p->k_head | p->k_token;
}

/* Whether every row of K and V (of a coded format) starts at a multiple of `bytes`: 4 for the
 * 8-bit decode kernel's staged rows (its code words' alignment is known when it is compiled;
 * the rows' bytes are multiples of 4 at the head dims it takes), 16 for its direct build's
 * 16-byte copies (the rows' bytes are multiples of 16 where it takes them). */
static int kv_rows_at(const fcl_attention_params *p, cl_ulong bytes)
{
    return ((kv_starts(p, 0) | kv_starts(p, 1)) % bytes) == 0;
}

/* Whether every row of q, k and v starts where the tensor-core kernels' copies need. */
static int nv_rows_aligned(const fcl_attention_params *p)
{
    const cl_ulong q = p->q_offset | p->q_batch | p->q_head | p->q_token;
    return q % 8 == 0 && kv_rows_aligned(p, kv_starts(p, 0), p->format_k, p->head_dim) &&
           kv_rows_aligned(p, kv_starts(p, 1), p->format_v, p->head_dim_v);
}

/* Whether two launches have the same kernel shape. */
static int same_shape(const fcl_attention_launch *a, const fcl_attention_launch *b)
{
    return a->path == b->path && a->block_q == b->block_q && a->block_kv == b->block_kv &&
           a->work_group_size == b->work_group_size;
}

/* The portable launch for pr with its kernel, built on first use: where the kernel of the
 * planned path does not fit for the call's features, another path (decode -> tile -> rows);
 * where a bucket's first tile kernel refits its tile, the call is planned again. */
static fcl_status plan_portable(fcl_context *ctx, const fcl_attention_problem *pr,
                                fcl_attention_launch *l)
{
    unsigned avoid = 0;
    for (int round = 0; round < 8; round++) {
        if (fcl_plan_attention_avoiding(&ctx->info, &pr->d, avoid, l) != FCL_SUCCESS)
            return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED,
                            "attention with head dims (%zu, %zu), len_kv %zu on this device: %s",
                            pr->d.head_dim, pr->d.head_dim_v, pr->d.len_kv, l->refusal);
        const fcl_attention_launch planned = *l;
        cl_kernel kernel;
        fcl_status s = fcl_attention_kernel(ctx, l, pr->params.flags, &kernel);
        if (s != FCL_SUCCESS)
            return s;
        if (!kernel) {
            avoid |= 1u << l->path;
            continue;
        }
        fcl_plan_attention_avoiding(&ctx->info, &pr->d, avoid, l);
        if (same_shape(l, &planned)) {
            l->kernel = kernel;
            return FCL_SUCCESS;
        }
    }
    return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED, "no attention kernel fits this device for "
                    "head dims (%zu, %zu)", pr->d.head_dim, pr->d.head_dim_v);
}

/* *taken 1 where NVIDIA's planner took the call (planned, launch l) and its kernel builds
 * (l->kernel); else 0, and the portable kernels serve. K and V in a format with a build of
 * its own take it (l->kv_fixed, where the switch allows), or where it does not build or fit,
 * the build for any format. */
static fcl_status plan_nvidia(fcl_context *ctx, int planned, const fcl_attention_problem *pr,
                              fcl_attention_launch *l, int *taken)
{
    *taken = 0;
    if (!planned)
        return FCL_SUCCESS;
    l->kv_fixed = ctx->nv.kv_fixed_on ? fcl_plan_mma_fixed(&pr->d, l) : 0;
    fcl_status s = fcl_attention_kernel(ctx, l, pr->params.flags, &l->kernel);
    if (s == FCL_SUCCESS && !l->kernel && l->kv_fixed) {
        l->kv_fixed = 0;
        s = fcl_attention_kernel(ctx, l, pr->params.flags, &l->kernel);
    }
    *taken = s == FCL_SUCCESS && l->kernel;
    return s;
}

/* The launch for pr with its kernel, and the problem the kernels run: pr, or where a GQA group
 * decodes on the tensor cores, the group's heads as rows of one kv head
 * (fcl_attention_gqa_rows). The caller holds ctx->build_lock. */
static fcl_status plan_kernel(fcl_context *ctx, const fcl_attention_problem *pr,
                              fcl_attention_launch *l, fcl_attention_problem *run)
{
    int taken = 0;
    fcl_status s = FCL_SUCCESS;
    if (fcl_attention_gqa_rows(pr, run))
        s = plan_nvidia(ctx,
                        fcl_plan_attention_gqa_rows(&ctx->info, &run->d,
                                                    nv_rows_aligned(&run->params),
                                                    ctx->nv.kv_decode_on && kv_rows_at(&run->params, 4),
                                                    ctx->nv.kv_direct_on && kv_rows_at(&run->params, 16),
                                                    ctx->nv.merge_in_kernel_on, l),
                        run, l, &taken);
    if (s != FCL_SUCCESS || taken)
        return s;
    *run = *pr;
    const int mma = fcl_plan_attention_mma(&ctx->info, &pr->d, nv_rows_aligned(&pr->params), l);
    s = plan_nvidia(ctx, mma, pr, l, &taken);
    if (s != FCL_SUCCESS || taken)
        return s;
    return plan_portable(ctx, pr, l);
}

static fcl_status plan(fcl_context *ctx, const fcl_attention_problem *pr, fcl_attention_launch *l,
                       fcl_attention_problem *run)
{
    pthread_mutex_lock(&ctx->build_lock);
    fcl_status s = plan_kernel(ctx, pr, l, run);
    if (s == FCL_SUCCESS && l->splits > 1) /* split-KV: the merge of the splits too */
        s = fcl_build_merge(ctx);
    pthread_mutex_unlock(&ctx->build_lock);
    return s;
}

const char *fcl_attention_path_name(fcl_attention_path p)
{
    switch (p) {
    case FCL_ATTENTION_PATH_TILE: return "tile";
    case FCL_ATTENTION_PATH_DECODE: return "decode";
    case FCL_ATTENTION_PATH_ROWS: return "rows";
    case FCL_ATTENTION_PATH_MMA: return "mma";
    case FCL_ATTENTION_PATH_DECODE_NV: return "decode_nv";
    }
    return "unknown";
}

fcl_status fcl_attention_plan(fcl_context *ctx, const fcl_attention_desc *d,
                              fcl_attention_plan_info *info)
{
    fcl_attention_problem pr, run;
    fcl_attention_launch l;
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (!info)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "info (the result) is NULL");
    if (!d)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "the attention descriptor is NULL");
    /* The buffers the descriptor's features need, as a call would give them. */
    fcl_attention_given g = {.mask = d->mask_type != FCL_MASK_NONE,
                             .block_table = d->page_size > 0,
                             .alibi_slopes = d->alibi_from_mask != 0,
                             .k_scales = fcl_kv_scale_has_buffer(d->scale_mode_k),
                             .v_scales = fcl_kv_scale_has_buffer(d->scale_mode_v)};
    fcl_status s = fcl_attention_resolve(ctx, d, &g, &pr);
    if (s == FCL_SUCCESS)
        s = plan(ctx, &pr, &l, &run);
    if (s == FCL_SUCCESS) {
        info->block_q = l.block_q;
        info->block_kv = l.block_kv;
        info->kv_splits = l.splits;
        info->work_group_size = l.work_group_size;
        info->path = l.path;
    }
    return s;
}

/* ---- device buffers ---- */

static size_t mask_element_bytes(fcl_mask_type t)
{
    return t == FCL_MASK_BOOL_U8 ? 1 : t == FCL_MASK_ADD_F16 ? 2 : 4;
}

/* Checks every buffer of io against what pr reaches, sets the kernels' buffer limits in
 * pr->params, and fills b. */
static fcl_status check_device_io(fcl_context *ctx, fcl_attention_problem *pr,
                                  const fcl_attention_io *io, fcl_attention_buffers *b)
{
    const fcl_attention_desc *d = &pr->d;
    fcl_attention_params *p = &pr->params;
    fcl_attention_extents e;
    /* Packed totals are on the device: each buffer must hold at least one row. */
    fcl_status s = fcl_attention_extents_of(ctx, pr, 1, 1, &e);
    if (s != FCL_SUCCESS)
        return s;
    const struct {
        const char *name;
        cl_mem buf;
        int required;
        size_t elems, elem_bytes;
        cl_ulong *limit;
    } need[] = {
        {"q", io->q, 1, e.q, fcl_dtype_size(d->dtype_q), &p->q_limit},
        {"k", io->k, 1, e.k, fcl_format_unit_bytes(d->format_k), &p->k_limit},
        {"v", io->v, 1, e.v, fcl_format_unit_bytes(d->format_v), &p->v_limit},
        {"out", io->out, 1, e.out, fcl_dtype_size(d->dtype_o), &p->o_limit},
        {"mask (mask_type is set)", io->mask, 0, e.mask, mask_element_bytes(d->mask_type), NULL},
        {"lse", io->lse, 0, e.lse, sizeof(float), &p->lse_limit},
        {"seqlens_kv", io->seqlens_kv, 0, e.seqlens_kv, sizeof(cl_int), NULL},
        {"cu_seqlens_q", io->cu_seqlens_q, 0, e.cu_seqlens, sizeof(cl_int), NULL},
        {"cu_seqlens_kv", io->cu_seqlens_kv, 0, e.cu_seqlens, sizeof(cl_int), NULL},
        {"block_table", io->block_table, 0, e.block_table, sizeof(cl_int), NULL},
        {"alibi_slopes", io->alibi_slopes, 0, e.alibi_slopes, sizeof(float), NULL},
        {"sinks", io->sinks, 0, e.sinks, sizeof(float), NULL},
        {"k_scales", io->k_scales, 0, e.k_scales, sizeof(float), &p->ks_limit},
        {"v_scales", io->v_scales, 0, e.v_scales, sizeof(float), &p->vs_limit},
        {"leftpad_kv", io->leftpad_kv, 0, e.seqlens_kv, sizeof(cl_int), NULL},
        {"query_offsets", io->query_offsets, 0, e.seqlens_kv, sizeof(cl_int), NULL},
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0] && s == FCL_SUCCESS; i++) {
        size_t bytes = 0;
        if (!need[i].required && !need[i].buf)
            continue;
        s = fcl_check_buffer_size(ctx, need[i].name, need[i].buf, need[i].elems * need[i].elem_bytes,
                                  &bytes);
        if (need[i].limit)
            *need[i].limit = bytes / need[i].elem_bytes;
    }
    if (s != FCL_SUCCESS)
        return s;
    const cl_mem inputs[3] = {io->q, io->k, io->v};
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++)
        if (io->out == inputs[i] && fcl_attention_out_overlaps(pr, &e, i))
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "out is the buffer of %s and its view overlaps %s's", names[i],
                            names[i]);
    fcl_attention_buffers all = {io->q,           io->k,          io->v,
                                 io->mask,        io->out,        io->lse,
                                 NULL,            NULL,           io->seqlens_kv,
                                 io->cu_seqlens_q, io->cu_seqlens_kv, io->block_table,
                                 io->alibi_slopes, io->sinks,    io->k_scales,
                                 io->v_scales,    io->leftpad_kv,  io->query_offsets,
                                 NULL};
    *b = all;
    return FCL_SUCCESS;
}

/* Sets every argument of an attention kernel from the one list; the first failure is
 * reported. */
static cl_int set_attention_args(cl_kernel kern, const fcl_attention_buffers *b,
                                 const fcl_attention_params *p)
{
    cl_uint i = 0;
    cl_int err = CL_SUCCESS;
#define FCL_SET_BUFFER(kind, name)                                                             \
    if (err == CL_SUCCESS)                                                                     \
        err = clSetKernelArg(kern, i++, sizeof(cl_mem), &b->name);
#define FCL_SET_PARAM(type, name)                                                              \
    if (err == CL_SUCCESS)                                                                     \
        err = clSetKernelArg(kern, i++, sizeof p->name, &p->name);
    FA_BUFFERS(FCL_SET_BUFFER)
    FA_PARAMS(FCL_SET_PARAM, FCL_SET_PARAM)
#undef FCL_SET_BUFFER
#undef FCL_SET_PARAM
    return err;
}

static cl_int launch(fcl_context *ctx, cl_kernel k, size_t groups, size_t local, cl_uint n_wait,
                     const cl_event *wait, cl_event *done)
{
    size_t global = groups * local;
    return clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, n_wait, wait, done);
}

/* Split-KV merged in the kernel (enqueue_split): one launch, after `after`. On an in-order
 * queue the kernel takes no event and done comes from a marker after it, enqueued while it
 * runs: an event on the context's profiling queue holds the kernel back by its ~8 us of
 * host time (NVIDIA 580, H200). */
static fcl_status enqueue_merging(fcl_context *ctx, cl_kernel kern, const fcl_attention_launch *l,
                                  const fcl_attention_buffers *b, fcl_attention_params *p,
                                  fcl_wait_list *after, cl_event *done)
{
    cl_event ended = NULL;
    p->flags |= FA_FLAG_PARTIAL | FA_FLAG_MERGE_LAST;
    cl_int err = set_attention_args(kern, b, p);
    if (err == CL_SUCCESS)
        err = launch(ctx, kern, l->groups, l->work_group_size, after->n, after->events,
                     fcl_first_event(ctx, &ended));
    fcl_wait_list_free(after);
    if (err == CL_SUCCESS && !ended && done)
        err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, done);
    fcl_scratch_pair_done(ctx, NULL, ended, done);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the attention kernel");
}

/* Split-KV: kern writes partial results of p's rows into the context's scratch memory (after
 * the last kernel that used it) and the merge combines them into the rows: the merge kernel,
 * or where l->merge_in_kernel, kern's last group of each row set (FA_FLAG_MERGE_LAST, its
 * counts in scratch too). */
static fcl_status enqueue_split(fcl_context *ctx, cl_kernel kern, const fcl_attention_launch *l,
                                size_t rows, size_t head_dim_v, fcl_attention_buffers *b,
                                fcl_attention_params *p, cl_uint n_wait, const cl_event *wait,
                                cl_event *done)
{
    fcl_wait_list after;
    fcl_status s = fcl_scratch_buffer(ctx, FCL_SCRATCH_VALUES,
                                      rows * l->splits * head_dim_v * sizeof(float), &b->partial_o);
    if (s == FCL_SUCCESS)
        s = fcl_scratch_buffer(ctx, FCL_SCRATCH_STATS, rows * l->splits * 2 * sizeof(float),
                               &b->partial_ml);
    if (s == FCL_SUCCESS && l->merge_in_kernel)
        s = fcl_scratch_buffer(ctx, FCL_SCRATCH_COUNTS, l->work * sizeof(cl_uint),
                               &b->merge_counts);
    if (s == FCL_SUCCESS)
        s = fcl_scratch_wait_list(ctx, n_wait, wait, &after);
    if (s != FCL_SUCCESS)
        return s;
    if (l->merge_in_kernel)
        return enqueue_merging(ctx, kern, l, b, p, &after, done);
    cl_event first = NULL, merged = NULL;
    p->flags |= FA_FLAG_PARTIAL;
    cl_int err = set_attention_args(kern, b, p);
    if (err == CL_SUCCESS)
        err = launch(ctx, kern, l->groups, l->work_group_size, after.n, after.events,
                     fcl_first_event(ctx, &first));
    fcl_wait_list_free(&after);
    p->flags &= ~(cl_uint)FA_FLAG_PARTIAL; /* the merge writes the rows themselves */
    if (err == CL_SUCCESS)
        err = set_attention_args(ctx->attention_merge_splits, b, p);
    const cl_event *after_first;
    const cl_uint n_after = fcl_after_launch(ctx, &first, &after_first);
    if (err == CL_SUCCESS)
        err = launch(ctx, ctx->attention_merge_splits,
                     fcl_plan_merge_groups(&ctx->info, rows, l->splits, head_dim_v,
                                           ctx->merge_work_group),
                     ctx->merge_work_group, n_after, after_first,
                     fcl_second_event(ctx, &merged, done));
    fcl_scratch_pair_done(ctx, first, merged, done);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the attention kernels");
}

/* Enqueues the attention kernel, and with split-KV the merge; the caller holds ctx->lock. */
static fcl_status enqueue(fcl_context *ctx, const fcl_attention_problem *pr,
                          const fcl_attention_launch *l, fcl_attention_buffers *b, cl_uint n_wait,
                          const cl_event *wait, cl_event *done)
{
    fcl_attention_params p = pr->params;
    cl_kernel kern = l->kernel;
    p.q_tiles = l->q_tiles;
    p.heads_step = l->heads_step;
    p.splits = l->splits;
    p.split_len = l->split_len;
    if (l->splits > 1)
        return enqueue_split(ctx, kern, l, pr->d.batch * pr->d.heads_q * pr->d.len_q,
                             pr->d.head_dim_v, b, &p, n_wait, wait, done);
    cl_int err = set_attention_args(kern, b, &p);
    if (err == CL_SUCCESS)
        err = launch(ctx, kern, l->groups, l->work_group_size, n_wait, wait, done);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the attention kernel");
}

fcl_status fcl_attention_run(fcl_context *ctx, const fcl_attention_desc *d,
                             const fcl_attention_io *io, cl_uint n_wait, const cl_event *wait,
                             cl_event *done)
{
    fcl_attention_problem pr, run;
    fcl_attention_launch l;
    fcl_attention_buffers b;
    fcl_status s = fcl_check_call(ctx, io, n_wait, wait);
    if (s != FCL_SUCCESS)
        return s;
    const fcl_attention_given g = FCL_GIVEN_BY(io);
    s = fcl_attention_resolve(ctx, d, &g, &pr);
    if (s == FCL_SUCCESS)
        s = check_device_io(ctx, &pr, io, &b);
    if (s == FCL_SUCCESS)
        s = plan(ctx, &pr, &l, &run);
    if (s != FCL_SUCCESS)
        return s;
    pthread_mutex_lock(&ctx->lock);
    s = enqueue(ctx, &run, &l, &b, n_wait, wait, done);
    pthread_mutex_unlock(&ctx->lock);
    return s;
}

fcl_status fcl_attention(fcl_context *ctx, const fcl_attention_desc *d, cl_mem q, cl_mem k,
                         cl_mem v, cl_mem mask, cl_mem out, cl_mem lse, cl_uint n_wait,
                         const cl_event *wait, cl_event *done)
{
    const fcl_attention_io io = {.q = q, .k = k, .v = v, .mask = mask, .out = out, .lse = lse};
    return fcl_attention_run(ctx, d, &io, n_wait, wait, done);
}

/* ---- host memory ---- */

/* Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte. */
static int host_ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes)
{
    const char *pa = a, *pb = b;
    return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

/* A device buffer of max(bytes, at_least) bytes holding a copy of host's first bytes (the
 * caller's memory is never written); NULL where host is NULL. */
static cl_mem upload(fcl_context *ctx, const void *host, size_t bytes, size_t at_least, cl_int *err)
{
    if (!host || *err != CL_SUCCESS)
        return NULL;
    if (bytes >= at_least)
        return fcl_host_buffer(ctx, CL_MEM_READ_ONLY, bytes, host, err);
    cl_mem m = fcl_host_buffer(ctx, CL_MEM_READ_ONLY, at_least, NULL, err);
    if (*err == CL_SUCCESS && bytes)
        *err = clEnqueueWriteBuffer(ctx->queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    return m;
}

/* A tensor of the host call: its elements from its view's offset to its extent. */
typedef struct host_tensor {
    const char *name;
    const void *base; /* at the view's offset */
    size_t bytes;     /* to the extent */
} host_tensor;

static host_tensor host_tensor_of(const char *name, const void *ptr, size_t offset, size_t extent,
                                  size_t elem)
{
    host_tensor t = {name, ptr ? (const char *)ptr + offset * elem : NULL,
                     extent > offset ? (extent - offset) * elem : 0};
    return t;
}

fcl_status fcl_attention_run_host(fcl_context *ctx, const fcl_attention_desc *desc,
                                  const fcl_attention_host_io *io)
{
    fcl_attention_problem pr, run;
    fcl_attention_launch l;
    fcl_attention_extents e, dev;
    size_t total_q, total_kv;
    cl_int err = CL_SUCCESS;
    cl_event done = NULL;
    fcl_attention_io b = {0};
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (!io)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "io is NULL");
    const fcl_attention_given g = FCL_GIVEN_BY(io);
    fcl_status s = fcl_attention_resolve(ctx, desc, &g, &pr);
    if (s != FCL_SUCCESS)
        return s;
    const void *required[] = {io->q, io->k, io->v, io->out};
    const char *required_names[] = {"q", "k", "v", "out"};
    for (int i = 0; i < 4; i++)
        if (!required[i])
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "%s is NULL", required_names[i]);
    s = fcl_attention_check_indices(ctx, &pr, io, &total_q, &total_kv);
    if (s == FCL_SUCCESS)
        s = fcl_attention_extents_of(ctx, &pr, total_q, total_kv, &e);
    /* Planning follows validation, so bad input is named as such on any device; an
     * unsupported shape still fails before any allocation. */
    if (s == FCL_SUCCESS)
        s = plan(ctx, &pr, &l, &run);
    if (s != FCL_SUCCESS)
        return s;
    const fcl_attention_desc *d = &pr.d;
    const size_t sq = fcl_dtype_size(d->dtype_q), so = fcl_dtype_size(d->dtype_o);
    const size_t sk = fcl_format_unit_bytes(d->format_k), sv = fcl_format_unit_bytes(d->format_v);
    host_tensor q = host_tensor_of("q", io->q, d->q_view.offset, e.q, sq);
    host_tensor k = host_tensor_of("k", io->k, d->k_view.offset, e.k, sk);
    host_tensor v = host_tensor_of("v", io->v, d->v_view.offset, e.v, sv);
    host_tensor out = host_tensor_of("out", io->out, d->o_view.offset, e.out, so);
    const host_tensor inputs[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        if (host_ranges_overlap(out.base, out.bytes, inputs[i].base, inputs[i].bytes))
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "out's view overlaps %s's in memory", inputs[i].name);
    if (out.bytes == 0)
        return FCL_SUCCESS; /* no query in any sequence: nothing to write */

    /* The device copies start at the views' offsets (d is read no more: pr changes). */
    fcl_attention_desc on_device = *d;
    on_device.q_view.offset = on_device.k_view.offset = 0;
    on_device.v_view.offset = on_device.o_view.offset = 0;
    pr.d = on_device;
    s = fcl_attention_extents_of(ctx, &pr, 1, 1, &dev); /* what the device call checks */
    if (s != FCL_SUCCESS)
        return s;
    b.q = upload(ctx, q.base, q.bytes, dev.q * sq, &err);
    b.k = upload(ctx, k.base, k.bytes, dev.k * sk, &err);
    b.v = upload(ctx, v.base, v.bytes, dev.v * sv, &err);
    b.mask = upload(ctx, io->mask, e.mask * mask_element_bytes(d->mask_type), 0, &err);
    b.seqlens_kv = upload(ctx, io->seqlens_kv, e.seqlens_kv * sizeof(int32_t), 0, &err);
    b.cu_seqlens_q = upload(ctx, io->cu_seqlens_q, e.cu_seqlens * sizeof(int32_t), 0, &err);
    b.cu_seqlens_kv = upload(ctx, io->cu_seqlens_kv, e.cu_seqlens * sizeof(int32_t), 0, &err);
    b.block_table = upload(ctx, io->block_table, e.block_table * sizeof(int32_t), 0, &err);
    b.alibi_slopes = upload(ctx, io->alibi_slopes, e.alibi_slopes * sizeof(float), 0, &err);
    b.sinks = upload(ctx, io->sinks, e.sinks * sizeof(float), 0, &err);
    b.k_scales = upload(ctx, io->k_scales, e.k_scales * sizeof(float), 0, &err);
    b.v_scales = upload(ctx, io->v_scales, e.v_scales * sizeof(float), 0, &err);
    b.leftpad_kv = upload(ctx, io->leftpad_kv, e.seqlens_kv * sizeof(int32_t), 0, &err);
    b.query_offsets = upload(ctx, io->query_offsets, e.seqlens_kv * sizeof(int32_t), 0, &err);
    /* out starts as the caller's, so what lies between its rows comes back unchanged. */
    if (err == CL_SUCCESS)
        b.out = fcl_host_buffer(ctx, CL_MEM_READ_WRITE, out.bytes, out.base, &err);
    if (io->lse && e.lse)
        b.lse = fcl_host_buffer(ctx, CL_MEM_WRITE_ONLY, e.lse * sizeof(float), NULL, &err);
    if (err != CL_SUCCESS) {
        s = fcl_fail_cl(ctx, err, "allocating device buffers for fcl_attention_run_host");
        goto release;
    }
    s = fcl_attention_run(ctx, &on_device, &b, 0, NULL, &done);
    if (s != FCL_SUCCESS)
        goto release;
    err = clEnqueueReadBuffer(ctx->queue, b.out, CL_TRUE, 0, out.bytes, (void *)out.base, 1, &done,
                              NULL);
    if (err == CL_SUCCESS && b.lse)
        err = clEnqueueReadBuffer(ctx->queue, b.lse, CL_TRUE, 0, e.lse * sizeof(float), io->lse, 1,
                                  &done, NULL);
    if (err != CL_SUCCESS)
        s = fcl_fail_cl(ctx, err, "running attention and reading the result back");
release:
    if (done)
        clReleaseEvent(done);
    cl_mem all[] = {b.q,          b.k,           b.v,           b.mask,
                    b.out,        b.lse,         b.seqlens_kv,  b.cu_seqlens_q,
                    b.cu_seqlens_kv, b.block_table, b.alibi_slopes, b.sinks,
                    b.k_scales,   b.v_scales,    b.leftpad_kv,  b.query_offsets};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    return s;
}

fcl_status fcl_attention_host(fcl_context *ctx, const fcl_attention_desc *d, const void *q,
                              const void *k, const void *v, const void *mask, void *out,
                              float *lse)
{
    const fcl_attention_host_io io = {.q = q, .k = k, .v = v, .mask = mask, .out = out, .lse = lse};
    return fcl_attention_run_host(ctx, d, &io);
}

/* ---- ALiBi slopes and merging ---- */

fcl_status fcl_alibi_slopes(size_t heads, float max_bias, float *slopes)
{
    if (heads == 0 || !slopes)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT,
                        "fcl_alibi_slopes needs heads >= 1 (%zu) and a slopes array", heads);
    if (!isfinite(max_bias))
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "max_bias (%g) must be finite",
                        (double)max_bias);
    size_t n = 1;
    while (n * 2 <= heads)
        n *= 2;
    const double m0 = exp2(-(double)max_bias / (double)n);
    const double m1 = exp2(-(double)max_bias / 2.0 / (double)n);
    for (size_t h = 0; h < heads; h++)
        slopes[h] = (float)(h < n ? pow(m0, (double)(h + 1)) : pow(m1, (double)(2 * (h - n) + 1)));
    return FCL_SUCCESS;
}

/* (out, lse) = merge of (a_out, a_lse) and, where b_out is given, (b_out, b_lse). */
static cl_int merge_step(fcl_context *ctx, cl_mem a_out, cl_mem a_lse, cl_mem b_out, cl_mem b_lse,
                         cl_mem out, cl_mem lse, size_t rows, size_t dim, cl_uint n_wait,
                         const cl_event *wait, cl_event *done)
{
    cl_kernel k = ctx->attention_merge_parts;
    const cl_uint has_b = b_out != NULL;
    const cl_ulong n_rows = rows, n_dim = dim;
    const void *args[] = {&a_out, &a_lse, &b_out, &b_lse, &out, &lse, &has_b, &n_rows, &n_dim};
    const size_t sizes[] = {sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem),
                            sizeof(cl_mem), sizeof(cl_mem), sizeof has_b, sizeof n_rows,
                            sizeof n_dim};
    cl_int err = CL_SUCCESS;
    for (cl_uint i = 0; i < sizeof sizes / sizeof sizes[0] && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, i, sizes[i], args[i]);
    if (err == CL_SUCCESS)
        err = launch(ctx, k, fcl_plan_merge_groups(&ctx->info, rows, 1, dim, ctx->merge_work_group),
                     ctx->merge_work_group, n_wait, wait, done);
    return err;
}

/* The parts whose out and lse buffers out and lse are (-1: none); FCL_ERROR_INVALID_ARGUMENT
 * where out is a part's lse or lse a part's out. */
static fcl_status own_parts(fcl_context *ctx, size_t n_parts, const cl_mem *outs, const cl_mem *lses,
                            cl_mem out, cl_mem lse, long *out_part, long *lse_part)
{
    *out_part = *lse_part = -1;
    for (size_t p = 0; p < n_parts; p++) {
        if (out == lses[p] || (lse && lse == outs[p]))
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                            "out or lse is the other kind of buffer of part %zu", p);
        if (out == outs[p])
            *out_part = (long)p;
        if (lse && lse == lses[p])
            *lse_part = (long)p;
    }
    return FCL_SUCCESS;
}

/* The order the parts are merged in: out's part first, then lse's, so that each is read (in
 * the first merge, which reads an element before it writes it) before it is overwritten;
 * the others after. */
static void merge_order(size_t n_parts, long out_part, long lse_part, size_t *order)
{
    size_t n = 0;
    if (out_part >= 0)
        order[n++] = (size_t)out_part;
    if (lse_part >= 0 && lse_part != out_part)
        order[n++] = (size_t)lse_part;
    for (size_t p = 0; p < n_parts; p++)
        if ((long)p != out_part && (long)p != lse_part)
            order[n++] = p;
}

fcl_status fcl_attention_merge(fcl_context *ctx, size_t n_parts, size_t rows, size_t head_dim_v,
                               const cl_mem *outs, const cl_mem *lses, cl_mem out, cl_mem lse,
                               cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (n_parts == 0 || rows == 0 || head_dim_v == 0 || !outs || !lses)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "n_parts (%zu), rows (%zu) and head_dim_v (%zu) must be at least 1, with "
                        "outs and lses arrays",
                        n_parts, rows, head_dim_v);
    if (n_wait && !wait)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                        (unsigned)n_wait);
    if (rows > SIZE_MAX / sizeof(float) / head_dim_v)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "rows (%zu) x head_dim_v (%zu) overflows the address space", rows, head_dim_v);
    const size_t out_bytes = rows * head_dim_v * sizeof(float), lse_bytes = rows * sizeof(float);
    fcl_status s = fcl_check_buffer(ctx, "out", out, out_bytes);
    if (s == FCL_SUCCESS && lse)
        s = fcl_check_buffer(ctx, "lse", lse, lse_bytes);
    for (size_t p = 0; p < n_parts && s == FCL_SUCCESS; p++) {
        char name[48];
        snprintf(name, sizeof name, "outs[%zu]", p);
        s = fcl_check_buffer(ctx, name, outs[p], out_bytes);
        snprintf(name, sizeof name, "lses[%zu]", p);
        if (s == FCL_SUCCESS)
            s = fcl_check_buffer(ctx, name, lses[p], lse_bytes);
    }
    long out_part, lse_part;
    if (s == FCL_SUCCESS)
        s = own_parts(ctx, n_parts, outs, lses, out, lse, &out_part, &lse_part);
    if (s != FCL_SUCCESS)
        return s;
    size_t *order = malloc(n_parts * sizeof *order);
    if (!order)
        return fcl_fail(ctx, FCL_ERROR_OUT_OF_HOST_MEMORY, "no host memory for %zu parts", n_parts);
    merge_order(n_parts, out_part, lse_part, order);

    pthread_mutex_lock(&ctx->build_lock);
    s = fcl_build_merge(ctx);
    pthread_mutex_unlock(&ctx->build_lock);
    if (s != FCL_SUCCESS) {
        free(order);
        return s;
    }
    /* Without the caller's lse, the merged lse lives in the context's scratch memory, whose
     * last user the first merge waits for. */
    cl_mem lse_to = lse;
    fcl_wait_list after = {.n = n_wait, .events = wait};
    pthread_mutex_lock(&ctx->lock);
    if (!lse)
        s = fcl_scratch_buffer(ctx, FCL_SCRATCH_STATS, lse_bytes, &lse_to);
    if (!lse && s == FCL_SUCCESS)
        s = fcl_scratch_wait_list(ctx, n_wait, wait, &after);
    if (s != FCL_SUCCESS) {
        pthread_mutex_unlock(&ctx->lock);
        free(order);
        return s;
    }
    /* A chain of pairwise merges into (out, lse_to) in merge_order's order (one part alone:
     * a copy). */
    cl_mem acc_out = outs[order[0]], acc_lse = lses[order[0]];
    cl_event prev = NULL;
    cl_int err = CL_SUCCESS;
    for (size_t i = n_parts > 1 ? 1 : 0; i < n_parts && err == CL_SUCCESS; i++) {
        cl_event next = NULL;
        const cl_mem b_out = i ? outs[order[i]] : NULL, b_lse = i ? lses[order[i]] : NULL;
        const cl_event *wait_on = after.events;
        const cl_uint n_on = prev ? fcl_after_launch(ctx, &prev, &wait_on) : after.n;
        err = merge_step(ctx, acc_out, acc_lse, b_out, b_lse, out, lse_to, rows, head_dim_v, n_on,
                         wait_on, &next);
        if (prev)
            clReleaseEvent(prev);
        prev = next;
        acc_out = out;
        acc_lse = lse_to;
    }
    fcl_wait_list_free(&after);
    free(order);
    if (prev && !lse)
        fcl_scratch_used(ctx, prev);
    pthread_mutex_unlock(&ctx->lock);
    if (prev && done && err == CL_SUCCESS)
        *done = prev;
    else if (prev)
        clReleaseEvent(prev);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the merge kernels");
}

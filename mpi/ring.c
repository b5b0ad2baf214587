/* flashcl_mpi: ring attention (flashcl_mpi.h, fcl_mpi_attention_ring and _ring_zigzag). Step
 * t, rank r holds the K and V block of rank (r - t) mod n: it sends it on to rank r + 1 and
 * receives the next from rank r - 1 (host buffers, in flight during the step), computes its
 * queries' partial over the held block at the queries' places among those keys
 * (query_offsets), and merges it into a running (out, lse) (fcl_attention_merge, out one of
 * the parts). In zig-zag order a block is two chunks, and each pair of a query chunk and a
 * key chunk that causality does not hide is one call. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */ // NOLINT(bugprone-reserved-identifier)
#include "kv_formats.h"
#include "mpi_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every rank's per-sequence key lengths (lens[rank * batch + b]) and where each rank's keys
 * start in the whole sequences (starts, the same layout): blocks lie in rank order. */
typedef struct {
    long *lens, *starts;
} ring_places;

/* The tensors that travel around the ring: K, V, and their TOKEN scales (per key, so they
 * go with the keys; HEAD scales are each rank's own, the same on every rank). */
enum { RING_K, RING_V, RING_K_SCALES, RING_V_SCALES, RING_TENSORS };
static const char *const ring_tensor_names[RING_TENSORS] = {"k", "v", "k_scales", "v_scales"};

/* io's buffer of travelling tensor i (NULL where it stays at home). */
static cl_mem ring_tensor(const fcl_attention_desc *d, const fcl_attention_io *io, int i)
{
    switch (i) {
    case RING_K: return io->k;
    case RING_V: return io->v;
    case RING_K_SCALES: return d->scale_mode_k == FCL_KV_SCALE_TOKEN ? io->k_scales : NULL;
    default: return d->scale_mode_v == FCL_KV_SCALE_TOKEN ? io->v_scales : NULL;
    }
}

/* What the ring takes beyond what every call does: contiguous K/V, and buffers of one size
 * on every rank for each travelling tensor (the views apply to each block); their sizes into
 * bytes (0: none). Zig-zag order: whole blocks of two equal chunks (len_q == len_kv, even, no
 * seqlens_kv). */
static fcl_status check_ring(const fcl_attention_desc *d, const fcl_attention_io *io, int zigzag,
                             size_t bytes[RING_TENSORS])
{
    if (d->page_size || io->cu_seqlens_kv || io->block_table)
        return mpi_fail(FCL_ERROR_UNSUPPORTED, "ring attention takes contiguous K/V blocks (not "
                                               "paged or packed) for now");
    if (zigzag && (d->len_q != d->len_kv || d->len_q % 2 || io->seqlens_kv))
        return mpi_fail(FCL_ERROR_INVALID_ARGUMENT,
                        "zig-zag order takes whole blocks of two equal chunks: len_q (%zu) equal "
                        "to len_kv (%zu), even, and no seqlens_kv",
                        d->len_q, d->len_kv);
    for (int i = 0; i < RING_TENSORS; i++) {
        const cl_mem m = ring_tensor(d, io, i);
        bytes[i] = 0;
        if (m && (clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof bytes[i], &bytes[i], NULL) !=
                      CL_SUCCESS ||
                  bytes[i] > INT_MAX))
            return mpi_fail(FCL_ERROR_INVALID_ARGUMENT,
                            "io->%s is not a buffer, or exceeds one MPI message",
                            ring_tensor_names[i]);
    }
    return FCL_SUCCESS;
}

/* The ranks' travelling buffers are of one size each (collective). */
static fcl_status agree_sizes(MPI_Comm comm, const size_t bytes[RING_TENSORS])
{
    static const char *const names[RING_TENSORS] = {"k's buffer size", "v's buffer size",
                                                    "k_scales' buffer size",
                                                    "v_scales' buffer size"};
    long mine[RING_TENSORS];
    for (int i = 0; i < RING_TENSORS; i++)
        mine[i] = (long)bytes[i];
    return mpi_agree_values(comm, mine, names, RING_TENSORS);
}

/* Every rank's lengths (an MPI_Allgather of this rank's) and their blocks' starts (pl's
 * arrays allocated before agreeing, so that every rank reaches the collective). */
static fcl_status gather_places(MPI_Comm comm, int size, size_t batch, const long *mine,
                                ring_places *pl)
{
    if (MPI_Allgather(mine, (int)batch, MPI_LONG, pl->lens, (int)batch, MPI_LONG, comm) !=
        MPI_SUCCESS)
        return mpi_fail(FCL_ERROR_COMMUNICATION, "MPI_Allgather of the blocks' lengths failed");
    for (int r = 1; r < size; r++)
        for (size_t b = 0; b < batch; b++)
            pl->starts[r * batch + b] =
                pl->starts[(r - 1) * batch + b] + pl->lens[(r - 1) * batch + b];
    return FCL_SUCCESS;
}

/* The place of rank me's queries among rank src's keys, per sequence (query_offsets): its
 * queries are the last len_q positions of its own block. Whether causality hides every key
 * of src's block from every one of them (*hidden). */
static void block_offsets(const fcl_attention_desc *d, const ring_places *pl, int me, int src,
                          int32_t *offsets, int *hidden)
{
    *hidden = d->causal != FCL_CAUSAL_NONE;
    for (size_t b = 0; b < d->batch; b++) {
        const long mine = me * (long)d->batch + (long)b, theirs = src * (long)d->batch + (long)b;
        const long first_query = pl->starts[mine] + pl->lens[mine] - (long)d->len_q;
        offsets[b] = (int32_t)(first_query - pl->starts[theirs]);
        /* (the last query at offsets[b] + len_q - 1 sees key 0 where that is not negative) */
        if (pl->lens[theirs] > 0 && offsets[b] + (long)d->len_q - 1 >= 0)
            *hidden = 0;
    }
}

/* The calls of one step at most (zig-zag: each pair of a query and a key chunk), each with
 * its own offsets, so that a step is enqueued without waiting. */
#define RING_CALLS 4

/* The ring's device buffers: a received block's tensors, its lengths, each call's offsets, a
 * partial (out, lse), the running lse, and in zig-zag order each query chunk's running
 * (out, lse). */
typedef struct {
    cl_mem block[RING_TENSORS], lens, offsets[RING_CALLS], part_out, part_lse, lse, chunk_out[2],
        chunk_lse[2];
} ring_buffers;

#define RING_BUFFERS 16

/* The buffers' places in rb, in one order. */
static void ring_buffer_list(ring_buffers *rb, cl_mem *all[RING_BUFFERS])
{
    cl_mem *const list[RING_BUFFERS] = {
        &rb->block[0],    &rb->block[1],      &rb->block[2],      &rb->block[3],
        &rb->lens,       &rb->offsets[0],   &rb->offsets[1],   &rb->offsets[2],
        &rb->offsets[3], &rb->part_out,     &rb->part_lse,     &rb->lse,
        &rb->chunk_out[0], &rb->chunk_out[1], &rb->chunk_lse[0], &rb->chunk_lse[1]};
    memcpy(all, list, sizeof list);
}

static fcl_status ring_buffers_create(cl_context cl, const fcl_attention_desc *d, size_t rows,
                                      size_t dim, int zigzag, const size_t bytes[RING_TENSORS],
                                      ring_buffers *rb)
{
    cl_int err = CL_SUCCESS;
    const size_t chunk_rows = zigzag ? rows / 2 : 0;
    const size_t ints = d->batch * sizeof(int32_t);
    const size_t sizes[RING_BUFFERS] = {
        bytes[0], bytes[1], bytes[2], bytes[3], ints, ints, ints, ints, ints,
        rows * dim * sizeof(float), rows * sizeof(float), rows * sizeof(float),
        chunk_rows * dim * sizeof(float), chunk_rows * dim * sizeof(float),
        chunk_rows * sizeof(float), chunk_rows * sizeof(float)};
    cl_mem *all[RING_BUFFERS];
    ring_buffer_list(rb, all);
    for (int i = 0; i < RING_BUFFERS && err == CL_SUCCESS; i++)
        *all[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizes[i] ? sizes[i] : 4, NULL, &err);
    return err == CL_SUCCESS
               ? FCL_SUCCESS
               : mpi_fail(FCL_ERROR_OUT_OF_RESOURCES, "allocating the ring's buffers (%d)",
                          (int)err);
}

static void ring_buffers_release(ring_buffers *rb)
{
    cl_mem *all[RING_BUFFERS];
    ring_buffer_list(rb, all);
    for (int i = 0; i < RING_BUFFERS; i++)
        if (*all[i])
            clReleaseMemObject(*all[i]);
}

/* What every step of one ring call reads. */
typedef struct {
    fcl_context *ctx;
    cl_command_queue queue;
    const fcl_attention_desc *d;
    const fcl_attention_io *io;
    ring_buffers *rb;
    size_t rows, dim; /* this rank's query rows, head_dim_v */
    int rank, size;
} ring_call;

/* One attention over the held block (k, v: io's own at step 0, else the received copy) into
 * (out, lse), or, where merge, into the partial, then merged into (out, lse) (out one of the
 * parts, in place); rows: out's. d's lengths and views as the caller gives them; offsets
 * (int32 [batch], unchanged until the step is finished) the queries' places among the
 * block's keys, the step's call `call` (its offsets buffer); lens (NULL: len_kv) its lengths,
 * also in seqlens where given. */
static fcl_status ring_attention(const ring_call *rc, const fcl_attention_desc *d, int step,
                                 int call, const int32_t *offsets, const long *lens,
                                 cl_mem seqlens, int with_sinks, cl_mem out, cl_mem lse,
                                 int merge, size_t rows)
{
    ring_buffers *rb = rc->rb;
    fcl_attention_desc part = *d;
    fcl_attention_io local = *rc->io;
    mpi_part_places(&part, &local, offsets, lens, rb->offsets[call]);
    if (local.query_offsets && clEnqueueWriteBuffer(rc->queue, rb->offsets[call], CL_FALSE, 0,
                                                    d->batch * sizeof(int32_t), offsets, 0,
                                                    NULL, NULL) != CL_SUCCESS)
        return mpi_fail(FCL_ERROR_OPENCL, "writing a block's query offsets");
    if (step) { /* the received block's tensors */
        local.k = rb->block[RING_K], local.v = rb->block[RING_V];
        if (ring_tensor(d, rc->io, RING_K_SCALES))
            local.k_scales = rb->block[RING_K_SCALES];
        if (ring_tensor(d, rc->io, RING_V_SCALES))
            local.v_scales = rb->block[RING_V_SCALES];
    }
    local.seqlens_kv = seqlens;
    local.out = merge ? rb->part_out : out, local.lse = merge ? rb->part_lse : lse;
    if (!with_sinks)
        local.sinks = NULL;
    fcl_status s = fcl_attention_run(rc->ctx, &part, &local, 0, NULL, NULL);
    if (s != FCL_SUCCESS)
        return mpi_failed_call(rc->ctx, s, "this rank's attention over a block");
    if (!merge)
        return FCL_SUCCESS;
    const cl_mem outs[2] = {out, rb->part_out}, lses[2] = {lse, rb->part_lse};
    s = fcl_attention_merge(rc->ctx, 2, rows, rc->dim, outs, lses, out, lse, 0, NULL, NULL);
    return s == FCL_SUCCESS ? s : mpi_failed_call(rc->ctx, s, "merging a block's partial result");
}

/* Rank order: this rank's queries over the held block (src's), into io->out and the running
 * lse; sinks at step 0 only (they count once). A block causality hides is skipped. */
static fcl_status blocks_step(const ring_call *rc, const ring_places *pl, int step, int src,
                              int32_t *lens, int32_t *offsets)
{
    const fcl_attention_desc *d = rc->d;
    int hidden;
    block_offsets(d, pl, rc->rank, src, offsets, &hidden);
    if (hidden && step) /* (step 0 starts out and the running lse) */
        return FCL_SUCCESS;
    for (size_t b = 0; b < d->batch; b++)
        lens[b] = (int32_t)pl->lens[src * (long)d->batch + (long)b];
    if (clEnqueueWriteBuffer(rc->queue, rc->rb->lens, CL_FALSE, 0, d->batch * sizeof(int32_t),
                             lens, 0, NULL, NULL) != CL_SUCCESS)
        return mpi_fail(FCL_ERROR_OPENCL, "writing a block's lengths");
    return ring_attention(rc, d, step, 0, offsets, pl->lens + src * (long)d->batch, rc->rb->lens,
                          step == 0, rc->io->out, rc->rb->lse, step > 0, rc->rows);
}

/* A row's units (elements, or bytes for a coded format: kv_formats.h) of format (0: dtype). */
static size_t row_units(fcl_kv_format format, fcl_dtype dtype, size_t dim)
{
    const unsigned f = format ? (unsigned)format : (unsigned)dtype + 1;
#define FCL_ROW_UNITS(NAME, name, value, type, elems, bytes, roles)                             \
    if (f == (value))                                                                          \
        return ((roles) & FCL_ROLE_FLOAT) ? dim : dim / (elems) * (bytes);
    FCL_KV_FORMATS(FCL_ROW_UNITS)
#undef FCL_ROW_UNITS
    return 0;
}

/* view (of a tensor of heads x len rows of `row` units in layout) from its token `from` on,
 * with explicit strides. */
static fcl_tensor_view view_from(fcl_tensor_view view, fcl_layout layout, size_t heads,
                                 size_t len, size_t row, size_t from)
{
    if (!view.batch_stride && !view.head_stride && !view.token_stride) {
        const int bhld = layout == FCL_LAYOUT_BHLD;
        view.token_stride = bhld ? row : heads * row;
        view.head_stride = bhld ? len * row : row;
        view.batch_stride = heads * len * row;
    }
    view.offset += from * view.token_stride;
    return view;
}

/* Zig-zag order: with n ranks each sequence is 2n chunks of m tokens, rank r holding chunks r
 * and 2n - 1 - r (its block's first and second half). Each query chunk meets each key chunk
 * of the held block that causality does not hide (under causality 2 chunks' worth of keys
 * every step, on every rank: the balance); sinks with the first call of each query chunk.
 * offsets: RING_CALLS rows of batch. */
static fcl_status zigzag_step(const ring_call *rc, int step, int src, int32_t *offsets)
{
    const fcl_attention_desc *d = rc->d;
    const size_t m = d->len_q / 2, kv_heads = d->heads_kv ? d->heads_kv : d->heads_q;
    const long last = 2L * rc->size - 1;
    fcl_status s = FCL_SUCCESS;
    for (int qc = 0; qc < 2 && s == FCL_SUCCESS; qc++)
        for (int kc = 0; kc < 2 && s == FCL_SUCCESS; kc++) {
            const long q_chunk = qc ? last - rc->rank : rc->rank, k_chunk = kc ? last - src : src;
            if (d->causal != FCL_CAUSAL_NONE && k_chunk > q_chunk)
                continue;
            fcl_attention_desc part = *d;
            part.len_q = part.len_kv = m;
            part.q_view = view_from(d->q_view, d->layout, d->heads_q, d->len_q, d->head_dim,
                                    qc * m);
            part.k_view = view_from(d->k_view, d->layout, kv_heads, d->len_kv,
                                    row_units(d->format_k, d->dtype_kv, d->head_dim), kc * m);
            part.v_view = view_from(d->v_view, d->layout, kv_heads, d->len_kv,
                                    row_units(d->format_v, d->dtype_kv, rc->dim), kc * m);
            /* TOKEN scales: (b, h, t) of [batch][heads_kv][tokens] where their strides are 0 */
            if (d->scale_mode_k == FCL_KV_SCALE_TOKEN)
                part.k_scales_view = view_from(d->k_scales_view, FCL_LAYOUT_BHLD, kv_heads,
                                               d->len_kv, 1, kc * m);
            if (d->scale_mode_v == FCL_KV_SCALE_TOKEN)
                part.v_scales_view = view_from(d->v_scales_view, FCL_LAYOUT_BHLD, kv_heads,
                                               d->len_kv, 1, kc * m);
            const int call = 2 * qc + kc;
            int32_t *mine = offsets + call * d->batch;
            for (size_t b = 0; b < d->batch; b++)
                mine[b] = (int32_t)((q_chunk - k_chunk) * (long)m);
            const int first = step == 0 && kc == 0; /* (never hidden) */
            s = ring_attention(rc, &part, step, call, mine, NULL, NULL, first,
                               rc->rb->chunk_out[qc], rc->rb->chunk_lse[qc], !first, rc->rows / 2);
        }
    return s;
}

/* Zig-zag order's results: each query chunk's rows into its half of every (sequence, head)'s
 * rows of out and lse. */
static fcl_status zigzag_finish(const ring_call *rc)
{
    const size_t pairs = rc->d->batch * rc->d->heads_q, m = rc->d->len_q / 2;
    cl_int err = CL_SUCCESS;
    for (int qc = 0; qc < 2 && err == CL_SUCCESS; qc++)
        for (int lse = 0; lse < 2 && err == CL_SUCCESS; lse++) {
            const size_t row = (lse ? 1 : rc->dim) * sizeof(float), piece = m * row;
            if (lse && !rc->io->lse)
                continue;
            const size_t from[3] = {0, 0, 0}, to[3] = {qc * piece, 0, 0}, region[3] = {piece, pairs, 1};
            err = clEnqueueCopyBufferRect(rc->queue, lse ? rc->rb->chunk_lse[qc] : rc->rb->chunk_out[qc],
                                          lse ? rc->io->lse : rc->io->out, from, to, region, piece,
                                          0, 2 * piece, 0, 0, NULL, NULL);
        }
    return err == CL_SUCCESS ? FCL_SUCCESS
                             : mpi_fail(FCL_ERROR_OPENCL, "writing the chunks' rows (%d)", (int)err);
}

/* Host memory for the blocks in flight: buffers of the context allocated in host memory and
 * mapped, which drivers page-lock (NVIDIA copies a block between such memory and the device
 * several times as fast as from malloc's, which also faults every page in on first use;
 * page-locking is slow in turn: 512 MiB took the H200's driver 0.3 s, hence workspaces). */
typedef struct {
    cl_mem buf[2][RING_TENSORS];          /* [which of the two][K, V, their TOKEN scales] */
    unsigned char *held[2][RING_TENSORS]; /* their mapped memory */
    size_t bytes[RING_TENSORS];           /* each tensor's size */
} ring_staging;

struct fcl_mpi_workspace {
    cl_context cl;
    cl_command_queue queue;
    ring_staging staging;
};

static void staging_release(cl_command_queue queue, ring_staging *st)
{
    for (int which = 0; which < 2; which++)
        for (int i = 0; i < RING_TENSORS; i++) {
            if (st->held[which][i])
                clEnqueueUnmapMemObject(queue, st->buf[which][i], st->held[which][i], 0, NULL, NULL);
            if (st->buf[which][i])
                clReleaseMemObject(st->buf[which][i]);
        }
    memset(st, 0, sizeof *st);
}

/* st with room for blocks of bytes (what it holds where that suffices). */
static fcl_status staging_reserve(cl_context cl, cl_command_queue queue,
                                  const size_t bytes[RING_TENSORS], ring_staging *st)
{
    int enough = st->buf[0][0] != NULL;
    for (int i = 0; i < RING_TENSORS; i++)
        enough &= st->bytes[i] >= bytes[i];
    if (enough)
        return FCL_SUCCESS;
    staging_release(queue, st);
    cl_int err = CL_SUCCESS;
    for (int n = 0; n < 2 * RING_TENSORS && err == CL_SUCCESS; n++) {
        const int which = n / RING_TENSORS, i = n % RING_TENSORS;
        const size_t size = bytes[i] ? bytes[i] : 4;
        st->buf[which][i] = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, size,
                                           NULL, &err);
        if (err == CL_SUCCESS)
            st->held[which][i] = clEnqueueMapBuffer(queue, st->buf[which][i], CL_TRUE,
                                                    CL_MAP_READ | CL_MAP_WRITE, 0, size, 0, NULL,
                                                    NULL, &err);
    }
    memcpy(st->bytes, bytes, sizeof st->bytes);
    if (err == CL_SUCCESS)
        return FCL_SUCCESS;
    staging_release(queue, st);
    return mpi_fail(FCL_ERROR_OUT_OF_RESOURCES, "allocating the ring's host blocks (%d)", (int)err);
}

fcl_status fcl_mpi_workspace_create(fcl_context *ctx, fcl_mpi_workspace **out)
{
    if (!out)
        return mpi_fail(FCL_ERROR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    fcl_mpi_workspace *ws = calloc(1, sizeof *ws);
    if (!ws)
        return mpi_fail(FCL_ERROR_OUT_OF_HOST_MEMORY, "allocating a workspace");
    const fcl_status s = ctx ? mpi_cl_of(ctx, &ws->cl, &ws->queue)
                             : mpi_fail(FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (s != FCL_SUCCESS) {
        free(ws);
        return s;
    }
    clRetainContext(ws->cl);
    clRetainCommandQueue(ws->queue);
    *out = ws;
    return FCL_SUCCESS;
}

void fcl_mpi_workspace_destroy(fcl_mpi_workspace *ws)
{
    if (!ws)
        return;
    staging_release(ws->queue, &ws->staging);
    clFinish(ws->queue); /* (the unmaps) */
    clReleaseCommandQueue(ws->queue);
    clReleaseContext(ws->cl);
    free(ws);
}

/* Waits for the queue's work, testing the posted transfers meanwhile: an MPI moves a large
 * message only inside its calls, so that a step that only waited would send its block after
 * its attention instead of during it. */
static fcl_status finish_progressing(cl_command_queue queue, MPI_Request *req, int posted)
{
    cl_event marker;
    cl_int status = CL_QUEUED;
    MPI_Status statuses[2 * RING_TENSORS]; /* (posted <= 2 RING_TENSORS) */
    const struct timespec pause = {0, 20000};
    int moved = !posted;
    if (clEnqueueMarkerWithWaitList(queue, 0, NULL, &marker) != CL_SUCCESS)
        return mpi_fail(FCL_ERROR_OPENCL, "marking a ring step's end");
    clFlush(queue);
    while (clGetEventInfo(marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                          NULL) == CL_SUCCESS &&
           status > CL_COMPLETE) {
        if (!moved)
            MPI_Testall(posted, req, &moved, statuses);
        nanosleep(&pause, NULL); /* (the cores a CPU device computes on stay its own) */
    }
    clReleaseEvent(marker);
    return status == CL_COMPLETE ? FCL_SUCCESS
                                 : mpi_fail(FCL_ERROR_OPENCL, "running a ring step (%d)", (int)status);
}

/* The whole ring on comm (whose MPI failures return), in rank or zig-zag order. */
static fcl_status ring(fcl_context *ctx, MPI_Comm comm, fcl_mpi_workspace *ws,
                       const fcl_attention_desc *d, const fcl_attention_io *io, int zigzag)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    size_t bytes[RING_TENSORS] = {0};
    cl_context cl = NULL;
    fcl_status s = mpi_check_local(ctx, d, io);
    if (s == FCL_SUCCESS)
        s = check_ring(d, io, zigzag, bytes);
    if (s == FCL_SUCCESS && ws && (mpi_cl_of(ctx, &cl, NULL) != FCL_SUCCESS || cl != ws->cl))
        s = mpi_fail(FCL_ERROR_INVALID_ARGUMENT, "ws belongs to another context than ctx");
    s = mpi_agree(comm, s, "validation");
    if (s == FCL_SUCCESS)
        s = mpi_agree_shapes(comm, d);
    if (s == FCL_SUCCESS)
        s = agree_sizes(comm, bytes);
    if (s != FCL_SUCCESS)
        return s;
    const size_t batch = d->batch, dim = d->head_dim_v ? d->head_dim_v : d->head_dim;
    ring_buffers rb = {0};
    ring_places pl = {0};
    ring_call rc = {.ctx = ctx, .d = d, .io = io, .rb = &rb, .rows = batch * d->heads_q * d->len_q,
                    .dim = dim, .rank = rank, .size = size};
    ring_staging own = {0}, *st = ws ? &ws->staging : &own;
    long *mine = malloc(batch * sizeof(long));
    int32_t *lens = malloc(batch * sizeof(int32_t));
    int32_t *offsets = malloc(RING_CALLS * batch * sizeof(int32_t)); /* each call's */
    pl.lens = malloc((size_t)size * batch * sizeof(long));
    pl.starts = calloc((size_t)size * batch, sizeof(long));
    s = mine && lens && offsets && pl.lens && pl.starts
            ? mpi_cl_of(ctx, &cl, &rc.queue)
            : mpi_fail(FCL_ERROR_OUT_OF_HOST_MEMORY, "allocating the ring's lengths");
    if (s == FCL_SUCCESS)
        s = mpi_shard_lengths(ctx, d, io, mine);
    if (s == FCL_SUCCESS)
        s = ring_buffers_create(cl, d, rc.rows, dim, zigzag, bytes, &rb);
    if (s == FCL_SUCCESS && size > 1) /* (one rank sends nothing) */
        s = staging_reserve(cl, rc.queue, bytes, st);
    unsigned char *(*held)[RING_TENSORS] = st->held;
    for (int i = 0; i < RING_TENSORS && s == FCL_SUCCESS && size > 1; i++)
        if (bytes[i] && clEnqueueReadBuffer(rc.queue, ring_tensor(d, io, i), CL_TRUE, 0, bytes[i],
                                            held[0][i], 0, NULL, NULL) != CL_SUCCESS)
            s = mpi_fail(FCL_ERROR_OPENCL, "reading this rank's block of %s", ring_tensor_names[i]);
    s = mpi_agree(comm, s, "preparing its block");
    if (s == FCL_SUCCESS && !zigzag) /* (zig-zag blocks are whole: their places follow) */
        s = mpi_agree(comm, gather_places(comm, size, batch, mine, &pl), "gathering the lengths");
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int step = 0; s == FCL_SUCCESS && step < size; step++) {
        const int src = (rank + size - step) % size, cur = step % 2;
        MPI_Request req[2 * RING_TENSORS];
        int posted = 0;
        for (int i = 0; i < RING_TENSORS && step + 1 < size; i++) /* the next block in flight */
            if (bytes[i]) {
                MPI_Irecv(held[!cur][i], (int)bytes[i], MPI_BYTE, prev, i, comm, &req[posted++]);
                MPI_Isend(held[cur][i], (int)bytes[i], MPI_BYTE, next, i, comm, &req[posted++]);
            }
        s = zigzag ? zigzag_step(&rc, step, src, offsets)
                   : blocks_step(&rc, &pl, step, src, lens, offsets);
        if (s == FCL_SUCCESS)
            s = finish_progressing(rc.queue, req, posted);
        /* Every rank completes the transfers it posted, whatever its step gave; one agreement
         * a step then suffices (nothing collective lies between). */
        MPI_Status status[2 * RING_TENSORS];
        if (posted && MPI_Waitall(posted, req, status) != MPI_SUCCESS && s == FCL_SUCCESS)
            s = mpi_fail(FCL_ERROR_COMMUNICATION, "passing a K/V block around the ring failed");
        for (int i = 0; i < RING_TENSORS && s == FCL_SUCCESS && step + 1 < size; i++)
            if (bytes[i] && clEnqueueWriteBuffer(rc.queue, rb.block[i], CL_TRUE, 0, bytes[i],
                                                 held[!cur][i], 0, NULL, NULL) != CL_SUCCESS)
                s = mpi_fail(FCL_ERROR_OPENCL, "copying a received block of %s to the device",
                             ring_tensor_names[i]);
        s = mpi_agree(comm, s, "a ring step");
    }
    if (s == FCL_SUCCESS && zigzag)
        s = zigzag_finish(&rc);
    else if (s == FCL_SUCCESS && io->lse &&
             clEnqueueCopyBuffer(rc.queue, rb.lse, io->lse, 0, 0, rc.rows * sizeof(float), 0, NULL,
                                 NULL) != CL_SUCCESS)
        s = mpi_fail(FCL_ERROR_OPENCL, "writing lse");
    /* (also after a failure: writes of offsets and lens may still read the host arrays) */
    if (rc.queue && clFinish(rc.queue) != CL_SUCCESS && s == FCL_SUCCESS)
        s = mpi_fail(FCL_ERROR_OPENCL, "finishing the ring");
    ring_buffers_release(&rb);
    staging_release(rc.queue, &own);
    free(mine), free(lens), free(offsets), free(pl.lens), free(pl.starts);
    return s;
}

static fcl_status ring_in_rank_order(fcl_context *ctx, MPI_Comm comm, const fcl_attention_desc *d,
                                     const fcl_attention_io *io, void *ws)
{
    return ring(ctx, comm, ws, d, io, 0);
}

static fcl_status ring_in_zigzag_order(fcl_context *ctx, MPI_Comm comm,
                                       const fcl_attention_desc *d, const fcl_attention_io *io,
                                       void *ws)
{
    return ring(ctx, comm, ws, d, io, 1);
}

fcl_status fcl_mpi_attention_ring(fcl_context *ctx, MPI_Comm comm, fcl_mpi_workspace *ws,
                                  const fcl_attention_desc *d, const fcl_attention_io *io)
{
    return mpi_on_own_comm(ring_in_rank_order, ctx, comm, d, io, ws);
}

fcl_status fcl_mpi_attention_ring_zigzag(fcl_context *ctx, MPI_Comm comm, fcl_mpi_workspace *ws,
                                         const fcl_attention_desc *d, const fcl_attention_io *io)
{
    return mpi_on_own_comm(ring_in_zigzag_order, ctx, comm, d, io, ws);
}

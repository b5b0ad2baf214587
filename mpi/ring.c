/* flashcl_mpi: ring attention (flashcl_mpi.h, fcl_mpi_attention_ring). Step t, rank r holds
 * the K and V block of rank (r - t) mod n: it sends it on to rank r + 1 and receives the next
 * from rank r - 1 (host buffers, in flight during the step), computes its queries' partial
 * over the held block at the queries' places among those keys (query_offsets), and merges
 * it into out and a running lse (fcl_attention_merge, out one of the parts). */
#include "mpi_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Every rank's per-sequence key lengths (lens[rank * batch + b]) and where each rank's keys
 * start in the whole sequences (starts, the same layout): blocks lie in rank order. */
typedef struct {
    long *lens, *starts;
} ring_places;

/* What the ring takes beyond what every call does: contiguous K/V, and K and V buffers of
 * one size on every rank (the views apply to each block); their size into *bytes. */
static fcl_status check_ring(const fcl_attention_desc *d, const fcl_attention_io *io,
                             size_t bytes[2])
{
    if (d->page_size || io->cu_seqlens_kv || io->block_table)
        return mpi_fail(FCL_ERROR_UNSUPPORTED, "ring attention takes contiguous K/V blocks (not "
                                               "paged or packed) for now");
    if (io->k_scales || io->v_scales) /* (they would have to travel with the blocks) */
        return mpi_fail(FCL_ERROR_UNSUPPORTED, "ring attention takes no K/V scale buffers yet");
    for (int i = 0; i < 2; i++)
        if (clGetMemObjectInfo(i ? io->v : io->k, CL_MEM_SIZE, sizeof bytes[i], &bytes[i], NULL) !=
                CL_SUCCESS ||
            bytes[i] > INT_MAX)
            return mpi_fail(FCL_ERROR_INVALID_ARGUMENT,
                            "io->%s is not a buffer, or exceeds one MPI message", i ? "v" : "k");
    return FCL_SUCCESS;
}

/* The ranks' K and V buffers are of one size (collective). */
static fcl_status agree_sizes(MPI_Comm comm, const size_t bytes[2])
{
    static const char *const names[] = {"k's buffer size", "v's buffer size"};
    const long mine[2] = {(long)bytes[0], (long)bytes[1]};
    return mpi_agree_values(comm, mine, names, 2);
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

/* The ring's device buffers: a received K and V block, its lengths and offsets, a partial
 * (out, lse) and the running lse. */
typedef struct {
    cl_mem k, v, lens, offsets, part_out, part_lse, lse;
} ring_buffers;

static fcl_status ring_buffers_create(cl_context cl, const fcl_attention_desc *d, size_t rows,
                                      size_t dim, const size_t bytes[2], ring_buffers *rb)
{
    cl_int err = CL_SUCCESS;
    const size_t sizes[7] = {bytes[0], bytes[1], d->batch * sizeof(int32_t),
                             d->batch * sizeof(int32_t), rows * dim * sizeof(float),
                             rows * sizeof(float), rows * sizeof(float)};
    cl_mem *all[7] = {&rb->k, &rb->v, &rb->lens, &rb->offsets, &rb->part_out, &rb->part_lse,
                      &rb->lse};
    for (int i = 0; i < 7 && err == CL_SUCCESS; i++)
        *all[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizes[i] ? sizes[i] : 4, NULL, &err);
    return err == CL_SUCCESS
               ? FCL_SUCCESS
               : mpi_fail(FCL_ERROR_OUT_OF_RESOURCES, "allocating the ring's buffers (%d)",
                          (int)err);
}

static void ring_buffers_release(ring_buffers *rb)
{
    cl_mem all[7] = {rb->k, rb->v, rb->lens, rb->offsets, rb->part_out, rb->part_lse, rb->lse};
    for (int i = 0; i < 7; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
}

/* One step: this rank's queries over the held block (k, v: io's own at step 0, else the
 * received copy in rb) merged into out and rb->lse; sinks at step 0 only (they count once). */
static fcl_status ring_step(fcl_context *ctx, cl_command_queue queue, const fcl_attention_desc *d,
                            const fcl_attention_io *io, ring_buffers *rb, int step,
                            const int32_t *lens, const int32_t *offsets, size_t rows, size_t dim)
{
    cl_event done = NULL;
    cl_int err = clEnqueueWriteBuffer(queue, rb->lens, CL_TRUE, 0, d->batch * sizeof(int32_t),
                                      lens, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(queue, rb->offsets, CL_TRUE, 0, d->batch * sizeof(int32_t),
                                   offsets, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return mpi_fail(FCL_ERROR_OPENCL, "writing a block's lengths (%d)", (int)err);
    fcl_attention_io local = *io;
    local.k = step ? rb->k : io->k, local.v = step ? rb->v : io->v;
    local.seqlens_kv = rb->lens, local.query_offsets = rb->offsets;
    local.out = step ? rb->part_out : io->out, local.lse = step ? rb->part_lse : rb->lse;
    if (step)
        local.sinks = NULL;
    fcl_status s = fcl_attention_run(ctx, d, &local, 0, NULL, NULL);
    if (s != FCL_SUCCESS)
        return mpi_failed_call(ctx, s, "this rank's attention over a block");
    if (step) { /* into the running (out, lse): out is part 0, in place */
        const cl_mem outs[2] = {io->out, rb->part_out}, lses[2] = {rb->lse, rb->part_lse};
        s = fcl_attention_merge(ctx, 2, rows, dim, outs, lses, io->out, rb->lse, 0, NULL, &done);
        if (s != FCL_SUCCESS)
            return mpi_failed_call(ctx, s, "merging a block's partial result");
        err = clWaitForEvents(1, &done);
        clReleaseEvent(done);
    } else {
        err = clFinish(queue);
    }
    return err == CL_SUCCESS ? FCL_SUCCESS
                             : mpi_fail(FCL_ERROR_OPENCL, "running a ring step (%d)", (int)err);
}

/* The whole ring on comm (whose MPI failures return). */
static fcl_status ring(fcl_context *ctx, MPI_Comm comm, const fcl_attention_desc *d,
                       const fcl_attention_io *io)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    size_t bytes[2] = {0, 0};
    fcl_status s = mpi_check_local(ctx, d, io);
    if (s == FCL_SUCCESS)
        s = check_ring(d, io, bytes);
    s = mpi_agree(comm, s, "validation");
    if (s == FCL_SUCCESS)
        s = mpi_agree_shapes(comm, d);
    if (s == FCL_SUCCESS)
        s = agree_sizes(comm, bytes);
    if (s != FCL_SUCCESS)
        return s;
    const size_t batch = d->batch, dim = d->head_dim_v ? d->head_dim_v : d->head_dim;
    const size_t rows = batch * d->heads_q * d->len_q;
    cl_context cl;
    cl_command_queue queue;
    ring_buffers rb = {0};
    ring_places pl = {0};
    unsigned char *held[2][2] = {{malloc(bytes[0] + 1), malloc(bytes[1] + 1)},
                                 {malloc(bytes[0] + 1), malloc(bytes[1] + 1)}};
    long *mine = malloc(batch * sizeof(long));
    int32_t *lens = malloc(batch * sizeof(int32_t)), *offsets = malloc(batch * sizeof(int32_t));
    pl.lens = malloc((size_t)size * batch * sizeof(long));
    pl.starts = calloc((size_t)size * batch, sizeof(long));
    s = held[0][0] && held[0][1] && held[1][0] && held[1][1] && mine && lens && offsets &&
                pl.lens && pl.starts
            ? mpi_cl_of(ctx, &cl, &queue)
            : mpi_fail(FCL_ERROR_OUT_OF_HOST_MEMORY, "allocating the ring's host blocks");
    if (s == FCL_SUCCESS)
        s = mpi_shard_lengths(ctx, d, io, mine);
    if (s == FCL_SUCCESS)
        s = ring_buffers_create(cl, d, rows, dim, bytes, &rb);
    if (s == FCL_SUCCESS && (clEnqueueReadBuffer(queue, io->k, CL_TRUE, 0, bytes[0], held[0][0], 0,
                                                 NULL, NULL) != CL_SUCCESS ||
                             clEnqueueReadBuffer(queue, io->v, CL_TRUE, 0, bytes[1], held[0][1], 0,
                                                 NULL, NULL) != CL_SUCCESS))
        s = mpi_fail(FCL_ERROR_OPENCL, "reading this rank's K and V block");
    s = mpi_agree(comm, s, "preparing its block");
    if (s == FCL_SUCCESS)
        s = mpi_agree(comm, gather_places(comm, size, batch, mine, &pl), "gathering the lengths");
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int step = 0; s == FCL_SUCCESS && step < size; step++) {
        const int src = (rank + size - step) % size, cur = step % 2;
        MPI_Request req[4];
        int posted = 0;
        if (step + 1 < size) { /* the next block in flight during this step */
            for (int i = 0; i < 2; i++) {
                MPI_Irecv(held[!cur][i], (int)bytes[i], MPI_BYTE, prev, i, comm, &req[posted++]);
                MPI_Isend(held[cur][i], (int)bytes[i], MPI_BYTE, next, i, comm, &req[posted++]);
            }
        }
        int hidden;
        block_offsets(d, &pl, rank, src, offsets, &hidden);
        for (size_t b = 0; b < batch; b++)
            lens[b] = (int32_t)pl.lens[src * (long)batch + (long)b];
        if (!hidden || step == 0) /* (step 0 starts out and the running lse) */
            s = ring_step(ctx, queue, d, io, &rb, step, lens, offsets, rows, dim);
        /* Every rank completes the transfers it posted, whatever its step gave; one agreement
         * a step then suffices (nothing collective lies between). */
        MPI_Status status[4];
        if (posted && MPI_Waitall(posted, req, status) != MPI_SUCCESS && s == FCL_SUCCESS)
            s = mpi_fail(FCL_ERROR_COMMUNICATION, "passing a K/V block around the ring failed");
        if (s == FCL_SUCCESS && step + 1 < size &&
            (clEnqueueWriteBuffer(queue, rb.k, CL_TRUE, 0, bytes[0], held[!cur][0], 0, NULL,
                                  NULL) != CL_SUCCESS ||
             clEnqueueWriteBuffer(queue, rb.v, CL_TRUE, 0, bytes[1], held[!cur][1], 0, NULL,
                                  NULL) != CL_SUCCESS))
            s = mpi_fail(FCL_ERROR_OPENCL, "copying a received block to the device");
        s = mpi_agree(comm, s, "a ring step");
    }
    if (s == FCL_SUCCESS && io->lse &&
        clEnqueueCopyBuffer(queue, rb.lse, io->lse, 0, 0, rows * sizeof(float), 0, NULL, NULL) !=
            CL_SUCCESS)
        s = mpi_fail(FCL_ERROR_OPENCL, "writing lse");
    if (s == FCL_SUCCESS && clFinish(queue) != CL_SUCCESS)
        s = mpi_fail(FCL_ERROR_OPENCL, "finishing the ring");
    ring_buffers_release(&rb);
    for (int i = 0; i < 4; i++)
        free(held[i / 2][i % 2]);
    free(mine), free(lens), free(offsets), free(pl.lens), free(pl.starts);
    return s;
}

fcl_status fcl_mpi_attention_ring(fcl_context *ctx, MPI_Comm comm, const fcl_attention_desc *d,
                                  const fcl_attention_io *io)
{
    return mpi_on_own_comm(ring, ctx, comm, d, io);
}

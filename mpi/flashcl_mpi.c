/* flashcl_mpi: what its calls share (mpi_internal.h: errors, validation and agreement across
 * the ranks, lengths, the duplicate communicator) and sharded-KV attention
 * (fcl_mpi_attention_sharded): each rank runs flashcl's attention on its shard with lse, the
 * float32 partials are gathered through the host, and fcl_attention_merge combines them
 * (docs/ALGORITHMS.md: merging (m, d) states). Ring prefill is ring.c. */
#include "mpi_internal.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[512];

const char *fcl_mpi_last_error(void) { return last_error; }

fcl_status mpi_fail(fcl_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) (as src/status.c's)
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

/* A failed flashcl call: its status with the context's sentence. */
fcl_status mpi_failed_call(fcl_context *ctx, fcl_status s, const char *what)
{
    return mpi_fail(s, "%s: %s", what, fcl_context_last_error(ctx));
}

/* ctx's OpenCL context and queue. */
fcl_status mpi_cl_of(fcl_context *ctx, cl_context *cl, cl_command_queue *queue)
{
    const fcl_status s = fcl_context_get_cl(ctx, cl, NULL, queue);
    return s == FCL_SUCCESS ? s : mpi_failed_call(ctx, s, "fcl_context_get_cl");
}

/* What this rank's arguments must satisfy before any communication. */
fcl_status mpi_check_local(fcl_context *ctx, const fcl_attention_desc *d,
                           const fcl_attention_io *io)
{
    static const fcl_tensor_view zero;
    if (!ctx || !d || !io)
        return mpi_fail(FCL_ERROR_INVALID_ARGUMENT, "the context, descriptor or io is NULL");
    if (!io->out)
        return mpi_fail(FCL_ERROR_INVALID_ARGUMENT, "io->out is NULL");
    if (d->dtype_o != FCL_DTYPE_F32 || d->layout != FCL_LAYOUT_BHLD ||
        memcmp(&d->o_view, &zero, sizeof zero) != 0)
        return mpi_fail(FCL_ERROR_UNSUPPORTED,
                    "flashcl_mpi writes float32 out in FCL_LAYOUT_BHLD's default "
                    "strides (dtype_o %d, layout %d, o_view set: %d)",
                    (int)d->dtype_o, (int)d->layout, memcmp(&d->o_view, &zero, sizeof zero) != 0);
    if (io->query_offsets)
        return mpi_fail(FCL_ERROR_INVALID_ARGUMENT,
                    "io->query_offsets is given: the call sets them from the shards' places");
    const char *other = d->mask_type != FCL_MASK_NONE ? "a mask"
                        : io->cu_seqlens_q            ? "packed queries (cu_seqlens_q)"
                        : io->leftpad_kv              ? "leftpad_kv"
                                                      : NULL;
    if (other)
        return mpi_fail(FCL_ERROR_UNSUPPORTED, "attention across ranks does not take %s yet",
                        other);
    return FCL_SUCCESS;
}

/* Every rank's status, agreed: each rank's own where it failed, else FCL_ERROR_INVALID_ARGUMENT
 * naming the lowest failed rank; success where none failed. */
fcl_status mpi_agree(MPI_Comm comm, fcl_status mine, const char *stage)
{
    int rank, size, first;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const int me = mine != FCL_SUCCESS ? rank : size;
    if (MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return mpi_fail(FCL_ERROR_COMMUNICATION, "MPI_Allreduce of the ranks' status %s failed",
                        stage);
    if (mine != FCL_SUCCESS || first == size)
        return mine;
    return mpi_fail(FCL_ERROR_INVALID_ARGUMENT, "rank %d failed %s", first, stage);
}

/* The ranks agree on the shapes of the queries and the output (the keys are each rank's). */
fcl_status mpi_agree_shapes(MPI_Comm comm, const fcl_attention_desc *d)
{
    static const char *const names[] = {"batch",    "heads_q",    "len_q",
                                        "head_dim", "head_dim_v", "dtype_q"};
    const long mine[6] = {(long)d->batch,    (long)d->heads_q, (long)d->len_q,
                          (long)d->head_dim, (long)(d->head_dim_v ? d->head_dim_v : d->head_dim),
                          (long)d->dtype_q};
    return mpi_agree_values(comm, mine, names, 6);
}

fcl_status mpi_agree_values(MPI_Comm comm, const long *mine, const char *const *names, int n)
{
    long lo[8], hi[8];
    if (MPI_Allreduce(mine, lo, n, MPI_LONG, MPI_MIN, comm) != MPI_SUCCESS ||
        MPI_Allreduce(mine, hi, n, MPI_LONG, MPI_MAX, comm) != MPI_SUCCESS)
        return mpi_fail(FCL_ERROR_COMMUNICATION, "MPI_Allreduce of what the ranks agree on failed");
    for (int i = 0; i < n; i++)
        if (lo[i] != hi[i])
            return mpi_fail(FCL_ERROR_INVALID_ARGUMENT,
                            "the ranks disagree on %s (from %ld to %ld)", names[i], lo[i], hi[i]);
    return FCL_SUCCESS;
}

/* This rank's key count of each sequence (seqlens_kv or cu_seqlens_kv read from the device,
 * clamped to len_kv as the kernels clamp them; else len_kv) into len[0 .. batch). */
fcl_status mpi_shard_lengths(fcl_context *ctx, const fcl_attention_desc *d,
                             const fcl_attention_io *io, long *len)
{
    cl_context cl;
    cl_command_queue queue;
    const size_t batch = d->batch;
    int32_t *read = calloc(batch + 1, sizeof(int32_t));
    fcl_status s = read ? mpi_cl_of(ctx, &cl, &queue)
                        : mpi_fail(FCL_ERROR_OUT_OF_HOST_MEMORY, "allocating %zu lengths", batch);
    cl_mem from = io->seqlens_kv ? io->seqlens_kv : io->cu_seqlens_kv;
    if (s == FCL_SUCCESS && from &&
        clEnqueueReadBuffer(queue, from, CL_TRUE, 0, (batch + !io->seqlens_kv) * sizeof(int32_t),
                            read, 0, NULL, NULL) != CL_SUCCESS)
        s = mpi_fail(FCL_ERROR_OPENCL, "reading this rank's key lengths");
    for (size_t b = 0; s == FCL_SUCCESS && b < batch; b++) {
        const long n = !from ? (long)d->len_kv
                       : io->seqlens_kv ? (long)read[b] : (long)read[b + 1] - (long)read[b];
        len[b] = n < 0 ? 0 : n > (long)d->len_kv ? (long)d->len_kv : n;
    }
    free(read);
    return s;
}

int mpi_places_matter(const fcl_attention_desc *d, const fcl_attention_io *io,
                      const int32_t *offsets, const long *lens)
{
    if (d->window || io->alibi_slopes)
        return 1;
    for (size_t b = 0; d->causal != FCL_CAUSAL_NONE && b < d->batch; b++) {
        const long keys = lens ? lens[b] : (long)d->len_kv;
        if (keys > 0 && offsets[b] < keys - 1) /* (query 0 sees key j where j <= offsets[b]) */
            return 1;
    }
    return 0;
}

void mpi_part_places(fcl_attention_desc *d, fcl_attention_io *io, const int32_t *offsets,
                     const long *lens, cl_mem places)
{
    if (mpi_places_matter(d, io, offsets, lens)) {
        io->query_offsets = places;
    } else {
        io->query_offsets = NULL;
        d->causal = FCL_CAUSAL_NONE;
    }
}

/* Where each sequence's queries are among this rank's keys (query_offsets): ranks hold the
 * keys in rank order, and the queries are the whole sequence's last len_q positions, so
 * query i is at total(b) - len_q + i, and this rank's key 0 at the keys of the lower ranks.
 * len: this rank's lengths, then room for the starts and the totals (allocated by the
 * caller before agreeing, so that every rank reaches these collectives). */
static fcl_status shard_offsets(MPI_Comm comm, const fcl_attention_desc *d, long *len,
                                int32_t *offsets)
{
    const size_t batch = d->batch;
    long *start = len + batch, *total = len + 2 * batch;
    fcl_status s = FCL_SUCCESS;
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (MPI_Exscan(len, start, (int)batch, MPI_LONG, MPI_SUM, comm) != MPI_SUCCESS ||
        MPI_Allreduce(len, total, (int)batch, MPI_LONG, MPI_SUM, comm) != MPI_SUCCESS)
        s = mpi_fail(FCL_ERROR_COMMUNICATION, "MPI_Exscan or MPI_Allreduce of the shards' lengths");
    for (size_t b = 0; s == FCL_SUCCESS && b < batch; b++) {
        /* (MPI_Exscan leaves rank 0's result undefined: its keys come first) */
        const long offset = total[b] - (long)d->len_q - (rank ? start[b] : 0);
        if (offset < INT32_MIN || offset > INT32_MAX)
            s = mpi_fail(FCL_ERROR_UNSUPPORTED, "sequence %zu's %ld keys exceed int32 positions", b,
                     total[b]);
        else
            offsets[b] = (int32_t)offset;
    }
    return s;
}

/* This rank's partial result: in io->out and io->lse (or a buffer of its own, owned_lse, where
 * io->lse is NULL), and the host copy the others get. */
typedef struct {
    cl_mem out, lse, owned_lse, places;
    float *host; /* rows * dim out values, then rows lse */
} shard_partial;

static void partial_release(shard_partial *part)
{
    if (part->owned_lse)
        clReleaseMemObject(part->owned_lse);
    if (part->places)
        clReleaseMemObject(part->places);
}

/* This rank's partial: attention over its shard with lse into io->out, at the queries' places
 * among its keys (offsets; lens its lengths), sinks on rank 0 only (they count once in the
 * merge); where other ranks take part (share), read into part->host. */
static fcl_status local_partial(fcl_context *ctx, const fcl_attention_desc *d,
                                const fcl_attention_io *io, const int32_t *offsets,
                                const long *lens, int rank, int share, size_t rows, size_t dim,
                                shard_partial *part)
{
    cl_context cl;
    cl_command_queue queue;
    cl_int err = CL_SUCCESS;
    fcl_status s = mpi_cl_of(ctx, &cl, &queue);
    if (s != FCL_SUCCESS)
        return s;
    fcl_attention_desc local_d = *d;
    fcl_attention_io local = *io;
    part->out = io->out, part->lse = io->lse;
    if (!io->lse && share)
        part->lse = part->owned_lse =
            clCreateBuffer(cl, CL_MEM_READ_WRITE, rows * sizeof(float), NULL, &err);
    if (err == CL_SUCCESS && mpi_places_matter(d, io, offsets, lens))
        part->places = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                      d->batch * sizeof(int32_t), (void *)offsets, &err);
    if (err != CL_SUCCESS)
        return mpi_fail(FCL_ERROR_OUT_OF_RESOURCES, "allocating the partial results (%d)", (int)err);
    local.lse = part->lse;
    mpi_part_places(&local_d, &local, offsets, lens, part->places);
    if (rank != 0)
        local.sinks = NULL;
    s = fcl_attention_run(ctx, &local_d, &local, 0, NULL, NULL);
    if (s != FCL_SUCCESS)
        return mpi_failed_call(ctx, s, "this rank's attention");
    if (!share)
        return clFinish(queue) == CL_SUCCESS
                   ? FCL_SUCCESS
                   : mpi_fail(FCL_ERROR_OPENCL, "running this rank's attention");
    /* (in order after the attention; one wait for both) */
    err = clEnqueueReadBuffer(queue, part->out, CL_FALSE, 0, rows * dim * sizeof(float), part->host,
                              0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, part->lse, CL_TRUE, 0, rows * sizeof(float),
                                  part->host + rows * dim, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        return FCL_SUCCESS;
    clFinish(queue); /* (a read may still write part->host, which the caller frees) */
    return mpi_fail(FCL_ERROR_OPENCL, "reading this rank's partial results (%d)", (int)err);
}

/* The n gathered partials (each rows * (dim + 1) floats; this rank's still on the device in
 * mine, whose out is out) merged into out (in place) and lse: the others' written to the
 * device without waiting (the queue orders them before the merge), one wait for the merge. */
static fcl_status merge_partials(fcl_context *ctx, const float *all, int n, int rank,
                                 const shard_partial *mine, size_t rows, size_t dim, cl_mem out,
                                 cl_mem lse)
{
    cl_context cl;
    cl_command_queue queue;
    cl_int err = CL_SUCCESS;
    cl_event done = NULL;
    fcl_status s = mpi_cl_of(ctx, &cl, &queue);
    if (s != FCL_SUCCESS)
        return s;
    cl_mem *parts = calloc(2 * (size_t)n, sizeof(cl_mem));
    if (!parts)
        return mpi_fail(FCL_ERROR_OUT_OF_HOST_MEMORY, "allocating %d parts", n);
    const size_t count = rows * (dim + 1);
    for (int p = 0; p < n && err == CL_SUCCESS; p++) {
        if (p == rank) { /* (in rank order on every rank: the same sums everywhere) */
            parts[p] = mine->out, parts[n + p] = mine->lse;
            clRetainMemObject(mine->out), clRetainMemObject(mine->lse);
            continue;
        }
        const float *part = all + (size_t)p * count;
        for (int i = 0; i < 2 && err == CL_SUCCESS; i++) {
            const size_t bytes = (i ? rows : rows * dim) * sizeof(float);
            cl_mem *to = &parts[i * n + p];
            *to = clCreateBuffer(cl, CL_MEM_READ_ONLY, bytes, NULL, &err);
            if (err == CL_SUCCESS)
                err = clEnqueueWriteBuffer(queue, *to, CL_FALSE, 0, bytes, part + i * rows * dim,
                                           0, NULL, NULL);
        }
    }
    if (err != CL_SUCCESS) {
        s = mpi_fail(FCL_ERROR_OUT_OF_RESOURCES, "copying the partial results to the device (%d)",
                     (int)err);
        goto release;
    }
    s = fcl_attention_merge(ctx, (size_t)n, rows, dim, parts, parts + n, out, lse, 0, NULL, &done);
    if (s != FCL_SUCCESS) {
        s = mpi_failed_call(ctx, s, "merging the partial results");
        goto release;
    }
    err = clWaitForEvents(1, &done);
    if (err != CL_SUCCESS)
        s = mpi_fail(FCL_ERROR_OPENCL, "merging the partial results (%d)", (int)err);
release:
    if (s != FCL_SUCCESS)
        clFinish(queue); /* (the writes read `all`, which the caller frees) */
    if (done)
        clReleaseEvent(done);
    for (int p = 0; p < 2 * n; p++)
        if (parts[p])
            clReleaseMemObject(parts[p]);
    free(parts);
    return s;
}

/* fcl_mpi_attention_sharded on comm (whose MPI failures return). */
static fcl_status sharded(fcl_context *ctx, MPI_Comm comm, const fcl_attention_desc *d,
                          const fcl_attention_io *io)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    fcl_status s = mpi_agree(comm, mpi_check_local(ctx, d, io), "validation");
    if (s == FCL_SUCCESS)
        s = mpi_agree_shapes(comm, d);
    if (s != FCL_SUCCESS)
        return s;
    const size_t dim = d->head_dim_v ? d->head_dim_v : d->head_dim;
    const size_t rows = d->batch * d->heads_q * d->len_q, count = rows * (dim + 1);
    if (count > INT_MAX) /* (the same on every rank) */
        return mpi_fail(FCL_ERROR_UNSUPPORTED, "%zu rows of %zu floats exceed one MPI message",
                        rows, dim + 1);
    shard_partial mine = {.host = malloc(count * sizeof(float))};
    float *all = malloc(count * (size_t)size * sizeof(float));
    long *len = malloc(3 * d->batch * sizeof(long)); /* lengths, starts, totals */
    int32_t *offsets = malloc(d->batch * sizeof(int32_t));
    s = mine.host && all && len && offsets
            ? mpi_shard_lengths(ctx, d, io, len)
            : mpi_fail(FCL_ERROR_OUT_OF_HOST_MEMORY, "allocating %zu partial results", count);
    s = mpi_agree(comm, s, "reading its lengths");
    if (s == FCL_SUCCESS) { /* (both local after shard_offsets' collectives: one agreement) */
        s = shard_offsets(comm, d, len, offsets);
        if (s == FCL_SUCCESS)
            s = local_partial(ctx, d, io, offsets, len, rank, size > 1, rows, dim, &mine);
        s = mpi_agree(comm, s, "its attention");
    }
    if (s == FCL_SUCCESS && size > 1 &&
        MPI_Allgather(mine.host, (int)count, MPI_FLOAT, all, (int)count, MPI_FLOAT, comm) !=
            MPI_SUCCESS)
        s = mpi_fail(FCL_ERROR_COMMUNICATION, "MPI_Allgather of the partial results failed");
    if (s == FCL_SUCCESS && size > 1) /* (one rank's partial is the result) */
        s = merge_partials(ctx, all, size, rank, &mine, rows, dim, io->out, io->lse);
    partial_release(&mine);
    free(mine.host);
    free(all);
    free(len);
    free(offsets);
    return s;
}

fcl_status mpi_on_own_comm(mpi_call run, fcl_context *ctx, MPI_Comm comm,
                           const fcl_attention_desc *d, const fcl_attention_io *io, void *extra)
{
    MPI_Comm own;
    last_error[0] = '\0';
    if (comm == MPI_COMM_NULL || MPI_Comm_dup(comm, &own) != MPI_SUCCESS)
        return mpi_fail(FCL_ERROR_INVALID_ARGUMENT, "comm is not a valid communicator");
    MPI_Comm_set_errhandler(own, MPI_ERRORS_RETURN);
    const fcl_status s = run(ctx, own, d, io, extra);
    MPI_Comm_free(&own);
    return s;
}

fcl_status fcl_mpi_attention_sharded(fcl_context *ctx, MPI_Comm comm, const fcl_attention_desc *d,
                                     const fcl_attention_io *io)
{
    /* On comm itself, its error handler MPI_ERRORS_RETURN for the call: the call is made of
     * collectives alone, which cannot meet the caller's messages, and a duplicate (a
     * collective of its own, and its release) added 50 us to a 0.8 ms decoding step. */
    MPI_Errhandler theirs;
    last_error[0] = '\0';
    if (comm == MPI_COMM_NULL || MPI_Comm_get_errhandler(comm, &theirs) != MPI_SUCCESS)
        return mpi_fail(FCL_ERROR_INVALID_ARGUMENT, "comm is not a valid communicator");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    const fcl_status s = sharded(ctx, comm, d, io);
    MPI_Comm_set_errhandler(comm, theirs);
    MPI_Errhandler_free(&theirs);
    return s;
}

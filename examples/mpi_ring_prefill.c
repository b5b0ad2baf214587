/* Context-parallel prefill of one long prompt across MPI ranks, as an engine whose prompt is
 * too long for one device's time budget runs it: the prompt's 2n chunks are dealt in zig-zag
 * order (rank r holds chunks r and 2n - 1 - r, so that under causality every rank does the
 * same work), each rank computes its own tokens' queries, keys and values, and
 * fcl_mpi_attention_ring_zigzag passes the K/V blocks around the ring and returns each rank's
 * causal attention over the whole prompt. A workspace keeps the page-locked host blocks for
 * the next prefill. Each rank checks a few of its rows against a float64 reference over the
 * whole prompt (which every rank can rebuild: its values come from a seeded generator).
 * Run: mpiexec -n 2 example_mpi_ring_prefill. Uses only flashcl.h and flashcl_mpi.h. */
#include <flashcl_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    HEADS_Q = 8,
    HEADS_KV = 2, /* GQA: 4 query heads share a kv head */
    DIM = 64,
    CHUNK = 40 /* tokens a chunk: a rank holds 2 (the prompt: 2 ranks CHUNK tokens) */
};

/* Value e of token t's q (kind 0), K (1) or V (2) row for head h, the same on every rank. */
static float token_value(int kind, int t, int h, int e)
{
    unsigned s = (unsigned)(((kind * 7919 + t) * 131 + h) * 257 + e) * 2654435761u;
    s ^= s >> 15;
    s *= 2246822519u;
    s ^= s >> 13;
    return (float)(s & 0xffff) / 32768.0f - 1.0f;
}

/* The float64 reference: causal attention of query head h at position p. */
static void reference(int p, int h, double *out)
{
    const int hk = h / (HEADS_Q / HEADS_KV);
    double m = -INFINITY, sum = 0.0, *score = malloc((size_t)(p + 1) * sizeof(double));
    for (int j = 0; j <= p; j++) {
        double dot = 0.0;
        for (int e = 0; e < DIM; e++)
            dot += (double)token_value(0, p, h, e) * token_value(1, j, hk, e);
        score[j] = dot / sqrt((double)DIM);
        m = score[j] > m ? score[j] : m;
    }
    for (int e = 0; e < DIM; e++)
        out[e] = 0.0;
    for (int j = 0; j <= p; j++) {
        const double w = exp(score[j] - m);
        sum += w;
        for (int e = 0; e < DIM; e++)
            out[e] += w * token_value(2, j, hk, e);
    }
    for (int e = 0; e < DIM; e++)
        out[e] /= sum;
    free(score);
}

/* A device buffer holding host's bytes; the example stops all ranks on failure. */
static cl_mem buffer(cl_context cl, size_t bytes, void *host)
{
    cl_int err;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              host, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "clCreateBuffer of %zu bytes: %d\n", bytes, (int)err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return m;
}

int main(int argc, char **argv)
{
    int rank, ranks, failed = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    fcl_context *ctx = NULL;
    fcl_mpi_workspace *ws = NULL;
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS ||
        fcl_mpi_workspace_create(ctx, &ws) != FCL_SUCCESS) {
        fprintf(stderr, "rank %d: %s%s\n", rank, fcl_context_last_error(NULL), fcl_mpi_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    cl_context cl;
    cl_command_queue queue;
    fcl_context_get_cl(ctx, &cl, NULL, &queue);

    /* This rank's block: its 2 chunks one after the other, position of its token t at[t];
     * q [HEADS_Q][2 CHUNK][DIM], K and V [HEADS_KV][2 CHUNK][DIM] */
    enum { LEN = 2 * CHUNK };
    int at[LEN];
    for (int t = 0; t < LEN; t++)
        at[t] = t < CHUNK ? rank * CHUNK + t : (2 * ranks - 1 - rank) * CHUNK + t - CHUNK;
    float *q = malloc(sizeof(float) * HEADS_Q * LEN * DIM);
    float *k = malloc(sizeof(float) * HEADS_KV * LEN * DIM);
    float *v = malloc(sizeof(float) * HEADS_KV * LEN * DIM);
    float *out = malloc(sizeof(float) * HEADS_Q * LEN * DIM);
    for (int t = 0; t < LEN; t++)
        for (int e = 0; e < DIM; e++) {
            for (int h = 0; h < HEADS_Q; h++)
                q[(h * LEN + t) * DIM + e] = token_value(0, at[t], h, e);
            for (int h = 0; h < HEADS_KV; h++) {
                k[(h * LEN + t) * DIM + e] = token_value(1, at[t], h, e);
                v[(h * LEN + t) * DIM + e] = token_value(2, at[t], h, e);
            }
        }
    const fcl_attention_io io = {
        .q = buffer(cl, sizeof(float) * HEADS_Q * LEN * DIM, q),
        .k = buffer(cl, sizeof(float) * HEADS_KV * LEN * DIM, k),
        .v = buffer(cl, sizeof(float) * HEADS_KV * LEN * DIM, v),
        .out = buffer(cl, sizeof(float) * HEADS_Q * LEN * DIM, NULL)};
    const fcl_attention_desc d = {.batch = 1, .heads_q = HEADS_Q, .heads_kv = HEADS_KV,
                                  .len_q = LEN, .len_kv = LEN, .head_dim = DIM,
                                  .causal = FCL_CAUSAL_BOTTOM_RIGHT};
    fcl_status s = fcl_mpi_attention_ring_zigzag(ctx, MPI_COMM_WORLD, ws, &d, &io);
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "rank %d: %s\n", rank, fcl_mpi_last_error());
        failed = 1;
    } else {
        clEnqueueReadBuffer(queue, io.out, CL_TRUE, 0, sizeof(float) * HEADS_Q * LEN * DIM, out, 0,
                            NULL, NULL);
        double worst = 0.0, want[DIM];
        for (int t = 0; t < LEN; t += 7) /* every 7th row of each head */
            for (int h = 0; h < HEADS_Q; h++) {
                reference(at[t], h, want);
                for (int e = 0; e < DIM; e++)
                    worst = fmax(worst, fabs(out[(h * LEN + t) * DIM + e] - want[e]));
            }
        printf("rank %d: positions %d-%d and %d-%d of %d, max |error| %.2e\n", rank, at[0],
               at[CHUNK - 1], at[CHUNK], at[LEN - 1], 2 * ranks * CHUNK, worst);
        failed = !(worst < 5e-5);
    }
    clReleaseMemObject(io.q), clReleaseMemObject(io.k), clReleaseMemObject(io.v);
    clReleaseMemObject(io.out);
    free(q), free(k), free(v), free(out);
    fcl_mpi_workspace_destroy(ws);
    fcl_context_destroy(ctx);
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}

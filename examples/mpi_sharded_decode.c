/* A decode loop over a KV cache sharded by keys across MPI ranks, as an engine whose cache no
 * longer fits one device runs it: rank r holds its own slice of every sequence's keys, the
 * newest token's K and V go to the last rank's shard, and each step every rank computes the
 * attention of the new query over the whole cache with fcl_mpi_attention_sharded (local
 * attention, then the exact merge of every rank's part). Each step rank 0 checks the result
 * against a float64 reference over the whole cache, which every rank can rebuild (the cache
 * comes from a seeded generator). Run: mpiexec -n 2 example_mpi_sharded_decode.
 * Uses only flashcl.h and flashcl_mpi.h. */
#include <flashcl_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    HEADS_Q = 8,
    HEADS_KV = 2,     /* GQA: 4 query heads share a kv head */
    DIM = 64,
    PROMPT = 300,     /* keys in the cache before the first step */
    STEPS = 8,
    CAPACITY = PROMPT + STEPS /* the last rank's shard grows into this */
};

/* Value e of token t's K (v = 0) or V (v = 1) row for kv head h, the same on every rank. */
static float cache_value(int v, int t, int h, int e)
{
    unsigned s = (unsigned)(((v * 7919 + t) * 131 + h) * 257 + e) * 2654435761u;
    s ^= s >> 15;
    s *= 2246822519u;
    s ^= s >> 13;
    return (float)(s & 0xffff) / 32768.0f - 1.0f;
}

static float query_value(int step, int h, int e) { return cache_value(2, step, h, e); }

/* The float64 reference for query head h over keys 0 .. len - 1. */
static void reference(const float *q, int len, int h, double *out)
{
    const int hk = h / (HEADS_Q / HEADS_KV);
    double m = -INFINITY, sum = 0.0;
    double *score = malloc((size_t)len * sizeof(double));
    for (int j = 0; j < len; j++) {
        double dot = 0.0;
        for (int e = 0; e < DIM; e++)
            dot += (double)q[h * DIM + e] * cache_value(0, j, hk, e);
        score[j] = dot / sqrt((double)DIM);
        m = score[j] > m ? score[j] : m;
    }
    for (int e = 0; e < DIM; e++)
        out[e] = 0.0;
    for (int j = 0; j < len; j++) {
        const double p = exp(score[j] - m);
        sum += p;
        for (int e = 0; e < DIM; e++)
            out[e] += p * cache_value(1, j, hk, e);
    }
    for (int e = 0; e < DIM; e++)
        out[e] /= sum;
    free(score);
}

/* A device buffer (a copy of host where given); the example stops all ranks on failure. */
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
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS) {
        fprintf(stderr, "rank %d: %s\n", rank, fcl_context_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    cl_context cl;
    cl_command_queue queue;
    fcl_context_get_cl(ctx, &cl, NULL, &queue);

    /* This rank's shard: prompt keys [first, first + len), [HEADS_KV][CAPACITY][DIM] */
    const int first = PROMPT * rank / ranks, last = rank == ranks - 1;
    int len = PROMPT * (rank + 1) / ranks - first;
    float *k = calloc((size_t)HEADS_KV * CAPACITY * DIM, sizeof(float));
    float *v = calloc((size_t)HEADS_KV * CAPACITY * DIM, sizeof(float));
    for (int h = 0; h < HEADS_KV; h++)
        for (int t = 0; t < len; t++)
            for (int e = 0; e < DIM; e++) {
                k[((size_t)h * CAPACITY + t) * DIM + e] = cache_value(0, first + t, h, e);
                v[((size_t)h * CAPACITY + t) * DIM + e] = cache_value(1, first + t, h, e);
            }
    const size_t cache_bytes = (size_t)HEADS_KV * CAPACITY * DIM * sizeof(float);
    cl_mem k_buf = buffer(cl, cache_bytes, k), v_buf = buffer(cl, cache_bytes, v);
    cl_mem q_buf = buffer(cl, HEADS_Q * DIM * sizeof(float), NULL);
    cl_mem out_buf = buffer(cl, HEADS_Q * DIM * sizeof(float), NULL);
    cl_mem len_buf = buffer(cl, sizeof(int32_t), NULL);

    fcl_attention_desc d = {.batch = 1, .heads_q = HEADS_Q, .heads_kv = HEADS_KV, .len_q = 1,
                            .len_kv = CAPACITY, .head_dim = DIM,
                            .causal = FCL_CAUSAL_BOTTOM_RIGHT};
    const fcl_attention_io io = {.q = q_buf, .k = k_buf, .v = v_buf, .out = out_buf,
                                 .seqlens_kv = len_buf};
    float q[HEADS_Q * DIM], out[HEADS_Q * DIM];
    for (int step = 0; step < STEPS; step++) {
        const int total = PROMPT + step + 1; /* keys after this step's token */
        if (last) { /* the new token's K and V into the last shard */
            for (int h = 0; h < HEADS_KV; h++) {
                float row_k[DIM], row_v[DIM];
                for (int e = 0; e < DIM; e++) {
                    row_k[e] = cache_value(0, total - 1, h, e);
                    row_v[e] = cache_value(1, total - 1, h, e);
                }
                const size_t at = ((size_t)h * CAPACITY + len) * DIM * sizeof(float);
                clEnqueueWriteBuffer(queue, k_buf, CL_TRUE, at, sizeof row_k, row_k, 0, NULL, NULL);
                clEnqueueWriteBuffer(queue, v_buf, CL_TRUE, at, sizeof row_v, row_v, 0, NULL, NULL);
            }
            len++;
        }
        const int32_t len32 = len;
        clEnqueueWriteBuffer(queue, len_buf, CL_TRUE, 0, sizeof len32, &len32, 0, NULL, NULL);
        for (int h = 0; h < HEADS_Q; h++)
            for (int e = 0; e < DIM; e++)
                q[h * DIM + e] = query_value(step, h, e);
        clEnqueueWriteBuffer(queue, q_buf, CL_TRUE, 0, sizeof q, q, 0, NULL, NULL);
        const fcl_status s = fcl_mpi_attention_sharded(ctx, MPI_COMM_WORLD, &d, &io);
        if (s != FCL_SUCCESS) {
            fprintf(stderr, "rank %d: %s\n", rank, fcl_mpi_last_error());
            failed = 1;
            break;
        }
        clEnqueueReadBuffer(queue, out_buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
        if (rank == 0) {
            double worst = 0.0, want[DIM];
            for (int h = 0; h < HEADS_Q; h++) {
                reference(q, total, h, want);
                for (int e = 0; e < DIM; e++)
                    worst = fmax(worst, fabs(out[h * DIM + e] - want[e]));
            }
            printf("step %d: %d keys over %d ranks, max |error| %.2e\n", step, total, ranks, worst);
            failed |= !(worst < 5e-5);
        }
    }
    clReleaseMemObject(k_buf), clReleaseMemObject(v_buf), clReleaseMemObject(q_buf);
    clReleaseMemObject(out_buf), clReleaseMemObject(len_buf);
    free(k), free(v);
    fcl_context_destroy(ctx);
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}

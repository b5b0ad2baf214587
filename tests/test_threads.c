/* Concurrency: one context used from 8 threads at once, and 8 contexts in 8 threads, give
 * results identical (bit for bit) to the same calls made one after another; failures in
 * other threads meanwhile leave each its own status and a readable message; calls queued
 * without waits on an out-of-order queue share the context's scratch memory safely. */
#include "support.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N_THREADS 8
#define N_ROUNDS 16
#define SM_ROWS 9
#define SM_COLS 1000
#define ATT_LEN 70
#define ATT_DIM 64
#define ATT_HEADS 2
#define ATT_ELEMS (ATT_HEADS * ATT_LEN * ATT_DIM)

/* One thread's work: its own inputs, and the outputs of each round. */
typedef struct job {
    fcl_context *ctx; /* NULL: the thread creates (and destroys) its own */
    fcl_softmax_algo algo;
    float *sm_in, *q, *k, *v;
    float sm_out[N_ROUNDS][SM_ROWS * SM_COLS], att_out[N_ROUNDS][ATT_ELEMS];
    float sm_lse[N_ROUNDS][SM_ROWS];
    fcl_status status; /* the first unexpected status, else FCL_SUCCESS */
    int bad_call_ok;   /* the invalid call gave its status and message every round */
} job;

static fcl_softmax_desc softmax_desc(const job *j)
{
    return (fcl_softmax_desc){.rows = SM_ROWS, .cols = SM_COLS, .algo = j->algo};
}

static fcl_attention_desc attention_desc(void)
{
    return (fcl_attention_desc){.batch = 1, .heads_q = ATT_HEADS, .heads_kv = 1,
                                .len_q = ATT_LEN, .len_kv = ATT_LEN, .head_dim = ATT_DIM,
                                .causal = FCL_CAUSAL_TOP_LEFT};
}

static void *run_job(void *arg)
{
    job *j = arg;
    fcl_context *ctx = j->ctx;
    j->status = ctx ? FCL_SUCCESS : fcl_context_create(NULL, &ctx);
    j->bad_call_ok = 1;
    fcl_softmax_desc sd = softmax_desc(j);
    fcl_attention_desc ad = attention_desc();
    fcl_softmax_desc bad = {.rows = 0, .cols = 5};
    for (int round = 0; round < N_ROUNDS && j->status == FCL_SUCCESS; round++) {
        j->status = fcl_softmax_host(ctx, &sd, j->sm_in, NULL, j->sm_out[round], j->sm_lse[round]);
        if (j->status == FCL_SUCCESS)
            j->status = fcl_attention_host(ctx, &ad, j->q, j->k, j->v, NULL, j->att_out[round], NULL);
        /* A failing call between the others: its own status, and a message that is whole. */
        float dummy;
        if (fcl_softmax_host(ctx, &bad, &dummy, NULL, &dummy, NULL) != FCL_ERROR_INVALID_ARGUMENT ||
            strstr(fcl_context_last_error(ctx), "must both be at least 1") == NULL)
            j->bad_call_ok = 0;
    }
    if (!j->ctx)
        fcl_context_destroy(ctx);
    return NULL;
}

static job *new_jobs(void)
{
    static const fcl_softmax_algo algos[] = {FCL_SOFTMAX_AUTO, FCL_SOFTMAX_ONLINE,
                                             FCL_SOFTMAX_SPLIT};
    job *jobs = calloc(N_THREADS, sizeof *jobs);
    assert_non_null(jobs);
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t].algo = algos[t % 3];
        jobs[t].sm_in = chk_random_tensor(SM_ROWS * SM_COLS, FCL_DTYPE_F32, support_rng());
        jobs[t].q = chk_random_tensor(ATT_ELEMS, FCL_DTYPE_F32, support_rng());
        jobs[t].k = chk_random_tensor(ATT_ELEMS / ATT_HEADS, FCL_DTYPE_F32, support_rng());
        jobs[t].v = chk_random_tensor(ATT_ELEMS / ATT_HEADS, FCL_DTYPE_F32, support_rng());
        assert_true(jobs[t].sm_in && jobs[t].q && jobs[t].k && jobs[t].v);
    }
    return jobs;
}

static void free_jobs(job *jobs)
{
    for (int t = 0; t < N_THREADS; t++) {
        free(jobs[t].sm_in);
        free(jobs[t].q);
        free(jobs[t].k);
        free(jobs[t].v);
    }
    free(jobs);
}

/* Every round of every job equals what the shared context gives for that job alone. */
static void assert_same_as_serial(job *jobs)
{
    job *serial = malloc(sizeof *serial);
    assert_non_null(serial);
    for (int t = 0; t < N_THREADS; t++) {
        assert_int_equal(jobs[t].status, FCL_SUCCESS);
        assert_true(jobs[t].bad_call_ok);
        *serial = jobs[t];
        serial->ctx = support_ctx;
        run_job(serial);
        assert_int_equal(serial->status, FCL_SUCCESS);
        for (int round = 0; round < N_ROUNDS; round++) {
            assert_memory_equal(jobs[t].sm_out[round], serial->sm_out[0], sizeof serial->sm_out[0]);
            assert_memory_equal(jobs[t].sm_lse[round], serial->sm_lse[0], sizeof serial->sm_lse[0]);
            assert_memory_equal(jobs[t].att_out[round], serial->att_out[0], sizeof serial->att_out[0]);
        }
    }
    free(serial);
}

static void run_threads(job *jobs)
{
    pthread_t threads[N_THREADS];
    for (int t = 0; t < N_THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, run_job, &jobs[t]), 0);
    for (int t = 0; t < N_THREADS; t++)
        assert_int_equal(pthread_join(threads[t], NULL), 0);
}

static void test_one_context_eight_threads(void **state)
{
    (void)state;
    job *jobs = new_jobs();
    for (int t = 0; t < N_THREADS; t++)
        jobs[t].ctx = support_ctx;
    run_threads(jobs);
    assert_same_as_serial(jobs);
    free_jobs(jobs);
}

static void test_eight_contexts_eight_threads(void **state)
{
    (void)state;
    job *jobs = new_jobs(); /* ctx NULL: each thread makes its own */
    run_threads(jobs);
    assert_same_as_serial(jobs);
    free_jobs(jobs);
}

/* Calls that share the context's scratch memory (split-KV's partials, SPLIT softmax's
 * statistics, a merge's lse), enqueued back to back with no waits between them on an
 * out-of-order queue where the device has one, each larger than the last (the scratch
 * grows): each result equals the same call made alone, blocking. */
#define QUEUED 5
static void test_calls_queued_share_scratch(void **state)
{
    (void)state;
    cl_context c;
    cl_device_id dev;
    assert_int_equal(fcl_context_get_cl(support_ctx, &c, &dev, NULL), FCL_SUCCESS);
    cl_command_queue_properties can = 0;
    assert_int_equal(clGetDeviceInfo(dev, CL_DEVICE_QUEUE_PROPERTIES, sizeof can, &can, NULL),
                     CL_SUCCESS);
    cl_int err;
    cl_command_queue queue = clCreateCommandQueue(
        c, dev, can & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    assert_int_equal(err, CL_SUCCESS);
    fcl_context *ctx;
    assert_int_equal(fcl_context_create_from_cl(c, dev, queue, NULL, &ctx), FCL_SUCCESS);

    attention_run att[QUEUED];
    fcl_softmax_desc sm[QUEUED];
    float *sm_in[QUEUED];
    cl_mem bufs[QUEUED][7];   /* q, k, v, out, softmax in and out, merged out */
    cl_event done[QUEUED][3]; /* attention, softmax, merge */
    for (int i = 0; i < QUEUED; i++) {
        att[i] = (attention_run){.d = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = 1 + i % 2,
                                       .len_kv = 300 + 200 * (size_t)i, .head_dim = 64,
                                       .kv_splits = 2 + (size_t)i}};
        attention_contiguous_inputs(&att[i]);
        sm[i] = (fcl_softmax_desc){.rows = 3 + (size_t)i, .cols = 3000, .algo = FCL_SOFTMAX_SPLIT};
        sm_in[i] = chk_random_tensor(sm[i].rows * sm[i].cols, FCL_DTYPE_F32, support_rng());
        const attention_run *r = &att[i];
        const size_t out_bytes = r->out_n * sizeof(float);
        const size_t sm_bytes = sm[i].rows * sm[i].cols * sizeof(float);
        const void *init[7] = {r->io.q, r->io.k, r->io.v, NULL, sm_in[i], NULL, NULL};
        const size_t bytes[7] = {r->q_n * sizeof(float), r->k_n * sizeof(float),
                                 r->v_n * sizeof(float), out_bytes, sm_bytes, sm_bytes, out_bytes};
        for (int b = 0; b < 7; b++) {
            bufs[i][b] = clCreateBuffer(c, CL_MEM_READ_WRITE | (init[b] ? CL_MEM_COPY_HOST_PTR : 0),
                                        bytes[b], (void *)init[b], &err);
            assert_int_equal(err, CL_SUCCESS);
        }
    }
    /* All enqueued before any is waited for. The merge takes out as its one part, out's
     * first values as the part's lse (finite), and writes the merged lse into scratch. */
    for (int i = 0; i < QUEUED; i++) {
        cl_mem *b = bufs[i];
        const size_t rows = att[i].d.batch * att[i].d.heads_q * att[i].d.len_q;
        assert_int_equal(fcl_attention(ctx, &att[i].d, b[0], b[1], b[2], NULL, b[3], NULL, 0,
                                       NULL, &done[i][0]), FCL_SUCCESS);
        assert_int_equal(fcl_softmax(ctx, &sm[i], b[4], NULL, b[5], NULL, 0, NULL, &done[i][1]),
                         FCL_SUCCESS);
        assert_int_equal(fcl_attention_merge(ctx, 1, rows, 64, &b[3], &b[3], b[6], NULL, 1,
                                             &done[i][0], &done[i][2]), FCL_SUCCESS);
    }
    for (int i = 0; i < QUEUED; i++) {
        assert_int_equal(clWaitForEvents(3, done[i]), CL_SUCCESS);
        const attention_run *r = &att[i];
        const size_t out_bytes = r->out_n * sizeof(float);
        const size_t sm_bytes = sm[i].rows * sm[i].cols * sizeof(float);
        float *got = malloc(out_bytes), *want = malloc(out_bytes), *merged = malloc(out_bytes);
        float *sm_got = malloc(sm_bytes), *sm_want = malloc(sm_bytes);
        assert_true(got && want && merged && sm_got && sm_want);
        assert_int_equal(fcl_attention_host(support_ctx, &r->d, r->io.q, r->io.k, r->io.v, NULL,
                                            want, NULL), FCL_SUCCESS);
        assert_int_equal(clEnqueueReadBuffer(queue, bufs[i][3], CL_TRUE, 0, out_bytes, got, 0,
                                             NULL, NULL), CL_SUCCESS);
        assert_memory_equal(got, want, out_bytes);
        assert_int_equal(clEnqueueReadBuffer(queue, bufs[i][6], CL_TRUE, 0, out_bytes, merged, 0,
                                             NULL, NULL), CL_SUCCESS);
        for (size_t e = 0; e < r->out_n; e++) /* one part: merged, it is itself */
            if (fabsf(merged[e] - got[e]) > 1e-6f * (1.0f + fabsf(got[e])))
                fail_msg("call %d: merged element %zu is %g, the part's %g", i, e,
                         (double)merged[e], (double)got[e]);
        assert_int_equal(fcl_softmax_host(support_ctx, &sm[i], sm_in[i], NULL, sm_want, NULL),
                         FCL_SUCCESS);
        assert_int_equal(clEnqueueReadBuffer(queue, bufs[i][5], CL_TRUE, 0, sm_bytes, sm_got, 0,
                                             NULL, NULL), CL_SUCCESS);
        assert_memory_equal(sm_got, sm_want, sm_bytes);
        free(got), free(want), free(merged), free(sm_got), free(sm_want);
        for (int e = 0; e < 3; e++)
            clReleaseEvent(done[i][e]);
        for (int b = 0; b < 7; b++)
            clReleaseMemObject(bufs[i][b]);
        attention_free_inputs(&att[i]);
        free(sm_in[i]);
    }
    fcl_context_destroy(ctx);
    clReleaseCommandQueue(queue);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_context_eight_threads),
        cmocka_unit_test(test_eight_contexts_eight_threads),
        cmocka_unit_test(test_calls_queued_share_scratch),
    };
    return support_run_tests(tests);
}

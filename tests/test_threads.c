/* Concurrency: one context used from 8 threads at once, and 8 contexts in 8 threads, give
 * results identical (bit for bit) to the same calls made one after another; failures in
 * other threads meanwhile leave each its own status and a readable message. */
#include "support.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_context_eight_threads),
        cmocka_unit_test(test_eight_contexts_eight_threads),
    };
    return support_run_tests(tests);
}

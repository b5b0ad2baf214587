/* Guard bytes: every output cl_mem is larger than the call needs, filled with a pattern;
 * after each call the bytes past the output are checked unchanged, and every input buffer
 * is read back and checked unmodified. Covers each softmax plan (rows in registers with
 * partly filled work-groups, local memory, ONLINE, SPLIT) and attention with and without
 * key splits, decoding included. */
#include "support.h"

#include <stdlib.h>
#include <string.h>

#define GUARD_BYTES 4096
#define GUARD_PATTERN 0xA5

/* A device buffer of `bytes` (plus guard) holding host[0, bytes) and the pattern after. */
typedef struct guarded {
    cl_mem mem;
    size_t bytes;
    unsigned char *init; /* what the whole buffer held before the call */
} guarded;

static guarded guarded_new(const void *host, size_t bytes)
{
    cl_context c;
    cl_int err;
    assert_int_equal(fcl_context_get_cl(support_ctx, &c, NULL, NULL), FCL_SUCCESS);
    guarded g = {.bytes = bytes, .init = malloc(bytes + GUARD_BYTES)};
    assert_non_null(g.init);
    memset(g.init, GUARD_PATTERN, bytes + GUARD_BYTES);
    if (host)
        memcpy(g.init, host, bytes);
    g.mem = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes + GUARD_BYTES,
                           g.init, &err);
    assert_int_equal(err, CL_SUCCESS);
    return g;
}

static unsigned char *guarded_read(const guarded *g)
{
    cl_command_queue q;
    fcl_context_get_cl(support_ctx, NULL, NULL, &q);
    unsigned char *now = malloc(g->bytes + GUARD_BYTES);
    assert_non_null(now);
    assert_int_equal(clEnqueueReadBuffer(q, g->mem, CL_TRUE, 0, g->bytes + GUARD_BYTES, now, 0,
                                         NULL, NULL),
                     CL_SUCCESS);
    return now;
}

/* An input: every byte as before. An output: the guard as before. Then released. */
static void guarded_check_free(guarded *g, int is_output)
{
    unsigned char *now = guarded_read(g);
    size_t from = is_output ? g->bytes : 0;
    assert_memory_equal(now + from, g->init + from, g->bytes + GUARD_BYTES - from);
    free(now);
    free(g->init);
    clReleaseMemObject(g->mem);
}

/* The call succeeded (s); waits for its event. */
static void finish(fcl_status s, cl_event done)
{
    assert_int_equal(s, FCL_SUCCESS);
    assert_int_equal(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
}

static void softmax_guarded(size_t rows, size_t cols, fcl_softmax_algo algo, int with_mask)
{
    size_t n = rows * cols;
    float *x = chk_random_tensor(n, FCL_DTYPE_F32, support_rng());
    float *m = chk_random_tensor(n, FCL_DTYPE_F32, support_rng());
    assert_true(x && m);
    guarded in = guarded_new(x, n * 4), mask = guarded_new(m, n * 4);
    guarded out = guarded_new(NULL, n * 4), lse = guarded_new(NULL, rows * 4);
    fcl_softmax_desc d = {.rows = rows, .cols = cols, .algo = algo,
                          .mask_stride = with_mask ? cols : 0};
    cl_event done = NULL;
    fcl_status s = fcl_softmax(support_ctx, &d, in.mem, with_mask ? mask.mem : NULL, out.mem,
                               lse.mem, 0, NULL, &done);
    finish(s, done);
    guarded_check_free(&in, 0);
    guarded_check_free(&mask, 0);
    guarded_check_free(&out, 1);
    guarded_check_free(&lse, 1);
    free(x);
    free(m);
}

static void test_softmax_guards(void **state)
{
    (void)state;
    static const size_t shapes[][2] = {{1, 1}, {3, 7}, {37, 128}, {5, 1023}, {3, 4097},
                                       {2, 200001}};
    static const fcl_softmax_algo algos[] = {FCL_SOFTMAX_AUTO, FCL_SOFTMAX_FUSED,
                                             FCL_SOFTMAX_ONLINE, FCL_SOFTMAX_SPLIT};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int a = 0; a < 4; a++)
            if (algo_can_run(algos[a], shapes[s][1]))
                softmax_guarded(shapes[s][0], shapes[s][1], algos[a], s % 2);
}

static void attention_guarded(size_t len_q, size_t len_kv, size_t dim, size_t splits)
{
    fcl_attention_desc d = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = len_q,
                            .len_kv = len_kv, .head_dim = dim, .kv_splits = splits,
                            .causal = FCL_CAUSAL_BOTTOM_RIGHT};
    size_t nq = 2 * 4 * len_q * dim, nkv = 2 * 2 * len_kv * dim;
    float *q = chk_random_tensor(nq, FCL_DTYPE_F32, support_rng());
    float *k = chk_random_tensor(nkv, FCL_DTYPE_F32, support_rng());
    float *v = chk_random_tensor(nkv, FCL_DTYPE_F32, support_rng());
    assert_true(q && k && v);
    guarded gq = guarded_new(q, nq * 4), gk = guarded_new(k, nkv * 4), gv = guarded_new(v, nkv * 4);
    guarded out = guarded_new(NULL, nq * 4), lse = guarded_new(NULL, 2 * 4 * len_q * 4);
    cl_event done = NULL;
    fcl_status s = fcl_attention(support_ctx, &d, gq.mem, gk.mem, gv.mem, NULL, out.mem, lse.mem,
                                 0, NULL, &done);
    finish(s, done);
    guarded_check_free(&gq, 0);
    guarded_check_free(&gk, 0);
    guarded_check_free(&gv, 0);
    guarded_check_free(&out, 1);
    guarded_check_free(&lse, 1);
    free(q);
    free(k);
    free(v);
}

static void test_attention_guards(void **state)
{
    (void)state;
    attention_guarded(1, 300, 128, 0); /* decoding */
    attention_guarded(3, 77, 64, 2);
    attention_guarded(33, 33, 80, 0);
    attention_guarded(17, 129, 256, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_guards),
        cmocka_unit_test(test_attention_guards),
    };
    return support_run_tests(tests);
}

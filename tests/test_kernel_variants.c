/* Every kernel variant the planner can pick, once each on a small case, against the float64
 * reference: the softmax kernels (in registers, in local memory, online, split, per row) for
 * every storage type, in place and with the v0.2 modifiers; the attention tile, decode and
 * rows kernels of every head-dim bucket, plain and with every feature, and the rows kernel in
 * its form for the other vector width; split-KV with its merge kernel; and
 * fcl_attention_merge. Small enough to run under a simulator: .ci/oclgrind.sh runs it under
 * Oclgrind, which fails it on any out-of-bounds access or data race. */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const fcl_softmax_algo algos[3] = {FCL_SOFTMAX_FUSED, FCL_SOFTMAX_ONLINE,
                                          FCL_SOFTMAX_SPLIT};

static void test_softmax_variants(void **state)
{
    (void)state;
    for (fcl_dtype t = FCL_DTYPE_F32; t <= FCL_DTYPE_BF16; t++)
        for (int a = 0; a < 3; a++) {
            /* In place, rows sharing a work-group (the race the register kernel once had). */
            run_softmax_case(&(softmax_case){.rows = 3, .cols = 530, .dtype = t,
                                             .algo = algos[a], .in_place = 1}, NULL);
            run_softmax_case(&(softmax_case){.rows = 4, .cols = 61, .dtype = t, .algo = algos[a],
                                             .heads = 2, .head_rows = 1, .mask = MASK_PER_ROW,
                                             .mask_rows = 3, .mask_f16 = 1, .alibi = 1,
                                             .sinks = 1, .log = a == 1, .fill = FILL_SPECIAL}, NULL);
        }
    /* A row too long for registers (local memory), and one SPLIT across work-groups. */
    if (algo_can_run(FCL_SOFTMAX_FUSED, 5000))
        run_softmax_case(&(softmax_case){.rows = 1, .cols = 5000, .algo = FCL_SOFTMAX_FUSED,
                                         .in_place = 1, .mask = MASK_SHARED}, NULL);
    run_softmax_case(&(softmax_case){.rows = 1, .cols = 9000, .algo = FCL_SOFTMAX_SPLIT,
                                     .in_place = 1, .sinks = 1, .heads = 1, .head_rows = 1}, NULL);
}

/* Attention of one head-dim pair: prefill and decode, each through the plain kernels (mask,
 * causality, split-KV), the score-modifier ones (float16 mask, softcap, ALiBi, window, sinks
 * on contiguous tensors) and the all-feature ones (paged, per-sequence lengths and the
 * modifiers). */
static void attention_variants_on(fcl_context *ctx, size_t head_dim, size_t head_dim_v)
{
    /* The paged sequences span two or more key tiles of every size (the tile kernel lists the
     * rows of each tile after the first: fa_tile_rows). */
    static const int32_t lens[2] = {70, 13};
    static const float sinks[2] = {0.5f, -1.0f};
    float slopes[2];
    assert_int_equal(fcl_alibi_slopes(2, 8.0f, slopes), FCL_SUCCESS);
    for (size_t len_q = 1; len_q <= 9; len_q += 8) {
        const fcl_attention_desc shape = {.batch = 2, .heads_q = 2, .heads_kv = 1,
                                          .len_q = len_q, .len_kv = 20, .head_dim = head_dim,
                                          .head_dim_v = head_dim_v};
        attention_run r = {.d = shape};
        r.d.causal = FCL_CAUSAL_BOTTOM_RIGHT, r.d.kv_splits = 2, r.d.dtype_kv = FCL_DTYPE_F16;
        attention_contiguous_inputs(&r);
        attention_mask(&r, FCL_MASK_ADD_F32);
        check_attention_run_on(ctx, &r);
        attention_free_inputs(&r);

        r = (attention_run){.d = shape};
        r.d.causal = FCL_CAUSAL_TOP_LEFT, r.d.softcap = 30.0f, r.d.kv_splits = 2;
        r.d.window = 1, r.d.window_left = 9, r.d.window_right = 3;
        attention_contiguous_inputs(&r);
        attention_mask(&r, FCL_MASK_ADD_F16);
        r.io.sinks = sinks;
        r.io.alibi_slopes = slopes;
        check_attention_run_on(ctx, &r);
        attention_free_inputs(&r);

        r = (attention_run){.d = shape};
        r.d.causal = FCL_CAUSAL_BOTTOM_RIGHT, r.d.page_size = 16, r.d.softcap = 10.0f;
        r.d.len_kv = 70, r.d.window = 1, r.d.window_left = 50;
        r.d.dtype_q = FCL_DTYPE_BF16, r.d.dtype_o = FCL_DTYPE_F16;
        int32_t *table;
        attention_paged_inputs(&r, lens, &table);
        r.io.sinks = sinks;
        r.io.alibi_slopes = slopes;
        check_attention_run_on(ctx, &r);
        attention_free_inputs(&r);
        free(table);
    }
}

static void attention_variants(size_t head_dim, size_t head_dim_v)
{
    attention_variants_on(support_ctx, head_dim, head_dim_v);
}

static void test_attention_variants(void **state)
{
    (void)state;
    attention_variants(64, 64);
    attention_variants(128, 96);
    attention_variants(256, 256);
    attention_variants(576, 512);
}

/* The rows kernel with the other count of row vectors a work-item than this device's plan
 * (FA_ROWS_VECS: two on devices with 16-wide vectors, one elsewhere), so that both forms run
 * on every device here; attention_rows=1 takes it on GPUs too. */
static void test_rows_vectors(void **state)
{
    (void)state;
    const size_t width = support_info.softmax_vector_width >= 16 ? 8 : 16;
    char tuning[64];
    snprintf(tuning, sizeof tuning, "vector_width=%zu,attention_rows=1", width);
    const fcl_context_options opts = {.tuning = tuning};
    fcl_context *ctx = NULL;
    assert_int_equal(fcl_context_create(&opts, &ctx), FCL_SUCCESS);
    fcl_device_info info;
    fcl_context_device_info(ctx, &info);
    assert_int_equal(info.attention_tiles[0].rows_block_q, width >= 16 ? 32 : 16);
    attention_variants_on(ctx, 64, 64);
    attention_variants_on(ctx, 40, 24);
    fcl_context_destroy(ctx);
}

/* fcl_attention_merge of two parts, one of them the output. */
static void test_merge_variant(void **state)
{
    (void)state;
    enum { ROWS = 5, DIM = 8 };
    cl_context c;
    cl_command_queue queue;
    assert_int_equal(fcl_context_get_cl(support_ctx, &c, NULL, &queue), FCL_SUCCESS);
    float *outs[2], *lses[2];
    cl_mem out_bufs[2], lse_bufs[2];
    cl_int err = CL_SUCCESS;
    for (int p = 0; p < 2; p++) {
        outs[p] = test_tensor(ROWS * DIM, FCL_DTYPE_F32);
        lses[p] = test_tensor(ROWS, FCL_DTYPE_F32);
        lses[p][p + 1] = -INFINITY;
        out_bufs[p] = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                     ROWS * DIM * sizeof(float), outs[p], &err);
        lse_bufs[p] = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                     ROWS * sizeof(float), lses[p], &err);
    }
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(fcl_attention_merge(support_ctx, 2, ROWS, DIM, out_bufs, lse_bufs,
                                         out_bufs[1], lse_bufs[1], 0, NULL, NULL),
                     FCL_SUCCESS);
    float got[ROWS * DIM];
    assert_int_equal(clEnqueueReadBuffer(queue, out_bufs[1], CL_TRUE, 0, sizeof got, got, 0,
                                         NULL, NULL),
                     CL_SUCCESS);
    for (size_t r = 0; r < ROWS; r++) {
        double m = fmax(lses[0][r], lses[1][r]);
        double w0 = exp(lses[0][r] - m), w1 = exp(lses[1][r] - m);
        for (size_t e = 0; e < DIM; e++) {
            double want = (w0 * outs[0][r * DIM + e] + w1 * outs[1][r * DIM + e]) / (w0 + w1);
            if (fabs(got[r * DIM + e] - want) > 2e-6 * (1 + fabs(want)))
                fail_msg("merged row %zu: got %g want %g", r, (double)got[r * DIM + e], want);
        }
    }
    for (int p = 0; p < 2; p++) {
        clReleaseMemObject(out_bufs[p]), clReleaseMemObject(lse_bufs[p]);
        free(outs[p]), free(lses[p]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_variants),
        cmocka_unit_test(test_attention_variants),
        cmocka_unit_test(test_rows_vectors),
        cmocka_unit_test(test_merge_variant),
    };
    return support_run_tests(tests);
}

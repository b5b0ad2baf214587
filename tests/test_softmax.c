/* Softmax correctness on the default device (POCL in CI) against the float64 reference. */
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const fcl_softmax_algo every_algo[] = {FCL_SOFTMAX_AUTO, FCL_SOFTMAX_FUSED,
                                              FCL_SOFTMAX_ONLINE, FCL_SOFTMAX_SPLIT};
#define N_ALGOS 4

/* Runs the case once per algorithm that can run its shape. */
static void run_every_algo(softmax_case c)
{
    if (support_small() && c.cols > 65536)
        return; /* the small-size run: POCL's and rusticl's runs check the long rows */
    for (int a = 0; a < N_ALGOS; a++) {
        c.algo = every_algo[a];
        if (algo_can_run(c.algo, c.cols))
            run_softmax_case(&c, NULL);
    }
}

/* docs/ALGORITHMS.md section 2: d for [1, 3, 5, 2] is 1.20344 and for [3, 1, -2, 5] 1.1545...,
 * both with m = 5. */
static void test_worked_checks(void **state)
{
    (void)state;
    const float rows[2][4] = {{1, 3, 5, 2}, {3, 1, -2, 5}};
    const double want_d[2] = {1.20344, 1.1545};
    const double digits[2] = {1e-5, 1e-4};
    const int max_at[2] = {2, 3};
    for (int a = 0; a < N_ALGOS; a++) {
        fcl_softmax_desc d = {.rows = 2, .cols = 4, .algo = every_algo[a]};
        float out[8], lse[2];
        assert_int_equal(fcl_softmax_host(support_ctx, &d, rows, NULL, out, lse), FCL_SUCCESS);
        for (int r = 0; r < 2; r++) {
            double dsum = exp((double)lse[r] - 5.0);
            assert_true(fabs(dsum - want_d[r]) < digits[r]);
            assert_true(fabs(out[r * 4 + max_at[r]] - 1.0 / want_d[r]) < digits[r]);
        }
    }
}

/* Every length in the issue, a single row and several, every algorithm. */
static void test_lengths(void **state)
{
    (void)state;
    static const size_t cols[] = {1, 2, 3, 7, 1023, 1025, 4097, 200001, 643251};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        size_t many = cols[i] > 100000 ? 3 : cols[i] > 1000 ? 37 : 301;
        run_every_algo((softmax_case){.rows = 1, .cols = cols[i]});
        run_every_algo((softmax_case){.rows = many, .cols = cols[i]});
    }
}

/* Far more rows than work-groups launched: each group loops over many rows. */
static void test_many_short_rows(void **state)
{
    (void)state;
    run_every_algo((softmax_case){.rows = 100003, .cols = 3});
    run_every_algo((softmax_case){.rows = 20000, .cols = 33, .log = 1});
}

/* Rows of all -inf, NaN, some -inf, +inf, ordinary: each row keeps its own fate. With the
 * per-row mask, row 3 is fully masked but for its +inf, which becomes a NaN among -infs. */
static void test_special_values(void **state)
{
    (void)state;
    static const size_t cols[] = {1, 5, 1023, 4097, 200001};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        for (int log = 0; log <= 1; log++) {
            run_every_algo((softmax_case){.rows = 10, .cols = cols[i], .fill = FILL_SPECIAL,
                                          .log = log});
            if (cols[i] < 5000)
                run_every_algo((softmax_case){.rows = 10, .cols = cols[i], .fill = FILL_SPECIAL,
                                              .mask = MASK_PER_ROW, .log = log});
        }
}

static void test_magnitudes(void **state)
{
    (void)state;
    const fill_kind fills[] = {FILL_WIDE, FILL_HUGE, FILL_TINY};
    for (int f = 0; f < 3; f++)
        for (int log = 0; log <= 1; log++) {
            run_every_algo((softmax_case){.rows = 17, .cols = 1025, .fill = fills[f], .log = log});
            run_every_algo((softmax_case){.rows = 2, .cols = 200001, .fill = fills[f], .log = log});
        }
}

static void test_mask_and_scale(void **state)
{
    (void)state;
    const float scales[] = {0.0f, 0.7f, -1.5f};
    for (int s = 0; s < 3; s++)
        for (int m = MASK_SHARED; m <= MASK_PER_ROW; m++) {
            run_every_algo((softmax_case){.rows = 12, .cols = 1023, .scale = scales[s],
                                          .mask = (mask_kind)m});
            run_every_algo((softmax_case){.rows = 4, .cols = 200001, .scale = scales[s],
                                          .mask = (mask_kind)m, .log = 1});
        }
}

static void test_strides_and_in_place(void **state)
{
    (void)state;
    run_every_algo((softmax_case){.rows = 9, .cols = 1023, .in_pad = 5, .out_pad = 3});
    run_every_algo((softmax_case){.rows = 3, .cols = 4097, .in_pad = 1, .out_pad = 64, .log = 1});
    run_every_algo((softmax_case){.rows = 9, .cols = 1025, .in_pad = 7, .in_place = 1});
    run_every_algo((softmax_case){.rows = 5, .cols = 7, .in_place = 1, .log = 1,
                                  .fill = FILL_SPECIAL});
}

static void test_half_storage(void **state)
{
    (void)state;
    for (fcl_dtype t = FCL_DTYPE_F16; t <= FCL_DTYPE_BF16; t++)
        for (int log = 0; log <= 1; log++) {
            run_every_algo((softmax_case){.rows = 33, .cols = 1023, .dtype = t, .log = log});
            run_every_algo((softmax_case){.rows = 2, .cols = 200001, .dtype = t, .log = log,
                                          .in_pad = 2, .out_pad = 1});
            run_every_algo((softmax_case){.rows = 10, .cols = 257, .dtype = t, .log = log,
                                          .fill = FILL_SPECIAL, .mask = MASK_PER_ROW});
            run_every_algo((softmax_case){.rows = 4, .cols = 513, .dtype = t, .in_place = 1});
        }
}

/* The longest row: 2^24 + 1 columns, streamed (too long for local memory). */
static void test_row_of_2_pow_24(void **state)
{
    (void)state;
    softmax_case c = {.rows = 1, .cols = (1u << 24) + 1, .algo = FCL_SOFTMAX_ONLINE};
    run_softmax_case(&c, NULL);
    c.algo = FCL_SOFTMAX_SPLIT;
    c.log = 1;
    run_softmax_case(&c, NULL);
}

/* ggml's soft_max_ext: rows in heads (batch x heads x head_rows), one mask of head_rows rows
 * for every head and batch, float16 masks, ALiBi scaling the mask, sinks; alone and
 * together, every storage type, softmax and log-softmax. */
static void test_heads_sinks_alibi(void **state)
{
    (void)state;
    for (fcl_dtype t = FCL_DTYPE_F32; t <= FCL_DTYPE_BF16; t++)
        for (int log = 0; log <= 1; log++) {
            /* 2 batches x 4 heads x 5 rows, the mask shared by both batches and all heads. */
            softmax_case c = {.rows = 40, .cols = 1023, .dtype = t, .log = log, .heads = 4,
                              .head_rows = 5, .mask = MASK_PER_ROW, .mask_rows = 5,
                              .mask_f16 = 1, .alibi = 1, .sinks = 1, .scale = 0.3f};
            run_every_algo(c);
            c.sinks = 0;
            run_every_algo(c);
            c.sinks = 1;
            c.alibi = 0;
            c.mask_f16 = 0;
            run_every_algo(c);
        }
    /* Short rows (FUSED in registers), a shared mask row, and a mask of more rows than rows. */
    run_every_algo((softmax_case){.rows = 3000, .cols = 33, .heads = 7, .head_rows = 3,
                                  .mask = MASK_SHARED, .mask_f16 = 1, .alibi = 1, .sinks = 1});
    run_every_algo((softmax_case){.rows = 6, .cols = 3, .heads = 3, .head_rows = 1,
                                  .mask = MASK_PER_ROW, .mask_rows = 9, .sinks = 1, .log = 1});
    /* Long rows (SPLIT across work-groups), sinks without a mask. */
    run_every_algo((softmax_case){.rows = 2, .cols = 200001, .heads = 2, .head_rows = 1,
                                  .sinks = 1, .log = 1});
    run_every_algo((softmax_case){.rows = 4, .cols = 200001, .heads = 4, .head_rows = 1,
                                  .mask = MASK_PER_ROW, .mask_rows = 2, .mask_f16 = 1,
                                  .alibi = 1, .sinks = 1});
}

/* All -inf rows with sinks give 0 (log: -inf) and lse = the sink; NaN, +inf and masked rows
 * keep their own fate; in place. */
static void test_sinks_special_values(void **state)
{
    (void)state;
    for (int log = 0; log <= 1; log++) {
        run_every_algo((softmax_case){.rows = 20, .cols = 257, .fill = FILL_SPECIAL, .log = log,
                                      .heads = 4, .head_rows = 1, .sinks = 1,
                                      .mask = MASK_PER_ROW, .alibi = 1, .mask_f16 = 1});
        run_every_algo((softmax_case){.rows = 10, .cols = 5, .fill = FILL_SPECIAL, .log = log,
                                      .heads = 5, .head_rows = 2, .sinks = 1, .in_place = 1});
        run_every_algo((softmax_case){.rows = 10, .cols = 4097, .fill = FILL_SPECIAL,
                                      .log = log, .heads = 2, .head_rows = 5, .sinks = 1,
                                      .dtype = FCL_DTYPE_F16, .in_place = 1});
    }
    /* A NaN sink makes its head's rows NaN and no other; a +inf one too (undefined share). */
    const float x[4 * 3] = {1, 2, 3, -INFINITY, -INFINITY, -INFINITY, 4, 5, 6, 0, 0, 0};
    const float sinks[4] = {NAN, NAN, INFINITY, 1.0f};
    float out[12], lse[4];
    for (int a = 0; a < N_ALGOS; a++) {
        fcl_softmax_desc d = {.rows = 4, .cols = 3, .heads = 4, .head_rows = 1,
                              .algo = every_algo[a]};
        const fcl_softmax_host_io io = {.in = x, .out = out, .lse = lse, .sinks = sinks};
        assert_int_equal(fcl_softmax_run_host(support_ctx, &d, &io), FCL_SUCCESS);
        for (int r = 0; r < 3; r++) {
            assert_true(isnan(lse[r]));
            for (int j = 0; j < 3; j++)
                assert_true(isnan(out[r * 3 + j]));
        }
        assert_true(fabs(lse[3] - log(3.0 + exp(1.0))) < 1e-6);
        assert_true(fabs(out[9] - 1.0 / (3.0 + exp(1.0))) < 1e-6);
    }
}

/* FUSED, ONLINE and SPLIT forced on the same input agree with each other closely. */
static void test_forced_algorithms_agree(void **state)
{
    (void)state;
    /* Long enough to split, short enough for FUSED in this device's local memory. */
    const size_t rows = 6;
    const size_t cols = support_info.softmax_fused_max_cols < 9973 ? support_info.softmax_fused_max_cols : 9973;
    float *results[3];
    for (int a = 0; a < 3; a++) {
        results[a] = malloc(rows * cols * sizeof(float));
        assert_non_null(results[a]);
    }
    /* Same seed for the three runs: the same input. */
    chk_rng saved = *support_rng();
    for (int a = 0; a < 3; a++) {
        *support_rng() = saved;
        softmax_case c = {.rows = rows, .cols = cols, .algo = (fcl_softmax_algo)(a + 1)};
        run_softmax_case(&c, results[a]);
    }
    for (size_t i = 0; i < rows * cols; i++)
        for (int a = 1; a < 3; a++)
            assert_true(fabs(results[a][i] - results[0][i]) <= 1e-6 * results[0][i] + 1e-12);
    for (int a = 0; a < 3; a++)
        free(results[a]);
}

static void test_plan_matches_rule(void **state)
{
    (void)state;
    fcl_softmax_algo a;
    fcl_softmax_desc d = {.rows = 1000, .cols = 1000};
    assert_int_equal(fcl_softmax_plan(support_ctx, &d, &a), FCL_SUCCESS);
    /* Rows that fit local memory are FUSED, unless that memory is ordinary memory (CPUs). */
    assert_int_equal(a, support_info.softmax_rows_per_item ? FCL_SOFTMAX_ONLINE : FCL_SOFTMAX_FUSED);
    if (!getenv("FLASHCL_TUNE")) /* the default; overrides are tested in test_plan */
        assert_int_equal(support_info.softmax_rows_per_item, support_info.local_mem_is_global);
    d.cols = support_info.softmax_fused_max_cols + 1;
    assert_int_equal(fcl_softmax_plan(support_ctx, &d, &a), FCL_SUCCESS);
    assert_int_equal(a, FCL_SOFTMAX_ONLINE);
    d.rows = 1;
    assert_int_equal(fcl_softmax_plan(support_ctx, &d, &a), FCL_SUCCESS);
    /* One row fills a device only if it has a single CPU core. */
    int one_row_fills = (support_info.type & CL_DEVICE_TYPE_CPU) && support_info.compute_units == 1;
    assert_int_equal(a, one_row_fills ? FCL_SOFTMAX_ONLINE : FCL_SOFTMAX_SPLIT);
    d.algo = FCL_SOFTMAX_FUSED;
    assert_int_equal(fcl_softmax_plan(support_ctx, &d, &a), FCL_ERROR_UNSUPPORTED);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "FCL_SOFTMAX_FUSED"));
}

/* The embedding path: the caller's context and queue, a wait list and a done event. */
static void test_device_api_with_events(void **state)
{
    (void)state;
    cl_device_id dev;
    cl_int err;
    fcl_context_get_cl(support_ctx, NULL, &dev, NULL);
    cl_context cl_ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_command_queue q = clCreateCommandQueue(cl_ctx, dev, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    fcl_context *app = NULL;
    assert_int_equal(fcl_context_create_from_cl(cl_ctx, dev, q, NULL, &app), FCL_SUCCESS);

    enum { ROWS = 3, COLS = 5000 };
    static float x[ROWS * COLS], y[ROWS * COLS], lse[ROWS];
    double *ref = malloc(sizeof(double) * ROWS * COLS), ref_lse[ROWS];
    assert_non_null(ref);
    for (int i = 0; i < ROWS * COLS; i++)
        x[i] = (float)chk_normal(support_rng());
    cl_mem in = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof x, x, &err);
    cl_mem out = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, sizeof y, NULL, &err);
    cl_mem lse_buf = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, sizeof lse, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);

    for (int a = 0; a < N_ALGOS; a++) {
        fcl_softmax_desc d = {.rows = ROWS, .cols = COLS, .algo = every_algo[a]};
        cl_event gate = clCreateUserEvent(cl_ctx, &err), done = NULL;
        cl_int status = 0;
        assert_int_equal(fcl_softmax(app, &d, in, NULL, out, lse_buf, 1, &gate, &done),
                         FCL_SUCCESS);
        assert_non_null(done);
        /* Nothing may run before the wait list completes. */
        clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
        assert_true(status > CL_COMPLETE);
        clSetUserEventStatus(gate, CL_COMPLETE);
        assert_int_equal(clWaitForEvents(1, &done), CL_SUCCESS);
        assert_int_equal(clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL), CL_SUCCESS);
        assert_int_equal(clEnqueueReadBuffer(q, lse_buf, CL_TRUE, 0, sizeof lse, lse, 0, NULL, NULL),
                         CL_SUCCESS);
        chk_softmax_reference(&d, &(fcl_softmax_host_io){.in = x}, ref, ref_lse);
        chk_report rep;
        assert_true(chk_compare(y, FCL_DTYPE_F32, ROWS, COLS, COLS, ref,
                                chk_softmax_tolerance(FCL_DTYPE_F32), &rep));
        assert_true(chk_compare_lse(lse, ref_lse, ROWS, &rep));
        clReleaseEvent(done);
        clReleaseEvent(gate);
    }
    /* Without a done event the call still runs (the queue orders the read after it). */
    fcl_softmax_desc d = {.rows = ROWS, .cols = COLS, .log = 1};
    assert_int_equal(fcl_softmax(app, &d, in, NULL, out, NULL, 0, NULL, NULL), FCL_SUCCESS);
    assert_int_equal(clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL), CL_SUCCESS);
    assert_true(fabs(y[0] - ((double)x[0] - ref_lse[0])) < 1e-4);

    /* flashcl released only its own references: the caller's objects still work. */
    fcl_context_destroy(app);
    assert_int_equal(clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL), CL_SUCCESS);
    clReleaseMemObject(in);
    clReleaseMemObject(out);
    clReleaseMemObject(lse_buf);
    assert_int_equal(clReleaseCommandQueue(q), CL_SUCCESS);
    assert_int_equal(clReleaseContext(cl_ctx), CL_SUCCESS);
    free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_checks),
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_many_short_rows),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_magnitudes),
        cmocka_unit_test(test_mask_and_scale),
        cmocka_unit_test(test_strides_and_in_place),
        cmocka_unit_test(test_half_storage),
        cmocka_unit_test(test_row_of_2_pow_24),
        cmocka_unit_test(test_heads_sinks_alibi),
        cmocka_unit_test(test_sinks_special_values),
        cmocka_unit_test(test_forced_algorithms_agree),
        cmocka_unit_test(test_plan_matches_rule),
        cmocka_unit_test(test_device_api_with_events),
    };
    return support_run_tests(tests);
}

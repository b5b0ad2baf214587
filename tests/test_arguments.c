/* Bad arguments: a clear status, a sentence naming the argument, and nothing written. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "internal.h" /* to take the attention paths away from a context */
#include "support.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SENTINEL 99.5f

static float in[64], out[64], lse[8];

static void reset_buffers(void)
{
    for (int i = 0; i < 64; i++) {
        in[i] = (float)i;
        out[i] = SENTINEL;
    }
    for (int i = 0; i < 8; i++)
        lse[i] = SENTINEL;
}

static void assert_untouched(void)
{
    for (int i = 0; i < 64; i++) {
        assert_true(out[i] == SENTINEL);
        assert_true(in[i] == (float)i);
    }
    for (int i = 0; i < 8; i++)
        assert_true(lse[i] == SENTINEL);
}

/* A call (made after reset_buffers) returned s: it must be `want`, with a message naming
 * `needle`, and nothing written. */
static void assert_rejected(fcl_status s, fcl_status want, const char *needle)
{
    if (s != want)
        fail_msg("got %s, want %s (%s)", fcl_status_string(s), fcl_status_string(want),
                 fcl_context_last_error(support_ctx));
    const char *msg = fcl_context_last_error(support_ctx);
    if (!strstr(msg, needle))
        fail_msg("message \"%s\" does not name %s", msg, needle);
    assert_untouched();
}

/* fcl_softmax_host rejects d with `want`, naming `needle`. */
static void expect_rejected(fcl_softmax_desc d, fcl_status want, const char *needle)
{
    reset_buffers();
    assert_rejected(fcl_softmax_host(support_ctx, &d, in, NULL, out, lse), want, needle);
}

static void test_bad_descriptors(void **state)
{
    (void)state;
    const fcl_softmax_desc ok = {.rows = 4, .cols = 8};
    fcl_softmax_desc d;
    d = ok, d.rows = 0;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "rows");
    d = ok, d.cols = 0;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "cols");
    d = ok, d.in_stride = 7;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "in_stride");
    d = ok, d.out_stride = 3;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "out_stride");
    d = ok, d.mask_stride = 2;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "mask_stride");
    d = ok, d.dtype = (fcl_dtype)7;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "dtype");
    d = ok, d.algo = (fcl_softmax_algo)9;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "algo");
    d = ok, d.scale = NAN;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "scale");
    d = ok, d.scale = INFINITY;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "scale");
    /* Sizes whose byte count overflows. */
    d = ok, d.rows = SIZE_MAX / 4, d.cols = 8;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "overflow");
    d = ok, d.rows = 2, d.cols = SIZE_MAX / 2;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "overflow");
    d = ok, d.rows = 3, d.in_stride = SIZE_MAX / 2;
    expect_rejected(d, FCL_ERROR_INVALID_ARGUMENT, "overflow");
    /* A forced algorithm the device cannot run. */
    d = ok, d.cols = support_info.softmax_fused_max_cols + 1, d.rows = 1;
    d.algo = FCL_SOFTMAX_FUSED;
    reset_buffers();
    assert_int_equal(fcl_softmax_plan(support_ctx, &d, &(fcl_softmax_algo){0}),
                     FCL_ERROR_UNSUPPORTED);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "local memory"));
}

/* The same through fcl_softmax_run_host with the v0.2 buffers. */
static void expect_rejected_io(fcl_softmax_desc d, const fcl_softmax_host_io *io,
                               const char *needle)
{
    reset_buffers();
    assert_rejected(fcl_softmax_run_host(support_ctx, &d, io), FCL_ERROR_INVALID_ARGUMENT, needle);
}

static void test_bad_heads_sinks_alibi(void **state)
{
    (void)state;
    static const float per_head[4] = {1, 2, 3, 4};
    static const float mask[64];
    const fcl_softmax_desc ok = {.rows = 4, .cols = 8, .heads = 2, .head_rows = 2};
    const fcl_softmax_host_io plain = {.in = in, .out = out, .lse = lse};
    fcl_softmax_host_io io = plain;
    fcl_softmax_desc d;
    d = ok, d.head_rows = 0;
    expect_rejected_io(d, &io, "head_rows");
    d = ok, d.heads = 0;
    expect_rejected_io(d, &io, "heads");
    d = ok, d.mask_dtype = FCL_DTYPE_BF16;
    expect_rejected_io(d, &io, "mask_dtype");
    d = ok, d.mask_rows = 3, d.mask_stride = 5;
    expect_rejected_io(d, &io, "mask_stride");
    d = ok, d.heads = d.head_rows = 0;
    io = plain, io.sinks = per_head;
    expect_rejected_io(d, &io, "sinks needs heads");
    io = plain, io.alibi_slopes = per_head;
    expect_rejected_io(d, &io, "alibi_slopes needs heads");
    d = ok;
    expect_rejected_io(d, &io, "alibi_from_mask is 0");
    d.alibi_from_mask = 1;
    expect_rejected_io(d, &io, "mask is NULL");
    io = plain, io.mask = mask;
    expect_rejected_io(d, &io, "alibi_slopes is NULL");
    io.alibi_slopes = per_head; /* now complete */
    reset_buffers();
    assert_int_equal(fcl_softmax_run_host(support_ctx, &d, &io), FCL_SUCCESS);
    assert_int_equal(fcl_softmax_run_host(support_ctx, &d, NULL), FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "io"));
}

static void test_null_arguments(void **state)
{
    (void)state;
    fcl_softmax_desc d = {.rows = 4, .cols = 8};
    fcl_softmax_algo a;
    reset_buffers();
    assert_int_equal(fcl_softmax_host(NULL, &d, in, NULL, out, lse), FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(NULL), "ctx"));
    assert_int_equal(fcl_softmax_host(support_ctx, NULL, in, NULL, out, lse),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "descriptor"));
    assert_int_equal(fcl_softmax_host(support_ctx, &d, NULL, NULL, out, lse),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "in is NULL"));
    assert_int_equal(fcl_softmax_host(support_ctx, &d, in, NULL, NULL, lse),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "out is NULL"));
    assert_int_equal(fcl_softmax_plan(support_ctx, &d, NULL), FCL_ERROR_INVALID_ARGUMENT);
    assert_int_equal(fcl_softmax_plan(NULL, &d, &a), FCL_ERROR_INVALID_ARGUMENT);
    assert_int_equal(fcl_softmax(support_ctx, &d, NULL, NULL, NULL, NULL, 0, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_int_equal(fcl_context_device_info(NULL, &(fcl_device_info){0}),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_int_equal(fcl_context_create(NULL, NULL), FCL_ERROR_INVALID_ARGUMENT);
    assert_int_equal(fcl_context_create_from_cl(NULL, NULL, NULL, NULL, &(fcl_context *){0}),
                     FCL_ERROR_INVALID_ARGUMENT);
    fcl_context_destroy(NULL); /* a no-op */
    assert_untouched();
}

static void test_in_place_needs_equal_strides(void **state)
{
    (void)state;
    fcl_softmax_desc d = {.rows = 2, .cols = 8, .in_stride = 8, .out_stride = 9};
    reset_buffers();
    assert_int_equal(fcl_softmax_host(support_ctx, &d, out, NULL, out, lse),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "in place"));
    assert_untouched();
}

/* Device buffers: too small, from a foreign context, a wait list without events. */
static void test_bad_device_buffers(void **state)
{
    (void)state;
    cl_context cl_ctx;
    cl_command_queue q;
    cl_int err;
    assert_int_equal(fcl_context_get_cl(support_ctx, &cl_ctx, NULL, &q), FCL_SUCCESS);
    float init[32];
    for (int i = 0; i < 32; i++)
        init[i] = SENTINEL;
    cl_mem small = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 31 * 4, init, &err);
    cl_mem big = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 32 * 4, init, &err);
    assert_int_equal(err, CL_SUCCESS);
    fcl_softmax_desc d = {.rows = 4, .cols = 8};

    assert_int_equal(fcl_softmax(support_ctx, &d, big, NULL, small, NULL, 0, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "out holds 124 bytes"));
    assert_int_equal(fcl_softmax(support_ctx, &d, small, NULL, big, NULL, 0, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "in holds"));
    assert_int_equal(fcl_softmax(support_ctx, &d, big, small, big, NULL, 0, NULL, NULL),
                     FCL_SUCCESS); /* one shared mask row of 8 floats fits */
    d.mask_stride = 8;
    assert_int_equal(fcl_softmax(support_ctx, &d, big, small, big, NULL, 0, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "mask holds"));
    /* Three rows of a mask of 8 (one head's rows): 24 floats fit, 4 rows would not. */
    d.mask_stride = 0, d.mask_rows = 3;
    assert_int_equal(fcl_softmax(support_ctx, &d, big, small, big, NULL, 0, NULL, NULL),
                     FCL_SUCCESS);
    d.mask_stride = 9;
    assert_int_equal(fcl_softmax(support_ctx, &d, big, small, big, NULL, 0, NULL, NULL),
                     FCL_SUCCESS);
    d.mask_rows = 4, d.mask_stride = 8;
    assert_int_equal(fcl_softmax(support_ctx, &d, big, small, big, NULL, 0, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "mask holds"));
    /* sinks: one float per head. */
    d.mask_rows = 0, d.mask_stride = 0, d.heads = 32, d.head_rows = 1;
    fcl_softmax_io io = {.in = big, .out = big, .sinks = small};
    assert_int_equal(fcl_softmax_run(support_ctx, &d, &io, 0, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "sinks holds"));
    d.heads = 31;
    assert_int_equal(fcl_softmax_run(support_ctx, &d, &io, 0, NULL, NULL), FCL_SUCCESS);
    d.heads = d.head_rows = 0;
    assert_int_equal(clFinish(q), CL_SUCCESS);
    assert_int_equal(fcl_softmax(support_ctx, &d, big, NULL, big, small, 2, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "wait"));

    /* A buffer of another OpenCL context. */
    cl_device_id dev;
    fcl_context_get_cl(support_ctx, NULL, &dev, NULL);
    cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem foreign = clCreateBuffer(other, CL_MEM_READ_WRITE, 32 * 4, NULL, &err);
    assert_int_equal(fcl_softmax(support_ctx, &d, big, NULL, foreign, NULL, 0, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "another cl_context"));
    clReleaseMemObject(foreign);
    clReleaseContext(other);

    /* The rejected calls wrote nothing into small. */
    float back[31];
    assert_int_equal(clEnqueueReadBuffer(q, small, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL),
                     CL_SUCCESS);
    for (int i = 0; i < 31; i++)
        assert_true(back[i] == SENTINEL);
    clReleaseMemObject(small);
    clReleaseMemObject(big);
}

static void test_status_strings_and_devices(void **state)
{
    (void)state;
    const fcl_status all[] = {
#define FCL_STATUS_VALUE(name, value, text) name,
        FCL_STATUS_LIST(FCL_STATUS_VALUE)
#undef FCL_STATUS_VALUE
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(fcl_status_string(all[i]), fcl_status_string(all[j]));
    assert_non_null(strstr(fcl_status_string(FCL_ERROR_UNSUPPORTED), "FCL_ERROR_UNSUPPORTED"));
    assert_string_equal(fcl_status_string((fcl_status)-99), "unknown flashcl status");
    assert_string_equal(fcl_version_string(), "0.3.0");

    fcl_context *ctx = NULL;
    fcl_context_options opts = {.device = "no-such-device-anywhere"};
    assert_int_equal(fcl_context_create(&opts, &ctx), FCL_ERROR_NO_DEVICE);
    assert_null(ctx);
    assert_non_null(strstr(fcl_context_last_error(NULL), "no-such-device-anywhere"));
    opts.device = "7:7";
    assert_int_equal(fcl_context_create(&opts, &ctx), FCL_ERROR_NO_DEVICE);
}

/* A buffer larger than the device allows (CL_DEVICE_MAX_MEM_ALLOC_SIZE): an OpenCL status
 * with a message naming the step and the OpenCL error, and the context still works. The
 * input is an untouched anonymous mapping, so its pages cost nothing. */
static void test_device_refusal_leaves_context_usable(void **state)
{
    (void)state;
    size_t cols = (size_t)(support_info.max_alloc_size / sizeof(float)) + 1024;
    size_t bytes = cols * sizeof(float);
    void *huge = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (huge == MAP_FAILED)
        fail_msg("could not reserve %zu bytes of address space", bytes);
    fcl_softmax_desc d = {.rows = 1, .cols = cols};
    reset_buffers();
    fcl_status s = fcl_softmax_host(support_ctx, &d, huge, NULL, out, NULL); /* out: never reached */
    munmap(huge, bytes);
    assert_true(s == FCL_ERROR_OPENCL || s == FCL_ERROR_OUT_OF_RESOURCES ||
                s == FCL_ERROR_OUT_OF_HOST_MEMORY);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "allocating device buffers"));
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "CL_INVALID_BUFFER_SIZE"));
    assert_untouched();
    /* The context still computes. */
    fcl_softmax_desc ok = {.rows = 2, .cols = 32};
    assert_int_equal(fcl_softmax_host(support_ctx, &ok, in, NULL, out, lse), FCL_SUCCESS);
    for (int r = 0; r < 2; r++)
        assert_float_equal(out[r * 32 + 31] / out[r * 32 + 30], exp(1.0), 1e-5);
}

/* Validation comes before planning: on a device with no attention path for a shape (as
 * Mesa's llvmpipe was, with work-groups of at most 32), bad input is still named as bad input
 * (FCL_ERROR_INVALID_ARGUMENT), and only good input gets FCL_ERROR_UNSUPPORTED. The shared
 * context's description loses its paths (no tile, rows of 0 keys, no NVIDIA kernels) for the
 * calls, and gets them back after. */
static void test_validation_precedes_planning(void **state)
{
    (void)state;
    const fcl_attention_desc ok = {.batch = 1, .heads_q = 1, .len_q = 2, .len_kv = 2, .head_dim = 8};
    /* Only the fields changed are put back: the context's kernel builds write others. */
    fcl_device_info *info = &support_ctx->info;
    struct fcl_attention_tile tiles[sizeof info->attention_tiles / sizeof info->attention_tiles[0]];
    memcpy(tiles, info->attention_tiles, sizeof tiles);
    const size_t vector_width = info->softmax_vector_width;
    const int mma = info->attention_mma;
    memset(info->attention_tiles, 0, sizeof info->attention_tiles);
    info->softmax_vector_width = 0;
    info->attention_mma = 0; /* nor NVIDIA's kernels */
    unsigned char m[4] = {1, 1, 1, 1};
    fcl_attention_desc d = ok;
    d.mask_type = FCL_MASK_BOOL_U8, d.mask_stride_q = 1;
    reset_buffers();
    const fcl_status bad = fcl_attention_host(support_ctx, &d, in, in, in, m, out, lse);
    const char *bad_msg = strstr(fcl_context_last_error(support_ctx), "mask_stride_q (1)");
    d = ok;
    const fcl_status bad_null = fcl_attention_host(support_ctx, &d, in, NULL, in, NULL, out, lse);
    const char *null_msg = strstr(fcl_context_last_error(support_ctx), "k is NULL");
    const fcl_status good = fcl_attention_host(support_ctx, &d, in, in, in, NULL, out, lse);
    memcpy(info->attention_tiles, tiles, sizeof tiles);
    info->softmax_vector_width = vector_width;
    info->attention_mma = mma;
    assert_int_equal(bad, FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(bad_msg);
    assert_int_equal(bad_null, FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(null_msg);
    assert_int_equal(good, FCL_ERROR_UNSUPPORTED);
    assert_untouched();
    assert_int_equal(fcl_attention_host(support_ctx, &d, in, in, in, NULL, out, lse), FCL_SUCCESS);
}

/* A driver's loop-iteration cap (llvmpipe's, made small here in the shared context's
 * description for the calls): a forced ONLINE whose rows no work-group takes within it is
 * refused naming the cap, and AUTO slices the same rows (SPLIT) and computes them right. */
static void test_loop_cap_is_planned_around(void **state)
{
    (void)state;
    /* Rows a work-group takes in 4 x 501 vector steps: over the cap of 2000 for ONLINE, in
     * three slices for SPLIT (the planner's rule: 4 iterations a step, 1088 for short loops). */
    const size_t rows = 2;
    const size_t cols = 501 * support_info.softmax_work_group_size * support_info.softmax_vector_width;
    float *x = malloc(rows * cols * sizeof(float)), *y = malloc(rows * cols * sizeof(float));
    assert_true(x && y);
    for (size_t i = 0; i < rows * cols; i++)
        x[i] = (float)(i % 7) * 0.5f;
    const cl_uint cap = support_ctx->info.loop_iteration_cap; /* only it is put back */
    support_ctx->info.loop_iteration_cap = 2000;
    fcl_softmax_desc d = {.rows = rows, .cols = cols, .algo = FCL_SOFTMAX_ONLINE};
    const fcl_status forced = fcl_softmax_host(support_ctx, &d, x, NULL, y, NULL);
    const char *forced_msg = strstr(fcl_context_last_error(support_ctx), "the 2000 this driver allows");
    fcl_softmax_algo planned = FCL_SOFTMAX_AUTO;
    d.algo = FCL_SOFTMAX_AUTO;
    const fcl_status auto_plan = fcl_softmax_plan(support_ctx, &d, &planned);
    const fcl_status auto_run = fcl_softmax_host(support_ctx, &d, x, NULL, y, NULL);
    support_ctx->info.loop_iteration_cap = cap;
    assert_int_equal(forced, FCL_ERROR_UNSUPPORTED);
    assert_non_null(forced_msg);
    assert_int_equal(auto_plan, FCL_SUCCESS);
    assert_int_equal(planned, FCL_SOFTMAX_SPLIT);
    assert_int_equal(auto_run, FCL_SUCCESS);
    /* Each row's probabilities sum to 1, and row 0's entry 6 is the float64 value. */
    for (size_t r = 0; r < rows; r++) {
        double sum = 0.0;
        for (size_t j = 0; j < cols; j++)
            sum += y[r * cols + j];
        assert_float_equal(sum, 1.0, 1e-4);
    }
    double z = 0.0; /* row 0's partition function, for one exact entry */
    for (size_t j = 0; j < cols; j++)
        z += exp((double)x[j]);
    assert_float_equal(y[6], exp((double)x[6]) / z, 1e-6 * exp((double)x[6]) / z);
    free(x);
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_descriptors),
        cmocka_unit_test(test_bad_heads_sinks_alibi),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_in_place_needs_equal_strides),
        cmocka_unit_test(test_bad_device_buffers),
        cmocka_unit_test(test_status_strings_and_devices),
        cmocka_unit_test(test_device_refusal_leaves_context_usable),
        cmocka_unit_test(test_validation_precedes_planning),
        cmocka_unit_test(test_loop_cap_is_planned_around),
    };
    return support_run_tests(tests);
}

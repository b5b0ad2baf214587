/* Device failures. Every OpenCL call flashcl makes while creating a context, and while
 * running each kind of softmax and attention call, is made to fail in turn, with the error a
 * driver gives there (cl_faults.c). Each failure must
 * - come back as the status for that error, with a message naming it (never blaming the
 *   caller's arguments), or be worked around with the undisturbed result;
 * - release every OpenCL object flashcl made for the call;
 * - leave the caller's inputs as they were;
 * - leave the context working: the same call made again gives the undisturbed result, bit
 *   for bit, itself checked against the float64 reference. */
#include "cl_faults.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SM_IN_MAX 10000
#define MASK_MAX 1500
#define Q_MAX (4 * 33 * 64)
#define KV_MAX (2 * 200 * 64)
#define RESULT_MAX 16384

static float sm_in[SM_IN_MAX], sm_mask[MASK_MAX], q[Q_MAX], k[KV_MAX], v[KV_MAX];
static unsigned char att_mask[MASK_MAX];
/* The inputs as generated, to show that no failure changed them. */
static float sm_in_copy[SM_IN_MAX], q_copy[Q_MAX], k_copy[KV_MAX];

/* The fault each run arms around its flashcl call (0: none), and what failed in it. */
static long fault_at;
static const char *fault_call;
static cl_int fault_error;

static void begin_flashcl_call(void) { faults_arm(fault_at); }

static void end_flashcl_call(void)
{
    fault_call = faults_failed();
    fault_error = faults_failed_error();
    faults_arm(0);
}

/* ---- the calls ---- */

typedef struct call_case {
    const char *name;
    int attention;             /* which of the two descriptors holds the call */
    fcl_softmax_desc softmax;  /* in sm_in, mask sm_mask when mask_stride is set */
    fcl_attention_desc att;    /* in q, k, v, mask att_mask when mask_type is set */
    int device_api;            /* softmax through fcl_softmax on the test's own buffers */
} call_case;

static const call_case cases[] = {
    {.name = "softmax FUSED", .softmax = {.rows = 5, .cols = 300, .algo = FCL_SOFTMAX_FUSED}},
    {.name = "softmax ONLINE, masked, padded",
     .softmax = {.rows = 5, .cols = 300, .in_stride = 301, .out_stride = 303, .mask_stride = 300,
                 .algo = FCL_SOFTMAX_ONLINE}},
    {.name = "softmax SPLIT", .softmax = {.rows = 2, .cols = 5000, .algo = FCL_SOFTMAX_SPLIT}},
    {.name = "softmax on cl_mem", .softmax = {.rows = 3, .cols = 1000}, .device_api = 1},
    {.name = "attention GQA, causal, split",
     .attention = 1,
     .att = {.batch = 1, .heads_q = 4, .heads_kv = 2, .len_q = 33, .len_kv = 200, .head_dim = 64,
             .causal = FCL_CAUSAL_BOTTOM_RIGHT, .kv_splits = 2}},
    {.name = "attention decoding, bool mask",
     .attention = 1,
     .att = {.batch = 1, .heads_q = 2, .len_q = 3, .len_kv = 130, .head_dim = 64,
             .mask_type = FCL_MASK_BOOL_U8, .mask_stride_q = 130, .layout = FCL_LAYOUT_BLHD}},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static size_t softmax_out_floats(const fcl_softmax_desc *d)
{
    size_t stride = d->out_stride ? d->out_stride : d->cols;
    return (d->rows - 1) * stride + d->cols;
}

static size_t attention_rows(const fcl_attention_desc *d)
{
    return d->batch * d->heads_q * d->len_q;
}

/* fcl_softmax on buffers the test makes (outside the armed call), with the done event. */
static fcl_status softmax_on_buffers(fcl_context *ctx, const fcl_softmax_desc *d, float *out,
                                     float *lse)
{
    cl_context cl;
    cl_command_queue queue;
    cl_int err;
    cl_event done = NULL;
    fcl_context_get_cl(ctx, &cl, NULL, &queue);
    size_t in_bytes = d->rows * d->cols * sizeof(float), lse_bytes = d->rows * sizeof(float);
    cl_mem in_buf = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in_bytes, sm_in, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem out_buf = clCreateBuffer(cl, CL_MEM_READ_WRITE, in_bytes, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem lse_buf = clCreateBuffer(cl, CL_MEM_READ_WRITE, lse_bytes, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    begin_flashcl_call();
    fcl_status s = fcl_softmax(ctx, d, in_buf, NULL, out_buf, lse_buf, 0, NULL, &done);
    end_flashcl_call();
    if (s == FCL_SUCCESS) {
        assert_int_equal(clEnqueueReadBuffer(queue, out_buf, CL_TRUE, 0, in_bytes, out, 1, &done, NULL), CL_SUCCESS);
        assert_int_equal(clEnqueueReadBuffer(queue, lse_buf, CL_TRUE, 0, lse_bytes, lse, 0, NULL, NULL), CL_SUCCESS);
        clReleaseEvent(done);
    } else {
        assert_null(done); /* a failed call hands back no event */
    }
    clReleaseMemObject(lse_buf);
    clReleaseMemObject(out_buf);
    clReleaseMemObject(in_buf);
    return s;
}

/* Runs c on ctx: outputs, then lse, into result. */
static size_t result_floats(const call_case *c);

static fcl_status run_case(fcl_context *ctx, const call_case *c, float *result)
{
    fcl_status s;
    memset(result, 0, result_floats(c) * sizeof(float)); /* what padding keeps */
    if (c->attention) {
        const fcl_attention_desc *d = &c->att;
        size_t out_n = attention_rows(d) * d->head_dim;
        begin_flashcl_call();
        s = fcl_attention_host(ctx, d, q, k, v, d->mask_type ? att_mask : NULL, result,
                               result + out_n);
        end_flashcl_call();
        return s;
    }
    const fcl_softmax_desc *d = &c->softmax;
    float *lse = result + softmax_out_floats(d);
    if (c->device_api)
        return softmax_on_buffers(ctx, d, result, lse);
    begin_flashcl_call();
    s = fcl_softmax_host(ctx, d, sm_in, d->mask_stride ? sm_mask : NULL, result, lse);
    end_flashcl_call();
    return s;
}

static size_t result_floats(const call_case *c)
{
    if (c->attention)
        return attention_rows(&c->att) * (c->att.head_dim + 1);
    return softmax_out_floats(&c->softmax) + c->softmax.rows;
}

/* ---- the undisturbed results, checked against float64 ---- */

static float baseline[N_CASES][RESULT_MAX];

static void check_softmax_reference(const fcl_softmax_desc *d, const float *result)
{
    double *want = malloc(d->rows * d->cols * sizeof(double)), want_lse[8];
    assert_non_null(want);
    assert_true(d->rows <= 8);
    chk_softmax_reference(
        d, &(fcl_softmax_host_io){.in = sm_in, .mask = d->mask_stride ? sm_mask : NULL}, want,
        want_lse);
    chk_report rep;
    size_t stride = d->out_stride ? d->out_stride : d->cols;
    if (!chk_compare(result, FCL_DTYPE_F32, d->rows, d->cols, stride, want,
                     chk_softmax_tolerance(FCL_DTYPE_F32), &rep))
        fail_msg("softmax output %zu got %.7g want %.7g", rep.first_bad, rep.got, rep.want);
    if (!chk_compare_lse(result + softmax_out_floats(d), want_lse, d->rows, &rep))
        fail_msg("softmax lse %zu got %.9g want %.9g", rep.first_bad, rep.got, rep.want);
    free(want);
}

static void check_attention_reference(const fcl_attention_desc *call, const float *result)
{
    fcl_attention_desc d = chk_attention_defaults(*call);
    size_t rows = attention_rows(&d), dim = d.head_dim;
    double *got = malloc(rows * dim * sizeof(double)), *want = malloc(rows * dim * sizeof(double));
    double *want_lse = malloc(rows * sizeof(double));
    assert_true(got && want && want_lse);
    for (size_t row = 0; row < rows; row++) {
        size_t b = row / (d.heads_q * d.len_q), h = (row / d.len_q) % d.heads_q, i = row % d.len_q;
        size_t at = chk_attention_offset(d.layout, d.heads_q, d.len_q, dim, b, h, i);
        for (size_t e = 0; e < dim; e++)
            got[row * dim + e] = result[at + e];
        chk_attention_row(&d, q, k, v, d.mask_type ? att_mask : NULL, b, h, i, want + row * dim,
                          &want_lse[row]);
    }
    chk_report rep;
    if (!chk_compare_values(got, want, rows * dim, chk_attention_tolerance(&d), &rep))
        fail_msg("attention output %zu got %.7g want %.7g", rep.first_bad, rep.got, rep.want);
    if (!chk_compare_lse(result + rows * dim, want_lse, rows, &rep))
        fail_msg("attention lse %zu got %.9g want %.9g", rep.first_bad, rep.got, rep.want);
    free(got);
    free(want);
    free(want_lse);
}

static void fill_inputs(void)
{
    chk_rng *r = support_rng();
    for (size_t i = 0; i < SM_IN_MAX; i++)
        sm_in[i] = (float)(3.0 * chk_normal(r));
    for (size_t i = 0; i < MASK_MAX; i++) {
        sm_mask[i] = i % 7 == 3 ? -INFINITY : (float)chk_normal(r);
        att_mask[i] = (unsigned char)(i % 5 != 2);
    }
    for (size_t i = 0; i < Q_MAX; i++)
        q[i] = (float)chk_normal(r);
    for (size_t i = 0; i < KV_MAX; i++) {
        k[i] = (float)chk_normal(r);
        v[i] = (float)chk_normal(r);
    }
    memcpy(sm_in_copy, sm_in, sizeof sm_in);
    memcpy(q_copy, q, sizeof q);
    memcpy(k_copy, k, sizeof k);
}

static int group_setup(void **state)
{
    if (support_setup(state) != 0)
        return -1;
    fill_inputs();
    fault_at = 0;
    for (size_t c = 0; c < N_CASES; c++) {
        assert_true(result_floats(&cases[c]) <= RESULT_MAX);
        fcl_status s = run_case(support_ctx, &cases[c], baseline[c]);
        if (s != FCL_SUCCESS) {
            fprintf(stderr, "%s: %s: %s\n", cases[c].name, fcl_status_string(s),
                    fcl_context_last_error(support_ctx));
            return -1;
        }
    }
    return 0;
}

static void test_baselines_match_reference(void **state)
{
    (void)state;
    for (size_t c = 0; c < N_CASES; c++) {
        if (cases[c].attention)
            check_attention_reference(&cases[c].att, baseline[c]);
        else
            check_softmax_reference(&cases[c].softmax, baseline[c]);
    }
}

/* ---- what a failure must leave ---- */

static const char *error_name(cl_int e)
{
    return e == CL_OUT_OF_RESOURCES               ? "CL_OUT_OF_RESOURCES"
           : e == CL_OUT_OF_HOST_MEMORY           ? "CL_OUT_OF_HOST_MEMORY"
           : e == CL_MEM_OBJECT_ALLOCATION_FAILURE ? "CL_MEM_OBJECT_ALLOCATION_FAILURE"
                                                   : "?";
}

static fcl_status status_for(cl_int e)
{
    return e == CL_OUT_OF_HOST_MEMORY ? FCL_ERROR_OUT_OF_HOST_MEMORY : FCL_ERROR_OUT_OF_RESOURCES;
}

/* The outcome of a call whose n-th OpenCL call failed: the status for the error, with a
 * message naming it; or success with the undisturbed result. */
static void check_outcome(const char *what, long n, fcl_status s, const char *message,
                          const float *result, const float *want, size_t count)
{
    if (s == FCL_SUCCESS) {
        if (count && memcmp(result, want, count * sizeof(float)) != 0)
            fail_msg("%s: call %ld (%s) failed, the call succeeded, but its result differs", what,
                     n, fault_call);
        return;
    }
    if (s != status_for(fault_error))
        fail_msg("%s: call %ld (%s) failed with %s: got %s (\"%s\")", what, n, fault_call,
                 error_name(fault_error), fcl_status_string(s), message);
    if (!strstr(message, error_name(fault_error)))
        fail_msg("%s: call %ld (%s) failed with %s: the message \"%s\" does not say so", what, n,
                 fault_call, error_name(fault_error), message);
}

static void check_inputs_unchanged(const char *what, long n)
{
    if (memcmp(sm_in, sm_in_copy, sizeof sm_in) || memcmp(q, q_copy, sizeof q) ||
        memcmp(k, k_copy, sizeof k))
        fail_msg("%s: call %ld (%s) failing changed an input", what, n, fault_call);
}

static void check_released(const char *what, long n, long live_before)
{
    if (faults_live_objects() != live_before)
        fail_msg("%s: call %ld (%s) failing left %ld OpenCL objects alive", what, n, fault_call,
                 faults_live_objects() - live_before);
}

/* ---- the tests ---- */

static float result[RESULT_MAX];

/* Each call of each case made to fail in turn, on the shared context. */
static void test_call_failures(void **state)
{
    (void)state;
    for (size_t c = 0; c < N_CASES; c++) {
        const call_case *cc = &cases[c];
        size_t count = result_floats(cc);
        long live = faults_live_objects(), n;
        for (n = 1;; n++) {
            fault_at = n;
            fcl_status s = run_case(support_ctx, cc, result);
            fault_at = 0;
            if (!fault_call) { /* n is past the calls this case makes */
                assert_int_equal(s, FCL_SUCCESS);
                break;
            }
            check_outcome(cc->name, n, s, fcl_context_last_error(support_ctx), result,
                          baseline[c], count);
            check_released(cc->name, n, live);
            check_inputs_unchanged(cc->name, n);
            s = run_case(support_ctx, cc, result);
            if (s != FCL_SUCCESS || memcmp(result, baseline[c], count * sizeof(float)) != 0)
                fail_msg("%s: after call %ld failed, the context no longer works: %s", cc->name,
                         n, fcl_context_last_error(support_ctx));
        }
        printf("# %s: each of its %ld OpenCL calls failed in turn\n", cc->name, n - 1);
    }
}

/* Whether two contexts of one device planned alike (a failed query must not leave a
 * guessed limit behind). */
static int same_plan(const fcl_device_info *a, const fcl_device_info *b)
{
    int same = a->kernel_work_group_size == b->kernel_work_group_size &&
               a->kernel_local_mem_size == b->kernel_local_mem_size &&
               a->softmax_work_group_size == b->softmax_work_group_size &&
               a->softmax_vector_width == b->softmax_vector_width &&
               a->softmax_fused_max_cols == b->softmax_fused_max_cols &&
               a->softmax_block_cols == b->softmax_block_cols &&
               a->max_alloc_size == b->max_alloc_size && a->has_fp16 == b->has_fp16 &&
               strcmp(a->name, b->name) == 0;
    for (int t = 0; t < 3; t++) {
        const struct fcl_attention_tile *x = &a->attention_tiles[t], *y = &b->attention_tiles[t];
        same = same && x->block_q == y->block_q && x->block_kv == y->block_kv &&
               x->work_group_size == y->work_group_size && x->rows_block_q == y->rows_block_q &&
               x->decode_block_kv == y->decode_block_kv; /* local_mem_size: once built */
    }
    return same;
}

/* Whether got[0, n) is want's within float32 rounding of another kernel's order of sums: the
 * checker's comparison, 1e-6 absolute and 1e-5 relative per element (no bound on the whole). */
static int close_to(const float *got, const float *want, size_t n)
{
    static double wanted[RESULT_MAX];
    chk_report rep;
    for (size_t i = 0; i < n; i++)
        wanted[i] = want[i];
    return chk_compare(got, FCL_DTYPE_F32, 1, n, n, wanted, (chk_tolerance){1e-6, 1e-5, INFINITY},
                       &rep);
}

/* A context made despite a failure plans and computes as the shared one; where the failure
 * cost it the NVIDIA kernels (their own program: the portable kernels serve), it says why,
 * and computes within float32 rounding of it. */
static void check_context_works(fcl_context *ctx, long n)
{
    fcl_device_info info;
    fcl_softmax_algo algo;
    const fcl_softmax_desc any = {.rows = 1, .cols = 1}; /* builds softmax, as support_setup */
    assert_int_equal(fcl_softmax_plan(ctx, &any, &algo), FCL_SUCCESS);
    fcl_context_device_info(ctx, &info);
    if (!same_plan(&info, &support_info))
        fail_msg("context made while call %ld (%s) failed planned differently", n, fault_call);
    const int fell_back = support_info.attention_mma && !info.attention_mma;
    if (fell_back && !info.attention_mma_because[0])
        fail_msg("context made while call %ld (%s) failed runs no NVIDIA kernel, saying not why",
                 n, fault_call);
    for (size_t c = 0; c < N_CASES; c++) {
        if (cases[c].device_api)
            continue;
        fcl_status s = run_case(ctx, &cases[c], result);
        const size_t floats = result_floats(&cases[c]);
        if (s != FCL_SUCCESS || (fell_back ? !close_to(result, baseline[c], floats)
                                           : memcmp(result, baseline[c], floats * sizeof(float)) != 0))
            fail_msg("context made while call %ld (%s) failed: %s gives %s", n, fault_call,
                     cases[c].name, s == FCL_SUCCESS ? "another result" : fcl_status_string(s));
    }
}

/* Each call of context creation made to fail in turn: with the program cache, and without
 * (building from source). */
static void test_creation_failures(void **state)
{
    (void)state;
    const fcl_context_options with_cache = {0}, without_cache = {.cache_dir = ""};
    const fcl_context_options *options[] = {&with_cache, &without_cache};
    for (int o = 0; o < 2; o++) {
        long live = faults_live_objects(), n;
        for (n = 1;; n++) {
            fcl_context *ctx = NULL;
            fault_at = n;
            begin_flashcl_call();
            fcl_status s = fcl_context_create(options[o], &ctx);
            end_flashcl_call();
            fault_at = 0;
            if (!fault_call) {
                assert_int_equal(s, FCL_SUCCESS);
                fcl_context_destroy(ctx);
                break;
            }
            check_outcome("fcl_context_create", n, s, fcl_context_last_error(NULL), NULL, NULL, 0);
            if (s == FCL_SUCCESS)
                check_context_works(ctx, n);
            else
                assert_null(ctx);
            fcl_context_destroy(ctx);
            check_released("fcl_context_create", n, live);
        }
        printf("# fcl_context_create (%s): each of its %ld OpenCL calls failed in turn\n",
               o ? "no program cache" : "program cache", n - 1);
    }
}

/* Whether ctx runs case c on another path than the shared context: where a failure cost it
 * NVIDIA's kernels for the call (their own programs: the portable kernels serve). */
static int runs_elsewhere(fcl_context *ctx, const call_case *c)
{
    if (!c->attention) {
        fcl_device_info here, shared;
        fcl_context_device_info(ctx, &here);
        fcl_context_device_info(support_ctx, &shared);
        return here.softmax_nv_cols != shared.softmax_nv_cols;
    }
    fcl_attention_plan_info here, shared;
    assert_int_equal(fcl_attention_plan(ctx, &c->att, &here), FCL_SUCCESS);
    assert_int_equal(fcl_attention_plan(support_ctx, &c->att, &shared), FCL_SUCCESS);
    return here.path != shared.path;
}

/* Each OpenCL call of a fresh context's first call of case c, which builds the kernels it
 * runs, made to fail in turn: the context then works (a half-built program would not: the
 * same call gives the shared context's result bit for bit, or where the failure cost the call
 * NVIDIA's kernels, within float32 rounding of it, saying why), and once destroyed leaves no
 * OpenCL object alive. */
static void check_first_call_failures(size_t c)
{
    const call_case *cc = &cases[c];
    const size_t count = result_floats(cc);
    const long live = faults_live_objects();
    long n;
    for (n = 1;; n++) {
        fcl_context *ctx = NULL;
        assert_int_equal(fcl_context_create(NULL, &ctx), FCL_SUCCESS);
        fault_at = n;
        fcl_status s = run_case(ctx, cc, result);
        fault_at = 0;
        if (!fault_call) {
            assert_int_equal(s, FCL_SUCCESS);
            fcl_context_destroy(ctx);
            break;
        }
        const int fell_back = s == FCL_SUCCESS && runs_elsewhere(ctx, cc);
        fcl_device_info info;
        fcl_context_device_info(ctx, &info);
        if (fell_back && (!info.attention_mma_because[0] || !close_to(result, baseline[c], count)))
            fail_msg("%s, first call: call %ld (%s) failed: the portable kernels took the call, %s",
                     cc->name, n, fault_call,
                     info.attention_mma_because[0] ? "with another result" : "saying not why");
        if (!fell_back)
            check_outcome(cc->name, n, s, fcl_context_last_error(ctx), result, baseline[c], count);
        check_inputs_unchanged(cc->name, n);
        s = run_case(ctx, cc, result);
        if (s != FCL_SUCCESS || (fell_back ? !close_to(result, baseline[c], count)
                                           : memcmp(result, baseline[c], count * sizeof(float)) != 0))
            fail_msg("%s, first call: after call %ld failed, the context no longer works: %s",
                     cc->name, n, fcl_context_last_error(ctx));
        fcl_context_destroy(ctx);
        check_released(cc->name, n, live);
    }
    printf("# %s, a fresh context's first call: each of its %ld OpenCL calls failed in turn\n",
           cc->name, n - 1);
}

/* The first softmax case and the first attention case. */
static void test_first_call_failures(void **state)
{
    (void)state;
    size_t c = 0;
    check_first_call_failures(0);
    while (!cases[c].attention)
        c++;
    check_first_call_failures(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_baselines_match_reference),
        cmocka_unit_test(test_call_failures),
        cmocka_unit_test(test_creation_failures),
        cmocka_unit_test(test_first_call_failures),
    };
    return cmocka_run_group_tests(tests, group_setup, support_teardown);
}

/* The vendor fast paths against the portable path and the float64 reference, on the device
 * the tests run on: NVIDIA's prefill on the tensor cores (FCL_ATTENTION_PATH_MMA,
 * cl/attention_mma_nv.cl: f16, bf16, float32 by 3xTF32 and by TF32), GQA decoding as rows
 * of a kv head on the same kernel, both on K/V formats (its _kv builds), decode by warp shuffles (FCL_ATTENTION_PATH_DECODE_NV,
 * cl/attention_decode_nv.cl) and softmax (cl/softmax_nv.cl). Each call runs twice, on the
 * test context (the fast path where the device has it) and on a context with them switched
 * off (FLASHCL_TUNE=attention_mma=0): both must match the reference, and each other.
 * Elsewhere the same calls check that the paths are off and say why, and run once against
 * the reference (both contexts would run the same portable kernels; in the small-size mode of the sanitizer
 * run, not even that). */
#define _POSIX_C_SOURCE 200809L /* setenv, strdup */
#include "kv_reference.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A context like the test's, with the tensor-core path switched off. */
/* A context with FLASHCL_TUNE's `what` added (a path switched off). */
static fcl_context *tuned_context(const char *what)
{
    const char *tune = getenv("FLASHCL_TUNE");
    char *saved = tune ? strdup(tune) : NULL;
    char off[512];
    snprintf(off, sizeof off, "%s%s%s", tune ? tune : "", tune && *tune ? "," : "", what);
    setenv("FLASHCL_TUNE", off, 1);
    fcl_context *ctx = NULL;
    fcl_status s = fcl_context_create(NULL, &ctx);
    if (saved)
        setenv("FLASHCL_TUNE", saved, 1);
    else
        unsetenv("FLASHCL_TUNE");
    free(saved);
    if (s != FCL_SUCCESS)
        fail_msg("a context with %s: %s", what, fcl_context_last_error(NULL));
    return ctx;
}

static fcl_context *portable_context(void) { return tuned_context("attention_mma=0"); }

/* Whether this device should run the NVIDIA kernels (prefill on its tensor cores, decode by
 * shuffles). */
static int mma_expected(void)
{
    const char *tune = getenv("FLASHCL_TUNE");
    return support_info.nv_compute_capability >= 80 && !(tune && strstr(tune, "attention_mma=0"));
}

static fcl_attention_path path_of(fcl_context *ctx, const fcl_attention_desc *d)
{
    fcl_attention_plan_info p;
    if (fcl_attention_plan(ctx, d, &p) != FCL_SUCCESS)
        fail_msg("fcl_attention_plan: %s", fcl_context_last_error(ctx));
    return p.path;
}

/* r's output (float32) on the test context into fast and on portable into slow. */
static void run_on_both(fcl_context *portable, const attention_run *r, float *fast, float *slow)
{
    fcl_attention_host_io io = r->io;
    io.lse = NULL;
    io.out = fast;
    assert_int_equal(fcl_attention_run_host(support_ctx, &r->d, &io), FCL_SUCCESS);
    io.out = slow;
    assert_int_equal(fcl_attention_run_host(portable, &r->d, &io), FCL_SUCCESS);
}

/* r's float32 output on the test context against its output on other, within tol (rtol
 * relative to sizes[e] where sizes is given, else to |want|: chk_compare_sized); what names
 * the two in the failure's message. */
static void check_agree(fcl_context *other, const attention_run *r, const double *sizes,
                        chk_tolerance tol, const char *what)
{
    float *mine = calloc(r->out_n, sizeof(float)), *theirs = calloc(r->out_n, sizeof(float));
    double *got = calloc(r->out_n, sizeof(double)), *want = calloc(r->out_n, sizeof(double));
    assert_true(mine && theirs && got && want);
    run_on_both(other, r, mine, theirs);
    for (size_t e = 0; e < r->out_n; e++)
        got[e] = mine[e], want[e] = theirs[e];
    chk_report rep;
    if (!chk_compare_sized(got, want, sizes, r->out_n, tol, &rep))
        fail_msg("%s differ: %zu of %zu, first %zu: %.9g vs %.9g", what, rep.bad, rep.checked,
                 rep.first_bad, rep.got, rep.want);
    free(mine), free(theirs), free(got), free(want);
}

/* r on both contexts, each against the reference, and the two outputs against each other
 * (float32 out, the storage types' tolerance); fast_path: the path r takes where the device has
 * the NVIDIA kernels. Elsewhere only the paths: both contexts run the portable kernels,
 * whose results are the attention suites' and test_kv's to check (POCL, 2 cores, warm
 * program caches: the suite took 68 s with these checks, 14 s without). */
static void check_both(fcl_context *portable, attention_run *r, fcl_attention_path fast_path)
{
    const fcl_attention_desc d = chk_attention_defaults(r->d);
    assert_int_equal(path_of(support_ctx, &r->d) == fast_path, mma_expected());
    assert_int_not_equal(path_of(portable, &r->d), fast_path);
    if (!mma_expected())
        return;
    check_attention_run(r);
    check_attention_run_on(portable, r);
    assert_true(d.dtype_o == FCL_DTYPE_F32);
    double *sizes = attention_out_sizes(r);
    check_agree(portable, r, sizes, attention_run_tolerance(r), "fast and portable paths");
    free(sizes);
}

/* The path is used where the device has it and says why not elsewhere; switched off, it is
 * never used; calls it does not take go to the portable kernels. */
static void test_mma_path_is_planned_where_it_runs(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    fcl_device_info off;
    fcl_context_device_info(portable, &off);
    assert_false(off.attention_mma);
    assert_non_null(strstr(off.attention_mma_because, "attention_mma=0"));
    if (mma_expected() != support_info.attention_mma)
        fail_msg("compute capability %u: tensor cores %s (%s)", support_info.nv_compute_capability,
                 support_info.attention_mma ? "used" : "not used", support_info.attention_mma_because);
    if (!support_info.attention_mma)
        assert_true(support_info.attention_mma_because[0] != '\0');

    const fcl_attention_desc base = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = 100,
                                     .len_kv = 100, .head_dim = 64, .dtype_q = FCL_DTYPE_F16,
                                     .dtype_kv = FCL_DTYPE_F16};
    fcl_attention_desc d = base;
    assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_MMA, mma_expected());
    d.dtype_q = d.dtype_kv = FCL_DTYPE_BF16;
    assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_MMA, mma_expected());
    d.head_dim = 72; /* a multiple of 8 in the 128 bucket */
    assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_MMA, mma_expected());
    d.dtype_q = d.dtype_kv = FCL_DTYPE_F32;
    assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_MMA, mma_expected());
    d.precision = FCL_PRECISION_TF32;
    assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_MMA, mma_expected());
    d.len_q = 1; /* GQA decoding as rows: f16 and bf16 only */
    assert_int_not_equal(path_of(support_ctx, &d), FCL_ATTENTION_PATH_MMA);
    d.dtype_q = d.dtype_kv = FCL_DTYPE_F16;
    assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_MMA, mma_expected());
    d.len_q = 100;
    d.head_dim = 256; /* f16 and bf16 up to 256, float32 up to 128 */
    assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_MMA, mma_expected());
    d.dtype_q = d.dtype_kv = FCL_DTYPE_F32;
    assert_int_not_equal(path_of(support_ctx, &d), FCL_ATTENTION_PATH_MMA);
    d.dtype_kv = FCL_DTYPE_F16; /* float32 q over f16 K and V: up to 128, prefill and rows */
    assert_int_not_equal(path_of(support_ctx, &d), FCL_ATTENTION_PATH_MMA);
    d.head_dim = 128;
    assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_MMA, mma_expected());
    d.len_q = 1;
    assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_MMA, mma_expected());
    /* Not taken: other mixed storage, head dims above 256 or not multiples of 8, rows not at
     * multiples of 8 elements, decoding. */
    const fcl_attention_desc others[] = {
        {.batch = 2, .heads_q = 4, .len_q = 100, .len_kv = 100, .head_dim = 64,
         .dtype_kv = FCL_DTYPE_BF16},
        {.batch = 2, .heads_q = 4, .len_q = 100, .len_kv = 100, .head_dim = 64,
         .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_BF16},
        {.batch = 2, .heads_q = 4, .len_q = 100, .len_kv = 100, .head_dim = 264,
         .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16},
        {.batch = 2, .heads_q = 4, .len_q = 100, .len_kv = 100, .head_dim = 60,
         .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16},
        {.batch = 2, .heads_q = 4, .len_q = 100, .len_kv = 100, .head_dim = 64,
         .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16, .q_view = {.offset = 4}},
        {.batch = 2, .heads_q = 4, .len_q = 4, .len_kv = 100, .head_dim = 64,
         .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16},
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        assert_int_not_equal(path_of(support_ctx, &others[i]), FCL_ATTENTION_PATH_MMA);
    /* Decoding (len_q up to 4) in every storage type takes the shuffle kernel where GQA
     * groups are odd, but not with groups of 2 or 4, head dims above 256 or not multiples of 8,
     * or rows not at multiples of 8 elements. */
    for (int t = FCL_DTYPE_F32; t <= FCL_DTYPE_BF16; t++) {
        d = base;
        d.len_q = 4;
        d.dtype_q = d.dtype_kv = (fcl_dtype)t;
        assert_int_not_equal(path_of(support_ctx, &d), FCL_ATTENTION_PATH_DECODE_NV); /* 4 / 2 */
        d.heads_kv = 4;
        assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_DECODE_NV, mma_expected());
        d.head_dim = 256;
        assert_int_equal(path_of(support_ctx, &d) == FCL_ATTENTION_PATH_DECODE_NV, mma_expected());
        d.head_dim = 264;
        assert_int_not_equal(path_of(support_ctx, &d), FCL_ATTENTION_PATH_DECODE_NV);
        d.head_dim = 60;
        assert_int_not_equal(path_of(support_ctx, &d), FCL_ATTENTION_PATH_DECODE_NV);
        d.head_dim = 64;
        d.k_view.offset = 4;
        assert_int_not_equal(path_of(support_ctx, &d), FCL_ATTENTION_PATH_DECODE_NV);
    }
    fcl_context_destroy(portable);
}

/* The storage types and precisions the tensor cores take: f16, bf16, float32 (3xTF32),
 * float32 with FCL_PRECISION_TF32, and float32 q over f16 K and V (llama.cpp's types). */
static const struct mma_kind {
    fcl_dtype dtype, dtype_kv;
    fcl_precision precision;
} mma_kinds[] = {{FCL_DTYPE_F16, FCL_DTYPE_F16, FCL_PRECISION_F32},
                 {FCL_DTYPE_BF16, FCL_DTYPE_BF16, FCL_PRECISION_F32},
                 {FCL_DTYPE_F32, FCL_DTYPE_F32, FCL_PRECISION_F32},
                 {FCL_DTYPE_F32, FCL_DTYPE_F32, FCL_PRECISION_TF32},
                 {FCL_DTYPE_F32, FCL_DTYPE_F16, FCL_PRECISION_F32}};
#define MMA_KINDS (sizeof mma_kinds / sizeof mma_kinds[0])

/* Prefill shapes in every kind: GQA, odd lengths (a partial last tile of queries and of
 * keys), both causal rules and none, head dims of every bucket (72: columns past it are
 * zeros; 200 and 256 in f16 and bf16 only), split-KV, lse, a negative scale (the kernel folds
 * the scale into its exponent only where it is positive); a NaN in one query row stays in
 * that row. */
static void test_mma_prefill_matches(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    const size_t shapes[][4] = {/* len_q, len_kv, head_dim, kv_splits */
                                {200, 333, 64, 0}, {130, 257, 128, 0}, {65, 1000, 72, 3}, {5, 17, 64, 0},
                                {70, 300, 256, 0}, {33, 200, 200, 2}};
    for (size_t i = 0; i < MMA_KINDS; i++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (int causal = 0; causal <= 2; causal++) {
                const fcl_dtype t = mma_kinds[i].dtype;
                if (t == FCL_DTYPE_F32 && shapes[k][2] > 128)
                    continue; /* float32 q runs head dims above 128 on the portable kernels */
                attention_run r = {.d = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = shapes[k][0],
                                         .len_kv = shapes[k][1], .head_dim = shapes[k][2],
                                         .kv_splits = shapes[k][3], .causal = (fcl_causal)causal,
                                         .scale = k == 3 ? -0.2f : 0.0f, .dtype_q = t,
                                         .dtype_kv = mma_kinds[i].dtype_kv,
                                         .precision = mma_kinds[i].precision}};
                attention_contiguous_inputs(&r);
                if (k == 0 && causal == 0) /* a NaN at row 7 of batch 1, head 3 */
                    chk_store((void *)r.io.q, t,
                              chk_attention_offset(r.d.layout, 4, r.d.len_q, r.d.head_dim, 1, 3, 7) + 5,
                              NAN);
                check_both(portable, &r, FCL_ATTENTION_PATH_MMA);
                attention_free_inputs(&r);
            }
    fcl_context_destroy(portable);
}

/* Float32 on the tensor cores (3xTF32) documents that an infinite element of k makes every
 * output it enters NaN (its small part is inf - inf), where float32 arithmetic gives +-inf
 * scores: an infinite K element in kv head 1 gives NaN rows for the query heads of that kv
 * head and leaves the other heads as the portable path has them. Elsewhere the call is held
 * to the float64 reference. */
static void test_mma_f32_infinite_input(void **state)
{
    (void)state;
    attention_run r = {.d = {.batch = 1, .heads_q = 4, .heads_kv = 2, .len_q = 40, .len_kv = 50,
                             .head_dim = 64}};
    attention_contiguous_inputs(&r);
    const fcl_attention_desc d = chk_attention_defaults(r.d);
    chk_store((void *)r.io.k, FCL_DTYPE_F32,
              chk_attention_offset(d.layout, d.heads_kv, d.len_kv, d.head_dim, 0, 1, 7) + 3,
              INFINITY);
    if (!mma_expected()) {
        check_attention_run(&r);
        attention_free_inputs(&r);
        return;
    }
    assert_int_equal(path_of(support_ctx, &r.d), FCL_ATTENTION_PATH_MMA);
    fcl_context *portable = portable_context();
    float *fast = calloc(r.out_n, sizeof(float)), *slow = calloc(r.out_n, sizeof(float));
    assert_true(fast && slow);
    run_on_both(portable, &r, fast, slow);
    const double atol = chk_attention_tolerance(&d).atol;
    for (size_t h = 0; h < d.heads_q; h++)
        for (size_t i = 0; i < d.len_q; i++) {
            const size_t row =
                chk_attention_offset(d.layout, d.heads_q, d.len_q, d.head_dim_v, 0, h, i);
            for (size_t e = 0; e < d.head_dim_v; e++) {
                const float got = fast[row + e], want = slow[row + e];
                if (h / 2 == 1 ? !isnan(got) : !(fabs((double)got - want) <= atol))
                    fail_msg("head %zu query %zu element %zu: %.7g (portable %.7g)", h, i, e,
                             got, want);
            }
        }
    free(fast), free(slow);
    attention_free_inputs(&r);
    fcl_context_destroy(portable);
}

/* d on a shuffled paged cache of 16-token pages with the sequences' lengths lens. */
static void check_paged(fcl_context *portable, fcl_attention_desc d, const int32_t *lens,
                        fcl_attention_path fast_path)
{
    attention_run r = {.d = d};
    int32_t *table;
    r.d.page_size = 16;
    attention_paged_inputs(&r, lens, &table);
    check_both(portable, &r, fast_path);
    attention_free_inputs(&r);
    free(table);
}

/* d on sequences packed by cu_q and cu_kv ([batch + 1] each). */
static void check_packed(fcl_context *portable, fcl_attention_desc d, const int32_t *cu_q,
                         const int32_t *cu_kv, fcl_attention_path fast_path)
{
    attention_run r = {.d = d};
    attention_packed_inputs(&r, cu_q, cu_kv);
    check_both(portable, &r, fast_path);
    attention_free_inputs(&r);
}

/* d (with its softcap and window) with a mask of type mask, ALiBi slopes and sinks. */
static void check_scored(fcl_context *portable, fcl_attention_desc d, fcl_mask_type mask,
                         fcl_attention_path fast_path)
{
    static const float sinks[8] = {0.5f, -INFINITY, 2.0f, -1.0f, 0, 1, 3, -2};
    float slopes[8];
    assert_true(d.heads_q <= 8);
    assert_int_equal(fcl_alibi_slopes(d.heads_q, 8.0f, slopes), FCL_SUCCESS);
    attention_run r = {.d = d};
    attention_contiguous_inputs(&r);
    attention_mask(&r, mask);
    r.io.alibi_slopes = slopes;
    r.io.sinks = sinks;
    check_both(portable, &r, fast_path);
    attention_free_inputs(&r);
}

/* The descriptor's features on the path: a shuffled paged cache with per-sequence lengths (an
 * empty one among them), packed sequences, and the score modifiers with a float16 mask. */
static void test_mma_features_match(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    static const int32_t lens[3] = {100, 0, 37}, cu_q[5] = {0, 5, 5, 17, 20},
                         cu_kv[5] = {0, 9, 9, 39, 42};
    for (size_t i = 0; i < MMA_KINDS; i++) {
        const fcl_dtype ty = mma_kinds[i].dtype, tkv = mma_kinds[i].dtype_kv;
        const fcl_precision pr = mma_kinds[i].precision;
        check_paged(portable,
                    (fcl_attention_desc){.batch = 3, .heads_q = 8, .heads_kv = 2, .len_q = 9,
                                         .len_kv = 100, .head_dim = 64,
                                         .causal = FCL_CAUSAL_BOTTOM_RIGHT, .dtype_q = ty,
                                         .dtype_kv = tkv, .precision = pr},
                    lens, FCL_ATTENTION_PATH_MMA);
        check_packed(portable,
                     (fcl_attention_desc){.batch = 4, .heads_q = 4, .heads_kv = 2, .len_q = 12,
                                          .len_kv = 30, .head_dim = 48,
                                          .causal = FCL_CAUSAL_TOP_LEFT, .dtype_q = ty,
                                          .dtype_kv = tkv, .precision = pr},
                     cu_q, cu_kv, FCL_ATTENTION_PATH_MMA);
        check_scored(portable,
                     (fcl_attention_desc){.batch = 2, .heads_q = 4, .heads_kv = 4, .len_q = 90,
                                          .len_kv = 150, .head_dim = 128, .softcap = 20.0f,
                                          .window = 1, .window_left = 40, .window_right = 7,
                                          .dtype_q = ty, .dtype_kv = tkv, .precision = pr},
                     FCL_MASK_ADD_F16, FCL_ATTENTION_PATH_MMA);
    }
    fcl_context_destroy(portable);
}

/* Hard values for a decoding run of at least 2 batches, 6 query heads, 2 kv heads and 78
 * keys: a NaN in key 77 of kv head 1 (batch 1), +inf and -inf in one query (batch 1, head 2)
 * and a NaN in another (batch 0, head 5: every score of that head NaN). */
static void store_hard_decode_values(attention_run *r)
{
    const fcl_attention_desc f = chk_attention_defaults(r->d);
    const size_t key77 = chk_attention_offset(f.layout, f.heads_kv, f.len_kv, f.head_dim, 1, 1, 77);
    const size_t q12 = chk_attention_offset(f.layout, f.heads_q, f.len_q, f.head_dim, 1, 2, 0);
    const size_t q05 = chk_attention_offset(f.layout, f.heads_q, f.len_q, f.head_dim, 0, 5, 0);
    chk_store((void *)r->io.k, f.dtype_kv, key77 + 3, NAN);
    chk_store((void *)r->io.q, f.dtype_q, q12 + 9, INFINITY);
    chk_store((void *)r->io.q, f.dtype_q, q12 + 10, -INFINITY);
    chk_store((void *)r->io.q, f.dtype_q, q05 + 1, NAN);
}

/* Decoding on the shuffle kernel in every storage type (and float32 queries over a bf16
 * cache): no GQA with 1 to 4 queries, and groups of 3 heads with 2 to 4 (one query of a group
 * runs as rows on the tensor cores: test_gqa_decode_rows_match); both causal rules and none,
 * head dims of every bucket (72: lanes past it idle), fewer keys than one step, split-KV, lse,
 * and store_hard_decode_values's NaN key and infinite and NaN queries. */
static void test_decode_nv_matches(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    const size_t shapes[][6] = {/* heads_q, heads_kv, len_q, len_kv, head_dim, kv_splits */
                                {8, 8, 1, 1000, 128, 0}, {4, 4, 3, 333, 64, 0}, {6, 2, 4, 70, 72, 0},
                                {6, 2, 2, 5000, 128, 5}, {3, 1, 2, 20, 64, 0}, {4, 4, 2, 500, 256, 0}};
    for (int t = FCL_DTYPE_F32; t <= FCL_DTYPE_BF16 + 1; t++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (int causal = 0; causal <= 2; causal++) {
                const int mixed = t > FCL_DTYPE_BF16; /* float32 q and out, bf16 K and V */
                attention_run r = {.d = {.batch = 2, .heads_q = shapes[k][0], .heads_kv = shapes[k][1],
                                         .len_q = shapes[k][2], .len_kv = shapes[k][3],
                                         .head_dim = shapes[k][4], .kv_splits = shapes[k][5],
                                         .causal = (fcl_causal)causal,
                                         .dtype_q = mixed ? FCL_DTYPE_F32 : (fcl_dtype)t,
                                         .dtype_kv = mixed ? FCL_DTYPE_BF16 : (fcl_dtype)t}};
                attention_contiguous_inputs(&r);
                if (k == 0 && causal == 0)
                    store_hard_decode_values(&r);
                check_both(portable, &r, FCL_ATTENTION_PATH_DECODE_NV);
                attention_free_inputs(&r);
            }
    fcl_context_destroy(portable);
}

/* The descriptor's features on the decode path: a shuffled paged cache with per-sequence
 * lengths (an empty one among them), packed queries and keys, and the score modifiers with
 * float16 and boolean masks. */
static void test_decode_nv_features_match(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    static const int32_t lens[3] = {1000, 0, 37}, cu_q[5] = {0, 1, 1, 4, 6},
                         cu_kv[5] = {0, 90, 90, 390, 420};
    for (int t = FCL_DTYPE_F32; t <= FCL_DTYPE_BF16; t++) {
        const fcl_dtype ty = (fcl_dtype)t;
        check_paged(portable,
                    (fcl_attention_desc){.batch = 3, .heads_q = 6, .heads_kv = 2, .len_q = 2,
                                         .len_kv = 1000, .head_dim = 128,
                                         .causal = FCL_CAUSAL_BOTTOM_RIGHT, .dtype_q = ty,
                                         .dtype_kv = ty},
                    lens, FCL_ATTENTION_PATH_DECODE_NV);
        check_packed(portable,
                     (fcl_attention_desc){.batch = 4, .heads_q = 3, .heads_kv = 1, .len_q = 3,
                                          .len_kv = 300, .head_dim = 64,
                                          .causal = FCL_CAUSAL_BOTTOM_RIGHT, .dtype_q = ty,
                                          .dtype_kv = ty},
                     cu_q, cu_kv, FCL_ATTENTION_PATH_DECODE_NV);
        static const fcl_mask_type masks[2] = {FCL_MASK_ADD_F16, FCL_MASK_BOOL_U8};
        for (int m = 0; m < 2; m++)
            check_scored(portable,
                         (fcl_attention_desc){.batch = 2, .heads_q = 6, .heads_kv = 2, .len_q = 2,
                                              .len_kv = 700, .head_dim = 128, .softcap = 20.0f,
                                              .window = 1, .window_left = 300, .window_right = 7,
                                              .dtype_q = ty, .dtype_kv = ty},
                         masks[m], FCL_ATTENTION_PATH_DECODE_NV);
    }
    fcl_context_destroy(portable);
}

/* Sinks of 8 query heads, each its own (an index taken from the kv head shows), one -inf
 * and one that outweighs a few hundred keys. */
static const float head_sinks[8] = {0.5f, -INFINITY, 2.0f, -1.0f, 0.0f, 9.0f, 3.0f, -2.0f};

/* ALiBi slopes of 2 sequences of 8 query heads (alibi_slopes_batch_stride 8), each its own. */
static const float head_slopes[16] = {0.5f,  0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f,
                                      0.0078125f, 0.00390625f, 0.1f, 0.2f, 0.3f, 0.4f,
                                      0.5f, 0.6f, 0.7f, 0.8f};

/* Applies feature f of the query's head and position to GQA decoding call r: 1 each query
 * head's sink, 2 the window of 100 keys, 4 ALiBi with slopes of each sequence's heads, 8
 * ALiBi from an f16 mask of positions (one row a sequence, head stride 0, llama.cpp's). */
enum { ROWS_SINKS = 1, ROWS_WINDOW = 2, ROWS_ALIBI = 4, ROWS_ALIBI_MASK = 8 };
static void add_head_features(attention_run *r, int f)
{
    if (f & ROWS_SINKS)
        r->io.sinks = head_sinks; /* given with the call: the plan does not see them */
    if (f & ROWS_WINDOW)
        r->d.window = 1, r->d.window_left = 100, r->d.window_right = 0;
    if (f & (ROWS_ALIBI | ROWS_ALIBI_MASK))
        r->io.alibi_slopes = head_slopes, r->d.alibi_slopes_batch_stride = 8;
    if (f & ROWS_ALIBI_MASK) {
        r->d.alibi_from_mask = 1;
        uint16_t *m = attention_mask(r, FCL_MASK_ADD_F16);
        r->d.mask_stride_head = 0;
        for (size_t e = 0; e < r->mask_n; e++)
            if (m[e] != chk_float_to_half(-INFINITY))
                m[e] = chk_float_to_half(-(float)(e % r->d.len_kv % 37));
    }
}

/* Decoding one query row with GQA groups in f16, bf16 and float32 q over f16 K and V (up to
 * head dim 128; float32 keeps the portable decode kernel:
 * test_mma_path_is_planned_where_it_runs): the group's heads as rows of one kv head on the
 * tensor cores, two warps a row tile with half the keys each (lse, bottom-right causality,
 * softcap, split-KV, store_hard_decode_values's NaN key and infinite and NaN queries, a
 * shuffled paged cache with an empty sequence, the window, sinks and ALiBi); top-left
 * causality keeps the portable decode kernel. */
static void test_gqa_decode_rows_match(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    static const fcl_dtype types[3][2] = {{FCL_DTYPE_F16, FCL_DTYPE_F16},
                                          {FCL_DTYPE_BF16, FCL_DTYPE_BF16},
                                          {FCL_DTYPE_F32, FCL_DTYPE_F16}}; /* q, K and V */
    for (int i = 0; i < 3; i++) {
        const fcl_dtype t = types[i][0], tkv = types[i][1];
        const size_t shapes[][5] = {/* heads_q, heads_kv, len_kv, head_dim, kv_splits */
                                    {8, 2, 1000, 128, 0}, {32, 1, 333, 64, 0}, {12, 3, 5000, 72, 7},
                                    {8, 4, 300, 256, 0}};
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            if (t == FCL_DTYPE_F32 && shapes[k][3] > 128)
                continue;
            attention_run r = {.d = {.batch = 3, .heads_q = shapes[k][0], .heads_kv = shapes[k][1],
                                     .len_q = 1, .len_kv = shapes[k][2], .head_dim = shapes[k][3],
                                     .kv_splits = shapes[k][4], .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                                     .softcap = k == 1 ? 30.0f : 0.0f, .dtype_q = t,
                                     .dtype_kv = tkv}};
            attention_contiguous_inputs(&r);
            if (k == 0) /* through the merge of the key warps' states */
                store_hard_decode_values(&r);
            check_both(portable, &r, FCL_ATTENTION_PATH_MMA);
            attention_free_inputs(&r);
        }
        static const int32_t lens[3] = {700, 0, 37};
        check_paged(portable,
                    (fcl_attention_desc){.batch = 3, .heads_q = 8, .heads_kv = 2, .len_q = 1,
                                         .len_kv = 700, .head_dim = 128, .dtype_q = t,
                                         .dtype_kv = tkv},
                    lens, FCL_ATTENTION_PATH_MMA);
        /* masks: llama.cpp's f16 one, a row a sequence for every head (head stride 0);
         * boolean and float32 ones of each head, with a split */
        static const fcl_mask_type masks[3] = {FCL_MASK_ADD_F16, FCL_MASK_BOOL_U8, FCL_MASK_ADD_F32};
        for (int m = 0; m < 3; m++) {
            attention_run r = {.d = {.batch = 3, .heads_q = 8, .heads_kv = 2, .len_q = 1,
                                     .len_kv = 600, .head_dim = 128, .kv_splits = m == 1 ? 3 : 0,
                                     .dtype_q = t, .dtype_kv = tkv}};
            attention_contiguous_inputs(&r);
            attention_mask(&r, masks[m]);
            if (m == 0)
                r.d.mask_stride_head = 0;
            check_both(portable, &r, FCL_ATTENTION_PATH_MMA);
            attention_free_inputs(&r);
        }

        /* the features of the query's head and position (add_head_features), the last two
         * with three splits of which the window leaves two empty; top-left causality keeps
         * the portable decode kernel */
        const fcl_attention_desc base = {.batch = 2, .heads_q = 8, .heads_kv = 2, .len_q = 1,
                                   .len_kv = 500, .head_dim = 64, .dtype_q = t,
                                   .dtype_kv = tkv};
        static const int features[] = {ROWS_SINKS, ROWS_WINDOW, ROWS_ALIBI, ROWS_ALIBI_MASK,
                                       ROWS_WINDOW | ROWS_SINKS | ROWS_ALIBI,
                                       ROWS_WINDOW | ROWS_ALIBI_MASK};
        for (size_t c = 0; c < sizeof features / sizeof features[0]; c++) {
            attention_run r = {.d = base};
            r.d.kv_splits = c >= 4 ? 3 : 0;
            attention_contiguous_inputs(&r);
            add_head_features(&r, features[c]);
            check_both(portable, &r, FCL_ATTENTION_PATH_MMA);
            attention_free_inputs(&r);
        }
        attention_run r = {.d = base};
        r.d.causal = FCL_CAUSAL_TOP_LEFT;
        attention_contiguous_inputs(&r);
        assert_int_not_equal(path_of(support_ctx, &r.d), FCL_ATTENTION_PATH_MMA);
        check_attention_run(&r);
        attention_free_inputs(&r);
    }
    fcl_context_destroy(portable);
}

/* GQA rows (3 sequences of 300 keys in 2 splits, groups of 4) and a prefill (70 rows over 133
 * keys), bottom-right causal at head dim 128: shapes the coded K/V tests share. */
static const fcl_attention_desc kv_rows = {.batch = 3, .heads_q = 8, .heads_kv = 2, .len_q = 1,
                                           .len_kv = 300, .head_dim = 128, .kv_splits = 2,
                                           .causal = FCL_CAUSAL_BOTTOM_RIGHT},
                                kv_prefill = {.batch = 2, .heads_q = 4, .heads_kv = 2,
                                              .len_q = 70, .len_kv = 133, .head_dim = 128,
                                              .causal = FCL_CAUSAL_BOTTOM_RIGHT};

/* check_both, and r against the reference on `switched` (a context with a fast path
 * switched off) where the NVIDIA kernels run. */
static void check_kv_switched(fcl_context *portable, fcl_context *switched, attention_run *r)
{
    check_both(portable, r, FCL_ATTENTION_PATH_MMA);
    if (mma_expected())
        check_attention_run_on(switched, r);
}

/* r's contiguous inputs with K and V in r->d's formats (built by fill), scaled as r->d says
 * or (a mode other than NONE) by kv_add_scales, and where nonfinite a NaN code in V (fp8
 * E4M3) or an infinite one (E5M2) in row 37 of the cache (its key hidden from some queries
 * by causality). */
static void kv_case_inputs(attention_run *r, kv_fill fill, fcl_kv_scale k_mode,
                           fcl_kv_scale v_mode, int nonfinite)
{
    attention_contiguous_inputs(r);
    kv_recode(r, fill);
    if (k_mode)
        kv_add_scales(r, 0, k_mode);
    if (v_mode)
        kv_add_scales(r, 1, v_mode);
    if (nonfinite)
        ((unsigned char *)r->io.v)[37 * r->d.head_dim + 5] =
            r->d.format_v == FCL_KV_FP8_E4M3 ? 0x7f : 0xfc;
}

/* One K/V-format case of d on both contexts: K and V in fk and fv (kv_case_inputs). */
static void check_kv_case(fcl_context *portable, fcl_attention_desc d, unsigned fk, unsigned fv,
                          kv_fill fill, fcl_kv_scale k_mode, fcl_kv_scale v_mode, int nonfinite,
                          fcl_attention_path fast_path)
{
    attention_run r = {.d = d};
    r.d.format_k = (fcl_kv_format)fk, r.d.format_v = (fcl_kv_format)fv;
    kv_case_inputs(&r, fill, k_mode, v_mode, nonfinite);
    check_both(portable, &r, fast_path);
    kv_free_run(&r);
}

/* d (3 sequences, 300 keys) on a shuffled paged cache of 16-token pages with lengths 290, 0
 * and 37: int8 K with TOKEN scales paged with it, V in fv, on the tensor cores. */
static void check_kv_paged(fcl_context *portable, fcl_attention_desc d, unsigned fv)
{
    attention_run r = {.d = d};
    static const int32_t lens[3] = {290, 0, 37};
    int32_t *table;
    assert_true(d.batch == 3);
    r.d.page_size = 16;
    r.d.len_kv = 300;
    r.d.format_k = FCL_KV_INT8, r.d.format_v = (fcl_kv_format)fv;
    attention_paged_inputs(&r, lens, &table);
    kv_recode(&r, KV_FROM_DATA);
    kv_add_scales(&r, 0, FCL_KV_SCALE_TOKEN);
    check_both(portable, &r, FCL_ATTENTION_PATH_MMA);
    kv_free_run(&r);
    free(table);
}

/* NVIDIA's tensor-core kernels on K/V formats (the _kv builds, decoding each tile into q's
 * 16-bit type): every coded format for K and V, from data and from random bytes, with f16
 * and bf16 q, in prefill (bottom-right causal, head dim 128), GQA decoding as rows (groups of
 * 4, head dim 64) and groups of one head (256); each scale mode; a coded K or V beside one of
 * q's type; a paged cache; split-KV and a window; NaN and infinite V codes in causal prefill
 * (a key of weight 0 adds nothing to a row, its NaN included). int8 is scaled (its codes
 * reach 127), as LMDeploy keeps it. */
static void test_mma_kv_matches(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    static const unsigned formats[] = {FCL_KV_Q8_0,   FCL_KV_Q4_0,     FCL_KV_Q4_1,
                                       FCL_KV_Q5_0,   FCL_KV_Q5_1,     FCL_KV_IQ4_NL,
                                       FCL_KV_FP8_E4M3, FCL_KV_FP8_E5M2, FCL_KV_INT8};
    const fcl_kv_scale none = FCL_KV_SCALE_NONE, tensor = FCL_KV_SCALE_TENSOR;
    const fcl_attention_path mma = FCL_ATTENTION_PATH_MMA;
    for (int t = FCL_DTYPE_F16; t <= FCL_DTYPE_BF16; t++) {
        const fcl_attention_desc shapes[] = {
            {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = 70, .len_kv = 133, .head_dim = 128,
             .causal = FCL_CAUSAL_BOTTOM_RIGHT, .dtype_q = (fcl_dtype)t},
            {.batch = 3, .heads_q = 8, .heads_kv = 2, .len_q = 1, .len_kv = 300, .head_dim = 64,
             .causal = FCL_CAUSAL_BOTTOM_RIGHT, .dtype_q = (fcl_dtype)t},
            {.batch = 2, .heads_q = 3, .heads_kv = 3, .len_q = 1, .len_kv = 200, .head_dim = 256,
             .dtype_q = (fcl_dtype)t}};
        for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++)
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
                fcl_attention_desc d = shapes[k];
                if (formats[f] == FCL_KV_INT8)
                    d.scale_mode_k = d.scale_mode_v = tensor, d.k_scale = d.v_scale = 0.03f;
                check_kv_case(portable, d, formats[f], formats[f], (kv_fill)((f + k) % 2), none,
                              none, 0, mma);
            }
        const fcl_attention_desc prefill = shapes[0], rows = shapes[1];
        const unsigned half = (unsigned)t + 1 /* fcl_dtype t is format t + 1 */;
        /* scales: HEAD q8_0 K, TOKEN int8 V; TOKEN fp8 K, TENSOR fp8 V */
        check_kv_case(portable, prefill, FCL_KV_Q8_0, FCL_KV_INT8, KV_FROM_DATA,
                      FCL_KV_SCALE_HEAD, FCL_KV_SCALE_TOKEN, 0, mma);
        check_kv_case(portable, rows, FCL_KV_FP8_E4M3, FCL_KV_FP8_E4M3, KV_FROM_DATA,
                      FCL_KV_SCALE_TOKEN, tensor, 0, mma);
        /* a coded K or V beside one of q's type (copied as it is), any scale */
        check_kv_case(portable, prefill, FCL_KV_Q8_0, half, KV_FROM_DATA, none, tensor, 0, mma);
        check_kv_case(portable, rows, half, FCL_KV_Q4_0, KV_RAW, FCL_KV_SCALE_TOKEN, none, 0, mma);
        /* GQA rows of 8-bit and 4- and 5-bit K and V at head dim 128 (the 8-bit decode kernel
         * where f16 q): softcap and a split, scales; NaN and infinite V codes */
        fcl_attention_desc rows128 = rows;
        rows128.head_dim = 128, rows128.softcap = 20.0f, rows128.kv_splits = 2;
        check_kv_case(portable, rows128, FCL_KV_Q8_0, FCL_KV_FP8_E5M2, KV_RAW, none, none, 0, mma);
        check_kv_case(portable, rows128, FCL_KV_Q4_0, FCL_KV_Q4_0, KV_FROM_DATA, none, none, 0, mma);
        check_kv_case(portable, rows128, FCL_KV_Q4_1, FCL_KV_Q5_0, KV_RAW, FCL_KV_SCALE_TOKEN,
                      FCL_KV_SCALE_HEAD, 0, mma);
        check_kv_case(portable, rows128, FCL_KV_Q5_0, FCL_KV_Q5_1, KV_FROM_DATA, none, none, 0, mma);
        check_kv_case(portable, rows128, FCL_KV_IQ4_NL, FCL_KV_IQ4_NL, KV_RAW, FCL_KV_SCALE_TOKEN,
                      FCL_KV_SCALE_HEAD, 0, mma);
        /* one kv head: q8_0 rows of 136 bytes start 0 and 8 bytes past 16-byte boundaries in
         * turn, and the last one's copies reach the buffer's end */
        fcl_attention_desc one_kv = rows128;
        one_kv.heads_kv = 1, one_kv.len_kv = 301;
        check_kv_case(portable, one_kv, FCL_KV_Q8_0, FCL_KV_Q4_0, KV_RAW, none, none, 0, mma);
        check_kv_case(portable, rows128, FCL_KV_FP8_E4M3, FCL_KV_INT8, KV_FROM_DATA,
                      FCL_KV_SCALE_HEAD, FCL_KV_SCALE_TOKEN, 0, mma);
        check_kv_case(portable, rows, FCL_KV_FP8_E4M3, FCL_KV_FP8_E4M3, KV_FROM_DATA, none,
                      none, 1, mma);
        check_kv_case(portable, rows128, FCL_KV_Q8_0, FCL_KV_FP8_E5M2, KV_FROM_DATA, none,
                      tensor, 1, mma);
        /* NaN and infinite V codes where causality hides their key from some queries */
        fcl_attention_desc hidden = prefill;
        hidden.len_q = hidden.len_kv = 64;
        hidden.head_dim = 64;
        check_kv_case(portable, hidden, FCL_KV_FP8_E4M3, FCL_KV_FP8_E4M3, KV_FROM_DATA, none,
                      none, 1, mma);
        check_kv_case(portable, hidden, FCL_KV_FP8_E5M2, FCL_KV_FP8_E5M2, KV_FROM_DATA, none,
                      none, 1, mma);
        /* split-KV, a window */
        fcl_attention_desc split = prefill;
        split.kv_splits = 3;
        split.len_kv = 700;
        check_kv_case(portable, split, FCL_KV_Q4_1, FCL_KV_Q8_0, KV_RAW, none, none, 0, mma);
        fcl_attention_desc window = prefill;
        window.window = 1, window.window_left = 40, window.window_right = 3;
        check_kv_case(portable, window, FCL_KV_Q5_0, FCL_KV_FP8_E5M2, KV_FROM_DATA, none, none, 0, mma);
        check_kv_paged(portable, rows, FCL_KV_Q8_0);
    }
    fcl_context_destroy(portable);
}

/* Float32 q at 2^17 and 2^-30 times its size over int8 K and V, K's TENSOR scale the inverse
 * (the same scores): f16 parts of q alone would overflow or vanish. */
static void check_kv_scaled_q(fcl_context *portable, fcl_attention_desc d)
{
    static const int exponents[2] = {17, -30};
    for (int i = 0; i < 2; i++) {
        attention_run r = {.d = d};
        r.d.format_k = r.d.format_v = FCL_KV_INT8;
        r.d.scale_mode_k = r.d.scale_mode_v = FCL_KV_SCALE_TENSOR;
        r.d.k_scale = ldexpf(0.03f, -exponents[i]), r.d.v_scale = 0.03f;
        attention_contiguous_inputs(&r);
        kv_recode(&r, KV_FROM_DATA);
        for (size_t e = 0; e < r.q_n; e++)
            ((float *)r.io.q)[e] = ldexpf(((float *)r.io.q)[e], exponents[i]);
        check_both(portable, &r, FCL_ATTENTION_PATH_MMA);
        kv_free_run(&r);
    }
}

/* Float32 q over 8-bit and q4_0 K and V as GQA rows (llama.cpp's decoding types) on the 8-bit
 * decode kernel's float32 build, at every bucket's head dim: raw q8_0 and q4_0 bytes, HEAD
 * and TOKEN scales, softcap and a split, NaN and infinite V codes (the slow path), a shuffled
 * paged cache; q at 2^17 and 2^-30 times its size, with K's TENSOR scale the inverse (the
 * same scores): f16 parts of q alone would overflow or vanish; q5_1 K and q4_1 V (an m in
 * both products); iq4_nl K and V (every nibble, as raw bytes) beside q8_0. */
static void test_kv_decode_f32_q_matches(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    const fcl_kv_scale none = FCL_KV_SCALE_NONE;
    const fcl_attention_path mma = FCL_ATTENTION_PATH_MMA;
    const fcl_attention_desc rows = {.batch = 3, .heads_q = 8, .heads_kv = 2, .len_q = 1,
                                     .len_kv = 300, .head_dim = 64,
                                     .causal = FCL_CAUSAL_BOTTOM_RIGHT, .dtype_q = FCL_DTYPE_F32};
    fcl_attention_desc rows128 = rows, one_head = rows;
    rows128.head_dim = 128, rows128.softcap = 20.0f, rows128.kv_splits = 2;
    one_head.heads_q = one_head.heads_kv = 3, one_head.head_dim = 256;
    one_head.causal = FCL_CAUSAL_NONE;
    check_kv_case(portable, rows, FCL_KV_Q8_0, FCL_KV_Q8_0, KV_RAW, none, none, 0, mma);
    check_kv_case(portable, rows128, FCL_KV_Q4_0, FCL_KV_Q4_0, KV_RAW, none, none, 0, mma);
    check_kv_case(portable, rows128, FCL_KV_Q5_1, FCL_KV_Q4_1, KV_FROM_DATA, none, none, 0, mma);
    check_kv_case(portable, rows128, FCL_KV_FP8_E4M3, FCL_KV_INT8, KV_FROM_DATA,
                  FCL_KV_SCALE_HEAD, FCL_KV_SCALE_TOKEN, 0, mma);
    check_kv_case(portable, one_head, FCL_KV_FP8_E5M2, FCL_KV_Q8_0, KV_FROM_DATA, none, none, 0, mma);
    check_kv_case(portable, rows128, FCL_KV_Q8_0, FCL_KV_FP8_E5M2, KV_FROM_DATA, none, none, 1, mma);
    check_kv_case(portable, rows, FCL_KV_FP8_E4M3, FCL_KV_FP8_E4M3, KV_FROM_DATA, none, none, 1, mma);
    check_kv_scaled_q(portable, rows128);
    check_kv_paged(portable, rows, FCL_KV_Q8_0);
    check_kv_case(portable, rows128, FCL_KV_IQ4_NL, FCL_KV_Q8_0, KV_RAW, none, none, 0, mma);
    check_kv_case(portable, rows, FCL_KV_Q8_0, FCL_KV_IQ4_NL, KV_RAW, none, none, 0, mma);
    fcl_context_destroy(portable);
}

/* Float32 q over coded K/V in prefill (llama.cpp's types) on the tensor-core kernel's
 * f16q32 _kv build: q and p in two f16 parts, K's and V's codes exact in the f16 tiles, ggml's
 * factors in float32. Head dims 128 and 64, bottom-right causal GQA: raw q8_0 and iq4_nl
 * bytes, q4_1 K and q5_1 V (an m in both products), HEAD and TOKEN scales, a coded K or V
 * beside an f16 one, NaN and infinite V codes hidden from some queries, split-KV with a
 * window, a shuffled paged cache; q at 2^17 and 2^-30 times its size with K's TENSOR scale
 * the inverse (f16 parts of q alone would overflow or vanish). */
static void test_mma_kv_f32_q_matches(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    const fcl_kv_scale none = FCL_KV_SCALE_NONE;
    const fcl_attention_path mma = FCL_ATTENTION_PATH_MMA;
    const fcl_attention_desc prefill = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = 70,
                                        .len_kv = 133, .head_dim = 128,
                                        .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                                        .dtype_q = FCL_DTYPE_F32, .dtype_kv = FCL_DTYPE_F16};
    fcl_attention_desc d64 = prefill, hidden = prefill, split = prefill, paged = prefill;
    d64.head_dim = 64;
    hidden.len_q = hidden.len_kv = 64, hidden.head_dim = 64;
    split.len_kv = 700, split.kv_splits = 3;
    split.window = 1, split.window_left = 40, split.window_right = 3;
    paged.batch = 3, paged.len_q = 20;
    check_kv_case(portable, prefill, FCL_KV_Q8_0, FCL_KV_Q8_0, KV_RAW, none, none, 0, mma);
    check_kv_case(portable, d64, FCL_KV_Q8_0, FCL_KV_Q4_0, KV_FROM_DATA, none, none, 0, mma);
    check_kv_case(portable, prefill, FCL_KV_Q4_1, FCL_KV_Q5_1, KV_FROM_DATA, none, none, 0, mma);
    check_kv_case(portable, d64, FCL_KV_Q5_1, FCL_KV_Q4_1, KV_RAW, none, none, 0, mma);
    check_kv_case(portable, prefill, FCL_KV_FP8_E4M3, FCL_KV_INT8, KV_FROM_DATA,
                  FCL_KV_SCALE_HEAD, FCL_KV_SCALE_TOKEN, 0, mma);
    check_kv_case(portable, prefill, FCL_KV_IQ4_NL, FCL_KV_FP8_E5M2, KV_RAW, FCL_KV_SCALE_TOKEN,
                  none, 0, mma);
    check_kv_case(portable, prefill, FCL_KV_Q8_0, FCL_KV_F16, KV_FROM_DATA, none, none, 0, mma);
    check_kv_case(portable, d64, FCL_KV_F16, FCL_KV_Q4_0, KV_RAW, none, none, 0, mma);
    check_kv_case(portable, hidden, FCL_KV_FP8_E4M3, FCL_KV_FP8_E4M3, KV_FROM_DATA, none, none, 1, mma);
    check_kv_case(portable, hidden, FCL_KV_FP8_E5M2, FCL_KV_FP8_E5M2, KV_FROM_DATA, none, none, 1, mma);
    check_kv_case(portable, split, FCL_KV_Q8_0, FCL_KV_Q5_0, KV_RAW, none, none, 0, mma);
    check_kv_paged(portable, paged, FCL_KV_Q8_0);
    check_kv_scaled_q(portable, prefill);
    fcl_context_destroy(portable);
}

/* Coded rows that start 2 bytes past a multiple of 4, which the tensor cores' _kv builds
 * stage by 2-byte loads (cp.async copies 4 bytes at least, between multiples of 4): ggml's
 * rows of an odd number of 34-, 18- or 22-byte blocks (llama.cpp's q8_0 cache at head dim
 * 96: rows of 102 bytes) in prefill (q4_0 K and V: its build for one format) and as GQA
 * rows, and a q8_0 cache 2 bytes into its buffer at head dim 128 (GQA rows: not on the
 * 8-bit decode kernel, whose staged rows need multiples of 4); float32 and f16 q, against
 * the portable kernels and the float64 reference. */
static void test_mma_kv_even_rows(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    const fcl_kv_scale none = FCL_KV_SCALE_NONE;
    const fcl_attention_path mma = FCL_ATTENTION_PATH_MMA;
    for (int t = FCL_DTYPE_F32; t <= FCL_DTYPE_F16; t++) {
        fcl_attention_desc prefill = kv_prefill, rows = kv_rows;
        prefill.dtype_q = rows.dtype_q = (fcl_dtype)t;
        prefill.head_dim = rows.head_dim = 96;
        check_kv_case(portable, prefill, FCL_KV_Q8_0, FCL_KV_Q4_0, KV_FROM_DATA, none, none, 0, mma);
        check_kv_case(portable, prefill, FCL_KV_Q4_0, FCL_KV_Q4_0, KV_RAW, none, none, 0, mma);
        check_kv_case(portable, prefill, FCL_KV_IQ4_NL, FCL_KV_Q8_0, KV_RAW, FCL_KV_SCALE_TOKEN,
                      none, 0, mma);
        check_kv_case(portable, rows, FCL_KV_Q5_0, FCL_KV_Q8_0, KV_RAW, none, none, 0, mma);
        attention_run r = {.d = kv_rows};
        r.d.dtype_q = (fcl_dtype)t;
        r.d.format_k = r.d.format_v = FCL_KV_Q8_0;
        kv_case_inputs(&r, KV_FROM_DATA, none, none, 0);
        kv_shift_rows(&r, 2);
        check_both(portable, &r, mma);
        kv_free_run(&r);
    }
    fcl_context_destroy(portable);
}

/* The builds for one pair of formats (K and V both q8_0, q4_0, fp8 or int8: the formats
 * constants in the kernel) of the tensor-core prefill and of the 8-bit decode kernel (GQA
 * decoding, 300 keys) against the float64 reference, and switched off (FLASHCL_TUNE=
 * attention_kv_fixed=0: the builds that read the formats at run time) too: f16 q at head dims
 * 128 and 64, TOKEN scales on int8, a HEAD scale on E4M3 K, float32 q over q8_0. */
static void test_mma_kv_fixed_formats(void **state)
{
    (void)state;
    fcl_context *portable = portable_context(), *generic = tuned_context("attention_kv_fixed=0");
    const fcl_attention_desc prefill = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = 70,
                                        .len_kv = 133, .head_dim = 128,
                                        .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                                        .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16};
    static const struct {
        fcl_kv_format format;
        fcl_dtype q;
        size_t dim;
        fcl_kv_scale k_mode, v_mode;
        int decode;
    } cases[] = {
        {FCL_KV_Q8_0, FCL_DTYPE_F16, 128, FCL_KV_SCALE_NONE, FCL_KV_SCALE_NONE, 0},
        {FCL_KV_Q4_0, FCL_DTYPE_F16, 64, FCL_KV_SCALE_NONE, FCL_KV_SCALE_NONE, 0},
        {FCL_KV_FP8_E4M3, FCL_DTYPE_F16, 128, FCL_KV_SCALE_HEAD, FCL_KV_SCALE_NONE, 0},
        {FCL_KV_FP8_E5M2, FCL_DTYPE_F16, 64, FCL_KV_SCALE_NONE, FCL_KV_SCALE_NONE, 0},
        {FCL_KV_INT8, FCL_DTYPE_F16, 128, FCL_KV_SCALE_TOKEN, FCL_KV_SCALE_TOKEN, 0},
        {FCL_KV_Q8_0, FCL_DTYPE_F32, 128, FCL_KV_SCALE_NONE, FCL_KV_SCALE_NONE, 0},
        {FCL_KV_Q4_0, FCL_DTYPE_F16, 128, FCL_KV_SCALE_NONE, FCL_KV_SCALE_NONE, 1},
        {FCL_KV_Q8_0, FCL_DTYPE_F16, 64, FCL_KV_SCALE_NONE, FCL_KV_SCALE_NONE, 1},
        {FCL_KV_Q8_0, FCL_DTYPE_F32, 128, FCL_KV_SCALE_NONE, FCL_KV_SCALE_NONE, 1},
        {FCL_KV_Q4_0, FCL_DTYPE_F32, 64, FCL_KV_SCALE_NONE, FCL_KV_SCALE_NONE, 1},
        {FCL_KV_INT8, FCL_DTYPE_F32, 128, FCL_KV_SCALE_TOKEN, FCL_KV_SCALE_TOKEN, 1},
        {FCL_KV_FP8_E4M3, FCL_DTYPE_F32, 64, FCL_KV_SCALE_HEAD, FCL_KV_SCALE_NONE, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attention_run r = {.d = prefill};
        r.d.dtype_q = cases[i].q, r.d.head_dim = cases[i].dim;
        if (cases[i].decode)
            r.d.len_q = 1, r.d.len_kv = 300;
        r.d.format_k = r.d.format_v = cases[i].format;
        attention_contiguous_inputs(&r);
        kv_recode(&r, KV_FROM_DATA);
        if (cases[i].k_mode)
            kv_add_scales(&r, 0, cases[i].k_mode);
        if (cases[i].v_mode)
            kv_add_scales(&r, 1, cases[i].v_mode);
        check_both(portable, &r, FCL_ATTENTION_PATH_MMA);
        if (mma_expected()) {
            assert_int_equal(path_of(generic, &r.d), FCL_ATTENTION_PATH_MMA);
            check_attention_run_on(generic, &r);
        }
        kv_free_run(&r);
    }
    fcl_context_destroy(generic);
    fcl_context_destroy(portable);
}

/* E4M3 K and V of every code (K's element e code 7e + 3, V's 13e + 1; NaN codes as 0), then a
 * NaN code in a key of sequence 1 and in a value of sequence 0 (each hidden from some rows in
 * the prefill), on the 8-bit decode kernel (f16 and float32 q) and the tensor-core prefill's
 * E4M3 build: on the test context (the hardware's conversion where the GPU has one,
 * fcl_plan_fp8_cvt) and switched off (FLASHCL_TUNE=attention_fp8_cvt=0: integer and f16
 * arithmetic), each against the float64 reference, the first against the portable path. */
static void test_fp8_e4m3_conversions(void **state)
{
    (void)state;
    fcl_context *portable = portable_context(), *integer = tuned_context("attention_fp8_cvt=0");
    static const struct {
        int prefill;
        fcl_dtype q;
    } cases[] = {{0, FCL_DTYPE_F16}, {0, FCL_DTYPE_F32}, {1, FCL_DTYPE_F16}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attention_run r = {.d = cases[i].prefill ? kv_prefill : kv_rows};
        r.d.dtype_q = cases[i].q, r.d.dtype_kv = FCL_DTYPE_F16;
        r.d.format_k = r.d.format_v = FCL_KV_FP8_E4M3;
        r.d.scale_mode_k = r.d.scale_mode_v = FCL_KV_SCALE_TENSOR;
        r.d.k_scale = r.d.v_scale = 1.0f / 256.0f; /* codes up to 448 */
        attention_contiguous_inputs(&r);
        kv_recode(&r, KV_RAW);
        unsigned char *k = (unsigned char *)r.io.k, *v = (unsigned char *)r.io.v;
        for (size_t e = 0; e < r.k_n; e++) {
            const unsigned char ck = (unsigned char)(e * 7 + 3), cv = (unsigned char)(e * 13 + 1);
            k[e] = (ck & 0x7f) == 0x7f ? 0 : ck;
            v[e] = (cv & 0x7f) == 0x7f ? 0 : cv;
        }
        check_kv_switched(portable, integer, &r);
        const size_t len = r.d.len_kv, dim = r.d.head_dim, heads = r.d.heads_kv;
        k[((1 * heads + 0) * len + 100) * dim + 5] = 0x7f; /* sequence 1, kv head 0, key 100 */
        v[((0 * heads + 1) * len + 120) * dim + 9] = 0xff; /* sequence 0, kv head 1, key 120 */
        check_kv_switched(portable, integer, &r);
        kv_free_run(&r);
    }
    fcl_context_destroy(integer);
    fcl_context_destroy(portable);
}

/* V of small or large values (its factors 2^-8 to 2^-18, or 2^18 and 2^20, times their usual
 * size): p times a small factor lies among f16's subnormals or below, p times a large one
 * past f16's largest value, so the tensor-core paths, which round the weights times V's
 * factors to f16 (or, for float32 q, to two f16 parts), scale them by a power of two first.
 * The 8-bit decode kernel (f16 and float32 q) and the prefill _kv builds; int8 V with TOKEN
 * scales, q8_0 and q4_1 V (d, and m; their d are f16, which limits them to small). */
static void test_kv_v_factor_range(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    static const struct {
        int prefill;
        fcl_dtype q;
        fcl_kv_format v;
        int exponent;
    } cases[] = {
        {0, FCL_DTYPE_F16, FCL_KV_INT8, -18}, {0, FCL_DTYPE_F16, FCL_KV_Q8_0, -12},
        {0, FCL_DTYPE_F32, FCL_KV_INT8, -12}, {0, FCL_DTYPE_F32, FCL_KV_Q8_0, -8},
        {0, FCL_DTYPE_F32, FCL_KV_Q4_1, -8},  {1, FCL_DTYPE_F16, FCL_KV_INT8, -18},
        {1, FCL_DTYPE_F32, FCL_KV_INT8, -12}, {1, FCL_DTYPE_F32, FCL_KV_Q8_0, -8},
        {1, FCL_DTYPE_F32, FCL_KV_Q4_1, -8},  {0, FCL_DTYPE_F16, FCL_KV_INT8, 18},
        {0, FCL_DTYPE_F32, FCL_KV_INT8, 20},  {1, FCL_DTYPE_F16, FCL_KV_INT8, 18},
        {1, FCL_DTYPE_F32, FCL_KV_INT8, 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attention_run r = {.d = cases[i].prefill ? kv_prefill : kv_rows};
        r.d.dtype_q = cases[i].q, r.d.dtype_kv = FCL_DTYPE_F16;
        r.d.format_k = FCL_KV_Q8_0, r.d.format_v = cases[i].v;
        attention_contiguous_inputs(&r);
        kv_recode(&r, KV_FROM_DATA);
        if (cases[i].v == FCL_KV_INT8)
            kv_add_scales(&r, 1, FCL_KV_SCALE_TOKEN);
        kv_scale_v_factors(&r, cases[i].exponent);
        r.out_size = ldexp(1.0, cases[i].exponent > 0 ? cases[i].exponent : 0);
        check_both(portable, &r, FCL_ATTENTION_PATH_MMA);
        kv_free_run(&r);
    }
    fcl_context_destroy(portable);
}

/* GQA decoding over coded K/V under a mask, on the 8-bit decode kernel (f16 and float32 q)
 * and, switched off, on what serves it then (the _kv build's rows; float32 q: its prefill
 * build): llama.cpp's f16 mask, one row a sequence for every head (head stride 0), and
 * boolean and float32 masks of each head, with softcap, a split and TOKEN scales. */
static void test_kv_decode_masked(void **state)
{
    (void)state;
    fcl_context *portable = portable_context(), *without = tuned_context("attention_kv_decode=0");
    const fcl_attention_desc base = {.batch = 3, .heads_q = 8, .heads_kv = 2, .len_q = 1,
                                     .len_kv = 300, .head_dim = 128, .softcap = 20.0f,
                                     .kv_splits = 2, .causal = FCL_CAUSAL_BOTTOM_RIGHT};
    static const struct {
        fcl_dtype q;
        fcl_kv_format k, v;
        fcl_mask_type mask;
        int every_head; /* one mask row a sequence for every head */
        fcl_kv_scale k_mode;
    } cases[] = {
        {FCL_DTYPE_F16, FCL_KV_Q8_0, FCL_KV_Q4_0, FCL_MASK_ADD_F16, 1, FCL_KV_SCALE_NONE},
        {FCL_DTYPE_F32, FCL_KV_Q8_0, FCL_KV_Q8_0, FCL_MASK_ADD_F16, 1, FCL_KV_SCALE_NONE},
        {FCL_DTYPE_F16, FCL_KV_FP8_E4M3, FCL_KV_INT8, FCL_MASK_BOOL_U8, 0, FCL_KV_SCALE_TOKEN},
        {FCL_DTYPE_F32, FCL_KV_INT8, FCL_KV_Q5_1, FCL_MASK_ADD_F32, 0, FCL_KV_SCALE_TOKEN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attention_run r = {.d = base};
        r.d.dtype_q = cases[i].q, r.d.format_k = cases[i].k, r.d.format_v = cases[i].v;
        attention_contiguous_inputs(&r);
        kv_recode(&r, KV_FROM_DATA);
        if (cases[i].k_mode)
            kv_add_scales(&r, 0, cases[i].k_mode);
        attention_mask(&r, cases[i].mask);
        if (cases[i].every_head)
            r.d.mask_stride_head = 0;
        check_kv_switched(portable, without, &r);
        kv_free_run(&r);
    }
    fcl_context_destroy(without);
    fcl_context_destroy(portable);
}

/* GQA decoding over coded K/V with the features of the query's head and position
 * (add_head_features), three splits of which the window leaves two empty (merged in the
 * kernel), on the 8-bit decode kernel's build for q8_0, for any format (float32 q) and its
 * direct build (int8), and switched off, on the _kv builds' rows (f16 q) or prefill (float32
 * q). */
static void test_kv_decode_head_features(void **state)
{
    (void)state;
    fcl_context *portable = portable_context(), *without = tuned_context("attention_kv_decode=0");
    static const struct {
        fcl_dtype q;
        fcl_kv_format k, v;
        int features;
    } cases[] = {{FCL_DTYPE_F16, FCL_KV_Q8_0, FCL_KV_Q8_0, ROWS_SINKS | ROWS_WINDOW},
                 {FCL_DTYPE_F32, FCL_KV_Q4_0, FCL_KV_Q8_0, ROWS_SINKS | ROWS_ALIBI},
                 {FCL_DTYPE_F16, FCL_KV_INT8, FCL_KV_INT8, ROWS_WINDOW | ROWS_ALIBI_MASK}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attention_run r = {.d = {.batch = 2, .heads_q = 8, .heads_kv = 2, .len_q = 1,
                                 .len_kv = 500, .head_dim = 128, .kv_splits = 3,
                                 .causal = FCL_CAUSAL_BOTTOM_RIGHT, .dtype_q = cases[i].q,
                                 .format_k = cases[i].k, .format_v = cases[i].v}};
        kv_case_inputs(&r, KV_FROM_DATA, FCL_KV_SCALE_NONE,
                       cases[i].v == FCL_KV_INT8 ? FCL_KV_SCALE_TOKEN : FCL_KV_SCALE_NONE, 0);
        add_head_features(&r, cases[i].features);
        check_kv_switched(portable, without, &r);
        kv_free_run(&r);
    }
    fcl_context_destroy(without);
    fcl_context_destroy(portable);
}

/* The 8-bit decode kernel's direct build (f16 q, int8 and fp8 K and V, rows at multiples of
 * 16 bytes, head dims 64 and 128) against the float64 reference and, switched off
 * (FLASHCL_TUNE=attention_kv_direct=0: the staged copies), the same calls: head dims 128 and
 * 64 (whose V copies take 16 and 8 bytes a lane), HEAD, TOKEN and no scales, raw bytes, NaN and
 * infinite V codes (the slow path, which reads V's codes from the lanes' slots),
 * softcap and a split, f16 and boolean masks, a shuffled paged cache with lengths 290, 0 and
 * 37 (int8 K with TOKEN scales), a length that ends inside a chunk. */
static void test_kv_decode_direct(void **state)
{
    (void)state;
    fcl_context *portable = portable_context(), *staged = tuned_context("attention_kv_direct=0");
    const fcl_kv_scale none = FCL_KV_SCALE_NONE;
    static const struct {
        size_t dim, len_kv;
        fcl_kv_format k, v;
        kv_fill fill;
        fcl_kv_scale k_mode, v_mode;
        int nonfinite; /* a NaN (E4M3) or infinite (E5M2) V code (kv_case_inputs') */
        fcl_mask_type mask;
    } cases[] = {
        {128, 300, FCL_KV_INT8, FCL_KV_INT8, KV_FROM_DATA, FCL_KV_SCALE_TOKEN,
         FCL_KV_SCALE_TOKEN, 0, FCL_MASK_NONE},
        {128, 300, FCL_KV_FP8_E4M3, FCL_KV_FP8_E4M3, KV_RAW, none, FCL_KV_SCALE_TOKEN, 1,
         FCL_MASK_NONE},
        {64, 77, FCL_KV_FP8_E5M2, FCL_KV_INT8, KV_FROM_DATA, FCL_KV_SCALE_HEAD,
         FCL_KV_SCALE_TOKEN, 0, FCL_MASK_ADD_F16},
        {128, 300, FCL_KV_INT8, FCL_KV_FP8_E5M2, KV_RAW, FCL_KV_SCALE_HEAD, none,
         1, FCL_MASK_NONE},
        {64, 300, FCL_KV_FP8_E4M3, FCL_KV_INT8, KV_FROM_DATA, none,
         FCL_KV_SCALE_HEAD, 0, FCL_MASK_BOOL_U8},
        {64, 300, FCL_KV_FP8_E5M2, FCL_KV_FP8_E5M2, KV_RAW, none, none, 1,
         FCL_MASK_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attention_run r = {.d = kv_rows};
        r.d.dtype_q = FCL_DTYPE_F16, r.d.head_dim = cases[i].dim, r.d.len_kv = cases[i].len_kv;
        r.d.format_k = cases[i].k, r.d.format_v = cases[i].v;
        r.d.softcap = i % 2 ? 20.0f : 0.0f;
        kv_case_inputs(&r, cases[i].fill, cases[i].k_mode, cases[i].v_mode, cases[i].nonfinite);
        if (cases[i].mask)
            attention_mask(&r, cases[i].mask);
        check_kv_switched(portable, staged, &r);
        kv_free_run(&r);
    }
    fcl_attention_desc paged = kv_rows;
    paged.dtype_q = FCL_DTYPE_F16;
    check_kv_paged(portable, paged, FCL_KV_INT8);
    paged.head_dim = 64;
    check_kv_paged(portable, paged, FCL_KV_FP8_E4M3);
    fcl_context_destroy(staged);
    fcl_context_destroy(portable);
}

/* The 8-bit decode kernel's key splits merged by the group that ends each row set's last split
 * (FA_FLAG_MERGE_LAST) against the float64 reference, the portable kernels and, switched off
 * (FLASHCL_TUNE=attention_merge_in_kernel=0: the merge kernel), the same calls, to the
 * last bits the two merges' roundings allow: the direct build (int8, 7 splits, sinks, one
 * -inf), the staged build (q8_0 K, q4_0 V, 12 splits, HEAD scales), float32 q (fp8, 3
 * splits) and the planner's splits of a 4096-key cache. Each call runs several times on a
 * context, so that counts a call left behind would fail the next. */
static void test_kv_decode_merge_in_kernel(void **state)
{
    (void)state;
    fcl_context *portable = portable_context();
    fcl_context *unmerged = tuned_context("attention_merge_in_kernel=0");
    static const struct {
        fcl_dtype q;
        fcl_kv_format k, v;
        size_t splits, len_kv;
        fcl_kv_scale k_mode;
        int sinks;
    } cases[] = {
        {FCL_DTYPE_F16, FCL_KV_INT8, FCL_KV_INT8, 7, 300, FCL_KV_SCALE_TOKEN, 1},
        {FCL_DTYPE_F16, FCL_KV_Q8_0, FCL_KV_Q4_0, 12, 300, FCL_KV_SCALE_NONE, 0},
        {FCL_DTYPE_F32, FCL_KV_FP8_E4M3, FCL_KV_FP8_E4M3, 3, 300, FCL_KV_SCALE_HEAD, 0},
        {FCL_DTYPE_F16, FCL_KV_FP8_E5M2, FCL_KV_INT8, 0, 4096, FCL_KV_SCALE_NONE, 1},
    };
    float sinks[8] = {0.5f, -INFINITY, 2.0f, -1.0f, 0.0f, 3.0f, -2.5f, 1.0f};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attention_run r = {.d = kv_rows};
        r.d.dtype_q = cases[i].q, r.d.format_k = cases[i].k, r.d.format_v = cases[i].v;
        r.d.kv_splits = cases[i].splits, r.d.len_kv = cases[i].len_kv;
        kv_case_inputs(&r, KV_FROM_DATA, cases[i].k_mode, FCL_KV_SCALE_NONE, 0);
        if (cases[i].sinks)
            r.io.sinks = sinks;
        check_both(portable, &r, FCL_ATTENTION_PATH_MMA);
        if (mma_expected()) {
            check_attention_run_on(unmerged, &r);
            const chk_tolerance tight = {.atol = 1e-6, .rtol = 1e-5, .nmse = 1e-12};
            char what[80];
            snprintf(what, sizeof what, "case %zu: merged in the kernel and by the merge kernel", i);
            check_agree(unmerged, &r, NULL, tight, what);
        }
        r.io.sinks = NULL;
        kv_free_run(&r);
    }
    fcl_context_destroy(unmerged);
    fcl_context_destroy(portable);
}

/* c on the test context (softmax_nv where the device has it: the shape is one it takes) and
 * on the portable one, on the same input: each against the float64 reference
 * (run_softmax_case_on), and the two against each other. */
static void check_softmax_both(fcl_context *portable, softmax_case c)
{
    const size_t n = c.rows * c.cols;
    float *fast = malloc(n * sizeof(float)), *slow = malloc(n * sizeof(float));
    double *want = malloc(n * sizeof(double));
    assert_true(fast && slow && want);
    const chk_rng same_input = *support_rng();
    run_softmax_case_on(support_ctx, &c, fast);
    *support_rng() = same_input;
    run_softmax_case_on(portable, &c, slow);
    for (size_t e = 0; e < n; e++)
        want[e] = slow[e];
    chk_report rep;
    if (!chk_compare(fast, FCL_DTYPE_F32, c.rows, c.cols, c.cols, want,
                     chk_softmax_tolerance(c.dtype), &rep))
        fail_msg("softmax %zux%zu %s: NVIDIA and portable kernels differ at %zu of %zu, first "
                 "%lld: %.9g vs %.9g", c.rows, c.cols, chk_dtype_name(c.dtype), rep.bad,
                 rep.checked, (long long)rep.first_bad, rep.got, rep.want);
    free(fast), free(slow), free(want);
}

/* NVIDIA's softmax (cl/softmax_nv.cl) is used where the NVIDIA kernels are and not when
 * switched off; in every storage type, FUSED from rows of one 16-byte vector to the longest it
 * holds (a work-group a row), with spare work-items in the last pass (in a warp of live rows,
 * whole warps, warps of a row shared by several), ONLINE and SPLIT (forced, and AUTO's choice
 * for longer rows; a short last batch), hard values (rows of -inf, NaN, +inf, +-1e30), padded
 * rows, in place, log, and ggml's soft_max_ext (a float16 mask per row, ALiBi, sinks, lse). */
static void test_softmax_nv_matches(void **state)
{
    (void)state;
    const char *tune = getenv("FLASHCL_TUNE");
    const int expected = mma_expected() && !(tune && strstr(tune, "softmax_nv=0"));
    assert_int_equal(support_info.softmax_nv_cols > 0, expected);
    fcl_context *portable = portable_context();
    fcl_device_info off;
    assert_int_equal(fcl_context_device_info(portable, &off), FCL_SUCCESS);
    assert_int_equal(off.softmax_nv_cols, 0);
    if (!expected) { /* both contexts run the portable kernels, test_softmax's */
        fcl_context_destroy(portable);
        return;
    }
    const size_t longest = support_info.softmax_nv_cols;
    const size_t shapes[][3] = {/* rows, cols, algo */
                                {3, 8, 0}, {4999, 128, 0}, {37, 1000, 0}, {9, 4096, 0},
                                {3, longest, 0}, {37, 1000, FCL_SOFTMAX_ONLINE},
                                {37, 1000, FCL_SOFTMAX_SPLIT}, {280, 12000, 0}, {2, 200000, 0}};
    for (int t = FCL_DTYPE_F32; t <= FCL_DTYPE_BF16; t++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            softmax_case c = {.rows = shapes[k][0], .cols = shapes[k][1], .dtype = (fcl_dtype)t,
                              .algo = (fcl_softmax_algo)shapes[k][2]};
            check_softmax_both(portable, c);
            c.fill = k % 2 ? FILL_SPECIAL : FILL_HUGE;
            c.in_pad = 8;
            c.out_pad = 16;
            c.log = k == 2;
            check_softmax_both(portable, c);
            c.fill = FILL_WIDE;
            c.in_place = 1;
            c.mask = MASK_PER_ROW;
            c.mask_f16 = 1;
            c.heads = 4;
            c.head_rows = 1;
            c.alibi = k % 2;
            c.sinks = 1;
            check_softmax_both(portable, c);
        }
    fcl_context_destroy(portable);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mma_path_is_planned_where_it_runs),
        cmocka_unit_test(test_mma_prefill_matches),
        cmocka_unit_test(test_mma_f32_infinite_input),
        cmocka_unit_test(test_mma_features_match),
        cmocka_unit_test(test_decode_nv_matches),
        cmocka_unit_test(test_decode_nv_features_match),
        cmocka_unit_test(test_gqa_decode_rows_match),
        cmocka_unit_test(test_mma_kv_matches),
        cmocka_unit_test(test_kv_decode_f32_q_matches),
        cmocka_unit_test(test_mma_kv_f32_q_matches),
        cmocka_unit_test(test_mma_kv_even_rows),
        cmocka_unit_test(test_kv_decode_masked),
        cmocka_unit_test(test_kv_decode_head_features),
        cmocka_unit_test(test_kv_decode_direct),
        cmocka_unit_test(test_kv_decode_merge_in_kernel),
        cmocka_unit_test(test_mma_kv_fixed_formats),
        cmocka_unit_test(test_kv_v_factor_range),
        cmocka_unit_test(test_fp8_e4m3_conversions),
        cmocka_unit_test(test_softmax_nv_matches),
    };
    return support_run_tests(tests);
}

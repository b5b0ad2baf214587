/* Attention on the default device (POCL in CI) against the float64 reference. */
#include "internal.h" /* to set a loop-iteration cap in a context's description */
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum mask_layout {
    MASK_FULL,       /* a row per (batch, head, query) */
    MASK_BROADCAST,  /* one [len_q][len_kv] block shared by every batch and head, padded rows */
    MASK_ONE_ROW     /* one key row for everything (all strides 0) */
} mask_layout;

typedef struct attention_case {
    fcl_attention_desc d;
    mask_layout mask_layout;
    size_t check_rows; /* 0: every query row; else this many rows spread over the output */
    size_t nan_row;    /* 1 + the query row of (0, 0) whose q gets a NaN; 0: none */
} attention_case;

/* -inf blocks, and every 5th query row fully masked. */
static int mask_hides(size_t i, size_t j) { return i % 5 == 4 || (j / 7) % 3 == 1; }

static void *make_mask(const fcl_attention_desc *d, mask_layout how, fcl_attention_desc *with)
{
    size_t rows = d->batch * d->heads_q * d->len_q, n;
    *with = *d;
    if (how == MASK_FULL) {
        with->mask_stride_q = d->len_kv;
        with->mask_stride_head = d->len_q * d->len_kv;
        with->mask_stride_batch = d->heads_q * d->len_q * d->len_kv;
        n = rows * d->len_kv;
    } else if (how == MASK_BROADCAST) {
        with->mask_stride_q = d->len_kv + 3;
        with->mask_stride_batch = with->mask_stride_head = 0;
        n = d->len_q * with->mask_stride_q;
    } else {
        with->mask_stride_q = with->mask_stride_head = with->mask_stride_batch = 0;
        n = d->len_kv;
    }
    int is_bool = d->mask_type == FCL_MASK_BOOL_U8;
    void *mask = malloc(n * (is_bool ? 1 : sizeof(float)));
    assert_non_null(mask);
    size_t row_len = with->mask_stride_q ? with->mask_stride_q : d->len_kv;
    for (size_t e = 0; e < n; e++) {
        size_t i = (e / row_len) % d->len_q, j = e % row_len;
        int hide = how == MASK_ONE_ROW ? (j / 7) % 3 == 1 : mask_hides(i, j);
        if (is_bool)
            ((unsigned char *)mask)[e] = (unsigned char)(hide ? 0 : 1 + e % 200);
        else
            ((float *)mask)[e] = hide ? -INFINITY : (float)chk_normal(support_rng());
    }
    return mask;
}

static size_t mask_bytes(const fcl_attention_desc *d)
{
    size_t n = (d->batch - 1) * d->mask_stride_batch + (d->heads_q - 1) * d->mask_stride_head +
               (d->len_q - 1) * d->mask_stride_q + d->len_kv;
    return n * (d->mask_type == FCL_MASK_BOOL_U8 ? 1 : sizeof(float));
}

static void *random_tensor(size_t n, fcl_dtype t)
{
    void *p = chk_random_tensor(n, t, support_rng());
    assert_non_null(p);
    return p;
}

/* Runs c and checks it against the reference; returns the output as doubles in
 * [batch][head][query][dim] order (the caller frees it). */
static double *run_attention_case(const attention_case *c)
{
    fcl_attention_desc d = chk_attention_defaults(c->d);
    size_t qn = d.batch * d.heads_q * d.len_q * d.head_dim;
    size_t kn = d.batch * d.heads_kv * d.len_kv * d.head_dim;
    size_t vn = d.batch * d.heads_kv * d.len_kv * d.head_dim_v;
    size_t rows = d.batch * d.heads_q * d.len_q, on = rows * d.head_dim_v;
    void *q = random_tensor(qn, d.dtype_q), *k = random_tensor(kn, d.dtype_kv);
    void *v = random_tensor(vn, d.dtype_kv), *mask = NULL;
    if (c->nan_row)
        chk_store(q, d.dtype_q,
                  chk_attention_offset(d.layout, d.heads_q, d.len_q, d.head_dim, 0, 0,
                                       c->nan_row - 1) + d.head_dim / 2, NAN);
    if (d.mask_type != FCL_MASK_NONE)
        mask = make_mask(&d, c->mask_layout, &d);
    void *out = malloc(on * chk_dtype_size(d.dtype_o)), *q_copy = malloc(qn * chk_dtype_size(d.dtype_q));
    float *lse = malloc(rows * sizeof(float));
    double *got = calloc(on, sizeof(double)), *got_lse = calloc(rows, sizeof(double));
    double *want = calloc(on, sizeof(double)), *want_lse = calloc(rows, sizeof(double));
    void *mask_copy = mask ? malloc(mask_bytes(&d)) : NULL;
    assert_true(out && q_copy && lse && got && got_lse && want && want_lse && (!mask || mask_copy));
    memcpy(q_copy, q, qn * chk_dtype_size(d.dtype_q));
    if (mask)
        memcpy(mask_copy, mask, mask_bytes(&d));

    fcl_attention_desc call = c->d; /* the caller's zeros, as a user would pass them */
    call.mask_stride_batch = d.mask_stride_batch;
    call.mask_stride_head = d.mask_stride_head;
    call.mask_stride_q = d.mask_stride_q;
    fcl_status s = fcl_attention_host(support_ctx, &call, q, k, v, mask, out, lse);
    if (s != FCL_SUCCESS)
        fail_msg("fcl_attention_host: %s: %s", fcl_status_string(s),
                 fcl_context_last_error(support_ctx));
    assert_memory_equal(q, q_copy, qn * chk_dtype_size(d.dtype_q));
    if (mask)
        assert_memory_equal(mask, mask_copy, mask_bytes(&d));

    /* Gather the checked rows, in [batch][head][query] order. */
    size_t step = c->check_rows ? (rows + c->check_rows - 1) / c->check_rows : 1, checked = 0;
    for (size_t row = 0; row < rows; row += step, checked++) {
        size_t b = row / (d.heads_q * d.len_q), h = (row / d.len_q) % d.heads_q, i = row % d.len_q;
        size_t oo = chk_attention_offset(d.layout, d.heads_q, d.len_q, d.head_dim_v, b, h, i);
        for (size_t e = 0; e < d.head_dim_v; e++)
            got[checked * d.head_dim_v + e] = chk_load(out, d.dtype_o, oo + e);
        chk_attention_row(&d, q, k, v, mask, b, h, i, want + checked * d.head_dim_v,
                          &want_lse[checked]);
        got_lse[checked] = lse[row];
    }
    chk_report rep;
    if (!chk_compare_values(got, want, checked * d.head_dim_v, chk_attention_tolerance(&d), &rep))
        fail_msg("attention B%zu Hq%zu Hkv%zu Lq%zu Lkv%zu D%zu Dv%zu causal %d mask %d layout %d "
                 "types %d%d%d splits %zu: %zu of %zu off, first %lld got %.7g want %.7g, "
                 "max|err| %.3g NMSE %.3g",
                 d.batch, d.heads_q, d.heads_kv, d.len_q, d.len_kv, d.head_dim, d.head_dim_v,
                 d.causal, d.mask_type, d.layout, d.dtype_q, d.dtype_kv, d.dtype_o, d.kv_splits,
                 rep.bad, rep.checked, (long long)rep.first_bad, rep.got, rep.want,
                 rep.max_abs_err, rep.nmse);
    chk_tolerance lse_tol = {0.0, 1e-5, 1.0};
    for (size_t r = 0; r < checked; r++)
        if (fabs(want_lse[r]) < 1.0)
            lse_tol.atol = 1e-5; /* relative above magnitude 1, absolute below */
    if (!chk_compare_values(got_lse, want_lse, checked, lse_tol, &rep))
        fail_msg("lse Lq%zu Lkv%zu D%zu causal %d: row %zu got %.9g want %.9g", d.len_q, d.len_kv,
                 d.head_dim, d.causal, rep.first_bad, rep.got, rep.want);

    /* The whole output as doubles, for callers comparing runs. */
    double *all = calloc(on, sizeof(double));
    assert_non_null(all);
    for (size_t row = 0; row < rows; row++) {
        size_t b = row / (d.heads_q * d.len_q), h = (row / d.len_q) % d.heads_q, i = row % d.len_q;
        size_t oo = chk_attention_offset(d.layout, d.heads_q, d.len_q, d.head_dim_v, b, h, i);
        for (size_t e = 0; e < d.head_dim_v; e++)
            all[row * d.head_dim_v + e] = chk_load(out, d.dtype_o, oo + e);
    }
    free(q);
    free(k);
    free(v);
    free(mask);
    free(mask_copy);
    free(out);
    free(q_copy);
    free(lse);
    free(got);
    free(got_lse);
    free(want);
    free(want_lse);
    return all;
}

static void run(attention_case c) { free(run_attention_case(&c)); }

#define BASE(lq, lk, dim) {.batch = 1, .heads_q = 2, .len_q = (lq), .len_kv = (lk), .head_dim = (dim)}

static void test_lengths(void **state)
{
    (void)state;
    static const size_t lens[] = {1, 3, 113, 1000};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            run((attention_case){.d = BASE(lens[a], lens[b], 64)});
}

static void test_head_dims(void **state)
{
    (void)state;
    static const size_t dims[] = {1, 40, 64, 72, 80, 96, 128, 256};
    for (int i = 0; i < 8; i++)
        run((attention_case){.d = BASE(77, 130, dims[i])});
    static const size_t dim_pairs[][2] = {{64, 32}, {40, 128}, {256, 16}, {1, 200}, {129, 64}};
    for (int i = 0; i < 5; i++) {
        attention_case c = {.d = BASE(50, 97, dim_pairs[i][0])};
        c.d.head_dim_v = dim_pairs[i][1];
        run(c);
    }
}

static void test_gqa(void **state)
{
    (void)state;
    static const size_t ratios[] = {1, 4, 8};
    for (int i = 0; i < 3; i++) {
        attention_case c = {.d = {.batch = 2, .heads_q = 8, .heads_kv = 8 / ratios[i],
                                  .len_q = 45, .len_kv = 70, .head_dim = 64}};
        run(c);
        c.d.layout = FCL_LAYOUT_BLHD;
        run(c);
    }
}

/* Causal both ways, len_q < len_kv and len_q > len_kv: bottom-right with len_q > len_kv
 * leaves the first len_q - len_kv queries with no visible key. */
static void test_causal(void **state)
{
    (void)state;
    static const size_t shapes[][2] = {{100, 100}, {37, 150}, {150, 37}, {1, 64}, {64, 1}};
    for (int s = 0; s < 5; s++)
        for (int causal = FCL_CAUSAL_TOP_LEFT; causal <= FCL_CAUSAL_BOTTOM_RIGHT; causal++) {
            attention_case c = {.d = BASE(shapes[s][0], shapes[s][1], 64)};
            c.d.causal = (fcl_causal)causal;
            run(c);
            c.d.kv_splits = 3;
            run(c);
        }
}

static void test_masks(void **state)
{
    (void)state;
    for (int type = FCL_MASK_ADD_F32; type <= FCL_MASK_BOOL_U8; type++)
        for (int how = MASK_FULL; how <= MASK_ONE_ROW; how++) {
            attention_case c = {.d = {.batch = 2, .heads_q = 3, .len_q = 41, .len_kv = 90,
                                      .head_dim = 32, .mask_type = (fcl_mask_type)type},
                                .mask_layout = (mask_layout)how};
            run(c);
            c.d.causal = FCL_CAUSAL_BOTTOM_RIGHT;
            c.d.layout = FCL_LAYOUT_BLHD;
            c.d.kv_splits = 2;
            run(c);
        }
}

static void test_layouts_and_scale(void **state)
{
    (void)state;
    attention_case c = {.d = {.batch = 3, .heads_q = 4, .heads_kv = 2, .len_q = 33, .len_kv = 65,
                              .head_dim = 80, .head_dim_v = 48, .layout = FCL_LAYOUT_BLHD}};
    run(c);
    c.d.scale = 0.3f;
    run(c);
    c.d.layout = FCL_LAYOUT_BHLD;
    c.d.scale = -0.05f;
    run(c);
}

/* Decode: one query, many keys. Every split count agrees with the reference and with the
 * unsplit result. */
static void test_split_kv(void **state)
{
    (void)state;
    attention_case c = {.d = {.batch = 2, .heads_q = 4, .heads_kv = 1, .len_q = 1,
                              .len_kv = 1000, .head_dim = 128}};
    chk_rng saved = *support_rng();
    c.d.kv_splits = 1;
    double *unsplit = run_attention_case(&c);
    static const size_t splits[] = {0, 2, 7, 32, 256};
    for (int i = 0; i < 5; i++) {
        *support_rng() = saved; /* the same inputs */
        c.d.kv_splits = splits[i];
        double *split = run_attention_case(&c);
        for (size_t e = 0; e < 2 * 4 * 128; e++)
            assert_true(fabs(split[e] - unsplit[e]) <= 2e-6);
        free(split);
    }
    free(unsplit);
    /* AUTO: one query tile cannot fill a device of several compute units alone. */
    fcl_attention_plan_info plan;
    c.d.kv_splits = 0;
    c.d.len_kv = 32768;
    c.d.batch = c.d.heads_q = c.d.heads_kv = 1;
    assert_int_equal(fcl_attention_plan(support_ctx, &c.d, &plan), FCL_SUCCESS);
    int one_tile_fills = (support_info.type & CL_DEVICE_TYPE_CPU) && support_info.compute_units == 1;
    assert_int_equal(plan.kv_splits > 1, !one_tile_fills);
    /* Forced: as many as asked, except where a driver's loop cap needs more (llvmpipe: a
     * work-item cannot walk 32768 keys of head_dim 128 within 65535 iterations). */
    c.d.kv_splits = 1;
    assert_int_equal(fcl_attention_plan(support_ctx, &c.d, &plan), FCL_SUCCESS);
    if (support_info.loop_iteration_cap)
        assert_true(plan.kv_splits > 1);
    else
        assert_int_equal(plan.kv_splits, 1);
}

static void test_storage_types(void **state)
{
    (void)state;
    for (int tq = 0; tq < 3; tq++)
        for (int tkv = 0; tkv < 3; tkv++)
            for (int to = 0; to < 3; to++) {
                attention_case c = {.d = BASE(37, 53, 40)};
                c.d.dtype_q = (fcl_dtype)tq;
                c.d.dtype_kv = (fcl_dtype)tkv;
                c.d.dtype_o = (fcl_dtype)to;
                c.d.kv_splits = (size_t)(tq + 1);
                run(c);
            }
}

/* A NaN in one query row makes that row NaN and no other. */
static void test_nan_stays_in_its_row(void **state)
{
    (void)state;
    run((attention_case){.d = BASE(20, 40, 16), .nan_row = 6});
    attention_case c = {.d = BASE(1, 500, 64), .nan_row = 1};
    c.d.kv_splits = 4;
    run(c);
}

/* Lengths up to 131072 on either side, where the other side is short. */
static void test_lengths_to_131072(void **state)
{
    (void)state;
    run((attention_case){.d = {.batch = 1, .heads_q = 2, .heads_kv = 1, .len_q = 1,
                               .len_kv = 131072, .head_dim = 64},
                         .check_rows = 2});
    attention_case c = {.d = {.batch = 1, .heads_q = 1, .len_q = 131072, .len_kv = 3,
                              .head_dim = 32, .causal = FCL_CAUSAL_BOTTOM_RIGHT},
                        .check_rows = 64};
    run(c); /* all but the last 3 queries see no key: 0 and lse -inf */
}

/* A driver's loop-iteration cap (llvmpipe's 65535; set in the shared context's description
 * where the driver has none): 20000 keys forced into one split take as many splits as the
 * cap needs, and agree with the reference. (On llvmpipe one split ends its loops early: an
 * error of 0.02 at this size.) */
static void test_loop_cap_splits_keys(void **state)
{
    (void)state;
    attention_case c = {.d = {.batch = 1, .heads_q = 2, .heads_kv = 1, .len_q = 3,
                              .len_kv = 20000, .head_dim = 64, .kv_splits = 1}};
    /* Only the cap is put back after: the calls' kernel builds write other fields. */
    const cl_uint cap = support_ctx->info.loop_iteration_cap;
    fcl_attention_plan_info plan;
    support_ctx->info.loop_iteration_cap = 65535;
    const fcl_status planned = fcl_attention_plan(support_ctx, &c.d, &plan);
    run(c);
    support_ctx->info.loop_iteration_cap = cap;
    assert_int_equal(planned, FCL_SUCCESS);
    assert_true(plan.kv_splits > 1);
}

/* The long case: 32768 x 32768 scores (4 GiB in float32) are never stored; the
 * device's largest allocation on POCL is 1 GiB. Rows spread over the output are checked. */
static void test_long_sequence(void **state)
{
    (void)state;
    attention_case c = {.d = {.batch = 1, .heads_q = 1, .len_q = 32768, .len_kv = 32768,
                              .head_dim = 64, .causal = FCL_CAUSAL_TOP_LEFT},
                        .check_rows = 48};
    run(c);
}

static void test_bad_descriptors(void **state)
{
    (void)state;
    float x[64] = {0}, out[64], lse[4];
    unsigned char m[64] = {0};
    const fcl_attention_desc ok = {.batch = 1, .heads_q = 2, .len_q = 2, .len_kv = 2,
                                   .head_dim = 8};
    fcl_attention_desc d;
#define EXPECT_REJECTED(desc, msk, needle)                                                      \
    do {                                                                                       \
        for (int i = 0; i < 64; i++)                                                           \
            out[i] = 5.0f;                                                                     \
        assert_int_equal(fcl_attention_host(support_ctx, &(desc), x, x, x, (msk), out, lse),   \
                         FCL_ERROR_INVALID_ARGUMENT);                                          \
        if (!strstr(fcl_context_last_error(support_ctx), (needle)))                            \
            fail_msg("\"%s\" does not name %s", fcl_context_last_error(support_ctx), (needle)); \
        for (int i = 0; i < 64; i++)                                                           \
            assert_true(out[i] == 5.0f);                                                       \
    } while (0)
    d = ok, d.heads_kv = 3, d.heads_q = 4;
    EXPECT_REJECTED(d, NULL, "heads_kv (3) must divide heads_q (4)");
    d = ok, d.head_dim = 0;
    EXPECT_REJECTED(d, NULL, "head_dim (0)");
    d = ok, d.head_dim = 577;
    EXPECT_REJECTED(d, NULL, "head_dim (577) must be between 1 and 576");
    d = ok, d.head_dim_v = 513;
    EXPECT_REJECTED(d, NULL, "head_dim_v (513) must be between 1 and 512");
    d = ok, d.len_kv = 0;
    EXPECT_REJECTED(d, NULL, "len_kv");
    d = ok, d.mask_type = FCL_MASK_ADD_F32;
    EXPECT_REJECTED(d, NULL, "mask is NULL but mask_type is set");
    d = ok;
    EXPECT_REJECTED(d, m, "mask_type is FCL_MASK_NONE");
    d = ok, d.mask_type = FCL_MASK_BOOL_U8, d.mask_stride_q = 1;
    EXPECT_REJECTED(d, m, "mask_stride_q (1) is smaller than len_kv (2)");
    d = ok, d.causal = (fcl_causal)5;
    EXPECT_REJECTED(d, NULL, "causal");
    d = ok, d.layout = (fcl_layout)2;
    EXPECT_REJECTED(d, NULL, "layout");
    d = ok, d.dtype_kv = (fcl_dtype)3;
    EXPECT_REJECTED(d, NULL, "dtype_kv");
    d = ok, d.scale = NAN;
    EXPECT_REJECTED(d, NULL, "scale");
    d = ok, d.kv_splits = 1000;
    EXPECT_REJECTED(d, NULL, "kv_splits");
    d = ok, d.batch = SIZE_MAX / 2;
    EXPECT_REJECTED(d, NULL, "must be at most 2147483647");
    d = ok, d.mask_type = FCL_MASK_ADD_F32, d.mask_stride_head = SIZE_MAX / 4;
    EXPECT_REJECTED(d, m, "overflow");
    d = ok;
    assert_int_equal(fcl_attention_host(support_ctx, &d, x, NULL, x, NULL, out, lse),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "k is NULL"));
    assert_int_equal(fcl_attention_host(support_ctx, NULL, x, x, x, NULL, out, lse),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_int_equal(fcl_attention(support_ctx, &d, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "q is NULL"));
#undef EXPECT_REJECTED
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lengths),       cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_gqa),           cmocka_unit_test(test_causal),
        cmocka_unit_test(test_masks),         cmocka_unit_test(test_layouts_and_scale),
        cmocka_unit_test(test_split_kv),      cmocka_unit_test(test_storage_types),
        cmocka_unit_test(test_nan_stays_in_its_row), cmocka_unit_test(test_bad_descriptors),
        cmocka_unit_test(test_lengths_to_131072), cmocka_unit_test(test_loop_cap_splits_keys),
        cmocka_unit_test(test_long_sequence),
    };
    return support_run_tests(tests);
}

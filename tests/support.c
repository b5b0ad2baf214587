#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "support.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

fcl_context *support_ctx;
fcl_device_info support_info;
static chk_rng rng;

int support_setup(void **state)
{
    (void)state;
    fcl_status s = fcl_context_create(NULL, &support_ctx);
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "context creation failed: %s: %s\n", fcl_status_string(s),
                fcl_context_last_error(NULL));
        return -1;
    }
    /* Softmax's kernels are built on first use: planning a call builds them, so that the
     * description holds the limits they report (the longest FUSED row, for one). */
    const fcl_softmax_desc any = {.rows = 1, .cols = 1};
    fcl_softmax_algo algo;
    if (fcl_softmax_plan(support_ctx, &any, &algo) != FCL_SUCCESS) {
        fprintf(stderr, "building the softmax kernels: %s\n", fcl_context_last_error(support_ctx));
        return -1;
    }
    fcl_context_device_info(support_ctx, &support_info);
    const char *seed = getenv("FLASHCL_TEST_SEED");
    rng = chk_rng_seeded(seed ? strtoull(seed, NULL, 10) : 0);
    printf("# device %s; FLASHCL_TEST_SEED=%llu\n", support_info.name,
           (unsigned long long)rng.state);
    return 0;
}

/* Whether name is one of the comma-separated names in list. */
static int listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p; p += strcspn(p, ","), p += *p == ',')
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* The length of the first name in list that names none of the tests (0: all do), at *at. */
static size_t unknown_name(const char *list, const struct CMUnitTest *tests, size_t count,
                           const char **at)
{
    for (const char *p = list; *p; p += strcspn(p, ","), p += *p == ',') {
        const size_t n = strcspn(p, ",");
        int known = n == 0;
        for (size_t i = 0; i < count && !known; i++)
            known = strlen(tests[i].name) == n && strncmp(p, tests[i].name, n) == 0;
        if (!known) {
            *at = p;
            return n;
        }
    }
    return 0;
}

int support_run_filtered(const char *group, const struct CMUnitTest *tests, size_t count)
{
    const char *bad;
    size_t bad_len;
    const char *skip = getenv("FLASHCL_TEST_SKIP"), *only = getenv("FLASHCL_TEST_ONLY");
    struct CMUnitTest *kept = malloc(count * sizeof *kept);
    size_t n = 0;
    if (!kept)
        return 1;
    for (size_t i = 0; i < count; i++)
        if (!(skip && listed(skip, tests[i].name)) && !(only && *only && !listed(only, tests[i].name)))
            kept[n++] = tests[i];
    if (skip && *skip)
        printf("# FLASHCL_TEST_SKIP=%s\n", skip);
    if (only && *only)
        printf("# FLASHCL_TEST_ONLY=%s\n", only);
    /* FLASHCL_TEST_ONLY names this program's tests, so a misspelt one fails (SKIP's list is
     * shared by several programs: ctest's rusticl runs skip test_long_sequence in each). */
    if (only && (bad_len = unknown_name(only, tests, count, &bad)) != 0) {
        fprintf(stderr, "# FLASHCL_TEST_ONLY names \"%.*s\", which is not a test of this program\n",
                (int)bad_len, bad);
        free(kept);
        return 1;
    }
    if (n == 0) { /* a misspelt name must not pass as an empty run */
        fprintf(stderr, "# FLASHCL_TEST_SKIP and FLASHCL_TEST_ONLY left no test of %s to run\n", group);
        free(kept);
        return 1;
    }
    int failed = _cmocka_run_group_tests(group, kept, n, support_setup, support_teardown);
    free(kept);
    return failed;
}

int support_small(void)
{
    const char *small = getenv("FLASHCL_TEST_SMALL");
    return small && strcmp(small, "1") == 0;
}

int support_teardown(void **state)
{
    (void)state;
    fcl_context_destroy(support_ctx);
    support_ctx = NULL;
    return 0;
}

chk_rng *support_rng(void) { return &rng; }

int algo_can_run(fcl_softmax_algo a, size_t cols)
{
    return a != FCL_SOFTMAX_FUSED || cols <= support_info.softmax_fused_max_cols;
}

static float special_value(size_t row, size_t j, size_t cols, chk_rng *r)
{
    float ordinary = (float)(3.0 * chk_normal(r));
    switch (row % 5) {
    case 0:
        return -INFINITY;
    case 1:
        return j == (row * 7919) % cols ? NAN : ordinary;
    case 2:
        return j % 3 == 0 ? -INFINITY : ordinary;
    case 3:
        return j == (row * 104729) % cols ? INFINITY : ordinary;
    default:
        return ordinary;
    }
}

static float fill_value(fill_kind f, size_t row, size_t j, size_t cols, chk_rng *r)
{
    switch (f) {
    case FILL_WIDE:
        return (float)(160.0 * chk_uniform(r) - 80.0);
    case FILL_HUGE: {
        double u = chk_uniform(r);
        return u < 0.1 ? 1e30f : u < 0.5 ? -1e30f : (float)chk_normal(r);
    }
    case FILL_TINY:
        return (float)(1e-30 * chk_normal(r));
    case FILL_SPECIAL:
        return special_value(row, j, cols, r);
    default:
        return (float)(3.0 * chk_normal(r));
    }
}

/* Per-row masks: blocks of -inf, and every 4th row fully masked. */
static float mask_value(mask_kind m, size_t row, size_t j, chk_rng *r)
{
    if (m == MASK_PER_ROW && (row % 4 == 3 || (j / 5) % 3 == 1))
        return -INFINITY;
    return (float)chk_normal(r);
}

#define PAD_SENTINEL 77.5f /* exact in every storage type (8 significant bits, as bf16) */

/* The per-head buffers of c (NULL where c has none; malloc'd). */
static float *softmax_sinks(const softmax_case *c, chk_rng *r)
{
    float *sinks = c->sinks ? malloc(c->heads * sizeof(float)) : NULL;
    for (size_t h = 0; sinks && h < c->heads; h++)
        sinks[h] = h % 4 == 1 ? -INFINITY : (float)(3.0 * chk_normal(r));
    return sinks;
}

static float *softmax_slopes(const softmax_case *c)
{
    float *slopes = c->alibi ? malloc(c->heads * sizeof(float)) : NULL;
    if (slopes) {
        assert_int_equal(fcl_alibi_slopes(c->heads, 8.0f, slopes), FCL_SUCCESS);
        if (c->heads > 2)
            slopes[c->heads - 1] = 0.0f; /* a -inf mask entry must stay -inf */
    }
    return slopes;
}

void run_softmax_case(const softmax_case *c, float *got_out)
{
    run_softmax_case_on(support_ctx, c, got_out);
}

void run_softmax_case_on(fcl_context *ctx, const softmax_case *c, float *got_out)
{
    chk_rng *r = support_rng();
    size_t esz = chk_dtype_size(c->dtype);
    fcl_dtype mask_dtype = c->mask_f16 ? FCL_DTYPE_F16 : FCL_DTYPE_F32;
    size_t in_stride = c->cols + c->in_pad, out_stride = c->in_place ? in_stride : c->cols + c->out_pad;
    size_t mask_stride = c->mask == MASK_PER_ROW ? c->cols + 3 : 0;
    size_t in_n = (c->rows - 1) * in_stride + c->cols, out_n = (c->rows - 1) * out_stride + c->cols;
    size_t mask_rows = c->mask_rows ? c->mask_rows : c->mask == MASK_PER_ROW ? c->rows : 1;
    size_t mask_row_len = mask_stride ? mask_stride : c->cols;
    size_t mask_n = (mask_rows - 1) * mask_row_len + c->cols;
    size_t mask_bytes = mask_n * chk_dtype_size(mask_dtype);
    fcl_softmax_desc d = {.rows = c->rows, .cols = c->cols, .in_stride = in_stride,
                          .out_stride = out_stride, .dtype = c->dtype, .scale = c->scale,
                          .log = c->log, .mask_stride = mask_stride, .algo = c->algo,
                          .heads = c->heads, .head_rows = c->head_rows,
                          .mask_rows = c->mask_rows, .mask_dtype = mask_dtype,
                          .alibi_from_mask = c->alibi};
    /* A forced algorithm the device cannot run is refused for the device's own reason (FUSED
     * on rows longer than its local memory holds; FUSED or ONLINE on rows no work-group takes
     * within the driver's loop-iteration cap), and nothing else is: limits come from the
     * device, never assumed. */
    fcl_softmax_algo planned;
    if (c->algo != FCL_SOFTMAX_AUTO && c->algo != FCL_SOFTMAX_SPLIT &&
        fcl_softmax_plan(ctx, &d, &planned) == FCL_ERROR_UNSUPPORTED) {
        const char *why = fcl_context_last_error(ctx);
        const int local_memory = c->algo == FCL_SOFTMAX_FUSED &&
                                 c->cols > support_info.softmax_fused_max_cols &&
                                 strstr(why, "local memory");
        const int loop_cap = support_info.loop_iteration_cap && strstr(why, "loop iterations");
        if (!local_memory && !loop_cap)
            fail_msg("%s refused %zux%zu: %s", fcl_softmax_algo_name(c->algo), c->rows, c->cols, why);
        assert_null(got_out); /* callers comparing algorithms choose shapes every one runs */
        return;
    }

    void *in = malloc(in_n * esz), *in_copy = malloc(in_n * esz);
    void *out = c->in_place ? in : malloc(out_n * esz);
    void *mask = c->mask ? malloc(mask_bytes) : NULL;
    void *mask_copy = c->mask ? malloc(mask_bytes) : NULL;
    float *lse = malloc(c->rows * sizeof(float));
    double *ref = malloc(c->rows * c->cols * sizeof(double));
    double *ref_lse = malloc(c->rows * sizeof(double));
    float *sinks = softmax_sinks(c, r), *slopes = softmax_slopes(c);
    assert_non_null(in);
    assert_non_null(in_copy);
    assert_non_null(out);
    assert_non_null(lse);
    assert_non_null(ref);
    assert_non_null(ref_lse);
    assert_true(!c->mask || (mask && mask_copy));
    assert_true(!c->sinks || sinks);
    assert_true(!c->alibi || slopes);

    for (size_t i = 0; i < in_n; i++)
        chk_store(in, c->dtype, i, PAD_SENTINEL);
    for (size_t row = 0; row < c->rows; row++)
        for (size_t j = 0; j < c->cols; j++)
            chk_store(in, c->dtype, row * in_stride + j, fill_value(c->fill, row, j, c->cols, r));
    if (!c->in_place)
        for (size_t i = 0; i < out_n; i++)
            chk_store(out, c->dtype, i, PAD_SENTINEL);
    for (size_t i = 0; c->mask && i < mask_n; i++)
        chk_store(mask, mask_dtype, i, mask_value(c->mask, i / mask_row_len, i % mask_row_len, r));
    memcpy(in_copy, in, in_n * esz);
    if (mask)
        memcpy(mask_copy, mask, mask_bytes);
    const fcl_softmax_host_io io = {.in = in, .mask = mask, .out = out, .lse = lse,
                                    .sinks = sinks, .alibi_slopes = slopes};
    chk_softmax_reference(&d, &io, ref, ref_lse);

    fcl_status s = fcl_softmax_run_host(ctx, &d, &io);
    if (s != FCL_SUCCESS)
        fail_msg("fcl_softmax_run_host: %s: %s", fcl_status_string(s),
                 fcl_context_last_error(ctx));

    const char *what = "softmax";
    chk_report rep;
    if (!chk_compare(out, c->dtype, c->rows, c->cols, out_stride, ref,
                     chk_softmax_tolerance(c->dtype), &rep))
        fail_msg("%s %zux%zu %s %s log=%d heads %zu sinks %d alibi %d: %zu of %zu out of "
                 "tolerance, first at %lld: got %.9g want %.9g; NMSE %.3g",
                 what, c->rows, c->cols, chk_dtype_name(c->dtype), fcl_softmax_algo_name(c->algo),
                 c->log, c->heads, c->sinks, c->alibi, rep.bad, rep.checked, (long long)rep.first_bad, rep.got, rep.want, rep.nmse);
    if (!chk_compare_lse(lse, ref_lse, c->rows, &rep))
        fail_msg("lse %zux%zu %s: row %zu got %.9g want %.9g", c->rows, c->cols,
                 fcl_softmax_algo_name(c->algo), rep.first_bad, rep.got, rep.want);
    /* Padding of out (and of in, in place) is untouched; inputs are unmodified. */
    for (size_t row = 0; row + 1 < c->rows; row++)
        for (size_t j = c->cols; j < out_stride; j++)
            if (chk_load(out, c->dtype, row * out_stride + j) != PAD_SENTINEL)
                fail_msg("padding of out written at row %zu column %zu", row, j);
    if (!c->in_place && memcmp(in, in_copy, in_n * esz) != 0)
        fail_msg("the input was modified");
    if (mask && memcmp(mask, mask_copy, mask_bytes) != 0)
        fail_msg("the mask was modified");
    if (got_out)
        for (size_t row = 0; row < c->rows; row++)
            for (size_t j = 0; j < c->cols; j++)
                got_out[row * c->cols + j] = chk_load(out, c->dtype, row * out_stride + j);

    free(in);
    free(in_copy);
    if (!c->in_place)
        free(out);
    free(mask);
    free(mask_copy);
    free(lse);
    free(ref);
    free(ref_lse);
    free(sinks);
    free(slopes);
}

/* ---- attention ---- */

#define ATTENTION_SENTINEL 777.0f /* what out and lse hold where nothing may be written */

void *test_tensor(size_t n, fcl_dtype t)
{
    void *p = chk_random_tensor(n ? n : 1, t, support_rng());
    assert_non_null(p);
    return p;
}

static void *copy_of(const void *p, size_t bytes)
{
    if (!p)
        return NULL;
    void *c = malloc(bytes ? bytes : 1);
    assert_non_null(c);
    memcpy(c, p, bytes);
    return c;
}

static size_t mask_bytes_per(fcl_mask_type t)
{
    return t == FCL_MASK_BOOL_U8 ? 1 : t == FCL_MASK_ADD_F16 ? 2 : 4;
}

static size_t total_of(const int32_t *cu, size_t batch) { return cu ? (size_t)cu[batch] : 0; }

/* lse index of query i of (b, h). */
static size_t lse_index(const attention_run *r, const chk_attention_where *w, size_t b, size_t h,
                        size_t i)
{
    if (r->io.cu_seqlens_q)
        return h * total_of(r->io.cu_seqlens_q, r->d.batch) + w->q_start + i;
    return (b * r->d.heads_q + h) * r->d.len_q + i;
}

/* Runs r through fcl_attention_run_host and checks every row of every sequence against the
 * reference, the untouched parts of out and lse, and the inputs. */
void check_attention_run(attention_run *r) { check_attention_run_on(support_ctx, r); }

chk_tolerance attention_run_tolerance(const attention_run *r)
{
    const fcl_attention_desc d = chk_attention_defaults(r->d);
    chk_tolerance tol = chk_attention_tolerance(&d);
    if (r->out_size > 0.0)
        tol.atol *= r->out_size;
    return tol;
}

double *attention_out_sizes(const attention_run *r)
{
    const fcl_attention_desc d = chk_attention_defaults(r->d);
    double *sizes = calloc(r->out_n + 1, sizeof(double));
    double *row = malloc(d.head_dim_v * sizeof(double)), lse;
    assert_true(sizes && row);
    for (size_t b = 0; b < d.batch; b++)
        for (size_t h = 0; h < d.heads_q; h++)
            for (size_t i = 0; i < chk_attention_locate(&d, &r->io, b).len_q; i++) {
                const size_t at = chk_attention_q_at(&d, &r->io, 1, b, h, i);
                assert_true(at + d.head_dim_v <= r->out_n);
                chk_attention_row_sized(&d, &r->io, b, h, i, row, sizes + at, &lse);
            }
    free(row);
    return sizes;
}

/* The path fcl_attention_plan names for d on ctx, for a failure's message ("?" where the plan
 * fails), so that it says which kernels were off. */
static const char *planned_path(fcl_context *ctx, const fcl_attention_desc *d)
{
    fcl_attention_plan_info info;
    return fcl_attention_plan(ctx, d, &info) == FCL_SUCCESS ? fcl_attention_path_name(info.path)
                                                            : "?";
}

void check_attention_run_on(fcl_context *ctx, attention_run *r)
{
    const fcl_attention_desc d = chk_attention_defaults(r->d);
    const size_t so = chk_dtype_size(d.dtype_o);
    void *out = malloc(r->out_n * so);
    float *lse = malloc((r->lse_n ? r->lse_n : 1) * sizeof(float));
    unsigned char *written = calloc(r->out_n, 1), *lse_written = calloc(r->lse_n + 1, 1);
    assert_true(out && lse && written && lse_written);
    for (size_t e = 0; e < r->out_n; e++)
        chk_store(out, d.dtype_o, e, ATTENTION_SENTINEL);
    for (size_t e = 0; e < r->lse_n; e++)
        lse[e] = ATTENTION_SENTINEL;
    const size_t sq = chk_dtype_size(d.dtype_q);
    const size_t sk = chk_kv_unit_bytes(chk_kv_format(d.format_k, d.dtype_kv));
    const size_t sv = chk_kv_unit_bytes(chk_kv_format(d.format_v, d.dtype_kv));
    void *q0 = copy_of(r->io.q, r->q_n * sq), *k0 = copy_of(r->io.k, r->k_n * sk);
    void *v0 = copy_of(r->io.v, r->v_n * sv);
    void *ks0 = copy_of(r->io.k_scales, r->ks_n * sizeof(float));
    void *vs0 = copy_of(r->io.v_scales, r->vs_n * sizeof(float));
    void *m0 = copy_of(r->io.mask, r->mask_n * mask_bytes_per(d.mask_type));

    fcl_attention_host_io io = r->io;
    io.out = out;
    io.lse = r->lse_n ? lse : NULL;
    fcl_status s = fcl_attention_run_host(ctx, &r->d, &io);
    if (s != FCL_SUCCESS)
        fail_msg("fcl_attention_run_host: %s: %s", fcl_status_string(s), fcl_context_last_error(ctx));

    size_t rows = 0;
    for (size_t b = 0; b < d.batch; b++)
        rows += chk_attention_locate(&d, &io, b).len_q * d.heads_q;
    double *got = calloc(rows * d.head_dim_v + 1, sizeof(double));
    double *want = calloc(rows * d.head_dim_v + 1, sizeof(double));
    double *sizes = calloc(rows * d.head_dim_v + 1, sizeof(double));
    double *got_lse = calloc(rows + 1, sizeof(double)), *want_lse = calloc(rows + 1, sizeof(double));
    assert_true(got && want && sizes && got_lse && want_lse);
    size_t n = 0;
    for (size_t b = 0; b < d.batch; b++) {
        const chk_attention_where w = chk_attention_locate(&d, &io, b);
        for (size_t h = 0; h < d.heads_q; h++)
            for (size_t i = 0; i < w.len_q; i++, n++) {
                size_t at = chk_attention_q_at(&d, &io, 1, b, h, i);
                assert_true(at + d.head_dim_v <= r->out_n);
                for (size_t e = 0; e < d.head_dim_v; e++) {
                    got[n * d.head_dim_v + e] = chk_load(out, d.dtype_o, at + e);
                    written[at + e] = 1;
                }
                chk_attention_row_sized(&d, &io, b, h, i, want + n * d.head_dim_v,
                                        sizes + n * d.head_dim_v, &want_lse[n]);
                if (r->lse_n) {
                    size_t li = lse_index(r, &w, b, h, i);
                    assert_true(li < r->lse_n);
                    got_lse[n] = lse[li];
                    lse_written[li] = 1;
                } else {
                    got_lse[n] = want_lse[n];
                }
            }
    }
    chk_report rep;
    if (!chk_compare_sized(got, want, sizes, rows * d.head_dim_v, attention_run_tolerance(r), &rep))
        fail_msg("B%zu Hq%zu Hkv%zu Lq%zu Lkv%zu D%zu/%zu causal %d mask %d softcap %g window %d "
                 "(%zu, %zu) page %zu types %d%d%d formats %d/%d scales %d/%d splits %zu, path %s: "
                 "%zu of %zu off, first %zu (row %zu) "
                 "got %.7g want %.7g, max|err| %.3g NMSE %.3g",
                 d.batch, d.heads_q, d.heads_kv, d.len_q, d.len_kv, d.head_dim, d.head_dim_v,
                 d.causal, d.mask_type, (double)d.softcap, d.window, d.window_left, d.window_right,
                 d.page_size, d.dtype_q, d.dtype_kv, d.dtype_o, d.format_k, d.format_v,
                 d.scale_mode_k, d.scale_mode_v, d.kv_splits, planned_path(ctx, &r->d), rep.bad,
                 rep.checked,
                 rep.first_bad, rep.first_bad / d.head_dim_v, rep.got, rep.want, rep.max_abs_err,
                 rep.nmse);
    if (!chk_compare_values(got_lse, want_lse, rows, chk_attention_lse_tolerance(&d), &rep))
        fail_msg("lse row %zu (path %s): got %.9g want %.9g", rep.first_bad,
                 planned_path(ctx, &r->d), rep.got, rep.want);
    for (size_t e = 0; e < r->out_n; e++)
        if (!written[e] && chk_load(out, d.dtype_o, e) != ATTENTION_SENTINEL)
            fail_msg("out[%zu], outside out's view, was written (%g)", e,
                     (double)chk_load(out, d.dtype_o, e));
    for (size_t e = 0; e < r->lse_n; e++)
        if (!lse_written[e] && lse[e] != ATTENTION_SENTINEL)
            fail_msg("lse[%zu], no row's, was written (%g)", e, (double)lse[e]);
    assert_memory_equal(q0, r->io.q, r->q_n * sq);
    assert_memory_equal(k0, r->io.k, r->k_n * sk);
    assert_memory_equal(v0, r->io.v, r->v_n * sv);
    if (m0)
        assert_memory_equal(m0, r->io.mask, r->mask_n * mask_bytes_per(d.mask_type));
    if (ks0)
        assert_memory_equal(ks0, r->io.k_scales, r->ks_n * sizeof(float));
    if (vs0)
        assert_memory_equal(vs0, r->io.v_scales, r->vs_n * sizeof(float));
    free(q0), free(k0), free(v0), free(m0), free(ks0), free(vs0), free(out), free(lse), free(written);
    free(lse_written), free(got), free(want), free(sizes), free(got_lse), free(want_lse);
}

/* Contiguous q, k, v (in layout, with capacities len_q and len_kv) and out, lse for r->d. */
void attention_contiguous_inputs(attention_run *r)
{
    const fcl_attention_desc d = chk_attention_defaults(r->d);
    r->q_n = d.batch * d.heads_q * d.len_q * d.head_dim;
    r->k_n = d.batch * d.heads_kv * d.len_kv * d.head_dim;
    r->v_n = d.batch * d.heads_kv * d.len_kv * d.head_dim_v;
    r->out_n = d.batch * d.heads_q * d.len_q * d.head_dim_v;
    r->lse_n = d.batch * d.heads_q * d.len_q;
    r->io.q = test_tensor(r->q_n, d.dtype_q);
    r->io.k = test_tensor(r->k_n, d.dtype_kv);
    r->io.v = test_tensor(r->v_n, d.dtype_kv);
}

void attention_free_inputs(attention_run *r)
{
    free((void *)r->io.q);
    if (r->io.v != r->io.k)
        free((void *)r->io.v);
    free((void *)r->io.k);
    free((void *)r->io.mask);
}

/* A mask [batch][heads][len_q][len_kv] with -inf blocks, every 4th row hidden whole: additive
 * f16 or f32, or boolean (0 where the additive one would be -inf). */
void *attention_mask(attention_run *r, fcl_mask_type type)
{
    fcl_attention_desc *d = &r->d;
    d->mask_type = type;
    d->mask_stride_q = d->len_kv;
    d->mask_stride_head = d->len_q * d->len_kv;
    d->mask_stride_batch = d->heads_q * d->len_q * d->len_kv;
    r->mask_n = d->batch * d->heads_q * d->len_q * d->len_kv;
    void *m = malloc(r->mask_n * mask_bytes_per(type));
    assert_non_null(m);
    for (size_t e = 0; e < r->mask_n; e++) {
        size_t i = (e / d->len_kv) % d->len_q, j = e % d->len_kv;
        float x = i % 4 == 3 || j % 5 == 2 ? -INFINITY : (float)chk_normal(support_rng());
        if (type == FCL_MASK_BOOL_U8)
            ((uint8_t *)m)[e] = x != -INFINITY;
        else if (type == FCL_MASK_ADD_F16)
            ((uint16_t *)m)[e] = chk_float_to_half(x);
        else
            ((float *)m)[e] = x;
    }
    r->io.mask = m;
    return m;
}

void attention_packed_inputs(attention_run *r, const int32_t *cu_q, const int32_t *cu_kv)
{
    const fcl_attention_desc full = chk_attention_defaults(r->d);
    const size_t total_q = (size_t)cu_q[full.batch], total_kv = (size_t)cu_kv[full.batch];
    r->io.cu_seqlens_q = cu_q;
    r->io.cu_seqlens_kv = cu_kv;
    r->q_n = total_q * full.heads_q * full.head_dim;
    r->out_n = total_q * full.heads_q * full.head_dim_v;
    r->k_n = total_kv * full.heads_kv * full.head_dim;
    r->v_n = total_kv * full.heads_kv * full.head_dim_v;
    r->lse_n = full.heads_q * total_q;
    r->io.q = test_tensor(r->q_n, full.dtype_q);
    r->io.k = test_tensor(r->k_n, full.dtype_kv);
    r->io.v = test_tensor(r->v_n, full.dtype_kv);
}

/* A paged cache of the sequences' lengths, pages dealt in shuffled order with spare pages
 * between them; NHD ([pages][page_size][heads][dim], layout BLHD) or HND (BHLD). */
void attention_paged_inputs(attention_run *r, const int32_t *lens, int32_t **table_out)
{
    fcl_attention_desc *d = &r->d;
    const fcl_attention_desc full = chk_attention_defaults(*d);
    size_t ps = d->page_size, per_seq = (d->len_kv + ps - 1) / ps;
    d->block_table_stride = per_seq + 1;
    d->num_pages = d->batch * per_seq + 3;
    int32_t *table = malloc(d->batch * d->block_table_stride * sizeof(int32_t));
    int32_t *order = malloc(d->num_pages * sizeof(int32_t));
    assert_true(table && order);
    chk_permutation(order, d->num_pages, support_rng());
    for (size_t e = 0; e < d->batch * d->block_table_stride; e++)
        table[e] = -7; /* entries no length reaches are never read */
    size_t next = 0;
    for (size_t b = 0; b < d->batch; b++)
        for (size_t p = 0; p < (size_t)(lens ? (lens[b] + (int32_t)ps - 1) / (int32_t)ps : (int32_t)per_seq); p++)
            table[b * d->block_table_stride + p] = order[next++];
    free(order);
    r->io.block_table = table;
    r->io.seqlens_kv = lens;
    r->q_n = full.batch * full.heads_q * full.len_q * full.head_dim;
    r->k_n = d->num_pages * ps * full.heads_kv * full.head_dim;
    r->v_n = d->num_pages * ps * full.heads_kv * full.head_dim_v;
    r->out_n = full.batch * full.heads_q * full.len_q * full.head_dim_v;
    r->lse_n = full.batch * full.heads_q * full.len_q;
    r->io.q = test_tensor(r->q_n, full.dtype_q);
    r->io.k = test_tensor(r->k_n, full.dtype_kv);
    r->io.v = test_tensor(r->v_n, full.dtype_kv);
    *table_out = table;
}

int support_temp_dir(char *dir, size_t cap, const char *prefix)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (snprintf(dir, cap, "%s/%s-XXXXXX", tmp, prefix) >= (int)cap)
        return -1;
    return mkdtemp(dir) ? 0 : -1;
}

int support_remove_dir(const char *dir)
{
    char path[512];
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            remove(path);
        }
    if (d)
        closedir(d);
    return rmdir(dir);
}

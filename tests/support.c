#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    fcl_context_device_info(support_ctx, &support_info);
    const char *seed = getenv("FLASHCL_TEST_SEED");
    rng = chk_rng_seeded(seed ? strtoull(seed, NULL, 10) : 0);
    printf("# device %s; FLASHCL_TEST_SEED=%llu\n", support_info.name,
           (unsigned long long)rng.state);
    return 0;
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

void run_softmax_case(const softmax_case *c, float *got_out)
{
    chk_rng *r = support_rng();
    size_t esz = chk_dtype_size(c->dtype);
    size_t in_stride = c->cols + c->in_pad, out_stride = c->in_place ? in_stride : c->cols + c->out_pad;
    size_t mask_stride = c->mask == MASK_PER_ROW ? c->cols + 3 : 0;
    size_t in_n = (c->rows - 1) * in_stride + c->cols, out_n = (c->rows - 1) * out_stride + c->cols;
    size_t mask_n = c->mask == MASK_PER_ROW ? (c->rows - 1) * mask_stride + c->cols : c->cols;
    fcl_softmax_desc d = {.rows = c->rows, .cols = c->cols, .in_stride = in_stride,
                          .out_stride = out_stride, .dtype = c->dtype, .scale = c->scale,
                          .log = c->log, .mask_stride = mask_stride, .algo = c->algo};

    void *in = malloc(in_n * esz), *in_copy = malloc(in_n * esz);
    void *out = c->in_place ? in : malloc(out_n * esz);
    float *mask = c->mask ? malloc(mask_n * sizeof(float)) : NULL;
    float *mask_copy = c->mask ? malloc(mask_n * sizeof(float)) : NULL;
    float *lse = malloc(c->rows * sizeof(float));
    double *ref = malloc(c->rows * c->cols * sizeof(double));
    double *ref_lse = malloc(c->rows * sizeof(double));
    assert_non_null(in);
    assert_non_null(in_copy);
    assert_non_null(out);
    assert_non_null(lse);
    assert_non_null(ref);
    assert_non_null(ref_lse);
    assert_true(!c->mask || (mask && mask_copy));

    for (size_t i = 0; i < in_n; i++)
        chk_store(in, c->dtype, i, PAD_SENTINEL);
    for (size_t row = 0; row < c->rows; row++)
        for (size_t j = 0; j < c->cols; j++)
            chk_store(in, c->dtype, row * in_stride + j, fill_value(c->fill, row, j, c->cols, r));
    if (!c->in_place)
        for (size_t i = 0; i < out_n; i++)
            chk_store(out, c->dtype, i, PAD_SENTINEL);
    for (size_t i = 0; c->mask && i < mask_n; i++)
        mask[i] = mask_value(c->mask, i / (mask_stride ? mask_stride : c->cols),
                             i % (mask_stride ? mask_stride : c->cols), r);
    memcpy(in_copy, in, in_n * esz);
    if (mask)
        memcpy(mask_copy, mask, mask_n * sizeof(float));
    chk_softmax_reference(&d, in, mask, ref, ref_lse);

    fcl_status s = fcl_softmax_host(support_ctx, &d, in, mask, out, lse);
    if (s != FCL_SUCCESS)
        fail_msg("fcl_softmax_host: %s: %s", fcl_status_string(s),
                 fcl_context_last_error(support_ctx));

    const char *what = "softmax";
    chk_report rep;
    if (!chk_compare(out, c->dtype, c->rows, c->cols, out_stride, ref,
                     chk_softmax_tolerance(c->dtype), &rep))
        fail_msg("%s %zux%zu %s %s log=%d: %zu of %zu out of tolerance, first at %lld: got %.9g "
                 "want %.9g; NMSE %.3g",
                 what, c->rows, c->cols, chk_dtype_name(c->dtype), fcl_softmax_algo_name(c->algo),
                 c->log, rep.bad, rep.checked, (long long)rep.first_bad, rep.got, rep.want, rep.nmse);
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
    if (mask && memcmp(mask, mask_copy, mask_n * sizeof(float)) != 0)
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
}

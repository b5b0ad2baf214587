/* Shared by the CMocka tests: one context per test program, seeded random inputs, and a
 * softmax case runner that checks everything a case can break. */
#ifndef FLASHCL_TEST_SUPPORT_H
#define FLASHCL_TEST_SUPPORT_H

#include "check.h"
#include "flashcl.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

/* The context every test of the program shares (created by support_setup). */
extern fcl_context *support_ctx;
extern fcl_device_info support_info;
int support_setup(void **state);    /* a cmocka group setup */
/* Runs a program's tests but those FLASHCL_TEST_SKIP names, or only those FLASHCL_TEST_ONLY
 * names (comma-separated): CTest's runs on slow implementations leave out what other tests
 * there cover faster. Fails when no test is left. */
#define support_run_tests(tests) support_run_filtered(#tests, tests, sizeof tests / sizeof tests[0])
int support_run_filtered(const char *group, const struct CMUnitTest *tests, size_t count);
/* 1 where FLASHCL_TEST_SMALL=1 asks for the small-size run (a simulator as the device, or the
 * sanitizers' slow build): tests leave out their longest rows, shorten MLA's keys and, where
 * the device has no fast path, check the fast-path tests' plans only; the full-size run
 * checks those. */
int support_small(void);
int support_teardown(void **state); /* a cmocka group teardown */
/* A fresh empty directory TMPDIR/prefix-XXXXXX (TMPDIR or /tmp) into dir; 0 on success. */
int support_temp_dir(char *dir, size_t cap, const char *prefix);
/* Removes dir and the files in it; 0 on success. */
int support_remove_dir(const char *dir);
/* Fresh random numbers; the seed is printed once (FLASHCL_TEST_SEED=N reproduces a run). */
chk_rng *support_rng(void);

/* What the input rows hold. */
typedef enum fill_kind {
    FILL_NORMAL,  /* N(0, 3^2) */
    FILL_WIDE,    /* uniform in [-80, 80]: exp would overflow without the max shift */
    FILL_HUGE,    /* +-1e30 mixed with ordinary values */
    FILL_TINY,    /* magnitudes near 1e-30: an almost uniform softmax */
    FILL_SPECIAL  /* by row: all -inf, a NaN, some -inf, a +inf, ordinary */
} fill_kind;

typedef enum mask_kind {
    MASK_NONE,
    MASK_SHARED, /* one mask row for every row (mask_stride 0) */
    MASK_PER_ROW /* a row per row, padded stride, with -inf blocks and fully masked rows */
} mask_kind;

typedef struct softmax_case {
    size_t rows, cols;
    fcl_dtype dtype;
    fcl_softmax_algo algo;
    int log;
    float scale;
    size_t in_pad, out_pad; /* stride = cols + pad; the padding must survive */
    mask_kind mask;
    int in_place;
    fill_kind fill;
    /* v0.2: heads of head_rows rows; the mask's rows (0: as mask says), float16 mask, ALiBi
     * slopes scaling the mask (a slope of 0 on the last head), sinks (-inf on every 4th head
     * from head 1). */
    size_t heads, head_rows, mask_rows;
    int mask_f16, alibi, sinks;
} softmax_case;

/* Runs c through fcl_softmax_run_host and asserts outputs, lse, padding and inputs.
 * If got_out is not NULL it receives the dense float result (rows x cols). */
void run_softmax_case(const softmax_case *c, float *got_out);
void run_softmax_case_on(fcl_context *ctx, const softmax_case *c, float *got_out); /* on ctx */
/* The algorithms that can run c's shape on this device (FUSED only where it fits). */
int algo_can_run(fcl_softmax_algo a, size_t cols);

/* ---- attention ---- */
/* A host call to check: desc and io as the caller gives them, with the element counts of
 * the buffers it allocated (out_n and lse_n: the whole out and lse arrays). */
typedef struct attention_run {
    fcl_attention_desc d;
    fcl_attention_host_io io;
    size_t q_n, k_n, v_n, mask_n, out_n, lse_n;
    size_t ks_n, vs_n; /* v0.3: floats of k_scales and v_scales (k_n, v_n: units of K's and
                          V's formats, bytes for the coded ones) */
    double out_size;   /* outputs' magnitude where V's is not about 1 (0: 1) */
} attention_run;

/* Runs r through fcl_attention_run_host and checks every row of every sequence against the
 * float64 reference, that nothing outside out's view and lse's rows was written, and that
 * no input changed. */
void check_attention_run(attention_run *r);
void check_attention_run_on(fcl_context *ctx, attention_run *r); /* the same on ctx */
/* The tolerance r's outputs are held to: chk_attention_tolerance's, the per-element part
 * times r->out_size (an output twice as large may be twice as far off). */
chk_tolerance attention_run_tolerance(const attention_run *r);
/* The sizes of the terms each element of r's out sums (chk_attention_row_sized), at out's
 * places (0 elsewhere): out_n doubles, malloc'd, for chk_compare_sized. */
double *attention_out_sizes(const attention_run *r);
/* n random values of type t (malloc'd, never NULL). */
void *test_tensor(size_t n, fcl_dtype t);
/* Contiguous q, k, v (in layout, capacities len_q and len_kv), out and lse for r->d. */
void attention_contiguous_inputs(attention_run *r);
void attention_free_inputs(attention_run *r);
/* A mask [batch][heads][len_q][len_kv] (-inf blocks, every 4th row hidden whole), additive or
 * boolean (0 for -inf). */
void *attention_mask(attention_run *r, fcl_mask_type type);
/* Sequences packed by cu_q and cu_kv ([batch + 1] each, totals at [batch]): random q, k and v
 * of the totals' rows, and out's and lse's counts. */
void attention_packed_inputs(attention_run *r, const int32_t *cu_q, const int32_t *cu_kv);
/* A paged cache of the lengths lens (NULL: len_kv), pages in shuffled order with spares;
 * *table_out gets the block table (malloc'd). */
void attention_paged_inputs(attention_run *r, const int32_t *lens, int32_t **table_out);

#endif

/* The tests' own encoders of K/V formats, written from their definitions: a C port of ggml's
 * reference quantizers (quantize_row_q8_0_ref and friends: float32 arithmetic, correctly
 * rounded division, as ggml-quants.c) and the contract's fp8 and int8 rounding. Caches built
 * from data with them, or from random bytes, are what the kv tests read. */
#ifndef FLASHCL_TEST_KV_REFERENCE_H
#define FLASHCL_TEST_KV_REFERENCE_H

#include "check.h"

#include <stddef.h>
#include <stdint.h>

/* One row of dim values (dim a multiple of the format's block) into dst's row_units units,
 * as ggml (q8_0, q4_0, q4_1, q5_0, q5_1) or the contract (f32, f16, bf16: nearest even;
 * fp8: nearest even, saturated, NaN kept; int8: nearest even, clamped to +-127) encode
 * y = x. iq4_nl has no encoder here (0 returned); 1 otherwise. */
int kv_encode_row(unsigned format, const float *x, size_t dim, unsigned char *dst);
/* fp8 and int8 codes of one value. */
uint8_t kv_fp8_code(float y, int e5m2);
int8_t kv_int8_code(float y);

/* How kv_tensor fills its rows. */
typedef enum kv_fill {
    KV_FROM_DATA, /* N(0, 1) values encoded by kv_encode_row (iq4_nl: as KV_RAW) */
    KV_RAW        /* random bytes: every code pattern, block scales d (and m) of moderate size,
                     fp8 codes of moderate exponent (no NaN or infinity) */
} kv_fill;
/* rows rows of dim values in format (malloc'd, never NULL): rows * row units units. */
void *kv_tensor(unsigned format, size_t rows, size_t dim, kv_fill fill, chk_rng *rng);

/* Caches of attention runs (support.h's attention_run, declared there: struct attention_run). */
struct attention_run;
/* Replaces the float K and V the support builders made for r (contiguous rows of head_dim
 * elements) by the same rows in r->d's formats, filled as `fill` says. */
void kv_recode(struct attention_run *r, kv_fill fill);
/* n distinct scales in [0.25, 2) from rng (an indexing error changes the result), malloc'd. */
float *kv_random_scales(size_t n, chk_rng *rng);
/* Scales of mode for K (is_v 0) or V over r's rows (TOKEN: default strides, one a row of
 * the cache; HEAD: rows of heads_kv + 1 a sequence, a batch stride that is not heads_kv). */
void kv_add_scales(struct attention_run *r, int is_v, fcl_kv_scale mode);
/* V's factors in r (its TOKEN scales, or each ggml block's d and m) times 2^exponent. */
void kv_scale_v_factors(struct attention_run *r, int exponent);
/* K's and V's bytes (coded formats) `by` bytes into buffers that much longer, their views'
 * offsets with them: every row starts `by` bytes from where it did. */
void kv_shift_rows(struct attention_run *r, size_t by);
/* attention_free_inputs and the scales kv_add_scales made. */
void kv_free_run(struct attention_run *r);

#endif

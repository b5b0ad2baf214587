/* Host-side checking shared by flashcl-demo and the tests: float64 references, half and
 * bfloat16 conversions, random inputs and tolerance comparison. Not part of the library. */
#ifndef FLASHCL_CHECK_H
#define FLASHCL_CHECK_H

#include "flashcl.h"
#include "kv_formats.h"

#include <stddef.h>
#include <stdint.h>

/* ---- storage types ---- */
float chk_half_to_float(uint16_t h);
uint16_t chk_float_to_half(float f); /* round to nearest even, like vstore_half_rte */
float chk_bf16_to_float(uint16_t b);
uint16_t chk_float_to_bf16(float f); /* round to nearest even, NaN stays NaN */
size_t chk_dtype_size(fcl_dtype t);
const char *chk_dtype_name(fcl_dtype t);
float chk_load(const void *buf, fcl_dtype t, size_t i);
/* Stores v rounded to the storage type. */
void chk_store(void *buf, fcl_dtype t, size_t i, float v);

/* ---- K and V formats (v0.3; the table of cl/kv_formats.h) ---- */
typedef struct chk_format {
    const char *name;
    size_t elems, bytes;
    int dtype;
    unsigned roles;
} chk_format;
extern const chk_format chk_formats[]; /* by fcl_kv_format value, 1 to FCL_KV_FORMAT_MAX */
/* The format K or V has (f, or dtype_kv's where f is 0). */
unsigned chk_kv_format(fcl_kv_format f, fcl_dtype dtype_kv);
/* Bytes of a view's unit (an element of a float format, else a byte). */
size_t chk_kv_unit_bytes(unsigned format);
/* Units (elements, or bytes of a coded format) a row of dim values spans. */
size_t chk_kv_row_units(unsigned format, size_t dim);
/* Bytes a row of dim values spans (its units times a unit's bytes). */
size_t chk_kv_row_bytes(unsigned format, size_t dim);
/* Value i of the row starting at unit `row` of buf, in float64, as the contract decodes it. */
double chk_kv_decode(const void *buf, unsigned format, size_t row, size_t i);
/* Value e of row j of K (is_v 0) or V (1) of kv head hk of sequence b, with its scale. */
double chk_kv_value(const fcl_attention_desc *d, const fcl_attention_host_io *io, int is_v,
                    size_t b, size_t hk, size_t j, size_t e);

/* Monotonic wall-clock seconds. */
double chk_seconds(void);
/* Milliseconds between two profiling timestamps (ns); 0 where they do not keep time: they
 * advance by less than a microsecond over a kernel, which no device runs that fast (Mesa's
 * llvmpipe counts 1 per event). Callers then time by chk_seconds. */
double chk_profiled_ms(cl_ulong start, cl_ulong end);

/* ---- random numbers (xorshift64*, seeded per test so failures reproduce) ---- */
typedef struct chk_rng {
    uint64_t state;
} chk_rng;
chk_rng chk_rng_seeded(uint64_t seed); /* seed 0: from the clock, printed by the caller */
double chk_uniform(chk_rng *r);         /* [0, 1) */
/* v[0..n) = a random permutation of 0..n-1 (Fisher-Yates: shuffled pages, slots). */
void chk_permutation(int32_t *v, size_t n, chk_rng *r);
double chk_normal(chk_rng *r);
/* n standard-normal values stored in t (malloc'd; NULL without memory). */
void *chk_random_tensor(size_t n, fcl_dtype t, chk_rng *r);

/* ---- reference ---- */
/* Softmax of every row in float64 from the stored (already rounded) inputs io->in, mask,
 * sinks and alibi_slopes (out and lse unused); out is dense rows x cols. Semantics as in
 * flashcl.h: all -inf gives 0 / -inf (lse = the sink), NaN or +inf gives NaN. */
void chk_softmax_reference(const fcl_softmax_desc *d, const fcl_softmax_host_io *io, double *out,
                           double *lse);

/* Element offset of (b, h, l, 0) in a [batch][heads][len][dim] tensor stored in layout. */
size_t chk_attention_offset(fcl_layout layout, size_t heads, size_t len, size_t dim, size_t b,
                            size_t h, size_t l);
/* Query row (b, h, i) of attention in float64 from the stored inputs: out_row gets head_dim_v
 * values. d must have heads_kv, head_dim_v and scale filled in (chk_attention_defaults).
 * Semantics as in flashcl.h: no visible key gives 0 and lse -inf; a NaN or +inf score
 * among the visible keys makes the row NaN. */
void chk_attention_row(const fcl_attention_desc *d, const void *q, const void *k, const void *v,
                       const void *mask, size_t b, size_t h, size_t i, double *out_row,
                       double *lse);
/* The same with every v0.2 input (views, packed and paged sequences, modifiers, sinks): d as
 * the caller gives it, with chk_attention_defaults applied. Sinks: a row with no visible
 * key gives 0 and lse = sink. */
void chk_attention_row_io(const fcl_attention_desc *d, const fcl_attention_host_io *io, size_t b,
                          size_t h, size_t i, double *out_row, double *lse);
/* ... and the sizes of the terms each output element sums: sizes[e] = the sum over keys of
 * weight times |v[e]|, at least |out_row[e]| (what a rounding of each weight, relative to it,
 * moves the element by, where the terms cancel and the element is small). */
void chk_attention_row_sized(const fcl_attention_desc *d, const fcl_attention_host_io *io,
                             size_t b, size_t h, size_t i, double *out_row, double *sizes,
                             double *lse);
/* Sequence b's lengths and first packed rows. */
typedef struct chk_attention_where {
    size_t len_q, len_kv, q_start, kv_start;
} chk_attention_where;
chk_attention_where chk_attention_locate(const fcl_attention_desc *d, const fcl_attention_host_io *io,
                                         size_t b);
/* Element where query i of (b, h) starts in q (out 0) or out (out 1). */
size_t chk_attention_q_at(const fcl_attention_desc *d, const fcl_attention_host_io *io, int out,
                          size_t b, size_t h, size_t i);
/* d with its zero defaults replaced by their meaning. */
fcl_attention_desc chk_attention_defaults(fcl_attention_desc d);
/* The tolerance the tests hold attention to, by output storage type (unit-variance inputs). */
typedef struct chk_tolerance chk_tolerance;
chk_tolerance chk_attention_tolerance(const fcl_attention_desc *d);
/* ... and its lse (natural log units). */
chk_tolerance chk_attention_lse_tolerance(const fcl_attention_desc *d);

/* ---- comparison ---- */
typedef struct chk_tolerance {
    double atol, rtol, nmse;
} chk_tolerance;
/* The tolerances flashcl promises for outputs stored in t. */
chk_tolerance chk_softmax_tolerance(fcl_dtype t);

typedef struct chk_report {
    size_t checked, bad;
    size_t first_bad;            /* index of the first element out of tolerance */
    double got, want;            /* at first_bad */
    double max_abs_err, nmse;
} chk_report;
/* Compares n values read from got (storage t, element i at got_index(i)) with want.
 * NaN must meet NaN and infinities must match exactly. Returns 1 when all pass. */
int chk_compare(const void *got, fcl_dtype t, size_t rows, size_t cols, size_t stride,
                const double *want, chk_tolerance tol, chk_report *rep);
/* Compares n plain values with the same rules. */
int chk_compare_values(const double *got, const double *want, size_t n, chk_tolerance tol,
                       chk_report *rep);
/* ... with rtol relative to sizes[i] (chk_attention_row_sized's) instead of |want[i]|
 * (sizes NULL: |want[i]|, as chk_compare_values). */
int chk_compare_sized(const double *got, const double *want, const double *sizes, size_t n,
                      chk_tolerance tol, chk_report *rep);
/* lse within 1e-5 relative (absolute below magnitude 1), exact for inf/NaN. */
int chk_compare_lse(const float *got, const double *want, size_t n, chk_report *rep);

#endif

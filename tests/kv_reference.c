/* See kv_reference.h. Compiled with -ffp-contract=off: ggml's reference rounds every
 * operation to float32 on its own. */
#include "kv_reference.h"

#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static void put_half(unsigned char *at, float v)
{
    const uint16_t h = chk_float_to_half(v);
    at[0] = (unsigned char)(h & 0xff);
    at[1] = (unsigned char)(h >> 8);
}

/* ggml's quantize_row_q8_0_ref, one block. */
static void q8_0_block(const float *x, unsigned char *y)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = MAX(amax, fabsf(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    put_half(y, d);
    for (int j = 0; j < 32; j++)
        y[2 + j] = (unsigned char)(int8_t)roundf(x[j] * id);
}

/* The value of largest magnitude (the first of them), as ggml's q4_0 and q5_0 take it. */
static float signed_max(const float *x)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

/* ggml's quantize_row_q4_0_ref and quantize_row_q5_0_ref (bits 4 or 5), one block. */
static void q_0_block(const float *x, unsigned char *y, int bits)
{
    const float max = signed_max(x);
    const float d = max / (bits == 4 ? -8 : -16);
    const float id = d ? 1.0f / d : 0.0f;
    const float half_range = bits == 4 ? 8.5f : 16.5f;
    const int top = bits == 4 ? 15 : 31;
    unsigned char *qs = y + (bits == 4 ? 2 : 6);
    uint32_t qh = 0;
    put_half(y, d);
    for (int j = 0; j < 16; j++) {
        const float x0 = x[j] * id, x1 = x[16 + j] * id;
        const uint8_t xi0 = (uint8_t)MIN(top, (int8_t)(x0 + half_range));
        const uint8_t xi1 = (uint8_t)MIN(top, (int8_t)(x1 + half_range));
        qs[j] = (unsigned char)((xi0 & 0x0f) | ((xi1 & 0x0f) << 4));
        qh |= ((xi0 & 0x10u) >> 4) << j;
        qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
    }
    if (bits == 5)
        for (int i = 0; i < 4; i++)
            y[2 + i] = (unsigned char)(qh >> (8 * i));
}

/* ggml's quantize_row_q4_1_ref and quantize_row_q5_1_ref, one block. */
static void q_1_block(const float *x, unsigned char *y, int bits)
{
    float min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < 32; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    const float d = (max - min) / ((1 << bits) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    unsigned char *qs = y + (bits == 4 ? 4 : 8);
    uint32_t qh = 0;
    put_half(y, d);
    put_half(y + 2, min);
    for (int j = 0; j < 16; j++) {
        const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
        const uint8_t xi0 = bits == 4 ? (uint8_t)MIN(15, (int8_t)(x0 + 0.5f)) : (uint8_t)(x0 + 0.5f);
        const uint8_t xi1 = bits == 4 ? (uint8_t)MIN(15, (int8_t)(x1 + 0.5f)) : (uint8_t)(x1 + 0.5f);
        qs[j] = (unsigned char)((xi0 & 0x0f) | ((xi1 & 0x0f) << 4));
        qh |= ((xi0 & 0x10u) >> 4) << j;
        qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
    }
    if (bits == 5)
        for (int i = 0; i < 4; i++)
            y[4 + i] = (unsigned char)(qh >> (8 * i));
}

uint8_t kv_fp8_code(float y, int e5m2)
{
    const int man = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    const uint8_t sign = signbit(y) ? 0x80 : 0, max_code = e5m2 ? 0x7b : 0x7e;
    if (isnan(y))
        return sign | (e5m2 ? 0x7e : 0x7f);
    const double a = fabs((double)y), min_normal = ldexp(1.0, 1 - bias);
    if (isinf(a))
        return sign | max_code;
    unsigned code;
    if (a < min_normal) { /* subnormal steps; rounding up to min_normal gives its code */
        code = (unsigned)nearbyint(a / ldexp(1.0, 1 - bias - man));
    } else {
        int e;
        const double m = frexp(a, &e) * 2.0; /* a = m 2^(e - 1), m in [1, 2) */
        unsigned q = (unsigned)nearbyint((m - 1.0) * (1 << man));
        e -= 1;
        if (q == (1u << man))
            q = 0, e++;
        code = e + bias > 0x1f ? 0xffu : ((unsigned)(e + bias) << man) | q;
    }
    return sign | (uint8_t)MIN(code, max_code);
}

int8_t kv_int8_code(float y)
{
    if (isnan(y))
        return 0;
    return (int8_t)MAX(-127.0f, MIN(127.0f, nearbyintf(y)));
}

int kv_encode_row(unsigned format, const float *x, size_t dim, unsigned char *dst)
{
    const chk_format *f = &chk_formats[format];
    if (f->roles & FCL_ROLE_FLOAT) {
        for (size_t i = 0; i < dim; i++)
            chk_store(dst, (fcl_dtype)f->dtype, i, x[i]);
        return 1;
    }
    for (size_t i = 0; i < dim && f->elems == 1; i++)
        dst[i] = format == FCL_KV_INT8 ? (unsigned char)kv_int8_code(x[i])
                                       : kv_fp8_code(x[i], format == FCL_KV_FP8_E5M2);
    for (size_t b = 0; b < dim / 32 && f->elems == 32; b++) {
        const float *xb = x + 32 * b;
        unsigned char *y = dst + b * f->bytes;
        switch (format) {
        case FCL_KV_Q8_0: q8_0_block(xb, y); break;
        case FCL_KV_Q4_0: q_0_block(xb, y, 4); break;
        case FCL_KV_Q5_0: q_0_block(xb, y, 5); break;
        case FCL_KV_Q4_1: q_1_block(xb, y, 4); break;
        case FCL_KV_Q5_1: q_1_block(xb, y, 5); break;
        default: return 0;
        }
    }
    return 1;
}

/* A random block of a ggml format: random bytes, with d (and m) of moderate size so that its
 * values stay within a few units. */
static void raw_block(unsigned format, unsigned char *y, chk_rng *rng)
{
    const chk_format *f = &chk_formats[format];
    static const double d_max[FCL_KV_FORMAT_MAX + 1] = {
        [FCL_KV_Q8_0] = 0.03, [FCL_KV_Q4_0] = 0.25, [FCL_KV_Q4_1] = 0.2, [FCL_KV_Q5_0] = 0.12,
        [FCL_KV_Q5_1] = 0.1, [FCL_KV_IQ4_NL] = 0.03};
    for (size_t i = 0; i < f->bytes; i++)
        y[i] = (unsigned char)(chk_uniform(rng) * 256.0);
    const double d = (0.1 + 0.9 * chk_uniform(rng)) * d_max[format];
    put_half(y, (float)(chk_uniform(rng) < 0.5 ? -d : d));
    if (format == FCL_KV_Q4_1 || format == FCL_KV_Q5_1)
        put_half(y + 2, (float)(0.5 * chk_normal(rng)));
}

/* A random fp8 code of moderate exponent (at most 2^1, subnormals included), or int8 code. */
static unsigned char raw_byte(unsigned format, chk_rng *rng)
{
    const unsigned r = (unsigned)(chk_uniform(rng) * 65536.0);
    if (format == FCL_KV_INT8)
        return (unsigned char)r;
    if (format == FCL_KV_FP8_E4M3)
        return (unsigned char)((r & 0x80) | (((r >> 8) % 9) << 3) | (r & 7));
    return (unsigned char)((r & 0x80) | (((r >> 8) % 17) << 2) | (r & 3));
}

void *kv_tensor(unsigned format, size_t rows, size_t dim, kv_fill fill, chk_rng *rng)
{
    const chk_format *f = &chk_formats[format];
    if (f->roles & FCL_ROLE_FLOAT)
        return chk_random_tensor(rows * dim, (fcl_dtype)f->dtype, rng);
    const size_t row_bytes = chk_kv_row_units(format, dim);
    unsigned char *t = malloc(rows * row_bytes + 1);
    float *x = malloc(dim * sizeof(float));
    if (!t || !x)
        abort();
    for (size_t r = 0; r < rows; r++) {
        unsigned char *row = t + r * row_bytes;
        for (size_t i = 0; i < dim; i++)
            x[i] = (float)chk_normal(rng);
        if (fill == KV_FROM_DATA && kv_encode_row(format, x, dim, row))
            continue;
        for (size_t i = 0; i < dim && f->elems == 1; i++)
            row[i] = raw_byte(format, rng);
        for (size_t b = 0; b < dim / 32 && f->elems == 32; b++)
            raw_block(format, row + b * f->bytes, rng);
    }
    free(x);
    return t;
}

/* ---- caches for attention runs ---- */

void kv_recode(attention_run *r, kv_fill fill)
{
    const fcl_attention_desc d = chk_attention_defaults(r->d);
    const unsigned fk = chk_kv_format(d.format_k, d.dtype_kv), fv = chk_kv_format(d.format_v, d.dtype_kv);
    const size_t rows = r->k_n / d.head_dim;
    free((void *)r->io.k);
    free((void *)r->io.v);
    r->io.k = kv_tensor(fk, rows, d.head_dim, fill, support_rng());
    r->io.v = kv_tensor(fv, rows, d.head_dim_v, fill, support_rng());
    r->k_n = rows * chk_kv_row_units(fk, d.head_dim);
    r->v_n = rows * chk_kv_row_units(fv, d.head_dim_v);
}

float *kv_random_scales(size_t n, chk_rng *rng)
{
    float *s = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(s);
    for (size_t i = 0; i < n; i++)
        s[i] = (float)(0.25 + 1.75 * chk_uniform(rng));
    return s;
}

void kv_add_scales(attention_run *r, int is_v, fcl_kv_scale mode)
{
    const fcl_attention_desc d = chk_attention_defaults(r->d);
    size_t n = 0;
    if (mode == FCL_KV_SCALE_TENSOR)
        *(is_v ? &r->d.v_scale : &r->d.k_scale) = is_v ? 0.625f : 1.375f;
    if (mode == FCL_KV_SCALE_HEAD) {
        *(is_v ? &r->d.v_scales_batch_stride : &r->d.k_scales_batch_stride) = d.heads_kv + 1;
        n = d.batch * (d.heads_kv + 1);
    }
    if (mode == FCL_KV_SCALE_TOKEN)
        n = r->k_n / chk_kv_row_units(chk_kv_format(d.format_k, d.dtype_kv), d.head_dim);
    *(is_v ? &r->d.scale_mode_v : &r->d.scale_mode_k) = mode;
    if (!n)
        return;
    *(is_v ? &r->io.v_scales : &r->io.k_scales) = kv_random_scales(n, support_rng());
    *(is_v ? &r->vs_n : &r->ks_n) = n;
}

void kv_scale_v_factors(attention_run *r, int exponent)
{
    const fcl_attention_desc d = chk_attention_defaults(r->d);
    if (d.scale_mode_v == FCL_KV_SCALE_TOKEN) {
        for (size_t i = 0; i < r->vs_n; i++)
            ((float *)r->io.v_scales)[i] = ldexpf(r->io.v_scales[i], exponent);
        return;
    }
    const chk_format *f = &chk_formats[d.format_v];
    const int halves = d.format_v == FCL_KV_Q4_1 || d.format_v == FCL_KV_Q5_1 ? 2 : 1;
    assert_true(f->elems == 32);
    for (size_t b = 0; b < r->v_n / f->bytes; b++)
        for (int i = 0; i < halves; i++) {
            unsigned char *at = (unsigned char *)r->io.v + b * f->bytes + 2 * i;
            put_half(at, ldexpf(chk_half_to_float((uint16_t)(at[0] | at[1] << 8)), exponent));
        }
}

/* n bytes of buf `by` bytes into a new buffer (the bytes before it 0x55); buf freed. */
static const void *shifted(const void *buf, size_t n, size_t by)
{
    unsigned char *to = malloc(n + by);
    assert_non_null(to);
    memset(to, 0x55, by);
    memcpy(to + by, buf, n);
    free((void *)buf);
    return to;
}

void kv_shift_rows(attention_run *r, size_t by)
{
    const fcl_attention_desc d = chk_attention_defaults(r->d);
    assert_int_equal(chk_kv_unit_bytes(chk_kv_format(d.format_k, d.dtype_kv)), 1);
    assert_int_equal(chk_kv_unit_bytes(chk_kv_format(d.format_v, d.dtype_kv)), 1);
    r->io.k = shifted(r->io.k, r->k_n, by);
    r->io.v = shifted(r->io.v, r->v_n, by);
    r->k_n += by, r->v_n += by;
    r->d.k_view.offset += by, r->d.v_view.offset += by;
}

void kv_free_run(attention_run *r)
{
    free((void *)r->io.k_scales);
    free((void *)r->io.v_scales);
    attention_free_inputs(r);
}

/* Host-side checking: see check.h. */
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

float chk_half_to_float(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v;
    if (exp == 0)
        v = ldexpf((float)mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexpf((float)(mant | 0x400), exp - 25);
    return sign ? -v : v;
}

uint16_t chk_float_to_half(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    float a = fabsf(f);
    if (isnan(f))
        return sign | 0x7e00;
    if (a >= 65520.0f) /* rounds to infinity */
        return sign | 0x7c00;
    if (a < ldexpf(1.0f, -14)) { /* subnormal: multiples of 2^-24, nearbyint rounds to even */
        return sign | (uint16_t)nearbyintf(ldexpf(a, 24));
    }
    int e;
    float m = frexpf(a, &e);                     /* a = m * 2^e, m in [0.5, 1) */
    float scaled = nearbyintf(ldexpf(m, 11));    /* 11 significant bits, ties to even */
    if (scaled >= 2048.0f) {
        scaled /= 2.0f;
        e++;
    }
    return sign | (uint16_t)((e + 14) << 10) | (uint16_t)((int)scaled - 1024);
}

float chk_bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t chk_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f))
        return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

size_t chk_dtype_size(fcl_dtype t) { return t == FCL_DTYPE_F32 ? 4 : 2; }

const char *chk_dtype_name(fcl_dtype t)
{
    return t == FCL_DTYPE_F32 ? "f32" : t == FCL_DTYPE_F16 ? "f16" : "bf16";
}

float chk_load(const void *buf, fcl_dtype t, size_t i)
{
    if (t == FCL_DTYPE_F32)
        return ((const float *)buf)[i];
    uint16_t h = ((const uint16_t *)buf)[i];
    return t == FCL_DTYPE_F16 ? chk_half_to_float(h) : chk_bf16_to_float(h);
}

void chk_store(void *buf, fcl_dtype t, size_t i, float v)
{
    if (t == FCL_DTYPE_F32)
        ((float *)buf)[i] = v;
    else
        ((uint16_t *)buf)[i] = t == FCL_DTYPE_F16 ? chk_float_to_half(v) : chk_float_to_bf16(v);
}

double chk_seconds(void)
{
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double chk_profiled_ms(cl_ulong start, cl_ulong end)
{
    return end < start + 1000 ? 0.0 : (double)(end - start) * 1e-6;
}

chk_rng chk_rng_seeded(uint64_t seed)
{
    chk_rng r = {seed ? seed : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull};
    if (!r.state)
        r.state = 1;
    return r;
}

double chk_uniform(chk_rng *r)
{
    r->state ^= r->state >> 12;
    r->state ^= r->state << 25;
    r->state ^= r->state >> 27;
    return (double)((r->state * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;
}

void chk_permutation(int32_t *v, size_t n, chk_rng *r)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (int32_t)i;
    for (size_t i = n; i-- > 1;) {
        const size_t o = (size_t)(chk_uniform(r) * (double)(i + 1));
        const int32_t t = v[i];
        v[i] = v[o], v[o] = t;
    }
}

double chk_normal(chk_rng *r)
{
    double u1 = chk_uniform(r), u2 = chk_uniform(r);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

void *chk_random_tensor(size_t n, fcl_dtype t, chk_rng *r)
{
    void *p = malloc(n * chk_dtype_size(t));
    for (size_t i = 0; p && i < n; i++)
        chk_store(p, t, i, (float)chk_normal(r));
    return p;
}

/* What row r's mask adds to element j (0 without a mask). */
static double softmax_mask_add(const fcl_softmax_desc *d, const fcl_softmax_host_io *io, size_t r,
                               size_t j, double slope)
{
    if (!io->mask)
        return 0.0;
    size_t rows = d->mask_rows ? d->mask_rows : d->mask_stride ? d->rows : 1;
    size_t stride = d->mask_stride ? d->mask_stride : d->cols;
    double m = chk_load(io->mask, d->mask_dtype, (r % rows) * stride + j);
    return d->alibi_from_mask && m != -INFINITY ? slope * m : m;
}

void chk_softmax_reference(const fcl_softmax_desc *d, const fcl_softmax_host_io *io, double *out,
                           double *lse)
{
    size_t in_stride = d->in_stride ? d->in_stride : d->cols;
    double scale = d->scale != 0.0f ? d->scale : 1.0;
    for (size_t r = 0; r < d->rows; r++) {
        size_t h = d->heads ? (r / d->head_rows) % d->heads : 0;
        double slope = io->alibi_slopes ? io->alibi_slopes[h] : 1.0;
        double sink = io->sinks ? io->sinks[h] : -INFINITY;
        double *o = out + r * d->cols, m = sink, sum = 0.0;
        int undefined = isnan(sink) || sink == INFINITY;
        for (size_t j = 0; j < d->cols; j++) {
            double s = scale * chk_load(io->in, d->dtype, r * in_stride + j) +
                       softmax_mask_add(d, io, r, j, slope);
            o[j] = s;
            undefined |= isnan(s) || s == INFINITY;
            m = s > m ? s : m;
        }
        for (size_t j = 0; j < d->cols && m > -INFINITY; j++)
            sum += exp(o[j] - m);
        if (m > -INFINITY)
            sum += exp(sink - m);
        double log_sum = log(sum), row_lse = m + log_sum;
        for (size_t j = 0; j < d->cols; j++) {
            if (undefined)
                o[j] = NAN;
            else if (m == -INFINITY)
                o[j] = d->log ? -INFINITY : 0.0;
            else
                o[j] = d->log ? (o[j] - m) - log_sum : exp(o[j] - m) / sum;
        }
        if (lse)
            lse[r] = undefined ? NAN : m == -INFINITY ? -INFINITY : row_lse;
    }
}

size_t chk_attention_offset(fcl_layout layout, size_t heads, size_t len, size_t dim, size_t b,
                            size_t h, size_t l)
{
    if (layout == FCL_LAYOUT_BLHD)
        return ((b * len + l) * heads + h) * dim;
    return ((b * heads + h) * len + l) * dim;
}

fcl_attention_desc chk_attention_defaults(fcl_attention_desc d)
{
    if (!d.heads_kv)
        d.heads_kv = d.heads_q;
    if (!d.head_dim_v)
        d.head_dim_v = d.head_dim;
    if (d.scale == 0.0f)
        d.scale = (float)(1.0 / sqrt((double)d.head_dim));
    return d;
}

/* Strides (batch, head, token) of a view: its own, or the layout's defaults when all are 0
 * ([total][heads][dim] for packed tensors, whose batch stride is ignored). Written out here
 * apart from the library, as the reference's own reading of the contract. */
static void view_strides(const fcl_tensor_view *v, fcl_layout layout, int packed, size_t heads,
                         size_t tokens, size_t dim, size_t st[3])
{
    st[0] = v->batch_stride, st[1] = v->head_stride, st[2] = v->token_stride;
    if (!st[0] && !st[1] && !st[2]) {
        if (packed || layout == FCL_LAYOUT_BLHD)
            st[0] = tokens * heads * dim, st[1] = dim, st[2] = heads * dim;
        else
            st[0] = heads * tokens * dim, st[1] = tokens * dim, st[2] = dim;
    }
    if (packed)
        st[0] = 0;
}

chk_attention_where chk_attention_locate(const fcl_attention_desc *d, const fcl_attention_host_io *io,
                                         size_t b)
{
    chk_attention_where w = {d->len_q, d->len_kv, 0, 0};
    if (io->cu_seqlens_q)
        w.q_start = (size_t)io->cu_seqlens_q[b], w.len_q = (size_t)(io->cu_seqlens_q[b + 1] - io->cu_seqlens_q[b]);
    if (io->cu_seqlens_kv)
        w.kv_start = (size_t)io->cu_seqlens_kv[b],
        w.len_kv = (size_t)(io->cu_seqlens_kv[b + 1] - io->cu_seqlens_kv[b]);
    if (io->seqlens_kv)
        w.len_kv = (size_t)io->seqlens_kv[b];
    if (io->leftpad_kv) /* its keys from row leftpad_kv[b] */
        w.kv_start = (size_t)io->leftpad_kv[b], w.len_kv -= (size_t)io->leftpad_kv[b];
    return w;
}

size_t chk_attention_q_at(const fcl_attention_desc *d, const fcl_attention_host_io *io, int out,
                          size_t b, size_t h, size_t i)
{
    const fcl_tensor_view *v = out ? &d->o_view : &d->q_view;
    size_t st[3], dim = out ? d->head_dim_v : d->head_dim;
    view_strides(v, d->layout, io->cu_seqlens_q != NULL, d->heads_q, d->len_q, dim, st);
    return v->offset + b * st[0] + h * st[1] + (chk_attention_locate(d, io, b).q_start + i) * st[2];
}

/* ---- K and V formats (v0.3), decoded in float64 as the contract defines them ---- */

#define CHK_FORMAT_ENTRY(NAME, lower, value, type, n, size, role)                              \
    [value] = {.name = #lower, .elems = (n), .bytes = (size), .dtype = (type), .roles = (role)},
const chk_format chk_formats[FCL_KV_FORMAT_MAX + 1] = {FCL_KV_FORMATS(CHK_FORMAT_ENTRY)};
#undef CHK_FORMAT_ENTRY

unsigned chk_kv_format(fcl_kv_format f, fcl_dtype dtype_kv)
{
    return f ? (unsigned)f : (unsigned)dtype_kv + 1;
}

size_t chk_kv_row_units(unsigned format, size_t dim)
{
    const chk_format *f = &chk_formats[format];
    return (f->roles & FCL_ROLE_FLOAT) ? dim : dim / f->elems * f->bytes;
}

static double fp8_value(unsigned x, int exp_bits, int man_bits, int e4m3)
{
    const int bias = (1 << (exp_bits - 1)) - 1, e = (int)(x >> man_bits) & ((1 << exp_bits) - 1);
    const int m = (int)x & ((1 << man_bits) - 1);
    double v;
    if (e4m3 && e == 15 && m == 7)
        v = NAN;
    else if (!e4m3 && e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, 1 - bias - man_bits);
    else
        v = ldexp((double)(m + (1 << man_bits)), e - bias - man_bits);
    return x & 0x80 ? -v : v;
}

size_t chk_kv_unit_bytes(unsigned format)
{
    const chk_format *f = &chk_formats[format];
    return (f->roles & FCL_ROLE_FLOAT) ? f->bytes : 1;
}

size_t chk_kv_row_bytes(unsigned format, size_t dim)
{
    return chk_kv_row_units(format, dim) * chk_kv_unit_bytes(format);
}

double chk_kv_decode(const void *buf, unsigned format, size_t row, size_t i)
{
    static const int iq4_nl[16] = FCL_IQ4_NL_VALUES;
    const unsigned char *bytes = buf;
    const chk_format *f = &chk_formats[format];
    if (f->roles & FCL_ROLE_FLOAT)
        return chk_load(buf, (fcl_dtype)f->dtype, row + i);
    if (format == FCL_KV_FP8_E4M3 || format == FCL_KV_FP8_E5M2)
        return fp8_value(bytes[row + i], format == FCL_KV_FP8_E4M3 ? 4 : 5,
                         format == FCL_KV_FP8_E4M3 ? 3 : 2, format == FCL_KV_FP8_E4M3);
    if (format == FCL_KV_INT8)
        return (double)(signed char)bytes[row + i];
    const unsigned char *blk = bytes + row + i / 32 * f->bytes;
    const size_t j = i % 32;
    const double dd = chk_half_to_float((uint16_t)(blk[0] | blk[1] << 8));
    const double mm = chk_half_to_float((uint16_t)(blk[2] | blk[3] << 8));
    const int with_min = format == FCL_KV_Q4_1 || format == FCL_KV_Q5_1;
    const int five = format == FCL_KV_Q5_0 || format == FCL_KV_Q5_1;
    if (format == FCL_KV_Q8_0)
        return dd * (signed char)blk[2 + j];
    const unsigned char *qh = blk + (with_min ? 4 : 2), *qs = qh + (five ? 4 : 0);
    int n = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    if (five) {
        const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                           (uint32_t)qh[3] << 24;
        n |= (int)((h >> j) & 1) << 4;
    }
    if (format == FCL_KV_IQ4_NL)
        return dd * iq4_nl[n];
    if (with_min)
        return dd * n + mm;
    return dd * (n - (five ? 16 : 8));
}

/* The unit where row j of K (is_v 0) or V (1) for kv head hk of sequence b starts (elements,
 * or bytes of a coded format). */
static size_t kv_at(const fcl_attention_desc *d, const fcl_attention_host_io *io, int is_v,
                    size_t b, size_t hk, size_t j)
{
    const fcl_tensor_view *v = is_v ? &d->v_view : &d->k_view;
    const unsigned format = chk_kv_format(is_v ? d->format_v : d->format_k, d->dtype_kv);
    size_t st[3], dim = chk_kv_row_units(format, is_v ? d->head_dim_v : d->head_dim);
    if (d->page_size && io->block_table) {
        view_strides(v, d->layout, 0, d->heads_kv, d->page_size, dim, st);
        size_t page = (size_t)io->block_table[b * d->block_table_stride + j / d->page_size];
        return v->offset + page * st[0] + hk * st[1] + (j % d->page_size) * st[2];
    }
    view_strides(v, d->layout, io->cu_seqlens_kv != NULL, d->heads_kv, d->len_kv, dim, st);
    return v->offset + b * st[0] + hk * st[1] + (chk_attention_locate(d, io, b).kv_start + j) * st[2];
}

/* The factor of row j of K (is_v 0) or V (1) for kv head hk of sequence b. */
static double kv_scale(const fcl_attention_desc *d, const fcl_attention_host_io *io, int is_v,
                       size_t b, size_t hk, size_t j)
{
    const fcl_kv_scale mode = is_v ? d->scale_mode_v : d->scale_mode_k;
    const float *scales = is_v ? io->v_scales : io->k_scales;
    const float tensor = is_v ? d->v_scale : d->k_scale;
    if (mode == FCL_KV_SCALE_TENSOR)
        return tensor != 0.0f ? tensor : 1.0;
    if (!scales)
        return mode == FCL_KV_SCALE_NONE ? 1.0 : NAN; /* a scaled mode without its buffer */
    if (mode == FCL_KV_SCALE_HEAD)
        return scales[b * (is_v ? d->v_scales_batch_stride : d->k_scales_batch_stride) + hk];
    if (mode != FCL_KV_SCALE_TOKEN)
        return 1.0;
    const fcl_tensor_view *v = is_v ? &d->v_scales_view : &d->k_scales_view;
    const int paged = d->page_size && io->block_table;
    const size_t tokens = paged ? d->page_size : d->len_kv;
    size_t st[3] = {v->batch_stride, v->head_stride, v->token_stride};
    if (!st[0] && !st[1] && !st[2])
        st[0] = d->heads_kv * tokens, st[1] = tokens, st[2] = 1;
    if (paged) {
        size_t page = (size_t)io->block_table[b * d->block_table_stride + j / d->page_size];
        return scales[v->offset + page * st[0] + hk * st[1] + (j % d->page_size) * st[2]];
    }
    if (io->cu_seqlens_kv)
        st[0] = 0;
    return scales[v->offset + b * st[0] + hk * st[1] + (chk_attention_locate(d, io, b).kv_start + j) * st[2]];
}

double chk_kv_value(const fcl_attention_desc *d, const fcl_attention_host_io *io, int is_v,
                    size_t b, size_t hk, size_t j, size_t e)
{
    const unsigned format = chk_kv_format(is_v ? d->format_v : d->format_k, d->dtype_kv);
    return chk_kv_decode(is_v ? io->v : io->k, format, kv_at(d, io, is_v, b, hk, j), e) *
           kv_scale(d, io, is_v, b, hk, j);
}

static double mask_value(const fcl_attention_desc *d, const void *mask, size_t at)
{
    if (d->mask_type == FCL_MASK_ADD_F16)
        return chk_half_to_float(((const uint16_t *)mask)[at]);
    return ((const float *)mask)[at];
}

/* The score of key j for query i of (b, h) in float64, -inf where it is hidden. */
static double score_of(const fcl_attention_desc *d, const fcl_attention_host_io *io,
                       chk_attention_where w, size_t b, size_t h, size_t i, size_t j)
{
    const double pos = (double)i + (io->query_offsets ? (double)io->query_offsets[b]
                                                       : (double)w.len_kv - (double)w.len_q);
    const double jd = (double)j;
    /* causality: key j up to p(i) (bottom-right, or with query_offsets), else up to i */
    const int top_left = d->causal == FCL_CAUSAL_TOP_LEFT && !io->query_offsets;
    if (d->causal != FCL_CAUSAL_NONE && jd > (top_left ? (double)i : pos))
        return -INFINITY;
    if (d->window && ((d->window_left != FCL_WINDOW_UNBOUNDED && jd < pos - (double)d->window_left) ||
                      (d->window_right != FCL_WINDOW_UNBOUNDED && jd > pos + (double)d->window_right)))
        return -INFINITY;
    const size_t hk = h / (d->heads_q / d->heads_kv), qo = chk_attention_q_at(d, io, 0, b, h, i);
    double dot = 0.0;
    for (size_t e = 0; e < d->head_dim; e++)
        dot += (double)chk_load(io->q, d->dtype_q, qo + e) * chk_kv_value(d, io, 0, b, hk, j, e);
    double s = (double)d->scale * dot;
    if (d->softcap > 0.0f)
        s = d->softcap * tanh(s / d->softcap);
    const double slope = io->alibi_slopes ? io->alibi_slopes[b * d->alibi_slopes_batch_stride + h] : 0.0;
    if (io->alibi_slopes && !d->alibi_from_mask)
        s -= slope * fabs(pos - jd);
    if (d->mask_type != FCL_MASK_NONE) {
        size_t at = b * d->mask_stride_batch + h * d->mask_stride_head + i * d->mask_stride_q + j;
        if (d->mask_type == FCL_MASK_BOOL_U8)
            return ((const unsigned char *)io->mask)[at] ? s : -INFINITY;
        double add = mask_value(d, io->mask, at);
        s += d->alibi_from_mask && add != -INFINITY ? slope * add : add;
    }
    return s;
}

void chk_attention_row_io(const fcl_attention_desc *d, const fcl_attention_host_io *io, size_t b,
                          size_t h, size_t i, double *out_row, double *lse)
{
    chk_attention_row_sized(d, io, b, h, i, out_row, NULL, lse);
}

void chk_attention_row_sized(const fcl_attention_desc *d, const fcl_attention_host_io *io,
                             size_t b, size_t h, size_t i, double *out_row, double *sizes,
                             double *lse)
{
    const chk_attention_where w = chk_attention_locate(d, io, b);
    const size_t hk = h / (d->heads_q / d->heads_kv);
    double m = io->sinks ? io->sinks[h] : -INFINITY;
    int undefined = 0, any = 0;
    double *score = malloc((w.len_kv ? w.len_kv : 1) * sizeof(double));
    for (size_t j = 0; j < w.len_kv; j++) {
        score[j] = score_of(d, io, w, b, h, i, j);
        undefined |= isnan(score[j]) || score[j] == INFINITY;
        any |= score[j] > -INFINITY;
        m = score[j] > m ? score[j] : m;
    }
    double sum = io->sinks && m > -INFINITY ? exp(io->sinks[h] - m) : 0.0;
    for (size_t e = 0; e < d->head_dim_v; e++)
        out_row[e] = 0.0;
    for (size_t e = 0; e < d->head_dim_v && sizes; e++)
        sizes[e] = 0.0;
    for (size_t j = 0; j < w.len_kv && any; j++) {
        double p = exp(score[j] - m);
        sum += p;
        for (size_t e = 0; e < d->head_dim_v && p > 0; e++) {
            const double v = chk_kv_value(d, io, 1, b, hk, j, e);
            out_row[e] += p * v;
            if (sizes)
                sizes[e] += p * fabs(v);
        }
    }
    for (size_t e = 0; e < d->head_dim_v; e++) {
        out_row[e] = undefined ? NAN : !any ? 0.0 : out_row[e] / sum;
        if (sizes)
            sizes[e] = !any ? 0.0 : sizes[e] / sum;
    }
    *lse = undefined ? NAN : m == -INFINITY ? -INFINITY : m + log(sum);
    free(score);
}

void chk_attention_row(const fcl_attention_desc *d, const void *q, const void *k, const void *v,
                       const void *mask, size_t b, size_t h, size_t i, double *out_row,
                       double *lse)
{
    const fcl_attention_host_io io = {.q = q, .k = k, .v = v, .mask = mask};
    chk_attention_row_io(d, &io, b, h, i, out_row, lse);
}

/* Whether d's K or V are coded (a format beyond dtype_kv's, or scales). */
static int kv_coded(const fcl_attention_desc *d)
{
    const unsigned fk = chk_kv_format(d->format_k, d->dtype_kv);
    return fk != chk_kv_format(d->format_v, d->dtype_kv) || fk > FCL_KV_BF16 ||
           d->scale_mode_k || d->scale_mode_v;
}

chk_tolerance chk_attention_tolerance(const fcl_attention_desc *d)
{
    /* f32: NMSE 1e-8 and 5e-5 absolute per element. Half storage: NMSE 1e-5, and per
     * element the output rounding (outputs stay below about 4 in magnitude); bf16 inputs add
     * 2^-8 relative: the tensor cores take p rounded to bf16 for the second product (as
     * FlashAttention-2 does), which a row over a few keys shows (one of 37440 elements was
     * 0.0041 off at 1.38 on the H100). */
    if (d->dtype_o == FCL_DTYPE_BF16)
        return (chk_tolerance){2e-2, 0.0, 1e-5};
    /* K and V in a coded format (v0.3): the contract's float32 rule for float32 q and out,
     * 1e-5 with a half q or out; with bf16 q the tensor cores' p in bf16 adds 2^-8 relative,
     * as below (a row of iq4_nl values near 1.56 was 0.0043 off on the H200), relative to
     * the terms an element sums where check_attention_run gives their sizes
     * (chk_compare_sized): an element of 0.073 summing terms of 0.76 and -0.66 (iq4_nl from
     * raw bytes) was 0.0048 off on the H200, each term within 2^-9. */
    if (kv_coded(d))
        return d->dtype_q == FCL_DTYPE_F32 && d->dtype_o == FCL_DTYPE_F32
                   ? (chk_tolerance){5e-5, 0.0, 1e-8}
                   : (chk_tolerance){4e-3, d->dtype_q == FCL_DTYPE_BF16 ? 4e-3 : 0.0, 1e-5};
    if (d->dtype_q == FCL_DTYPE_BF16 || d->dtype_kv == FCL_DTYPE_BF16)
        return (chk_tolerance){4e-3, 4e-3, 1e-5};
    if (d->dtype_o == FCL_DTYPE_F16 || d->dtype_q != FCL_DTYPE_F32 || d->dtype_kv != FCL_DTYPE_F32)
        return (chk_tolerance){4e-3, 0.0, 1e-5};
    /* FCL_PRECISION_TF32 on float32 storage: q, k, p and v cut to 10 mantissa bits where the
     * tensor cores run it (NMSE 1e-6 to 3e-6, at most 3e-3 off per element in a numpy model
     * of the kernel's arithmetic); float32 elsewhere. */
    if (d->precision == FCL_PRECISION_TF32)
        return (chk_tolerance){1e-2, 0.0, 1e-5};
    return (chk_tolerance){5e-5, 0.0, 1e-8};
}

chk_tolerance chk_attention_lse_tolerance(const fcl_attention_desc *d)
{
    /* TF32's products cut q and k to 10 mantissa bits toward zero: a score moves by about
     * 2^-10 of |q||k| / sqrt(head_dim), 1e-3 at the tests' magnitudes (9.4e-4 seen on the
     * H100); float32 arithmetic elsewhere. */
    if (d->precision == FCL_PRECISION_TF32 && d->dtype_q == FCL_DTYPE_F32 &&
        d->dtype_kv == FCL_DTYPE_F32)
        return (chk_tolerance){5e-3, 1e-3, 1.0};
    return (chk_tolerance){1e-5, 1e-5, 1.0};
}

chk_tolerance chk_softmax_tolerance(fcl_dtype t)
{
    /* float32 as promised in the README; half types: their rounding (2^-11, 2^-8 relative,
     * f16 subnormals 2^-24 apart) on top of the float32 arithmetic. */
    if (t == FCL_DTYPE_F16)
        return (chk_tolerance){1e-7, 1e-3, 1e-6};
    if (t == FCL_DTYPE_BF16)
        return (chk_tolerance){1e-38, 8e-3, 1e-4};
    return (chk_tolerance){1e-6, 1e-5, 1e-10};
}

/* Special values must match exactly; finite ones within atol + rtol * size (|want|, or the
 * sizes of the terms want sums: chk_compare_sized). */
static int close_enough(double got, double want, double atol, double rtol, double size)
{
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got))
        return got == want;
    return fabs(got - want) <= atol + rtol * size;
}

static void note(chk_report *rep, size_t i, double got, double want, int ok)
{
    rep->checked++;
    if (isfinite(got) && isfinite(want) && fabs(got - want) > rep->max_abs_err)
        rep->max_abs_err = fabs(got - want);
    if (!ok && rep->bad++ == 0) {
        rep->first_bad = i;
        rep->got = got;
        rep->want = want;
    }
}

/* Accumulates one comparison into rep and the NMSE sums. */
static void compare_one(chk_report *rep, size_t i, double g, double w, double size,
                        chk_tolerance tol, double *err2, double *ref2)
{
    note(rep, i, g, w, close_enough(g, w, tol.atol, tol.rtol, size));
    if (isfinite(g) && isfinite(w)) {
        *err2 += (g - w) * (g - w);
        *ref2 += w * w;
    }
}

static int finish_compare(chk_report *rep, double err2, double ref2, chk_tolerance tol)
{
    rep->nmse = ref2 > 0 ? err2 / ref2 : err2;
    if (rep->nmse > tol.nmse && rep->bad == 0) {
        rep->bad = 1; /* every element passed, the whole did not */
        rep->first_bad = (size_t)-1;
    }
    return rep->bad == 0;
}

int chk_compare(const void *got, fcl_dtype t, size_t rows, size_t cols, size_t stride,
                const double *want, chk_tolerance tol, chk_report *rep)
{
    double err2 = 0.0, ref2 = 0.0;
    memset(rep, 0, sizeof *rep);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++)
            compare_one(rep, r * cols + j, chk_load(got, t, r * stride + j), want[r * cols + j],
                        fabs(want[r * cols + j]), tol, &err2, &ref2);
    return finish_compare(rep, err2, ref2, tol);
}

int chk_compare_values(const double *got, const double *want, size_t n, chk_tolerance tol,
                       chk_report *rep)
{
    return chk_compare_sized(got, want, NULL, n, tol, rep);
}

int chk_compare_sized(const double *got, const double *want, const double *sizes, size_t n,
                      chk_tolerance tol, chk_report *rep)
{
    double err2 = 0.0, ref2 = 0.0;
    memset(rep, 0, sizeof *rep);
    for (size_t i = 0; i < n; i++)
        compare_one(rep, i, got[i], want[i], sizes ? sizes[i] : fabs(want[i]), tol, &err2, &ref2);
    return finish_compare(rep, err2, ref2, tol);
}

int chk_compare_lse(const float *got, const double *want, size_t n, chk_report *rep)
{
    memset(rep, 0, sizeof *rep);
    for (size_t i = 0; i < n; i++) {
        double rtol = 1e-5 * (fabs(want[i]) > 1.0 ? fabs(want[i]) : 1.0);
        note(rep, i, got[i], want[i], close_enough(got[i], want[i], rtol, 0.0, 0.0));
    }
    return rep->bad == 0;
}

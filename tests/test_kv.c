/* K and V in quantized and 8-bit formats (the v0.3 contract): every format for K and for V,
 * each on its own and mixed, built from data by the tests' port of ggml's quantizers and
 * from random bytes (every code pattern), with every scale mode, paged, packed and viewed
 * caches, GQA, MLA, the score modifiers, split-KV and lse, on the default device (the
 * kv_gpu_like run takes the GPU kernels there) against the float64 reference over the
 * decoded values (never the unquantized data: quantization error is the caller's choice).
 * Bad input gets a status and a sentence. */
#include "kv_reference.h"
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const unsigned all_formats[] = {
    FCL_KV_F32,  FCL_KV_F16,  FCL_KV_BF16,   FCL_KV_Q8_0,     FCL_KV_Q4_0,     FCL_KV_Q4_1,
    FCL_KV_Q5_0, FCL_KV_Q5_1, FCL_KV_IQ4_NL, FCL_KV_FP8_E4M3, FCL_KV_FP8_E5M2, FCL_KV_INT8};
#define N_FORMATS (sizeof all_formats / sizeof all_formats[0])

/* One contiguous case: K in fk, V in fv, built by fill. */
static void run_contiguous(fcl_attention_desc d, unsigned fk, unsigned fv, kv_fill fill)
{
    attention_run r = {.d = d};
    r.d.format_k = (fcl_kv_format)fk;
    r.d.format_v = (fcl_kv_format)fv;
    attention_contiguous_inputs(&r);
    kv_recode(&r, fill);
    check_attention_run(&r);
    kv_free_run(&r);
}

/* Every format for K and V alike, from data and from random bytes, prefill and decoding (GQA
 * groups of 2, bottom-right causality). */
static void test_every_format(void **state)
{
    (void)state;
    for (size_t f = 0; f < N_FORMATS; f++)
        for (int fill = 0; fill < 2; fill++) {
            const unsigned fmt = all_formats[f];
            fcl_attention_desc d = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = 33,
                                    .len_kv = 70, .head_dim = 64, .causal = FCL_CAUSAL_BOTTOM_RIGHT};
            /* int8's codes reach 127: scaled, as LMDeploy keeps them */
            if (fmt == FCL_KV_INT8)
                d.scale_mode_k = d.scale_mode_v = FCL_KV_SCALE_TENSOR, d.k_scale = d.v_scale = 0.03f;
            run_contiguous(d, fmt, fmt, (kv_fill)fill);
            d.len_q = 1;
            run_contiguous(d, fmt, fmt, (kv_fill)fill);
        }
}

/* K and V in different formats (llama.cpp's -ctk/-ctv pairs and more), half q and out too. */
static void test_mixed_formats(void **state)
{
    (void)state;
    static const unsigned pairs[][2] = {
        {FCL_KV_Q8_0, FCL_KV_F16},  {FCL_KV_F16, FCL_KV_Q4_0},     {FCL_KV_Q4_0, FCL_KV_Q8_0},
        {FCL_KV_F32, FCL_KV_F16},   {FCL_KV_BF16, FCL_KV_FP8_E4M3}, {FCL_KV_Q5_1, FCL_KV_IQ4_NL},
        {FCL_KV_FP8_E5M2, FCL_KV_Q5_0}, {FCL_KV_Q4_1, FCL_KV_BF16}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        for (int half = 0; half < 2; half++) {
            fcl_attention_desc d = {.batch = 1, .heads_q = 4, .heads_kv = 1, .len_q = i % 2 ? 2 : 19,
                                    .len_kv = 45, .head_dim = 32, .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                                    .layout = (fcl_layout)(i % 2)};
            if (half)
                d.dtype_q = d.dtype_o = FCL_DTYPE_F16;
            run_contiguous(d, pairs[i][0], pairs[i][1], (kv_fill)(i % 2));
        }
}

/* Each scale mode on K and on V, distinct per head and per token, over formats that use them
 * (fp8 with TENSOR as vLLM, int8 with TOKEN as LMDeploy, q8_0 and f16 with HEAD). */
static void test_scales(void **state)
{
    (void)state;
    static const struct {
        unsigned format;
        fcl_kv_scale k, v;
    } cases[] = {{FCL_KV_FP8_E4M3, FCL_KV_SCALE_TENSOR, FCL_KV_SCALE_TENSOR},
                 {FCL_KV_INT8, FCL_KV_SCALE_TOKEN, FCL_KV_SCALE_TOKEN},
                 {FCL_KV_Q8_0, FCL_KV_SCALE_HEAD, FCL_KV_SCALE_NONE},
                 {FCL_KV_F16, FCL_KV_SCALE_NONE, FCL_KV_SCALE_HEAD},
                 {FCL_KV_FP8_E5M2, FCL_KV_SCALE_TOKEN, FCL_KV_SCALE_HEAD},
                 {FCL_KV_F32, FCL_KV_SCALE_TOKEN, FCL_KV_SCALE_TENSOR}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t len_q = 1; len_q <= 24; len_q += 23) {
            attention_run r = {.d = {.batch = 3, .heads_q = 6, .heads_kv = 3, .len_q = len_q,
                                     .len_kv = 41, .head_dim = 64, .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                                     .format_k = (fcl_kv_format)cases[c].format,
                                     .format_v = (fcl_kv_format)cases[c].format}};
            attention_contiguous_inputs(&r);
            kv_recode(&r, KV_FROM_DATA);
            if (cases[c].format == FCL_KV_INT8) /* codes of +-127 times scales near 1/64 */
                for (size_t i = 0; i < 2; i++) {
                    const size_t n = r.k_n / 64;
                    float *s = kv_random_scales(n, support_rng());
                    for (size_t e = 0; e < n; e++)
                        s[e] /= 64.0f;
                    *(i ? &r.io.v_scales : &r.io.k_scales) = s;
                    *(i ? &r.vs_n : &r.ks_n) = n;
                    *(i ? &r.d.scale_mode_v : &r.d.scale_mode_k) = FCL_KV_SCALE_TOKEN;
                }
            else
                kv_add_scales(&r, 0, cases[c].k), kv_add_scales(&r, 1, cases[c].v);
            check_attention_run(&r);
            if (cases[c].k == FCL_KV_SCALE_TOKEN) { /* left padding moves the rows' scales too */
                static const int32_t pad[3] = {0, 7, 41};
                r.io.leftpad_kv = pad;
                check_attention_run(&r);
            }
            kv_free_run(&r);
        }
}

/* Paged caches of page sizes 1, 16 and 17 with shuffled block tables, per-sequence lengths
 * (an empty one), GQA and both layouts, TOKEN scales found through the same pages. */
static void test_paged(void **state)
{
    (void)state;
    static const int32_t lens[3] = {60, 0, 23};
    static const size_t page_sizes[3] = {1, 16, 17};
    static const unsigned formats[3] = {FCL_KV_Q4_1, FCL_KV_INT8, FCL_KV_Q8_0};
    for (int ps = 0; ps < 3; ps++)
        for (size_t len_q = 1; len_q <= 5; len_q += 4) {
            attention_run r = {.d = {.batch = 3, .heads_q = 8, .heads_kv = 2, .len_q = len_q,
                                     .len_kv = 60, .head_dim = 64, .page_size = page_sizes[ps],
                                     .layout = (fcl_layout)(ps % 2), .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                                     .format_k = (fcl_kv_format)formats[ps],
                                     .format_v = (fcl_kv_format)formats[(ps + 1) % 3]}};
            int32_t *table;
            attention_paged_inputs(&r, lens, &table);
            kv_recode(&r, (kv_fill)(ps % 2));
            kv_add_scales(&r, 0, FCL_KV_SCALE_TOKEN);
            if (formats[ps] == FCL_KV_INT8) /* codes of +-127 times scales near 1/64 */
                for (size_t e = 0; e < r.ks_n; e++)
                    ((float *)r.io.k_scales)[e] /= 64.0f;
            if (formats[(ps + 1) % 3] == FCL_KV_INT8)
                kv_add_scales(&r, 1, FCL_KV_SCALE_TENSOR), r.d.v_scale = 0.02f;
            check_attention_run(&r);
            r.d.kv_splits = 3;
            check_attention_run(&r);
            kv_free_run(&r);
            free(table);
        }
}

/* Views counting bytes: K and V rows inside one longer buffer (ggml's cache views: rows with
 * padding, an offset), and MLA's head dims 576 / 512 with V as a view of K's bytes. */
static void test_views(void **state)
{
    (void)state;
    const unsigned fmt = FCL_KV_Q5_0;
    const size_t L = 29, Hkv = 2, D = 64, row = chk_kv_row_units(fmt, D); /* 44 bytes */
    /* one buffer [L][Hkv][K row, V row, 6 spare bytes] after a 10-byte header */
    attention_run r = {.d = {.batch = 1, .heads_q = 4, .heads_kv = Hkv, .len_q = 7, .len_kv = L,
                             .head_dim = D, .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                             .format_k = (fcl_kv_format)fmt, .format_v = (fcl_kv_format)fmt}};
    attention_contiguous_inputs(&r);
    const size_t slot = 2 * row + 6, token = Hkv * slot;
    unsigned char *cache = kv_tensor(fmt, 1, ((10 + L * token) / 22 + 1) * 32, KV_RAW, support_rng());
    unsigned char *rows = kv_tensor(fmt, 2 * L * Hkv, D, KV_RAW, support_rng());
    for (size_t t = 0; t < L; t++)
        for (size_t h = 0; h < Hkv; h++)
            for (int kv = 0; kv < 2; kv++)
                memcpy(cache + 10 + t * token + h * slot + kv * row,
                       rows + ((t * Hkv + h) * 2 + kv) * row, row);
    free(rows);
    free((void *)r.io.k);
    free((void *)r.io.v);
    r.io.k = r.io.v = cache;
    r.k_n = r.v_n = 10 + L * token;
    r.d.k_view = (fcl_tensor_view){10, 0, slot, token};
    r.d.v_view = (fcl_tensor_view){10 + row, 0, slot, token};
    check_attention_run(&r);
    attention_free_inputs(&r);

    /* MLA: K rows of 576 values in q8_0 (18 blocks), V the first 512 of them */
    attention_run m = {.d = {.batch = 1, .heads_q = 8, .heads_kv = 1, .len_q = 2, .len_kv = 37,
                             .head_dim = 576, .head_dim_v = 512, .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                             .format_k = FCL_KV_Q8_0, .format_v = FCL_KV_Q8_0}};
    attention_contiguous_inputs(&m);
    free((void *)m.io.v);
    m.io.v = NULL;
    m.v_n = m.k_n; /* recode_kv makes V; it is then dropped for the view of K */
    kv_recode(&m, KV_FROM_DATA);
    free((void *)m.io.v);
    m.io.v = m.io.k;
    m.v_n = m.k_n;
    m.d.v_view = (fcl_tensor_view){0, 37 * 612, 37 * 612, 612}; /* K's rows: 18 x 34 bytes */
    check_attention_run(&m);
    attention_free_inputs(&m);
}

/* Packed (varlen) keys with TOKEN scales through an explicit view, and the score modifiers
 * (softcap, ALiBi, window, sinks, a float16 mask) with split-KV and lse. */
static void test_varlen_and_modifiers(void **state)
{
    (void)state;
    static const int32_t cu_q[4] = {0, 5, 5, 17}, cu_kv[4] = {0, 9, 9, 40};
    attention_run r = {.d = {.batch = 3, .heads_q = 4, .heads_kv = 2, .len_q = 12, .len_kv = 31,
                             .head_dim = 64, .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                             .format_k = FCL_KV_FP8_E4M3, .format_v = FCL_KV_Q4_0}};
    attention_packed_inputs(&r, cu_q, cu_kv);
    kv_recode(&r, KV_FROM_DATA);
    r.ks_n = 40 * 2 + 3; /* [total][heads_kv] after 3 spare floats */
    r.io.k_scales = kv_random_scales(r.ks_n, support_rng());
    r.d.scale_mode_k = FCL_KV_SCALE_TOKEN;
    r.d.k_scales_view = (fcl_tensor_view){3, 0, 1, 2};
    check_attention_run(&r);
    kv_free_run(&r);

    float slopes[8], sinks[8];
    fcl_alibi_slopes(8, 8.0f, slopes);
    for (int i = 0; i < 8; i++)
        sinks[i] = (float)chk_normal(support_rng());
    for (int c = 0; c < 4; c++) {
        attention_run m = {.d = {.batch = 2, .heads_q = 8, .heads_kv = 2, .len_q = c % 2 ? 3 : 30,
                                 .len_kv = 90, .head_dim = 64, .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                                 .kv_splits = c >= 2 ? 4 : 0, .format_k = FCL_KV_Q8_0,
                                 .format_v = FCL_KV_FP8_E5M2}};
        attention_contiguous_inputs(&m);
        kv_recode(&m, KV_RAW);
        if (c == 0)
            m.d.softcap = 20.0f, m.io.alibi_slopes = slopes;
        if (c == 1)
            m.d.window = 1, m.d.window_left = 20, m.d.window_right = 0, m.io.sinks = sinks;
        if (c >= 2)
            attention_mask(&m, FCL_MASK_ADD_F16);
        check_attention_run(&m);
        attention_free_inputs(&m);
    }
}

/* ggml blocks whose d is negative, zero, subnormal or huge (values near 8e6), read exactly:
 * compared relative to their size. */
static void test_extreme_block_scales(void **state)
{
    (void)state;
    static const uint16_t d_bits[4] = {0xbc00 /* -1 */, 0x0000, 0x0003 /* subnormal */,
                                       0x7bff /* 65504 */};
    for (int c = 0; c < 4; c++) {
        attention_run r = {.d = {.batch = 1, .heads_q = 2, .heads_kv = 1, .len_q = 3, .len_kv = 40,
                                 .head_dim = 32, .format_k = FCL_KV_Q8_0, .format_v = FCL_KV_Q4_1}};
        attention_contiguous_inputs(&r);
        kv_recode(&r, KV_RAW);
        unsigned char *k = (unsigned char *)r.io.k, *v = (unsigned char *)r.io.v;
        for (size_t row = 0; row < 40; row += 3) { /* every third row's d */
            k[row * 34] = (unsigned char)d_bits[c], k[row * 34 + 1] = (unsigned char)(d_bits[c] >> 8);
            v[row * 20] = (unsigned char)d_bits[c], v[row * 20 + 1] = (unsigned char)(d_bits[c] >> 8);
        }
        if (c == 3) { /* huge keys: scores of 1e8 */
            float *q = (float *)r.io.q;
            for (size_t e = 0; e < r.q_n; e++)
                q[e] *= 1e-6f;
        }
        const fcl_attention_desc d = chk_attention_defaults(r.d);
        float *out = malloc(r.out_n * sizeof(float)), *lse = malloc(r.lse_n * sizeof(float));
        double *want = malloc(r.out_n * sizeof(double)), *got = malloc(r.out_n * sizeof(double));
        assert_true(out && lse && want && got);
        fcl_attention_host_io io = r.io;
        io.out = out;
        io.lse = lse;
        assert_int_equal(fcl_attention_run_host(support_ctx, &r.d, &io), FCL_SUCCESS);
        for (size_t h = 0; h < 2; h++)
            for (size_t i = 0; i < 3; i++) {
                double want_lse;
                chk_attention_row_io(&d, &io, 0, h, i, want + (h * 3 + i) * 32, &want_lse);
                assert_true(fabs(lse[h * 3 + i] - want_lse) <= 1e-5 * fmax(1.0, fabs(want_lse)));
            }
        double size = 0.0; /* float32 sums of values this large: errors relative to it */
        for (size_t e = 0; e < r.out_n; e++) {
            got[e] = out[e];
            size = fmax(size, fabs(want[e]));
        }
        chk_report rep;
        if (!chk_compare_values(got, want, r.out_n, (chk_tolerance){1e-5 * size, 1e-5, 1e-8}, &rep))
            fail_msg("d 0x%04x: %zu of %zu off, first %zu: got %.7g want %.7g (NMSE %.3g)",
                     d_bits[c], rep.bad, rep.checked, rep.first_bad, rep.got, rep.want, rep.nmse);
        free(out), free(lse), free(want), free(got);
        attention_free_inputs(&r);
    }
}

/* All 256 fp8 codes of each kind as keys' and values' elements (scaled down), and a NaN code
 * in one key and in one value: NaN reaches only the rows that see that key (causality hides
 * it from the others) and, from V, only its column. */
static void test_fp8_codes_and_nan(void **state)
{
    (void)state;
    for (int e5m2 = 0; e5m2 < 2; e5m2++) {
        const unsigned fmt = e5m2 ? FCL_KV_FP8_E5M2 : FCL_KV_FP8_E4M3;
        attention_run r = {.d = {.batch = 1, .heads_q = 2, .heads_kv = 1, .len_q = 8, .len_kv = 64,
                                 .head_dim = 32, .format_k = (fcl_kv_format)fmt,
                                 .format_v = (fcl_kv_format)fmt, .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                                 .scale_mode_k = FCL_KV_SCALE_TENSOR,
                                 .scale_mode_v = FCL_KV_SCALE_TENSOR,
                                 .k_scale = e5m2 ? 1.0f / 65536.0f : 1.0f / 256.0f,
                                 .v_scale = e5m2 ? 1.0f / 65536.0f : 1.0f / 256.0f}};
        attention_contiguous_inputs(&r);
        kv_recode(&r, KV_RAW);
        unsigned char *k = (unsigned char *)r.io.k, *v = (unsigned char *)r.io.v;
        const uint8_t nan_code = e5m2 ? 0x7d : 0x7f, inf_code = 0x7c;
        for (size_t e = 0; e < 64 * 32; e++) { /* every code, but NaN and infinity */
            uint8_t c = (uint8_t)(e * 7 + 3);
            const int special = (c & 0x7f) == nan_code || (c & 0x7f) == 0x7f ||
                                (e5m2 && (c & 0x7c) == 0x7c);
            k[e] = special ? 0 : c;
            v[e] = special ? 0 : (uint8_t)(e * 13 + 1);
            v[e] = ((v[e] & 0x7f) == nan_code || (v[e] & 0x7f) == 0x7f || (e5m2 && (v[e] & 0x7c) == 0x7c))
                       ? 0 : v[e];
        }
        check_attention_run(&r);
        k[60 * 32 + 5] = nan_code; /* key 60: seen by queries 4 to 7 (bottom-right) */
        v[62 * 32 + 9] = (uint8_t)(0x80 | nan_code); /* value 62, column 9: queries 6 and 7 */
        if (e5m2)
            v[10 * 32 + 2] = inf_code; /* +inf in V: the rows that see key 10 get inf or NaN */
        check_attention_run(&r);
        attention_free_inputs(&r);
    }
}

/* Decoding (one query: on CPUs the one-row kernel) adds nothing of a key of weight 0: V's NaN
 * codes at keys the mask hides (attention_mask's: key j where j % 5 == 2), each in a block of
 * 8 keys with visible ones, reach no row. */
static void test_fp8_nan_where_the_mask_hides(void **state)
{
    (void)state;
    attention_run r = {.d = {.batch = 1, .heads_q = 2, .heads_kv = 1, .len_q = 1, .len_kv = 64,
                             .head_dim = 32, .format_k = FCL_KV_FP8_E4M3,
                             .format_v = FCL_KV_FP8_E4M3}};
    attention_contiguous_inputs(&r);
    kv_recode(&r, KV_FROM_DATA);
    attention_mask(&r, FCL_MASK_ADD_F32);
    unsigned char *v = (unsigned char *)r.io.v;
    v[22 * 32 + 3] = 0x7f;
    v[47 * 32 + 7] = 0xff;
    check_attention_run(&r); /* the reference's rows are finite: a NaN out fails it */
    attention_free_inputs(&r);
}

/* A long cache decoded in key splits (GQA, TOKEN-scaled int8, head dim 128). */
static void test_long_cache_split_kv(void **state)
{
    (void)state;
    attention_run r = {.d = {.batch = 2, .heads_q = 8, .heads_kv = 2, .len_q = 1,
                             .len_kv = support_small() ? 700 : 3000, .head_dim = 128,
                             .kv_splits = 7, .format_k = FCL_KV_Q8_0, .format_v = FCL_KV_Q4_0}};
    attention_contiguous_inputs(&r);
    kv_recode(&r, KV_FROM_DATA);
    check_attention_run(&r);
    attention_free_inputs(&r);
}

/* ---- bad input ---- */

static void expect_invalid(const fcl_attention_desc *d, const fcl_attention_host_io *io,
                           const char *words)
{
    fcl_status s = fcl_attention_run_host(support_ctx, d, io);
    if (s != FCL_ERROR_INVALID_ARGUMENT)
        fail_msg("expected FCL_ERROR_INVALID_ARGUMENT naming \"%s\", got %s", words, fcl_status_string(s));
    if (!strstr(fcl_context_last_error(support_ctx), words))
        fail_msg("the sentence \"%s\" does not name \"%s\"", fcl_context_last_error(support_ctx), words);
}

static void test_bad_input(void **state)
{
    (void)state;
    attention_run r = {.d = {.batch = 1, .heads_q = 2, .heads_kv = 1, .len_q = 2, .len_kv = 8,
                             .head_dim = 64, .format_k = FCL_KV_Q8_0, .format_v = FCL_KV_Q8_0}};
    attention_contiguous_inputs(&r);
    kv_recode(&r, KV_RAW);
    float out[2 * 2 * 64], scales[64] = {0};
    fcl_attention_host_io io = r.io;
    io.out = out;
    fcl_attention_desc d = r.d;
    d.head_dim = 48;
    expect_invalid(&d, &io, "head_dim (48) must be a multiple of 32");
    d = r.d;
    d.format_v = (fcl_kv_format)13;
    expect_invalid(&d, &io, "format_v (13)");
    d = r.d;
    d.k_view = (fcl_tensor_view){1, 8 * 68, 8 * 68, 68};
    expect_invalid(&d, &io, "k_view.offset (1 bytes) is odd");
    d.k_view = (fcl_tensor_view){0, 8 * 68, 8 * 68, 69};
    expect_invalid(&d, &io, "k_view.token_stride (69 bytes) is odd");
    d = r.d;
    d.scale_mode_k = FCL_KV_SCALE_TOKEN;
    expect_invalid(&d, &io, "k_scales is NULL");
    d.scale_mode_k = (fcl_kv_scale)4;
    expect_invalid(&d, &io, "scale_mode_k (4)");
    d = r.d;
    d.v_scale = 2.0f;
    expect_invalid(&d, &io, "v_scale (2)");
    d.scale_mode_v = FCL_KV_SCALE_TENSOR;
    d.v_scale = INFINITY;
    expect_invalid(&d, &io, "v_scale (inf)");
    d = r.d;
    fcl_attention_host_io with_scales = io;
    with_scales.v_scales = scales;
    expect_invalid(&d, &with_scales, "v_scales was given");
    d.scale_mode_v = FCL_KV_SCALE_TOKEN;
    d.k_scales_batch_stride = 2;
    expect_invalid(&d, &with_scales, "k_scales_batch_stride (2) is set");
    /* nothing was written by any of them */
    for (size_t e = 0; e < sizeof out / sizeof out[0]; e++)
        out[e] = 0.0f;
    fcl_attention_desc bad = r.d;
    bad.head_dim_v = 40;
    expect_invalid(&bad, &io, "head_dim_v (40)");
    for (size_t e = 0; e < sizeof out / sizeof out[0]; e++)
        assert_true(out[e] == 0.0f);
    attention_free_inputs(&r);
}

/* ---- fcl_kv_write ---- */

/* A write of 7 tokens (one skipped by slot -1) of 3 kv heads into a paged cache (pages of
 * 5, shuffled slots) whose K rows lie in a padded view; the expected bytes come from the
 * tests' own encoders (ggml's reference quantizers for the ggml formats) applied to
 * y = x / scale, written over the cache's previous bytes, which must otherwise stay. */
typedef struct write_case {
    unsigned format;
    fcl_kv_scale mode;
    fcl_dtype dtype_in;
    int specials; /* inputs with infinities, NaN, huge and tiny values and rounding ties */
} write_case;

static float write_input(size_t t, size_t e, int specials, chk_rng *rng)
{
    static const float odd[] = {INFINITY, -INFINITY, NAN, 1e30f, -1e-30f, 0.5f, 1.5f,
                                2.5f,     -2.5f,     0.0f, -0.0f, 1e-42f, 448.0f, 464.0f, 6e4f};
    if (specials && t == 2)
        return odd[e % (sizeof odd / sizeof odd[0])];
    return (float)(2.0 * chk_normal(rng));
}

/* Whether byte b lies in an element that is NaN in both a and w: the contract keeps a NaN a
 * NaN, not its payload or sign (x86 makes inf / inf a negative NaN, NVIDIA a positive one). */
static int same_nan(unsigned format, const unsigned char *a, const unsigned char *w, size_t b)
{
    const chk_format *f = &chk_formats[format];
    if (format == FCL_KV_FP8_E4M3)
        return (a[b] & 0x7f) == 0x7f && (w[b] & 0x7f) == 0x7f;
    if (format == FCL_KV_FP8_E5M2)
        return (a[b] & 0x7c) == 0x7c && (a[b] & 3) && (w[b] & 0x7c) == 0x7c && (w[b] & 3);
    if (!(f->roles & FCL_ROLE_FLOAT))
        return 0;
    const size_t e = b / f->bytes;
    return isnan(chk_load(a, (fcl_dtype)f->dtype, e)) && isnan(chk_load(w, (fcl_dtype)f->dtype, e));
}

static void check_write_case(const write_case *c)
{
    enum { T = 7, H = 3, D = 64, PS = 5, PAGES = 4 };
    static const int32_t slots[T] = {13, 0, 7, -1, 19, 4, 10};
    const chk_format *f = &chk_formats[c->format];
    const size_t row = chk_kv_row_units(c->format, D), unit = chk_kv_unit_bytes(c->format);
    const size_t page_stride = PS * H * row + 2 * (row % 2 ? 1 : 2), k_offset = 4;
    const size_t cache_units = k_offset + PAGES * page_stride;
    fcl_kv_write_desc d = {.tokens = T, .heads_kv = H, .head_dim = D, .dtype_in = c->dtype_in,
                           .page_size = PS, .num_pages = PAGES,
                           .format_k = (fcl_kv_format)c->format, .format_v = (fcl_kv_format)c->format,
                           .scale_mode_k = c->mode, .scale_mode_v = c->mode,
                           .k_view = {k_offset, page_stride, row, H * row},
                           .layout = FCL_LAYOUT_BLHD};
    if (c->mode == FCL_KV_SCALE_TENSOR)
        d.k_scale = 0.75f, d.v_scale = 3.0f;
    /* inputs [T][H][D], stored in dtype_in */
    float x[2][T * H * D];
    void *in[2];
    for (int kv = 0; kv < 2; kv++) {
        in[kv] = malloc(T * H * D * chk_dtype_size(c->dtype_in));
        assert_non_null(in[kv]);
        for (size_t e = 0; e < T * H * D; e++) {
            chk_store(in[kv], c->dtype_in, e, write_input(e / (H * D), e, c->specials, support_rng()));
            x[kv][e] = chk_load(in[kv], c->dtype_in, e);
        }
    }
    /* caches of random bytes (V contiguous: [page][slot][head]), and scales */
    const size_t v_units = PAGES * PS * H * row;
    unsigned char *cache[2], *want[2];
    size_t bytes[2] = {cache_units * unit, v_units * unit};
    float scales[2][PAGES * PS * H], want_scales[2][PAGES * PS * H];
    for (int kv = 0; kv < 2; kv++) {
        cache[kv] = malloc(bytes[kv]), want[kv] = malloc(bytes[kv]);
        assert_true(cache[kv] && want[kv]);
        for (size_t b = 0; b < bytes[kv]; b++)
            cache[kv][b] = (unsigned char)(chk_uniform(support_rng()) * 256);
        for (size_t e = 0; e < PAGES * PS * H; e++)
            scales[kv][e] = (float)(0.5 + chk_uniform(support_rng()));
        memcpy(want[kv], cache[kv], bytes[kv]);
        memcpy(want_scales[kv], scales[kv], sizeof scales[kv]);
    }
    const float top = c->format == FCL_KV_INT8 ? 127.0f : c->format == FCL_KV_FP8_E4M3 ? 448.0f : 57344.0f;
    for (size_t t = 0; t < T; t++)
        for (size_t h = 0; h < H && slots[t] >= 0; h++)
            for (int kv = 0; kv < 2; kv++) {
                const size_t page = (size_t)slots[t] / PS, pos = (size_t)slots[t] % PS;
                const size_t at = kv ? (page * PS + pos) * H * row + h * row
                                     : k_offset + page * page_stride + pos * H * row + h * row;
                const size_t scale_at = (page * H + h) * PS + pos; /* [page][head][slot] */
                const float *xr = x[kv] + (t * H + h) * D;
                float y[D], scale = 1.0f;
                if (c->mode == FCL_KV_SCALE_TENSOR)
                    scale = kv ? d.v_scale : d.k_scale;
                if (c->mode == FCL_KV_SCALE_HEAD)
                    scale = scales[kv][h];
                if (c->mode == FCL_KV_SCALE_TOKEN) {
                    float amax = 0.0f;
                    for (size_t e = 0; e < D; e++)
                        amax = fmaxf(amax, fabsf(xr[e]));
                    scale = want_scales[kv][scale_at] = amax / top;
                }
                for (size_t e = 0; e < D; e++)
                    y[e] = scale == 1.0f ? xr[e] : scale == 0.0f ? 0.0f : xr[e] / scale;
                assert_true(kv_encode_row(c->format, y, D, want[kv] + at * unit));
            }
    fcl_kv_write_host_io io = {.k_in = in[0], .v_in = in[1], .slots = slots, .k = cache[0],
                               .v = cache[1]};
    if (c->mode >= FCL_KV_SCALE_HEAD)
        io.k_scales = scales[0], io.v_scales = scales[1];
    if (c->mode == FCL_KV_SCALE_HEAD) /* [heads_kv] */
        for (int kv = 0; kv < 2; kv++)
            memcpy(want_scales[kv], scales[kv], sizeof scales[kv]);
    fcl_status s = fcl_kv_write_host(support_ctx, &d, &io);
    if (s != FCL_SUCCESS)
        fail_msg("%s scale mode %d: %s", f->name, c->mode, fcl_context_last_error(support_ctx));
    for (int kv = 0; kv < 2; kv++) {
        for (size_t b = 0; b < bytes[kv]; b++)
            if (cache[kv][b] != want[kv][b] && !same_nan(c->format, cache[kv], want[kv], b))
                fail_msg("%s (scale mode %d, input %s%s): %s byte %zu is 0x%02x, want 0x%02x",
                         f->name, c->mode, chk_dtype_name(c->dtype_in), c->specials ? ", specials" : "",
                         kv ? "v" : "k", b, cache[kv][b], want[kv][b]);
        assert_memory_equal(scales[kv], want_scales[kv], sizeof scales[kv]);
        free(in[kv]), free(cache[kv]), free(want[kv]);
    }
}

/* Every writable format with each scale mode it takes, bytes as the reference encoders give. */
static void test_write_bit_exact(void **state)
{
    (void)state;
    static const unsigned formats[] = {FCL_KV_F32,  FCL_KV_F16,  FCL_KV_BF16, FCL_KV_Q8_0,
                                       FCL_KV_Q4_0, FCL_KV_Q4_1, FCL_KV_Q5_0, FCL_KV_Q5_1,
                                       FCL_KV_FP8_E4M3, FCL_KV_FP8_E5M2, FCL_KV_INT8};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        const int ggml = (chk_formats[formats[i]].roles & FCL_ROLE_GGML) != 0;
        const int token = (chk_formats[formats[i]].roles & FCL_ROLE_TOKEN_WRITE) != 0;
        for (int mode = 0; mode <= (token ? 3 : 2); mode++)
            for (int specials = 0; specials <= !ggml; specials++) {
                /* ggml's reference is undefined for infinities and NaN: none for its formats */
                const write_case c = {formats[i], (fcl_kv_scale)mode,
                                      (fcl_dtype)((i + (size_t)mode) % 3), specials};
                check_write_case(&c);
            }
    }
}

/* Bad writes: a status naming the argument, nothing written. */
static void test_write_bad_input(void **state)
{
    (void)state;
    enum { D = 64 };
    float k_in[2 * D] = {0}, scales[8] = {0};
    unsigned char cache[4 * 2 * 34 * 2], before[sizeof cache];
    for (size_t b = 0; b < sizeof cache; b++)
        cache[b] = before[b] = (unsigned char)b;
    int32_t slots[2] = {1, 8};
    const fcl_kv_write_desc ok = {.tokens = 2, .heads_kv = 1, .head_dim = D, .page_size = 4,
                                  .num_pages = 2, .format_k = FCL_KV_Q8_0, .format_v = FCL_KV_Q8_0};
    fcl_kv_write_host_io io = {.k_in = k_in, .v_in = k_in, .slots = slots, .k = cache, .v = cache};
    fcl_kv_write_desc d = ok;
    struct {
        fcl_status status;
        const char *words;
    } want[] = {
        {FCL_ERROR_INVALID_ARGUMENT, "slots[1] (8) must be below num_pages x page_size (8)"},
        {FCL_ERROR_UNSUPPORTED, "iq4_nl is read-only"},
        {FCL_ERROR_UNSUPPORTED, "q8_0 with FCL_KV_SCALE_TOKEN"},
        {FCL_ERROR_INVALID_ARGUMENT, "k_scales_batch_stride (4) must be 0"},
        {FCL_ERROR_INVALID_ARGUMENT, "head_dim (48) must be a multiple of 32"},
        {FCL_ERROR_INVALID_ARGUMENT, "k_view.offset (3 bytes) is odd"},
        {FCL_ERROR_INVALID_ARGUMENT, "v_scales is NULL"},
        {FCL_ERROR_INVALID_ARGUMENT, "format_k (13)"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        d = ok;
        fcl_kv_write_host_io x = io;
        slots[1] = i == 0 ? 8 : 7;
        if (i == 1)
            d.format_v = FCL_KV_IQ4_NL;
        if (i == 2)
            d.format_k = FCL_KV_Q8_0, d.scale_mode_k = FCL_KV_SCALE_TOKEN, x.k_scales = scales;
        if (i == 3)
            d.scale_mode_k = FCL_KV_SCALE_HEAD, d.k_scales_batch_stride = 4, x.k_scales = scales;
        if (i == 4)
            d.head_dim = 48;
        if (i == 5)
            d.k_view = (fcl_tensor_view){3, 4 * 68, 68, 68};
        if (i == 6)
            d.scale_mode_v = FCL_KV_SCALE_HEAD;
        if (i == 7)
            d.format_k = (fcl_kv_format)13;
        fcl_status s = fcl_kv_write_host(support_ctx, &d, &x);
        if (s != want[i].status || !strstr(fcl_context_last_error(support_ctx), want[i].words))
            fail_msg("case %zu: %s, \"%s\"; want \"%s\"", i, fcl_status_string(s),
                     fcl_context_last_error(support_ctx), want[i].words);
        assert_memory_equal(cache, before, sizeof cache);
    }
}

/* The device call skips a slot beyond the cache (it cannot report it) and a negative one:
 * the cache holds exactly what the host call writes for the one good slot. */
static void test_write_device_skips_bad_slots(void **state)
{
    (void)state;
    enum { D = 32, H = 2, T = 3, PS = 4, PAGES = 2, ROW = 34 };
    const size_t bytes = 2 * PAGES * PS * H * ROW; /* K's pages, then V's */
    cl_context c;
    cl_command_queue queue;
    assert_int_equal(fcl_context_get_cl(support_ctx, &c, NULL, &queue), FCL_SUCCESS);
    float in[T * H * D];
    for (size_t e = 0; e < T * H * D; e++)
        in[e] = (float)chk_normal(support_rng());
    unsigned char want[2 * PAGES * PS * H * ROW], got[sizeof want];
    for (size_t b = 0; b < bytes; b++)
        want[b] = (unsigned char)(b * 7);
    const int32_t bad_slots[T] = {5, 1000, -1}, good_slots[T] = {5, -1, -1};
    const fcl_kv_write_desc d = {.tokens = T, .heads_kv = H, .head_dim = D, .page_size = PS,
                                 .num_pages = PAGES, .format_k = FCL_KV_Q8_0, .format_v = FCL_KV_Q8_0,
                                 .v_view = {PAGES * PS * H * ROW, PS * H * ROW, PS * ROW, ROW}};
    cl_int err;
    cl_mem in_buf = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof in, in, &err);
    cl_mem slots = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof bad_slots,
                                  (void *)bad_slots, &err);
    cl_mem cache = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, want, &err);
    assert_int_equal(err, CL_SUCCESS);
    const fcl_kv_write_io io = {.k_in = in_buf, .v_in = in_buf, .slots = slots, .k = cache, .v = cache};
    assert_int_equal(fcl_kv_write(support_ctx, &d, &io, 0, NULL, NULL), FCL_SUCCESS);
    assert_int_equal(clEnqueueReadBuffer(queue, cache, CL_TRUE, 0, bytes, got, 0, NULL, NULL), CL_SUCCESS);
    const fcl_kv_write_host_io host = {.k_in = in, .v_in = in, .slots = good_slots, .k = want, .v = want};
    assert_int_equal(fcl_kv_write_host(support_ctx, &d, &host), FCL_SUCCESS);
    assert_memory_equal(got, want, bytes);
    clReleaseMemObject(in_buf), clReleaseMemObject(slots), clReleaseMemObject(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_format),
        cmocka_unit_test(test_mixed_formats),
        cmocka_unit_test(test_scales),
        cmocka_unit_test(test_paged),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_varlen_and_modifiers),
        cmocka_unit_test(test_extreme_block_scales),
        cmocka_unit_test(test_fp8_codes_and_nan),
        cmocka_unit_test(test_fp8_nan_where_the_mask_hides),
        cmocka_unit_test(test_long_cache_split_kv),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_write_bit_exact),
        cmocka_unit_test(test_write_bad_input),
        cmocka_unit_test(test_write_device_skips_bad_slots),
    };
    return support_run_tests(tests);
}

/* Attention on an inference engine's own buffers (the v0.2 contract): views, per-sequence
 * lengths, packed (varlen) and paged sequences, softcap, ALiBi, windows, sinks, MLA head
 * sizes and merging, each alone and combined, on the default device (POCL in CI; the
 * attention_v2_gpu_like test runs the GPU kernels there) against the float64 reference.
 * Every run also checks that nothing outside out's view (and lse's rows) was written and
 * that no input changed. */
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- views ---- */

/* q, k and v as slices of one packed QKV buffer [batch][len][heads_q + 2 heads_kv][dim], out
 * written into a wider [batch][len][heads_q + 1][dim + 8] tensor at an offset. */
static void test_fused_qkv_and_wide_out(void **state)
{
    (void)state;
    for (int dt = 0; dt < 2; dt++) {
        attention_run r = {.d = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = 37, .len_kv = 37,
                                 .head_dim = 64, .causal = FCL_CAUSAL_BOTTOM_RIGHT,
                                 .dtype_q = (fcl_dtype)dt, .dtype_kv = (fcl_dtype)dt,
                                 .dtype_o = (fcl_dtype)dt}};
        const size_t H = 4, Hkv = 2, L = 37, D = 64, row = (H + 2 * Hkv) * D;
        r.q_n = r.k_n = r.v_n = 2 * L * row;
        void *qkv = test_tensor(r.q_n, (fcl_dtype)dt);
        r.io.q = r.io.k = r.io.v = qkv;
        r.d.q_view = (fcl_tensor_view){0, L * row, D, row};
        r.d.k_view = (fcl_tensor_view){H * D, L * row, D, row};
        r.d.v_view = (fcl_tensor_view){(H + Hkv) * D, L * row, D, row};
        const size_t wide = (H + 1) * (D + 8);
        r.d.o_view = (fcl_tensor_view){3, L * wide, D + 8, wide};
        r.out_n = 3 + 2 * L * wide;
        r.lse_n = 2 * H * L;
        check_attention_run(&r);
        r.d.len_q = 1; /* decoding the first token of each sequence */
        r.lse_n = 2 * H;
        check_attention_run(&r);
        free(qkv);
    }
}

/* One K/V shared by every sequence of the batch: a view with a zero batch stride. */
static void test_kv_shared_across_batch(void **state)
{
    (void)state;
    attention_run r = {.d = {.batch = 3, .heads_q = 4, .heads_kv = 2, .len_q = 9, .len_kv = 50,
                             .head_dim = 32, .causal = FCL_CAUSAL_BOTTOM_RIGHT}};
    attention_contiguous_inputs(&r);
    r.d.k_view = r.d.v_view = (fcl_tensor_view){0, 0, 50 * 32, 32};
    r.k_n = r.v_n = 2 * 50 * 32; /* only the first batch entry's K and V exist */
    check_attention_run(&r);
    attention_free_inputs(&r);
}

/* ---- per-sequence lengths ---- */

static void test_seqlens_kv(void **state)
{
    (void)state;
    static const int32_t lens[4] = {0, 300, 1, 157};
    static const size_t len_q[3] = {1, 3, 40};
    for (int c = 0; c < 3; c++)
        for (size_t splits = 0; splits <= 3; splits += 3) {
            attention_run r = {.d = {.batch = 4, .heads_q = 4, .heads_kv = 1, .len_q = len_q[c],
                                     .len_kv = 300, .head_dim = 64, .kv_splits = splits,
                                     .causal = c == 2 ? FCL_CAUSAL_BOTTOM_RIGHT : FCL_CAUSAL_NONE}};
            attention_contiguous_inputs(&r);
            r.io.seqlens_kv = lens;
            check_attention_run(&r);
            attention_free_inputs(&r);
        }
}

/* ---- left-padded sequences (leftpad_kv) ---- */

/* FlashAttention-2's leftpad_k: each sequence's keys start at its own row; the rows before are
 * never read (NaN there), and positions count from it (causality, the window, ALiBi, the
 * mask's columns); a padding as long as the sequence leaves no key. */
static void test_leftpad_kv(void **state)
{
    (void)state;
    static const int32_t lens[4] = {60, 40, 60, 17}, pad[4] = {0, 13, 59, 17};
    static const float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    for (int c = 0; c < 4; c++) {
        attention_run r = {.d = {.batch = 4, .heads_q = 4, .heads_kv = c == 1 ? 1 : 2,
                                 .len_q = c == 0 ? 1 : c == 1 ? 3 : 20, .len_kv = 60,
                                 .head_dim = 64, .layout = (fcl_layout)(c % 2),
                                 .dtype_kv = c == 1 ? FCL_DTYPE_F16 : FCL_DTYPE_F32,
                                 .kv_splits = c == 3 ? 3 : 0,
                                 .causal = c >= 2 ? FCL_CAUSAL_BOTTOM_RIGHT : FCL_CAUSAL_NONE}};
        if (c == 3)
            r.d.window = 1, r.d.window_left = 7, r.d.window_right = FCL_WINDOW_UNBOUNDED;
        attention_contiguous_inputs(&r);
        if (c == 2) {
            attention_mask(&r, FCL_MASK_ADD_F32);
            r.io.alibi_slopes = slopes;
        }
        const size_t hk = r.d.heads_kv, L = r.d.len_kv, D = r.d.head_dim;
        for (size_t b = 0; b < 4; b++)
            for (size_t h = 0; h < hk; h++)
                for (size_t t = 0; t < (size_t)pad[b]; t++)
                    for (size_t e = 0; e < D; e++) {
                        const size_t at = c % 2 ? ((b * L + t) * hk + h) * D + e
                                                : ((b * hk + h) * L + t) * D + e;
                        chk_store((void *)r.io.k, r.d.dtype_kv, at, NAN);
                        chk_store((void *)r.io.v, r.d.dtype_kv, at, NAN);
                    }
        r.io.seqlens_kv = lens;
        r.io.leftpad_kv = pad;
        check_attention_run(&r);
        attention_free_inputs(&r);
    }
}

/* ---- query positions (query_offsets) ---- */

/* Queries and keys that are parts of longer sequences (a shard of the keys, a ring's block):
 * query i at p(i) = i + query_offsets[b] among the keys, for causality in either mode, the
 * window (its right side wider than the queries, which without offsets reaches the last key)
 * and ALiBi; offsets past the keys, negative (no key visible to a causal query) and an empty
 * sequence. */
static void test_query_offsets(void **state)
{
    (void)state;
    static const int32_t lens[3] = {40, 17, 0}, offsets[3] = {30, -3, 7};
    static const float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    for (int c = 0; c < 4; c++) {
        attention_run r = {.d = {.batch = 3, .heads_q = 4, .heads_kv = 2, .len_q = c == 3 ? 1 : 5,
                                 .len_kv = 40, .head_dim = 64, .kv_splits = c == 1 ? 3 : 0,
                                 .causal = c == 0 ? FCL_CAUSAL_BOTTOM_RIGHT
                                           : c == 1 ? FCL_CAUSAL_TOP_LEFT : FCL_CAUSAL_NONE}};
        if (c == 2)
            r.d.window = 1, r.d.window_left = 6, r.d.window_right = 9; /* past len_q - 1 */
        attention_contiguous_inputs(&r);
        r.io.seqlens_kv = lens;
        r.io.query_offsets = offsets;
        if (c == 3)
            r.io.alibi_slopes = slopes, r.d.causal = FCL_CAUSAL_BOTTOM_RIGHT;
        check_attention_run(&r);
        attention_free_inputs(&r);
    }
}

/* ---- paged K/V ---- */

static void test_paged(void **state)
{
    (void)state;
    static const int32_t lens[3] = {100, 0, 37};
    static const size_t page_sizes[3] = {1, 16, 17};
    for (int ps = 0; ps < 3; ps++)
        /* (small: pages of 1 and 16 in a paged cache's own layout, BLHD, alone) */
        for (int layout = support_small() && ps < 2; layout < 2; layout++)
            for (size_t len_q = 1; len_q <= 5; len_q += 4) {
                attention_run r = {.d = {.batch = 3, .heads_q = 8, .heads_kv = 2, .len_q = len_q,
                                         .len_kv = 100, .head_dim = 64, .page_size = page_sizes[ps],
                                         .layout = (fcl_layout)layout, .dtype_kv = FCL_DTYPE_F16,
                                         .causal = FCL_CAUSAL_BOTTOM_RIGHT}};
                int32_t *table;
                attention_paged_inputs(&r, lens, &table);
                check_attention_run(&r);
                r.d.kv_splits = 4;
                if (!support_small() || ps == 2) /* small: key splits over pages of 17 */
                    check_attention_run(&r);
                attention_free_inputs(&r);
                free(table);
            }
}

/* The kernels compiled for plain attention and for every feature give the same results: the
 * same calls, once plain and once through the all-feature kernels (full-length seqlens_kv
 * changes nothing else), with a mask, causality and split-KV. */
static void test_plain_and_all_feature_kernels_agree(void **state)
{
    (void)state;
    static const int32_t full[2] = {77, 77};
    for (size_t len_q = 1; len_q <= 50; len_q += 49) {
        attention_run r = {.d = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = len_q,
                                 .len_kv = 77, .head_dim = 64, .kv_splits = 2,
                                 .causal = FCL_CAUSAL_BOTTOM_RIGHT}};
        attention_contiguous_inputs(&r);
        attention_mask(&r, FCL_MASK_ADD_F32);
        float *plain = malloc(r.out_n * sizeof(float)), *all = malloc(r.out_n * sizeof(float));
        assert_true(plain && all);
        fcl_attention_host_io io = r.io;
        io.out = plain;
        assert_int_equal(fcl_attention_run_host(support_ctx, &r.d, &io), FCL_SUCCESS);
        io.out = all;
        io.seqlens_kv = full;
        assert_int_equal(fcl_attention_run_host(support_ctx, &r.d, &io), FCL_SUCCESS);
        for (size_t e = 0; e < r.out_n; e++)
            if (!(fabsf(plain[e] - all[e]) <= 1e-6f) && !(isnan(plain[e]) && isnan(all[e])))
                fail_msg("len_q %zu: element %zu: plain %g, all features %g", len_q, e,
                         (double)plain[e], (double)all[e]);
        check_attention_run(&r); /* and both against the reference */
        r.io.seqlens_kv = full;
        check_attention_run(&r);
        free(plain), free(all);
        attention_free_inputs(&r);
    }
}

/* ---- packed (varlen) sequences ---- */

static void test_varlen(void **state)
{
    (void)state;
    static const int32_t cu_q[5] = {0, 5, 5, 17, 20}, cu_kv[5] = {0, 9, 9, 39, 42};
    for (int causal = 0; causal <= 2; causal++)
        for (size_t splits = 1; splits <= 2; splits++) {
            attention_run r = {.d = {.batch = 4, .heads_q = 4, .heads_kv = 2, .len_q = 12,
                                     .len_kv = 30, .head_dim = 48, .causal = (fcl_causal)causal,
                                     .kv_splits = splits}};
            attention_packed_inputs(&r, cu_q, cu_kv);
            check_attention_run(&r);
            /* Packed queries over a padded cache with per-sequence lengths. */
            static const int32_t lens[4] = {9, 0, 30, 3};
            free((void *)r.io.k), free((void *)r.io.v);
            r.io.cu_seqlens_kv = NULL;
            r.io.seqlens_kv = lens;
            r.k_n = r.v_n = 4 * 30 * 2 * 48;
            r.io.k = test_tensor(r.k_n, FCL_DTYPE_F32);
            r.io.v = test_tensor(r.v_n, FCL_DTYPE_F32);
            check_attention_run(&r);
            attention_free_inputs(&r);
        }
}

/* ---- score modifiers ---- */

static void test_softcap(void **state)
{
    (void)state;
    static const float caps[2] = {30.0f, 1.5f};
    for (int c = 0; c < 2; c++)
        for (int causal = 0; causal <= 2; causal++) {
            attention_run r = {.d = {.batch = 2, .heads_q = 2, .len_q = 33, .len_kv = 70,
                                     .head_dim = 64, .softcap = caps[c], .scale = 0.5f,
                                     .causal = (fcl_causal)causal}};
            attention_contiguous_inputs(&r);
            attention_mask(&r, FCL_MASK_ADD_F32);
            check_attention_run(&r);
            attention_free_inputs(&r);
        }
}

static void test_alibi(void **state)
{
    (void)state;
    float slopes[2 * 8];
    assert_int_equal(fcl_alibi_slopes(8, 8.0f, slopes), FCL_SUCCESS);
    assert_true(fabs(slopes[0] - 0.5) < 1e-7 && fabs(slopes[7] - 1.0 / 256) < 1e-9);
    float odd[6];
    assert_int_equal(fcl_alibi_slopes(6, 8.0f, odd), FCL_SUCCESS); /* n = 4: m1 for h >= 4 */
    assert_true(fabs(odd[4] - pow(2.0, -1.0)) < 1e-7 && fabs(odd[5] - pow(2.0, -3.0)) < 1e-7);
    for (size_t h = 0; h < 8; h++)
        slopes[8 + h] = 0.1f * (float)(h + 1); /* a second batch's own slopes */
    for (int per_batch = 0; per_batch < 2; per_batch++)
        for (size_t len_q = 2; len_q <= 20; len_q += 18) {
            attention_run r = {.d = {.batch = 2, .heads_q = 8, .heads_kv = 4, .len_q = len_q,
                                     .len_kv = 50, .head_dim = 32,
                                     .alibi_slopes_batch_stride = per_batch ? 8 : 0,
                                     .causal = FCL_CAUSAL_BOTTOM_RIGHT}};
            attention_contiguous_inputs(&r);
            r.io.alibi_slopes = slopes;
            check_attention_run(&r);
            r.d.causal = FCL_CAUSAL_NONE;
            check_attention_run(&r);
            /* ggml's max_bias convention: the slope scales a float16 mask of positions. */
            r.d.alibi_from_mask = 1;
            uint16_t *m = attention_mask(&r, FCL_MASK_ADD_F16);
            for (size_t e = 0; e < r.mask_n; e++)
                if (m[e] != chk_float_to_half(-INFINITY))
                    m[e] = chk_float_to_half(-(float)((e % 50) % 13));
            check_attention_run(&r);
            attention_free_inputs(&r);
        }
}

static void test_window(void **state)
{
    (void)state;
    static const size_t sides[][2] = {{3, 0}, {FCL_WINDOW_UNBOUNDED, 2}, {0, 0}, {5, 5},
                                      {0, FCL_WINDOW_UNBOUNDED}};
    static const size_t shapes[][2] = {{40, 40}, {20, 60}, {60, 20}, {1, 80}};
    for (int w = 0; w < 5; w++)
        for (int s = 0; s < 4; s++) {
            attention_run r = {.d = {.batch = 1, .heads_q = 2, .len_q = shapes[s][0],
                                     .len_kv = shapes[s][1], .head_dim = 32, .window = 1,
                                     .window_left = sides[w][0], .window_right = sides[w][1],
                                     .causal = w == 0 ? FCL_CAUSAL_BOTTOM_RIGHT : FCL_CAUSAL_NONE,
                                     .kv_splits = (size_t)(s % 2 + 1) * 2 - 1}};
            attention_contiguous_inputs(&r);
            check_attention_run(&r); /* len_q > len_kv: early queries' windows hold no key at all */
            attention_free_inputs(&r);
        }
    /* A window inside a long cache: the key splits start at a block's first visible key
     * (fa_locate), 3 forced ones over a window wider than a key tile, and (but in the small
     * mode, where Oclgrind took 8 s for both) the planner's. */
    for (size_t len_q = 1; len_q <= 40; len_q += 39)
        for (size_t splits = support_small() ? 3 : 0; splits <= 3; splits += 3) {
            attention_run r = {.d = {.batch = 2, .heads_q = 2, .len_q = len_q,
                                     .len_kv = support_small() ? 200 : 1000, .head_dim = 32,
                                     .window = 1, .window_left = support_small() ? 70 : 150,
                                     .window_right = 20,
                                     .causal = len_q > 1 ? FCL_CAUSAL_BOTTOM_RIGHT : FCL_CAUSAL_NONE,
                                     .kv_splits = splits}};
            attention_contiguous_inputs(&r);
            check_attention_run(&r);
            attention_free_inputs(&r);
        }
}

static void test_sinks(void **state)
{
    (void)state;
    static const float sinks[4] = {0.5f, -3.0f, 4.0f, -INFINITY};
    for (size_t len_q = 1; len_q <= 45; len_q += 44)
        for (size_t splits = 1; splits <= 3; splits += 2) {
            attention_run r = {.d = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = len_q,
                                     .len_kv = 90, .head_dim = 64, .kv_splits = splits}};
            attention_contiguous_inputs(&r);
            attention_mask(&r, FCL_MASK_ADD_F32); /* every 4th row hidden: out 0, lse = sink */
            r.io.sinks = sinks;
            check_attention_run(&r);
            attention_free_inputs(&r);
        }
}

/* ---- head sizes ---- */

/* DeepSeek's MLA: head_dim 576, head_dim_v 512, V the first 512 dims of K's rows (one
 * buffer, one view), one kv head, over three of the decode kernel's chunks of keys; and the
 * in-between sizes 80 and 96. */
static void test_mla_and_head_sizes(void **state)
{
    (void)state;
    const size_t len_kv = support_small() ? 100 : 300; /* a simulator: fewer keys */
    for (size_t len_q = 1; len_q <= 10; len_q += 9) {
        attention_run r = {.d = {.batch = 2, .heads_q = 4, .heads_kv = 1, .len_q = len_q,
                                 .len_kv = len_kv, .head_dim = 576, .head_dim_v = 512,
                                 .causal = FCL_CAUSAL_BOTTOM_RIGHT, .dtype_kv = FCL_DTYPE_F16}};
        attention_contiguous_inputs(&r);
        free((void *)r.io.v);
        r.io.v = r.io.k;
        r.v_n = r.k_n;
        r.d.v_view = (fcl_tensor_view){0, len_kv * 576, len_kv * 576, 576}; /* K's strides */
        check_attention_run(&r);
        attention_free_inputs(&r);
    }
    static const size_t dims[2] = {80, 96};
    for (int i = 0; i < 2; i++) {
        attention_run r = {.d = {.batch = 1, .heads_q = 2, .len_q = 19, .len_kv = 41,
                                 .head_dim = dims[i]}};
        attention_contiguous_inputs(&r);
        check_attention_run(&r);
        attention_free_inputs(&r);
    }
}

/* ---- everything at once ---- */

/* Decoding with every GQA group shape: a work-group takes up to 4 query heads of one kv head
 * (8/1: two such steps per kv head; 6/2 and 12/4: groups of 3, one head a step; MHA), with
 * per-head modifiers (mask rows, slopes, sinks) and key splits. */
static void test_gqa_decode_groups(void **state)
{
    (void)state;
    static const size_t shapes[4][2] = {{8, 1}, {6, 2}, {12, 4}, {4, 4}};
    static const float sinks[12] = {1, -1, 0, 2, -INFINITY, 0.5f, 3, -2, 1, 0, -1, 2};
    float slopes[12];
    assert_int_equal(fcl_alibi_slopes(12, 8.0f, slopes), FCL_SUCCESS);
    for (int sh = 0; sh < 4; sh++)
        for (size_t len_q = 1; len_q <= 3; len_q += 2) {
            attention_run r = {.d = {.batch = 2, .heads_q = shapes[sh][0], .heads_kv = shapes[sh][1],
                                     .len_q = len_q, .len_kv = 90, .head_dim = 64,
                                     .causal = FCL_CAUSAL_BOTTOM_RIGHT, .kv_splits = sh % 2 ? 3 : 0,
                                     .dtype_kv = FCL_DTYPE_F16}};
            attention_contiguous_inputs(&r);
            check_attention_run(&r);
            attention_mask(&r, FCL_MASK_ADD_F16);
            r.io.sinks = sinks;
            r.io.alibi_slopes = slopes;
            check_attention_run(&r);
            attention_free_inputs(&r);
        }
}

/* Decoding in every K/V storage type, one head a step and GQA groups of 4, contiguous (both
 * layouts) and paged (shuffled pages): the decode kernels are built per storage type and load
 * 4 or 8 elements at once. Head dims (40, 24) below the bucket's, whose last loads lie past
 * the row and are dropped; 12, which is no multiple of 8 (16-bit one-head decoding runs the
 * tile kernel there); chunks of 128 keys with a partial last one, and key splits. */
static void test_decode_storage_types(void **state)
{
    (void)state;
    const size_t len_kv = support_small() ? 140 : 300; /* sanitizers: fewer keys */
    const int32_t lens[2] = {(int32_t)len_kv, 129};
    static const size_t heads[2][2] = {{3, 3}, {8, 2}}, dims[2][2] = {{40, 24}, {12, 12}};
    for (int dt = 0; dt < 3; dt++)
        for (int h = 0; h < 2; h++)
            for (int dim = 0; dim < 2; dim++)
                for (int paged = 0; paged < 2; paged++) {
                    attention_run r = {.d = {.batch = 2, .heads_q = heads[h][0],
                                             .heads_kv = heads[h][1], .len_q = 1, .len_kv = len_kv,
                                             .head_dim = dims[dim][0], .head_dim_v = dims[dim][1],
                                             .layout = (fcl_layout)h, .dtype_kv = (fcl_dtype)dt,
                                             .kv_splits = dim ? 2 : 0}};
                    int32_t *table = NULL;
                    if (paged) {
                        r.d.page_size = 16;
                        attention_paged_inputs(&r, lens, &table);
                    } else {
                        attention_contiguous_inputs(&r);
                    }
                    check_attention_run(&r);
                    attention_free_inputs(&r);
                    free(table);
                }
}

static void test_combined(void **state)
{
    (void)state;
    static const int32_t lens[2] = {61, 23};
    static const float sinks[4] = {1.0f, -1.0f, 0.0f, 2.0f};
    float slopes[4];
    assert_int_equal(fcl_alibi_slopes(4, 8.0f, slopes), FCL_SUCCESS);
    for (int dt = 0; dt < 3; dt++)
        for (size_t len_q = 2; len_q <= 9; len_q += 7) {
            attention_run r = {.d = {.batch = 2, .heads_q = 4, .heads_kv = 2, .len_q = len_q,
                                     .len_kv = 64, .head_dim = 64, .page_size = 16,
                                     .causal = FCL_CAUSAL_BOTTOM_RIGHT, .softcap = 20.0f,
                                     .window = 1, .window_left = 20, .kv_splits = 3,
                                     .dtype_q = (fcl_dtype)dt, .dtype_kv = (fcl_dtype)dt,
                                     .dtype_o = (fcl_dtype)dt}};
            int32_t *table;
            attention_paged_inputs(&r, lens, &table);
            attention_mask(&r, FCL_MASK_ADD_F16);
            r.io.sinks = sinks;
            r.io.alibi_slopes = slopes;
            check_attention_run(&r);
            attention_free_inputs(&r);
            free(table);
        }
}

/* ---- merging ---- */

static void test_merge(void **state)
{
    (void)state;
    const size_t rows = 37, dim = 24, n = rows * dim;
    cl_context c;
    cl_command_queue queue;
    assert_int_equal(fcl_context_get_cl(support_ctx, &c, NULL, &queue), FCL_SUCCESS);
    float *outs[3], *lses[3];
    cl_mem out_bufs[3], lse_bufs[3];
    for (int p = 0; p < 3; p++) {
        outs[p] = test_tensor(n, FCL_DTYPE_F32);
        lses[p] = test_tensor(rows, FCL_DTYPE_F32);
        for (size_t r = 0; r < rows; r++) /* -inf parts: every 3rd row of part p */
            if (r % 3 == (size_t)p || r % 7 == 0)
                lses[p][r] = -INFINITY;
    }
    lses[0][5] = NAN; /* a NaN part makes its row NaN (one part alone too: nothing else read) */
    /* in_place: 0 new out and lse; 1 out is the last part's, no lse; 2 out is part 0's, lse
     * new; 3 out is part 0's and lse the last part's; 4 out new, lse the last part's */
    for (size_t n_parts = 1; n_parts <= 3; n_parts++)
        for (int in_place = 0; in_place < 5; in_place++) {
            cl_int err = CL_SUCCESS;
            for (size_t p = 0; p < n_parts; p++) {
                out_bufs[p] = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                             n * sizeof(float), outs[p], &err);
                lse_bufs[p] = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                             rows * sizeof(float), lses[p], &err);
            }
            const int new_out = in_place == 0 || in_place == 4, new_lse = in_place == 0 || in_place == 2;
            cl_mem out = new_out         ? clCreateBuffer(c, CL_MEM_READ_WRITE, n * sizeof(float), NULL, &err)
                         : in_place == 1 ? out_bufs[n_parts - 1]
                                         : out_bufs[0];
            cl_mem lse = new_lse         ? clCreateBuffer(c, CL_MEM_READ_WRITE, rows * sizeof(float), NULL, &err)
                         : in_place == 1 ? NULL
                                         : lse_bufs[n_parts - 1];
            assert_int_equal(err, CL_SUCCESS);
            cl_event done;
            fcl_status s = fcl_attention_merge(support_ctx, n_parts, rows, dim, out_bufs, lse_bufs,
                                               out, lse, 0, NULL, &done);
            if (s != FCL_SUCCESS)
                fail_msg("fcl_attention_merge: %s", fcl_context_last_error(support_ctx));
            float got[37 * 24], got_lse[37];
            assert_int_equal(clEnqueueReadBuffer(queue, out, CL_TRUE, 0, sizeof got, got, 1, &done, NULL),
                             CL_SUCCESS);
            if (lse)
                assert_int_equal(clEnqueueReadBuffer(queue, lse, CL_TRUE, 0, sizeof got_lse, got_lse,
                                                     0, NULL, NULL), CL_SUCCESS);
            clReleaseEvent(done);
            for (size_t r = 0; r < rows; r++) {
                if (r == 5) {
                    for (size_t e = 0; e < dim; e++)
                        if (!isnan(got[r * dim + e]))
                            fail_msg("row 5 (a NaN lse) of %zu parts: got %g", n_parts,
                                     (double)got[r * dim + e]);
                    if (lse && !isnan(got_lse[r]))
                        fail_msg("row 5's lse: got %g, not NaN", (double)got_lse[r]);
                    continue;
                }
                double m = -INFINITY, sum = 0.0;
                for (size_t p = 0; p < n_parts; p++)
                    m = lses[p][r] > m ? lses[p][r] : m;
                for (size_t p = 0; p < n_parts && m > -INFINITY; p++)
                    sum += exp(lses[p][r] - m);
                double want_lse = m == -INFINITY ? -INFINITY : m + log(sum);
                if (lse && !(got_lse[r] == want_lse || fabs(got_lse[r] - want_lse) <= 1e-5 * (1 + fabs(want_lse))))
                    fail_msg("merged lse row %zu: got %g want %g", r, (double)got_lse[r], want_lse);
                for (size_t e = 0; e < dim; e++) {
                    double want = 0.0;
                    for (size_t p = 0; p < n_parts && m > -INFINITY; p++)
                        want += exp(lses[p][r] - m) / sum * outs[p][r * dim + e];
                    if (fabs(got[r * dim + e] - want) > 2e-6 * (1 + fabs(want)))
                        fail_msg("merged row %zu of %zu parts (in place %d): got %g want %g", r,
                                 n_parts, in_place, (double)got[r * dim + e], want);
                }
            }
            for (size_t p = 0; p < n_parts; p++)
                clReleaseMemObject(out_bufs[p]), clReleaseMemObject(lse_bufs[p]);
            if (new_out)
                clReleaseMemObject(out);
            if (new_lse)
                clReleaseMemObject(lse);
        }
    for (int p = 0; p < 3; p++)
        free(outs[p]), free(lses[p]);
}

/* ---- bad input ---- */

static void test_bad_indices_and_features(void **state)
{
    (void)state;
    float q[4 * 8 * 8] = {0}, k[4 * 8 * 8] = {0}, out[4 * 8 * 8], lse[64];
    int32_t lens[2] = {3, 9}, cu[3] = {0, 2, 1}, table[4] = {0, 1, 2, 5}, pads[4] = {3, 4, 0, -1};
    const float slopes[2] = {1, 1};
    const fcl_attention_desc ok = {.batch = 2, .heads_q = 2, .len_q = 4, .len_kv = 8, .head_dim = 8};
    fcl_attention_desc d;
    fcl_attention_host_io io;
#define EXPECT_REJECTED(needle)                                                                 \
    do {                                                                                       \
        for (int i = 0; i < 4 * 8 * 8; i++)                                                    \
            out[i] = 5.0f;                                                                     \
        io.q = q, io.k = io.v = k, io.out = out, io.lse = lse;                                 \
        assert_int_equal(fcl_attention_run_host(support_ctx, &d, &io), FCL_ERROR_INVALID_ARGUMENT); \
        if (!strstr(fcl_context_last_error(support_ctx), (needle)))                            \
            fail_msg("\"%s\" does not name %s", fcl_context_last_error(support_ctx), (needle)); \
        for (int i = 0; i < 4 * 8 * 8; i++)                                                    \
            assert_true(out[i] == 5.0f);                                                       \
    } while (0)
    d = ok, io = (fcl_attention_host_io){.seqlens_kv = lens};
    EXPECT_REJECTED("seqlens_kv[1] (9) must be between 0 and len_kv (8)");
    d = ok, io = (fcl_attention_host_io){.seqlens_kv = pads, .leftpad_kv = pads + 1};
    EXPECT_REJECTED("leftpad_kv[0] (4) must be between 0 and sequence 0's length (3)");
    d = ok, io = (fcl_attention_host_io){.query_offsets = cu, .alibi_slopes = slopes};
    cu[1] = INT32_MAX;
    EXPECT_REJECTED("query_offsets[1] (2147483647) with ALiBi");
    cu[1] = 2;
    d = ok, io = (fcl_attention_host_io){.leftpad_kv = pads + 2};
    EXPECT_REJECTED("leftpad_kv[1] (-1) must be between 0 and sequence 1's length (8)");
    d = ok, d.page_size = 4, d.num_pages = 4, d.block_table_stride = 2;
    io = (fcl_attention_host_io){.block_table = table, .leftpad_kv = pads};
    EXPECT_REJECTED("leftpad_kv is given with paged K/V");
    d = ok, io = (fcl_attention_host_io){.cu_seqlens_kv = cu, .leftpad_kv = pads};
    EXPECT_REJECTED("leftpad_kv is given with packed (cu_seqlens_kv) K/V");
    d = ok, io = (fcl_attention_host_io){.cu_seqlens_q = cu};
    EXPECT_REJECTED("cu_seqlens_q[2] (1) is smaller than cu_seqlens_q[1] (2)");
    cu[0] = 1;
    d = ok, io = (fcl_attention_host_io){.cu_seqlens_kv = cu};
    EXPECT_REJECTED("cu_seqlens_kv[0] (1) must be 0");
    cu[0] = 0, cu[2] = 7;
    d = ok, io = (fcl_attention_host_io){.cu_seqlens_q = cu};
    EXPECT_REJECTED("sequence 1 of cu_seqlens_q has 5 tokens, more than len_q (4)");
    d = ok, d.page_size = 4, d.num_pages = 4, d.block_table_stride = 2;
    io = (fcl_attention_host_io){.block_table = table};
    EXPECT_REJECTED("block_table[3] (5, page 1 of sequence 1) must be a page between 0 and "
                    "num_pages - 1 (3)");
    d.block_table_stride = 1;
    EXPECT_REJECTED("block_table_stride (1) is smaller than the 2 pages");
    d = ok, io = (fcl_attention_host_io){.block_table = table};
    EXPECT_REJECTED("a block_table was given but page_size is 0");
    d = ok, d.page_size = 4, d.num_pages = 4, d.block_table_stride = 2;
    io = (fcl_attention_host_io){0};
    EXPECT_REJECTED("page_size is 4 but block_table is NULL");
    d.num_pages = 0, io = (fcl_attention_host_io){.block_table = table};
    EXPECT_REJECTED("num_pages (0)");
    d = ok, io = (fcl_attention_host_io){.seqlens_kv = lens, .cu_seqlens_kv = cu};
    EXPECT_REJECTED("seqlens_kv and cu_seqlens_kv are both given");
    d = ok, d.alibi_from_mask = 1, io = (fcl_attention_host_io){0};
    EXPECT_REJECTED("alibi_from_mask is set but alibi_slopes is NULL");
    d = ok, d.alibi_from_mask = 1, d.mask_type = FCL_MASK_BOOL_U8;
    io = (fcl_attention_host_io){.alibi_slopes = slopes, .mask = q};
    EXPECT_REJECTED("alibi_from_mask needs an additive mask");
    d = ok, d.alibi_slopes_batch_stride = 1, io = (fcl_attention_host_io){.alibi_slopes = slopes};
    EXPECT_REJECTED("alibi_slopes_batch_stride (1) is smaller than heads_q (2)");
    d = ok, d.len_q = d.len_kv = (size_t)1 << 30, io = (fcl_attention_host_io){.alibi_slopes = slopes};
    EXPECT_REJECTED("len_q + len_kv (1073741824 + 1073741824) must be at most 2147483647");
    d = ok, d.softcap = -1.0f, io = (fcl_attention_host_io){0};
    EXPECT_REJECTED("softcap (-1)");
    d = ok, d.mask_type = (fcl_mask_type)4, io = (fcl_attention_host_io){.mask = q};
    EXPECT_REJECTED("mask_type (4)");
    /* out's view over q's elements in one host array. */
    d = ok, d.o_view.offset = 8;
    io = (fcl_attention_host_io){0};
    io.q = io.out = out, io.k = io.v = k;
    assert_int_equal(fcl_attention_run_host(support_ctx, &d, &io), FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_context_last_error(support_ctx), "out's view overlaps q's"));
    assert_int_equal(fcl_attention_run_host(support_ctx, &d, NULL), FCL_ERROR_INVALID_ARGUMENT);
    assert_int_equal(fcl_attention_merge(support_ctx, 0, 1, 1, NULL, NULL, NULL, NULL, 0, NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_int_equal(fcl_alibi_slopes(0, 8.0f, NULL), FCL_ERROR_INVALID_ARGUMENT);
#undef EXPECT_REJECTED
}

/* The device call cannot read its index buffers before the kernels do: bad lengths, starts
 * and pages are clamped, never read or written past a buffer. out and lse sit inside larger
 * buffers whose guard elements must keep their values. */
static void test_device_clamps_bad_indices(void **state)
{
    (void)state;
    const size_t B = 3, H = 2, L = 8, D = 16, guard = 64;
    cl_context c;
    cl_command_queue queue;
    assert_int_equal(fcl_context_get_cl(support_ctx, &c, NULL, &queue), FCL_SUCCESS);
    const int32_t lens[3] = {-5, 1000, 4}, cu[4] = {0, 100000, -3, 9}, table[6] = {-1, 99999, 0, 1, 2, 3};
    const int32_t pads[3] = {-7, 5000, 3};
    static float host[2 * 64 + 3 * 2 * 8 * 16];
    for (int paged = 0; paged < 2; paged++)
        for (int packed = 0; packed < 2; packed++) {
            fcl_attention_desc d = {.batch = B, .heads_q = H, .len_q = L, .len_kv = L, .head_dim = D,
                                    .causal = FCL_CAUSAL_BOTTOM_RIGHT, .kv_splits = 2};
            d.o_view.offset = guard; /* out's view starts after the front guard */
            if (paged)
                d.page_size = 4, d.num_pages = 4, d.block_table_stride = 2;
            const size_t n = B * H * L * D, total = 2 * guard + n;
            cl_int err = CL_SUCCESS;
            cl_mem q = clCreateBuffer(c, CL_MEM_READ_WRITE, n * 4, NULL, &err);
            cl_mem kv = clCreateBuffer(c, CL_MEM_READ_WRITE, n * 4, NULL, &err);
            cl_mem out = clCreateBuffer(c, CL_MEM_READ_WRITE, total * 4, NULL, &err);
            cl_mem lse = clCreateBuffer(c, CL_MEM_READ_WRITE, (B * H * L + guard) * 4, NULL, &err);
            cl_mem lens_b = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof lens, (void *)lens, &err);
            cl_mem cu_b = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof cu, (void *)cu, &err);
            cl_mem table_b = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof table, (void *)table, &err);
            cl_mem pads_b = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof pads, (void *)pads, &err);
            assert_int_equal(err, CL_SUCCESS);
            for (size_t e = 0; e < total; e++)
                host[e] = (float)e;
            assert_int_equal(clEnqueueWriteBuffer(queue, out, CL_TRUE, 0, total * 4, host, 0, NULL, NULL), CL_SUCCESS);
            assert_int_equal(clEnqueueWriteBuffer(queue, lse, CL_TRUE, 0, (B * H * L + guard) * 4, host, 0, NULL, NULL), CL_SUCCESS);
            assert_int_equal(clEnqueueWriteBuffer(queue, q, CL_TRUE, 0, n * 4, host, 0, NULL, NULL), CL_SUCCESS);
            assert_int_equal(clEnqueueWriteBuffer(queue, kv, CL_TRUE, 0, n * 4, host, 0, NULL, NULL), CL_SUCCESS);
            fcl_attention_io io = {.q = q, .k = kv, .v = kv, .out = out, .lse = lse,
                                   .seqlens_kv = lens_b, .block_table = paged ? table_b : NULL,
                                   .cu_seqlens_q = packed ? cu_b : NULL,
                                   .leftpad_kv = paged ? NULL : pads_b};
            cl_event done;
            fcl_status s = fcl_attention_run(support_ctx, &d, &io, 0, NULL, &done);
            if (s != FCL_SUCCESS)
                fail_msg("fcl_attention_run: %s", fcl_context_last_error(support_ctx));
            static float back[2 * 64 + 3 * 2 * 8 * 16];
            assert_int_equal(clEnqueueReadBuffer(queue, out, CL_TRUE, 0, total * 4, back, 1, &done, NULL), CL_SUCCESS);
            clReleaseEvent(done);
            for (size_t e = 0; e < guard; e++)
                assert_true(back[e] == (float)e); /* before out's view */
            for (size_t e = guard + n; e < total; e++) /* after it */
                assert_true(back[e] == (float)e);
            cl_mem all[] = {q, kv, out, lse, lens_b, cu_b, table_b, pads_b};
            for (int i = 0; i < 8; i++)
                clReleaseMemObject(all[i]);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_qkv_and_wide_out),
        cmocka_unit_test(test_kv_shared_across_batch),
        cmocka_unit_test(test_seqlens_kv),
        cmocka_unit_test(test_leftpad_kv),
        cmocka_unit_test(test_query_offsets),
        cmocka_unit_test(test_plain_and_all_feature_kernels_agree),
        cmocka_unit_test(test_paged),
        cmocka_unit_test(test_varlen),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_alibi),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_sinks),
        cmocka_unit_test(test_mla_and_head_sizes),
        cmocka_unit_test(test_gqa_decode_groups),
        cmocka_unit_test(test_decode_storage_types),
        cmocka_unit_test(test_combined),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_bad_indices_and_features),
        cmocka_unit_test(test_device_clamps_bad_indices),
    };
    return support_run_tests(tests);
}

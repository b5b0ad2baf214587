/* flashcl_mpi's sharded-KV attention, run by CTest under mpiexec with 1, 2 and 3 ranks: every
 * rank builds the same whole problem (rank 0's seed), keeps its own shard of each sequence's
 * keys (uneven cuts, empty shards), and checks the merged result against the float64
 * reference over the whole sequence. */
#include "flashcl_mpi.h"
#include "kv_reference.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, ranks;
static chk_rng rng;       /* the same sequence on every rank */
static chk_rng rank_rng;  /* this rank's own (its shard's page order) */

typedef struct {
    size_t batch, heads_q, heads_kv, dim, page_size; /* page_size 0: contiguous shards */
    fcl_dtype dtype_kv;
    float softcap;
    int sinks;
    size_t len_q, window; /* the queries: the sequences' last len_q; a window of that many */
    int alibi;
    fcl_kv_format format_k, format_v; /* 0: dtype_kv */
    fcl_kv_scale scale_k;             /* NONE or TOKEN (paged with K) */
} sharded_case;

/* Rank r's shard of a sequence of len keys: [cut[r], cut[r + 1]) of sorted random cuts, the
 * first rank's shard empty in every other sequence. */
static void shard_of(size_t len, size_t b, size_t *start, size_t *end)
{
    size_t cut[8] = {0};
    for (int r = 1; r < ranks; r++)
        cut[r] = (size_t)(chk_uniform(&rng) * (double)(len + 1));
    cut[ranks] = len;
    if (b % 2 && ranks > 1)
        cut[1] = 0;
    for (int i = 1; i < ranks; i++) /* insertion sort of the inner cuts */
        for (int j = i; j > 1 && cut[j] < cut[j - 1]; j--) {
            size_t t = cut[j];
            cut[j] = cut[j - 1], cut[j - 1] = t;
        }
    *start = cut[rank], *end = cut[rank + 1];
}

static cl_mem device_copy(const void *host, size_t bytes)
{
    cl_context c;
    cl_int err;
    assert_int_equal(fcl_context_get_cl(support_ctx, &c, NULL, NULL), FCL_SUCCESS);
    cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0),
                              bytes ? bytes : 4, (void *)host, &err);
    assert_int_equal(err, CL_SUCCESS);
    return m;
}

/* This rank's out and lse (io's float32 [batch][heads][len_q] rows) against the float64
 * reference over the whole problem (whole, host), query i at the whole's query at[i]. */
static void check_rank_rows(const fcl_attention_io *io, fcl_attention_desc whole,
                            const fcl_attention_host_io *host, const size_t *at, size_t len_q,
                            const char *what)
{
    whole = chk_attention_defaults(whole);
    const size_t B = whole.batch, Hq = whole.heads_q, D = whole.head_dim_v, rows = B * Hq * len_q;
    float *out = malloc(rows * D * sizeof(float)), *lse = malloc(rows * sizeof(float));
    double *got = malloc(rows * D * sizeof(double)), *want = malloc(rows * D * sizeof(double));
    double *want_lse = malloc(rows * sizeof(double));
    assert_true(out && lse && got && want && want_lse);
    cl_command_queue queue;
    fcl_context_get_cl(support_ctx, NULL, NULL, &queue);
    assert_int_equal(clEnqueueReadBuffer(queue, io->out, CL_TRUE, 0, rows * D * 4, out, 0, NULL,
                                         NULL), CL_SUCCESS);
    assert_int_equal(clEnqueueReadBuffer(queue, io->lse, CL_TRUE, 0, rows * 4, lse, 0, NULL, NULL),
                     CL_SUCCESS);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < len_q; i++) {
                const size_t row = (b * Hq + h) * len_q + i;
                chk_attention_row_io(&whole, host, b, h, at[i], want + row * D, &want_lse[row]);
            }
    for (size_t e = 0; e < rows * D; e++)
        got[e] = out[e];
    chk_report rep, rep_lse;
    const int out_ok = chk_compare_values(got, want, rows * D, chk_attention_tolerance(&whole), &rep);
    const int lse_ok = chk_compare_lse(lse, want_lse, rows, &rep_lse);
    if (!out_ok)
        print_error("%s, rank %d of %d: %zu of %zu off, first %zu got %g want %g (max |err| %.3g)\n",
                    what, rank, ranks, rep.bad, rep.checked, rep.first_bad, rep.got, rep.want,
                    rep.max_abs_err);
    if (!lse_ok)
        print_error("%s, rank %d: lse %zu got %.9g want %.9g\n", what, rank, rep_lse.first_bad,
                    rep_lse.got, rep_lse.want);
    free(out), free(lse), free(got), free(want), free(want_lse);
    /* every rank fails the test together, so that none waits in the next call's collectives */
    int mine = out_ok && lse_ok, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all)
        fail_msg("%s: rank %d's rows %s", what, rank, mine ? "match (another rank's do not)" : "do not match");
}

static void check_sharded(const sharded_case *c, const int32_t *lens)
{
    const size_t B = c->batch, Hq = c->heads_q, Hk = c->heads_kv, D = c->dim, Lq = c->len_q;
    const size_t rows = B * Hq * Lq;
    const unsigned fk = chk_kv_format(c->format_k, c->dtype_kv), fv = chk_kv_format(c->format_v, c->dtype_kv);
    const size_t rk = chk_kv_row_bytes(fk, D), rv = chk_kv_row_bytes(fv, D);
    const int token = c->scale_k == FCL_KV_SCALE_TOKEN;
    size_t cap = 1;
    for (size_t b = 0; b < B; b++)
        cap = lens[b] > (int32_t)cap ? (size_t)lens[b] : cap;
    /* the whole problem, the same on every rank */
    float *q = chk_random_tensor(rows * D, FCL_DTYPE_F32, &rng);
    unsigned char *k = kv_tensor(fk, B * Hk * cap, D, KV_FROM_DATA, &rng);
    unsigned char *v = kv_tensor(fv, B * Hk * cap, D, KV_FROM_DATA, &rng);
    float *ks = token ? kv_random_scales(B * Hk * cap, &rng) : NULL; /* [b][hk][cap] */
    float sinks[16], slopes[16];
    for (size_t h = 0; h < Hq; h++)
        sinks[h] = (float)chk_normal(&rng), slopes[h] = 0.5f / (float)(h + 1);
    /* this rank's shard: contiguous [b][hk][cap][D], or pages of page_size in a shuffled table */
    size_t start[16], end[16], local_cap = 1;
    int32_t local_lens[16];
    for (size_t b = 0; b < B; b++) {
        shard_of((size_t)lens[b], b, &start[b], &end[b]);
        local_lens[b] = (int32_t)(end[b] - start[b]);
        local_cap = end[b] - start[b] > local_cap ? end[b] - start[b] : local_cap;
    }
    const size_t ps = c->page_size ? c->page_size : local_cap;
    const size_t per_seq = (local_cap + ps - 1) / ps, pages = B * per_seq;
    int32_t *table = malloc(pages * sizeof(int32_t));
    unsigned char *lk = calloc(pages * Hk * ps, rk), *lv = calloc(pages * Hk * ps, rv);
    float *lks = calloc(pages * Hk * ps, sizeof(float)); /* [page][hk][slot] */
    assert_true(q && k && v && table && lk && lv && lks);
    chk_permutation(table, pages, &rank_rng);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hk; h++)
            for (size_t j = 0; j < end[b] - start[b]; j++) {
                /* paged BHLD: [page][head][slot][dim] */
                const size_t page = c->page_size ? (size_t)table[b * per_seq + j / ps] : b;
                const size_t to = (page * Hk + h) * ps + j % ps, from = (b * Hk + h) * cap + start[b] + j;
                memcpy(lk + to * rk, k + from * rk, rk);
                memcpy(lv + to * rv, v + from * rv, rv);
                if (token)
                    lks[to] = ks[from];
            }
    fcl_attention_desc d = {.batch = B, .heads_q = Hq, .heads_kv = Hk, .len_q = Lq,
                            .len_kv = c->page_size ? per_seq * ps : local_cap, .head_dim = D,
                            .causal = FCL_CAUSAL_BOTTOM_RIGHT, .dtype_kv = c->dtype_kv,
                            .softcap = c->softcap, .window = c->window > 0,
                            .window_left = c->window, .window_right = 0,
                            .format_k = c->format_k, .format_v = c->format_v,
                            .scale_mode_k = c->scale_k};
    if (c->page_size)
        d.page_size = ps, d.num_pages = pages, d.block_table_stride = per_seq;
    fcl_attention_io io = {.q = device_copy(q, rows * D * 4),
                           .k = device_copy(lk, pages * Hk * ps * rk),
                           .v = device_copy(lv, pages * Hk * ps * rv),
                           .k_scales = token ? device_copy(lks, pages * Hk * ps * 4) : NULL,
                           .out = device_copy(NULL, rows * D * 4),
                           .lse = device_copy(NULL, rows * 4),
                           .seqlens_kv = device_copy(local_lens, B * 4),
                           .block_table = c->page_size ? device_copy(table, pages * 4) : NULL,
                           .sinks = c->sinks ? device_copy(sinks, Hq * 4) : NULL,
                           .alibi_slopes = c->alibi ? device_copy(slopes, Hq * 4) : NULL};
    fcl_status s = fcl_mpi_attention_sharded(support_ctx, MPI_COMM_WORLD, &d, &io);
    if (s != FCL_SUCCESS)
        fail_msg("rank %d: %s: %s", rank, fcl_status_string(s), fcl_mpi_last_error());
    /* the float64 reference over the whole sequence */
    fcl_attention_desc whole = d;
    whole.len_kv = cap, whole.page_size = whole.num_pages = whole.block_table_stride = 0;
    const fcl_attention_host_io host = {.q = q, .k = k, .v = v, .seqlens_kv = lens,
                                        .sinks = c->sinks ? sinks : NULL,
                                        .alibi_slopes = c->alibi ? slopes : NULL, .k_scales = ks};
    size_t at[8];
    for (size_t i = 0; i < Lq; i++)
        at[i] = i;
    check_rank_rows(&io, whole, &host, at, Lq, "sharded");
    cl_mem all[] = {io.q,          io.k,           io.v,     io.out,         io.lse,
                    io.seqlens_kv, io.block_table, io.sinks, io.alibi_slopes, io.k_scales};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(q), free(k), free(v), free(ks), free(table), free(lk), free(lv), free(lks);
}

/* GQA decoding over contiguous f32 shards and paged f16 ones (pages of 16 and 5, shuffled),
 * with softcap and sinks; the last 6 positions of each sequence at once (causal across the
 * shards), with a window and with ALiBi (distances across shards); an empty sequence; q8_0 K
 * and V paged, int8 K with TOKEN scales (paged with it) beside q4_0 V. */
static void test_sharded_decode(void **state)
{
    (void)state;
    static const int32_t lens[4] = {37, 0, 100, 64};
    const sharded_case cases[] = {
        {4, 8, 2, 64, 0, FCL_DTYPE_F32, 0.0f, 0, 1, 0, 0, 0, 0, 0},
        {4, 8, 2, 64, 0, FCL_DTYPE_F32, 0.0f, 1, 1, 0, 0, 0, 0, 0},
        {4, 4, 4, 128, 16, FCL_DTYPE_F16, 30.0f, 0, 1, 0, 0, 0, 0, 0},
        {4, 8, 1, 64, 5, FCL_DTYPE_F16, 0.0f, 1, 1, 0, 0, 0, 0, 0},
        {4, 8, 2, 64, 0, FCL_DTYPE_F32, 0.0f, 0, 6, 0, 0, 0, 0, 0},
        {4, 8, 2, 64, 16, FCL_DTYPE_F16, 0.0f, 0, 6, 20, 0, 0, 0, 0},
        {4, 8, 2, 64, 0, FCL_DTYPE_F32, 0.0f, 1, 6, 0, 1, 0, 0, 0},
        {4, 8, 2, 64, 5, FCL_DTYPE_F16, 0.0f, 0, 1, 0, 0, FCL_KV_Q8_0, FCL_KV_Q8_0, 0},
        {4, 8, 2, 64, 16, FCL_DTYPE_F16, 0.0f, 1, 6, 0, 0, FCL_KV_INT8, FCL_KV_Q4_0,
         FCL_KV_SCALE_TOKEN},
        {4, 8, 2, 64, 0, FCL_DTYPE_F16, 0.0f, 0, 1, 0, 0, FCL_KV_FP8_E4M3, FCL_KV_INT8,
         FCL_KV_SCALE_TOKEN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_sharded(&cases[i], lens);
}

/* A ring case: each rank's block of block_len tokens; K and V in their formats (0: dtype_kv),
 * with their scale modes (TOKEN scales travel with their keys, HEAD ones are every rank's). */
typedef struct {
    size_t block_len;
    fcl_causal causal;
    size_t window;
    int alibi, sinks;
    fcl_dtype dtype_kv;
    fcl_kv_format format_k, format_v;
    fcl_kv_scale scale_k, scale_v;
} ring_case;

/* The whole problem's K or V scales of mode (float32 [B][Hk][N] for TOKEN, [B][Hk] for HEAD,
 * distinct values; NULL for other modes), and this rank's in *local, a device buffer (the
 * tokens at[t] of its block; HEAD: the same), or NULL. */
static float *ring_scales(fcl_kv_scale mode, size_t B, size_t Hk, size_t N, const size_t *at,
                          size_t block_len, cl_mem *local)
{
    *local = NULL;
    if (mode != FCL_KV_SCALE_TOKEN && mode != FCL_KV_SCALE_HEAD)
        return NULL;
    const size_t per = mode == FCL_KV_SCALE_TOKEN ? N : 1, mine = mode == FCL_KV_SCALE_TOKEN ? block_len : 1;
    float *whole = kv_random_scales(B * Hk * per, &rng), *host = malloc(B * Hk * mine * sizeof(float));
    assert_non_null(host);
    for (size_t bh = 0; bh < B * Hk; bh++)
        for (size_t t = 0; t < mine; t++)
            host[bh * mine + t] = whole[bh * per + (per > 1 ? at[t] : 0)];
    *local = device_copy(host, B * Hk * mine * sizeof(float));
    free(host);
    return whole;
}

/* Ring attention: every rank holds block_len tokens of each sequence (its queries and their
 * keys and values), the blocks in rank order, or in zig-zag order two chunks of half that
 * (chunks rank and 2 ranks - 1 - rank); its queries' rows of the result against the float64
 * reference of the whole sequences (over K's and V's decoded values). */
static void check_ring(fcl_mpi_workspace *ws, const ring_case *c, int zigzag)
{
    const size_t B = 2, Hq = 8, Hk = 2, D = 64, block_len = c->block_len, N = block_len * (size_t)ranks;
    const unsigned fk = chk_kv_format(c->format_k, c->dtype_kv), fv = chk_kv_format(c->format_v, c->dtype_kv);
    const size_t rk = chk_kv_row_bytes(fk, D), rv = chk_kv_row_bytes(fv, D), rows = B * Hq * block_len;
    float *q = chk_random_tensor(B * Hq * N * D, FCL_DTYPE_F32, &rng);
    unsigned char *k = kv_tensor(fk, B * Hk * N, D, KV_FROM_DATA, &rng);
    unsigned char *v = kv_tensor(fv, B * Hk * N, D, KV_FROM_DATA, &rng);
    float slopes[8], sink[8];
    for (size_t h = 0; h < Hq; h++)
        slopes[h] = 0.25f / (float)(h + 1), sink[h] = (float)chk_normal(&rng);
    float *lq = malloc(rows * D * 4);
    size_t *at = malloc(block_len * sizeof(size_t)); /* this rank's token t: the whole's at[t] */
    unsigned char *lk = malloc(B * Hk * block_len * rk), *lv = malloc(B * Hk * block_len * rv);
    assert_true(q && k && v && lq && at && lk && lv);
    const size_t m = block_len / 2, last = 2 * (size_t)ranks - 1;
    for (size_t t = 0; t < block_len; t++)
        at[t] = !zigzag ? (size_t)rank * block_len + t
                : t < m ? (size_t)rank * m + t
                        : (last - (size_t)rank) * m + t - m;
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < block_len; t++) { /* [b][h][token][dim] */
            for (size_t h = 0; h < Hq; h++)
                memcpy(lq + ((b * Hq + h) * block_len + t) * D, q + ((b * Hq + h) * N + at[t]) * D,
                       D * 4);
            for (size_t h = 0; h < Hk; h++) {
                const size_t to = (b * Hk + h) * block_len + t, from = (b * Hk + h) * N + at[t];
                memcpy(lk + to * rk, k + from * rk, rk);
                memcpy(lv + to * rv, v + from * rv, rv);
            }
        }
    cl_mem k_scales, v_scales;
    float *ks = ring_scales(c->scale_k, B, Hk, N, at, block_len, &k_scales);
    float *vs = ring_scales(c->scale_v, B, Hk, N, at, block_len, &v_scales);
    fcl_attention_desc d = {.batch = B, .heads_q = Hq, .heads_kv = Hk, .len_q = block_len,
                            .len_kv = block_len, .head_dim = D, .causal = c->causal,
                            .dtype_kv = c->dtype_kv, .window = c->window > 0,
                            .window_left = c->window, .window_right = c->window,
                            .format_k = c->format_k, .format_v = c->format_v,
                            .scale_mode_k = c->scale_k, .scale_mode_v = c->scale_v,
                            .k_scales_batch_stride = c->scale_k == FCL_KV_SCALE_HEAD ? Hk : 0,
                            .v_scales_batch_stride = c->scale_v == FCL_KV_SCALE_HEAD ? Hk : 0};
    fcl_attention_io io = {.q = device_copy(lq, rows * D * 4),
                           .k = device_copy(lk, B * Hk * block_len * rk),
                           .v = device_copy(lv, B * Hk * block_len * rv),
                           .out = device_copy(NULL, rows * D * 4), .lse = device_copy(NULL, rows * 4),
                           .alibi_slopes = c->alibi ? device_copy(slopes, Hq * 4) : NULL,
                           .sinks = c->sinks ? device_copy(sink, Hq * 4) : NULL,
                           .k_scales = k_scales, .v_scales = v_scales};
    fcl_status s = zigzag ? fcl_mpi_attention_ring_zigzag(support_ctx, MPI_COMM_WORLD, ws, &d, &io)
                          : fcl_mpi_attention_ring(support_ctx, MPI_COMM_WORLD, ws, &d, &io);
    if (s != FCL_SUCCESS)
        fail_msg("rank %d: %s: %s", rank, fcl_status_string(s), fcl_mpi_last_error());
    fcl_attention_desc whole = d;
    whole.len_q = whole.len_kv = N;
    const fcl_attention_host_io host = {.q = q, .k = k, .v = v,
                                        .alibi_slopes = c->alibi ? slopes : NULL,
                                        .sinks = c->sinks ? sink : NULL, .k_scales = ks,
                                        .v_scales = vs};
    char what[128];
    snprintf(what, sizeof what, "ring%s (causal %d window %zu alibi %d formats %u/%u scales %d/%d)",
             zigzag ? " zig-zag" : "", c->causal, c->window, c->alibi, fk, fv, c->scale_k,
             c->scale_v);
    check_rank_rows(&io, whole, &host, at, block_len, what);
    cl_mem all[] = {io.q, io.k, io.v, io.out, io.lse, io.alibi_slopes, io.sinks, io.k_scales, io.v_scales};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(q), free(k), free(v), free(lq), free(at), free(lk), free(lv);
    free(ks), free(vs);
}

/* Prefill over blocks on the ranks: causal (blocks after the queries skipped), not causal,
 * a window and ALiBi across blocks, sinks once, f16 K/V, GQA; q8_0 K and V, int8 K with TOKEN
 * scales (travelling with their keys) beside fp8 V with HEAD scales, q4_0 K with TOKEN scales
 * beside f16 V; in rank order and in zig-zag order (where every chunk pair has its own
 * distance); the host blocks the call's own, then a workspace's, grown from f16's blocks to
 * f32's. */
static void test_ring_prefill(void **state)
{
    (void)state;
    const fcl_causal causal = FCL_CAUSAL_BOTTOM_RIGHT;
    const fcl_kv_scale token = FCL_KV_SCALE_TOKEN, head = FCL_KV_SCALE_HEAD;
    fcl_mpi_workspace *ws = NULL;
    assert_int_equal(fcl_mpi_workspace_create(support_ctx, &ws), FCL_SUCCESS);
    for (int zigzag = 0; zigzag <= 1; zigzag++) {
        const size_t odd = zigzag ? 18 : 17;
        const ring_case cases[] = {
            {.block_len = 24, .causal = causal, .dtype_kv = FCL_DTYPE_F32},
            {.block_len = odd, .sinks = 1, .dtype_kv = FCL_DTYPE_F16},
            {.block_len = 24, .causal = causal, .window = 30, .dtype_kv = FCL_DTYPE_F16},
            {.block_len = 24, .causal = causal, .alibi = 1, .sinks = 1, .dtype_kv = FCL_DTYPE_F32},
            {.block_len = 24, .causal = causal, .format_k = FCL_KV_Q8_0, .format_v = FCL_KV_Q8_0},
            {.block_len = 20, .causal = causal, .window = 15, .format_k = FCL_KV_INT8,
             .format_v = FCL_KV_FP8_E4M3, .scale_k = token, .scale_v = head},
            {.block_len = odd + 4, .alibi = 1, .format_k = FCL_KV_Q4_0, .format_v = FCL_KV_F16,
             .scale_k = token},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            check_ring(i ? ws : NULL, &cases[i], zigzag);
    }
    fcl_mpi_workspace_destroy(ws);
}

/* Zig-zag order refuses blocks that are not two equal chunks, on every rank. */
static void test_zigzag_refuses_odd_blocks(void **state)
{
    (void)state;
    cl_mem buf = device_copy(NULL, 4096);
    fcl_attention_desc d = {.batch = 1, .heads_q = 2, .len_q = 5, .len_kv = 5, .head_dim = 16};
    fcl_attention_io io = {.q = buf, .k = buf, .v = buf, .out = buf};
    fcl_status s = fcl_mpi_attention_ring_zigzag(support_ctx, MPI_COMM_WORLD, NULL, &d, &io);
    assert_int_equal(s, FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_mpi_last_error(), "len_q (5) equal to len_kv (5), even"));
    clReleaseMemObject(buf);
}

/* A rank that refuses its arguments leaves no other waiting: every rank returns an error
 * (the refusing rank its own sentence, the others naming it); ranks that disagree on a shape
 * all refuse; a workspace of another context is refused. */
static void test_refusals_reach_every_rank(void **state)
{
    (void)state;
    cl_mem buf = device_copy(NULL, 4096);
    fcl_attention_desc d = {.batch = 1, .heads_q = 2, .len_q = 1, .len_kv = 4, .head_dim = 16};
    fcl_attention_io io = {.q = buf, .k = buf, .v = buf, .out = buf};
    if (rank == 0)
        d.mask_type = FCL_MASK_ADD_F32, io.mask = buf;
    fcl_status s = fcl_mpi_attention_sharded(support_ctx, MPI_COMM_WORLD, &d, &io);
    if (rank == 0) {
        assert_int_equal(s, FCL_ERROR_UNSUPPORTED);
        assert_non_null(strstr(fcl_mpi_last_error(), "attention across ranks does not take a mask yet"));
    } else {
        assert_int_equal(s, FCL_ERROR_INVALID_ARGUMENT);
        assert_non_null(strstr(fcl_mpi_last_error(), "rank 0 failed validation"));
    }
    d.mask_type = FCL_MASK_NONE, io.mask = NULL;
    d.heads_q = rank ? 1 : 2;
    s = fcl_mpi_attention_sharded(support_ctx, MPI_COMM_WORLD, &d, &io);
    if (ranks > 1) {
        assert_int_equal(s, FCL_ERROR_INVALID_ARGUMENT);
        assert_non_null(strstr(fcl_mpi_last_error(), "the ranks disagree on heads_q (from 1 to 2)"));
    }
    assert_int_equal(fcl_mpi_attention_sharded(support_ctx, MPI_COMM_NULL, &d, &io),
                     FCL_ERROR_INVALID_ARGUMENT);
    /* a workspace of another context */
    fcl_context *other = NULL;
    fcl_mpi_workspace *ws = NULL;
    assert_int_equal(fcl_context_create(NULL, &other), FCL_SUCCESS);
    assert_int_equal(fcl_mpi_workspace_create(other, &ws), FCL_SUCCESS);
    d.heads_q = 2, d.len_q = d.len_kv = 4;
    assert_int_equal(fcl_mpi_attention_ring(support_ctx, MPI_COMM_WORLD, ws, &d, &io),
                     FCL_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(fcl_mpi_last_error(), "ws belongs to another context"));
    fcl_mpi_workspace_destroy(ws);
    fcl_context_destroy(other);
    clReleaseMemObject(buf);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    unsigned long long seed = getenv("FLASHCL_TEST_SEED") ? strtoull(getenv("FLASHCL_TEST_SEED"), NULL, 10) : 0;
    if (rank == 0)
        seed = chk_rng_seeded(seed).state;
    MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    rng = chk_rng_seeded(seed);
    rank_rng = chk_rng_seeded(seed ^ (0x9e3779b97f4a7c15ull * (unsigned long long)(rank + 1)));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharded_decode),
        cmocka_unit_test(test_ring_prefill),
        cmocka_unit_test(test_zigzag_refuses_odd_blocks),
        cmocka_unit_test(test_refusals_reach_every_rank),
    };
    const int failed = support_run_tests(tests);
    MPI_Finalize();
    return failed;
}

/* flashcl-ggml-cases: llama.cpp's own FLASH_ATTN_EXT test cases through flashcl, as ggml lays
 * out their tensors, each checked against the float64 reference and counted by the kernel
 * family that runs it. The cases are those of make_test_cases_eval() in llama.cpp's
 * tests/test-backend-ops.cpp (ggml-org/llama.cpp at 0054f92, 5088 cases); what each becomes:
 *   q      float32 [nr3][heads_q][nb][hsk] (permuted: [nr3][nb][heads_q][hsk]), heads_q = nh nr2
 *   K      [nr3][nh][kv][hsk] (permuted: [nr3][kv][nh][hsk]) in the case's type
 *   V      a view of a tensor twice as long along its second axis (ggml's is_view), or the
 *          first hsv values of K's rows where V is K's (MLA: hsk 576 and 320)
 *   out    float32 [nr3][nb][heads_q][hsv] (ggml's result), with lse
 *   mask   float16 [nr3][pad(nb, 64)][kv], shared by the heads, with blocks of -inf
 *   sinks  float32 [heads_q]; max_bias > 0: ALiBi slopes times the mask (ggml's convention);
 *   logit_softcap: flashcl's softcap; scale 1 / sqrt(hsk)
 * Block formats pad the head dims to multiples of 32, as ggml does (hsk 72 becomes 96 for
 * q8_0). Inputs: uniform in [-1, 1) as ggml's tests; coded K/V from random bytes with
 * moderate block factors (d of either sign, m), so that every code pattern occurs. ggml's
 * GGML_PREC_F32 and DEFAULT are the same call here (flashcl's arithmetic is float32). The
 * path counted is fcl_attention_plan's (which takes the sinks as absent: they do not change
 * the path).
 * Not part of the library. */
#include "check.h"
#include "flashcl.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: flashcl-ggml-cases [-d DEVICE] [--every N [--first I]] [--filter TEXT] [--threads N]\n"
    "                          [--seed N] [-v]\n"
    "  runs llama.cpp's FLASH_ATTN_EXT cases (every Nth from the Ith; those whose description\n"
    "  contains TEXT), each checked against the float64 reference, and counts them by kernel path;\n"
    "  -v prints every case with its path and error\n";

/* ggml's types in the order of test-backend-ops' loop, as flashcl's K/V formats */
static const fcl_kv_format case_types[] = {FCL_KV_F32,  FCL_KV_F16,  FCL_KV_BF16,
                                           FCL_KV_Q8_0, FCL_KV_Q5_1, FCL_KV_Q5_0,
                                           FCL_KV_Q4_1, FCL_KV_Q4_0, FCL_KV_IQ4_NL};
#define N_TYPES (sizeof case_types / sizeof case_types[0])
#define N_PATHS 5         /* fcl_attention_path values */
#define GGML_MASK_PAD 64  /* GGML_KQ_MASK_PAD: the mask's rows, nb rounded up */

typedef struct ggml_case {
    int hsk, hsv, nh, nr2, nr3, kv, nb;
    int mask, sinks;
    float max_bias, softcap;
    int prec_f32;       /* GGML_PREC_F32, else DEFAULT (the same call here) */
    fcl_kv_format type; /* K's and V's */
    int permuted;       /* permute {0, 2, 1, 3} */
} ggml_case;

/* Whether test-backend-ops' loop keeps case c (its `continue`s, in its order) */
static int case_kept(const ggml_case *c)
{
    const int hsk = c->hsk, hsv = c->hsv, nr2 = c->nr2;
    if (hsk != 192 && hsk != 320 && hsk != 576 && hsk != hsv)
        return 0;
    if ((hsk == 192 && hsv != 128 && hsv != 192) || (hsk == 576 && hsv != 512) ||
        (hsk == 320 && hsv != 256)) /* DeepSeek's and Mistral 4's MLA */
        return 0;
    if ((!c->mask && c->max_bias > 0.0f) || (hsk != 128 && c->softcap != 0.0f))
        return 0;
    if ((c->nh == 1 && hsk != 320 && hsk != 576) || (hsk > 64 && c->nr3 > 1))
        return 0;
    if ((nr2 == 8 && hsk != 192) || (nr2 == 12 && hsk != 128) || (nr2 == 16 && hsk != 192) ||
        (nr2 == 20 && (c->nh != 1 || hsk != 576)) || (nr2 == 32 && (c->nh != 1 || hsk != 320)))
        return 0;
    if ((nr2 != 1 && c->kv != 512) || (hsk != 128 && !c->prec_f32))
        return 0;
    return c->type == FCL_KV_F16 || hsk == 64 || hsk == 72;
}

/* make_test_cases_eval's FLASH_ATTN_EXT loop, in its order: its nested loops' values (the
 * last the innermost) stepped through as an odometer; the cases into out (NULL: count only);
 * returns how many. */
static size_t ggml_cases(ggml_case *out)
{
    static const int hsks[] = {40, 64, 72, 80, 96, 128, 192, 256, 320, 512, 576};
    static const int hsvs[] = {40, 64, 72, 80, 96, 128, 192, 256, 512};
    static const int yes_no[] = {1, 0}, biases[] = {0, 8}, caps[] = {0, 10}, nhs[] = {1, 4};
    static const int nr3s[] = {1, 3}, nr2s[] = {1, 4, 8, 12, 16, 20, 32};
    static const int kvs[] = {113, 512, 1024}, nbs[] = {1, 3, 32, 75};
    static const int types[] = {0, 1, 2, 3, 4, 5, 6, 7, 8}; /* case_types' indices */
    /* hsk, hsv, mask, sinks, max_bias, logit_softcap, nh, nr3, nr2, kv, nb, prec, type_KV */
    static const int *const values[] = {hsks, hsvs, yes_no, yes_no, biases, caps, nhs,
                                        nr3s, nr2s, kvs,  nbs,  yes_no, types};
    static const int counts[] = {11, 9, 2, 2, 2, 2, 2, 2, 7, 3, 4, 2, 9};
    enum { LOOPS = sizeof counts / sizeof counts[0] };
    int at[LOOPS] = {0};
    size_t n = 0;
    for (;;) {
        int v[LOOPS];
        for (int i = 0; i < LOOPS; i++)
            v[i] = values[i][at[i]];
        const ggml_case c = {v[0], v[1], v[6], v[8], v[7], v[9], v[10], v[2], v[3],
                             (float)v[4], (float)v[5], v[11], case_types[v[12]], 0};
        if (case_kept(&c)) {
            /* ... and fewer of them permuted */
            const int twice = c.mask && c.max_bias == 0.0f && c.softcap == 0.0f && c.kv == 512;
            for (int p = 0; p <= twice; p++, n++)
                if (out) {
                    out[n] = c;
                    out[n].permuted = p;
                }
        }
        int i = LOOPS - 1;
        while (i >= 0 && ++at[i] == counts[i])
            at[i--] = 0;
        if (i < 0)
            return n;
    }
}

/* The case as test-backend-ops names its variables */
static void case_text(const ggml_case *c, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "hsk=%d,hsv=%d,nh=%d,nr23=[%d,%d],kv=%d,nb=%d,mask=%d,sinks=%d,max_bias=%g,"
             "logit_softcap=%g,prec=%s,type_KV=%s,permute=%s",
             c->hsk, c->hsv, c->nh, c->nr2, c->nr3, c->kv, c->nb, c->mask, c->sinks, c->max_bias,
             c->softcap, c->prec_f32 ? "f32" : "def", chk_formats[c->type].name,
             c->permuted ? "[0,2,1,3]" : "[0,1,2,3]");
}

static size_t pad_to(size_t x, size_t m) { return (x + m - 1) / m * m; }
static int case_is_mla(const ggml_case *c) { return c->hsk == 576 || c->hsk == 320; }

/* A view of [nr3][heads][len][row] (permuted: [nr3][len][heads][row]) in units */
static fcl_tensor_view dense_view(size_t heads, size_t len, size_t row, int permuted)
{
    return permuted ? (fcl_tensor_view){0, len * heads * row, row, heads * row}
                    : (fcl_tensor_view){0, heads * len * row, len * row, row};
}

/* The descriptor of case c, and the units its q, K, V and out buffers hold */
static fcl_attention_desc case_desc(const ggml_case *c, size_t units[4])
{
    const unsigned f = c->type;
    const size_t block = chk_formats[f].elems, heads_q = (size_t)c->nh * c->nr2;
    const size_t hsk = pad_to(c->hsk, block), hsv = pad_to(c->hsv, block);
    const size_t rk = chk_kv_row_units(f, hsk), rv = chk_kv_row_units(f, hsv);
    const int coded = !(chk_formats[f].roles & FCL_ROLE_FLOAT);
    fcl_attention_desc d = {.batch = c->nr3, .heads_q = heads_q, .heads_kv = c->nh,
                            .len_q = c->nb, .len_kv = c->kv, .head_dim = hsk, .head_dim_v = hsv,
                            .scale = 1.0f / sqrtf((float)c->hsk), .softcap = c->softcap,
                            .dtype_q = FCL_DTYPE_F32, .dtype_o = FCL_DTYPE_F32,
                            .dtype_kv = coded ? FCL_DTYPE_F32 : (fcl_dtype)chk_formats[f].dtype,
                            .format_k = coded ? f : 0, .format_v = coded ? f : 0};
    d.q_view = dense_view(heads_q, c->nb, hsk, c->permuted);
    d.k_view = dense_view(c->nh, c->kv, rk, c->permuted);
    /* V: a view of [nr3][nh][2 kv][row] ([nr3][kv][2 nh][row] permuted), or K's rows */
    d.v_view = case_is_mla(c) ? d.k_view
               : c->permuted  ? dense_view(2 * (size_t)c->nh, c->kv, rv, 1)
                              : dense_view(c->nh, 2 * (size_t)c->kv, rv, 0);
    d.o_view = dense_view(heads_q, c->nb, hsv, 1);
    units[0] = (size_t)c->nr3 * heads_q * c->nb * hsk;
    units[1] = (size_t)c->nr3 * c->nh * c->kv * rk;
    units[2] = case_is_mla(c) ? 0 : (size_t)c->nr3 * c->nh * 2 * c->kv * rv;
    units[3] = (size_t)c->nr3 * heads_q * c->nb * hsv;
    if (c->mask) {
        d.mask_type = FCL_MASK_ADD_F16;
        d.mask_stride_q = d.len_kv;
        d.mask_stride_batch = pad_to(d.len_q, GGML_MASK_PAD) * d.len_kv;
        d.alibi_from_mask = c->max_bias > 0.0f;
    }
    return d;
}

static float uniform_pm1(chk_rng *r) { return (float)(2.0 * chk_uniform(r) - 1.0); }

/* n units of K or V in format f: values uniform in [-1, 1), or random bytes whose blocks'
 * factors are set so that their values lie about there. */
static void *random_kv(size_t n, unsigned f, chk_rng *r)
{
    const chk_format *t = &chk_formats[f];
    const size_t bytes = n * chk_kv_unit_bytes(f);
    unsigned char *p = malloc(bytes ? bytes : 1);
    if (!p)
        return NULL;
    if (t->roles & FCL_ROLE_FLOAT) {
        for (size_t i = 0; i < n; i++)
            chk_store(p, (fcl_dtype)t->dtype, i, uniform_pm1(r));
        return p;
    }
    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)(chk_uniform(r) * 256.0);
    /* largest code magnitude of the format: d times it spans about [-1, 1] */
    const int with_m = f == FCL_KV_Q4_1 || f == FCL_KV_Q5_1;
    const double top = f == FCL_KV_Q8_0 || f == FCL_KV_IQ4_NL ? 127.0
                       : f == FCL_KV_Q4_0                     ? 8.0
                       : f == FCL_KV_Q5_0                     ? 16.0
                       : f == FCL_KV_Q4_1                     ? 7.5
                                                              : 15.5;
    for (size_t at = 0; at + t->bytes <= bytes; at += t->bytes) {
        const double size = (0.5 + 0.5 * chk_uniform(r)) / top;
        const uint16_t d = chk_float_to_half((float)(with_m || chk_uniform(r) < 0.5 ? size : -size));
        memcpy(p + at, &d, 2);
        if (with_m) {
            const uint16_t m = chk_float_to_half((float)-(0.5 + 0.5 * chk_uniform(r)));
            memcpy(p + at + 2, &m, 2);
        }
    }
    return p;
}

/* ggml's init_tensor_kq_mask: uniform in [-1, 1), and a fifth of the 128 x 64 blocks' worth
 * of blocks at random places set to -inf or 0 */
static uint16_t *random_mask(size_t batches, size_t rows, size_t cols, chk_rng *r)
{
    const size_t n = batches * rows * cols;
    uint16_t *m = malloc(n * sizeof *m);
    if (!m)
        return NULL;
    for (size_t i = 0; i < n; i++)
        m[i] = chk_float_to_half(uniform_pm1(r));
    const size_t blocks = n / 5 / 128 / 64;
    for (size_t k = 0; k < blocks; k++) {
        const size_t b = (size_t)(chk_uniform(r) * (double)batches);
        const size_t row = (size_t)(chk_uniform(r) * (double)rows);
        const size_t col = (size_t)(chk_uniform(r) * (double)cols);
        const uint16_t x = chk_uniform(r) < 0.5 ? 0xfc00u : 0u;
        for (size_t i = row; i < row + 64 && i < rows; i++)
            for (size_t j = col; j < col + 128 && j < cols; j++)
                m[(b * rows + i) * cols + j] = x;
    }
    return m;
}

/* ---- the float64 reference, its rows shared among threads ---- */
typedef struct reference_job {
    const fcl_attention_desc *d;
    const fcl_attention_host_io *io;
    double *want, *sizes, *lse;
    size_t rows, first, step;
} reference_job;

static void *reference_rows(void *arg)
{
    const reference_job *j = arg;
    const fcl_attention_desc *d = j->d;
    for (size_t row = j->first; row < j->rows; row += j->step) {
        const size_t b = row / (d->heads_q * d->len_q), h = row / d->len_q % d->heads_q;
        chk_attention_row_sized(d, j->io, b, h, row % d->len_q, j->want + row * d->head_dim_v,
                                j->sizes + row * d->head_dim_v, j->lse + row);
    }
    return NULL;
}

/* want, sizes ([batch][heads_q][len_q][head_dim_v]) and lse of every row, on threads */
static void reference(const fcl_attention_desc *d, const fcl_attention_host_io *io, double *want,
                      double *sizes, double *lse, size_t threads)
{
    pthread_t tid[64];
    reference_job jobs[64];
    const size_t rows = d->batch * d->heads_q * d->len_q;
    size_t started = 1;
    for (size_t t = 0; t < threads; t++)
        jobs[t] = (reference_job){d, io, want, sizes, lse, rows, t, threads};
    while (started < threads &&
           pthread_create(&tid[started], NULL, reference_rows, &jobs[started]) == 0)
        started++;
    for (size_t t = started; t < threads; t++) /* the jobs of threads that did not start */
        reference_rows(&jobs[t]);
    reference_rows(&jobs[0]);
    for (size_t t = 1; t < started; t++)
        pthread_join(tid[t], NULL);
}

typedef struct case_result {
    int ran, ok;
    fcl_attention_path path;
    double max_abs_err, nmse, lse_err;
    char why[256];
} case_result;

/* Runs case c and checks it; the result's why says what failed. */
static void run_case(fcl_context *ctx, const ggml_case *c, chk_rng *r, size_t threads,
                     case_result *res)
{
    size_t units[4];
    fcl_attention_desc d = case_desc(c, units);
    const fcl_attention_desc full = chk_attention_defaults(d);
    const size_t rows = d.batch * d.heads_q * d.len_q, mask_rows = pad_to(d.len_q, GGML_MASK_PAD);
    const unsigned f = c->type;
    float *q = malloc(units[0] * sizeof *q), *out = calloc(units[3], sizeof *out);
    float *lse = malloc(rows * sizeof *lse), *sinks = malloc(d.heads_q * sizeof *sinks);
    float *slopes = malloc(d.heads_q * sizeof *slopes);
    void *k = random_kv(units[1], f, r), *v = case_is_mla(c) ? k : random_kv(units[2], f, r);
    uint16_t *mask = c->mask ? random_mask(d.batch, mask_rows, d.len_kv, r) : NULL;
    double *want = malloc(rows * d.head_dim_v * sizeof *want);
    double *sizes = malloc(rows * d.head_dim_v * sizeof *sizes);
    double *got = malloc(rows * d.head_dim_v * sizeof *got), *want_lse = malloc(rows * sizeof *want_lse);
    memset(res, 0, sizeof *res);
    if (!q || !out || !lse || !sinks || !slopes || !k || !v || (c->mask && !mask) || !want ||
        !sizes || !got || !want_lse) {
        snprintf(res->why, sizeof res->why, "out of host memory");
        goto done;
    }
    for (size_t i = 0; i < units[0]; i++)
        q[i] = uniform_pm1(r);
    for (size_t h = 0; h < d.heads_q; h++)
        sinks[h] = uniform_pm1(r);
    if (c->max_bias > 0.0f)
        fcl_alibi_slopes(d.heads_q, c->max_bias, slopes);
    const fcl_attention_host_io io = {.q = q, .k = k, .v = v, .mask = mask, .out = out,
                                      .lse = lse, .sinks = c->sinks ? sinks : NULL,
                                      .alibi_slopes = c->max_bias > 0.0f ? slopes : NULL};
    fcl_attention_plan_info plan;
    fcl_status s = fcl_attention_plan(ctx, &d, &plan);
    if (s == FCL_SUCCESS)
        s = fcl_attention_run_host(ctx, &d, &io);
    if (s != FCL_SUCCESS) {
        snprintf(res->why, sizeof res->why, "%s: %s", fcl_status_string(s),
                 fcl_context_last_error(ctx));
        goto done;
    }
    res->ran = 1;
    res->path = plan.path;
    reference(&full, &io, want, sizes, want_lse, threads);
    for (size_t row = 0; row < rows; row++) {
        const size_t b = row / (d.heads_q * d.len_q), h = row / d.len_q % d.heads_q;
        const size_t at = b * d.o_view.batch_stride + h * d.o_view.head_stride +
                          row % d.len_q * d.o_view.token_stride;
        for (size_t e = 0; e < d.head_dim_v; e++)
            got[row * d.head_dim_v + e] = out[at + e];
    }
    chk_report rep, lse_rep;
    const int out_ok = chk_compare_sized(got, want, sizes, rows * d.head_dim_v,
                                         chk_attention_tolerance(&full), &rep);
    const int lse_ok = chk_compare_lse(lse, want_lse, rows, &lse_rep);
    res->ok = out_ok && lse_ok;
    res->max_abs_err = rep.max_abs_err, res->nmse = rep.nmse, res->lse_err = lse_rep.max_abs_err;
    if (!out_ok)
        snprintf(res->why, sizeof res->why, "out: %zu of %zu off, first at %zu (got %.9g, want %.9g)",
                 rep.bad, rep.checked, rep.first_bad, rep.got, rep.want);
    else if (!lse_ok)
        snprintf(res->why, sizeof res->why, "lse: %zu of %zu off, first at %zu (got %.9g, want %.9g)",
                 lse_rep.bad, lse_rep.checked, lse_rep.first_bad, lse_rep.got, lse_rep.want);
done:
    free(q);
    free(out);
    free(lse);
    free(sinks);
    free(slopes);
    if (v != k)
        free(v);
    free(k);
    free(mask);
    free(want);
    free(sizes);
    free(got);
    free(want_lse);
}

int main(int argc, char **argv)
{
    fcl_context_options opts = {0};
    unsigned long long seed = 0;
    size_t every = 1, first = 0, threads = (size_t)sysconf(_SC_NPROCESSORS_ONLN);
    const char *filter = NULL;
    int verbose = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-d") == 0 && a + 1 < argc)
            opts.device = argv[++a];
        else if (strcmp(argv[a], "--every") == 0 && a + 1 < argc)
            every = strtoul(argv[++a], NULL, 10);
        else if (strcmp(argv[a], "--first") == 0 && a + 1 < argc)
            first = strtoul(argv[++a], NULL, 10);
        else if (strcmp(argv[a], "--filter") == 0 && a + 1 < argc)
            filter = argv[++a];
        else if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc)
            threads = strtoul(argv[++a], NULL, 10);
        else if (strcmp(argv[a], "--seed") == 0 && a + 1 < argc)
            seed = strtoull(argv[++a], NULL, 10);
        else if (strcmp(argv[a], "-v") == 0)
            verbose = 1;
        else {
            fputs(usage, strcmp(argv[a], "--help") == 0 ? stdout : stderr);
            return strcmp(argv[a], "--help") == 0 ? 0 : 2;
        }
    }
    every = every ? every : 1;
    threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    const size_t n = ggml_cases(NULL);
    ggml_case *cases = malloc(n * sizeof *cases);
    fcl_context *ctx = NULL;
    if (!cases) {
        fprintf(stderr, "flashcl-ggml-cases: out of host memory\n");
        return 1;
    }
    ggml_cases(cases);
    fcl_status s = fcl_context_create(&opts, &ctx);
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "flashcl-ggml-cases: %s: %s\n", fcl_status_string(s),
                fcl_context_last_error(NULL));
        free(cases);
        return 1;
    }
    fcl_device_info info;
    fcl_context_device_info(ctx, &info);
    chk_rng rng = chk_rng_seeded(seed);
    printf("flashcl %s on %s (%s); llama.cpp's FLASH_ATTN_EXT cases: %zu; seed %llu\n",
           fcl_version_string(), info.name, info.platform_name, n, (unsigned long long)rng.state);
    size_t count[FCL_KV_FORMAT_MAX + 1][N_PATHS] = {{0}}, runs = 0, failed = 0; /* by format */
    double worst_nmse[N_PATHS] = {0}, worst_abs[N_PATHS] = {0};
    const double start = chk_seconds();
    for (size_t i = first; i < n; i += every) {
        char text[256];
        case_text(&cases[i], text, sizeof text);
        if (filter && !strstr(text, filter))
            continue;
        case_result res;
        run_case(ctx, &cases[i], &rng, threads, &res);
        runs++;
        if (res.ran) {
            count[cases[i].type][res.path]++;
            worst_nmse[res.path] = fmax(worst_nmse[res.path], res.nmse);
            worst_abs[res.path] = fmax(worst_abs[res.path], res.max_abs_err);
        }
        if (verbose && res.ok)
            printf("ok %zu %s: %s NMSE %.1e max|err| %.1e\n", i, text,
                   fcl_attention_path_name(res.path), res.nmse, res.max_abs_err);
        if (!res.ok) {
            failed++;
            printf("FAIL %zu %s: %s%s%s\n", i, text, res.ran ? fcl_attention_path_name(res.path) : "",
                   res.ran ? ": " : "", res.why);
        }
        fflush(stdout);
    }
    printf("%zu cases in %.0f s, %zu failed\n", runs, chk_seconds() - start, failed);
    printf("%-7s", "type");
    for (int p = 0; p < N_PATHS; p++)
        printf(" %9s", fcl_attention_path_name((fcl_attention_path)p));
    printf("\n");
    for (size_t t = 0; t < N_TYPES; t++) {
        printf("%-7s", chk_formats[case_types[t]].name);
        for (int p = 0; p < N_PATHS; p++)
            printf(" %9zu", count[case_types[t]][p]);
        printf("\n");
    }
    printf("%-7s", "NMSE");
    for (int p = 0; p < N_PATHS; p++)
        printf(" %9.1e", worst_nmse[p]);
    printf("\n%-7s", "max|err|");
    for (int p = 0; p < N_PATHS; p++)
        printf(" %9.1e", worst_abs[p]);
    printf("\n");
    fcl_context_destroy(ctx);
    free(cases);
    return failed ? 1 : 0;
}

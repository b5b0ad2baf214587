/* flashcl-tune's search and measurement (see tune.h). */
#include "tune.h"

#include "check.h"

#include <stdlib.h>
#include <string.h>

#define SAMPLED_ROWS 64 /* attention query rows checked against the float64 reference */

int tune_parse_shape(int family, const char *text, tune_shape *s)
{
    char tail[8] = "";
    memset(s, 0, sizeof *s);
    s->family = family;
    if (family == TUNE_SOFTMAX)
        return sscanf(text, "%zux%zu%1s", &s->rows, &s->cols, tail) == 2 && s->rows && s->cols;
    const char *slash = strchr(text, '/');
    int n = slash ? sscanf(text, "%zu,%zu/%zu,%zu,%zu,%zu%7s", &s->batch, &s->heads, &s->heads_kv,
                           &s->len_q, &s->len_kv, &s->head_dim, tail)
                  : sscanf(text, "%zu,%zu,%zu,%zu,%zu%7s", &s->batch, &s->heads, &s->len_q,
                           &s->len_kv, &s->head_dim, tail);
    const int fields = slash ? 6 : 5;
    if (n == fields + 1 && strcmp(tail, ",c") == 0)
        s->causal = 1;
    else if (n != fields)
        return 0;
    if (!s->heads_kv)
        s->heads_kv = s->heads;
    return s->batch && s->heads && s->len_q && s->len_kv && s->head_dim &&
           s->heads % s->heads_kv == 0;
}

void tune_shape_text(const tune_shape *s, char *buf, size_t cap)
{
    if (s->family == TUNE_SOFTMAX)
        snprintf(buf, cap, "%zux%zu", s->rows, s->cols);
    else
        snprintf(buf, cap, "%zu,%zu/%zu,%zu,%zu,%zu%s", s->batch, s->heads, s->heads_kv, s->len_q,
                 s->len_kv, s->head_dim, s->causal ? ",c" : "");
}

void tune_describe(const tune_shape *s, char *buf, size_t cap)
{
    if (s->family == TUNE_SOFTMAX)
        snprintf(buf, cap, "softmax %zux%zu", s->rows, s->cols);
    else
        snprintf(buf, cap, "attention B%zu H%zu/%zu Lq%zu Lk%zu D%zu%s", s->batch, s->heads,
                 s->heads_kv, s->len_q, s->len_kv, s->head_dim, s->causal ? " causal" : "");
}

int tune_key_families(const char *key)
{
    if (strncmp(key, "attention_", 10) == 0)
        return TUNE_ATTENTION;
    if (strncmp(key, "vector_width", 12) == 0) /* softmax's vectors and the rows kernel's */
        return TUNE_SOFTMAX | TUNE_ATTENTION;
    return TUNE_SOFTMAX;
}

int tune_line_with(const char *line, const char *key_value, char *out, size_t cap)
{
    const size_t key_len = strcspn(key_value, "=");
    size_t n = 0;
    out[0] = '\0';
    for (const char *item = line; item && *item;) {
        const char *end = strchr(item, ',');
        const size_t len = end ? (size_t)(end - item) : strlen(item);
        const int same_key = strcspn(item, "=,") == key_len && strncmp(item, key_value, key_len) == 0;
        if (!same_key && len) {
            const int k = snprintf(out + n, cap - n, "%s%.*s", n ? "," : "", (int)len, item);
            if (k < 0 || (size_t)k >= cap - n)
                return 0;
            n += (size_t)k;
        }
        item = end ? end + 1 : NULL;
    }
    const int k = snprintf(out + n, cap - n, "%s%s", n ? "," : "", key_value);
    return k >= 0 && (size_t)k < cap - n;
}

/* The mean over the shapes of ms / base. */
static double relative_time(const double *ms, const double *base, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += base[i] > 0 ? ms[i] / base[i] : 1.0;
    return sum / (double)n;
}

int tune_search(const char *base, const char *const *candidates, size_t n_candidates,
                const tune_shape *shapes, size_t n_shapes, tune_measure_fn measure, void *user,
                FILE *log, tune_result *res)
{
    int present = 0;
    for (size_t i = 0; i < n_shapes; i++)
        present |= shapes[i].family;
    memset(res, 0, sizeof *res);
    /* Three arrays of a time per shape: the base's, the best's so far, a trial's. */
    double *base_ms = calloc(n_shapes ? n_shapes : 1, 3 * sizeof(double));
    if (!base_ms || !n_shapes || snprintf(res->line, sizeof res->line, "%s", base) >= (int)sizeof res->line ||
        measure(user, base, present, base_ms) != TUNE_PASSED) {
        res->line[0] = '\0';
        free(base_ms);
        return -1;
    }
    double *best_ms = base_ms + n_shapes, *ms = best_ms + n_shapes;
    /* Again, keeping the faster time of each shape: the first run of a process pays for
     * warming up what every later candidate finds warm. */
    if (measure(user, base, present, ms) == TUNE_PASSED)
        for (size_t i = 0; i < n_shapes; i++)
            base_ms[i] = ms[i] < base_ms[i] ? ms[i] : base_ms[i];
    memcpy(best_ms, base_ms, n_shapes * sizeof(double));
    res->time = 1.0;
    if (log)
        fprintf(log, "  %-40s 1.000 (the base)\n", *base ? base : "(defaults)");
    for (size_t c = 0; c < n_candidates; c++) {
        char trial[256];
        const int mask = tune_key_families(candidates[c]) & present;
        if (!mask || !tune_line_with(res->line, candidates[c], trial, sizeof trial) ||
            strcmp(trial, res->line) == 0)
            continue;
        memcpy(ms, best_ms, n_shapes * sizeof(double)); /* other families' times stay */
        const tune_outcome o = measure(user, trial, mask, ms);
        res->tried++;
        res->wrong += o == TUNE_WRONG;
        res->unusable += o == TUNE_UNUSABLE;
        const double t = relative_time(ms, base_ms, n_shapes);
        const int kept = o == TUNE_PASSED && t < res->time * (1 - TUNE_MIN_GAIN);
        if (log && o == TUNE_PASSED)
            fprintf(log, "  %-40s %.3f%s\n", candidates[c], t, kept ? " kept" : "");
        else if (log)
            fprintf(log, "  %-40s %s\n", candidates[c],
                    o == TUNE_WRONG ? "failed the float64 check" : "did not run");
        if (kept) {
            snprintf(res->line, sizeof res->line, "%s", trial);
            memcpy(best_ms, ms, n_shapes * sizeof(double));
            res->time = t;
        }
    }
    free(base_ms);
    return 0;
}

size_t tune_candidates(const fcl_device_info *info, const char *const *keys, size_t n_keys,
                       char (*out)[64], size_t cap)
{
    size_t n = 0;
    for (size_t k = 0; k < n_keys; k++) {
        char value[32];
        const int work_group = strcmp(keys[k], "softmax_wg") == 0;
        for (int i = 0; n < cap && fcl_tuning_value(keys[k], i, value, sizeof value); i++) {
            const size_t v = strtoul(value, NULL, 10);
            /* Groups of 1 or 2 abort POCL 3.1's work-group compiler on the half kernels. */
            if (work_group && (v < 4 || v > info->max_work_group_size))
                continue;
            snprintf(out[n++], 64, "%s=%s", keys[k], value);
        }
    }
    return n;
}

/* ---- measuring a candidate on the device ---- */

/* A shape's inputs and the float64 reference its results are held to, made once. */
typedef struct shape_data {
    fcl_softmax_desc softmax;
    fcl_attention_desc attention;
    void *in[3];        /* softmax: in; attention: q, k, v (host copies) */
    size_t in_bytes[3];
    size_t out_bytes, out_cols;
    size_t rows[SAMPLED_ROWS], n_rows; /* rows of out checked (attention: sampled) */
    double *want;       /* n_rows x out_cols */
} shape_data;

static void shape_release(shape_data *s)
{
    for (int i = 0; i < 3; i++)
        free(s->in[i]);
    free(s->want);
}

static int softmax_prepare(const tune_shape *t, fcl_dtype dtype, chk_rng *r, shape_data *s)
{
    s->softmax = (fcl_softmax_desc){.rows = t->rows, .cols = t->cols, .dtype = dtype};
    s->in_bytes[0] = t->rows * t->cols * chk_dtype_size(dtype);
    s->in[0] = chk_random_tensor(t->rows * t->cols, dtype, r);
    s->out_bytes = s->in_bytes[0];
    s->out_cols = t->cols;
    s->n_rows = 0; /* every row */
    s->want = malloc(t->rows * t->cols * sizeof(double));
    if (!s->in[0] || !s->want)
        return 0;
    chk_softmax_reference(&s->softmax, &(fcl_softmax_host_io){.in = s->in[0]}, s->want, NULL);
    return 1;
}

static int attention_prepare(const tune_shape *t, fcl_dtype dtype, chk_rng *r, shape_data *s)
{
    fcl_attention_desc *d = &s->attention;
    *d = (fcl_attention_desc){.batch = t->batch, .heads_q = t->heads, .heads_kv = t->heads_kv,
                              .len_q = t->len_q, .len_kv = t->len_kv, .head_dim = t->head_dim,
                              .causal = t->causal ? FCL_CAUSAL_TOP_LEFT : FCL_CAUSAL_NONE,
                              .dtype_q = dtype, .dtype_kv = dtype, .dtype_o = dtype};
    const size_t q_n = t->batch * t->heads * t->len_q * t->head_dim;
    const size_t kv_n = t->batch * t->heads_kv * t->len_kv * t->head_dim;
    const size_t n[3] = {q_n, kv_n, kv_n};
    for (int i = 0; i < 3; i++) {
        s->in[i] = chk_random_tensor(n[i], dtype, r);
        s->in_bytes[i] = n[i] * chk_dtype_size(dtype);
        if (!s->in[i])
            return 0;
    }
    s->out_bytes = s->in_bytes[0];
    s->out_cols = t->head_dim;
    const size_t all_rows = t->batch * t->heads * t->len_q;
    s->n_rows = all_rows < SAMPLED_ROWS ? all_rows : SAMPLED_ROWS;
    s->want = malloc(s->n_rows * t->head_dim * sizeof(double));
    if (!s->want)
        return 0;
    const fcl_attention_desc full = chk_attention_defaults(*d);
    const size_t stride = all_rows / s->n_rows; /* one row at random from each stride */
    for (size_t k = 0; k < s->n_rows; k++) {
        const size_t row = k * stride + (size_t)(chk_uniform(r) * (double)stride);
        const size_t i = row % t->len_q, h = row / t->len_q % t->heads, b = row / t->len_q / t->heads;
        double lse;
        s->rows[k] = row;
        chk_attention_row(&full, s->in[0], s->in[1], s->in[2], NULL, b, h, i,
                          s->want + k * t->head_dim, &lse);
    }
    return 1;
}

typedef struct device_state {
    shape_data *shapes;
} device_state;

static device_state *device_state_for(tune_device *dev)
{
    if (dev->state)
        return dev->state;
    device_state *st = calloc(1, sizeof *st);
    if (!st || !(st->shapes = calloc(dev->n_shapes, sizeof *st->shapes))) {
        free(st);
        return NULL;
    }
    dev->state = st;
    chk_rng r = chk_rng_seeded(dev->seed ? dev->seed : 1);
    for (size_t i = 0; i < dev->n_shapes; i++) {
        const tune_shape *t = &dev->shapes[i];
        if (!(t->family == TUNE_SOFTMAX ? softmax_prepare(t, dev->dtype, &r, &st->shapes[i])
                                        : attention_prepare(t, dev->dtype, &r, &st->shapes[i]))) {
            tune_device_release(dev);
            return NULL;
        }
    }
    return st;
}

void tune_device_release(tune_device *dev)
{
    device_state *st = dev->state;
    for (size_t i = 0; st && st->shapes && i < dev->n_shapes; i++)
        shape_release(&st->shapes[i]);
    if (st)
        free(st->shapes);
    free(st);
    dev->state = NULL;
}

/* One call of the shape on the buffers (in[0..2], out). */
static fcl_status enqueue_shape(fcl_context *ctx, const tune_shape *t, const shape_data *s,
                                cl_mem *in, cl_mem out)
{
    if (t->family == TUNE_SOFTMAX)
        return fcl_softmax(ctx, &s->softmax, in[0], NULL, out, NULL, 0, NULL, NULL);
    return fcl_attention(ctx, &s->attention, in[0], in[1], in[2], NULL, out, NULL, 0, NULL, NULL);
}

/* Whether the rows of out hold the reference's values within the tests' tolerance. */
static int check_shape(cl_command_queue queue, const tune_shape *t, const shape_data *s,
                       fcl_dtype dtype, cl_mem out)
{
    unsigned char *got = malloc(s->out_bytes);
    int ok = got && clEnqueueReadBuffer(queue, out, CL_TRUE, 0, s->out_bytes, got, 0, NULL,
                                        NULL) == CL_SUCCESS;
    chk_report rep;
    if (ok && t->family == TUNE_SOFTMAX)
        ok = chk_compare(got, dtype, t->rows, t->cols, t->cols, s->want,
                         chk_softmax_tolerance(dtype), &rep);
    const chk_tolerance tol = chk_attention_tolerance(&s->attention);
    for (size_t k = 0; ok && t->family == TUNE_ATTENTION && k < s->n_rows; k++)
        ok = chk_compare(got + s->rows[k] * s->out_cols * chk_dtype_size(dtype), dtype, 1,
                         s->out_cols, s->out_cols, s->want + k * s->out_cols, tol, &rep);
    free(got);
    return ok;
}

/* The fastest of three batches of reps calls, in ms a call (host clock: every driver keeps
 * it); reps chosen for about 50 ms a batch where 0. Negative where a call failed. */
static double time_shape(fcl_context *ctx, cl_command_queue queue, const tune_shape *t,
                         const shape_data *s, cl_mem *in, cl_mem out, int reps)
{
    double best = -1;
    for (int batch = 0; batch < 3; batch++) {
        const double start = chk_seconds();
        for (int r = 0; r < reps; r++)
            if (enqueue_shape(ctx, t, s, in, out) != FCL_SUCCESS)
                return -1;
        if (clFinish(queue) != CL_SUCCESS)
            return -1;
        const double ms = (chk_seconds() - start) * 1e3 / reps;
        if (best < 0 || ms < best)
            best = ms;
    }
    return best;
}

/* Runs shape i on ctx: checked once, then timed into *ms. */
static tune_outcome measure_shape(fcl_context *ctx, const tune_device *dev, const shape_data *s,
                                  size_t i, double *ms)
{
    const tune_shape *t = &dev->shapes[i];
    cl_context cl;
    cl_command_queue queue;
    cl_mem in[3] = {NULL, NULL, NULL}, out = NULL;
    cl_int err = CL_SUCCESS;
    tune_outcome o = TUNE_UNUSABLE;
    fcl_context_get_cl(ctx, &cl, NULL, &queue);
    for (int b = 0; b < 3 && err == CL_SUCCESS && s->in[b]; b++)
        in[b] = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, s->in_bytes[b],
                               s->in[b], &err);
    if (err == CL_SUCCESS)
        out = clCreateBuffer(cl, CL_MEM_READ_WRITE, s->out_bytes, NULL, &err);
    if (err != CL_SUCCESS || enqueue_shape(ctx, t, s, in, out) != FCL_SUCCESS)
        goto done;
    o = TUNE_WRONG;
    if (!check_shape(queue, t, s, dev->dtype, out))
        goto done;
    int reps = dev->reps;
    if (reps <= 0) { /* about 50 ms a batch, from one call's time */
        const double once = time_shape(ctx, queue, t, s, in, out, 1);
        reps = once <= 0 ? 1 : once >= 50 ? 1 : once < 0.5 ? 100 : (int)(50 / once);
    }
    *ms = time_shape(ctx, queue, t, s, in, out, reps);
    o = *ms > 0 ? TUNE_PASSED : TUNE_UNUSABLE;
done:
    for (int b = 0; b < 3; b++)
        if (in[b])
            clReleaseMemObject(in[b]);
    if (out)
        clReleaseMemObject(out);
    return o;
}

tune_outcome tune_measure_device(void *user, const char *tuning, int mask, double *ms)
{
    tune_device *dev = user;
    device_state *st = device_state_for(dev);
    if (!st)
        return TUNE_UNUSABLE;
    fcl_context *ctx = NULL;
    const fcl_context_options opts = {.device = dev->device, .cache_dir = dev->cache_dir,
                                      .tuning = tuning};
    if (fcl_context_create(&opts, &ctx) != FCL_SUCCESS)
        return TUNE_UNUSABLE;
    tune_outcome o = TUNE_PASSED;
    for (size_t i = 0; i < dev->n_shapes && o == TUNE_PASSED; i++)
        if (dev->shapes[i].family & mask)
            o = measure_shape(ctx, dev, &st->shapes[i], i, &ms[i]);
    fcl_context_destroy(ctx);
    return o;
}

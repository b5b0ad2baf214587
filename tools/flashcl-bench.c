/* flashcl-bench: device-time throughput of flashcl's softmax and attention, next to a copy
 * kernel measured in the same run.
 *
 * Each case is timed by event profiling, from a marker enqueued just before the call to
 * the call's done event, so multi-kernel plans (SPLIT, split-KV) count whole. The first
 * `warmup` calls are discarded and the median of `reps` is reported. Inputs rotate over
 * enough buffer sets to exceed the device's global-memory cache, so no call finds its
 * input cached by the previous one.
 *
 * The copy reference is the faster of a float4 copy kernel and the driver's own
 * clEnqueueCopyBuffer over the same bytes, so "% of copy" is never flattered.
 *
 * Useful bytes: softmax reads its input once and writes its output once; attention reads
 * q, k, v and writes out once (decode is reported against these bytes). Attention FLOP/s
 * count 4 * head_dim flops per visible (query, key) pair. */
#include "check.h"
#include "flashcl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: flashcl-bench [-d DEVICE] [--preset cpu|h200|smoke] [--json|--csv]\n"
    "                     [--reps N] [--warmup N] [--softmax MxN] [--dtype f32|f16|bf16]\n"
    "                     [--attention B,H,Lq,Lk,D[,c]]\n"
    "  Device-time medians after warm-up, with a copy kernel measured in the same run.\n"
    "  --softmax and --attention (repeatable) replace the preset; c = causal (top-left).\n";

typedef enum { KIND_SOFTMAX, KIND_ATTENTION } case_kind;

typedef struct bench_case {
    case_kind kind;
    size_t rows, cols;                                 /* softmax */
    size_t batch, heads, len_q, len_kv, head_dim;      /* attention */
    int causal;
    fcl_dtype dtype;
} bench_case;

typedef struct bench_result {
    double ms, gbs, copy_pct, tflops;
    double bytes, flops; /* useful bytes; attention flops (0 for softmax) */
    char plan[96];
} bench_result;

#define MAX_CASES 64
#define S(r, c) {KIND_SOFTMAX, r, c, 0, 0, 0, 0, 0, 0, FCL_DTYPE_F32}
#define A(b, h, lq, lk, d, c) {KIND_ATTENTION, 0, 0, b, h, lq, lk, d, c, FCL_DTYPE_F32}

/* ../shared/peers/torch_baseline.py's shapes: M x N = 2^28 softmax, SDPA and decode. */
static const bench_case preset_h200[] = {
    S(2097152, 128), S(262144, 1024), S(65536, 4096), S(16384, 16384), S(4096, 65536),
    S(1024, 262144), S(256, 1048576), S(64, 4194304),
    A(4, 16, 4096, 4096, 64, 0), A(4, 16, 4096, 4096, 64, 1), A(4, 16, 4096, 4096, 128, 0),
    A(4, 16, 4096, 4096, 128, 1), A(1, 16, 16384, 16384, 64, 1), A(8, 32, 1, 8192, 128, 0),
    A(8, 32, 1, 32768, 128, 0)};
/* The peer's CPU softmax shapes (2^26 elements) and small attention, for POCL. */
static const bench_case preset_cpu[] = {
    S(65536, 1024), S(16384, 4096), S(256, 262144), S(16, 4194304), S(4096, 128),
    A(1, 8, 1024, 1024, 64, 0), A(1, 8, 1024, 1024, 64, 1), A(1, 8, 1024, 1024, 128, 0),
    A(4, 8, 1, 8192, 128, 0)};
/* A quick pass over every kind of plan, for CI. */
static const bench_case preset_smoke[] = {S(512, 1000), S(2, 600000), S(64, 8192),
                                          A(1, 2, 128, 128, 64, 1), A(1, 2, 1, 4096, 128, 0)};

typedef struct bench {
    fcl_context *ctx;
    cl_context cl_ctx;
    cl_command_queue queue;
    cl_kernel copy;
    cl_program copy_program;
    fcl_device_info info;
    int reps, warmup;
    double copy_gbs;        /* of the case being measured: the faster copy */
    double copy_kernel_gbs; /* the copy kernel alone */
} bench;

/* One float4 per work-item and no loop: GPUs coalesce it, and CPU drivers such as POCL
 * vectorise straight-line kernels across work-items. */
static const char copy_source[] =
    "__kernel void copy4(__global const float4 *in, __global float4 *out, ulong n) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i < n) out[i] = in[i];\n"
    "}\n";

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double event_ms(cl_event from, cl_event to)
{
    cl_ulong t0 = 0, t1 = 0;
    clGetEventProfilingInfo(from, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
    clGetEventProfilingInfo(to, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    return (double)(t1 - t0) * 1e-6;
}

/* Buffer sets to rotate through so that together they exceed the cache twice over. */
static size_t rotation(const bench *b, size_t bytes_per_set)
{
    cl_ulong cache = 0;
    cl_device_id dev;
    fcl_context_get_cl(b->ctx, NULL, &dev, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, NULL);
    size_t sets = (size_t)(2 * cache / (bytes_per_set ? bytes_per_set : 1)) + 1;
    size_t memory_cap = (size_t)(b->info.global_mem_size / 2 / (bytes_per_set + 1));
    if (sets > memory_cap)
        sets = memory_cap;
    return sets < 1 ? 1 : sets > 16 ? 16 : sets;
}

static cl_mem filled_buffer(bench *b, size_t bytes, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    cl_mem m = clCreateBuffer(b->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, err);
    /* Small random-ish values in every storage type: a float32 pattern whose upper halves
     * are also valid bf16, and zero bytes read as f16 zeros. */
    float pattern = 0.25f;
    if (*err == CL_SUCCESS)
        *err = clEnqueueFillBuffer(b->queue, m, &pattern, sizeof pattern, 0, bytes & ~(size_t)3, 0,
                                   NULL, NULL);
    return m;
}

/* Times `calls` of one enqueueing function over rotating buffer sets; returns the median. */
typedef fcl_status (*enqueue_fn)(bench *b, const bench_case *c, cl_mem *set, cl_event *done);

static double time_calls(bench *b, const bench_case *c, cl_mem *sets, size_t n_sets,
                         size_t per_set, enqueue_fn fn, int *ok)
{
    int total = b->warmup + b->reps;
    double *ms = calloc((size_t)b->reps, sizeof(double));
    double median = 0.0;
    *ok = ms != NULL;
    for (int r = 0; r < total && *ok; r++) {
        cl_event before = NULL, done = NULL;
        *ok = clEnqueueMarkerWithWaitList(b->queue, 0, NULL, &before) == CL_SUCCESS &&
              fn(b, c, sets + (size_t)r % n_sets * per_set, &done) == FCL_SUCCESS &&
              clWaitForEvents(1, &done) == CL_SUCCESS;
        if (*ok && r >= b->warmup)
            ms[r - b->warmup] = event_ms(before, done);
        if (before)
            clReleaseEvent(before);
        if (done)
            clReleaseEvent(done);
    }
    if (*ok) {
        qsort(ms, (size_t)b->reps, sizeof(double), cmp_double);
        median = ms[b->reps / 2];
    }
    free(ms);
    return median;
}

static fcl_status enqueue_copy(bench *b, const bench_case *c, cl_mem *set, cl_event *done)
{
    cl_ulong n4 = c->rows; /* float4 elements, carried in rows */
    size_t local = 256, global = 0;
    clSetKernelArg(b->copy, 0, sizeof(cl_mem), &set[0]);
    clSetKernelArg(b->copy, 1, sizeof(cl_mem), &set[1]);
    clSetKernelArg(b->copy, 2, sizeof n4, &n4);
    global = (n4 + local - 1) / local * local;
    return clEnqueueNDRangeKernel(b->queue, b->copy, 1, NULL, &global, &local, 0, NULL, done) ==
                   CL_SUCCESS
               ? FCL_SUCCESS
               : FCL_ERROR_OPENCL;
}

/* The driver's own copy: a second reference, in case it beats the kernel. */
static fcl_status enqueue_driver_copy(bench *b, const bench_case *c, cl_mem *set, cl_event *done)
{
    return clEnqueueCopyBuffer(b->queue, set[0], set[1], 0, 0, c->rows * 16, 0, NULL, done) ==
                   CL_SUCCESS
               ? FCL_SUCCESS
               : FCL_ERROR_OPENCL;
}

static fcl_status enqueue_softmax(bench *b, const bench_case *c, cl_mem *set, cl_event *done)
{
    fcl_softmax_desc d = {.rows = c->rows, .cols = c->cols, .dtype = c->dtype};
    return fcl_softmax(b->ctx, &d, set[0], NULL, set[1], NULL, 0, NULL, done);
}

static fcl_attention_desc attention_desc(const bench_case *c)
{
    return (fcl_attention_desc){.batch = c->batch, .heads_q = c->heads, .len_q = c->len_q,
                                .len_kv = c->len_kv, .head_dim = c->head_dim,
                                .causal = c->causal ? FCL_CAUSAL_TOP_LEFT : FCL_CAUSAL_NONE,
                                .dtype_q = c->dtype, .dtype_kv = c->dtype, .dtype_o = c->dtype};
}

static fcl_status enqueue_attention(bench *b, const bench_case *c, cl_mem *set, cl_event *done)
{
    fcl_attention_desc d = attention_desc(c);
    return fcl_attention(b->ctx, &d, set[0], set[1], set[2], NULL, set[3], NULL, 0, NULL, done);
}

/* Measures copies of `bytes` (read, and as many written) and returns the GB/s of the
 * faster of the copy kernel and the driver's copy; the kernel's alone in *kernel_gbs. */
static double measure_copy(bench *b, size_t bytes, int *ok, double *kernel_gbs)
{
    bench_case c = {.rows = bytes / 16};
    size_t n_sets = rotation(b, 2 * bytes);
    cl_mem *sets = calloc(2 * n_sets, sizeof(cl_mem));
    cl_int err = CL_SUCCESS;
    double kernel_ms = 0.0, driver_ms = 0.0;
    *ok = sets != NULL;
    for (size_t i = 0; *ok && i < 2 * n_sets; i++)
        sets[i] = filled_buffer(b, c.rows * 16, &err);
    *ok = *ok && err == CL_SUCCESS;
    if (*ok)
        kernel_ms = time_calls(b, &c, sets, n_sets, 2, enqueue_copy, ok);
    if (*ok)
        driver_ms = time_calls(b, &c, sets, n_sets, 2, enqueue_driver_copy, ok);
    for (size_t i = 0; sets && i < 2 * n_sets; i++)
        if (sets[i])
            clReleaseMemObject(sets[i]);
    free(sets);
    if (!*ok || kernel_ms <= 0 || driver_ms <= 0)
        return 0.0;
    double moved = 2.0 * (double)(c.rows * 16);
    *kernel_gbs = moved / (kernel_ms * 1e6);
    return moved / ((kernel_ms < driver_ms ? kernel_ms : driver_ms) * 1e6);
}

/* Visible (query, key) pairs: all of them, or top-left causal ones. */
static double visible_pairs(const bench_case *c)
{
    double lq = (double)c->len_q, lk = (double)c->len_kv;
    if (!c->causal)
        return lq * lk;
    double full = lq < lk ? lq : lk; /* query i sees min(i + 1, len_kv) keys */
    return full * (full + 1) / 2 + (lq - full) * lk;
}

static int run_case(bench *b, const bench_case *c, bench_result *res)
{
    size_t esz = chk_dtype_size(c->dtype), bytes[4] = {0}, n_bufs;
    double useful;
    enqueue_fn fn;
    memset(res, 0, sizeof *res);
    if (c->kind == KIND_SOFTMAX) {
        fcl_softmax_desc d = {.rows = c->rows, .cols = c->cols, .dtype = c->dtype};
        fcl_softmax_algo algo = FCL_SOFTMAX_AUTO;
        if (fcl_softmax_plan(b->ctx, &d, &algo) != FCL_SUCCESS)
            return 0;
        snprintf(res->plan, sizeof res->plan, "%s", fcl_softmax_algo_name(algo));
        bytes[0] = bytes[1] = c->rows * c->cols * esz;
        n_bufs = 2;
        useful = 2.0 * (double)bytes[0];
        fn = enqueue_softmax;
    } else {
        fcl_attention_desc d = attention_desc(c);
        fcl_attention_plan_info p;
        if (fcl_attention_plan(b->ctx, &d, &p) != FCL_SUCCESS)
            return 0;
        snprintf(res->plan, sizeof res->plan, "tile %zux%zu splits %zu", p.block_q, p.block_kv,
                 p.kv_splits);
        size_t q = c->batch * c->heads * c->len_q * c->head_dim * esz;
        size_t kv = c->batch * c->heads * c->len_kv * c->head_dim * esz;
        bytes[0] = bytes[3] = q;
        bytes[1] = bytes[2] = kv;
        n_bufs = 4;
        useful = 2.0 * (double)q + 2.0 * (double)kv;
        fn = enqueue_attention;
    }
    int ok = 1;
    size_t per_set = bytes[0] + bytes[1] + bytes[2] + bytes[3];
    b->copy_gbs = measure_copy(b, (size_t)(useful / 2) & ~(size_t)15, &ok, &b->copy_kernel_gbs);
    size_t n_sets = rotation(b, per_set);
    cl_mem *sets = calloc(n_sets * n_bufs, sizeof(cl_mem));
    cl_int err = CL_SUCCESS;
    ok = ok && sets;
    for (size_t i = 0; ok && i < n_sets * n_bufs; i++)
        sets[i] = filled_buffer(b, bytes[i % n_bufs], &err);
    ok = ok && err == CL_SUCCESS;
    if (ok)
        res->ms = time_calls(b, c, sets, n_sets, n_bufs, fn, &ok);
    for (size_t i = 0; sets && i < n_sets * n_bufs; i++)
        if (sets[i])
            clReleaseMemObject(sets[i]);
    free(sets);
    if (!ok || res->ms <= 0)
        return 0;
    res->bytes = useful;
    res->gbs = useful / (res->ms * 1e6);
    res->copy_pct = b->copy_gbs > 0 ? 100.0 * res->gbs / b->copy_gbs : 0.0;
    if (c->kind == KIND_ATTENTION) {
        res->flops = 4.0 * (double)c->batch * (double)c->heads * visible_pairs(c) *
                     (double)c->head_dim;
        res->tflops = res->flops / (res->ms * 1e9);
    }
    return 1;
}

static void describe(const bench_case *c, char *buf, size_t cap)
{
    if (c->kind == KIND_SOFTMAX)
        snprintf(buf, cap, "softmax %s %zux%zu", chk_dtype_name(c->dtype), c->rows, c->cols);
    else
        snprintf(buf, cap, "attention %s B%zu H%zu Lq%zu Lk%zu D%zu%s", chk_dtype_name(c->dtype),
                 c->batch, c->heads, c->len_q, c->len_kv, c->head_dim, c->causal ? " causal" : "");
}

static fcl_dtype parse_dtype(const char *s)
{
    return strcmp(s, "f16") == 0 ? FCL_DTYPE_F16 : strcmp(s, "bf16") == 0 ? FCL_DTYPE_BF16
                                                                          : FCL_DTYPE_F32;
}

static int setup_copy_kernel(bench *b)
{
    const char *src = copy_source;
    cl_device_id dev;
    cl_int err;
    fcl_context_get_cl(b->ctx, &b->cl_ctx, &dev, &b->queue);
    b->copy_program = clCreateProgramWithSource(b->cl_ctx, 1, &src, NULL, &err);
    if (err == CL_SUCCESS)
        err = clBuildProgram(b->copy_program, 1, &dev, "", NULL, NULL);
    if (err == CL_SUCCESS)
        b->copy = clCreateKernel(b->copy_program, "copy4", &err);
    return err == CL_SUCCESS;
}

int main(int argc, char **argv)
{
    bench b = {.reps = 10, .warmup = 2};
    bench_case cases[MAX_CASES];
    size_t n = 0;
    int json = 0, csv = 0;
    const char *preset = "cpu";
    fcl_context_options opts = {0};
    fcl_dtype dtype = FCL_DTYPE_F32;
    for (int a = 1; a < argc; a++) {
        const char *next = a + 1 < argc ? argv[a + 1] : NULL;
        size_t x[6] = {0};
        if (strcmp(argv[a], "--json") == 0)
            json = 1;
        else if (strcmp(argv[a], "--csv") == 0)
            csv = 1;
        else if (next && strcmp(argv[a], "-d") == 0)
            opts.device = argv[++a];
        else if (next && strcmp(argv[a], "--preset") == 0)
            preset = argv[++a];
        else if (next && strcmp(argv[a], "--reps") == 0)
            b.reps = atoi(argv[++a]);
        else if (next && strcmp(argv[a], "--warmup") == 0)
            b.warmup = atoi(argv[++a]);
        else if (next && strcmp(argv[a], "--dtype") == 0)
            dtype = parse_dtype(argv[++a]);
        else if (next && strcmp(argv[a], "--softmax") == 0 && n < MAX_CASES &&
                 sscanf(argv[++a], "%zux%zu", &x[0], &x[1]) == 2 && x[0] && x[1])
            cases[n++] = (bench_case)S(x[0], x[1]);
        else if (next && strcmp(argv[a], "--attention") == 0 && n < MAX_CASES &&
                 sscanf(argv[++a], "%zu,%zu,%zu,%zu,%zu,%zu", &x[0], &x[1], &x[2], &x[3],
                               &x[4], &x[5]) >= 5 && x[0] && x[1] && x[2] && x[3] && x[4])
            cases[n++] = (bench_case)A(x[0], x[1], x[2], x[3], x[4], strchr(argv[a], 'c') != NULL);
        else {
            int help = strcmp(argv[a], "--help") == 0;
            fputs(usage, help ? stdout : stderr);
            return help ? 0 : 2;
        }
    }
    if (b.reps < 1 || b.warmup < 0) {
        fputs("flashcl-bench: --reps must be at least 1 and --warmup at least 0\n", stderr);
        return 2;
    }
    if (n == 0) {
        const bench_case *p = preset_cpu;
        size_t count = sizeof preset_cpu / sizeof preset_cpu[0];
        if (strcmp(preset, "h200") == 0)
            p = preset_h200, count = sizeof preset_h200 / sizeof preset_h200[0];
        else if (strcmp(preset, "smoke") == 0)
            p = preset_smoke, count = sizeof preset_smoke / sizeof preset_smoke[0];
        else if (strcmp(preset, "cpu") != 0) {
            fprintf(stderr, "flashcl-bench: unknown preset \"%s\"\n%s", preset, usage);
            return 2;
        }
        memcpy(cases, p, count * sizeof *p);
        n = count;
    }
    for (size_t i = 0; i < n; i++)
        cases[i].dtype = dtype;

    double t0 = chk_seconds();
    fcl_status s = fcl_context_create(&opts, &b.ctx);
    double create_ms = (chk_seconds() - t0) * 1e3;
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "flashcl-bench: %s: %s\n", fcl_status_string(s), fcl_context_last_error(NULL));
        return 1;
    }
    fcl_context_device_info(b.ctx, &b.info);
    if (!setup_copy_kernel(&b)) {
        fprintf(stderr, "flashcl-bench: the copy kernel did not build\n");
        fcl_context_destroy(b.ctx);
        return 1;
    }
    const char *origin = b.info.program_from_cache ? "cache" : "compiled";
    if (json)
        printf("{\"device\": \"%s\", \"platform\": \"%s\", \"reps\": %d, "
               "\"context_create_ms\": %.1f, \"kernels\": \"%s\", \"cases\": [\n",
               b.info.name, b.info.platform_name, b.reps, create_ms, origin);
    else if (csv)
        printf("case,plan,ms,gbs,copy_gbs,copy_kernel_gbs,copy_pct,tflops\n");
    else
        printf("flashcl-bench on %s (%s); context created in %.1f ms (kernels %s); median of "
               "%d after %d warm-up\n%-44s %-22s %10s %9s %9s %7s %8s\n",
               b.info.name, b.info.platform_name, create_ms, origin, b.reps, b.warmup, "case",
               "plan", "ms", "GB/s", "copy", "%copy", "TFLOP/s");
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        char name[96];
        bench_result r;
        describe(&cases[i], name, sizeof name);
        fprintf(stderr, "\r[%zu/%zu] %-60s", i + 1, n, name); /* progress */
        fflush(stderr);
        if (!run_case(&b, &cases[i], &r)) {
            fprintf(stderr, "\rflashcl-bench: %s failed: %s\n", name, fcl_context_last_error(b.ctx));
            failures++;
            continue;
        }
        if (json)
            printf("%s  {\"case\": \"%s\", \"plan\": \"%s\", \"ms\": %.4f, \"gbs\": %.2f, "
                   "\"copy_gbs\": %.2f, \"copy_kernel_gbs\": %.2f, \"copy_pct\": %.1f, "
                   "\"tflops\": %.4f, \"bytes\": %.0f, \"flops\": %.0f}",
                   i ? ",\n" : "", name, r.plan, r.ms, r.gbs, b.copy_gbs, b.copy_kernel_gbs,
                   r.copy_pct, r.tflops, r.bytes, r.flops);
        else if (csv)
            printf("%s,%s,%.4f,%.2f,%.2f,%.2f,%.1f,%.4f\n", name, r.plan, r.ms, r.gbs, b.copy_gbs,
                   b.copy_kernel_gbs, r.copy_pct, r.tflops);
        else
            printf("%-44s %-22s %10.3f %9.1f %9.1f %6.1f%% %8.4f\n", name, r.plan, r.ms, r.gbs,
                   b.copy_gbs, r.copy_pct, r.tflops);
        fflush(stdout);
    }
    fprintf(stderr, "\r%-70s\r", "");
    if (json)
        printf("\n]}\n");
    clReleaseKernel(b.copy);
    clReleaseProgram(b.copy_program);
    fcl_context_destroy(b.ctx);
    return failures ? 1 : 0;
}

/* flashcl-bench: device-time throughput of flashcl's softmax and attention, next to a copy
 * kernel measured in the same run.
 *
 * Each case is timed by event profiling, from a marker enqueued just before the call to
 * the call's done event, so multi-kernel plans (SPLIT, split-KV) count whole. Where the
 * driver's timestamps do not keep time (Mesa's llvmpipe counts 1 per event), the host clock
 * around the enqueue and the wait times the calls instead, and the output says so. The first
 * `warmup` calls are discarded and the median of `reps` is reported. Inputs rotate over
 * enough buffer sets to exceed the device's global-memory cache, so no call finds its
 * input cached by the previous one; --hot keeps one set, for a like-for-like comparison
 * with a peer that times the same tensors again (on a CPU whose last-level cache holds them,
 * such a peer reads from the cache).
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
#include <unistd.h>

static const char usage[] =
    "usage: flashcl-bench [-d DEVICE] [--preset cpu|gpu|engine|engine-cpu|smoke] [--json|--csv]\n"
    "                     [--reps N] [--warmup N] [--hot] [--softmax MxN]\n"
    "                     [--dtype f32|f16|bf16|tf32]\n"
    "                     [--attention B,H[/Hkv],Lq,Lk,D[,c][,pN][,sN][,l][,m][,k][,w][,a]]\n"
    "                     [--kv FORMAT[,FORMAT_V]] [--kv-scales token] [--kv-write T,Hkv,D[,pN]]\n"
    "  Device-time medians after warm-up, with a copy kernel measured in the same run,\n"
    "  and the host time inside each call (enq ms: its enqueue, on an idle queue).\n"
    "  --softmax and --attention (repeatable) replace the preset; Hkv: GQA's kv heads,\n"
    "  c = causal (top-left), pN = K and V in a paged cache of N-token pages,\n"
    "  sN = N key splits (kv_splits) instead of the planner's, l = [batch][len][heads][dim]\n"
    "  layout (BLHD, a paged cache's) instead of [batch][heads][len][dim], m = an additive\n"
    "  f16 mask of one row a query shared by every head (llama.cpp's), k = a sink a query\n"
    "  head, w = a window of the 1024 keys up to each query's position, a = ALiBi;\n"
    "  tf32: float32 storage, attention with FCL_PRECISION_TF32.\n"
    "  --kv: every attention case's K (and V) in that format (f32, f16, bf16, q8_0, q4_0,\n"
    "  q4_1, q5_0, q5_1, iq4_nl, fp8_e4m3, fp8_e5m2, int8); GB/s count the bytes read.\n"
    "  --kv-scales token: coded K and V with a float32 scale a token and kv head (LMDeploy's\n"
    "  int8), read as part of the bytes.\n"
    "  --kv-write (repeatable): fcl_kv_write of T new tokens' K and V (--dtype) into a cache\n"
    "  of 4 T tokens in --kv's formats (unscaled), at shuffled slots (pN: N-token pages);\n"
    "  GB/s count the rows read and written.\n"
    "  Inputs rotate over buffer sets that exceed the device's cache twice over; --hot\n"
    "  runs every call on one set, as a peer that times the same tensors again does.\n";

typedef enum { KIND_SOFTMAX, KIND_ATTENTION, KIND_KV_WRITE } case_kind;

/* What an attention case adds to plain attention (bench_case.mods). */
enum { MOD_SOFTCAP = 1, MOD_ALIBI = 2, MOD_WINDOW = 4, MOD_SINKS = 8, MOD_MASK = 16 };
#define BENCH_WINDOW 1024 /* keys a query sees with MOD_WINDOW (Mistral's 4096, scaled) */

typedef struct bench_case {
    case_kind kind;
    fcl_precision precision; /* attention's, for float32 storage */
    size_t rows, cols;                                 /* softmax (heads with mods) */
    size_t batch, heads, len_q, len_kv, head_dim;      /* attention (kv_write: len_kv tokens) */
    int causal;
    fcl_dtype dtype;
    size_t heads_kv, head_dim_v; /* 0: heads, head_dim */
    size_t page_size;            /* paged K/V cache (pages dealt in shuffled order) */
    int varlen;  /* packed sequences of alternately len/2 and 3 len/2 tokens (batch even) */
    int mods;    /* MOD_*; softmax: MOD_ALIBI | MOD_SINKS is ggml's soft_max_ext (below) */
    size_t kv_splits; /* 0: the planner's */
    int blhd; /* q, k, v and out [batch][len][heads][dim] (a paged cache's layout); else BHLD */
    fcl_kv_format format_k, format_v; /* 0: the storage type's */
    int token_scales; /* coded K and V with TOKEN scales (all 0.25) */
} bench_case;

typedef struct bench_result {
    double ms, gbs, copy_pct, tflops;
    double enqueue_ms; /* host time inside the call (the enqueue), on an idle queue */
    double first_ms;   /* host time of the case's plan and its first call to the end: with any
                          kernel build they make (a head-dim bucket's, on its first use) */
    double bytes, flops; /* useful bytes; attention flops (0 for softmax) */
    char plan[96];
} bench_result;

#define MAX_CASES 64
#define S(r, c)                                                                                \
    {KIND_SOFTMAX, FCL_PRECISION_F32, r, c, 0, 0, 0, 0, 0, 0, FCL_DTYPE_F32,                    \
     0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
#define A(b, h, lq, lk, d, c)                                                                  \
    {KIND_ATTENTION, FCL_PRECISION_F32, 0, 0, b, h, lq, lk, d, c, FCL_DTYPE_F32,                \
     0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
/* An inference engine's case: GQA heads, paging, packing, modifiers and a storage type. */
#define E(b, h, hkv, lq, lk, d, dv, c, page, varlen, mods, t)                                 \
    {KIND_ATTENTION, FCL_PRECISION_F32, 0, 0, b, h, lq, lk, d, c, t, hkv, dv, page, varlen, mods,  \
     0, 0, 0, 0, 0}

/* ggml's soft_max_ext on unfused attention scores [heads][rows / heads][cols]: a float16
 * mask of rows / heads rows shared by every head, ALiBi slopes scaling it, and sinks. */
#define SX(r, c, h)                                                                            \
    {KIND_SOFTMAX, FCL_PRECISION_F32, r, c, 0, h, 0, 0, 0, 0, FCL_DTYPE_F32,                   \
     0, 0, 0, 0, MOD_ALIBI | MOD_SINKS, 0, 0, 0, 0, 0}

/* The peer's GPU shapes (torch softmax, SDPA and decode): M x N = 2^28 softmax. */
static const bench_case preset_gpu[] = {
    S(2097152, 128), S(262144, 1024), S(65536, 4096), S(16384, 16384), S(4096, 65536),
    S(1024, 262144), S(256, 1048576), S(64, 4194304),
    A(4, 16, 4096, 4096, 64, 0), A(4, 16, 4096, 4096, 64, 1), A(4, 16, 4096, 4096, 128, 0),
    A(4, 16, 4096, 4096, 128, 1), A(1, 16, 16384, 16384, 64, 1), A(8, 32, 1, 8192, 128, 0),
    A(8, 32, 1, 32768, 128, 0)};
/* Inference engines' cases on a GPU: decode over a contiguous and a paged (16-token pages)
 * cache with GQA 32/8, f16 and f32; prefill with packed sequences of unequal lengths next to
 * the same tokens as equal sequences; the score modifiers one at a time next to plain
 * causal prefill; MLA decode (576 / 512, one kv head). */
#define F16 FCL_DTYPE_F16
#define F32 FCL_DTYPE_F32
static const bench_case preset_engine[] = {
    E(8, 32, 8, 1, 8192, 128, 0, 0, 0, 0, 0, F16), E(8, 32, 8, 1, 8192, 128, 0, 0, 16, 0, 0, F16),
    E(8, 32, 8, 1, 32768, 128, 0, 0, 0, 0, 0, F16), E(8, 32, 8, 1, 32768, 128, 0, 0, 16, 0, 0, F16),
    E(8, 32, 8, 1, 8192, 128, 0, 0, 0, 0, 0, F32), E(8, 32, 8, 1, 8192, 128, 0, 0, 16, 0, 0, F32),
    E(8, 32, 8, 1, 32768, 128, 0, 0, 0, 0, 0, F32), E(8, 32, 8, 1, 32768, 128, 0, 0, 16, 0, 0, F32),
    E(4, 16, 16, 4096, 4096, 128, 0, 1, 0, 0, 0, F16), E(4, 16, 16, 4096, 4096, 128, 0, 1, 0, 1, 0, F16),
    E(4, 16, 4, 4096, 4096, 128, 0, 1, 0, 0, MOD_SOFTCAP, F16),
    E(4, 16, 4, 4096, 4096, 128, 0, 1, 0, 0, MOD_ALIBI, F16),
    E(4, 16, 4, 4096, 4096, 128, 0, 1, 0, 0, MOD_WINDOW, F16),
    E(4, 16, 4, 4096, 4096, 128, 0, 1, 0, 0, MOD_SINKS, F16),
    E(4, 16, 4, 4096, 4096, 128, 0, 1, 0, 0, 0, F16),
    E(8, 16, 1, 1, 8192, 576, 512, 0, 0, 0, 0, F16),
    S(16384, 4096), SX(16384, 4096, 32)};
/* The same kinds at sizes for a CPU. */
static const bench_case preset_engine_cpu[] = {
    E(4, 8, 2, 1, 8192, 128, 0, 0, 0, 0, 0, F32), E(4, 8, 2, 1, 8192, 128, 0, 0, 16, 0, 0, F32),
    E(4, 8, 8, 512, 512, 64, 0, 1, 0, 0, 0, F32), E(4, 8, 8, 512, 512, 64, 0, 1, 0, 1, 0, F32),
    E(1, 8, 2, 1024, 1024, 64, 0, 1, 0, 0, 0, F32),
    E(1, 8, 2, 1024, 1024, 64, 0, 1, 0, 0, MOD_SOFTCAP | MOD_ALIBI | MOD_SINKS, F32),
    E(1, 8, 2, 1024, 1024, 64, 0, 1, 0, 0, MOD_WINDOW, F32), S(4096, 4096),
    SX(4096, 4096, 8)};
#undef F16
#undef F32
/* The peer's CPU softmax shapes (2^26 elements) and small attention, for POCL. */
static const bench_case preset_cpu[] = {
    S(65536, 1024), S(16384, 4096), S(256, 262144), S(16, 4194304), S(4096, 128),
    A(1, 8, 1024, 1024, 64, 0), A(1, 8, 1024, 1024, 64, 1), A(1, 8, 1024, 1024, 128, 0),
    A(4, 8, 1, 8192, 128, 0)};
/* fcl_kv_write of t tokens, hkv heads, head dim d (a cache of 4 t tokens). */
#define W(t, hkv, d)                                                                           \
    {KIND_KV_WRITE, FCL_PRECISION_F32, 0, 0, 0, 0, 0, t, d, 0, FCL_DTYPE_F32,                  \
     hkv, 0, 0, 0, 0, 0, 0, 0, 0, 0}
/* A quick pass over every kind of plan, for CI. */
static const bench_case preset_smoke[] = {S(512, 1000), S(2, 600000), S(64, 8192),
                                          A(1, 2, 128, 128, 64, 1), A(1, 2, 1, 4096, 128, 0),
                                          W(64, 2, 128)};

typedef struct bench {
    fcl_context *ctx;
    cl_context cl_ctx;
    cl_command_queue queue;
    cl_kernel copy;
    cl_program copy_program;
    fcl_device_info info;
    int reps, warmup;
    int hot;                /* one buffer set: inputs stay in the cache between calls */
    double copy_gbs;        /* of the case being measured: the faster copy */
    double copy_kernel_gbs; /* the copy kernel alone */
    fcl_attention_io aux;   /* the case's index, slope and sink buffers (q..lse unused) */
    cl_mem slots;           /* a kv_write case's slots */
    cl_mem softmax_mask;    /* a softmax case's mask */
    int host_clock;         /* profiling timestamps proved unusable: time by the host clock */
    char why[320];          /* why the last case failed */
} bench;

/* One float4 per work-item and no loop: GPUs coalesce it, and CPU drivers such as POCL
 * vectorise straight-line kernels across work-items. */
static const char copy_source[] =
    "__kernel void copy4(__global const float4 *in, __global float4 *out, ulong n) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i < n) out[i] = in[i];\n"
    "}\n";

/* Whether stderr is a terminal: only there a progress line, rewritten in place by \r, is
 * shown (in a log its \r lines would interleave with the table's rows). */
static int progress_shown;

/* What starts a message on stderr: \r over the progress line where one is shown. */
static const char *line_start(void) { return progress_shown ? "\r" : ""; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v's n values (v is sorted in place). */
static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

/* The device time between two events' ends; 0 where the driver cannot say (no profiling
 * information, or timestamps that do not keep time: chk_profiled_ms). */
static double event_ms(cl_event from, cl_event to)
{
    cl_ulong t0 = 0, t1 = 0;
    if (clGetEventProfilingInfo(from, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL) != CL_SUCCESS ||
        clGetEventProfilingInfo(to, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) != CL_SUCCESS)
        return 0.0;
    return chk_profiled_ms(t0, t1);
}

/* Records why the case failed, for the line that reports it. */
static int failed_because(bench *b, const char *what, const char *detail)
{
    snprintf(b->why, sizeof b->why, "%s%s%s", what, detail && *detail ? ": " : "",
             detail ? detail : "");
    return 0;
}

/* Buffer sets to rotate through so that together they exceed the cache twice over. */
static size_t rotation(const bench *b, size_t bytes_per_set)
{
    if (b->hot)
        return 1;
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

/* Times `calls` of one enqueueing function over rotating buffer sets; returns the median.
 * Each call is timed on the device and by the host clock; the first call whose device time
 * is unusable switches the bench to the host clock for good. *enqueue_ms (where not NULL):
 * the median host time inside fn, the enqueue alone, each call finding the queue idle: an
 * engine queues its next work after it, so a call that waits for its own kernels there
 * leaves the device idle meanwhile. *first_ms (where not NULL) grows by the first call's
 * host time to its end. */
typedef fcl_status (*enqueue_fn)(bench *b, const bench_case *c, cl_mem *set, cl_event *done);

static double time_calls(bench *b, const bench_case *c, cl_mem *sets, size_t n_sets,
                         size_t per_set, enqueue_fn fn, double *enqueue_ms, double *first_ms,
                         int *ok)
{
    int total = b->warmup + b->reps;
    double *device_ms = calloc((size_t)b->reps, sizeof(double));
    double *host_ms = calloc((size_t)b->reps, sizeof(double));
    double *inside_ms = calloc((size_t)b->reps, sizeof(double));
    double median = 0.0;
    *ok = device_ms && host_ms && inside_ms ? 1 : failed_because(b, "out of host memory", NULL);
    for (int r = 0; r < total && *ok; r++) {
        cl_event before = NULL, done = NULL;
        const double start = chk_seconds();
        double inside = 0.0;
        if (clEnqueueMarkerWithWaitList(b->queue, 0, NULL, &before) != CL_SUCCESS) {
            *ok = failed_because(b, "clEnqueueMarkerWithWaitList failed", NULL);
        } else {
            const double enter = chk_seconds();
            const fcl_status called = fn(b, c, sets + (size_t)r % n_sets * per_set, &done);
            inside = chk_seconds() - enter;
            if (called != FCL_SUCCESS)
                *ok = failed_because(b, "the call failed", fcl_context_last_error(b->ctx));
            else if (clWaitForEvents(1, &done) != CL_SUCCESS)
                *ok = failed_because(b, "the call's event reported an error", NULL);
        }
        if (*ok && r == 0 && first_ms)
            *first_ms += (chk_seconds() - start) * 1e3;
        if (*ok && r >= b->warmup) {
            host_ms[r - b->warmup] = (chk_seconds() - start) * 1e3;
            inside_ms[r - b->warmup] = inside * 1e3;
            device_ms[r - b->warmup] = event_ms(before, done);
        }
        if (before)
            clReleaseEvent(before);
        if (done)
            clReleaseEvent(done);
    }
    for (int r = 0; *ok && !b->host_clock && r < b->reps; r++)
        if (device_ms[r] <= 0.0) {
            b->host_clock = 1;
            fprintf(stderr, "%sflashcl-bench: the device's profiling timestamps do not keep "
                            "time; timing by the host clock from here on\n", line_start());
        }
    if (*ok) {
        median = median_of(b->host_clock ? host_ms : device_ms, b->reps);
        if (enqueue_ms)
            *enqueue_ms = median_of(inside_ms, b->reps);
    }
    free(device_ms);
    free(host_ms);
    free(inside_ms);
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

static fcl_softmax_desc softmax_desc(const bench_case *c)
{
    fcl_softmax_desc d = {.rows = c->rows, .cols = c->cols, .dtype = c->dtype};
    if (c->mods) {
        d.heads = c->heads, d.head_rows = c->rows / c->heads, d.mask_rows = d.head_rows;
        d.mask_dtype = FCL_DTYPE_F16, d.alibi_from_mask = 1, d.scale = 0.125f;
    }
    return d;
}

static fcl_status enqueue_softmax(bench *b, const bench_case *c, cl_mem *set, cl_event *done)
{
    const fcl_softmax_desc d = softmax_desc(c);
    const fcl_softmax_io io = {.in = set[0], .out = set[1], .mask = b->softmax_mask,
                               .sinks = b->aux.sinks, .alibi_slopes = b->aux.alibi_slopes};
    return fcl_softmax_run(b->ctx, &d, &io, 0, NULL, done);
}

/* Sequence b's length in a case: len, or with varlen alternately len/2 and 3 len/2. */
static size_t seq_len(const bench_case *c, size_t len, size_t b)
{
    return c->varlen ? (b % 2 ? len + len / 2 : len / 2) : len;
}

/* DeepSeek's MLA: V the first head_dim_v dims of K's rows, as llama.cpp keeps them. */
static int is_mla(const bench_case *c) { return c->head_dim_v && c->head_dim_v != c->head_dim; }

/* Whether K's (is_v 0) or V's rows of an attention case carry TOKEN scales. */
static int token_scaled(const bench_case *c, int is_v)
{
    const unsigned f = chk_kv_format(is_v ? c->format_v : c->format_k, c->dtype);
    return c->token_scales && !(chk_formats[f].roles & FCL_ROLE_FLOAT);
}

/* The token slots of an attention case's cache for one kv head: every sequence's (its pages'
 * slots where paged). */
static size_t cache_tokens(const bench_case *c)
{
    const size_t pages = (c->len_kv + c->page_size - 1) / (c->page_size ? c->page_size : 1);
    return c->batch * (c->page_size ? pages * c->page_size : c->len_kv);
}

static fcl_attention_desc attention_desc(const bench_case *c)
{
    fcl_attention_desc d = {.batch = c->batch, .heads_q = c->heads, .heads_kv = c->heads_kv,
                            .len_q = c->varlen ? seq_len(c, c->len_q, 1) : c->len_q,
                            .len_kv = c->varlen ? seq_len(c, c->len_kv, 1) : c->len_kv,
                            .head_dim = c->head_dim, .head_dim_v = c->head_dim_v,
                            .causal = c->causal ? FCL_CAUSAL_BOTTOM_RIGHT : FCL_CAUSAL_NONE,
                            .dtype_q = c->dtype, .dtype_kv = c->dtype, .dtype_o = c->dtype,
                            .precision = c->precision, .kv_splits = c->kv_splits,
                            .layout = c->blhd ? FCL_LAYOUT_BLHD : FCL_LAYOUT_BHLD,
                            .format_k = c->format_k, .format_v = c->format_v};
    if (c->page_size) {
        d.page_size = c->page_size;
        d.block_table_stride = (c->len_kv + c->page_size - 1) / c->page_size;
        d.num_pages = c->batch * d.block_table_stride;
        d.layout = FCL_LAYOUT_BLHD; /* vLLM's [pages][page_size][heads][dim] */
    }
    const size_t k_row = chk_kv_row_units(chk_kv_format(c->format_k, c->dtype), c->head_dim);
    if (is_mla(c)) /* K's contiguous [batch][heads_kv][len_kv][row] strides */
        d.v_view = (fcl_tensor_view){0, c->heads_kv * c->len_kv * k_row, c->len_kv * k_row, k_row};
    d.softcap = c->mods & MOD_SOFTCAP ? 50.0f : 0.0f;
    if (c->mods & MOD_WINDOW)
        d.window = 1, d.window_left = BENCH_WINDOW - 1, d.window_right = FCL_WINDOW_UNBOUNDED;
    if (c->mods & MOD_MASK) /* [batch][len_q][len_kv], head stride 0 */
        d.mask_type = FCL_MASK_ADD_F16, d.mask_stride_q = d.len_kv,
        d.mask_stride_batch = d.len_q * d.len_kv;
    if (token_scaled(c, 0)) /* [page or batch][heads_kv][tokens] */
        d.scale_mode_k = FCL_KV_SCALE_TOKEN;
    if (token_scaled(c, 1))
        d.scale_mode_v = FCL_KV_SCALE_TOKEN;
    return d;
}

static fcl_status enqueue_attention(bench *b, const bench_case *c, cl_mem *set, cl_event *done)
{
    fcl_attention_desc d = attention_desc(c);
    fcl_attention_io io = b->aux;
    io.q = set[0], io.k = set[1], io.v = is_mla(c) ? set[1] : set[2], io.out = set[3];
    return fcl_attention_run(b->ctx, &d, &io, 0, NULL, done);
}

/* A kv_write case's cache: 4 tokens for each written, in pages where paged. */
#define KV_WRITE_ROOM 4
static fcl_kv_write_desc kv_write_desc(const bench_case *c)
{
    const size_t capacity = KV_WRITE_ROOM * c->len_kv;
    fcl_kv_write_desc d = {.tokens = c->len_kv, .heads_kv = c->heads_kv, .head_dim = c->head_dim,
                           .dtype_in = c->dtype, .format_k = c->format_k, .format_v = c->format_v,
                           .page_size = c->page_size ? c->page_size : capacity,
                           .num_pages = c->page_size ? (capacity + c->page_size - 1) / c->page_size : 1,
                           .layout = c->page_size ? FCL_LAYOUT_BLHD : FCL_LAYOUT_BHLD};
    return d;
}

static fcl_status enqueue_kv_write(bench *b, const bench_case *c, cl_mem *set, cl_event *done)
{
    const fcl_kv_write_desc d = kv_write_desc(c);
    const fcl_kv_write_io io = {.k_in = set[0], .v_in = set[1], .slots = b->slots,
                                .k = set[2], .v = set[3]};
    return fcl_kv_write(b->ctx, &d, &io, 0, NULL, done);
}

/* Bytes of one of an attention case's TOKEN scale tensors: a float32 a key and kv head. */
static size_t scale_bytes(const bench_case *c)
{
    return cache_tokens(c) * (c->heads_kv ? c->heads_kv : c->heads) * sizeof(float);
}

/* Bytes of an attention case's mask (MOD_MASK: f16 [batch][len_q][len_kv]; else none). */
static size_t mask_bytes(const bench_case *c)
{
    return c->mods & MOD_MASK ? c->batch * c->len_q * c->len_kv * 2 : 0;
}

static cl_mem aux_buffer(bench *b, const void *data, size_t bytes, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    return clCreateBuffer(b->cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, (void *)data, err);
}

/* The case's per-head slopes and sinks in b->aux. */
static cl_int make_head_buffers(bench *b, const bench_case *c)
{
    float *floats = calloc(c->heads, sizeof(float));
    cl_int err = floats ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    if (err == CL_SUCCESS && (c->mods & MOD_ALIBI)) {
        fcl_alibi_slopes(c->heads, 8.0f, floats);
        b->aux.alibi_slopes = aux_buffer(b, floats, c->heads * sizeof(float), &err);
    }
    if (err == CL_SUCCESS && (c->mods & MOD_SINKS)) {
        for (size_t h = 0; h < c->heads; h++)
            floats[h] = 0.5f;
        b->aux.sinks = aux_buffer(b, floats, c->heads * sizeof(float), &err);
    }
    free(floats);
    return err;
}

/* A softmax case's mask (float16, one head's rows) and head buffers. */
static int make_softmax_aux(bench *b, const bench_case *c)
{
    cl_int err = CL_SUCCESS;
    memset(&b->aux, 0, sizeof b->aux);
    if (c->mods) {
        b->softmax_mask = filled_buffer(b, softmax_desc(c).head_rows * c->cols * 2, &err);
        if (err == CL_SUCCESS)
            err = make_head_buffers(b, c);
    }
    return err == CL_SUCCESS;
}

/* The case's index, slope and sink buffers in b->aux: sequence lengths, a block table of
 * shuffled pages, packed starts. */
static int make_aux(bench *b, const bench_case *c)
{
    const fcl_attention_desc d = attention_desc(c);
    size_t n = c->batch * (d.block_table_stride + 2) + c->heads;
    int32_t *ints = calloc(n, sizeof(int32_t));
    cl_int err = ints ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    memset(&b->aux, 0, sizeof b->aux);
    if (err == CL_SUCCESS && c->page_size) {
        chk_rng rng = chk_rng_seeded(7);
        chk_permutation(ints, d.num_pages, &rng);
        b->aux.block_table = aux_buffer(b, ints, d.num_pages * sizeof(int32_t), &err);
        for (size_t i = 0; i < c->batch; i++)
            ints[i] = (int32_t)c->len_kv;
        b->aux.seqlens_kv = aux_buffer(b, ints, c->batch * sizeof(int32_t), &err);
    }
    if (err == CL_SUCCESS && c->varlen) {
        for (size_t i = 0; i < c->batch; i++)
            ints[i + 1] = ints[i] + (int32_t)seq_len(c, c->len_q, i);
        b->aux.cu_seqlens_q = aux_buffer(b, ints, (c->batch + 1) * sizeof(int32_t), &err);
        b->aux.cu_seqlens_kv = aux_buffer(b, ints, (c->batch + 1) * sizeof(int32_t), &err);
    }
    if (err == CL_SUCCESS && (c->mods & MOD_MASK))
        b->aux.mask = filled_buffer(b, mask_bytes(c), &err);
    if (err == CL_SUCCESS && token_scaled(c, 0))
        b->aux.k_scales = filled_buffer(b, scale_bytes(c), &err);
    if (err == CL_SUCCESS && token_scaled(c, 1))
        b->aux.v_scales = filled_buffer(b, scale_bytes(c), &err);
    if (err == CL_SUCCESS)
        err = make_head_buffers(b, c);
    free(ints);
    return err == CL_SUCCESS;
}

/* A kv_write case's slots: distinct, shuffled over the cache. */
static int make_slots(bench *b, const bench_case *c)
{
    const fcl_kv_write_desc d = kv_write_desc(c);
    const size_t capacity = d.page_size * d.num_pages;
    int32_t *ints = calloc(capacity, sizeof(int32_t));
    cl_int err = ints ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    chk_rng rng = chk_rng_seeded(11);
    if (ints)
        chk_permutation(ints, capacity, &rng);
    b->slots = aux_buffer(b, ints, d.tokens * sizeof(int32_t), &err);
    free(ints);
    return err == CL_SUCCESS;
}

static void release_aux(bench *b)
{
    cl_mem all[] = {b->aux.seqlens_kv, b->aux.cu_seqlens_q, b->aux.cu_seqlens_kv,
                    b->aux.block_table, b->aux.alibi_slopes, b->aux.sinks, b->aux.mask,
                    b->aux.k_scales, b->aux.v_scales, b->softmax_mask, b->slots};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    memset(&b->aux, 0, sizeof b->aux);
    b->softmax_mask = b->slots = NULL;
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
    *ok = *ok && err == CL_SUCCESS ? 1 : failed_because(b, "allocating the copy's buffers failed", NULL);
    if (*ok)
        kernel_ms = time_calls(b, &c, sets, n_sets, 2, enqueue_copy, NULL, NULL, ok);
    if (*ok)
        driver_ms = time_calls(b, &c, sets, n_sets, 2, enqueue_driver_copy, NULL, NULL, ok);
    if (!*ok && err == CL_SUCCESS && sets) { /* time_calls said why: name the copy */
        char inner[256];
        snprintf(inner, sizeof inner, "%.255s", b->why);
        failed_because(b, "the reference copy", inner);
    }
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

/* Visible (query, key) pairs of one sequence: causal ones bottom-right aligned, within the
 * window where the case has one. */
static double sequence_pairs(const bench_case *c, size_t lq, size_t lk)
{
    double pairs = 0.0;
    for (size_t i = 0; i < lq; i++) {
        double pos = (double)i + (double)lk - (double)lq, hi = c->causal ? pos : (double)lk - 1;
        double lo = c->mods & MOD_WINDOW ? pos - (BENCH_WINDOW - 1) : 0.0;
        hi = hi > (double)lk - 1 ? (double)lk - 1 : hi;
        lo = lo < 0.0 ? 0.0 : lo;
        pairs += hi >= lo ? hi - lo + 1 : 0.0;
    }
    return pairs;
}

/* Keys of a sequence some query sees: with the window, from the first query's first. */
static size_t keys_read(const bench_case *c)
{
    const double first = (double)c->len_kv - (double)c->len_q - (BENCH_WINDOW - 1);
    return c->mods & MOD_WINDOW && first > 0.0 ? c->len_kv - (size_t)first : c->len_kv;
}

static double visible_pairs(const bench_case *c)
{
    double pairs = 0.0;
    for (size_t b = 0; b < c->batch; b++)
        pairs += sequence_pairs(c, seq_len(c, c->len_q, b), seq_len(c, c->len_kv, b));
    return pairs;
}

static int run_case(bench *b, const bench_case *c, bench_result *res)
{
    size_t esz = chk_dtype_size(c->dtype), bytes[4] = {0}, n_bufs;
    double useful;
    enqueue_fn fn;
    memset(res, 0, sizeof *res);
    if (c->kind == KIND_SOFTMAX) {
        const fcl_softmax_desc d = softmax_desc(c);
        fcl_softmax_algo algo = FCL_SOFTMAX_AUTO;
        if (fcl_softmax_plan(b->ctx, &d, &algo) != FCL_SUCCESS)
            return failed_because(b, "no plan", fcl_context_last_error(b->ctx));
        if (!make_softmax_aux(b, c)) {
            release_aux(b);
            return failed_because(b, "allocating the mask, sink and slope buffers failed", NULL);
        }
        snprintf(res->plan, sizeof res->plan, "%s", fcl_softmax_algo_name(algo));
        bytes[0] = bytes[1] = c->rows * c->cols * esz;
        n_bufs = 2;
        useful = 2.0 * (double)bytes[0];
        fn = enqueue_softmax;
    } else if (c->kind == KIND_KV_WRITE) {
        const fcl_kv_write_desc d = kv_write_desc(c);
        const unsigned fk = chk_kv_format(c->format_k, c->dtype), fv = chk_kv_format(c->format_v, c->dtype);
        const size_t k_row = chk_kv_row_bytes(fk, c->head_dim), v_row = chk_kv_row_bytes(fv, c->head_dim);
        const size_t rows = d.tokens * d.heads_kv, capacity = d.page_size * d.num_pages;
        bytes[0] = bytes[1] = rows * c->head_dim * esz;
        bytes[2] = capacity * d.heads_kv * k_row;
        bytes[3] = capacity * d.heads_kv * v_row;
        n_bufs = 4;
        useful = (double)(bytes[0] + bytes[1]) + (double)(rows * (k_row + v_row));
        snprintf(res->plan, sizeof res->plan, "kv_write");
        fn = enqueue_kv_write;
        if (!make_slots(b, c)) {
            release_aux(b);
            return failed_because(b, "allocating the slots failed", NULL);
        }
    } else {
        fcl_attention_desc d = attention_desc(c);
        fcl_attention_plan_info p;
        const double planning = chk_seconds();
        if (fcl_attention_plan(b->ctx, &d, &p) != FCL_SUCCESS)
            return failed_because(b, "no plan", fcl_context_last_error(b->ctx));
        res->first_ms = (chk_seconds() - planning) * 1e3;
        snprintf(res->plan, sizeof res->plan, "%s %zux%zu splits %zu",
                 fcl_attention_path_name(p.path), p.block_q, p.block_kv, p.kv_splits);
        /* Every sequence's tokens (len on average with varlen), the cache's pages. */
        size_t hkv = c->heads_kv ? c->heads_kv : c->heads, dv = c->head_dim_v ? c->head_dim_v : c->head_dim;
        const size_t kv_tokens = cache_tokens(c);
        /* a K and a V row's bytes in their formats */
        const unsigned fk = chk_kv_format(c->format_k, c->dtype), fv = chk_kv_format(c->format_v, c->dtype);
        const size_t k_row = chk_kv_row_bytes(fk, c->head_dim), v_row = chk_kv_row_bytes(fv, dv);
        bytes[0] = c->batch * c->len_q * c->heads * c->head_dim * esz;
        bytes[3] = c->batch * c->len_q * c->heads * dv * esz;
        bytes[1] = kv_tokens * hkv * k_row;
        bytes[2] = kv_tokens * hkv * v_row;
        n_bufs = 4;
        const size_t keys = keys_read(c);
        useful = (double)(bytes[0] + bytes[3]) + (double)(c->batch * keys * hkv * (k_row + v_row));
        useful += (double)mask_bytes(c);
        useful += (double)((token_scaled(c, 0) + token_scaled(c, 1)) * c->batch * keys * hkv *
                           sizeof(float)); /* the read keys' scales */
        if (is_mla(c)) { /* V is a view of K: read once, no buffer of its own */
            useful -= (double)(c->batch * keys * hkv * v_row);
            bytes[2] = 16;
        }
        fn = enqueue_attention;
        if (!make_aux(b, c)) {
            release_aux(b);
            return failed_because(b, "allocating the index, sink and slope buffers failed", NULL);
        }
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
    if (ok && err != CL_SUCCESS) {
        char detail[64];
        snprintf(detail, sizeof detail, "OpenCL error %d", (int)err);
        ok = failed_because(b, "allocating the input and output buffers failed", detail);
    }
    if (ok)
        res->ms = time_calls(b, c, sets, n_sets, n_bufs, fn, &res->enqueue_ms, &res->first_ms,
                             &ok);
    for (size_t i = 0; sets && i < n_sets * n_bufs; i++)
        if (sets[i])
            clReleaseMemObject(sets[i]);
    free(sets);
    release_aux(b);
    if (ok && res->ms <= 0)
        ok = failed_because(b, "the host clock did not advance over the call", NULL);
    if (!ok)
        return 0;
    res->bytes = useful;
    res->gbs = useful / (res->ms * 1e6);
    res->copy_pct = b->copy_gbs > 0 ? 100.0 * res->gbs / b->copy_gbs : 0.0;
    if (c->kind == KIND_ATTENTION) {
        res->flops = 2.0 * (double)c->heads * visible_pairs(c) *
                     (double)(c->head_dim + (c->head_dim_v ? c->head_dim_v : c->head_dim));
        res->tflops = res->flops / (res->ms * 1e9);
    }
    return 1;
}

static void describe(const bench_case *c, char *buf, size_t cap)
{
    if (c->kind == KIND_KV_WRITE)
        snprintf(buf, cap, "kv_write %s T%zu H%zu D%zu%s%.0zu", chk_dtype_name(c->dtype),
                 c->len_kv, c->heads_kv, c->head_dim, c->page_size ? " paged" : "", c->page_size);
    else if (c->kind == KIND_SOFTMAX)
        snprintf(buf, cap, "softmax %s %zux%zu%s", chk_dtype_name(c->dtype), c->rows, c->cols,
                 c->mods ? " f16 mask/head alibi sinks" : "");
    else
        snprintf(buf, cap, "attention %s B%zu H%zu%s%.0zu Lq%zu Lk%zu D%zu%s%.0zu%s%s%.0zu%s%s%s%s%s%s%s",
                 c->precision == FCL_PRECISION_TF32 ? "tf32" : chk_dtype_name(c->dtype), c->batch,
                 c->heads, c->heads_kv ? "/" : "", c->heads_kv,
                 c->len_q, c->len_kv, c->head_dim, c->head_dim_v ? "/" : "", c->head_dim_v,
                 c->causal ? " causal" : "", c->page_size ? " paged" : "", c->page_size,
                 c->blhd && !c->page_size ? " blhd" : "",
                 c->varlen ? " varlen" : "", c->mods & MOD_SOFTCAP ? " softcap" : "",
                 c->mods & MOD_ALIBI ? " alibi" : "", c->mods & MOD_WINDOW ? " window1024" : "",
                 c->mods & MOD_SINKS ? " sinks" : "", c->mods & MOD_MASK ? " f16 mask" : "");
    if (c->kind != KIND_SOFTMAX && (c->format_k || c->format_v)) {
        const size_t len = strlen(buf);
        snprintf(buf + len, cap - len, " kv %s/%s%s", chk_formats[chk_kv_format(c->format_k, c->dtype)].name,
                 chk_formats[chk_kv_format(c->format_v, c->dtype)].name,
                 token_scaled(c, 0) || token_scaled(c, 1) ? " token scales" : "");
    }
}

/* A K/V format by name (kv_formats.h's), 0 where none is. */
static fcl_kv_format parse_format(const char *s, size_t len)
{
    for (unsigned f = 1; f <= FCL_KV_FORMAT_MAX; f++)
        if (strlen(chk_formats[f].name) == len && strncmp(s, chk_formats[f].name, len) == 0)
            return (fcl_kv_format)f;
    return FCL_KV_FORMAT_DTYPE;
}

static fcl_dtype parse_dtype(const char *s)
{
    return strcmp(s, "f16") == 0 ? FCL_DTYPE_F16 : strcmp(s, "bf16") == 0 ? FCL_DTYPE_BF16
                                                                          : FCL_DTYPE_F32;
}

/* Whether the option text at p is the single letter `letter`: ",x" then ',' or the end. */
static int is_letter_option(const char *p, char letter)
{
    return p[0] == ',' && p[1] == letter && (p[2] == ',' || !p[2]);
}

/* An --attention case, B,H[/Hkv],Lq,Lk,D then ,c, ,pN, ,sN, ,l, ,m, ,k, ,w and ,a in any
 * order; 0 where malformed. */
static int parse_attention(const char *arg, bench_case *c)
{
    static const struct {
        char letter;
        int mod;
    } mod_letters[] = {{'m', MOD_MASK}, {'k', MOD_SINKS}, {'a', MOD_ALIBI}, {'w', MOD_WINDOW}};
    size_t b, h, hkv = 0, lq, lk, d;
    int used = 0;
    if (sscanf(arg, "%zu,%zu/%zu,%zu,%zu,%zu%n", &b, &h, &hkv, &lq, &lk, &d, &used) != 6 &&
        sscanf(arg, "%zu,%zu,%zu,%zu,%zu%n", &b, &h, &lq, &lk, &d, &used) != 5)
        return 0;
    if (!b || !h || !lq || !lk || !d || (hkv && h % hkv))
        return 0;
    *c = (bench_case)A(b, h, lq, lk, d, 0);
    c->heads_kv = hkv;
    for (const char *p = arg + used; *p;) {
        int n = 0, mod = 0;
        for (size_t i = 0; i < sizeof mod_letters / sizeof mod_letters[0]; i++)
            if (is_letter_option(p, mod_letters[i].letter))
                mod = mod_letters[i].mod;
        if (mod)
            c->mods |= mod, p += 2;
        else if (is_letter_option(p, 'c'))
            c->causal = 1, p += 2;
        else if (is_letter_option(p, 'l'))
            c->blhd = 1, p += 2;
        else if ((sscanf(p, ",p%zu%n", &c->page_size, &n) == 1 && c->page_size) ||
                 (sscanf(p, ",s%zu%n", &c->kv_splits, &n) == 1 && c->kv_splits))
            p += n;
        else
            return 0;
    }
    return 1;
}

/* A --kv-write case, T,Hkv,D then ,pN; 0 where malformed. */
static int parse_kv_write(const char *arg, bench_case *c)
{
    size_t t, hkv, d, page = 0;
    int used = 0, n = 0;
    if (sscanf(arg, "%zu,%zu,%zu%n", &t, &hkv, &d, &used) != 3 || !t || !hkv || !d)
        return 0;
    if (arg[used] && (sscanf(arg + used, ",p%zu%n", &page, &n) != 1 || !page || arg[used + n]))
        return 0;
    *c = (bench_case)W(t, hkv, d);
    c->page_size = page;
    return 1;
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
    progress_shown = isatty(STDERR_FILENO);
    bench_case cases[MAX_CASES];
    size_t n = 0;
    int json = 0, csv = 0;
    const char *preset = "cpu";
    fcl_context_options opts = {0};
    fcl_dtype dtype = FCL_DTYPE_F32;
    int dtype_given = 0, tf32 = 0;
    fcl_kv_format kv_k = FCL_KV_FORMAT_DTYPE, kv_v = FCL_KV_FORMAT_DTYPE;
    int token_scales = 0;
    for (int a = 1; a < argc; a++) {
        const char *next = a + 1 < argc ? argv[a + 1] : NULL;
        size_t x[6] = {0};
        if (strcmp(argv[a], "--json") == 0)
            json = 1;
        else if (strcmp(argv[a], "--csv") == 0)
            csv = 1;
        else if (strcmp(argv[a], "--hot") == 0)
            b.hot = 1;
        else if (next && strcmp(argv[a], "-d") == 0)
            opts.device = argv[++a];
        else if (next && strcmp(argv[a], "--preset") == 0)
            preset = argv[++a];
        else if (next && strcmp(argv[a], "--reps") == 0)
            b.reps = atoi(argv[++a]);
        else if (next && strcmp(argv[a], "--warmup") == 0)
            b.warmup = atoi(argv[++a]);
        else if (next && strcmp(argv[a], "--dtype") == 0)
            tf32 = strcmp(argv[++a], "tf32") == 0, dtype = parse_dtype(argv[a]), dtype_given = 1;
        else if (next && strcmp(argv[a], "--softmax") == 0 && n < MAX_CASES &&
                 sscanf(argv[++a], "%zux%zu", &x[0], &x[1]) == 2 && x[0] && x[1])
            cases[n++] = (bench_case)S(x[0], x[1]);
        else if (next && n < MAX_CASES &&
                 ((strcmp(argv[a], "--attention") == 0 && parse_attention(next, &cases[n])) ||
                  (strcmp(argv[a], "--kv-write") == 0 && parse_kv_write(next, &cases[n]))))
            n++, a++;
        else if (next && strcmp(argv[a], "--kv-scales") == 0 && strcmp(next, "token") == 0)
            token_scales = 1, a++;
        else if (next && strcmp(argv[a], "--kv") == 0) {
            const char *arg = argv[++a], *comma = strchr(arg, ',');
            kv_k = parse_format(arg, comma ? (size_t)(comma - arg) : strlen(arg));
            kv_v = comma ? parse_format(comma + 1, strlen(comma + 1)) : kv_k;
            if (!kv_k || !kv_v) {
                fprintf(stderr, "flashcl-bench: --kv %s: not a format (or two, comma-separated)\n", arg);
                return 2;
            }
        }
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
        if (strcmp(preset, "gpu") == 0 || strcmp(preset, "h200") == 0) /* h200: its old name */
            p = preset_gpu, count = sizeof preset_gpu / sizeof preset_gpu[0];
        else if (strcmp(preset, "engine") == 0)
            p = preset_engine, count = sizeof preset_engine / sizeof preset_engine[0];
        else if (strcmp(preset, "engine-cpu") == 0)
            p = preset_engine_cpu, count = sizeof preset_engine_cpu / sizeof preset_engine_cpu[0];
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
        if (cases[i].kind == KIND_ATTENTION)
            cases[i].format_k = kv_k, cases[i].format_v = kv_v, cases[i].token_scales = token_scales;
        else if (cases[i].kind == KIND_KV_WRITE)
            cases[i].format_k = kv_k, cases[i].format_v = kv_v;
    for (size_t i = 0; dtype_given && i < n; i++) {
        cases[i].dtype = dtype;
        cases[i].precision = tf32 ? FCL_PRECISION_TF32 : FCL_PRECISION_F32;
    }

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
               "\"context_create_ms\": %.1f, \"kernels\": \"%s\", \"inputs\": \"%s\", "
               "\"cases\": [\n",
               b.info.name, b.info.platform_name, b.reps, create_ms, origin,
               b.hot ? "hot" : "rotated");
    else if (csv)
        printf("case,plan,ms,gbs,copy_gbs,copy_kernel_gbs,copy_pct,tflops,enqueue_ms\n");
    else
        printf("flashcl-bench on %s (%s); context created in %.1f ms (kernels %s); median of "
               "%d after %d warm-up%s\n%-44s %-22s %10s %9s %9s %7s %8s %8s\n",
               b.info.name, b.info.platform_name, create_ms, origin, b.reps, b.warmup,
               b.hot ? "; inputs hot" : "", "case",
               "plan", "ms", "GB/s", "copy", "%copy", "TFLOP/s", "enq ms");
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        char name[128]; /* (the longest description, every option set, fits) */
        bench_result r;
        describe(&cases[i], name, sizeof name);
        if (progress_shown) {
            fprintf(stderr, "\r[%zu/%zu] %-60s", i + 1, n, name);
            fflush(stderr);
        }
        if (!run_case(&b, &cases[i], &r)) {
            fprintf(stderr, "%sflashcl-bench: %s failed: %s\n", line_start(), name, b.why);
            failures++;
            continue;
        }
        if (json)
            printf("%s  {\"case\": \"%s\", \"plan\": \"%s\", \"ms\": %.4f, \"gbs\": %.2f, "
                   "\"copy_gbs\": %.2f, \"copy_kernel_gbs\": %.2f, \"copy_pct\": %.1f, "
                   "\"tflops\": %.4f, \"bytes\": %.0f, \"flops\": %.0f, \"clock\": \"%s\", "
                   "\"enqueue_ms\": %.4f, \"first_call_ms\": %.1f}",
                   i ? ",\n" : "", name, r.plan, r.ms, r.gbs, b.copy_gbs, b.copy_kernel_gbs,
                   r.copy_pct, r.tflops, r.bytes, r.flops, b.host_clock ? "host" : "device",
                   r.enqueue_ms, r.first_ms);
        else if (csv)
            printf("%s,%s,%.4f,%.2f,%.2f,%.2f,%.1f,%.4f,%.4f\n", name, r.plan, r.ms, r.gbs,
                   b.copy_gbs, b.copy_kernel_gbs, r.copy_pct, r.tflops, r.enqueue_ms);
        else
            printf("%-44s %-22s %10.3f %9.1f %9.1f %6.1f%% %8.4f %8.4f\n", name, r.plan, r.ms,
                   r.gbs, b.copy_gbs, r.copy_pct, r.tflops, r.enqueue_ms);
        fflush(stdout);
    }
    if (progress_shown)
        fprintf(stderr, "\r%-70s\r", "");
    if (json)
        printf("\n]}\n");
    clReleaseKernel(b.copy);
    clReleaseProgram(b.copy_program);
    fcl_context_destroy(b.ctx);
    return failures ? 1 : 0;
}

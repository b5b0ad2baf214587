/* flashcl-demo: the main job in one command. Runs softmax (through the device-buffer API)
 * and attention (through the host API) on the default device, POCL when there is no GPU,
 * checks every result against a float64 CPU reference, and prints device, plan, error and
 * time. Exit status 0 only when every check passes. */
#include "check.h"
#include "flashcl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] = "usage: flashcl-demo [-d DEVICE] [--seed N]\n";

typedef struct demo_case {
    size_t rows, cols;
    fcl_dtype dtype;
    int log;
} demo_case;

static const demo_case cases[] = {
    {4096, 1000, FCL_DTYPE_F32, 0}, {256, 4096, FCL_DTYPE_F16, 0}, {256, 4096, FCL_DTYPE_BF16, 1},
    {8, 200001, FCL_DTYPE_F32, 0},  {2, 643251, FCL_DTYPE_F32, 1},
};

/* Runs one case; returns 1 when it matches the reference. */
static int run_case(fcl_context *ctx, cl_context cl_ctx, cl_command_queue queue,
                    const demo_case *c, chk_rng *rng)
{
    fcl_softmax_desc d = {.rows = c->rows, .cols = c->cols, .dtype = c->dtype, .log = c->log};
    size_t n = c->rows * c->cols, bytes = n * chk_dtype_size(c->dtype);
    void *x = malloc(bytes), *y = malloc(bytes);
    float *lse = malloc(c->rows * sizeof(float));
    double *ref = malloc(n * sizeof(double)), *ref_lse = malloc(c->rows * sizeof(double));
    cl_mem in = NULL, out = NULL, lse_buf = NULL;
    cl_event done = NULL;
    int ok = 0;
    cl_int err = CL_SUCCESS;
    if (!x || !y || !lse || !ref || !ref_lse) {
        fprintf(stderr, "flashcl-demo: out of host memory\n");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        chk_store(x, c->dtype, i, (float)(3.0 * chk_normal(rng)));

    in = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, x, &err);
    if (err == CL_SUCCESS)
        out = clCreateBuffer(cl_ctx, CL_MEM_WRITE_ONLY, bytes, NULL, &err);
    if (err == CL_SUCCESS)
        lse_buf = clCreateBuffer(cl_ctx, CL_MEM_WRITE_ONLY, c->rows * sizeof(float), NULL, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "flashcl-demo: clCreateBuffer failed (%d)\n", (int)err);
        goto done;
    }
    fcl_softmax_algo algo = FCL_SOFTMAX_AUTO;
    fcl_status s = fcl_softmax_plan(ctx, &d, &algo);
    const double start = chk_seconds();
    if (s == FCL_SUCCESS)
        s = fcl_softmax(ctx, &d, in, NULL, out, lse_buf, 0, NULL, &done);
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "flashcl-demo: %s: %s\n", fcl_status_string(s), fcl_context_last_error(ctx));
        goto done;
    }
    err = clWaitForEvents(1, &done);
    const double host_ms = (chk_seconds() - start) * 1e3;
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, out, CL_TRUE, 0, bytes, y, 1, &done, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, lse_buf, CL_TRUE, 0, c->rows * sizeof(float), lse, 0,
                                  NULL, NULL);
    /* The last kernel's device time, or the host's around the call where the driver's
     * timestamps do not keep time (chk_profiled_ms). */
    cl_ulong t0 = 0, t1 = 0;
    clGetEventProfilingInfo(done, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    clGetEventProfilingInfo(done, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    const double device_ms = chk_profiled_ms(t0, t1);
    const int host_clock = device_ms == 0.0;
    const double ms = host_clock ? host_ms : device_ms;

    chk_softmax_reference(&d, &(fcl_softmax_host_io){.in = x}, ref, ref_lse);
    chk_report out_rep = {0}, lse_rep = {0};
    int out_ok = err == CL_SUCCESS && chk_compare(y, c->dtype, c->rows, c->cols, c->cols, ref,
                                                  chk_softmax_tolerance(c->dtype), &out_rep);
    int lse_ok = err == CL_SUCCESS && chk_compare_lse(lse, ref_lse, c->rows, &lse_rep);
    ok = out_ok && lse_ok;
    printf("softmax%s %-4s %6zu x %-7zu %-6s %9.3f ms%s  max|err| %.2e  NMSE %.1e  %s\n",
           c->log ? "(log)" : "     ", chk_dtype_name(c->dtype), c->rows, c->cols,
           fcl_softmax_algo_name(algo), ms, host_clock ? " (host clock)" : "",
           out_rep.max_abs_err, out_rep.nmse, ok ? "ok" : "MISMATCH");
    if (!out_ok && err == CL_SUCCESS && out_rep.first_bad != (size_t)-1)
        printf("  first mismatch at %zu: got %.9g, want %.9g\n", out_rep.first_bad, out_rep.got,
               out_rep.want);
    if (!lse_ok && err == CL_SUCCESS)
        printf("  lse mismatch at row %zu: got %.9g, want %.9g\n", lse_rep.first_bad, lse_rep.got,
               lse_rep.want);
done:
    if (done)
        clReleaseEvent(done);
    if (in)
        clReleaseMemObject(in);
    if (out)
        clReleaseMemObject(out);
    if (lse_buf)
        clReleaseMemObject(lse_buf);
    free(x);
    free(y);
    free(lse);
    free(ref);
    free(ref_lse);
    return ok;
}

typedef struct attention_demo {
    size_t batch, heads_q, heads_kv, len_q, len_kv, head_dim;
    fcl_causal causal;
    fcl_dtype dtype_kv, dtype_o;
    fcl_layout layout;
} attention_demo;

static const attention_demo attention_cases[] = {
    {2, 8, 2, 512, 512, 64, FCL_CAUSAL_TOP_LEFT, FCL_DTYPE_F32, FCL_DTYPE_F32, FCL_LAYOUT_BHLD},
    {1, 4, 4, 300, 700, 128, FCL_CAUSAL_NONE, FCL_DTYPE_F16, FCL_DTYPE_BF16, FCL_LAYOUT_BLHD},
    {4, 8, 1, 1, 8192, 128, FCL_CAUSAL_NONE, FCL_DTYPE_F16, FCL_DTYPE_F32, FCL_LAYOUT_BHLD},
};

/* Runs one attention case through the host API; returns 1 when it matches the reference. */
static int run_attention(fcl_context *ctx, const attention_demo *c, chk_rng *rng)
{
    fcl_attention_desc d = {.batch = c->batch, .heads_q = c->heads_q, .heads_kv = c->heads_kv,
                            .len_q = c->len_q, .len_kv = c->len_kv, .head_dim = c->head_dim,
                            .causal = c->causal, .layout = c->layout, .dtype_kv = c->dtype_kv,
                            .dtype_o = c->dtype_o};
    fcl_attention_desc full = chk_attention_defaults(d);
    size_t rows = c->batch * c->heads_q * c->len_q, dim = c->head_dim;
    size_t kv_n = c->batch * c->heads_kv * c->len_kv * dim;
    void *q = chk_random_tensor(rows * dim, FCL_DTYPE_F32, rng);
    void *k = chk_random_tensor(kv_n, c->dtype_kv, rng), *v = chk_random_tensor(kv_n, c->dtype_kv, rng);
    void *out = malloc(rows * dim * chk_dtype_size(c->dtype_o));
    float *lse = malloc(rows * sizeof(float));
    double *got = malloc(rows * dim * sizeof(double)), *want = malloc(rows * dim * sizeof(double));
    double *got_lse = malloc(rows * sizeof(double)), *want_lse = malloc(rows * sizeof(double));
    int ok = 0;
    if (!q || !k || !v || !out || !lse || !got || !want || !got_lse || !want_lse) {
        fprintf(stderr, "flashcl-demo: out of host memory\n");
        goto done;
    }
    fcl_attention_plan_info plan = {0};
    double t0 = chk_seconds();
    fcl_status s = fcl_attention_plan(ctx, &d, &plan);
    if (s == FCL_SUCCESS)
        s = fcl_attention_host(ctx, &d, q, k, v, NULL, out, lse);
    double seconds = chk_seconds() - t0;
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "flashcl-demo: %s: %s\n", fcl_status_string(s), fcl_context_last_error(ctx));
        goto done;
    }
    for (size_t row = 0; row < rows; row++) {
        size_t b = row / (c->heads_q * c->len_q), h = (row / c->len_q) % c->heads_q;
        size_t i = row % c->len_q;
        size_t at = chk_attention_offset(c->layout, c->heads_q, c->len_q, dim, b, h, i);
        chk_attention_row(&full, q, k, v, NULL, b, h, i, want + row * dim, &want_lse[row]);
        for (size_t e = 0; e < dim; e++)
            got[row * dim + e] = chk_load(out, c->dtype_o, at + e);
        got_lse[row] = lse[row];
    }
    chk_report rep, lse_rep;
    int out_ok = chk_compare_values(got, want, rows * dim, chk_attention_tolerance(&full), &rep);
    ok = out_ok && chk_compare_lse(lse, want_lse, rows, &lse_rep);
    double flops = 4.0 * (double)c->batch * (double)c->heads_q * (double)c->len_q *
                   (double)c->len_kv * (double)dim *
                   (c->causal ? 0.5 : 1.0);
    printf("attention %s kv %-4s out %-4s B%zu H%zu/%zu Lq %-5zu Lkv %-5zu D%zu %-6s %-6s %zux%zu "
           "splits %-2zu %8.3f ms %6.2f GFLOP/s  max|err| %.2e  NMSE %.1e  %s\n",
           c->layout == FCL_LAYOUT_BHLD ? "BHLD" : "BLHD", chk_dtype_name(c->dtype_kv),
           chk_dtype_name(c->dtype_o), c->batch, c->heads_q, c->heads_kv, c->len_q, c->len_kv,
           dim, c->causal ? "causal" : "", fcl_attention_path_name(plan.path), plan.block_q,
           plan.block_kv, plan.kv_splits,
           seconds * 1e3, flops / seconds * 1e-9, rep.max_abs_err, rep.nmse, ok ? "ok" : "MISMATCH");
    if (!out_ok && rep.first_bad != (size_t)-1)
        printf("  first mismatch at %zu: got %.9g, want %.9g\n", rep.first_bad, rep.got, rep.want);
done:
    free(q);
    free(k);
    free(v);
    free(out);
    free(lse);
    free(got);
    free(want);
    free(got_lse);
    free(want_lse);
    return ok;
}

int main(int argc, char **argv)
{
    fcl_context_options opts = {0};
    unsigned long long seed = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-d") == 0 && a + 1 < argc)
            opts.device = argv[++a];
        else if (strcmp(argv[a], "--seed") == 0 && a + 1 < argc)
            seed = strtoull(argv[++a], NULL, 10);
        else {
            fputs(usage, strcmp(argv[a], "--help") == 0 ? stdout : stderr);
            return strcmp(argv[a], "--help") == 0 ? 0 : 2;
        }
    }
    fcl_context *ctx = NULL;
    fcl_status s = fcl_context_create(&opts, &ctx);
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "flashcl-demo: %s: %s\n", fcl_status_string(s), fcl_context_last_error(NULL));
        return 1;
    }
    fcl_device_info info;
    fcl_context_device_info(ctx, &info);
    printf("flashcl %s on %s (%s), kernels %s\n", fcl_version_string(), info.name,
           info.platform_name, info.program_from_cache ? "from the program cache" : "compiled");

    /* The device-buffer API, as an embedding application would use it. */
    cl_context cl_ctx;
    cl_command_queue queue;
    fcl_context_get_cl(ctx, &cl_ctx, NULL, &queue);
    chk_rng rng = chk_rng_seeded(seed);
    printf("seed %llu (--seed reproduces); %s\n", (unsigned long long)rng.state, info.tuning);
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        failures += !run_case(ctx, cl_ctx, queue, &cases[i], &rng);
    printf("attention times are host calls (upload, run, read back), wall clock\n");
    for (size_t i = 0; i < sizeof attention_cases / sizeof attention_cases[0]; i++)
        failures += !run_attention(ctx, &attention_cases[i], &rng);
    fcl_context_destroy(ctx);
    printf("%s\n", failures ? "FAILED" : "all results match the float64 reference");
    return failures ? 1 : 0;
}

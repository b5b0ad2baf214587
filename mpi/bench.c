/* flashcl-mpi-bench: the time of flashcl_mpi's calls on n ranks, for the scaling against one
 * device. Each rank holds 1/n of the keys (and, for the ring, of the queries); rank 0 prints
 * the median wall time of the call over the ranks (MPI_Barrier, call, the slowest rank), and
 * with one rank also one plain fcl_attention_run over the whole problem (one device holding
 * every key), which is what n ranks are measured against.
 *   mpiexec -n 2 flashcl-mpi-bench -d 0:%l --decode 1,32/8,1048576,128 --ring 1,32/8,131072,128,c
 * -d: the device of each rank, %l replaced by its rank on its node (one GPU each). */
#include "flashcl_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t batch, heads_q, heads_kv, len, dim;
    int ring; /* 0: sharded decode (len_q 1), 1: ring prefill in zig-zag order, 2: rank order */
    int causal;
} bench_case;

typedef struct {
    fcl_context *ctx;
    fcl_mpi_workspace *ws; /* the ring's host blocks, kept between calls as an engine keeps them */
    cl_context cl;
    cl_command_queue queue;
    int rank, ranks, reps;
    fcl_dtype dtype;
} bench;

static _Noreturn void die(const bench *b, const char *what, const char *why)
{
    fprintf(stderr, "flashcl-mpi-bench, rank %d: %s: %s\n", b ? b->rank : -1, what, why);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1); /* (MPI_Abort does not return) */
}

/* A device buffer of bytes, filled with a pattern of small half values (float32: zeros; the
 * kernels' speed does not depend on the values). */
static cl_mem filled(const bench *b, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(b->cl, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
    if (err != CL_SUCCESS)
        die(b, "clCreateBuffer", "out of device memory");
    unsigned short pattern[64];
    for (int i = 0; i < 64; i++)
        pattern[i] = (unsigned short)(b->dtype == FCL_DTYPE_F32 ? 0 : 0x2c00 + (i * 37) % 512);
    if (bytes && clEnqueueFillBuffer(b->queue, m, pattern, sizeof pattern, 0,
                                     bytes / sizeof pattern * sizeof pattern, 0, NULL, NULL) !=
                     CL_SUCCESS)
        die(b, "clEnqueueFillBuffer", "failed");
    return m;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over reps (after one warm-up) of the slowest rank's wall time of one call. */
static double median_ms(const bench *b, const bench_case *c, const fcl_attention_desc *d,
                        const fcl_attention_io *io, int whole)
{
    double *ms = malloc((size_t)b->reps * sizeof(double));
    if (!ms)
        die(b, "malloc", "out of memory");
    for (int r = -1; r < b->reps; r++) {
        clFinish(b->queue);
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        fcl_status s = whole ? fcl_attention_run(b->ctx, d, io, 0, NULL, NULL)
                       : c->ring == 0 ? fcl_mpi_attention_sharded(b->ctx, MPI_COMM_WORLD, d, io)
                       : c->ring == 1 ? fcl_mpi_attention_ring_zigzag(b->ctx, MPI_COMM_WORLD, b->ws, d, io)
                                      : fcl_mpi_attention_ring(b->ctx, MPI_COMM_WORLD, b->ws, d, io);
        if (s != FCL_SUCCESS)
            die(b, fcl_status_string(s),
                whole ? fcl_context_last_error(b->ctx) : fcl_mpi_last_error());
        clFinish(b->queue);
        double mine = (MPI_Wtime() - t0) * 1e3, slowest;
        MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r >= 0)
            ms[r] = slowest;
    }
    qsort(ms, (size_t)b->reps, sizeof(double), by_value);
    const double median = ms[b->reps / 2];
    free(ms);
    return median;
}

/* One case on this rank's share (whole: one rank holding everything, plain attention). */
static double run_case(const bench *b, const bench_case *c, int whole)
{
    const size_t parts = whole ? 1 : (size_t)b->ranks, len_kv = c->len / parts;
    const size_t len_q = c->ring ? len_kv : 1, es = b->dtype == FCL_DTYPE_F32 ? 4 : 2;
    fcl_attention_desc d = {.batch = c->batch, .heads_q = c->heads_q, .heads_kv = c->heads_kv,
                            .len_q = len_q, .len_kv = len_kv, .head_dim = c->dim,
                            .causal = c->causal ? FCL_CAUSAL_BOTTOM_RIGHT : FCL_CAUSAL_NONE,
                            .dtype_q = b->dtype, .dtype_kv = b->dtype};
    const size_t q_rows = c->batch * c->heads_q * len_q, kv_rows = c->batch * c->heads_kv * len_kv;
    fcl_attention_io io = {.q = filled(b, q_rows * c->dim * es), .k = filled(b, kv_rows * c->dim * es),
                           .v = filled(b, kv_rows * c->dim * es),
                           .out = filled(b, q_rows * c->dim * 4), .lse = filled(b, q_rows * 4)};
    const double ms = median_ms(b, c, &d, &io, whole);
    cl_mem all[] = {io.q, io.k, io.v, io.out, io.lse};
    for (int i = 0; i < 5; i++)
        clReleaseMemObject(all[i]);
    return ms;
}

/* "B,H[/Hkv],L,D[,c]" */
static int parse_case(const char *s, int ring, bench_case *c)
{
    int used = 0;
    memset(c, 0, sizeof *c);
    c->ring = ring;
    if (sscanf(s, "%zu,%zu/%zu,%zu,%zu%n", &c->batch, &c->heads_q, &c->heads_kv, &c->len,
               &c->dim, &used) != 5) {
        used = 0;
        if (sscanf(s, "%zu,%zu,%zu,%zu%n", &c->batch, &c->heads_q, &c->len, &c->dim, &used) != 4)
            return 0;
        c->heads_kv = c->heads_q;
    }
    c->causal = strcmp(s + used, ",c") == 0;
    return (!s[used] || c->causal) && c->batch && c->heads_q && c->heads_kv && c->len && c->dim;
}

static const char *const dtype_names[] = {"f32", "f16", "bf16"}; /* fcl_dtype's order */

static int dtype_named(const char *name)
{
    for (int t = 0; t < 3; t++)
        if (!strcmp(name, dtype_names[t]))
            return t;
    return -1;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: flashcl-mpi-bench [-d DEVICE] [--dtype f32|f16|bf16] [--reps N]\n"
            "                         [--decode B,H[/Hkv],Lk,D] [--ring B,H[/Hkv],L,D[,c]]\n"
            "                         [--ring-blocks B,H[/Hkv],L,D[,c]]\n"
            "  Run under mpiexec; each rank holds 1/n of the keys (--decode: the sharded call,\n"
            "  one query) or of the sequence (--ring: zig-zag order, --ring-blocks: rank order).\n"
            "  -d DEVICE: each rank's device, %%l replaced by its rank on its node.\n"
            "  On one rank the whole problem's plain fcl_attention_run is timed too.\n");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    bench b = {.reps = 20, .dtype = FCL_DTYPE_F16};
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.ranks);
    MPI_Comm node;
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    bench_case cases[16];
    int n_cases = 0;
    char device[256] = "";
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        const int ring = !strcmp(arg, "--ring") ? 1 : !strcmp(arg, "--ring-blocks") ? 2 : 0;
        if (val && (ring || !strcmp(arg, "--decode")) && n_cases < 16 &&
            parse_case(val, ring, &cases[n_cases]))
            n_cases++, i++;
        else if (val && !strcmp(arg, "-d")) {
            const char *l = strstr(val, "%l");
            if (l)
                snprintf(device, sizeof device, "%.*s%d%s", (int)(l - val), val, local, l + 2);
            else
                snprintf(device, sizeof device, "%s", val);
            i++;
        } else if (val && !strcmp(arg, "--reps") && atoi(val) > 0)
            b.reps = atoi(val), i++;
        else if (val && !strcmp(arg, "--dtype") && dtype_named(val) >= 0)
            b.dtype = (fcl_dtype)dtype_named(val), i++;
        else {
            if (b.rank == 0)
                usage();
            MPI_Finalize();
            return !strcmp(arg, "--help") ? 0 : 2;
        }
    }
    fcl_context_options opts = {.device = device[0] ? device : NULL};
    fcl_status s = fcl_context_create(&opts, &b.ctx);
    if (s != FCL_SUCCESS)
        die(&b, "fcl_context_create", fcl_context_last_error(NULL));
    fcl_context_get_cl(b.ctx, &b.cl, NULL, &b.queue);
    if (fcl_mpi_workspace_create(b.ctx, &b.ws) != FCL_SUCCESS)
        die(&b, "fcl_mpi_workspace_create", fcl_mpi_last_error());
    fcl_device_info info;
    fcl_context_device_info(b.ctx, &info);
    printf("rank %d of %d: %s (%s)\n", b.rank, b.ranks, info.name, info.platform_name);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    static const char *const kinds[] = {"decode (sharded)", "ring (zig-zag)", "ring (rank order)"};
    for (int i = 0; i < n_cases; i++) {
        const bench_case *c = &cases[i];
        if (c->len % (2 * (size_t)b.ranks))
            die(&b, "a case", "its length is not a multiple of twice the ranks");
        const double ms = run_case(&b, c, 0);
        const double whole = b.ranks == 1 ? run_case(&b, c, 1) : 0.0;
        if (b.rank == 0) {
            printf("%-18s B%zu H%zu/%zu L%zu D%zu%s %s, %d rank%s: %.3f ms", kinds[c->ring],
                   c->batch, c->heads_q, c->heads_kv, c->len, c->dim, c->causal ? " causal" : "",
                   dtype_names[b.dtype], b.ranks, b.ranks > 1 ? "s" : "", ms);
            if (b.ranks == 1)
                printf(" (one device, plain fcl_attention_run: %.3f ms)", whole);
            printf("\n");
            fflush(stdout);
        }
    }
    fcl_mpi_workspace_destroy(b.ws);
    fcl_context_destroy(b.ctx);
    MPI_Finalize();
    return 0;
}

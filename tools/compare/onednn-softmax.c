/* flashcl-compare-onednn: oneDNN's CPU softmax on the shapes of `flashcl-bench --preset cpu`,
 * timed the same way (median of repeats after warm-up; useful bytes = read once + write
 * once), so the two can be read side by side. Optional: built only where oneDNN (Debian
 * libdnnl-dev) is found; flashcl itself never depends on it. */
#include <oneapi/dnnl/dnnl.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const long shapes[][2] = {{65536, 1024}, {16384, 4096}, {256, 262144}, {16, 4194304}, {4096, 128}};

static double now(void)
{
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define MAX_REPS 1000
#define CHECK(call)                                                                          \
    do {                                                                                     \
        if ((call) != dnnl_success) {                                                        \
            fprintf(stderr, "flashcl-compare-onednn: %s failed\n", #call);                   \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5, warmup = 2;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    if (reps < 1)
        reps = 1;
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
    printf("oneDNN %d.%d softmax (CPU, its own threads); median of %d after %d warm-up\n",
           dnnl_version()->major, dnnl_version()->minor, reps, warmup);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        dnnl_dims_t dims = {shapes[s][0], shapes[s][1]};
        dnnl_memory_desc_t md;
        dnnl_softmax_desc_t sd;
        dnnl_primitive_desc_t pd;
        dnnl_primitive_t prim;
        dnnl_memory_t src, dst;
        CHECK(dnnl_memory_desc_init_by_tag(&md, 2, dims, dnnl_f32, dnnl_ab));
        CHECK(dnnl_softmax_forward_desc_init(&sd, dnnl_forward_inference, &md, 1));
        CHECK(dnnl_primitive_desc_create(&pd, &sd, NULL, engine, NULL));
        CHECK(dnnl_primitive_create(&prim, pd));
        CHECK(dnnl_memory_create(&src, &md, engine, DNNL_MEMORY_ALLOCATE));
        CHECK(dnnl_memory_create(&dst, &md, engine, DNNL_MEMORY_ALLOCATE));
        float *x;
        CHECK(dnnl_memory_get_data_handle(src, (void **)&x));
        for (long i = 0; i < shapes[s][0] * shapes[s][1]; i++)
            x[i] = (float)((i * 7919) % 1000) * 0.01f;
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
        double ms[MAX_REPS] = {0};
        for (int r = 0; r < warmup + reps; r++) {
            double t0 = now();
            CHECK(dnnl_primitive_execute(prim, stream, 2, args));
            CHECK(dnnl_stream_wait(stream));
            if (r >= warmup)
                ms[r - warmup] = (now() - t0) * 1e3;
        }
        qsort(ms, (size_t)reps, sizeof(double), cmp);
        double bytes = 8.0 * (double)shapes[s][0] * (double)shapes[s][1];
        printf("onednn softmax f32 %ldx%ld: %.3f ms, %.1f GB/s\n", shapes[s][0], shapes[s][1],
               ms[reps / 2], bytes / (ms[reps / 2] * 1e6));
        fflush(stdout);
        dnnl_memory_destroy(src);
        dnnl_memory_destroy(dst);
        dnnl_primitive_destroy(prim);
        dnnl_primitive_desc_destroy(pd);
    }
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
    return 0;
}

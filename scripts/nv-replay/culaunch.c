/* Replays a launch captured by clshim.c (DIR/launch.txt, DIR/program.bin: NVIDIA's OpenCL
 * binary, PTX, compiled with the register cap of its build options, DIR/options.txt) through
 * CUDA's driver API, REPS times, and prints the median time by CUDA events (each launch
 * after the buffers' captured contents are copied back); under Nsight Compute the launches
 * are profiled as CUDA kernels. It first compares the parameters' sizes in the PTX's .entry
 * with the capture's, and last each buffer with its contents after the OpenCL launch
 * (DIR/mem_<i>.after). Launches with __local arguments are not replayed.
 * build: cc -O2 -o culaunch culaunch.c -I/usr/local/cuda/include -lcuda
 * usage: culaunch DIR [REPS] */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                            \
    do {                                                                                       \
        CUresult r_ = (call);                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                              \
            const char *s_ = "";                                                               \
            cuGetErrorString(r_, &s_);                                                         \
            fprintf(stderr, "culaunch: %s: %s\n", #call, s_);                                  \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static void *read_file(const char *dir, const char *name, size_t *n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "culaunch: no %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc(*n + 1);
    if (!data || fread(data, 1, *n, f) != *n)
        exit(1);
    data[*n] = 0;
    fclose(f);
    return data;
}

/* The byte sizes of kernel's parameters in the PTX's .entry (at most max); their count. */
static int ptx_param_sizes(const char *ptx, const char *kernel, size_t *sizes, int max)
{
    char head[300];
    snprintf(head, sizeof head, ".entry %s(", kernel);
    const char *at = strstr(ptx, head), *end = at ? strchr(at, ')') : NULL;
    int count = 0;
    for (const char *q = at ? strstr(at, ".param") : NULL; q && q < end && count < max;
         q = strstr(q + 6, ".param")) {
        const char *line_end = strchr(q, '\n');
        char line[512] = "";
        memcpy(line, q, (size_t)(line_end - q) < sizeof line - 1 ? (size_t)(line_end - q) : sizeof line - 1);
        const char *bracket = strchr(line, '[');
        char type[16] = ""; /* .u64, .f32, ...; arrays: .align N .b8 name[size] */
        sscanf(line, ".param %15s", type);
        const unsigned long bits = strtoul(type + 2, NULL, 10);
        sizes[count++] = bracket ? strtoul(bracket + 1, NULL, 10) : bits / 8;
    }
    return count;
}

/* NVIDIA's OpenCL PTX reads its launch environment from %envreg registers that a CUDA
 * launch leaves unset. Those of a 1-D launch (the only kind checked: the replay's outputs
 * equal the OpenCL launch's) become what they held there: %envreg0 and %envreg3 (group and
 * global offsets) 0, %envreg6 (the group count) %nctaid.x. Any other is refused. */
static char *cuda_ptx(const char *in)
{
    char *out = malloc(2 * strlen(in) + 1);
    size_t o = 0;
    for (const char *p = in; *p;) {
        if (strncmp(p, "%envreg", 7)) {
            out[o++] = *p++;
            continue;
        }
        char *rest;
        const long reg = strtol(p + 7, &rest, 10);
        const char *with = reg == 0 || reg == 3 ? "0" : reg == 6 ? "%nctaid.x" : NULL;
        if (!with) {
            fprintf(stderr, "culaunch: the PTX reads %%envreg%ld, which the replay does not set\n", reg);
            exit(1);
        }
        if (reg == 6) /* mov.b32 from a special register is spelled mov.u32 */
            for (size_t k = o; k > 0 && o - k < 256 && out[k - 1] != '\n' && out[k - 1] != ';'; k--)
                if (o - (k - 1) >= 7 && !strncmp(out + k - 1, "mov.b32", 7))
                    memcpy(out + k - 1, "mov.u32", 7);
        memcpy(out + o, with, strlen(with));
        o += strlen(with);
        p = rest;
    }
    out[o] = 0;
    return out;
}

static int by_value(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: culaunch DIR [REPS]\n");
        return 2;
    }
    const char *dir = argv[1];
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    CHECK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));

    size_t n;
    char *ptx = cuda_ptx(read_file(dir, "program.bin", &n));
    CUmodule module;
    char log[8192] = "";
    /* the OpenCL build's register cap (-cl-nv-maxrregcount in options.txt), as its JIT had */
    const char *cap = strstr(read_file(dir, "options.txt", &n), "-cl-nv-maxrregcount=");
    const unsigned max_registers = cap ? (unsigned)atoi(cap + strlen("-cl-nv-maxrregcount=")) : 0;
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_MAX_REGISTERS};
    void *vals[] = {log, (void *)(size_t)sizeof log, (void *)(size_t)max_registers};
    if (cuModuleLoadDataEx(&module, ptx, max_registers ? 3 : 2, opts, vals) != CUDA_SUCCESS) {
        fprintf(stderr, "culaunch: the PTX did not load: %s\n", log);
        return 1;
    }

    char *text = read_file(dir, "launch.txt", &n), *line, *save = NULL;
    char kernel[256] = "";
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, dims = 0, d = 0;
    void *params[128], *host_of[128] = {0};
    size_t arg_size[128], host_bytes[128] = {0};
    int count = 0;
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        size_t bytes, local;
        char file[256];
        if (sscanf(line, "kernel %255s", kernel) == 1 || sscanf(line, "dims %u", &dims) == 1)
            continue;
        if (sscanf(line, "size %zu %zu", &bytes, &local) == 2) {
            block[d] = (unsigned)local;
            grid[d] = (unsigned)(bytes / local);
            d++;
        } else if (sscanf(line, "mem %zu %255s", &bytes, file) == 2) {
            size_t got;
            void *host = read_file(dir, file, &got);
            CUdeviceptr *p = malloc(sizeof *p);
            CHECK(cuMemAlloc(p, bytes));
            CHECK(cuMemcpyHtoD(*p, host, got));
            host_of[count] = host, host_bytes[count] = got, arg_size[count] = 8;
            params[count++] = p;
        } else if (sscanf(line, "bytes %zu", &bytes) == 1) {
            unsigned char *v = calloc(1, bytes < 8 ? 8 : bytes);
            const char *at = strchr(line + 6, ' ');
            for (size_t b = 0; b < bytes && at; b++, at = strchr(at + 1, ' ')) {
                unsigned x;
                sscanf(at, " %x", &x);
                v[b] = (unsigned char)x;
            }
            arg_size[count] = bytes;
            params[count++] = v;
        } else {
            fprintf(stderr, "culaunch: cannot read \"%s\"\n", line);
            return 1;
        }
    }
    size_t ptx_sizes[128];
    const int ptx_count = ptx_param_sizes(ptx, kernel, ptx_sizes, 128);
    if (ptx_count != count)
        printf("the PTX's %s takes %d parameters, the capture has %d\n", kernel, ptx_count, count);
    for (int i = 0; i < count && i < ptx_count; i++)
        if (ptx_sizes[i] != arg_size[i])
            printf("parameter %d: %zu bytes in the PTX, %zu captured\n", i, ptx_sizes[i], arg_size[i]);
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, module, kernel));
    int regs = 0, shared = 0;
    cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
    cuFuncGetAttribute(&shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
    printf("%s: grid %u x %u x %u, block %u x %u x %u, %d registers, %d bytes of shared memory\n",
           kernel, grid[0], grid[1], grid[2], block[0], block[1], block[2], regs, shared);

    CUevent start, stop;
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
    float *ms = malloc(sizeof(float) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < count; i++) /* each launch finds the captured contents */
            if (host_of[i])
                CHECK(cuMemcpyHtoD(*(CUdeviceptr *)params[i], host_of[i], host_bytes[i]));
        CHECK(cuEventRecord(start, 0));
        CHECK(cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, 0,
                             params, NULL));
        CHECK(cuEventRecord(stop, 0));
        CHECK(cuEventSynchronize(stop));
        CHECK(cuEventElapsedTime(&ms[r], start, stop));
    }
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < count; i++) { /* the buffers against the OpenCL launch's (mem_<i>.after) */
        if (!host_of[i])
            continue;
        char name[64], path[4200];
        snprintf(name, sizeof name, "mem_%d.after", i);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *probe = fopen(path, "rb");
        if (!probe)
            continue;
        fclose(probe);
        size_t got;
        unsigned char *want = read_file(dir, name, &got), *have = malloc(host_bytes[i]);
        CHECK(cuMemcpyDtoH(have, *(CUdeviceptr *)params[i], host_bytes[i]));
        size_t differ = 0, changed = 0;
        for (size_t b = 0; b < got && b < host_bytes[i]; b++) {
            differ += want[b] != have[b];
            changed += want[b] != ((unsigned char *)host_of[i])[b];
        }
        printf("buffer %d: %zu bytes, OpenCL's launch changed %zu, the replay differs from it in %zu\n",
               i, host_bytes[i], changed, differ);
    }
    qsort(ms, (size_t)reps, sizeof *ms, by_value);
    printf("median of %d: %.4f ms (min %.4f)\n", reps, ms[reps / 2], ms[0]);
    return 0;
}

/* LD_PRELOAD shim: captures one launch of an OpenCL kernel (its program's binary, its work
 * sizes, its arguments, and the contents of its buffers just before it runs and just after)
 * so that culaunch.c can replay it through CUDA's driver API, where Nsight Compute sees it.
 *   PROF_KERNEL  kernel name to capture (exact)
 *   PROF_NTH     which launch of it (1 = first; default 1)
 *   PROF_DIR     directory for launch.txt, program.bin, options.txt (its build options),
 *                mem_<i>.bin and mem_<i>.after
 *   PROF_LIST    set: print every launch's kernel name
 * Only launches without a global work offset are captured (culaunch sets none).
 * build: cc -O2 -shared -fPIC -o libclshim.so clshim.c -ldl */
#define CL_TARGET_OPENCL_VERSION 120
#define _GNU_SOURCE
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MEMS 4096
#define MAX_ARGS 128
#define MAX_KERNELS 256

static cl_mem mems[MAX_MEMS];
static size_t n_mems;

typedef struct {
    cl_kernel kernel;
    size_t size[MAX_ARGS];
    unsigned char value[MAX_ARGS][64];
    int is_null[MAX_ARGS];
    cl_uint count;
} kernel_args;
static kernel_args args_of[MAX_KERNELS];
static int launches;

static void *real(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "clshim: no %s\n", name);
        exit(1);
    }
    return f;
}

static void remember(cl_mem m)
{
    if (m && n_mems < MAX_MEMS)
        mems[n_mems++] = m;
}

static int known_mem(cl_mem m)
{
    for (size_t i = 0; i < n_mems; i++)
        if (mems[i] == m)
            return 1;
    return 0;
}

cl_mem clCreateBuffer(cl_context c, cl_mem_flags f, size_t n, void *h, cl_int *e)
{
    cl_mem (*next)(cl_context, cl_mem_flags, size_t, void *, cl_int *) = real("clCreateBuffer");
    cl_mem m = next(c, f, n, h, e);
    remember(m);
    return m;
}

cl_mem clCreateSubBuffer(cl_mem b, cl_mem_flags f, cl_buffer_create_type t, const void *i, cl_int *e)
{
    cl_mem (*next)(cl_mem, cl_mem_flags, cl_buffer_create_type, const void *, cl_int *) =
        real("clCreateSubBuffer");
    cl_mem m = next(b, f, t, i, e);
    remember(m);
    return m;
}

static kernel_args *slot(cl_kernel k)
{
    for (int i = 0; i < MAX_KERNELS; i++)
        if (args_of[i].kernel == k || !args_of[i].kernel) {
            args_of[i].kernel = k;
            return &args_of[i];
        }
    return NULL;
}

cl_int clSetKernelArg(cl_kernel k, cl_uint index, size_t size, const void *value)
{
    cl_int (*next)(cl_kernel, cl_uint, size_t, const void *) = real("clSetKernelArg");
    kernel_args *a = slot(k);
    if (a && index < MAX_ARGS && size <= 64) {
        a->size[index] = size;
        a->is_null[index] = value == NULL;
        if (value)
            memcpy(a->value[index], value, size);
        if (index + 1 > a->count)
            a->count = index + 1;
    }
    return next(k, index, size, value);
}

static void write_file(const char *dir, const char *name, const void *data, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "clshim: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* The cl_mem set as argument i of a (NULL where it is not one this process created). */
static cl_mem mem_argument(const kernel_args *a, cl_uint i)
{
    cl_mem m = NULL;
    if (a->size[i] == sizeof(cl_mem) && !a->is_null[i])
        memcpy(&m, a->value[i], sizeof m);
    return m && known_mem(m) ? m : NULL;
}

/* Buffer m's contents into dir/name; its size. */
static size_t save_buffer(cl_command_queue q, cl_mem m, const char *dir, const char *name)
{
    size_t bytes = 0;
    clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
    void *data = malloc(bytes);
    if (!data || clEnqueueReadBuffer(q, m, CL_TRUE, 0, bytes, data, 0, NULL, NULL)) {
        fprintf(stderr, "clshim: cannot read %s\n", name);
        exit(1);
    }
    write_file(dir, name, data, bytes);
    free(data);
    return bytes;
}

/* The launch's description (launch.txt), program binary and buffers into PROF_DIR. */
static void capture(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *global,
                    const size_t *local, const char *dir)
{
    char name[256] = "";
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
    cl_program program;
    clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof program, &program, NULL);
    size_t sizes[8] = {0};
    clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof sizes, sizes, NULL);
    unsigned char *binaries[8] = {malloc(sizes[0] + 1)};
    clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof binaries, binaries, NULL);
    write_file(dir, "program.bin", binaries[0], sizes[0]);
    free(binaries[0]);
    /* its build options, which the replay's JIT takes its register cap from */
    cl_device_id device;
    char options[2048] = "";
    if (clGetProgramInfo(program, CL_PROGRAM_DEVICES, sizeof device, &device, NULL) == CL_SUCCESS)
        clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_OPTIONS, sizeof options, options,
                              NULL);
    options[sizeof options - 1] = '\0';
    write_file(dir, "options.txt", options, strlen(options));

    char path[4096];
    snprintf(path, sizeof path, "%s/launch.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        exit(1);
    fprintf(f, "kernel %s\ndims %u\n", name, dims);
    for (cl_uint d = 0; d < dims; d++)
        fprintf(f, "size %zu %zu\n", global[d], local ? local[d] : 0);
    kernel_args *a = slot(k);
    for (cl_uint i = 0; a && i < a->count; i++) {
        const cl_mem m = mem_argument(a, i);
        if (a->is_null[i]) {
            fprintf(f, "local %zu\n", a->size[i]);
        } else if (m) {
            char file[64];
            snprintf(file, sizeof file, "mem_%u.bin", i);
            fprintf(f, "mem %zu %s\n", save_buffer(q, m, dir, file), file);
        } else {
            fprintf(f, "bytes %zu", a->size[i]);
            for (size_t b = 0; b < a->size[i]; b++)
                fprintf(f, " %02x", a->value[i][b]);
            fprintf(f, "\n");
        }
    }
    fclose(f);
    fprintf(stderr, "clshim: captured %s into %s\n", name, dir);
}

cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *offset,
                              const size_t *global, const size_t *local, cl_uint n_wait,
                              const cl_event *wait, cl_event *done)
{
    cl_int (*next)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *,
                   const size_t *, cl_uint, const cl_event *, cl_event *) =
        real("clEnqueueNDRangeKernel");
    const char *want = getenv("PROF_KERNEL"), *dir = getenv("PROF_DIR");
    if (getenv("PROF_LIST")) { /* every launch's kernel name, to find the one to capture */
        char name[256] = "";
        clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
        fprintf(stderr, "clshim: launch of %s\n", name);
    }
    int captured = 0;
    if (want && dir && !offset) {
        char name[256] = "";
        clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
        const int nth = getenv("PROF_NTH") ? atoi(getenv("PROF_NTH")) : 1;
        if (!strcmp(name, want) && ++launches == nth) {
            clFinish(q); /* the inputs as the kernel will find them */
            capture(q, k, dims, global, local, dir);
            captured = 1;
        }
    }
    const cl_int r = next(q, k, dims, offset, global, local, n_wait, wait, done);
    if (captured && r == CL_SUCCESS) { /* the buffers as the kernel left them */
        clFinish(q);
        const kernel_args *a = slot(k);
        for (cl_uint i = 0; a && i < a->count; i++)
            if (mem_argument(a, i)) {
                char file[64];
                snprintf(file, sizeof file, "mem_%u.after", i);
                save_buffer(q, mem_argument(a, i), dir, file);
            }
    }
    return r;
}

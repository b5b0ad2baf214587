/* The OpenCL entry points flashcl calls, with a chosen one made to fail (cl_faults.h). */
#include "cl_faults.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static long calls, fail_at, live;
static const char *failed;
static cl_int failed_error;

void faults_arm(long n)
{
    calls = 0;
    fail_at = n;
    failed = NULL;
    failed_error = CL_SUCCESS;
}

const char *faults_failed(void) { return failed; }
cl_int faults_failed_error(void) { return failed_error; }
long faults_live_objects(void) { return live; }

/* The ICD loader's entry point of that name. The loader is opened by name: this program
 * defines every OpenCL function it and flashcl use, so the linker need not keep it. */
static void *real_entry(const char *name)
{
    static void *loader;
    if (!loader)
        loader = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    void *fn = loader ? dlsym(loader, name) : NULL;
    if (!fn) {
        fprintf(stderr, "cl_faults: no %s in libOpenCL.so.1\n", name);
        abort();
    }
    return fn;
}
#define REAL(fn) ((__typeof__(&fn))real_entry(#fn))

/* Whether this call is the one to fail (then it is recorded as failed with error). */
static int injected(const char *name, cl_int error)
{
    if (++calls != fail_at)
        return 0;
    failed = name;
    failed_error = error;
    return 1;
}

/* For the calls that return an error code. */
#define FAIL_HERE(error)                                                                      \
    do {                                                                                      \
        if (injected(__func__, (error)))                                                      \
            return (error);                                                                   \
    } while (0)

/* For the calls that create an object and report through errcode_ret. */
#define FAIL_CREATE_HERE(error, errcode_ret)                                                  \
    do {                                                                                      \
        if (injected(__func__, (error))) {                                                    \
            if (errcode_ret)                                                                  \
                *(errcode_ret) = (error);                                                     \
            return NULL;                                                                      \
        }                                                                                     \
    } while (0)

static void *counted(void *object)
{
    live += object != NULL;
    return object;
}

static cl_int counted_release(cl_int err)
{
    live -= err == CL_SUCCESS;
    return err;
}

/* ---- queries ---- */

cl_int clGetPlatformIDs(cl_uint n, cl_platform_id *platforms, cl_uint *n_platforms)
{
    FAIL_HERE(CL_OUT_OF_HOST_MEMORY);
    return REAL(clGetPlatformIDs)(n, platforms, n_platforms);
}

cl_int clGetPlatformInfo(cl_platform_id p, cl_platform_info what, size_t size, void *value,
                         size_t *size_ret)
{
    FAIL_HERE(CL_OUT_OF_HOST_MEMORY);
    return REAL(clGetPlatformInfo)(p, what, size, value, size_ret);
}

cl_int clGetDeviceIDs(cl_platform_id p, cl_device_type type, cl_uint n, cl_device_id *devices,
                      cl_uint *n_devices)
{
    FAIL_HERE(CL_OUT_OF_RESOURCES);
    return REAL(clGetDeviceIDs)(p, type, n, devices, n_devices);
}

cl_int clGetDeviceInfo(cl_device_id d, cl_device_info what, size_t size, void *value,
                       size_t *size_ret)
{
    FAIL_HERE(CL_OUT_OF_RESOURCES);
    return REAL(clGetDeviceInfo)(d, what, size, value, size_ret);
}

cl_int clGetProgramInfo(cl_program p, cl_program_info what, size_t size, void *value,
                        size_t *size_ret)
{
    FAIL_HERE(CL_OUT_OF_RESOURCES);
    return REAL(clGetProgramInfo)(p, what, size, value, size_ret);
}

cl_int clGetProgramBuildInfo(cl_program p, cl_device_id d, cl_program_build_info what,
                             size_t size, void *value, size_t *size_ret)
{
    FAIL_HERE(CL_OUT_OF_RESOURCES);
    return REAL(clGetProgramBuildInfo)(p, d, what, size, value, size_ret);
}

cl_int clGetKernelWorkGroupInfo(cl_kernel k, cl_device_id d, cl_kernel_work_group_info what,
                                size_t size, void *value, size_t *size_ret)
{
    FAIL_HERE(CL_OUT_OF_RESOURCES);
    return REAL(clGetKernelWorkGroupInfo)(k, d, what, size, value, size_ret);
}

cl_int clGetMemObjectInfo(cl_mem m, cl_mem_info what, size_t size, void *value, size_t *size_ret)
{
    FAIL_HERE(CL_OUT_OF_RESOURCES);
    return REAL(clGetMemObjectInfo)(m, what, size, value, size_ret);
}

/* ---- objects ---- */

cl_context clCreateContext(const cl_context_properties *props, cl_uint n,
                           const cl_device_id *devices,
                           void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *),
                           void *user, cl_int *err)
{
    FAIL_CREATE_HERE(CL_OUT_OF_HOST_MEMORY, err);
    return counted(REAL(clCreateContext)(props, n, devices, notify, user, err));
}

cl_command_queue clCreateCommandQueue(cl_context c, cl_device_id d,
                                      cl_command_queue_properties props, cl_int *err)
{
    FAIL_CREATE_HERE(CL_OUT_OF_RESOURCES, err);
    return counted(REAL(clCreateCommandQueue)(c, d, props, err));
}

cl_program clCreateProgramWithSource(cl_context c, cl_uint n, const char **sources,
                                     const size_t *lengths, cl_int *err)
{
    FAIL_CREATE_HERE(CL_OUT_OF_HOST_MEMORY, err);
    return counted(REAL(clCreateProgramWithSource)(c, n, sources, lengths, err));
}

cl_program clCreateProgramWithBinary(cl_context c, cl_uint n, const cl_device_id *devices,
                                     const size_t *lengths, const unsigned char **binaries,
                                     cl_int *status, cl_int *err)
{
    FAIL_CREATE_HERE(CL_OUT_OF_HOST_MEMORY, err);
    return counted(REAL(clCreateProgramWithBinary)(c, n, devices, lengths, binaries, status, err));
}

cl_int clBuildProgram(cl_program p, cl_uint n, const cl_device_id *devices, const char *options,
                      void(CL_CALLBACK *notify)(cl_program, void *), void *user)
{
    FAIL_HERE(CL_OUT_OF_HOST_MEMORY);
    return REAL(clBuildProgram)(p, n, devices, options, notify, user);
}

cl_kernel clCreateKernel(cl_program p, const char *name, cl_int *err)
{
    FAIL_CREATE_HERE(CL_OUT_OF_RESOURCES, err);
    return counted(REAL(clCreateKernel)(p, name, err));
}

cl_int clSetKernelArg(cl_kernel k, cl_uint index, size_t size, const void *value)
{
    FAIL_HERE(CL_OUT_OF_RESOURCES);
    return REAL(clSetKernelArg)(k, index, size, value);
}

cl_mem clCreateBuffer(cl_context c, cl_mem_flags flags, size_t size, void *host, cl_int *err)
{
    FAIL_CREATE_HERE(CL_MEM_OBJECT_ALLOCATION_FAILURE, err);
    return counted(REAL(clCreateBuffer)(c, flags, size, host, err));
}

/* ---- commands ---- */

cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *offset,
                              const size_t *global, const size_t *local, cl_uint n_wait,
                              const cl_event *wait, cl_event *event)
{
    FAIL_HERE(CL_OUT_OF_RESOURCES);
    cl_int err = REAL(clEnqueueNDRangeKernel)(q, k, dims, offset, global, local, n_wait, wait, event);
    if (err == CL_SUCCESS && event)
        counted(*event);
    return err;
}

cl_int clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset,
                           size_t size, void *host, cl_uint n_wait, const cl_event *wait,
                           cl_event *event)
{
    FAIL_HERE(CL_OUT_OF_RESOURCES);
    cl_int err = REAL(clEnqueueReadBuffer)(q, m, blocking, offset, size, host, n_wait, wait, event);
    if (err == CL_SUCCESS && event)
        counted(*event);
    return err;
}

/* ---- reference counts (these do not fail: releasing must always be possible) ---- */

#define COUNTED_RETAIN_RELEASE(type, name)                                                    \
    cl_int clRetain##name(type object)                                                        \
    {                                                                                         \
        cl_int err = REAL(clRetain##name)(object);                                            \
        live += err == CL_SUCCESS;                                                            \
        return err;                                                                           \
    }                                                                                         \
    cl_int clRelease##name(type object) { return counted_release(REAL(clRelease##name)(object)); }

COUNTED_RETAIN_RELEASE(cl_context, Context)
COUNTED_RETAIN_RELEASE(cl_command_queue, CommandQueue)
COUNTED_RETAIN_RELEASE(cl_program, Program)
COUNTED_RETAIN_RELEASE(cl_kernel, Kernel)
COUNTED_RETAIN_RELEASE(cl_mem, MemObject)
COUNTED_RETAIN_RELEASE(cl_event, Event)
COUNTED_RETAIN_RELEASE(cl_device_id, Device)

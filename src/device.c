/* Device selection (options / FLASHCL_DEVICE) and capability probing. */
#include "internal.h"

#include <CL/cl_ext.h> /* CL_PLATFORM_NOT_FOUND_KHR, CL_DEVICE_COMPUTE_CAPABILITY_*_NV */

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FCL_MAX_PLATFORMS 16
#define FCL_MAX_DEVICES 64

typedef struct device_entry {
    cl_platform_id platform;
    cl_device_id device;
    unsigned platform_index, device_index;
    cl_device_type type;
    char name[256];
} device_entry;

/* Every device of every platform, in platform order. Returns the count; *err gets the first
 * failure of the listing calls (a platform without devices is not one), which the caller
 * reports when the device it wants is not in the list. A device whose type or name cannot be
 * read stays listed without them (its "P:D" indices still select it). */
static size_t list_devices(device_entry *list, size_t cap, cl_int *err)
{
    cl_platform_id platforms[FCL_MAX_PLATFORMS];
    cl_uint n_platforms = 0;
    size_t n = 0;
    *err = clGetPlatformIDs(FCL_MAX_PLATFORMS, platforms, &n_platforms);
    if (*err != CL_SUCCESS)
        return 0;
    if (n_platforms > FCL_MAX_PLATFORMS)
        n_platforms = FCL_MAX_PLATFORMS;
    for (cl_uint p = 0; p < n_platforms; p++) {
        cl_device_id devices[FCL_MAX_DEVICES];
        cl_uint n_devices = 0;
        cl_int listed = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, FCL_MAX_DEVICES, devices,
                                       &n_devices);
        if (listed != CL_SUCCESS) {
            if (listed != CL_DEVICE_NOT_FOUND && *err == CL_SUCCESS)
                *err = listed;
            continue;
        }
        if (n_devices > FCL_MAX_DEVICES)
            n_devices = FCL_MAX_DEVICES;
        for (cl_uint d = 0; d < n_devices && n < cap; d++) {
            device_entry *e = &list[n++];
            e->platform = platforms[p];
            e->device = devices[d];
            e->platform_index = p;
            e->device_index = d;
            e->type = 0;
            e->name[0] = '\0';
            cl_int typed =
                clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof e->type, &e->type, NULL);
            cl_int named =
                clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof e->name, e->name, NULL);
            if (*err == CL_SUCCESS)
                *err = typed != CL_SUCCESS ? typed : named;
            e->name[sizeof e->name - 1] = '\0';
        }
    }
    return n;
}

static int contains_ignoring_case(const char *haystack, const char *needle)
{
    size_t n = strlen(needle);
    for (; *haystack; haystack++) {
        size_t i = 0;
        while (i < n && haystack[i] &&
               tolower((unsigned char)haystack[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

static const device_entry *first_of_type(const device_entry *list, size_t n, cl_device_type t)
{
    for (size_t i = 0; i < n; i++)
        if (list[i].type & t)
            return &list[i];
    return NULL;
}

static const device_entry *match_spec(const device_entry *list, size_t n, const char *spec)
{
    unsigned p, d;
    char tail;
    if (sscanf(spec, "%u:%u%c", &p, &d, &tail) == 2) {
        for (size_t i = 0; i < n; i++)
            if (list[i].platform_index == p && list[i].device_index == d)
                return &list[i];
        return NULL;
    }
    if (strcmp(spec, "gpu") == 0)
        return first_of_type(list, n, CL_DEVICE_TYPE_GPU);
    if (strcmp(spec, "cpu") == 0)
        return first_of_type(list, n, CL_DEVICE_TYPE_CPU);
    if (strcmp(spec, "accelerator") == 0)
        return first_of_type(list, n, CL_DEVICE_TYPE_ACCELERATOR);
    for (size_t i = 0; i < n; i++)
        if (contains_ignoring_case(list[i].name, spec))
            return &list[i];
    return NULL;
}

fcl_status fcl_select_device(const char *spec, cl_platform_id *platform, cl_device_id *device)
{
    device_entry list[FCL_MAX_DEVICES];
    cl_int err;
    size_t n = list_devices(list, FCL_MAX_DEVICES, &err);
    const device_entry *e = NULL;
    const char *origin = "options.device";
    if (!spec || !*spec) {
        spec = getenv("FLASHCL_DEVICE");
        origin = "FLASHCL_DEVICE";
    }
    /* The ICD loader's "no platform" is no failure of the driver's. */
    if (n == 0 && err != CL_SUCCESS && err != CL_PLATFORM_NOT_FOUND_KHR)
        return fcl_fail_cl(NULL, err, "listing the OpenCL platforms and devices");
    if (n == 0)
        return fcl_fail(NULL, FCL_ERROR_NO_DEVICE,
                        "no OpenCL platform or device was found (is an ICD such as "
                        "pocl-opencl-icd installed?)");
    /* A platform that failed to list its devices may hold the device asked for, or the GPU
     * the default prefers: then the failure is the answer, not a lesser device. */
    if (spec && *spec) {
        e = match_spec(list, n, spec);
        if (!e && err != CL_SUCCESS)
            return fcl_fail_cl(NULL, err, "listing the OpenCL devices (%s \"%s\" matched none listed)",
                               origin, spec);
        if (!e)
            return fcl_fail(NULL, FCL_ERROR_NO_DEVICE,
                            "%s \"%s\" matches no device: give \"P:D\" indices, \"gpu\", \"cpu\", "
                            "\"accelerator\" or part of a device name (flashcl-probe lists them)",
                            origin, spec);
    } else {
        e = first_of_type(list, n, CL_DEVICE_TYPE_GPU);
        if (!e && err != CL_SUCCESS)
            return fcl_fail_cl(NULL, err, "listing the OpenCL devices (no GPU among those listed)");
        if (!e)
            e = first_of_type(list, n, CL_DEVICE_TYPE_ACCELERATOR);
        if (!e)
            e = first_of_type(list, n, CL_DEVICE_TYPE_CPU);
        if (!e)
            e = &list[0];
    }
    *platform = e->platform;
    *device = e->device;
    return FCL_SUCCESS;
}

/* The probe's queries: the first failure is kept, with the query's name, and the rest are
 * skipped, so a run of queries needs one check. */
typedef struct probe {
    cl_device_id device;
    cl_int err;
    const char *failed;
} probe;

static void query(probe *p, cl_device_info what, const char *name, size_t size, void *value,
                  size_t *size_ret)
{
    if (p->err == CL_SUCCESS &&
        (p->err = clGetDeviceInfo(p->device, what, size, value, size_ret)) != CL_SUCCESS)
        p->failed = name;
}
#define QUERY(p, what, field)                                                                 \
    query((p), (what), "clGetDeviceInfo(" #what ")", sizeof(field), &(field), NULL)

/* A string property, whole (malloc'd), or NULL after a failure. */
static char *query_text(probe *p, cl_device_info what, const char *name)
{
    size_t n = 0;
    query(p, what, name, 0, NULL, &n);
    char *text = p->err == CL_SUCCESS ? malloc(n + 1) : NULL;
    if (p->err == CL_SUCCESS && !text) {
        p->err = CL_OUT_OF_HOST_MEMORY;
        p->failed = name;
    }
    query(p, what, name, n, text, NULL);
    if (p->err != CL_SUCCESS) {
        free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* A string property into a fixed field, cut to fit (names longer than the field are kept
 * usable rather than failing the probe). */
static void query_string(probe *p, cl_device_info what, const char *name, char *field, size_t cap)
{
    char *text = query_text(p, what, name);
    snprintf(field, cap, "%s", text ? text : "");
    free(text);
}
#define QUERY_STRING(p, what, field)                                                          \
    query_string((p), (what), "clGetDeviceInfo(" #what ")", (field), sizeof(field))

static int has_extension(const char *all, const char *ext)
{
    size_t len = strlen(ext);
    for (const char *s = all ? strstr(all, ext) : NULL; s; s = strstr(s + 1, ext))
        if ((s == all || s[-1] == ' ') && (s[len] == ' ' || s[len] == '\0'))
            return 1;
    return 0;
}

/* NVIDIA's compute capability (cl_nv_device_attribute_query) as major * 10 + minor; left 0
 * where the driver does not answer. */
static void query_compute_capability(cl_device_id dev, fcl_device_info *info)
{
    cl_uint major = 0, minor = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) ==
            CL_SUCCESS &&
        clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) ==
            CL_SUCCESS)
        info->nv_compute_capability = major * 10 + minor;
}

fcl_status fcl_probe_device(cl_device_id dev, fcl_device_info *info)
{
    cl_platform_id platform = NULL;
    cl_device_local_mem_type local_type = CL_LOCAL;
    probe p = {dev, CL_SUCCESS, NULL};
    memset(info, 0, sizeof *info);
    /* Not QUERY: sizeof on an opaque handle reads as a pointer-to-struct slip to clang-tidy. */
    query(&p, CL_DEVICE_PLATFORM, "clGetDeviceInfo(CL_DEVICE_PLATFORM)", sizeof(cl_platform_id),
          (void *)&platform, NULL);
    if (p.err == CL_SUCCESS &&
        (p.err = clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof info->platform_name,
                                   info->platform_name, NULL)) != CL_SUCCESS)
        p.failed = "clGetPlatformInfo(CL_PLATFORM_NAME)";
    info->platform_name[sizeof info->platform_name - 1] = '\0';
    QUERY_STRING(&p, CL_DEVICE_NAME, info->name);
    QUERY_STRING(&p, CL_DEVICE_VENDOR, info->vendor);
    QUERY_STRING(&p, CL_DRIVER_VERSION, info->driver_version);
    QUERY_STRING(&p, CL_DEVICE_VERSION, info->device_version);
    QUERY_STRING(&p, CL_DEVICE_OPENCL_C_VERSION, info->opencl_c_version);
    QUERY(&p, CL_DEVICE_TYPE, info->type);
    QUERY(&p, CL_DEVICE_VENDOR_ID, info->vendor_id);
    QUERY(&p, CL_DEVICE_MAX_COMPUTE_UNITS, info->compute_units);
    QUERY(&p, CL_DEVICE_MAX_WORK_GROUP_SIZE, info->max_work_group_size);
    QUERY(&p, CL_DEVICE_LOCAL_MEM_SIZE, info->local_mem_size);
    QUERY(&p, CL_DEVICE_LOCAL_MEM_TYPE, local_type);
    info->local_mem_is_global = (local_type == CL_GLOBAL);
    QUERY(&p, CL_DEVICE_GLOBAL_MEM_SIZE, info->global_mem_size);
    QUERY(&p, CL_DEVICE_MAX_MEM_ALLOC_SIZE, info->max_alloc_size);
    QUERY(&p, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, info->preferred_vector_width_float);
    char *extensions =
        query_text(&p, CL_DEVICE_EXTENSIONS, "clGetDeviceInfo(CL_DEVICE_EXTENSIONS)");
    info->has_fp16 = has_extension(extensions, "cl_khr_fp16");
    info->has_fp64 = has_extension(extensions, "cl_khr_fp64");
    if (has_extension(extensions, "cl_nv_device_attribute_query"))
        query_compute_capability(dev, info);
    free(extensions);
    /* Every property above shapes the plan or the cache key: none is guessed. */
    if (p.err != CL_SUCCESS)
        return fcl_fail_cl(NULL, p.err, "probing the device: %s", p.failed);
    if (info->compute_units == 0)
        info->compute_units = 1;
    if (info->max_work_group_size == 0)
        info->max_work_group_size = 1;
    return FCL_SUCCESS;
}

/* Iterations fcl_loop_probe counts to: twice llvmpipe's cap, a millisecond or two on a GPU. */
#define FCL_LOOP_PROBE_COUNT (1u << 17)

extern const char fcl_cl_probe[]; /* cl/probe.cl, embedded at build time */

/* Runs the built probe kernel once: how far it counts is the loop-iteration cap. */
static cl_int run_loop_probe(fcl_context *ctx, cl_kernel probe)
{
    const cl_uint n = FCL_LOOP_PROBE_COUNT;
    cl_uint words[2] = {1, 0}; /* ones[0] = 1; the count comes back in ones[1] */
    const size_t one = 1;
    cl_int err;
    cl_mem buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                sizeof words, words, &err);
    if (err == CL_SUCCESS)
        err = clSetKernelArg(probe, 0, sizeof(cl_mem), &buf);
    if (err == CL_SUCCESS)
        err = clSetKernelArg(probe, 1, sizeof n, &n);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, probe, 1, NULL, &one, &one, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(ctx->queue, buf, CL_TRUE, 0, sizeof words, words, 0, NULL, NULL);
    if (buf)
        clReleaseMemObject(buf);
    if (err == CL_SUCCESS)
        ctx->info.loop_iteration_cap = words[1] < n ? words[1] : 0;
    return err;
}

/* CL_KERNEL_LOCAL_MEM_SIZE of the named probe kernel. */
static cl_int reported_local(fcl_context *ctx, cl_program program, const char *name, cl_ulong *local)
{
    cl_int err;
    cl_kernel kernel = clCreateKernel(program, name, &err);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof *local,
                                       local, NULL);
    if (kernel)
        clReleaseKernel(kernel);
    return err;
}

void fcl_fit_local_mem_count(fcl_device_info *info, cl_ulong once, cl_ulong twice)
{
    cl_ulong scale = twice > once ? (twice - once + FCL_PROBE_LOCAL / 2) / FCL_PROBE_LOCAL : 1;
    if (scale < 1)
        scale = 1;
    info->local_mem_scale = (cl_uint)scale;
    info->local_mem_reserved = once > scale * FCL_PROBE_LOCAL ? once - scale * FCL_PROBE_LOCAL : 0;
}

fcl_status fcl_probe_kernels(fcl_context *ctx)
{
    const char *source = fcl_cl_probe;
    const char *step = "clCreateProgramWithSource";
    cl_int err;
    cl_kernel probe = NULL;
    size_t wg = 0;
    cl_ulong once = 0, twice = 0;
    /* Built from source every time: the driver's own cache (POCL's, NVIDIA's) keeps it, and
     * llvmpipe builds it in milliseconds. */
    cl_program program = clCreateProgramWithSource(ctx->cl_ctx, 1, &source, NULL, &err);
    if (err == CL_SUCCESS) {
        step = "clBuildProgram";
        err = clBuildProgram(program, 1, &ctx->device,
                             FCL_CL_STD " -DFCL_PROBE_LOCAL=" FCL_STR(FCL_PROBE_LOCAL), NULL, NULL);
    }
    if (err == CL_SUCCESS) {
        step = "clCreateKernel";
        probe = clCreateKernel(program, "fcl_loop_probe", &err);
    }
    if (err == CL_SUCCESS) {
        step = "clGetKernelWorkGroupInfo";
        err = clGetKernelWorkGroupInfo(probe, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg,
                                       &wg, NULL);
    }
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(probe, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof once,
                                       &once, NULL);
    if (err == CL_SUCCESS)
        err = reported_local(ctx, program, "fcl_local_probe", &twice);
    if (err == CL_SUCCESS) {
        step = "running it";
        err = run_loop_probe(ctx, probe);
    }
    if (probe)
        clReleaseKernel(probe);
    if (program)
        clReleaseProgram(program);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "the device probe's kernel (cl/probe.cl): %s", step);
    /* The plan starts within these; the built kernels then say what each of them allows and
     * uses. */
    if (wg && wg < ctx->info.max_work_group_size)
        ctx->info.kernel_work_group_size = wg;
    fcl_fit_local_mem_count(&ctx->info, once, twice);
    return FCL_SUCCESS;
}

int fcl_pocl_major(const fcl_device_info *info)
{
    if (!strstr(info->platform_name, "Portable Computing Language"))
        return 0;
    const int major = atoi(info->driver_version);
    return major > 0 ? major : 1; /* POCL, whatever its version text says */
}

/* Device selection (options / FLASHCL_DEVICE) and capability probing. */
#include "internal.h"

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

/* Every device of every platform, in platform order. Returns the count. */
static size_t list_devices(device_entry *list, size_t cap)
{
    cl_platform_id platforms[FCL_MAX_PLATFORMS];
    cl_uint n_platforms = 0;
    size_t n = 0;
    if (clGetPlatformIDs(FCL_MAX_PLATFORMS, platforms, &n_platforms) != CL_SUCCESS)
        return 0;
    if (n_platforms > FCL_MAX_PLATFORMS)
        n_platforms = FCL_MAX_PLATFORMS;
    for (cl_uint p = 0; p < n_platforms; p++) {
        cl_device_id devices[FCL_MAX_DEVICES];
        cl_uint n_devices = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, FCL_MAX_DEVICES, devices,
                           &n_devices) != CL_SUCCESS)
            continue;
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
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof e->type, &e->type, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof e->name, e->name, NULL);
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
    size_t n = list_devices(list, FCL_MAX_DEVICES);
    const device_entry *e = NULL;
    const char *origin = "options.device";
    if (!spec || !*spec) {
        spec = getenv("FLASHCL_DEVICE");
        origin = "FLASHCL_DEVICE";
    }
    if (n == 0)
        return fcl_fail(NULL, FCL_ERROR_NO_DEVICE,
                        "no OpenCL platform or device was found (is an ICD such as "
                        "pocl-opencl-icd installed?)");
    if (spec && *spec) {
        e = match_spec(list, n, spec);
        if (!e)
            return fcl_fail(NULL, FCL_ERROR_NO_DEVICE,
                            "%s \"%s\" matches no device: give \"P:D\" indices, \"gpu\", \"cpu\", "
                            "\"accelerator\" or part of a device name (flashcl-probe lists them)",
                            origin, spec);
    } else {
        e = first_of_type(list, n, CL_DEVICE_TYPE_GPU);
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

static void get_string(cl_device_id dev, cl_device_info what, char *buf, size_t cap)
{
    buf[0] = '\0';
    clGetDeviceInfo(dev, what, cap, buf, NULL);
    buf[cap - 1] = '\0';
}

static int has_extension(cl_device_id dev, const char *ext)
{
    size_t n = 0;
    int found = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0)
        return 0;
    char *all = malloc(n + 1);
    if (!all)
        return 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, all, NULL) == CL_SUCCESS) {
        all[n] = '\0';
        size_t len = strlen(ext);
        for (const char *p = strstr(all, ext); p && !found; p = strstr(p + 1, ext))
            found = (p == all || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0');
    }
    free(all);
    return found;
}

fcl_status fcl_probe_device(cl_device_id dev, fcl_device_info *info)
{
    cl_platform_id platform = NULL;
    cl_device_local_mem_type local_type = CL_LOCAL;
    memset(info, 0, sizeof *info);
    cl_int err = clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof(cl_platform_id), &platform, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(NULL, err, "clGetDeviceInfo(CL_DEVICE_PLATFORM)");
    clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof info->platform_name, info->platform_name,
                      NULL);
    info->platform_name[sizeof info->platform_name - 1] = '\0';
    get_string(dev, CL_DEVICE_NAME, info->name, sizeof info->name);
    get_string(dev, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    get_string(dev, CL_DRIVER_VERSION, info->driver_version, sizeof info->driver_version);
    get_string(dev, CL_DEVICE_VERSION, info->device_version, sizeof info->device_version);
    get_string(dev, CL_DEVICE_OPENCL_C_VERSION, info->opencl_c_version,
               sizeof info->opencl_c_version);
    clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof info->type, &info->type, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_VENDOR_ID, sizeof info->vendor_id, &info->vendor_id, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof info->compute_units,
                    &info->compute_units, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof info->max_work_group_size,
                    &info->max_work_group_size, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof info->local_mem_size,
                    &info->local_mem_size, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_TYPE, sizeof local_type, &local_type, NULL);
    info->local_mem_is_global = (local_type == CL_GLOBAL);
    clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof info->global_mem_size,
                    &info->global_mem_size, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof info->max_alloc_size,
                    &info->max_alloc_size, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT,
                    sizeof info->preferred_vector_width_float, &info->preferred_vector_width_float,
                    NULL);
    info->has_fp16 = has_extension(dev, "cl_khr_fp16");
    info->has_fp64 = has_extension(dev, "cl_khr_fp64");
    if (info->compute_units == 0)
        info->compute_units = 1;
    if (info->max_work_group_size == 0)
        info->max_work_group_size = 1;
    return FCL_SUCCESS;
}

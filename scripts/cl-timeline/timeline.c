/* LD_PRELOAD shim: the device timeline of each call flashcl-bench times, from the driver's
 * profiling timestamps. flashcl-bench enqueues a marker before each call; from there until
 * the call's wait, every kernel and fill gets an event (its own where the caller passed none)
 * and, at the wait, one line goes to stderr:
 *   TLCALL name[groups] queued start end ...   (microseconds after the marker's end)
 * summarize.py takes the medians. An event the caller did not ask for costs host time (on
 * NVIDIA's driver about 8 us an enqueue), so starts come later than in a plain run; the
 * kernels' durations do not change.
 * usage:
 *   cc -O2 -shared -fPIC -o /tmp/libtimeline.so scripts/cl-timeline/timeline.c -ldl -lOpenCL
 *   LD_PRELOAD=/tmp/libtimeline.so build/tools/flashcl-bench ... 2> /tmp/tl.txt
 *   python3 scripts/cl-timeline/summarize.py /tmp/tl.txt */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdio.h>

#define REAL(name)                                                                             \
    static __typeof__(name) *real;                                                             \
    if (!real)                                                                                 \
        real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)
#define MAX_COMMANDS 64

static struct {
    cl_event event;
    char name[80];
} commands[MAX_COMMANDS];
static int n_commands, have_marker;
static cl_event marker;
static cl_int (*real_wait)(cl_uint, const cl_event *);

static void forget_commands(void)
{
    for (int i = 0; i < n_commands; i++)
        clReleaseEvent(commands[i].event);
    n_commands = 0;
}

static void add_command(cl_event e, const char *name)
{
    if (n_commands == MAX_COMMANDS)
        return;
    clRetainEvent(e);
    commands[n_commands].event = e;
    snprintf(commands[n_commands].name, sizeof commands[n_commands].name, "%s", name);
    n_commands++;
}

static double after_marker(cl_event e, cl_profiling_info what, cl_ulong origin)
{
    cl_ulong t = 0;
    clGetEventProfilingInfo(e, what, sizeof t, &t, NULL);
    return ((double)t - (double)origin) * 1e-3;
}

/* The line of the call that began at the marker, once its commands have ended. */
static void report_call(void)
{
    if (!have_marker) {
        forget_commands();
        return;
    }
    cl_ulong origin = 0;
    clGetEventProfilingInfo(marker, CL_PROFILING_COMMAND_END, sizeof origin, &origin, NULL);
    fprintf(stderr, "TLCALL");
    for (int i = 0; i < n_commands; i++) {
        real_wait(1, &commands[i].event);
        fprintf(stderr, " %s %.1f %.1f %.1f", commands[i].name,
                after_marker(commands[i].event, CL_PROFILING_COMMAND_QUEUED, origin),
                after_marker(commands[i].event, CL_PROFILING_COMMAND_START, origin),
                after_marker(commands[i].event, CL_PROFILING_COMMAND_END, origin));
    }
    fprintf(stderr, "\n");
    forget_commands();
    clReleaseEvent(marker);
    have_marker = 0;
}

cl_int clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint n, const cl_event *wait,
                                   cl_event *e)
{
    REAL(clEnqueueMarkerWithWaitList);
    cl_event own = NULL;
    const cl_int r = real(q, n, wait, e ? e : &own);
    if (r != CL_SUCCESS)
        return r;
    if (have_marker)
        clReleaseEvent(marker);
    forget_commands();
    marker = e ? *e : own;
    if (e)
        clRetainEvent(marker);
    have_marker = 1;
    return r;
}

cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *offset,
                              const size_t *global, const size_t *local, cl_uint n,
                              const cl_event *wait, cl_event *e)
{
    REAL(clEnqueueNDRangeKernel);
    cl_event own = NULL;
    const cl_int r = real(q, k, dims, offset, global, local, n, wait, e ? e : &own);
    if (r != CL_SUCCESS)
        return r;
    char kernel[64] = "", name[80];
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof kernel, kernel, NULL);
    snprintf(name, sizeof name, "%s[%zu]", kernel, global[0] / (local ? local[0] : 1));
    add_command(e ? *e : own, name);
    if (!e)
        clReleaseEvent(own);
    return r;
}

cl_int clEnqueueFillBuffer(cl_command_queue q, cl_mem b, const void *pattern, size_t size,
                           size_t offset, size_t bytes, cl_uint n, const cl_event *wait,
                           cl_event *e)
{
    REAL(clEnqueueFillBuffer);
    cl_event own = NULL;
    const cl_int r = real(q, b, pattern, size, offset, bytes, n, wait, e ? e : &own);
    if (r != CL_SUCCESS)
        return r;
    add_command(e ? *e : own, "fill");
    if (!e)
        clReleaseEvent(own);
    return r;
}

cl_int clWaitForEvents(cl_uint n, const cl_event *events)
{
    REAL(clWaitForEvents);
    real_wait = real;
    const cl_int r = real(n, events);
    report_call();
    return r;
}

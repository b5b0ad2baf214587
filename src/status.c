/* Status strings, the per-context / per-thread last error, and OpenCL error names. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Failures of fcl_context_create*, which have no context to hold them. */
static _Thread_local char thread_last_error[FCL_ERROR_TEXT_MAX];
/* What fcl_context_last_error(ctx) returns: a copy, so another thread failing on ctx
 * meanwhile cannot change the text under the caller. */
static _Thread_local char thread_error_copy[FCL_ERROR_TEXT_MAX];

const char *fcl_status_string(fcl_status s)
{
    switch (s) {
#define FCL_STATUS_CASE(name, value, text)                                                  \
    case name:                                                                               \
        return #name ": " text;
        FCL_STATUS_LIST(FCL_STATUS_CASE)
#undef FCL_STATUS_CASE
    }
    return "unknown flashcl status";
}

const char *fcl_version_string(void)
{
    return FCL_STR(FLASHCL_VERSION_MAJOR) "." FCL_STR(FLASHCL_VERSION_MINOR) "." FCL_STR(
        FLASHCL_VERSION_PATCH);
}

const char *fcl_context_last_error(const fcl_context *ctx)
{
    if (!ctx)
        return thread_last_error;
    pthread_mutex_t *lock = (pthread_mutex_t *)&ctx->error_lock; /* const: locking only */
    pthread_mutex_lock(lock);
    memcpy(thread_error_copy, ctx->last_error, sizeof thread_error_copy);
    pthread_mutex_unlock(lock);
    return thread_error_copy;
}

/* Printing is opt-in: an embedding application owns stderr. */
static void log_if_asked(const char *text)
{
    const char *env = getenv("FLASHCL_LOG");
    if (env && strcmp(env, "1") == 0)
        fprintf(stderr, "flashcl: %s\n", text);
}

/* Writes text into ctx's last error (replacing it, or appended), or the thread's. */
static void record_error(fcl_context *ctx, const char *text, int append)
{
    char *buf = ctx ? ctx->last_error : thread_last_error;
    if (ctx)
        pthread_mutex_lock(&ctx->error_lock);
    size_t used = append ? strlen(buf) : 0;
    snprintf(buf + used, FCL_ERROR_TEXT_MAX - used, "%s", text);
    if (ctx)
        pthread_mutex_unlock(&ctx->error_lock);
    log_if_asked(text);
}

void fcl_record_failure(fcl_context *ctx, const char *fmt, ...)
{
    char text[FCL_ERROR_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    /* va_start is just above: clang-tidy 14's analyzer loses it (a false positive). */
    // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    record_error(ctx, text, 0);
}

void fcl_record_cl_failure(fcl_context *ctx, cl_int err, const char *fmt, ...)
{
    char what[FCL_ERROR_TEXT_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) (as in fcl_record_failure)
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fcl_record_failure(ctx, "%s failed: %s (%d)", what, fcl_cl_error_name(err), (int)err);
}

void fcl_append_error(fcl_context *ctx, const char *text) { record_error(ctx, text, 1); }

void fcl_clear_error(fcl_context *ctx)
{
    pthread_mutex_lock(&ctx->error_lock);
    ctx->last_error[0] = '\0';
    pthread_mutex_unlock(&ctx->error_lock);
}

#define FCL_CL_ERROR_LIST(X)                                                                \
    X(CL_DEVICE_NOT_FOUND) X(CL_DEVICE_NOT_AVAILABLE) X(CL_COMPILER_NOT_AVAILABLE)          \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE) X(CL_OUT_OF_RESOURCES) X(CL_OUT_OF_HOST_MEMORY)     \
    X(CL_PROFILING_INFO_NOT_AVAILABLE) X(CL_MEM_COPY_OVERLAP) X(CL_BUILD_PROGRAM_FAILURE)   \
    X(CL_MAP_FAILURE) X(CL_MISALIGNED_SUB_BUFFER_OFFSET)                                    \
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) X(CL_COMPILE_PROGRAM_FAILURE)           \
    X(CL_LINKER_NOT_AVAILABLE) X(CL_LINK_PROGRAM_FAILURE) X(CL_INVALID_VALUE)               \
    X(CL_INVALID_DEVICE_TYPE) X(CL_INVALID_PLATFORM) X(CL_INVALID_DEVICE)                   \
    X(CL_INVALID_CONTEXT) X(CL_INVALID_QUEUE_PROPERTIES) X(CL_INVALID_COMMAND_QUEUE)        \
    X(CL_INVALID_HOST_PTR) X(CL_INVALID_MEM_OBJECT) X(CL_INVALID_BINARY)                    \
    X(CL_INVALID_BUILD_OPTIONS) X(CL_INVALID_PROGRAM) X(CL_INVALID_PROGRAM_EXECUTABLE)      \
    X(CL_INVALID_KERNEL_NAME) X(CL_INVALID_KERNEL_DEFINITION) X(CL_INVALID_KERNEL)          \
    X(CL_INVALID_ARG_INDEX) X(CL_INVALID_ARG_VALUE) X(CL_INVALID_ARG_SIZE)                  \
    X(CL_INVALID_KERNEL_ARGS) X(CL_INVALID_WORK_DIMENSION) X(CL_INVALID_WORK_GROUP_SIZE)    \
    X(CL_INVALID_WORK_ITEM_SIZE) X(CL_INVALID_GLOBAL_OFFSET) X(CL_INVALID_EVENT_WAIT_LIST)  \
    X(CL_INVALID_EVENT) X(CL_INVALID_OPERATION) X(CL_INVALID_BUFFER_SIZE)                   \
    X(CL_INVALID_GLOBAL_WORK_SIZE)

const char *fcl_cl_error_name(cl_int err)
{
    switch (err) {
#define FCL_CL_ERROR_CASE(name)                                                             \
    case name:                                                                               \
        return #name;
        FCL_CL_ERROR_LIST(FCL_CL_ERROR_CASE)
#undef FCL_CL_ERROR_CASE
    }
    return "an unknown OpenCL error";
}

fcl_status fcl_status_of_cl(cl_int err)
{
    if (err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE)
        return FCL_ERROR_OUT_OF_RESOURCES;
    if (err == CL_OUT_OF_HOST_MEMORY)
        return FCL_ERROR_OUT_OF_HOST_MEMORY;
    if (err == CL_BUILD_PROGRAM_FAILURE)
        return FCL_ERROR_BUILD_FAILED;
    return FCL_ERROR_OPENCL;
}

fcl_status fcl_check_call(fcl_context *ctx, const void *io, cl_uint n_wait, const cl_event *wait)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (!io)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "io is NULL");
    if (n_wait && !wait)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                        (unsigned)n_wait);
    return FCL_SUCCESS;
}

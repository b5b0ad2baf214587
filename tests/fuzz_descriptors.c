/* libFuzzer target over the public calls' descriptors and sizes (.ci/fuzz.sh runs it for a
 * bounded time with ASan and UBSan). Each input becomes a softmax or attention descriptor,
 * with sizes drawn from edge values (0, 1, odd, powers of two, 2^31, 2^32, SIZE_MAX) or raw
 * bytes, enums that may be out of range, and 4 KiB buffers (sometimes NULL or aliased).
 * Checked on every input: no crash or undefined behaviour; the status is one of
 * fcl_status's; a failure comes with a message; the input buffers are unmodified; and
 * the context stays usable. */
#include "flashcl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_BYTES 4096

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t take_u8(reader *r)
{
    if (!r->n)
        return 0;
    r->n--;
    return *r->p++;
}

static size_t take_size(reader *r)
{
    static const size_t edges[] = {0, 1, 2, 3, 7, 8, 64, 255, 256, 1023, 4096,
                                   (size_t)1 << 31, (size_t)1 << 32, SIZE_MAX / 2, SIZE_MAX};
    uint8_t b = take_u8(r);
    if (b < 2 * (sizeof edges / sizeof edges[0]))
        return edges[b / 2];
    return (size_t)take_u8(r) | (size_t)take_u8(r) << 8; /* up to 65535 */
}

static float take_scale(reader *r)
{
    static const float scales[] = {0.0f, 1.0f, 0.125f, -1.5f, 1e30f, NAN, INFINITY};
    return scales[take_u8(r) % (sizeof scales / sizeof scales[0])];
}

static fcl_context *ctx;
static cl_mem bufs[6];
static uint8_t pattern[BUF_BYTES];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS) {
        fprintf(stderr, "fuzz: no context: %s\n", fcl_context_last_error(NULL));
        abort();
    }
    cl_context c;
    cl_int err;
    fcl_context_get_cl(ctx, &c, NULL, NULL);
    for (size_t i = 0; i < BUF_BYTES; i++)
        pattern[i] = (uint8_t)(i * 37 + 11); /* small finite floats and halves */
    for (int i = 0; i < 6; i++) {
        bufs[i] = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, BUF_BYTES, pattern, &err);
        if (err != CL_SUCCESS)
            abort();
    }
    return 0;
}

/* A buffer for an argument: one of the six, or NULL. Buffers 0-2 are inputs. */
static cl_mem take_buffer(reader *r, int first, int count)
{
    uint8_t b = take_u8(r);
    return b % 8 == 7 ? NULL : bufs[first + b % count];
}

static void check_status(fcl_status s)
{
    if (s > FCL_SUCCESS || s < FCL_ERROR_OPENCL)
        abort(); /* not an fcl_status */
    if (s != FCL_SUCCESS && fcl_context_last_error(ctx)[0] == '\0')
        abort(); /* a failure without a sentence */
}

static void check_inputs_unmodified(void)
{
    cl_command_queue q;
    uint8_t now[BUF_BYTES];
    fcl_context_get_cl(ctx, NULL, NULL, &q);
    for (int i = 0; i < 3; i++) {
        if (clEnqueueReadBuffer(q, bufs[i], CL_TRUE, 0, BUF_BYTES, now, 0, NULL, NULL) != CL_SUCCESS ||
            memcmp(now, pattern, BUF_BYTES) != 0)
            abort();
    }
}

static void fuzz_softmax(reader *r)
{
    fcl_softmax_desc d = {.rows = take_size(r), .cols = take_size(r), .in_stride = take_size(r),
                          .out_stride = take_size(r), .dtype = (fcl_dtype)(take_u8(r) % 4),
                          .scale = take_scale(r), .log = take_u8(r) & 1,
                          .mask_stride = take_size(r), .algo = (fcl_softmax_algo)(take_u8(r) % 5),
                          .heads = take_size(r), .head_rows = take_size(r),
                          .mask_rows = take_size(r), .mask_dtype = (fcl_dtype)(take_u8(r) % 3),
                          .alibi_from_mask = take_u8(r) & 1};
    fcl_softmax_algo algo;
    check_status(fcl_softmax_plan(ctx, &d, &algo));
    fcl_softmax_io io = {.in = take_buffer(r, 0, 3), .mask = take_buffer(r, 0, 3),
                         .out = take_buffer(r, 3, 3), .lse = take_buffer(r, 3, 3)};
    if (take_u8(r) % 4 == 0)
        io.sinks = take_buffer(r, 0, 3);
    if (take_u8(r) % 4 == 0)
        io.alibi_slopes = take_buffer(r, 0, 3);
    cl_event done = NULL;
    fcl_status s = fcl_softmax_run(ctx, &d, &io, 0, NULL, &done);
    check_status(s);
    if (s == FCL_SUCCESS && (clWaitForEvents(1, &done) != CL_SUCCESS || clReleaseEvent(done)))
        abort();
}

/* A view: usually the layout's (all zero), else arbitrary offset and strides. */
static fcl_tensor_view take_view(reader *r)
{
    fcl_tensor_view v = {0};
    if (take_u8(r) % 4 == 0)
        v = (fcl_tensor_view){take_size(r), take_size(r), take_size(r), take_size(r)};
    return v;
}

/* An optional v0.2 buffer: mostly absent, else an input buffer, whose bytes read as int32
 * lengths, starts and pages are arbitrary: the kernels must clamp them. */
static cl_mem take_optional(reader *r)
{
    return take_u8(r) % 4 == 0 ? take_buffer(r, 0, 3) : NULL;
}

static void fuzz_attention(reader *r)
{
    fcl_attention_desc d = {
        .batch = take_size(r), .heads_q = take_size(r), .heads_kv = take_size(r),
        .len_q = take_size(r), .len_kv = take_size(r), .head_dim = take_size(r),
        .head_dim_v = take_size(r), .scale = take_scale(r),
        .causal = (fcl_causal)(take_u8(r) % 4), .mask_type = (fcl_mask_type)(take_u8(r) % 5),
        .mask_stride_batch = take_size(r), .mask_stride_head = take_size(r),
        .mask_stride_q = take_size(r), .layout = (fcl_layout)(take_u8(r) % 3),
        .dtype_q = (fcl_dtype)(take_u8(r) % 4), .dtype_kv = (fcl_dtype)(take_u8(r) % 4),
        .dtype_o = (fcl_dtype)(take_u8(r) % 4), .kv_splits = take_size(r)};
    if (take_u8(r) & 1) { /* the v0.2 fields */
        d.q_view = take_view(r), d.k_view = take_view(r), d.v_view = take_view(r);
        d.o_view = take_view(r);
        d.page_size = take_u8(r) % 2 ? take_size(r) : 0;
        d.num_pages = take_size(r), d.block_table_stride = take_size(r);
        d.softcap = take_u8(r) % 2 ? take_scale(r) : 0.0f;
        d.alibi_slopes_batch_stride = take_u8(r) % 2 ? take_size(r) : 0;
        d.alibi_from_mask = take_u8(r) % 2;
        d.window = take_u8(r) % 2, d.window_left = take_size(r), d.window_right = take_size(r);
    }
    fcl_attention_plan_info plan;
    check_status(fcl_attention_plan(ctx, &d, &plan));
    fcl_attention_io io = {.q = take_buffer(r, 0, 3), .k = take_buffer(r, 0, 3),
                           .v = take_buffer(r, 0, 3), .mask = take_buffer(r, 0, 3),
                           .out = take_buffer(r, 3, 3), .lse = take_buffer(r, 3, 3)};
    io.seqlens_kv = take_optional(r), io.cu_seqlens_q = take_optional(r);
    io.cu_seqlens_kv = take_optional(r), io.block_table = take_optional(r);
    io.alibi_slopes = take_optional(r), io.sinks = take_optional(r);
    io.leftpad_kv = take_optional(r), io.query_offsets = take_optional(r);
    cl_event done = NULL;
    fcl_status s = fcl_attention_run(ctx, &d, &io, 0, NULL, &done);
    check_status(s);
    if (s == FCL_SUCCESS && (clWaitForEvents(1, &done) != CL_SUCCESS || clReleaseEvent(done)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    if (take_u8(&r) & 1)
        fuzz_attention(&r);
    else
        fuzz_softmax(&r);
    check_inputs_unmodified();
    return 0;
}

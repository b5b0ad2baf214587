/* A decode loop over a paged KV cache, as an inference engine runs it: each step writes the
 * new token's K and V of every sequence into its page with fcl_kv_write (taking a fresh page
 * from the free list when the last one is full), then runs attention for the new token in
 * place on the cache, with per-sequence lengths, a block table, grouped-query heads and a
 * sliding window. Every step is checked against a float64 reference on the host.
 * `example_paged_decode q8_0` keeps the cache in ggml's q8_0 blocks (fcl_kv_write quantizes
 * each new token; attention reads the blocks in place): the check then allows for q8_0's
 * rounding of K and V. Uses only flashcl.h. */
#include <flashcl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BATCH = 3,      /* sequences decoded together */
    HEADS_Q = 8,
    HEADS_KV = 2,   /* GQA: 4 query heads share a kv head */
    DIM = 64,
    PAGE = 16,      /* tokens per page */
    PAGES = 32,     /* pages in the cache */
    MAX_PAGES = 8,  /* block-table row: pages a sequence may hold */
    WINDOW = 40,    /* a query sees its last WINDOW keys (Mistral's sliding window) */
    STEPS = 70
};
#define ROW (HEADS_KV * DIM) /* values per cache slot: [pages][PAGE][HEADS_KV][DIM] */

static float frand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* The float64 reference for query head h of sequence b, from the host copy of the cache. */
static void reference(const float *k, const float *v, const int32_t *table, int len,
                      const float *q, int h, double *out)
{
    const int hk = h / (HEADS_Q / HEADS_KV), first = len > WINDOW ? len - WINDOW : 0;
    double m = -INFINITY, sum = 0.0, score[MAX_PAGES * PAGE];
    for (int j = first; j < len; j++) {
        const float *kj = k + ((size_t)table[j / PAGE] * PAGE + j % PAGE) * ROW + hk * DIM;
        double dot = 0.0;
        for (int d = 0; d < DIM; d++)
            dot += (double)q[h * DIM + d] * kj[d];
        score[j] = dot / sqrt((double)DIM);
        m = score[j] > m ? score[j] : m;
    }
    for (int d = 0; d < DIM; d++)
        out[d] = 0.0;
    for (int j = first; j < len; j++) {
        const float *vj = v + ((size_t)table[j / PAGE] * PAGE + j % PAGE) * ROW + hk * DIM;
        double p = exp(score[j] - m);
        sum += p;
        for (int d = 0; d < DIM; d++)
            out[d] += p * vj[d];
    }
    for (int d = 0; d < DIM; d++)
        out[d] /= sum;
}

int main(int argc, char **argv)
{
    /* f32, or ggml's q8_0: a block of 32 values in 34 bytes (half d, then 32 int8) */
    const int q8 = argc > 1 && strcmp(argv[1], "q8_0") == 0;
    const fcl_kv_format format = q8 ? FCL_KV_Q8_0 : FCL_KV_F32;
    const size_t row_bytes = q8 ? DIM / 32 * 34 : DIM * sizeof(float); /* a head's row */
    fcl_context *ctx;
    cl_context cl;
    cl_command_queue queue;
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS) {
        fprintf(stderr, "%s\n", fcl_context_last_error(NULL));
        return 1;
    }
    fcl_context_get_cl(ctx, &cl, NULL, &queue);

    /* The cache lives on the device; the host keeps the values written only to check the
     * results. */
    static float k_host[PAGES * PAGE * ROW], v_host[PAGES * PAGE * ROW];
    float q[BATCH * HEADS_Q * DIM], out[BATCH * HEADS_Q * DIM], new_k[BATCH * ROW], new_v[BATCH * ROW];
    int32_t table[BATCH * MAX_PAGES] = {0}, lens[BATCH] = {0}, free_pages[PAGES], slots[BATCH];
    cl_int err = CL_SUCCESS;
    const size_t cache_bytes = (size_t)PAGES * PAGE * HEADS_KV * row_bytes;
    cl_mem k_cache = clCreateBuffer(cl, CL_MEM_READ_WRITE, cache_bytes, NULL, &err);
    cl_mem v_cache = clCreateBuffer(cl, CL_MEM_READ_WRITE, cache_bytes, NULL, &err);
    cl_mem new_k_buf = clCreateBuffer(cl, CL_MEM_READ_ONLY, sizeof new_k, NULL, &err);
    cl_mem new_v_buf = clCreateBuffer(cl, CL_MEM_READ_ONLY, sizeof new_v, NULL, &err);
    cl_mem slots_buf = clCreateBuffer(cl, CL_MEM_READ_ONLY, sizeof slots, NULL, &err);
    cl_mem q_buf = clCreateBuffer(cl, CL_MEM_READ_ONLY, sizeof q, NULL, &err);
    cl_mem out_buf = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, sizeof out, NULL, &err);
    cl_mem table_buf = clCreateBuffer(cl, CL_MEM_READ_ONLY, sizeof table, NULL, &err);
    cl_mem lens_buf = clCreateBuffer(cl, CL_MEM_READ_ONLY, sizeof lens, NULL, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "buffers: OpenCL error %d\n", err);
        return 1;
    }
    unsigned seed = 12345;
    for (int p = 0; p < PAGES; p++) /* the free list, shuffled: pages come in any order */
        free_pages[p] = p;
    for (int p = PAGES - 1; p > 0; p--) {
        int o = (int)((seed = seed * 1664525u + 1013904223u) >> 8) % (p + 1);
        int t = free_pages[p];
        free_pages[p] = free_pages[o], free_pages[o] = t;
    }
    int n_free = PAGES;

    /* The descriptor is the same every step: the lengths travel in lens_buf. len_kv is the
     * capacity of a sequence's block-table row; the window is bottom-right aligned. */
    const fcl_attention_desc desc = {
        .batch = BATCH, .heads_q = HEADS_Q, .heads_kv = HEADS_KV, .len_q = 1,
        .len_kv = MAX_PAGES * PAGE, .head_dim = DIM, .causal = FCL_CAUSAL_BOTTOM_RIGHT,
        .layout = FCL_LAYOUT_BLHD, /* [pages][PAGE][heads][dim], vLLM's layout */
        .page_size = PAGE, .num_pages = PAGES, .block_table_stride = MAX_PAGES,
        .window = 1, .window_left = WINDOW - 1, .window_right = 0,
        .format_k = format, .format_v = format};
    const fcl_attention_io io = {.q = q_buf, .k = k_cache, .v = v_cache, .out = out_buf,
                                 .seqlens_kv = lens_buf, .block_table = table_buf};
    /* The writer: token b of a step (sequence b's new one) to slot page * PAGE + position,
     * vLLM's slot mapping; -1 skips a sequence that has not started. */
    const fcl_kv_write_desc write = {
        .tokens = BATCH, .heads_kv = HEADS_KV, .head_dim = DIM, .dtype_in = FCL_DTYPE_F32,
        .page_size = PAGE, .num_pages = PAGES, .format_k = format, .format_v = format,
        .layout = FCL_LAYOUT_BLHD};
    const fcl_kv_write_io write_io = {.k_in = new_k_buf, .v_in = new_v_buf, .slots = slots_buf,
                                      .k = k_cache, .v = v_cache};
    double worst = 0.0;
    for (int step = 0; step < STEPS; step++) {
        for (int b = 0; b < BATCH; b++) {
            slots[b] = -1;
            if (step < b * 7)
                continue; /* sequences start at different steps, so lengths differ */
            if (lens[b] % PAGE == 0) /* the last page is full: take a new one */
                table[b * MAX_PAGES + lens[b] / PAGE] = free_pages[--n_free];
            const int32_t page = table[b * MAX_PAGES + lens[b] / PAGE];
            slots[b] = page * PAGE + lens[b] % PAGE;
            for (int e = 0; e < ROW; e++)
                new_k[b * ROW + e] = frand(&seed), new_v[b * ROW + e] = frand(&seed);
            memcpy(k_host + (size_t)slots[b] * ROW, new_k + b * ROW, ROW * sizeof(float));
            memcpy(v_host + (size_t)slots[b] * ROW, new_v + b * ROW, ROW * sizeof(float));
            lens[b]++;
        }
        /* Blocking writes (the host arrays are reused next step), then the cache's new rows;
         * the in-order queue runs attention after them. */
        clEnqueueWriteBuffer(queue, new_k_buf, CL_TRUE, 0, sizeof new_k, new_k, 0, NULL, NULL);
        clEnqueueWriteBuffer(queue, new_v_buf, CL_TRUE, 0, sizeof new_v, new_v, 0, NULL, NULL);
        clEnqueueWriteBuffer(queue, slots_buf, CL_TRUE, 0, sizeof slots, slots, 0, NULL, NULL);
        cl_event written;
        fcl_status s = fcl_kv_write(ctx, &write, &write_io, 0, NULL, &written);
        if (s != FCL_SUCCESS) {
            fprintf(stderr, "step %d: %s: %s\n", step, fcl_status_string(s), fcl_context_last_error(ctx));
            return 1;
        }
        for (int e = 0; e < BATCH * HEADS_Q * DIM; e++)
            q[e] = frand(&seed);
        clEnqueueWriteBuffer(queue, q_buf, CL_TRUE, 0, sizeof q, q, 0, NULL, NULL);
        clEnqueueWriteBuffer(queue, table_buf, CL_TRUE, 0, sizeof table, table, 0, NULL, NULL);
        clEnqueueWriteBuffer(queue, lens_buf, CL_TRUE, 0, sizeof lens, lens, 0, NULL, NULL);
        cl_event done;
        s = fcl_attention_run(ctx, &desc, &io, 1, &written, &done);
        clReleaseEvent(written);
        if (s != FCL_SUCCESS) {
            fprintf(stderr, "step %d: %s: %s\n", step, fcl_status_string(s), fcl_context_last_error(ctx));
            return 1;
        }
        clEnqueueReadBuffer(queue, out_buf, CL_TRUE, 0, sizeof out, out, 1, &done, NULL);
        clReleaseEvent(done);
        for (int b = 0; b < BATCH; b++)
            for (int h = 0; h < HEADS_Q; h++) {
                double want[DIM];
                const float *got = out + (b * HEADS_Q + h) * DIM; /* [batch][1][heads][dim] */
                if (lens[b] == 0) {
                    for (int d = 0; d < DIM; d++) /* an empty sequence gives 0 */
                        worst = fmax(worst, fabs((double)got[d]));
                    continue;
                }
                reference(k_host, v_host, table + b * MAX_PAGES, lens[b], q + b * HEADS_Q * DIM, h, want);
                for (int d = 0; d < DIM; d++)
                    worst = fmax(worst, fabs(got[d] - want[d]));
            }
    }
    /* q8_0 rounds each of K's and V's values by up to d / 2 (d = a block's largest |x| / 127,
     * here below 1/127): the outputs, averages of V, move by about as much. */
    const double tolerance = q8 ? 1e-2 : 5e-5;
    printf("paged decode (%s cache): %d steps, %d sequences (lengths %d, %d, %d), %d of %d pages "
           "used; max |error| vs float64 over the values written %.2e (allowed %.0e)\n",
           q8 ? "q8_0" : "f32", STEPS, BATCH, lens[0], lens[1], lens[2], PAGES - n_free, PAGES,
           worst, tolerance);
    cl_mem all[] = {k_cache, v_cache, q_buf, out_buf, table_buf, lens_buf, new_k_buf, new_v_buf,
                    slots_buf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    fcl_context_destroy(ctx);
    return worst <= tolerance ? 0 : 1;
}

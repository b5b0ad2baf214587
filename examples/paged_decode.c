/* A decode loop over a paged KV cache, as an inference engine runs it: each step appends the
 * new token's K and V of every sequence into its page (taking a fresh page from the free
 * list when the last one is full), then runs attention for the new token in place on the
 * cache, with per-sequence lengths, a block table, grouped-query heads and a sliding window.
 * Every step is checked against a float64 reference on the host. Uses only flashcl.h. */
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
#define ROW (HEADS_KV * DIM) /* floats per cache slot: [pages][PAGE][HEADS_KV][DIM] */

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

int main(void)
{
    fcl_context *ctx;
    cl_context cl;
    cl_command_queue queue;
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS) {
        fprintf(stderr, "%s\n", fcl_context_last_error(NULL));
        return 1;
    }
    fcl_context_get_cl(ctx, &cl, NULL, &queue);

    /* The cache lives on the device; the host keeps a copy only to check the results. */
    static float k_host[PAGES * PAGE * ROW], v_host[PAGES * PAGE * ROW];
    float q[BATCH * HEADS_Q * DIM], out[BATCH * HEADS_Q * DIM], new_k[ROW], new_v[ROW];
    int32_t table[BATCH * MAX_PAGES] = {0}, lens[BATCH] = {0}, free_pages[PAGES];
    cl_int err = CL_SUCCESS;
    cl_mem k_cache = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof k_host, NULL, &err);
    cl_mem v_cache = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof v_host, NULL, &err);
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
        .window = 1, .window_left = WINDOW - 1, .window_right = 0};
    const fcl_attention_io io = {.q = q_buf, .k = k_cache, .v = v_cache, .out = out_buf,
                                 .seqlens_kv = lens_buf, .block_table = table_buf};
    double worst = 0.0;
    for (int step = 0; step < STEPS; step++) {
        for (int b = 0; b < BATCH; b++) {
            if (step < b * 7)
                continue; /* sequences start at different steps, so lengths differ */
            if (lens[b] % PAGE == 0) /* the last page is full: take a new one */
                table[b * MAX_PAGES + lens[b] / PAGE] = free_pages[--n_free];
            const int32_t page = table[b * MAX_PAGES + lens[b] / PAGE];
            const size_t slot = ((size_t)page * PAGE + lens[b] % PAGE) * ROW;
            for (int e = 0; e < ROW; e++)
                new_k[e] = frand(&seed), new_v[e] = frand(&seed);
            memcpy(k_host + slot, new_k, sizeof new_k);
            memcpy(v_host + slot, new_v, sizeof new_v);
            /* Non-blocking: the host copy of the slot is not written again. */
            clEnqueueWriteBuffer(queue, k_cache, CL_FALSE, slot * sizeof(float), sizeof new_k,
                                 k_host + slot, 0, NULL, NULL);
            clEnqueueWriteBuffer(queue, v_cache, CL_FALSE, slot * sizeof(float), sizeof new_v,
                                 v_host + slot, 0, NULL, NULL);
            lens[b]++;
        }
        for (int e = 0; e < BATCH * HEADS_Q * DIM; e++)
            q[e] = frand(&seed);
        /* Blocking writes: the host arrays are reused next step. */
        clEnqueueWriteBuffer(queue, q_buf, CL_TRUE, 0, sizeof q, q, 0, NULL, NULL);
        clEnqueueWriteBuffer(queue, table_buf, CL_TRUE, 0, sizeof table, table, 0, NULL, NULL);
        clEnqueueWriteBuffer(queue, lens_buf, CL_TRUE, 0, sizeof lens, lens, 0, NULL, NULL);
        cl_event done;
        fcl_status s = fcl_attention_run(ctx, &desc, &io, 0, NULL, &done);
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
    printf("paged decode: %d steps, %d sequences (lengths %d, %d, %d), %d of %d pages used; "
           "max |error| vs float64 %.2e\n",
           STEPS, BATCH, lens[0], lens[1], lens[2], PAGES - n_free, PAGES, worst);
    cl_mem all[] = {k_cache, v_cache, q_buf, out_buf, table_buf, lens_buf};
    for (int i = 0; i < 6; i++)
        clReleaseMemObject(all[i]);
    fcl_context_destroy(ctx);
    return worst <= 5e-5 ? 0 : 1;
}

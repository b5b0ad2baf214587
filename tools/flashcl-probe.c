/* flashcl-probe: lists every OpenCL device with the capabilities flashcl reads and what
 * it would choose there. Human output by default, --json for scripts. */
#include "flashcl.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: flashcl-probe [--json] [-d DEVICE]\n"
    "  Lists every OpenCL platform and device, the capabilities flashcl plans from,\n"
    "  the softmax algorithm it would choose for a few shapes, and the attention tiles.\n"
    "  -d DEVICE  only this device: \"P:D\", \"gpu\", \"cpu\" or part of its name\n"
    "  --json     one JSON document on stdout\n";

/* Shapes whose plan is shown: (rows, cols). */
static const size_t examples[][2] = {{1, 1000},     {65536, 1024}, {4096, 4096},  {1, 200001},
                                     {16, 1048576}, {64, 4194304}, {4096, 65536}};
#define N_EXAMPLES (sizeof examples / sizeof examples[0])

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static const char *type_name(cl_device_type t)
{
    return (t & CL_DEVICE_TYPE_GPU) ? "gpu" : (t & CL_DEVICE_TYPE_CPU) ? "cpu"
           : (t & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator" : "other";
}

static fcl_softmax_algo example_plan(fcl_context *ctx, size_t e)
{
    fcl_softmax_desc d = {.rows = examples[e][0], .cols = examples[e][1]};
    fcl_softmax_algo a = FCL_SOFTMAX_AUTO;
    fcl_softmax_plan(ctx, &d, &a);
    return a;
}

/* Attention examples: prefill and decode, at head_dim 64 and 128. */
static const size_t attention_examples[][7] = {
    /* batch x heads, len_q, len_kv, head_dim, head_dim_v (0: head_dim), heads per kv head,
     * K/V format (0: f16): prefill, decode (GQA 32/8 over a 16-token paged cache: the engine
     * preset of flashcl-bench), the same over a q8_0 cache, MLA decode; f16, as inference
     * engines store them */
    {64, 4096, 4096, 64, 0, 1, 0}, {64, 4096, 4096, 128, 0, 1, 0}, {256, 1, 32768, 128, 0, 4, 0},
    {256, 1, 32768, 128, 0, 4, FCL_KV_Q8_0}, {128, 1, 8192, 576, 512, 16, 0}};
#define N_ATTENTION_EXAMPLES (sizeof attention_examples / sizeof attention_examples[0])

/* The plan for example e; on failure (a call flashcl would refuse here) the status. */
static fcl_status attention_example_plan(fcl_context *ctx, size_t e, fcl_attention_plan_info *p)
{
    const size_t *x = attention_examples[e];
    fcl_attention_desc d = {.batch = 1, .heads_q = x[0], .heads_kv = x[0] / x[5], .len_q = x[1],
                            .len_kv = x[2], .head_dim = x[3], .head_dim_v = x[4],
                            .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16,
                            .format_k = (fcl_kv_format)x[6], .format_v = (fcl_kv_format)x[6]};
    memset(p, 0, sizeof *p);
    return fcl_attention_plan(ctx, &d, p);
}

static void print_human(const char *spec, const fcl_device_info *i, fcl_context *ctx)
{
    printf("device %s: %s\n", spec, i->name);
    printf("  platform            %s\n", i->platform_name);
    printf("  vendor              %s (0x%x), driver %s\n", i->vendor, i->vendor_id,
           i->driver_version);
    printf("  version             %s; %s\n", i->device_version, i->opencl_c_version);
    printf("  type                %s, %u compute units\n", type_name(i->type), i->compute_units);
    printf("  local memory        %llu bytes (%s)\n", (unsigned long long)i->local_mem_size,
           i->local_mem_is_global ? "global: emulated in ordinary memory" : "local");
    printf("  global memory       %llu bytes, max allocation %llu\n",
           (unsigned long long)i->global_mem_size, (unsigned long long)i->max_alloc_size);
    printf("  work-group          device max %zu, kernels allow %zu\n", i->max_work_group_size,
           i->kernel_work_group_size);
    printf("  float vector width  %u; fp16 %s, fp64 %s\n", i->preferred_vector_width_float,
           i->has_fp16 ? "yes" : "no", i->has_fp64 ? "yes" : "no");
    if (i->loop_iteration_cap)
        printf("  loop iterations     at most %u per work-item in all (the driver stops loops "
               "there): every plan keeps within it\n", i->loop_iteration_cap);
    if (i->local_mem_scale > 1 || i->local_mem_reserved)
        printf("  local memory use    the driver counts %u x what a kernel declares + %llu bytes "
               "(local_mem_scale, local_mem_reserved); tiles are planned within that count\n", i->local_mem_scale,
               (unsigned long long)i->local_mem_reserved);
    printf("  kernels             %s; fused kernel uses %llu bytes of local memory\n",
           i->program_from_cache ? "loaded from the program cache"
           : i->program_cache_usable ? "compiled from source"
                                     : "compiled (the driver's own cache; flashcl's is not used here)",
           (unsigned long long)i->kernel_local_mem_size);
    printf("  tuning              %s\n", i->tuning);
    printf("  softmax plan        %zu work-items per row, %zu-wide vectors; FUSED holds rows of up "
           "to %zu columns\n",
           i->softmax_work_group_size, i->softmax_vector_width, i->softmax_fused_max_cols);
    if (i->softmax_block_cols)
        printf("                      rows of up to %zu columns in registers (%zu per work-item, "
               "%zu or more work-items per row)\n",
               i->softmax_block_cols, i->softmax_block_items, i->softmax_block_min_lanes);
    if (i->softmax_nv_cols)
        printf("                      NVIDIA: rows of up to %zu columns in registers, reduced by "
               "warp shuffles (cols and strides multiples of 16 bytes)\n",
               i->softmax_nv_cols);
    if (i->softmax_rows_per_item)
        printf("                      local memory is ordinary memory here: ONLINE runs one "
               "work-item per row, and AUTO prefers it to FUSED\n");
    for (size_t e = 0; e < N_EXAMPLES; e++)
        printf("    %7zu x %-8zu -> %s\n", examples[e][0], examples[e][1],
               fcl_softmax_algo_name(example_plan(ctx, e)));
    if (i->attention_mma)
        printf("  NVIDIA kernels      tensor-core prefill (f16, bf16, f32 by 3xTF32), shuffle decode and softmax "
               "(compute capability %u.%u; FLASHCL_TUNE=attention_mma=0 turns them off)\n",
               i->nv_compute_capability / 10, i->nv_compute_capability % 10);
    else
        printf("  NVIDIA kernels      not used: %s\n", i->attention_mma_because);
    printf("  attention tiles\n");
    for (int b = 0; b < (int)(sizeof i->attention_tiles / sizeof i->attention_tiles[0]); b++) {
        const struct fcl_attention_tile *t = &i->attention_tiles[b];
        if (!t->block_q) {
            printf("    head_dim <= %-3zu  -> %zu query rows per work-item (rows)%s%s%s\n",
                   t->max_head_dim, t->rows_block_q, t->rows_because[0] ? ": " : "", t->rows_because,
                   t->rows_because[0] ? " (a fallback)" : "");
            continue;
        }
        printf("    head_dim <= %-3zu  -> %zu queries x %zu keys, %zu work-items, ", t->max_head_dim,
               t->block_q, t->block_kv, t->work_group_size);
        if (t->local_mem_size) /* 0: the bucket has not been used, so not built */
            printf("%llu bytes of local memory", (unsigned long long)t->local_mem_size);
        else
            printf("as planned (built on first use)");
        if (i->attention_tiles[b].decode_block_kv)
            printf("; decoding: a query per group, %zu keys a step",
                   i->attention_tiles[b].decode_block_kv);
        printf("\n");
    }
    for (size_t e = 0; e < N_ATTENTION_EXAMPLES; e++) {
        fcl_attention_plan_info p;
        const size_t *x = attention_examples[e];
        printf("    %s, heads %zu/%zu, len_q %zu, len_kv %zu, head dims %zu/%zu -> ",
               x[6] ? "q8_0 K/V" : "f16", x[0], x[0] / x[5], x[1], x[2], x[3], x[4] ? x[4] : x[3]);
        if (attention_example_plan(ctx, e, &p) != FCL_SUCCESS)
            printf("refused: %s\n", fcl_context_last_error(ctx));
        else
            printf("%s, %zu x %zu, %zu work-items, %zu key split%s\n", fcl_attention_path_name(p.path),
                   p.block_q, p.block_kv, p.work_group_size, p.kv_splits, p.kv_splits == 1 ? "" : "s");
    }
}

static void print_json(const char *spec, const fcl_device_info *i, fcl_context *ctx)
{
    printf("{\"id\": ");
    json_string(spec);
    printf(", \"name\": ");
    json_string(i->name);
    printf(", \"platform\": ");
    json_string(i->platform_name);
    printf(", \"vendor\": ");
    json_string(i->vendor);
    printf(", \"vendor_id\": %u, \"driver_version\": ", i->vendor_id);
    json_string(i->driver_version);
    printf(", \"opencl_c_version\": ");
    json_string(i->opencl_c_version);
    printf(", \"type\": \"%s\", \"compute_units\": %u", type_name(i->type), i->compute_units);
    printf(", \"local_mem_size\": %llu, \"local_mem_type\": \"%s\", \"local_mem_scale\": %u"
           ", \"local_mem_reserved\": %llu",
           (unsigned long long)i->local_mem_size, i->local_mem_is_global ? "global" : "local",
           i->local_mem_scale, (unsigned long long)i->local_mem_reserved);
    printf(", \"loop_iteration_cap\": %u", i->loop_iteration_cap);
    printf(", \"nv_compute_capability\": %u, \"attention_mma\": %s, \"attention_mma_because\": ",
           i->nv_compute_capability, i->attention_mma ? "true" : "false");
    json_string(i->attention_mma_because);
    printf(", \"softmax_nv_cols\": %zu", i->softmax_nv_cols);
    printf(", \"global_mem_size\": %llu, \"max_alloc_size\": %llu",
           (unsigned long long)i->global_mem_size, (unsigned long long)i->max_alloc_size);
    printf(", \"max_work_group_size\": %zu, \"kernel_work_group_size\": %zu",
           i->max_work_group_size, i->kernel_work_group_size);
    printf(", \"kernel_local_mem_size\": %llu, \"preferred_vector_width_float\": %u",
           (unsigned long long)i->kernel_local_mem_size, i->preferred_vector_width_float);
    printf(", \"tuning\": ");
    json_string(i->tuning);
    printf(", \"fp16\": %s, \"fp64\": %s, \"program_from_cache\": %s", i->has_fp16 ? "true" : "false",
           i->has_fp64 ? "true" : "false", i->program_from_cache ? "true" : "false");
    printf(", \"softmax\": {\"work_group_size\": %zu, \"vector_width\": %zu, "
           "\"fused_max_cols\": %zu, \"block_cols\": %zu, \"block_items\": %zu, "
           "\"block_min_lanes\": %zu, \"rows_per_item\": %s, \"plans\": [",
           i->softmax_work_group_size, i->softmax_vector_width, i->softmax_fused_max_cols,
           i->softmax_block_cols, i->softmax_block_items, i->softmax_block_min_lanes,
           i->softmax_rows_per_item ? "true" : "false");
    for (size_t e = 0; e < N_EXAMPLES; e++)
        printf("%s{\"rows\": %zu, \"cols\": %zu, \"algo\": \"%s\"}", e ? ", " : "",
               examples[e][0], examples[e][1], fcl_softmax_algo_name(example_plan(ctx, e)));
    printf("]}, \"attention\": {\"tiles\": [");
    for (int b = 0; b < (int)(sizeof i->attention_tiles / sizeof i->attention_tiles[0]); b++) {
        const struct fcl_attention_tile *t = &i->attention_tiles[b];
        printf("%s{\"max_head_dim\": %zu, \"block_q\": %zu, \"block_kv\": %zu, "
               "\"work_group_size\": %zu, \"rows_block_q\": %zu, \"local_mem_size\": %llu, "
               "\"decode_block_kv\": %zu, \"rows_because\": ",
               b ? ", " : "", t->max_head_dim, t->block_q, t->block_kv, t->work_group_size,
               t->rows_block_q, (unsigned long long)t->local_mem_size, t->decode_block_kv);
        json_string(t->rows_because);
        printf("}");
    }
    printf("], \"plans\": [");
    for (size_t e = 0; e < N_ATTENTION_EXAMPLES; e++) {
        fcl_attention_plan_info p;
        const size_t *x = attention_examples[e];
        const int refused = attention_example_plan(ctx, e, &p) != FCL_SUCCESS;
        printf("%s{\"heads\": %zu, \"heads_kv\": %zu, \"len_q\": %zu, \"len_kv\": %zu, "
               "\"head_dim\": %zu, \"head_dim_v\": %zu, \"kv\": \"%s\", \"path\": \"%s\", "
               "\"block_q\": %zu, \"block_kv\": %zu, \"kv_splits\": %zu}",
               e ? ", " : "", x[0], x[0] / x[5], x[1], x[2], x[3], x[4] ? x[4] : x[3],
               x[6] ? "q8_0" : "f16",
               refused ? "refused" : fcl_attention_path_name(p.path), p.block_q, p.block_kv,
               p.kv_splits);
    }
    printf("]}}");
}

/* Probes one device; returns 0 on success. */
static int probe(const char *spec, int json, int first)
{
    fcl_context_options opts = {.device = spec};
    fcl_context *ctx = NULL;
    fcl_device_info info;
    fcl_status s = fcl_context_create(&opts, &ctx);
    if (json && !first)
        printf(",\n  ");
    if (s != FCL_SUCCESS) {
        if (json) {
            printf("{\"id\": ");
            json_string(spec);
            printf(", \"error\": ");
            json_string(fcl_context_last_error(NULL));
            printf("}");
        }
        fprintf(stderr, "flashcl-probe: device %s: %s: %s\n", spec, fcl_status_string(s),
                fcl_context_last_error(NULL));
        return 1;
    }
    /* Planning the examples builds the kernels they run (softmax's, and the attention
     * kernels of their head-dim buckets), so that the limits and tiles shown are as built. */
    example_plan(ctx, 0);
    for (size_t e = 0; e < N_ATTENTION_EXAMPLES; e++) {
        fcl_attention_plan_info p;
        attention_example_plan(ctx, e, &p);
    }
    fcl_context_device_info(ctx, &info);
    if (json)
        print_json(spec, &info, ctx);
    else
        print_human(spec, &info, ctx);
    fcl_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int json = 0, failures = 0, count = 0;
    const char *only = NULL;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--json") == 0)
            json = 1;
        else if (strcmp(argv[a], "-d") == 0 && a + 1 < argc)
            only = argv[++a];
        else {
            fputs(usage, strcmp(argv[a], "--help") == 0 ? stdout : stderr);
            return strcmp(argv[a], "--help") == 0 ? 0 : 2;
        }
    }
    cl_platform_id platforms[16];
    cl_uint n_platforms = 0;
    if (clGetPlatformIDs(16, platforms, &n_platforms) != CL_SUCCESS || n_platforms == 0) {
        fprintf(stderr, "flashcl-probe: no OpenCL platform found: install an OpenCL driver "
                        "(for the CPU: the Debian package pocl-opencl-icd)\n");
        return 1;
    }
    if (json)
        printf("{\"flashcl_version\": \"%s\", \"devices\": [\n  ", fcl_version_string());
    if (only) {
        failures += probe(only, json, 1);
        count = 1;
    } else {
        for (cl_uint p = 0; p < n_platforms && p < 16; p++) {
            cl_uint n_devices = 0;
            if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &n_devices) != CL_SUCCESS)
                continue;
            for (cl_uint d = 0; d < n_devices; d++) {
                char spec[32];
                snprintf(spec, sizeof spec, "%u:%u", p, d);
                failures += probe(spec, json, count == 0);
                count++;
            }
        }
    }
    if (json)
        printf("\n]}\n");
    if (count == 0) {
        fprintf(stderr, "flashcl-probe: the OpenCL platforms list no device\n");
        return 1;
    }
    return failures ? 1 : 0;
}

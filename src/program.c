/* Program build: the source compiled for a device is a prelude of #defines planned from the
 * probed capabilities, then the embedded .cl files. The context's first program holds
 * softmax.cl once per storage type and the merge; each head-dim bucket's attention families
 * (once per feature set) are a program of their own, built on the bucket's first use, so that
 * a context compiles only what its calls run. Each binary goes through the on-disk cache of
 * cache.c. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generated at build time from the cl/ kernel files (cmake/embed_cl.cmake). */
extern const char fcl_cl_common[];
extern const char fcl_cl_softmax_args[];
extern const char fcl_cl_softmax_common[];
extern const char fcl_cl_softmax[];
extern const char fcl_cl_attention_args[];
extern const char fcl_cl_attention_common[];
extern const char fcl_cl_attention_tile[];
extern const char fcl_cl_attention_decode[];
extern const char fcl_cl_attention_rows[];
extern const char fcl_cl_attention_merge[];
extern const char fcl_cl_attention_mma_nv[];
extern const char fcl_cl_mma_check_nv[];
extern const char fcl_cl_attention_decode_nv[];
extern const char fcl_cl_common_nv[];
extern const char fcl_cl_softmax_nv[];

#define FCL_BASE_BUILD_OPTIONS FCL_CL_STD

static const char *const dtype_suffix[FCL_DTYPE_COUNT] = {"f32", "f16", "bf16"};
static const char *const softmax_kernel_names[FCL_K_SOFTMAX_COUNT] = {
    "softmax_fused", "softmax_online", "softmax_split_stats", "softmax_split_write",
    "softmax_rows", "softmax_block"};

typedef fcl_kernel_plan kernel_plan;

/* The parts a program's source is made of: the first program's two, one per head-dim bucket,
 * and for offline compilers all of them in one source. */
#define PART_SOFTMAX 1u
#define PART_MERGE 2u
#define PART_BUCKET(b) (4u << (b))
#define PARTS_FIRST (PART_SOFTMAX | PART_MERGE)
#define PARTS_ALL (PARTS_FIRST | (PART_BUCKET(FCL_ATTENTION_BUCKETS) - PART_BUCKET(0)))

/* ---- growing string ---- */
typedef struct text {
    char *s;
    size_t len, cap;
    int failed;
} text;

static void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = t->cap - t->len;
        /* va_start is just above: clang-tidy 14's analyzer loses it (a false positive). */
        // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
        int n = t->failed ? 0 : vsnprintf(t->s ? t->s + t->len : NULL, room, fmt, ap);
        va_end(ap);
        if (t->failed || n < 0) {
            t->failed = 1;
            return;
        }
        if ((size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = 2 * (t->cap + (size_t)n) + 64;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->failed = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

/* Whether the decode kernel is built for a feature set: not for the score modifiers, whose
 * calls its all-feature build serves (the tile kernel needs that build for its registers). */
static int decode_built_for(int variant) { return variant != FCL_ATTENTION_SCORES; }

/* The kernels of one head-dim bucket and feature set (variant): the tile kernel (with the
 * decode kernel where it takes the bucket's dims and is built for the set), or the rows
 * kernel. */
static void add_attention_kernels(text *t, const kernel_plan *plan, int b, int variant)
{
    size_t dim = fcl_attention_bucket_dim(b);
    text_add(t, "#define FA_NAME d%zu%s\n#define FA_D %zu\n#define FA_FEATURES 0x%xu\n", dim,
             fcl_attention_variant_suffix(variant), dim, fcl_attention_variant_features(variant));
    const struct fcl_attention_tile *tile = &plan->tile[b];
    if (!tile->block_q) {
        text_add(t, "#define FA_RQ %zu\n#line 1 \"attention_rows.cl\"\n%s\n#undef FA_RQ\n",
                 tile->rows_block_q, fcl_cl_attention_rows);
    } else {
        size_t items_q = fcl_attention_tile_items_q(tile->work_group_size);
        text_add(t, "#define FA_BQ %zu\n#define FA_BK %zu\n#define FA_TQ %zu\n#define FA_TK %zu\n"
                    "#define FA_PREFETCH %d\n#define FA_PV_VEC %d\n"
                    "#line 1 \"attention_tile.cl\"\n%s\n",
                 tile->block_q, tile->block_kv, items_q, tile->work_group_size / items_q,
                 fcl_attention_tile_prefetch(plan->attention_prefetch, tile->block_q,
                                             tile->work_group_size),
                 plan->attention_pv_vec, fcl_cl_attention_tile);
        if (decode_built_for(variant))
            /* for one query head, and for GQA groups */
            text_add(t, "#define FA_DEC_G 1\n#line 1 \"attention_decode.cl\"\n%s\n#undef FA_DEC_G\n"
                        "#define FA_DEC_G %d\n#line 1 \"attention_decode.cl\"\n%s\n#undef FA_DEC_G\n",
                     fcl_cl_attention_decode, FA_DEC_HEADS, fcl_cl_attention_decode);
        text_add(t, "#undef FA_BQ\n#undef FA_BK\n#undef FA_TQ\n#undef FA_TK\n#undef FA_PREFETCH\n"
                    "#undef FA_PV_VEC\n");
    }
    text_add(t, "#undef FA_NAME\n#undef FA_D\n#undef FA_FEATURES\n");
}

/* The source of a program of the given parts. A bucket's program has only the prelude's
 * defines its kernels read, so that it does not change with the softmax kernels' plan. */
static char *program_source(const kernel_plan *plan, unsigned parts)
{
    text t = {0};
    if (parts & PART_SOFTMAX)
        text_add(&t, "/* flashcl prelude: planned for this device */\n#define FCL_LWS %zu\n"
                     "#define FCL_VEC %zu\n#define FCL_BLOCK_ITEMS %zu\n#define FCL_FORCE_INLINE %d\n",
                 plan->work_group_size, plan->vector_width, plan->block_items, plan->force_inline);
    else
        text_add(&t, "/* flashcl prelude: planned for this device */\n#define FCL_VEC %zu\n"
                     "#define FCL_FORCE_INLINE %d\n",
                 plan->vector_width, plan->force_inline);
    text_add(&t, "#line 1 \"common.cl\"\n%s\n", fcl_cl_common);
    if (parts & PART_SOFTMAX) {
        text_add(&t, "#line 1 \"softmax_args.h\"\n%s\n#line 1 \"softmax_common.cl\"\n%s\n",
                 fcl_cl_softmax_args, fcl_cl_softmax_common);
        for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++)
            text_add(&t, "#define FCL_DT %s\n#line 1 \"softmax.cl\"\n%s\n#undef FCL_DT\n",
                     dtype_suffix[dt], fcl_cl_softmax);
    }
    if (parts & ~PART_SOFTMAX)
        text_add(&t, "#line 1 \"attention_args.h\"\n%s\n#line 1 \"attention_common.cl\"\n%s\n",
                 fcl_cl_attention_args, fcl_cl_attention_common);
    for (int b = 0; b < FCL_ATTENTION_BUCKETS; b++) {
        if (!(parts & PART_BUCKET(b)))
            continue;
        add_attention_kernels(&t, plan, b, FCL_ATTENTION_ALL);
        if (plan->tile[b].block_q) /* the rows kernel has only ALL */
            for (int v = 0; v < FCL_ATTENTION_ALL; v++)
                add_attention_kernels(&t, plan, b, v);
    }
    if (parts & PART_MERGE)
        text_add(&t, "#define FA_FEATURES 0x%xu\n#line 1 \"attention_merge.cl\"\n%s\n"
                     "#undef FA_FEATURES\n",
                 FA_FEATURES_ALL, fcl_cl_attention_merge);
    if (t.failed) {
        free(t.s);
        return NULL;
    }
    return t.s;
}

/* The device binary of a built program (malloc'd), or NULL. */
static unsigned char *program_binary(cl_program program, size_t *len)
{
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) !=
            CL_SUCCESS ||
        size == 0)
        return NULL;
    unsigned char *binary = malloc(size);
    if (binary &&
        clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof binary, &binary, NULL) != CL_SUCCESS) {
        free(binary);
        return NULL;
    }
    *len = size;
    return binary;
}

/* ---- building ---- */

static void append_build_log(fcl_context *ctx, cl_program program)
{
    size_t n = 0;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) !=
            CL_SUCCESS ||
        n == 0)
        return;
    char *log = malloc(n + 1);
    if (!log)
        return;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, n, log, NULL) ==
        CL_SUCCESS) {
        log[n] = '\0';
        fcl_append_error(ctx, "\nbuild log:\n");
        fcl_append_error(ctx, log);
    }
    free(log);
}

static cl_program build_from_binary(fcl_context *ctx, const char *options,
                                    const unsigned char *binary, size_t len)
{
    cl_int err, binary_status;
    cl_program p = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &len, &binary,
                                             &binary_status, &err);
    if (err != CL_SUCCESS || binary_status != CL_SUCCESS)
        return NULL;
    if (clBuildProgram(p, 1, &ctx->device, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static fcl_status build_from_source(fcl_context *ctx, const char *options, const char *source,
                                    cl_program *out)
{
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx->cl_ctx, 1, &source, NULL, &err);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "clCreateProgramWithSource");
    err = clBuildProgram(p, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        fcl_status s = fcl_fail_cl(ctx, err, "building the kernels for this device");
        append_build_log(ctx, p);
        clReleaseProgram(p);
        return s == FCL_ERROR_OPENCL ? FCL_ERROR_BUILD_FAILED : s;
    }
    *out = p;
    return FCL_SUCCESS;
}

/* *program built from source (the caller's, freed here), from the cache when it holds a
 * valid binary; *from_cache (where not NULL) says which. */
static fcl_status load_or_build(fcl_context *ctx, char *source, const fcl_build_setup *setup,
                                cl_program *program, int *from_cache)
{
    fcl_status s = FCL_ERROR_OUT_OF_HOST_MEMORY;
    char path[4096];
    char *identity = NULL;
    if (!source)
        return fcl_fail(ctx, s, "no host memory for the kernel source");
    const char *cache_dir = setup->cache_dir;
    int use_cache = setup->use_cache && (identity = fcl_cache_identity(&ctx->info, setup->options, source)) &&
                    fcl_cache_path(path, sizeof path, cache_dir, identity) == 0;

    if (use_cache) {
        size_t len = 0;
        unsigned char *binary = fcl_cache_load(path, identity, &len);
        if (binary) {
            *program = build_from_binary(ctx, setup->options, binary, len);
            free(binary);
        }
    }
    if (from_cache)
        *from_cache = *program != NULL;
    s = FCL_SUCCESS;
    if (!*program) {
        s = build_from_source(ctx, setup->options, source, program);
        if (s == FCL_SUCCESS && use_cache) {
            size_t len = 0;
            unsigned char *binary = program_binary(*program, &len);
            if (binary)
                fcl_cache_store(cache_dir, path, identity, binary, len);
            free(binary);
        }
    }
    free(identity);
    free(source);
    return s;
}

static void release_kernel(cl_kernel *k)
{
    if (*k)
        clReleaseKernel(*k);
    *k = NULL;
}

/* A head-dim bucket's NVIDIA kernels and their program. */
static void release_mma_bucket(fcl_context *ctx, int b)
{
    for (int t = 0; t < FCL_MMA_KINDS; t++) {
        release_kernel(&ctx->attention_mma[b][t]);
        release_kernel(&ctx->attention_mma_rows[b][t]);
    }
    for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++)
        release_kernel(&ctx->attention_decode_nv[b][v]);
    if (ctx->mma_bucket_program[b]) {
        clReleaseProgram(ctx->mma_bucket_program[b]);
        ctx->mma_bucket_program[b] = NULL;
    }
    ctx->mma_bucket_state[b] = 0;
}

/* The NVIDIA kernels and their programs. */
static void release_mma_kernels(fcl_context *ctx)
{
    for (int b = 0; b < FCL_MMA_BUCKETS; b++)
        release_mma_bucket(ctx, b);
    for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++) {
        for (int b = 0; b < FCL_SOFTMAX_NV_BUILDS; b++)
            release_kernel(&ctx->softmax_nv[dt][b]);
        for (int k = 0; k < FCL_K_SOFTMAX_COUNT; k++)
            release_kernel(&ctx->softmax_nv_stream[dt][k]);
    }
    if (ctx->mma_program) {
        clReleaseProgram(ctx->mma_program);
        ctx->mma_program = NULL;
    }
}

/* A head-dim bucket's attention kernels and their program. */
static void release_bucket(fcl_context *ctx, int b)
{
    for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++) {
        for (int p = 0; p < 3; p++)
            release_kernel(&ctx->attention[b][p][v]);
        release_kernel(&ctx->attention_decode_groups[b][v]);
    }
    if (ctx->attention_program[b]) {
        clReleaseProgram(ctx->attention_program[b]);
        ctx->attention_program[b] = NULL;
    }
}

/* The first program's kernels and the program. */
static void release_first(fcl_context *ctx)
{
    for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++)
        for (int k = 0; k < FCL_K_SOFTMAX_COUNT; k++)
            release_kernel(&ctx->softmax[dt][k]);
    release_kernel(&ctx->attention_merge_splits);
    release_kernel(&ctx->attention_merge_parts);
    if (ctx->program) {
        clReleaseProgram(ctx->program);
        ctx->program = NULL;
    }
}

void fcl_release_kernels(fcl_context *ctx)
{
    release_first(ctx);
    for (int b = 0; b < FCL_ATTENTION_BUCKETS; b++)
        release_bucket(ctx, b);
    release_mma_kernels(ctx);
}

/* Creates one kernel; reports the work-group size and local memory it allows and uses. */
static fcl_status create_kernel(fcl_context *ctx, cl_program program, const char *name,
                                cl_kernel *out, size_t *wg, cl_ulong *local)
{
    cl_int err;
    *wg = 0;
    *local = 0;
    *out = clCreateKernel(program, name, &err);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "clCreateKernel(%s)", name);
    /* The plan is checked against these: a guess could launch work-groups the kernel cannot
     * run. (The caller releases *out with the rest on failure.) */
    err = clGetKernelWorkGroupInfo(*out, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof *wg, wg,
                                   NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(*out, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof *local,
                                       local, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "clGetKernelWorkGroupInfo(%s)", name);
    return FCL_SUCCESS;
}

/* Creates the softmax kernels the plan built and records their tightest limits in
 * ctx->info. */
static fcl_status create_softmax_kernels(fcl_context *ctx, const kernel_plan *plan)
{
    ctx->info.kernel_work_group_size = ctx->info.max_work_group_size;
    ctx->info.kernel_local_mem_size = 0;
    for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++) {
        for (int k = 0; k < FCL_K_SOFTMAX_COUNT; k++) {
            char name[64];
            size_t wg;
            cl_ulong local;
            if (k == FCL_K_SOFTMAX_BLOCK && !plan->block_items)
                continue;
            snprintf(name, sizeof name, "%s_%s", softmax_kernel_names[k], dtype_suffix[dt]);
            fcl_status s = create_kernel(ctx, ctx->program, name, &ctx->softmax[dt][k], &wg, &local);
            if (s != FCL_SUCCESS)
                return s;
            if (wg && wg < ctx->info.kernel_work_group_size)
                ctx->info.kernel_work_group_size = wg;
            if (k == FCL_K_SOFTMAX_FUSED && local > ctx->info.kernel_local_mem_size)
                ctx->info.kernel_local_mem_size = local;
        }
    }
    return FCL_SUCCESS;
}

/* Creates one kernel of a bucket and checks it against the device: where its local memory or
 * work-group does not fit, it is released and *fits is 0, with the work-group it allows in
 * *wg. */
static fcl_status create_fitting(fcl_context *ctx, cl_program program, const char *name,
                                 cl_kernel *k, size_t group, int *fits, size_t *wg, cl_ulong *local)
{
    fcl_status s = create_kernel(ctx, program, name, k, wg, local);
    *fits = s == FCL_SUCCESS && *local <= ctx->info.local_mem_size && *wg >= group;
    if (s == FCL_SUCCESS && !*fits)
        release_kernel(k);
    return s;
}

/* Creates one bucket's tile kernels (every feature set) and decode kernels, where built. A
 * tile kernel that needs more local memory than the device has moves the bucket to the next
 * smaller tile, one that cannot run its work-group to a smaller group (or either to the rows
 * kernel), and sets *rebuild. */
static fcl_status create_tile_kernels(fcl_context *ctx, kernel_plan *plan, int b, int *rebuild)
{
    cl_program program = ctx->attention_program[b];
    struct fcl_attention_tile *tile = &plan->tile[b];
    char name[48];
    size_t wg = 0;
    cl_ulong local = 0, most_local = 0;
    int fits = 1;
    fcl_status s = FCL_SUCCESS;
    for (int v = 0; v < FCL_ATTENTION_VARIANTS && s == FCL_SUCCESS && fits; v++) {
        snprintf(name, sizeof name, "attention_d%zu%s", tile->max_head_dim,
                 fcl_attention_variant_suffix(v));
        s = create_fitting(ctx, program, name, &ctx->attention[b][FCL_ATTENTION_PATH_TILE][v],
                           tile->work_group_size, &fits, &wg, &local);
        most_local = local > most_local ? local : most_local;
    }
    if (s != FCL_SUCCESS)
        return s;
    if (!fits) {
        fcl_plan_attention_refit(&ctx->info, b, plan->attention_accumulators,
                                 plan->attention_prefetch, wg, local, tile);
        *rebuild = 1;
        return FCL_SUCCESS;
    }
    tile->local_mem_size = most_local;
    /* The decode kernels (one query head, and GQA groups) are an extra: where one does not
     * fit, the tile kernels serve. */
    for (int v = 0; v < FCL_ATTENTION_VARIANTS && s == FCL_SUCCESS && fits; v++) {
        if (!decode_built_for(v))
            continue;
        const char *suffix = fcl_attention_variant_suffix(v);
        snprintf(name, sizeof name, "attention_decode_d%zu%s", tile->max_head_dim, suffix);
        s = create_fitting(ctx, program, name, &ctx->attention[b][FCL_ATTENTION_PATH_DECODE][v],
                           FA_DEC_LWS, &fits, &wg, &local);
        snprintf(name, sizeof name, "attention_decode_d%zu%s_g%d", tile->max_head_dim, suffix,
                 FA_DEC_HEADS);
        if (s == FCL_SUCCESS && fits)
            s = create_fitting(ctx, program, name, &ctx->attention_decode_groups[b][v],
                               FA_DEC_LWS, &fits, &wg, &local);
    }
    if (s == FCL_SUCCESS && !fits)
        for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++) {
            release_kernel(&ctx->attention[b][FCL_ATTENTION_PATH_DECODE][v]);
            release_kernel(&ctx->attention_decode_groups[b][v]);
        }
    tile->decode_block_kv = s == FCL_SUCCESS && fits ? FA_DEC_KEYS : 0;
    return s;
}

/* Creates a bucket's attention kernels: the tile kernels (with the decode kernels) or the
 * rows kernel. */
static fcl_status create_bucket_kernels(fcl_context *ctx, kernel_plan *plan, int b, int *rebuild)
{
    size_t wg;
    cl_ulong local;
    char name[40];
    if (plan->tile[b].block_q)
        return create_tile_kernels(ctx, plan, b, rebuild);
    snprintf(name, sizeof name, "attention_rows_d%zu_all", plan->tile[b].max_head_dim);
    return create_kernel(ctx, ctx->attention_program[b], name,
                         &ctx->attention[b][FCL_ATTENTION_PATH_ROWS][FCL_ATTENTION_ALL], &wg, &local);
}

/* Creates the merge kernels, which run with any work-group size: the largest up to
 * FA_MERGE_LWS that both allow. */
static fcl_status create_merge_kernels(fcl_context *ctx)
{
    size_t wg;
    cl_ulong local;
    fcl_status s = FCL_SUCCESS;
    const char *merge_names[] = {"attention_merge_splits", "attention_merge_parts"};
    cl_kernel *merges[] = {&ctx->attention_merge_splits, &ctx->attention_merge_parts};
    ctx->merge_work_group = FA_MERGE_LWS;
    for (int i = 0; i < 2 && s == FCL_SUCCESS; i++) {
        s = create_kernel(ctx, ctx->program, merge_names[i], merges[i], &wg, &local);
        if (s == FCL_SUCCESS && wg < ctx->merge_work_group)
            ctx->merge_work_group = wg ? wg : 1;
    }
    return s;
}

/* ---- the NVIDIA paths: a program of their own, so that a driver which cannot build or
 * run it leaves the portable kernels as they are ---- */

/* One build of attention_mma_nv.cl: its bucket, product kind and shape. The products' PTX
 * type is tf32 for float32 storage, else the kind's name (f16, bf16). */
static void add_mma_build(text *t, int bucket, int kind, int gqa_rows)
{
    const int f32 = fcl_mma_kind_f32(kind);
    const fcl_mma_shape sh = fcl_plan_mma_shape(bucket, kind, gqa_rows);
    text_add(t, "#define FA_NAME mma%s_d%zu_%s\n#define FA_D %zu\n#define FA_MMA_T %s\n"
                "#define FA_MMA_F32 %d\n#define FA_MMA_SPLIT %d\n#define FA_MMA_WARPS %zu\n"
                "#define FA_MMA_KWARPS %zu\n#define FA_MMA_MT %zu\n#define FA_MMA_BK %zu\n"
                "#define FA_FEATURES 0x%xu\n"
                "#line 1 \"attention_mma_nv.cl\"\n%s\n#undef FA_NAME\n#undef FA_D\n"
                "#undef FA_MMA_T\n#undef FA_MMA_F32\n#undef FA_MMA_SPLIT\n#undef FA_MMA_WARPS\n"
                "#undef FA_MMA_KWARPS\n#undef FA_MMA_MT\n#undef FA_MMA_BK\n#undef FA_FEATURES\n",
             gqa_rows ? "_rows" : "", fcl_attention_bucket_dim(bucket), fcl_mma_kind_names[kind],
             fcl_attention_bucket_dim(bucket), f32 ? "tf32" : fcl_mma_kind_names[kind], f32,
             kind == FCL_MMA_F32, sh.warps, sh.key_warps, sh.row_tiles, sh.block_kv,
             FA_FEATURES_ALL, fcl_cl_attention_mma_nv);
}

/* The parts of the NVIDIA programs: the first (softmax and the self-check), built with the
 * context, and one per head-dim bucket (tensor-core prefill and shuffle decode), built on the
 * bucket's first use; offline compilers get them all in one source. */
#define NV_PART_FIRST 1u
#define NV_PART_BUCKET(b) (2u << (b))
#define NV_PARTS_ALL (NV_PART_FIRST | (NV_PART_BUCKET(FCL_MMA_BUCKETS) - NV_PART_BUCKET(0)))

static char *mma_source(unsigned parts)
{
    text t = {0};
    text_add(&t, "/* flashcl's NVIDIA program */\n#line 1 \"common.cl\"\n%s\n", fcl_cl_common);
    text_add(&t, "#line 1 \"common_nv.cl\"\n%s\n", fcl_cl_common_nv);
    if (parts & ~NV_PART_FIRST)
        text_add(&t, "#line 1 \"attention_args.h\"\n%s\n#line 1 \"attention_common.cl\"\n%s\n",
                 fcl_cl_attention_args, fcl_cl_attention_common);
    for (int b = 0; b < FCL_MMA_BUCKETS; b++)
        for (int rows = 0; rows <= 1; rows++) /* prefill, and the GQA builds (gqa_rows) */
            for (int kind = 0; kind < FCL_MMA_KINDS; kind++)
                if ((parts & NV_PART_BUCKET(b)) && fcl_plan_mma_built(b, kind, rows))
                    add_mma_build(&t, b, kind, rows);
    for (int b = 0; b < FCL_MMA_BUCKETS; b++)
        for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++)
            if ((parts & NV_PART_BUCKET(b)) && decode_built_for(v))
                text_add(&t, "#define FA_NAME decode_nv_d%zu%s\n#define FA_D %zu\n#define FA_FEATURES 0x%xu\n"
                             "#line 1 \"attention_decode_nv.cl\"\n%s\n"
                             "#undef FA_NAME\n#undef FA_D\n#undef FA_FEATURES\n",
                         fcl_attention_bucket_dim(b), fcl_attention_variant_suffix(v),
                         fcl_attention_bucket_dim(b), fcl_attention_variant_features(v),
                         fcl_cl_attention_decode_nv);
    if (parts & NV_PART_FIRST) {
        text_add(&t, "#line 1 \"softmax_args.h\"\n%s\n#line 1 \"softmax_common.cl\"\n%s\n",
                 fcl_cl_softmax_args, fcl_cl_softmax_common);
        for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++)
            for (int b = 0; b < FCL_SOFTMAX_NV_BUILDS; b++)
                if (fcl_plan_softmax_nv_vecs((fcl_dtype)dt, b))
                    text_add(&t, "#define FCL_DT %s\n#define FCL_SNV_VECS %zu\n"
                                 "#line 1 \"softmax_nv.cl\"\n%s\n#undef FCL_DT\n#undef FCL_SNV_VECS\n",
                             dtype_suffix[dt], fcl_plan_softmax_nv_vecs((fcl_dtype)dt, b),
                             fcl_cl_softmax_nv);
        text_add(&t, "#line 1 \"mma_check_nv.cl\"\n%s\n", fcl_cl_mma_check_nv);
    }
    if (t.failed) {
        free(t.s);
        return NULL;
    }
    return t.s;
}

char *fcl_mma_kernel_source(int program)
{
    return mma_source(program == FCL_SOURCE_ALL     ? NV_PARTS_ALL
                      : program == FCL_SOURCE_FIRST ? NV_PART_FIRST
                                                    : NV_PART_BUCKET(program));
}

/* The exact product the self-check kernel computes (cl/mma_check_nv.cl): A[i][k] and B[k][n]
 * small integers, D = A B with 16 x depth x 8 elements. */
static float mma_check_product(unsigned i, unsigned n, unsigned depth)
{
    int sum = 0;
    for (unsigned k = 0; k < depth; k++)
        sum += ((int)((i + 2 * k) % 5) - 2) * ((int)((3 * k + n) % 7) - 3);
    return (float)sum;
}

/* Runs fcl_mma_check once: 1 where every lane's accumulators hold the host's product (lane
 * 4g + t holds rows g and g + 8, columns 2t and 2t + 1). */
static int mma_check_passes(fcl_context *ctx)
{
    cl_int err;
    float got[32 * 12];
    const size_t lanes = 32;
    int passes = 0;
    cl_kernel check = clCreateKernel(ctx->mma_program, "fcl_mma_check", &err);
    cl_mem out = err == CL_SUCCESS ? clCreateBuffer(ctx->cl_ctx, CL_MEM_WRITE_ONLY, sizeof got, NULL, &err)
                                   : NULL;
    if (err == CL_SUCCESS)
        err = clSetKernelArg(check, 0, sizeof(cl_mem), &out);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, check, 1, NULL, &lanes, &lanes, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(ctx->queue, out, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL);
    if (err == CL_SUCCESS) {
        passes = 1;
        for (unsigned lane = 0; lane < 32; lane++)
            for (unsigned e = 0; e < 12; e++) /* f16's four accumulators, bf16's, TF32's */
                passes &= got[lane * 12 + e] == mma_check_product(lane / 4 + (e % 4 >= 2 ? 8 : 0),
                                                                  2 * (lane % 4) + e % 2,
                                                                  e < 8 ? 16 : 8);
    }
    if (out)
        clReleaseMemObject(out);
    if (check)
        clReleaseKernel(check);
    return passes;
}

/* Creates one kernel of the NVIDIA program for work-groups of `group`; where it cannot run
 * them, *fits = 0 and because says why. */
static fcl_status create_nv_kernel(fcl_context *ctx, cl_program program, const char *name,
                                   cl_kernel *out, size_t group, int *fits, char *because,
                                   size_t cap)
{
    size_t wg;
    cl_ulong local;
    fcl_status s = create_fitting(ctx, program, name, out, group, fits, &wg, &local);
    if (s == FCL_SUCCESS && !*fits)
        snprintf(because, cap, "%s allows %zu work-items and uses %llu bytes of local memory; it "
                 "needs %zu and the device has %llu", name, wg, (unsigned long long)local, group,
                 (unsigned long long)ctx->info.local_mem_size);
    return s;
}

/* Builds the first NVIDIA program (softmax, and the tensor cores' self-check) where the
 * planner wants the NVIDIA kernels, and keeps it where they build, fit and pass the
 * self-check; elsewhere info.attention_mma stays 0 with the reason, and nothing fails but
 * running out of host memory: the portable kernels serve. */
static fcl_status build_mma_kernels(fcl_context *ctx, const fcl_build_setup *setup,
                                    const fcl_tuning *tuning)
{
    char *because = ctx->info.attention_mma_because;
    const size_t cap = sizeof ctx->info.attention_mma_because;
    int fits = 1;
    ctx->info.attention_mma = 0;
    ctx->info.softmax_nv_cols = 0;
    if (!fcl_plan_mma(&ctx->info, tuning, because, cap))
        return FCL_SUCCESS;
    fcl_status s = load_or_build(ctx, mma_source(NV_PART_FIRST), setup, &ctx->mma_program, NULL);
    for (int dt = 0; dt < FCL_DTYPE_COUNT && s == FCL_SUCCESS && fits; dt++)
        for (int b = 0; b < FCL_SOFTMAX_NV_BUILDS && s == FCL_SUCCESS && fits; b++) {
            const size_t vecs = fcl_plan_softmax_nv_vecs((fcl_dtype)dt, b);
            char name[32];
            snprintf(name, sizeof name, "softmax_nv%zu_%s", vecs, dtype_suffix[dt]);
            if (vecs)
                s = create_nv_kernel(ctx, ctx->mma_program, name, &ctx->softmax_nv[dt][b],
                                     SM_NV_LWS, &fits, because, cap);
        }
    const int streaming[] = {FCL_K_SOFTMAX_ONLINE, FCL_K_SOFTMAX_SPLIT_STATS,
                             FCL_K_SOFTMAX_SPLIT_WRITE};
    for (int dt = 0; dt < FCL_DTYPE_COUNT && s == FCL_SUCCESS && fits; dt++)
        for (int i = 0; i < 3 && s == FCL_SUCCESS && fits; i++) {
            char name[48];
            /* "softmax_nv_" and the portable kernel's name past "softmax_" */
            snprintf(name, sizeof name, "softmax_nv_%s_%s", softmax_kernel_names[streaming[i]] + 8,
                     dtype_suffix[dt]);
            s = create_nv_kernel(ctx, ctx->mma_program, name,
                                 &ctx->softmax_nv_stream[dt][streaming[i]], SM_NV_LWS, &fits,
                                 because, cap);
        }
    if (s == FCL_ERROR_OUT_OF_HOST_MEMORY) {
        release_mma_kernels(ctx);
        return s;
    }
    if (s != FCL_SUCCESS) {
        snprintf(because, cap, "its kernels did not build: %.100s", fcl_context_last_error(ctx));
        fcl_clear_error(ctx);
    } else if (fits && !mma_check_passes(ctx)) {
        snprintf(because, cap, "its self-check (one mma.sync per storage type) did not give the "
                 "host's product");
    } else if (fits) {
        ctx->info.attention_mma = 1;
        because[0] = '\0';
        if (tuning->softmax_nv)
            ctx->info.softmax_nv_cols = SM_NV_COLS;
    }
    if (!ctx->info.attention_mma)
        release_mma_kernels(ctx);
    return FCL_SUCCESS;
}

/* Creates bucket b's NVIDIA kernels (every tensor-core kind, prefill and GQA builds, and the
 * shuffle decode kernels) from its program; *fits 0 (with the reason) where one cannot run
 * its work-group. */
static fcl_status create_mma_bucket_kernels(fcl_context *ctx, int b, int *fits, char *because,
                                            size_t cap)
{
    cl_program program = ctx->mma_bucket_program[b];
    const size_t dim = fcl_attention_bucket_dim(b);
    char name[40];
    fcl_status s = FCL_SUCCESS;
    *fits = 1;
    for (int i = 0; i < FCL_MMA_KINDS && s == FCL_SUCCESS && *fits; i++) {
        snprintf(name, sizeof name, "attention_mma_d%zu_%s", dim, fcl_mma_kind_names[i]);
        if (fcl_plan_mma_built(b, i, 0))
            s = create_nv_kernel(ctx, program, name, &ctx->attention_mma[b][i],
                                 fcl_plan_mma_shape(b, i, 0).warps * 32, fits, because, cap);
        snprintf(name, sizeof name, "attention_mma_rows_d%zu_%s", dim, fcl_mma_kind_names[i]);
        if (s == FCL_SUCCESS && *fits && fcl_plan_mma_built(b, i, 1))
            s = create_nv_kernel(ctx, program, name, &ctx->attention_mma_rows[b][i],
                                 fcl_plan_mma_shape(b, i, 1).warps * 32, fits, because, cap);
    }
    for (int v = 0; v < FCL_ATTENTION_VARIANTS && s == FCL_SUCCESS && *fits; v++) {
        snprintf(name, sizeof name, "attention_decode_nv_d%zu%s", dim,
                 fcl_attention_variant_suffix(v));
        if (decode_built_for(v))
            s = create_nv_kernel(ctx, program, name, &ctx->attention_decode_nv[b][v], FA_DNV_LWS,
                                 fits, because, cap);
    }
    return s;
}

/* Builds bucket b's NVIDIA program and kernels: mma_bucket_state[b] becomes 1, or -1 where
 * they do not build or fit (the reason, naming the bucket, in info.attention_mma_because;
 * the portable kernels serve that bucket). Only running out of host memory fails, leaving
 * the bucket to be tried again. */
static fcl_status build_mma_bucket(fcl_context *ctx, int b)
{
    char *because = ctx->info.attention_mma_because;
    const size_t cap = sizeof ctx->info.attention_mma_because;
    char why[160] = "";
    int fits = 0;
    fcl_status s = load_or_build(ctx, mma_source(NV_PART_BUCKET(b)), &ctx->build,
                                 &ctx->mma_bucket_program[b], NULL);
    if (s == FCL_SUCCESS)
        s = create_mma_bucket_kernels(ctx, b, &fits, why, sizeof why);
    if (s == FCL_SUCCESS && fits) {
        ctx->mma_bucket_state[b] = 1;
        return FCL_SUCCESS;
    }
    release_mma_bucket(ctx, b);
    if (s == FCL_ERROR_OUT_OF_HOST_MEMORY)
        return s;
    if (s != FCL_SUCCESS) {
        snprintf(why, sizeof why, "its kernels did not build: %.100s", fcl_context_last_error(ctx));
        fcl_clear_error(ctx);
    }
    snprintf(because, cap, "head dims up to %zu run the portable kernels: %s",
             fcl_attention_bucket_dim(b), why);
    ctx->mma_bucket_state[b] = -1;
    return FCL_SUCCESS;
}

fcl_status fcl_build_mma_bucket(fcl_context *ctx, int bucket, int *usable)
{
    fcl_status s = FCL_SUCCESS;
    pthread_mutex_lock(&ctx->build_lock);
    if (!ctx->mma_bucket_state[bucket])
        s = build_mma_bucket(ctx, bucket);
    *usable = ctx->mma_bucket_state[bucket] == 1;
    pthread_mutex_unlock(&ctx->build_lock);
    return s;
}

/* The plan before the build: the tuning for the device, within what it reports. */
static kernel_plan initial_plan(const fcl_device_info *info, const fcl_tuning *tuning)
{
    kernel_plan plan;
    plan.work_group_size = fcl_plan_work_group_size(info, tuning->softmax_work_group);
    plan.vector_width = tuning->vector_width;
    plan.block_items = tuning->softmax_block_items;
    plan.attention_accumulators = tuning->attention_accumulators;
    plan.force_inline = tuning->force_inline;
    plan.attention_pv_vec = tuning->attention_pv_vec;
    plan.attention_prefetch = tuning->attention_prefetch;
    fcl_plan_attention_tiles(info, tuning, plan.tile);
    return plan;
}

char *fcl_kernel_source(const fcl_device_info *info, const char *tune, int program)
{
    fcl_tuning tuning;
    if (fcl_tuning_for(NULL, info, tune, &tuning) != FCL_SUCCESS)
        return NULL;
    kernel_plan plan = initial_plan(info, &tuning);
    return program_source(&plan, program == FCL_SOURCE_ALL     ? PARTS_ALL
                                 : program == FCL_SOURCE_FIRST ? PARTS_FIRST
                                                               : PART_BUCKET(program));
}

/* Where and how to build (ctx->build): the cache directory and the compiler options. */
static fcl_status build_setup_for(fcl_context *ctx, const char *requested_cache_dir)
{
    fcl_build_setup *setup = &ctx->build;
    const char *extra = getenv("FLASHCL_BUILD_OPTIONS");
    ctx->info.program_cache_usable = fcl_cache_usable(&ctx->info);
    const char *dir = ctx->info.program_cache_usable
                          ? fcl_cache_dir(requested_cache_dir, setup->cache_dir,
                                          sizeof setup->cache_dir)
                          : NULL;
    setup->use_cache = dir != NULL;
    if (dir && dir != setup->cache_dir)
        snprintf(setup->cache_dir, sizeof setup->cache_dir, "%s", dir);
    if (snprintf(setup->options, sizeof setup->options, "%s %s", FCL_BASE_BUILD_OPTIONS,
                 extra ? extra : "") >= (int)sizeof setup->options)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "FLASHCL_BUILD_OPTIONS is longer than %zu characters",
                        sizeof setup->options - sizeof FCL_BASE_BUILD_OPTIONS - 1);
    return FCL_SUCCESS;
}

/* The first program: the softmax kernels and the merge. Its kernels are checked against
 * what they allow: where one allows a smaller work-group than planned (register pressure),
 * the program is rebuilt with the largest that fits (each round shrinks, so the loop ends). */
static fcl_status build_first_program(fcl_context *ctx)
{
    kernel_plan *plan = &ctx->build.plan;
    for (;;) {
        fcl_status s = load_or_build(ctx, program_source(plan, PARTS_FIRST), &ctx->build,
                                     &ctx->program, &ctx->info.program_from_cache);
        if (s == FCL_SUCCESS)
            s = create_softmax_kernels(ctx, plan);
        if (s == FCL_SUCCESS)
            s = create_merge_kernels(ctx);
        if (s != FCL_SUCCESS) {
            release_first(ctx);
            return s;
        }
        size_t fitting = fcl_plan_work_group_size(&ctx->info, plan->work_group_size);
        if (fitting == plan->work_group_size)
            return FCL_SUCCESS;
        plan->work_group_size = fitting;
        release_first(ctx);
    }
}

fcl_status fcl_build_kernels(fcl_context *ctx, const char *requested_cache_dir)
{
    fcl_status s = build_setup_for(ctx, requested_cache_dir);
    if (s != FCL_SUCCESS)
        return s;
    fcl_tuning tuning;
    s = fcl_tuning_for(ctx, &ctx->info, getenv("FLASHCL_TUNE"), &tuning);
    if (s != FCL_SUCCESS)
        return s;
    snprintf(ctx->info.tuning, sizeof ctx->info.tuning, "%s", tuning.source);
    kernel_plan *plan = &ctx->build.plan;
    *plan = initial_plan(&ctx->info, &tuning);
    memcpy(ctx->info.attention_tiles, plan->tile, sizeof plan->tile); /* until each is built */
    s = build_first_program(ctx);
    if (s != FCL_SUCCESS)
        return s;
    ctx->info.softmax_work_group_size = plan->work_group_size;
    ctx->info.softmax_vector_width = plan->vector_width;
    ctx->info.softmax_rows_per_item = tuning.softmax_rows;
    ctx->info.softmax_block_items = plan->block_items;
    ctx->info.softmax_block_min_lanes = tuning.softmax_block_lanes;
    ctx->info.softmax_block_cols = plan->work_group_size * plan->block_items;
    ctx->info.attention_rows_per_item = tuning.attention_rows;
    ctx->info.softmax_fused_max_cols = fcl_plan_fused_max_cols(&ctx->info);
    s = build_mma_kernels(ctx, &ctx->build, &tuning);
    if (s != FCL_SUCCESS)
        fcl_release_kernels(ctx);
    return s;
}

/* Builds bucket b's program and creates its kernels; a kernel that does not fit the device
 * (create_tile_kernels) makes a rebuild with the tile the planner refits (each round
 * shrinks, so the loop ends). */
static fcl_status build_bucket(fcl_context *ctx, int b)
{
    kernel_plan *plan = &ctx->build.plan;
    int from_cache = 0;
    for (;;) {
        int rebuild = 0;
        fcl_status s = load_or_build(ctx, program_source(plan, PART_BUCKET(b)), &ctx->build,
                                     &ctx->attention_program[b], &from_cache);
        if (s == FCL_SUCCESS)
            s = create_bucket_kernels(ctx, plan, b, &rebuild);
        if (s != FCL_SUCCESS) {
            release_bucket(ctx, b);
            return s;
        }
        if (!rebuild)
            break;
        release_bucket(ctx, b);
    }
    ctx->info.attention_tiles[b] = plan->tile[b];
    ctx->info.program_from_cache = ctx->info.program_from_cache && from_cache;
    return FCL_SUCCESS;
}

fcl_status fcl_build_attention_bucket(fcl_context *ctx, int bucket)
{
    pthread_mutex_lock(&ctx->build_lock);
    fcl_status s = ctx->attention_program[bucket] ? FCL_SUCCESS : build_bucket(ctx, bucket);
    pthread_mutex_unlock(&ctx->build_lock);
    return s;
}

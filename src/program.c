/* Program build: the source compiled for a device is a prelude of #defines planned from the
 * probed capabilities, then the embedded .cl files. Kernels are built on first use, a few to
 * a program (a unit): softmax in every storage type; the merge; per head-dim bucket and
 * feature set the tile kernel, and per K/V storage type the decode kernels; per bucket the
 * rows kernel. A fast path (NVIDIA's, src/nvidia.c) builds its own programs with the
 * services here, reached through fcl_fast_path. A context compiles only what its calls run.
 * Each binary goes through the on-disk cache of cache.c. Units are built, and the planner's
 * fields in ctx->info they set are written and read, under ctx->build_lock. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generated at build time from the cl/ kernel files (cmake/embed_cl.cmake). */
extern const char fcl_cl_kv_formats[];
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
extern const char fcl_cl_kv_write_args[];
extern const char fcl_cl_kv_write[];

#define FCL_BASE_BUILD_OPTIONS FCL_CL_STD

const char *const fcl_softmax_kernel_names[FCL_K_SOFTMAX_COUNT] = {
    "softmax_fused", "softmax_online", "softmax_split_stats", "softmax_split_write",
    "softmax_rows", "softmax_block"};


typedef fcl_kernel_plan kernel_plan;

/* ---- growing string ---- */
void fcl_text_add(fcl_text *t, const char *fmt, ...)
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
int fcl_decode_built_for(int variant) { return variant != FCL_ATTENTION_SCORES; }

/* Whether the rows kernel is built for a feature set: everything of v0.2, and with K/V
 * formats. */
static int rows_built_for(int variant)
{
    return variant == FCL_ATTENTION_ALL || variant == FCL_ATTENTION_KV;
}

/* The K/V storage types the decode kernels of feature set v are built for: each of fcl_dtype's
 * (a vector load of that type), or for K/V formats one build that decodes every format. */
static int decode_types_of(int variant)
{
    return variant == FCL_ATTENTION_KV ? 1 : FCL_DTYPE_COUNT;
}

/* The kernels a program's source holds. For offline compilers, one source holds them all. */
typedef struct parts {
    int softmax, merge;
    unsigned tile[FCL_ATTENTION_BUCKETS];   /* bit v: the tile kernel of feature set v */
    unsigned decode[FCL_ATTENTION_BUCKETS]; /* bit v: the decode kernels of feature set v */
    unsigned decode_types; /* bit t: ... of K/V storage type t; 0: of every type */
    unsigned rows[FCL_ATTENTION_BUCKETS];   /* bit v: the rows kernels of feature set v */
} parts;

/* Bucket b's kernels of feature set v: the tile kernel and the decode kernels (for one query
 * head, and for GQA groups), as parts says. */
static void add_tile_and_decode(fcl_text *t, const kernel_plan *plan, const parts *p, int b, int v)
{
    const struct fcl_attention_tile *tile = &plan->tile[b];
    const int with_tile = (p->tile[b] >> v & 1u) != 0, with_decode = (p->decode[b] >> v & 1u) != 0;
    if (!with_tile && !with_decode)
        return;
    size_t dim = fcl_attention_bucket_dim(b);
    fcl_text_add(t, "#define FA_NAME d%zu%s\n#define FA_D %zu\n#define FA_FEATURES 0x%xu\n", dim,
                 fcl_attention_variant_suffix(v), dim, fcl_attention_variant_features(v));
    if (with_tile) {
        size_t items_q = fcl_attention_tile_items_q(tile->work_group_size);
        fcl_text_add(t, "#define FA_BQ %zu\n#define FA_BK %zu\n#define FA_TQ %zu\n#define FA_TK %zu\n"
                        "#define FA_PREFETCH %d\n#define FA_PF_MAX %zu\n#define FA_PV_VEC %d\n"
                        "#line 1 \"attention_tile.cl\"\n%s\n",
                     tile->block_q, tile->block_kv, items_q, tile->work_group_size / items_q,
                     /* K/V formats: each element's decoding is a switch, not a load to hide */
                     v != FCL_ATTENTION_KV &&
                         fcl_attention_tile_prefetch(plan->attention_prefetch, tile->block_q,
                                                     tile->work_group_size),
                     plan->attention_prefetch_items, plan->attention_pv_vec,
                     fcl_cl_attention_tile);
    }
    for (int dt = 0; with_decode && dt < decode_types_of(v); dt++) {
        if (p->decode_types && !(p->decode_types >> dt & 1u))
            continue; /* a unit of other storage types */
        for (int g = 0; g < 2; g++)
            fcl_text_add(t, "#define FA_DEC_G %d\n#define FA_DEC_DT %s\n#line 1 \"attention_decode.cl\"\n"
                            "%s\n#undef FA_DEC_G\n#undef FA_DEC_DT\n",
                         g ? FA_DEC_HEADS : 1, fcl_dtype_suffix[dt], fcl_cl_attention_decode);
    }
    if (with_tile)
        fcl_text_add(t, "#undef FA_BQ\n#undef FA_BK\n#undef FA_TQ\n#undef FA_TK\n#undef FA_PREFETCH\n"
                        "#undef FA_PF_MAX\n#undef FA_PV_VEC\n");
    fcl_text_add(t, "#undef FA_NAME\n#undef FA_D\n#undef FA_FEATURES\n");
}

static void add_rows(fcl_text *t, int b, int v)
{
    size_t dim = fcl_attention_bucket_dim(b);
    fcl_text_add(t, "#define FA_NAME d%zu%s\n#define FA_D %zu\n#define FA_FEATURES 0x%xu\n"
                    "#line 1 \"attention_rows.cl\"\n%s\n"
                    "#undef FA_NAME\n#undef FA_D\n#undef FA_FEATURES\n",
                 dim, fcl_attention_variant_suffix(v), dim, fcl_attention_variant_features(v),
                 fcl_cl_attention_rows);
}

/* The source of a program of the given parts. Only softmax's programs define the prelude's
 * softmax parameters, so that the others do not change with them. */
static char *program_source(const kernel_plan *plan, const parts *p)
{
    fcl_text t = {0};
    int attention = p->merge;
    for (int b = 0; b < FCL_ATTENTION_BUCKETS; b++)
        attention |= p->tile[b] || p->decode[b] || p->rows[b];
    if (p->softmax)
        fcl_text_add(&t, "/* flashcl prelude: planned for this device */\n#define FCL_LWS %zu\n"
                         "#define FCL_VEC %zu\n#define FCL_BLOCK_ITEMS %zu\n#define FCL_FORCE_INLINE %d\n",
                     plan->work_group_size, plan->vector_width, plan->block_items, plan->force_inline);
    else
        fcl_text_add(&t, "/* flashcl prelude: planned for this device */\n#define FCL_VEC %zu\n"
                         "#define FCL_FORCE_INLINE %d\n",
                     plan->vector_width, plan->force_inline);
    if (attention)
        fcl_text_add(&t, "#define FCL_KV_CALLS %d\n#define FA_CACHE_PREFETCH %d\n",
                     plan->kv_decode_calls, plan->cache_prefetch);
    fcl_text_add(&t, "#line 1 \"kv_formats.h\"\n%s\n#line 1 \"common.cl\"\n%s\n", fcl_cl_kv_formats,
                 fcl_cl_common);
    if (p->softmax) {
        fcl_text_add(&t, "#line 1 \"softmax_args.h\"\n%s\n#line 1 \"softmax_common.cl\"\n%s\n",
                     fcl_cl_softmax_args, fcl_cl_softmax_common);
        for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++)
            fcl_text_add(&t, "#define FCL_DT %s\n#line 1 \"softmax.cl\"\n%s\n#undef FCL_DT\n",
                         fcl_dtype_suffix[dt], fcl_cl_softmax);
    }
    if (attention)
        fcl_text_add(&t, "#line 1 \"attention_args.h\"\n%s\n#line 1 \"attention_common.cl\"\n%s\n",
                     fcl_cl_attention_args, fcl_cl_attention_common);
    for (int b = 0; b < FCL_ATTENTION_BUCKETS; b++) {
        for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++)
            if ((p->rows[b] >> v) & 1)
                add_rows(&t, b, v);
        /* ALL first: the order of the single program this replaced */
        add_tile_and_decode(&t, plan, p, b, FCL_ATTENTION_ALL);
        for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++)
            if (v != FCL_ATTENTION_ALL)
                add_tile_and_decode(&t, plan, p, b, v);
    }
    if (p->merge)
        fcl_text_add(&t, "#define FA_FEATURES 0x%xu\n#line 1 \"attention_merge.cl\"\n%s\n"
                         "#undef FA_FEATURES\n",
                     FA_WITH_HEAD_ROWS(FA_FEATURES_ALL), fcl_cl_attention_merge);
    if (t.failed) {
        free(t.s);
        return NULL;
    }
    return t.s;
}

/* Every kernel the plan names, for offline compilers. */
static parts all_parts(const kernel_plan *plan)
{
    parts p = {.softmax = 1, .merge = 1};
    for (int b = 0; b < FCL_ATTENTION_BUCKETS; b++) {
        if (!plan->tile[b].block_q) {
            for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++)
                p.rows[b] |= (unsigned)rows_built_for(v) << v;
            continue;
        }
        for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++) {
            p.tile[b] |= (unsigned)fcl_plan_tile_built(b, v) << v;
            if (fcl_decode_built_for(v))
                p.decode[b] |= 1u << v;
        }
    }
    return p;
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

/* Records how a unit's program came (info.program_from_cache: every program built so far
 * from the cache). */
static void note_built(fcl_context *ctx, int from_cache)
{
    ctx->info.program_from_cache = (ctx->programs_built++ == 0 || ctx->info.program_from_cache) &&
                                   from_cache;
}

/* Adds option to setup's compiler options where they leave it room (the options a unit
 * adds change its speed or its rounding, which its kernels correct without them). */
static void add_option(fcl_build_setup *setup, const char *option)
{
    const size_t len = strlen(setup->options), add = strlen(option);
    if (len + 1 + add < sizeof setup->options) {
        setup->options[len] = ' ';
        memcpy(setup->options + len + 1, option, add + 1);
    }
}

fcl_status fcl_build_unit_option(fcl_context *ctx, fcl_unit *u, char *source, const char *option)
{
    fcl_build_setup setup = ctx->build;
    if (option)
        add_option(&setup, option);
    int from_cache = 0;
    fcl_status s = load_or_build(ctx, source, &setup, &u->program, &from_cache);
    if (s == FCL_SUCCESS)
        note_built(ctx, from_cache);
    return s;
}

fcl_status fcl_build_unit(fcl_context *ctx, fcl_unit *u, char *source)
{
    return fcl_build_unit_option(ctx, u, source, NULL);
}

void fcl_release_kernel(cl_kernel *k)
{
    if (*k)
        clReleaseKernel(*k);
    *k = NULL;
}

void fcl_release_unit(fcl_unit *u)
{
    if (u->program) {
        clReleaseProgram(u->program);
        u->program = NULL;
    }
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

/* Creates one kernel of a bucket and checks it against the device: where its local memory or
 * work-group does not fit, it is released and *fits is 0, with the work-group it allows in
 * *wg. */
fcl_status fcl_create_fitting(fcl_context *ctx, cl_program program, const char *name,
                              cl_kernel *k, size_t group, int *fits, size_t *wg, cl_ulong *local)
{
    fcl_status s = create_kernel(ctx, program, name, k, wg, local);
    *fits = s == FCL_SUCCESS && *local <= ctx->info.local_mem_size && *wg >= group;
    if (s == FCL_SUCCESS && !*fits)
        fcl_release_kernel(k);
    return s;
}

/* ---- softmax and the merge ---- */

/* Creates the softmax kernels and records their tightest limits in ctx->info. */
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
            snprintf(name, sizeof name, "%s_%s", fcl_softmax_kernel_names[k], fcl_dtype_suffix[dt]);
            fcl_status s = create_kernel(ctx, ctx->softmax_unit.program, name,
                                         &ctx->softmax[dt][k], &wg, &local);
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

static void release_softmax(fcl_context *ctx)
{
    for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++)
        for (int k = 0; k < FCL_K_SOFTMAX_COUNT; k++)
            fcl_release_kernel(&ctx->softmax[dt][k]);
    fcl_release_unit(&ctx->softmax_unit);
}

/* The softmax kernels. Where one allows a smaller work-group than planned (register
 * pressure), the program is rebuilt with the largest that fits (each round shrinks, so the
 * loop ends); the plan fields that depend on the kernels are then set. */
static fcl_status build_portable_softmax(fcl_context *ctx)
{
    kernel_plan *plan = &ctx->build.plan;
    const parts p = {.softmax = 1};
    for (;;) {
        fcl_status s = fcl_build_unit(ctx, &ctx->softmax_unit, program_source(plan, &p));
        if (s == FCL_SUCCESS)
            s = create_softmax_kernels(ctx, plan);
        if (s != FCL_SUCCESS) {
            release_softmax(ctx);
            return s;
        }
        size_t fitting = fcl_plan_work_group_size(&ctx->info, plan->work_group_size);
        if (fitting == plan->work_group_size)
            break;
        plan->work_group_size = fitting;
        release_softmax(ctx);
    }
    ctx->info.softmax_work_group_size = plan->work_group_size;
    ctx->info.softmax_block_cols = plan->work_group_size * plan->block_items;
    ctx->info.softmax_fused_max_cols = fcl_plan_fused_max_cols(&ctx->info);
    return FCL_SUCCESS;
}

fcl_status fcl_build_softmax(fcl_context *ctx)
{
    if (ctx->softmax_unit.state)
        return FCL_SUCCESS;
    fcl_status s = build_portable_softmax(ctx);
    if (s == FCL_SUCCESS && ctx->info.softmax_nv_cols)
        s = fcl_nvidia_path.build_softmax(ctx);
    if (s == FCL_SUCCESS)
        ctx->softmax_unit.state = 1;
    else
        release_softmax(ctx);
    return s;
}

/* The merge kernels, which run with any work-group size: the largest up to FA_MERGE_LWS that
 * both allow. */
fcl_status fcl_build_merge(fcl_context *ctx)
{
    if (ctx->merge_unit.state)
        return FCL_SUCCESS;
    const parts p = {.merge = 1};
    fcl_status s = fcl_build_unit(ctx, &ctx->merge_unit, program_source(&ctx->build.plan, &p));
    const char *merge_names[] = {"attention_merge_splits", "attention_merge_parts"};
    cl_kernel *merges[] = {&ctx->attention_merge_splits, &ctx->attention_merge_parts};
    ctx->merge_work_group = FA_MERGE_LWS;
    for (int i = 0; i < 2 && s == FCL_SUCCESS; i++) {
        size_t wg;
        cl_ulong local;
        s = create_kernel(ctx, ctx->merge_unit.program, merge_names[i], merges[i], &wg, &local);
        if (s == FCL_SUCCESS && wg < ctx->merge_work_group)
            ctx->merge_work_group = wg ? wg : 1;
    }
    if (s == FCL_SUCCESS) {
        ctx->merge_unit.state = 1;
        return s;
    }
    for (int i = 0; i < 2; i++)
        fcl_release_kernel(merges[i]);
    fcl_release_unit(&ctx->merge_unit);
    return s;
}

/* ---- fcl_kv_write's kernel ---- */

/* Whether the device rounds float32 division correctly when asked
 * (-cl-fp32-correctly-rounded-divide-sqrt; Mesa's llvmpipe does not offer it). */
static int correct_division(cl_device_id device)
{
    cl_device_fp_config fp = 0;
    return clGetDeviceInfo(device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS &&
           (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT);
}

/* The kv_write kernel (cl/kv_write.cl), built on first use, with its work-group size: its
 * divisions correctly rounded where the device offers it (kw_div corrects them where it does
 * not). */
fcl_status fcl_build_kv_write(fcl_context *ctx, cl_kernel *kernel)
{
    fcl_unit *u = &ctx->kv_write_unit;
    fcl_status s = FCL_SUCCESS;
    if (!u->state) {
        fcl_text t = {0};
        fcl_text_add(&t, "/* flashcl prelude */\n#define FCL_VEC %zu\n#define FCL_FORCE_INLINE %d\n"
                         "#line 1 \"kv_formats.h\"\n%s\n#line 1 \"common.cl\"\n%s\n"
                         "#line 1 \"kv_write_args.h\"\n%s\n#line 1 \"kv_write.cl\"\n%s\n",
                     ctx->build.plan.vector_width, ctx->build.plan.force_inline, fcl_cl_kv_formats,
                     fcl_cl_common, fcl_cl_kv_write_args, fcl_cl_kv_write);
        s = fcl_build_unit_option(ctx, u, t.failed ? (free(t.s), NULL) : t.s,
                                  correct_division(ctx->device)
                                      ? "-cl-fp32-correctly-rounded-divide-sqrt"
                                      : NULL);
        size_t wg = 0;
        cl_ulong local;
        if (s == FCL_SUCCESS)
            s = create_kernel(ctx, u->program, "kv_write", &ctx->kv_write, &wg, &local);
        ctx->kv_write_group = wg < 64 ? (wg ? wg : 1) : 64; /* it runs with any */
        if (s != FCL_SUCCESS) {
            fcl_release_kernel(&ctx->kv_write);
            fcl_release_unit(u);
            return s;
        }
        u->state = 1;
    }
    *kernel = ctx->kv_write;
    return s;
}

/* ---- the portable attention kernels ---- */

/* Whether any of bucket b's tile kernels has been built: its tile is final from then on
 * (the decode and rows kernels do not depend on it). */
static int tile_final(const fcl_context *ctx, int b)
{
    int built = 0;
    for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++)
        built |= ctx->tile_unit[b][v].state != 0;
    return built;
}

/* Bucket b's tile kernel of feature set v. Where it does not fit the device (more local
 * memory than there is, or fewer work-items than its group) and it is the bucket's first
 * kernel, the planner refits the bucket's tile and it is built again (each round shrinks, so
 * the loop ends; it may end at the rows kernel, block_q 0); a later feature set's kernel that
 * does not fit is left unbuilt (state -1: a larger feature set's, or the rows kernel, serves). */
static fcl_status build_tile(fcl_context *ctx, int b, int v)
{
    kernel_plan *plan = &ctx->build.plan;
    struct fcl_attention_tile *tile = &plan->tile[b];
    fcl_unit *u = &ctx->tile_unit[b][v];
    cl_kernel *k = &ctx->attention[b][FCL_ATTENTION_PATH_TILE][v];
    const int first = !tile_final(ctx, b);
    while (tile->block_q) {
        parts p = {0};
        p.tile[b] = 1u << v;
        char name[48];
        size_t wg = 0;
        cl_ulong local = 0;
        int fits = 0;
        snprintf(name, sizeof name, "attention_d%zu%s", tile->max_head_dim,
                 fcl_attention_variant_suffix(v));
        fcl_status s = fcl_build_unit(ctx, u, program_source(plan, &p));
        if (s == FCL_SUCCESS)
            s = fcl_create_fitting(ctx, u->program, name, k, tile->work_group_size, &fits, &wg, &local);
        if (s != FCL_SUCCESS || !fits) {
            fcl_release_kernel(k);
            fcl_release_unit(u);
        }
        if (s != FCL_SUCCESS)
            return s;
        if (fits) {
            u->state = 1;
            if (local > tile->local_mem_size)
                tile->local_mem_size = local;
            ctx->info.attention_tiles[b] = *tile;
            return FCL_SUCCESS;
        }
        if (!first)
            break;
        fcl_plan_attention_refit(&ctx->info, b, plan->attention_accumulators,
                                 plan->attention_prefetch, wg, local, tile);
        ctx->info.attention_tiles[b] = *tile;
    }
    u->state = -1;
    return FCL_SUCCESS;
}

/* Bucket b's decode kernels of feature set v and K/V storage type dt (for one query head and
 * for GQA groups), an extra: where one does not fit, state -1 and the tile kernel serves.
 * A unit per storage type: a context builds only the types it decodes (POCL, all-feature
 * kernels at head dim 64: about 12 s of compiling a type). */
static fcl_status build_decode(fcl_context *ctx, int b, int v, fcl_dtype dt)
{
    fcl_unit *u = &ctx->decode_unit[b][v][dt];
    cl_kernel *kernels = ctx->attention_decode[b][v][dt];
    const size_t dim = fcl_attention_bucket_dim(b);
    parts p = {0};
    p.decode[b] = 1u << v;
    p.decode_types = 1u << dt;
    int fits = 1;
    fcl_status s = fcl_build_unit(ctx, u, program_source(&ctx->build.plan, &p));
    for (int g = 0; g < 2 && s == FCL_SUCCESS && fits; g++) {
        char name[64], heads[8] = "";
        size_t wg;
        cl_ulong local;
        if (g)
            snprintf(heads, sizeof heads, "_g%d", FA_DEC_HEADS);
        snprintf(name, sizeof name, "attention_decode_d%zu%s%s_%s", dim,
                 fcl_attention_variant_suffix(v), heads, fcl_dtype_suffix[dt]);
        s = fcl_create_fitting(ctx, u->program, name, &kernels[g], FA_DEC_LWS, &fits, &wg,
                               &local);
    }
    if (s == FCL_SUCCESS && fits) {
        u->state = 1;
        return s;
    }
    for (int g = 0; g < 2; g++)
        fcl_release_kernel(&kernels[g]);
    fcl_release_unit(u);
    if (s == FCL_SUCCESS)
        u->state = -1;
    return s;
}

static fcl_status build_rows(fcl_context *ctx, int b, int v)
{
    fcl_unit *u = &ctx->rows_unit[b][v];
    cl_kernel *k = &ctx->attention[b][FCL_ATTENTION_PATH_ROWS][v];
    parts p = {0};
    p.rows[b] = 1u << v;
    char name[40];
    size_t wg;
    cl_ulong local;
    const size_t dim = fcl_attention_bucket_dim(b);
    const char *suffix = fcl_attention_variant_suffix(v);
    snprintf(name, sizeof name, "attention_rows_d%zu%s", dim, suffix);
    fcl_status s = fcl_build_unit(ctx, u, program_source(&ctx->build.plan, &p));
    if (s == FCL_SUCCESS)
        s = create_kernel(ctx, u->program, name, k, &wg, &local);
    snprintf(name, sizeof name, "attention_rows_one_d%zu%s", dim, suffix);
    if (s == FCL_SUCCESS)
        s = create_kernel(ctx, u->program, name, &ctx->attention_rows_one[b][v], &wg, &local);
    if (s == FCL_SUCCESS) {
        u->state = 1;
        return s;
    }
    fcl_release_kernel(k);
    fcl_release_kernel(&ctx->attention_rows_one[b][v]);
    fcl_release_unit(u);
    return s;
}

/* ---- a launch's kernel ---- */

/* The kernel of feature set v on l's path, built where not yet tried; NULL where it does not
 * build or fit. */
static fcl_status path_kernel(fcl_context *ctx, const fcl_attention_launch *l, int v,
                              cl_kernel *kernel)
{
    const int b = l->bucket;
    fcl_status s = FCL_SUCCESS;
    *kernel = NULL;
    switch (l->path) {
    case FCL_ATTENTION_PATH_TILE:
        if (!fcl_plan_tile_built(b, v))
            break;
        if (!ctx->tile_unit[b][v].state)
            s = build_tile(ctx, b, v);
        if (ctx->tile_unit[b][v].state == 1)
            *kernel = ctx->attention[b][FCL_ATTENTION_PATH_TILE][v];
        break;
    case FCL_ATTENTION_PATH_DECODE:
        if (!fcl_decode_built_for(v))
            break;
        if (!ctx->decode_unit[b][v][l->dtype_kv].state)
            s = build_decode(ctx, b, v, l->dtype_kv);
        if (ctx->decode_unit[b][v][l->dtype_kv].state == 1)
            *kernel = ctx->attention_decode[b][v][l->dtype_kv][l->heads_step > 1];
        break;
    case FCL_ATTENTION_PATH_ROWS:
        if (!rows_built_for(v))
            break;
        if (!ctx->rows_unit[b][v].state)
            s = build_rows(ctx, b, v);
        if (ctx->rows_unit[b][v].state == 1)
            *kernel = l->one_query ? ctx->attention_rows_one[b][v]
                                   : ctx->attention[b][FCL_ATTENTION_PATH_ROWS][v];
        break;
    case FCL_ATTENTION_PATH_MMA:
    case FCL_ATTENTION_PATH_DECODE_NV:
        s = fcl_nvidia_path.attention_kernel(ctx, l, v, kernel);
        break;
    }
    return s;
}

/* The features variant v's build on l's path takes: the tensor-core kernel's, which take
 * GQA rows, add FA_FLAG_HEAD_ROWS (src/nvidia.c). */
static cl_uint path_features(const fcl_attention_launch *l, int v)
{
    const cl_uint features = (cl_uint)fcl_attention_variant_features(v);
    return l->path == FCL_ATTENTION_PATH_MMA ? FA_WITH_HEAD_ROWS(features) : features;
}

fcl_status fcl_attention_kernel(fcl_context *ctx, const fcl_attention_launch *l,
                                cl_uint flags, cl_kernel *kernel)
{
    /* the fewest features that cover flags first (KV covers every call) */
    static const int order[FCL_ATTENTION_VARIANTS] = {FCL_ATTENTION_PLAIN, FCL_ATTENTION_SCORES,
                                                      FCL_ATTENTION_ALL, FCL_ATTENTION_KV};
    fcl_status s = FCL_SUCCESS;
    *kernel = NULL;
    for (int i = 0; i < FCL_ATTENTION_VARIANTS && s == FCL_SUCCESS && !*kernel; i++)
        if (!(flags & ~path_features(l, order[i])))
            s = path_kernel(ctx, l, order[i], kernel);
    return s;
}

/* ---- context creation ---- */

void fcl_release_kernels(fcl_context *ctx)
{
    release_softmax(ctx);
    fcl_nvidia_path.release(ctx);
    fcl_release_kernel(&ctx->kv_write);
    fcl_release_unit(&ctx->kv_write_unit);
    fcl_release_kernel(&ctx->attention_merge_splits);
    fcl_release_kernel(&ctx->attention_merge_parts);
    fcl_release_unit(&ctx->merge_unit);
    for (int b = 0; b < FCL_ATTENTION_BUCKETS; b++) {
        for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++) {
            for (int p = 0; p < 3; p++)
                fcl_release_kernel(&ctx->attention[b][p][v]);
            for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++) {
                for (int g = 0; g < 2; g++)
                    fcl_release_kernel(&ctx->attention_decode[b][v][dt][g]);
                fcl_release_unit(&ctx->decode_unit[b][v][dt]);
            }
            fcl_release_unit(&ctx->tile_unit[b][v]);
            fcl_release_kernel(&ctx->attention_rows_one[b][v]);
            fcl_release_unit(&ctx->rows_unit[b][v]);
        }
    }
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
    plan.kv_decode_calls = tuning->kv_decode_calls;
    plan.cache_prefetch = tuning->cache_prefetch;
    plan.attention_pv_vec = tuning->attention_pv_vec;
    plan.attention_prefetch = tuning->attention_prefetch;
    plan.attention_prefetch_items = tuning->attention_prefetch_items;
    fcl_plan_attention_tiles(info, tuning, plan.tile);
    return plan;
}

char *fcl_kernel_source(const fcl_device_info *info, const char *tune, int program)
{
    fcl_tuning tuning;
    if (fcl_tuning_for(NULL, info, tune, &tuning) != FCL_SUCCESS)
        return NULL;
    kernel_plan plan = initial_plan(info, &tuning);
    parts p = all_parts(&plan);
    if (program == FCL_SOURCE_SOFTMAX)
        p = (parts){.softmax = 1};
    else if (program == FCL_SOURCE_MERGE)
        p = (parts){.merge = 1};
    else if (program >= 0) { /* a bucket's kernels in one program */
        const parts all = p;
        p = (parts){0};
        p.tile[program] = all.tile[program];
        p.decode[program] = all.decode[program];
        p.rows[program] = all.rows[program];
    } else if (program != FCL_SOURCE_ALL) {
        return NULL;
    }
    return program_source(&plan, &p);
}

/* Where and how to build (ctx->build): the cache directory and the compiler options. */
static fcl_status build_setup_for(fcl_context *ctx, const char *requested_cache_dir)
{
    fcl_build_setup *setup = &ctx->build;
    const char *extra = getenv("FLASHCL_BUILD_OPTIONS");
    ctx->info.program_cache_usable = fcl_cache_usable(&ctx->info);
    const char *dir = fcl_cache_dir(requested_cache_dir, setup->cache_dir, sizeof setup->cache_dir);
    setup->has_dir = dir != NULL;
    setup->use_cache = dir && ctx->info.program_cache_usable;
    if (dir && dir != setup->cache_dir)
        snprintf(setup->cache_dir, sizeof setup->cache_dir, "%s", dir);
    if (snprintf(setup->options, sizeof setup->options, "%s %s", FCL_BASE_BUILD_OPTIONS,
                 extra ? extra : "") >= (int)sizeof setup->options)
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "FLASHCL_BUILD_OPTIONS is longer than %zu characters",
                        sizeof setup->options - sizeof FCL_BASE_BUILD_OPTIONS - 1);
    return FCL_SUCCESS;
}

fcl_status fcl_build_kernels(fcl_context *ctx, const fcl_context_options *opts)
{
    fcl_status s = build_setup_for(ctx, opts ? opts->cache_dir : NULL);
    if (s != FCL_SUCCESS)
        return s;
    char stored[256] = "";
    const char *given = opts ? opts->tuning : NULL;
    if (!given && ctx->build.has_dir)
        fcl_tuned_load(ctx->build.cache_dir, &ctx->info, stored, sizeof stored);
    fcl_tuning tuning;
    s = fcl_tuning_resolve(ctx, &ctx->info, given, stored, getenv("FLASHCL_TUNE"), &tuning);
    if (s != FCL_SUCCESS)
        return s;
    snprintf(ctx->info.tuning, sizeof ctx->info.tuning, "%s", tuning.source);
    kernel_plan *plan = &ctx->build.plan;
    *plan = initial_plan(&ctx->info, &tuning);
    /* The plan; the fields that depend on compiled kernels change where those say so. */
    memcpy(ctx->info.attention_tiles, plan->tile, sizeof plan->tile);
    ctx->info.softmax_work_group_size = plan->work_group_size;
    ctx->info.softmax_vector_width = plan->vector_width;
    ctx->info.softmax_rows_per_item = tuning.softmax_rows;
    ctx->info.softmax_block_items = plan->block_items;
    ctx->info.softmax_block_min_lanes = tuning.softmax_block_lanes;
    ctx->info.softmax_block_cols = plan->work_group_size * plan->block_items;
    ctx->info.attention_rows_per_item = tuning.attention_rows;
    ctx->info.softmax_fused_max_cols = fcl_plan_fused_max_cols(&ctx->info);
    s = fcl_nvidia_path.check(ctx, &tuning);
    if (s != FCL_SUCCESS)
        fcl_release_kernels(ctx);
    return s;
}

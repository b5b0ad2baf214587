/* Planning: per-device parameters, work-group size, the fused-row limit, the softmax
 * strategy and the attention tiles, all derived from what the device (and the built
 * kernels) report. Pure functions of fcl_device_info, so tests can inject capabilities. */
#include "internal.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Work-groups launched per compute unit at most; they loop over the remaining rows. */
#define FCL_GROUPS_PER_CU 32
/* SPLIT: a slice gives each work-item at least this many elements, so the merge and the
 * second launch stay cheap next to the streaming. */
#define FCL_SPLIT_MIN_ELEMENTS_PER_ITEM 16

static const size_t bucket_dims[FCL_ATTENTION_BUCKETS] = {64, 128, 256, 576};
/* (block_q, block_kv), best first: large tiles reuse each loaded K/V element most. 4 x 8 only
 * for groups of 4 rows of work-items (MLA's head dims in 32 KiB of local memory). */
static const size_t tile_candidates[][2] = {{64, 32}, {64, 16}, {32, 32}, {16, 32}, {32, 16},
                                            {16, 16}, {8, 16}, {8, 8}, {4, 8}};
#define N_TILE_CANDIDATES (int)(sizeof tile_candidates / sizeof tile_candidates[0])
static size_t floor_pow2(size_t x)
{
    size_t p = 1;
    while (p <= x / 2)
        p *= 2;
    return p;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }
/* b >= 1 at every call: a work-group or tile size, or a count clamped to at least 1 (which
 * the analyzer cannot follow through the callers). */
static size_t ceil_div(size_t a, size_t b)
{
    return a / b + (a % b != 0); // NOLINT(clang-analyzer-core.DivideZero)
}
static int is_gpu_like(const fcl_device_info *info) { return !(info->type & CL_DEVICE_TYPE_CPU); }

/* ---- per-device parameters ---- */

/* The device table: the first entry matching vendor (0: any) and type wins. */
static const struct device_entry {
    cl_uint vendor_id;
    cl_device_type type;
    const char *name;
    size_t softmax_work_group, vector_width; /* vector_width 0: the device's preferred */
    size_t block_items, block_lanes;         /* rows in registers (FCL_BLOCK_ITEMS) */
    /* Attention: float accumulators per work-item (8 x 8 work-items per group: output and
     * score blocks) beyond which the device spills registers; whether the tile kernel's
     * o += P V reads p 4 keys at a time (FA_PV_VEC); whether it may prefetch the next K and
     * V tiles (FA_PREFETCH, where a work-item owns enough query rows), and how many elements
     * of each a work-item holds in registers at most (FA_PF_MAX). */
    size_t attention_accumulators;
    int attention_pv_vec, attention_prefetch, attention_prefetch_items;
    /* K/V formats decoded by calls rather than inlined at every load (FCL_KV_CALLS); whether
     * the rows decode kernel asks the caches for K and V rows ahead (FA_CACHE_PREFETCH).
     * Bytes: as ints they left the entry 8 bytes of padding, which clang-tidy refuses. */
    cl_uchar kv_decode_calls, cache_prefetch;
} device_table[] = {
    /* Warps of 32; 256 work-items per row hide the memory latency; float4 loads coalesce
     * into 128-bit transactions. Rows up to 256 * 16 elements stay in registers, 8 or more
     * work-items per row: measured on the H200 at N = 128, 8 work-items per row (16
     * elements each) run 3.2x faster than 32 (4 each, and 12 idle slots paying for their
     * exp), at 1024-4096 the same; 32 items per work-item run slower
     * at every N. 96 attention accumulators admit 64 x 32 tiles at head_dim 64: with the
     * next K and V tiles prefetched, 16% faster than 64 x 16 (80) on the H200 (25.4 against
     * 21.9 TFLOP/s, float32). p read 4 keys at a time: 1-5% faster on the H200 (prefetching,
     * head dims 64 and 128). 48 of a 32 x 32 tile's 64 elements a work-item prefetched at
     * head dim 128: 11% faster than 32 in float32 and f16 storage (6% causal); 52 to 64
     * 6-9%, 40 and 44 within 4% (H200, same calls). */
    {0x10de, CL_DEVICE_TYPE_GPU, "NVIDIA GPU", 256, 4, 16, 8, 96, 1, 1, 48, 0, 0},
    /* Wavefronts of 64; 256 is the largest work-group AMD's OpenCL allows by default. The
     * register rows as on NVIDIA (not measured on AMD hardware). 76 accumulators: on wave32
     * RDNA2 (gfx1030, .ci/amd-offline-check.sh) the 32 x 32 tile at head_dim 128 (80)
     * spilled 22 VGPRs with v0.2's per-sequence addressing, and 32 x 16 (72, after 16 x 32
     * where nothing prefetches) 1 in the all-feature build, so that bucket takes 16 x 32. p
     * read 4 keys at a time spills 27-88 VGPRs on gfx1030 at every head dim (the compiler
     * loads the 4 keys' V rows at once), and so does prefetching at head dims 64 and 128
     * (27-71: the fetched tile stays live through the scores); gfx90a has room for both.
     * The decode kernel's build for K/V formats spilled 48-188 bytes on gfx1030 with its
     * decoders inlined at every load, none as calls. */
    {0x1002, CL_DEVICE_TYPE_GPU, "AMD GPU", 256, 4, 16, 8, 76, 0, 0, 32, 1, 0},
    /* Decoders inlined: on the H200 7-9% faster than as calls. */
    {0, CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR, "GPU", 256, 4, 16, 8, 80, 0, 1, 32, 0, 0},
    /* POCL and other CPU drivers run a work-group as a loop over its work-items and save
     * what lives across a barrier per work-item: a short group keeps that cheap, and
     * vectors as wide as the SIMD registers do the work. Measured on POCL 3.1 (2 cores,
     * AVX-512): 4 work-items beat 64 by up to 3x on long rows;
     * groups of 1 or 2 make POCL 3.1's work-group compiler abort on the half kernels.
     * Prefetched K and V tiles would be values saved across barriers per work-item; on
     * Mesa's llvmpipe its tiles (16 x 16, where one buffer leaves room for 16 x 32) ran up
     * to 20% slower. Here the rows kernel runs the calls and the tile and decode kernels only
     * tests: their K/V decoders as calls cut POCL's compile of those builds by a third (72 to
     * 49 s at head dim 64).
     * x86 CPUs of POCL and Intel's runtime (vendor 0x8086, whatever the CPU's maker), which
     * compile kernels to the CPU's own code, also prefetch K and V rows two blocks ahead in
     * the rows decode kernel: rows of a [batch][len][heads][dim] cache lie heads * row bytes
     * apart, a stride the CPU's prefetchers do not follow (POCL 3.1, 2 cores, B2 H32/8 Lk 8K
     * D128 in that layout: f16 30.0 -> 15.0 ms, q8_0 16.7 -> 11.6; [batch][heads][len][dim]
     * as before). Mesa's rusticl (vendor 0) turns kernels into SPIR-V, whose translator
     * refuses the prefetch. */
    {0x8086, CL_DEVICE_TYPE_CPU, "x86 CPU", 4, 0, 0, 1, 80, 0, 0, 32, 1, 1},
    {0, CL_DEVICE_TYPE_CPU, "CPU", 4, 0, 0, 1, 80, 0, 0, 32, 1, 0},
};

static size_t width_in_range(size_t w) { return w >= 16 ? 16 : w >= 8 ? 8 : 4; }

/* FLASHCL_TUNE's keys, one a field of fcl_tuning, and what each value may be: the parser and
 * the error text come from this one table. Switches and the tile are ints, the rest size_t. */
typedef enum {
    TUNE_POW2, TUNE_WIDTH, TUNE_ITEMS, TUNE_SWITCH, TUNE_GROUP, TUNE_FETCH, TUNE_TILE
} tune_kind;
/* The values of the kinds that take a few (TUNE_WIDTH, TUNE_GROUP, TUNE_FETCH). */
static const size_t width_values[] = {4, 8, 16}, group_values[] = {16, 32, 64},
                    fetch_values[] = {16, 32, 48, 64};
static int one_of(size_t v, const size_t *values, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (values[i] == v)
            return 1;
    return 0;
}
static const char *const tune_kind_text[] = {"a power of two up to 1024", "4, 8 or 16", "0 to 64",
                                             "0 or 1", "16, 32 or 64", "16, 32, 48 or 64",
                                             NULL};
static const struct tune_key {
    const char *key;
    tune_kind kind;
    size_t offset;
} tune_keys[] = {
    {"softmax_wg", TUNE_POW2, offsetof(fcl_tuning, softmax_work_group)},
    {"vector_width", TUNE_WIDTH, offsetof(fcl_tuning, vector_width)},
    {"block_items", TUNE_ITEMS, offsetof(fcl_tuning, softmax_block_items)},
    {"block_lanes", TUNE_POW2, offsetof(fcl_tuning, softmax_block_lanes)},
    {"softmax_rows", TUNE_SWITCH, offsetof(fcl_tuning, softmax_rows)},
    {"attention_rows", TUNE_SWITCH, offsetof(fcl_tuning, attention_rows)},
    {"attention_prefetch", TUNE_SWITCH, offsetof(fcl_tuning, attention_prefetch)},
    {"attention_prefetch_items", TUNE_FETCH, offsetof(fcl_tuning, attention_prefetch_items)},
    {"attention_pv_vec", TUNE_SWITCH, offsetof(fcl_tuning, attention_pv_vec)},
    {"attention_mma", TUNE_SWITCH, offsetof(fcl_tuning, attention_mma)},
    {"attention_kv_decode", TUNE_SWITCH, offsetof(fcl_tuning, attention_kv_decode)},
    {"attention_kv_direct", TUNE_SWITCH, offsetof(fcl_tuning, attention_kv_direct)},
    {"attention_merge_in_kernel", TUNE_SWITCH, offsetof(fcl_tuning, attention_merge_in_kernel)},
    {"attention_kv_fixed", TUNE_SWITCH, offsetof(fcl_tuning, attention_kv_fixed)},
    {"attention_fp8_cvt", TUNE_SWITCH, offsetof(fcl_tuning, attention_fp8_cvt)},
    {"softmax_nv", TUNE_SWITCH, offsetof(fcl_tuning, softmax_nv)},
    {"attention_group", TUNE_GROUP, offsetof(fcl_tuning, attention_group)},
    {"attention_tile", TUNE_TILE, offsetof(fcl_tuning, attention_tile)},
};
#define N_TUNE_KEYS (sizeof tune_keys / sizeof tune_keys[0])

/* A value of the kind (a tile: its candidate index) from text; -1 where it is not one. */
static long tune_value(tune_kind kind, const char *text)
{
    size_t v, bq, bk;
    char tail;
    if (kind == TUNE_TILE)
        return sscanf(text, "%zux%zu%c", &bq, &bk, &tail) == 2 ? fcl_attention_tile_candidate(bq, bk)
                                                               : -1;
    if (sscanf(text, "%zu%c", &v, &tail) != 1)
        return -1;
    const int ok = kind == TUNE_POW2    ? v >= 1 && v <= 1024 && (v & (v - 1)) == 0
                   : kind == TUNE_WIDTH  ? one_of(v, width_values, 3)
                   : kind == TUNE_ITEMS  ? v <= 64
                   : kind == TUNE_SWITCH ? v <= 1
                   : kind == TUNE_FETCH  ? one_of(v, fetch_values, 4)
                                         : one_of(v, group_values, 3);
    return ok ? (long)v : -1;
}

/* Applies one "key=value" override; returns 0 when the key or value is not understood. */
static int apply_override(fcl_tuning *t, const char *key, const char *value)
{
    for (size_t i = 0; i < N_TUNE_KEYS; i++) {
        if (strcmp(key, tune_keys[i].key) != 0)
            continue;
        const long v = tune_value(tune_keys[i].kind, value);
        char *field = (char *)t + tune_keys[i].offset;
        if (v < 0)
            return 0;
        if (tune_keys[i].kind == TUNE_SWITCH || tune_keys[i].kind == TUNE_TILE)
            *(int *)(void *)field = (int)v;
        else
            *(size_t *)(void *)field = (size_t)v;
        return 1;
    }
    return 0;
}

/* Appends text to buf (cap bytes, *n of them used), cutting what does not fit. */
static void append(char *buf, size_t cap, size_t *n, const char *text)
{
    if (*n >= cap)
        return;
    const int k = snprintf(buf + *n, cap - *n, "%s", text);
    *n += k > 0 ? (size_t)k : 0;
}

/* The keys and their values, for the error text: "key=<values>, ...". */
static void tune_keys_text(char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_TUNE_KEYS; i++) {
        append(buf, cap, &n, i ? ", " : "");
        append(buf, cap, &n, tune_keys[i].key);
        append(buf, cap, &n, "=<");
        if (tune_keys[i].kind != TUNE_TILE)
            append(buf, cap, &n, tune_kind_text[tune_keys[i].kind]);
        for (int c = 0; tune_keys[i].kind == TUNE_TILE && c < N_TILE_CANDIDATES; c++) {
            char tile[32];
            snprintf(tile, sizeof tile, "%s%zux%zu", c ? ", " : "one of ", tile_candidates[c][0],
                     tile_candidates[c][1]);
            append(buf, cap, &n, tile);
        }
        append(buf, cap, &n, ">");
    }
}

void fcl_tuning_defaults(const fcl_device_info *info, fcl_tuning *t)
{
    size_t n = sizeof device_table / sizeof device_table[0];
    const struct device_entry *e = &device_table[n - 1];
    for (size_t i = 0; i < n; i++)
        if ((device_table[i].vendor_id == 0 || device_table[i].vendor_id == info->vendor_id) &&
            (device_table[i].type & info->type)) {
            e = &device_table[i];
            break;
        }
    t->softmax_work_group = e->softmax_work_group;
    t->vector_width = width_in_range(e->vector_width ? e->vector_width
                                                     : info->preferred_vector_width_float);
    t->softmax_block_items = e->block_items;
    t->softmax_block_lanes = e->block_lanes;
    t->attention_accumulators = e->attention_accumulators;
    t->attention_pv_vec = e->attention_pv_vec;
    t->attention_prefetch = e->attention_prefetch;
    t->attention_prefetch_items = (size_t)e->attention_prefetch_items;
    t->attention_tile = -1;
    t->attention_group = 0;
    t->softmax_rows = info->local_mem_is_global;
    /* The rows kernel loops some hundred times per key against the tile kernel's few (see
     * loop_iterations): where the driver caps a work-item's loops, tiles serve. */
    t->attention_rows = info->local_mem_is_global && !info->loop_iteration_cap;
    /* Oclgrind 21.10 (the simulator CI checks the kernels with) cannot run the
     * llvm.experimental.noalias.scope.decl that forced inlining of struct-returning helpers
     * leaves; it needs no speed. */
    t->force_inline = strstr(info->name, "Oclgrind") == NULL;
    t->kv_decode_calls = e->kv_decode_calls;
    t->cache_prefetch = e->cache_prefetch;
    t->attention_mma = 1;
    t->attention_kv_decode = 1;
    t->attention_kv_direct = 1;
    t->attention_merge_in_kernel = 1;
    t->attention_kv_fixed = 1;
    t->attention_fp8_cvt = 1;
    t->softmax_nv = 1;
    snprintf(t->source, sizeof t->source, "%s defaults", e->name);
}

#define MAX_OVERRIDES 255
/* Applies "key=value,..." (at most MAX_OVERRIDES characters) to t; 0 where it is longer or
 * an item is not understood (that item in bad). */
static int parse_overrides(fcl_tuning *t, const char *overrides, char *bad, size_t bad_cap)
{
    char buf[MAX_OVERRIDES + 1];
    bad[0] = '\0';
    if (snprintf(buf, sizeof buf, "%s", overrides) >= (int)sizeof buf)
        return 0;
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        char *eq = strchr(item, '=');
        if (eq)
            *eq = '\0';
        if (!eq || !apply_override(t, item, eq + 1)) {
            if (eq)
                *eq = '=';
            snprintf(bad, bad_cap, "%s", item);
            return 0;
        }
    }
    return 1;
}

/* Names where t's last overrides came from in t->source. */
static void note_source(fcl_tuning *t, const char *where)
{
    const size_t n = strlen(t->source);
    snprintf(t->source + n, sizeof t->source - n, " + %s", where);
}

fcl_status fcl_tuning_apply(fcl_context *ctx, fcl_tuning *t, const char *overrides,
                            const char *where)
{
    if (!overrides || !*overrides)
        return FCL_SUCCESS;
    char bad[MAX_OVERRIDES + 1];
    if (!parse_overrides(t, overrides, bad, sizeof bad)) {
        if (!bad[0])
            return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "%s is longer than %d characters",
                            where, MAX_OVERRIDES);
        char keys[1024];
        tune_keys_text(keys, sizeof keys);
        return fcl_fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                        "%s: \"%s\" is not understood; give %s, separated by commas", where, bad,
                        keys);
    }
    note_source(t, where);
    return FCL_SUCCESS;
}

fcl_status fcl_tuning_for(fcl_context *ctx, const fcl_device_info *info, const char *overrides,
                          fcl_tuning *t)
{
    fcl_tuning_defaults(info, t);
    return fcl_tuning_apply(ctx, t, overrides, "FLASHCL_TUNE");
}

/* POCL 5.0's work-group compiler aborts the process on the tile and decode kernels (the
 * assertion `region_entry_barrier != NULL`, which cache.c meets in clGetProgramInfo too);
 * the rows kernels, which have no barriers, serve every call there. Seen on 5.0 only. */
static int tiles_abort_driver(const fcl_device_info *info)
{
    return fcl_pocl_major(info) == 5;
}

/* Whether t can run on info's device without taking the process down. */
static int tuning_runs(const fcl_device_info *info, const fcl_tuning *t)
{
    return t->attention_rows || !tiles_abort_driver(info);
}

static fcl_status check_tuning(fcl_context *ctx, const fcl_device_info *info, const fcl_tuning *t)
{
    if (!tuning_runs(info, t))
        return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED,
                        "attention_rows=0 (%s): POCL %s's kernel compiler aborts the process on "
                        "the tile and decode kernels; the rows kernels serve every call there",
                        t->source, info->driver_version);
    return FCL_SUCCESS;
}

fcl_status fcl_tuning_resolve(fcl_context *ctx, const fcl_device_info *info, const char *given,
                              const char *stored, const char *env, fcl_tuning *t)
{
    fcl_tuning_defaults(info, t);
    if (given) {
        fcl_status s = fcl_tuning_apply(ctx, t, given, "options.tuning");
        return s == FCL_SUCCESS ? check_tuning(ctx, info, t) : s;
    }
    fcl_tuning tuned = *t;
    char bad[MAX_OVERRIDES + 1];
    if (stored && *stored && parse_overrides(&tuned, stored, bad, sizeof bad) &&
        tuning_runs(info, &tuned)) {
        *t = tuned; /* an entry that no longer parses (another version's keys) is ignored */
        note_source(t, "tuned");
    }
    fcl_status s = fcl_tuning_apply(ctx, t, env, "FLASHCL_TUNE");
    return s == FCL_SUCCESS ? check_tuning(ctx, info, t) : s;
}

int fcl_tuning_value(const char *key, int i, char *buf, size_t cap)
{
    if (!key || i < 0 || !buf || !cap)
        return 0;
    for (size_t k = 0; k < N_TUNE_KEYS; k++) {
        if (strcmp(key, tune_keys[k].key) != 0)
            continue;
        switch (tune_keys[k].kind) {
        case TUNE_POW2: /* 1 to 1024 */
            return i <= 10 && snprintf(buf, cap, "%zu", (size_t)1 << i) < (int)cap;
        case TUNE_ITEMS: /* 0, then the powers of two to 64 */
            return i <= 7 && snprintf(buf, cap, "%zu", i ? (size_t)1 << (i - 1) : 0) < (int)cap;
        case TUNE_SWITCH:
            return i <= 1 && snprintf(buf, cap, "%d", i) < (int)cap;
        case TUNE_WIDTH:
            return i < 3 && snprintf(buf, cap, "%zu", width_values[i]) < (int)cap;
        case TUNE_GROUP:
            return i < 3 && snprintf(buf, cap, "%zu", group_values[i]) < (int)cap;
        case TUNE_FETCH:
            return i < 4 && snprintf(buf, cap, "%zu", fetch_values[i]) < (int)cap;
        case TUNE_TILE:
            return i < N_TILE_CANDIDATES && snprintf(buf, cap, "%zux%zu", tile_candidates[i][0],
                                                     tile_candidates[i][1]) < (int)cap;
        }
    }
    return 0;
}

size_t fcl_plan_work_group_size(const fcl_device_info *info, size_t wanted)
{
    size_t limit = min_size(wanted, info->max_work_group_size);
    if (info->kernel_work_group_size)
        limit = min_size(limit, info->kernel_work_group_size);
    return floor_pow2(limit ? limit : 1);
}

size_t fcl_plan_fused_max_cols(const fcl_device_info *info)
{
    size_t in_local = 0;
    if (info->local_mem_size > info->kernel_local_mem_size)
        in_local = (size_t)((info->local_mem_size - info->kernel_local_mem_size) / sizeof(float));
    return in_local > info->softmax_block_cols ? in_local : info->softmax_block_cols;
}

/* softmax_block's work-items per row: the fewest that hold the row, within the tuning's
 * minimum and the work-group, and never more than the row's elements (the kernel lets no
 * work-item read past its row's end). */
static size_t block_lanes(const fcl_device_info *info, size_t cols)
{
    size_t lanes = info->softmax_block_min_lanes ? info->softmax_block_min_lanes : 1;
    while (lanes * info->softmax_block_items < cols)
        lanes *= 2;
    lanes = min_size(min_size(lanes, info->softmax_work_group_size), floor_pow2(cols));
    return lanes ? lanes : 1;
}

/* Measured on the H100 (issue 13): 8 vectors a work-item (128 bytes) keep 94-97% of
 * the copy's speed from 128 to 8192 float32 and 16384 16-bit elements a row, 4 a little less
 * past 1024; 16 spill in the 16-bit types (255 registers) but hold 16384 float32 at 90% (177
 * registers). NVIDIA's driver allows this kernel groups of 256 only (also at 54 registers). */
size_t fcl_plan_softmax_nv_vecs(fcl_dtype t, int build)
{
    return build == 0 ? SM_NV_VECS : t == FCL_DTYPE_F32 ? 2 * SM_NV_VECS : 0;
}

/* Elements of storage type t in one of NVIDIA's softmax vectors (16 bytes). */
static size_t nv_vector(fcl_dtype t) { return 16 / fcl_dtype_size(t); }

/* Whether NVIDIA's softmax kernels take d: they are built, and d's rows are 16-byte vectors
 * starting at multiples of 16 bytes (vector indices, and a batch's reach past them, in 32
 * bits). */
static int nv_takes(const fcl_device_info *info, const fcl_softmax_desc *d)
{
    const size_t vector = nv_vector(d->dtype);
    return info->softmax_nv_cols && d->cols % vector == 0 && d->in_stride % vector == 0 &&
           d->out_stride % vector == 0 && d->cols / vector <= UINT32_MAX / 2;
}

/* FUSED on NVIDIA's softmax_nv for d, up to softmax_nv_cols elements a row: its build (the
 * first that holds the row) + 1 and work-items per row (the fewest that hold the row, and no
 * more than the row's vectors, as the kernel needs). Returns 0 where it does not take d. */
static int nv_fused_build(const fcl_device_info *info, const fcl_softmax_desc *d, size_t *lanes)
{
    const size_t vectors = d->cols / nv_vector(d->dtype);
    if (!nv_takes(info, d) || d->cols > info->softmax_nv_cols)
        return 0;
    int build = 0;
    while (SM_NV_LWS * fcl_plan_softmax_nv_vecs(d->dtype, build) < vectors)
        if (++build == FCL_SOFTMAX_NV_BUILDS || !fcl_plan_softmax_nv_vecs(d->dtype, build))
            return 0;
    const size_t vecs = fcl_plan_softmax_nv_vecs(d->dtype, build);
    *lanes = 1;
    while (*lanes * vecs < vectors)
        *lanes *= 2;
    *lanes = min_size(*lanes, floor_pow2(vectors));
    return build + 1;
}

/* Work-groups needed to keep every compute unit busy: a GPU unit wants several groups
 * in flight to hide latency, a CPU core one. */
static size_t groups_to_fill(const fcl_device_info *info)
{
    return (size_t)info->compute_units * (is_gpu_like(info) ? 2 : 1);
}

/* Slices per row for SPLIT: enough groups to fill the device several times over (a CPU
 * once, so each core has one slice), each slice long enough to be worth a work-group. */
static size_t split_slices(const fcl_device_info *info, const fcl_softmax_desc *d, size_t lws,
                           int forced)
{
    size_t target = (size_t)info->compute_units * (is_gpu_like(info) ? 8 : 1);
    size_t slices = ceil_div(target, d->rows);
    size_t min_slice = forced ? lws : lws * FCL_SPLIT_MIN_ELEMENTS_PER_ITEM;
    if (forced && slices < 2)
        slices = 2; /* a forced split should really split where the row allows it */
    slices = min_size(slices, min_size(d->cols / min_slice, FCL_SPLIT_MAX_SLICES));
    return slices ? slices : 1;
}

/* Loop iterations one work-item makes over one row (or SPLIT slice): up to three passes
 * (max, sum, write) of a vector an iteration, a quarter more for the streaming loops'
 * batches, and the short loops (tails, reductions, the merge over the slices). */
#define FCL_SHORT_LOOPS (64 + FCL_SPLIT_MAX_SLICES)
static size_t row_iterations(const fcl_device_info *info, const fcl_softmax_launch *l)
{
    size_t lanes = l->per_item ? 1 : l->lanes ? l->lanes : l->work_group_size;
    return 4 * ceil_div(l->slice_cols, lanes * info->softmax_vector_width) + FCL_SHORT_LOOPS;
}

/* Where the driver stops a work-item's loops after cap iterations in all (Mesa's llvmpipe:
 * 65535), every work-item stays within it: ONLINE gives a row a work-group instead of one
 * work-item, rows too long for that are cut into SPLIT slices, and enough work-groups run
 * that none takes more rows than the cap allows. A forced FUSED or ONLINE whose rows no
 * work-group can take within the cap is unsupported (AUTO and SPLIT serve them). */
static fcl_status fit_loop_cap(const fcl_device_info *info, const fcl_softmax_desc *d,
                               fcl_softmax_launch *l)
{
    const size_t cap = info->loop_iteration_cap, lws = info->softmax_work_group_size;
    if (!cap)
        return FCL_SUCCESS;
    if (cap <= FCL_SHORT_LOOPS + 4)
        return FCL_ERROR_UNSUPPORTED;
    if (l->per_item && row_iterations(info, l) > cap) {
        l->per_item = 0;
        l->work_group_size = lws;
    }
    if (row_iterations(info, l) > cap) {
        if (d->algo != FCL_SOFTMAX_AUTO && d->algo != FCL_SOFTMAX_SPLIT)
            return FCL_ERROR_UNSUPPORTED;
        size_t slice_max = (cap - FCL_SHORT_LOOPS) / 4 * lws * info->softmax_vector_width;
        size_t slices = ceil_div(d->cols, slice_max);
        if (slices > FCL_SPLIT_MAX_SLICES)
            return FCL_ERROR_UNSUPPORTED;
        l->algo = FCL_SOFTMAX_SPLIT;
        l->lanes = 0;
        l->work_group_size = lws;
        l->slice_cols = ceil_div(d->cols, slices);
        l->slices = ceil_div(d->cols, l->slice_cols);
    }
    /* Rows (or slices) a work-group takes at once, and so how many it may take in all. */
    size_t units = d->rows * l->slices, per_pass = l->lanes ? l->work_group_size / l->lanes : 1;
    size_t passes = cap / row_iterations(info, l);
    size_t groups = ceil_div(units, per_pass * passes);
    if (groups > l->groups)
        l->groups = min_size(groups, ceil_div(units, per_pass));
    return FCL_SUCCESS;
}

fcl_status fcl_plan_softmax(const fcl_device_info *info, const fcl_softmax_desc *d,
                            fcl_softmax_launch *launch)
{
    size_t lws = info->softmax_work_group_size;
    size_t max_groups = (size_t)info->compute_units * FCL_GROUPS_PER_CU;
    fcl_softmax_algo algo = d->algo;
    size_t nv_lanes = 0;
    const int nv_build = nv_fused_build(info, d, &nv_lanes);
    int fits = d->cols <= info->softmax_fused_max_cols || nv_build;

    if (algo == FCL_SOFTMAX_FUSED && !fits)
        return FCL_ERROR_UNSUPPORTED;
    if (algo == FCL_SOFTMAX_AUTO) {
        if (fits && !info->softmax_rows_per_item)
            algo = FCL_SOFTMAX_FUSED;
        else if (d->rows < groups_to_fill(info) && split_slices(info, d, lws, 0) >= 2)
            algo = FCL_SOFTMAX_SPLIT;
        else
            algo = FCL_SOFTMAX_ONLINE;
    }
    launch->algo = algo;
    launch->work_group_size = lws;
    launch->slices = 1;
    launch->slice_cols = d->cols;
    launch->nv_stream = algo != FCL_SOFTMAX_FUSED && nv_takes(info, d);
    if (algo == FCL_SOFTMAX_SPLIT) {
        size_t slices = split_slices(info, d, lws, d->algo == FCL_SOFTMAX_SPLIT);
        launch->slice_cols = ceil_div(d->cols, slices);
        if (launch->nv_stream) /* slices of whole 16-byte vectors */
            launch->slice_cols =
                ceil_div(launch->slice_cols, nv_vector(d->dtype)) * nv_vector(d->dtype);
        launch->slices = ceil_div(d->cols, launch->slice_cols); /* no empty slice */
    }
    launch->groups = min_size(d->rows * launch->slices, max_groups ? max_groups : 1);
    if (launch->nv_stream)
        launch->work_group_size = SM_NV_LWS;
    launch->lanes = 0;
    launch->nv_build = algo == FCL_SOFTMAX_FUSED ? nv_build : 0;
    if (launch->nv_build) {
        launch->lanes = nv_lanes;
        launch->work_group_size = SM_NV_LWS;
    } else if (algo == FCL_SOFTMAX_FUSED && d->cols <= info->softmax_block_cols) {
        launch->lanes = block_lanes(info, d->cols);
    }
    if (launch->lanes) {
        size_t rows_per_group = launch->work_group_size / launch->lanes;
        launch->groups = min_size(ceil_div(d->rows, rows_per_group), max_groups ? max_groups : 1);
    }
    launch->per_item = algo == FCL_SOFTMAX_ONLINE && info->softmax_rows_per_item;
    if (launch->per_item)
        launch->work_group_size = 1; /* softmax_rows: groups of one work-item, one row each */
    return fit_loop_cap(info, d, launch);
}

/* ---- attention ---- */

/* Work-groups per compute unit that keep it busy; fewer query tiles call for split-KV. */
#define FCL_ATTENTION_GPU_GROUPS_PER_CU 4
#define FCL_ATTENTION_MIN_TILES_PER_SPLIT 4
/* Decode streams K and V: many small groups in flight, a split of at least this many keys. */
#define FCL_ATTENTION_DECODE_GROUPS_PER_CU 16
#define FCL_ATTENTION_DECODE_MIN_KEYS_PER_SPLIT 256
/* One wave of decode work-groups: as many key splits as give at most this many work-groups
 * a compute unit, each taking a long split, rather than many short ones in several waves
 * (rounding up left some SMs one work-group more than others). On the H100 (B8 H32/8, 8K
 * and 32K keys, same calls): the tensor cores' GQA rows 0.13-0.14 / 0.41-0.43 ms in f16 with
 * 8 splits, against 0.14-0.18 / 0.49-0.51 with 9 (one warp a row tile and 32 splits, the
 * earlier plan: 0.21 / 0.50-0.53); at head dim
 * 256, whose build holds fewer work-groups an SM (o alone is 128 registers a lane), 4
 * splits 0.24 ms and 8 0.31. The portable decode kernel (float32's GQA decoding) 0.26-0.27
 * / 0.90-0.93 with 8, against 0.31-0.37 / 0.96-1.11 with 32. */
#define FCL_ATTENTION_ONE_WAVE_GROUPS_PER_CU(bucket) ((bucket) == 2 ? 2 : 4)
/* ... and of the 8-bit K/V decode kernel: its work-groups of 2 warps, 165 registers a lane and
 * 33 KiB of local memory at head dim 128 (ptxas, H200), 6 to an SM (at 256, 4: B8 H32/8 at
 * 32K keys q8_0 0.560 ms, int8 0.518, against f16's 0.677; other counts not measured).
 * Splits for a wave of 4 work-groups of 4 warps where 3 fitted left a second wave of 116: H200,
 * B8 H32/8 q8_0 at 32K keys, 8 splits 0.504 ms, 6 splits 0.397, 24 and 48 0.428 and 0.442;
 * 2 warps with 3 chunks each then 0.379 (12 splits), and B8 H32 1.40 ms (4 warps: 1.79).
 * Its direct build has little local memory, and its registers hold it to as many (167 at
 * D128: 3 warps a scheduler, whose register file is 16384). At 178 registers (2 warps a
 * scheduler, 4 work-groups an SM) it took 0.38 ms with 5 planned and 0.25 with 4, against
 * 0.22 at 167 with 6. */
#define FCL_KV_DECODE_GROUPS_PER_CU(bucket) ((bucket) == 2 ? 4 : 6)
#define FCL_NV_MAX_REGISTERS 255 /* a lane's most, at compute capability 8.x and 9.x */
/* The portable decode kernel takes one wave only where that leaves this many splits: with
 * 2 (B8 H32 multi-head) it ran up to 1.8x slower than with 8. Measured on NVIDIA alone, so
 * other GPUs keep many short splits. */
#define FCL_ATTENTION_ONE_WAVE_MIN_SPLITS 8
/* ... and from a paged cache, two waves: on the H200 (B8 H32/8, 8K and 32K keys, 16-token
 * pages) 8 splits ran 17-21% slower than 16, where a contiguous cache ran up to 10% faster
 * with 8 than with 16. */
#define FCL_ATTENTION_PAGED_DECODE_WAVES 2

size_t fcl_attention_bucket_dim(int bucket) { return bucket_dims[bucket]; }

int fcl_attention_bucket(size_t head_dim, size_t head_dim_v)
{
    size_t dim = head_dim > head_dim_v ? head_dim : head_dim_v;
    for (int b = 0; b < FCL_ATTENTION_BUCKETS; b++)
        if (dim <= bucket_dims[b])
            return b;
    return -1;
}

void fcl_attention_tile_shape(int candidate, size_t *block_q, size_t *block_kv)
{
    *block_q = tile_candidates[candidate][0];
    *block_kv = tile_candidates[candidate][1];
}

/* A work-item of a tile prefetches the next K and V tiles where the device table allows it
 * and it owns at least this many query rows: the loads' latency was then what the tile
 * kernel waited for (H200, float32, the same kernel with and without: head dim 64, 64 x 16,
 * 21.9 and 20.1 TFLOP/s; 128, 32 x 16, 21.2 and 15.5). With fewer, each K and V element read
 * from local memory feeds too few products (head dim 256: 8 x 16 prefetching 6.8 TFLOP/s,
 * 16 x 16 without 14.4). */
#define FCL_PREFETCH_MIN_ROWS 4

int fcl_attention_tile_prefetch(int allowed, size_t block_q, size_t work_group_size)
{
    const size_t items_q = fcl_attention_tile_items_q(work_group_size);
    return allowed && items_q && block_q / items_q >= FCL_PREFETCH_MIN_ROWS;
}

size_t fcl_attention_local_bytes(size_t dim, size_t block_q, size_t block_kv)
{
    /* q_tile and the K/V tile's rows of dim + 4 floats, p_tile rows of block_kv + 4,
     * row_parts (8 + 1 per row), and where the K and V tiles' rows start (paged prefill). */
    return sizeof(float) * (block_q * (dim + 4) + block_kv * (dim + 4) +
                            block_q * (block_kv + 4) + block_q * 9) +
           sizeof(cl_ulong) * 2 * block_kv;
}

int fcl_attention_tile_candidate(size_t block_q, size_t block_kv)
{
    for (int c = 0; c < N_TILE_CANDIDATES; c++)
        if (tile_candidates[c][0] == block_q && tile_candidates[c][1] == block_kv)
            return c;
    return -1;
}

/* Work-items of a tile work-group, rows x columns (FA_TQ x FA_TK), largest first: 64 where
 * the kernels allow it, fewer where the driver allows fewer (Mesa's llvmpipe: 32). */
static const size_t tile_shapes[][2] = {{8, 8}, {4, 8}, {4, 4}};
#define N_TILE_SHAPES (int)(sizeof tile_shapes / sizeof tile_shapes[0])

size_t fcl_attention_tile_items_q(size_t work_group_size)
{
    for (int i = 0; i < N_TILE_SHAPES; i++)
        if (tile_shapes[i][0] * tile_shapes[i][1] == work_group_size)
            return tile_shapes[i][0];
    return 0;
}

/* Local memory of a tile as the driver counts it (rusticl counts double, NVIDIA adds 4 bytes). */
static cl_ulong tile_local_bytes(const fcl_device_info *info, size_t dim, size_t bq, size_t bk)
{
    return fcl_attention_local_bytes(dim, bq, bk) *
               (info->local_mem_scale ? info->local_mem_scale : 1) +
           info->local_mem_reserved;
}

/* Float accumulators a work-item of a tq x tk group keeps: its output and score blocks. */
static size_t tile_accumulators(size_t dim, size_t bq, size_t bk, size_t tq, size_t tk)
{
    return (bq / tq) * ceil_div(dim, tk) + (bq / tq) * (bk / tk);
}

void fcl_plan_attention_tile(const fcl_device_info *info, int bucket, int first,
                             size_t max_accumulators, size_t work_group_limit, int prefetch,
                             struct fcl_attention_tile *tile)
{
    const size_t dim = bucket_dims[bucket];
    int shapes_fit = 0, local_fits = 0;
    memset(tile, 0, sizeof *tile);
    tile->max_head_dim = dim;
    for (int shape = 0; shape < N_TILE_SHAPES; shape++) {
        const size_t tq = tile_shapes[shape][0], tk = tile_shapes[shape][1];
        if (tq * tk > work_group_limit)
            continue;
        shapes_fit = 1;
        /* The planner's own choice takes the tiles that prefetch first: with the loads'
         * latency hidden, a smaller tile beat a larger one without (H200, float32, head dim
         * 128: 32 x 16 prefetching 21.2 TFLOP/s, 32 x 32 without 18.2). */
        for (int pass = prefetch && first == 0 ? 0 : 1; pass < 2; pass++)
            for (int c = first; c < N_TILE_CANDIDATES; c++) {
                size_t bq = tile_candidates[c][0], bk = tile_candidates[c][1];
                if ((pass == 0 && !fcl_attention_tile_prefetch(prefetch, bq, tq * tk)) ||
                    bq % tq || bk % tk ||
                    tile_local_bytes(info, dim, bq, bk) > info->local_mem_size)
                    continue;
                local_fits = 1;
                if (tile_accumulators(dim, bq, bk, tq, tk) <= max_accumulators) {
                    tile->block_q = bq;
                    tile->block_kv = bk;
                    tile->work_group_size = tq * tk;
                    return;
                }
            }
    }
    const size_t bq = tile_candidates[N_TILE_CANDIDATES - 1][0];
    const size_t bk = tile_candidates[N_TILE_CANDIDATES - 1][1];
    const size_t fewest = tile_shapes[N_TILE_SHAPES - 1][0] * tile_shapes[N_TILE_SHAPES - 1][1];
    if (!shapes_fit)
        snprintf(tile->rows_because, sizeof tile->rows_because,
                 "the kernels allow %zu work-items a group, a tile needs %zu or more",
                 work_group_limit, fewest);
    else if (!local_fits)
        snprintf(tile->rows_because, sizeof tile->rows_because,
                 "the smallest tile (%zu x %zu) needs %llu bytes of local memory, the device has %llu",
                 bq, bk, (unsigned long long)tile_local_bytes(info, dim, bq, bk),
                 (unsigned long long)info->local_mem_size);
    else
        snprintf(tile->rows_because, sizeof tile->rows_because,
                 "the tiles that fit the local memory need over %zu accumulators a work-item",
                 max_accumulators);
}

void fcl_plan_attention_refit(const fcl_device_info *info, int bucket, size_t max_accumulators,
                              int prefetch, size_t allowed_group, cl_ulong counted_local,
                              struct fcl_attention_tile *tile)
{
    const struct fcl_attention_tile built = *tile;
    fcl_device_info room = *info;
    int next = fcl_attention_tile_candidate(built.block_q, built.block_kv);
    size_t group = built.work_group_size;
    if (counted_local > info->local_mem_size) {
        const cl_ulong declared =
            fcl_attention_local_bytes(built.max_head_dim, built.block_q, built.block_kv);
        room.local_mem_size = info->local_mem_size * declared / counted_local;
        next++;
    } else {
        group = allowed_group;
    }
    fcl_plan_attention_tile(&room, bucket, next, max_accumulators, group, prefetch, tile);
    tile->rows_block_q = built.rows_block_q;
    tile->decode_block_kv = tile->block_q ? built.decode_block_kv : 0; /* as planned */
    if (!tile->block_q && counted_local > info->local_mem_size)
        snprintf(tile->rows_because, sizeof tile->rows_because,
                 "the %zu x %zu tile's kernel counts %llu bytes of local memory, the device has "
                 "%llu", built.block_q, built.block_kv, (unsigned long long)counted_local,
                 (unsigned long long)info->local_mem_size);
}

void fcl_plan_attention_tiles(const fcl_device_info *info, const fcl_tuning *tuning,
                              struct fcl_attention_tile *tiles)
{
    const size_t device_limit = fcl_plan_work_group_size(info, info->max_work_group_size);
    size_t group_limit = device_limit;
    if (tuning->attention_group && tuning->attention_group < group_limit)
        group_limit = tuning->attention_group; /* FLASHCL_TUNE: the smaller groups elsewhere */
    for (int b = 0; b < FCL_ATTENTION_BUCKETS; b++) {
        struct fcl_attention_tile *tile = &tiles[b];
        const int forced = tuning->attention_tile;
        /* FLASHCL_TUNE's tile as given where it fits (for tuning beyond the register rule),
         * else the next that fits. */
        fcl_plan_attention_tile(info, b, forced < 0 ? 0 : forced,
                                forced < 0 ? tuning->attention_accumulators : (size_t)-1,
                                group_limit, tuning->attention_prefetch, tile);
        if (tuning->attention_rows) {
            memset(tile, 0, sizeof *tile); /* the device prefers the rows kernel */
            tile->max_head_dim = fcl_attention_bucket_dim(b);
        }
        tile->rows_block_q = FA_ROWS(tuning->vector_width);
        /* decoding beside the tiles, where its work-groups fit (its kernels, built on first
         * use, may still not: then the tile serves) */
        tile->decode_block_kv = tile->block_q && device_limit >= FA_DEC_LWS ? FA_DEC_KEYS : 0;
    }
}

/* Query heads of one kv head a work-item or work-group takes together, so that it reads
 * their K and V once: the most, up to most (a power of two), that divide the GQA group. */
static size_t shared_heads_step(const fcl_attention_desc *d, size_t most)
{
    size_t group = d->heads_kv ? d->heads_q / d->heads_kv : 1, step = most;
    while (group % step)
        step /= 2;
    return step;
}

/* Key splits: as forced, else enough to give `fill` work-groups (one_wave: at most that
 * many), each split at least min_tiles key tiles long. */
static size_t attention_splits(const fcl_attention_desc *d, size_t work, size_t fill,
                               int one_wave, size_t kv_tiles, size_t min_tiles)
{
    size_t splits;
    if (d->kv_splits)
        splits = d->kv_splits;
    else
        splits = work >= fill ? 1
                              : min_size(one_wave ? fill / work : ceil_div(fill, work),
                                         kv_tiles / min_tiles);
    splits = min_size(min_size(splits, kv_tiles), FA_MAX_SPLITS);
    return splits ? splits : 1;
}

/* Split-KV's partial results take rows * splits * (head_dim_v + 2) floats, sized by the
 * capacities (len_q of every sequence) whatever the sequences hold: splits are cut so that
 * they stay within a quarter of the largest allocation the device allows (one split needs
 * none). */
static size_t scratch_bounded_splits(const fcl_device_info *info, const fcl_attention_desc *d,
                                     size_t splits)
{
    const cl_ulong per_split = (cl_ulong)d->batch * d->heads_q * d->len_q * (d->head_dim_v + 2) *
                               sizeof(float);
    const cl_ulong cap = info->max_alloc_size / 4;
    if (splits > 1 && info->max_alloc_size && per_split && (cl_ulong)splits > cap / per_split)
        splits = cap / per_split > 1 ? (size_t)(cap / per_split) : 1;
    return splits;
}

/* Loop iterations one work-item of a path makes per step (a block of queries: loading,
 * setting up, writing out) and per key, counting every loop of attention_tile.cl or
 * attention_rows.cl as if the compiler unrolled none. For drivers that cap a work-item's
 * loop iterations (loop_iteration_cap); the test suite runs these kernels on one. */
typedef struct loop_cost {
    size_t per_step, per_key_block, keys_per_block;
} loop_cost;

static loop_cost tile_loop_cost(size_t dim, size_t bq, size_t bk, size_t group)
{
    const size_t items_q = fcl_attention_tile_items_q(group);
    const size_t tq = items_q ? items_q : 1, tk = group / tq ? group / tq : 1;
    const size_t sq = bq / tq, sk = bk / tk, sd4 = ceil_div(dim, 4 * tk);
    const size_t block = sq * (1 + sk); /* one pass over the score block */
    /* fa_load_typed: batches of 8 loads and 8 stores over rows x dim elements */
    const size_t load_q = 17 * ceil_div(bq * dim, 8 * group), load_kv = 17 * ceil_div(bk * dim, 8 * group);
    loop_cost c;
    c.per_step = load_q + sq * (2 + sd4) + sq * (2 + tk + 5 * sd4) + 1;
    c.per_key_block = 1 + 2 * load_kv + (dim / 4) * (1 + sq + sk + block) + 7 * block +
                      sq * (2 + tk + sk + sd4) +
                      ceil_div(bk, 4) * (1 + sq + 4 * (1 + sd4 + sq * (1 + sd4)));
    c.keys_per_block = bk;
    return c;
}

/* The rows kernel on a device of vector width vec: a step loads and transposes each of its
 * FA_ROWS(vec) rows' q, clears o and writes each row out; a block of FA_ROWS_KEYS(vec) keys
 * loads their K and V rows, and its scores (dim x keys), modifiers (lanes x keys),
 * statistics and o (dim / 4 x 4 dims x keys) pass over the block. A block counts twice:
 * Mesa's llvmpipe ended this kernel's loops early with 1.2 times this count (head dims
 * 576 / 512, 300 keys in 25 splits: wrong results), not with twice. */
static loop_cost rows_loop_cost(size_t dim, size_t vec)
{
    const size_t rk = FA_ROWS_KEYS(vec), lanes = FA_ROWS(vec);
    loop_cost c;
    c.per_step = lanes * (3 * dim + 8) + dim + 8;
    c.per_key_block = 2 * (rk * (2 * dim + 4) + dim * (1 + rk) + ceil_div(dim, 4) * (9 + 5 * rk) +
                           lanes * (1 + rk) + 8 * rk + 8);
    c.keys_per_block = rk;
    return c;
}

/* The cost model of a launch's path (none for decode: see fcl_attention_loop_iterations). */
static loop_cost path_loop_cost(const fcl_device_info *info, fcl_attention_path path, int bucket,
                                size_t bq, size_t bk, size_t group)
{
    const size_t dim = bucket_dims[bucket];
    return path == FCL_ATTENTION_PATH_ROWS ? rows_loop_cost(dim, info->softmax_vector_width)
                                           : tile_loop_cost(dim, bq, bk, group);
}

/* Where the driver caps a work-item's loop iterations: key splits short enough that one
 * step stays within the cap (0 returned where even a step of one key block does not fit), and
 * work-groups enough that no work-item takes more steps than the cap allows. */
static int fit_attention_loop_cap(const fcl_device_info *info, loop_cost c, size_t kv_tiles,
                                  size_t work, size_t *splits, size_t *groups)
{
    const size_t cap = info->loop_iteration_cap;
    if (!cap)
        return 1;
    if (c.per_step + c.per_key_block > cap)
        return 0;
    size_t blocks_per_split = (cap - c.per_step) / c.per_key_block;
    size_t fewest = ceil_div(kv_tiles, blocks_per_split);
    if (fewest > FA_MAX_SPLITS)
        return 0;
    if (*splits < fewest)
        *splits = fewest;
    size_t step = c.per_step + ceil_div(kv_tiles, *splits) * c.per_key_block;
    size_t steps = work * *splits, per_item = cap / step;
    if (*groups < ceil_div(steps, per_item))
        *groups = ceil_div(steps, per_item);
    return 1;
}

/* Keys a block of at most bq queries may see: with a window, its width and the block's
 * queries (fa_locate starts a window's splits at the block's first visible key), else all. */
static size_t visible_span(const fcl_attention_desc *d, size_t bq)
{
    if (!d->window)
        return d->len_kv;
    size_t span = d->window_left;
    span = span > SIZE_MAX - d->window_right ? SIZE_MAX : span + d->window_right;
    span = span > SIZE_MAX - bq ? SIZE_MAX : span + bq;
    return min_size(span, d->len_kv);
}

/* A launch of path with blocks of bq queries and bk keys: the key splits that fill the
 * device (within the scratch memory and the loop cap) and the work-groups. decode: a step
 * holds one query row (or a GQA group's rows): many short key splits fill the device, or one
 * wave of longer ones (wave_per_cu work-groups a compute unit, 0: FCL_ATTENTION_ONE_WAVE_
 * GROUPS_PER_CU), and the portable decode kernel takes GQA groups together. */
static fcl_status plan_launch(const fcl_device_info *info, const fcl_attention_desc *d,
                              fcl_attention_path path, int decode, int bucket, size_t bq,
                              size_t bk, size_t work_group_size, size_t wave_per_cu,
                              fcl_attention_launch *launch)
{
    const int one_query = path == FCL_ATTENTION_PATH_ROWS && decode;
    size_t heads_step = path == FCL_ATTENTION_PATH_DECODE || one_query
                            ? shared_heads_step(d, FA_DEC_HEADS)
                        : path == FCL_ATTENTION_PATH_ROWS ? shared_heads_step(d, bq)
                                                          : 1;
    if (path == FCL_ATTENTION_PATH_ROWS && !one_query)
        bq /= heads_step; /* the rows kernel's lanes: bq / heads_step queries of each head */
    /* (bq: here at least a block's queries, as visible_span needs) */
    size_t q_tiles = ceil_div(d->len_q, bq), kv_tiles = ceil_div(visible_span(d, bq), bk);
    size_t work = q_tiles * d->batch * (d->heads_q / heads_step);
    const size_t wave = (size_t)info->compute_units *
                        (wave_per_cu ? wave_per_cu : FCL_ATTENTION_ONE_WAVE_GROUPS_PER_CU(bucket));
    const int one_wave = (path == FCL_ATTENTION_PATH_MMA && decode) || /* GQA rows */
                         (path == FCL_ATTENTION_PATH_DECODE && info->nv_compute_capability &&
                          work && wave / work >= FCL_ATTENTION_ONE_WAVE_MIN_SPLITS);
    size_t fill = one_wave ? wave * (path == FCL_ATTENTION_PATH_DECODE && d->page_size
                                         ? FCL_ATTENTION_PAGED_DECODE_WAVES : 1)
                  : (size_t)info->compute_units *
                        (decode ? FCL_ATTENTION_DECODE_GROUPS_PER_CU
                         : is_gpu_like(info) ? FCL_ATTENTION_GPU_GROUPS_PER_CU : 1);
    size_t min_tiles = decode ? ceil_div(FCL_ATTENTION_DECODE_MIN_KEYS_PER_SPLIT, bk)
                              : FCL_ATTENTION_MIN_TILES_PER_SPLIT;
    size_t splits = scratch_bounded_splits(
        info, d, attention_splits(d, work, fill, one_wave, kv_tiles, min_tiles));
    size_t max_groups = (size_t)info->compute_units * FCL_GROUPS_PER_CU;
    size_t groups = 0;
    loop_cost cost = path_loop_cost(info, path, bucket, bq, bk, work_group_size);
    launch->refusal = "its steps need more loop iterations than the driver allows a work-item "
                      "(loop_iteration_cap), even in the most key splits";
    if (!fit_attention_loop_cap(info, cost, kv_tiles, work, &splits, &groups))
        return FCL_ERROR_UNSUPPORTED;
    launch->refusal = NULL;

    launch->bucket = bucket;
    launch->path = path;
    launch->gqa_rows = launch->kv_decode = launch->kv_direct = launch->kv_fixed = 0;
    launch->merge_in_kernel = 0;
    launch->one_query = one_query;
    /* the coded build (FA_FLAG_KV) decodes every format in its float32 slot */
    launch->dtype_kv = fcl_attention_kv_coded(d) ? FCL_DTYPE_F32 : d->dtype_kv;
    launch->block_q = bq;
    launch->block_kv = bk;
    launch->q_tiles = q_tiles;
    launch->heads_step = heads_step;
    launch->work = work;
    /* len_kv >= 1 and 1 <= splits <= kv_tiles, so a split has at least one tile. */
    size_t tiles_per_split = ceil_div(kv_tiles, splits);
    launch->split_len = tiles_per_split * bk;
    launch->splits = ceil_div(kv_tiles, tiles_per_split); /* no empty split */
    if (groups < max_groups)
        groups = max_groups ? max_groups : 1;
    launch->groups = min_size(work * launch->splits, groups);
    launch->work_group_size = work_group_size;
    return FCL_SUCCESS;
}

fcl_status fcl_plan_attention(const fcl_device_info *info, const fcl_attention_desc *d,
                              fcl_attention_launch *launch)
{
    return fcl_plan_attention_avoiding(info, d, 0, launch);
}

fcl_status fcl_plan_attention_avoiding(const fcl_device_info *info, const fcl_attention_desc *d,
                                       unsigned avoid, fcl_attention_launch *launch)
{
    int bucket = fcl_attention_bucket(d->head_dim, d->head_dim_v);
    launch->refusal = "no attention kernel takes head dims above 576";
    if (bucket < 0)
        return FCL_ERROR_UNSUPPORTED;
    const struct fcl_attention_tile *tile = &info->attention_tiles[bucket];
    /* The rows kernel serves where the device prefers it and where no tile fits; the decode
     * kernel where the plan has it and the head dims are multiples of its loads, except under
     * a loop cap (the tile kernel's loops are modelled, the decode kernel's are not). */
    const size_t decode_width =
        FA_DEC_WIDTH(fcl_attention_kv_coded(d) ? sizeof(float) : fcl_dtype_size(d->dtype_kv),
                     shared_heads_step(d, FA_DEC_HEADS) > 1);
    fcl_attention_path path =
        info->attention_rows_per_item || tile->block_q == 0 ||
                (avoid >> FCL_ATTENTION_PATH_TILE & 1)
            ? FCL_ATTENTION_PATH_ROWS
        : tile->decode_block_kv && d->len_q <= FCL_ATTENTION_DECODE_MAX_Q &&
                d->head_dim % decode_width == 0 && d->head_dim_v % decode_width == 0 &&
                !info->loop_iteration_cap && !(avoid >> FCL_ATTENTION_PATH_DECODE & 1)
            ? FCL_ATTENTION_PATH_DECODE
            : FCL_ATTENTION_PATH_TILE;
    /* The rows kernel's decoding form where the lanes would mostly hold absent rows: up to
     * FA_DEC_HEADS query rows (no loop cap: its loops are not modelled either). */
    const size_t rows = d->len_q * (d->heads_kv ? d->heads_q / d->heads_kv : 1);
    const int one_query = path == FCL_ATTENTION_PATH_ROWS && rows <= FA_DEC_HEADS &&
                          !info->loop_iteration_cap;
    const int decode = path == FCL_ATTENTION_PATH_DECODE || one_query;
    const int lanes = path == FCL_ATTENTION_PATH_ROWS && !one_query;
    size_t bq = lanes ? tile->rows_block_q : decode ? 1 : tile->block_q;
    size_t bk = lanes       ? FA_ROWS_KEYS(info->softmax_vector_width)
                : one_query ? info->softmax_vector_width
                : decode    ? tile->decode_block_kv
                            : tile->block_kv;
    launch->refusal = "the kernels for this device were not built";
    if (bq == 0 || bk == 0)
        return FCL_ERROR_UNSUPPORTED; /* a device without a plan */
    return plan_launch(info, d, path, decode, bucket, bq, bk,
                       path == FCL_ATTENTION_PATH_ROWS     ? 1
                       : path == FCL_ATTENTION_PATH_DECODE ? FA_DEC_LWS
                                                           : tile->work_group_size,
                       0, launch);
}

/* The tile kernel's builds: every feature set, but K/V formats only up to head dim 128. At
 * 256 its all-feature build already holds 252 of an RDNA GPU's 256 registers (gfx1030,
 * .ci/amd-offline-check.sh), and decoding's scale and NaN guard spilled there: such calls
 * run the rows kernel (a prefill of coded K/V at head dims above 128 is rare: MLA decodes). */
int fcl_plan_tile_built(int bucket, int variant)
{
    return variant != FCL_ATTENTION_KV || bucket < 2;
}

int fcl_plan_mma(const fcl_device_info *info, const fcl_tuning *tuning, char *because, size_t cap)
{
    const unsigned cc = info->nv_compute_capability;
    if (!tuning->attention_mma)
        snprintf(because, cap, "switched off (FLASHCL_TUNE=attention_mma=0)");
    else if (!cc)
        snprintf(because, cap, "not an NVIDIA GPU that reports its compute capability");
    else if (cc < 80)
        snprintf(because, cap, "compute capability %u.%u: the kernels need 8.0 (mma.sync with bf16, "
                 "cp.async)", cc / 10, cc % 10);
    else
        return 1;
    return 0;
}

/* cvt.rn.f16x2.e4m3x2 (PTX ISA 7.8, sm_89 and later): one instruction a pair of codes where
 * the integer and f16 arithmetic took four (H200, B8 H32/8 D128 decode at 32K keys over
 * E4M3 K/V: 0.34 -> 0.25 ms). */
int fcl_plan_fp8_cvt(unsigned cc, const fcl_tuning *tuning)
{
    return cc >= 89 && (!tuning || tuning->attention_fp8_cvt);
}

const char *const fcl_mma_kind_names[FCL_MMA_KINDS] = {"f16", "bf16", "f32", "tf32", "f16q32"};

/* A call with K/V formats on the tensor cores: products in q's 16-bit type, or in f16 for
 * float32 q (llama.cpp's types: q and p split into f16 parts), K and V each of that type
 * (copied into the tiles as they are) or coded (decoded into them); else -1. */
static int mma_kv_kind(const fcl_attention_desc *d)
{
    const int kind = d->dtype_q == FCL_DTYPE_F16    ? FCL_MMA_F16
                     : d->dtype_q == FCL_DTYPE_BF16 ? FCL_MMA_BF16
                     : d->dtype_q == FCL_DTYPE_F32  ? FCL_MMA_F16_Q32
                                                    : -1;
    const unsigned tiles = kind == FCL_MMA_F16_Q32 ? FCL_KV_F16 : fcl_format_of_dtype(d->dtype_q);
    const unsigned formats[2] = {d->format_k, d->format_v};
    for (int i = 0; i < 2; i++) {
        const unsigned f = formats[i] ? formats[i] : fcl_format_of_dtype(d->dtype_kv);
        const fcl_format_traits *t = fcl_format(f);
        if (!t || ((t->roles & FCL_ROLE_FLOAT) && f != tiles))
            return -1;
    }
    return kind;
}

int fcl_plan_mma_kind(const fcl_attention_desc *d)
{
    if (fcl_attention_kv_coded(d))
        return mma_kv_kind(d);
    if (d->dtype_q == FCL_DTYPE_F32 && d->dtype_kv == FCL_DTYPE_F16)
        return FCL_MMA_F16_Q32; /* llama.cpp's types: q split into f16 parts */
    if (d->dtype_kv != d->dtype_q)
        return -1;
    switch (d->dtype_q) {
    case FCL_DTYPE_F16: return FCL_MMA_F16;
    case FCL_DTYPE_BF16: return FCL_MMA_BF16;
    default: return d->precision == FCL_PRECISION_TF32 ? FCL_MMA_TF32 : FCL_MMA_F32;
    }
}

int fcl_mma_kind_f32(int kind) { return kind == FCL_MMA_F32 || kind == FCL_MMA_TF32; }

/* f16 and bf16 at every bucket; float32 up to head dim 128 (at 256, q's and the output's
 * fragments alone would take 256 registers a lane), and not as GQA rows, which stay on the
 * portable decode kernel: on the H100 (B8 H32/8 D128, 8K keys) 3xTF32 rows took 0.360 ms and
 * the portable kernel 0.327, and the GQA build (one warp then) spilled at head dim 128. The
 * builds for K/V formats (kv): f16 and bf16, and float32 q over f16 tiles in prefill (its GQA
 * rows over coded K/V go to the 8-bit decode kernel, or else to this prefill build). */
int fcl_plan_mma_built(int bucket, int kind, int gqa_rows, int kv)
{
    if (fcl_mma_kind_f32(kind))
        return !kv && bucket < 2 && !gqa_rows;
    if (kind == FCL_MMA_F16_Q32)
        return bucket < 2 && !(kv && gqa_rows);
    return 1;
}

/* Warps of a tensor-core work-group, tiles of 16 query rows a warp and keys a tile, per
 * bucket and kind. Measured on the H100 (f16, B4 H16 L4096; issue 13): at head
 * dim 64, 4 warps of 2 tiles (161 TFLOP/s; 4 x 1: 151, 2 x 2: 137, 8 x 1: 97), each K and V
 * fragment read from local memory feeding two products; at 128, 8 warps of 1 (175; 4 x 2:
 * 123 and 8 x 2: 139, too many registers; 4 x 1: 131), whose K and V tiles serve 128
 * queries; 64 keys a tile (32: 101-130). Float32 storage holds twice the bytes a key, in
 * local memory and in q's registers: 4 warps of one tile, and at head dim 128 32-key tiles
 * (two tiles of 64 keys would need 66 KiB of the 48 OpenCL allows; on the H100 in float32,
 * 4 x 1 gave 48-49 TFLOP/s at both head dims, 4 x 2 at 64 and 8 x 1 at 128 no more, 2 x 1
 * 43). Head dim 256 (f16, bf16): 8 warps of one tile and 32-key tiles, as float32 at 128
 * (its K and V tiles take as many bytes): 183 TFLOP/s, 4 warps 171. GQA decoding's rows (a
 * group's heads, 16 rows at most a tile) take one row tile and two warps, each with half of
 * every key tile (key_warps): 6 work-groups an SM, each with its own tiles in flight. On the
 * H100 (B8 H32/8 f16, 8K keys, splits of one wave) 2 key warps against 1 and 4: 0.141 /
 * 0.140 / 0.144 ms at head dim 128, 0.084 / 0.091 / 0.093 at 64, and with groups of 8 heads
 * (H32/4) 0.088 / 0.095 / 0.090; 8 warps of 16 rows each took 0.27. The builds for K/V
 * formats (kv) decode each tile in local memory: their GQA rows take a warp every 16 keys
 * (4 at 64-key tiles), which on the H200 (B8 H32/8 D128, 32K keys) took fp8 from 3.12 to
 * 1.05 ms together with the f16 codes' conversions without floats. */
fcl_mma_shape fcl_plan_mma_shape(int bucket, int kind, int gqa_rows, int kv)
{
    const int f32 = fcl_mma_kind_f32(kind);
    fcl_mma_shape sh = {.warps = 4, .key_warps = 1, .row_tiles = 1, .block_kv = 64};
    if (bucket == 2 || (f32 && bucket == 1))
        sh.block_kv = 32;
    /* Decoding streams the cache once from memory: whole lines fetched into the L2 took its
     * f16 decode 2-3% faster (H200, B8 H32/8 D128 at 32K keys, same call: 0.284-0.288 ms ->
     * 0.277-0.279); the prefill, whose tiles every query tile reads again, mostly from the
     * L2, ran 1% slower with them at D64 (0.688-0.690 -> 0.696-0.697 ms). */
    sh.l2_lines = gqa_rows;
    if (gqa_rows) /* K/V formats: a warp every 16 keys, to decode the tiles */
        sh.warps = sh.key_warps = kv ? sh.block_kv / 16 : 2;
    else if (!f32 && bucket == 0) /* float32 q: its two parts take a second tile's registers */
        sh.row_tiles = kind == FCL_MMA_F16_Q32 ? 1 : 2;
    else if (!f32)
        sh.warps = 8;
    return sh;
}

/* The head-dim bucket of d where the NVIDIA kernels take its shape (built, head dims up to
 * 256 in multiples of 8, rows aligned for their copies), else -1. */
static int nvidia_bucket(const fcl_device_info *info, const fcl_attention_desc *d, int rows_aligned)
{
    const int bucket = fcl_attention_bucket(d->head_dim, d->head_dim_v);
    if (!info->attention_mma || !rows_aligned || bucket < 0 || bucket >= FCL_MMA_BUCKETS ||
        d->head_dim % 8 || d->head_dim_v % 8)
        return -1;
    return bucket;
}

/* The tensor-core launch of d: prefill, or (gqa_rows) GQA decoding as rows of a kv head on
 * the kernel's GQA build. */
static int plan_tensor_cores(const fcl_device_info *info, const fcl_attention_desc *d, int bucket,
                             int gqa_rows, fcl_attention_launch *launch)
{
    const int kind = fcl_plan_mma_kind(d), kv = fcl_attention_kv_coded(d);
    if (bucket < 0 || kind < 0 || !fcl_plan_mma_built(bucket, kind, gqa_rows, kv))
        return 0;
    const fcl_mma_shape sh = fcl_plan_mma_shape(bucket, kind, gqa_rows, kv);
    if (plan_launch(info, d, FCL_ATTENTION_PATH_MMA, gqa_rows, bucket,
                    sh.warps / sh.key_warps * 16 * sh.row_tiles,
                    sh.block_kv, sh.warps * 32, 0, launch) != FCL_SUCCESS)
        return 0;
    launch->gqa_rows = gqa_rows;
    launch->mma_kind = kind;
    return 1;
}

/* The formats engines keep their caches in (the q8_0, fp8 and int8, and q4_0 for
 * long contexts), K and V in the same one: a tensor-core prefill build each, and a staged
 * build each of the 8-bit decode kernel, in which the format is a constant, so that no other
 * format's decoding or products are compiled in. */
const fcl_kv_format fcl_mma_fixed_formats[FCL_MMA_FIXED] = {
    FCL_KV_Q8_0, FCL_KV_Q4_0, FCL_KV_FP8_E4M3, FCL_KV_FP8_E5M2, FCL_KV_INT8};

/* The register cap (-cl-nv-maxrregcount) of the 8-bit decode kernel's staged builds for one
 * format: as many registers a lane as leave FCL_KV_DECODE_GROUPS_PER_CU work-groups room in an
 * SM's register file (registers: CL_DEVICE_REGISTERS_PER_BLOCK_NV, which is an SM's file on
 * compute capability 8.x and 9.x), which allots them 8 a lane at a time; 0 where that cap is
 * no cap. Uncapped, f16 q over q8_0 at D128 took 182 registers (ptxas on the driver's PTX;
 * 167 for any format), so that 5 work-groups fit an SM where the splits count on 6, and ran
 * slower than the build for any format. H200, B8 H32/8 at 32K keys, one call, two rounds, any
 * format -> its own capped at 168, ms: 0.261-0.262 -> 0.241-0.242 (uncapped, an earlier call:
 * 0.344-0.346), paged 16 0.285-0.287 -> 0.266-0.267, B8 H32 0.939-0.944 -> 0.865-0.866. Over
 * q4_0 and with float32 q over q8_0 the cap changed nothing (their builds fit). The cap needs
 * the kernel without reqd_work_group_size, which makes ptxas ignore it (FA_KVD_REGISTER_CAP).
 * More work-groups under a lower cap did not pay: the direct build capped at 128 (8 an SM,
 * 16 splits) ran int8 0.178-0.184 -> 0.190-0.192 ms, at 144 (7) 0.236. */
unsigned fcl_plan_kv_decode_register_cap(unsigned registers, int bucket)
{
    const unsigned lanes = FCL_KV_DECODE_GROUPS_PER_CU(bucket) * FA_KVD_WARPS * 32;
    const unsigned cap = registers / lanes / 8 * 8;
    return cap < FCL_NV_MAX_REGISTERS ? cap : 0;
}

int fcl_plan_mma_fixed(const fcl_attention_desc *d, const fcl_attention_launch *l)
{
    if (l->path != FCL_ATTENTION_PATH_MMA || !fcl_attention_kv_coded(d) ||
        d->format_k != d->format_v)
        return 0;
    if (l->gqa_rows && (!l->kv_decode || l->kv_direct))
        return 0; /* the tensor-core GQA builds, the decode kernel's direct build */
    for (int i = 0; i < FCL_MMA_FIXED; i++)
        if (d->format_k == fcl_mma_fixed_formats[i])
            return i + 1;
    return 0;
}

/* Whether the 8-bit K/V decode kernel takes GQA rows d of bucket b: f16 or float32 q, K and V
 * each in a coded format, head dims of the bucket's size, up to FA_KVD_ROWS rows. */
static int kv_decode_takes(const fcl_attention_desc *d, int bucket)
{
    const size_t dim = fcl_attention_bucket_dim(bucket);
    for (int v = 0; v <= 1; v++) {
        const fcl_kv_format f = v ? d->format_v : d->format_k;
        if (f < FCL_KV_Q8_0 || f > FCL_KV_INT8)
            return 0;
    }
    return (d->dtype_q == FCL_DTYPE_F16 || d->dtype_q == FCL_DTYPE_F32) && d->head_dim == dim &&
           d->head_dim_v == dim && d->len_q <= FA_KVD_ROWS;
}

/* Whether the 8-bit decode kernel's direct build takes d (its rows aligned): K and V in the
 * formats it reads (a byte a value, no blocks) and f16 q, where it is built (FA_KVD_DIRECT_BUILT:
 * head dims 64 and 128). H200, B8 H32/8 at 32K keys, one call, staged -> direct, ms: D128 int8
 * 0.218 -> 0.202-0.203, fp8 0.210-0.211 -> 0.202-0.206 (paged 16: int8 0.227-0.231 ->
 * 0.205-0.207; B8 H32: 0.721-0.737 -> 0.656-0.661); D64 int8 0.159-0.160 -> 0.110-0.112. */
static int kv_direct_takes(const fcl_attention_desc *d)
{
    for (int v = 0; v <= 1; v++) {
        const fcl_kv_format f = v ? d->format_v : d->format_k;
        if (f != FCL_KV_INT8 && f != FCL_KV_FP8_E4M3 && f != FCL_KV_FP8_E5M2)
            return 0;
    }
    return d->dtype_q == FCL_DTYPE_F16 && FA_KVD_DIRECT_BUILT(0, d->head_dim);
}

int fcl_plan_attention_gqa_rows(const fcl_device_info *info, const fcl_attention_desc *d,
                                int rows_aligned, int kv_decode, int kv_direct,
                                int merge_in_kernel, fcl_attention_launch *launch)
{
    const int bucket = nvidia_bucket(info, d, rows_aligned);
    if (bucket >= 0 && kv_decode && kv_decode_takes(d, bucket)) { /* coded K and V */
        const size_t warps = FA_KVD_WARPS;
        if (plan_launch(info, d, FCL_ATTENTION_PATH_MMA, 1, bucket, FA_KVD_ROWS,
                        warps * FA_KVD_KEYS, warps * 32,
                        FCL_KV_DECODE_GROUPS_PER_CU(bucket), launch) != FCL_SUCCESS)
            return 0;
        launch->gqa_rows = launch->kv_decode = 1;
        launch->kv_direct = kv_direct && kv_direct_takes(d);
        launch->merge_in_kernel = merge_in_kernel && launch->splits > 1;
        launch->mma_kind = d->dtype_q == FCL_DTYPE_F32 ? FCL_MMA_F16_Q32 : FCL_MMA_F16;
        return 1;
    }
    return plan_tensor_cores(info, d, bucket, 1, launch);
}

int fcl_plan_attention_mma(const fcl_device_info *info, const fcl_attention_desc *d,
                           int rows_aligned, fcl_attention_launch *launch)
{
    const int bucket = nvidia_bucket(info, d, rows_aligned);
    if (bucket < 0)
        return 0;
    /* K/V formats: the tensor-core kernel's _kv build for every query length (the GQA rows,
     * where the call allows, were tried before, also for groups of one head) */
    if (d->len_q > FCL_ATTENTION_DECODE_MAX_Q || fcl_attention_kv_coded(d))
        return plan_tensor_cores(info, d, bucket, 0, launch);
    /* Decoding: where the portable kernel does not take several query heads of a kv head
     * together (the shuffle kernel takes one: with 4 it needed 254 registers on the H100 and
     * ran slower than the portable kernel). */
    return shared_heads_step(d, FA_DEC_HEADS) == 1 &&
           plan_launch(info, d, FCL_ATTENTION_PATH_DECODE_NV, 1, bucket, 1,
                       FA_DNV_KEYS(fcl_attention_bucket_dim(bucket)), FA_DNV_LWS, 0,
                       launch) == FCL_SUCCESS;
}

size_t fcl_attention_loop_iterations(const fcl_device_info *info, const fcl_attention_launch *l)
{
    if (l->path == FCL_ATTENTION_PATH_DECODE)
        return 0; /* not modelled: under a loop cap the planner does not pick it */
    const loop_cost c = path_loop_cost(info, l->path, l->bucket, l->block_q, l->block_kv,
                                       l->work_group_size);
    const size_t steps = ceil_div(l->work * l->splits, l->groups);
    return steps * (c.per_step + l->split_len / l->block_kv * c.per_key_block);
}

size_t fcl_plan_merge_groups(const fcl_device_info *info, size_t rows, size_t splits, size_t dim,
                             size_t work_group)
{
    /* attention_merge.cl's loops per row: over the splits, and over this work-item's share
     * of the row's columns (for each, over the splits) */
    const size_t row_iterations = 3 * splits + ceil_div(dim, work_group) * (1 + splits) + 4;
    size_t groups = min_size(rows, (size_t)info->compute_units * FCL_GROUPS_PER_CU);
    const size_t cap = info->loop_iteration_cap;
    if (cap) {
        size_t rows_per_item = cap / row_iterations ? cap / row_iterations : 1;
        if (groups < ceil_div(rows, rows_per_item))
            groups = ceil_div(rows, rows_per_item);
    }
    return groups ? groups : 1;
}

/* Internal interfaces between flashcl's modules: status/errors, device probing, program
 * build and cache, planning, softmax. Tests include this header to drive the planner with
 * injected device capabilities. */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include "flashcl.h"

#include "attention_args.h" /* cl/: the attention kernels' arguments, shared with them */
#include "kv_formats.h"     /* ... the storage formats */
#include "softmax_args.h"   /* ... and the softmax kernels' */

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>

#define FCL_ERROR_TEXT_MAX 16384
#define FCL_STR_(x) #x
#define FCL_STR(x) FCL_STR_(x) /* a macro's value as a string literal */
#define FCL_CL_STD "-cl-std=CL1.2" /* every program's language version (build options) */
#define FCL_SPLIT_MAX_SLICES 1024  /* softmax SPLIT: most slices a row is cut into */
#define FCL_DTYPE_COUNT 3
#define FCL_ATTENTION_BUCKETS 4 /* head_dim (and head_dim_v) up to 64, 128, 256, 576 */
#define FCL_ATTENTION_MAX_HEAD_DIM 576
#define FCL_ATTENTION_MAX_HEAD_DIM_V 512
#define FCL_ATTENTION_DECODE_MAX_Q 4 /* longest len_q the decode kernel takes */
/* The feature sets the attention kernels are compiled for (attention_args.h), smallest
 * first: kernel names end in "", "_mod", "_all" and "_kv" (K and V in any format). The
 * decode kernel has no _mod build, the rows kernel only _all and _kv, NVIDIA's kernels no _kv:
 * their other slots stay NULL. */
enum {
    FCL_ATTENTION_PLAIN,
    FCL_ATTENTION_SCORES,
    FCL_ATTENTION_ALL,
    FCL_ATTENTION_KV,
    FCL_ATTENTION_VARIANTS
};
#define FCL_MMA_BUCKETS 3 /* the NVIDIA paths' head-dim buckets: up to 64, 128 and 256 */
/* The tensor-core kernels' product types (cl/attention_mma_nv.cl's FA_MMA_T, FA_MMA_SPLIT
 * and FA_MMA_Q32): f16 and bf16 storage, float32 storage by 3xTF32 (FCL_PRECISION_F32) and by
 * one TF32 product (FCL_PRECISION_TF32), and float32 q with f16 K and V (f16 products of q's
 * and p's two f16 parts). */
enum { FCL_MMA_F16, FCL_MMA_BF16, FCL_MMA_F32, FCL_MMA_TF32, FCL_MMA_F16_Q32, FCL_MMA_KINDS };
#define FCL_MMA_FIXED 5 /* K/V formats with prefill builds of their own (fcl_mma_fixed_formats) */
#define FCL_SOFTMAX_NV_BUILDS 2 /* NVIDIA's softmax: SM_NV_VECS vectors a work-item, and twice */

/* The softmax kernels of one storage type, in the order of fcl_softmax_kernel_names. */
enum fcl_softmax_kernel {
    FCL_K_SOFTMAX_FUSED,
    FCL_K_SOFTMAX_ONLINE,
    FCL_K_SOFTMAX_SPLIT_STATS,
    FCL_K_SOFTMAX_SPLIT_WRITE,
    FCL_K_SOFTMAX_ROWS,
    FCL_K_SOFTMAX_BLOCK, /* NULL where the tuning holds no rows in registers */
    FCL_K_SOFTMAX_COUNT
};

/* The context's scratch buffers (scratch.c), one a role: a call's values (split-KV's partial
 * outputs) and its statistics (partial (m, l), SPLIT softmax's partial (max, sum), a merge's
 * lse). */
typedef enum {
    FCL_SCRATCH_VALUES,
    FCL_SCRATCH_STATS,
    FCL_SCRATCH_COUNTS, /* zeros when created; the kernels that count in it leave zeros */
    FCL_SCRATCH_SLOTS
} fcl_scratch_slot;
typedef struct fcl_scratch {
    cl_mem buffer[FCL_SCRATCH_SLOTS];
    size_t bytes[FCL_SCRATCH_SLOTS];
    cl_event last_use; /* the last kernel enqueued that used a scratch buffer, or NULL */
} fcl_scratch;

/* What the kernel sources are made from: planned from the device, then corrected by what
 * the compiled kernels report (program.c). */
typedef struct fcl_kernel_plan {
    size_t work_group_size, vector_width, block_items, attention_accumulators;
    size_t attention_prefetch_items;
    int force_inline, kv_decode_calls, cache_prefetch, attention_pv_vec, attention_prefetch;
    /* Per head-dim bucket, the tile and its work-group (fcl_plan_attention_tile); block_q 0:
     * the rows kernel (a block of queries per work-item) serves that bucket. */
    struct fcl_attention_tile tile[FCL_ATTENTION_BUCKETS];
} fcl_kernel_plan;

/* Where and how a context builds its programs, kept for the kernels built on first use. */
typedef struct fcl_build_setup {
    int has_dir;          /* cache_dir is set (not disabled): tuned parameters live there */
    int use_cache;        /* 0: the program cache is off or unusable */
    char cache_dir[4096];
    char options[1024];   /* the compiler options */
    fcl_kernel_plan plan;
} fcl_build_setup;

/* A program of a few kernels, built on their first use (program.c). */
typedef struct fcl_unit {
    cl_program program;
    int state; /* 0: not tried yet; 1: built, its kernels usable; -1: they did not build or
                  fit the device (another path serves their calls) */
} fcl_unit;

/* NVIDIA's fast path's programs and kernels (src/nvidia.c): the self-check (run when the
 * context is made), softmax, per bucket up to head dims 256 the tensor-core kernels
 * (cl/attention_mma_nv.cl) of each kind (FCL_MMA_F16, ...) and the shuffle decode kernels of
 * each feature set. */
typedef struct fcl_nv_kernels {
    fcl_unit check_unit, softmax_unit;
    /* ... of v0.2's features ([0]) and of K/V formats ([1], f16 and bf16 only) */
    fcl_unit mma_unit[2][FCL_MMA_BUCKETS][FCL_MMA_KINDS];
    fcl_unit decode_unit[FCL_MMA_BUCKETS][FCL_ATTENTION_VARIANTS];
    cl_kernel mma[2][FCL_MMA_BUCKETS][FCL_MMA_KINDS];
    cl_kernel mma_rows[2][FCL_MMA_BUCKETS][FCL_MMA_KINDS]; /* GQA builds (gqa_rows) */
    /* ... the 8-bit K/V decode kernel (cl/attention_decode_kv_nv.cl) for f16 q ([0]) and
     * float32 q ([1]), a unit each, and whether the planner may take it
     * (FLASHCL_TUNE=attention_kv_decode=0: no) */
    fcl_unit kv_decode_unit[2][FCL_MMA_BUCKETS];
    cl_kernel kv_decode[2][FCL_MMA_BUCKETS];
    int kv_decode_on;
    /* ... its direct build (f16 q, head dims 64 and 128, K and V in int8 or fp8 with rows at
     * multiples of 16 bytes: no staged rows, each lane's codes copied to it; [1] unused), in
     * the same unit, and whether the planner may take it (FLASHCL_TUNE=attention_kv_direct=0:
     * no) */
    cl_kernel kv_direct[2][FCL_MMA_BUCKETS];
    int kv_direct_on;
    /* ... its staged builds for K and V both in one format (fcl_plan_mma_fixed), a unit each */
    fcl_unit kv_decode_fixed_unit[2][FCL_MMA_BUCKETS][FCL_MMA_FIXED];
    cl_kernel kv_decode_fixed[2][FCL_MMA_BUCKETS][FCL_MMA_FIXED];
    /* ... whether its split calls may merge in the kernel (FLASHCL_TUNE=
     * attention_merge_in_kernel=0: the merge kernel merges them) */
    int merge_in_kernel_on;
    /* ... the prefill builds for one pair of K/V formats (fcl_plan_mma_fixed), and whether
     * the planner may take them and the 8-bit decode kernel's (FLASHCL_TUNE=
     * attention_kv_fixed=0: no) */
    fcl_unit mma_fixed_unit[FCL_MMA_BUCKETS][FCL_MMA_KINDS][FCL_MMA_FIXED];
    cl_kernel mma_fixed[FCL_MMA_BUCKETS][FCL_MMA_KINDS][FCL_MMA_FIXED];
    int kv_fixed_on;
    /* ... whether their programs convert E4M3 codes by the hardware's instruction
     * (fcl_plan_fp8_cvt) */
    int fp8_cvt;
    /* ... the registers a work-group may take (CL_DEVICE_REGISTERS_PER_BLOCK_NV; 0: not
     * reported), from which the planner caps builds' registers */
    unsigned registers;
    /* ... the decode kernels (cl/attention_decode_nv.cl), per bucket and feature set (no
     * _mod build, as the portable decode kernel). */
    cl_kernel decode[FCL_MMA_BUCKETS][FCL_ATTENTION_VARIANTS];
    /* ... and softmax (cl/softmax_nv.cl): FUSED per storage type and build
     * (fcl_plan_softmax_nv_vecs; NULL where not built), and ONLINE and SPLIT per storage type
     * in the slots of the portable kernels they replace (the others NULL). */
    cl_kernel softmax[FCL_DTYPE_COUNT][FCL_SOFTMAX_NV_BUILDS];
    cl_kernel softmax_stream[FCL_DTYPE_COUNT][FCL_K_SOFTMAX_COUNT];
} fcl_nv_kernels;

struct fcl_context {
    cl_context cl_ctx;
    cl_device_id device;
    cl_command_queue queue;
    /* The queue runs commands in order, so that the launches of one call, and calls that share
     * scratch memory, need no events between them (fcl_after_launch). */
    int queue_in_order;
    /* The kernels' programs, each built on first use under build_lock, which also guards
     * planning (which reads what the builds find) and the fields of info they write: the
     * softmax kernels' limits and plan, attention_tiles, program_from_cache,
     * softmax_nv_cols and attention_mma_because. A launch's kernels, once planned, are
     * never changed or released until the context is destroyed. */
    fcl_build_setup build;
    pthread_mutex_t build_lock;
    int programs_built;
    fcl_unit softmax_unit, merge_unit;
    fcl_unit tile_unit[FCL_ATTENTION_BUCKETS][FCL_ATTENTION_VARIANTS];
    fcl_unit decode_unit[FCL_ATTENTION_BUCKETS][FCL_ATTENTION_VARIANTS][FCL_DTYPE_COUNT];
    fcl_unit rows_unit[FCL_ATTENTION_BUCKETS][FCL_ATTENTION_VARIANTS];
    cl_kernel softmax[FCL_DTYPE_COUNT][FCL_K_SOFTMAX_COUNT];
    /* Per head-dim bucket, path (fcl_attention_path) and feature set, the kernel (NULL where
     * not built: the rows kernel has only FCL_ATTENTION_ALL; the decode path's are below). */
    cl_kernel attention[FCL_ATTENTION_BUCKETS][3][FCL_ATTENTION_VARIANTS];
    fcl_nv_kernels nv; /* NVIDIA's fast path's (src/nvidia.c) */
    /* The rows kernels' decoding form (one_query), built with the rows kernel. */
    cl_kernel attention_rows_one[FCL_ATTENTION_BUCKETS][FCL_ATTENTION_VARIANTS];
    /* The decode kernels per bucket, feature set and K/V storage type: [0] for one query
     * head, [1] for FA_DEC_HEADS query heads of one kv head (heads_step > 1). */
    cl_kernel attention_decode[FCL_ATTENTION_BUCKETS][FCL_ATTENTION_VARIANTS][FCL_DTYPE_COUNT][2];
    cl_kernel attention_merge_splits, attention_merge_parts;
    fcl_unit kv_write_unit; /* fcl_kv_write's (cl/kv_write.cl) */
    cl_kernel kv_write;
    size_t kv_write_group; /* its work-items a group: 64, or fewer where it allows fewer */
    size_t merge_work_group; /* FA_MERGE_LWS, or fewer where the merge kernels allow fewer */
    fcl_scratch scratch; /* under lock */
    fcl_device_info info;
    pthread_mutex_t lock; /* kernel arguments are shared state: set and enqueue under it */
    pthread_mutex_t error_lock; /* last_error: written and copied out under it */
    char last_error[FCL_ERROR_TEXT_MAX];
};

/* ---- status.c ---- */
/* Records a sentence as ctx's (or, with ctx NULL, the calling thread's) last error. */
void fcl_record_failure(fcl_context *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records a failure and evaluates to the status s: a macro, so that static analysis sees
 * that `return fcl_fail(ctx, FCL_ERROR_..., ...)` never returns FCL_SUCCESS. */
#define fcl_fail(ctx, s, ...) (fcl_record_failure((ctx), __VA_ARGS__), (s))
/* The status for an OpenCL error: never FCL_SUCCESS. */
fcl_status fcl_status_of_cl(cl_int err);
/* Records "<what, printf-style> failed: CL_ERROR_NAME (code)". */
void fcl_record_cl_failure(fcl_context *ctx, cl_int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records that failure and evaluates to the status for err. */
#define fcl_fail_cl(ctx, err, ...) (fcl_record_cl_failure((ctx), (err), __VA_ARGS__), fcl_status_of_cl(err))
const char *fcl_cl_error_name(cl_int err);
/* Appends text to ctx's (or the thread's) last error, for build logs. */
void fcl_append_error(fcl_context *ctx, const char *text);
/* Forgets ctx's last error (after a failure flashcl recovered from on its own). */
void fcl_clear_error(fcl_context *ctx);
/* A device call's common arguments: ctx, its io and its wait list (FCL_ERROR_INVALID_ARGUMENT
 * naming the one at fault). */
fcl_status fcl_check_call(fcl_context *ctx, const void *io, cl_uint n_wait, const cl_event *wait);

/* ---- formats.c: the storage formats of cl/kv_formats.h on the host ---- */
typedef struct fcl_format_traits {
    const char *name;    /* "f32", "q8_0", ... */
    size_t elems, bytes; /* values a block and its bytes */
    int dtype;           /* its fcl_dtype, or -1 */
    unsigned roles;      /* FCL_ROLE_* */
} fcl_format_traits;
/* A format's traits; NULL for a value that is none (0 included: resolve it first). */
const fcl_format_traits *fcl_format(unsigned format);
unsigned fcl_format_of_dtype(fcl_dtype t);
size_t fcl_dtype_size(fcl_dtype t); /* 0 for a value that is none */
/* The bytes of a view's unit (an element of a float format, else a byte), and the units a
 * row of dim values spans; 0 for a format that is none. */
size_t fcl_format_unit_bytes(unsigned format);
size_t fcl_format_row_units(unsigned format, size_t dim);

/* ---- context.c ---- */
/* A caller's cl_mem: not NULL, of ctx's cl_context, at least need bytes (name says which). */
fcl_status fcl_check_buffer(fcl_context *ctx, const char *name, cl_mem buf, size_t need);
/* The same, giving the buffer's size in bytes. */
fcl_status fcl_check_buffer_size(fcl_context *ctx, const char *name, cl_mem buf, size_t need,
                                 size_t *bytes);
/* A buffer of ctx's context for the host calls: a copy of init when given (the caller's
 * memory is never written), else uninitialised. Does nothing once *err is an error, so a
 * run of calls needs one check. */
cl_mem fcl_host_buffer(fcl_context *ctx, cl_mem_flags flags, size_t bytes, const void *init,
                       cl_int *err);

/* ---- scratch.c: device memory a call's kernels pass between them, under ctx->lock ---- */
/* slot's buffer, of at least bytes (grown as needed; what it held is not kept). */
fcl_status fcl_scratch_buffer(fcl_context *ctx, fcl_scratch_slot slot, size_t bytes, cl_mem *buf);
/* The wait list of a call's first kernel that writes scratch: wait, and on an out-of-order
 * queue the last kernel that used scratch before; fcl_wait_list_free frees it. */
typedef struct fcl_wait_list {
    cl_uint n;
    const cl_event *events;
    cl_event *owned; /* events, where it had to be made */
} fcl_wait_list;
fcl_status fcl_scratch_wait_list(fcl_context *ctx, cl_uint n_wait, const cl_event *wait,
                                 fcl_wait_list *list);
void fcl_wait_list_free(fcl_wait_list *list);
/* Records last, the last kernel of a call that used scratch (retained). */
void fcl_scratch_used(fcl_context *ctx, cl_event last);
/* The end of a call's two kernels chained through scratch (first writes it, second reads it;
 * NULL where not enqueued or without an event, fcl_first_event, fcl_second_event): the later
 * of them becomes scratch's last use, second goes to *done (or is released where done is
 * NULL), first is released. */
void fcl_scratch_pair_done(fcl_context *ctx, cl_event first, cl_event second, cl_event *done);
/* The events a launch that follows the launch of prev in the same call waits for (*wait, the
 * count returned): prev alone, or none on an in-order queue, which keeps their order itself
 * (on NVIDIA's driver an event waited on costs host time at each enqueue). */
cl_uint fcl_after_launch(const fcl_context *ctx, const cl_event *prev, const cl_event **wait);
/* Where the first of a call's two chained launches returns its event: slot on an
 * out-of-order queue, whose second launch and later users of scratch wait for it; NULL on an
 * in-order queue, which keeps their order itself (on NVIDIA's driver an event costs about 8
 * us of host time an enqueue on the context's own queue, which has profiling on) ... */
cl_event *fcl_first_event(const fcl_context *ctx, cl_event *slot);
/* ... and the second: also where the caller asks for it (done not NULL). */
cl_event *fcl_second_event(const fcl_context *ctx, cl_event *slot, const cl_event *done);
/* Releases the buffers and the event (context destruction). */
void fcl_scratch_release(fcl_context *ctx);

/* ---- device.c ---- */
/* POCL's major version where info's driver is POCL; 0 for any other driver. */
int fcl_pocl_major(const fcl_device_info *info);
/* Picks a device by spec (see fcl_context_options.device); NULL or "" means the default. */
fcl_status fcl_select_device(const char *spec, cl_platform_id *platform, cl_device_id *device);
/* Fills the device fields of info (not the per-kernel and plan fields). */
fcl_status fcl_probe_device(cl_device_id device, fcl_device_info *info);
/* Builds and runs the probe kernels (cl/probe.cl) before the kernels are planned: records the
 * driver's loop-iteration cap, its work-group limit for a light kernel and its count of local
 * memory in ctx->info. */
fcl_status fcl_probe_kernels(fcl_context *ctx);
#define FCL_PROBE_LOCAL 1024 /* bytes of local memory the loop probe declares (cl/probe.cl, by -D) */
/* The driver's count of a kernel's local memory as a line through the probe kernels' two
 * points, `once` and `twice` reported for FCL_PROBE_LOCAL and twice that declared: sets
 * local_mem_scale (bytes counted per byte declared) and local_mem_reserved (bytes added to
 * every kernel). */
void fcl_fit_local_mem_count(fcl_device_info *info, cl_ulong once, cl_ulong twice);

/* ---- program.c ---- */
/* Plans the kernels for ctx->device with the cache directory and tuning opts (may be NULL)
 * ask for (the plan fields of ctx->info, every bucket's tile as planned) and runs NVIDIA's
 * self-check where the planner wants their kernels; every other kernel is built on first use
 * by the calls below, made under ctx->build_lock. */
fcl_status fcl_build_kernels(fcl_context *ctx, const fcl_context_options *opts);
/* The softmax kernels (NVIDIA's too, where used), built (or loaded from the cache) where not
 * yet, with the plan fields that depend on them. A failure leaves them unbuilt, for the next
 * call to try again. */
fcl_status fcl_build_softmax(fcl_context *ctx);
/* The merge kernels (split-KV and fcl_attention_merge), likewise. */
fcl_status fcl_build_merge(fcl_context *ctx);
/* fcl_kv_write's kernel, likewise. */
fcl_status fcl_build_kv_write(fcl_context *ctx, cl_kernel *kernel);
/* The kernel of launch l for feature flags: the fewest features that cover them, built where
 * not yet tried; NULL where none of l's path builds or fits (the caller plans another path).
 * A bucket's first tile kernel may make the planner refit its tile
 * (info.attention_tiles[l->bucket] changes: the caller plans again). Fails only where a
 * build fails for another reason than the kernels (no memory, the driver's errors), leaving
 * that unit to be tried again. */
struct fcl_attention_launch;
fcl_status fcl_attention_kernel(fcl_context *ctx, const struct fcl_attention_launch *l,
                                cl_uint flags, cl_kernel *kernel);
void fcl_release_kernels(fcl_context *ctx);
/* For offline compilers, the source of a program (malloc'd; NULL on a bad override, a
 * program the set does not have, or no memory): a head-dim bucket's kernels in one program
 * (0 up to the buckets), softmax's, the merge's, NVIDIA's self-check, NVIDIA's 8-bit K/V
 * decode kernels (every bucket's, as the library builds them: without the tensor-core
 * kernel's builds), or every kernel. */
enum {
    FCL_SOURCE_ALL = -1,
    FCL_SOURCE_SOFTMAX = -2,
    FCL_SOURCE_MERGE = -3,
    FCL_SOURCE_CHECK = -4,
    FCL_SOURCE_KV_DECODE = -5
};
/* The portable kernels as fcl_build_kernels and the bucket builds would compile them for
 * info's device with the FLASHCL_TUNE overrides tune. */
char *fcl_kernel_source(const fcl_device_info *info, const char *tune, int program);

/* program.c's services to the fast paths, which build their own programs with them. */
typedef struct fcl_text { /* a growing string; failed after running out of memory */
    char *s;
    size_t len, cap;
    int failed;
} fcl_text;
void fcl_text_add(fcl_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
extern const char *const fcl_dtype_suffix[FCL_DTYPE_COUNT];
extern const char *const fcl_softmax_kernel_names[FCL_K_SOFTMAX_COUNT];
/* Whether the decode kernels are built for feature set v (not for the score modifiers'). */
int fcl_decode_built_for(int v);
/* A unit's program from source (freed here) or the cache; _option: built with option after
 * the context's compiler options, where they leave it room. */
fcl_status fcl_build_unit(fcl_context *ctx, fcl_unit *u, char *source);
fcl_status fcl_build_unit_option(fcl_context *ctx, fcl_unit *u, char *source, const char *option);
void fcl_release_unit(fcl_unit *u);
void fcl_release_kernel(cl_kernel *k);
/* Creates kernel `name` of program; where its local memory or work-group (group work-items)
 * does not fit the device, releases it and sets *fits to 0, with what it allows in *wg and
 * uses in *local. */
fcl_status fcl_create_fitting(fcl_context *ctx, cl_program program, const char *name,
                              cl_kernel *k, size_t group, int *fits, size_t *wg, cl_ulong *local);

/* ---- cache.c: the on-disk program-binary cache ---- */
/* A 64-bit FNV-1a-style hash over words, chained through h (start with FCL_HASH_INIT):
 * cache keys and the cached binary's checksum. */
#define FCL_HASH_INIT 0xcbf29ce484222325ull
uint64_t fcl_hash(uint64_t h, const void *data, size_t n);
/* The cache directory: requested, else FLASHCL_CACHE_DIR, else the user cache directory
 * (written into buf); NULL when the cache is disabled. */
const char *fcl_cache_dir(const char *requested, char *buf, size_t cap);
/* Whether the driver may be asked for program binaries at all (POCL 4 and later abort). */
int fcl_cache_usable(const fcl_device_info *info);
/* Everything that determines a binary, as text (malloc'd; NULL without memory): stored in the
 * file and compared on load. */
char *fcl_cache_identity(const fcl_device_info *info, const char *options, const char *source);
/* The file for an identity in dir; 0 on success. */
int fcl_cache_path(char *buf, size_t cap, const char *dir, const char *identity);
/* The binary (malloc'd) of an intact file made for exactly this identity; NULL otherwise. */
unsigned char *fcl_cache_load(const char *path, const char *identity, size_t *binary_len);
/* Bytes of a file written in pieces. */
typedef struct fcl_piece {
    const void *data;
    size_t size;
} fcl_piece;
/* Writes path (creating dir and its parents) under a temporary name and renames it, so a
 * reader never sees half a file; 0, or the errno of what failed. */
int fcl_write_atomic(const char *dir, const char *path, const fcl_piece *pieces, int n);
/* fcl_write_atomic of a binary's file. Failure only costs the next context a rebuild. */
void fcl_cache_store(const char *dir, const char *path, const char *identity,
                     const unsigned char *binary, size_t binary_len);

/* ---- tuned.c: flashcl-tune's parameters, stored beside the program cache ---- */
/* The overrides stored for info's device and driver in dir (into line, cap bytes); 0 where
 * there is no intact entry made for exactly them. */
int fcl_tuned_load(const char *dir, const fcl_device_info *info, char *line, size_t cap);
/* Stores line as that entry, or removes it (line NULL or ""); 0, or an errno. */
int fcl_tuned_store(const char *dir, const fcl_device_info *info, const char *line);

/* ---- plan.c ---- */
/* Per-device parameters: defaults from a small device table (by vendor and type), then
 * overrides (stored by flashcl-tune, FLASHCL_TUNE, or a context's options). Kernels never test device names; they get these numbers
 * through the prelude. */
typedef struct fcl_tuning {
    size_t softmax_work_group; /* wanted work-items per row */
    size_t vector_width;       /* 4, 8 or 16 */
    int attention_tile;        /* a tile candidate to start from; -1: the largest that fits */
    size_t attention_accumulators; /* most float accumulators per work-item in a tile */
    size_t softmax_block_items; /* FUSED in registers: elements per work-item (0: never) */
    size_t softmax_block_lanes; /* ... and at least this many work-items per row */
    int softmax_rows;          /* ONLINE as one work-item per row (no barriers) */
    int attention_rows;        /* attention as a block of queries per work-item */
    size_t attention_group;    /* most work-items of a tile work-group (16, 32, 64); 0: as
                                  many as the kernels allow */
    int attention_pv_vec;      /* the tile kernel's o += P V reads p 4 keys at a time */
    int attention_prefetch;    /* ... and may prefetch the next K and V tiles, */
    size_t attention_prefetch_items; /* ... holding up to this many elements of each a
                                        work-item in registers (16, 32, 48 or 64) */
    int force_inline;          /* the kernels force their helpers inline (FCL_FORCE_INLINE) */
    int kv_decode_calls;       /* K/V formats decoded by calls, not inline (FCL_KV_CALLS) */
    int cache_prefetch;        /* the rows decode kernel prefetches rows (FA_CACHE_PREFETCH) */
    int attention_mma;         /* 0: none of NVIDIA's kernels even where the device has them */
    int attention_kv_decode;   /* 0: 8-bit K/V decoding keeps the tensor-core kernel's _kv build */
    int attention_kv_direct;   /* 0: ... its int8 and fp8 K/V keep the staged copies */
    int attention_merge_in_kernel; /* 0: ... its key splits are merged by the merge kernel */
    int attention_kv_fixed;    /* 0: the tensor-core prefill and the 8-bit decode kernel over
                                  K/V formats keep the builds that read them at run time
                                  (fcl_plan_mma_fixed) */
    int attention_fp8_cvt;     /* 0: NVIDIA's kernels convert E4M3 codes by integer and f16
                                  arithmetic even where the GPU converts them (fcl_plan_fp8_cvt) */
    int softmax_nv;            /* 0: softmax keeps the portable kernels on NVIDIA too */
    char source[96];           /* which table entry, then what changed it (fcl_tuning_apply) */
} fcl_tuning;
/* The device table's parameters for info's device. */
void fcl_tuning_defaults(const fcl_device_info *info, fcl_tuning *t);
/* Applies overrides ("key=value,...": softmax_wg, vector_width, block_items, block_lanes,
 * softmax_rows=0|1, attention_rows=0|1, attention_group=16|32|64, attention_tile=BQxBK,
 * attention_prefetch=0|1, attention_prefetch_items=16|32|48|64, attention_pv_vec=0|1,
 * attention_mma=0|1, attention_kv_decode=0|1, attention_kv_direct=0|1,
 * attention_merge_in_kernel=0|1, attention_kv_fixed=0|1, attention_fp8_cvt=0|1,
 * softmax_nv=0|1) to t and names where (FLASHCL_TUNE, options.tuning) in t->source; NULL or
 * "" changes nothing. A bad override is FCL_ERROR_INVALID_ARGUMENT with a sentence naming
 * where (recorded on ctx, or the thread if NULL). */
fcl_status fcl_tuning_apply(fcl_context *ctx, fcl_tuning *t, const char *overrides,
                            const char *where);
/* Defaults for info's device with FLASHCL_TUNE's overrides applied. */
fcl_status fcl_tuning_for(fcl_context *ctx, const fcl_device_info *info, const char *overrides,
                          fcl_tuning *t);
/* A context's tuning: given (fcl_context_options.tuning) where not NULL, over the defaults
 * alone; else the defaults, then the entry stored for the device (flashcl-tune's; ignored
 * where it does not parse), then env (FLASHCL_TUNE). */
fcl_status fcl_tuning_resolve(fcl_context *ctx, const fcl_device_info *info, const char *given,
                              const char *stored, const char *env, fcl_tuning *t);
/* Work-group size for the row kernels: the wanted size within the device's and (after the
 * build, kernel_work_group_size nonzero) every kernel's limit, as a power of two. */
size_t fcl_plan_work_group_size(const fcl_device_info *info, size_t wanted);
/* Longest row FUSED can hold: in registers (softmax_block_cols) or in the local memory left
 * beside the kernel's own use. */
size_t fcl_plan_fused_max_cols(const fcl_device_info *info);

typedef struct fcl_softmax_launch {
    fcl_softmax_algo algo;
    int per_item;      /* ONLINE as softmax_rows: one work-item per row */
    size_t lanes;      /* FUSED in registers: work-items per row; 0: in local memory */
    int nv_build;      /* FUSED as NVIDIA's softmax_nv (cl/softmax_nv.cl): its build + 1; 0: not */
    int nv_stream;     /* ONLINE or SPLIT on NVIDIA's kernels (softmax_nv_online, _split_*) */
    size_t work_group_size;
    size_t groups;     /* work-groups launched (each loops over rows or row slices) */
    size_t slices;     /* SPLIT: work-groups per row */
    size_t slice_cols; /* SPLIT: columns per slice */
} fcl_softmax_launch;

/* The 16-byte vectors a work-item of NVIDIA's softmax build holds for storage type t; 0 where
 * that build is not made (the second build only serves float32 rows too long for the first). */
size_t fcl_plan_softmax_nv_vecs(fcl_dtype t, int build);

/* Chooses the algorithm and launch shape for a validated descriptor. Returns
 * FCL_ERROR_UNSUPPORTED when a forced algorithm cannot run on the device. */
fcl_status fcl_plan_softmax(const fcl_device_info *info, const fcl_softmax_desc *d,
                            fcl_softmax_launch *launch);

/* Attention tiles: candidates (block_q, block_kv), best first. */
size_t fcl_attention_bucket_dim(int bucket);
/* The bucket whose kernels handle max(head_dim, head_dim_v), or -1 above 576. */
int fcl_attention_bucket(size_t head_dim, size_t head_dim_v);
void fcl_attention_tile_shape(int candidate, size_t *block_q, size_t *block_kv);
/* The candidate index of a tile shape; -1 when it is none. */
int fcl_attention_tile_candidate(size_t block_q, size_t block_kv);
/* FA_TQ, the work-item rows of a tile work-group of work_group_size (0: no such group). */
size_t fcl_attention_tile_items_q(size_t work_group_size);
/* Plans one bucket's tile kernel into *tile (max_head_dim, block_q, block_kv,
 * work_group_size): the largest work-group up to work_group_limit with a candidate, from
 * `first` on, whose local memory (prefetch: with the prefetching tiles' second buffer where
 * they prefetch) fits the device and whose accumulators per work-item stay within
 * max_accumulators; the first such candidate. Where none does, block_q is 0 (the rows kernel
 * serves) and rows_because names the limit that ruled the tiles out. */
void fcl_plan_attention_tile(const fcl_device_info *info, int bucket, int first,
                             size_t max_accumulators, size_t work_group_limit, int prefetch,
                             struct fcl_attention_tile *tile);
/* A bucket's tile planned again after its compiled kernel did not fit (*tile as built, then
 * the new plan): a kernel that allowed a work-group of only allowed_group gets a smaller
 * group; one whose local memory as the driver counts it (counted_local) exceeds the device's
 * gets the next smaller tile within the room that count leaves, for a driver may count more
 * than the tile declares (Oclgrind: three times), so that one rebuild fits. Where none does,
 * the rows kernel serves and rows_because says why. */
void fcl_plan_attention_refit(const fcl_device_info *info, int bucket, size_t max_accumulators,
                              int prefetch, size_t allowed_group, cl_ulong counted_local,
                              struct fcl_attention_tile *tile);
/* Every bucket's tile before the build (tiles[FCL_ATTENTION_BUCKETS]): the tuning's tile, or
 * the largest that fits, or the rows kernel where the tuning prefers it; with the rows
 * kernel's queries per work-item, and decoding (decode_block_kv) beside the tiles where its
 * work-groups fit the device. */
void fcl_plan_attention_tiles(const fcl_device_info *info, const fcl_tuning *tuning,
                              struct fcl_attention_tile *tiles);
/* Whether the tile kernel has a build for a head-dim bucket and feature set (where it has
 * none, its calls run the rows kernel). */
int fcl_plan_tile_built(int bucket, int variant);
/* Whether to build the tensor-core path (cl/attention_mma_nv.cl) for this device: 1, or 0
 * with the reason in because. */
int fcl_plan_mma(const fcl_device_info *info, const fcl_tuning *tuning, char *because,
                 size_t cap);
/* Whether NVIDIA's kernels for a GPU of compute capability cc (major * 10 + minor) convert
 * E4M3 codes by the hardware's instruction (FA_NV_FP8_CVT; tuning NULL: the default). */
int fcl_plan_fp8_cvt(unsigned cc, const fcl_tuning *tuning);
/* Their kernel name suffixes, by kind. */
extern const char *const fcl_mma_kind_names[FCL_MMA_KINDS];
/* The kind that runs d on the tensor cores (q and k of one storage type), else -1. */
int fcl_plan_mma_kind(const fcl_attention_desc *d);
/* Whether the kind takes float32 storage (products of TF32 values, FA_MMA_F32). */
int fcl_mma_kind_f32(int kind);
/* A tensor-core build's shape: warps a work-group (FA_MMA_WARPS), of which key_warps share
 * each row tile, a share of each key tile apiece (FA_MMA_KWARPS), tiles of 16 query rows a
 * warp (FA_MMA_MT) and keys a tile (FA_MMA_BK), and whether its K and V copies ask the L2
 * for whole 128-byte lines (FA_MMA_L2_LINES), for a head-dim bucket and kind, in the prefill
 * build or the GQA decoding build (gqa_rows: one row tile). */
typedef struct fcl_mma_shape {
    size_t warps, key_warps, row_tiles, block_kv;
    int l2_lines;
} fcl_mma_shape;
fcl_mma_shape fcl_plan_mma_shape(int bucket, int kind, int gqa_rows, int kv);
/* Whether the kind has a build for the bucket, in the prefill build or the GQA build
 * (gqa_rows). */
int fcl_plan_mma_built(int bucket, int kind, int gqa_rows, int kv);
/* Whether a tile of block_q queries in a work-group of work_group_size prefetches the next
 * K and V tiles into registers (attention_tile.cl's FA_PREFETCH), where the device's tuning
 * allows it (fcl_tuning.attention_prefetch). */
int fcl_attention_tile_prefetch(int allowed, size_t block_q, size_t work_group_size);
/* Local memory an attention tile uses (what attention_tile.cl declares). */
size_t fcl_attention_local_bytes(size_t dim, size_t block_q, size_t block_kv);

typedef struct fcl_attention_launch {
    int bucket;
    fcl_attention_path path;
    size_t block_q, block_kv;
    size_t q_tiles;   /* per (batch, head) */
    size_t heads_step; /* query heads of a kv head a step takes together (decode, rows) */
    size_t work;      /* steps (query blocks of every batch and head) per key split */
    size_t splits;    /* key splits; 1: the kernel writes the output itself */
    size_t split_len; /* keys per split, a multiple of block_kv */
    size_t groups;    /* work-groups launched (each loops over tiles) */
    size_t work_group_size;
    int gqa_rows; /* FCL_ATTENTION_PATH_MMA: the GQA build, GQA decoding as rows */
    int kv_decode; /* ... on the 8-bit K/V decode kernel (attention_decode_kv_nv.cl) */
    int kv_direct; /* ... its direct build (fcl_plan_attention_gqa_rows) */
    int merge_in_kernel; /* ... with splits: its groups merge them (FA_FLAG_MERGE_LAST), no
                            merge kernel */
    int one_query; /* FCL_ATTENTION_PATH_ROWS: decoding's kernel, one query of heads_step heads
                      a step (attention_rows_one) */
    int mma_kind; /* FCL_ATTENTION_PATH_MMA: the product type (FCL_MMA_F16, ...) */
    int kv_fixed; /* ... prefill over K/V formats, or the 8-bit decode kernel's staged build:
                     1 + the index in fcl_mma_fixed_formats of the build for K's and V's
                     format, 0: the build for any (the _kv build, the staged one) */
    fcl_dtype dtype_kv; /* FCL_ATTENTION_PATH_DECODE: its kernels are built per K/V type */
    const char *refusal; /* with FCL_ERROR_UNSUPPORTED: why no kernel takes the call */
    cl_kernel kernel;    /* the kernel (attention.c sets it, fcl_attention_kernel's) */
} fcl_attention_launch;

/* The kernel, tiles and key splits for a validated descriptor (heads_kv, head_dim_v filled
 * in). Every head-dim bucket has a path on every device (the rows kernel needs neither
 * local memory nor a large work-group). */
fcl_status fcl_plan_attention(const fcl_device_info *info, const fcl_attention_desc *d,
                              fcl_attention_launch *launch);
/* The same, not on the paths in avoid (bits 1 << FCL_ATTENTION_PATH_TILE, _DECODE: their
 * kernels did not fit for the call's features): without a tile the rows kernel serves,
 * without the decode kernel the tile kernel. */
fcl_status fcl_plan_attention_avoiding(const fcl_device_info *info, const fcl_attention_desc *d,
                                       unsigned avoid, fcl_attention_launch *launch);
/* The NVIDIA launch for d where those kernels take it (info->attention_mma, head dims up to
 * 256 in multiples of 8, and rows_aligned: every row of q, k and v at a multiple of 8
 * elements, for their 16-byte loads): the tensor cores for q, k and v of one storage type
 * (float32: head dims up to 128) with len_q above FCL_ATTENTION_DECODE_MAX_Q, the shuffle
 * decode kernel for len_q up to it where GQA groups are odd (1 included); returns 0 where
 * neither does, and the caller plans the portable path. */
int fcl_plan_attention_mma(const fcl_device_info *info, const fcl_attention_desc *d,
                           int rows_aligned, fcl_attention_launch *launch);
/* The tensor-core launch of GQA decoding as rows of a kv head (d: fcl_attention_gqa_rows's),
 * on the 8-bit K/V decode kernel where kv_decode allows it and it takes d (its direct build
 * where kv_direct allows it: that switch on, and every row of K and V at a multiple of 16
 * bytes; with key splits, merged in the kernel where merge_in_kernel allows it), else on
 * the kernel's GQA build, where that path takes d's shape; else 0. */
int fcl_plan_attention_gqa_rows(const fcl_device_info *info, const fcl_attention_desc *d,
                                int rows_aligned, int kv_decode, int kv_direct,
                                int merge_in_kernel, fcl_attention_launch *launch);
/* The formats whose tensor-core prefill and 8-bit decode kernel over K and V both in that
 * format have a build of their own (the formats constants in it); fcl_plan_mma_fixed: 1 + the
 * index here of the one that launch l (tensor-core prefill over K/V formats, or the 8-bit
 * decode kernel's staged build, planned for d) takes, else 0 (the build that reads the
 * formats at run time). */
extern const fcl_kv_format fcl_mma_fixed_formats[FCL_MMA_FIXED];
int fcl_plan_mma_fixed(const fcl_attention_desc *d, const fcl_attention_launch *l);
/* The register cap of the 8-bit decode kernel's builds for one format at bucket b on an NVIDIA
 * GPU with that many registers a work-group may take (0: none). */
unsigned fcl_plan_kv_decode_register_cap(unsigned registers, int bucket);

/* Loop iterations the busiest work-item of a tile or rows launch makes, as the planner
 * models them (the count it keeps within loop_iteration_cap); 0 for the decode kernel, which
 * is not modelled (the planner does not pick it under a cap). */
size_t fcl_attention_loop_iterations(const fcl_device_info *info, const fcl_attention_launch *l);
/* Work-groups for a merge kernel over rows of dim columns, each the merge of `splits` parts
 * (fcl_attention_merge: 1), work_group work-items a group: at most 32 per compute unit, more
 * where the driver's loop cap needs them. */
size_t fcl_plan_merge_groups(const fcl_device_info *info, size_t rows, size_t splits, size_t dim,
                             size_t work_group);

/* ---- attention_desc.c: validating and resolving a descriptor ---- */
/* The attention kernels' scalar arguments (cl/attention_args.h). */
#define FCL_HOST_U32 cl_uint
#define FCL_HOST_U64 cl_ulong
#define FCL_HOST_F32 cl_float
#define FCL_PARAM_FIELD(type, name) FCL_HOST_##type name;
typedef struct fcl_attention_params {
    FA_PARAMS(FCL_PARAM_FIELD, FCL_PARAM_FIELD)
} fcl_attention_params;
/* Their buffers, in argument order. */
#define FCL_BUFFER_FIELD(kind, name) cl_mem name;
typedef struct fcl_attention_buffers {
    FA_BUFFERS(FCL_BUFFER_FIELD)
} fcl_attention_buffers;
enum { FA_FLAGS(FA_FLAG_ENUM_ENTRY) };
/* The features and kernel-name suffix of each FCL_ATTENTION_* feature set. */
static inline unsigned fcl_attention_variant_features(int variant)
{
    static const unsigned features[FCL_ATTENTION_VARIANTS] = {
        FA_FEATURES_PLAIN, FA_FEATURES_SCORES, FA_FEATURES_ALL, FA_FEATURES_KV};
    return features[variant];
}
static inline const char *fcl_attention_variant_suffix(int variant)
{
    static const char *const suffix[FCL_ATTENTION_VARIANTS] = {"", "_mod", "_all", "_kv"};
    return suffix[variant];
}

/* A descriptor resolved into the one addressing form every kernel uses: views with their
 * strides, packed and paged sequences, modifiers, as kernel parameters. */
typedef struct fcl_attention_problem {
    fcl_attention_desc d;        /* with its defaults filled in */
    fcl_attention_params params; /* all but the launch's q_tiles, splits and split_len, and
                                    the buffer limits and flags the io sets */
} fcl_attention_problem;

/* Which optional buffers an io gives (the device and host io alike). */
typedef struct fcl_attention_given {
    int mask, lse, seqlens_kv, cu_seqlens_q, cu_seqlens_kv, block_table, alibi_slopes, sinks;
    int k_scales, v_scales, leftpad_kv, query_offsets;
} fcl_attention_given;
/* A view whose strides are all 0 takes them from the layout, for `tokens` tokens per batch
 * entry (per page when paged) of rows of dim units, or [total][heads][dim] when packed (a
 * packed view's batch stride is ignored: 0). */
fcl_tensor_view fcl_view_resolve(fcl_tensor_view v, fcl_layout layout, int packed, size_t heads,
                                 size_t tokens, size_t dim);
/* Units from the buffer start to one past the last unit of a view with `outer` batch entries
 * (or pages), `heads` heads and `tokens` tokens of rows of dim units; 0 when it has no row,
 * SIZE_MAX when that overflows. */
size_t fcl_view_extent(const fcl_tensor_view *v, size_t outer, size_t heads, size_t tokens,
                       size_t dim);
/* K's or V's cache view x ("k" or "v") of a format: zero strides from the layout (rows of the
 * format's units), and with TOKEN scales their view (zero strides: [page or batch][heads]
 * [tokens]); FCL_ERROR_INVALID_ARGUMENT, naming the field, where a ggml format's view is not
 * 2-byte aligned. */
fcl_status fcl_kv_views_resolve(fcl_context *ctx, const char *x, unsigned format, fcl_kv_scale mode,
                                size_t dim, fcl_layout layout, int packed, size_t heads,
                                size_t tokens, fcl_tensor_view *view, fcl_tensor_view *scales_view);
/* Whether a scale mode has a buffer of scales (HEAD, TOKEN). */
int fcl_kv_scale_has_buffer(fcl_kv_scale mode);
/* What attention and fcl_kv_write check alike of K's or V's coding (x "k" or "v"): its format
 * (0 becomes dtype's), the head dim (named dim_name) it needs, its scale mode, its scale
 * (finite; nonzero only for TENSOR), and a scales buffer given (has_scales) exactly where the
 * mode has one. FCL_ERROR_INVALID_ARGUMENT with a sentence naming the field. */
fcl_status fcl_check_kv_coding(fcl_context *ctx, const char *x, fcl_kv_format *format,
                               fcl_dtype dtype, const char *dim_name, size_t dim,
                               fcl_kv_scale mode, float scale, int has_scales);
/* Whether d's K and V take the coded kernels (FA_FLAG_KV): a format other than f32, f16 or
 * bf16, K and V in different formats, or scales. d resolved or not (format 0: dtype_kv). */
int fcl_attention_kv_coded(const fcl_attention_desc *d);

/* Validates desc and resolves it (FCL_ERROR_INVALID_ARGUMENT with a sentence naming the field,
 * its value and the limit), with the optional buffers that come with it. */
fcl_status fcl_attention_resolve(fcl_context *ctx, const fcl_attention_desc *desc,
                                 const fcl_attention_given *given, fcl_attention_problem *pr);

/* Units each tensor reaches (from its view's offset to the end of its last row; elements, or
 * bytes for K and V of a coded format), for
 * packed tensors given the total token counts (1 where unknown: the device call). */
typedef struct fcl_attention_extents {
    size_t q, k, v, out, mask, lse, seqlens_kv, cu_seqlens, block_table, alibi_slopes, sinks;
    /* (seqlens_kv: also leftpad_kv's and query_offsets') */
    size_t k_scales, v_scales; /* floats; 0 where the scale mode has no buffer */
} fcl_attention_extents;
fcl_status fcl_attention_extents_of(fcl_context *ctx, const fcl_attention_problem *pr,
                                    size_t total_q, size_t total_kv,
                                    fcl_attention_extents *e);
/* Checks the host call's index arrays (lengths, cu_seqlens, block table) against the
 * descriptor; fills the packed totals (cu_seqlens[batch]; 0 when not packed). */
fcl_status fcl_attention_check_indices(fcl_context *ctx, const fcl_attention_problem *pr,
                                       const fcl_attention_host_io *io, size_t *total_q,
                                       size_t *total_kv);
/* Whether out's bytes and those of input 0 (q), 1 (k) or 2 (v), placed in one buffer by
 * their views, overlap. */
int fcl_attention_out_overlaps(const fcl_attention_problem *pr, const fcl_attention_extents *e,
                               int input);
/* Decoding one query row where a GQA group of query heads shares each kv head: the same call
 * as `group` query rows of each kv head (no GQA), so that a prefill kernel reads each K and V
 * row once for the group. 1 with *rows filled in where the call's features allow it (its
 * buffer limits are pr's), else 0. */
int fcl_attention_gqa_rows(const fcl_attention_problem *pr, fcl_attention_problem *rows);

/* ---- fast paths: a vendor's kernels beside the portable ones ---- */
/* What program.c and softmax.c reach a fast path through (NVIDIA's: src/nvidia.c). The
 * planner (plan.c) decides where its kernels run; the path builds them on first use, under
 * ctx->build_lock, and its self-check at context creation says (in ctx->info) whether they
 * serve. A kernel that does not build or fit leaves its calls to the portable kernels. */
typedef struct fcl_fast_path {
    const char *name;
    /* At context creation: where the planner wants the path, builds and runs its
     * self-check, and sets the fields of ctx->info that say whether and where it serves. */
    fcl_status (*check)(fcl_context *ctx, const fcl_tuning *tuning);
    /* Its softmax kernels, built beside the portable ones where ctx->info says they serve. */
    fcl_status (*build_softmax)(fcl_context *ctx);
    /* The softmax kernels of a launch the planner gave to the path (nv_build, nv_stream),
     * in the portable kernels' slots (FCL_K_SOFTMAX_*). */
    void (*softmax_kernels)(fcl_context *ctx, const fcl_softmax_launch *l, fcl_dtype t,
                            cl_kernel out[FCL_K_SOFTMAX_COUNT]);
    /* The kernel of feature set v for a launch on one of the path's own attention paths,
     * built where not yet tried; *kernel NULL where the path is not its or the kernel does
     * not build or fit. */
    fcl_status (*attention_kernel)(fcl_context *ctx, const fcl_attention_launch *l, int v,
                                   cl_kernel *kernel);
    /* Its programs' source (FCL_SOURCE_*, or a bucket) for a GPU of compute capability cc
     * (major * 10 + minor), for offline compilers. */
    char *(*source)(int program, unsigned cc);
    void (*release)(fcl_context *ctx);
} fcl_fast_path;
extern const fcl_fast_path fcl_nvidia_path;

#endif /* FLASHCL_INTERNAL_H */

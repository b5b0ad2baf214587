/*
 * flashcl: portable OpenCL softmax and single-pass attention.
 *
 * One header, C99, usable from C++. Every call returns an fcl_status; after a failure
 * fcl_context_last_error() holds a sentence naming the argument or limit at fault (or the
 * compiler's build log). The library never exits, aborts, or prints unless FLASHCL_LOG=1.
 *
 * Thread safety: distinct contexts are independent and may be used from different threads
 * at once. One context may be used from several threads at once: kernel arguments are set
 * and kernels enqueued under the context's lock, so calls never mix each other's arguments;
 * results are those of the same calls made one after another. fcl_context_last_error()
 * reports the last failure of the context, whichever thread caused it, as a copy owned by
 * the calling thread. fcl_context_create* and fcl_context_destroy are not to be called on a
 * context that another thread is using (destroy only after every call on it has returned).
 */
#ifndef FLASHCL_H
#define FLASHCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FCL_API __attribute__((visibility("default")))
#else
#define FCL_API
#endif

#define FLASHCL_VERSION_MAJOR 0
#define FLASHCL_VERSION_MINOR 3
#define FLASHCL_VERSION_PATCH 0

/* The status list, one X(name, value, description) per status: the enum and
 * fcl_status_string() are both generated from it, so they cannot drift apart. */
#define FCL_STATUS_LIST(X)                                                                   \
    X(FCL_SUCCESS, 0, "success")                                                            \
    X(FCL_ERROR_INVALID_ARGUMENT, -1, "invalid argument")                                   \
    X(FCL_ERROR_UNSUPPORTED, -2, "not supported on this device")                            \
    X(FCL_ERROR_NO_DEVICE, -3, "no matching OpenCL device")                                 \
    X(FCL_ERROR_BUILD_FAILED, -4, "kernel build failed")                                    \
    X(FCL_ERROR_OUT_OF_RESOURCES, -5, "out of device resources")                            \
    X(FCL_ERROR_OUT_OF_HOST_MEMORY, -6, "out of host memory")                               \
    X(FCL_ERROR_OPENCL, -7, "OpenCL error")                                                 \
    X(FCL_ERROR_COMMUNICATION, -8, "communication failed") /* flashcl_mpi: an MPI call */

typedef enum fcl_status {
#define FCL_STATUS_ENUM_ENTRY(name, value, text) name = (value),
    FCL_STATUS_LIST(FCL_STATUS_ENUM_ENTRY)
#undef FCL_STATUS_ENUM_ENTRY
} fcl_status;

/* Storage type of tensors. Arithmetic is always float32. */
typedef enum fcl_dtype {
    FCL_DTYPE_F32 = 0,
    FCL_DTYPE_F16 = 1, /* IEEE binary16, read/written with vload_half/vstore_half */
    FCL_DTYPE_BF16 = 2 /* bfloat16 (upper half of a float32), round to nearest even */
} fcl_dtype;

typedef struct fcl_context fcl_context;

typedef struct fcl_context_options {
    /* NULL: env FLASHCL_DEVICE, else the first GPU, else the first accelerator, else the
     * first CPU device. Otherwise "P:D" (platform and device indices), "gpu", "cpu",
     * "accelerator", or a case-insensitive substring of the device name. */
    const char *device;
    /* NULL: env FLASHCL_CACHE_DIR, else $XDG_CACHE_HOME/flashcl or ~/.cache/flashcl.
     * "" disables the on-disk program-binary cache (and the tuned parameters kept there). */
    const char *cache_dir;
    /* The kernels' parameters (docs/devices.md, "Tuning"). NULL: the device table's
     * defaults, then the parameters flashcl-tune stored for this device and driver in the
     * cache directory (fcl_tuning_store), then env FLASHCL_TUNE. Otherwise the defaults with
     * exactly these overrides, in FLASHCL_TUNE's form "key=value,..." ("" for the defaults
     * alone): neither the stored parameters nor FLASHCL_TUNE apply. */
    const char *tuning;
} fcl_context_options;

/* What flashcl probed on the device and planned from it. */
typedef struct fcl_device_info {
    char platform_name[256];
    char name[256];
    char vendor[256];
    char driver_version[128];
    char device_version[128];
    char opencl_c_version[128];
    cl_device_type type;
    cl_uint vendor_id;
    cl_uint compute_units;
    size_t max_work_group_size;
    cl_ulong local_mem_size;
    int local_mem_is_global; /* CL_GLOBAL: "local" memory emulated in ordinary memory (CPUs) */
    cl_ulong global_mem_size;
    cl_ulong max_alloc_size;
    cl_uint preferred_vector_width_float;
    int has_fp16;
    int has_fp64;
    /* Per-kernel limits, queried after the build (minimum over the softmax kernels). Kernels
     * are built on first use: until softmax's first call (or fcl_softmax_plan) these and the
     * softmax plan below are as planned. */
    size_t kernel_work_group_size;
    cl_ulong kernel_local_mem_size; /* static local memory of the fused softmax kernel */
    /* Plan derived from the above. */
    size_t softmax_work_group_size;  /* work-items per row (or row slice) */
    size_t softmax_vector_width;     /* consecutive elements each work-item takes at once */
    size_t softmax_fused_max_cols;   /* longest row FUSED can hold on chip */
    /* FUSED holds rows of up to softmax_block_cols elements in registers, softmax_block_items
     * per work-item, with at least softmax_block_min_lanes work-items per row and several
     * short rows per work-group; longer rows in local memory. 0: local memory only. */
    size_t softmax_block_cols, softmax_block_items, softmax_block_min_lanes;
    /* 1: ONLINE runs one work-item per row, without barriers, and AUTO prefers it to FUSED.
     * The default where local memory is of type CL_GLOBAL (CPUs): there it is ordinary
     * memory, so holding a row in it saves nothing over re-reading the row from the cache,
     * while barriers are costly. */
    int softmax_rows_per_item;
    /* 1: attention runs a block of queries per work-item, without barriers (the same
     * devices), instead of the tiles below. */
    int attention_rows_per_item;
    /* Attention tiles per head-dim bucket (head_dim and head_dim_v up to 64, 128, 256, 576):
     * block_q x block_kv scores a work-group of work_group_size work-items (64, or 32 or 16
     * where the driver allows fewer). block_q 0 where no tile fits the device (rows_because
     * says which limit: local memory, work-group size or registers) or where the device
     * prefers it: that bucket then runs a block of rows_block_q query rows per work-item
     * (FCL_ATTENTION_PATH_ROWS; the query heads of a GQA group share it), which needs no
     * local memory and groups of one.
     * Kernels are built on first use (a call or fcl_attention_plan): until a bucket's first
     * tile kernel is, its entry is the plan, with local_mem_size 0; after, what that kernel
     * fits (a smaller tile where it did not). A call whose feature set's tile kernel does not
     * fit that tile runs the rows kernel; one whose decode kernel does not fit, the tile. */
    struct fcl_attention_tile {
        size_t max_head_dim, block_q, block_kv, work_group_size;
        size_t rows_block_q;     /* the rows kernel's query rows per work-item (16) */
        cl_ulong local_mem_size; /* what the compiled kernel uses */
        /* len_q up to 4 (decoding): one query per work-group, decode_block_kv keys per
         * step; 0 where that kernel is not built (CPUs: the query blocks above serve). */
        size_t decode_block_kv;
        char rows_because[128];
    } attention_tiles[4];
    char tuning[96];                 /* where the parameters came from: the device table's
                                        entry, then "+ tuned" (stored by fcl_tuning_store),
                                        "+ FLASHCL_TUNE" or "+ options.tuning" */
    int program_from_cache;          /* 1 when every program built so far came from the
                                        on-disk cache (0 before the first) */
    /* 0 where flashcl does not use its program cache because the driver cannot be asked for
     * program binaries safely (POCL 4 and later abort in clGetProgramInfo(BINARIES) for
     * flashcl's program; POCL keeps its own cache of compiled programs). */
    int program_cache_usable;
    /* The most loop iterations the driver lets one work-item make in all, where it stops
     * them early (Mesa's llvmpipe: 65535), measured at context creation by a counting
     * kernel; 0 where no limit showed. The planner keeps every work-item's loops within it. */
    cl_uint loop_iteration_cap;
    /* How the driver counts a kernel's local memory (CL_KERNEL_LOCAL_MEM_SIZE), measured at
     * context creation on two probe kernels: local_mem_scale bytes per byte the kernel
     * declares (Mesa's rusticl 22.3: 2; 1 elsewhere) plus local_mem_reserved bytes for every
     * kernel (NVIDIA's driver: 4). Tiles are planned so that the built kernels fit as counted. */
    cl_uint local_mem_scale;
    cl_ulong local_mem_reserved;
    /* NVIDIA: the compute capability as major * 10 + minor (90 on the H100); 0 elsewhere. */
    cl_uint nv_compute_capability;
    /* 1: NVIDIA's kernels run the calls they take (compute capability 8.0 or later, the
     * kernels built and their self-check passed): f16 and bf16 prefill on the tensor cores
     * (FCL_ATTENTION_PATH_MMA), decoding by warp shuffles (FCL_ATTENTION_PATH_DECODE_NV) and
     * softmax by warp shuffles (softmax_nv_cols); 0, with the reason in attention_mma_because,
     * elsewhere. The other NVIDIA kernels are built on first use: where one does not build or
     * fit, its calls run the portable kernels and attention_mma_because says so
     * (attention_mma stays 1). */
    int attention_mma;
    char attention_mma_because[160];
    /* With NVIDIA's kernels (attention_mma), softmax on rows whose cols, in_stride and
     * out_stride are multiples of 16 bytes (4 float32 or 8 16-bit elements) runs on NVIDIA's
     * kernels: FUSED in registers for rows of up to softmax_nv_cols elements (also longer than
     * softmax_fused_max_cols), ONLINE and SPLIT beyond, all with 16-byte loads and warp-shuffle
     * reductions. 0 where not used (FLASHCL_TUNE=softmax_nv=0 switches it off). */
    size_t softmax_nv_cols;
} fcl_device_info;

FCL_API fcl_status fcl_context_create(const fcl_context_options *opts, fcl_context **out);
/* Uses the caller's OpenCL objects; retains them and releases only its own references.
 * q may be NULL (flashcl then creates an in-order queue on c and d). Calls that take
 * cl_mem arguments enqueue on the context's queue; their kernels are chained by events, so
 * an out-of-order queue works too: wait on the returned event. */
FCL_API fcl_status fcl_context_create_from_cl(cl_context c, cl_device_id d, cl_command_queue q,
                                      const fcl_context_options *opts, fcl_context **out);
FCL_API void fcl_context_destroy(fcl_context *ctx); /* NULL is a no-op */
FCL_API fcl_status fcl_context_device_info(const fcl_context *ctx, fcl_device_info *out);
/* The context's OpenCL objects, to create buffers and wait on events (borrowed: valid
 * while ctx lives; retain them to keep them longer). Any out pointer may be NULL. */
FCL_API fcl_status fcl_context_get_cl(const fcl_context *ctx, cl_context *c, cl_device_id *d,
                                      cl_command_queue *q);
/* The last failure on ctx as a sentence ("" when none), in a buffer of the calling thread
 * that stays valid until its next call of this function. With ctx == NULL: the last failed
 * fcl_context_create* on the calling thread (its build log, for example). */
FCL_API const char *fcl_context_last_error(const fcl_context *ctx);
FCL_API const char *fcl_status_string(fcl_status s);
FCL_API const char *fcl_version_string(void);

/* Tuning ("key=value,...", as FLASHCL_TUNE) becomes the parameters later contexts on this
 * device and driver start from (options.tuning NULL), kept in the context's cache directory
 * beside the program binaries; NULL or "" removes them. What flashcl-tune does with the
 * fastest parameters it measured. This context's own parameters do not change. An entry
 * that is corrupt or was stored for another device, driver or flashcl version is ignored.
 * FCL_ERROR_INVALID_ARGUMENT for an override not understood; FCL_ERROR_UNSUPPORTED where the
 * context has no cache directory or it cannot be written. */
FCL_API fcl_status fcl_tuning_store(fcl_context *ctx, const char *tuning);
/* The i-th value (from 0) worth trying for a tuning key, as text into buf (cap bytes):
 * 1 where there is one, 0 past the last value or for a key not known. For tuners. */
FCL_API int fcl_tuning_value(const char *key, int i, char *buf, size_t cap);

/* ---- Softmax over the last axis of a rows x cols matrix ---- */
typedef enum fcl_softmax_algo {
    FCL_SOFTMAX_AUTO = 0,
    FCL_SOFTMAX_FUSED = 1,  /* the row is held on chip (registers or local memory): read once */
    FCL_SOFTMAX_ONLINE = 2, /* two streaming passes with running (max, sum) */
    FCL_SOFTMAX_SPLIT = 3   /* a row is cut across work-groups, partial (max, sum) merged */
} fcl_softmax_algo;

typedef struct fcl_softmax_desc {
    size_t rows, cols;
    size_t in_stride, out_stride; /* elements between row starts; 0 = cols */
    fcl_dtype dtype;              /* storage type of in and out */
    float scale;                  /* 0 = 1 */
    int log;                      /* nonzero: log-softmax */
    size_t mask_stride;           /* additive mask row stride; 0 = one shared row (see mask_rows) */
    fcl_softmax_algo algo;

    /* ---- v0.2: ggml's soft_max_ext (all zero: as above) ---- */
    /* Row r belongs to head h(r) = (r / head_rows) % heads; both 0: no heads. The sinks and
     * alibi_slopes buffers (float32 [heads]) need heads. */
    size_t heads, head_rows;
    /* Row r adds mask row r % mask_rows (mask_stride apart; 0 = cols), so one [head_rows]
     * mask serves every head and batch. 0: as in v0 (row r with a mask_stride, else row 0). */
    size_t mask_rows;
    fcl_dtype mask_dtype; /* FCL_DTYPE_F32 (as in v0) or FCL_DTYPE_F16 (ggml's masks) */
    /* With alibi_slopes: s = scale * x + slope(h(r)) * mask (ggml's max_bias convention; a
     * -inf mask entry still hides its element whatever the slope). */
    int alibi_from_mask;
} fcl_softmax_desc;

/* AUTO: FUSED when the row fits on chip (fcl_device_info.softmax_fused_max_cols: registers for
 * short rows on GPUs, else local memory; on NVIDIA also softmax_nv_cols), SPLIT when there are
 * too few rows to fill the device, else ONLINE. Where the device's local memory is of type
 * CL_GLOBAL (CPU drivers: it is ordinary memory) FUSED is not chosen by AUTO (see
 * fcl_device_info.softmax_rows_per_item); forcing it still works.
 * With s = scale*x + mask: out = exp(s - m)/d per row (log: s - m - log d), lse = m + log d.
 * A row whose s are all -inf gives out = 0 (log: -inf) and lse = -inf. A NaN in a row, or a
 * +inf (whose share is undefined, as in IEEE arithmetic), makes that row NaN, and no other.
 * in == out is allowed when in_stride == out_stride. mask and lse may be NULL. */
FCL_API fcl_status fcl_softmax(fcl_context *ctx, const fcl_softmax_desc *d, cl_mem in, cl_mem mask,
                       cl_mem out, cl_mem lse, cl_uint n_wait, const cl_event *wait,
                       cl_event *done);
/* Blocking, on host memory; allocates nothing it does not free but the context's scratch
 * memory (SPLIT's partial statistics, kept for later calls). Padding between rows of out
 * (out_stride > cols) is left as it was. */
FCL_API fcl_status fcl_softmax_host(fcl_context *ctx, const fcl_softmax_desc *d, const void *in,
                            const float *mask, void *out, float *lse);
/* The v0.2 buffers; NULL where absent. sinks float32 [heads]: one extra logit per head in
 * the denominator: out = exp(s - m) / (exp(sink - m) + sum_j exp(s_j - m)) with
 * m = max(sink, max_j s_j), lse includes the sink, log-softmax is s - lse; a row whose s are
 * all -inf gives 0 (log: -inf) and lse = sink. alibi_slopes float32 [heads] (with
 * alibi_from_mask; fcl_alibi_slopes gives the standard ones). mask is float32 or float16
 * (mask_dtype). */
typedef struct fcl_softmax_io {
    cl_mem in, mask, out, lse, sinks, alibi_slopes;
} fcl_softmax_io;
typedef struct fcl_softmax_host_io {
    const void *in, *mask;
    void *out;
    float *lse;
    const float *sinks, *alibi_slopes;
} fcl_softmax_host_io;
/* fcl_softmax and fcl_softmax_host are these calls without sinks and slopes. */
FCL_API fcl_status fcl_softmax_run(fcl_context *ctx, const fcl_softmax_desc *d,
                                   const fcl_softmax_io *io, cl_uint n_wait, const cl_event *wait,
                                   cl_event *done);
FCL_API fcl_status fcl_softmax_run_host(fcl_context *ctx, const fcl_softmax_desc *d,
                                        const fcl_softmax_host_io *io); /* blocking */
/* The algorithm fcl_softmax would run for d, without running it (building the softmax
 * kernels where no call has yet: kernels are built on first use). */
FCL_API fcl_status fcl_softmax_plan(fcl_context *ctx, const fcl_softmax_desc *d, fcl_softmax_algo *algo);
FCL_API const char *fcl_softmax_algo_name(fcl_softmax_algo a);

/* ---- Single-pass attention ---- */
typedef enum fcl_causal {
    FCL_CAUSAL_NONE = 0,
    FCL_CAUSAL_TOP_LEFT = 1,    /* key j visible to query i iff j <= i */
    FCL_CAUSAL_BOTTOM_RIGHT = 2 /* iff j <= i + len_kv - len_q (queries are the last tokens) */
} fcl_causal;

typedef enum fcl_mask_type {
    FCL_MASK_NONE = 0,
    FCL_MASK_ADD_F32 = 1, /* float32, added to the scaled scores (-inf hides a key) */
    FCL_MASK_BOOL_U8 = 2, /* uint8, nonzero = may attend */
    FCL_MASK_ADD_F16 = 3  /* float16 (IEEE binary16), added like FCL_MASK_ADD_F32 (ggml's masks) */
} fcl_mask_type;

typedef enum fcl_layout {
    FCL_LAYOUT_BHLD = 0, /* [batch][head][token][dim], contiguous */
    FCL_LAYOUT_BLHD = 1  /* [batch][token][head][dim], contiguous */
} fcl_layout;

/* Where a tensor's elements are: element (b, h, t, d) at
 *   offset + b * batch_stride + h * head_stride + t * token_stride + d   (elements; d contiguous).
 * All three strides 0: contiguous in the descriptor's layout (for packed varlen tensors,
 * [total][heads][dim]), keeping offset. q, k and v may so be slices of one QKV buffer, K and V
 * share one cache buffer, V be the first head_dim_v dims of K's rows (MLA), and out be written
 * into a wider tensor. For a paged K/V cache, batch_stride steps from page to page and t is
 * the slot in the page; for packed (cu_seqlens) tensors batch_stride is ignored. */
typedef struct fcl_tensor_view {
    size_t offset;
    size_t batch_stride, head_stride, token_stride;
} fcl_tensor_view;

#define FCL_WINDOW_UNBOUNDED SIZE_MAX

/* The arithmetic of q.k and p.v for float32 storage. FCL_PRECISION_F32 (the default): float32
 * accuracy everywhere (NMSE within 1e-8 of a float64 reference); on NVIDIA's tensor cores by
 * 3xTF32, each float32 split into two TF32 parts and three products, where an infinite
 * element of q, k or v makes the scores or outputs it enters NaN (float32: +-inf).
 * FCL_PRECISION_TF32: where the tensor cores run the call, one product of TF32 values
 * (float32 cut to 10 mantissa bits, as float16's: NMSE about 3e-6 on unit-variance inputs),
 * 1.6-1.9x as fast on the H100; elsewhere float32 as above. Half storage types ignore it. */
typedef enum fcl_precision {
    FCL_PRECISION_F32 = 0,
    FCL_PRECISION_TF32 = 1
} fcl_precision;

/* ---- v0.3: K and V in fewer bits (quantized and 8-bit caches) ---- */
/* How K's (or V's) values are stored, each tensor on its own. A ggml block holds 32
 * consecutive values of one row (token, head) along head_dim, byte for byte as ggml stores
 * it (d, m little-endian binary16); value i of a block, j = i mod 16, n its code:
 *   q8_0: d * qs[i];  q4_0: d * (n - 8), n = qs[j] & 15 for i < 16, qs[j] >> 4 for i >= 16;
 *   q4_1: d * n + m;  iq4_nl: d * T[n], T = {-127,-104,-83,-65,-49,-35,-22,-10,1,13,25,38,
 *   53,69,89,113};  q5_0 / q5_1: as q4_0 / q4_1 with n |= ((h >> i) & 1) << 4 (h the
 *   little-endian uint32 of qh) and -16 for -8.
 * A row of a block format is head_dim / 32 blocks: head_dim (and head_dim_v) must be
 * multiples of 32. fp8 and int8 take a byte a value. */
typedef enum fcl_kv_format {
    FCL_KV_FORMAT_DTYPE = 0, /* dtype_kv, as in v0.2 */
    FCL_KV_F32 = 1,
    FCL_KV_F16 = 2,
    FCL_KV_BF16 = 3,
    FCL_KV_Q8_0 = 4,      /* ggml block_q8_0:   half d; int8 qs[32]            34 bytes */
    FCL_KV_Q4_0 = 5,      /* ggml block_q4_0:   half d; uint8 qs[16]           18 bytes */
    FCL_KV_Q4_1 = 6,      /* ggml block_q4_1:   half d, m; uint8 qs[16]        20 bytes */
    FCL_KV_Q5_0 = 7,      /* ggml block_q5_0:   half d; uint8 qh[4], qs[16]    22 bytes */
    FCL_KV_Q5_1 = 8,      /* ggml block_q5_1:   half d, m; uint8 qh[4], qs[16] 24 bytes */
    FCL_KV_IQ4_NL = 9,    /* ggml block_iq4_nl: half d; uint8 qs[16]           18 bytes */
    FCL_KV_FP8_E4M3 = 10, /* OCP E4M3FN: bias 7, no infinities, S.1111.111 is NaN, max 448 */
    FCL_KV_FP8_E5M2 = 11, /* OCP E5M2: bias 15, infinities and NaNs as IEEE, max 57344 */
    FCL_KV_INT8 = 12      /* int8, x = q (times the scale) */
} fcl_kv_format;

/* The factor K's (or V's) decoded values take: attention uses exactly decode(bits) * scale. */
typedef enum fcl_kv_scale {
    FCL_KV_SCALE_NONE = 0,   /* as decoded (ggml's blocks carry their own d) */
    FCL_KV_SCALE_TENSOR = 1, /* one float: k_scale / v_scale in the descriptor (vLLM) */
    FCL_KV_SCALE_HEAD = 2,   /* float32 [batch][heads_kv]: scales[b * batch_stride + h], batch
                                stride 0: one row for every sequence (FlashAttention-3) */
    FCL_KV_SCALE_TOKEN = 3   /* float32 per (token, kv head), a tensor with its own view, paged
                                like K/V (LMDeploy's int8) */
} fcl_kv_scale;

typedef struct fcl_attention_desc {
    size_t batch, heads_q;
    size_t heads_kv; /* 0 = heads_q; must divide heads_q (GQA, MQA) */
    size_t len_q, len_kv; /* per-sequence capacities (see seqlens_kv and cu_seqlens) */
    size_t head_dim;   /* 1..576 */
    size_t head_dim_v; /* 0 = head_dim; 1..512 */
    float scale;       /* 0 = 1/sqrt(head_dim) */
    fcl_causal causal;
    fcl_mask_type mask_type;
    /* Mask element (b, h, i, j) is at b*mask_stride_batch + h*mask_stride_head +
     * i*mask_stride_q + j (elements; the key axis is contiguous). 0 = broadcast over that
     * axis; a nonzero mask_stride_q must be >= len_kv. */
    size_t mask_stride_batch, mask_stride_head, mask_stride_q;
    fcl_layout layout;                  /* default strides of q, k, v and out */
    fcl_dtype dtype_q, dtype_kv, dtype_o; /* storage types; arithmetic is float32 */
    /* Key splits (split-KV, flash-decoding): 0 = AUTO (split when the query tiles alone
     * cannot fill the device), 1 = never, N = N splits (at most one per key tile, <= 256).
     * Where the driver caps a work-item's loop iterations (loop_iteration_cap), more splits
     * than asked where a split would need more than the cap. */
    size_t kv_splits;

    /* ---- v0.2: an inference engine's own buffers (all zero: as above) ---- */
    fcl_tensor_view q_view, k_view, v_view, o_view;
    /* Paged K/V: page_size > 0 keys per page; key j of sequence b is in page
     * block_table[b * block_table_stride + j / page_size], slot j % page_size; the k and v
     * buffers hold num_pages pages; block_table_stride >= ceil(len_kv / page_size). */
    size_t page_size, num_pages, block_table_stride;
    float softcap; /* 0 = none; else s = softcap * tanh(scale * q.k / softcap) */
    /* ALiBi (with io.alibi_slopes): slope(b, h) = alibi_slopes[b * alibi_slopes_batch_stride
     * + h]; s -= slope * |p(i) - j|, or with alibi_from_mask s += slope * mask (ggml's
     * max_bias convention; a -inf mask entry still hides its key). */
    size_t alibi_slopes_batch_stride;
    int alibi_from_mask;
    /* Sliding window (window nonzero): key j visible only if
     * p(i) - window_left <= j <= p(i) + window_right, p(i) = i + L_kv(b) - L_q(b)
     * (bottom-right aligned, FlashAttention-2's window_size; FCL_WINDOW_UNBOUNDED: no limit
     * on that side; Mistral's window W is window_left = W - 1 with causal). */
    int window;
    size_t window_left, window_right;
    fcl_precision precision; /* float32 storage's arithmetic (FCL_PRECISION_F32: float32) */

    /* ---- v0.3: quantized and 8-bit K/V (all zero: as above) ---- */
    /* K's and V's formats (0: dtype_kv); q and out keep dtype_q and dtype_o, scores and
     * accumulators stay float32. For a format other than f32/f16/bf16, k_view and v_view
     * count bytes (offset and strides; ggml's nb[]) and a row's bytes are contiguous
     * (head_dim / 32 blocks, or head_dim bytes); zero strides mean contiguous rows in the
     * layout. A ggml format's offset and strides must be even. V may be a view of K's bytes
     * (MLA): its rows are then the first head_dim_v / 32 blocks (or bytes) of K's. */
    fcl_kv_format format_k, format_v;
    fcl_kv_scale scale_mode_k, scale_mode_v;
    float k_scale, v_scale; /* FCL_KV_SCALE_TENSOR (0 = 1) */
    size_t k_scales_batch_stride, v_scales_batch_stride; /* FCL_KV_SCALE_HEAD */
    /* FCL_KV_SCALE_TOKEN: scale (b, h, t) at offset + b*batch_stride + h*head_stride +
     * t*token_stride float32 elements of io.k_scales (paged: b the page and t the slot, as
     * K's rows); zero strides: [page or batch][heads_kv][tokens] (packed K/V, cu_seqlens_kv,
     * need strides). */
    fcl_tensor_view k_scales_view, v_scales_view;
} fcl_attention_desc;

/* out[b,h,i,:] = sum_j softmax_j(s_ij) v_j, with kv head h / (heads_q / heads_kv) and
 * s_ij = scale * q_i . k_j, then (v0.2, in this order) softcap, ALiBi, the mask, causality
 * and the window; lse[b,h,i] (float32, [batch][heads_q][len_q]) = log-sum-exp of the row. A
 * query with no visible key gives out = 0 and lse = -inf (the sink, with sinks). The
 * len_q x len_kv scores are never stored; extra device memory is
 * O(batch * heads_q * len_q * head_dim_v) for the split-KV partials, which the context keeps
 * for its later calls (grown as needed, freed by fcl_context_destroy). mask (NULL unless
 * mask_type is set) and lse may be NULL. */
FCL_API fcl_status fcl_attention(fcl_context *ctx, const fcl_attention_desc *d, cl_mem q, cl_mem k,
                                 cl_mem v, cl_mem mask, cl_mem out, cl_mem lse, cl_uint n_wait,
                                 const cl_event *wait, cl_event *done);
/* Blocking, on host memory. fcl_attention and fcl_attention_host are fcl_attention_run and
 * fcl_attention_run_host without the v0.2 buffers. */
FCL_API fcl_status fcl_attention_host(fcl_context *ctx, const fcl_attention_desc *d, const void *q,
                                      const void *k, const void *v, const void *mask, void *out,
                                      float *lse);

/* The v0.2 buffers. Device buffers (fcl_attention_run); NULL where absent. Index buffers are
 * int32: seqlens_kv [batch] (L_kv(b) <= len_kv; NULL: len_kv), cu_seqlens_q and
 * cu_seqlens_kv [batch + 1] (packed varlen sequences: cu[0] = 0, non-decreasing,
 * L(b) = cu[b+1] - cu[b] <= len_q or len_kv; row cu[b] + i of the packed tensor is token i
 * of sequence b; lse is then [heads_q][total]), block_table [batch][block_table_stride]
 * (paged K/V: takes seqlens_kv, not cu_seqlens_kv). alibi_slopes float32 [heads_q] (or
 * [batch][alibi_slopes_batch_stride]), sinks float32 [heads_q]: one extra logit per head in
 * the softmax denominator (out = sum_j e^(s_j - m) v_j / (e^(sink - m) + sum_j e^(s_j - m));
 * lse includes it; a row with no visible key gives 0 and lse = sink). leftpad_kv int32
 * [batch] (K/V neither paged nor packed; FlashAttention-2's leftpad_k, for left-padded
 * batches): sequence b's keys are rows leftpad_kv[b] to L_kv(b) - 1 of its K and V
 * (0 <= leftpad_kv[b] <= L_kv(b)); the rows before are hidden and key j is row
 * leftpad_kv[b] + j for everything else: L_kv(b) - leftpad_kv[b] keys for causality, the
 * window, ALiBi and p(i), the mask's column j, TOKEN scales. query_offsets int32 [batch]
 * (keys and queries that are parts of longer sequences: a shard of the keys, a block of a
 * ring): query i of sequence b is at p(i) = i + query_offsets[b] among its keys, instead of
 * i + L_kv(b) - L_q(b), for causality (either mode: key j visible where j <= p(i)), the
 * window and ALiBi (|p(i) - j| below 2^31 with ALiBi). */
typedef struct fcl_attention_io {
    cl_mem q, k, v, mask, out, lse;
    cl_mem seqlens_kv, cu_seqlens_q, cu_seqlens_kv, block_table;
    cl_mem alibi_slopes, sinks;
    cl_mem k_scales, v_scales; /* v0.3: float32, as scale_mode_k / _v need (else NULL) */
    cl_mem leftpad_kv, query_offsets;
} fcl_attention_io;

/* The same in host memory (fcl_attention_run_host, blocking): each buffer's extent is what its
 * view, the lengths and the pages reach; out's elements outside its view are left as they
 * were. */
typedef struct fcl_attention_host_io {
    const void *q, *k, *v, *mask;
    void *out;
    float *lse;
    const int32_t *seqlens_kv, *cu_seqlens_q, *cu_seqlens_kv, *block_table;
    const float *alibi_slopes, *sinks;
    const float *k_scales, *v_scales; /* v0.3 */
    const int32_t *leftpad_kv, *query_offsets;
} fcl_attention_host_io;

/* Attention with every v0.2 feature. The host call validates every index (lengths within
 * the capacities, cu_seqlens from 0 and non-decreasing, pages within num_pages for the keys
 * the lengths reach) and names the first bad one. The device call cannot read its index
 * buffers first: its kernels clamp them, so a bad index never reads or writes outside a
 * buffer (that sequence's results are then unspecified; the others are unaffected). */
FCL_API fcl_status fcl_attention_run(fcl_context *ctx, const fcl_attention_desc *d,
                                     const fcl_attention_io *io, cl_uint n_wait,
                                     const cl_event *wait, cl_event *done);
FCL_API fcl_status fcl_attention_run_host(fcl_context *ctx, const fcl_attention_desc *d,
                                          const fcl_attention_host_io *io);

/* The standard ALiBi slopes for heads heads with ggml's max_bias (8 in BLOOM and MPT):
 * n = 2^floor(log2(heads)), m0 = 2^(-max_bias / n), m1 = 2^(-max_bias / 2 / n),
 * slope(h) = m0^(h+1) for h < n, else m1^(2(h-n)+1). */
FCL_API fcl_status fcl_alibi_slopes(size_t heads, float max_bias, float *slopes);

/* Merges partial attention results over disjoint sets of keys (other devices, a shared
 * prefix, split-KV): parts are float32 outs[p] [rows][head_dim_v] with lses[p] [rows];
 * out = sum_p e^(lse_p - lse) out_p, lse = logsumexp_p lse_p. Parts with lse -inf add
 * nothing; all -inf gives 0 and -inf. out may be one part's out and lse one part's lse (the
 * same part or two; not a part's other kind of buffer); lse may be NULL. */
FCL_API fcl_status fcl_attention_merge(fcl_context *ctx, size_t n_parts, size_t rows,
                                       size_t head_dim_v, const cl_mem *outs, const cl_mem *lses,
                                       cl_mem out, cl_mem lse, cl_uint n_wait,
                                       const cl_event *wait, cl_event *done);

/* ---- v0.3: writing new tokens into a K/V cache of any format ---- */
typedef struct fcl_kv_write_desc {
    size_t tokens, heads_kv, head_dim, head_dim_v; /* head_dim_v 0 = head_dim */
    fcl_dtype dtype_in;                   /* of the new k and v: f32, f16 or bf16 */
    fcl_tensor_view k_in_view, v_in_view; /* element (0, h, t, d); zero strides:
                                             [tokens][heads_kv][dim] */
    size_t page_size;                     /* keys per page; for a contiguous cache: its capacity */
    size_t num_pages;                     /* pages (or sequences) the cache holds */
    /* The cache, as fcl_attention_desc describes it (format 0: dtype_in's) */
    fcl_kv_format format_k, format_v;
    fcl_kv_scale scale_mode_k, scale_mode_v;
    float k_scale, v_scale;
    size_t k_scales_batch_stride, v_scales_batch_stride; /* 0: HEAD scales are one row */
    fcl_tensor_view k_view, v_view, k_scales_view, v_scales_view;
    fcl_layout layout; /* the cache's default strides */
} fcl_kv_write_desc;
typedef struct fcl_kv_write_io {
    cl_mem k_in, v_in, slots;        /* slots: int32 [tokens] */
    cl_mem k, v, k_scales, v_scales; /* the cache; scales as the modes need (else NULL) */
} fcl_kv_write_io;
typedef struct fcl_kv_write_host_io {
    const void *k_in, *v_in;
    const int32_t *slots;
    void *k, *v; /* may be the same pointer (K and V views of one cache), not otherwise overlap */
    float *k_scales, *v_scales;
} fcl_kv_write_host_io;
/* Token t's K and V rows go to slot s = slots[t] (vLLM's slot_mapping): page s / page_size,
 * position s % page_size; a negative slot skips the token. The values are encoded from
 * y = x (FCL_KV_SCALE_NONE) or x / scale (TENSOR, HEAD: HEAD's [heads_kv] row; float32,
 * correctly rounded): float formats round to nearest even; q8_0, q4_0, q4_1, q5_0 and q5_1
 * give exactly the bytes of ggml's reference quantizers (quantize_row_*_ref); fp8 rounds to
 * nearest even and saturates to its largest finite value (infinities too), NaN stays a NaN
 * code; int8 rounds half to even and clamps to [-127, 127]. With FCL_KV_SCALE_TOKEN (fp8 and
 * int8) each row's scale is first set to amax / 127 (int8), amax / 448 (e4m3) or
 * amax / 57344 (e5m2), a row of zeros to 0 with zero codes. iq4_nl, and ggml and float
 * formats with TOKEN scales, are FCL_ERROR_UNSUPPORTED. Nothing but the written rows and
 * their scales changes. The host call validates every slot (< num_pages * page_size) and
 * names the first bad one, writing nothing; the device call skips an out-of-range slot. */
FCL_API fcl_status fcl_kv_write(fcl_context *ctx, const fcl_kv_write_desc *d,
                                const fcl_kv_write_io *io, cl_uint n_wait, const cl_event *wait,
                                cl_event *done);
FCL_API fcl_status fcl_kv_write_host(fcl_context *ctx, const fcl_kv_write_desc *d,
                                     const fcl_kv_write_host_io *io); /* blocking */

/* Which kernel family runs a descriptor. */
typedef enum fcl_attention_path {
    FCL_ATTENTION_PATH_TILE = 0,   /* query tiles in local memory (GPUs) */
    FCL_ATTENTION_PATH_DECODE = 1, /* one query per work-group (len_q <= 4 on GPUs) */
    FCL_ATTENTION_PATH_ROWS = 2,   /* a block of queries per work-item (CPUs, and any device
                                      whose local memory holds no tile for the head dims) */
    FCL_ATTENTION_PATH_MMA = 3,    /* NVIDIA tensor cores (fcl_device_info.attention_mma): q,
                                      k and v of one storage type (float32 by 3xTF32, or TF32
                                      with FCL_PRECISION_TF32), head dims up to 256
                                      (float32: 128) and multiples of 8, every row of q,
                                      k and v starting at a multiple of 8 elements, len_q
                                      above 4; or len_q 1 with GQA groups of 2
                                      or more heads, taken as rows of their kv head (no
                                      top-left causality, window, ALiBi, mask, sinks or
                                      packed queries) */
    FCL_ATTENTION_PATH_DECODE_NV = 4 /* NVIDIA decode by warp shuffles (with attention_mma):
                                        len_q up to 4, heads_q / heads_kv odd (1: no GQA), any
                                        storage types, head dims up to 256, the same
                                        rules on rows */
} fcl_attention_path;

/* How fcl_attention would run d: the kernel, its tile shape and the number of key splits.
 * Buffers that come only with the call (sinks, alibi_slopes without alibi_from_mask,
 * seqlens_kv, cu_seqlens) are taken as absent, and can change the kernel: GQA decoding with
 * packed queries (cu_seqlens_q), for one, runs FCL_ATTENTION_PATH_DECODE where the plan of d
 * says MMA.
 * Kernels are compiled (or loaded from the program cache) on first use, a few at a time;
 * planning counts as a use (it builds the kernels the call would run), so an application
 * that must not wait for a compile in its first call plans its shapes once when it loads
 * (fcl_softmax_plan likewise). */
typedef struct fcl_attention_plan_info {
    size_t block_q, block_kv; /* queries and keys per tile */
    size_t kv_splits;         /* 1: no split-KV */
    size_t work_group_size;
    fcl_attention_path path;
} fcl_attention_plan_info;
FCL_API fcl_status fcl_attention_plan(fcl_context *ctx, const fcl_attention_desc *d,
                                      fcl_attention_plan_info *info);
FCL_API const char *fcl_attention_path_name(fcl_attention_path p);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCL_H */

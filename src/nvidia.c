/* NVIDIA's fast path: its programs (cl/common_nv.cl, cl/attention_mma_nv.cl,
 * cl/attention_decode_nv.cl, cl/softmax_nv.cl, cl/mma_check_nv.cl: the same on every device
 * of compute capability 8.0 or later), their build on first use, the self-check run at
 * context creation, and its kernels, behind the fast-path interface (fcl_fast_path in
 * internal.h). Programs of their own, so that a driver which cannot build or run them leaves
 * the portable kernels as they are. Where they run is the planner's (plan.c: fcl_plan_mma,
 * fcl_plan_attention_mma, the softmax plan). */
#include "internal.h"
#include <CL/cl_ext.h> /* CL_DEVICE_REGISTERS_PER_BLOCK_NV */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generated at build time from the cl/ kernel files (cmake/embed_cl.cmake). */
extern const char fcl_cl_kv_formats[];
extern const char fcl_cl_common[];
extern const char fcl_cl_softmax_args[];
extern const char fcl_cl_softmax_common[];
extern const char fcl_cl_attention_args[];
extern const char fcl_cl_attention_common[];
extern const char fcl_cl_attention_mma_nv[];
extern const char fcl_cl_mma_check_nv[];
extern const char fcl_cl_attention_decode_nv[];
extern const char fcl_cl_attention_decode_kv_nv[];
extern const char fcl_cl_common_nv[];
extern const char fcl_cl_softmax_nv[];

/* The kernel name of a build of attention_mma_nv.cl (add_mma_build's arguments) into name. */
static void mma_kernel_name(char *name, size_t cap, int bucket, int kind, int gqa_rows, int kv,
                            int fixed)
{
    snprintf(name, cap, "attention_mma%s_d%zu_%s%s%s%s", gqa_rows ? "_rows" : "",
             fcl_attention_bucket_dim(bucket), fcl_mma_kind_names[kind], kv ? "_kv" : "",
             fixed ? "_" : "", fixed ? fcl_format(fcl_mma_fixed_formats[fixed - 1])->name : "");
}

/* One build of attention_mma_nv.cl: its bucket, product kind and shape, whether it takes
 * K/V formats (kv: the _kv kernels) and, for a prefill build, which one for K and V both
 * (fixed: 1 + its index in fcl_mma_fixed_formats; 0: any, read at run time). The products'
 * PTX type is tf32 for float32 storage, f16 for float32 q over f16 K and V, else the kind's
 * name (f16, bf16). */
static void add_mma_build(fcl_text *t, int bucket, int kind, int gqa_rows, int kv, int fixed)
{
    const int f32 = fcl_mma_kind_f32(kind);
    const fcl_mma_shape sh = fcl_plan_mma_shape(bucket, kind, gqa_rows, kv);
    const int q32 = kind == FCL_MMA_F16_Q32;
    const int format = fixed ? (int)fcl_mma_fixed_formats[fixed - 1] : 0;
    char name[48];
    mma_kernel_name(name, sizeof name, bucket, kind, gqa_rows, kv, fixed);
    fcl_text_add(t, "#define FA_NAME %s\n#define FA_D %zu\n#define FA_MMA_T %s\n"
                    "#define FA_MMA_F32 %d\n#define FA_MMA_SPLIT %d\n#define FA_MMA_Q32 %d\n"
                    "#define FA_MMA_WARPS %zu\n"
                    "#define FA_MMA_KWARPS %zu\n#define FA_MMA_MT %zu\n#define FA_MMA_BK %zu\n"
                    "#define FA_MMA_L2_LINES %d\n#define FA_FEATURES 0x%xu\n"
                    "#define FA_MMA_FORMAT_K %d\n#define FA_MMA_FORMAT_V %d\n"
                    "#line 1 \"attention_mma_nv.cl\"\n%s\n#undef FA_NAME\n#undef FA_D\n"
                    "#undef FA_MMA_T\n#undef FA_MMA_F32\n#undef FA_MMA_SPLIT\n#undef FA_MMA_Q32\n"
                    "#undef FA_MMA_WARPS\n"
                    "#undef FA_MMA_KWARPS\n#undef FA_MMA_MT\n#undef FA_MMA_BK\n#undef FA_MMA_L2_LINES\n"
                    "#undef FA_FEATURES\n"
                    "#undef FA_MMA_FORMAT_K\n#undef FA_MMA_FORMAT_V\n",
                 name + strlen("attention_"), fcl_attention_bucket_dim(bucket),
                 f32 ? "tf32" : q32 ? "f16" : fcl_mma_kind_names[kind], f32, kind == FCL_MMA_F32, q32,
                 sh.warps,
                 sh.key_warps, sh.row_tiles, sh.block_kv, sh.l2_lines,
                 FA_WITH_HEAD_ROWS(kv ? FA_FEATURES_KV : FA_FEATURES_ALL),
                 format, format, fcl_cl_attention_mma_nv);
}

/* The 8-bit K/V decode kernel's name: bucket b's, for float32 q (q32) or f16 q, for K and V in
 * any format read at run time (fixed 0) or in fcl_mma_fixed_formats[fixed - 1], the staged
 * build or (direct) the direct one. */
static void kv_decode_kernel_name(char *name, size_t cap, int b, int q32, int fixed, int direct)
{
    snprintf(name, cap, "attention_kvdec%s_d%zu%s%s%s", q32 ? "_q32" : "",
             fcl_attention_bucket_dim(b), fixed ? "_" : "",
             fixed ? fcl_format(fcl_mma_fixed_formats[fixed - 1])->name : "",
             direct ? "_direct" : "");
}

/* One build of attention_decode_kv_nv.cl (kv_decode_kernel_name's), whose registers are
 * capped at register_cap where it is not 0 (FA_KVD_REGISTER_CAP). */
static void add_kv_decode_build(fcl_text *t, int b, int q32, int fixed, unsigned register_cap)
{
    char name[48];
    kv_decode_kernel_name(name, sizeof name, b, q32, fixed, 0);
    fcl_text_add(t, "#define FA_NAME %s\n#define FA_D %zu\n#define FA_FEATURES 0x%xu\n"
                    "#define FA_KVD_Q32 %d\n#define FA_KVD_FORMAT %d\n#define FA_KVD_REGISTER_CAP %u\n"
                    "#line 1 \"attention_decode_kv_nv.cl\"\n%s\n"
                    "#undef FA_NAME\n#undef FA_D\n#undef FA_FEATURES\n#undef FA_KVD_REGISTER_CAP\n",
                 name + strlen("attention_"), fcl_attention_bucket_dim(b), FA_FEATURES_KV_DECODE, q32,
                 fixed ? (int)fcl_mma_fixed_formats[fixed - 1] : 0, register_cap,
                 fcl_cl_attention_decode_kv_nv);
}

/* The register cap of bucket b's 8-bit decode build (fixed as kv_decode_kernel_name's) on a
 * GPU whose work-groups may take that many registers: the builds for one format only. */
static unsigned kv_decode_register_cap(unsigned registers, int b, int fixed)
{
    return fixed ? fcl_plan_kv_decode_register_cap(registers, b) : 0;
}

/* The NVIDIA programs' parts, as the portable ones', how E4M3 codes convert in them
 * (fp8_cvt: FA_NV_FP8_CVT), and the registers a work-group of the GPU may take (registers). */
typedef struct nv_parts {
    int check, softmax, fp8_cvt;
    unsigned registers;
    unsigned mma[2][FCL_MMA_BUCKETS]; /* bit kind: the kind's prefill and GQA builds ([1]: _kv) */
    /* bit i: the kind's prefill build for K and V in fcl_mma_fixed_formats[i] */
    unsigned mma_fixed[FCL_MMA_BUCKETS][FCL_MMA_KINDS];
    unsigned decode[FCL_MMA_BUCKETS]; /* bit v: the shuffle decode kernel of feature set v */
    /* bit KV_DECODE_BIT(q32, fixed): the 8-bit K/V decode kernel's build for f16 or float32 q
     * and any format (fixed 0, with its direct build) or fcl_mma_fixed_formats[fixed - 1] */
    unsigned kv_decode[FCL_MMA_BUCKETS];
} nv_parts;
#define KV_DECODE_BIT(q32, fixed) (1u << ((FCL_MMA_FIXED + 1) * (q32) + (fixed)))

/* The parts every NVIDIA program of ctx shares (how E4M3 codes convert, the registers that
 * cap builds), to which each builder adds its kernels. */
static nv_parts context_parts(const fcl_context *ctx)
{
    return (nv_parts){.fp8_cvt = ctx->nv.fp8_cvt, .registers = ctx->nv.registers};
}

static char *mma_source(const nv_parts *p)
{
    fcl_text t = {0};
    int attention = 0;
    for (int b = 0; b < FCL_MMA_BUCKETS; b++) {
        attention |= p->mma[0][b] || p->mma[1][b] || p->decode[b] || p->kv_decode[b];
        for (int kind = 0; kind < FCL_MMA_KINDS; kind++)
            attention |= p->mma_fixed[b][kind] != 0;
    }
    fcl_text_add(&t, "/* flashcl's NVIDIA program */\n#define FA_NV_FP8_CVT %d\n"
                     "#line 1 \"kv_formats.h\"\n%s\n#line 1 \"common.cl\"\n%s\n",
                 p->fp8_cvt, fcl_cl_kv_formats, fcl_cl_common);
    fcl_text_add(&t, "#line 1 \"common_nv.cl\"\n%s\n", fcl_cl_common_nv);
    if (attention)
        fcl_text_add(&t, "#line 1 \"attention_args.h\"\n%s\n#line 1 \"attention_common.cl\"\n%s\n",
                     fcl_cl_attention_args, fcl_cl_attention_common);
    int mma_helpers = 0; /* whether a build of attention_mma_nv.cl brought its helpers in */
    for (int kv = 0; kv <= 1; kv++)
        for (int b = 0; b < FCL_MMA_BUCKETS; b++)
            for (int rows = 0; rows <= 1; rows++) /* prefill, and the GQA builds (gqa_rows) */
                for (int kind = 0; kind < FCL_MMA_KINDS; kind++)
                    if (((p->mma[kv][b] >> kind) & 1) && fcl_plan_mma_built(b, kind, rows, kv)) {
                        add_mma_build(&t, b, kind, rows, kv, 0);
                        mma_helpers = 1;
                    }
    for (int b = 0; b < FCL_MMA_BUCKETS; b++)
        for (int kind = 0; kind < FCL_MMA_KINDS; kind++)
            for (int i = 0; i < FCL_MMA_FIXED; i++)
                if ((p->mma_fixed[b][kind] >> i) & 1) {
                    add_mma_build(&t, b, kind, 0, 1, i + 1);
                    mma_helpers = 1;
                }
    for (int b = 0; b < FCL_MMA_BUCKETS; b++)
        for (int q32 = 0; q32 <= 1; q32++)
            for (int fixed = 0; fixed <= FCL_MMA_FIXED; fixed++) {
                if (!(p->kv_decode[b] & KV_DECODE_BIT(q32, fixed)))
                    continue;
                if (!mma_helpers) /* the 8-bit decode kernel uses attention_mma_nv.cl's helpers */
                    fcl_text_add(&t, "#define FA_MMA_HELPERS_ONLY 1\n"
                                     "#line 1 \"attention_mma_nv.cl\"\n%s\n#undef FA_MMA_HELPERS_ONLY\n",
                                 fcl_cl_attention_mma_nv);
                mma_helpers = 1;
                add_kv_decode_build(&t, b, q32, fixed,
                                    kv_decode_register_cap(p->registers, b, fixed));
            }
    for (int b = 0; b < FCL_MMA_BUCKETS; b++)
        for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++)
            if ((p->decode[b] >> v) & 1)
                fcl_text_add(&t, "#define FA_NAME decode_nv_d%zu%s\n#define FA_D %zu\n#define FA_FEATURES 0x%xu\n"
                                 "#line 1 \"attention_decode_nv.cl\"\n%s\n"
                                 "#undef FA_NAME\n#undef FA_D\n#undef FA_FEATURES\n",
                             fcl_attention_bucket_dim(b), fcl_attention_variant_suffix(v),
                             fcl_attention_bucket_dim(b), fcl_attention_variant_features(v),
                             fcl_cl_attention_decode_nv);
    if (p->softmax) {
        fcl_text_add(&t, "#line 1 \"softmax_args.h\"\n%s\n#line 1 \"softmax_common.cl\"\n%s\n",
                     fcl_cl_softmax_args, fcl_cl_softmax_common);
        for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++)
            for (int b = 0; b < FCL_SOFTMAX_NV_BUILDS; b++)
                if (fcl_plan_softmax_nv_vecs((fcl_dtype)dt, b))
                    fcl_text_add(&t, "#define FCL_DT %s\n#define FCL_SNV_VECS %zu\n"
                                     "#line 1 \"softmax_nv.cl\"\n%s\n#undef FCL_DT\n#undef FCL_SNV_VECS\n",
                                 fcl_dtype_suffix[dt], fcl_plan_softmax_nv_vecs((fcl_dtype)dt, b),
                                 fcl_cl_softmax_nv);
    }
    if (p->check)
        fcl_text_add(&t, "#line 1 \"mma_check_nv.cl\"\n%s\n", fcl_cl_mma_check_nv);
    if (t.failed) {
        free(t.s);
        return NULL;
    }
    return t.s;
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
    cl_kernel check = clCreateKernel(ctx->nv.check_unit.program, "fcl_mma_check", &err);
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

/* Creates one kernel of an NVIDIA program for work-groups of `group`; where it cannot run
 * them, *fits = 0 and because says why. */
static fcl_status create_nv_kernel(fcl_context *ctx, cl_program program, const char *name,
                                   cl_kernel *out, size_t group, int *fits, char *because,
                                   size_t cap)
{
    size_t wg;
    cl_ulong local;
    fcl_status s = fcl_create_fitting(ctx, program, name, out, group, fits, &wg, &local);
    if (s == FCL_SUCCESS && !*fits)
        snprintf(because, cap, "%s allows %zu work-items and uses %llu bytes of local memory; it "
                 "needs %zu and the device has %llu", name, wg, (unsigned long long)local, group,
                 (unsigned long long)ctx->info.local_mem_size);
    return s;
}

/* The registers a work-group may take (cl_nv_device_attribute_query), 0 where not reported. */
static unsigned registers_per_group(cl_device_id device)
{
    cl_uint registers = 0;
    return clGetDeviceInfo(device, CL_DEVICE_REGISTERS_PER_BLOCK_NV, sizeof registers, &registers,
                           NULL) == CL_SUCCESS
               ? registers
               : 0;
}

/* Builds NVIDIA's self-check where the planner wants NVIDIA's kernels; they are used
 * (info.attention_mma) only where it gives the host's product. Elsewhere attention_mma stays
 * 0 with the reason, and nothing fails but running out of host memory: the portable kernels
 * serve. */
static fcl_status build_mma_check(fcl_context *ctx, const fcl_tuning *tuning)
{
    char *because = ctx->info.attention_mma_because;
    const size_t cap = sizeof ctx->info.attention_mma_because;
    ctx->info.attention_mma = 0;
    ctx->info.softmax_nv_cols = 0;
    ctx->nv.kv_decode_on = tuning->attention_kv_decode;
    ctx->nv.kv_direct_on = tuning->attention_kv_direct;
    ctx->nv.merge_in_kernel_on = tuning->attention_merge_in_kernel;
    ctx->nv.kv_fixed_on = tuning->attention_kv_fixed;
    ctx->nv.fp8_cvt = fcl_plan_fp8_cvt(ctx->info.nv_compute_capability, tuning);
    ctx->nv.registers = registers_per_group(ctx->device);
    if (!fcl_plan_mma(&ctx->info, tuning, because, cap))
        return FCL_SUCCESS;
    nv_parts p = context_parts(ctx);
    p.check = 1;
    fcl_status s = fcl_build_unit(ctx, &ctx->nv.check_unit, mma_source(&p));
    if (s == FCL_ERROR_OUT_OF_HOST_MEMORY)
        return s;
    if (s != FCL_SUCCESS) {
        snprintf(because, cap, "its self-check did not build: %.100s", fcl_context_last_error(ctx));
        fcl_clear_error(ctx);
    } else if (!mma_check_passes(ctx)) {
        snprintf(because, cap, "its self-check (one mma.sync per storage type) did not give the "
                 "host's product");
    } else {
        ctx->info.attention_mma = 1;
        because[0] = '\0';
        if (tuning->softmax_nv)
            ctx->info.softmax_nv_cols = SM_NV_COLS;
    }
    fcl_release_unit(&ctx->nv.check_unit); /* its one kernel has run */
    return FCL_SUCCESS;
}

/* The end of an NVIDIA unit's build (where it failed, the caller has released its kernels):
 * built; or, out of host memory, that failure (the unit is tried again on its next use); or
 * not used (state -1), the reason (what runs which kernels instead, why) in
 * info.attention_mma_because and the failure recorded on ctx forgotten. */
static fcl_status finish_nv_unit(fcl_context *ctx, fcl_unit *u, fcl_status s, int fits,
                                 const char *what, const char *instead, const char *why)
{
    if (s == FCL_SUCCESS && fits) {
        u->state = 1;
        return s;
    }
    fcl_release_unit(u);
    if (s == FCL_ERROR_OUT_OF_HOST_MEMORY)
        return s;
    if (s != FCL_SUCCESS)
        why = fcl_context_last_error(ctx);
    snprintf(ctx->info.attention_mma_because, sizeof ctx->info.attention_mma_because,
             "%.48s runs %s: %.80s", what, instead, why);
    fcl_clear_error(ctx);
    u->state = -1;
    return FCL_SUCCESS;
}

static void release_nv_softmax(fcl_context *ctx)
{
    for (int dt = 0; dt < FCL_DTYPE_COUNT; dt++) {
        for (int b = 0; b < FCL_SOFTMAX_NV_BUILDS; b++)
            fcl_release_kernel(&ctx->nv.softmax[dt][b]);
        for (int k = 0; k < FCL_K_SOFTMAX_COUNT; k++)
            fcl_release_kernel(&ctx->nv.softmax_stream[dt][k]);
    }
}

/* NVIDIA's softmax, beside the portable kernels: where it does not build or fit,
 * softmax_nv_cols becomes 0 (the portable kernels serve). */
static fcl_status build_nv_softmax(fcl_context *ctx)
{
    fcl_unit *u = &ctx->nv.softmax_unit;
    nv_parts p = context_parts(ctx);
    p.softmax = 1;
    char why[160] = "";
    int fits = 1;
    fcl_status s = fcl_build_unit(ctx, u, mma_source(&p));
    for (int dt = 0; dt < FCL_DTYPE_COUNT && s == FCL_SUCCESS && fits; dt++)
        for (int b = 0; b < FCL_SOFTMAX_NV_BUILDS && s == FCL_SUCCESS && fits; b++) {
            const size_t vecs = fcl_plan_softmax_nv_vecs((fcl_dtype)dt, b);
            char name[32];
            snprintf(name, sizeof name, "softmax_nv%zu_%s", vecs, fcl_dtype_suffix[dt]);
            if (vecs)
                s = create_nv_kernel(ctx, u->program, name, &ctx->nv.softmax[dt][b], SM_NV_LWS,
                                     &fits, why, sizeof why);
        }
    const int streaming[] = {FCL_K_SOFTMAX_ONLINE, FCL_K_SOFTMAX_SPLIT_STATS,
                             FCL_K_SOFTMAX_SPLIT_WRITE};
    for (int dt = 0; dt < FCL_DTYPE_COUNT && s == FCL_SUCCESS && fits; dt++)
        for (int i = 0; i < 3 && s == FCL_SUCCESS && fits; i++) {
            char name[48];
            /* "softmax_nv_" and the portable kernel's name past "softmax_" */
            snprintf(name, sizeof name, "softmax_nv_%s_%s", fcl_softmax_kernel_names[streaming[i]] + 8,
                     fcl_dtype_suffix[dt]);
            s = create_nv_kernel(ctx, u->program, name, &ctx->nv.softmax_stream[dt][streaming[i]],
                                 SM_NV_LWS, &fits, why, sizeof why);
        }
    if (s != FCL_SUCCESS || !fits)
        release_nv_softmax(ctx);
    s = finish_nv_unit(ctx, u, s, fits, "softmax", "the portable kernels", why);
    if (u->state < 0)
        ctx->info.softmax_nv_cols = 0;
    return s;
}

/* Bucket b's tensor-core kernels of one kind (prefill, and the GQA build where there is
 * one), of v0.2's features or (kv) K/V formats; state -1 where they do not build or fit. */
static fcl_status build_mma(fcl_context *ctx, int b, int kind, int kv)
{
    fcl_unit *u = &ctx->nv.mma_unit[kv][b][kind];
    nv_parts p = context_parts(ctx);
    p.mma[kv][b] = 1u << kind;
    char name[40], why[160] = "", what[48];
    int fits = 1;
    const size_t dim = fcl_attention_bucket_dim(b);
    fcl_status s = fcl_build_unit(ctx, u, mma_source(&p));
    for (int rows = 0; rows <= 1 && s == FCL_SUCCESS && fits; rows++) {
        mma_kernel_name(name, sizeof name, b, kind, rows, kv, 0);
        if (fcl_plan_mma_built(b, kind, rows, kv))
            s = create_nv_kernel(ctx, u->program, name,
                                 rows ? &ctx->nv.mma_rows[kv][b][kind] : &ctx->nv.mma[kv][b][kind],
                                 fcl_plan_mma_shape(b, kind, rows, kv).warps * 32, &fits, why,
                                 sizeof why);
    }
    if (s != FCL_SUCCESS || !fits) {
        fcl_release_kernel(&ctx->nv.mma[kv][b][kind]);
        fcl_release_kernel(&ctx->nv.mma_rows[kv][b][kind]);
    }
    snprintf(what, sizeof what, "%s attention%s at head dims up to %zu", fcl_mma_kind_names[kind],
             kv ? " on K/V formats" : "", dim);
    return finish_nv_unit(ctx, u, s, fits, what, "the portable kernels", why);
}

/* A unit of one kernel (name, for work-groups of group) from the parts p names, built with
 * option (NULL: none) after the context's; state -1 where it does not build or fit, and what
 * runs which kernels instead says why. */
static fcl_status build_nv_single(fcl_context *ctx, fcl_unit *u, cl_kernel *k, const nv_parts *p,
                                  const char *option, const char *name, size_t group,
                                  const char *what, const char *instead)
{
    char why[160] = "";
    int fits = 1;
    fcl_status s = fcl_build_unit_option(ctx, u, mma_source(p), option);
    if (s == FCL_SUCCESS)
        s = create_nv_kernel(ctx, u->program, name, k, group, &fits, why, sizeof why);
    if (s != FCL_SUCCESS || !fits)
        fcl_release_kernel(k);
    return finish_nv_unit(ctx, u, s, fits, what, instead, why);
}

/* Bucket b's tensor-core prefill kernel of one kind for K and V in fcl_mma_fixed_formats[i]. */
static fcl_status build_mma_fixed(fcl_context *ctx, int b, int kind, int i)
{
    nv_parts p = context_parts(ctx);
    p.mma_fixed[b][kind] = 1u << i;
    char name[48], what[64];
    mma_kernel_name(name, sizeof name, b, kind, 0, 1, i + 1);
    snprintf(what, sizeof what, "%s attention on %s K/V at head dims up to %zu",
             fcl_mma_kind_names[kind], fcl_format(fcl_mma_fixed_formats[i])->name,
             fcl_attention_bucket_dim(b));
    return build_nv_single(ctx, &ctx->nv.mma_fixed_unit[b][kind][i], &ctx->nv.mma_fixed[b][kind][i],
                           &p, NULL, name, fcl_plan_mma_shape(b, kind, 0, 1).warps * 32, what,
                           "the _kv build");
}

/* Bucket b's 8-bit K/V decode kernel for f16 q or (q32) float32 q, and its direct build where
 * there is one: a unit of their own, where they were in the f16 _kv unit, whose prefill and
 * GQA builds took a first decoding call 46-52 s to compile (H200, B8 H32/8 D128 at 32K keys
 * over q8_0, int8, fp8; a cold program cache). */
static fcl_status build_kv_decode(fcl_context *ctx, int b, int q32)
{
    fcl_unit *u = &ctx->nv.kv_decode_unit[q32][b];
    nv_parts p = context_parts(ctx);
    p.kv_decode[b] = KV_DECODE_BIT(q32, 0);
    char name[48], why[160] = "", what[64];
    int fits = 1;
    const size_t dim = fcl_attention_bucket_dim(b);
    fcl_status s = fcl_build_unit(ctx, u, mma_source(&p));
    const int builds = FA_KVD_DIRECT_BUILT(q32, dim) ? 2 : 1; /* staged, and direct */
    for (int direct = 0; direct < builds && s == FCL_SUCCESS && fits; direct++) {
        kv_decode_kernel_name(name, sizeof name, b, q32, 0, direct);
        s = create_nv_kernel(ctx, u->program, name,
                             direct ? &ctx->nv.kv_direct[q32][b] : &ctx->nv.kv_decode[q32][b],
                             (size_t)FA_KVD_WARPS * 32, &fits, why, sizeof why);
    }
    if (s != FCL_SUCCESS || !fits) {
        fcl_release_kernel(&ctx->nv.kv_decode[q32][b]);
        fcl_release_kernel(&ctx->nv.kv_direct[q32][b]);
    }
    snprintf(what, sizeof what, "%s decoding on 8-bit K/V at head dims up to %zu",
             q32 ? "float32-q" : "f16-q", dim);
    return finish_nv_unit(ctx, u, s, fits, what, "the portable kernels", why);
}

/* Bucket b's 8-bit K/V decode kernel (staged) for f16 q or (q32) float32 q over K and V in
 * fcl_mma_fixed_formats[i]: a unit of its own, its registers capped. */
static fcl_status build_kv_decode_fixed(fcl_context *ctx, int b, int q32, int i)
{
    nv_parts p = context_parts(ctx);
    p.kv_decode[b] = KV_DECODE_BIT(q32, i + 1);
    char name[48], what[80], option[40] = "";
    kv_decode_kernel_name(name, sizeof name, b, q32, i + 1, 0);
    snprintf(what, sizeof what, "%s decoding on %s K/V at head dims up to %zu",
             q32 ? "float32-q" : "f16-q", fcl_format(fcl_mma_fixed_formats[i])->name,
             fcl_attention_bucket_dim(b));
    const unsigned cap = kv_decode_register_cap(p.registers, b, i + 1);
    if (cap)
        snprintf(option, sizeof option, "-cl-nv-maxrregcount=%u", cap);
    return build_nv_single(ctx, &ctx->nv.kv_decode_fixed_unit[q32][b][i],
                           &ctx->nv.kv_decode_fixed[q32][b][i], &p, cap ? option : NULL, name,
                           (size_t)FA_KVD_WARPS * 32, what, "its build for any format");
}

/* Bucket b's shuffle decode kernel of feature set v. */
static fcl_status build_decode_nv(fcl_context *ctx, int b, int v)
{
    nv_parts p = context_parts(ctx);
    p.decode[b] = 1u << v;
    char name[40], what[48];
    const size_t dim = fcl_attention_bucket_dim(b);
    snprintf(name, sizeof name, "attention_decode_nv_d%zu%s", dim, fcl_attention_variant_suffix(v));
    snprintf(what, sizeof what, "decoding at head dims up to %zu", dim);
    return build_nv_single(ctx, &ctx->nv.decode_unit[b][v], &ctx->nv.decode[b][v], &p, NULL, name,
                           FA_DNV_LWS, what, "the portable kernels");
}

/* The shuffle decode kernel's feature sets: the portable decode kernel's but K/V formats
 * (the planner keeps those calls on the portable kernels). */
static int nv_decode_built_for(int v) { return fcl_decode_built_for(v) && v != FCL_ATTENTION_KV; }

/* The registers a work-group may take at compute capability 8.0 to 9.0 (the offline sources'). */
#define NV_REGISTERS_PER_GROUP 65536

static char *nv_source(int program, unsigned cc)
{
    nv_parts p = {.check = program == FCL_SOURCE_ALL || program == FCL_SOURCE_CHECK,
                  .softmax = program == FCL_SOURCE_ALL || program == FCL_SOURCE_SOFTMAX,
                  .fp8_cvt = fcl_plan_fp8_cvt(cc, NULL),
                  .registers = NV_REGISTERS_PER_GROUP};
    for (int b = 0; b < FCL_MMA_BUCKETS; b++) {
        /* the 8-bit decode kernels, f16 q and float32 q: a program of their own, not a bucket's */
        if (program == FCL_SOURCE_ALL || program == FCL_SOURCE_KV_DECODE) {
            /* any format, f16 and float32 q, and one build for a pair of formats: q8_0's, f16 q */
            p.kv_decode[b] = KV_DECODE_BIT(0, 0) | KV_DECODE_BIT(1, 0) | KV_DECODE_BIT(0, 1);
        }
        if (program == FCL_SOURCE_ALL || program == b) {
            p.mma[0][b] = p.mma[1][b] = (1u << FCL_MMA_KINDS) - 1;
            p.mma_fixed[b][FCL_MMA_F16] = 1u; /* one build for a pair of formats: q8_0's */
            for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++)
                p.decode[b] |= (unsigned)nv_decode_built_for(v) << v;
        }
    }
    if (program >= FCL_MMA_BUCKETS || program == FCL_SOURCE_MERGE)
        return NULL;
    return mma_source(&p);
}

/* ---- the interface ---- */

static void nv_softmax_kernels(fcl_context *ctx, const fcl_softmax_launch *l, fcl_dtype t,
                               cl_kernel out[FCL_K_SOFTMAX_COUNT])
{
    for (int k = 0; k < FCL_K_SOFTMAX_COUNT; k++)
        out[k] = l->nv_stream ? ctx->nv.softmax_stream[t][k] : NULL;
    if (l->nv_build)
        out[FCL_K_SOFTMAX_BLOCK] = ctx->nv.softmax[t][l->nv_build - 1];
}

static fcl_status nv_attention_kernel(fcl_context *ctx, const fcl_attention_launch *l, int v,
                                      cl_kernel *kernel)
{
    const int b = l->bucket;
    fcl_status s = FCL_SUCCESS;
    *kernel = NULL;
    const int kv = v == FCL_ATTENTION_KV;
    if (l->path == FCL_ATTENTION_PATH_MMA && kv && l->kv_fixed && !l->kv_decode) {
        const int i = l->kv_fixed - 1;
        if (!ctx->nv.mma_fixed_unit[b][l->mma_kind][i].state)
            s = build_mma_fixed(ctx, b, l->mma_kind, i);
        if (ctx->nv.mma_fixed_unit[b][l->mma_kind][i].state == 1)
            *kernel = ctx->nv.mma_fixed[b][l->mma_kind][i];
    } else if (l->path == FCL_ATTENTION_PATH_MMA && kv && l->kv_decode && l->kv_fixed) {
        const int q32 = l->mma_kind == FCL_MMA_F16_Q32, i = l->kv_fixed - 1;
        if (!ctx->nv.kv_decode_fixed_unit[q32][b][i].state)
            s = build_kv_decode_fixed(ctx, b, q32, i);
        if (ctx->nv.kv_decode_fixed_unit[q32][b][i].state == 1)
            *kernel = ctx->nv.kv_decode_fixed[q32][b][i];
    } else if (l->path == FCL_ATTENTION_PATH_MMA && kv && l->kv_decode) {
        const int q32 = l->mma_kind == FCL_MMA_F16_Q32;
        if (!ctx->nv.kv_decode_unit[q32][b].state)
            s = build_kv_decode(ctx, b, q32);
        if (ctx->nv.kv_decode_unit[q32][b].state == 1)
            *kernel = (l->kv_direct ? ctx->nv.kv_direct : ctx->nv.kv_decode)[q32][b];
    } else if (l->path == FCL_ATTENTION_PATH_MMA && (v == FCL_ATTENTION_ALL || kv)) {
        const int kind = l->mma_kind;
        if (!ctx->nv.mma_unit[kv][b][kind].state)
            s = build_mma(ctx, b, kind, kv);
        if (ctx->nv.mma_unit[kv][b][kind].state == 1)
            *kernel = (l->gqa_rows ? ctx->nv.mma_rows : ctx->nv.mma)[kv][b][kind];
    } else if (l->path == FCL_ATTENTION_PATH_DECODE_NV && nv_decode_built_for(v)) {
        if (!ctx->nv.decode_unit[b][v].state)
            s = build_decode_nv(ctx, b, v);
        if (ctx->nv.decode_unit[b][v].state == 1)
            *kernel = ctx->nv.decode[b][v];
    }
    return s;
}

static void nv_release(fcl_context *ctx)
{
    release_nv_softmax(ctx);
    fcl_release_unit(&ctx->nv.softmax_unit);
    fcl_release_unit(&ctx->nv.check_unit);
    for (int b = 0; b < FCL_MMA_BUCKETS; b++) {
        for (int q32 = 0; q32 <= 1; q32++) {
            fcl_release_kernel(&ctx->nv.kv_decode[q32][b]);
            fcl_release_kernel(&ctx->nv.kv_direct[q32][b]);
            fcl_release_unit(&ctx->nv.kv_decode_unit[q32][b]);
            for (int i = 0; i < FCL_MMA_FIXED; i++) {
                fcl_release_kernel(&ctx->nv.kv_decode_fixed[q32][b][i]);
                fcl_release_unit(&ctx->nv.kv_decode_fixed_unit[q32][b][i]);
            }
        }
        for (int k = 0; k < FCL_MMA_KINDS; k++)
            for (int kv = 0; kv <= 1; kv++) {
                fcl_release_kernel(&ctx->nv.mma[kv][b][k]);
                fcl_release_kernel(&ctx->nv.mma_rows[kv][b][k]);
                fcl_release_unit(&ctx->nv.mma_unit[kv][b][k]);
            }
        for (int v = 0; v < FCL_ATTENTION_VARIANTS; v++) {
            fcl_release_kernel(&ctx->nv.decode[b][v]);
            fcl_release_unit(&ctx->nv.decode_unit[b][v]);
        }
        for (int k = 0; k < FCL_MMA_KINDS; k++)
            for (int i = 0; i < FCL_MMA_FIXED; i++) {
                fcl_release_kernel(&ctx->nv.mma_fixed[b][k][i]);
                fcl_release_unit(&ctx->nv.mma_fixed_unit[b][k][i]);
            }
    }
}

const fcl_fast_path fcl_nvidia_path = {
    .name = "NVIDIA",
    .check = build_mma_check,
    .build_softmax = build_nv_softmax,
    .softmax_kernels = nv_softmax_kernels,
    .attention_kernel = nv_attention_kernel,
    .source = nv_source,
    .release = nv_release,
};

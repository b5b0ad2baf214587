/* The one list of what every softmax kernel takes, shared by the host (src/softmax.c, which
 * includes this file) and the kernels (the host embeds it ahead of common.cl). As in
 * attention_args.h, the kernels' argument lists, the host's argument struct and its
 * clSetKernelArg loop are generated from it. Valid C99 and OpenCL C; defines nothing but
 * macros.
 *
 * Row r of the rows x cols matrix: in[r * in_stride + j], out[r * out_stride + j], mask row
 * r % mask_rows at mask[(r % mask_rows) * mask_stride + j], head h(r) = (r / head_rows) % heads
 * for sinks[h] and alibi_slopes[h] (see softmax_common.cl, softmax_row).
 */
#ifndef FLASHCL_SOFTMAX_ARGS_H
#define FLASHCL_SOFTMAX_ARGS_H

/* X(kind, name), in argument order; the last entry comes through LAST. Kinds: IN and OUT (the
 * storage type of the kernel), MASK (float32 or float16, by flag), F32_IN, F32_OUT, and the
 * scalars U32, U64 and F32. An absent buffer is NULL; its flag is then clear. Kernels that
 * take more (a SPLIT slice, the FUSED row buffer) take it after these. */
#define SM_ARGS(X, LAST)                                                                       \
    X(IN, in) X(U64, in_stride) X(OUT, out) X(U64, out_stride)                                \
    X(MASK, mask) X(U64, mask_stride) X(U64, mask_rows)                                       \
    X(F32_OUT, lse) X(F32_IN, sinks) X(F32_IN, alibi_slopes) X(U64, heads) X(U64, head_rows)  \
    X(U64, rows) X(U64, cols) X(F32, scale) LAST(U32, flags)

/* SM_FLAGS(X): X(name, bit) for the bits of `flags`. */
#define SM_FLAGS(X)                                                                            \
    X(SM_FLAG_LOG, 0)        /* log-softmax */                                               \
    X(SM_FLAG_MASK, 1)       /* an additive mask is given */                                 \
    X(SM_FLAG_LSE, 2)        /* write the log-sum-exp of each row */                         \
    X(SM_FLAG_MASK_F16, 3)   /* the mask is float16 (else float32) */                        \
    X(SM_FLAG_ALIBI_MASK, 4) /* s = scale * x + slope(h) * mask */                           \
    X(SM_FLAG_SINKS, 5)      /* one extra logit per head in the denominator */

#define SM_FLAG_ENUM_ENTRY(name, bit) name = 1u << (bit),

/* NVIDIA's softmax (softmax_nv.cl): work-items a work-group and the longest row it holds in
 * registers, in every storage type: builds of SM_NV_VECS 16-byte vectors a work-item, and
 * for float32 rows past SM_NV_LWS * SM_NV_VECS * 4 elements one of twice as many. */
#define SM_NV_LWS 256
#define SM_NV_COLS 16384
#define SM_NV_VECS 8

#endif /* FLASHCL_SOFTMAX_ARGS_H */

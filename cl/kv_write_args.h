/* What the kv_write kernel takes (fcl_kv_write), shared by the host (src/kv_write.c) and the
 * kernel (cl/kv_write.cl) as attention_args.h is. Valid C99 and OpenCL C; macros only.
 *
 * Token t's row of head h: the input's at X_in_offset + h * X_in_head + t * X_in_token
 * (elements of dtype_in); the cache's, for slot s in page s / page_size at position
 * s % page_size, at X_offset + page * X_page + h * X_head + pos * X_token (units of its
 * format); its scale (HEAD, TOKEN) at Xs_offset + page * Xs_page + h * Xs_head +
 * pos * Xs_token floats (HEAD: strides 0, 1, 0). X is k or v. */
#ifndef FLASHCL_KV_WRITE_ARGS_H
#define FLASHCL_KV_WRITE_ARGS_H

/* X(kind, name); the last through LAST. Kinds: IN (dtype_in), OUT (the cache's bytes),
 * I32_IN, F32_OUT (scales: read for HEAD, written for TOKEN), U32, U64, F32. */
#define KW_ARGS(X, LAST)                                                                       \
    X(IN, k_in) X(IN, v_in) X(I32_IN, slots) X(OUT, k) X(OUT, v) X(F32_OUT, k_scales)         \
    X(F32_OUT, v_scales) X(U32, dtype_in) X(U32, format_k) X(U32, format_v)                   \
    X(U32, scale_mode_k) X(U32, scale_mode_v) X(F32, k_scale) X(F32, v_scale)                  \
    X(U64, tokens) X(U64, heads_kv) X(U64, head_dim) X(U64, head_dim_v) X(U64, page_size)     \
    X(U64, num_pages)                                                                          \
    X(U64, k_in_offset) X(U64, k_in_head) X(U64, k_in_token)                                  \
    X(U64, v_in_offset) X(U64, v_in_head) X(U64, v_in_token)                                  \
    X(U64, k_offset) X(U64, k_page) X(U64, k_head) X(U64, k_token)                           \
    X(U64, v_offset) X(U64, v_page) X(U64, v_head) X(U64, v_token)                           \
    X(U64, ks_offset) X(U64, ks_page) X(U64, ks_head) X(U64, ks_token)                       \
    X(U64, vs_offset) X(U64, vs_page) X(U64, vs_head) LAST(U64, vs_token)

#endif /* FLASHCL_KV_WRITE_ARGS_H */

/* The one table of storage formats, shared by the host (src/, tools/ and tests/ include this
 * file) and the kernels (the host embeds it ahead of common.cl): what each fcl_kv_format
 * value is, how many values a block holds in how many bytes, and which roles take it.
 * fcl_dtype's three types are its float formats (fcl_dtype t is format t + 1). Every
 * switch over formats is generated from it, on both sides, and traps an unknown value:
 * the host refuses it, a kernel decodes it as NaN. Valid C99 and OpenCL C; defines nothing
 * but macros. (As ggml's type_traits[] and ggml_row_size().)
 *
 * X(NAME, name, value, dtype, elems, bytes, roles):
 *   NAME   FCL_KV_NAME in flashcl.h (and in the kernels);
 *   name   the lower-case name tools and kernel names use;
 *   value  its fcl_kv_format value;
 *   dtype  its fcl_dtype value, or -1 where it is not one;
 *   elems, bytes  values a block holds and its bytes (one value each for fp8 and int8);
 *   roles  FCL_ROLE_* below.
 * Units: a view of a float format counts elements; of any other format, bytes (ggml's nb[]);
 * a row of head_dim values spans fcl_kv_row_units of them either way. */
#ifndef FLASHCL_KV_FORMATS_H
#define FLASHCL_KV_FORMATS_H

#define FCL_ROLE_FLOAT 1u    /* a float format: q and out may have it; views count elements */
#define FCL_ROLE_WRITE 2u    /* fcl_kv_write encodes it */
#define FCL_ROLE_GGML 4u     /* a ggml block: head dims in multiples of 32, 2-byte aligned */
#define FCL_ROLE_TOKEN_WRITE 8u /* ... also with FCL_KV_SCALE_TOKEN: a scale a row, amax / top */

#define FCL_KV_FORMATS(X) FCL_FLOAT_FORMATS(X) FCL_CODED_FORMATS(X)
/* ... fcl_dtype's, */
#define FCL_FLOAT_FORMATS(X)                                                                   \
    X(F32, f32, 1, 0, 1, 4, FCL_ROLE_FLOAT | FCL_ROLE_WRITE)                                   \
    X(F16, f16, 2, 1, 1, 2, FCL_ROLE_FLOAT | FCL_ROLE_WRITE)                                   \
    X(BF16, bf16, 3, 2, 1, 2, FCL_ROLE_FLOAT | FCL_ROLE_WRITE)
/* ... and those of K and V alone. */
#define FCL_CODED_FORMATS(X)                                                                   \
    X(Q8_0, q8_0, 4, -1, 32, 34, FCL_ROLE_GGML | FCL_ROLE_WRITE)                               \
    X(Q4_0, q4_0, 5, -1, 32, 18, FCL_ROLE_GGML | FCL_ROLE_WRITE)                               \
    X(Q4_1, q4_1, 6, -1, 32, 20, FCL_ROLE_GGML | FCL_ROLE_WRITE)                               \
    X(Q5_0, q5_0, 7, -1, 32, 22, FCL_ROLE_GGML | FCL_ROLE_WRITE)                               \
    X(Q5_1, q5_1, 8, -1, 32, 24, FCL_ROLE_GGML | FCL_ROLE_WRITE)                               \
    X(IQ4_NL, iq4_nl, 9, -1, 32, 18, FCL_ROLE_GGML)                                            \
    X(FP8_E4M3, fp8_e4m3, 10, -1, 1, 1, FCL_ROLE_WRITE | FCL_ROLE_TOKEN_WRITE)                 \
    X(FP8_E5M2, fp8_e5m2, 11, -1, 1, 1, FCL_ROLE_WRITE | FCL_ROLE_TOKEN_WRITE)                 \
    X(INT8, int8, 12, -1, 1, 1, FCL_ROLE_WRITE | FCL_ROLE_TOKEN_WRITE)

#define FCL_KV_FORMAT_MAX 12 /* the largest value */

/* ggml's iq4_nl values, T[n] for the nibble n. */
#define FCL_IQ4_NL_VALUES                                                                      \
    { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 }

#endif /* FLASHCL_KV_FORMATS_H */

/* The one list of what every attention kernel takes, shared by the host (src/attention.c,
 * which includes this file) and the kernels (the host embeds it ahead of the attention
 * files). Each list is an X-macro: the kernels' argument lists, the kernels' params struct,
 * the host's params struct and the host's clSetKernelArg loop are all generated from it, so
 * they cannot drift apart. Valid C99 and OpenCL C; defines nothing but macros.
 *
 * Addressing (docs/ALGORITHMS.md, section 6): element (b, h, t, d) of q, k, v or out is at
 *   X_offset + page * X_batch + h * X_head + slot * X_token + d
 * where (page, slot) is (b, t) for a contiguous or strided tensor, (b, start(b) + t) for a
 * packed varlen one (the host sets X_batch = 0; start from cu_seqlens) and
 * (block_table[b][t / page_size], t % page_size) for a paged K/V cache.
 */
#ifndef FLASHCL_ATTENTION_ARGS_H
#define FLASHCL_ATTENTION_ARGS_H

/* Buffers, X(kind, name): kernel argument i is the i-th entry. Kinds: IN (q, k, v, mask: the
 * storage type is a param), OUT, F32_OUT, F32_SCRATCH, F2_SCRATCH, U32_SCRATCH, I32_IN, F32_IN.
 * An absent buffer is NULL; its flag (below) is then clear. */
#define FA_BUFFERS(X)                                                                          \
    X(IN, q) X(IN, k) X(IN, v) X(IN, mask) X(OUT, out) X(F32_OUT, lse)                       \
    X(F32_SCRATCH, partial_o) X(F2_SCRATCH, partial_ml) X(I32_IN, seqlens_kv)                \
    X(I32_IN, cu_seqlens_q) X(I32_IN, cu_seqlens_kv) X(I32_IN, block_table)                  \
    X(F32_IN, alibi_slopes) X(F32_IN, sinks) X(F32_IN, k_scales) X(F32_IN, v_scales)        \
    X(I32_IN, leftpad_kv) X(I32_IN, query_offsets) X(U32_SCRATCH, merge_counts)

/* Scalars after the buffers, X(type, name) with type U32, U64 or F32; the last entry comes
 * through LAST (an argument list has no trailing comma). The host validates counts and
 * lengths below 2^31 but passes them as 64-bit like the offsets: index arithmetic mixing
 * 32- and 64-bit values costs GPU registers. *_limit: elements in the buffer (packed
 * sequences are cut to what lies inside it). */
#define FA_PARAMS(X, LAST)                                                                     \
    X(U32, flags) X(U32, dtype_q) X(U32, dtype_kv) X(U32, dtype_o)                            \
    X(U64, batch) X(U64, heads_q) X(U64, group) X(U64, len_q) X(U64, len_kv)                 \
    X(U64, head_dim) X(U64, head_dim_v)                                                      \
    X(U64, q_offset) X(U64, q_batch) X(U64, q_head) X(U64, q_token) X(U64, q_limit)          \
    X(U64, k_offset) X(U64, k_batch) X(U64, k_head) X(U64, k_token) X(U64, k_limit)          \
    X(U64, v_offset) X(U64, v_batch) X(U64, v_head) X(U64, v_token) X(U64, v_limit)          \
    X(U64, o_offset) X(U64, o_batch) X(U64, o_head) X(U64, o_token) X(U64, o_limit)          \
    X(U64, mask_batch) X(U64, mask_head) X(U64, mask_q) X(U64, lse_limit)                    \
    X(U64, page_size) X(U64, num_pages) X(U64, block_table_stride) X(U64, alibi_batch)       \
    X(U64, window_left) X(U64, window_right) X(F32, q_scale) X(F32, softcap)                 \
    X(U64, q_tiles) X(U64, heads_step) X(U64, splits) X(U64, split_len)                     \
    FA_KV_PARAMS(X, LAST)

/* ... and, last, how K and V are coded (v0.3; read where FA_FLAG_KV is set): their formats
 * (cl/kv_formats.h; k_*, v_* views then count that format's units), a factor each
 * (FCL_KV_SCALE_TENSOR's, 1 without), and where their HEAD or TOKEN scales are: HEAD's at
 * ks_batch * b + h of k_scales, TOKEN's at the view ks_* (paged like K's rows). */
#define FA_KV_PARAMS(X, LAST)                                                                  \
    X(U32, format_k) X(U32, format_v) X(F32, k_scale) X(F32, v_scale)                         \
    X(U64, ks_offset) X(U64, ks_batch) X(U64, ks_head) X(U64, ks_token) X(U64, ks_limit)     \
    X(U64, vs_offset) X(U64, vs_batch) X(U64, vs_head) X(U64, vs_token) LAST(U64, vs_limit)

/* FA_FLAGS(X): X(name, bit) for the bits of `flags`. The flags are enum constants, which
 * #if cannot see: a kernel that compiles code in or out by FA_FLAG_KV tests this bit of
 * FA_FEATURES. */
#define FA_FLAG_KV_BIT 16
#define FA_FLAG_HEAD_ROWS_BIT 24
#define FA_FLAGS(X)                                                                            \
    X(FA_FLAG_MASK_ADD, 0)      /* additive float32 mask */                                 \
    X(FA_FLAG_MASK_ADD_F16, 1)  /* additive float16 mask */                                 \
    X(FA_FLAG_MASK_BOOL, 2)     /* uint8 mask, nonzero = may attend */                      \
    X(FA_FLAG_CAUSAL, 3)        /* key j visible iff j <= i + causal offset */              \
    X(FA_FLAG_BOTTOM_RIGHT, 4)  /* causal offset L_kv(b) - L_q(b), else 0 */                \
    X(FA_FLAG_WINDOW, 5)        /* p(i) - window_left <= j <= p(i) + window_right */        \
    X(FA_FLAG_SOFTCAP, 6)       /* s = softcap * tanh(q_scale * q.k) */                      \
    X(FA_FLAG_ALIBI, 7)         /* s -= slope * |p(i) - j| */                               \
    X(FA_FLAG_ALIBI_MASK, 8)    /* s += slope * mask instead of mask */                     \
    X(FA_FLAG_SINKS, 9)         /* one extra logit per head in the denominator */           \
    X(FA_FLAG_SEQLENS_KV, 10)   /* L_kv(b) = seqlens_kv[b] */                               \
    X(FA_FLAG_CU_Q, 11)         /* queries packed by cu_seqlens_q */                        \
    X(FA_FLAG_CU_KV, 12)        /* keys packed by cu_seqlens_kv */                          \
    X(FA_FLAG_PAGED, 13)        /* K and V paged through block_table */                     \
    X(FA_FLAG_LSE, 14)          /* write lse */                                             \
    X(FA_FLAG_PARTIAL, 15)      /* write (m, l, o) per key split for the merge kernel */ \
    X(FA_FLAG_KV, FA_FLAG_KV_BIT) /* K/V in formats_k/v, scaled (else dtype_kv, unscaled) */ \
    X(FA_FLAG_K_HEAD_SCALES, 17) /* K's factor times k_scales[b * ks_batch + h] */          \
    X(FA_FLAG_V_HEAD_SCALES, 18) /* ... V's, v_scales[b * vs_batch + h] */                  \
    X(FA_FLAG_K_TOKEN_SCALES, 19) /* each K row's times its own, at the ks_* view */       \
    X(FA_FLAG_V_TOKEN_SCALES, 20) /* ... each V row's, at the vs_* view */                 \
    X(FA_FLAG_LEFTPAD_KV, 21)   /* sequence b's keys from row leftpad_kv[b] */              \
    X(FA_FLAG_QUERY_OFFSETS, 22) /* p(i) = i + query_offsets[b]; causality from it */     \
    X(FA_FLAG_MERGE_LAST, 23)   /* with PARTIAL: the last split's group merges (counts) */ \
    X(FA_FLAG_HEAD_ROWS, FA_FLAG_HEAD_ROWS_BIT) /* rows are one query's heads (GQA rows) */

#define FA_FLAG_ENUM_ENTRY(name, bit) name = 1u << (bit),

/* The tile and decode kernels are compiled for several feature sets: everything of v0.2
 * (FA_FEATURES_ALL); plain attention on strided tensors (FA_FEATURES_PLAIN); for the tile
 * kernel, plain plus the score modifiers (FA_FEATURES_SCORES: no paging, packing or
 * per-sequence lengths, whose addressing costs the tile kernel the registers that keep it
 * fast); and everything with K and V in any format (FA_FEATURES_KV, the rows kernel too).
 * Each kernel masks flags with its FA_FEATURES, so the compiler removes the code of what is
 * masked; the host runs the first built kernel whose features cover the call. */
#define FA_FEATURES_ALL 0x60ffffu /* bits 0-15, 21 and 22 (leftpad_kv, query_offsets) */
#define FA_FEATURES_KV 0x7fffffu
/* ... the 8-bit decode kernel's: _KV, MERGE_LAST and HEAD_ROWS. FA_FLAG_HEAD_ROWS reaches
 * only the NVIDIA kernels that take GQA rows and the merge kernel, which add it to theirs
 * (FA_WITH_HEAD_ROWS): in the portable kernels its tests cost AMD's gfx1030 a spill in the
 * tile kernel's _kv build at head dim 64 (amd_offline_check). */
#define FA_FEATURES_KV_DECODE 0x1ffffffu
#define FA_WITH_HEAD_ROWS(features) ((features) | 1u << FA_FLAG_HEAD_ROWS_BIT)
#define FA_FEATURES_PLAIN                                                                      \
    (FA_FLAG_MASK_ADD | FA_FLAG_MASK_BOOL | FA_FLAG_CAUSAL | FA_FLAG_BOTTOM_RIGHT |          \
     FA_FLAG_LSE | FA_FLAG_PARTIAL)
#define FA_FEATURES_SCORES                                                                     \
    (FA_FEATURES_PLAIN | FA_FLAG_MASK_ADD_F16 | FA_FLAG_WINDOW | FA_FLAG_SOFTCAP |            \
     FA_FLAG_ALIBI | FA_FLAG_ALIBI_MASK | FA_FLAG_SINKS)

/* Launch shapes the kernels are written for (the host plans with the same numbers). */
#define FA_DEC_LWS 128         /* decode kernel work-items */
#define FA_DEC_KEYS 128        /* decode kernel: keys per chunk, one per work-item */
#define FA_DEC_HEADS 4         /* most query heads of one kv head a decode work-group takes */
/* ... elements of K and V a work-item loads at once, by their size and whether the build
 * takes GQA groups (0 or 1): 16 bytes, or 8 in the GQA build of 16-bit types (NVIDIA H200:
 * 16 there were 25% slower); head dims a multiple of it (the planner sends others elsewhere) */
#define FA_DEC_WIDTH(elem_bytes, groups) ((elem_bytes) == 2 && (groups) ? 4 : 16 / (elem_bytes))
#define FA_ROWS_LANES 16       /* rows kernel: the lanes of a vector of query rows */
/* ... vectors of query rows a work-item, by the device's vector width (FCL_VEC): 2 where a
 * vector of 16 lanes is one register (AVX-512), so that each key element read feeds two FMAs,
 * as it does where the vector takes two registers */
#define FA_ROWS_VECS(vec) ((vec) >= 16 ? 2 : 1)
#define FA_ROWS(vec) ((vec) >= 16 ? 32 : 16) /* ... query rows a work-item: lanes x vectors */
/* ... keys a block: half the device's vector width, so that the scores' accumulators of one
 * vector of rows fill about 8 of its registers */
#define FA_ROWS_KEYS(vec) ((vec) > 4 ? (vec) / 2 : 2)
#define FA_MERGE_LWS 64        /* merge kernels: work-items at most */
#define FA_MAX_SPLITS 256      /* most key splits the merge takes */
#define FA_DNV_LWS 128         /* NVIDIA decode kernel (attention_decode_nv.cl): work-items */
#define FA_DNV_KC 8            /* ... keys a row of lanes takes at once */
/* ... keys a work-group takes a step: a row of head_dim / 8 lanes a key */
#define FA_DNV_KEYS(d) (FA_DNV_LWS / ((d) / 8) * FA_DNV_KC)
/* NVIDIA's 8-bit K/V decode kernel (attention_decode_kv_nv.cl): warps a work-group, chunks of
 * K and V rows a warp holds in local memory (the one in use and those copied ahead: 2 at head
 * dim 256, whose rows take the bytes of 3), 16 keys a chunk, query rows at most */
#define FA_KVD_WARPS 2
#define FA_KVD_STAGES(d) ((d) == 256 ? 2 : 3)
#define FA_KVD_KEYS 16
#define FA_KVD_ROWS 8
/* ... whether its program has the direct build (int8 and fp8 codes copied to the lanes that
 * multiply them) for float32 q (q32) or f16 q, head dim d: f16 q up to 128 (float32 q's
 * needed 208 registers at 128 where the build held a chunk ahead in registers; o alone takes
 * 128 at 256) */
#define FA_KVD_DIRECT_BUILT(q32, d) (!(q32) && (d) <= 128)

#endif /* FLASHCL_ATTENTION_ARGS_H */

/* Decoding from 8-, 5- and 4-bit K/V caches on NVIDIA's tensor cores: GQA rows
 * (fcl_attention_gqa_rows: up to 8 query rows of one kv head, len_q 1) of f16 or float32 q
 * over K and V each in q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, int8, fp8 E4M3 or E5M2, head
 * dims equal to the bucket's. A vendor fast path beside the tensor-core kernel's _kv builds,
 * which serve every other coded call (and are its reference with the portable kernels); the
 * planner picks it (src/plan.c, fcl_plan_attention_gqa_rows).
 * Compiled per head-dim bucket after attention_mma_nv.cl (its PTX helpers), with
 *   FA_NAME     kernel name suffix (kvdec_d128, kvdec_q32_d128, kvdec_d128_q4_0)
 *   FA_D        head_dim and head_dim_v (64, 128 or 256)
 *   FA_KVD_Q32  1 for float32 q: its big f16 parts are the A fragments' rows 0-7 and its
 *               small parts (fa_mma_split_f16) rows 8-15, so that S's accumulator holds both
 *               products (no more mma than f16's); P too is split, two products of V where
 *               one was (float32's accuracy); 0 for f16 q
 *   FA_FEATURES the features compiled in (FA_FEATURES_KV)
 *   FA_KVD_FORMAT in a build for one format of K and V both (src/plan.c's
 *               fcl_plan_mma_fixed), that format (fcl_kv_format), a constant, so that no
 *               other format's code is compiled in (H200: 6-18% faster); such a build has
 *               no direct kernel. 0 where the formats are read at run time
 *   FA_KVD_REGISTER_CAP the registers a lane the host caps the build at
 *               (fcl_plan_kv_decode_register_cap), 0 for none
 *
 * The _kv builds decode each tile in local memory between work-group barriers, so that the
 * loads, the decoding and the products of a tile take turns. Here each
 * warp takes chunks of 16 keys on its own, with no barrier in the loop: its lanes copy the K
 * and V rows of the chunks ahead (FA_KVD_STAGES - 1 of them) into the warp's own local memory
 * by cp.async (asking the L2 for whole lines, fa_mma_copy16_line), 16 bytes a copy from the
 * boundary before each row (fa_kvd_stage), while this
 * chunk's codes are read from there straight into mma fragments, exact
 * in f16 (as the _kv builds' codes). Both products put the 8 rows where they cost least:
 *   S = q K^T (m16n8k16; q's rows as A, rows 8-15 zero; K's codes as B): k-step 2b + h takes
 *       dims 32b + 16h + 4t .. + 3 from lane t (FA_KVD_QK_DIM), so that each k-step lies in
 *       one 32-dim block (ggml's d and m applied per block in float32: m times the block's
 *       sum of q) and a lane reads 4 codes a k-step (4- and 5-bit formats: 4 bytes' low or
 *       high nibbles, and 4 bits of qh);
 *   O^T = V^T P^T (V's codes as A, P as B, the rows as the 8 columns): m-tile 2b + h takes
 *       dims 32b + 4g + 2h (its row g) and + 1 (row g + 8) from lane g, so that a lane reads
 *       4 bytes of each of its 4 keys a block, each m-tile lies in one block (ggml's d joins P,
 *       the sum of p m adds to the block's dims) and P's B fragment is the scores'
 *       accumulator as it stands.
 * P's weights times V's factors (TOKEN scales, ggml's d) are rounded to f16 times a power of
 * two per chunk that puts the largest factor near f16's top (fa_kvd_unit), so that small
 * factors do not put them among f16's subnormals; o carries it until the end.
 * The direct build (attention_args.h's FA_KVD_DIRECT_BUILT; the planner takes it for int8 and
 * fp8 K and V whose rows lie at multiples of 16 bytes, src/plan.c's kv_direct_takes) stages no
 * rows: its copies put each 16 bytes of codes where the lane that multiplies them finds them
 * (fa_kvd_copy_chunk: a slot a lane and 16 bytes, FA_KVD_S chunks a warp, copied FA_KVD_S - 1
 * chunks ahead; q's fragments and o's dims follow the slots' order, FA_KVD_Q_DIM,
 * FA_KVD_O_DIM), and each lane reads its slots into registers in 16-byte loads
 * (fa_kvd_take_chunk), with no row's lead, size or bounds to take at either end. Both builds
 * run the same chunk functions (fa_kvd_weigh, fa_kvd_add), given the codes as registers or as
 * staged rows.
 * Each warp runs its own online softmax; the warps' (m, l, o) are merged at the end through
 * local memory, as attention_decode_nv.cl does. With split-KV the group that finishes a row
 * set's last split merges the splits (fa_kvd_merge_if_last), where the host asks for it
 * (FA_FLAG_MERGE_LAST), instead of the merge kernel. */
#ifndef FA_KVD_Q32
#define FA_KVD_Q32 0
#endif
#ifndef FA_KVD_FORMAT
#define FA_KVD_FORMAT 0
#endif
#ifndef FA_KVD_REGISTER_CAP
#define FA_KVD_REGISTER_CAP 0
#endif
#define FA_KVD_W FA_KVD_WARPS /* warps (attention_args.h, as FA_KVD_KEYS and _ROWS) */
#define FA_KVD_S FA_KVD_STAGES(FA_D) /* chunks a warp holds */
#define FA_KVD_BLOCKS (FA_D / 32)
#define FA_KVD_MT (FA_D / 16) /* k-steps of q.k, m-tiles of O^T */
/* The direct build's 16-byte slots a lane and chunk (fa_kvd_copy_chunk): K's, then V's 4, and
 * those of ring buffer i (of every warp's FA_KVD_S) in local memory at `ring` */
#define FA_KVD_K_SLOTS (FA_D / 32)
#define FA_KVD_SLOTS (FA_KVD_K_SLOTS + 4)
#define FA_KVD_SLOTS_OF(ring, i) ((__local uint4 (*)[32])((ring) + (ulong)(i) * FA_KVD_SLOTS * 512))
/* ... where in a V slot lane 4g + t finds its words: 8 lanes of one t (a key's row, copied by
 * 8 neighbouring lanes) and 8 lanes of a quarter-warp's reads both lie in 8 distinct 16-byte
 * parts of 128 bytes, so that neither meets a bank twice */
#define FA_KVD_V_AT(g, t) (8 * (t) + ((g) ^ (2 * (t))))
/* The first of the 4 dims of 32-dim block b that lane t holds (as a word of 4 codes) in k-step
 * 2b + h of q.k: words t and 4 + t of the block, so that with rows FA_KVD_STRIDE apart the 8
 * keys and 4 lanes of a K read fall in 32 distinct banks (where the rows' leads are the same),
 * as do the 4 keys and 8 lanes of a V read (dims 32b + 4g of keys 2t + c). With 8t + 4h, and
 * rows 160 bytes apart, both reads met 2 lanes a bank; H200, B8 H32/8 D128 at 32K keys, one
 * call, with fa_kvd_stage's empty copies (below) changed too: q8_0 0.323-0.326 -> 0.289-0.292
 * ms, int8 0.257-0.261 -> 0.239-0.241, fp8 0.250 -> 0.231-0.236, q4_0 0.304-0.308 -> 0.279. */
#define FA_KVD_QK_DIM(h, t) (16 * (h) + 4 * (t))
/* The first of the 4 dims that lane t holds of q.k's k-step ks (a word of 4 codes): staged rows'
 * (each k-step in one 32-dim block, as above), or the direct build's (fa_kvd_copy_chunk:
 * word ks % 4 of the lane's 16-byte slot ks / 4 of its row, from byte 64 (ks / 4) + 16t, so
 * that each copy's 4 lanes read 64 bytes of a row in a row). */
#define FA_KVD_Q_DIM(ks, t, direct)                                                            \
    ((direct) ? (ks) / 4 * 64 + 16 * (t) + 4 * ((ks) % 4) : (ks) / 2 * 32 + FA_KVD_QK_DIM((ks) % 2, t))
/* The dim that o's m-tile mt holds in row g (e < 2) or g + 8 (e >= 2): m-tile 2b + h comes from
 * word b of the 4-byte words lane g reads of each V row (dims 32b + 4g staged, D/8 g + 4b
 * direct), bytes 2h (row g) and 2h + 1 (row g + 8). */
#define FA_KVD_O_DIM(mt, g, e, direct)                                                         \
    (((direct) ? (g) * (FA_D / 8) + (mt) / 2 * 4 : (mt) / 2 * 32 + 4 * (g)) + 2 * ((mt) % 2) + (e) / 2)
/* Bytes a staged row: its 16-byte pieces (FA_KVD_PIECES); at D64 and D128 20 and 44 words,
 * which put the reads above in distinct banks. D256 keeps 288 bytes (72 words: 2 lanes a
 * bank): 304 (76 words, 2 KiB more local memory a group) ran int8 7% slower than the old
 * layout in one call, 288 as fast as it in another (H200, B8 H32/8 D256 at 16K keys). */
#define FA_KVD_STRIDE (FA_D == 64 ? 80 : FA_D == 128 ? 176 : 288)
#define FA_KVD_CHUNK (FA_KVD_KEYS * FA_KVD_STRIDE)
/* 16-byte pieces a staged row: the most that its rows span from 12 bytes past a 16-byte
 * boundary, in a build for one format that format's rows (FA_D / elements * bytes a block),
 * else q8_0's (the longest, D / 32 * 34 bytes). Copying q8_0's count in every build (the rest
 * zero-filled copies) took q4_0's 0.225 ms where its own takes 0.204 (H200, B8 H32/8 D128 at
 * 32K keys; D64 0.150 -> 0.132): the copies' third round went. q8_0's rows at leads up to 8
 * span 9 pieces, not 10, but keep the third round: 9 took the same 0.249 ms (one call). */
#define FA_KVD_ROW_BYTES_CASE(NAME, name, value, dtype, elems, bytes, roles)                    \
    +((value) == FA_KVD_FORMAT ? FA_D / (elems) * (bytes) : 0)
#define FA_KVD_ROW_BYTES (FA_KVD_FORMAT ? 0 FCL_KV_FORMATS(FA_KVD_ROW_BYTES_CASE) : FA_D / 32 * 34)
#define FA_KVD_PIECES ((FA_KVD_ROW_BYTES + 12 + 15) / 16)
#if FA_KVD_PIECES * 16 > FA_KVD_STRIDE
#error "a staged row does not hold its pieces"
#endif
#if FA_KVD_W * FA_KVD_S * 2 * FA_KVD_CHUNK > 48 * 1024 - 4096 || FA_D % 32
#error "the 8-bit decode kernel's local memory does not fit"
#endif
#if FA_KVD_W * FA_KVD_S * FA_KVD_SLOTS * 512 < FA_KVD_ROWS * FA_MAX_SPLITS * 8 ||               \
    FA_KVD_W * 32 < 8 * FA_KVD_ROWS
#error "fa_kvd_merge_if_last: the slots do not hold the (m, l), or a row lacks 8 work-items"
#endif

#ifndef FA_KVD_HELPERS
#define FA_KVD_HELPERS
FCL_INLINE void fa_kvd_sync_warp(void) { __asm__ volatile("bar.warp.sync 0xffffffff;" ::: "memory"); }

/* Waits for this lane's copies but the last 1 or 2 committed groups (a constant of the PTX). */
FCL_INLINE void fa_kvd_wait_but1(void) { __asm__ volatile("cp.async.wait_group 1;" ::: "memory"); }
FCL_INLINE void fa_kvd_wait_but2(void) { __asm__ volatile("cp.async.wait_group 2;" ::: "memory"); }

/* Whether x is not 0 in some lane of the warp (every lane must take part). */
FCL_INLINE int fa_kvd_any(uint x)
{
    uint r;
    __asm__ volatile("{.reg .pred p, q;\n\tsetp.ne.u32 p, %1, 0;\n\t"
                     "vote.sync.any.pred q, p, 0xffffffff;\n\tselp.u32 %0, 1, 0, q;}"
                     : "=r"(r)
                     : "r"(x));
    return (int)r;
}

/* Bytes of a and b (4-7) picked by a prmt selector. */
FCL_INLINE uint fa_prmt2(uint a, uint b, uint selector)
{
    uint r;
    __asm__("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
    return r;
}

/* The 4 bytes at byte `at` (even) of a staged row (4-byte aligned). */
FCL_INLINE uint fa_kvd_word(__local const uchar *row, uint at)
{
    __local const uint *w = (__local const uint *)(row + (at & ~3u));
    return at % 4 ? (w[0] >> 16) | (w[1] << 16) : w[0];
}

/* Whether a format's codes are signed bytes (fa_kvd_codes gives them plus 128). */
FCL_INLINE int fa_kvd_signed(uint format)
{
    return format == FCL_KV_INT8 || format == FCL_KV_Q8_0 || format == FCL_KV_IQ4_NL;
}

/* A word of 4 codes as copied (direct build) as fa_kvd_codes gives it (signed bytes plus 128). */
FCL_INLINE uint fa_kvd_biased(uint x, uint format)
{
    return fa_kvd_signed(format) ? x ^ 0x80808080u : x;
}

/* Codes `upper` (0: bytes 0 and 1 of x, fa_kvd_codes' word; 1: bytes 2 and 3) as an f16 pair,
 * exact: fp8's as fa_fp8_pair_f16's; the others' (0 to 255) the low byte of 1024 +
 * code (prmt beside 0x64 bytes: one instruction where a mask and an or were two), less 1024
 * and the codes' centre (128 for signed bytes, whose codes carry it). An E4M3 NaN code
 * (0x7f, 0xff) comes out NaN by the hardware's conversion (FA_NV_FP8_CVT), else finite:
 * fa_kvd_nan_e4m3 then marks it. */
FCL_INLINE uint fa_kvd_pair(uint x, uint upper, uint format)
{
    if (format == FCL_KV_FP8_E5M2 || format == FCL_KV_FP8_E4M3)
        return fa_fp8_pair_f16(x, upper, format == FCL_KV_FP8_E5M2);
    const uint centre = fa_kvd_signed(format) ? 128u : fcl_nibble_layout_of(format).centre;
    return fa_f16x2_sub(fa_prmt2(x, 0x64646464u, upper ? 0x4342u : 0x4140u),
                        0x64006400u + centre * 0x00010001u);
}

/* The pair with f16 NaN where codes `upper` of x (fa_kvd_pair's) are E4M3 NaN codes (their
 * exponent all ones). */
FCL_INLINE uint fa_kvd_nan_e4m3(uint pair, uint x, uint upper)
{
    const uint codes = upper ? x >> 16 : x;
    const uint lo = (codes & 0x7fu) == 0x7fu ? 0x7e00u : 0u;
    const uint hi = (codes & 0x7f00u) == 0x7f00u ? 0x7e000000u : 0u;
    return pair | lo | hi;
}

/* Whether a format comes in ggml blocks of 32 values with a d each (q8_0, q4_0, q4_1, q5_0,
 * q5_1, iq4_nl), and whether an m too (q4_1, q5_1). */
FCL_INLINE int fa_kvd_blocks(uint format)
{
    return format >= FCL_KV_Q8_0 && format <= FCL_KV_IQ4_NL;
}
FCL_INLINE int fa_kvd_has_m(uint format) { return format == FCL_KV_Q4_1 || format == FCL_KV_Q5_1; }

/* iq4_nl's values (FCL_IQ4_NL_VALUES, as int8 bytes) of 4 nibble codes, a byte each: two
 * 8-byte prmt lookups by the codes' low 3 bits, then a third that takes the upper 8 values'
 * byte where a code's bit 3 is set (ggml's CUDA get_int_from_table_16). */
__constant char fa_kvd_iq4_nl_bytes[16] __attribute__((aligned(4))) = FCL_IQ4_NL_VALUES;
FCL_INLINE uint fa_kvd_iq4_nl(uint codes)
{
    __constant const uint *table = (__constant const uint *)fa_kvd_iq4_nl_bytes;
    const uint pairs = codes | codes >> 4;            /* codes 0, 1 in byte 0; 2, 3 in byte 2 */
    const uint index = fa_prmt2(pairs, 0u, 0x0020u); /* code i in bits 4i .. 4i + 3 */
    const uint lo = fa_prmt2(table[0], table[1], index & 0x7777u);
    const uint hi = fa_prmt2(table[2], table[3], index & 0x7777u);
    return fa_prmt2(lo, hi, 0x3210u | (index & 0x8888u) >> 1);
}

/* The codes of values v .. v + 3 (v a multiple of 4) of 32-value block `block` of a staged row,
 * a byte each: q8_0's (blocks of 34 bytes: a 2-byte d, then 32 codes) and the 8-bit formats'
 * bytes; the 4- and 5-bit formats' as 0-31 (fcl_nibble_layout_of: value j < 16 in the low
 * nibble of code byte j and j + 16 in its high nibble, its fifth bit bit j of qh, ggml's
 * layout); iq4_nl's as the int8 values its nibbles stand for. Signed bytes (fa_kvd_signed)
 * come plus 128 (0 to 255), as fa_kvd_pair takes them. */
FCL_INLINE uint fa_kvd_codes(__local const uchar *row, uint format, uint block, uint v)
{
    const uint bias = fa_kvd_signed(format) ? 0x80808080u : 0u;
    if (format == FCL_KV_Q8_0 || !fa_kvd_blocks(format))
        return fa_kvd_word(row, format == FCL_KV_Q8_0 ? block * 34 + 2 + v : block * 32 + v) ^ bias;
    const fcl_nibble_layout l = fcl_nibble_layout_of(format);
    const uint w = fa_kvd_word(row, block * l.bytes + l.qs + v % 16);
    uint codes = (v < 16 ? w : w >> 4) & 0x0f0f0f0fu;
    if (format == FCL_KV_IQ4_NL)
        return fa_kvd_iq4_nl(codes) ^ bias;
    if (l.qh) { /* the 4 fifth bits, bit i to bit 4 of byte i */
        const uint h = (fa_kvd_word(row, block * l.bytes + l.qh) >> v) & 15u;
        codes |= ((h * 0x00204081u) & 0x01010101u) << 4;
    }
    return codes;
}

/* A ggml block's d (its first half). */
FCL_INLINE float fa_kvd_d(__local const uchar *row, uint format, uint block)
{
    return fa_raw_half(row, block * (format == FCL_KV_Q8_0 ? 34 : fcl_nibble_layout_of(format).bytes));
}

/* A q4_1 or q5_1 block's m with the codes' centre moved into it, so that its values are
 * d (n - centre) + (m + centre d), as fa_nibble_block's (0 for the other formats). */
FCL_INLINE float fa_kvd_m(__local const uchar *row, uint format, uint block)
{
    const fcl_nibble_layout l = fcl_nibble_layout_of(format);
    return fa_kvd_has_m(format) ? fma((float)l.centre, fa_raw_half(row, block * l.bytes),
                                      fa_raw_half(row, block * l.bytes + 2))
                                : 0.0f;
}
/* call(format) for the kernel's formats, each call site's format a constant (f the
 * format at run time; the last branch takes E5M2): the one list of what the kernel reads. */
#define FA_KVD_BY_FORMAT(f, call)                                                              \
    if ((f) == FCL_KV_Q8_0)                                                                    \
        call(FCL_KV_Q8_0);                                                                     \
    else if ((f) == FCL_KV_Q4_0)                                                               \
        call(FCL_KV_Q4_0);                                                                     \
    else if ((f) == FCL_KV_Q4_1)                                                               \
        call(FCL_KV_Q4_1);                                                                     \
    else if ((f) == FCL_KV_Q5_0)                                                               \
        call(FCL_KV_Q5_0);                                                                     \
    else if ((f) == FCL_KV_Q5_1)                                                               \
        call(FCL_KV_Q5_1);                                                                     \
    else if ((f) == FCL_KV_IQ4_NL)                                                             \
        call(FCL_KV_IQ4_NL);                                                                   \
    else if ((f) == FCL_KV_INT8)                                                               \
        call(FCL_KV_INT8);                                                                     \
    else if ((f) == FCL_KV_FP8_E4M3)                                                           \
        call(FCL_KV_FP8_E4M3);                                                                 \
    else                                                                                       \
        call(FCL_KV_FP8_E5M2)
/* ... and for the direct build's formats (a byte a value, no blocks) */
#define FA_KVD_BY_8BIT(f, call)                                                                \
    if ((f) == FCL_KV_INT8)                                                                    \
        call(FCL_KV_INT8);                                                                     \
    else if ((f) == FCL_KV_FP8_E4M3)                                                           \
        call(FCL_KV_FP8_E4M3);                                                                 \
    else                                                                                       \
        call(FCL_KV_FP8_E5M2)
/* The TOKEN scale of K's (v = 0) or V's row at place `at` into *to by cp.async, where the
 * call has them: 0 where the row is not live (past the split's end). It completes with the
 * chunk's copies: loaded there and then, each chunk's copies waited for it (H200, B8 H32/8
 * D128 at 32K keys: int8 with TOKEN scales took 14% longer than with HEAD scales). */
FCL_INLINE void fa_kvd_copy_scale(__local float *to, const fa_params *p, const fa_io *io,
                                  const fa_seq *s, int v, int live, fa_place at)
{
    if (!(p->flags & (v ? FA_FLAG_V_TOKEN_SCALES : FA_FLAG_K_TOKEN_SCALES)))
        return;
    __global const float *from =
        v ? io->v_scales + fa_row_at(&s->vs, at) : io->k_scales + fa_row_at(&s->ks, at);
    fa_mma_copy4(to, from, live ? 4u : 0u);
}

/* Lane `lane`'s row of chunk kb (lanes 0-15 K's row lane, 16-31 V's row lane - 16), looked up
 * once for the lanes that copy it: its start in K's or V's buffer, where *live says it lies
 * before the split's end (else the split's first row's start, whose weights are 0), and its
 * TOKEN scale into scales[lane] by cp.async where the call has them (fa_kvd_copy_scale). */
FCL_INLINE ulong fa_kvd_look_up(__local float *scales, const fa_params *p, const fa_io *io,
                                const fa_work *w, ulong kb, uint lane, int *live)
{
    const uint r = lane % FA_KVD_KEYS;
    const int v = lane >= FA_KVD_KEYS;
    *live = kb + r < w->kv_end;
    const fa_place at = fa_place_of(p, io, &w->s.k, *live ? kb + r : w->kv_begin);
    fa_kvd_copy_scale(&scales[lane], p, io, &w->s, v, *live, at);
    return fa_row_at(v ? &w->s.v : &w->s.k, at);
}

/* Split-KV without the merge kernel (FA_FLAG_MERGE_LAST): once the group has written its
 * split's partials of the rows q0 .. q0 + rows - 1, it counts itself in at merge_counts[set]
 * (set: the step's place among one split's steps); the group that counts last merges the
 * rows from every split and sets the count back to 0 for the next call. The fences at the
 * GPU's scope make the counting a release of each group's partials and the last group's
 * reads an acquire of all of them (CUDA's threadfence reduction). The merge is the merge
 * kernel's (attention_merge.cl: the same sums in the same order) with all rows at once, 8
 * work-items a row and D / 8 dims each, so that its loads go out together: row after row,
 * as the merge kernel takes them, the last groups' merges made the kernel 12 us longer than
 * the merge kernel took (H200, B8 H32/8 D128 at 32K keys). ml: local memory for the rows'
 * splits' (m, l), free here; last: a word of local memory. */
FCL_INLINE void fa_kvd_merge_if_last(const fa_params *p, const fa_io *io, const fa_work *w,
                                     ulong step, ulong rows, __local float2 *ml,
                                     __local uint *last)
{
    const uint lid = get_local_id(0);
    __asm__ volatile("fence.acq_rel.gpu;" ::: "memory"); /* this work-item's partials */
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        const ulong sets = p->q_tiles * p->batch * p->heads_q; /* steps of a split */
        __global uint *count = io->merge_counts + step % sets;
        __asm__ volatile("fence.acq_rel.gpu;" ::: "memory"); /* the group's, seen at the barrier */
        const uint before = atomic_inc(count);
        __asm__ volatile("fence.acq_rel.gpu;" ::: "memory");
        *last = before + 1 == p->splits;
        if (*last)
            *count = 0u; /* every split has counted: no group uses it again this call */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!*last)
        return;
    __asm__ volatile("fence.acq_rel.gpu;" ::: "memory"); /* the other groups' partials */
    const ulong splits = p->splits, first = (w->s.b * p->heads_q + w->s.h) * p->len_q + w->q0;
    for (ulong i = lid; i < rows * splits; i += FA_KVD_W * 32)
        ml[i] = io->partial_ml[first * splits + i];
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint r = lid / 8, part = lid % 8; /* row r's dims part D / 8 .. + D / 8 - 1 */
    if (r >= rows)
        return;
    __local const float2 *row_ml = ml + r * splits;
    float m = -INFINITY, l = 0.0f;
    for (ulong s = 0; s < splits; s++)
        m = fmax(m, row_ml[s].x);
    __global const float4 *po =
        (__global const float4 *)(io->partial_o + (first + r) * splits * FA_D) + part * (FA_D / 32);
    float4 o[FA_D / 32];
    #pragma unroll
    for (uint c = 0; c < FA_D / 32; c++)
        o[c] = (float4)(0.0f);
    for (ulong s = 0; s < splits; s++) { /* all -inf: l and o are 0 (or NaN) */
        const float f = m == -INFINITY ? 1.0f : exp(row_ml[s].x - m);
        l += row_ml[s].y * f;
        #pragma unroll
        for (uint c = 0; c < FA_D / 32; c++)
            o[c] = fma(po[s * (FA_D / 4) + c], (float4)(f), o[c]);
    }
    fa_params merged = *p;
    merged.flags &= ~(uint)(FA_FLAG_PARTIAL | FA_FLAG_MERGE_LAST);
    const fa_dest dst = fa_finish_row(&merged, io, w, w->q0 + r, m, l, part == 0);
    #pragma unroll
    for (uint c = 0; c < FA_D / 32; c++) {
        const uint d = part * (FA_D / 8) + 4 * c;
        fa_store(&merged, io, dst, d, o[c].x);
        fa_store(&merged, io, dst, d + 1, o[c].y);
        fa_store(&merged, io, dst, d + 2, o[c].z);
        fa_store(&merged, io, dst, d + 3, o[c].w);
    }
}
#endif /* FA_KVD_HELPERS */

/* The start of the row that lane `from` looked up (fa_kvd_look_up) in buffer src. */
FCL_INLINE __global const uchar *FCL_CAT(fa_kvd_row_from, FA_NAME)(__global const void *src,
                                                                   uint lo, uint hi, uint from)
{
    return (__global const uchar *)src +
           (fa_mma_shuffle_from(lo, from) | (ulong)fa_mma_shuffle_from(hi, from) << 32);
}

/* Copies chunk kb's K and V rows into k_dst and v_dst in 16-byte pieces from the 16-byte
 * boundary at or before each row's start (rows start at multiples of 4: lead[0][r] and
 * lead[1][r] say how far into its slot), and their TOKEN scales into sc ([0] K's, [1] V's).
 * A row's last piece ends at the row's end or the buffer's (k_limit, v_limit), whichever
 * comes first; rows at or past the split's end become zeros (codes 0) with scale 0. Lane
 * 8i + r looks up row 8i + r of the 32 (K's 16, then V's; fa_kvd_look_up), and lanes 4g ..
 * 4g + 3 copy row 8i + g of each group i, 4 neighbouring pieces a round, from the row's
 * boundary and bytes they take by shuffles: FA_KVD_PIECES pieces a row, those past its bytes
 * as zeros (no branch). The lanes that took pieces lane + 32 i of a tensor's 16 rows, each
 * piece's row read from local memory, issued 320 of q8_0's 1026 instructions a chunk (the
 * replay's profile); against them (H200, B8 H32/8 at 32K keys, one call, two rounds, ms):
 * q4_0 D128 0.253-0.259 -> 0.239-0.240, D64 0.183-0.186 -> 0.175-0.176, q8_0 D128
 * 0.268-0.271 -> 0.262-0.267, D64 0.186 -> 0.177-0.181, int8 (staged) 0.205-0.212 ->
 * 0.190-0.192; q8_0 paged 16 0.279-0.284 -> 0.289-0.295. Whole rows in 8-byte copies
 * (cp.async.ca) from their starts, so that no read adds a lead, took q8_0 to 0.323-0.327;
 * the pieces past a row's bytes left out (a branch each), to 0.281-0.284. A loop that stepped
 * through each row's pieces (8 bytes each for q8_0's rows) issued 2 to 4 times the
 * instructions (ptxas, sm_90): q8_0 0.399 -> 0.305 ms, int8 0.272 -> 0.248. Lanes 2r and
 * 2r + 1 taking row r ran slower for 8-bit rows (q8_0 0.324 -> 0.358 ms, int8 0.249 ->
 * 0.295; q4_0 0.304 -> 0.277). */
FCL_INLINE void FCL_CAT(fa_kvd_stage, FA_NAME)(__local uchar *k_dst, __local uchar *v_dst,
                                              __local uchar (*lead)[FA_KVD_KEYS],
                                              __local float (*sc)[FA_KVD_KEYS],
                                              const fa_params *p, const fa_io *io,
                                              const fa_work *w, ulong kb, uint rb_k, uint rb_v,
                                              uint lane)
{
    const uint g = lane / 4, t = lane % 4, r = lane % FA_KVD_KEYS;
    const int v = lane >= FA_KVD_KEYS;
    int live;
    const ulong start = fa_kvd_look_up(&sc[0][0], p, io, w, kb, lane, &live);
    const ulong limit = v ? p->v_limit : p->k_limit, boundary = start & ~(ulong)15;
    const uint in = live ? (uint)(min(start + (v ? rb_v : rb_k), limit) - boundary) : 0u;
    lead[v][r] = (uchar)(start % 16);
    const uint lo = (uint)boundary, hi = (uint)(boundary >> 32);
    #pragma unroll
    for (uint i = 0; i < 4; i++) {
        const uint row = 8 * i + g; /* looked up by lane `row` */
        __global const uchar *src =
            FCL_CAT(fa_kvd_row_from, FA_NAME)(i < 2 ? io->k : io->v, lo, hi, row) + 16 * t;
        __local uchar *dst = (i < 2 ? k_dst : v_dst) + (row % 16) * FA_KVD_STRIDE + 16 * t;
        const int left = (int)fa_mma_shuffle_from(in, row) - (int)(16 * t);
        #pragma unroll
        for (uint j = 0; j < (FA_KVD_PIECES + 3) / 4; j++)
            if (4 * j + t < FA_KVD_PIECES) { /* every piece, those past the row as zeros */
                const int bytes_j = left - (int)(64 * j);
                fa_mma_copy16_line(dst + 64 * j, src + (bytes_j > 0 ? 64 * j : 0),
                                   (uint)clamp(bytes_j, 0, 16));
            }
    }
}

/* Row r of a staged chunk (fa_kvd_stage): its slot and the row's lead into it. */
FCL_INLINE __local const uchar *FCL_CAT(fa_kvd_row, FA_NAME)(__local const uchar *rows,
                                                            __local const uchar *lead, uint r)
{
    return rows + r * FA_KVD_STRIDE + lead[r];
}

/* The exponent (fa_mma_weight_unit) of the chunk's keys: their largest factor, a key's
 * TOKEN scale (scale: key l % 16's for lane l, 1 without) times its ggml d of any block (one
 * exponent for the whole chunk, so that o takes one change of unit). Lane l reads key l % 16
 * and half of its blocks (loads apart from fa_kvd_accumulate's, which keep theirs). format:
 * V's, a constant of each call site; every lane takes part. */
FCL_INLINE int FCL_CAT(fa_kvd_unit, FA_NAME)(__local const uchar *v_rows,
                                            __local const uchar *v_lead, float scale,
                                            uint format, uint lane)
{
    const uint key = lane % FA_KVD_KEYS, side = lane / FA_KVD_KEYS;
    __local const uchar *row = FCL_CAT(fa_kvd_row, FA_NAME)(v_rows, v_lead, key);
    float d = 1.0f;
    if (fa_kvd_blocks(format)) {
        d = 0.0f;
        #pragma unroll
        for (uint i = 0; i < FA_KVD_BLOCKS / 2; i++) /* (the buckets' blocks are even) */
            d = fmax(d, fabs(fa_kvd_d(row, format, 2 * i + side)));
    }
    const float top = fabs(scale) * d;
    return fa_mma_weight_unit(top);
}

/* q.k of the chunk's 16 keys with this lane's q fragments: s[nb] holds row g's keys 8 nb + 2t
 * and + 1 (elements 0, 1; 2 and 3 are rows 8-15's: zero, or with FA_KVD_Q32 the small parts'
 * products, added to them). K's codes: kx, the direct build's (fa_kvd_take_chunk), else the staged
 * rows k_rows'. format: K's, a constant of each call site. ggml's blocks (staged): each
 * block's part times its keys' d, plus (q4_1, q5_1) their m times q_sums[b], row g's sum of
 * q over block b. */
FCL_INLINE void FCL_CAT(fa_kvd_scores, FA_NAME)(float (*s)[4], const uint (*qa)[2],
                                               const uint (*ql)[2], __local const float *q_sums,
                                               const uint (*kx)[FA_KVD_MT],
                                               __local const uchar *k_rows,
                                               __local const uchar *k_lead, uint format, uint lane)
{
    const uint g = lane / 4, t = lane % 4;
    #pragma unroll
    for (uint nb = 0; nb < 2; nb++) {
        __local const uchar *row = kx ? NULL : FCL_CAT(fa_kvd_row, FA_NAME)(k_rows, k_lead, nb * 8 + g);
        s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
        #pragma unroll
        for (uint b = 0; b < FA_KVD_BLOCKS; b++) {
            float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            #pragma unroll
            for (uint h = 0; h < 2; h++) {
                const uint x = kx ? fa_kvd_biased(kx[nb][2 * b + h], format)
                                  : fa_kvd_codes(row, format, b, FA_KVD_QK_DIM(h, t));
                uint b0 = fa_kvd_pair(x, 0, format), b1 = fa_kvd_pair(x, 1, format);
                /* (the hardware's conversion gives NaN codes as NaN) */
                if (!FA_NV_FP8_CVT && format == FCL_KV_FP8_E4M3 && fa_fp8_nonfinite(x, format)) {
                    b0 = fa_kvd_nan_e4m3(b0, x, 0);
                    b1 = fa_kvd_nan_e4m3(b1, x, 1);
                }
                const uint a[4] = {qa[2 * b + h][0], ql[2 * b + h][0], qa[2 * b + h][1],
                                   ql[2 * b + h][1]};
                if (fa_kvd_blocks(format))
                    fa_mma_f16(part, a, b0, b1);
                else
                    fa_mma_f16(s[nb], a, b0, b1);
            }
            if (fa_kvd_blocks(format)) {
                const uint key = nb * 8 + 2 * t; /* this lane's keys: key, key + 1 */
                __local const uchar *mine = FCL_CAT(fa_kvd_row, FA_NAME)(k_rows, k_lead, key);
                __local const uchar *next = FCL_CAT(fa_kvd_row, FA_NAME)(k_rows, k_lead, key + 1);
#if FA_KVD_Q32
                part[0] += part[2], part[1] += part[3];
#endif
                s[nb][0] = fma(part[0], fa_kvd_d(mine, format, b), s[nb][0]);
                s[nb][1] = fma(part[1], fa_kvd_d(next, format, b), s[nb][1]);
                if (fa_kvd_has_m(format)) { /* m times the sum of row g's q over the block */
                    s[nb][0] = fma(fa_kvd_m(mine, format, b), q_sums[b], s[nb][0]);
                    s[nb][1] = fma(fa_kvd_m(next, format, b), q_sums[b], s[nb][1]);
                }
            }
        }
#if FA_KVD_Q32
        if (!fa_kvd_blocks(format))
            s[nb][0] += s[nb][2], s[nb][1] += s[nb][3];
#endif
    }
}

/* The m part of V's values (q4_1, q5_1) for one block: row r's sum over the chunk of p m
 * added to o's m-tiles lo and hi (the block's 32 dims), whose columns are rows 2t and 2t + 1.
 * m[2 nb + e]: key 8 nb + 2t + e's; a key without weight adds nothing (its m may be huge). */
FCL_INLINE void FCL_CAT(fa_kvd_add_m, FA_NAME)(float *lo, float *hi, const float (*pw)[2],
                                              const float *m, float unit, uint lane)
{
    const uint t = lane % 4;
    float pm = 0.0f; /* row g's, over this lane's 4 keys, then its 4 lanes' */
    #pragma unroll
    for (uint nb = 0; nb < 2; nb++)
        #pragma unroll
        for (uint e = 0; e < 2; e++)
            pm = pw[nb][e] != 0.0f ? fma(pw[nb][e], m[2 * nb + e], pm) : pm;
    pm += fcl_nv_shuffle_xor(pm, 1);
    pm += fcl_nv_shuffle_xor(pm, 2);
    pm *= unit;
    const float r0 = as_float(fa_mma_shuffle_from(as_uint(pm), 8 * t));
    const float r1 = as_float(fa_mma_shuffle_from(as_uint(pm), 8 * t + 4));
    lo[0] += r0, lo[2] += r0, lo[1] += r1, lo[3] += r1;
    hi[0] += r0, hi[2] += r0, hi[1] += r1, hi[3] += r1;
}

/* o += V^T P^T over the chunk: pw[nb][e] is row g's weight of key 8 nb + 2t + e, already
 * times V's TOKEN scale (0 stays 0), times unit (o's power of two, fa_kvd_unit), rounded to
 * f16; with FA_KVD_Q32 as two f16 parts, two products. V's codes: vx, the direct build's
 * (fa_kvd_take_chunk; o's dims then FA_KVD_O_DIM's), else the staged rows v_rows'. format: V's,
 * a constant of each call site. Returns 0, and adds nothing, where the chunk's V holds a NaN
 * or infinite fp8 code (the caller takes fa_kvd_add_slowly); every lane of the warp must
 * take part. */
FCL_INLINE int FCL_CAT(fa_kvd_accumulate, FA_NAME)(float (*o)[4], const float (*pw)[2],
                                                  float unit, const uint (*vx)[4],
                                                  __local const uchar *v_rows,
                                                  __local const uchar *v_lead, uint format,
                                                  uint lane)
{
    const uint g = lane / 4, t = lane % 4;
    /* this lane's keys 2t, 2t + 1, 2t + 8, 2t + 9: dims 32b + 4g .. + 3 of each block b */
    uint x[FA_KVD_BLOCKS][4], bad = 0;
    #pragma unroll
    for (uint b = 0; b < FA_KVD_BLOCKS; b++)
        #pragma unroll
        for (uint k = 0; k < 4; k++) {
            const uint key = k / 2 * 8 + 2 * t + k % 2;
            x[b][k] = vx ? fa_kvd_biased(vx[b][k], format)
                         : fa_kvd_codes(FCL_CAT(fa_kvd_row, FA_NAME)(v_rows, v_lead, key), format, b,
                                        4 * g);
            bad |= fa_fp8_nonfinite(x[b][k], format);
        }
    if ((format == FCL_KV_FP8_E4M3 || format == FCL_KV_FP8_E5M2) && fa_kvd_any(bad))
        return 0;
    uint bf[2], bl[2] = {0u, 0u}; /* P's B fragments: big parts, and small ones */
    #pragma unroll
    for (uint b = 0; b < FA_KVD_BLOCKS; b++) {
        if (b == 0 || fa_kvd_blocks(format)) { /* blocks: P times each key's d of this one */
            float d[4] = {unit, unit, unit, unit}, m[4];
            #pragma unroll
            for (uint k = 0; k < 4 && fa_kvd_blocks(format); k++) {
                __local const uchar *row =
                    FCL_CAT(fa_kvd_row, FA_NAME)(v_rows, v_lead, k / 2 * 8 + 2 * t + k % 2);
                d[k] = fa_kvd_d(row, format, b) * unit;
                m[k] = fa_kvd_m(row, format, b);
            }
            if (fa_kvd_has_m(format)) /* each row's sum of p m over the keys adds to the block */
                FCL_CAT(fa_kvd_add_m, FA_NAME)(o[2 * b], o[2 * b + 1], pw, m, unit, lane);
            #pragma unroll
            for (uint nb = 0; nb < 2; nb++)
#if FA_KVD_Q32
                bf[nb] = fa_mma_split_f16(pw[nb][0] * d[2 * nb], pw[nb][1] * d[2 * nb + 1], &bl[nb]);
#else
                bf[nb] = fcl_nv_pack_f16(pw[nb][0] * d[2 * nb], pw[nb][1] * d[2 * nb + 1]);
#endif
        }
        #pragma unroll
        for (uint h = 0; h < 2; h++) {
            /* a0: dim 32b + 4g + 2h of keys 2t, 2t + 1; a1: the next dim; a2, a3: keys + 8;
             * from keys k and k + 1's codes of dims 2h and 2h + 1 interleaved */
            const uint pairs[2] = {fa_prmt2(x[b][0], x[b][1], h ? 0x7362u : 0x5140u),
                                   fa_prmt2(x[b][2], x[b][3], h ? 0x7362u : 0x5140u)};
            uint a[4];
            #pragma unroll
            for (uint i = 0; i < 4; i++)
                a[i] = fa_kvd_pair(pairs[i / 2], i % 2, format);
            fa_mma_f16(o[2 * b + h], a, bf[0], bf[1]);
            if (FA_KVD_Q32)
                fa_mma_f16(o[2 * b + h], a, bl[0], bl[1]);
        }
    }
    return 1;
}

/* The slow path of a chunk whose V holds NaN or infinite fp8 codes: o += weights times
 * values in float32, each key where its weight is not 0 (so that a key without weight adds
 * no NaN). weights: the warp's [row][key] (pw as fa_kvd_accumulate takes them). V's codes: the
 * staged rows v_rows, or (direct) the chunk's slots, where the slot of lane 4g + t'
 * (FA_KVD_V_AT) holds o's dims of row g (FA_KVD_O_DIM's) of the keys k with k % 8 / 2 == t'
 * (fa_kvd_copy_chunk). */
FCL_INLINE void FCL_CAT(fa_kvd_add_slowly, FA_NAME)(float (*o)[4], __local const float (*weights)[FA_KVD_KEYS],
                                                   __local const uchar *v_rows,
                                                   __local const uchar *v_lead, uint format,
                                                   int direct, uint lane)
{
    const uint g = lane / 4, t = lane % 4;
    __local const uint4 (*slot)[32] = (__local const uint4 (*)[32])v_rows;
    for (uint k = 0; k < FA_KVD_KEYS; k++) {
        __local const uchar *row = direct
            ? (__local const uchar *)&slot[FA_KVD_K_SLOTS + k / 8 * 2 + k % 2]
                                          [FA_KVD_V_AT(g, k % 8 / 2)] - g * (FA_D / 8)
            : v_rows + k * FA_KVD_STRIDE + v_lead[k];
        const float w0 = weights[2 * t][k], w1 = weights[2 * t + 1][k];
        #pragma unroll
        for (uint mt = 0; mt < FA_KVD_MT; mt++)
            #pragma unroll
            for (uint e = 0; e < 2; e++) {
                const uint c = row[FA_KVD_O_DIM(mt, g, 2 * e, direct)];
                const float x = format == FCL_KV_FP8_E5M2 ? fcl_fp8_e5m2_value(c) : fcl_fp8_e4m3_value(c);
                o[mt][2 * e] += w0 != 0.0f ? w0 * x : 0.0f;
                o[mt][2 * e + 1] += w1 != 0.0f ? w1 * x : 0.0f;
            }
    }
}

/* One chunk's scores for K, and its products with V, of each format (FA_KVD_BY_FORMAT) */
#define FA_KVD_SCORES(fmt)                                                                     \
    FCL_CAT(fa_kvd_scores, FA_NAME)(s, qa, ql, q_sums, k_direct, k_rows, k_lead, fmt, lane)
#define FA_KVD_ACCUMULATE(fmt)                                                                 \
    fast = FCL_CAT(fa_kvd_accumulate, FA_NAME)(o, pw, fa_mma_pow2(unit), v_direct, v_rows,     \
                                               v_lead, fmt, lane)
#define FA_KVD_UNIT(fmt)                                                                       \
    *unit = FCL_CAT(fa_kvd_unit, FA_NAME)(v_rows, v_lead, unit_scale, fmt, lane)
/* ... of the formats of a call site: the direct build's or every one */
#define FA_KVD_BY_FORMAT_OF(direct, f, call)                                                   \
    if (direct) {                                                                              \
        FA_KVD_BY_8BIT(f, call);                                                               \
    } else {                                                                                   \
        FA_KVD_BY_FORMAT(f, call);                                                             \
    }

/* The first half of a warp's chunk, keys kb .. kb + 15: the scores of row g, keys 8 nb + 2t + e
 * (K's TOKEN scales, q's scale, softcap, the mask: its entry read only for keys before the
 * split's end and rows of the call; -inf past the split's end), the online softmax
 * (docs/ALGORITHMS.md) of row g's (m, l) in base 2 (l: this lane's part), and o rescaled:
 * pw[nb][e] gets row g's weights of those keys times V's TOKEN scales, *unit o's new power of
 * two (fa_kvd_unit; o holds 2^o_unit times its value). K's codes: k_direct (the direct build's,
 * fa_kvd_take_chunk), else the staged rows k_rows; v_rows: the staged V rows (ggml blocks'
 * factors for the unit; unused where direct). sc: the chunk's TOKEN scales ([0] K's, [1] V's).
 * c, qk_scale, scale_in_c: the kernel's. */
FCL_INLINE void FCL_CAT(fa_kvd_weigh, FA_NAME)(
    float (*o)[4], float *m, float *l, int *o_unit, float (*pw)[2], int *unit,
    const uint (*qa)[2], const uint (*ql)[2], __local const float *q_sums,
    const uint (*k_direct)[FA_KVD_MT], __local const uchar *k_rows, __local const uchar *k_lead,
    __local const uchar *v_rows, __local const uchar *v_lead,
    __local const float (*sc)[FA_KVD_KEYS], const fa_params *p, const fa_io *io,
    const fa_work *w, ulong kb, uint fk, uint fv, float c, float qk_scale, int scale_in_c,
    int direct, uint lane)
{
    const uint g = lane / 4, t = lane % 4;
    const ulong qi = w->q0 + g;
    float s[2][4];
    FA_KVD_BY_FORMAT_OF(direct, fk, FA_KVD_SCORES);

    const uint keys_in = (uint)min(w->kv_end - kb, (ulong)FA_KVD_KEYS);
    if (p->flags & FA_FLAG_K_TOKEN_SCALES)
        #pragma unroll
        for (uint nb = 0; nb < 2; nb++)
            #pragma unroll
            for (uint e = 0; e < 2; e++)
                s[nb][e] *= sc[0][nb * 8 + 2 * t + e];
    float x[2][2], top = -INFINITY;
    if (scale_in_c) {
        #pragma unroll
        for (uint nb = 0; nb < 2; nb++)
            #pragma unroll
            for (uint e = 0; e < 2; e++) {
                x[nb][e] = nb * 8 + 2 * t + e < keys_in ? s[nb][e] : -INFINITY;
                top = fmax(top, x[nb][e]);
            }
    } else {
        #pragma unroll
        for (uint nb = 0; nb < 2; nb++)
            #pragma unroll
            for (uint e = 0; e < 2; e++) {
                const uint key = nb * 8 + 2 * t + e;
                const float v = fa_modified_score(p, io, w, s[nb][e] * qk_scale, qi, kb + key,
                                                  key < keys_in && qi < w->s.len_q);
                x[nb][e] = key < keys_in ? v : -INFINITY;
                top = fmax(top, x[nb][e]);
            }
    }
    top = fmax(top, fcl_nv_shuffle_xor(top, 1));
    top = fmax(top, fcl_nv_shuffle_xor(top, 2));
    const float m_new = fmax(*m, top * c);
    const float alpha = m_new == -INFINITY ? 1.0f : fa_mma_exp2(*m - m_new);
    const float under = m_new == -INFINITY ? 0.0f : m_new;
    *m = m_new;
    *l *= alpha;
    #pragma unroll
    for (uint nb = 0; nb < 2; nb++)
        #pragma unroll
        for (uint e = 0; e < 2; e++) {
            pw[nb][e] = fa_mma_exp2(fma(x[nb][e], c, -under));
            *l += pw[nb][e];
        }
    if (p->flags & FA_FLAG_V_TOKEN_SCALES)
        #pragma unroll
        for (uint nb = 0; nb < 2; nb++)
            #pragma unroll
            for (uint e = 0; e < 2; e++) {
                const float f = sc[1][nb * 8 + 2 * t + e];
                pw[nb][e] = pw[nb][e] == 0.0f ? 0.0f : pw[nb][e] * f;
            }
    /* o's columns are rows 2t and 2t + 1: their alphas from lanes 8t and 8t + 4, times the
     * change of o's unit where V's factors set one */
    *unit = 0;
    if ((p->flags & FA_FLAG_V_TOKEN_SCALES) || (!direct && fa_kvd_blocks(fv))) {
        const float unit_scale =
            p->flags & FA_FLAG_V_TOKEN_SCALES ? sc[1][lane % FA_KVD_KEYS] : 1.0f;
        FA_KVD_BY_FORMAT_OF(direct, fv, FA_KVD_UNIT);
    }
    const float change = fa_mma_pow2(*unit - *o_unit);
    *o_unit = *unit;
    const float a0 = as_float(fa_mma_shuffle_from(as_uint(alpha), 8 * t)) * change;
    const float a1 = as_float(fa_mma_shuffle_from(as_uint(alpha), 8 * t + 4)) * change;
    if (fa_kvd_any(a0 != 1.0f || a1 != 1.0f)) /* in most chunks of a long split, none */
        #pragma unroll
        for (uint mt = 0; mt < FA_KVD_MT; mt++) {
            o[mt][0] *= a0, o[mt][2] *= a0;
            o[mt][1] *= a1, o[mt][3] *= a1;
        }
}

/* The second half: o += p V (pw and unit: fa_kvd_weigh's), or where V's fp8 codes hold a NaN
 * or an infinity, the slow path (fa_kvd_add_slowly) through slow_w. V's codes: v_direct
 * (fa_kvd_take_chunk's; v_rows then the chunk's slots), else the staged rows v_rows. */
FCL_INLINE void FCL_CAT(fa_kvd_add, FA_NAME)(float (*o)[4], const float (*pw)[2], int unit,
                                            const uint (*v_direct)[4], __local const uchar *v_rows,
                                            __local const uchar *v_lead,
                                            __local float (*slow_w)[FA_KVD_KEYS], uint fv,
                                            int direct, uint lane)
{
    const uint g = lane / 4, t = lane % 4;
    int fast; /* 0: V's fp8 codes hold a NaN or infinity (FA_KVD_ACCUMULATE sets it) */
    FA_KVD_BY_FORMAT_OF(direct, fv, FA_KVD_ACCUMULATE);
    if (!fast) {
        #pragma unroll
        for (uint nb = 0; nb < 2; nb++)
            #pragma unroll
            for (uint e = 0; e < 2; e++)
                slow_w[g][nb * 8 + 2 * t + e] = pw[nb][e] * fa_mma_pow2(unit);
        fa_kvd_sync_warp();
        FCL_CAT(fa_kvd_add_slowly, FA_NAME)(o, slow_w, v_rows, v_lead, fv, direct, lane);
    }
}

/* Chunk kb's codes into the slots of the lanes that multiply them (16 bytes each) by
 * cp.async: this lane's K, 16-byte pieces of key 8 nb + g at 64 j + 16 t (the dims
 * FA_KVD_Q_DIM's), each copy's 4 lanes reading 64 bytes of a row in a row; then V's rows, each
 * read whole by 8 neighbouring lanes, piece p (D/8 bytes at D/8 p) to lane 4p + t of the keys
 * k / 2 * 8 + 2t + k % 2 (FA_KVD_O_DIM's, at FA_KVD_V_AT). Where each lane copied its own V
 * words, a copy's 8 lanes of a row were 4 apart, which took each lane's 16 bytes as a sector
 * of its own and met a bank 8 times (Nsight Compute on the replay, H200, B8 H32/8 D128 at 32K
 * keys, int8: the L2 at 84% of its throughput). Each lane first looks up one row and copies
 * its TOKEN scale (fa_kvd_look_up), and the lanes that copy from the row take its start by
 * shuffles. Every lane takes part. */
FCL_INLINE void FCL_CAT(fa_kvd_copy_chunk, FA_NAME)(__local uint4 (*slot)[32], __local float *scale,
                                                   const fa_params *p, const fa_io *io,
                                                   const fa_work *w, ulong kb, uint lane)
{
    const uint g = lane / 4, t = lane % 4;
    int live;
    const ulong start = fa_kvd_look_up(scale, p, io, w, kb, lane, &live);
    const uint lo = (uint)start, hi = (uint)(start >> 32);
    #pragma unroll
    for (uint nb = 0; nb < 2; nb++) {
        __global const uchar *row = FCL_CAT(fa_kvd_row_from, FA_NAME)(io->k, lo, hi, nb * 8 + g);
        #pragma unroll
        for (uint j = 0; j < FA_D / 64; j++)
            fa_mma_copy16_line(&slot[nb * (FA_D / 64) + j][lane], row + 64 * j + 16 * t, 16);
    }
    #pragma unroll
    for (uint i = 0; i < 4; i++) {
        const uint piece = lane % 8, key = 4 * i + lane / 8;
        __global const uchar *row = FCL_CAT(fa_kvd_row_from, FA_NAME)(io->v, lo, hi,
                                                                      FA_KVD_KEYS + key) +
                                    piece * (FA_D / 8);
        __local uint4 *to =
            &slot[FA_KVD_K_SLOTS + key / 8 * 2 + key % 2][FA_KVD_V_AT(piece, key % 8 / 2)];
        if (FA_D == 64)
            fa_mma_copy8(to, row, 8);
        else
            fa_mma_copy16_line(to, row, 16);
    }
}

/* The codes fa_kvd_copy_chunk put in this lane's slots, as fa_kvd_weigh and fa_kvd_add take
 * them: kx[nb][ks] key 8 nb + g's word of k-step ks, vx[b][k] V's word b of key k. */
FCL_INLINE void FCL_CAT(fa_kvd_take_chunk, FA_NAME)(uint (*kx)[FA_KVD_MT], uint (*vx)[4],
                                                   __local const uint4 (*slot)[32], uint lane)
{
    #pragma unroll
    for (uint nb = 0; nb < 2; nb++)
        #pragma unroll
        for (uint j = 0; j < FA_D / 64; j++) {
            const uint4 x = slot[nb * (FA_D / 64) + j][lane];
            kx[nb][4 * j] = x.x, kx[nb][4 * j + 1] = x.y;
            kx[nb][4 * j + 2] = x.z, kx[nb][4 * j + 3] = x.w;
        }
    #pragma unroll
    for (uint k = 0; k < 4; k++) {
        const uint4 x = slot[FA_KVD_K_SLOTS + k][FA_KVD_V_AT(lane / 4, lane % 4)];
        vx[0][k] = x.x, vx[1][k] = x.y;
#if FA_D > 64
        vx[2][k] = x.z, vx[3][k] = x.w;
#endif
    }
}

/* Chunk kb's copies into buffer i (of every warp's FA_KVD_S) of stage, where kb is inside the
 * split: direct, the codes into the lanes' slots (fa_kvd_copy_chunk); else the rows, staged
 * (fa_kvd_stage: K's then V's FA_KVD_CHUNK bytes). */
FCL_INLINE void FCL_CAT(fa_kvd_fill, FA_NAME)(__local uchar *stage,
                                             __local uchar (*lead)[2][FA_KVD_KEYS],
                                             __local float (*token_sc)[2][FA_KVD_KEYS],
                                             const fa_params *p, const fa_io *io, const fa_work *w,
                                             ulong kb, uint i, uint rb_k, uint rb_v, int direct,
                                             uint lane)
{
    if (kb >= w->kv_end)
        return;
    if (direct) {
        FCL_CAT(fa_kvd_copy_chunk, FA_NAME)(FA_KVD_SLOTS_OF(stage, i), &token_sc[i][0][0], p, io, w,
                                            kb, lane);
    } else {
        __local uchar *k_dst = stage + (ulong)i * 2 * FA_KVD_CHUNK;
        FCL_CAT(fa_kvd_stage, FA_NAME)(k_dst, k_dst + FA_KVD_CHUNK, lead[i], token_sc[i], p, io, w,
                                       kb, rb_k, rb_v, lane);
    }
}

/* Both builds' local memory beside their chunks': q's sums over each block (K with m), the slow
 * path's weights, and the warps' (m, l) at the end. */
typedef struct {
    float q_sums[FA_KVD_W][FA_KVD_ROWS][FA_KVD_BLOCKS];
    float slow_w[FA_KVD_W][FA_KVD_ROWS][FA_KVD_KEYS];
    float part_m[FA_KVD_W][FA_KVD_ROWS], part_l[FA_KVD_W][FA_KVD_ROWS];
    uint last; /* fa_kvd_merge_if_last's */
} FCL_CAT(fa_kvd_shared_, FA_NAME);
#define fa_kvd_shared FCL_CAT(fa_kvd_shared_, FA_NAME)

/* The kernel (direct: the _direct build's copies; else the staged rows'): q's fragments, each
 * warp's chunks, and the warps' states merged. stage: the staged chunks ([warp][chunk][K, V],
 * FA_KVD_CHUNK bytes each), or (direct) the lanes' slots (FA_KVD_SLOTS_OF); after the loop,
 * the warps' o. token_sc: the chunks' TOKEN scales ([warp][chunk]); lead: the staged rows'
 * places in their slots. */
FCL_INLINE void FCL_CAT(fa_kvd_run, FA_NAME)(const fa_params *p, const fa_io *io, int direct,
                                            __local uchar *stage,
                                            __local uchar (*lead)[2][FA_KVD_KEYS],
                                            __local float (*token_sc)[2][FA_KVD_KEYS],
                                            __local fa_kvd_shared *sh)
{
    __local float (*q_sums)[FA_KVD_ROWS][FA_KVD_BLOCKS] = sh->q_sums;
    __local float (*slow_w)[FA_KVD_ROWS][FA_KVD_KEYS] = sh->slow_w;
    __local float (*part_m)[FA_KVD_ROWS] = sh->part_m, (*part_l)[FA_KVD_ROWS] = sh->part_l;
    __local float (*part_o)[FA_KVD_ROWS][FA_D] = (__local float (*)[FA_KVD_ROWS][FA_D])stage;
    const uint lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane / 4, t = lane % 4;
    const ulong steps = (ulong)p->q_tiles * p->batch * p->heads_q * p->splits;
    const uint rb_k = (uint)fa_row_units(p, 0), rb_v = (uint)fa_row_units(p, 1);
    const uint fk = FA_KVD_FORMAT ? FA_KVD_FORMAT : p->format_k;
    const uint fv = FA_KVD_FORMAT ? FA_KVD_FORMAT : p->format_v;

    for (ulong step = get_group_id(0); step < steps; step += get_num_groups(0)) {
        const fa_work w = fa_locate(p, io, step, FA_KVD_ROWS, 1);
        if (w.q0 >= w.s.len_q)
            continue; /* the whole group takes the same step: no barrier is skipped by some */
        const ulong qi = w.q0 + g; /* this lane's row of q and of the scores */

        /* q's A fragments: k-step ks holds dims FA_KVD_Q_DIM(ks, t) .. + 3 of row g (qa,
         * rows 0-7), and with FA_KVD_Q32 the small parts of row g times 2^e (ql, rows 8-15;
         * else zeros), q_factor 2^-e (fa_mma_f16_exponent of the row's 4 lanes) */
        uint qa[FA_KVD_MT][2], ql[FA_KVD_MT][2];
        float q_factor = 1.0f;
        {
            const int inside = qi < w.s.len_q;
            const ulong at = inside ? fa_row(p, io, &w.s.q, qi) : 0;
#if FA_KVD_Q32
            __global const float *q_row = (__global const float *)io->q + at;
            float x[FA_KVD_MT][4], top = 0.0f;
            #pragma unroll
            for (uint ks = 0; ks < FA_KVD_MT; ks++)
                #pragma unroll
                for (uint i = 0; i < 4; i++) {
                    x[ks][i] = inside ? q_row[FA_KVD_Q_DIM(ks, t, direct) + i] : 0.0f;
                    top = fmax(top, fabs(x[ks][i]));
                }
            const int e = fa_mma_f16_exponent(top);
            q_factor = ldexp(1.0f, -e);
            #pragma unroll
            for (uint ks = 0; ks < FA_KVD_MT; ks++)
                #pragma unroll
                for (uint i = 0; i < 2; i++)
                    qa[ks][i] = fa_mma_split_f16(ldexp(x[ks][2 * i], e), ldexp(x[ks][2 * i + 1], e),
                                                 &ql[ks][i]);
#else
            __global const ushort *q_row = (__global const ushort *)io->q + at;
            #pragma unroll
            for (uint ks = 0; ks < FA_KVD_MT; ks++)
                #pragma unroll
                for (uint i = 0; i < 2; i++) {
                    const uint d = FA_KVD_Q_DIM(ks, t, direct) + 2 * i;
                    qa[ks][i] = inside ? q_row[d] | (uint)q_row[d + 1] << 16 : 0u;
                    ql[ks][i] = 0u;
                }
#endif
        }
        if (fa_kvd_has_m(fk)) { /* row g's q over each block (its fragments'), for K's m */
            #pragma unroll
            for (uint b = 0; b < FA_KVD_BLOCKS; b++) {
                float sum = 0.0f;
                #pragma unroll
                for (uint k = 0; k < 4; k++) {
                    const float2 big = fcl_nv_halves_f16(qa[2 * b + k / 2][k % 2]);
                    const float2 small = fcl_nv_halves_f16(ql[2 * b + k / 2][k % 2]);
                    sum += (big.x + small.x) + (big.y + small.y);
                }
                sum += fcl_nv_shuffle_xor(sum, 1);
                sum += fcl_nv_shuffle_xor(sum, 2);
                if (t == 0)
                    q_sums[warp][g][b] = sum;
            }
        }
        const float qk_scale = p->q_scale * w.s.k_scale * q_factor;
        const int scale_in_c = !(p->flags & FA_SCORE_MODIFIERS) && qk_scale > 0.0f;
        const float c = scale_in_c ? qk_scale * M_LOG2E_F : M_LOG2E_F;
        /* scale_in_c: the scores are q.k (times K's TOKEN scales) times c, no softcap or mask.
         * fa_kvd_weigh then tests the features once a chunk where each took a test a key, and
         * skips rescaling o where no alpha changes it: H200, B8 H32/8 D128 at 32K keys, one
         * call, int8 0.242-0.245 -> 0.225 ms, q8_0 0.287-0.296 -> 0.275-0.276, int8 with TOKEN
         * scales 0.288 -> 0.268, multi-head int8 0.82-0.83 -> 0.75 */

        float m = -INFINITY, l = 0.0f; /* row g's (fa_kvd_weigh) */
        int o_unit = 0;
        float o[FA_KVD_MT][4];
        #pragma unroll
        for (uint mt = 0; mt < FA_KVD_MT; mt++)
            o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;

        const ulong stride = (ulong)FA_KVD_W * FA_KVD_KEYS;
        ulong kb = w.kv_begin + warp * FA_KVD_KEYS;
        /* chunk i in buffer i % FA_KVD_S, copied FA_KVD_S - 1 chunks ahead */
        uint buf = 0;
        #pragma unroll
        for (uint i = 0; i + 1 < FA_KVD_S; i++) {
            FCL_CAT(fa_kvd_fill, FA_NAME)(stage, lead, token_sc, p, io, &w, kb + i * stride,
                                          warp * FA_KVD_S + i, rb_k, rb_v, direct, lane);
            fa_mma_copies_commit();
        }
        for (; kb < w.kv_end; kb += stride, buf = buf + 1 == FA_KVD_S ? 0 : buf + 1) {
            const uint ahead_buf = buf == 0 ? FA_KVD_S - 1 : buf - 1; /* the last one used */
            FCL_CAT(fa_kvd_fill, FA_NAME)(stage, lead, token_sc, p, io, &w,
                                          kb + (FA_KVD_S - 1) * stride,
                                          warp * FA_KVD_S + ahead_buf, rb_k, rb_v, direct, lane);
            fa_mma_copies_commit();
#if FA_KVD_S == 3 /* this chunk's bytes are in */
            fa_kvd_wait_but2();
#else
            fa_kvd_wait_but1();
#endif
            fa_kvd_sync_warp(); /* and every lane's (staged rows, TOKEN scales) */
            const uint at = warp * FA_KVD_S + buf;
            float pw[2][2];
            int unit;
            if (direct) { /* the codes from this lane's slots (the slow path's V from the warp's) */
                __local const uint4 (*slots)[32] = FA_KVD_SLOTS_OF(stage, at);
                uint kx[2][FA_KVD_MT], vx[FA_KVD_BLOCKS][4];
                FCL_CAT(fa_kvd_take_chunk, FA_NAME)(kx, vx, slots, lane);
                FCL_CAT(fa_kvd_weigh, FA_NAME)(o, &m, &l, &o_unit, pw, &unit, qa, ql, q_sums[warp][g],
                                               kx, NULL, NULL, NULL, NULL, token_sc[at], p, io, &w,
                                               kb, fk, fv, c, qk_scale, scale_in_c, 1, lane);
                FCL_CAT(fa_kvd_add, FA_NAME)(o, pw, unit, vx, (__local const uchar *)slots, NULL,
                                             slow_w[warp], fv, 1, lane);
            } else {
                __local const uchar *k_rows = stage + (ulong)at * 2 * FA_KVD_CHUNK;
                __local const uchar *v_rows = k_rows + FA_KVD_CHUNK;
                FCL_CAT(fa_kvd_weigh, FA_NAME)(o, &m, &l, &o_unit, pw, &unit, qa, ql, q_sums[warp][g],
                                               NULL, k_rows, lead[at][0], v_rows, lead[at][1],
                                               token_sc[at], p, io, &w, kb, fk, fv, c, qk_scale,
                                               scale_in_c, 0, lane);
                FCL_CAT(fa_kvd_add, FA_NAME)(o, pw, unit, NULL, v_rows, lead[at][1], slow_w[warp],
                                             fv, 0, lane);
            }
            fa_kvd_sync_warp(); /* every lane is done with this chunk: the next copies reuse it */
        }
        fa_mma_copies_wait();

        /* The warps' states merged: row g's (m, l) from its lanes, o through local memory,
         * then one work-item an element of the rows rescales them to the largest m. */
        l += fcl_nv_shuffle_xor(l, 1);
        l += fcl_nv_shuffle_xor(l, 2);
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with its chunks: part_o is free */
        if (t == 0)
            part_m[warp][g] = m, part_l[warp][g] = l;
        #pragma unroll
        for (uint mt = 0; mt < FA_KVD_MT; mt++)
            #pragma unroll
            for (uint e = 0; e < 4; e++)
                part_o[warp][2 * t + e % 2][FA_KVD_O_DIM(mt, g, e, direct)] =
                    o[mt][e] * fa_mma_pow2(-o_unit);
        barrier(CLK_LOCAL_MEM_FENCE);
        const ulong rows = min((ulong)FA_KVD_ROWS, w.s.len_q - w.q0);
        for (uint i = lid; i < rows * FA_D; i += FA_KVD_W * 32) {
            const uint r = i / FA_D, d = i % FA_D;
            float m_all = -INFINITY, l_all = 0.0f, o_all = 0.0f;
            for (uint k = 0; k < FA_KVD_W; k++)
                m_all = fmax(m_all, part_m[k][r]);
            for (uint k = 0; k < FA_KVD_W; k++) {
                const float f = part_m[k][r] == -INFINITY ? 0.0f : fa_mma_exp2(part_m[k][r] - m_all);
                l_all = fma(part_l[k][r], f, l_all);
                o_all = fma(part_o[k][r][d], f, o_all);
            }
            /* V's factor (TENSOR, HEAD) where a key has weight: a row that weighs none is 0 */
            const float v_factor = l_all != 0.0f ? w.s.v_scale : 1.0f;
            const fa_dest dst = fa_finish_row(p, io, &w, w.q0 + r, m_all * M_LN2_F, l_all, d == 0);
            fa_store(p, io, dst, d, o_all * v_factor);
        }
        if (p->flags & FA_FLAG_MERGE_LAST) {
            barrier(CLK_LOCAL_MEM_FENCE); /* every work-item is done with part_o */
            fa_kvd_merge_if_last(p, io, &w, step, rows, (__local float2 *)stage, &sh->last);
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next step's copies overwrite part_o */
    }
}

/* The staged build: every format, rows at multiples of 4 bytes. A build whose registers the
 * host caps (-cl-nv-maxrregcount=FA_KVD_REGISTER_CAP) leaves the work-group size unstated:
 * ptxas ignores the cap of a kernel with one (.reqntid). */
#if FA_KVD_REGISTER_CAP
__kernel
#else
__kernel __attribute__((reqd_work_group_size(FA_KVD_W * 32, 1, 1)))
#endif
void FCL_CAT(attention, FA_NAME)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local uchar stage[FA_KVD_W * FA_KVD_S * 2 * FA_KVD_CHUNK] __attribute__((aligned(16)));
    __local uchar lead[FA_KVD_W * FA_KVD_S][2][FA_KVD_KEYS];
    __local float token_sc[FA_KVD_W * FA_KVD_S][2][FA_KVD_KEYS];
    __local fa_kvd_shared sh;
    FCL_CAT(fa_kvd_run, FA_NAME)(p, io, 0, stage, lead, token_sc, &sh);
}

/* The direct build (f16 q, head dims up to 128; float32 q's, where an earlier direct build held
 * the next chunk's codes in registers, needed 208 registers at D128 and ran int8 at 0.33 ms
 * against the staged build's 0.223; not tried since): int8 and fp8 K and V, rows at
 * multiples of 16 bytes (the planner's kv_direct_takes). slots: the lanes' (then the warps'
 * o). */
#if FA_KVD_DIRECT_BUILT(FA_KVD_Q32, FA_D) && !FA_KVD_FORMAT
#if FA_KVD_W * FA_KVD_ROWS * FA_D * 4 > FA_KVD_W * FA_KVD_S * FA_KVD_SLOTS * 512
#error "the direct build's slots do not hold the warps' o"
#endif
__kernel __attribute__((reqd_work_group_size(FA_KVD_W * 32, 1, 1)))
void FCL_CAT(FCL_CAT(attention, FA_NAME), direct)(FA_KERNEL_ARGS)
{
    FA_GATHER_ARGS;
    __local uchar slots[FA_KVD_W * FA_KVD_S * FA_KVD_SLOTS * 512] __attribute__((aligned(16)));
    __local float token_sc[FA_KVD_W * FA_KVD_S][2][FA_KVD_KEYS];
    __local fa_kvd_shared sh;
    FCL_CAT(fa_kvd_run, FA_NAME)(p, io, 1, slots, NULL, token_sc, &sh);
}
#endif

#undef FA_KVD_SCORES
#undef FA_KVD_BY_FORMAT_OF
#undef fa_kvd_shared
#undef FA_KVD_ACCUMULATE
#undef FA_KVD_UNIT
#undef FA_KVD_W
#undef FA_KVD_S
#undef FA_KVD_BLOCKS
#undef FA_KVD_MT
#undef FA_KVD_K_SLOTS
#undef FA_KVD_SLOTS
#undef FA_KVD_SLOTS_OF
#undef FA_KVD_V_AT
#undef FA_KVD_STRIDE
#undef FA_KVD_CHUNK
#undef FA_KVD_QK_DIM
#undef FA_KVD_PIECES
#undef FA_KVD_ROW_BYTES
#undef FA_KVD_ROW_BYTES_CASE
#undef FA_KVD_Q32
#undef FA_KVD_FORMAT

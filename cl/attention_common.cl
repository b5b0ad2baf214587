/* What every attention kernel shares (docs/ALGORITHMS.md, sections 4, 6 and 7): the arguments
 * gathered into two structs (each kernel family file is compiled after #define FA_FEATURES,
 * see attention_args.h), where a sequence's rows are (the one addressing helper,
 * fa_row), which keys a block of queries visits, the score modifiers, and the final
 * normalisation with attention sinks. Compiled once, after common.cl and attention_args.h;
 * the kernel families (attention_tile.cl, attention_decode.cl, attention_rows.cl,
 * attention_merge.cl) follow. */

enum { FA_FLAGS(FA_FLAG_ENUM_ENTRY) };

#define FA_DEV_U32 uint
#define FA_DEV_U64 ulong
#define FA_DEV_F32 float
#define FA_BUF_IN __global const void *
#define FA_BUF_OUT __global void *
#define FA_BUF_F32_OUT __global float *
#define FA_BUF_F32_SCRATCH __global float *
#define FA_BUF_F2_SCRATCH __global float2 *
#define FA_BUF_U32_SCRATCH __global uint *
#define FA_BUF_I32_IN __global const int *
#define FA_BUF_F32_IN __global const float *

#define FA_IO_FIELD(kind, name) FA_BUF_##kind name;
#define FA_PARAM_FIELD(type, name) FA_DEV_##type name;
typedef struct { FA_BUFFERS(FA_IO_FIELD) } fa_io;
typedef struct { FA_PARAMS(FA_PARAM_FIELD, FA_PARAM_FIELD) } fa_params;

/* Every attention kernel's argument list, and the line that gathers it into io and p. */
#define FA_BUF_ARG(kind, name) FA_BUF_##kind name,
#define FA_PARAM_ARG(type, name) FA_DEV_##type name,
#define FA_PARAM_LAST(type, name) FA_DEV_##type name
#define FA_KERNEL_ARGS FA_BUFFERS(FA_BUF_ARG) FA_PARAMS(FA_PARAM_ARG, FA_PARAM_LAST)
#define FA_NAME_OF(kind, name) name,
/* ... with flags cut to the kernel's FA_FEATURES (a constant of its compilation). */
#define FA_GATHER_ARGS                                                                         \
    const fa_io io_ = {FA_BUFFERS(FA_NAME_OF)}, *io = &io_;                                  \
    fa_params p_ = {FA_PARAMS(FA_NAME_OF, FA_NAME_OF)};                                      \
    p_.flags &= FA_FEATURES;                                                                 \
    const fa_params *p = &p_

/* ---- K and V in any format (v0.3, the FA_FLAG_KV builds): value d of a row that starts at
 * unit `row` of src (elements of a float format, bytes of the others; cl/kv_formats.h) as
 * float32, exactly as the contract decodes it. A ggml block is 2-byte aligned (the host
 * refuses odd offsets and strides), so its halves load with vload_half. ---- */
__constant float fcl_iq4_nl_values[16] = FCL_IQ4_NL_VALUES;

float fcl_kv_decode_f32(__global const uchar *src, ulong row, uint d)
{
    return ((__global const float *)src)[row + d];
}
float fcl_kv_decode_f16(__global const uchar *src, ulong row, uint d)
{
    return vload_half(row + d, (__global const half *)src);
}
float fcl_kv_decode_bf16(__global const uchar *src, ulong row, uint d)
{
    return as_float((uint)((__global const ushort *)src)[row + d] << 16);
}

/* A ggml block's binary16 at byte `at` of it, and code n (4 bits) of value i. */
float fcl_block_half(__global const uchar *block, uint at)
{
    return vload_half(0, (__global const half *)(block + at));
}
uint fcl_block_nibble(__global const uchar *qs, uint i)
{
    const uint q = qs[i % 16];
    return i < 16 ? q & 15u : q >> 4;
}
/* ... its fifth bit, bit i of the little-endian uint32 qh (read by bytes: 2-byte aligned) */
uint fcl_block_high_bit(__global const uchar *qh, uint i) { return (qh[i / 8] >> (i % 8)) & 1u; }

/* Where a 4- or 5-bit ggml block (q4_0, q4_1, q5_0, q5_1, iq4_nl) keeps its parts: its bytes,
 * the first of its 16 code bytes, its qh (q5_x: the codes' fifth bits, a little-endian uint32;
 * 0: none), whether m (a half) follows d, and the centre of its codes (8, or 16 with a fifth
 * bit). The one spelling of the layouts for the readers a block at a time (the rows kernel's
 * loader, the tensor-core kernels'). */
typedef struct {
    uint bytes, qs, qh, has_m, centre;
} fcl_nibble_layout;
FCL_INLINE fcl_nibble_layout fcl_nibble_layout_of(uint format)
{
    fcl_nibble_layout l = {18, 2, 0, 0, 8};
    if (format == FCL_KV_Q4_1)
        l.bytes = 20, l.qs = 4, l.has_m = 1;
    else if (format == FCL_KV_Q5_0)
        l.bytes = 22, l.qs = 6, l.qh = 2, l.centre = 16;
    else if (format == FCL_KV_Q5_1)
        l.bytes = 24, l.qs = 8, l.qh = 4, l.has_m = 1, l.centre = 16;
    return l;
}

float fcl_kv_decode_q8_0(__global const uchar *src, ulong row, uint d)
{
    __global const uchar *b = src + row + d / 32 * 34;
    return fcl_block_half(b, 0) * (float)((__global const char *)b)[2 + d % 32];
}
float fcl_kv_decode_q4_0(__global const uchar *src, ulong row, uint d)
{
    __global const uchar *b = src + row + d / 32 * 18;
    return fcl_block_half(b, 0) * (float)((int)fcl_block_nibble(b + 2, d % 32) - 8);
}
float fcl_kv_decode_q4_1(__global const uchar *src, ulong row, uint d)
{
    __global const uchar *b = src + row + d / 32 * 20;
    return fma(fcl_block_half(b, 0), (float)fcl_block_nibble(b + 4, d % 32), fcl_block_half(b, 2));
}
float fcl_kv_decode_q5_0(__global const uchar *src, ulong row, uint d)
{
    __global const uchar *b = src + row + d / 32 * 22;
    const uint n = fcl_block_nibble(b + 6, d % 32) | fcl_block_high_bit(b + 2, d % 32) << 4;
    return fcl_block_half(b, 0) * (float)((int)n - 16);
}
float fcl_kv_decode_q5_1(__global const uchar *src, ulong row, uint d)
{
    __global const uchar *b = src + row + d / 32 * 24;
    const uint n = fcl_block_nibble(b + 8, d % 32) | fcl_block_high_bit(b + 4, d % 32) << 4;
    return fma(fcl_block_half(b, 0), (float)n, fcl_block_half(b, 2));
}
float fcl_kv_decode_iq4_nl(__global const uchar *src, ulong row, uint d)
{
    __global const uchar *b = src + row + d / 32 * 18;
    return fcl_block_half(b, 0) * fcl_iq4_nl_values[fcl_block_nibble(b + 2, d % 32)];
}
/* fp8 code x's value: exponent and mantissa moved into a float32's (normal values), or the
 * subnormal's mantissa times its power of two; E4M3 has no infinities and one NaN code a sign. */
float fcl_fp8_e4m3_value(uint x)
{
    const uint e = (x >> 3) & 15u, m = x & 7u;
    float v = e ? as_float((e + 120u) << 23 | m << 20) : (float)m * 0x1p-9f;
    v = e == 15u && m == 7u ? NAN : v;
    return x & 0x80u ? -v : v;
}
float fcl_fp8_e5m2_value(uint x)
{
    const uint e = (x >> 2) & 31u, m = x & 3u;
    float v = e == 31u ? (m ? NAN : INFINITY)
              : e      ? as_float((e + 112u) << 23 | m << 21)
                       : (float)m * 0x1p-16f;
    return x & 0x80u ? -v : v;
}
float fcl_kv_decode_fp8_e4m3(__global const uchar *src, ulong row, uint d)
{
    return fcl_fp8_e4m3_value(src[row + d]);
}
float fcl_kv_decode_fp8_e5m2(__global const uchar *src, ulong row, uint d)
{
    return fcl_fp8_e5m2_value(src[row + d]);
}
float fcl_kv_decode_int8(__global const uchar *src, ulong row, uint d)
{
    return (float)((__global const char *)src)[row + d];
}

/* The prelude's FCL_KV_CALLS (the device table's): 1 where the decoders below are calls
 * (CPUs: a smaller compile; AMD: no spills), 0 where they are inlined. */
#ifndef FCL_KV_CALLS
#define FCL_KV_CALLS 0
#endif
#if FCL_KV_CALLS
#define FCL_KV_DECODER __attribute__((noinline))
#else
#define FCL_KV_DECODER
#endif

#define FCL_KV_DECODE_CASE(NAME, name, value, dtype, elems, bytes, roles)                      \
    case value: return FCL_CAT(fcl_kv_decode, name)(src, row, d);
FCL_KV_DECODER float fcl_kv_decode(__global const void *src, uint format, ulong row, uint d)
{
    switch (format) {
    FCL_KV_FORMATS(FCL_KV_DECODE_CASE)
    default: return NAN;
    }
}
#undef FCL_KV_DECODE_CASE

/* Values d to d + 3 of a row (in one block: d a multiple of 4), under one switch. */
#define FCL_KV_DECODE4_CASE(NAME, name, value, dtype, elems, bytes, roles)                     \
    case value:                                                                                \
        return (float4)(FCL_CAT(fcl_kv_decode, name)(src, row, d),                             \
                        FCL_CAT(fcl_kv_decode, name)(src, row, d + 1),                         \
                        FCL_CAT(fcl_kv_decode, name)(src, row, d + 2),                         \
                        FCL_CAT(fcl_kv_decode, name)(src, row, d + 3));
FCL_KV_DECODER float4 fcl_kv_decode4(__global const void *src, uint format, ulong row, uint d)
{
    switch (format) {
    FCL_KV_FORMATS(FCL_KV_DECODE4_CASE)
    default: return NAN;
    }
}
#undef FCL_KV_DECODE4_CASE

/* Where one tensor's rows of one (sequence, head) lie: row t at base + t * token_stride, or,
 * paged (K and V with FA_FLAG_PAGED), in page block_table[pages + t / page_size] at slot
 * t % page_size. */
typedef struct {
    ulong base; /* element of row 0 (paged: of this head in page 0) */
    ulong page_stride, token_stride;
    ulong pages; /* paged: where the sequence's row of the block table starts */
    int paged;   /* K and V of a paged cache; never q or out */
} fa_rows;

/* Where row t of a tensor lies: its page and its slot in it ((0, t) unpaged). A block-table
 * entry outside [0, num_pages) is clamped into it (the device cannot validate it first), so a
 * paged row stays inside the pages the host checked the buffer holds. K and V share the
 * block table: one lookup serves both. */
typedef struct {
    ulong page, slot;
} fa_place;

FCL_INLINE fa_place fa_place_of(const fa_params *p, const fa_io *io, const fa_rows *r, ulong t)
{
    fa_place at = {0, t};
    if (!r->paged)
        return at;
    /* 32-bit division (lengths and page sizes are below 2^31): a 64-bit one is a long
     * software routine on GPUs. */
    const uint ps = (uint)p->page_size, in_page = (uint)t / ps;
    const int entry = io->block_table[r->pages + in_page];
    at.page = (ulong)clamp(entry, 0, (int)p->num_pages - 1);
    at.slot = (ulong)((uint)t - in_page * ps);
    return at;
}

FCL_INLINE ulong fa_row_at(const fa_rows *r, fa_place at)
{
    return r->base + at.page * r->page_stride + at.slot * r->token_stride;
}

/* The one addressing helper: the element where row t starts. */
FCL_INLINE ulong fa_row(const fa_params *p, const fa_io *io, const fa_rows *r, ulong t)
{
    return fa_row_at(r, fa_place_of(p, io, r, t));
}

/* One sequence b seen by one query head h: its lengths, where its rows are, and its
 * per-head constants. */
typedef struct {
    ulong b, h;
    ulong len_q, len_kv; /* L_q(b), L_kv(b) */
    ulong q_start;       /* packed queries: the sequence's first row */
    long pos_offset;     /* p(i) - i = L_kv(b) - L_q(b): the query's position among the keys */
    long causal_offset;  /* the causal rule's: 0 (top-left) or pos_offset (bottom-right) */
    fa_rows q, k, v; /* out's rows: fa_out_rows (computed where they are written) */
    /* FA_FLAG_KV: the factor of the kv head's K and V values (TENSOR x HEAD), and where the
     * rows' own scales are (FA_FLAG_K/V_TOKEN_SCALES: paged as k and v) */
    float k_scale, v_scale;
    fa_rows ks, vs;
} fa_seq;

/* The units (fcl_kv_decode's) a row of K (v = 0) or V (v = 1) spans: head_dim elements, or
 * in a FA_FLAG_KV call of a coded format, its bytes. */
#define FCL_KV_ROW_CASE(NAME, name, value, dtype, elems, bytes, roles)                         \
    case value: return (roles) & FCL_ROLE_FLOAT ? dim : dim / (elems) * (bytes);
ulong fa_row_units(const fa_params *p, int v)
{
    const ulong dim = v ? p->head_dim_v : p->head_dim;
    if (!(p->flags & FA_FLAG_KV))
        return dim;
    switch (v ? p->format_v : p->format_k) {
    FCL_KV_FORMATS(FCL_KV_ROW_CASE)
    default: return dim;
    }
}
#undef FCL_KV_ROW_CASE

/* The bytes of one of those units in K's (v = 0) or V's buffer (a float format's element,
 * a coded format's byte), as the host's fcl_format_unit_bytes. */
#define FCL_KV_UNIT_CASE(NAME, name, value, dtype, elems, bytes, roles)                        \
    case value: return (roles) & FCL_ROLE_FLOAT ? bytes : 1;
FCL_INLINE uint fa_unit_bytes(const fa_params *p, int v)
{
    /* without FA_FLAG_KV, K and V are dtype_kv (fcl_dtype t is format t + 1) */
    switch (p->flags & FA_FLAG_KV ? (v ? p->format_v : p->format_k) : p->dtype_kv + 1) {
    FCL_KV_FORMATS(FCL_KV_UNIT_CASE)
    default: return 1;
    }
}
#undef FCL_KV_UNIT_CASE

/* Rows [start, start + len) of a packed tensor (row 0 at base) that lie inside a buffer of
 * limit elements, rows of dim elements: len cut so that none reaches past it. The host
 * validated unpacked and paged extents; packed starts come from the device. */
ulong fa_rows_inside(ulong base, ulong token_stride, ulong limit, ulong dim, ulong start, ulong len)
{
    if (base + dim > limit)
        return 0;
    const ulong rows = token_stride ? (limit - base - dim) / token_stride + 1 : start + len;
    return start >= rows ? 0 : min(len, rows - start);
}

/* A packed sequence's first row and length from cu_seqlens (length within cap). */
ulong fa_packed_span(__global const int *cu, ulong b, ulong cap, ulong *start)
{
    const long first = max(cu[b], 0);
    *start = (ulong)first;
    return (ulong)clamp((long)cu[b + 1] - first, 0L, (long)cap);
}

fa_rows fa_rows_at(ulong base, ulong page_stride, ulong token_stride)
{
    fa_rows r = {base, page_stride, token_stride, 0, 0};
    return r;
}

FCL_INLINE fa_seq fa_sequence(const fa_params *p, const fa_io *io, ulong b, ulong h)
{
    fa_seq s;
    ulong kv_start = 0;
    const ulong hk = h / p->group;
    s.q_start = 0;
    s.b = b;
    s.h = h;
    s.len_q = p->len_q;
    s.len_kv = p->len_kv;
    /* Packed tensors have batch strides of 0 (the host sees to it): start rows do the rest. */
    s.q = fa_rows_at(p->q_offset + b * p->q_batch + h * p->q_head, 0, p->q_token);
    s.k = fa_rows_at(p->k_offset + hk * p->k_head, p->k_batch, p->k_token);
    s.v = fa_rows_at(p->v_offset + hk * p->v_head, p->v_batch, p->v_token);
    if (p->flags & FA_FLAG_CU_Q) {
        s.len_q = fa_packed_span(io->cu_seqlens_q, b, p->len_q, &s.q_start);
        const ulong o_base = p->o_offset + b * p->o_batch + h * p->o_head;
        s.len_q = min(fa_rows_inside(s.q.base, p->q_token, p->q_limit, p->head_dim, s.q_start, s.len_q),
                      fa_rows_inside(o_base, p->o_token, p->o_limit, p->head_dim_v, s.q_start, s.len_q));
        s.q.base += s.q_start * p->q_token;
    }
    s.k_scale = p->k_scale;
    s.v_scale = p->v_scale;
    if (p->flags & FA_FLAG_K_HEAD_SCALES)
        s.k_scale *= io->k_scales[b * p->ks_batch + hk];
    if (p->flags & FA_FLAG_V_HEAD_SCALES)
        s.v_scale *= io->v_scales[b * p->vs_batch + hk];
    s.ks = fa_rows_at(p->ks_offset + hk * p->ks_head, p->ks_batch, p->ks_token);
    s.vs = fa_rows_at(p->vs_offset + hk * p->vs_head, p->vs_batch, p->vs_token);
    if (p->flags & FA_FLAG_CU_KV) {
        s.len_kv = fa_packed_span(io->cu_seqlens_kv, b, p->len_kv, &kv_start);
        s.len_kv = min(fa_rows_inside(s.k.base, p->k_token, p->k_limit, fa_row_units(p, 0), kv_start, s.len_kv),
                       fa_rows_inside(s.v.base, p->v_token, p->v_limit, fa_row_units(p, 1), kv_start, s.len_kv));
        if (p->flags & FA_FLAG_K_TOKEN_SCALES)
            s.len_kv = fa_rows_inside(s.ks.base, p->ks_token, p->ks_limit, 1, kv_start, s.len_kv);
        if (p->flags & FA_FLAG_V_TOKEN_SCALES)
            s.len_kv = fa_rows_inside(s.vs.base, p->vs_token, p->vs_limit, 1, kv_start, s.len_kv);
    } else if (p->flags & FA_FLAG_SEQLENS_KV) {
        s.len_kv = (ulong)clamp((long)io->seqlens_kv[b], 0L, (long)p->len_kv);
    }
    if (p->flags & FA_FLAG_LEFTPAD_KV) { /* (never paged or packed: the host sees to it) */
        kv_start = (ulong)clamp((long)io->leftpad_kv[b], 0L, (long)s.len_kv);
        s.len_kv -= kv_start;
    }
    if (p->flags & FA_FLAG_PAGED) {
        s.k.pages = s.v.pages = s.ks.pages = s.vs.pages = b * p->block_table_stride;
        s.k.paged = s.v.paged = s.ks.paged = s.vs.paged = 1;
    } else {
        s.k.base += b * p->k_batch + kv_start * p->k_token;
        s.v.base += b * p->v_batch + kv_start * p->v_token;
        s.ks.base += b * p->ks_batch + kv_start * p->ks_token;
        s.vs.base += b * p->vs_batch + kv_start * p->vs_token;
    }
    /* (rows that are one query's heads: that query's, the last of one) */
    const long rows_q = (p->flags & FA_FLAG_HEAD_ROWS) ? 1L : (long)s.len_q;
    s.pos_offset = (p->flags & FA_FLAG_QUERY_OFFSETS) ? (long)io->query_offsets[b]
                                                      : (long)s.len_kv - rows_q;
    s.causal_offset = (p->flags & (FA_FLAG_BOTTOM_RIGHT | FA_FLAG_QUERY_OFFSETS)) ? s.pos_offset : 0;
    return s;
}

/* The factor of the values of K's (v = 0) or V's (v = 1) row at place `at` in a FA_FLAG_KV
 * call: the sequence's, or with TOKEN scales the row's own (the modes exclude each other,
 * so that the value is exactly decode(bits) * scale). */
FCL_INLINE float fa_kv_row_scale(const fa_params *p, const fa_io *io, const fa_seq *s, int v,
                                 fa_place at)
{
    if (v)
        return p->flags & FA_FLAG_V_TOKEN_SCALES ? io->v_scales[fa_row_at(&s->vs, at)] : s->v_scale;
    return p->flags & FA_FLAG_K_TOKEN_SCALES ? io->k_scales[fa_row_at(&s->ks, at)] : s->k_scale;
}

/* Value d of K's (v = 0) or V's (v = 1) row at place `at`, in a FA_FLAG_KV call. */
FCL_INLINE float fa_kv_value(const fa_params *p, const fa_io *io, const fa_seq *s, int v,
                             fa_place at, uint d)
{
    const ulong row = fa_row_at(v ? &s->v : &s->k, at);
    return fcl_kv_decode(v ? io->v : io->k, v ? p->format_v : p->format_k, row, d) *
           fa_kv_row_scale(p, io, s, v, at);
}

/* Where the sequence's output rows are: computed after the kernels' loops, so that it does
 * not hold registers through them. */
FCL_INLINE fa_rows fa_out_rows(const fa_params *p, const fa_seq *s)
{
    return fa_rows_at(p->o_offset + s->b * p->o_batch + s->h * p->o_head + s->q_start * p->o_token, 0,
                      p->o_token);
}

/* Query row qi's position among the keys, p(i) (the window's), and its query head (its
 * sink's): with FA_FLAG_HEAD_ROWS, where the rows are the heads of a GQA group that decode one
 * query as rows of their kv head (src/attention_desc.c, fcl_attention_gqa_rows), every row's
 * position is the query's and row qi is query head h len_q + qi (rows past the group, a
 * tile's padding, the group's last: its sink and slope are read, never past the buffers). */
FCL_INLINE ulong fa_query_index(const fa_params *p, ulong qi)
{
    return (p->flags & FA_FLAG_HEAD_ROWS) ? 0 : qi; /* i of p(i) = i + pos_offset */
}

FCL_INLINE long fa_query_pos(const fa_params *p, const fa_seq *s, ulong qi)
{
    return (long)fa_query_index(p, qi) + s->pos_offset;
}

FCL_INLINE ulong fa_query_head(const fa_params *p, const fa_seq *s, ulong qi)
{
    return (p->flags & FA_FLAG_HEAD_ROWS) ? s->h * p->len_q + min(qi, p->len_q - 1) : s->h;
}

/* The ALiBi slope of query row qi's head (0 without ALiBi). */
FCL_INLINE float fa_slope(const fa_params *p, const fa_io *io, const fa_seq *s, ulong qi)
{
    return (p->flags & (FA_FLAG_ALIBI | FA_FLAG_ALIBI_MASK))
               ? io->alibi_slopes[s->b * p->alibi_batch + fa_query_head(p, s, qi)]
               : 0.0f;
}

/* What step g of a kernel's grid-stride loop owns: block_q queries from q0 of one
 * (batch, head) (of heads_step heads from s.h, which share a kv head, in the decode kernel:
 * a constant 1 elsewhere, so that the divisions by it fold away),
 * one key split, and the keys they visit: the split, within L_kv(b), cut where causality or
 * the window hides every key from every query of the block. With a window the splits start
 * at the block's first visible key, so that a few short splits cover the window wherever it
 * lies (the planner sizes them for the window's keys: src/plan.c, visible_span). */
typedef struct {
    fa_seq s;
    ulong q0, split;
    ulong kv_begin, kv_end;
} fa_work;

FCL_INLINE fa_work fa_locate(const fa_params *p, const fa_io *io, ulong g, ulong block_q,
                             ulong heads_step)
{
    fa_work w;
    const ulong head_steps = p->heads_q / heads_step, heads_total = (ulong)p->batch * head_steps;
    const ulong bh = (g / p->q_tiles) % heads_total;
    w.q0 = (g % p->q_tiles) * block_q;
    w.split = g / (p->q_tiles * heads_total);
    w.s = fa_sequence(p, io, bh / head_steps, (bh % head_steps) * heads_step);
    if (w.q0 >= w.s.len_q) {
        w.kv_begin = w.kv_end = 0; /* no query of the block exists: nothing to visit */
        return w;
    }
    const long first_q = (long)w.q0, last_q = (long)min(w.q0 + block_q, w.s.len_q) - 1;
    /* (the window's first key is where its splits start, so that only the end is cut) */
    const long base = (p->flags & FA_FLAG_WINDOW)
                          ? max(fa_query_pos(p, &w.s, (ulong)first_q) - (long)p->window_left, 0L)
                          : 0L;
    w.kv_begin = (ulong)base + w.split * p->split_len;
    long hi = (long)min(w.s.len_kv, w.kv_begin + p->split_len) - 1;
    if (p->flags & FA_FLAG_CAUSAL)
        hi = min(hi, last_q + w.s.causal_offset);
    if (p->flags & FA_FLAG_WINDOW)
        hi = min(hi, fa_query_pos(p, &w.s, (ulong)last_q) + (long)p->window_right);
    w.kv_end = hi < (long)w.kv_begin ? w.kv_begin : (ulong)hi + 1;
    return w;
}

/* The keys query qi may see, [x, y] (x > y: none): within the block's range, and where
 * causality and the window allow. Constant over a kernel's walk through the keys. */
FCL_INLINE int2 fa_visible_keys(const fa_params *p, const fa_work *w, ulong qi)
{
    const int2 none = (int2)(1, 0);
    if (qi >= w->s.len_q || w->kv_begin >= w->kv_end)
        return none;
    const long pos = fa_query_pos(p, &w->s, qi); /* p(i) */
    long lo = (long)w->kv_begin, hi = (long)w->kv_end - 1;
    if (p->flags & FA_FLAG_CAUSAL)
        hi = min(hi, (long)qi + w->s.causal_offset);
    if (p->flags & FA_FLAG_WINDOW) {
        hi = min(hi, pos + (long)p->window_right);
        lo = max(lo, pos - (long)p->window_left);
    }
    return hi < lo ? none : (int2)((int)lo, (int)hi);
}


/* softcap * tanh(x) as cap - 2 cap / (e^2x + 1): an exp2, an add and a division, where
 * tanh or expm1 take a polynomial and branches (on the H100 the softcap build ran 4-5%
 * faster for it). Near 0 the result is accurate to a few ulp of cap rather than of itself: a
 * score error below 1e-6 cap, as the dot product's own rounding. e^2x = inf gives cap,
 * 0 gives -cap, and NaN stays NaN. */
FCL_INLINE float fa_softcap(float cap, float x)
{
    return cap - 2.0f * cap / (exp2(x * (2.0f * M_LOG2E_F)) + 1.0f);
}

/* exp(x - m) for a score x under a row max m that is not -inf (a row whose max is -inf
 * passes 0, so that its -inf scores give 0, not NaN): exp2 of a scaled difference is the
 * hardware instruction on GPUs, where exp adds a range reduction (with the tile kernel's
 * per-tile visibility check, prefill ran 5-7% faster on the H100). x = -inf gives 0 and NaN
 * stays NaN. */
FCL_INLINE float fa_exp_under(float x, float m)
{
    return exp2((x - m) * M_LOG2E_F);
}

#define FA_SCORE_MODIFIERS                                                                     \
    (FA_FLAG_SOFTCAP | FA_FLAG_ALIBI | FA_FLAG_MASK_ADD | FA_FLAG_MASK_ADD_F16 | FA_FLAG_MASK_BOOL)

#define FA_MASKS (FA_FLAG_MASK_ADD | FA_FLAG_MASK_ADD_F16 | FA_FLAG_MASK_BOOL)

/* ALiBi's |p(i) - j| in 32 bits: below L_q + L_kv <= 2^31 - 1 (the host's limit with ALiBi).
 * 64-bit arithmetic and conversion here cost NVIDIA's compiler 14 registers and the H100 9%
 * of the prefill time. i: fa_query_index's, which the callers whose rows may be heads take,
 * so that the tensor-core prefill pays no test a score for it. */
FCL_INLINE float fa_alibi_distance(const fa_work *w, ulong i, ulong kj)
{
    return (float)abs((int)((uint)i + (uint)w->s.pos_offset - (uint)kj));
}

/* s with the mask entry of (qi, kj) applied: -inf where a boolean mask hides the key; a -inf
 * entry hides it whatever the slope. Read only where visible (elsewhere it may lie outside
 * the mask). */
FCL_INLINE float fa_masked(const fa_params *p, const fa_io *io, const fa_work *w, float s, ulong qi,
                           ulong kj, float slope, int visible)
{
    if (!visible)
        return s;
    const ulong at = w->s.b * p->mask_batch + w->s.h * p->mask_head + qi * p->mask_q + kj;
    if (p->flags & FA_FLAG_MASK_BOOL)
        return ((__global const uchar *)io->mask)[at] ? s : -INFINITY;
    const float add = (p->flags & FA_FLAG_MASK_ADD_F16) ? vload_half(at, (__global const half *)io->mask)
                                                         : ((__global const float *)io->mask)[at];
    return s + ((p->flags & FA_FLAG_ALIBI_MASK) && add != -INFINITY ? slope * add : add);
}

/* A score from dot = q_scale * q.k, in the contract's order: softcap, ALiBi, the mask. */
FCL_INLINE float fa_modified_score(const fa_params *p, const fa_io *io, const fa_work *w, float s, ulong qi,
                        ulong kj, int visible)
{
    if (p->flags & FA_FLAG_SOFTCAP)
        s = fa_softcap(p->softcap, s);
    const float slope = fa_slope(p, io, &w->s, qi);
    if (p->flags & FA_FLAG_ALIBI)
        s -= slope * fa_alibi_distance(w, fa_query_index(p, qi), kj);
    if (p->flags & FA_MASKS)
        s = fa_masked(p, io, w, s, qi, kj, slope, visible);
    return s;
}

/* Whether key kj lies outside a query's visible keys vis (fa_visible_keys). */
int fa_hidden(int2 vis, ulong kj) { return (long)kj < vis.x || (long)kj > vis.y; }

/* The score of query qi (whose visible keys are vis) and key kj: -inf where hidden. */
FCL_INLINE float fa_score(const fa_params *p, const fa_io *io, const fa_work *w, int2 vis, float dot,
               ulong qi, ulong kj)
{
    const int visible = !fa_hidden(vis, kj);
    if (p->flags & FA_SCORE_MODIFIERS)
        dot = fa_modified_score(p, io, w, dot, qi, kj, visible);
    return visible ? dot : -INFINITY;
}

/* The output scale and lse of a row from its final (m, l), the sink joining the
 * denominator: out = o * inv_d. A row with no visible key gives 0 and lse = sink (-inf
 * without sinks), never NaN. */
FCL_INLINE fcl_row_norm fa_row_norm(const fa_params *p, const fa_io *io, const fa_seq *s, ulong qi,
                                     float m, float l)
{
    if (!(p->flags & FA_FLAG_SINKS))
        return fcl_row_norm_from((float2)(m, l));
    const float sink = io->sinks[fa_query_head(p, s, qi)];
    const float2 with_sink = fcl_stat_merge((float2)(m, l), fcl_sink_state(sink));
    fcl_row_norm n = fcl_row_norm_from(with_sink);
    n.inv_d *= m == -INFINITY ? 0.0f : exp(m - with_sink.x); /* o was summed under max m */
    return n;
}

/* dst[0, n) = src[at, at + n) converted to float, dst[n, cap) = 0: the storage type is
 * decided once per row, so each copy loop is plain (and vectorised by CPU compilers). */
void fa_load_row(__private float *dst, __global const void *src, uint dtype, ulong at, uint n,
                 uint cap)
{
    if (dtype == FCL_DTYPE_F32) {
        __global const float *x = (__global const float *)src + at;
        for (uint d = 0; d < n; d++)
            dst[d] = x[d];
    } else if (dtype == FCL_DTYPE_F16) {
        for (uint d = 0; d < n; d++)
            dst[d] = vload_half(at + d, (__global const half *)src);
    } else {
        __global const ushort *x = (__global const ushort *)src + at;
        for (uint d = 0; d < n; d++)
            dst[d] = as_float((uint)x[d] << 16);
    }
    for (uint d = n; d < cap; d++)
        dst[d] = 0.0f;
}

/* fa_load_row for K's (v = 0) or V's (v = 1) row at place `at` of a FA_FLAG_KV call: the
 * format is decided once per row, each copy loop decodes one format. */
#define FA_KV_ROW_CASE(NAME, name, value, dtype, elems, bytes, roles)                          \
    case value:                                                                                \
        for (uint d = 0; d < n; d++)                                                           \
            dst[d] = FCL_CAT(fcl_kv_decode, name)(src, row, d) * scale;                        \
        break;
/* ggml rows a block at a time: d (and m) times the scale once for its 32 values (the value
 * decoders read them for each value and scale each product: the same values but the
 * product's rounding where the scale is not 1); n a multiple of 32, as block formats' head
 * dims are. */
FCL_INLINE void fa_load_q8_0_row(__private float *dst, __global const uchar *b, uint n, float scale)
{
    for (uint d0 = 0; d0 < n; d0 += 32, b += 34) {
        const float f = fcl_block_half(b, 0) * scale;
        for (uint e = 0; e < 32; e++)
            dst[d0 + e] = f * (float)((__global const char *)b)[2 + e];
    }
}
/* ... the 4- and 5-bit blocks (format a constant of each call site, so that each inlined copy
 * keeps one plain loop): value e < 16 from byte e's low nibble, e + 16 from its high one, each
 * with its fifth bit from the block's little-endian uint32 qh (q5_x; 2-byte aligned: read by
 * bytes); d (code - centre) + m where there is no m, d code + m where there is, or iq4_nl's
 * table value times d. */
FCL_INLINE void fa_load_nibble_row(__private float *dst, __global const uchar *b, uint n,
                                   float scale, uint format)
{
    const fcl_nibble_layout l = fcl_nibble_layout_of(format);
    const int has_m = l.has_m, bias = l.has_m ? 0 : (int)l.centre;
    for (uint d0 = 0; d0 < n; d0 += 32, b += l.bytes) {
        const float f = fcl_block_half(b, 0) * scale;
        const float m = has_m ? fcl_block_half(b, 2) * scale : 0.0f;
        const uint qh = l.qh ? b[l.qh] | (uint)b[l.qh + 1] << 8 | (uint)b[l.qh + 2] << 16 |
                                   (uint)b[l.qh + 3] << 24
                             : 0u;
        for (uint e = 0; e < 16; e++) {
            const uint q = b[l.qs + e];
            const uint lo = (q & 15u) | ((qh >> e) & 1u) << 4;
            const uint hi = (q >> 4) | ((qh >> (e + 16)) & 1u) << 4;
            if (format == FCL_KV_IQ4_NL) {
                dst[d0 + e] = f * fcl_iq4_nl_values[lo];
                dst[d0 + 16 + e] = f * fcl_iq4_nl_values[hi];
            } else if (has_m) { /* signed conversions: AVX2 has no unsigned one */
                dst[d0 + e] = fma(f, (float)(int)lo, m);
                dst[d0 + 16 + e] = fma(f, (float)(int)hi, m);
            } else { /* no fma with 0: its sum would not fold away (-0 + 0) */
                dst[d0 + e] = f * (float)((int)lo - bias);
                dst[d0 + 16 + e] = f * (float)((int)hi - bias);
            }
        }
    }
}

FCL_INLINE void fa_load_kv_row(__private float *dst, const fa_params *p, const fa_io *io,
                               const fa_seq *s, int v, fa_place at, uint n, uint cap)
{
    __global const uchar *src = v ? io->v : io->k;
    const ulong row = fa_row_at(v ? &s->v : &s->k, at);
    const float scale = n ? fa_kv_row_scale(p, io, s, v, at) : 0.0f;
    const uint format = v ? p->format_v : p->format_k;
    /* a call for each nibble format: each inlined with its format a constant */
    if (format == FCL_KV_Q8_0)
        fa_load_q8_0_row(dst, src + row, n, scale);
    else if (format == FCL_KV_Q4_0)
        fa_load_nibble_row(dst, src + row, n, scale, FCL_KV_Q4_0);
    else if (format == FCL_KV_Q4_1)
        fa_load_nibble_row(dst, src + row, n, scale, FCL_KV_Q4_1);
    else if (format == FCL_KV_Q5_0)
        fa_load_nibble_row(dst, src + row, n, scale, FCL_KV_Q5_0);
    else if (format == FCL_KV_Q5_1)
        fa_load_nibble_row(dst, src + row, n, scale, FCL_KV_Q5_1);
    else if (format == FCL_KV_IQ4_NL)
        fa_load_nibble_row(dst, src + row, n, scale, FCL_KV_IQ4_NL);
    else switch (format) {
    FCL_KV_FORMATS(FA_KV_ROW_CASE)
    default:
        for (uint d = 0; d < n; d++)
            dst[d] = NAN;
    }
    for (uint d = n; d < cap; d++)
        dst[d] = 0.0f;
}
#undef FA_KV_ROW_CASE

/* Where a finished query row goes: with split-KV its unnormalised (o, m, l) into the
 * partials, else o * inv_d into out and its lse (inside their buffers: fa_sequence cut packed
 * sequences to the rows that fit, and lse past lse_limit is not written). fa_finish_row
 * writes the statistics (where writes_stats: one work-item of the row) and says where the
 * row's elements go; fa_store writes one. */
typedef struct {
    int partial; /* write o unnormalised to partial_o[at + d] */
    ulong at;
    float scale; /* inv_d */
} fa_dest;

FCL_INLINE fa_dest fa_finish_row(const fa_params *p, const fa_io *io, const fa_work *w, ulong qi, float m,
                      float l, int writes_stats)
{
    fa_dest dst;
    const ulong row = (w->s.b * p->heads_q + w->s.h) * p->len_q + qi; /* of the partials */
    dst.partial = (p->flags & FA_FLAG_PARTIAL) != 0;
    dst.scale = 1.0f;
    if (dst.partial) {
        const ulong slot = row * p->splits + w->split;
        dst.at = slot * p->head_dim_v;
        if (writes_stats)
            io->partial_ml[slot] = (float2)(m, l);
        return dst;
    }
    const fcl_row_norm n = fa_row_norm(p, io, &w->s, qi, m, l);
    const fa_rows o = fa_out_rows(p, &w->s);
    dst.at = fa_row(p, io, &o, qi);
    dst.scale = n.inv_d;
    /* lse is [batch][heads][len_q], or [heads][total] for packed queries (FlashAttention-2). */
    ulong lse_at = row;
    if (p->flags & FA_FLAG_CU_Q)
        lse_at = w->s.h * (ulong)max(io->cu_seqlens_q[p->batch], 0) + w->s.q_start + qi;
    if (writes_stats && (p->flags & FA_FLAG_LSE) && lse_at < p->lse_limit)
        io->lse[lse_at] = n.lse;
    return dst;
}

/* Element d of a finished row, o its unnormalised accumulator value. */
FCL_INLINE void fa_store(const fa_params *p, const fa_io *io, fa_dest dst, ulong d, float o)
{
    if (dst.partial)
        io->partial_o[dst.at + d] = o;
    else
        fcl_store_any(io->out, p->dtype_o, dst.at + d, o * dst.scale);
}

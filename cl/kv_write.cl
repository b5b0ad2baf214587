/* fcl_kv_write: new tokens' K and V rows encoded into a cache of any format (the v0.3
 * contract), one work-item a row of one token and kv head. Needs common.cl and
 * kv_write_args.h. The ggml formats are ports of ggml's reference quantizers
 * (quantize_row_*_ref): float32 operations each rounded on its own (no contraction into
 * FMAs, divisions correctly rounded by kw_div), so that the bytes are ggml's exactly. */
#pragma OPENCL FP_CONTRACT OFF

#define KW_DEV_U32 uint
#define KW_DEV_U64 ulong
#define KW_DEV_F32 float
#define KW_DEV_IN __global const void *
#define KW_DEV_OUT __global uchar *
#define KW_DEV_I32_IN __global const int *
#define KW_DEV_F32_OUT __global float *
#define KW_ARG(kind, name) KW_DEV_##kind name,
#define KW_LAST(kind, name) KW_DEV_##kind name

#define KW_SCALE_TENSOR 1u
#define KW_SCALE_HEAD 2u
#define KW_SCALE_TOKEN 3u

/* a / b rounded correctly (the contract's y = x / scale, and ggml's divisions, which a
 * host's IEEE division rounds correctly): OpenCL's division may be off by 2.5 ulp where the
 * program is not built with -cl-fp32-correctly-rounded-divide-sqrt (the device does not
 * offer it: Mesa's llvmpipe). A Newton step makes the quotient faithful; of it and its
 * neighbour toward a / b, the one whose exact remainder (an FMA) is smaller is the correctly
 * rounded one (a quotient of floats is never a tie). Exact for normal quotients. */
float kw_div(float a, float b)
{
    float q = a / b;
    if (!isnormal(q))
        return q; /* 0, subnormal (where a device may flush), inf or NaN: as divided */
    q = fma(fma(-q, b, a), 1.0f / b, q);
    const float r = fma(-q, b, a);
    if (r == 0.0f)
        return q;
    const float other = nextafter(q, (r > 0.0f) == (b > 0.0f) ? INFINITY : -INFINITY);
    return fabs(fma(-other, b, a)) < fabs(r) ? other : q;
}

/* ---- ggml's reference quantizers, one block of 32 values y ---- */

void kw_put_half(__global uchar *at, float v) { vstore_half_rte(v, 0, (__global half *)at); }

void kw_q8_0(__global uchar *blk, const float *y)
{
    float amax = 0.0f;
    for (uint j = 0; j < 32; j++)
        amax = fmax(amax, fabs(y[j]));
    const float d = kw_div(amax, 127.0f);
    const float id = d != 0.0f ? kw_div(1.0f, d) : 0.0f;
    kw_put_half(blk, d);
    for (uint j = 0; j < 32; j++)
        blk[2 + j] = (uchar)(char)round(y[j] * id);
}

/* q4_0 (bits 4) and q5_0 (bits 5): d from the value of largest magnitude (the first such),
 * codes of y / d + 8.5 (16.5) cut toward zero, at most 15 (31). */
void kw_q_0(__global uchar *blk, const float *y, uint bits)
{
    float amax = 0.0f, max = 0.0f;
    for (uint j = 0; j < 32; j++)
        if (amax < fabs(y[j])) {
            amax = fabs(y[j]);
            max = y[j];
        }
    const float d = max * (bits == 4 ? -0.125f : -0.0625f); /* max / -8: exact scaling */
    const float id = d != 0.0f ? kw_div(1.0f, d) : 0.0f;
    const float offset = bits == 4 ? 8.5f : 16.5f;
    const int top = bits == 4 ? 15 : 31;
    __global uchar *qs = blk + (bits == 4 ? 2 : 6);
    uint qh = 0;
    kw_put_half(blk, d);
    for (uint j = 0; j < 16; j++) {
        const uint x0 = (uint)min(top, (int)(char)(y[j] * id + offset));
        const uint x1 = (uint)min(top, (int)(char)(y[16 + j] * id + offset));
        qs[j] = (uchar)((x0 & 15u) | (x1 & 15u) << 4);
        qh |= (x0 >> 4 & 1u) << j | (x1 >> 4 & 1u) << (j + 16);
    }
    for (uint i = 0; bits == 5 && i < 4; i++)
        blk[2 + i] = (uchar)(qh >> (8 * i));
}

/* q4_1 and q5_1: d = (max - min) / 15 (31), m = min, codes of (y - min) / d + 0.5. */
void kw_q_1(__global uchar *blk, const float *y, uint bits)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (uint j = 0; j < 32; j++) {
        lo = y[j] < lo ? y[j] : lo;
        hi = y[j] > hi ? y[j] : hi;
    }
    const float d = kw_div(hi - lo, bits == 4 ? 15.0f : 31.0f);
    const float id = d != 0.0f ? kw_div(1.0f, d) : 0.0f;
    __global uchar *qs = blk + (bits == 4 ? 4 : 8);
    uint qh = 0;
    kw_put_half(blk, d);
    kw_put_half(blk + 2, lo);
    for (uint j = 0; j < 16; j++) {
        const float x0 = (y[j] - lo) * id + 0.5f, x1 = (y[16 + j] - lo) * id + 0.5f;
        const uint c0 = bits == 4 ? (uint)min(15, (int)(char)x0) : (uint)(uchar)x0;
        const uint c1 = bits == 4 ? (uint)min(15, (int)(char)x1) : (uint)(uchar)x1;
        qs[j] = (uchar)((c0 & 15u) | (c1 & 15u) << 4);
        qh |= (c0 >> 4 & 1u) << j | (c1 >> 4 & 1u) << (j + 16);
    }
    for (uint i = 0; bits == 5 && i < 4; i++)
        blk[4 + i] = (uchar)(qh >> (8 * i));
}

/* ---- fp8 and int8 codes ---- */

/* y rounded to nearest even with man mantissa bits and exponent bias, saturated to max_code
 * (infinities too); NaN becomes nan_code. Subnormals below min_normal are steps of
 * min_normal / 2^man. */
uchar kw_fp8(float y, uint man, int bias, float min_normal, float steps, uint max_code,
             uint nan_code)
{
    const uint sign = (as_uint(y) >> 24) & 0x80u;
    if (isnan(y))
        return (uchar)(sign | nan_code);
    const float a = fabs(y);
    uint code;
    if (a < min_normal) {
        code = (uint)rint(a * steps); /* exact scaling by a power of two, then ties to even */
    } else {
        const uint shift = 23 - man;
        uint bits = as_uint(a);
        bits += (1u << (shift - 1)) - 1u + ((bits >> shift) & 1u); /* a carry moves the exponent */
        code = (uint)((int)(bits >> 23) - 127 + bias) << man | ((bits >> shift) & ((1u << man) - 1u));
    }
    return (uchar)(sign | min(code, max_code));
}

uchar kw_fp8_e4m3(float y) { return kw_fp8(y, 3, 7, 0x1p-6f, 0x1p9f, 0x7eu, 0x7fu); }
uchar kw_fp8_e5m2(float y) { return kw_fp8(y, 2, 15, 0x1p-14f, 0x1p16f, 0x7bu, 0x7eu); }
uchar kw_int8(float y) { return (uchar)(char)(isnan(y) ? 0.0f : clamp(rint(y), -127.0f, 127.0f)); }

/* The largest magnitude of a TOKEN-scaled format's codes: the row's scale is amax / it. */
float kw_top(uint format)
{
    return format == FCL_KV_INT8 ? 127.0f : format == FCL_KV_FP8_E4M3 ? 448.0f : 57344.0f;
}

/* values d0 to d0 + n - 1 (n: 32, or what is left of a row of a one-value format) of a row
 * of format starting at unit `row`. */
void kw_encode(__global uchar *dst, uint format, ulong row, uint d0, const float *y, uint n)
{
    const uint block = d0 / 32;
    switch (format) {
#define KW_FLOAT_CASE(NAME, name, value, dtype, elems, bytes, roles)                           \
    case value:                                                                                \
        for (uint i = 0; i < n; i++)                                                           \
            fcl_store_any(dst, dtype, row + d0 + i, y[i]);                                     \
        break;
    FCL_FLOAT_FORMATS(KW_FLOAT_CASE)
#undef KW_FLOAT_CASE
    case FCL_KV_Q8_0: kw_q8_0(dst + row + block * 34, y); break;
    case FCL_KV_Q4_0: kw_q_0(dst + row + block * 18, y, 4); break;
    case FCL_KV_Q5_0: kw_q_0(dst + row + block * 22, y, 5); break;
    case FCL_KV_Q4_1: kw_q_1(dst + row + block * 20, y, 4); break;
    case FCL_KV_Q5_1: kw_q_1(dst + row + block * 24, y, 5); break;
    case FCL_KV_FP8_E4M3:
        for (uint i = 0; i < n; i++)
            dst[row + d0 + i] = kw_fp8_e4m3(y[i]);
        break;
    case FCL_KV_FP8_E5M2:
        for (uint i = 0; i < n; i++)
            dst[row + d0 + i] = kw_fp8_e5m2(y[i]);
        break;
    case FCL_KV_INT8:
        for (uint i = 0; i < n; i++)
            dst[row + d0 + i] = kw_int8(y[i]);
        break;
    default: break; /* the host refuses what it cannot write */
    }
}

__kernel void kv_write(KW_ARGS(KW_ARG, KW_LAST))
{
    const ulong rows = 2 * tokens * heads_kv, capacity = page_size * num_pages;
    for (ulong g = get_global_id(0); g < rows; g += get_global_size(0)) {
        const int is_v = (int)(g % 2);
        const ulong t = g / 2 / heads_kv, h = g / 2 % heads_kv;
        const int slot = slots[t];
        if (slot < 0 || (ulong)slot >= capacity)
            continue; /* padding (negative), or a bad slot the device cannot report */
        const ulong page = (ulong)slot / page_size, pos = (ulong)slot % page_size;
        const uint format = is_v ? format_v : format_k, mode = is_v ? scale_mode_v : scale_mode_k;
        const uint dim = (uint)(is_v ? head_dim_v : head_dim);
        __global const void *src = is_v ? v_in : k_in;
        __global uchar *dst = is_v ? v : k;
        __global float *scales = is_v ? v_scales : k_scales;
        const ulong in_at = is_v ? v_in_offset + h * v_in_head + t * v_in_token
                                 : k_in_offset + h * k_in_head + t * k_in_token;
        const ulong out_at = is_v ? v_offset + page * v_page + h * v_head + pos * v_token
                                  : k_offset + page * k_page + h * k_head + pos * k_token;
        const ulong scale_at = is_v ? vs_offset + page * vs_page + h * vs_head + pos * vs_token
                                    : ks_offset + page * ks_page + h * ks_head + pos * ks_token;
        float scale = mode == KW_SCALE_TENSOR ? (is_v ? v_scale : k_scale)
                      : mode == KW_SCALE_HEAD ? scales[scale_at]
                                              : 1.0f;
        if (mode == KW_SCALE_TOKEN) {
            float amax = 0.0f;
            for (uint d = 0; d < dim; d++)
                amax = fmax(amax, fabs(fcl_load_any(src, dtype_in, in_at + d)));
            scale = kw_div(amax, kw_top(format));
            scales[scale_at] = scale;
        }
        for (uint d0 = 0; d0 < dim; d0 += 32) {
            float y[32];
            const uint n = min(32u, dim - d0);
            for (uint i = 0; i < n; i++) {
                const float x = fcl_load_any(src, dtype_in, in_at + d0 + i);
                y[i] = scale == 1.0f ? x : scale == 0.0f ? 0.0f : kw_div(x, scale);
            }
            kw_encode(dst, format, out_at, d0, y, n);
        }
    }
}

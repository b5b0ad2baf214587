/* Helpers shared by every flashcl kernel. OpenCL C 1.2, no extensions.
 *
 * The host prepends a prelude that defines:
 *   FCL_LWS  work-group size of the row kernels (a power of two)
 *   FCL_VEC  elements per vector in the row kernels: 4, 8 or 16
 *   FCL_BLOCK_ITEMS  elements each work-item of softmax_block holds (0: no softmax_block)
 *   FCL_FORCE_INLINE  1: helpers that take the kernels' structs are forced inline
 */
#ifndef FCL_LWS
#define FCL_LWS 64
#endif
#ifndef FCL_VEC
#define FCL_VEC 4
#endif
#ifndef FCL_BLOCK_ITEMS
#define FCL_BLOCK_ITEMS 0
#endif
#ifndef FCL_FORCE_INLINE
#define FCL_FORCE_INLINE 1
#endif

/* Helpers that take the kernels' structs are inlined where the compiler is clang (AMD,
 * POCL, Mesa): a struct whose address reaches an out-of-line call lives in scratch memory.
 * (NVIDIA's compiler inlines every function; the planner turns this off for Oclgrind.) */
#if defined(__clang__) && FCL_FORCE_INLINE
#define FCL_INLINE __attribute__((always_inline))
#else
#define FCL_INLINE
#endif

#define FCL_CAT_(a, b) a##_##b
#define FCL_CAT(a, b) FCL_CAT_(a, b)
#define FCL_PASTE_(a, b) a##b
#define FCL_PASTE(a, b) FCL_PASTE_(a, b)

/* Vector types and built-ins of width FCL_VEC: floatv is float4, float8 or float16. */
#define floatv FCL_PASTE(float, FCL_VEC)
#define uintv FCL_PASTE(uint, FCL_VEC)
#define ushortv FCL_PASTE(ushort, FCL_VEC)
#define FCL_VLOADN FCL_PASTE(vload, FCL_VEC)
#define FCL_VSTOREN FCL_PASTE(vstore, FCL_VEC)

/* ---- Storage types: every value is converted to float32 on load. ---- */
#define fcl_storage_f32 float
#define fcl_storage_f16 half /* a pointer target only: no cl_khr_fp16 needed */
#define fcl_storage_bf16 ushort
#define fcl_is_f32_f32 1 /* float32 storage holds intermediate results exactly */
#define fcl_is_f32_f16 0
#define fcl_is_f32_bf16 0

float fcl_load_f32(__global const float *p, ulong i) { return p[i]; }
float fcl_load_f16(__global const half *p, ulong i) { return vload_half(i, p); }
float fcl_load_bf16(__global const ushort *p, ulong i) { return as_float((uint)p[i] << 16); }

void fcl_store_f32(__global float *p, ulong i, float v) { p[i] = v; }
void fcl_store_f16(__global half *p, ulong i, float v) { vstore_half_rte(v, i, p); }
void fcl_store_bf16(__global ushort *p, ulong i, float v)
{
    uint u = as_uint(v);
    /* Round to nearest even; a NaN must stay a NaN (rounding could carry it to inf). */
    u = isnan(v) ? 0x7fc00000u : u + 0x7fffu + ((u >> 16) & 1u);
    p[i] = (ushort)(u >> 16);
}

/* The same, FCL_VEC elements at once (unaligned is fine: vloadn needs element alignment). */
floatv fcl_vload_f32(__global const float *p, ulong i) { return FCL_VLOADN(0, p + i); }
floatv fcl_vload_f16(__global const half *p, ulong i) { return FCL_PASTE(vload_half, FCL_VEC)(0, p + i); }
floatv fcl_vload_bf16(__global const ushort *p, ulong i)
{
    return FCL_PASTE(as_float, FCL_VEC)(FCL_PASTE(convert_uint, FCL_VEC)(FCL_VLOADN(0, p + i)) << 16);
}

void fcl_vstore_f32(__global float *p, ulong i, floatv v) { FCL_VSTOREN(v, 0, p + i); }
void fcl_vstore_f16(__global half *p, ulong i, floatv v)
{
    FCL_PASTE(FCL_PASTE(vstore_half, FCL_VEC), _rte)(v, 0, p + i);
}
void fcl_vstore_bf16(__global ushort *p, ulong i, floatv v)
{
    uintv u = FCL_PASTE(as_uint, FCL_VEC)(v);
    u = select(u + 0x7fffu + ((u >> 16) & 1u), (uintv)0x7fc00000u, isnan(v));
    FCL_VSTOREN(FCL_PASTE(convert_ushort, FCL_VEC)(u >> 16), 0, p + i);
}

/* a / b and a % b, in 32 bits when both fit: a 64-bit division is a long software routine
 * on GPUs. */
ulong fcl_div(ulong a, ulong b) { return (a | b) >> 32 ? a / b : (ulong)((uint)a / (uint)b); }
ulong fcl_mod(ulong a, ulong b) { return (a | b) >> 32 ? a % b : (ulong)((uint)a % (uint)b); }

/* Horizontal max (ignoring NaN, like fmax) and sum of a vector. */
float fcl_hmax(floatv v)
{
#if FCL_VEC == 16
    float8 v8 = fmax(v.lo, v.hi);
#elif FCL_VEC == 8
    float8 v8 = v;
#endif
#if FCL_VEC >= 8
    float4 v4 = fmax(v8.lo, v8.hi);
#else
    float4 v4 = v;
#endif
    float2 v2 = fmax(v4.lo, v4.hi);
    return fmax(v2.x, v2.y);
}

float fcl_hsum(floatv v)
{
#if FCL_VEC == 16
    float8 v8 = v.lo + v.hi;
#elif FCL_VEC == 8
    float8 v8 = v;
#endif
#if FCL_VEC >= 8
    float4 v4 = v8.lo + v8.hi;
#else
    float4 v4 = v;
#endif
    float2 v2 = v4.lo + v4.hi;
    return v2.x + v2.y;
}

/* ---- Online softmax statistics (docs/ALGORITHMS.md section 2) ----
 * A state is (m, d): m the running max, d the sum of exp(x - m) over what was seen.
 * m never becomes NaN (comparisons with NaN are false); a NaN travels in d instead. */

/* Kahan-compensated accumulation: one work-item may add millions of terms. */
void fcl_kahan_add(float *sum, float *comp, float term)
{
    float y = term - *comp;
    float t = *sum + y;
    *comp = (t - *sum) - y;
    *sum = t;
}

/* Adds one score x to a work-item's running state (m, d, comp). */
void fcl_stat_add(float *m, float *d, float *comp, float x)
{
    if (x > *m) {
        float r = exp(*m - x); /* the classic rescale when the max grows */
        *d *= r;
        *comp *= r;
        *m = x;
        fcl_kahan_add(d, comp, 1.0f);
    } else if (x != -INFINITY) { /* exp(-inf - -inf) would be NaN; its share is 0 */
        fcl_kahan_add(d, comp, exp(x - *m));
    }
}

/* The same for FCL_VEC scores at once, with per-lane sums (dv) and compensations (cv)
 * under one shared max m: the exps are one vector call, and the lanes are only added
 * up once per row (fcl_stat_lanes). The max is searched only when a lane exceeds it. */
void fcl_kahan_add_vec(floatv *sum, floatv *comp, floatv term)
{
    floatv y = term - *comp;
    floatv t = *sum + y;
    *comp = (t - *sum) - y;
    *sum = t;
}

void fcl_stat_add_vec(float *m, floatv *dv, floatv *cv, floatv x)
{
    if (any(isgreater(x, (floatv)(*m)))) {
        float vmax = fcl_hmax(x);
        float r = exp(*m - vmax);
        *dv *= r;
        *cv *= r;
        *m = vmax;
    }
    /* -inf lanes contribute 0 (exp(-inf - -inf) would be NaN); NaN lanes stay NaN. */
    fcl_kahan_add_vec(dv, cv, select(exp(x - *m), (floatv)0.0f, x == (floatv)(-INFINITY)));
}

/* A work-item's state from its scalar part (m, d, comp) and its lanes (dv, cv). */
float2 fcl_stat_lanes(float m, float d, float comp, floatv dv, floatv cv)
{
    return (float2)(m, (d - comp) + fcl_hsum(dv - cv));
}

/* Merges two states (any split of a row, any order). */
float2 fcl_stat_merge(float2 a, float2 b)
{
    float m = fmax(a.x, b.x);
    if (m == -INFINITY)
        return (float2)(m, a.y + b.y); /* both empty; a + b keeps a NaN */
    return (float2)(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}

/* Merges the states within each segment of `lanes` neighbouring work-items (a power of two
 * dividing FCL_LWS); every work-item gets its segment's result. The first barrier also
 * fences global memory: what the group read before it is not yet overwritten (softmax_block
 * lets its spare work-items read another work-item's row, written after this). */
float2 fcl_stat_reduce_lanes(float2 s, uint lanes, __local float2 *scratch)
{
    const uint lid = get_local_id(0), lane = lid & (lanes - 1);
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    for (uint half_size = lanes / 2; half_size > 0; half_size >>= 1) {
        if (lane < half_size)
            scratch[lid] = fcl_stat_merge(scratch[lid], scratch[lid + half_size]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float2 r = scratch[lid - lane];
    barrier(CLK_LOCAL_MEM_FENCE); /* scratch is reused by the caller's next reduction */
    return r;
}

/* Merges the states of all work-items; every work-item gets the result. */
float2 fcl_stat_reduce(float2 s, __local float2 *scratch)
{
    return fcl_stat_reduce_lanes(s, FCL_LWS, scratch);
}

/* What the output pass needs from a row's final state (m, d). */
typedef struct {
    float shift; /* subtracted from each score: m, or 0 for an empty row */
    float inv_d; /* 1/d, or 0 for an empty row so that exp(-inf) * 0 = 0 */
    float log_d;
    float lse;
    int empty; /* every score was -inf */
} fcl_row_norm;

fcl_row_norm fcl_row_norm_from(float2 st)
{
    fcl_row_norm n;
    float m = st.x, d = st.y;
    if (m == INFINITY)
        d = NAN; /* inf - inf: the share of a +inf score is undefined, as in IEEE */
    n.empty = (d == 0.0f);
    n.shift = n.empty ? 0.0f : m;
    n.inv_d = n.empty ? 0.0f : 1.0f / d;
    n.log_d = log(d);
    n.lse = n.empty ? -INFINITY : m + n.log_d;
    return n;
}

/* The state of an attention sink, one extra logit in a row's denominator: -inf adds nothing,
 * and a NaN sink must make the row NaN (fmax would drop it as a max). */
float2 fcl_sink_state(float sink)
{
    if (isnan(sink))
        return (float2)(-INFINITY, NAN);
    return (float2)(sink, sink == -INFINITY ? 0.0f : 1.0f);
}

/* ---- Storage type chosen at run time (attention: q, kv and out types are independent;
 * loads and stores happen once per tile element, outside the inner loops). The cases come
 * from the format table (kv_formats.h, ahead of this file): an unknown type loads as NaN and
 * stores nothing. ---- */
#define FCL_DTYPE_F32 0u
#define FCL_DTYPE_F16 1u
#define FCL_DTYPE_BF16 2u

/* The formats' values (fcl_kv_format): FCL_KV_F32, FCL_KV_Q8_0, ... */
#define FCL_KV_FORMAT_ENUM(NAME, name, value, dtype, elems, bytes, roles) FCL_KV_##NAME = value,
enum { FCL_KV_FORMATS(FCL_KV_FORMAT_ENUM) };
#undef FCL_KV_FORMAT_ENUM

#define FCL_LOAD_CASE(NAME, name, value, dtype, elems, bytes, roles)                           \
    case dtype: return FCL_CAT(fcl_load, name)((__global const fcl_storage_##name *)p, i);
float fcl_load_any(__global const void *p, uint dtype, ulong i)
{
    switch (dtype) {
    FCL_FLOAT_FORMATS(FCL_LOAD_CASE)
    default: return NAN;
    }
}
#undef FCL_LOAD_CASE

#define FCL_STORE_CASE(NAME, name, value, dtype, elems, bytes, roles)                          \
    case dtype: FCL_CAT(fcl_store, name)((__global fcl_storage_##name *)p, i, v); break;
void fcl_store_any(__global void *p, uint dtype, ulong i, float v)
{
    switch (dtype) {
    FCL_FLOAT_FORMATS(FCL_STORE_CASE)
    default: break;
    }
}
#undef FCL_STORE_CASE

"""flashcl's calls on numpy arrays and PyOpenCL arrays, with FlashAttention-2's names,
arguments and semantics (flash_attn_interface.py): inputs are read where they lie (any strides
with the last axis contiguous), outputs are new arrays of q's type, and the C library checks
every argument before it touches the device. Each call resolves its arguments into one
descriptor and a set of named buffers, which _run_attention hands to the host call (numpy)
or enqueues on the arrays' queue (PyOpenCL)."""
import ctypes
import math
import threading

import numpy as np

from . import _lib
from ._lib import lib


class Error(RuntimeError):
    """A device or driver failure (the C library's status other than an invalid argument)."""


def _dtype_code(dtype):
    if dtype == np.float32:
        return _lib.DTYPE_F32
    if dtype == np.float16:
        return _lib.DTYPE_F16
    if dtype.name == "bfloat16":  # ml_dtypes' bfloat16, the upper half of a float32
        return _lib.DTYPE_BF16
    raise TypeError(f"flashcl: arrays of {dtype} are not supported (float32, float16, bfloat16)")


def _created(create):
    """The context handle create(&handle) makes, or Error with the library's sentence."""
    handle = ctypes.c_void_p()
    status = create(ctypes.byref(handle))
    if status != _lib.SUCCESS:
        raise Error(f"flashcl: {lib.fcl_status_string(status).decode()}: "
                    f"{(lib.fcl_context_last_error(None) or b'').decode()}")
    return handle


class Context:
    """A flashcl context on one OpenCL device: device as FLASHCL_DEVICE takes it ("gpu",
    "cpu", "P:D", part of a name; None: FLASHCL_DEVICE, else the first GPU, else the CPU).
    May be used from several threads at once."""

    def __init__(self, device=None, cache_dir=None, tuning=None):
        self._handle = None
        opts = _lib.ContextOptions(device.encode() if device else None,
                                   cache_dir.encode() if cache_dir is not None else None,
                                   tuning.encode() if tuning is not None else None)
        self._handle = _created(lambda out: lib.fcl_context_create(ctypes.byref(opts), out))

    def close(self):
        if self._handle:
            lib.fcl_context_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def info(self):
        """What flashcl probed on the device and planned from it: fcl_device_info's fields
        (flashcl.h) as a dict (its device type the OpenCL bitfield)."""
        out = _lib.DeviceInfo()
        self._check(lib.fcl_context_device_info(self._handle, ctypes.byref(out)))
        return _lib.as_dict(out)

    def _check(self, status):
        if status == _lib.SUCCESS:
            return
        why = (lib.fcl_context_last_error(self._handle) or b"").decode()
        if status == _lib.ERROR_INVALID_ARGUMENT:
            raise ValueError(f"flashcl: {why}")
        raise Error(f"flashcl: {lib.fcl_status_string(status).decode()}: {why}")


def probe(device=None):
    """Context(device).info(): what flashcl-probe reports of a device, as a dict."""
    ctx = Context(device)
    try:
        return ctx.info()
    finally:
        ctx.close()


def devices():
    """Every OpenCL device, as flashcl numbers them: a list of dicts with "device" (the "P:D"
    string Context and FLASHCL_DEVICE take), "platform", "name" and "type" ("gpu", "cpu",
    "accelerator" or "other")."""
    cl = _lib.opencl()
    count = ctypes.c_uint()
    if cl.clGetPlatformIDs(0, None, ctypes.byref(count)) != 0:
        return []  # no platform (the loader's -1001) or none installed
    platforms = (ctypes.c_void_p * count.value)()
    cl.clGetPlatformIDs(count.value, platforms, None)

    def text(fn, obj, param):
        size = ctypes.c_size_t()
        fn(obj, param, 0, None, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        fn(obj, param, size.value, buf, None)
        return buf.value.decode(errors="replace").strip()

    found = []
    for p, platform in enumerate(platforms):
        n = ctypes.c_uint()
        if cl.clGetDeviceIDs(platform, 0xFFFFFFFF, 0, None, ctypes.byref(n)) != 0:
            continue  # CL_DEVICE_TYPE_ALL; a platform without devices answers an error
        ids = (ctypes.c_void_p * n.value)()
        cl.clGetDeviceIDs(platform, 0xFFFFFFFF, n.value, ids, None)
        for d, device in enumerate(ids):
            kind = ctypes.c_uint64()
            cl.clGetDeviceInfo(device, 0x1000, ctypes.sizeof(kind), ctypes.byref(kind), None)
            found.append({"device": f"{p}:{d}", "platform": text(cl.clGetPlatformInfo, platform, 0x0902),
                          "name": text(cl.clGetDeviceInfo, device, 0x102B),
                          "type": {4: "gpu", 2: "cpu", 8: "accelerator"}.get(kind.value & 14, "other")})
    return found


_default = None
_default_lock = threading.Lock()
_queue_contexts = {}  # a PyOpenCL queue's int_ptr: (the queue, the Context wrapping it)


def _on_device(a):
    """Whether a is a PyOpenCL array (whose buffer the calls read in place)."""
    return type(a).__module__.startswith("pyopencl") and hasattr(a, "base_data")


def _queue_context(queue):
    """The Context that wraps a PyOpenCL queue (its context, device and queue; flashcl retains
    them and never releases the caller's), one per queue."""
    with _default_lock:
        if queue.int_ptr not in _queue_contexts:
            ctx = Context.__new__(Context)
            ctx._handle = _created(lambda out: lib.fcl_context_create_from_cl(
                ctypes.c_void_p(queue.context.int_ptr), ctypes.c_void_p(queue.device.int_ptr),
                ctypes.c_void_p(queue.int_ptr), None, out))
            _queue_contexts[queue.int_ptr] = (queue, ctx)
        return _queue_contexts[queue.int_ptr][1]


def default_context():
    """The process's context, created on first use (thread-safe)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Context()
        return _default


def _pointer(a):
    return None if a is None else ctypes.c_void_p(a.ctypes.data)


def _in_place(a):
    """Whether flashcl can read a where it lies: the last axis contiguous, the other strides
    non-negative multiples of the element size."""
    size = a.dtype.itemsize
    return a.strides[-1] == size and all(s >= 0 and s % size == 0 for s in a.strides)


def _strided(a, name, ndim):
    """a as an array flashcl reads in place (_in_place; else a contiguous copy, and a
    PyOpenCL array must be so already), of ndim axes."""
    device = _on_device(a)
    a = a if device else np.asarray(a)
    if a.ndim != ndim:
        raise ValueError(f"flashcl: {name} must have {ndim} dimensions, not {a.ndim} "
                         f"(shape {a.shape})")
    if device and not _in_place(a):
        raise ValueError(f"flashcl: {name}'s last axis must be contiguous (strides {a.strides})")
    # zero strides on every leading axis would mean the layout's to flashcl's views
    broadcast = all(s == 0 for s in a.strides[:-1]) and any(n > 1 for n in a.shape[:-1])
    if not device and (not _in_place(a) or broadcast):
        a = np.ascontiguousarray(a)
    return a


def _int32(a, name, length):
    a = np.ascontiguousarray(a, dtype=np.int32)
    if a.ndim != 1 or a.shape[0] != length:
        raise ValueError(f"flashcl: {name} must have shape ({length},), not {a.shape}")
    return a


def _view(a, axes):
    """The fcl_tensor_view of a (element strides; a PyOpenCL array's offset in its buffer):
    axes names (batch, token, head) axes."""
    size = a.dtype.itemsize
    s = [st // size for st in a.strides]
    v = _lib.TensorView(getattr(a, "offset", 0) // size, 0, 0, 0)
    batch, token, head = axes
    v.batch_stride = s[batch] if batch is not None else 0
    v.token_stride, v.head_stride = s[token], s[head]
    return v


def _scale(scale):
    """A scale as flashcl takes it, which reads 0 as "the default": a scale of 0 (every score
    0) is the smallest float32 above 0, whose scores are 0 in float32 but for the largest."""
    return float(scale) if scale != 0 else float(np.finfo(np.float32).smallest_subnormal)


def _window(desc, window_size):
    left, right = window_size
    if left < 0 and right < 0:
        return
    desc.window = 1
    desc.window_left = _lib.WINDOW_UNBOUNDED if left < 0 else int(left)
    desc.window_right = _lib.WINDOW_UNBOUNDED if right < 0 else int(right)


def _floats(bufs, name, a, shapes):
    """A float32 argument (alibi_slopes, sinks) into bufs, of one of shapes."""
    if a is None:
        return None
    a = np.ascontiguousarray(a.get() if _on_device(a) else a, dtype=np.float32)
    if a.shape not in shapes:
        raise ValueError(f"flashcl: {name} must have shape {' or '.join(map(str, shapes))}, "
                         f"not {a.shape}")
    bufs[name] = a
    return a


def _mask(desc, bufs, mask, shape):
    """A mask broadcastable to shape (batch, heads, q, k) into bufs, read in place: float32
    or float16 (additive; ggml's masks are float16) or bool (as uint8); its strides, 0 where
    broadcast."""
    if mask is None:
        return
    m = mask.get() if _on_device(mask) else np.asarray(mask)
    if m.dtype == np.bool_:
        m, desc.mask_type = m.view(np.uint8), _lib.MASK_BOOL_U8
    elif m.dtype == np.float16:
        desc.mask_type = _lib.MASK_ADD_F16
    else:
        m, desc.mask_type = m.astype(np.float32, copy=False), _lib.MASK_ADD_F32
    if m.ndim > 4 or any(n not in (1, want) for n, want in zip(m.shape[::-1], shape[::-1])) \
            or m.shape[-1] != shape[3]:
        raise ValueError(f"flashcl: mask of shape {m.shape} does not broadcast to {shape}")
    m = m.reshape((1,) * (4 - m.ndim) + m.shape)
    if not _in_place(m):
        m = np.ascontiguousarray(m)
    st = [0 if n == 1 else s // m.itemsize for n, s in zip(m.shape, m.strides)]
    desc.mask_stride_batch, desc.mask_stride_head, desc.mask_stride_q = st[0], st[1], st[2]
    bufs["mask"] = m


def _alibi(desc, bufs, alibi_slopes, batch, heads):
    slopes = _floats(bufs, "alibi_slopes", alibi_slopes, ((heads,), (batch, heads)))
    desc.alibi_slopes_batch_stride = heads if slopes is not None and slopes.ndim == 2 else 0


def _no_keys(out_shape, lse_shape, dtype, sinks, heads_axis):
    """What a call without queries or keys gives: out 0, lse -inf (the sink, with sinks)."""
    lse = np.full(lse_shape, -np.inf, dtype=np.float32)
    if sinks is not None and lse.size:
        shape = [1] * lse.ndim
        shape[heads_axis] = -1
        lse[...] = np.asarray(sinks, dtype=np.float32).reshape(shape)
    return np.zeros(out_shape, dtype=dtype), lse


def _run_attention(context, desc, bufs, out_shape, lse_shape, want_lse):
    """The attention call of desc over bufs (q, k, v and the rest by fcl_attention_io's
    names): on the host where q is a numpy array, else enqueued on q's queue after the inputs'
    events, with out and lse new arrays of that queue carrying the call's event. Returns
    (out, lse or None)."""
    q = bufs["q"]
    if not _on_device(q):
        ctx = context or default_context()
        out = np.empty(out_shape, dtype=q.dtype)
        lse = np.empty(lse_shape, dtype=np.float32) if want_lse else None
        io = _lib.AttentionHostIO(**{name: _pointer(a) for name, a in bufs.items()})
        io.out, io.lse = _pointer(out), _pointer(lse)
        ctx._check(lib.fcl_attention_run_host(ctx._handle, ctypes.byref(desc), ctypes.byref(io)))
        return out, lse
    import pyopencl.array as cla
    queue = q.queue
    ctx = context or _queue_context(queue)
    if not all(_on_device(bufs[n]) for n in ("k", "v")):
        raise TypeError("flashcl: q, k and v must all be numpy arrays or all PyOpenCL arrays")
    device = {n: a if _on_device(a) else cla.to_device(queue, a) for n, a in bufs.items()}
    out = cla.empty(queue, out_shape, q.dtype)
    lse = cla.empty(queue, lse_shape, np.float32) if want_lse else None
    io = _lib.AttentionIO(**{n: a.base_data.int_ptr for n, a in device.items()})
    io.out, io.lse = out.base_data.int_ptr, lse.base_data.int_ptr if want_lse else None
    _enqueue(ctx, lib.fcl_attention_run, desc, io, device.values(),
             (out, lse) if want_lse else (out,))
    return out, lse


def _enqueue(ctx, run, desc, io, inputs, outputs):
    """run (fcl_attention_run, fcl_softmax_run, fcl_kv_write) of desc and io, as
    _enqueue_call."""
    _enqueue_call(ctx, lambda n, wait, done: run(ctx._handle, ctypes.byref(desc),
                                                 ctypes.byref(io), n, wait, done),
                  inputs, outputs)


def _enqueue_call(ctx, call, inputs, outputs):
    """call(n_wait, wait, done), a flashcl call on ctx, enqueued after the inputs' events, its
    event added to the outputs' (PyOpenCL arrays)."""
    import pyopencl as cl
    waits = [e.int_ptr for a in inputs for e in a.events]
    wait_list = (ctypes.c_void_p * max(len(waits), 1))(*waits)
    done = ctypes.c_void_p()
    ctx._check(call(len(waits), wait_list if waits else None, ctypes.byref(done)))
    event = cl.Event.from_int_ptr(done.value, retain=False)
    for a in outputs:
        a.add_event(event)


def _common(desc, bufs, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
            coded=False):
    """What every attention call sets alike; coded: k and v are a coded cache's bytes (its
    format set by the caller; head dims then q's)."""
    if dropout_p != 0.0:
        raise ValueError("flashcl: dropout_p must be 0 (flashcl is for inference)")
    if k.dtype != v.dtype:
        raise TypeError(f"flashcl: k and v must have one dtype, not {k.dtype} and {v.dtype}")
    desc.dtype_q = desc.dtype_o = _dtype_code(q.dtype)
    desc.dtype_kv = desc.dtype_q if coded else _dtype_code(k.dtype)
    desc.head_dim, desc.head_dim_v = q.shape[-1], q.shape[-1] if coded else v.shape[-1]
    desc.heads_q, desc.heads_kv = q.shape[-2], k.shape[-2]
    desc.scale = _scale(1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else softmax_scale)
    desc.causal = _lib.CAUSAL_BOTTOM_RIGHT if causal else 0
    desc.layout = _lib.LAYOUT_BLHD
    desc.softcap = float(softcap)
    _window(desc, window_size)
    bufs.update(q=q, k=k, v=v)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, *, sinks=None, mask=None, context=None):
    """Attention over a batch of equal-length sequences, as FlashAttention-2's function.

    q: (batch, seqlen_q, nheads, headdim); k, v: (batch, seqlen_k, nheads_k, headdim[_v]),
    nheads a multiple of nheads_k (MQA, GQA); float32, float16 or bfloat16 (ml_dtypes).
    causal and window_size (left, right; -1: unbounded) are aligned to the bottom right of
    the score matrix; softcap > 0 caps the scores (softcap * tanh(s / softcap));
    alibi_slopes (nheads,) or (batch, nheads) float32 subtract slope * |i + seqlen_k -
    seqlen_q - j|. Beyond FlashAttention: sinks (nheads,) float32, one extra logit per head
    in the denominator (gpt-oss); mask, a float32 array added to the scaled scores (-inf
    hides a key) or a bool array (True: may attend), broadcastable to (batch, nheads,
    seqlen_q, seqlen_k) with its key axis contiguous (transformers' 4-D masks); context,
    the flashcl.Context to run on.
    Returns out (batch, seqlen_q, nheads, headdim_v) of q's type; with return_attn_probs,
    (out, softmax_lse (batch, nheads, seqlen_q) float32, None)."""
    q, k, v = _strided(q, "q", 4), _strided(k, "k", 4), _strided(v, "v", 4)
    desc, bufs = _lib.AttentionDesc(), {}
    _common(desc, bufs, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap)
    out_shape, lse_shape = q.shape[:3] + (v.shape[3],), (q.shape[0], q.shape[2], q.shape[1])
    if q.size == 0 or k.shape[1] == 0:  # the C library takes capacities of 1 and more
        if _on_device(q):
            raise ValueError("flashcl: PyOpenCL arrays without queries or keys")
        out, lse = _no_keys(out_shape, lse_shape, q.dtype, sinks, 1)
        return (out, lse, None) if return_attn_probs else out
    desc.batch, desc.len_q, desc.len_kv = q.shape[0], q.shape[1], k.shape[1]
    desc.q_view, desc.k_view, desc.v_view = _view(q, (0, 1, 2)), _view(k, (0, 1, 2)), _view(v, (0, 1, 2))
    _alibi(desc, bufs, alibi_slopes, q.shape[0], q.shape[2])
    _floats(bufs, "sinks", sinks, ((q.shape[2],),))
    _mask(desc, bufs, mask, (q.shape[0], q.shape[2], q.shape[1], k.shape[1]))
    out, lse = _run_attention(context, desc, bufs, out_shape, lse_shape, return_attn_probs)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *, sinks=None,
                           context=None):
    """Attention over packed sequences of different lengths, as FlashAttention-2's function.

    q: (total_q, nheads, headdim); k, v: (total_k, nheads_k, headdim), or with block_table
    (batch, max_blocks) int32 a paged cache (num_blocks, page_block_size, nheads_k, headdim)
    whose sequence b has cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys. cu_seqlens_q and
    cu_seqlens_k: (batch + 1,) int32 from 0, non-decreasing. The rest as flash_attn_func;
    softmax_lse is (nheads, total_q)."""
    q = _strided(q, "q", 3)
    paged = block_table is not None
    k, v = _strided(k, "k", 4 if paged else 3), _strided(v, "v", 4 if paged else 3)
    cu_seqlens_q, cu_seqlens_k, block_table = (a.get() if _on_device(a) else a for a in
                                               (cu_seqlens_q, cu_seqlens_k, block_table))
    batch = np.asarray(cu_seqlens_q).shape[0] - 1
    if batch < 1:
        raise ValueError("flashcl: cu_seqlens_q must have at least 2 entries")
    cu_q = _int32(cu_seqlens_q, "cu_seqlens_q", batch + 1)
    cu_k = _int32(cu_seqlens_k, "cu_seqlens_k", batch + 1)
    desc, bufs = _lib.AttentionDesc(), {}
    _common(desc, bufs, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap)
    if q.shape[0] == 0 or int(max_seqlen_q) == 0 or int(max_seqlen_k) == 0:
        if _on_device(q):
            raise ValueError("flashcl: PyOpenCL arrays without queries or keys")
        if int(cu_q[-1]) != q.shape[0]:
            raise ValueError(f"flashcl: cu_seqlens_q ends at {int(cu_q[-1])}, q has {q.shape[0]} rows")
        out, lse = _no_keys(q.shape[:2] + (v.shape[-1],), (q.shape[1], q.shape[0]), q.dtype,
                            sinks, 0)
        return (out, lse, None) if return_attn_probs else out
    desc.batch, desc.len_q, desc.len_kv = batch, int(max_seqlen_q), int(max_seqlen_k)
    desc.q_view = _view(q, (None, 0, 1))
    _alibi(desc, bufs, alibi_slopes, batch, q.shape[1])
    bufs["cu_seqlens_q"] = cu_q
    if paged:
        table = _table(block_table, batch)
        desc.page_size, desc.num_pages = k.shape[1], k.shape[0]
        desc.block_table_stride = table.shape[1]
        desc.k_view, desc.v_view = _view(k, (0, 1, 2)), _view(v, (0, 1, 2))
        bufs.update(block_table=table, seqlens_kv=np.diff(cu_k).astype(np.int32))
    else:
        desc.k_view, desc.v_view = _view(k, (None, 0, 1)), _view(v, (None, 0, 1))
        bufs["cu_seqlens_kv"] = cu_k
    _floats(bufs, "sinks", sinks, ((q.shape[1],),))
    out, lse = _run_attention(context, desc, bufs, q.shape[:2] + (v.shape[-1],),
                              (q.shape[1], q.shape[0]), return_attn_probs)
    return (out, lse, None) if return_attn_probs else out


def _table(block_table, batch):
    """block_table as int32 (batch, max_blocks)."""
    table = np.ascontiguousarray(block_table, dtype=np.int32)
    if table.ndim != 2 or table.shape[0] != batch:
        raise ValueError(f"flashcl: block_table must have shape ({batch}, max_blocks), "
                         f"not {table.shape}")
    return table


def _cache_places(k_cache, block_table, rows, starts, count):
    """For each batch entry b, the (cache row or page, slot) index arrays of positions
    starts[b] .. starts[b] + count - 1; ValueError where one lies outside the cache."""
    places = []
    for b, (row, start) in enumerate(zip(rows, starts)):
        pos = np.arange(start, start + count)
        if block_table is None:
            if start + count > k_cache.shape[1]:
                raise ValueError(f"flashcl: cache_seqlens[{b}] ({start}) + {count} new tokens "
                                 f"exceed the cache's {k_cache.shape[1]}")
            places.append((np.full(count, row), pos))
            continue
        page = k_cache.shape[1]
        if start + count > block_table.shape[1] * page:
            raise ValueError(f"flashcl: cache_seqlens[{b}] ({start}) + {count} new tokens exceed "
                             f"block_table's {block_table.shape[1]} pages of {page}")
        pages = block_table[b, pos // page]
        if np.any((pages < 0) | (pages >= k_cache.shape[0])):
            raise ValueError(f"flashcl: block_table[{b}] names a page outside the cache's "
                             f"{k_cache.shape[0]}")
        places.append((pages, pos % page))
    return places


def _leftpad(cache_leftpad, starts, rows_chosen):
    """cache_leftpad as int32 (batch,), each within its sequence's cached keys, checked before
    anything is written; flashcl takes it over a contiguous cache only."""
    if cache_leftpad is None:
        return None
    if rows_chosen:
        raise ValueError("flashcl: cache_leftpad takes a contiguous cache, without block_table "
                         "or cache_batch_idx")
    pads = _int32(cache_leftpad, "cache_leftpad", len(starts))
    bad = np.flatnonzero((pads < 0) | (pads > starts))
    if bad.size:
        b = bad[0]
        raise ValueError(f"flashcl: cache_leftpad[{b}] ({pads[b]}) must be between 0 and "
                         f"cache_seqlens[{b}] ({starts[b]})")
    return pads


def _coded_format(cache_format, dim, k_cache, v_cache):
    """The format value of a coded cache (cl/kv_formats.h's name), whose k_cache and v_cache
    are uint8 arrays with a row of head dim dim in that format on the last axis."""
    coded = [n for n in _lib.KV_FORMATS if n not in ("f32", "f16", "bf16")]
    if cache_format not in coded:
        raise ValueError(f"flashcl: cache_format must be one of {', '.join(coded)}, "
                         f"not {cache_format!r}")
    value, elems, nbytes = _lib.KV_FORMATS[cache_format]
    if dim % elems:
        raise ValueError(f"flashcl: {cache_format} takes head dims in multiples of {elems}, "
                         f"not {dim}")
    row = dim // elems * nbytes
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if c.dtype != np.uint8 or c.shape[3] != row or not _in_place(c):
            raise ValueError(f"flashcl: a {cache_format} {name} holds uint8 rows of {row} bytes "
                             f"(head dim {dim}) on its contiguous last axis, not {c.dtype} "
                             f"{c.shape}")
    return value


def _cache_scale(name, scale, cache):
    """(mode, factor, a TOKEN array) of k_scale or v_scale: None (values as decoded), a float
    (one factor), or float32 of the cache's (rows or pages, tokens, heads_k): a scale a row,
    written with the new tokens (fp8 and int8)."""
    if scale is None:
        return _lib.KV_SCALE_NONE, 0.0, None
    if np.ndim(scale) == 0:
        return _lib.KV_SCALE_TENSOR, float(scale), None
    a = scale if _on_device(scale) else np.asarray(scale)
    if _on_device(scale) != _on_device(cache):
        raise TypeError(f"flashcl: {name} must be a PyOpenCL array where the cache is one")
    if a.dtype != np.float32 or tuple(a.shape) != tuple(cache.shape[:3]) or \
            not getattr(a.flags, "writeable", True) or not a.flags.c_contiguous:
        raise ValueError(f"flashcl: {name} must be a float or a writeable C-contiguous "
                         f"float32 array of the cache's shape {tuple(cache.shape[:3])} (a scale "
                         f"a row), not {a.dtype} {tuple(a.shape)}")
    return _lib.KV_SCALE_TOKEN, 0.0, a


def _scales_view(a):
    """The fcl_tensor_view of a TOKEN scales array (rows or pages, tokens, heads_k)."""
    return _view(a, (0, 1, 2))


def _write_cache(context, fmt, scales, k, v, k_cache, v_cache, places):
    """New k and v encoded into the cache in place by fcl_kv_write at the places' slots
    (page * page_size + slot), TOKEN scales beside them: on the host for numpy caches,
    enqueued on the caches' queue for PyOpenCL ones (whose events then carry the write)."""
    batch, new, heads, dim = k.shape
    slots = np.concatenate([pg * k_cache.shape[1] + sl for pg, sl in places]).astype(np.int32)
    device = _on_device(k_cache)
    if device:
        import pyopencl.array as cla
        queue = k_cache.queue
        k_in, v_in = (a if _on_device(a) else cla.to_device(queue, np.ascontiguousarray(a))
                      for a in (k, v))
        if not (k_in.flags.c_contiguous and v_in.flags.c_contiguous):
            raise ValueError("flashcl: PyOpenCL k and v must be contiguous")
        slots = cla.to_device(queue, slots)
    else:
        k_in, v_in = np.ascontiguousarray(k), np.ascontiguousarray(v)
    d = _lib.KvWriteDesc(tokens=batch * new, heads_kv=heads, head_dim=dim, head_dim_v=dim,
                         dtype_in=_dtype_code(k_in.dtype), page_size=k_cache.shape[1],
                         num_pages=k_cache.shape[0], format_k=fmt, format_v=fmt,
                         layout=_lib.LAYOUT_BLHD)
    size = k_in.dtype.itemsize  # [tokens][heads][dim] from each one's offset
    d.k_in_view = _lib.TensorView(getattr(k_in, "offset", 0) // size, 0, 0, 0)
    d.v_in_view = _lib.TensorView(getattr(v_in, "offset", 0) // size, 0, 0, 0)
    d.k_view, d.v_view = _view(k_cache, (0, 1, 2)), _view(v_cache, (0, 1, 2))
    (d.scale_mode_k, d.k_scale, ks), (d.scale_mode_v, d.v_scale, vs) = scales
    if ks is not None:
        d.k_scales_view = _scales_view(ks)
    if vs is not None:
        d.v_scales_view = _scales_view(vs)
    arrays = dict(k_in=k_in, v_in=v_in, slots=slots, k=k_cache, v=v_cache, k_scales=ks,
                  v_scales=vs)
    if device:
        ctx = context or _queue_context(queue)
        io = _lib.KvWriteIO(**{n: a.base_data.int_ptr for n, a in arrays.items() if a is not None})
        written = [a for a in (k_cache, v_cache, ks, vs) if a is not None]
        _enqueue(ctx, lib.fcl_kv_write, d, io, [a for a in arrays.values() if a is not None],
                 written)
        return
    ctx = context or default_context()
    io = _lib.KvWriteHostIO(**{n: _pointer(a) for n, a in arrays.items()})
    ctx._check(lib.fcl_kv_write_host(ctx._handle, ctypes.byref(d), ctypes.byref(io)))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False, *, sinks=None, cache_format=None,
                            k_scale=None, v_scale=None, context=None):
    """Attention of q over a K/V cache, after appending new keys and values to it in place,
    as FlashAttention-2's function (decoding).

    q: (batch, seqlen_q, nheads, headdim); k_cache, v_cache: (batch_cache, seqlen_cache,
    nheads_k, headdim), or with block_table (batch, max_blocks) int32 a paged cache
    (num_blocks, page_block_size, nheads_k, headdim). k, v (batch, seqlen_new, nheads_k,
    headdim), where given, are written into the caches (numpy arrays, modified in place) at
    positions cache_seqlens[b] onwards; attention then sees cache_seqlens[b] + seqlen_new
    keys (cache_seqlens: an int or (batch,) int32; None: the whole cache). cache_batch_idx
    (batch,) int32: the cache rows of the batch's sequences (default 0 .. batch - 1).
    cache_leftpad (batch,) int32 (a contiguous cache without cache_batch_idx): sequence b's
    keys start at row cache_leftpad[b] <= cache_seqlens[b] (left-padded batches); the rows
    before are hidden and positions count from it.
    num_splits: 0 lets flashcl choose, 1 never splits the keys, N splits them N ways.
    Beyond FlashAttention: cache_format, a quantized cache ("q8_0", "q4_0", "q4_1", "q5_0",
    "q5_1", "iq4_nl", "fp8_e4m3", "fp8_e5m2", "int8"): k_cache and v_cache are then uint8
    with a row's bytes on the last axis (headdim / 32 ggml blocks, or headdim bytes), new k
    and v are encoded into them (as ggml's and the contract's quantizers do), and k_scale /
    v_scale are None (values as decoded), a float (one factor) or float32 of the cache's
    first three axes (a scale a row, written with new tokens: fp8 and int8).
    Rotary embeddings are not implemented yet (ValueError). Returns out
    (batch, seqlen_q, nheads, headdim) of q's type; with return_softmax_lse, (out, lse
    (batch, nheads, seqlen_q) float32)."""
    if rotary_cos is not None or rotary_sin is not None:
        raise ValueError("flashcl: rotary embeddings are not implemented (apply them to q and k "
                         "first)")
    device = _on_device(q)
    if any(_on_device(a) != device for a in (k_cache, v_cache)):
        raise TypeError("flashcl: q, k_cache and v_cache must all be numpy arrays or all "
                        "PyOpenCL arrays")
    q = _strided(q, "q", 4)
    if not device:  # the caller's: appended to
        k_cache, v_cache = np.asarray(k_cache), np.asarray(v_cache)
    if k_cache.ndim != 4 or v_cache.ndim != 4 or k_cache.shape[:3] != v_cache.shape[:3]:
        raise ValueError(f"flashcl: k_cache and v_cache must be 4-dimensional of one length and "
                         f"heads, not {k_cache.shape} and {v_cache.shape}")
    fmt, scales = None, None
    if cache_format is not None:
        fmt = _coded_format(cache_format, q.shape[-1], k_cache, v_cache)
        scales = (_cache_scale("k_scale", k_scale, k_cache),
                  _cache_scale("v_scale", v_scale, v_cache))
    elif k_scale is not None or v_scale is not None:
        raise ValueError("flashcl: k_scale and v_scale come with a cache_format")
    batch = q.shape[0]
    table = None
    if block_table is not None:
        table = _table(block_table, batch)
        if cache_batch_idx is not None:
            raise ValueError("flashcl: cache_batch_idx and block_table exclude each other")
    capacity = k_cache.shape[1] * (table.shape[1] if table is not None else 1)
    if cache_seqlens is None:
        starts = np.full(batch, capacity, dtype=np.int32)
    elif np.ndim(cache_seqlens) == 0:
        starts = np.full(batch, int(cache_seqlens), dtype=np.int32)
    else:
        starts = _int32(cache_seqlens, "cache_seqlens", batch)
    if np.any(starts < 0):
        raise ValueError(f"flashcl: cache_seqlens must not be negative ({starts.min()})")
    rows = np.arange(batch, dtype=np.int32) if cache_batch_idx is None else \
        _int32(cache_batch_idx, "cache_batch_idx", batch)
    if table is None and np.any((rows < 0) | (rows >= k_cache.shape[0])):
        raise ValueError(f"flashcl: cache_batch_idx must lie in [0, {k_cache.shape[0]})")
    pads = _leftpad(cache_leftpad, starts, block_table is not None or cache_batch_idx is not None)
    new = 0
    if (k is None) != (v is None):
        raise ValueError("flashcl: k and v are given together or not at all")
    if k is not None:
        k, v = (a if _on_device(a) else np.asarray(a) for a in (k, v))
        new = k.shape[1]
        dims = (q.shape[3], q.shape[3]) if fmt else (k_cache.shape[3], v_cache.shape[3])
        want = (batch, new, k_cache.shape[2])
        if k.shape != want + dims[:1] or v.shape != want + dims[1:]:
            raise ValueError(f"flashcl: k and v must have shape {want + dims[:1]}, "
                             f"not {k.shape} and {v.shape}")
        places = _cache_places(k_cache, table, rows, starts, new)  # checked before any write
    lengths = (starts + new).astype(np.int32)
    if np.any(lengths > capacity):
        raise ValueError(f"flashcl: cache_seqlens + new tokens exceed the cache's {capacity}")
    if new and not all(getattr(c.flags, "writeable", True) for c in (k_cache, v_cache)):
        raise ValueError("flashcl: k_cache and v_cache must be writeable to append k and v")
    if new and (fmt or device):  # (a float cache's format: its dtype's)
        unscaled = ((_lib.KV_SCALE_NONE, 0.0, None),) * 2
        _write_cache(context, fmt or _dtype_code(k_cache.dtype) + 1, scales or unscaled, k, v,
                     k_cache, v_cache, places)
    for b in range(batch if new and not (fmt or device) else 0):
        page, slot = places[b]
        k_cache[page, slot], v_cache[page, slot] = k[b], v[b]
    if not fmt:
        k_cache, v_cache = _strided(k_cache, "k_cache", 4), _strided(v_cache, "v_cache", 4)
    desc, bufs = _lib.AttentionDesc(), {}
    _common(desc, bufs, q, k_cache, v_cache, 0.0, softmax_scale, causal, window_size, softcap,
            coded=fmt is not None)
    if q.size == 0:
        if device:
            raise ValueError("flashcl: PyOpenCL arrays without queries")
        out, lse = _no_keys(q.shape[:3] + (desc.head_dim_v,),
                            (q.shape[0], q.shape[2], q.shape[1]), q.dtype, sinks, 1)
        return (out, lse) if return_softmax_lse else out
    desc.batch, desc.len_q, desc.len_kv = batch, q.shape[1], max(capacity, 1)
    desc.kv_splits = int(num_splits)
    desc.q_view = _view(q, (0, 1, 2))
    desc.k_view, desc.v_view = _view(k_cache, (0, 1, 2)), _view(v_cache, (0, 1, 2))
    if fmt:
        desc.format_k = desc.format_v = fmt
        (desc.scale_mode_k, desc.k_scale, ks), (desc.scale_mode_v, desc.v_scale, vs) = scales
        for name, a in (("k_scales", ks), ("v_scales", vs)):
            if a is not None:
                setattr(desc, name + "_view", _scales_view(a))
                bufs[name] = a
    if table is None and cache_batch_idx is not None:
        table = rows.reshape(batch, 1)  # each sequence's cache row as its one page
    if table is not None:
        desc.page_size, desc.num_pages = capacity // table.shape[1], k_cache.shape[0]
        desc.block_table_stride = table.shape[1]
        bufs["block_table"] = table
    _alibi(desc, bufs, alibi_slopes, batch, q.shape[2])
    bufs["seqlens_kv"] = lengths
    if pads is not None:
        bufs["leftpad_kv"] = pads
    _floats(bufs, "sinks", sinks, ((q.shape[2],),))
    out, lse = _run_attention(context, desc, bufs, q.shape[:3] + (desc.head_dim_v,),
                              (q.shape[0], q.shape[2], q.shape[1]), return_softmax_lse)
    return (out, lse) if return_softmax_lse else out


def softmax(x, scale=1.0, mask=None, log=False, *, return_lse=False, context=None):
    """Softmax (log: log-softmax) of scale * x + mask over the last axis, in float32 whatever
    x's type (float32, float16, bfloat16); mask float32, broadcast to x's rows (one row for
    all, or a row each). Returns an array of x's type (a PyOpenCL x: a new array on its queue,
    the call enqueued after x's events), and with return_lse the float32 log-sum-exp of each
    row."""
    device = _on_device(x)
    x = x if device else np.asarray(x)
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"flashcl: x must have a non-empty last axis (shape {x.shape})")
    cols = x.shape[-1]
    if device:
        if not x.flags.c_contiguous or x.offset:
            raise ValueError("flashcl: a PyOpenCL x must be contiguous from its buffer's start")
        rows = x
    else:
        rows = x.reshape(-1, cols) if x.size else x.reshape(0, cols)
        if not _in_place(rows):
            rows = np.ascontiguousarray(rows)
    desc = _lib.SoftmaxDesc()
    desc.rows, desc.cols = x.size // cols, cols
    desc.in_stride = cols if device else rows.strides[0] // rows.itemsize
    desc.dtype = _dtype_code(x.dtype)
    desc.scale = _scale(scale)
    desc.log = int(bool(log))
    bufs = {}
    if mask is not None:
        m = np.ascontiguousarray(mask.get() if _on_device(mask) else mask, dtype=np.float32)
        if m.shape[-1] != cols or m.size not in (cols, desc.rows * cols):
            raise ValueError(f"flashcl: mask must have one row of {cols} or one a row of x, "
                             f"not shape {m.shape}")
        desc.mask_stride = cols if m.size > cols else 0
        bufs["mask"] = m
    if device:
        out, lse = _run_softmax_device(context, desc, x, bufs)
    else:
        ctx = context or default_context()
        out = np.empty((desc.rows, cols), dtype=x.dtype)
        lse = np.empty(desc.rows, dtype=np.float32)
        if desc.rows:
            io = _lib.SoftmaxHostIO(in_=_pointer(rows), out=_pointer(out), lse=_pointer(lse),
                                    mask=_pointer(bufs.get("mask")))
            ctx._check(lib.fcl_softmax_run_host(ctx._handle, ctypes.byref(desc), ctypes.byref(io)))
    out, lse = out.reshape(x.shape), lse.reshape(x.shape[:-1])
    return (out, lse) if return_lse else out


def attention_merge(outs, lses, *, context=None):
    """Merges attention results over disjoint sets of keys (a shared prefix and the rest,
    other devices, key splits): outs[p] (..., headdim_v) and lses[p] of the shape of its rows
    (out.shape[:-1]; flash_attn_func's softmax_lse (batch, nheads, seqlen_q) is
    lse.transpose(0, 2, 1) there), float32. out = sum_p exp(lse_p - lse) out_p and lse =
    logsumexp_p lse_p; a part whose lse is -inf adds nothing (all -inf: 0 and -inf). Returns
    (out, lse), float32: numpy arrays, or for PyOpenCL parts (contiguous from their buffers'
    starts) new arrays on the first part's queue, the merge enqueued after the parts'
    events."""
    if not outs or len(outs) != len(lses):
        raise ValueError(f"flashcl: attention_merge takes one lse a part and at least one part "
                         f"({len(outs)} outs, {len(lses)} lses)")
    shape = tuple(outs[0].shape)
    for o, s in zip(outs, lses):
        if tuple(o.shape) != shape or tuple(s.shape) != shape[:-1]:
            raise ValueError(f"flashcl: every out must have shape {shape} and its lse "
                             f"{shape[:-1]}, not {tuple(o.shape)} and {tuple(s.shape)}")
        if o.dtype != np.float32 or s.dtype != np.float32:
            raise TypeError("flashcl: attention_merge takes float32 outs and lses")
    if len(shape) < 1 or shape[-1] == 0:
        raise ValueError(f"flashcl: outs need a non-empty last axis (shape {shape})")
    rows, dim = int(np.prod(shape[:-1])), shape[-1]
    device = [_on_device(a) for a in list(outs) + list(lses)]
    if any(device) != all(device):
        raise TypeError("flashcl: the parts must all be numpy arrays or all PyOpenCL arrays")
    if rows == 0 and device[0]:
        raise ValueError("flashcl: PyOpenCL parts without rows")
    if rows == 0:
        return np.zeros(shape, np.float32), np.full(shape[:-1], -np.inf, np.float32)
    if device[0]:
        return _merge_device(context, outs, lses, rows, dim, shape)
    ctx = context or default_context()
    cl = _lib.opencl()
    handles = [ctypes.c_void_p() for _ in range(3)]
    ctx._check(lib.fcl_context_get_cl(ctx._handle, *map(ctypes.byref, handles)))
    cl_ctx, _, queue = handles
    out, lse = np.empty(shape, np.float32), np.empty(shape[:-1], np.float32)
    made, done = [], ctypes.c_void_p()
    try:
        def buffer(nbytes, host=None):  # a copy of host (read only), else read-write
            err = ctypes.c_int()
            flags = 4 | 32 if host is not None else 1
            made.append(cl.clCreateBuffer(cl_ctx, flags, nbytes, _pointer(host), ctypes.byref(err)))
            if err.value:
                raise Error(f"flashcl: clCreateBuffer failed ({err.value})")
            return made[-1]
        parts = [buffer(a.nbytes, a) for a in map(np.ascontiguousarray, list(outs) + list(lses))]
        part_outs, part_lses = parts[:len(outs)], parts[len(outs):]
        out_b, lse_b = buffer(out.nbytes), buffer(lse.nbytes)
        n = len(outs)
        ctx._check(lib.fcl_attention_merge(ctx._handle, n, rows, dim,
                                           (ctypes.c_void_p * n)(*part_outs),
                                           (ctypes.c_void_p * n)(*part_lses), out_b, lse_b, 0,
                                           None, ctypes.byref(done)))
        for host, b in ((out, out_b), (lse, lse_b)):
            err = cl.clEnqueueReadBuffer(queue, b, 1, 0, host.nbytes, _pointer(host), 1,
                                         ctypes.byref(done), None)
            if err:
                raise Error(f"flashcl: reading the merge back failed ({err})")
    finally:
        if done:
            cl.clReleaseEvent(done)
        for b in made:
            if b:
                cl.clReleaseMemObject(b)
    return out, lse


def _merge_device(context, outs, lses, rows, dim, shape):
    import pyopencl.array as cla
    if not all(_on_device(a) and a.flags.c_contiguous and not a.offset
               for a in list(outs) + list(lses)):
        raise ValueError("flashcl: PyOpenCL parts must be contiguous from their buffers' start")
    queue = outs[0].queue
    ctx = context or _queue_context(queue)
    out, lse = cla.empty(queue, shape, np.float32), cla.empty(queue, shape[:-1], np.float32)
    n = len(outs)
    part_outs = (ctypes.c_void_p * n)(*[o.base_data.int_ptr for o in outs])
    part_lses = (ctypes.c_void_p * n)(*[s.base_data.int_ptr for s in lses])
    _enqueue_call(ctx, lambda n_wait, wait, done: lib.fcl_attention_merge(
        ctx._handle, n, rows, dim, part_outs, part_lses, out.base_data.int_ptr,
        lse.base_data.int_ptr, n_wait, wait, done), list(outs) + list(lses), (out, lse))
    return out, lse


def _run_softmax_device(context, desc, x, bufs):
    import pyopencl.array as cla
    queue = x.queue
    ctx = context or _queue_context(queue)
    out = cla.empty(queue, (desc.rows, desc.cols), x.dtype)
    lse = cla.empty(queue, (desc.rows,), np.float32)
    mask = cla.to_device(queue, bufs["mask"]) if "mask" in bufs else None
    io = _lib.SoftmaxIO(in_=x.base_data.int_ptr, out=out.base_data.int_ptr,
                        lse=lse.base_data.int_ptr, mask=mask.base_data.int_ptr if mask else None)
    _enqueue(ctx, lib.fcl_softmax_run, desc, io, [a for a in (x, mask) if a is not None],
             (out, lse))
    return out, lse

"""The C library through ctypes: where it is found, and flashcl.h's structs and calls.

The structs mirror include/flashcl.h field by field (tests/python/test_layout.py compares
their sizes and offsets with the C compiler's); a field missing here stays zero, which the
C API reads as its default.
"""
import ctypes
import ctypes.util
import os

_size = ctypes.c_size_t
_enum = ctypes.c_int  # the C enums' type on the platforms flashcl builds for


class TensorView(ctypes.Structure):
    _fields_ = [("offset", _size), ("batch_stride", _size), ("head_stride", _size),
                ("token_stride", _size)]


class ContextOptions(ctypes.Structure):
    _fields_ = [("device", ctypes.c_char_p), ("cache_dir", ctypes.c_char_p),
                ("tuning", ctypes.c_char_p)]


class SoftmaxDesc(ctypes.Structure):
    _fields_ = [("rows", _size), ("cols", _size), ("in_stride", _size), ("out_stride", _size),
                ("dtype", _enum), ("scale", ctypes.c_float), ("log", ctypes.c_int),
                ("mask_stride", _size), ("algo", _enum), ("heads", _size), ("head_rows", _size),
                ("mask_rows", _size), ("mask_dtype", _enum), ("alibi_from_mask", ctypes.c_int)]


class SoftmaxHostIO(ctypes.Structure):
    _fields_ = [("in_", ctypes.c_void_p), ("mask", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("lse", ctypes.c_void_p), ("sinks", ctypes.c_void_p),
                ("alibi_slopes", ctypes.c_void_p)]


class AttentionDesc(ctypes.Structure):
    _fields_ = [("batch", _size), ("heads_q", _size), ("heads_kv", _size), ("len_q", _size),
                ("len_kv", _size), ("head_dim", _size), ("head_dim_v", _size),
                ("scale", ctypes.c_float), ("causal", _enum), ("mask_type", _enum),
                ("mask_stride_batch", _size), ("mask_stride_head", _size),
                ("mask_stride_q", _size), ("layout", _enum), ("dtype_q", _enum),
                ("dtype_kv", _enum), ("dtype_o", _enum), ("kv_splits", _size),
                ("q_view", TensorView), ("k_view", TensorView), ("v_view", TensorView),
                ("o_view", TensorView), ("page_size", _size), ("num_pages", _size),
                ("block_table_stride", _size), ("softcap", ctypes.c_float),
                ("alibi_slopes_batch_stride", _size), ("alibi_from_mask", ctypes.c_int),
                ("window", ctypes.c_int), ("window_left", _size), ("window_right", _size),
                ("precision", _enum), ("format_k", _enum), ("format_v", _enum),
                ("scale_mode_k", _enum), ("scale_mode_v", _enum), ("k_scale", ctypes.c_float),
                ("v_scale", ctypes.c_float), ("k_scales_batch_stride", _size),
                ("v_scales_batch_stride", _size), ("k_scales_view", TensorView),
                ("v_scales_view", TensorView)]


class AttentionHostIO(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("q", "k", "v", "mask", "out", "lse", "seqlens_kv", "cu_seqlens_q",
                 "cu_seqlens_kv", "block_table", "alibi_slopes", "sinks", "k_scales",
                 "v_scales", "leftpad_kv", "query_offsets")]


_text = ctypes.c_char


class AttentionTile(ctypes.Structure):
    _fields_ = [("max_head_dim", _size), ("block_q", _size), ("block_kv", _size),
                ("work_group_size", _size), ("rows_block_q", _size),
                ("local_mem_size", ctypes.c_uint64), ("decode_block_kv", _size),
                ("rows_because", _text * 128)]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("platform_name", _text * 256), ("name", _text * 256), ("vendor", _text * 256),
                ("driver_version", _text * 128), ("device_version", _text * 128),
                ("opencl_c_version", _text * 128), ("type", ctypes.c_uint64),
                ("vendor_id", ctypes.c_uint), ("compute_units", ctypes.c_uint),
                ("max_work_group_size", _size), ("local_mem_size", ctypes.c_uint64),
                ("local_mem_is_global", ctypes.c_int), ("global_mem_size", ctypes.c_uint64),
                ("max_alloc_size", ctypes.c_uint64),
                ("preferred_vector_width_float", ctypes.c_uint), ("has_fp16", ctypes.c_int),
                ("has_fp64", ctypes.c_int), ("kernel_work_group_size", _size),
                ("kernel_local_mem_size", ctypes.c_uint64), ("softmax_work_group_size", _size),
                ("softmax_vector_width", _size), ("softmax_fused_max_cols", _size),
                ("softmax_block_cols", _size), ("softmax_block_items", _size),
                ("softmax_block_min_lanes", _size), ("softmax_rows_per_item", ctypes.c_int),
                ("attention_rows_per_item", ctypes.c_int),
                ("attention_tiles", AttentionTile * 4), ("tuning", _text * 96),
                ("program_from_cache", ctypes.c_int), ("program_cache_usable", ctypes.c_int),
                ("loop_iteration_cap", ctypes.c_uint), ("local_mem_scale", ctypes.c_uint),
                ("local_mem_reserved", ctypes.c_uint64),
                ("nv_compute_capability", ctypes.c_uint), ("attention_mma", ctypes.c_int),
                ("attention_mma_because", _text * 160), ("softmax_nv_cols", _size)]


def as_dict(s):
    """A ctypes struct as a dict: text as str, arrays of structs as lists of dicts."""
    def value(v):
        if isinstance(v, bytes):
            return v.decode(errors="replace")
        if isinstance(v, ctypes.Structure):
            return as_dict(v)
        if isinstance(v, ctypes.Array):
            return [value(e) for e in v]
        return v
    return {name: value(getattr(s, name)) for name, _ in s._fields_}


class KvWriteDesc(ctypes.Structure):
    _fields_ = [("tokens", _size), ("heads_kv", _size), ("head_dim", _size),
                ("head_dim_v", _size), ("dtype_in", _enum), ("k_in_view", TensorView),
                ("v_in_view", TensorView), ("page_size", _size), ("num_pages", _size),
                ("format_k", _enum), ("format_v", _enum), ("scale_mode_k", _enum),
                ("scale_mode_v", _enum), ("k_scale", ctypes.c_float), ("v_scale", ctypes.c_float),
                ("k_scales_batch_stride", _size), ("v_scales_batch_stride", _size),
                ("k_view", TensorView), ("v_view", TensorView), ("k_scales_view", TensorView),
                ("v_scales_view", TensorView), ("layout", _enum)]


class KvWriteHostIO(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("k_in", "v_in", "slots", "k", "v", "k_scales", "v_scales")]


class KvWriteIO(ctypes.Structure):  # cl_mem handles
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("k_in", "v_in", "slots", "k", "v", "k_scales", "v_scales")]


class AttentionIO(ctypes.Structure):  # cl_mem handles
    _fields_ = [(name, ctypes.c_void_p) for name, _ in AttentionHostIO._fields_]


class SoftmaxIO(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name, _ in SoftmaxHostIO._fields_]


# flashcl.h's constants that the Python calls use
SUCCESS, ERROR_INVALID_ARGUMENT = 0, -1
DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
CAUSAL_BOTTOM_RIGHT = 2
MASK_ADD_F32, MASK_BOOL_U8, MASK_ADD_F16 = 1, 2, 3
LAYOUT_BLHD = 1
WINDOW_UNBOUNDED = ctypes.c_size_t(-1).value
KV_SCALE_NONE, KV_SCALE_TENSOR, KV_SCALE_TOKEN = 0, 1, 3
# cl/kv_formats.h's K/V formats: name -> (value, elements a block, bytes a block)
KV_FORMATS = {"f32": (1, 1, 4), "f16": (2, 1, 2), "bf16": (3, 1, 2), "q8_0": (4, 32, 34),
              "q4_0": (5, 32, 18), "q4_1": (6, 32, 20), "q5_0": (7, 32, 22), "q5_1": (8, 32, 24),
              "iq4_nl": (9, 32, 18), "fp8_e4m3": (10, 1, 1), "fp8_e5m2": (11, 1, 1),
              "int8": (12, 1, 1)}


def _find_library():
    """FLASHCL_LIBRARY, else the copy installed beside this package, else the system's."""
    explicit = os.environ.get("FLASHCL_LIBRARY")
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.startswith("libflashcl.so") or name in ("libflashcl.dylib", "flashcl.dll"):
            return os.path.join(here, name)
    found = ctypes.util.find_library("flashcl")
    if not found:
        raise ImportError("flashcl: the C library was not found (pip install . builds it; "
                          "or set FLASHCL_LIBRARY to libflashcl.so)")
    return found


def _declare(lib):
    ptr = ctypes.c_void_p
    sig = {
        "fcl_context_create": (ctypes.c_int, [ctypes.POINTER(ContextOptions), ctypes.POINTER(ptr)]),
        "fcl_context_create_from_cl": (ctypes.c_int, [ptr, ptr, ptr, ctypes.POINTER(ContextOptions),
                                                      ctypes.POINTER(ptr)]),
        "fcl_context_destroy": (None, [ptr]),
        "fcl_context_device_info": (ctypes.c_int, [ptr, ctypes.POINTER(DeviceInfo)]),
        "fcl_kv_write_host": (ctypes.c_int, [ptr, ctypes.POINTER(KvWriteDesc),
                                             ctypes.POINTER(KvWriteHostIO)]),
        "fcl_kv_write": (ctypes.c_int, [ptr, ctypes.POINTER(KvWriteDesc),
                                        ctypes.POINTER(KvWriteIO), ctypes.c_uint,
                                        ctypes.POINTER(ptr), ctypes.POINTER(ptr)]),
        "fcl_context_get_cl": (ctypes.c_int, [ptr, ctypes.POINTER(ptr), ctypes.POINTER(ptr),
                                              ctypes.POINTER(ptr)]),
        "fcl_attention_merge": (ctypes.c_int, [ptr, _size, _size, _size, ctypes.POINTER(ptr),
                                               ctypes.POINTER(ptr), ptr, ptr, ctypes.c_uint,
                                               ctypes.POINTER(ptr), ctypes.POINTER(ptr)]),
        "fcl_context_last_error": (ctypes.c_char_p, [ptr]),
        "fcl_status_string": (ctypes.c_char_p, [ctypes.c_int]),
        "fcl_version_string": (ctypes.c_char_p, []),
        "fcl_softmax_run_host": (ctypes.c_int, [ptr, ctypes.POINTER(SoftmaxDesc),
                                                ctypes.POINTER(SoftmaxHostIO)]),
        "fcl_attention_run_host": (ctypes.c_int, [ptr, ctypes.POINTER(AttentionDesc),
                                                  ctypes.POINTER(AttentionHostIO)]),
        "fcl_attention_run": (ctypes.c_int, [ptr, ctypes.POINTER(AttentionDesc),
                                             ctypes.POINTER(AttentionIO), ctypes.c_uint,
                                             ctypes.POINTER(ptr), ctypes.POINTER(ptr)]),
        "fcl_softmax_run": (ctypes.c_int, [ptr, ctypes.POINTER(SoftmaxDesc),
                                           ctypes.POINTER(SoftmaxIO), ctypes.c_uint,
                                           ctypes.POINTER(ptr), ctypes.POINTER(ptr)]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


lib = _declare(ctypes.CDLL(_find_library()))


def opencl():
    """The OpenCL loader the library links (its platform and device queries), declared."""
    cl = ctypes.CDLL(ctypes.util.find_library("OpenCL") or "libOpenCL.so.1")
    ptr, uint = ctypes.c_void_p, ctypes.c_uint
    cl.clGetPlatformIDs.argtypes = [uint, ctypes.POINTER(ptr), ctypes.POINTER(uint)]
    cl.clGetDeviceIDs.argtypes = [ptr, ctypes.c_uint64, uint, ctypes.POINTER(ptr),
                                  ctypes.POINTER(uint)]
    for fn in (cl.clGetPlatformInfo, cl.clGetDeviceInfo):
        fn.argtypes = [ptr, uint, ctypes.c_size_t, ptr, ctypes.POINTER(ctypes.c_size_t)]
    cl.clCreateBuffer.restype = ptr
    cl.clCreateBuffer.argtypes = [ptr, ctypes.c_uint64, ctypes.c_size_t, ptr,
                                  ctypes.POINTER(ctypes.c_int)]
    cl.clEnqueueReadBuffer.argtypes = [ptr, ptr, uint, ctypes.c_size_t, ctypes.c_size_t, ptr,
                                       uint, ctypes.POINTER(ptr), ctypes.POINTER(ptr)]
    for fn in (cl.clReleaseMemObject, cl.clReleaseEvent):
        fn.argtypes = [ptr]
    return cl

"""flashcl: portable OpenCL softmax and single-pass attention, with FlashAttention-2's Python
calls on numpy arrays. See the repository's README.md and docs/python.md."""
from ._calls import (Context, Error, attention_merge, default_context, devices, flash_attn_func,
                     flash_attn_varlen_func, flash_attn_with_kvcache, probe, softmax)
from ._lib import lib as _c


def version():
    """The C library's version string."""
    return _c.fcl_version_string().decode()


__all__ = ["Context", "Error", "attention_merge", "default_context", "devices", "flash_attn_func", "flash_attn_varlen_func",
           "flash_attn_with_kvcache", "probe", "softmax", "version"]

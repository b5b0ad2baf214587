"""flashcl as a Hugging Face transformers attention function.

    import flashcl.integrations.transformers as fcl_hf
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation=fcl_hf.register())

register() adds the function under the name "fcl" (transformers refuses names that contain
"flash"), with transformers' eager masks (additive float masks, which the fallback below takes
as they are), and returns the name. The function takes torch CPU tensors as zero-copy numpy
views and passes GQA, causality, the 4-D padding and sliding-window masks, softcap, the scale
and attention sinks (gpt-oss) to flashcl.flash_attn_func; what flashcl cannot take (tensors
on other devices, dropout while training, attention weights asked for, bfloat16 without
ml_dtypes) runs the model's own eager attention instead (which takes its softcap and sinks
too), which it says once."""
import logging
import math
import sys

import numpy as np
import torch

import flashcl

NAME = "fcl"
_log = logging.getLogger(__name__)
_said = set()


def _fallback(reason, module, *args, **kwargs):
    """The model's eager attention (its modeling file's eager_attention_forward)."""
    if reason not in _said:
        _said.add(reason)
        _log.warning("flashcl: %s: the model's eager attention runs instead", reason)
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return eager(module, *args, **kwargs)


def _numpy(t):
    """t (a CPU tensor) as a numpy array sharing its memory."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        import ml_dtypes  # noqa: F401 (raises ImportError where absent)
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
              is_causal=None, sliding_window=None, softcap=None, s_aux=None, **kwargs):
    """transformers' attention interface: query (batch, heads, q_len, dim), key and value
    (batch, kv_heads, kv_len, dim); returns (attn_output (batch, q_len, heads, dim), None)."""
    args = (module, query, key, value, attention_mask)
    rest = dict(dropout=dropout, scaling=scaling, is_causal=is_causal,
                sliding_window=sliding_window, softcap=softcap, s_aux=s_aux, **kwargs)
    if any(t.device.type != "cpu" for t in (query, key, value)):
        return _fallback("tensors not on the CPU", *args, **rest)
    if dropout and module.training:
        return _fallback("dropout while training", *args, **rest)
    if kwargs.get("output_attentions"):
        return _fallback("attention weights asked for", *args, **rest)
    try:
        q, k, v = (_numpy(t).transpose(0, 2, 1, 3) for t in (query, key, value))
    except (ImportError, TypeError, RuntimeError) as e:
        return _fallback(f"tensors of {query.dtype} ({e})", *args, **rest)
    # the eager mask: the dtype's minimum where hidden (flash_attn_func takes it as float32)
    mask = None if attention_mask is None else _numpy(attention_mask)
    # Without a mask transformers means full causal attention of a prompt (q_len == kv_len)
    # or a single query: FlashAttention's bottom-right alignment is the same there.
    causal = attention_mask is None and query.shape[2] > 1 and \
        (is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = (sliding_window - 1, 0) if sliding_window and attention_mask is None else (-1, -1)
    sinks = None if s_aux is None else _numpy(s_aux.float())
    out = flashcl.flash_attn_func(q, k, v, softmax_scale=scaling if scaling is not None
                                  else 1 / math.sqrt(query.shape[-1]), causal=causal,
                                  window_size=window, softcap=softcap or 0.0, sinks=sinks,
                                  mask=mask)
    out = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16) \
        if query.dtype == torch.bfloat16 else torch.from_numpy(out)
    return out, None


def register():
    """Adds flashcl to transformers' attention functions (with the eager masks) and returns
    the name to pass as attn_implementation."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask
    AttentionInterface.register(NAME, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, eager_mask)
    return NAME

"""``scaled_dot_product_attention`` with a float logits bias, safe on every device.

On CUDA, PyTorch 2.11 prefers its cuDNN attention backend on Hopper (H100/H200). With an
additive ``attn_mask`` that backend fails on strided or unaligned biases ("misaligned address",
seen on an H200 with the skewed relative kernel's bias view, ``make gpu-check``) and reads a
float32 bias beside bf16/fp16 queries as if it were in the queries' dtype (pytorch/pytorch#191612).
:func:`sdpa_with_bias` hands the bias over in the queries' dtype and lets only the
memory-efficient and math backends run (PyTorch pads the bias to their alignment itself). On the
CPU it is plain ``scaled_dot_product_attention``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

_BIAS_BACKENDS = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def sdpa_with_bias(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, **kwargs) -> Tensor:
    """``F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **kwargs)``; ``(..., q_len, head_dim)``.

    Args:
        q: ``(batch, heads, q_len, head_dim)``; ``k``, ``v``: ``(batch, heads, k_len, head_dim)``.
        attn_mask: ``None``, a bool mask, or an additive float bias broadcastable to
            ``(batch, heads, q_len, k_len)``; any strides.
        kwargs: ``dropout_p``, ``scale``, ``is_causal``, ``enable_gqa`` as SDPA takes them.
    """
    if q.device.type != "cuda" or attn_mask is None or not attn_mask.is_floating_point():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **kwargs)
    with sdpa_kernel(_BIAS_BACKENDS):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask.to(q.dtype), **kwargs)

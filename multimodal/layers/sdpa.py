"""``scaled_dot_product_attention`` with a float logits bias, safe on every device.

On CUDA, PyTorch 2.11 prefers its cuDNN attention backend on Hopper (H100/H200). With an
additive ``attn_mask`` that backend fails on strided or unaligned biases ("misaligned address",
seen on an H200 with the skewed relative kernel's bias view, ``make gpu-check``) and reads a
float32 bias beside bf16/fp16 queries as if it were in the queries' dtype (pytorch/pytorch#191612).
:func:`sdpa_with_bias` hands the bias over in the queries' dtype and lets only the
memory-efficient and math backends run (PyTorch pads the bias to their alignment itself).

On the CPU it is plain ``scaled_dot_product_attention``, except in training under bf16
autocast over short sequences: PyTorch 2.11's fused CPU kernel runs forward + backward in bf16
slower than in float32 up to 512 keys even on a CPU with AMX (11x at 17 keys, 1.4x at 256, 1.2x at
512; 0.94x at 1,024 and 0.89x at 2,048, where bf16 wins; docs/benchmarks.md), so there attention
whose backward will run is computed in float32 and its output handed back in the queries' dtype.
Inference keeps bf16 (its forward is faster).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

_BIAS_BACKENDS = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
FLOAT32_TRAINING_MAX_KEYS = 512
"""Up to this many keys, bf16 CPU attention that will be trained runs in float32 (measured crossover)."""


def sdpa_with_bias(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, **kwargs) -> Tensor:
    """``F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **kwargs)``; ``(..., q_len, head_dim)``.

    Args:
        q: ``(batch, heads, q_len, head_dim)``; ``k``, ``v``: ``(batch, heads, k_len, head_dim)``.
        attn_mask: ``None``, a bool mask, or an additive float bias broadcastable to
            ``(batch, heads, q_len, k_len)``; any strides.
        kwargs: ``dropout_p``, ``scale``, ``is_causal``, ``enable_gqa`` as SDPA takes them.
    """
    if _trains_in_float32(q, k, v):
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.float()
        with torch.autocast("cpu", enabled=False):
            return F.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), attn_mask=attn_mask, **kwargs
            ).to(q.dtype)
    if q.device.type != "cuda" or attn_mask is None or not attn_mask.is_floating_point():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **kwargs)
    with sdpa_kernel(_BIAS_BACKENDS):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask.to(q.dtype), **kwargs)


def _trains_in_float32(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """True for bf16 CPU attention over at most ``FLOAT32_TRAINING_MAX_KEYS`` keys whose backward will run."""
    return (
        q.device.type == "cpu"
        and q.dtype == torch.bfloat16
        and k.shape[-2] <= FLOAT32_TRAINING_MAX_KEYS
        and torch.is_grad_enabled()
        and (q.requires_grad or k.requires_grad or v.requires_grad)
    )

"""ALiBi (Press et al. 2022, "Train Short, Test Long"): attention biased linearly by distance.

No embeddings: the logit of query ``i`` and key ``j`` gets ``-m_h · |i - j|`` with a fixed slope
``m_h`` per head, the geometric sequence of the paper (for 8 heads ``1/2, 1/4, ..., 1/256``). A
model trained on short windows keeps its perplexity far past them, because the bias is defined for
every distance and grows no differently there.

Memory stays linear in the sequence: full attention over a whole sequence runs query block by
query block, each block's ``(heads, block, keys)`` bias made on the fly, and the backward pass
recomputes a block instead of keeping its bias (activation checkpointing per block). One decoding
step, local attention and the reference path take the dense :meth:`ALiBiPositions.bias`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from multimodal.layers.positions.base import AttentionPosition


def alibi_slopes(num_heads: int) -> Tensor:
    """The paper's slopes ``(num_heads,)``: ``2^(-8/n), 2^(-16/n), ...``, interleaved for non-powers of 2."""
    def powers(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    below = 2 ** math.floor(math.log2(num_heads))
    slopes = powers(below)
    if below < num_heads:  # the paper's recipe: every other slope of the next power of two
        slopes += powers(2 * below)[0::2][: num_heads - below]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBiPositions(AttentionPosition):
    """Linear distance biases, one slope per head; no parameters.

    Args:
        num_heads: Attention heads.
        block_size: Queries per block of the whole-sequence kernel.
    """

    def __init__(self, num_heads: int, block_size: int = 128) -> None:
        super().__init__()
        self.block_size = block_size
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def bias(self, q: Tensor, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        """``-slope_h · |query_pos - key_pos|``, broadcastable to the logits of ``q``."""
        distance = (query_pos - key_pos).abs().to(q.dtype)
        if distance.dim() == q.dim():  # positions with batch and head axes: (batch, 1, ..., q, k)
            slopes = self.slopes.to(q.dtype).view(1, -1, *[1] * (distance.dim() - 2))
        else:  # (..., q, k): heads lead, batch broadcasts in front
            slopes = self.slopes.to(q.dtype).view(-1, *[1] * distance.dim())
        return -slopes * distance

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool,
        query_offset: int,
        key_padding_mask: Tensor | None,
        dropout_p: float,
    ) -> Tensor | None:
        """Query-blocked attention with the bias made per block; None for a single query (use the dense bias)."""
        if q.shape[-2] == 1:
            return None
        pieces = []
        for start in range(0, q.shape[-2], self.block_size):
            stop = min(start + self.block_size, q.shape[-2])
            keys = min(k.shape[-2], query_offset + stop) if causal else k.shape[-2]
            padding = None if key_padding_mask is None else key_padding_mask[:, :keys]
            args = (q[..., start:stop, :], k[..., :keys, :], v[..., :keys, :], padding)
            block = _Block(self.slopes, query_offset + start, causal, dropout_p)
            if torch.is_grad_enabled() and any(t.requires_grad for t in args[:3]):
                pieces.append(checkpoint(block, *args, use_reentrant=False))
            else:
                pieces.append(block(*args))
        return torch.cat(pieces, dim=-2)

    def extra_repr(self) -> str:
        return f"num_heads={self.slopes.numel()}, block_size={self.block_size}"


class _Block:
    """One query block: SDPA with the block's ALiBi bias (and causal, padding masks) as ``attn_mask``."""

    def __init__(self, slopes: Tensor, first_query: int, causal: bool, dropout_p: float) -> None:
        self.slopes, self.first_query, self.causal, self.dropout_p = slopes, first_query, causal, dropout_p

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        query_pos = torch.arange(q.shape[-2], device=q.device)[:, None] + self.first_query
        key_pos = torch.arange(k.shape[-2], device=q.device)[None, :]
        bias = -self.slopes.to(q.dtype)[:, None, None] * (query_pos - key_pos).abs().to(q.dtype)  # (h, q, k)
        if self.causal:
            bias = bias.masked_fill(key_pos > query_pos, float("-inf"))
        if key_padding_mask is not None:
            bias = bias.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(q.dtype).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=self.dropout_p)

"""ALiBi (Press et al. 2022, "Train Short, Test Long"): attention biased linearly by distance.

No embeddings: the logit of query ``i`` and key ``j`` gets ``-m_h · |i - j|`` with a fixed slope
``m_h`` per head, the geometric sequence of the paper (for 8 heads ``1/2, 1/4, ..., 1/256``). A
model trained on short windows keeps its perplexity far past them, because the bias is defined for
every distance and grows no differently there.

Memory stays linear in the sequence: full attention over a whole sequence runs query block by
query block and never makes an ``(L, L)`` tensor. Causal attention needs no bias tensor at all: for
query ``i`` the bias ``-m·(i - j) = m·(j - c) - m·(i - c)`` is, up to a constant per query row
(which softmax ignores), ``m·(j - c)``, the product of a query feature ``m / scale`` and a key
feature ``j - c``. So the queries and keys carry these features and every block runs SDPA's fused
kernel with a causal mask shared by the heads. ``c`` is the block's last query, so the features
near the diagonal, the pairs that carry the weight, are small exact integers (float32 keeps them
exactly to ``2**24``). Bidirectional attention makes the block's ``(heads, block, keys)`` bias.

On the CPU (without dropout) the blocks run in one autograd function over the fused kernel's own
forward and backward: each block keeps its output's log-sum-exp, so the backward recomputes
nothing but the block's key feature and mask. Elsewhere each block is checkpointed (its forward
runs again in the backward). One decoding step, local attention and the reference path take the
dense :meth:`ALiBiPositions.bias`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from multimodal.layers.positions.base import AttentionPosition, repeat_kv_heads
from multimodal.layers.sdpa import sdpa_with_bias


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

    def bias(self, q: Tensor, query_pos: Tensor, key_pos: Tensor, grid_width: int | None = None) -> Tensor:
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
        q, k, v = repeat_kv_heads(q, k, v)
        if q.device.type == "cpu" and dropout_p == 0.0:
            return _FusedBlocks.apply(q, k, v, self.slopes, causal, query_offset, key_padding_mask, self.block_size)
        kernel = _CausalBlock if causal else _Block
        pieces = []
        for start in range(0, q.shape[-2], self.block_size):
            stop = min(start + self.block_size, q.shape[-2])
            keys = min(k.shape[-2], query_offset + stop) if causal else k.shape[-2]
            padding = None if key_padding_mask is None else key_padding_mask[:, :keys]
            args = (q[..., start:stop, :], k[..., :keys, :], v[..., :keys, :], padding)
            block = kernel(self.slopes, query_offset + start, dropout_p)
            if torch.is_grad_enabled() and any(t.requires_grad for t in args[:3]):
                pieces.append(checkpoint(block, *args, use_reentrant=False))
            else:
                pieces.append(block(*args))
        return torch.cat(pieces, dim=-2)

    def extra_repr(self) -> str:
        return f"num_heads={self.slopes.numel()}, block_size={self.block_size}"


class _CausalBlock:
    """One causal query block: the bias as a query feature times a key feature, a causal mask, SDPA."""

    def __init__(self, slopes: Tensor, first_query: int, dropout_p: float) -> None:
        self.slopes, self.first_query, self.dropout_p = slopes, first_query, dropout_p

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        head_dim, scale = q.shape[-1], 1.0 / math.sqrt(q.shape[-1])
        width = 8 - head_dim % 8  # the features padded to a multiple of 8 (what fused kernels like)
        last_query = self.first_query + q.shape[-2] - 1
        key_pos = torch.arange(k.shape[-2], device=q.device)
        q_feature = q.new_zeros(*q.shape[:-1], width)
        q_feature[..., 0] = (self.slopes.to(q.dtype) / scale)[:, None]
        k_feature = k.new_zeros(*k.shape[:-1], width)
        k_feature[..., 0] = (key_pos - last_query).to(k.dtype)
        mask = _block_mask(self.slopes, True, self.first_query, q.shape[-2], k.shape[-2], key_padding_mask, q.dtype)
        # v is padded too: SDPA's fused CPU kernel needs one head size for q, k and v (else it
        # falls back to the math path, 6-8x slower); the padded output columns are zeros.
        v = torch.cat([v, v.new_zeros(*v.shape[:-1], width)], -1)
        out = sdpa_with_bias(
            torch.cat([q, q_feature], -1), torch.cat([k, k_feature], -1), v, attn_mask=mask,
            dropout_p=self.dropout_p, scale=scale,
        )  # fmt: skip
        return out[..., :head_dim]


class _Block:
    """One bidirectional query block: SDPA with the block's ALiBi bias (and padding mask) as ``attn_mask``."""

    def __init__(self, slopes: Tensor, first_query: int, dropout_p: float) -> None:
        self.slopes, self.first_query, self.dropout_p = slopes, first_query, dropout_p

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        bias = _block_mask(self.slopes, False, self.first_query, q.shape[-2], k.shape[-2], key_padding_mask, q.dtype)
        return sdpa_with_bias(q, k, v, attn_mask=bias, dropout_p=self.dropout_p)


def _block_mask(
    slopes: Tensor, causal: bool, first_query: int, num_queries: int, num_keys: int,
    key_padding_mask: Tensor | None, dtype: torch.dtype,
) -> Tensor:
    """The additive mask of one query block over keys ``0 .. num_keys - 1``.

    Causal: ``(queries, keys)``, ``-inf`` above the diagonal (the ALiBi bias itself travels in the
    query and key features). Bidirectional: the bias ``(1, heads, queries, keys)``. Padding keys
    get the dtype's lowest *finite* value (a padded query may see no real key): ``(batch, ...)``.
    """
    device = slopes.device
    query_pos = torch.arange(first_query, first_query + num_queries, device=device)[:, None]
    key_pos = torch.arange(num_keys, device=device)[None, :]
    if causal:
        mask = torch.zeros(num_queries, num_keys, dtype=dtype, device=device)
        mask.masked_fill_(key_pos > query_pos, float("-inf"))
    else:
        mask = -slopes.to(dtype)[None, :, None, None] * (query_pos - key_pos).abs().to(dtype)
    if key_padding_mask is not None:
        mask = mask.masked_fill(key_padding_mask[:, None, None, :num_keys], torch.finfo(dtype).min)
    return mask


class _FusedBlocks(torch.autograd.Function):
    """Query-blocked ALiBi attention on SDPA's fused CPU kernel, forward and backward, keeping each block's log-sum-exp.

    ``forward(q, k, v, slopes, causal, query_offset, key_padding_mask, block_size)`` takes
    ``q (batch, heads, queries, head_dim)`` and ``k, v (batch, heads, keys, head_dim)`` and returns
    ``(batch, heads, queries, head_dim)``. The queries, keys and values are widened once by the
    ALiBi features (causal) and the padding to a multiple of 8 (one head size for q, k and v: the
    fused kernel's condition); a block only rewrites the key feature ``j - c`` in place. Saved:
    the widened inputs, the output and its log-sum-exp, all linear in the sequence.
    """

    _forward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    _backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward

    @staticmethod
    def forward(ctx, q, k, v, slopes, causal, query_offset, key_padding_mask, block_size):
        head_dim, scale = q.shape[-1], 1.0 / math.sqrt(q.shape[-1])
        width = 8 - head_dim % 8
        q_wide = F.pad(q, (0, width))
        k_wide, v_wide = F.pad(k, (0, width)), F.pad(v, (0, width))
        if causal:
            q_wide[..., head_dim] = (slopes.to(q.dtype) / scale)[:, None]
        ctx.plan = _Plan(slopes, causal, query_offset, block_size, scale, head_dim)
        out = torch.empty_like(q_wide)
        lse = []
        for start, stop, keys, mask in ctx.plan.blocks(q_wide, k_wide, key_padding_mask):
            block_out, block_lse = _FusedBlocks._forward(
                q_wide[..., start:stop, :], k_wide[..., :keys, :], v_wide[..., :keys, :], attn_mask=mask, scale=scale
            )
            out[..., start:stop, :] = block_out
            lse.append(block_lse)
        ctx.save_for_backward(q_wide, k_wide, v_wide, out, torch.cat(lse, dim=-1), key_padding_mask)
        return out[..., :head_dim]

    @staticmethod
    def backward(ctx, grad):
        q_wide, k_wide, v_wide, out, lse, key_padding_mask = ctx.saved_tensors
        plan = ctx.plan
        grad_wide = F.pad(grad, (0, q_wide.shape[-1] - plan.head_dim))
        grad_q = torch.empty_like(q_wide)
        grad_k, grad_v = torch.zeros_like(k_wide), torch.zeros_like(v_wide)
        for start, stop, keys, mask in plan.blocks(q_wide, k_wide, key_padding_mask):
            block_q, block_k, block_v = _FusedBlocks._backward(
                grad_wide[..., start:stop, :], q_wide[..., start:stop, :], k_wide[..., :keys, :],
                v_wide[..., :keys, :], out[..., start:stop, :], lse[..., start:stop], 0.0, False,
                attn_mask=mask, scale=plan.scale,
            )  # fmt: skip
            grad_q[..., start:stop, :] = block_q
            grad_k[..., :keys, :] += block_k
            grad_v[..., :keys, :] += block_v
        d = plan.head_dim
        return grad_q[..., :d], grad_k[..., :d], grad_v[..., :d], None, None, None, None, None


class _Plan(NamedTuple):
    """What :class:`_FusedBlocks` needs besides tensors, and its walk over the query blocks."""

    slopes: Tensor
    causal: bool
    query_offset: int
    block_size: int
    scale: float
    head_dim: int

    def blocks(self, q_wide: Tensor, k_wide: Tensor, key_padding_mask: Tensor | None):
        """Yields ``(start, stop, keys, additive mask)`` per query block, setting its key feature ``j - c`` first."""
        key_pos = torch.arange(k_wide.shape[-2], device=k_wide.device)
        for start in range(0, q_wide.shape[-2], self.block_size):
            stop = min(start + self.block_size, q_wide.shape[-2])
            first, last = self.query_offset + start, self.query_offset + stop - 1
            keys = min(k_wide.shape[-2], last + 1) if self.causal else k_wide.shape[-2]
            if self.causal:
                k_wide[..., :keys, self.head_dim] = (key_pos[:keys] - last).to(k_wide.dtype)
            mask = _block_mask(self.slopes, self.causal, first, stop - start, keys, key_padding_mask, q_wide.dtype)
            yield start, stop, keys, mask

"""The attention core ``(q, k, v, masks, position term) -> out``, isolated from projections.

Two paths compute the same thing:

* :func:`attend` — the fast path used by the model: ``scaled_dot_product_attention`` when no
  position term enters the logits or when it comes as a ready ``bias`` (2D relative positions,
  :mod:`multimodal.layers.relative2d`), the skewed query-blocked kernel of
  :mod:`multimodal.layers.relative` when 1D relative positions do (FlexAttention on a GPU);
* :func:`attend_reference` — plain PyTorch that materialises every logit. Slow and quadratic in
  memory, but obviously correct: the tests hold the fast path to it.

Shapes: ``q`` is ``(batch, heads, q_len, head_dim)``; ``k`` and ``v`` are
``(batch, heads, k_len, head_dim)``; queries sit at absolute positions
``query_offset .. query_offset + q_len - 1`` and keys at ``0 .. k_len - 1`` (this is what makes
causal masks and relative distances right during cached decoding).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from multimodal.layers.relative import (
    RelativePositionEmbedding,
    relative_attention,
    relative_logits_reference,
)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    query_offset: int = 0,
    key_padding_mask: Tensor | None = None,
    relative: RelativePositionEmbedding | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Fast attention; returns ``(batch, heads, q_len, head_dim)``.

    Args:
        q: ``(batch, heads, q_len, head_dim)``.
        k: ``(batch, heads, k_len, head_dim)``.
        v: ``(batch, heads, k_len, head_dim)``.
        causal: Query at absolute position ``i`` sees keys ``j <= i`` only.
        query_offset: Absolute position of the first query (cached decoding).
        key_padding_mask: ``(batch, k_len)`` bool, True for keys to ignore.
        relative: Relative distance table; None for attention without a position term.
        bias: Float logits bias broadcastable to ``(batch, heads, q_len, k_len)``, added after the
            ``1 / sqrt(head_dim)`` scaling (e.g. :class:`~multimodal.layers.RelativePosition2D`).
        dropout_p: Dropout on attention probabilities (0.0 in eval mode).
    """
    if relative is not None and bias is not None:
        raise ValueError("pass either a 1D `relative` table or a logits `bias`, not both")
    if relative is not None:
        return relative_attention(
            q, k, v, relative, causal=causal, query_offset=query_offset,
            key_padding_mask=key_padding_mask, dropout_p=dropout_p,
        )  # fmt: skip
    q_len, k_len = q.shape[-2], k.shape[-2]
    simple_causal = causal and q_len == k_len and key_padding_mask is None and bias is None
    # A cached decoding step: one query at the newest position sees every key, so no mask is needed.
    newest_query = q_len == 1 and query_offset == k_len - 1 and key_padding_mask is None
    mask = None
    if not (simple_causal or newest_query):
        mask = _allowed(q_len, k_len, causal, query_offset, key_padding_mask, q.device)
    if bias is not None:
        mask = bias if mask is None else torch.where(mask, bias, torch.finfo(bias.dtype).min)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=simple_causal)


def attend_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    query_offset: int = 0,
    key_padding_mask: Tensor | None = None,
    relative: RelativePositionEmbedding | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Plain-PyTorch attention with every logit materialised; same arguments as :func:`attend`."""
    logits = q @ k.transpose(-1, -2)  # (b, h, q, k)
    if relative is not None:
        logits = logits + relative_logits_reference(q, relative, k.shape[-2], query_offset)
    logits = logits / math.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + bias
    allowed = _allowed(q.shape[-2], k.shape[-2], causal, query_offset, key_padding_mask, q.device)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
    probs = F.dropout(torch.softmax(logits, dim=-1), p=dropout_p, training=dropout_p > 0)
    return probs @ v


def _allowed(
    q_len: int, k_len: int, causal: bool, query_offset: int, key_padding_mask: Tensor | None, device
) -> Tensor | None:
    """Bool mask, True where a query may attend to a key: ``(q, k)`` or ``(batch, 1, q, k)``; None if all."""
    allowed = None
    if causal:
        q_pos = torch.arange(q_len, device=device)[:, None] + query_offset
        allowed = torch.arange(k_len, device=device)[None, :] <= q_pos  # (q, k)
    if key_padding_mask is not None:
        keys = ~key_padding_mask[:, None, None, :]  # (b, 1, 1, k)
        allowed = keys if allowed is None else keys & allowed
    return allowed

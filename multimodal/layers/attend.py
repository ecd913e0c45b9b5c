"""The attention core ``(q, k, v, masks, position term) -> out``, isolated from projections.

Two paths compute the same thing:

* :func:`attend` — the fast path used by the model: the position scheme's fused kernel when it
  has one (the skewed relative kernel of :mod:`multimodal.layers.positions.relative`, FlexAttention on a
  GPU; query-blocked ALiBi), else ``scaled_dot_product_attention`` with the scheme's logits bias
  (none for rotary, which turned q and k before);
* :func:`attend_reference` — plain PyTorch that materialises every logit. Slow and quadratic in
  memory, but obviously correct: the tests hold the fast path to it.

Shapes: ``q`` is ``(batch, heads, q_len, head_dim)``; ``k`` and ``v`` are
``(batch, kv_heads, k_len, head_dim)``; queries sit at absolute positions
``query_offset .. query_offset + q_len - 1`` and keys at ``0 .. k_len - 1`` (this is what makes
causal masks and relative distances right during cached decoding).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from multimodal.layers.positions.base import AttentionPosition
from multimodal.layers.sdpa import sdpa_with_bias


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    query_offset: int = 0,
    key_padding_mask: Tensor | None = None,
    position: AttentionPosition | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Fast attention; returns ``(batch, heads, q_len, head_dim)``.

    Args:
        q: ``(batch, heads, q_len, head_dim)``.
        k: ``(batch, kv_heads, k_len, head_dim)``; ``kv_heads`` divides ``heads`` (grouped-query
            attention: each key/value head serves a group of adjacent query heads).
        v: ``(batch, kv_heads, k_len, head_dim)``.
        causal: Query at absolute position ``i`` sees keys ``j <= i`` only.
        query_offset: Absolute position of the first query (cached decoding).
        key_padding_mask: ``(batch, k_len)`` bool, True for keys to ignore.
        position: The layer's position scheme: its fused kernel if it has one for these shapes,
            else its logits bias (:class:`~multimodal.layers.positions.base.AttentionPosition`).
        dropout_p: Dropout on attention probabilities (0.0 in eval mode).
    """
    bias = None
    if position is not None:
        fused = position.attend(
            q, k, v, causal=causal, query_offset=query_offset, key_padding_mask=key_padding_mask, dropout_p=dropout_p
        )
        if fused is not None:
            return fused
        bias = position.bias(q, *_positions(q.shape[-2], k.shape[-2], query_offset, q.device))
    q_len, k_len = q.shape[-2], k.shape[-2]
    simple_causal = causal and q_len == k_len and key_padding_mask is None and bias is None
    # A cached decoding step: one query at the newest position sees every key, so no mask is needed.
    newest_query = q_len == 1 and query_offset == k_len - 1 and key_padding_mask is None
    mask = None
    if not (simple_causal or newest_query):
        mask = _allowed(q_len, k_len, causal, query_offset, key_padding_mask, q.device)
    groups = q.shape[1] // k.shape[1]
    if newest_query and mask is None and bias is None and groups > 1:
        # Grouped-query decoding step: the query heads of one key/value head are that head's
        # queries, so one product per key/value head reads the cache once (SDPA's enable_gqa path
        # copies the cache to every query head on CPU).
        batch, heads, _, head_dim = q.shape
        grouped = q.reshape(batch, k.shape[1], groups, head_dim)
        return F.scaled_dot_product_attention(grouped, k, v, dropout_p=dropout_p).reshape(batch, heads, 1, head_dim)
    if bias is not None:
        mask = bias if mask is None else torch.where(mask, bias, torch.finfo(bias.dtype).min)
    elif key_padding_mask is not None and mask is not None:
        # A large negative number, not -inf: the query of a padding token (left-padded prompts) may
        # see no real key at all, and its row must stay finite (it is discarded, but NaN would spread).
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, torch.finfo(q.dtype).min)
    return sdpa_with_bias(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=simple_causal, enable_gqa=groups > 1
    )


def attend_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    query_offset: int = 0,
    key_padding_mask: Tensor | None = None,
    position: AttentionPosition | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Plain-PyTorch attention with every logit materialised; same arguments as :func:`attend`.

    The position enters only through its pair-by-pair :meth:`~AttentionPosition.bias`, never its fused kernel.
    """
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (b, h, q, k)
    if position is not None:
        bias = position.bias(q, *_positions(q.shape[-2], k.shape[-2], query_offset, q.device))
        if bias is not None:
            logits = logits + bias
    allowed = _allowed(q.shape[-2], k.shape[-2], causal, query_offset, key_padding_mask, q.device)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
    probs = F.dropout(torch.softmax(logits, dim=-1), p=dropout_p, training=dropout_p > 0)
    return probs @ v


def _positions(q_len: int, k_len: int, query_offset: int, device) -> tuple[Tensor, Tensor]:
    """Absolute query positions ``(q, 1)`` and key positions ``(1, k)``: queries from ``query_offset``, keys from 0."""
    return (torch.arange(q_len, device=device)[:, None] + query_offset, torch.arange(k_len, device=device)[None, :])


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

"""Relative position attention through ``torch.nn.attention.flex_attention``: the GPU path.

The skewed kernel of :mod:`multimodal.layers.positions.relative` loops over query blocks in Python and
launches several kernels per block; on a GPU that leaves most of the chip idle. FlexAttention
instead generates one fused flash-attention kernel from a ``score_mod`` — a function of
``(score, batch, head, query_index, key_index)`` — and a block-sparse mask, and differentiates
through the tensors the ``score_mod`` reads.

The relative term ``q_i · E[clip(j - i)]`` cannot be computed inside a ``score_mod`` (it sees one
scalar score, not the query vector), so it comes in as a captured tensor: the *band*
``(q / sqrt(d)) @ Eᵀ`` of shape ``(batch, heads, q_len, n)``, one column per row of the distance
table (``n = max_distance + 1`` causal, ``2·max_distance + 1`` bidirectional), and the
``score_mod`` adds ``band[b, h, i, row(j - i)]`` to each score. That is the Music Transformer's
``Q Eᵀ`` without the skew: the index arithmetic replaces it. Memory is ``batch · heads · q_len · n``
— linear in the sequence for clipped distances, quadratic when every distance of the trained
length has its own embedding; there :func:`~multimodal.layers.positions.relative.relative_attention` falls
back to the skewed kernel's O(L·d) above :data:`FLEX_BAND_MAX_BYTES`.

Causal masking is a block mask, so the upper triangle's blocks are never computed; padded keys
are masked by a ``mask_mod`` reading the ``(batch, k_len)`` padding mask. Dropout is not
supported by FlexAttention: :func:`~multimodal.layers.positions.relative.relative_attention` routes
attention with dropout to the skewed kernel.

On CUDA the kernel is compiled (once per shape); on CPU ``flex_attention`` runs uncompiled,
materialising the scores — a reference for the tests, not a fast path (the skewed kernel is the
CPU path). Gradients through the compiled kernel need CUDA.
"""

from __future__ import annotations

import functools
import math
import warnings

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

FLEX_BAND_MAX_BYTES = 2 * 2**30
"""Largest band ``relative_attention(backend="auto")`` gives FlexAttention (its gradient doubles it)."""


def band_bytes(q: Tensor, num_distances: int) -> int:
    """Bytes of the band ``(batch, heads, q_len, num_distances)`` in ``q``'s dtype."""
    return q.shape[0] * q.shape[1] * q.shape[2] * num_distances * q.element_size()


def flex_relative_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    table: Tensor,
    max_distance: int,
    *,
    causal: bool,
    query_offset: int = 0,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    """Relative attention as one fused FlexAttention kernel; returns ``(batch, heads, q_len, head_dim)``.

    Args:
        q: Queries ``(batch, heads, q_len, head_dim)``.
        k: Keys ``(batch, heads, k_len, head_dim)``.
        v: Values ``(batch, heads, k_len, head_dim)``.
        table: Relative embeddings ``(heads, num_distances, head_dim)``; row ``max_distance + r``
            holds distance ``r`` (:class:`~multimodal.layers.RelativePositionEmbedding.weight`).
        max_distance: Distances are clipped to ``[-max_distance, max_distance]`` (``<= 0`` if causal).
        causal: Query at absolute position ``i`` sees keys ``j <= i`` only.
        query_offset: Absolute position of the first query; keys start at 0.
        key_padding_mask: ``(batch, k_len)`` bool, True for keys to ignore.
    """
    q_len, k_len = q.shape[-2], k.shape[-2]
    upper = 0 if causal else max_distance
    if table.shape[1] != max_distance + upper + 1:
        raise ValueError(f"table of {table.shape[1]} distances for max_distance={max_distance}, causal={causal}")
    # One band column per table row: the kernel's code then depends on the table alone, not on the
    # offset of a call (each new length still compiles once: see _compiled_flex).
    band = (q * (1.0 / math.sqrt(q.shape[-1]))) @ table.to(q.dtype).transpose(-1, -2)  # (b, h, q, n)
    offset = torch.tensor(query_offset, device=q.device)  # a tensor, not a constant baked into the kernel

    def add_relative(score, batch, head, query, key):
        row = (key - query - offset).clamp(-max_distance, upper) + max_distance
        return score + band[batch, head, query, row]

    block_mask = _block_mask(q_len, k_len, causal, query_offset, key_padding_mask, q.device)
    attention = _compiled_flex() if q.is_cuda else _eager_flex
    return attention(q, k, v, score_mod=add_relative, block_mask=block_mask)


@functools.cache
def _compiled_flex():
    """``flex_attention`` compiled once per process and shape: the fused kernel (inside a model that
    is itself compiled, dynamo traces through this).

    ``dynamic=False``: by default a second shape recompiles with symbolic sizes, and Inductor
    (torch 2.11) cannot lower this ``score_mod``'s captured band then ("LoweringException:
    AttributeError: 'ShapeAsConstantBuffer' object has no attribute 'dtype'"; every length after the
    first failed on an H200 in ``make gpu-check``, 2026-12-04). Static shapes compile once per length.
    """
    return torch.compile(flex_attention, dynamic=False)


def _eager_flex(*args, **kwargs) -> Tensor:
    """Uncompiled ``flex_attention`` (materialises every score; CPU tests and debugging)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(*args, **kwargs)


def _block_mask(
    q_len: int, k_len: int, causal: bool, query_offset: int, key_padding_mask: Tensor | None, device
) -> BlockMask | None:
    """Which (query, key) pairs may attend; None when every pair may."""
    if key_padding_mask is None:
        return _cached_causal_mask(q_len, k_len, query_offset, str(device)) if causal else None
    padding = key_padding_mask

    def allowed(batch, head, query, key):
        keep = ~padding[batch, key]
        return keep & (key <= query + query_offset) if causal else keep

    return create_block_mask(allowed, padding.shape[0], None, q_len, k_len, device=device)


@functools.lru_cache(maxsize=32)
def _cached_causal_mask(q_len: int, k_len: int, query_offset: int, device: str) -> BlockMask:
    """The causal block mask of one shape; built once (building one costs about a kernel launch per block)."""

    def causal(batch, head, query, key):
        return key <= query + query_offset

    return create_block_mask(causal, None, None, q_len, k_len, device=device)

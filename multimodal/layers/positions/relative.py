"""Relative position attention (Shaw et al. 2018) computed the Music Transformer way.

Each layer learns one embedding per head and per clipped relative distance ``r = j - i`` (key
position minus query position). The attention logit of query ``i`` and key ``j`` becomes::

    (q_i · k_j + q_i · E[clip(j - i)]) / sqrt(head_dim)

Shaw et al. build a ``(seq, seq, head_dim)`` tensor of embeddings to get the second term; Huang
et al. (Music Transformer, 2018) compute ``Q E^T`` once and "skew" it into place. This module
goes one step further so that training memory grows linearly in ``seq_len``:

* queries are processed in blocks of ``block_size``; for a block, ``q_block @ E_band^T`` gives
  the relative logits of every distance the block needs (a band of ``keys + block - 1`` columns),
  and the skew is a zero-copy ``as_strided`` view of that band — row ``a`` starts one column
  further left than row ``a - 1``;
* a hand-written backward recomputes each block's probabilities instead of storing them (as flash
  attention does), so only ``q, k, v, out``, the rows' log-sum-exps and the embeddings are kept
  for the backward pass; probabilities are then one ``exp(logit - lse)`` away;
* a causal table gets ``block_size - 1`` rows of zeros for the (masked) later distances a block's
  band touches, so every unclipped band reads, and writes its gradient to, a slice of the table;
* in causal attention a query block only ever touches the keys up to its last query, which halves
  the work.

On the CPU, :func:`relative_attention` hands the same algorithm to one fused C++ kernel
(:mod:`multimodal.layers.positions.relative_cpu`), on a GPU to one FlexAttention kernel
(:mod:`multimodal.layers.positions.relative_flex`); this module's kernel is the path with attention
dropout, for float64, and wherever the C++ kernel cannot be built.

Legend for shapes: ``b`` batch, ``h`` heads, ``q``/``k`` query/key positions, ``d`` head_dim,
``w`` band width (distinct distances one block needs), ``n`` number of distances in the table.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multimodal.layers.positions import relative_cpu
from multimodal.layers.positions.base import AttentionPosition, repeat_kv_heads
from multimodal.layers.positions.relative_flex import FLEX_BAND_MAX_BYTES, band_bytes, flex_relative_attention
from multimodal.layers.sdpa import sdpa_with_bias

Backend = Literal["auto", "skew", "fused", "flex"]

# SDPA's fused CPU kernel, called directly because it also returns the rows' log-sum-exps.
_cpu_flash_attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


class RelativePositionEmbedding(AttentionPosition):
    """Learned embeddings for clipped relative distances, one table per head (the ``"relative"`` position).

    As an :class:`~multimodal.layers.positions.base.AttentionPosition` it adds ``q_i · E[clip(j - i)]
    / sqrt(head_dim)`` to each logit: whole sequences through :func:`relative_attention` (the fused
    C++ kernel on the CPU, FlexAttention on a GPU, else the skewed kernel), other sets of pairs (local
    blocks) by a gather.

    Args:
        num_heads: Attention heads; each has its own table.
        head_dim: Size of each embedding (the per-head query size).
        max_distance: Distances are clipped to ``[-max_distance, max_distance]`` (Shaw's ``k``).
        causal: If True only distances ``<= 0`` exist (a query never sees later keys), which halves
            the table.

    Attributes:
        weight: ``(num_heads, num_distances, head_dim)``; row ``max_distance + r`` holds distance
            ``r``.
    """

    def __init__(self, num_heads: int, head_dim: int, max_distance: int, causal: bool) -> None:
        super().__init__()
        if max_distance < 1:
            raise ValueError(f"max_distance must be >= 1, got {max_distance}")
        self.max_distance = max_distance
        self.causal = causal
        num_distances = max_distance + 1 if causal else 2 * max_distance + 1
        self.weight = nn.Parameter(torch.randn(num_heads, num_distances, head_dim) * 0.02)

    def index(self, distance: Tensor) -> Tensor:
        """Row of ``weight`` for each relative distance ``key_pos - query_pos`` (any shape).

        Positive distances of a causal table map to distance 0; they are masked out anyway.
        """
        upper = 0 if self.causal else self.max_distance
        return distance.clamp(-self.max_distance, upper) + self.max_distance

    def bias(self, q: Tensor, query_pos: Tensor, key_pos: Tensor, grid_width: int | None = None) -> Tensor:
        """``q_i · E[clip(j - i)] / sqrt(head_dim)`` for every pair, gathered from ``q · Eᵀ``; ``(batch, heads, ..., q, k)``."""
        per_distance = torch.einsum("bh...qd,hrd->bh...qr", q, self.weight.to(q.dtype))  # (b, h, ..., q, n)
        index = self.index(key_pos - query_pos)
        index = index.expand(*per_distance.shape[:-1], index.shape[-1])
        return torch.gather(per_distance, -1, index) * (1.0 / math.sqrt(q.shape[-1]))

    def attend(self, q, k, v, *, causal, query_offset, key_padding_mask, dropout_p) -> Tensor:
        return relative_attention(
            *repeat_kv_heads(q, k, v), self, causal=causal, query_offset=query_offset, key_padding_mask=key_padding_mask,
            dropout_p=dropout_p,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}, causal={self.causal}"


def relative_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    embedding: RelativePositionEmbedding,
    *,
    causal: bool,
    query_offset: int = 0,
    key_padding_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    block_size: int = 64,
    backend: Backend = "auto",
) -> Tensor:
    """Relative attention in O(L·d) memory: fused C++ on the CPU, FlexAttention on a GPU, else skewed.

    Args:
        q: Queries ``(batch, heads, q_len, head_dim)``.
        k: Keys ``(batch, heads, k_len, head_dim)``.
        v: Values ``(batch, heads, k_len, head_dim)``.
        embedding: The relative distance table of this layer.
        causal: Query ``i`` sees keys ``j <= i + query_offset`` only.
        query_offset: Absolute position of the first query; keys always start at 0. Used for
            incremental decoding, where ``k_len = query_offset + q_len``.
        key_padding_mask: ``(batch, k_len)`` bool, True where a key is padding and must be ignored.
        dropout_p: Dropout on the attention probabilities (pass 0.0 in eval mode).
        block_size: Queries per block of the skewed kernel; trades Python overhead against
            transient memory ``batch * heads * block_size * k_len``. 64: at 2048 tokens it trains
            as fast as 128 and holds 3.2x SDPA's extra memory instead of 4.7x (docs/benchmarks.md).
        backend: ``"skew"``: this module's query-blocked kernel (any device, O(L·d) memory).
            ``"fused"``: the same algorithm as one C++ kernel per query tile
            (:mod:`multimodal.layers.positions.relative_cpu`; on the CPU, computed in float32, no dropout).
            ``"flex"``: one fused FlexAttention kernel (:mod:`multimodal.layers.positions.relative_flex`;
            backward on CUDA only; no dropout). ``"auto"``: flex for CUDA tensors without dropout
            whose band fits :data:`~multimodal.layers.positions.relative_flex.FLEX_BAND_MAX_BYTES`; fused for
            CPU tensors without dropout where the kernel builds; skew otherwise.

    Returns:
        ``(batch, heads, q_len, head_dim)``.
    """
    _check_shapes(q, k, v, causal, query_offset, key_padding_mask)
    if causal and q.shape[-2] == 1 and dropout_p == 0:  # a cached decoding step
        return _newest_query_attention(q, k, v, embedding, key_padding_mask)
    if backend not in ("auto", "skew", "fused", "flex"):
        raise ValueError(f"backend must be 'auto', 'skew', 'fused' or 'flex', got {backend!r}")
    if backend == "flex" and dropout_p > 0:
        raise ValueError("FlexAttention has no attention dropout: use backend='skew' or attention_dropout=0")
    fits = band_bytes(q, embedding.weight.shape[1]) <= FLEX_BAND_MAX_BYTES
    if backend == "flex" or (backend == "auto" and q.is_cuda and dropout_p == 0 and fits):
        return flex_relative_attention(
            q, k, v, embedding.weight, embedding.max_distance, causal=causal, query_offset=query_offset,
            key_padding_mask=key_padding_mask,
        )  # fmt: skip
    seed = int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
    settings = _Settings(causal, query_offset, dropout_p, seed, block_size, embedding.max_distance)
    fused = backend in ("auto", "fused") and relative_cpu.usable(q, k, v, embedding.weight, dropout_p)
    if backend == "fused" and not fused:
        raise ValueError("backend='fused' needs float32/bf16/fp16 CPU tensors, no attention dropout and a C++ compiler")
    if fused:  # the causal table's zero rows make every unclipped band a slice of it, as below
        return relative_cpu.FusedRelativeAttention.apply(
            q, k, v, _with_future_rows(embedding.weight, settings), key_padding_mask, causal, query_offset,
            embedding.max_distance, block_size,
        )  # fmt: skip
    return _RelativeAttention.apply(q, k, v, embedding.weight, key_padding_mask, settings)


def _newest_query_attention(
    q: Tensor, k: Tensor, v: Tensor, embedding: RelativePositionEmbedding, key_padding_mask: Tensor | None
) -> Tensor:
    """Causal attention of one query at the newest position ``k_len - 1`` to every key; ``(b, h, 1, d)``.

    A decoding step needs no blocks, skew or causal mask: key ``j`` lies at distance
    ``j - (k_len - 1)``, so the keys take the table rows ``max_distance - (k_len - 1) .. max_distance``
    in order, a slice of the table when ``k_len - 1 <= max_distance``; farther keys are clipped to
    row 0. Plain differentiable ops, so gradients flow as in the blocked kernel.
    """
    position, max_distance = k.shape[-2] - 1, embedding.max_distance
    q_scaled = q * (1.0 / math.sqrt(q.shape[-1]))
    table = embedding.weight  # (h, max_distance + 1, d)
    if position <= max_distance:
        bias = q_scaled @ table[:, max_distance - position :].transpose(-1, -2)  # (b, h, 1, k)
    else:
        per_distance = q_scaled @ table.transpose(-1, -2)  # (b, h, 1, max_distance + 1)
        clipped = per_distance[..., :1].expand(*per_distance.shape[:-1], position - max_distance)
        bias = torch.cat([clipped, per_distance], dim=-1)
    if key_padding_mask is not None:
        bias = bias.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(bias.dtype).min)
    return sdpa_with_bias(q, k, v, attn_mask=bias)


class _Settings:
    """Non-tensor arguments of the autograd function, kept together."""

    def __init__(
        self, causal: bool, query_offset: int, dropout_p: float, seed: int, block_size: int, max_distance: int
    ) -> None:
        self.causal = causal
        self.query_offset = query_offset
        self.dropout_p = dropout_p
        self.seed = seed
        self.block_size = block_size
        self.max_distance = max_distance


class _RelativeAttention(torch.autograd.Function):
    """Forward and hand-written backward of :func:`relative_attention`, one query block at a time."""

    @staticmethod
    def forward(ctx, q, k, v, table, key_padding_mask, settings: _Settings):  # type: ignore[override]
        scale = 1.0 / math.sqrt(q.shape[-1])
        q_scaled = q * scale
        out = torch.empty_like(q)
        # The row log-sum-exps let the backward turn logits into probabilities with one exp
        # (no max and sum passes); kept where the fused CPU kernel returns them and no padding
        # can leave a row without keys.
        keep_lse = q.device.type == "cpu" and settings.dropout_p == 0 and key_padding_mask is None
        lse = q.new_empty(q.shape[:-1], dtype=torch.float32) if keep_lse else None
        ctx.save_for_backward(q, k, v, table, key_padding_mask, out, lse)
        ctx.settings = settings
        table = _with_future_rows(table, settings)
        for block in _blocks(q.shape[-2], k.shape[-2], settings):
            keys = slice(0, block.num_keys)
            if settings.dropout_p > 0:
                probs = _block_probs(q_scaled, k, table, key_padding_mask, block, settings)[0]
                probs = probs * _dropout_keep(probs, block, settings)
                out[..., block.rows, :] = probs @ v[..., keys, :]
            else:
                # The fused kernel adds the relative logits as a float bias: fastest without dropout.
                bias = _block_bias(q_scaled, table, key_padding_mask, block, settings)
                q_block, k_block, v_block = q[..., block.rows, :], k[..., keys, :], v[..., keys, :]
                if lse is None:
                    out[..., block.rows, :] = sdpa_with_bias(
                        q_block, k_block, v_block, attn_mask=bias
                    )
                else:
                    out[..., block.rows, :], lse[..., block.rows] = _cpu_flash_attention(
                        q_block, k_block, v_block, 0.0, False, attn_mask=bias
                    )
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, table, key_padding_mask, out, lse = ctx.saved_tensors
        settings: _Settings = ctx.settings
        # Under autocast the forward's products ran in q's dtype (bf16, fp16); the backward runs
        # outside autocast, so the float32 table is cast here; its gradient is summed in float32.
        table_dtype, num_distances = table.dtype, table.shape[1]
        table = _with_future_rows(table.to(q.dtype), settings)
        scale = 1.0 / math.sqrt(q.shape[-1])
        q_scaled = q * scale
        grad_out = grad_out.to(q.dtype).contiguous()
        # Row sums of dO * O equal sum_j P_ij dP_ij, the softmax backward's subtracted term.
        row_dot = (grad_out * out).sum(-1, keepdim=True)  # (b, h, q, 1)
        grad_q = torch.empty_like(q)
        grad_k = torch.zeros_like(k)
        grad_v = torch.zeros_like(v)
        grad_table = torch.zeros_like(table, dtype=table_dtype)  # summed over blocks in the table's precision
        for block in _blocks(q.shape[-2], k.shape[-2], settings):
            block_lse = None if lse is None else lse[..., block.rows, None]
            probs, band_rows = _block_probs(q_scaled, k, table, key_padding_mask, block, settings, block_lse)
            keep = _dropout_keep(probs, block, settings)
            keys = slice(0, block.num_keys)
            q_block = q_scaled[..., block.rows, :]  # (b, h, q, d)
            grad_block = grad_out[..., block.rows, :]
            kept = probs if keep is None else probs * keep
            grad_v[..., keys, :] += kept.transpose(-1, -2) @ grad_block
            grad_probs = grad_block @ v[..., keys, :].transpose(-1, -2)  # (b, h, q, k)
            if keep is not None:
                grad_probs.mul_(keep)
            grad_logits = grad_probs.sub_(row_dot[..., block.rows, :]).mul_(probs)  # (b, h, q, k)
            grad_k[..., keys, :] += grad_logits.transpose(-1, -2) @ q_block
            grad_q_block = grad_logits @ k[..., keys, :]
            grad_band = _unskew(grad_logits)
            grad_q_block += grad_band @ table[:, band_rows]
            grad_band_table = torch.einsum("bhqw,bhqd->hwd", grad_band, q_block).to(table_dtype)
            if isinstance(band_rows, slice):
                grad_table[:, band_rows] += grad_band_table
            else:
                grad_table.index_add_(1, band_rows, grad_band_table)
            grad_q[..., block.rows, :] = grad_q_block * scale
        return grad_q, grad_k, grad_v, grad_table[:, :num_distances], None, None


class _Block:
    """One block of queries: which rows, and how many keys they can see."""

    def __init__(self, start: int, stop: int, num_keys: int, position: int) -> None:
        self.rows = slice(start, stop)
        self.size = stop - start
        self.num_keys = num_keys
        self.position = position  # absolute position of the block's first query
        self.index = start


def _with_future_rows(table: Tensor, settings: _Settings) -> Tensor:
    """A causal table ``(h, n, d)`` with ``block_size - 1`` zero rows appended for distances ``1 .. block_size - 1``.

    A causal block's band reaches those distances (keys after a query, masked afterwards): with
    rows for them every unclipped band is a slice of the table, read and written back through views
    instead of gathered and scattered per block.
    """
    if not settings.causal:
        return table
    return F.pad(table, (0, 0, 0, settings.block_size - 1))


def _blocks(q_len: int, k_len: int, settings: _Settings):
    """Yields the query blocks; a causal block sees keys up to its last query only."""
    for start in range(0, q_len, settings.block_size):
        stop = min(start + settings.block_size, q_len)
        position = settings.query_offset + start
        num_keys = min(k_len, settings.query_offset + stop) if settings.causal else k_len
        yield _Block(start, stop, num_keys, position)


def _block_probs(
    q_scaled, k, table, key_padding_mask, block: _Block, settings: _Settings, lse: Tensor | None = None
):
    """Attention probabilities of one query block ``(b, h, block, keys)`` and its band's table rows.

    ``lse``: the rows' log-sum-exps ``(b, h, block, 1)`` from the forward, if it kept them.
    """
    q_block = q_scaled[..., block.rows, :]  # (b, h, q, d)
    band, band_rows = _band(q_block, table, block, settings)
    logits = q_block @ k[..., : block.num_keys, :].transpose(-1, -2)  # (b, h, q, k)
    logits += _skew(band, block.num_keys)
    _mask_(logits, key_padding_mask, block, settings)
    if lse is None:
        return torch.softmax(logits, dim=-1), band_rows
    return logits.sub_(lse).exp_(), band_rows


def _block_bias(q_scaled, table, key_padding_mask, block: _Block, settings: _Settings) -> Tensor:
    """Relative logits of one query block with masks applied ``(b, h, block, keys)``: the skewed view of the band.

    SDPA's fused kernel reads the mask through its row stride, so the view goes in as it is: no
    copy of the ``(b, h, block, keys)`` logits (at 2048 tokens that copy was a sixth of the forward).
    """
    band, _ = _band(q_scaled[..., block.rows, :], table, block, settings)
    bias = _skew(band, block.num_keys)
    _mask_(bias, key_padding_mask, block, settings)
    return bias


def _band(
    q_block: Tensor, table: Tensor, block: _Block, settings: _Settings
) -> tuple[Tensor, slice | Tensor]:
    """Relative logits ``(b, h, q, w)`` of every distance the block needs, and their table rows.

    The rows are a ``slice`` when no distance is clipped (the table is then read and its gradient
    written through views), else an index ``(w,)``.
    """
    # Distances from (first key - last query) to (last key - first query).
    lowest, highest = -(block.position + block.size - 1), block.num_keys - 1 - block.position
    upper = table.shape[1] - 1 - settings.max_distance  # the farthest later distance the table has a row for
    if -settings.max_distance <= lowest and highest <= upper:
        # No distance is clipped: the rows are a contiguous range, a view instead of a gather.
        start = lowest + settings.max_distance
        band_rows = slice(start, start + highest - lowest + 1)
        embeddings = table[:, band_rows]
    else:
        distances = torch.arange(lowest, highest + 1, device=q_block.device)
        band_rows = distances.clamp(-settings.max_distance, upper) + settings.max_distance
        embeddings = table[:, band_rows]
    return q_block @ embeddings.transpose(-1, -2), band_rows


def _mask_(logits: Tensor, key_padding_mask: Tensor | None, block: _Block, settings: _Settings) -> None:
    """Masks future keys (causal) and padding keys of a block's ``(b, h, q, keys)`` logits in place."""
    if settings.causal:
        # Only the last `block.size` keys can lie in the future of some query of the block.
        diagonal = logits[..., block.num_keys - block.size :]
        future = torch.ones(block.size, block.size, dtype=torch.bool, device=logits.device).triu_(1)
        diagonal.masked_fill_(future, float("-inf"))
    if key_padding_mask is not None:
        padding = key_padding_mask[:, None, None, : block.num_keys]
        logits.masked_fill_(padding, torch.finfo(logits.dtype).min)


def _dropout_keep(probs: Tensor, block: _Block, settings: _Settings) -> Tensor | None:
    """The block's dropout mask scaled by ``1 / (1 - p)``; seeded per block so backward redraws it."""
    if settings.dropout_p == 0:
        return None
    generator = torch.Generator(device=probs.device).manual_seed(settings.seed + block.index)
    keep = torch.empty_like(probs).bernoulli_(1 - settings.dropout_p, generator=generator)
    return keep.div_(1 - settings.dropout_p)


def _skew(band: Tensor, num_keys: int) -> Tensor:
    """Zero-copy view of a ``(..., q, w)`` band as ``(..., q, num_keys)`` relative logits.

    Band column ``c`` holds distance ``c - (block_position + q - 1)`` for every row, so the logit
    of row ``a`` and key ``j`` sits at column ``j + q - 1 - a``: each row starts one column left of
    the row above. With the band contiguous that is a stride of ``w - 1`` between rows.
    """
    *lead, rows, width = band.shape
    stride = list(band.stride())
    stride[-2] = width - 1
    return band.as_strided((*lead, rows, num_keys), stride, band.storage_offset() + rows - 1)


def _unskew(grad_logits: Tensor) -> Tensor:
    """The band ``(..., q, keys + q - 1)`` whose skewed view is ``grad_logits`` ``(..., q, keys)``; zero elsewhere.

    Only the first and last ``q - 1`` columns hold entries outside the view (row ``a`` covers
    columns ``q - 1 - a .. q - 2 - a + keys``): those are zeroed, the rest is written once.
    """
    rows, num_keys = grad_logits.shape[-2:]
    band = grad_logits.new_empty(*grad_logits.shape[:-1], num_keys + rows - 1)
    band[..., : rows - 1].zero_()
    band[..., num_keys:].zero_()
    _skew(band, num_keys).copy_(grad_logits)
    return band


def _check_shapes(q, k, v, causal, query_offset, key_padding_mask) -> None:
    if q.dim() != 4 or k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"expected q (batch, heads, q_len, head_dim) and k, v (batch, heads, k_len, head_dim); "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if causal and k.shape[-2] != query_offset + q.shape[-2]:
        raise ValueError(
            f"causal relative attention needs k_len = query_offset + q_len, got k_len={k.shape[-2]}, "
            f"query_offset={query_offset}, q_len={q.shape[-2]}"
        )
    if key_padding_mask is not None and key_padding_mask.shape != (k.shape[0], k.shape[-2]):
        raise ValueError(
            f"key_padding_mask must be (batch, k_len) = {(k.shape[0], k.shape[-2])}, "
            f"got {tuple(key_padding_mask.shape)}"
        )

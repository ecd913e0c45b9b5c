"""Local attention (Parmar et al. 2018, Image Transformer): each query sees a bounded neighbourhood.

Two patterns, each causal (decoders) or bidirectional (encoders), selected with
``TransformerConfig.attention``:

* ``local1d`` — query ``i`` sees keys ``j`` with ``0 <= i - j < window``: itself and the
  ``window - 1`` tokens before it (bidirectional: ``|i - j| < window``).
* ``local2d`` — the sequence is laid out row by row on a grid ``grid_width`` tokens wide (raster
  pixels: ``width * channels`` with the channels of a pixel side by side). The grid is cut into
  *query blocks* of ``query_shape = (rows, cols)``; a block attends to its *memory block*: the
  query block widened by ``memory_shape[1]`` columns on each side and ``memory_shape[0]`` rows above
  (and below, bidirectional). Causal attention also drops keys after the query in raster order.

**Cost grows linearly with the sequence.** Queries are gathered block by block (1D: blocks of
``window`` queries, whose memory is the previous block and their own, plus the next one
bidirectionally), so a forward pass computes ``seq_len × memory`` logits instead of
``seq_len²``; the exact pattern inside a block is a boolean mask, and the blocks go through
``scaled_dot_product_attention`` as one batch.

**Cached decoding** only needs the last :meth:`LocalAttention.lookback` keys: the stack gives
:class:`~multimodal.layers.cache.KVCache` that window, so each decoding step costs ``O(window)``
however long the sequence already is.

**Positions** come from the attention layer's position scheme, asked for the bias of each block
(:class:`~multimodal.layers.positions.base.AttentionPosition`): ``relative`` gives ``q_i · E[j - i]``
(1D) or ``q_i · (E_row[Δrow] + E_col[Δcol])`` (2D, :class:`~multimodal.layers.positions.grid.GridOffsets`),
with tables that never clip inside a memory block; ALiBi its distance bias; rotary turned q and k
before. The pattern itself has no parameters: one instance serves every layer of a stack and keeps
the block layouts it has computed.

Shape legend: ``b`` batch, ``h`` heads, ``n`` query blocks, ``q`` queries per block, ``m`` memory
slots per block, ``d`` head_dim.

Why one file of ~400 lines: both patterns share the block geometry (query blocks, memory blocks,
what a key can see) between the blocked fast path, the dense path of cached decoding and the
reference; split apart, the three would each restate it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from multimodal.layers.positions.base import AttentionPosition
from multimodal.layers.sdpa import sdpa_with_bias

if TYPE_CHECKING:
    from multimodal.layers.config import TransformerConfig

LocalPattern = Literal["local1d", "local2d"]


class LocalAttention(nn.Module):
    """The attention core of a local pattern: fast blocked path, decoding path and a plain reference.

    Called like :func:`~multimodal.layers.attend.attend` by :class:`~multimodal.layers.MultiHeadAttention`
    with ``q`` ``(batch, heads, q_len, head_dim)`` and ``k``, ``v`` ``(batch, heads, k_len, head_dim)``;
    queries sit at absolute positions ``query_offset + 0 .. q_len - 1``, keys at ``key_offset + 0 ..
    k_len - 1`` (a windowed KV cache has forgotten the keys before ``key_offset``).

    Args:
        pattern: ``"local1d"`` or ``"local2d"``.
        causal: Keys after the query are masked (decoders).
        window: ``local1d``: keys a query sees, itself included (per side, bidirectional).
        grid_width: ``local2d``: tokens per grid row (``width * channels`` for raster pixels). May be
            left None and given to each call (models whose inputs vary in size).
        query_shape: ``local2d``: ``(rows, cols)`` of a query block.
        memory_shape: ``local2d``: ``(rows, cols)`` the memory block adds above (and below, bidirectional)
            and on each side of the query block.
    """

    def __init__(
        self,
        pattern: LocalPattern,
        *,
        causal: bool,
        window: int = 256,
        grid_width: int | None = None,
        query_shape: tuple[int, int] = (8, 8),
        memory_shape: tuple[int, int] = (8, 8),
    ) -> None:
        super().__init__()
        if pattern not in ("local1d", "local2d"):
            raise ValueError(f"unknown local attention pattern {pattern!r}; choose 'local1d' or 'local2d'")
        if pattern == "local1d" and window < 1:
            raise ValueError(f"local1d attention needs window >= 1, got {window}")
        query_shape, memory_shape = _pair(query_shape, "query_shape"), _pair(memory_shape, "memory_shape")
        if min(query_shape) < 1 or min(memory_shape) < 0:
            raise ValueError(
                f"local2d needs query_shape >= (1, 1) and memory_shape >= (0, 0), got {query_shape}, {memory_shape}"
            )
        self.pattern, self.causal, self.window = pattern, causal, window
        self.query_shape, self.memory_shape = query_shape, memory_shape
        self.grid_width = grid_width
        self._layouts: dict[tuple, tuple[Tensor, Tensor, Tensor]] = {}  # (geometry, length, device) -> layout

    @classmethod
    def from_config(cls, config: TransformerConfig, causal: bool) -> LocalAttention | None:
        """The local pattern the blocks of ``config`` share; None for ``attention="full"``."""
        if config.attention == "full":
            return None
        return cls(
            config.attention, causal=causal, window=config.local_window, grid_width=config.local_grid_width,
            query_shape=config.local_query_shape, memory_shape=config.local_memory_shape,
        )  # fmt: skip

    def lookback(self, grid_width: int | None = None) -> int | None:
        """Largest ``i - j`` a query ``i`` can see: the keys a decoding cache must keep. None if bidirectional."""
        if not self.causal:
            return None
        if self.pattern == "local1d":
            return self.window - 1
        (rows, cols), (memory_rows, memory_cols) = self.query_shape, self.memory_shape
        return (rows - 1 + memory_rows) * self._grid(grid_width) + cols - 1 + memory_cols

    # ----------------------------------------------------------------------------------------------
    # The pattern
    # ----------------------------------------------------------------------------------------------

    def allowed(self, query_pos: Tensor, key_pos: Tensor, grid_width: int | None = None) -> Tensor:
        """True where query position ``query_pos`` may attend to key position ``key_pos`` (broadcast)."""
        if self.pattern == "local1d":
            distance = query_pos - key_pos
            return (distance >= 0) & (distance < self.window) if self.causal else distance.abs() < self.window
        width = self._grid(grid_width)
        (rows, cols), (memory_rows, memory_cols) = self.query_shape, self.memory_shape
        query_row, query_col = query_pos // width, query_pos % width
        key_row, key_col = key_pos // width, key_pos % width
        top, left = query_row // rows * rows - memory_rows, query_col // cols * cols - memory_cols
        bottom = top + memory_rows + rows + (0 if self.causal else memory_rows)
        inside = (
            (key_row >= top)
            & (key_row < bottom)
            & (key_col >= left)
            & (key_col < left + cols + 2 * memory_cols)
        )
        return inside & (key_pos <= query_pos) if self.causal else inside

    def position_bias(
        self, position: AttentionPosition | None, q: Tensor, query_pos: Tensor, key_pos: Tensor, grid_width: int | None
    ) -> Tensor | None:
        """The position scheme's (scaled) logit term for every (query, key) pair of the blocks; None without one."""
        if position is None:
            return None
        return position.bias(q, query_pos, key_pos, self._grid(grid_width) if self.pattern == "local2d" else None)

    def _grid(self, grid_width: int | None = None) -> int:
        width = grid_width if grid_width is not None else self.grid_width
        if width is None or width < 1:
            raise ValueError(
                "local2d attention needs the grid width (tokens per row; width * channels for raster "
                "pixels): set TransformerConfig.local_grid_width, or pass grid_width= to the stack's forward"
            )
        return width

    # ----------------------------------------------------------------------------------------------
    # Computation
    # ----------------------------------------------------------------------------------------------

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        query_offset: int = 0,
        key_offset: int = 0,
        key_padding_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        position: AttentionPosition | None = None,
        grid_width: int | None = None,
    ) -> Tensor:
        """Fast local attention; returns ``(batch, heads, q_len, head_dim)``.

        A whole sequence (no cache) goes through the blocked computation; queries against cached
        keys (decoding) through a dense mask over the keys they can still see.

        Args:
            q: ``(batch, heads, q_len, head_dim)``.
            k: ``(batch, heads, k_len, head_dim)``.
            v: ``(batch, heads, k_len, head_dim)``.
            query_offset: Absolute position of the first query.
            key_offset: Absolute position of the first key.
            key_padding_mask: ``(batch, k_len)`` (or ``(batch, key_offset + k_len)``) bool, True for
                keys to ignore.
            dropout_p: Dropout on the attention probabilities.
            position: The layer's position scheme, asked for the bias of the pairs each block sees.
            grid_width: ``local2d``: tokens per grid row of this call (else the one given at construction).
        """
        key_padding_mask = _align_padding(key_padding_mask, k.shape[-2], key_offset)
        if query_offset == 0 and key_offset == 0 and q.shape[-2] == k.shape[-2]:
            return self._blocked(q, k, v, key_padding_mask, dropout_p, position, grid_width)
        first = 0
        if self.causal:  # keys further back than `lookback` are invisible to every query
            first = min(max(query_offset - self.lookback(grid_width) - key_offset, 0), k.shape[-2])
        k, v = k[..., first:, :], v[..., first:, :]
        key_padding_mask = None if key_padding_mask is None else key_padding_mask[:, first:]
        query_pos = torch.arange(q.shape[-2], device=q.device)[:, None] + query_offset
        key_pos = torch.arange(k.shape[-2], device=q.device)[None, :] + key_offset + first
        mask = self.allowed(query_pos, key_pos, grid_width)  # (q, k)
        if key_padding_mask is not None:
            mask = mask & ~key_padding_mask[:, None, None, :]  # (b, 1, q, k)
        bias = self.position_bias(position, q, query_pos, key_pos, grid_width)
        attn_mask = _with_bias(mask, bias, q.dtype, key_padding_mask is not None)
        return sdpa_with_bias(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)

    def reference(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        query_offset: int = 0,
        key_offset: int = 0,
        key_padding_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        position: AttentionPosition | None = None,
        grid_width: int | None = None,
    ) -> Tensor:
        """Plain PyTorch with every ``(q_len, k_len)`` logit materialised; same arguments as :meth:`forward`."""
        key_padding_mask = _align_padding(key_padding_mask, k.shape[-2], key_offset)
        query_pos = torch.arange(q.shape[-2], device=q.device)[:, None] + query_offset
        key_pos = torch.arange(k.shape[-2], device=q.device)[None, :] + key_offset
        logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (b, h, q, k)
        bias = self.position_bias(position, q, query_pos, key_pos, grid_width)
        if bias is not None:
            logits = logits + bias
        allowed = self.allowed(query_pos, key_pos, grid_width)
        if key_padding_mask is not None:
            allowed = allowed & ~key_padding_mask[:, None, None, :]
        logits = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
        probs = F.dropout(torch.softmax(logits, dim=-1), p=dropout_p, training=dropout_p > 0)
        return probs @ v

    def _blocked(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        dropout_p: float,
        position: AttentionPosition | None,
        grid_width: int | None,
    ) -> Tensor:
        """Whole-sequence attention, one batch of query blocks against their memory blocks."""
        blocks = self._blocking(grid_width)
        # Positions in the query slots (n, q) and memory slots (n, m), and the pattern's mask (n, q, m).
        query_slots, memory_slots, mask = self._layout(blocks, q.shape[-2], q.device, grid_width)
        query_pos, key_pos = query_slots.clamp(min=0)[:, :, None], memory_slots.clamp(min=0)[:, None, :]
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, :, None]  # (b, 1, L, 1): the block functions' layout
            query_padding = blocks.queries(padding, True)[:, 0, :, :, 0]  # (b, n, q)
            key_padding = blocks.memory(padding, True)[:, 0, :, :, 0]  # (b, n, m)
            mask = mask & (~key_padding[:, :, None, :] | query_padding[..., None])
        else:
            mask = mask[None]  # (b or 1, n, q, m)
        q_blocks = blocks.queries(q, 0.0)  # (b, h, n, q, d)
        # Memory slots overlap; an index gather differentiates faster on CPU than unfold does.
        memory_index = memory_slots.clamp(min=0)
        k_blocks, v_blocks = k[:, :, memory_index], v[:, :, memory_index]  # (b, h, n, m, d)
        bias = self.position_bias(position, q_blocks, query_pos, key_pos, grid_width)  # (b or 1, h, n, q, m)
        attn_mask = _with_bias(mask.unsqueeze(1), bias, q.dtype, key_padding_mask is not None)  # (b|1, 1|h, n, q, m)
        # Blocks join the head axis so SDPA sees the 4-D layout its fused kernels want.
        attn_mask = attn_mask.expand(attn_mask.shape[0], q.shape[1], *attn_mask.shape[-3:])
        out = sdpa_with_bias(
            q_blocks.flatten(1, 2), k_blocks.flatten(1, 2), v_blocks.flatten(1, 2),
            attn_mask=attn_mask.flatten(1, 2), dropout_p=dropout_p,
        )  # fmt: skip
        return blocks.merge(out.unflatten(1, (q.shape[1], -1)), q.shape[-2])

    def _blocking(self, grid_width: int | None) -> _Blocks1D | _Blocks2D:
        if self.pattern == "local1d":
            return _Blocks1D(self.window, self.causal)
        return _Blocks2D(self._grid(grid_width), self.query_shape, self.memory_shape, self.causal)

    def _layout(
        self, blocks: _Blocks1D | _Blocks2D, length: int, device: torch.device, grid_width: int | None
    ) -> tuple[Tensor, ...]:
        """Positions in the query slots ``(n, q)`` and memory slots ``(n, m)`` (-1: padding) and the mask ``(n, q, m)``.

        Kept per geometry and length: every layer of a forward pass shares them (the stack's
        blocks share this pattern).
        """
        key = (type(blocks).__name__, *vars(blocks).values(), length, str(device))
        if key not in self._layouts:
            positions = torch.arange(length, device=device)[None, None, :, None]  # (1, 1, L, 1)
            query_slots = blocks.queries(positions, -1)[0, 0, ..., 0].contiguous()
            memory_slots = blocks.memory(positions, -1)[0, 0, ..., 0].contiguous()
            allowed = self.allowed(
                query_slots.clamp(min=0)[:, :, None], memory_slots.clamp(min=0)[:, None, :], grid_width
            )
            # Padding queries (discarded in the end) may look anywhere, so that no row is fully masked.
            mask = (allowed & (memory_slots >= 0)[:, None, :]) | (query_slots < 0)[:, :, None]
            if len(self._layouts) >= 32:
                self._layouts.pop(next(iter(self._layouts)))
            self._layouts[key] = (query_slots, memory_slots, mask)
        return self._layouts[key]

    def extra_repr(self) -> str:
        if self.pattern == "local1d":
            return f"local1d, window={self.window}, causal={self.causal}"
        return (
            f"local2d, grid_width={self.grid_width}, query_shape={self.query_shape}, "
            f"memory_shape={self.memory_shape}, causal={self.causal}"
        )


# --------------------------------------------------------------------------------------------------
# Blocks: pad + reshape + unfold. The same functions run on the positions themselves, so the masks
# always describe the blocks attended over.
# --------------------------------------------------------------------------------------------------


class _Blocks1D:
    """Blocks of ``window`` queries; memory = previous block + own block (+ next block, bidirectional)."""

    def __init__(self, window: int, causal: bool) -> None:
        self.window, self.causal, self.after = window, causal, 0 if causal else window

    def queries(self, x: Tensor, fill) -> Tensor:
        """``(b, h, L, d) -> (b, h, n, window, d)``."""
        blocks = -(-x.shape[2] // self.window)
        padded = F.pad(x, (0, 0, 0, blocks * self.window - x.shape[2]), value=fill)
        return padded.unflatten(2, (blocks, self.window))

    def memory(self, x: Tensor, fill) -> Tensor:
        """``(b, h, L, d) -> (b, h, n, m, d)``, ``m = 2 * window`` (``3 * window`` bidirectional)."""
        blocks = -(-x.shape[2] // self.window)
        padded = F.pad(x, (0, 0, self.window, blocks * self.window - x.shape[2] + self.after), value=fill)
        return padded.unfold(2, 2 * self.window + self.after, self.window).transpose(-1, -2)

    def merge(self, out: Tensor, length: int) -> Tensor:
        """Inverse of :meth:`queries`: ``(b, h, n, window, d) -> (b, h, L, d)``."""
        return out.flatten(2, 3)[:, :, :length]


class _Blocks2D:
    """Query blocks of ``query_shape`` on the grid; memory = the block widened by ``memory_shape``."""

    def __init__(self, width: int, query_shape: tuple[int, int], memory_shape: tuple[int, int], causal: bool):
        self.width, (self.rows, self.cols), (self.memory_rows, self.memory_cols) = (
            width,
            query_shape,
            memory_shape,
        )
        self.causal, self.below = causal, 0 if causal else self.memory_rows

    def grid(self, x: Tensor, fill) -> Tensor:
        """``(b, h, L, d) -> (b, h, rows, cols, d)`` padded to whole query blocks."""
        grid_rows = -(-x.shape[2] // self.width)
        padded = F.pad(x, (0, 0, 0, grid_rows * self.width - x.shape[2]), value=fill).unflatten(
            2, (grid_rows, self.width)
        )
        pad_rows, pad_cols = -grid_rows % self.rows, -self.width % self.cols
        return F.pad(padded, (0, 0, 0, pad_cols, 0, pad_rows), value=fill)

    def queries(self, x: Tensor, fill) -> Tensor:
        """``(b, h, L, d) -> (b, h, n, rows * cols, d)``, blocks in raster order."""
        return rearrange(
            self.grid(x, fill), "b h (nr r) (nc c) d -> b h (nr nc) (r c) d", r=self.rows, c=self.cols
        )

    def memory(self, x: Tensor, fill) -> Tensor:
        """``(b, h, L, d) -> (b, h, n, m, d)``, ``m = (memory_rows + rows [+ memory_rows]) * (cols + 2 memory_cols)``."""
        side = self.memory_cols
        padded = F.pad(self.grid(x, fill), (0, 0, side, side, self.memory_rows, self.below), value=fill)
        windows = padded.unfold(2, self.memory_rows + self.rows + self.below, self.rows)
        windows = windows.unfold(3, self.cols + 2 * side, self.cols)  # (b, h, nr, nc, d, mr, mc)
        return rearrange(windows, "b h nr nc d mr mc -> b h (nr nc) (mr mc) d")

    def merge(self, out: Tensor, length: int) -> Tensor:
        """Inverse of :meth:`queries`: ``(b, h, n, rows * cols, d) -> (b, h, L, d)``."""
        grid_rows = -(-length // self.width)
        block_cols = -(-self.width // self.cols)
        grid = rearrange(out, "b h (nr nc) (r c) d -> b h (nr r) (nc c) d", nc=block_cols, r=self.rows)
        return grid[:, :, :grid_rows, : self.width].flatten(2, 3)[:, :, :length]


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def _with_bias(mask: Tensor, bias: Tensor | None, dtype: torch.dtype, padded: bool) -> Tensor:
    """SDPA's ``attn_mask``: the bool mask, or the position bias (zeros when padded) with a large negative number where masked.

    Not ``-inf``: with padding keys, a query may see no real key (the padding before a left-padded
    prompt), and its row must stay finite.
    """
    if bias is None:
        if not padded:
            return mask
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill(~mask, torch.finfo(bias.dtype).min)


def _align_padding(key_padding_mask: Tensor | None, k_len: int, key_offset: int) -> Tensor | None:
    """Accepts masks over the kept keys or over every position from 0 (a windowed cache forgot the first)."""
    if key_padding_mask is None or key_padding_mask.shape[-1] == k_len:
        return key_padding_mask
    if key_padding_mask.shape[-1] == key_offset + k_len:
        return key_padding_mask[:, key_offset:]
    raise ValueError(
        f"key_padding_mask has {key_padding_mask.shape[-1]} positions; expected {k_len} (the keys) or "
        f"{key_offset + k_len} (every position from 0)"
    )


def _pair(value, name: str) -> tuple[int, int]:
    values = tuple(int(v) for v in value)
    if len(values) != 2:
        raise ValueError(f"{name} must be (rows, cols), got {value!r}")
    return values

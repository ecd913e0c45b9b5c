"""2D relative positions for tokens on a grid (image patches): decomposed row and column embeddings.

Tokens ``0 .. P-1`` are *prefix* tokens that sit on no grid (a class token; ``P = seq_len - rows *
cols``); the remaining ``rows * cols`` tokens are grid cells in raster order. For grid query ``i``
at ``(r_i, c_i)`` and grid key ``j`` at ``(r_j, c_j)`` every attention logit gains one term::

    (q_i · k_j + q_i · (R[r_j - r_i] + C[c_j - c_i])) / sqrt(head_dim)

with ``R`` a learned table of ``2 * rows - 1`` row offsets and ``C`` one of ``2 * cols - 1`` column
offsets, per head and per layer. The embedding of an offset ``(dr, dc)`` is thus *decomposed* into
``R[dr] + C[dc]`` — the choice of Bello et al. 2019 (Attention Augmented Convolutional Networks,
"relative height and width"), MViTv2 (Li et al. 2022) and ViTDet / Segment Anything. A joint table
with one vector per ``(dr, dc)`` pair costs ``(2 rows - 1)(2 cols - 1)`` vectors instead of
``2 rows + 2 cols - 2`` and, in those papers' ablations, buys no accuracy. Like Shaw et al.'s 1D
scheme (:mod:`multimodal.layers.positions.relative`) the term depends on the query's content, and like it
the sum is scaled by ``1 / sqrt(head_dim)`` (Segment Anything leaves the position term unscaled).

Prefix tokens have no offset to anyone. As in BEiT (Bao et al. 2021), every head learns three
scalars instead: prefix → grid, grid → prefix and prefix → prefix; they start at zero.

How it is computed, without any ``(N, N, head_dim)`` tensor (``N = rows * cols``): the row table is
gathered into ``R[r_j - r_i]`` of shape ``(heads, rows, rows, head_dim)`` (query row, key row), one
einsum with the queries viewed as ``(b, h, rows, cols, d)`` gives ``(b, h, rows, cols, rows)``, the
same for columns gives ``(b, h, rows, cols, cols)``, and a broadcast sum fills the
``(b, h, N, N)`` float bias that :func:`multimodal.layers.attend.attend` hands to
``scaled_dot_product_attention``. The largest temporary is that bias, which SDPA needs anyway.

The offset tables start at ``N(0, INIT_STD²)``, far larger than the usual 0.02, because in a ViT they
are the only position information (see :data:`INIT_STD`). A model trained on one grid is moved to
another by :func:`~multimodal.layers.positions.resample.resample_offset_table` (linear interpolation of each table along the offset axis,
as ViTDet does).

Einops legend: ``b`` batch, ``h`` heads, ``r``/``c`` query row/column, ``k`` key row or column,
``d`` head_dim.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import Tensor, nn

from multimodal.layers.positions.base import AttentionPosition, repeat_kv_heads
from multimodal.layers.sdpa import sdpa_with_bias

__all__ = ["RelativePosition2D", "offset_index"]

INIT_STD = 0.5
"""Standard deviation of the initial offset embeddings: about the scale of the keys they are added to
(``0.02 * sqrt(dim)`` is 0.23-0.55 for ``dim`` 128-768). With the 0.02 of the 1D tables, a ViT
without absolute positions spent its first thousand steps nearly position-blind (digits: 0.31
instead of 0.70 validation accuracy after 13 epochs)."""


class RelativePosition2D(AttentionPosition):
    """Learned decomposed 2D relative positions of one attention layer (the ``"relative2d"`` position).

    Calling it gives the dense logits bias of a whole sequence (the einsums above); as an
    :class:`~multimodal.layers.positions.base.AttentionPosition`, :meth:`attend` adds that bias in
    SDPA and :meth:`bias` gathers the same terms pair by pair (the reference path).

    Args:
        num_heads: Attention heads; each has its own tables.
        head_dim: Size of each embedding (the per-head query size).
        grid_size: ``(rows, cols)`` of the token grid.

    Attributes:
        rows: ``(num_heads, 2 * rows - 1, head_dim)``; entry ``rows - 1 + dr`` holds row offset
            ``dr = key_row - query_row``.
        cols: ``(num_heads, 2 * cols - 1, head_dim)``, the same for column offsets.
        prefix: ``(num_heads, 3)`` biases of prefix → grid, grid → prefix, prefix → prefix pairs.
    """

    supports_cache = False  # an image's tokens are attended to all at once; there is nothing to decode

    def __init__(self, num_heads: int, head_dim: int, grid_size: tuple[int, int]) -> None:
        super().__init__()
        num_rows, num_cols = grid_size
        if num_rows < 1 or num_cols < 1:
            raise ValueError(f"grid_size must be (rows, cols) with both >= 1, got {tuple(grid_size)}")
        self.grid_size = (int(num_rows), int(num_cols))
        self.scale = 1.0 / math.sqrt(head_dim)
        self.rows = nn.Parameter(torch.randn(num_heads, 2 * num_rows - 1, head_dim) * INIT_STD)
        self.cols = nn.Parameter(torch.randn(num_heads, 2 * num_cols - 1, head_dim) * INIT_STD)
        self.prefix = nn.Parameter(torch.zeros(num_heads, 3))
        self.register_buffer("row_index", offset_index(num_rows), persistent=False)
        self.register_buffer("col_index", offset_index(num_cols), persistent=False)

    def forward(self, q: Tensor) -> Tensor:
        """The bias ``(batch, heads, seq, seq)`` to add to the scaled logits ``q · k / sqrt(head_dim)``.

        Args:
            q: Queries ``(batch, heads, seq, head_dim)``, ``seq = prefix + rows * cols``.
        """
        num_rows, num_cols = self.grid_size
        num_prefix = q.shape[-2] - num_rows * num_cols
        if num_prefix < 0:
            raise ValueError(
                f"{q.shape[-2]} tokens do not cover the {num_rows}x{num_cols} grid of this 2D-relative "
                f"attention; build the model for the image size you feed it (ViTConfig.image_size) or "
                f"resample its tables with resample_offset_table"
            )
        grid_q = rearrange(q[..., num_prefix:, :] * self.scale, "b h (r c) d -> b h r c d", r=num_rows)
        by_row = torch.einsum("bhrcd,hrkd->bhrck", grid_q, self.rows[:, self.row_index])
        by_col = torch.einsum("bhrcd,hckd->bhrck", grid_q, self.cols[:, self.col_index])
        bias = q.new_empty(*q.shape[:-1], q.shape[-2])  # (b, h, seq, seq), filled in place below
        grid = (
            bias[..., num_prefix:, num_prefix:]
            .unflatten(-1, (num_rows, num_cols))
            .unflatten(-3, (num_rows, num_cols))
        )
        grid.copy_(by_row[..., :, None].expand_as(grid)).add_(by_col[..., None, :])  # (b, h, r, c, kr, kc)
        if num_prefix:
            to_grid, from_grid, among = (self.prefix[:, i].to(q.dtype)[:, None, None] for i in range(3))
            bias[..., :num_prefix, num_prefix:] = to_grid
            bias[..., num_prefix:, :num_prefix] = from_grid
            bias[..., :num_prefix, :num_prefix] = among
        return bias

    def attend(self, q, k, v, *, causal, query_offset, key_padding_mask, dropout_p) -> Tensor:
        if query_offset:
            raise ValueError("2D relative positions have no KV-cached decoding; run full forwards")
        q, k, v = repeat_kv_heads(q, k, v)
        bias = self(q) if q.shape[-2] == k.shape[-2] else self.prefix_bias(q.shape[-2], k.shape[-2]).to(q.dtype)
        allowed = None
        if causal:
            allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        if key_padding_mask is not None:
            keys = ~key_padding_mask[:, None, None, :]
            allowed = keys if allowed is None else keys & allowed
        if allowed is not None:
            bias = torch.where(allowed, bias, torch.finfo(bias.dtype).min)
        return sdpa_with_bias(q, k, v, attn_mask=bias, dropout_p=dropout_p)

    def bias(self, q: Tensor, query_pos: Tensor, key_pos: Tensor, grid_width: int | None = None) -> Tensor:
        """The same terms gathered pair by pair, ``(batch, heads, q, k)``: the plain reference of :meth:`forward`.

        The sequence is taken to end at the last key, so its first ``keys - rows * cols`` tokens are prefix.
        """
        num_rows, num_cols = self.grid_size
        num_prefix = int(key_pos.max()) + 1 - num_rows * num_cols
        query_pos, key_pos = torch.broadcast_tensors(query_pos, key_pos)
        query_cell, key_cell = query_pos - num_prefix, key_pos - num_prefix  # negative: a prefix token
        row_index = (key_cell.clamp(min=0) // num_cols - query_cell.clamp(min=0) // num_cols) + num_rows - 1
        col_index = (key_cell.clamp(min=0) % num_cols - query_cell.clamp(min=0) % num_cols) + num_cols - 1
        scaled = q * self.scale
        by_row = torch.gather(torch.einsum("bhqd,hrd->bhqr", scaled, self.rows.to(q.dtype)), -1,
                              row_index.expand(*q.shape[:2], *row_index.shape))  # fmt: skip
        by_col = torch.gather(torch.einsum("bhqd,hrd->bhqr", scaled, self.cols.to(q.dtype)), -1,
                              col_index.expand(*q.shape[:2], *col_index.shape))  # fmt: skip
        bias = by_row + by_col
        prefix = self.prefix.to(q.dtype)[:, None, None]  # (h, 1, 1, 3)
        from_prefix, to_prefix = query_cell < 0, key_cell < 0
        bias = torch.where(from_prefix & ~to_prefix, prefix[..., 0], bias)
        bias = torch.where(~from_prefix & to_prefix, prefix[..., 1], bias)
        return torch.where(from_prefix & to_prefix, prefix[..., 2], bias)

    def prefix_bias(self, num_queries: int, seq_len: int) -> Tensor:
        """The bias ``(heads, num_queries, seq_len)`` of the first ``num_queries`` queries, all prefix tokens.

        The rows of :meth:`forward`'s bias that belong to prefix queries, without the grid part
        (prefix tokens have no offsets, so their rows hold only the learned prefix scalars).
        """
        num_prefix = seq_len - self.grid_size[0] * self.grid_size[1]
        if not 0 < num_queries <= num_prefix:
            raise ValueError(
                f"2D relative positions can attend from a subset of queries only when they are prefix "
                f"(class) tokens: asked for {num_queries} of {seq_len} tokens with {max(num_prefix, 0)} prefix tokens"
            )
        to_grid, among = self.prefix[:, 0], self.prefix[:, 2]  # (heads,)
        # The offset tables enter with weight zero: they get the zero gradient the full bias gives
        # them here rather than none, so optimizers and DDP (which fails on unused parameters) see
        # the same parameters take part as with the full bias.
        unused = (self.rows.sum() + self.cols.sum()) * 0.0
        bias = (to_grid + unused)[:, None, None].expand(-1, num_queries, seq_len).clone()
        bias[..., :num_prefix] = among[:, None, None]
        return bias

    def extra_repr(self) -> str:
        return f"grid_size={self.grid_size}"


def offset_index(size: int) -> Tensor:
    """Table rows ``(size, size)`` of the offsets ``key - query`` on one axis: ``k - q + size - 1``."""
    positions = torch.arange(size)
    return positions[None, :] - positions[:, None] + size - 1

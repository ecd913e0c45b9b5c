"""Row and column offsets on a raster grid: the relative positions of 2D local attention.

Tokens lie row by row on a grid ``grid_width`` tokens wide (raster pixels: ``width × channels``).
The logit of query ``i`` and key ``j`` gains ``q_i · (E_row[Δrow] + E_col[Δcol]) / sqrt(head_dim)``
with one table per axis (:class:`~multimodal.layers.positions.relative.RelativePositionEmbedding`, clipped at
the largest offset a memory block holds, so nothing inside a block is clipped). Only
:class:`~multimodal.layers.local.LocalAttention` uses it: it knows the grid width of each call.
"""

from __future__ import annotations

from torch import Tensor

from multimodal.layers.positions.base import AttentionPosition
from multimodal.layers.positions.relative import RelativePositionEmbedding


class GridOffsets(AttentionPosition):
    """Learned row- and column-offset tables of one local-2D attention layer.

    Args:
        num_heads: Attention heads; each has its own tables.
        head_dim: Width of one head.
        query_shape: ``(rows, cols)`` of a query block.
        memory_shape: ``(rows, cols)`` the memory block adds above (and below) and on each side.
        causal: Only offsets to rows above (or the same row) exist.
    """

    def __init__(
        self, num_heads: int, head_dim: int, query_shape: tuple[int, int], memory_shape: tuple[int, int], causal: bool
    ) -> None:
        super().__init__()
        (rows, cols), (memory_rows, memory_cols) = query_shape, memory_shape
        self.rows = RelativePositionEmbedding(num_heads, head_dim, max(rows - 1 + memory_rows, 1), causal)
        self.cols = RelativePositionEmbedding(num_heads, head_dim, max(cols - 1 + memory_cols, 1), False)

    def bias(self, q: Tensor, query_pos: Tensor, key_pos: Tensor, grid_width: int | None = None) -> Tensor:
        """``q · (E_row[Δrow] + E_col[Δcol]) / sqrt(head_dim)`` for positions on a grid ``grid_width`` wide."""
        if grid_width is None:
            raise ValueError("grid offsets need the grid width: they are the positions of local2d attention only")
        row_offset = key_pos // grid_width - query_pos // grid_width
        col_offset = key_pos % grid_width - query_pos % grid_width
        zero = query_pos * 0
        return self.rows.bias(q, zero, row_offset) + self.cols.bias(q, zero, col_offset)

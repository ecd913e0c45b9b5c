"""Every position table moved to another length, grid or clipping distance, in one place.

Used when a model loads weights trained at another size (a ViT at another image size, blocks
exported from one model into another, longer contexts):

* absolute positions of an image grid: bicubic interpolation of the grid, prefix (class) tokens
  kept, as timm does (:func:`resize_positions` with both grids);
* absolute positions of a sequence: cropped when the new model is shorter (the first positions are
  exactly the trained ones), linearly interpolated when it is longer (:func:`resize_positions`);
* 1D relative tables: cropped, or padded with the clipped edge distance, which is what the old
  model computed for those distances anyway (:func:`resize_relative_table`);
* 2D relative offset tables: linear interpolation along the offset axis, as ViTDet does
  (:func:`resample_offset_table`).

Rotary and ALiBi have no tables: they extend to any length by construction (rotary's length
scaling is a setting, :class:`~multimodal.layers.positions.rotary.RotaryPositions`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["resample_offset_table", "resize_positions", "resize_relative_table"]


def resize_positions(
    table: Tensor,
    length: int,
    old_grid: tuple[int, int] | None = None,
    new_grid: tuple[int, int] | None = None,
) -> Tensor:
    """Absolute position table ``(..., old_len, dim)`` -> ``(..., length, dim)``.

    With both grids known (image patches) the last ``rows * cols`` entries are a grid, resized by
    bicubic interpolation (anti-aliased when shrinking, as timm does); the prefix entries before it
    (class token) are kept. Otherwise the table is a sequence: cropped when shorter (trained
    positions stay exact), linearly interpolated when longer.

    Args:
        table: The trained table; leading dimensions (e.g. timm's ``(1, L, dim)``) are kept.
        length: Entries wanted.
        old_grid: ``(rows, cols)`` the table was trained on, or None.
        new_grid: ``(rows, cols)`` wanted, or None.
    """
    old_len = table.shape[-2]
    if old_grid is not None and new_grid is not None and tuple(old_grid) == tuple(new_grid) and length == old_len:
        return table
    if old_grid is not None and new_grid is not None:
        prefix = old_len - old_grid[0] * old_grid[1]
        if prefix < 0 or prefix != length - new_grid[0] * new_grid[1]:
            raise ValueError(
                f"position table of {old_len} entries does not fit grids {old_grid} -> {new_grid} with {length} entries"
            )
        lead = table.shape[:-2]
        flat = table.reshape(-1, old_len, table.shape[-1]).float()
        grid = flat[:, prefix:].reshape(flat.shape[0], *old_grid, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", align_corners=False, antialias=True)
        grid = grid.permute(0, 2, 3, 1).reshape(flat.shape[0], -1, flat.shape[-1])
        out = torch.cat([flat[:, :prefix], grid], dim=1)
        return out.reshape(*lead, length, table.shape[-1]).to(table.dtype)
    if length <= old_len:
        return table[..., :length, :].clone()
    lead = table.shape[:-2]
    flat = table.reshape(-1, old_len, table.shape[-1]).transpose(1, 2).float()  # (n, dim, old_len)
    out = F.interpolate(flat, size=length, mode="linear", align_corners=True).transpose(1, 2)
    return out.reshape(*lead, length, table.shape[-1]).to(table.dtype)


def resize_relative_table(table: Tensor, rows: int, causal: bool) -> Tensor:
    """A 1D relative table ``(heads, old_rows, head_dim)`` for another clipping distance.

    Row ``max_distance + r`` holds distance ``r``; a causal table has rows for ``-k .. 0``, a
    bidirectional one for ``-k .. k``. A larger ``k`` repeats the edge rows (the old model clipped
    those distances to its edge), a smaller one drops the far rows.
    """
    old_rows = table.shape[1]
    old_k = old_rows - 1 if causal else (old_rows - 1) // 2
    new_k = rows - 1 if causal else (rows - 1) // 2
    distances = torch.arange(-new_k, (0 if causal else new_k) + 1)
    index = distances.clamp(-old_k, 0 if causal else old_k) + old_k
    return table[:, index].clone()


def resample_offset_table(table: Tensor, size: int) -> Tensor:
    """Linearly interpolates a ``(heads, 2 * old - 1, head_dim)`` offset table to ``2 * size - 1`` offsets.

    Args:
        table: The table of a grid axis of ``old`` cells.
        size: Cells of the new grid axis.

    Returns:
        ``(heads, 2 * size - 1, head_dim)``; the same tensor if the size is unchanged.
    """
    length = 2 * size - 1
    if table.shape[1] == length:
        return table
    resized = F.interpolate(table.transpose(1, 2).float(), size=length, mode="linear", align_corners=True)
    return resized.transpose(1, 2).to(table.dtype).contiguous()

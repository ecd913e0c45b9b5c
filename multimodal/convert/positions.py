"""Position tables resized to another model's length, grid or clipping distance, when blocks move between models.

* absolute positions of an image grid (``grid_size`` or ``image_size / patch_size`` in the configs):
  bicubic interpolation of the grid, prefix (class) tokens kept, as timm does;
* absolute positions of a sequence: cropped when the new model is shorter (the first positions are
  exactly the trained ones), linearly interpolated when it is longer;
* 1D relative tables: cropped, or padded with the clipped edge distance (which is what the old
  model computed for those distances anyway);
* 2D relative tables: :func:`~multimodal.layers.relative2d.resample_offset_table`.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multimodal.convert.export import Export
from multimodal.layers.relative import RelativePositionEmbedding
from multimodal.layers.relative2d import RelativePosition2D, resample_offset_table


def resize_table(
    model: nn.Module,
    name: str,
    exported: str,
    value: Tensor,
    shape: tuple[int, ...],
    export: Export,
    target_config: dict[str, Any],
) -> Tensor | None:
    """``value`` resized to ``shape`` if it is a position table that can be resized; else None."""
    owner_name, _, attribute = name.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    if isinstance(owner, RelativePositionEmbedding) and attribute == "weight":
        if export.causal is not None and export.causal != owner.causal:
            return None
        if value.shape[0] != shape[0] or value.shape[2] != shape[2]:
            return None
        return resize_relative_table(value, shape[1], owner.causal)
    if isinstance(owner, RelativePosition2D) and attribute in ("rows", "cols"):
        if value.shape[0] != shape[0] or value.shape[2] != shape[2]:
            return None
        return resample_offset_table(value, (shape[1] + 1) // 2)
    if _is_absolute_position_table(exported) and value.dim() == len(shape) and value.shape[-1] == shape[-1]:
        return resize_positions(value, shape[-2], _grid(export.config), _grid(target_config))
    return None


def _is_absolute_position_table(exported: str) -> bool:
    return (
        re.search(r"(^|\.)(positions\.weight|pos_embed|position_embeddings?(\.weight)?)$", exported)
        is not None
    )


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


def _grid(config: dict[str, Any]) -> tuple[int, int] | None:
    """``(rows, cols)`` of a model's patch grid from its config dict, or None for sequences."""
    if config.get("grid_size"):
        return tuple(int(size) for size in config["grid_size"])
    if config.get("image_size") and config.get("patch_size"):
        image, patch = config["image_size"], config["patch_size"]
        image = (image, image) if isinstance(image, int) else tuple(image)
        patch = (patch, patch) if isinstance(patch, int) else tuple(patch)
        return image[0] // patch[0], image[1] // patch[1]
    return None

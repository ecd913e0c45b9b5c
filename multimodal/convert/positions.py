"""Which tables of an export are position tables, resized for the model that loads them.

The resizing itself lives in :mod:`multimodal.layers.positions.resample`; this module finds the
tables (by the module that owns them, or by the exported name of absolute tables) and the grids
of the two models' configs.
"""

from __future__ import annotations

import re
from typing import Any

from torch import Tensor, nn

from multimodal.convert.export import Export
from multimodal.layers.positions.relative import RelativePositionEmbedding
from multimodal.layers.positions.relative2d import RelativePosition2D
from multimodal.layers.positions.resample import (
    resample_offset_table,
    resize_positions,
    resize_relative_table,
)


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

"""Tiled super-resolution of an image of any size, with seamless blending and a bound on the output.

Tiled upscaling (:func:`upscale`) cuts a low-resolution image of any size into tiles that overlap,
upscales them in batches and blends them with weights that ramp across the middle half of each
overlap and sum to one everywhere. With the regression model and ``local2d`` attention a pixel
depends only on the input within :attr:`~multimodal.models.super_resolution.SuperResolutionRegressor.receptive_radius`,
and tiles start on the encoder's block grid: once ``overlap >= 4 * receptive_radius`` the tiled
result equals the untiled one (no seams by construction); smaller overlaps still blend smoothly.

The output is held whole (float32, with its blending weights), so :func:`upscale` refuses outputs
over :data:`multimodal.limits.MAX_OUTPUT_PIXELS` unless told otherwise; :func:`check_output_size`
says so before an image is even decoded.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from torch import Tensor
from tqdm.auto import tqdm

from multimodal.images.generation import sample_high_res
from multimodal.limits import MAX_OUTPUT_PIXELS
from multimodal.models.super_resolution import ConditionalImageTransformer, SuperResolutionRegressor


class ImageTooLarge(ValueError):
    """An image whose upscaled output would have more pixels than allowed (:func:`check_output_size`)."""


def check_output_size(
    height: int,
    width: int,
    scale: int,
    max_output_pixels: int | None = MAX_OUTPUT_PIXELS,
    source: str = "the image",
    raise_with: str | None = "max_output_pixels",
) -> None:
    """Raises :class:`ImageTooLarge` if upscaling a ``height x width`` image ``scale`` times makes more
    than ``max_output_pixels`` pixels (None: no limit); the message names ``source`` and the way out
    (``raise_with``: the option that raises the limit, None where there is none).

    Call it with the size from an image file's header (``PIL.Image.open(path).size``, nothing
    decoded) to refuse a huge image before it takes any memory.
    """
    out_height, out_width = height * scale, width * scale
    if max_output_pixels is not None and out_height * out_width > max_output_pixels:
        side = math.isqrt(max_output_pixels)
        raise ImageTooLarge(
            f"{source}: {width}x{height} pixels upscaled x{scale} is {out_width}x{out_height} = "
            f"{out_height * out_width:,} pixels, more than the limit of {max_output_pixels:,} "
            f"(about {side}x{side}); "
            f"crop or shrink the image{f', or raise the limit with {raise_with}' if raise_with else ''}"
        )


@torch.no_grad()
def upscale(
    model: SuperResolutionRegressor | ConditionalImageTransformer,
    low_res: Tensor,
    *,
    tile: int | None = None,
    overlap: int | None = None,
    batch_size: int = 8,
    progress: bool = False,
    max_output_pixels: int | None = MAX_OUTPUT_PIXELS,
    **sampling,
) -> Tensor:
    """Upscales one image of any size, tile by tile; returns ``(c, h * scale, w * scale)`` in ``[0, 1]``.

    Args:
        model: A super-resolution model (eval mode is set for the call).
        low_res: ``(channels, h, w)`` in ``[0, 1]``.
        tile: Tile side in low-resolution pixels. Default: 256 (regression), ``crop_size // scale``
            (autoregressive: its position tables cover the training crop).
        overlap: Low-resolution pixels shared by neighbouring tiles. Default: regression
            ``min(4 * receptive_radius, tile // 2)``, autoregressive ``tile // 4``.
        batch_size: Tiles per forward pass (or per sampling run).
        progress: Progress bar over the batches of tiles.
        max_output_pixels: Refuse (:class:`ImageTooLarge`, before any work) an output of more pixels;
            None: no limit. The output and its blending weights are float32 (16 bytes per RGB pixel,
            and as much again for the result).
        **sampling: The autoregressive model's :func:`~multimodal.images.generation.sample_high_res` options
            (``sampling``, a :class:`~multimodal.generation.config.SamplingConfig`, its fields, ``generator``).
    """
    if low_res.dim() != 3:
        raise ValueError(f"expected one image (channels, height, width), got shape {tuple(low_res.shape)}")
    config = model.config
    check_output_size(low_res.shape[-2], low_res.shape[-1], config.scale, max_output_pixels)
    autoregressive = isinstance(model, ConditionalImageTransformer)
    if tile is None:
        tile = config.crop_size // config.scale if autoregressive else 256
    if overlap is None:
        overlap = tile // 4 if autoregressive else min(4 * model.receptive_radius, tile // 2)
    was_training = model.training
    model.eval()
    scale, (height, width) = config.scale, low_res.shape[-2:]
    align_rows, align_cols = model.alignment
    row_starts = tile_starts(height, tile, overlap, align_rows)
    col_starts = tile_starts(width, tile, overlap, align_cols)
    # Tiles of one size run as one batch.
    groups: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for top in row_starts:
        for left in col_starts:
            groups[min(tile, height - top), min(tile, width - left)].append((top, left))
    output = low_res.new_zeros(low_res.shape[0], height * scale, width * scale)
    total = low_res.new_zeros(1, height * scale, width * scale)
    batches = [(size, corners[i : i + batch_size]) for size, corners in groups.items()
               for i in range(0, len(corners), batch_size)]  # fmt: skip
    for (tile_h, tile_w), corners in tqdm(batches, disable=not progress, desc="upscaling", unit="batch"):
        tiles = torch.stack([low_res[:, top : top + tile_h, left : left + tile_w] for top, left in corners])
        high_res = sample_high_res(model, tiles, **sampling) if autoregressive else model(tiles).clamp(0, 1)
        for (top, left), high in zip(corners, high_res, strict=True):
            weight = (
                blend_weights(row_starts, top, tile_h, tile, scale, low_res)[:, None]
                * blend_weights(col_starts, left, tile_w, tile, scale, low_res)[None, :]
            )
            rows = slice(top * scale, (top + tile_h) * scale)
            cols = slice(left * scale, (left + tile_w) * scale)
            output[:, rows, cols] += high * weight
            total[:, rows, cols] += weight
    model.train(was_training)
    return (output / total).clamp(0, 1)


def tile_starts(size: int, tile: int, overlap: int, align: int = 1) -> list[int]:
    """Start of each tile along one side: steps of ``tile - overlap`` rounded down to ``align``.

    The last tile ends at ``size`` and may be shorter than ``tile``; it still overlaps the one before
    by at least ``overlap``.
    """
    if size <= tile:
        return [0]
    stride = (tile - overlap) // align * align
    if stride < 1:
        raise ValueError(
            f"tile={tile} leaves no stride after overlap={overlap} (aligned to {align} pixels); "
            f"use a larger tile or a smaller overlap"
        )
    starts = [0]
    while starts[-1] + tile < size:
        starts.append(starts[-1] + stride)
    return starts


def blend_weights(starts: list[int], start: int, length: int, tile: int, scale: int, like: Tensor) -> Tensor:
    """1-D weights ``(length * scale,)`` of the tile at ``start``: ramps across the middle half of each overlap.

    Neighbouring tiles' ramps add up to exactly one, so the blend is a partition of unity.
    """
    index = starts.index(start)
    x = torch.arange(length * scale, dtype=like.dtype, device=like.device) + 0.5
    weight = torch.ones_like(x)
    if len(starts) > 1:
        shared = (tile - (starts[1] - starts[0])) * scale  # every neighbouring pair overlaps this much
        if shared > 0:
            if index > 0:
                weight = weight * ((x - shared / 4) / (shared / 2)).clamp(0, 1)
            if index < len(starts) - 1:
                weight = weight * ((tile * scale - x - shared / 4) / (shared / 2)).clamp(0, 1)
    return weight

"""Images as token sequences: patches for ViT / super-resolution and raster pixel tokens.

Two views of an image ``(channels, height, width)``:

- **Patches** (ViT, regression super-resolution): non-overlapping ``p × p`` squares, each flattened
  to a vector of ``p * p * channels`` values in the order ``(p1 p2 c)`` (row inside the patch, then
  column, then channel — the MAE convention). Patches are read in raster order.
- **Pixel tokens** (the autoregressive Image Transformer, Parmar et al. 2018): one token per
  channel intensity, in raster order with the channels of a pixel interleaved:
  ``R(0,0) G(0,0) B(0,0) R(0,1) ...``. At 256 levels a token id *is* the 8-bit intensity.

Einops letters: ``b`` batch, ``c`` channels, ``h``/``w`` patch grid rows/columns, ``p1``/``p2``
pixel row/column inside a patch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from einops import rearrange
from PIL import Image

__all__ = [
    "PixelTokenizer",
    "patchify",
    "pixel_positions",
    "pixels_to_tokens",
    "tokens_to_pixels",
    "unpatchify",
]


# --------------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------------


def patchify(images: torch.Tensor, patch_size: int | tuple[int, int]) -> torch.Tensor:
    """Cuts images into flattened non-overlapping patches, in raster order.

    Args:
        images: ``(batch, channels, height, width)`` or one image ``(channels, height, width)``;
            any number of channels, any dtype. Height and width must be multiples of the patch size.
        patch_size: side of a square patch, or ``(patch_height, patch_width)``.

    Returns:
        ``(batch, num_patches, patch_height * patch_width * channels)`` (no batch axis for an
        unbatched input), with ``num_patches = (height // patch_height) * (width // patch_width)``
        and each patch flattened as ``(p1 p2 c)``.

    Raises:
        ValueError: if the image is not 3-D/4-D or its sides are not multiples of the patch size.
    """
    patch_height, patch_width = _pair(patch_size)
    if images.ndim not in (3, 4):
        raise ValueError(
            f"patchify expects (batch, channels, height, width) or (channels, height, width), "
            f"got a tensor of shape {tuple(images.shape)}"
        )
    height, width = images.shape[-2:]
    _check_divisible(height, width, patch_height, patch_width)
    return rearrange(images, "... c (h p1) (w p2) -> ... (h w) (p1 p2 c)", p1=patch_height, p2=patch_width)


def unpatchify(
    patches: torch.Tensor,
    patch_size: int | tuple[int, int],
    image_size: int | tuple[int, int],
    channels: int,
) -> torch.Tensor:
    """Reassembles images from patches; the exact inverse of :func:`patchify`.

    Args:
        patches: ``(batch, num_patches, patch_height * patch_width * channels)`` or unbatched
            ``(num_patches, patch_dim)``.
        patch_size: side of a square patch, or ``(patch_height, patch_width)``.
        image_size: ``(height, width)`` of the images, or one int for square images.
        channels: number of channels per pixel.

    Returns:
        ``(batch, channels, height, width)``, or ``(channels, height, width)`` when unbatched.

    Raises:
        ValueError: if the sizes are inconsistent with the patches' shape.
    """
    patch_height, patch_width = _pair(patch_size)
    height, width = _pair(image_size)
    _check_divisible(height, width, patch_height, patch_width)
    if patches.ndim not in (2, 3):
        raise ValueError(
            f"unpatchify expects (batch, num_patches, patch_dim) or (num_patches, patch_dim), "
            f"got a tensor of shape {tuple(patches.shape)}"
        )
    rows, cols = height // patch_height, width // patch_width
    expected = (rows * cols, patch_height * patch_width * channels)
    if tuple(patches.shape[-2:]) != expected:
        raise ValueError(
            f"patches of shape {tuple(patches.shape)} do not fit a {height}x{width} image with "
            f"{channels} channel(s) and {patch_height}x{patch_width} patches: expected the last two "
            f"dimensions to be (num_patches, patch_dim) = {expected}"
        )
    return rearrange(
        patches, "... (h w) (p1 p2 c) -> ... c (h p1) (w p2)", h=rows, p1=patch_height, p2=patch_width
    )


def pixels_to_tokens(images: torch.Tensor, num_levels: int = 256) -> torch.Tensor:
    """Quantises images and flattens them to raster token sequences, channels interleaved.

    A float image in ``[0, 1]`` is first rounded to 8 bits (``round(x * 255)``); an 8-bit value
    ``v`` then falls in level ``floor(v * num_levels / 256)`` (equal-width bins; at 256 levels the
    token id equals ``v``).

    Args:
        images: ``(..., channels, height, width)``, uint8 or float in ``[0, 1]``.
        num_levels: number of intensity levels, 2 to 256.

    Returns:
        int64 ``(..., height * width * channels)``; position ``i`` holds channel ``i % channels``
        of pixel ``i // channels`` (pixels in raster order).
    """
    _check_levels(num_levels)
    if images.dtype == torch.uint8:
        values = images.long()
    elif images.is_floating_point():
        values = (images.clamp(0, 1) * 255).round().long()
    else:
        raise ValueError(f"images must be uint8 or float in [0, 1], got dtype {images.dtype}")
    levels = values * num_levels // 256
    return rearrange(levels, "... c h w -> ... (h w c)")


def tokens_to_pixels(
    tokens: torch.Tensor, height: int, width: int, channels: int, num_levels: int = 256
) -> torch.Tensor:
    """Inverse of :func:`pixels_to_tokens`: each level decodes to the middle of the 8-bit values in it.

    Args:
        tokens: ``(..., height * width * channels)`` intensity ids in ``[0, num_levels)``.
        height: image height in pixels.
        width: image width in pixels.
        channels: channels per pixel.
        num_levels: number of intensity levels the ids were made with.

    Returns:
        uint8 ``(..., channels, height, width)``. At 256 levels this is exact; otherwise every value
        lies within half a bin of the original 8-bit value, rounded up to a whole 8-bit step:
        ``|decoded - original| <= ceil(128 / num_levels)``.
    """
    _check_levels(num_levels)
    seq_len = height * width * channels
    if tokens.shape[-1] != seq_len:
        raise ValueError(
            f"a {channels}x{height}x{width} image needs {seq_len} intensity tokens, got {tokens.shape[-1]}"
        )
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= num_levels):
        raise ValueError(f"intensity ids must lie in [0, {num_levels}); got a value outside")
    # Level k holds the 8-bit values first..last with first = ceil(256 k / L); decode to their middle.
    level = torch.arange(num_levels)
    first = (level * 256 + num_levels - 1) // num_levels
    last = ((level + 1) * 256 + num_levels - 1) // num_levels - 1
    centres = ((first + last + 1) // 2).to(torch.uint8)  # exactly k at 256 levels
    values = centres.to(tokens.device)[tokens]
    return rearrange(values, "... (h w c) -> ... c h w", h=height, w=width, c=channels)


def pixel_positions(height: int, width: int, channels: int) -> torch.Tensor:
    """The image coordinates of every position of a raster pixel-token sequence.

    Args:
        height: image height in pixels.
        width: image width in pixels.
        channels: channels per pixel.

    Returns:
        int64 ``(height * width * channels, 3)``: ``(row, column, channel)`` of each token, in the
        order :func:`pixels_to_tokens` emits them (BOS not included).
    """
    index = torch.arange(height * width * channels)
    pixel, channel = index // channels, index % channels
    return torch.stack([pixel // width, pixel % width, channel], dim=-1)


@dataclass(frozen=True)
class PixelTokenizer:
    """Raster pixel tokens for one image size, following the :class:`Tokenizer` protocol.

    Ids ``0 .. num_levels - 1`` are intensity levels (at 256 levels, id == 8-bit value); then BOS
    (``num_levels``) and PAD (``num_levels + 1``). Images have a fixed length, so there is no
    separate end token: ``eos_id == bos_id`` acts as the separator between images in a stream,
    like GPT-2's ``<|endoftext|>``.

    Attributes:
        height: image height in pixels.
        width: image width in pixels.
        channels: 1 (greyscale) or 3 (RGB).
        num_levels: intensity levels per channel; fewer than 256 quantises uniformly.
    """

    height: int
    width: int
    channels: int = 3
    num_levels: int = 256

    def __post_init__(self) -> None:
        _check_levels(self.num_levels)
        if min(self.height, self.width, self.channels) < 1:
            raise ValueError(f"height, width and channels must be >= 1, got {self}")

    @property
    def vocab_size(self) -> int:
        """Intensity levels plus BOS and PAD."""
        return self.num_levels + 2

    @property
    def bos_id(self) -> int:
        """Id that starts an image (the first id after the intensity levels)."""
        return self.num_levels

    @property
    def eos_id(self) -> int:
        """Same id as BOS: one separator token between images."""
        return self.bos_id

    @property
    def pad_id(self) -> int:
        """Id used to pad sequences; the last id."""
        return self.num_levels + 1

    @property
    def seq_len(self) -> int:
        """Tokens per image: ``height * width * channels`` (BOS excluded)."""
        return self.height * self.width * self.channels

    def encode(self, item: Any) -> list[int]:
        """Image → intensity ids, without BOS.

        Args:
            item: ``(channels, height, width)`` uint8 or float in ``[0, 1]`` tensor or array, or a
                PIL image (converted to "L" or "RGB" to match ``channels``).
        """
        image = self._as_tensor(item)
        if tuple(image.shape) != (self.channels, self.height, self.width):
            raise ValueError(
                f"image of shape {tuple(image.shape)} does not match this tokenizer's "
                f"(channels, height, width) = {(self.channels, self.height, self.width)}; resize or crop it"
            )
        return pixels_to_tokens(image, self.num_levels).tolist()

    def decode(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        """Ids → uint8 image ``(channels, height, width)``; BOS/PAD ids are skipped."""
        tokens = torch.as_tensor(ids, dtype=torch.long).flatten()
        tokens = tokens[tokens < self.num_levels]
        return tokens_to_pixels(tokens, self.height, self.width, self.channels, self.num_levels)

    def positions(self) -> torch.Tensor:
        """``(seq_len, 3)`` ``(row, column, channel)`` of each intensity token; see :func:`pixel_positions`."""
        return pixel_positions(self.height, self.width, self.channels)

    def save(self, path: str | Path) -> None:
        """Writes the configuration as one JSON file."""
        _write_json(path, {"type": "PixelTokenizer", **asdict(self)})

    @classmethod
    def load(cls, path: str | Path) -> PixelTokenizer:
        """Reads a tokenizer written by :meth:`save`."""
        return cls(**_read_json(path, "PixelTokenizer"))

    def _as_tensor(self, item: Any) -> torch.Tensor:
        if isinstance(item, Image.Image):
            item = np.array(item.convert("L" if self.channels == 1 else "RGB"))
            item = item[None] if item.ndim == 2 else item.transpose(2, 0, 1)
        return torch.as_tensor(np.ascontiguousarray(item)) if isinstance(item, np.ndarray) else item


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def _pair(size: int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    first, second = size
    return int(first), int(second)


def _check_divisible(height: int, width: int, patch_height: int, patch_width: int) -> None:
    if patch_height < 1 or patch_width < 1:
        raise ValueError(f"patch size must be positive, got {patch_height}x{patch_width}")
    if height % patch_height or width % patch_width:
        raise ValueError(
            f"image of height x width = {height}x{width} is not divisible into "
            f"{patch_height}x{patch_width} patches; resize or crop it to a multiple of the patch size "
            f"(e.g. {height // patch_height * patch_height}x{width // patch_width * patch_width})"
        )


def _check_levels(num_levels: int) -> None:
    if not 2 <= num_levels <= 256:
        raise ValueError(f"num_levels must be between 2 and 256 (8-bit images), got {num_levels}")


def _write_json(path: str | Path, config: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(config, indent=2) + "\n")


def _read_json(path: str | Path, expected_type: str) -> dict[str, Any]:
    config = json.loads(Path(path).read_text())
    found = config.pop("type", None)
    if found != expected_type:
        raise ValueError(f"{path} holds a {found!r}, not a {expected_type!r}")
    return config

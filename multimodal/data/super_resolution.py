"""Super-resolution pairs: crops of photos and their bicubic downsampling.

Items are ``(low_res, high_res)`` float32 ``(channels, height, width)`` in ``[0, 1]``. The photos
bundled in scikit-image are split by photo (never by crop); a folder of your own works too. See
``docs/images.md`` for the photo list and licences.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import Dataset

from multimodal.data.fetch import DatasetNotFoundError
from multimodal.data.image_folder import image_files, open_image, pil_mode, pixels_of, to_mode

__all__ = [
    "SKIMAGE_HELD_OUT_PHOTOS",
    "SKIMAGE_TRAIN_PHOTOS",
    "SuperResolutionCrops",
    "bicubic_downsample",
    "skimage_photos",
    "square_symmetry",
    "super_resolution_dataset",
]

SKIMAGE_TRAIN_PHOTOS = (
    "astronaut", "coffee", "rocket", "hubble_deep_field", "retina", "immunohistochemistry",
    "brick", "grass", "coins", "clock",
)  # fmt: skip
"""``skimage.data`` photos for training crops: 6 RGB, 4 greyscale; all load offline."""

SKIMAGE_HELD_OUT_PHOTOS = ("chelsea", "camera", "gravel")
"""``skimage.data`` photos kept for validation (1 RGB, 2 greyscale). ``cat`` is the same photo as
``chelsea`` and is used nowhere."""

SKIMAGE_TEST_PHOTOS = ("moon", "motorcycle", "page")
"""``skimage.data`` photos for the super-resolution benchmark's test split, used for no choice: the
moon (greyscale), the left view of ``stereo_motorcycle`` (RGB) and a scanned page (greyscale text)."""

_SKIMAGE_LOADERS = {"motorcycle": lambda data: data.stereo_motorcycle()[0]}


@dataclass
class _Photo:
    """One photo: its pixels in memory (uint8 ``(channels, height, width)``) or a file read on access."""

    name: str
    height: int
    width: int
    pixels: torch.Tensor | None = None
    path: Path | None = None


class SuperResolutionCrops(Dataset):
    """``(low_res, high_res)`` pairs from square crops of photos.

    ``high_res`` is a ``crop_size`` crop, float32 ``(channels, crop_size, crop_size)`` in ``[0, 1]``;
    ``low_res`` is :func:`bicubic_downsample` of it, ``(channels, crop_size // scale, crop_size // scale)``.
    Item ``i`` is a crop of photo ``i // crops_per_photo``. With ``fixed_crops`` the crop of item
    ``i`` is the same every time (seeded by ``(seed, i)``; for validation); otherwise it is drawn from
    torch's global generator (seeded per DataLoader worker).

    Args:
        photos: photos in memory (see :func:`skimage_photos`) or paths read on access; a path that
            fails to decode then is warned about and replaced by the next photo.
        scale: downsampling factor, 2 or 4 (any integer works).
        crop_size: side of the high-resolution crop; must be a multiple of ``scale``. Photos with a
            side shorter than this are left out with a warning.
        channels: 3 (greyscale photos are replicated to RGB) or 1 (RGB converted to luma, ITU-R 601).
        crops_per_photo: items per photo per epoch.
        fixed_crops: same crop for an index on every access.
        seed: seed of the fixed crops.
        dihedral: turn each crop by one of the 8 symmetries of the square (flips and 90-degree
            rotations, drawn uniformly like the crop corner) before it is downsampled, as EDSR and
            SwinIR train: eight times the distinct crops from the same photos.
    """

    def __init__(
        self,
        photos: Sequence[Image.Image | str | Path],
        scale: int = 2,
        crop_size: int = 96,
        channels: int = 3,
        crops_per_photo: int = 16,
        fixed_crops: bool = False,
        seed: int = 0,
        dihedral: bool = False,
    ) -> None:
        if crop_size % scale:
            raise ValueError(
                f"crop_size={crop_size} is not a multiple of scale={scale}; use e.g. {crop_size // scale * scale}"
            )
        self.scale, self.crop_size, self.mode = scale, crop_size, pil_mode(channels)
        self.crops_per_photo, self.fixed_crops, self.seed = crops_per_photo, fixed_crops, seed
        self.dihedral = dihedral
        self.photos = [p for p in map(self._describe, photos) if p is not None]
        if not self.photos:
            raise ValueError(f"no usable photo of at least {crop_size}x{crop_size} pixels")

    def __len__(self) -> int:
        return len(self.photos) * self.crops_per_photo

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} crops")
        photo_index = index // self.crops_per_photo
        for attempt in range(len(self.photos)):
            photo = self.photos[(photo_index + attempt) % len(self.photos)]
            pixels = (
                photo.pixels if photo.pixels is not None else pixels_of(open_image(photo.path, self.mode))
            )
            if pixels is not None:
                break
        else:
            raise RuntimeError("none of the photos could be decoded")
        rng = np.random.default_rng([self.seed, index]) if self.fixed_crops else None
        top, left = self._crop_corner(rng, photo.height, photo.width)
        high_res = pixels[:, top : top + self.crop_size, left : left + self.crop_size].float() / 255
        if self.dihedral:
            high_res = square_symmetry(high_res, _draw(rng, 8))
        return bicubic_downsample(high_res, self.scale), high_res

    def _crop_corner(self, rng: np.random.Generator | None, height: int, width: int) -> tuple[int, int]:
        return _draw(rng, height - self.crop_size + 1), _draw(rng, width - self.crop_size + 1)

    def _describe(self, photo: Image.Image | str | Path) -> _Photo | None:
        if isinstance(photo, Image.Image):
            pixels = pixels_of(to_mode(photo, self.mode))
            described = _Photo(getattr(photo, "filename", "") or "photo", *pixels.shape[1:], pixels=pixels)
        else:
            try:
                with Image.open(photo) as image:
                    width, height = image.size
            except Exception as error:
                warnings.warn(f"skipping unreadable photo {photo}: {error}", stacklevel=3)
                return None
            described = _Photo(str(photo), height, width, path=Path(photo))
        if min(described.height, described.width) < self.crop_size:
            warnings.warn(
                f"skipping photo {described.name} of {described.height}x{described.width}: smaller than "
                f"crop_size={self.crop_size}",
                stacklevel=3,
            )
            return None
        return described


def square_symmetry(images: torch.Tensor, which: int) -> torch.Tensor:
    """One of the 8 symmetries of the square (the dihedral group) applied to square images.

    Bit 0 of ``which`` flips left-right, bit 1 flips top-bottom, bit 2 swaps rows and columns
    (after the flips); ``0`` is the identity and ``0..7`` give all eight.

    Args:
        images: ``(..., side, side)``.
        which: ``0 <= which < 8``.

    Returns:
        ``(..., side, side)``, a new tensor.
    """
    if not 0 <= which < 8:
        raise ValueError(f"which={which}: the square has 8 symmetries, 0..7")
    flip_dims = [dim for bit, dim in ((1, -1), (2, -2)) if which & bit]
    flipped = images.flip(flip_dims) if flip_dims else images.clone()
    return flipped.transpose(-1, -2) if which & 4 else flipped


def _draw(rng: np.random.Generator | None, count: int) -> int:
    """A uniform integer in ``[0, count)`` from ``rng``, or from torch's global generator when ``None``."""
    return int(rng.integers(count)) if rng is not None else int(torch.randint(count, ()))


def bicubic_downsample(images: torch.Tensor, scale: int) -> torch.Tensor:
    """Bicubic downsampling with antialiasing (PIL's ``Image.resize(..., BICUBIC)`` filter).

    ``torch.nn.functional.interpolate(mode="bicubic", antialias=True, align_corners=False)``: the
    cubic kernel (a = -0.5) is widened by ``scale`` so it also low-pass filters, as PIL and MATLAB's
    ``imresize`` do. The result is clamped to ``[0, 1]`` and not re-quantised to 8 bits.

    Args:
        images: float ``(channels, height, width)`` or ``(batch, channels, height, width)`` in ``[0, 1]``;
            height and width multiples of ``scale``.
        scale: integer factor.

    Returns:
        ``(..., channels, height // scale, width // scale)``.
    """
    batched = images if images.ndim == 4 else images.unsqueeze(0)
    height, width = batched.shape[-2:]
    if height % scale or width % scale:
        raise ValueError(f"{height}x{width} is not divisible by scale={scale}; crop it to a multiple first")
    low = F.interpolate(
        batched, size=(height // scale, width // scale), mode="bicubic", align_corners=False, antialias=True
    ).clamp(0, 1)
    return low if images.ndim == 4 else low.squeeze(0)


def skimage_photos(names: Sequence[str]) -> list[Image.Image]:
    """Loads ``skimage.data`` photos by name as PIL images ("L" or "RGB"), all bundled (no network).

    Args:
        names: e.g. :data:`SKIMAGE_TRAIN_PHOTOS`, :data:`SKIMAGE_HELD_OUT_PHOTOS` or :data:`SKIMAGE_TEST_PHOTOS`.
    """
    from skimage import data

    photos = []
    for name in names:
        load = _SKIMAGE_LOADERS.get(name, lambda data, name=name: getattr(data, name)())
        image = Image.fromarray(load(data))
        image.filename = name  # names the photo in warnings
        photos.append(image)
    return photos


def super_resolution_dataset(
    source: str | Path = "skimage",
    split: Literal["train", "val"] = "train",
    scale: int = 2,
    crop_size: int = 96,
    channels: int = 3,
    crops_per_photo: int = 16,
    seed: int = 0,
    dihedral: bool = False,
) -> SuperResolutionCrops:
    """Super-resolution crops from the bundled skimage photos or a folder of your own.

    ``train`` crops are random on every access; ``val`` crops are fixed (seeded), from photos that
    ``train`` never sees:

    - ``"skimage"``: train on :data:`SKIMAGE_TRAIN_PHOTOS`, validate on
      :data:`SKIMAGE_HELD_OUT_PHOTOS`.
    - a folder: ``folder/train`` and ``folder/val`` if both exist; otherwise all images under the
      folder (recursively, sorted), of which a fixed random 10 % (at least one) is held out for ``val``.

    Args:
        source: ``"skimage"`` or a folder of photos.
        split: ``train`` or ``val``.
        scale: 2 or 4.
        crop_size: high-resolution crop side, a multiple of ``scale``.
        channels: 1 or 3.
        crops_per_photo: items per photo per epoch.
        seed: seed of the fixed validation crops.
        dihedral: ``train`` crops turned by a random flip / 90-degree rotation (``val`` crops never are).

    Returns:
        A :class:`SuperResolutionCrops` of ``(low_res, high_res)`` pairs.
    """
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    if str(source) == "skimage":
        photos: Sequence[Image.Image | Path] = skimage_photos(
            SKIMAGE_TRAIN_PHOTOS if split == "train" else SKIMAGE_HELD_OUT_PHOTOS
        )
    else:
        photos = _photo_folder_split(Path(source), split)
    return SuperResolutionCrops(
        photos, scale, crop_size, channels, crops_per_photo, split == "val", seed, dihedral and split == "train"
    )


def _photo_folder_split(root: Path, split: str) -> list[Path]:
    if (root / "train").is_dir() and (root / "val").is_dir():
        return image_files(root / split)
    files = image_files(root)
    if len(files) < 2:
        raise DatasetNotFoundError(
            f"{root} needs at least 2 images (one to train on, one held out), found {len(files)}"
        )
    held_out = set(np.random.default_rng(0).permutation(len(files))[: max(1, math.ceil(0.1 * len(files)))])
    return [f for i, f in enumerate(files) if (i in held_out) == (split == "val")]

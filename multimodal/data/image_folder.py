"""A folder of images sorted into class sub-folders, robust to corrupt files, and file helpers."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from multimodal.data.fetch import DatasetNotFoundError

__all__ = ["IMAGE_EXTENSIONS", "ImageFolder", "image_files", "open_image", "pil_mode", "pixels_of"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


class ImageFolder(Dataset):
    """``root/<class name>/**/<image>`` → ``(PIL image, label)``, skipping unreadable files.

    Classes are the sorted sub-folder names. Unreadable files never stop a run:

    - at construction (``verify=True``, default) every file's header and, for PNG, its checksums
      are checked with ``PIL.Image.verify()``; bad files are left out with a ``warnings.warn``
      naming them. This reads each file once, without decoding the pixels.
    - damage that only decoding reveals (a truncated JPEG) is caught on access: the file is warned
      about, recorded, and the next readable image is returned instead.

    ``skipped`` lists every file left out (in DataLoader workers, the lazily found ones are counted
    in that worker's copy only; the warnings still show).

    Attributes:
        classes: class names, sorted; ``class_to_idx`` maps them to label ids.
        samples: ``(path, label)`` of every kept file.
        targets: the label of every kept file.
        skipped: paths of the files left out.
    """

    def __init__(self, root: str | Path, channels: int = 3, verify: bool = True) -> None:
        self.root = Path(root)
        self.mode = pil_mode(channels)
        if not self.root.is_dir():
            raise DatasetNotFoundError(f"image folder {self.root} does not exist")
        self.classes = sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )
        if not self.classes:
            raise DatasetNotFoundError(
                f"{self.root} has no class sub-folders; lay images out as {self.root}/<class name>/<image>.png"
            )
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self.skipped: list[Path] = []
        self._undecodable: set[Path] = set()
        self.samples: list[tuple[Path, int]] = []
        for name in self.classes:
            for path in image_files(self.root / name):
                if verify and not self._verify(path):
                    continue
                self.samples.append((path, self.class_to_idx[name]))
        if not self.samples:
            raise DatasetNotFoundError(
                f"no readable images ({', '.join(IMAGE_EXTENSIONS)}) under {self.root}"
            )
        self.targets = [label for _, label in self.samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} images")
        for attempt in range(len(self.samples)):
            path, label = self.samples[(index + attempt) % len(self.samples)]
            if path in self._undecodable:
                continue
            image = open_image(path, self.mode)
            if image is not None:
                return image, label
            self._undecodable.add(path)
            self.skipped.append(path)
        raise RuntimeError(f"none of the {len(self.samples)} images under {self.root} could be decoded")

    def _verify(self, path: Path) -> bool:
        try:
            with Image.open(path) as image:
                image.verify()
        except Exception as error:
            warnings.warn(f"skipping unreadable image {path}: {error}", stacklevel=3)
            self.skipped.append(path)
            return False
        return True


def pil_mode(channels: int) -> str:
    """PIL mode for a channel count: 1 → ``"L"``, 3 → ``"RGB"``."""
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (greyscale) or 3 (RGB), got {channels}")
    return "L" if channels == 1 else "RGB"


def image_files(folder: Path) -> list[Path]:
    """Image files under ``folder`` (recursively, by extension), sorted by path."""
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())


def to_mode(image: Image.Image, mode: str) -> Image.Image:
    """``image`` in ``mode`` (``"L"`` / ``"RGB"``), high bit depths rescaled to 8 bits, not clipped.

    PIL's ``convert`` clips 16-bit (``I;16``), 32-bit (``I``) and float (``F``) images at 255, which
    turns most of a 16-bit photo white. Here 16-bit values are divided by 257 (65,535 -> 255);
    32-bit integers the same when they fit 16 bits, else scaled by their maximum; floats in [0, 1]
    multiplied by 255, other floats stretched from their minimum to their maximum.
    """
    if image.mode.startswith("I;16") or image.mode in ("I", "F"):
        values = np.asarray(image, dtype=np.float64)
        if image.mode == "F":
            low, high = float(values.min(initial=0.0)), float(values.max(initial=0.0))
            scaled = values * 255 if low >= 0 and high <= 1 else (values - low) * 255 / max(high - low, 1e-12)
        else:
            top = float(values.max(initial=0.0))
            scaled = values / 257 if top <= 65535 else values * 255 / top
        image = Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), mode="L")
    return image.convert(mode)


def open_image(path: Path, mode: str) -> Image.Image | None:
    """Decodes a file and converts it to ``mode`` (:func:`to_mode`); ``None`` (with a warning) if that fails."""
    try:
        with Image.open(path) as image:
            return to_mode(image, mode)
    except Exception as error:
        warnings.warn(f"skipping unreadable image {path}: {error}", stacklevel=3)
        return None


def pixels_of(image: Image.Image | None) -> torch.Tensor | None:
    """PIL image → uint8 ``(channels, height, width)``."""
    if image is None:
        return None
    array = np.array(image)  # a writable copy
    array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
    return torch.from_numpy(np.ascontiguousarray(array))

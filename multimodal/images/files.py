"""Images to and from files: decode an image file to a tensor, a tensor back to 8-bit pixels, and the
names of what generation and super-resolution write (made here, once).

No Lightning here: the ``multimodal generate`` commands and the serve page use the same helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from multimodal.viz import image_grid_png


def read_image(path: str | Path, check_size: Callable[[int, int], None] | None = None) -> Image.Image:
    """The decoded image at ``path``; a folder or a file that is not an image is an error naming it.

    ``check_size(width, height)`` runs on the size in the file's header, before the pixels are
    decoded (a huge image is refused without taking the memory).

    Raises:
        IsADirectoryError: ``path`` is a folder.
        FileNotFoundError: Nothing is at ``path``.
        ValueError: The file is not an image PIL can read, or its data is truncated.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "a folder; --input takes one image file", str(path))
    try:
        image = Image.open(path)
    except FileNotFoundError:
        raise
    except Exception as error:  # PIL: UnidentifiedImageError, ...
        raise ValueError(f"{path}: not a readable image ({type(error).__name__}: {error})") from error
    with image:
        if check_size is not None:
            check_size(*image.size)
        try:
            image.load()
            return image.copy()
        except Exception as error:  # truncated data (OSError), ...
            raise ValueError(f"{path}: not a readable image ({type(error).__name__}: {error})") from error


def image_to_tensor(image: Image.Image) -> Tensor:
    """An ``L`` or ``RGB`` image as floats ``(channels, height, width)`` in ``[0, 1]``."""
    array = np.asarray(image, dtype=np.float32) / 255
    return torch.from_numpy(array[None] if array.ndim == 2 else array.transpose(2, 0, 1).copy())


def tensor_to_uint8(image: Tensor) -> np.ndarray:
    """``(channels, height, width)`` floats in ``[0, 1]`` (clamped) as 8-bit pixels ``(height, width[, 3])`` for PIL."""
    array = (image.detach().cpu().clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    return array[0] if array.shape[0] == 1 else array.transpose(1, 2, 0)


def save_image(image: Tensor, path: str | Path) -> Path:
    """Writes ``(channels, height, width)`` floats in ``[0, 1]`` as an 8-bit PNG (or what ``path``'s suffix says)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(tensor_to_uint8(image)).save(path)
    return path


# ------------------------------------------------------------------------------------- output names
def sample_image_files(out_dir: str | Path, num_samples: int) -> list[Path]:
    """What :func:`write_image_samples` writes for ``num_samples`` images: ``grid.png``, then ``sample_000.png``, ..."""
    out_dir = Path(out_dir)
    return [out_dir / "grid.png", *(out_dir / f"sample_{index:03d}.png" for index in range(num_samples))]


def write_image_samples(images: Tensor, out_dir: str | Path, nrow: int | None = None) -> Path:
    """Writes each image at its native size (``sample_<i>.png``) and a grid of them (``grid.png``, ``nrow`` a row).

    ``images`` is ``(n, channels, h, w)``, uint8 or float in ``[0, 1]``; returns the grid's path.
    """
    grid, *samples = sample_image_files(out_dir, len(images))
    grid.parent.mkdir(parents=True, exist_ok=True)
    for image, path in zip(images, samples, strict=True):
        image_grid_png(image[None], path, padding=0, pixel_scale=1)
    return image_grid_png(images, grid, nrow=nrow)


def upscaled_files(out_dir: str | Path, name: str, scale: int) -> tuple[Path, Path]:
    """What upscaling an image called ``name`` writes: ``<name>_x<scale>.png`` and ``<name>_side_by_side.png``."""
    out_dir = Path(out_dir)
    return out_dir / f"{name}_x{scale}.png", out_dir / f"{name}_side_by_side.png"

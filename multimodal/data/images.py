"""Image classification data sets as plain ``torch.utils.data.Dataset``s (and the digits for pixel models).

Every classification item is ``(image, label)``: ``image`` float32 ``(channels, height, width)`` in
``[0, 1]`` (after the optional augmentation), ``label`` an int. Splits are fixed (``random_state=0``)
so that every run and every machine sees the same validation images:

| name | train | val | test | where the files come from |
|---|---|---|---|---|
| ``digits`` | 1,257 | 180 | 360 | scikit-learn ``load_digits()`` (bundled, BSD-3-Clause) |
| ``fashion_mnist`` | 54,000 | 6,000 | 10,000 | :func:`fetch_fashion_mnist` (Debian package, MIT) |
| ``mnist`` | 54,000 | 6,000 | 10,000 | your files in ``root/MNIST/raw/`` |
| ``cifar10`` / ``cifar100`` | 45,000 | 5,000 | 10,000 | your files in ``root/cifar-10-batches-py/`` etc. |
| ``imagefolder`` | ``root/train`` | ``root/val`` | ``root/test`` | any folder of class sub-folders |

For the torchvision sets ``val`` is a stratified 10 % of the official training set and ``test`` the
official test set; digits and image folders are split as documented at :func:`digits_split_indices`
and :func:`image_classification_dataset`.

Related modules, re-exported here: :mod:`multimodal.data.image_folder` (:class:`ImageFolder`),
:mod:`multimodal.data.augment` (:func:`build_transform`), :mod:`multimodal.data.fetch` (where data
lives, :func:`fetch_fashion_mnist`) and :mod:`multimodal.data.super_resolution` (SR crops).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset
from torchvision.transforms import v2

from multimodal.data.augment import TransformSpec, build_transform, is_transform_spec
from multimodal.data.fetch import HOW_TO_GET, DatasetNotFoundError, default_cache_dir, fetch_fashion_mnist
from multimodal.data.image_folder import ImageFolder
from multimodal.data.super_resolution import (
    SKIMAGE_HELD_OUT_PHOTOS,
    SKIMAGE_TEST_PHOTOS,
    SKIMAGE_TRAIN_PHOTOS,
    SuperResolutionCrops,
    bicubic_downsample,
    skimage_photos,
    super_resolution_dataset,
)
from multimodal.tokenizers.image import pixels_to_tokens

__all__ = [
    "DIGITS_SPLIT_SIZES",
    "SKIMAGE_HELD_OUT_PHOTOS",
    "SKIMAGE_TEST_PHOTOS",
    "SKIMAGE_TRAIN_PHOTOS",
    "DatasetNotFoundError",
    "ImageClassificationDataset",
    "ImageFolder",
    "SuperResolutionCrops",
    "bicubic_downsample",
    "build_transform",
    "default_cache_dir",
    "digits_split_indices",
    "fetch_fashion_mnist",
    "image_classification_dataset",
    "load_digits_split",
    "skimage_photos",
    "super_resolution_dataset",
]

Split = Literal["train", "val", "test"]
DatasetName = Literal["digits", "fashion_mnist", "mnist", "cifar10", "cifar100", "imagefolder"]
DIGITS_SPLIT_SIZES = {"train": 1257, "val": 180, "test": 360}
"""Sizes of the fixed stratified digits split (1,797 images: 20 % test, 10 % val, rest train)."""


class ImageClassificationDataset(Dataset):
    """``(image, label)`` pairs from any base data set, a fixed subset of it and an augmentation.

    The base yields ``(PIL image or tensor, label)``. Each image goes through ``v2.ToImage()``, the
    augmentation (on uint8 for file-based sets, float for digits), then
    ``v2.ToDtype(float32, scale=True)``, so items are float32 ``(channels, height, width)`` in
    ``[0, 1]`` unless the augmentation itself normalises.

    Attributes:
        class_names: one name per label id.
        targets: the label of every item, in order.
    """

    def __init__(
        self,
        base: Dataset,
        class_names: Sequence[str],
        targets: Sequence[int],
        indices: Sequence[int] | None = None,
        transform: Callable | TransformSpec | None = None,
    ) -> None:
        self.base = base
        self.class_names = list(class_names)
        self.indices = np.arange(len(targets)) if indices is None else np.asarray(indices)
        self.targets = np.asarray(targets, dtype=np.int64)[self.indices].tolist()
        user_transform = build_transform(transform) if is_transform_spec(transform) else transform
        self._plain = user_transform is None  # tensors then skip v2 (its per-call cost dominated)
        self.transform = v2.Compose(
            [
                v2.ToImage(),
                *([user_transform] if user_transform is not None else []),
                v2.ToDtype(torch.float32, scale=True),
            ]
        )

    @property
    def num_classes(self) -> int:
        """Number of classes (labels lie in ``[0, num_classes)``)."""
        return len(self.class_names)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.base[int(self.indices[index])]
        if self._plain and isinstance(image, torch.Tensor) and image.dtype in (torch.uint8, torch.float32):
            # What ToImage + ToDtype(float32, scale=True) compute, without their per-call overhead.
            return (image.float().mul_(1.0 / 255) if image.dtype == torch.uint8 else image), int(label)
        return self.transform(image).as_subclass(torch.Tensor), int(label)


def image_classification_dataset(
    name: DatasetName,
    root: str | Path | None = None,
    split: Split = "train",
    transform: Callable | TransformSpec | None = None,
    channels: int = 3,
) -> ImageClassificationDataset:
    """Builds a classification split by name; nothing is downloaded.

    Args:
        name: ``digits``, ``fashion_mnist``, ``mnist``, ``cifar10``, ``cifar100`` or ``imagefolder``.
        root: folder holding the files (torchvision's layout); defaults to :func:`default_cache_dir`.
            Required for ``imagefolder``. Ignored for ``digits``.
        split: ``train``, ``val`` or ``test``. torchvision sets: ``val`` is a fixed stratified 10 % of
            the official training set. ``imagefolder``: ``root/train``, ``root/val`` (or ``valid``,
            ``validation``), ``root/test``; without such sub-folders, a fixed stratified 70/10/20
            split of ``root``.
        transform: a callable, or a spec list for :func:`build_transform`.
        channels: ``imagefolder`` only: 1 converts images to greyscale, 3 to RGB.

    Returns:
        The split, with ``num_classes``, ``class_names`` and ``targets``.

    Raises:
        DatasetNotFoundError: the files are missing; the message says how to get them.
    """
    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    if name == "digits":
        images, labels = load_digits_split(split)
        base = torch.utils.data.StackDataset(images, labels)
        return ImageClassificationDataset(
            base, [str(d) for d in range(10)], labels.tolist(), transform=transform
        )
    if name == "imagefolder":
        if root is None:
            raise ValueError("imagefolder needs root=<folder with one sub-folder per class>")
        return _image_folder_split(Path(root), split, transform, channels)
    root = Path(root) if root is not None else default_cache_dir()
    base = _torchvision_dataset(name, root, train=split != "test")
    targets = np.asarray(base.targets, dtype=np.int64)
    indices = None
    if split != "test":
        train, val = _carve(np.arange(len(targets)), targets, math.ceil(0.1 * len(targets)))
        indices = train if split == "train" else val
    return ImageClassificationDataset(PixelArray(base), base.classes, targets, indices, transform)


def load_digits_split(
    split: Split, representation: Literal["float", "uint8", "levels"] = "float"
) -> tuple[torch.Tensor, torch.Tensor]:
    """One split of scikit-learn's 8×8 digits (fixed, stratified, see :func:`digits_split_indices`).

    The raw pixels are integers 0–16. ``representation`` picks how they are returned:

    - ``float``: float32 ``raw / 16`` in ``[0, 1]`` (classification);
    - ``uint8``: ``round(raw * 255 / 16)``; ``PixelTokenizer(8, 8, 1, num_levels=17)`` maps these
      back to exactly the raw levels;
    - ``levels``: int64 raw levels 0–16, i.e. pixel tokens for a 17-level pixel model.

    Args:
        split: ``train`` (1,257), ``val`` (180) or ``test`` (360).
        representation: see above.

    Returns:
        images ``(num_images, 1, 8, 8)`` and labels int64 ``(num_images,)``.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    indices = digits_split_indices(split)
    raw = torch.from_numpy(digits.images[indices].astype(np.int64)).unsqueeze(1)  # (n, 1, 8, 8)
    if representation == "float":
        images = raw.float() / 16
    elif representation == "uint8":
        images = (raw.double() * 255 / 16).round().to(torch.uint8)
    elif representation == "levels":
        images = raw
    else:
        raise ValueError(f"representation must be 'float', 'uint8' or 'levels', got {representation!r}")
    return images, torch.from_numpy(digits.target[indices].astype(np.int64))


def digits_split_indices(split: Split) -> np.ndarray:
    """Sorted indices into ``sklearn.datasets.load_digits()`` of one fixed split.

    Two stratified ``train_test_split(..., random_state=0)`` calls: 360 images (20 %) for ``test``,
    then 180 (10 %) of the rest for ``val``; ``train`` keeps 1,257.
    """
    from sklearn.datasets import load_digits

    labels = load_digits().target
    rest, test = _carve(np.arange(len(labels)), labels, DIGITS_SPLIT_SIZES["test"])
    train, val = _carve(rest, labels[rest], DIGITS_SPLIT_SIZES["val"])
    return {"train": train, "val": val, "test": test}[split]


def _image_folder_split(
    root: Path, split: Split, transform: Callable | TransformSpec | None, channels: int
) -> ImageClassificationDataset:
    """``root/<split>/`` if it exists; else a fixed stratified 70/10/20 split of ``root`` itself."""
    names = {"train": ("train",), "val": ("val", "valid", "validation"), "test": ("test",)}[split]
    for name in names:
        if (root / name).is_dir():
            folder = ImageFolder(root / name, channels)
            return ImageClassificationDataset(folder, folder.classes, folder.targets, transform=transform)
    if any((root / name).is_dir() for name in ("train", "val", "valid", "validation", "test")):
        raise DatasetNotFoundError(f"{root} has split sub-folders but no {names[0]!r}; add {root / names[0]}")
    folder = ImageFolder(root, channels)
    targets = np.asarray(folder.targets)
    rest, test = _carve(np.arange(len(targets)), targets, math.ceil(0.2 * len(targets)))
    train, val = _carve(rest, targets[rest], math.ceil(0.1 * len(targets)))
    indices = {"train": train, "val": val, "test": test}[split]
    return ImageClassificationDataset(folder, folder.classes, folder.targets, indices, transform)


class PixelArray(Dataset):
    """``(uint8 (channels, height, width), label)`` items read straight from a torchvision set's pixels.

    torchvision's MNIST/CIFAR classes return a PIL image per item; skipping that round trip halves
    the per-image cost of the pipeline (the pixels are the same).

    Args:
        base: A torchvision data set with ``data`` (``(n, height, width)`` or ``(n, height, width,
            channels)``, uint8) and ``targets``.
    """

    def __init__(self, base: Dataset) -> None:
        pixels = torch.as_tensor(base.data)
        self.images = pixels[:, None] if pixels.ndim == 3 else pixels.permute(0, 3, 1, 2)
        self.targets = base.targets

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index], int(self.targets[index])


def _torchvision_dataset(name: str, root: Path, train: bool) -> Dataset:
    from torchvision import datasets

    classes = {
        "fashion_mnist": datasets.FashionMNIST,
        "mnist": datasets.MNIST,
        "cifar10": datasets.CIFAR10,
        "cifar100": datasets.CIFAR100,
    }
    if name not in classes:
        raise ValueError(f"unknown data set {name!r}; choose from digits, imagefolder, {', '.join(classes)}")
    try:
        return classes[name](str(root), train=train, download=False)
    except RuntimeError as error:  # torchvision: "Dataset not found or corrupted"
        raise DatasetNotFoundError(HOW_TO_GET[name].format(root=root)) from error


def _carve(indices: np.ndarray, labels: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Splits ``indices`` into (rest, ``size`` held out), stratified by ``labels``, fixed seed; sorted."""
    try:
        rest, held = train_test_split(indices, test_size=size, stratify=labels, random_state=0)
    except ValueError:  # too few images per class to stratify
        warnings.warn("too few images per class for a stratified split; splitting at random", stacklevel=3)
        rest, held = train_test_split(indices, test_size=size, random_state=0)
    return np.sort(rest), np.sort(held)


KNOWN_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "digits": (8, 8, 1, 10),
    "fashion_mnist": (28, 28, 1, 10),
    "mnist": (28, 28, 1, 10),
    "cifar10": (32, 32, 3, 10),
    "cifar100": (32, 32, 3, 100),
}
"""``(height, width, channels, classes)`` of the data sets whose images all have one size."""


class PixelTokens(Dataset):
    """Wraps ``(image, label)`` items (float ``[0, 1]``) as ``(intensity ids (seq_len,), label)``.

    Args:
        images: A classification data set.
        num_levels: Intensity levels per channel.
    """

    def __init__(self, images: Dataset, num_levels: int) -> None:
        self.images, self.num_levels = images, num_levels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.images[index]
        return pixels_to_tokens(image, self.num_levels), label

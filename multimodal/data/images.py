"""Image data sets as plain ``torch.utils.data.Dataset``s: classification, pixel generation, super-resolution.

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
and :func:`image_classification_dataset`. Super-resolution crops: :func:`super_resolution_dataset`.
"""

from __future__ import annotations

import gzip
import math
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset
from torchvision.transforms import v2

__all__ = [
    "DIGITS_SPLIT_SIZES",
    "SKIMAGE_HELD_OUT_PHOTOS",
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
TransformSpec = Sequence[Mapping[str, Any]]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
DIGITS_SPLIT_SIZES = {"train": 1257, "val": 180, "test": 360}
"""Sizes of the fixed stratified digits split (1,797 images: 20 % test, 10 % val, rest train)."""

FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


class DatasetNotFoundError(FileNotFoundError):
    """A data set's files are not on disk; the message says how to get them."""


def default_cache_dir() -> Path:
    """Where fetched data lives: ``$MULTIMODAL_CACHE`` or ``~/.cache/multimodal``."""
    return Path(os.environ.get("MULTIMODAL_CACHE", "~/.cache/multimodal")).expanduser()


# --------------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------------


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
        user_transform = build_transform(transform) if _is_spec(transform) else transform
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
    return ImageClassificationDataset(base, base.classes, targets, indices, transform)


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


# --------------------------------------------------------------------------------------------------
# ImageFolder
# --------------------------------------------------------------------------------------------------


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
        self.mode = _pil_mode(channels)
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
            for path in _image_files(self.root / name):
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
            image = _open_image(path, self.mode)
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


# --------------------------------------------------------------------------------------------------
# Augmentation
# --------------------------------------------------------------------------------------------------


def build_transform(spec: TransformSpec | None) -> v2.Compose | None:
    """Builds a ``torchvision.transforms.v2`` pipeline from a YAML-friendly list of dicts.

    Each entry names a ``v2`` class and gives its keyword arguments. ``dtype`` strings
    (``"float32"``) become torch dtypes, and a list of entries passed as an argument (for
    ``RandomApply``, ``RandomChoice``) is built recursively. Example::

        - {name: RandomCrop, size: 28, padding: 2}
        - {name: RandomHorizontalFlip, p: 0.5}
        - {name: RandomApply, p: 0.3, transforms: [{name: ColorJitter, brightness: 0.2}]}

    Args:
        spec: the entries, in the order they are applied; ``None`` or empty means no transform.

    Returns:
        ``v2.Compose`` of the transforms, or ``None``.

    Raises:
        ValueError: an entry has no ``name`` or names no ``v2`` transform.
    """
    if not spec:
        return None
    return v2.Compose([_build_one(entry) for entry in spec])


def _build_one(entry: Mapping[str, Any]) -> v2.Transform:
    kwargs = dict(entry)
    name = kwargs.pop("name", None)
    cls = getattr(v2, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, v2.Transform)):
        raise ValueError(
            f"augmentation entry {dict(entry)} must have 'name' set to a torchvision.transforms.v2 "
            f"transform, e.g. {{'name': 'RandomCrop', 'size': 28, 'padding': 2}}"
        )
    for key, value in kwargs.items():
        if key == "dtype" and isinstance(value, str):
            kwargs[key] = getattr(torch, value)
        elif _is_spec(value):
            kwargs[key] = [_build_one(item) for item in value]
    return cls(**kwargs)


def _is_spec(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(v, Mapping) for v in value)
    )


# --------------------------------------------------------------------------------------------------
# Fashion-MNIST and the torchvision classes
# --------------------------------------------------------------------------------------------------


def fetch_fashion_mnist(root: str | Path | None = None) -> Path:
    """Places Fashion-MNIST where ``torchvision.datasets.FashionMNIST(root, download=False)`` reads it.

    Takes the original idx files from Debian's ``dataset-fashion-mnist`` package (31 MB, MIT):
    ``apt-get download`` it (running ``apt-get update`` first if the package is unknown), unpack it
    with ``dpkg-deb -x`` without installing, and write the four gunzipped files plus a README with
    the licence to ``root/FashionMNIST/raw/``. Does nothing if they are already there.

    Args:
        root: defaults to :func:`default_cache_dir`.

    Returns:
        ``root``, to pass to ``FashionMNIST`` or :func:`image_classification_dataset`.
    """
    root = Path(root) if root is not None else default_cache_dir()
    raw = root / "FashionMNIST" / "raw"
    if all((raw / name).is_file() for name in FASHION_MNIST_FILES):
        return root
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise DatasetNotFoundError(
            _HOW_TO["fashion_mnist"].format(root=root) + " (apt-get/dpkg-deb not found)"
        )
    raw.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if _run(["apt-get", "download", "dataset-fashion-mnist"], work).returncode != 0:
            _run(["apt-get", "update"], work)
            result = _run(["apt-get", "download", "dataset-fashion-mnist"], work)
            if result.returncode != 0:
                raise RuntimeError(f"apt-get download dataset-fashion-mnist failed:\n{result.stderr}")
        (deb,) = work.glob("dataset-fashion-mnist_*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "x")], check=True)
        for name in FASHION_MNIST_FILES:
            found = sorted(work.glob(f"x/**/{name}*"))
            if not found:
                raise RuntimeError(f"{deb.name} holds no {name}; the package layout changed")
            _copy_maybe_gunzip(found[0], raw / name)
        copyright_file = next(work.glob("x/usr/share/doc/dataset-fashion-mnist/copyright"), None)
        if copyright_file is not None:
            shutil.copyfile(copyright_file, raw / "copyright")
    (raw / "README.md").write_text(_FASHION_MNIST_README)
    return root


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True)


def _copy_maybe_gunzip(source: Path, target: Path) -> None:
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)


_FASHION_MNIST_README = """\
# Fashion-MNIST

The original idx files of Fashion-MNIST (Xiao, Rasul & Vollgraf 2017, Zalando Research):
60,000 training and 10,000 test images, 28x28 greyscale, 10 classes.

- Licence: MIT, Copyright (c) 2017 Zalando SE (see `copyright`, the Debian package's licence file).
- Source: Debian package `dataset-fashion-mnist`, unpacked with `dpkg-deb -x` by
  `multimodal.data.images.fetch_fashion_mnist` (`multimodal data fashion-mnist`).
- Read with `torchvision.datasets.FashionMNIST(root, download=False)`, root being two folders up.
"""

_HOW_TO = {
    "fashion_mnist": (
        "Fashion-MNIST is not in {root}/FashionMNIST/raw/. Fetch it once (31 MB, Debian package, MIT) with "
        "`multimodal data fashion-mnist`, or in Python "
        "`from multimodal.data.images import fetch_fashion_mnist; fetch_fashion_mnist({root!r})`, "
        "or copy the four gunzipped idx files (train-images-idx3-ubyte, ...) there"
    ),
    "mnist": (
        "MNIST is not in {root}/MNIST/raw/. Copy the four gunzipped idx files (train-images-idx3-ubyte, "
        "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte) there; nothing is downloaded"
    ),
    "cifar10": (
        "CIFAR-10 is not in {root}/cifar-10-batches-py/. Extract cifar-10-python.tar.gz into {root} "
        "(it creates that folder); nothing is downloaded"
    ),
    "cifar100": (
        "CIFAR-100 is not in {root}/cifar-100-python/. Extract cifar-100-python.tar.gz into {root} "
        "(it creates that folder); nothing is downloaded"
    ),
}


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
        raise DatasetNotFoundError(_HOW_TO[name].format(root=root)) from error


def _carve(indices: np.ndarray, labels: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Splits ``indices`` into (rest, ``size`` held out), stratified by ``labels``, fixed seed; sorted."""
    try:
        rest, held = train_test_split(indices, test_size=size, stratify=labels, random_state=0)
    except ValueError:  # too few images per class to stratify
        warnings.warn("too few images per class for a stratified split; splitting at random", stacklevel=3)
        rest, held = train_test_split(indices, test_size=size, random_state=0)
    return np.sort(rest), np.sort(held)


# --------------------------------------------------------------------------------------------------
# Super-resolution
# --------------------------------------------------------------------------------------------------

SKIMAGE_TRAIN_PHOTOS = (
    "astronaut", "coffee", "rocket", "hubble_deep_field", "retina", "immunohistochemistry",
    "brick", "grass", "coins", "clock",
)  # fmt: skip
"""``skimage.data`` photos for training crops: 6 RGB, 4 greyscale; all load offline."""

SKIMAGE_HELD_OUT_PHOTOS = ("chelsea", "camera", "gravel")
"""``skimage.data`` photos kept for validation (1 RGB, 2 greyscale). ``cat`` is the same photo as
``chelsea`` and is used nowhere."""


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
    ) -> None:
        if crop_size % scale:
            raise ValueError(
                f"crop_size={crop_size} is not a multiple of scale={scale}; use e.g. {crop_size // scale * scale}"
            )
        self.scale, self.crop_size, self.mode = scale, crop_size, _pil_mode(channels)
        self.crops_per_photo, self.fixed_crops, self.seed = crops_per_photo, fixed_crops, seed
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
            pixels = photo.pixels if photo.pixels is not None else _pixels(_open_image(photo.path, self.mode))
            if pixels is not None:
                break
        else:
            raise RuntimeError("none of the photos could be decoded")
        top, left = self._crop_corner(index, photo.height, photo.width)
        high_res = pixels[:, top : top + self.crop_size, left : left + self.crop_size].float() / 255
        return bicubic_downsample(high_res, self.scale), high_res

    def _crop_corner(self, index: int, height: int, width: int) -> tuple[int, int]:
        span_h, span_w = height - self.crop_size + 1, width - self.crop_size + 1
        if self.fixed_crops:
            rng = np.random.default_rng([self.seed, index])
            return int(rng.integers(span_h)), int(rng.integers(span_w))
        return int(torch.randint(span_h, ())), int(torch.randint(span_w, ()))

    def _describe(self, photo: Image.Image | str | Path) -> _Photo | None:
        if isinstance(photo, Image.Image):
            pixels = _pixels(photo.convert(self.mode))
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
        names: e.g. :data:`SKIMAGE_TRAIN_PHOTOS` or :data:`SKIMAGE_HELD_OUT_PHOTOS`.
    """
    from skimage import data

    photos = []
    for name in names:
        image = Image.fromarray(getattr(data, name)())
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
    return SuperResolutionCrops(photos, scale, crop_size, channels, crops_per_photo, split == "val", seed)


def _photo_folder_split(root: Path, split: str) -> list[Path]:
    if (root / "train").is_dir() and (root / "val").is_dir():
        return _image_files(root / split)
    files = _image_files(root)
    if len(files) < 2:
        raise DatasetNotFoundError(
            f"{root} needs at least 2 images (one to train on, one held out), found {len(files)}"
        )
    held_out = set(np.random.default_rng(0).permutation(len(files))[: max(1, math.ceil(0.1 * len(files)))])
    return [f for i, f in enumerate(files) if (i in held_out) == (split == "val")]


# --------------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------------


def _pil_mode(channels: int) -> str:
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (greyscale) or 3 (RGB), got {channels}")
    return "L" if channels == 1 else "RGB"


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())


def _open_image(path: Path, mode: str) -> Image.Image | None:
    """Decodes a file and converts it to ``mode``; ``None`` (with a warning) if that fails."""
    try:
        with Image.open(path) as image:
            return image.convert(mode)
    except Exception as error:
        warnings.warn(f"skipping unreadable image {path}: {error}", stacklevel=3)
        return None


def _pixels(image: Image.Image | None) -> torch.Tensor | None:
    """PIL image → uint8 ``(channels, height, width)``."""
    if image is None:
        return None
    array = np.array(image)  # a writable copy
    array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
    return torch.from_numpy(np.ascontiguousarray(array))

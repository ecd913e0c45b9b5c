"""Pixel data modules: raster intensity tokens for image generation, photo crops for super-resolution."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from multimodal.data.images import image_classification_dataset, load_digits_split, super_resolution_dataset
from multimodal.tokenizers.image import PixelTokenizer, pixels_to_tokens

PixelDataset = Literal["digits", "fashion_mnist", "mnist", "cifar10", "cifar100", "imagefolder"]
# (height, width, channels, classes) of the data sets whose images all have one size.
KNOWN_SHAPES = {
    "digits": (8, 8, 1, 10),
    "fashion_mnist": (28, 28, 1, 10),
    "mnist": (28, 28, 1, 10),
    "cifar10": (32, 32, 3, 10),
    "cifar100": (32, 32, 3, 100),
}


class PixelDataModule(pl.LightningDataModule):
    """Images as raster pixel tokens ``(seq_len,)`` with their class label, for the Image Transformer.

    Batches are ``(tokens, labels)``: intensity ids int64 ``(batch, height * width * channels)``
    (:class:`~multimodal.tokenizers.image.PixelTokenizer` order, no BOS) and class ids ``(batch,)``.
    Splits are the fixed ones of :func:`~multimodal.data.images.image_classification_dataset`.

    Args:
        dataset: ``digits`` (8×8, bundled with scikit-learn), ``fashion_mnist`` (28×28; fetch once
            with ``multimodal data fashion-mnist``), ``mnist``, ``cifar10``, ``cifar100`` (your files
            under ``root``) or ``imagefolder`` (``root/<class>/<image>``, or ``root/train|val|test/...``).
        root: Folder holding the files; default ``$MULTIMODAL_CACHE`` or ``~/.cache/multimodal``.
        image_size: ``imagefolder``: images are resized and centre-cropped to this square (required).
        channels: ``imagefolder``: 1 (greyscale) or 3 (RGB).
        num_levels: Intensity levels per channel; None means 17 for digits (their raw 0–16 values)
            and 256 (8 bits) otherwise.
        batch_size: Images per batch.
        num_workers: DataLoader worker processes.
        train_limit: Use only the first ``train_limit`` training images (quick runs).
        val_limit: Use only the first ``val_limit`` validation/test images.
    """

    def __init__(
        self,
        dataset: PixelDataset = "digits",
        root: str | None = None,
        image_size: int | None = None,
        channels: int = 3,
        num_levels: int | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        train_limit: int | None = None,
        val_limit: int | None = None,
    ) -> None:
        super().__init__()
        if dataset == "imagefolder":
            if image_size is None or root is None:
                raise ValueError("dataset='imagefolder' needs root=<folder> and image_size=<side in pixels>")
            height = width = image_size
            num_classes = len(_class_folders(Path(root)))
        elif dataset in KNOWN_SHAPES:
            height, width, channels, num_classes = KNOWN_SHAPES[dataset]
        else:
            raise ValueError(f"unknown dataset {dataset!r}; choose one of {[*KNOWN_SHAPES, 'imagefolder']}")
        levels = num_levels or (17 if dataset == "digits" else 256)
        self.dataset, self.root, self.image_size = dataset, root, image_size
        self.batch_size, self.num_workers = batch_size, num_workers
        self.train_limit, self.val_limit = train_limit, val_limit
        self.tokenizer = PixelTokenizer(height, width, channels, levels)
        self.num_classes = num_classes

    @property
    def height(self) -> int:
        """Image height in pixels."""
        return self.tokenizer.height

    @property
    def width(self) -> int:
        """Image width in pixels."""
        return self.tokenizer.width

    @property
    def channels(self) -> int:
        """Channels per pixel."""
        return self.tokenizer.channels

    @property
    def num_levels(self) -> int:
        """Intensity levels per channel."""
        return self.tokenizer.num_levels

    def split(self, name: Literal["train", "val", "test"]) -> Dataset:
        """The tokenised ``train``, ``val`` or ``test`` split (limited by ``train_limit`` / ``val_limit``)."""
        limit = self.train_limit if name == "train" else self.val_limit
        if self.dataset == "digits":
            images, labels = load_digits_split(name, "uint8")
            data: Dataset = torch.utils.data.TensorDataset(pixels_to_tokens(images, self.num_levels), labels)
        else:
            transform = None
            if self.dataset == "imagefolder":
                transform = [{"name": "Resize", "size": self.image_size},
                             {"name": "CenterCrop", "size": self.image_size}]  # fmt: skip
            images = image_classification_dataset(self.dataset, self.root, name, transform, self.channels)
            data = PixelTokens(images, self.num_levels)
        return Subset(data, range(min(limit, len(data)))) if limit is not None else data

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.split("train"), shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.split("val"), shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.split("test"), shuffle=False)

    def _loader(self, data: Dataset, shuffle: bool) -> DataLoader:
        return DataLoader(data, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0, drop_last=False)  # fmt: skip


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


class SuperResolutionDataModule(pl.LightningDataModule):
    """``(low_res, high_res)`` crops of photos for the super-resolution task.

    Training crops are random on every access; validation crops are fixed and come from photos
    training never sees (see :func:`~multimodal.data.images.super_resolution_dataset` and
    ``docs/images.md`` for the held-out skimage photos).

    Args:
        source: ``"skimage"`` (photos bundled with scikit-image) or a folder of your photos.
        scale: Downsampling factor, 2 or 4.
        crop_size: High-resolution crop side (a multiple of ``scale``).
        channels: 3 (RGB; greyscale photos replicated) or 1 (luma).
        crops_per_photo: Training crops per photo per epoch.
        val_crops_per_photo: Fixed validation crops per held-out photo.
        batch_size: Crops per batch.
        num_workers: DataLoader worker processes.
        seed: Seed of the fixed validation crops.
    """

    def __init__(
        self,
        source: str = "skimage",
        scale: int = 2,
        crop_size: int = 48,
        channels: int = 3,
        crops_per_photo: int = 64,
        val_crops_per_photo: int = 16,
        batch_size: int = 16,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if crop_size % scale:
            raise ValueError(f"crop_size={crop_size} must be a multiple of scale={scale}")
        self.source, self.scale, self.crop_size, self.channels = source, scale, crop_size, channels
        self.crops_per_photo, self.val_crops_per_photo = crops_per_photo, val_crops_per_photo
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed

    def split(self, name: Literal["train", "val"]) -> Dataset:
        """The ``train`` (random crops) or ``val`` (fixed crops of held-out photos) split."""
        crops = self.crops_per_photo if name == "train" else self.val_crops_per_photo
        return super_resolution_dataset(
            self.source, name, self.scale, self.crop_size, self.channels, crops, self.seed
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.split("train"), batch_size=self.batch_size, shuffle=True,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.split("val"), batch_size=self.batch_size, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()


def _class_folders(root: Path) -> list[str]:
    folder = root / "train" if (root / "train").is_dir() else root
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder {folder} does not exist")
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))

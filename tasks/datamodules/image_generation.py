"""Image generation data: images as raster intensity tokens for the Image Transformer."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from multimodal.data.images import (
    KNOWN_SHAPES,
    PixelTokens,
    image_classification_dataset,
    load_digits_split,
)
from multimodal.data.resumable import ResumableLoader
from multimodal.tokenizers.image import PixelTokenizer, pixels_to_tokens
from tasks.datamodules.checks import check_options
from tasks.datamodules.sampling import evaluation_sampler

PixelDataset = Literal["digits", "fashion_mnist", "mnist", "cifar10", "cifar100", "imagefolder"]
class ImageGenerationDataModule(pl.LightningDataModule):
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
        seed: The training order is a function of ``(seed, epoch)`` (exact resume).
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
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_options({"image_size": 1, "num_levels": 2, "batch_size": 1, "num_workers": 0, "train_limit": 1,
                       "val_limit": 1}, image_size=image_size, num_levels=num_levels, batch_size=batch_size,
                      num_workers=num_workers, train_limit=train_limit, val_limit=val_limit)  # fmt: skip
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
        self.train_limit, self.val_limit, self.seed = train_limit, val_limit, seed
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
        return ResumableLoader(self.split("train"), batch_size=self.batch_size, shuffle=True, seed=self.seed,
                               num_workers=self.num_workers)  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.split("val"))

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.split("test"))

    def _loader(self, data: Dataset) -> DataLoader:
        return DataLoader(data, batch_size=self.batch_size, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0, sampler=evaluation_sampler(data))  # fmt: skip


def _class_folders(root: Path) -> list[str]:
    folder = root / "train" if (root / "train").is_dir() else root
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder {folder} does not exist")
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))

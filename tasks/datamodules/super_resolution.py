"""Super-resolution data: (low-resolution, high-resolution) crops of photos."""

from __future__ import annotations

from typing import Literal

import pytorch_lightning as pl
from torch.utils.data import DataLoader, Dataset

from multimodal.data.images import super_resolution_dataset
from multimodal.data.resumable import ResumableLoader, SeededItems
from tasks.datamodules.checks import check_options
from tasks.datamodules.sampling import evaluation_sampler


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
        seed: Seed of the fixed validation crops; the training crops and order are a function of
            ``(seed, epoch, index)`` (exact resume).
        dihedral: Turn each training crop by a random flip / 90-degree rotation (the 8 symmetries of
            the square), as EDSR and SwinIR train; validation crops are never turned.
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
        dihedral: bool = False,
    ) -> None:
        super().__init__()
        check_options({"scale": 1, "crop_size": 1, "crops_per_photo": 1, "val_crops_per_photo": 1, "batch_size": 1,
                       "num_workers": 0}, scale=scale, crop_size=crop_size, crops_per_photo=crops_per_photo,
                      val_crops_per_photo=val_crops_per_photo, batch_size=batch_size, num_workers=num_workers)  # fmt: skip
        if channels not in (1, 3):
            raise ValueError(f"channels={channels}: must be 1 (grey) or 3 (RGB)")
        if crop_size % scale:
            raise ValueError(f"crop_size={crop_size} must be a multiple of scale={scale}")
        self.source, self.scale, self.crop_size, self.channels = source, scale, crop_size, channels
        self.crops_per_photo, self.val_crops_per_photo = crops_per_photo, val_crops_per_photo
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.dihedral = dihedral

    def split(self, name: Literal["train", "val"]) -> Dataset:
        """The ``train`` (random crops) or ``val`` (fixed crops of held-out photos) split."""
        crops = self.crops_per_photo if name == "train" else self.val_crops_per_photo
        return super_resolution_dataset(
            self.source, name, self.scale, self.crop_size, self.channels, crops, self.seed, self.dihedral
        )

    def train_dataloader(self) -> DataLoader:
        return ResumableLoader(SeededItems(self.split("train"), self.seed), batch_size=self.batch_size, shuffle=True,
                               seed=self.seed, num_workers=self.num_workers)  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        data = self.split("val")
        return DataLoader(data, batch_size=self.batch_size, num_workers=self.num_workers,
                          sampler=evaluation_sampler(data))  # fmt: skip

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

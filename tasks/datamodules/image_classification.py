"""Image classification data module: built-in sets, torchvision files on disk, or an image folder.

Wraps :func:`multimodal.data.images.image_classification_dataset` (fixed splits, corrupt files
skipped with a warning, missing data sets explained). The sizes the model needs — ``num_classes``,
``class_names``, ``channels``, ``image_size`` — are properties read from the data itself (one
validation image after the evaluation transforms), so the CLI links them into the task and no
config repeats them.

Pipelines, in order: optional ``Resize(image_size)`` + ``CenterCrop(image_size)`` (every split),
``augmentation`` (training only), ``transform`` (every split, e.g. ``Normalize``), then
``ToDtype(float32, scale=True)``. Both spec lists name ``torchvision.transforms.v2`` classes
(:func:`multimodal.data.augment.build_transform`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, default_collate
from torchvision.transforms import v2

from multimodal.data.augment import build_transform
from multimodal.data.fetch import DatasetNotFoundError
from multimodal.data.image_folder import IMAGE_EXTENSIONS, ImageFolder, image_files, pil_mode, to_mode
from multimodal.data.images import DatasetName, ImageClassificationDataset, image_classification_dataset
from multimodal.data.resumable import ResumableLoader, SeededItems
from tasks.datamodules.checks import check_options
from tasks.datamodules.sampling import evaluation_sampler

__all__ = ["ImageClassificationDataModule", "PredictionImages"]


class ImageClassificationDataModule(pl.LightningDataModule):
    """``(image, label)`` batches for image classification; ``predict`` yields ``(image, name)``.

    Args:
        dataset: ``digits`` (scikit-learn, built in), ``fashion_mnist`` (``multimodal data
            fashion-mnist`` fetches it), ``mnist``, ``cifar10``, ``cifar100`` (your files under
            ``root``, torchvision's layout) or ``imagefolder`` (``root/<class>/<image>``, or
            ``root/{train,val,test}/<class>/<image>``). Splits are fixed; see ``docs/images.md``.
        root: Folder of the files; None: ``$MULTIMODAL_CACHE`` or ``~/.cache/multimodal``.
            Required for ``imagefolder``.
        image_size: Resize (shorter side) and centre-crop every image to this square side; None
            keeps the data set's own size (set it for folders of mixed sizes).
        channels: ``imagefolder`` only: 1 reads images as greyscale, 3 as RGB.
        augmentation: Training-only ``v2`` transform specs, e.g. ``[{name: RandomCrop, size: 28,
            padding: 2}]``.
        transform: ``v2`` transform specs for every split, after the augmentation.
        batch_size: Images per training batch.
        eval_batch_size: Images per validation/test/predict batch; None: ``batch_size``.
        num_workers: DataLoader worker processes.
        predict_dir: Folder of images (searched recursively) to classify with ``multimodal
            predict``; None: the ``predict_split`` of the data set.
        predict_split: Split classified by ``predict`` when no ``predict_dir`` is given.
        seed: The training order and augmentations are a function of ``(seed, epoch, index)``, so
            a resumed run continues exactly (:mod:`multimodal.data.resumable`).
    """

    def __init__(
        self,
        dataset: DatasetName = "digits",
        root: str | None = None,
        image_size: int | None = None,
        channels: int = 3,
        augmentation: list[dict[str, Any]] | None = None,
        transform: list[dict[str, Any]] | None = None,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        predict_dir: str | None = None,
        predict_split: Literal["train", "val", "test"] = "test",
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_options({"image_size": 1, "batch_size": 1, "eval_batch_size": 1, "num_workers": 0},
                      image_size=image_size, batch_size=batch_size, eval_batch_size=eval_batch_size,
                      num_workers=num_workers)  # fmt: skip
        if channels not in (1, 3):
            raise ValueError(f"channels={channels}: must be 1 (grey) or 3 (RGB)")
        self.name, self.root, self.channels_arg = dataset, root, channels
        self.resize = [] if image_size is None else [
            {"name": "Resize", "size": image_size}, {"name": "CenterCrop", "size": image_size},
        ]  # fmt: skip
        self.augmentation, self.transform = list(augmentation or []), list(transform or [])
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers, self.predict_dir, self.predict_split = num_workers, predict_dir, predict_split
        self.seed = seed
        self._splits: dict[str, ImageClassificationDataset] = {}

    # ----------------------------------------------------------------------------------------------
    # Sizes linked into the task
    # ----------------------------------------------------------------------------------------------

    @property
    def class_names(self) -> list[str]:
        """One name per label id."""
        return list(self.split("val").class_names)

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.class_names)

    @property
    def channels(self) -> int:
        """Channels of the images the model sees (after the evaluation transforms)."""
        return int(self._probe().shape[0])

    @property
    def image_size(self) -> int | tuple[int, int]:
        """Side of the (square) images the model sees, or ``(height, width)``."""
        height, width = self._probe().shape[-2:]
        return int(height) if height == width else (int(height), int(width))

    def _probe(self) -> torch.Tensor:
        return self.split("val")[0][0]

    # ----------------------------------------------------------------------------------------------
    # Data sets and loaders
    # ----------------------------------------------------------------------------------------------

    def split(self, name: Literal["train", "val", "test"]) -> ImageClassificationDataset:
        """The ``train``, ``val`` or ``test`` data set with its transforms (built once)."""
        if name not in self._splits:
            specs = [*self.resize, *(self.augmentation if name == "train" else []), *self.transform]
            self._splits[name] = image_classification_dataset(
                self.name, self.root, name, transform=specs or None, channels=self.channels_arg
            )
        return self._splits[name]

    def predict_dataset(self) -> Dataset:
        """``(image, name)`` items: the files of ``predict_dir``, or the ``predict_split`` named by index."""
        if self.predict_dir is not None:
            return PredictionImages(self.predict_dir, self.channels, [*self.resize, *self.transform])
        return _NamedItems(self.split(self.predict_split), f"{self.name}/{self.predict_split}")

    def setup(self, stage: str | None = None) -> None:
        needed = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}.get(stage or "", ())
        for name in needed:
            self.split(name)

    def train_dataloader(self) -> DataLoader:
        return ResumableLoader(SeededItems(self.split("train"), self.seed), batch_size=self.batch_size, shuffle=True,
                               seed=self.seed, num_workers=self.num_workers)  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.split("val"), self.eval_batch_size, sampler=evaluation_sampler(self.split("val")))

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.split("test"), self.eval_batch_size, sampler=evaluation_sampler(self.split("test")))

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_dataset(), self.eval_batch_size, collate_fn=_collate_readable)

    def _loader(self, data: Dataset, batch_size: int, **kwargs: Any) -> DataLoader:
        return DataLoader(
            data, batch_size=batch_size, num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0, **kwargs,
        )  # fmt: skip


class PredictionImages(Dataset):
    """Every image file under a folder (recursively, sorted) as ``(image, path)``, for ``predict``.

    Files that do not open are left out with a warning naming them; a file that fails only when
    decoded yields ``None`` (with a warning), which the predict loader drops.

    Args:
        folder: Where the images are.
        channels: 1 (greyscale) or 3 (RGB); must match the model.
        transform: ``v2`` transform specs (resize, normalisation) applied before ``ToDtype``.
    """

    def __init__(
        self, folder: str | Path, channels: int, transform: list[dict[str, Any]] | None = None
    ) -> None:
        self.folder, self.mode = Path(folder), pil_mode(channels)
        if not self.folder.is_dir():
            raise DatasetNotFoundError(f"predict_dir {self.folder} is not a folder of images")
        self.files = [path for path in image_files(self.folder) if _readable(path)]
        if not self.files:
            raise DatasetNotFoundError(
                f"no readable images ({', '.join(IMAGE_EXTENSIONS)}) under {self.folder}"
            )
        self.pipeline, _ = prediction_pipeline(channels, None, transform)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str] | None:
        path = self.files[index]
        try:
            with Image.open(path) as image:
                pixels = to_mode(image, self.mode)
        except Exception as error:
            warnings.warn(f"skipping unreadable image {path}: {error}", stacklevel=2)
            return None
        return self.pipeline(pixels).as_subclass(torch.Tensor), str(path)


def prediction_pipeline(
    channels: int, image_size: int | None, transform: list[dict[str, Any]] | None
) -> tuple[v2.Compose, str]:
    """What an image goes through before the model at prediction time, and the PIL mode to read it in.

    Args:
        channels: 1 (greyscale) or 3 (RGB).
        image_size: The run's ``Resize`` + ``CenterCrop`` side, or None.
        transform: The run's evaluation ``v2`` specs (e.g. ``Normalize``).
    """
    resize = [] if image_size is None else [{"name": "Resize", "size": image_size}, {"name": "CenterCrop", "size": image_size}]
    user = build_transform([*resize, *(transform or [])])
    steps = [v2.ToImage(), *([user] if user else []), v2.ToDtype(torch.float32, scale=True)]
    return v2.Compose(steps), pil_mode(channels)


class _NamedItems(Dataset):
    """``(image, name)`` items of a split: the file's path, or ``<data set>/<split>/<index>``.

    The index is the image's position in what the split is cut from: the split itself for digits,
    the official training (``train``, ``val``) or test set for the torchvision sets.
    """

    def __init__(self, data: ImageClassificationDataset, prefix: str) -> None:
        self.data, self.prefix = data, prefix

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str]:
        image, _ = self.data[index]
        base_index = int(self.data.indices[index])
        if isinstance(self.data.base, ImageFolder):
            return image, str(self.data.base.samples[base_index][0])
        return image, f"{self.prefix}/{base_index}"


def _readable(path: Path) -> bool:
    try:
        with Image.open(path) as image:
            image.verify()
    except Exception as error:
        warnings.warn(f"skipping unreadable image {path}: {error}", stacklevel=3)
        return False
    return True


def _collate_readable(items: list[Any]) -> Any:
    """Default collation of the items that could be read (``None`` marks an unreadable file)."""
    kept = [item for item in items if item is not None]
    return default_collate(kept) if kept else None

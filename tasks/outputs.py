"""Where a task writes its files (samples, confusion matrices) during training, and what it shows in TensorBoard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from PIL import Image


def log_folder(trainer: pl.Trainer) -> Path:
    """The run's log folder, as ``trainer.log_dir`` computes it, but without its broadcast.

    ``trainer.log_dir`` is a collective under data parallelism (``strategy: ddp``): read on the
    first process alone — the only one that writes files — it waits forever for the others. This
    reads the first logger's folder (``log_dir`` of TensorBoard/CSV loggers, else ``save_dir``)
    locally; without a logger, ``default_root_dir``.
    """
    if trainer.loggers:
        logger = trainer.loggers[0]
        folder = (
            logger.log_dir
            if isinstance(logger, (pl.loggers.TensorBoardLogger, pl.loggers.CSVLogger))
            else logger.save_dir
        )
        if folder:
            return Path(folder)
    return Path(trainer.default_root_dir)


def tensorboard(trainer: pl.Trainer) -> Any | None:
    """The ``SummaryWriter`` of the trainer's TensorBoard logger (the default one), or None without one."""
    for logger in trainer.loggers:
        if isinstance(logger, pl.loggers.TensorBoardLogger):
            return logger.experiment
    return None


def show_image(trainer: pl.Trainer, tag: str, image: str | Path | np.ndarray) -> None:
    """Adds an image (a PNG the task wrote, or an ``(H, W, 3)`` uint8 array) to TensorBoard at this step."""
    writer = tensorboard(trainer)
    if writer is None:
        return
    array = np.asarray(Image.open(image).convert("RGB")) if isinstance(image, str | Path) else image
    writer.add_image(tag, array, trainer.global_step, dataformats="HWC")


def show_audio(trainer: pl.Trainer, tag: str, waveform: torch.Tensor, sample_rate: int) -> None:
    """Adds a mono waveform ``(num_samples,)`` in [-1, 1] to TensorBoard at this step (nothing if it is empty)."""
    writer = tensorboard(trainer)
    if writer is None or waveform.numel() == 0:
        return
    writer.add_audio(tag, waveform.reshape(1, -1).float(), trainer.global_step, sample_rate=sample_rate)


def show_text(trainer: pl.Trainer, tag: str, text: str) -> None:
    """Adds text to TensorBoard at this step (shown as Markdown: a code block keeps it as written)."""
    writer = tensorboard(trainer)
    if writer is not None:
        writer.add_text(tag, "```\n" + text.replace("```", "` ` `") + "\n```", trainer.global_step)

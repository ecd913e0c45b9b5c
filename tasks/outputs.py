"""Where a task writes its files (samples, confusion matrices) during training."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl


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


def claim_outputs(paths: list[Path], overwrite: bool) -> None:
    """Refuses to replace files that already exist, unless ``overwrite`` (a command's ``--overwrite``).

    Raises:
        FileExistsError: Naming the first such file; nothing has been written yet.
    """
    if overwrite:
        return
    for path in paths:
        if Path(path).exists():
            raise FileExistsError(17, "already exists; pass --overwrite to replace it, or another --out", str(path))

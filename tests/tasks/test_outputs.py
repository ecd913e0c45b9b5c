"""log_folder finds the folder trainer.log_dir names, without trainer.log_dir's collective broadcast."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

from tasks.outputs import log_folder


@pytest.mark.parametrize("kind", ["csv", "tensorboard", "none"])
def test_log_folder_is_the_trainers_log_dir(tmp_path, kind):
    logger = {
        "csv": lambda: CSVLogger(tmp_path / "csv", name="logs"),
        "tensorboard": lambda: TensorBoardLogger(tmp_path / "tb", name="logs"),
        "none": lambda: False,
    }[kind]()
    trainer = pl.Trainer(logger=logger, default_root_dir=tmp_path / "root", enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    assert log_folder(trainer) == Path(trainer.log_dir)
    assert log_folder(trainer).is_relative_to(tmp_path)

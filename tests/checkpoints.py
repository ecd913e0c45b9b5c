"""Checkpoints for tests: a task's shipped config plus its tiny override, trained for one step."""

from pathlib import Path

import pytorch_lightning as pl

ROOT = Path(__file__).resolve().parents[1]


def one_step_checkpoint(configs: list[str], path: Path) -> Path:
    """Trains ``configs`` (file names under ``configs/``) for one step and saves the checkpoint at ``path``."""
    from tasks.cli import MultimodalCLI, task_class_from_args

    argv = [arg for config in configs for arg in ("--config", str(ROOT / "configs" / config))]
    argv += ["--trainer.logger", "false"]
    cli = MultimodalCLI(argv, data_links=task_class_from_args(argv).data_links, run=False)
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, num_sanity_val_steps=0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=path.parent)  # fmt: skip
    trainer.fit(cli.model, datamodule=cli.datamodule)
    trainer.save_checkpoint(path)
    return path

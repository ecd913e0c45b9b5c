"""A Lightning callback for the distributed tests: what each process trained on, and its final weights."""

import json
from pathlib import Path

import pytorch_lightning as pl
import torch


class Probe(pl.Callback):
    """Writes ``<folder>/rank<r>.json`` (the training rows of epoch 0, as lists) and ``rank<r>.pt`` (weights)."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.rows: list[list[int]] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if trainer.current_epoch == 0:
            self.rows += batch.tolist()

    def on_train_end(self, trainer, module) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        rank = trainer.global_rank
        (self.folder / f"rank{rank}.json").write_text(json.dumps(self.rows))
        torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()}, self.folder / f"rank{rank}.pt")

"""Self-contained checkpoints: which task made them and its tokenizer, loaded without unpickling.

Lightning checkpoints written by our tasks carry a ``"multimodal"`` entry with the task's class
path and the tokenizer's JSON. :func:`load_task` rebuilds both with
``torch.load(..., weights_only=True)``: a checkpoint can hold tensors and plain values only.
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path
from typing import Any

import torch


class SelfContainedCheckpoint:
    """Mixin for our ``LightningModule`` s: each checkpoint records the task class and the data's tokenizer.

    The data module's ``tokenizer`` attribute (MIDI events, BPE, pixel levels) is stored when it
    has one, so ``multimodal generate`` / :func:`load_task` need nothing but the checkpoint.
    """

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        checkpoint["multimodal"] = describe(self, getattr(datamodule, "tokenizer", None))


def describe(task: Any, tokenizer: Any | None) -> dict[str, str]:
    """The ``"multimodal"`` checkpoint entry for ``task`` (and its data's tokenizer, if any)."""
    entry = {"task": _path_of(type(task))}
    if tokenizer is not None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "tokenizer.json"
            tokenizer.save(path)
            entry["tokenizer"] = path.read_text()
        entry["tokenizer_class"] = _path_of(type(tokenizer))
    return entry


def load_task(path: str | Path, map_location: str = "cpu") -> tuple[Any, Any | None]:
    """Rebuilds ``(task, tokenizer)`` from a checkpoint written by one of our tasks (eval mode)."""
    checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    entry = checkpoint.get("multimodal")
    if entry is None:
        raise ValueError(f"{path} was not written by a multimodal task (no 'multimodal' entry); "
                         f"train with `multimodal fit` to get a self-contained checkpoint")  # fmt: skip
    task_class = _class_at(entry["task"], allowed_prefix="tasks.")
    task = task_class(**checkpoint.get("hyper_parameters", {}))
    task.load_state_dict(checkpoint["state_dict"])
    task.eval()
    tokenizer = None
    if "tokenizer" in entry:
        tokenizer_class = _class_at(entry["tokenizer_class"], allowed_prefix="multimodal.tokenizers.")
        with tempfile.TemporaryDirectory() as folder:
            tokenizer_path = Path(folder) / "tokenizer.json"
            tokenizer_path.write_text(entry["tokenizer"])
            tokenizer = tokenizer_class.load(tokenizer_path)
    return task, tokenizer


def _path_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _class_at(path: str, allowed_prefix: str) -> type:
    """Imports a class by dotted path, only from our own packages (a checkpoint names no other code)."""
    if not path.startswith(allowed_prefix):
        raise ValueError(f"refusing to import {path!r} named by a checkpoint: only {allowed_prefix}* classes load")
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)

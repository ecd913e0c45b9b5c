"""``multimodal fit|validate|test|predict``: the LightningCLI over every task and data module.

The YAML names a task (``model.class_path``) and a data module (``data.class_path``); unknown keys
are errors; ``--print_config`` shows the full resolved config. Sizes the data decides (vocabulary,
number of classes) are linked from the data module into the task when both are instantiated; each
task lists them in its ``data_links``. Imported only when one of these subcommands runs
(:mod:`tasks.cli` stays light).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import LightningCLI

from tasks.checkpoint import checkpoint_task
from tasks.registry import TASKS


def import_tasks() -> None:
    """Imports every registered task module, so LightningCLI knows the tasks by their short names too."""
    for class_path in TASKS.values():
        importlib.import_module(class_path.rpartition(".")[0])


class MultimodalCLI(LightningCLI):
    """LightningCLI over every task and data module, with the chosen task's data links.

    Args:
        args: Command-line arguments (without the program name); None reads ``sys.argv``.
        data_links: Data-module attribute -> task init argument, linked at instantiation.
        run: Run the subcommand (False: only instantiate, for tests).
    """

    def __init__(self, args: Sequence[str] | None, data_links: dict[str, str] | None = None, run: bool = True) -> None:
        self.data_links = data_links or {}
        super().__init__(
            pl.LightningModule,
            pl.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            auto_configure_optimizers=False,  # tasks take an OptimizerCallable of their own
            save_config_kwargs={"overwrite": True},
            args=None if args is None else list(args),
            run=run,
        )

    def add_arguments_to_parser(self, parser) -> None:
        for source, target in self.data_links.items():
            parser.link_arguments(f"data.{source}", f"model.init_args.{target}", apply_on="instantiate")

    def _parse_ckpt_path(self) -> None:
        """Merges a ``--ckpt_path`` checkpoint's hyper-parameters into the config, as Lightning does.

        Lightning expects them under a ``_class_path`` key that only its own ``save_hyperparameters``
        writes; our tasks save plain init arguments and name their class in the ``"multimodal"`` entry.
        The checkpoint's task class comes from our ``tasks.`` package only, must be the config's
        task when the config names one, and checkpoints are never unpickled (``weights_only``).
        """
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return super()._parse_ckpt_path()
        settings = self.config[subcommand]
        if settings.get("weights_only") is False:
            self.parser.error("--weights_only false: checkpoints are read without unpickling; "
                              "a checkpoint that needs pickle is not one of ours")  # fmt: skip
        ckpt_path = settings.get("ckpt_path")
        if not ckpt_path or ckpt_path in ("last", "best", "hpc", "registry") or not Path(ckpt_path).is_file():
            return super()._parse_ckpt_path()
        try:
            checkpoint = torch.load(ckpt_path, weights_only=True, map_location="cpu")
        except Exception as error:  # a truncated or foreign file
            self.parser.error(f"--ckpt_path {ckpt_path}: not a readable checkpoint ({type(error).__name__}: {error})")
        entry, hparams = checkpoint.get("multimodal"), checkpoint.get("hyper_parameters")
        if entry is None or not hparams:
            self.parser.error(f"--ckpt_path {ckpt_path}: not written by a multimodal task (no 'multimodal' entry)")
        try:
            task_class, arguments = checkpoint_task(entry, hparams)
        except (ValueError, ImportError, AttributeError) as error:
            self.parser.error(f"--ckpt_path {ckpt_path}: {error}")
        found = f"{task_class.__module__}.{task_class.__qualname__}"
        configured = (settings.get("model") or {}).get("class_path") if isinstance(settings.get("model"), dict) else None
        configured = getattr(settings.get("model"), "class_path", configured)
        if configured and configured != found and TASKS.get(configured, configured) != found:
            self.parser.error(f"--ckpt_path {ckpt_path}: a {task_class.__name__} checkpoint, but the config's task is "
                              f"{configured}; use that task's config, or leave --config out to take the checkpoint's")  # fmt: skip
        model = {"class_path": found, "init_args": arguments}
        self.config = self.parser.parse_object({subcommand: {"model": model}}, self.config)

"""The ``multimodal`` command.

``multimodal fit|validate|test|predict --config configs/<task>.yaml`` is a LightningCLI: the YAML
names a task (``model.class_path``) and a data module (``data.class_path``), unknown keys are
errors, ``--print_config`` shows the full resolved config. Sizes the data decides (vocabulary,
number of classes) are linked from the data module into the task when both are instantiated; each
task lists them in its ``data_links``.

Other subcommands (``generate``, ``data``, …) are plain functions registered with
:func:`command`; each parses its own arguments.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.cli import LightningCLI

COMMANDS: dict[str, tuple[str, Callable[[list[str]], None]]] = {}
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")
# Modules whose import registers subcommands and makes their task classes known by short name.
TASK_MODULES = ("tasks.music_continuation", "tasks.language_modeling", "tasks.classification", "tasks.image_generation", "tasks.super_resolution", "tasks.commands", "tasks.data_command", "tasks.convert_command")


def command(name: str, help: str) -> Callable[[Callable[[list[str]], None]], Callable[[list[str]], None]]:
    """Registers ``function(argv)`` as ``multimodal NAME``."""

    def register(function: Callable[[list[str]], None]) -> Callable[[list[str]], None]:
        COMMANDS[name] = (help, function)
        return function

    return register


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
        """
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if ckpt_path and Path(ckpt_path).is_file():
            checkpoint = torch.load(ckpt_path, weights_only=True, map_location="cpu")
            entry, hparams = checkpoint.get("multimodal"), checkpoint.get("hyper_parameters")
            if entry is not None and hparams:
                model = {"class_path": entry["task"], "init_args": hparams}
                self.config = self.parser.parse_object({subcommand: {"model": model}}, self.config)
                return
        super()._parse_ckpt_path()


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``multimodal`` console script."""
    from_shell = argv is None
    argv = list(sys.argv[1:] if from_shell else argv)
    for module in TASK_MODULES:
        importlib.import_module(module)
    if argv and argv[0] in COMMANDS:
        COMMANDS[argv[0]][1](argv[1:])
        return
    if not argv or argv[0] in ("-h", "--help"):
        _print_overview()
        return
    task = task_class_from_args(argv)
    MultimodalCLI(None if from_shell else argv, data_links=getattr(task, "data_links", None))


def task_class_from_args(argv: Sequence[str]) -> type | None:
    """The task class named by ``--config`` files (``model.class_path``) or ``--model``, if any."""
    class_path = None
    for index in range(len(argv)):
        value = _option_value(argv, index, ("--config", "-c"))
        if value is not None and Path(value).is_file():
            section = (yaml.safe_load(Path(value).read_text()) or {}).get("model")
            if isinstance(section, dict) and "class_path" in section:
                class_path = section["class_path"]
            elif isinstance(section, str):
                class_path = section
        value = _option_value(argv, index, ("--model", "--model.class_path"))
        if value is not None and not value.lstrip().startswith("{"):
            class_path = value
    return _resolve_task(class_path) if class_path else None


def _option_value(argv: Sequence[str], index: int, names: tuple[str, ...]) -> str | None:
    arg = argv[index]
    for name in names:
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _resolve_task(class_path: str) -> type | None:
    if "." in class_path:
        module, _, name = class_path.rpartition(".")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return None  # LightningCLI reports the bad class path itself
    for cls in _subclasses(pl.LightningModule):
        if cls.__name__ == class_path:
            return cls
    return None


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _print_overview() -> None:
    print("usage: multimodal SUBCOMMAND [options]\n")
    print("Training (LightningCLI; `multimodal SUBCOMMAND --help` for options):")
    for name in LIGHTNING_SUBCOMMANDS:
        print(f"  {name:<11} {name} a task: multimodal {name} --config configs/<task>.yaml")
    print("\nTools:")
    for name, (help_text, _) in sorted(COMMANDS.items()):
        print(f"  {name:<11} {help_text}")


if __name__ == "__main__":
    main()

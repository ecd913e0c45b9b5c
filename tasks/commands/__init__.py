"""The tool subcommands of ``multimodal`` (everything but LightningCLI's fit / validate / test / predict).

Each command is a function ``run(argv)`` in a module of this package, named here by
``"module:function"`` and imported only when it runs: ``multimodal --help`` lists them without
importing torch or Lightning, and a command's own ``--help`` imports only what that command does.
To add a command, write the function (importing heavy modules inside it) and add one line to
:data:`COMMANDS`.

``multimodal generate`` and ``multimodal perplexity`` run what the checkpoint's task offers: its
command module, named in :data:`TASK_COMMANDS` by the task's registered name (tasks train; the
modules here command). To give a task these commands, write a module with
``add_generate_arguments(parser)`` / ``run_generate(model, tokenizer, args, data)`` (and the
``perplexity`` pair, if it scores files) and add one line to :data:`TASK_COMMANDS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """One subcommand: its one-line help and where its function lives."""

    help: str
    target: str  # "package.module:function"

    def load(self) -> Callable[[list[str]], None]:
        """Imports the module and returns the function (called with the arguments after the name)."""
        module, _, function = self.target.partition(":")
        return getattr(importlib.import_module(module), function)


COMMANDS: dict[str, Command] = {
    "generate": Command(
        "sample from a trained checkpoint: multimodal generate --checkpoint CKPT [--help]",
        "tasks.commands.checkpoint:generate_command",
    ),
    "perplexity": Command(
        "score files with a trained model: multimodal perplexity --checkpoint CKPT FILE... [--help]",
        "tasks.commands.checkpoint:perplexity_command",
    ),
    "sample-stats": Command(
        "how a music model's continuations compare with the real ones: multimodal sample-stats --checkpoint CKPT",
        "tasks.commands.sample_stats:sample_stats_command",
    ),
    "data": Command(
        "fetch a data set into the cache: multimodal data NAME (`multimodal data --help` lists them)",
        "tasks.commands.data:data_command",
    ),
    "convert": Command(
        "GPT-2 / Llama / timm ViT weights -> our export format: multimodal convert {gpt2,llama,timm-vit} --help",
        "tasks.commands.convert:convert_command",
    ),
    "export": Command(
        "a trained checkpoint -> a model folder (multimodal.load): multimodal export --checkpoint CKPT --out DIR",
        "tasks.commands.export:export_command",
    ),
    "models": Command(
        "the models that ship with the package (load('music'), --model music): multimodal models",
        "tasks.commands.models:models_command",
    ),
    "transcribe": Command(
        "audio -> MIDI with a transcription model: multimodal transcribe --checkpoint CKPT song.wav [DIR] --out DIR",
        "tasks.commands.transcribe:transcribe_command",
    ),
    "serve": Command(
        "a local web page to play with a model: multimodal serve --checkpoint CKPT_OR_FOLDER [--port N]",
        "tasks.commands.serve:serve_command",
    ),
}


TASK_COMMANDS: dict[str, str] = {
    "MusicContinuation": "tasks.commands.music",
    "LanguageModeling": "tasks.commands.text",
    "ImageGeneration": "tasks.commands.images:generation",
    "SuperResolution": "tasks.commands.images:super_resolution",
    "AutoregressiveSuperResolution": "tasks.commands.images:super_resolution",
    "ImageClassification": "tasks.commands.images:classification",
    "ConvNetClassification": "tasks.commands.images:classification",
}
"""Registered task name (:data:`tasks.registry.TASKS`) -> its command module, or ``module:name`` of a
:class:`TaskCommands` in one (a module serving several kinds of task). A task not named here has
no ``generate`` or ``perplexity``: the commands refuse its checkpoints in one line.

A command module (or :class:`TaskCommands`) has, for ``multimodal NAME`` (``generate``, ``perplexity``):

- ``add_NAME_arguments(parser)``: adds the task's options (it may also explain what to run instead, and exit);
- ``run_NAME(model, tokenizer, args, data)``: runs the command with the checkpoint's model (eval mode,
  on ``--device``), its tokenizer (or None), the parsed options (``args.model_source``: the checkpoint or
  model folder) and the run's data settings (:attr:`tasks.checkpoint.CommandModel.data`);
- ``training_data(data)`` (optional): what ``multimodal export`` records of the run's training data for the
  commands to check inputs against (a model folder's ``training_data``), or None.

A command without ``run_NAME`` is refused.
"""


@dataclass(frozen=True)
class TaskCommands:
    """The command functions of one kind of task, for a module that serves several (see :data:`TASK_COMMANDS`)."""

    add_generate_arguments: Callable[..., None] | None = None
    run_generate: Callable[..., None] | None = None
    add_perplexity_arguments: Callable[..., None] | None = None
    run_perplexity: Callable[..., None] | None = None


def task_commands(name: str) -> Any | None:
    """The command module (or :class:`TaskCommands`) of a task by its registered name; None without one."""
    if name not in TASK_COMMANDS:
        return None
    module, _, attribute = TASK_COMMANDS[name].partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded

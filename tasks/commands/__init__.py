"""The tool subcommands of ``multimodal`` (everything but LightningCLI's fit / validate / test / predict).

Each command is a function ``run(argv)`` in a module of this package, named here by
``"module:function"`` and imported only when it runs: ``multimodal --help`` lists them without
importing torch or Lightning, and a command's own ``--help`` imports only what that command does.
To add a command, write the function (importing heavy modules inside it) and add one line to
:data:`COMMANDS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass


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
        "tasks.commands.convert:export_command",
    ),
    "serve": Command(
        "a local web page to play with a model: multimodal serve --checkpoint CKPT_OR_FOLDER [--port N]",
        "tasks.commands.serve:serve_command",
    ),
}

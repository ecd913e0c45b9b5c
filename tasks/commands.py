"""Subcommands beyond LightningCLI's: ``multimodal generate`` and ``multimodal data``."""

from __future__ import annotations

import argparse
from pathlib import Path

from tasks.checkpoint import load_task
from tasks.cli import command


@command("generate", "sample from a trained checkpoint: multimodal generate --checkpoint CKPT [--help]")
def generate_command(argv: list[str]) -> None:
    """``multimodal generate``: the options after ``--checkpoint`` depend on the checkpoint's task."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--checkpoint", type=Path)
    known, _ = first.parse_known_args(argv)
    parser = argparse.ArgumentParser(prog="multimodal generate", description=generate_command.__doc__)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a .ckpt written by `multimodal fit`")
    parser.add_argument("--out", type=Path, default=Path("outputs/generate"), help="output folder or file")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    task = tokenizer = None
    if known.checkpoint is not None and known.checkpoint.is_file():
        task, tokenizer = load_task(known.checkpoint)
        task.add_generate_arguments(parser)
    args = parser.parse_args(argv)
    if task is None:
        parser.error(f"checkpoint not found: {args.checkpoint}")
    task.run_generate(tokenizer, args)

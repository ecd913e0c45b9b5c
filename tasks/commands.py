"""Subcommands beyond LightningCLI's that work on a checkpoint: ``multimodal generate`` and ``perplexity``.

Each asks the checkpoint's task for its own options (``add_<name>_arguments``) and runs its
``run_<name>``: a task class that has them supports the command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

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


@command("perplexity", "score files with a trained model: multimodal perplexity --checkpoint CKPT FILE... [--help]")
def perplexity_command(argv: list[str]) -> None:
    """``multimodal perplexity``: text files (nats per token, bits per byte) or MIDI files (nats per
    event, note and second), per file and in total; the options depend on the checkpoint's task."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--checkpoint", type=Path)
    first.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    known, _ = first.parse_known_args(argv)
    parser = argparse.ArgumentParser(prog="multimodal perplexity", description=perplexity_command.__doc__)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a .ckpt written by `multimodal fit`")
    parser.add_argument("--device", default=known.device, help="cpu or cuda (default: cuda when available)")
    task = tokenizer = None
    if known.checkpoint is not None and known.checkpoint.is_file():
        task, tokenizer = load_task(known.checkpoint, map_location=known.device)
        if not hasattr(task, "run_perplexity"):
            parser.error(f"{known.checkpoint} is a {type(task).__name__} checkpoint: perplexity scores text and music models")
        task.add_perplexity_arguments(parser)
    else:
        parser.add_argument("files", nargs="*", help="files to score (the kind depends on the checkpoint)")
    args = parser.parse_args(argv)
    if task is None:
        parser.error(f"checkpoint not found: {args.checkpoint}")
    task.run_perplexity(tokenizer, args)

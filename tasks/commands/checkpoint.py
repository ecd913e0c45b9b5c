"""The commands that work on a trained checkpoint: ``multimodal generate`` and ``multimodal perplexity``.

Both read ``--checkpoint`` first, rebuild its task without unpickling (:func:`tasks.checkpoint.load_task`),
and let the task add its own options and run (the protocol of :class:`tasks.base.Task`:
``add_generate_arguments`` / ``run_generate``, ``add_perplexity_arguments`` / ``run_perplexity``).
A task that does not implement a command is refused with one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tasks.arguments import non_negative_float, positive_int, probability


def generate_command(argv: list[str]) -> None:
    """``multimodal generate``: the options after ``--checkpoint`` depend on the checkpoint's task."""
    parser = argparse.ArgumentParser(prog="multimodal generate", description=generate_command.__doc__)
    parser.add_argument("--out", type=Path, default=Path("outputs/generate"), help="output folder or file")
    parser.add_argument("--temperature", type=non_negative_float, default=1.0, help="0: greedy")
    parser.add_argument("--top-k", type=positive_int, default=None, help="keep the k most likely tokens")
    parser.add_argument("--top-p", type=probability, default=None, help="nucleus sampling, in (0, 1]")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--overwrite", action="store_true", help="replace files that already exist")
    _run_task_command("generate", parser, argv, "generates nothing")


def perplexity_command(argv: list[str]) -> None:
    """``multimodal perplexity``: text files (nats per token, bits per byte) or MIDI files (nats per
    event, note and second), per file and in total; the options depend on the checkpoint's task."""
    parser = argparse.ArgumentParser(prog="multimodal perplexity", description=perplexity_command.__doc__)
    _run_task_command("perplexity", parser, argv, "scores no files (perplexity is for text and music models)")


def _run_task_command(name: str, parser: argparse.ArgumentParser, argv: list[str], refusal: str) -> None:
    """Adds ``--checkpoint`` / ``--device``, the checkpoint's task's options, and runs the task's ``run_<name>``."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--checkpoint", type=Path)
    first.add_argument("--device", default=None)
    known, _ = first.parse_known_args(argv)
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a .ckpt written by `multimodal fit`, a run folder (its best checkpoint) or a model folder")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    task = tokenizer = None
    if known.checkpoint is not None and known.checkpoint.exists():
        import torch

        from tasks.checkpoint import load_task

        device = known.device or ("cuda" if torch.cuda.is_available() else "cpu")
        task, tokenizer = load_task(known.checkpoint, map_location=device)
        if not task.supports(name):
            getattr(task, f"add_{name}_arguments")(parser)  # may explain what to run instead, and exit
            parser.error(f"{known.checkpoint}: a {type(task).__name__} checkpoint {refusal}")
        getattr(task, f"add_{name}_arguments")(parser)
    else:
        parser.add_argument("rest", nargs="*", help="the options of the checkpoint's task")
    args = parser.parse_args(argv)
    if task is None:
        parser.error(f"checkpoint not found: {args.checkpoint}")
    getattr(task, f"run_{name}")(tokenizer, args)

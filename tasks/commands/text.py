"""``multimodal generate`` and ``multimodal perplexity`` for text checkpoints (:class:`~tasks.language_modeling.LanguageModeling`).

``generate`` continues a prompt (or each line of a file) and prints it; ``perplexity`` prints NLL,
perplexity and bits per byte of text files with the windows of the run's ``multimodal test``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from multimodal.data.storage import claim_paths
from multimodal.data.text_files import find_text_files, read_text_file
from multimodal.generation.config import SamplingConfig
from multimodal.limits import MAX_BATCH_SIZE, MAX_BEAMS, MAX_CONTEXT, MAX_NEW_TOKENS
from multimodal.text import Score, continue_text, continue_texts, score_text, stream_text
from multimodal.tokenizers.text import TextTokenizer
from tasks.arguments import (
    count,
    finite_float,
    non_negative_int,
    positive_float,
    probability,
    sampling_from_args,
)


# ---------------------------------------------------------------------------------- multimodal generate
def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``multimodal generate`` for text checkpoints."""
    prompts = parser.add_mutually_exclusive_group()  # one or the other: given both, one would be dropped
    prompts.add_argument("--prompt", default="", help="text to continue (default: start a new document)")
    prompts.add_argument("--prompt-file", type=Path, default=None,
                         help="continue each line of this file (\\n for a newline inside a prompt), in batches")
    parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8,
                        help=f"--prompt-file: prompts per batch (at most {MAX_BATCH_SIZE:,})")  # fmt: skip
    parser.add_argument("--max-new-tokens", type=count(MAX_NEW_TOKENS, low=0), default=200,
                        help=f"tokens to add (at most {MAX_NEW_TOKENS:,}; a learned-position model stops "
                             f"at its max_seq_len)")  # fmt: skip
    parser.add_argument("--stream", action="store_true", help="print the text as it is decoded")
    parser.add_argument("--stop", action="append", default=[], help="stop before this string (repeatable)")
    parser.add_argument("--min-new-tokens", type=count(MAX_NEW_TOKENS, low=0), default=0,
                        help="no EOS before this many")  # fmt: skip
    parser.add_argument("--repetition-penalty", type=positive_float, default=1.0, help="> 1 discourages repeats")
    parser.add_argument("--no-repeat-ngram-size", type=non_negative_int, default=0, help="never repeat an n-gram")
    parser.add_argument("--min-p", type=probability, default=None, help="keep tokens >= min_p x the best one")
    parser.add_argument("--num-beams", type=count(MAX_BEAMS), default=1,
                        help=f"beam search with N beams (no sampling; at most {MAX_BEAMS})")  # fmt: skip
    parser.add_argument("--length-penalty", type=finite_float, default=1.0, help="beam search: > 0 favours longer text")
    parser.set_defaults(out=None)
    parser.description = "Prints the prompt and its continuation; --out FILE also writes them there."


def run_generate(model: nn.Module, tokenizer: TextTokenizer, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """Prints ``prompt + continuation`` (and writes it to ``args.out`` when given)."""
    if args.out is not None:
        claim_paths([Path(args.out)], args.overwrite)
        if Path(args.out).is_dir():
            raise IsADirectoryError(21, "is a folder; --out takes a file name for text", str(args.out))
    sampling = sampling_from_args(args)
    if args.prompt_file is not None:
        _generate_from_file(model, tokenizer, args, sampling)
        return
    if sampling.num_beams > 1:
        text = continue_text(model, tokenizer, args.prompt, args.max_new_tokens, sampling, stop=args.stop)
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
        _write(args.out, text)
        return
    pieces = stream_text(model, tokenizer, args.prompt, args.max_new_tokens, sampling, seed=args.seed, stop=args.stop)
    sys.stdout.write(args.prompt)
    continuation = []
    for piece in pieces:
        continuation.append(piece)
        if args.stream:
            sys.stdout.write(piece)
            sys.stdout.flush()
    text = args.prompt + "".join(continuation)
    sys.stdout.write(("" if args.stream else "".join(continuation)) + ("" if text.endswith("\n") else "\n"))
    _write(args.out, text)


def _generate_from_file(model: nn.Module, tokenizer: TextTokenizer, args: argparse.Namespace,
                        sampling: SamplingConfig) -> None:  # fmt: skip
    """``--prompt-file``: every line continued, ``--batch-size`` at a time; JSON Lines to ``--out``."""
    if sampling.num_beams > 1 or args.stream:
        raise ValueError("--prompt-file decodes in batches: it takes neither --num-beams nor --stream")
    if not args.prompt_file.is_file():
        raise FileNotFoundError(2, "no such prompt file", str(args.prompt_file))
    lines = (read_text_file(args.prompt_file) or "").splitlines()
    prompts = [line.replace("\\n", "\n") for line in lines if line.strip()]
    if not prompts:
        raise ValueError(f"{args.prompt_file}: no prompt in it (one per line)")
    texts = continue_texts(model, tokenizer, prompts, args.max_new_tokens, sampling, batch_size=args.batch_size,
                           seed=args.seed, stop=args.stop)  # fmt: skip
    for index, text in enumerate(texts):
        sys.stdout.write(f"# prompt {index + 1}\n{text}{'' if text.endswith(chr(10)) else chr(10)}\n")
    records = [json.dumps({"prompt": p, "text": t}, ensure_ascii=False) for p, t in zip(prompts, texts, strict=True)]
    _write(args.out, "\n".join(records) + "\n")


def _write(out: Path | None, text: str) -> None:
    """Writes ``text`` to ``--out`` (folders created), if given."""
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")


# -------------------------------------------------------------------------------- multimodal perplexity
def add_perplexity_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``multimodal perplexity`` for text checkpoints."""
    parser.add_argument("files", nargs="+", help="text files, folders (*.txt, *.md, *.py) or globs")
    parser.add_argument("--context", type=count(MAX_CONTEXT), default=None,
                        help=f"tokens per window (default: the run's seq_len; at most {MAX_CONTEXT:,})")  # fmt: skip
    parser.add_argument("--stride", type=count(MAX_CONTEXT), default=None,
                        help="default: the run's test stride (seq_len // 2)")  # fmt: skip
    parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8, help=f"at most {MAX_BATCH_SIZE:,}")


def run_perplexity(model: nn.Module, tokenizer: TextTokenizer, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """Scores each text file as one document, then all of them together.

    Every token of every file is predicted once, after an EOS that starts the document, with
    windows of ``--context`` tokens moved ``--stride`` tokens at a time (see docs/text.md). The
    defaults are those of the run's ``multimodal test`` (``data``: its data settings), so the
    totals over its test files agree.
    """
    context, stride = default_windows(data, model.config.max_seq_len, args.context, args.stride)
    print(f"context {context}, stride {stride}; nll in nats per token, bpb in bits per UTF-8 byte")
    print(f"{'file':<48} {'tokens':>9} {'bytes':>10} {'nll':>8} {'ppl':>10} {'bpb':>7}")
    total = Score(0.0, 0, 0)
    for path in find_text_files(args.files):
        text = read_text_file(path)
        if text is None:
            continue  # read_text_file warned why
        score = score_text(model, tokenizer, text, context, stride, args.batch_size)
        total = total + score
        print(_row(str(path), score))
    if total.targets == 0:
        raise ValueError(f"{' '.join(map(str, args.files))}: no text to score (no readable file, or only empty ones)")
    print(_row("total", total))


def default_windows(data: Mapping[str, Any], max_seq_len: int, context: int | None, stride: int | None) -> tuple[int, int]:
    """The run's evaluation context (its ``seq_len``, else the model's ``max_seq_len``) and test stride, unless given."""
    run_context = data.get("seq_len") or max_seq_len
    if stride is None:
        run_stride = data.get("test_stride") if context in (None, run_context) else None
        stride = run_stride or max((context or run_context) // 2, 1)
    return context or run_context, stride


def _row(name: str, score: Score) -> str:
    name = name if len(name) <= 48 else "…" + name[-47:]
    return (f"{name:<48} {score.targets:>9} {score.bytes:>10} {score.nll_per_token:>8.4f} "
            f"{score.perplexity:>10.4f} {score.bits_per_byte:>7.4f}")  # fmt: skip

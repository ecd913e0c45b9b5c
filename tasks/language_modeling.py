"""Text language modelling: next-token cross-entropy, perplexity and bits per byte, text samples.

``multimodal fit --config configs/text_lm.yaml`` trains it; ``multimodal test`` reports
``test_ppl`` and ``test_bpb`` on the test files; ``multimodal perplexity --checkpoint CKPT FILE...``
computes the same numbers for any text files; ``multimodal generate --checkpoint CKPT --prompt TEXT``
continues a prompt.

Units (see ``docs/text.md`` for the exact definition of the evaluation windows):

- ``nll``: mean negative log-likelihood in nats per scored token;
- ``ppl = exp(nll)``: token-level perplexity (depends on the tokenizer);
- ``bpb = sum of NLL / ln 2 / UTF-8 bytes of the scored tokens``: bits per byte, comparable
  across tokenizers (EOS and other special tokens are scored but spell 0 bytes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytorch_lightning as pl
from torch import Tensor

from multimodal.data.text import find_text_files, read_text_file
from multimodal.generation import Shaping
from multimodal.limits import MAX_BATCH_SIZE, MAX_BEAMS, MAX_CONTEXT, MAX_NEW_TOKENS
from multimodal.text import Score, continue_text, continue_texts, score_text, stream_text, window_sums
from multimodal.tokenizers.text import TextTokenizer
from tasks.arguments import count, finite_float, non_negative_int, positive_float, probability
from tasks.causal_lm import CausalLMTask
from tasks.checkpoint import data_settings
from tasks.outputs import claim_outputs, log_folder, show_text


class LanguageModeling(CausalLMTask):
    """Text language model: a :class:`~multimodal.models.CausalLM` over byte-level BPE tokens.

    Trains on random windows of the token stream, every target counted (text streams have no
    padding, and EOS targets are kept). Logs ``train_loss`` (nats per token); ``val_nll``, ``val_ppl``, ``val_bpb``
    over the validation documents; ``test_nll``, ``test_ppl``, ``test_bpb`` over the test documents,
    with the sliding windows of :class:`~multimodal.data.text_windows.DocumentWindows`.
    """

    data_links: ClassVar[dict[str, str]] = {"vocab_size": "model.vocab_size"}
    evaluation_sum_names: ClassVar[tuple[str, ...]] = ("nll", "targets", "bytes")

    def evaluation_sums(self, batch: dict[str, Tensor]) -> Tensor:
        """Summed NLL (nats), number of scored targets and their UTF-8 bytes of a batch of windows
        (:func:`multimodal.text.window_sums`, the code ``multimodal perplexity`` runs too)."""
        return window_sums(self.model, batch)

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        """Adds ``{stage}_bpb`` (bits per UTF-8 byte) to the NLL and perplexity."""
        super().log_epoch_metrics(stage, sums)
        self.log(f"{stage}_bpb", Score.from_sums(sums).bits_per_byte, sync_dist=False)

    # ---------------------------------------------------------------------- multimodal perplexity
    @staticmethod
    def add_perplexity_arguments(parser: argparse.ArgumentParser) -> None:
        """Options of ``multimodal perplexity`` for text checkpoints."""
        _add_perplexity_arguments(parser)

    def run_perplexity(self, tokenizer: TextTokenizer, args: argparse.Namespace) -> None:
        """Prints NLL, perplexity and bits per byte per file and in total (see :func:`_run_perplexity`)."""
        _run_perplexity(self, tokenizer, args)

    # ------------------------------------------------------------------------ multimodal generate
    @staticmethod
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

    def run_generate(self, tokenizer: TextTokenizer, args: argparse.Namespace) -> None:
        """Prints ``prompt + continuation`` (and writes it to ``args.out`` when given)."""
        if args.out is not None:
            claim_outputs([Path(args.out)], args.overwrite)
            if Path(args.out).is_dir():
                raise IsADirectoryError(21, "is a folder; --out takes a file name for text", str(args.out))
        shaping = Shaping(min_new_tokens=args.min_new_tokens, repetition_penalty=args.repetition_penalty,
                          no_repeat_ngram_size=args.no_repeat_ngram_size, min_p=args.min_p)  # fmt: skip
        if args.prompt_file is not None:
            self._generate_from_file(tokenizer, args, shaping)
            return
        if args.num_beams > 1:
            text = continue_text(self.model, tokenizer, args.prompt, args.max_new_tokens, stop=args.stop,
                                 num_beams=args.num_beams, length_penalty=args.length_penalty)  # fmt: skip
            sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
            if args.out is not None:
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(text, encoding="utf-8")
            return
        pieces = stream_text(self.model, tokenizer, args.prompt, args.max_new_tokens, temperature=args.temperature,
                             top_k=args.top_k, top_p=args.top_p, seed=args.seed, stop=args.stop, shaping=shaping)  # fmt: skip
        sys.stdout.write(args.prompt)
        continuation = []
        for piece in pieces:
            continuation.append(piece)
            if args.stream:
                sys.stdout.write(piece)
                sys.stdout.flush()
        text = args.prompt + "".join(continuation)
        sys.stdout.write(("" if args.stream else "".join(continuation)) + ("" if text.endswith("\n") else "\n"))
        if args.out is not None:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")


    def _generate_from_file(self, tokenizer: TextTokenizer, args: argparse.Namespace, shaping: Shaping) -> None:
        """``--prompt-file``: every line continued, ``--batch-size`` at a time; JSON Lines to ``--out``."""
        if args.num_beams > 1 or args.stream:
            raise ValueError("--prompt-file decodes in batches: it takes neither --num-beams nor --stream")
        if not args.prompt_file.is_file():
            raise FileNotFoundError(2, "no such prompt file", str(args.prompt_file))
        lines = (read_text_file(args.prompt_file) or "").splitlines()
        prompts = [line.replace("\\n", "\n") for line in lines if line.strip()]
        if not prompts:
            raise ValueError(f"{args.prompt_file}: no prompt in it (one per line)")
        texts = continue_texts(self.model, tokenizer, prompts, args.max_new_tokens, batch_size=args.batch_size,
                               temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                               stop=args.stop, shaping=shaping)  # fmt: skip
        for index, text in enumerate(texts):
            sys.stdout.write(f"# prompt {index + 1}\n{text}{'' if text.endswith(chr(10)) else chr(10)}\n")
        if args.out is not None:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            records = [json.dumps({"prompt": p, "text": t}, ensure_ascii=False) for p, t in zip(prompts, texts, strict=True)]
            out.write_text("\n".join(records) + "\n", encoding="utf-8")


class TextSampleCallback(pl.Callback):
    """Every ``every_n_epochs`` validation epochs, writes a continuation to ``samples/epoch_<n>.txt``.

    The file goes under the run's log folder. The prompt is ``prompt``, or by default the first
    ``prompt_tokens`` tokens of the first validation document, so epochs compare like for like.

    Args:
        every_n_epochs: How often to sample.
        prompt: Text to continue; None: the start of a held-out document.
        prompt_tokens: Length of the default prompt.
        max_new_tokens: Tokens to generate (fewer if a learned-position model runs out of positions).
        temperature: Sampling temperature.
        top_k: Keep only the ``top_k`` most likely tokens (None: all).
        seed: Sampling seed.
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        prompt: str | None = None,
        prompt_tokens: int = 32,
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = 40,
        seed: int = 0,
    ) -> None:
        self.every_n_epochs, self.prompt, self.prompt_tokens = every_n_epochs, prompt, prompt_tokens
        self.max_new_tokens, self.temperature, self.top_k, self.seed = (
            max_new_tokens,
            temperature,
            top_k,
            seed,
        )

    def on_validation_epoch_end(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        if (
            trainer.sanity_checking
            or not trainer.is_global_zero
            or (trainer.current_epoch + 1) % self.every_n_epochs
        ):
            return
        tokenizer = trainer.datamodule.tokenizer
        prompt = self.prompt
        if prompt is None:
            stream = trainer.datamodule.stream("val")
            prompt = tokenizer.decode(np.asarray(stream[: self.prompt_tokens]).tolist())
        config = task.model.config
        room = (
            config.max_seq_len - len(tokenizer.encode(prompt)) - 1 if config.position == "learned" else None
        )
        new_tokens = self.max_new_tokens if room is None else max(0, min(self.max_new_tokens, room))
        text = continue_text(task.model, tokenizer, prompt, new_tokens, temperature=self.temperature,
                             top_k=self.top_k, seed=self.seed)  # fmt: skip
        path = (
            log_folder(trainer)
            / "samples"
            / f"epoch_{trainer.current_epoch}.txt"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        show_text(trainer, "text/sample", text)


# -------------------------------------------------------------------------- multimodal perplexity
def _add_perplexity_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``multimodal perplexity`` for text checkpoints."""
    parser.add_argument("files", nargs="+", help="text files, folders (*.txt, *.md, *.py) or globs")
    parser.add_argument("--context", type=count(MAX_CONTEXT), default=None,
                        help=f"tokens per window (default: the run's seq_len; at most {MAX_CONTEXT:,})")  # fmt: skip
    parser.add_argument("--stride", type=count(MAX_CONTEXT), default=None,
                        help="default: the run's test stride (seq_len // 2)")  # fmt: skip
    parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8, help=f"at most {MAX_BATCH_SIZE:,}")


def _run_perplexity(task: LanguageModeling, tokenizer: TextTokenizer, args: argparse.Namespace) -> None:
    """Scores each text file as one document, then all of them together.

    Every token of every file is predicted once, after an EOS that starts the document, with
    windows of ``--context`` tokens moved ``--stride`` tokens at a time (see docs/text.md). The
    defaults are those of the run's ``multimodal test``, so the totals over its test files agree.
    """
    context, stride = _default_windows(args.checkpoint, task, args.context, args.stride)
    print(f"context {context}, stride {stride}; nll in nats per token, bpb in bits per UTF-8 byte")
    print(f"{'file':<48} {'tokens':>9} {'bytes':>10} {'nll':>8} {'ppl':>10} {'bpb':>7}")
    total = Score(0.0, 0, 0)
    for path in find_text_files(args.files):
        text = read_text_file(path)
        if text is None:
            continue  # read_text_file warned why
        score = score_text(task.model, tokenizer, text, context, stride, args.batch_size)
        total = total + score
        print(_row(str(path), score))
    if total.targets == 0:
        raise ValueError(f"{' '.join(map(str, args.files))}: no text to score (no readable file, or only empty ones)")
    print(_row("total", total))


def _default_windows(checkpoint: Path, task: LanguageModeling, context: int | None, stride: int | None):
    """The run's evaluation context (its ``seq_len``) and test stride, unless given."""
    data = data_settings(checkpoint)
    run_context = data.get("seq_len") or task.config.max_seq_len
    if stride is None:
        run_stride = data.get("test_stride") if context in (None, run_context) else None
        stride = run_stride or max((context or run_context) // 2, 1)
    return context or run_context, stride


def _row(name: str, score: Score) -> str:
    name = name if len(name) <= 48 else "…" + name[-47:]
    return (f"{name:<48} {score.targets:>9} {score.bytes:>10} {score.nll_per_token:>8.4f} "
            f"{score.perplexity:>10.4f} {score.bits_per_byte:>7.4f}")  # fmt: skip

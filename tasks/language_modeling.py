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
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor, nn

from multimodal.data.text import find_text_files, read_text_file
from multimodal.generation import generate
from multimodal.tokenizers.text import TextTokenizer
from tasks.causal_lm import IGNORE_INDEX, CausalLMTask
from tasks.datamodules.text import DocumentWindows, evaluation_loader, token_byte_lengths
from tasks.outputs import log_folder


class LanguageModeling(CausalLMTask):
    """Text language model: a :class:`~multimodal.models.CausalLM` over byte-level BPE tokens.

    Trains on random windows of the token stream, every target counted (text streams have no
    padding, and EOS targets are kept). Logs ``train_nll``; ``val_nll``, ``val_ppl``, ``val_bpb``
    over the validation documents; ``test_nll``, ``test_ppl``, ``test_bpb`` over the test documents,
    with the sliding windows of :class:`~tasks.datamodules.text.DocumentWindows`.
    """

    data_links: ClassVar[dict[str, str]] = {"vocab_size": "model.vocab_size"}
    evaluation_sum_names: ClassVar[tuple[str, ...]] = ("nll", "targets", "bytes")

    def inputs_and_targets(self, batch: Tensor | dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Training batches are ``(batch, seq_len + 1)`` ids; evaluation batches carry a ``scored`` mask."""
        if not isinstance(batch, dict):
            return super().inputs_and_targets(batch)
        tokens = batch["tokens"]
        return tokens[:, :-1], tokens[:, 1:].masked_fill(~batch["scored"], IGNORE_INDEX)

    def evaluation_sums(self, batch: dict[str, Tensor]) -> Tensor:
        """Summed NLL (nats), number of scored targets and their UTF-8 bytes."""
        nll_and_count = super().evaluation_sums(batch)
        return torch.cat([nll_and_count, batch["bytes"].sum().double()[None]])

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
        parser.add_argument("--prompt", default="", help="text to continue (default: start a new document)")
        parser.add_argument("--max-new-tokens", type=int, default=200)
        parser.set_defaults(out=None)
        parser.description = "Prints the prompt and its continuation; --out FILE also writes them there."

    def run_generate(self, tokenizer: TextTokenizer, args: argparse.Namespace) -> None:
        """Prints ``prompt + continuation`` (and writes it to ``args.out`` when given)."""
        text = continue_text(
            self.model, tokenizer, args.prompt, args.max_new_tokens, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        )  # fmt: skip
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
        if args.out is not None:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")


def continue_text(
    model: nn.Module,
    tokenizer: TextTokenizer,
    prompt: str,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
) -> str:
    """``prompt`` followed by up to ``max_new_tokens`` sampled tokens (stops at EOS), as text.

    The model sees ``[EOS] + encode(prompt)``, the way a document starts in the training stream,
    and decodes with its KV cache. A model with learned absolute positions cannot go past its
    ``max_seq_len``: that is an error naming the numbers.
    """
    prompt_ids = [tokenizer.eos_id, *tokenizer.encode(prompt)]
    config = getattr(model, "config", None)
    if (
        config is not None
        and config.position == "learned"
        and len(prompt_ids) + max_new_tokens > config.max_seq_len
    ):
        raise ValueError(
            f"prompt ({len(prompt_ids)} tokens with the leading EOS) + max_new_tokens={max_new_tokens} "
            f"exceeds max_seq_len={config.max_seq_len} of this learned-position model; lower "
            f"--max-new-tokens or shorten the prompt"
        )
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    prompt_tensor = torch.tensor([prompt_ids], device=device)
    tokens = generate(
        model, prompt_tensor, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
        eos_id=tokenizer.eos_id, generator=generator,
    )  # fmt: skip
    return prompt + tokenizer.decode(tokens[0, len(prompt_ids) :].tolist())


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
            stream = trainer.datamodule.stream("validation")
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


# -------------------------------------------------------------------------- multimodal perplexity
@dataclass
class Score:
    """Evaluation totals of some text and the units derived from them."""

    nll: float  # summed negative log-likelihood, nats
    targets: int  # scored tokens
    bytes: int  # UTF-8 bytes those tokens spell

    @classmethod
    def from_sums(cls, sums: dict[str, float]) -> Score:
        return cls(sums["nll"], int(sums["targets"]), int(sums["bytes"]))

    @property
    def nll_per_token(self) -> float:
        return self.nll / max(self.targets, 1)

    @property
    def perplexity(self) -> float:
        return math.exp(min(self.nll_per_token, 700.0))

    @property
    def bits_per_byte(self) -> float:
        return self.nll / math.log(2) / max(self.bytes, 1)

    def __add__(self, other: Score) -> Score:
        return Score(self.nll + other.nll, self.targets + other.targets, self.bytes + other.bytes)


@torch.inference_mode()
def score_windows(task: LanguageModeling, windows: DocumentWindows, batch_size: int = 8) -> Score:
    """Totals of ``task`` over evaluation windows, with the code ``multimodal test`` runs."""
    was_training = task.training
    task.eval()
    device = next(task.parameters()).device
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    for batch in evaluation_loader(windows, batch_size):
        sums += task.evaluation_sums({name: value.to(device) for name, value in batch.items()})
    task.train(was_training)
    return Score.from_sums(dict(zip(task.evaluation_sum_names, sums.tolist(), strict=True)))


def score_text(
    task: LanguageModeling,
    tokenizer: TextTokenizer,
    text: str,
    context: int,
    stride: int,
    batch_size: int = 8,
) -> Score:
    """Scores one document (every token, plus nothing else) with sliding windows; see ``docs/text.md``."""
    windows = DocumentWindows([np.asarray(tokenizer.encode(text))], tokenizer.eos_id,
                              token_byte_lengths(tokenizer), context, stride)  # fmt: skip
    return score_windows(task, windows, batch_size)


def _add_perplexity_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``multimodal perplexity`` for text checkpoints."""
    parser.add_argument("files", nargs="+", help="text files, folders (*.txt, *.md, *.py) or globs")
    parser.add_argument("--context", type=int, default=None, help="tokens per window (default: the run's seq_len)")
    parser.add_argument("--stride", type=int, default=None, help="default: the run's test stride (seq_len // 2)")
    parser.add_argument("--batch-size", type=int, default=8)


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
        score = score_text(task, tokenizer, text, context, stride, args.batch_size)
        total = total + score
        print(_row(str(path), score))
    print(_row("total", total))


def _default_windows(checkpoint: Path, task: LanguageModeling, context: int | None, stride: int | None):
    """The run's evaluation context (its ``seq_len``) and test stride, unless given."""
    data = torch.load(checkpoint, map_location="cpu", weights_only=True).get(
        "datamodule_hyper_parameters", {}
    )
    run_context = data.get("seq_len") or task.config.max_seq_len
    if stride is None:
        run_stride = data.get("test_stride") if context in (None, run_context) else None
        stride = run_stride or max((context or run_context) // 2, 1)
    return context or run_context, stride


def _row(name: str, score: Score) -> str:
    name = name if len(name) <= 48 else "…" + name[-47:]
    return (f"{name:<48} {score.targets:>9} {score.bytes:>10} {score.nll_per_token:>8.4f} "
            f"{score.perplexity:>10.4f} {score.bits_per_byte:>7.4f}")  # fmt: skip

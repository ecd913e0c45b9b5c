"""Scoring documents with a text model: nats per token, perplexity and bits per byte, over sliding windows."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from multimodal.data.text_windows import DocumentWindows, evaluation_loader, token_byte_lengths
from multimodal.tokenizers.text import TextTokenizer

IGNORE_INDEX = -100


"""Target id the losses skip (``F.cross_entropy``'s default); never a real token id."""


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


def window_sums(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """Summed NLL (nats), scored targets and their UTF-8 bytes of one batch of windows, float64 ``(3,)``.

    ``batch`` comes from :func:`~multimodal.data.text_windows.evaluation_loader`; ``model`` has
    ``loss(tokens, targets, ignore_index=..., reduction=...)`` (:class:`~multimodal.models.CausalLM`).
    """
    tokens = batch["tokens"]
    targets = tokens[:, 1:].masked_fill(~batch["scored"], IGNORE_INDEX)
    nll = model.loss(tokens[:, :-1], targets, ignore_index=IGNORE_INDEX, reduction="sum")
    count = (targets != IGNORE_INDEX).sum()
    return torch.stack([nll.double(), count.double(), batch["bytes"].sum().double()])


@torch.inference_mode()
def score_windows(model: nn.Module, windows: DocumentWindows, batch_size: int = 8) -> Score:
    """Totals of ``model`` over evaluation windows, with the code validation and ``multimodal test`` run."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    for batch in evaluation_loader(windows, batch_size):
        sums += window_sums(model, {name: value.to(device) for name, value in batch.items()})
    model.train(was_training)
    nll, targets, byte_count = sums.tolist()
    return Score(nll, int(targets), int(byte_count))


def score_text(
    model: nn.Module,
    tokenizer: TextTokenizer,
    text: str,
    context: int,
    stride: int,
    batch_size: int = 8,
) -> Score:
    """Scores one document (every token, plus nothing else) with sliding windows; see ``docs/text.md``."""
    windows = DocumentWindows([np.asarray(tokenizer.encode(text))], tokenizer.eos_id,
                              token_byte_lengths(tokenizer), context, stride)  # fmt: skip
    return score_windows(model, windows, batch_size)

"""Scoring MIDI with a model: nats per event, per note and per second of music, windowed as validation does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from multimodal.data.music import MidiCorpus, MidiPieceWindows
from multimodal.tokenizers.midi import MidiTokenizer


@dataclass
class MusicScore:
    """Summed negative log-likelihood of some music and the units it is divided by."""

    nll: float  # nats
    events: int  # scored tokens (every event of each piece and its EOS)
    notes: int  # notes of the pieces, before tokenization
    seconds: float  # summed lengths of the pieces

    @property
    def per_event(self) -> float:
        """Nats per event (comparable only between models of one vocabulary)."""
        return self.nll / max(self.events, 1)

    @property
    def per_note(self) -> float:
        """Nats per note: comparable across vocabularies."""
        return self.nll / max(self.notes, 1)

    @property
    def per_second(self) -> float:
        """Nats per second of music: comparable across vocabularies."""
        return self.nll / max(self.seconds, 1e-9)

    def __add__(self, other: MusicScore) -> MusicScore:
        return MusicScore(self.nll + other.nll, self.events + other.events, self.notes + other.notes,
                          self.seconds + other.seconds)  # fmt: skip


@torch.inference_mode()
def score_music(model: nn.Module, tokenizer: MidiTokenizer, notes: np.ndarray, seq_len: int, batch_size: int = 8) -> MusicScore:
    """Scores one piece ``(num_notes, 4)`` as validation does: ``[BOS] + events + [EOS]`` in windows of
    ``seq_len`` that predict every token once (:class:`~multimodal.data.music.MidiPieceWindows`)."""
    if seq_len < 1 or batch_size < 1:
        raise ValueError(f"seq_len and batch_size must be >= 1, got seq_len={seq_len}, batch_size={batch_size}")
    windows = MidiPieceWindows(MidiCorpus(["piece"], [notes]), tokenizer, seq_len)
    device = next(model.parameters()).device
    nll = 0.0
    was_training = model.training
    model.eval()
    for start in range(0, len(windows), batch_size):
        batch = torch.stack([windows[i] for i in range(start, min(start + batch_size, len(windows)))]).to(device)
        targets = batch[:, 1:].masked_fill(batch[:, 1:] == tokenizer.pad_id, -100)
        nll += float(model.loss(batch[:, :-1], targets, ignore_index=-100, reduction="sum"))
    model.train(was_training)
    return MusicScore(nll, windows.num_targets, windows.num_notes, windows.seconds)


@torch.inference_mode()
def token_nll(
    model: nn.Module,
    ids: Any,
    seq_len: int,
    stride: int | None = None,
    rules: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> np.ndarray:
    """The NLL (nats) of each of ``ids[1:]`` given the ids before it, float64 ``(len(ids) - 1,)``.

    ``rules(logits, index)``: float logits ``(n, vocab)`` predicting ``ids[1:][index]`` (``index``: ``(n,)``
    long) → the logits a decoder samples from (e.g. banned ids at ``-inf``); the NLL is taken after them.

    A sequence longer than the model's ``seq_len`` is read in windows of ``seq_len`` moved by ``stride``
    (default ``seq_len // 2``): the first window scores all its ids, each later one only the ids the
    earlier ones did not reach, so every id is scored once with at least ``seq_len - stride`` ids of context
    (the first ``seq_len``: all that came before).
    """
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    stride = stride or max(seq_len // 2, 1)
    if not 1 <= stride <= seq_len:
        raise ValueError(f"stride={stride} must lie in 1..seq_len={seq_len}")
    device = next(model.parameters()).device
    scores = np.full(max(len(ids) - 1, 0), np.nan)
    was_training = model.training
    model.eval()
    start = 0
    while len(ids) > 1:
        window = ids[start : start + seq_len + 1].to(device)
        logits = model(window[None, :-1])[0].float()
        if rules is not None:
            logits = rules(logits, torch.arange(start, start + len(window) - 1))
        nll = torch.nn.functional.cross_entropy(logits, window[1:], reduction="none").double().cpu().numpy()
        first = 0 if start == 0 else seq_len - stride  # the ids earlier windows scored are left as they were
        scores[start + first : start + len(window) - 1] = nll[first:]
        if start + seq_len + 1 >= len(ids):
            break
        start += stride
    model.train(was_training)
    return scores


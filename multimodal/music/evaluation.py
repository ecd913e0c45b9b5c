"""How a model's continuations of real primers compare with the real continuations (sample statistics)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from multimodal.generation.config import SamplingConfig
from multimodal.generation.sample import generate
from multimodal.music.continuation import primer_ids, unconditional_prompt
from multimodal.music.stats import ExcerptStats, excerpt_stats
from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.tokenizers.music_controls import Controls


def evaluate_continuations(
    model: nn.Module,
    tokenizer: MidiTokenizer,
    pieces: list[np.ndarray],
    *,
    primer_seconds: float = 6.0,
    max_new_tokens: int = 512,
    sampling: SamplingConfig | None = None,
    seed: int = 0,
    controls: list[Controls] | None = None,
    **options: Any,
) -> tuple[ExcerptStats, ExcerptStats, list[np.ndarray]]:
    """Continues the first ``primer_seconds`` of each piece and measures both continuations.

    Both sides are measured as the tokenizer sees music (the piece is encoded and decoded first:
    times on its grid, unisons merged), from the same cut:

    - the primer is the notes that begin before ``primer_seconds``, cut there;
    - the model continues it once (KV-cached, stopping at EOS or after ``max_new_tokens`` events);
      the generated continuation is every decoded note that is not a primer note, measured from
      the cut to the end of its last note;
    - the reference is the piece's notes that begin at or after the cut, over the same seconds (or
      to the piece's end).

    See :mod:`multimodal.music.stats` for the statistics.

    Args:
        model: A causal model over ``tokenizer``'s ids.
        tokenizer: Any MIDI tokenizer with ``encode_notes`` / ``decode_notes`` and ``config.time_step``.
        pieces: Note arrays ``(num_notes, 4)`` of held-out pieces.
        primer_seconds: Length of each primer.
        max_new_tokens: Events generated per piece.
        sampling: How tokens are chosen (:class:`~multimodal.generation.config.SamplingConfig`, or its
            fields as keywords in ``options``).
        seed: Seeds piece ``i``'s sampling with ``seed + i``.
        controls: Per piece the controls its primer opens with (a vocabulary with controls; None: unknown).

    Returns:
        The pooled statistics of the generated and of the real continuations, and the generated
        note arrays (primer included).
    """
    sampling = SamplingConfig.of(sampling, **options)
    device = next(model.parameters()).device
    step = tokenizer.config.time_step
    cut_step = round(primer_seconds / step)
    cut = cut_step * step
    generated, reference, samples = ExcerptStats(), ExcerptStats(), []
    for index, notes in enumerate(pieces):
        real = tokenizer.decode_notes(tokenizer.encode_notes(notes))
        before_cut = np.rint(real[:, 1] / step) < cut_step  # onsets on the tokenizer's grid, compared exactly
        primer = primer_ids(real[before_cut], tokenizer, cut, controls[index] if controls else None)
        generator = torch.Generator(device=device).manual_seed(seed + index)
        tokens = generate(
            model, torch.tensor([primer], device=device), max_new_tokens, sampling, eos_id=tokenizer.eos_id,
            generator=generator, unconditional_prompt=unconditional_prompt(tokenizer, primer, sampling),
        )[0]  # fmt: skip
        sample = tokenizer.decode_notes(tokens)
        samples.append(sample)
        continuation = _without(sample, tokenizer.decode_notes(primer))
        end = max(cut, float(continuation[:, 2].max(initial=cut)))
        generated = generated + excerpt_stats(continuation, cut, end, select=False)
        real_end = min(end, float(real[:, 2].max(initial=cut)))
        reference = reference + excerpt_stats(real[~before_cut], cut, max(real_end, cut), select=False)
    return generated, reference, samples


def _without(notes: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """``notes`` minus the notes of ``removed`` (matched by pitch and onset, each used once)."""
    left = {}
    for pitch, onset in np.rint(removed[:, :2] * 1e6).astype(np.int64).tolist():
        left[pitch, onset] = left.get((pitch, onset), 0) + 1
    keep = np.ones(len(notes), dtype=bool)
    for index, (pitch, onset) in enumerate(np.rint(notes[:, :2] * 1e6).astype(np.int64).tolist()):
        if left.get((pitch, onset), 0):
            left[pitch, onset] -= 1
            keep[index] = False
    return notes[keep]


def longest_note(pieces: list[np.ndarray]) -> float:
    """The longest note duration in seconds over ``pieces`` (note arrays)."""
    return max((float((notes[:, 2] - notes[:, 1]).max(initial=0.0)) for notes in pieces), default=0.0)

"""Leaning towards a key: a logit bias on the tonic chord's pitches, and the share of notes it holds.

A model trained with key tokens (:mod:`multimodal.tokenizers.music_controls`) follows the requested key
most of the time; its misses are mostly the relative major or minor — the same scale with another
centre (docs/benchmarks.md). What tells a listener (and a key-finding algorithm) which of the two it
is, is which chord the music leans on. :func:`key_emphasis` makes that explicit: among the pitches,
every pitch of the key's tonic triad (root, third, fifth; every octave, every part) becomes
``e^strength`` times as likely against the others, while the pitches' total probability stays the
model's — so how often a note starts, and the time shifts, durations and the rest, are untouched.
It is two :class:`~multimodal.generation.config.SamplingConfig` fields (``logit_bias`` and its
``logit_bias_group``), so it works wherever sampling does (continuation, harmonize, infill, the serve
page). :func:`tonic_triad_share` measures what it changes: real music of a key already gives its
tonic chord a large share of its notes, the number a biased sample should not overshoot.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from multimodal.tokenizers.midi import NUM_PITCHES
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer
from multimodal.tokenizers.music_controls import KEYS

_TRIAD_STEPS = {"major": (0, 4, 7), "minor": (0, 3, 7)}  # semitones above the tonic


def tonic_triad(key: int) -> frozenset[int]:
    """The pitch classes (C = 0) of the tonic triad of key index ``key`` (:data:`KEYS`: 0-11 major, 12-23 minor)."""
    if not 0 <= key < len(KEYS):
        raise ValueError(f"key index {key} is outside 0..{len(KEYS) - 1}")
    minor, tonic = divmod(key, 12)
    return frozenset((tonic + step) % 12 for step in _TRIAD_STEPS["minor" if minor else "major"])


def key_emphasis(tokenizer: MidiDurationTokenizer, key: int, strength: float) -> dict[str, Any]:
    """Sampling options that lean towards ``key``: ``{"logit_bias": {PITCH id: strength}, "logit_bias_group":
    every PITCH id}`` for the tonic triad's pitches in every part of ``tokenizer``.

    Pass them to :meth:`SamplingConfig.with_options <multimodal.generation.config.SamplingConfig.with_options>`
    (or as keywords of the generation functions); ``strength`` in nats, 0 changes nothing (no options).

    Raises:
        ValueError: A negative or non-finite strength, or a key index outside :data:`KEYS`.
    """
    if not (np.isfinite(strength) and strength >= 0):
        raise ValueError(f"key emphasis must be a finite number >= 0 (nats), got {strength}")
    triad = tonic_triad(key)
    if strength == 0:
        return {}
    pitches = range(tokenizer.pitch_offset, tokenizer.pitch_offset + NUM_PITCHES * getattr(tokenizer.config, "num_parts", 1))
    bias = {token: float(strength) for token in pitches if (token - tokenizer.pitch_offset) % NUM_PITCHES % 12 in triad}
    return {"logit_bias": bias, "logit_bias_group": tuple(pitches)}


def tonic_triad_share(notes: np.ndarray, key: int) -> float:
    """The share of ``notes`` ``(num_notes, 4 or 5)`` (pitch first) whose pitch class is in ``key``'s tonic triad (nan without notes)."""
    if len(notes) == 0:
        return float("nan")
    return float(np.isin(notes[:, 0].astype(int) % 12, sorted(tonic_triad(key))).mean())

"""Where in the given parts each written id stands: the time-aligned read-out of :class:`~multimodal.models.harmonizer.Harmonizer`.

A harmonizer writes some parts (alto, tenor, bass) of a piece whose other parts are given (the
soprano). Both are plain event sequences of :class:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer`
with their own clocks; at each written position the time (steps) says which given note sounds
— the last one begun — and which come before and after it. Those notes' places in the given ids
(their PITCH ids) are what the decoder reads there.
"""

from __future__ import annotations

import numpy as np

__all__ = ["given_alignment", "given_notes_index", "slice_alignment"]


def given_notes_index(tokenizer, given_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The given notes of a plain sequence ``given_ids``: positions of their PITCH ids and their onsets (steps),
    both int64 ``(notes,)``, onsets non-decreasing."""
    given_ids = np.asarray(given_ids, dtype=np.int64)
    pitch = (given_ids >= tokenizer.pitch_offset) & (given_ids < tokenizer.duration_offset)
    positions = np.flatnonzero(pitch)
    return positions, tokenizer.clock(given_ids)[positions]


def given_alignment(clock: np.ndarray, positions: np.ndarray, onsets: np.ndarray, notes_before: int = 1,
                    notes_after: int = 2, far: int = 200) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The given notes each written position reads, and how far the nearest given onsets are.

    Args:
        clock: Time (steps) at each written position, int ``(seq,)`` (the tokenizer's ``clock`` of the
            written ids: the time after each id, where the next id is written).
        positions, onsets: :func:`given_notes_index` of the given ids.
        notes_before, notes_after: Given notes read before and after the sounding one (the last
            with its onset at or before the position's time).
        far: The distance told when there is no such onset.

    Returns:
        ``aligned``: int64 ``(seq, notes_before + 1 + notes_after)``, each note's PITCH position in the
        given ids plus one (0: no note there — before the first or after the last); ``distances``: int64
        ``(seq, 2)``, steps since the sounding note's onset and until the next given onset (``far``
        where there is none).
    """
    clock = np.asarray(clock, dtype=np.int64)
    if len(positions) == 0:
        return (np.zeros((len(clock), notes_before + 1 + notes_after), dtype=np.int64),
                np.full((len(clock), 2), far, dtype=np.int64))  # fmt: skip
    last = len(positions) - 1
    current = np.searchsorted(onsets, clock, side="right") - 1  # -1: no given note has begun yet
    index = current[:, None] + np.arange(-notes_before, notes_after + 1)[None]
    aligned = np.where((index >= 0) & (index <= last), positions[np.clip(index, 0, last)] + 1, 0)
    since = np.where(current >= 0, clock - onsets[np.clip(current, 0, last)], far)
    until = np.where(current < last, onsets[np.clip(current + 1, 0, last)] - clock, far)
    return aligned.astype(np.int64), np.minimum(np.stack([since, until], axis=1), far).astype(np.int64)


def slice_alignment(aligned: np.ndarray, start: int, stop: int) -> np.ndarray:
    """``aligned`` for an encoder that reads only ``given_ids[start:stop]``: indices moved by ``start``, notes
    outside the slice become 0 (no note)."""
    inside = (aligned > start) & (aligned <= stop)
    return np.where(inside, aligned - start, 0)

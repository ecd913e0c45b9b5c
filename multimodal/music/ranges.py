"""The pitch range of each part in the music a model trained on, and the check that a melody to harmonize lies in it.

A model has seen each PITCH id of a part only as often as its training music played that pitch in that part;
outside the part's range (widened by the training's random transposition) the ids were never a target, and a
melody there leaves the model guessing. :func:`part_ranges` records the ranges of a run's training pieces (a
model folder keeps them in its ``config.json``, ``training_data.part_ranges``); :func:`check_melody_range`
refuses a melody outside its part's range in one line, naming the range and, where one exists, the octave
transposition that fits; :func:`transposed` moves music there (``generate --transpose``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

PartRanges = list[tuple[int, int] | None]
"""``[(lowest, highest MIDI pitch) or None (no note), ...]``, one entry per part, from part 0."""


def part_ranges(pieces: Iterable[np.ndarray], num_parts: int, transpose: int = 0) -> PartRanges:
    """The lowest and highest pitch of each of ``num_parts`` parts over ``pieces``, each widened by ``transpose``
    semitones both ways (the training's random transposition) and kept within MIDI's 0..127.

    Args:
        pieces: Note arrays ``(n, 5)`` ``[pitch, start, end, velocity, part]`` (``(n, 4)``: all in part 0).
        num_parts: The vocabulary's parts; a part without notes gets None.
        transpose: The training's largest transposition, in semitones.
    """
    lowest, highest = np.full(num_parts, 128), np.full(num_parts, -1)
    for notes, part in _with_parts(pieces, num_parts):
        np.minimum.at(lowest, part, notes[:, 0].astype(int))
        np.maximum.at(highest, part, notes[:, 0].astype(int))
    return [(max(int(low) - transpose, 0), min(int(high) + transpose, 127)) if high >= 0 else None
            for low, high in zip(lowest, highest, strict=True)]  # fmt: skip


class OutOfRange(ValueError):
    """A melody outside its part's range; ``shift``: the octave transposition (semitones) that fits, None if none."""

    def __init__(self, message: str, shift: int | None) -> None:
        super().__init__(message)
        self.shift = shift


def check_melody_range(melody: np.ndarray, span: tuple[int, int] | None, part_name: str, source: str = "melody") -> None:
    """Raises :class:`OutOfRange` (a ``ValueError``, one line) when a notes array ``(n, 4+)``'s pitches leave
    ``span``, the range of the part it goes in (:func:`part_ranges`; None: the part had no notes in training, which
    is refused too)."""
    low, high = int(melody[:, 0].min()), int(melody[:, 0].max())
    if span is None:
        raise OutOfRange(f"{source}: the model never saw a note in {part_name} in training; choose another part", None)
    if span[0] <= low and high <= span[1]:
        return
    fits = [shift for shift in range(-120, 121, 12) if span[0] <= low + shift and high + shift <= span[1]]
    hint = (f"; transposed by {min(fits, key=abs):+d} semitones it fits" if fits
            else "; it spans more than that range, even transposed by octaves")  # fmt: skip
    raise OutOfRange(f"{source}: its notes go from {low} to {high} (MIDI pitch), outside the range {part_name} had in "
                     f"the model's training music, {span[0]} to {span[1]}{hint}", min(fits, key=abs) if fits else None)  # fmt: skip


def transposed(notes: np.ndarray, semitones: int, source: str = "the music") -> np.ndarray:
    """A copy of a notes array ``(n, 4+)`` with every pitch moved by ``semitones``.

    Raises:
        ValueError: A pitch would leave MIDI's 0..127 (the message names ``source`` and its lowest and highest).
    """
    moved = np.array(notes, dtype=np.float64, copy=True)
    if len(moved) and semitones:
        low, high = int(moved[:, 0].min()), int(moved[:, 0].max())
        if not 0 <= low + semitones <= high + semitones <= 127:
            raise ValueError(f"{source}: its notes go from {low} to {high} (MIDI pitch); moved by {semitones:+d} "
                             "semitones they would leave MIDI's 0 to 127")  # fmt: skip
        moved[:, 0] += semitones
    return moved


def part_chord_sizes(pieces: Iterable[np.ndarray], num_parts: int, time_step: float = 0.01) -> list[int]:
    """The most notes each of ``num_parts`` parts starts at one moment (onsets on a ``time_step`` grid) over
    ``pieces`` (note arrays as :func:`part_ranges` takes them); 0 for a part without notes. A voice of a chorale
    or a tune's melody is 1: it sings one note at a time."""
    sizes = np.zeros(num_parts, dtype=int)
    for notes, part in _with_parts(pieces, num_parts):
        keys = np.stack([part, np.rint(notes[:, 1] / time_step).astype(np.int64)], axis=1)
        groups, counts = np.unique(keys, axis=0, return_counts=True)
        np.maximum.at(sizes, groups[:, 0], counts)
    return sizes.tolist()


def _with_parts(pieces: Iterable[np.ndarray], num_parts: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Each non-empty piece's notes in parts ``0..num_parts-1`` (float64 ``(n, 4+)``) and their parts (int ``(n,)``;
    a 4-column array is all part 0)."""
    for notes in pieces:
        notes = np.asarray(notes, dtype=np.float64)
        part = notes[:, 4].astype(int) if notes.ndim == 2 and notes.shape[1] > 4 else np.zeros(len(notes), dtype=int)
        inside = (part >= 0) & (part < num_parts)
        if inside.any():
            yield notes[inside], part[inside]

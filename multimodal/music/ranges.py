"""The pitch range of each part in the music a model trained on, and the check that a melody to harmonize lies in it.

A model has seen each PITCH id of a part only as often as its training music played that pitch in that part;
outside the part's range (widened by the training's random transposition) the ids were never a target, and a
melody there leaves the model guessing. :func:`part_ranges` records the ranges of a run's training pieces (a
model folder keeps them in its ``config.json``, ``training_data.part_ranges``); :func:`check_melody_range`
refuses a melody outside its part's range in one line, naming the range and, where one exists, the octave
transposition that fits.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    for notes in pieces:
        notes = np.asarray(notes, dtype=np.float64)
        if not len(notes):
            continue
        part = notes[:, 4].astype(int) if notes.shape[1] > 4 else np.zeros(len(notes), dtype=int)
        inside = (part >= 0) & (part < num_parts)
        pitch, part = notes[inside, 0].astype(int), part[inside]
        np.minimum.at(lowest, part, pitch)
        np.maximum.at(highest, part, pitch)
    return [(max(int(low) - transpose, 0), min(int(high) + transpose, 127)) if high >= 0 else None
            for low, high in zip(lowest, highest, strict=True)]  # fmt: skip


def check_melody_range(melody: np.ndarray, span: tuple[int, int] | None, part_name: str, source: str = "melody") -> None:
    """Raises ``ValueError`` (one line) when a notes array ``(n, 4+)``'s pitches leave ``span``, the range of the
    part it goes in (:func:`part_ranges`; None: the part had no notes in training, which is refused too)."""
    low, high = int(melody[:, 0].min()), int(melody[:, 0].max())
    if span is None:
        raise ValueError(f"{source}: the model never saw a note in {part_name} in training; choose another part")
    if span[0] <= low and high <= span[1]:
        return
    fits = [shift for shift in range(-120, 121, 12) if span[0] <= low + shift and high + shift <= span[1]]
    hint = (f"; transposed by {min(fits, key=abs):+d} semitones it fits" if fits
            else "; it spans more than that range, even transposed by octaves")  # fmt: skip
    raise ValueError(f"{source}: its notes go from {low} to {high} (MIDI pitch), outside the range {part_name} had in "
                     f"the model's training music, {span[0]} to {span[1]}{hint}")  # fmt: skip


def part_chord_sizes(pieces: Iterable[np.ndarray], num_parts: int, time_step: float = 0.01) -> list[int]:
    """The most notes each of ``num_parts`` parts starts at one moment (onsets on a ``time_step`` grid) over
    ``pieces`` (note arrays as :func:`part_ranges` takes them); 0 for a part without notes. A voice of a chorale
    or a tune's melody is 1: it sings one note at a time."""
    sizes = np.zeros(num_parts, dtype=int)
    for notes in pieces:
        notes = np.asarray(notes, dtype=np.float64)
        if not len(notes):
            continue
        part = notes[:, 4].astype(int) if notes.shape[1] > 4 else np.zeros(len(notes), dtype=int)
        inside = (part >= 0) & (part < num_parts)
        keys = np.stack([part[inside], np.rint(notes[inside, 1] / time_step).astype(np.int64)], axis=1)
        groups, counts = np.unique(keys, axis=0, return_counts=True)
        np.maximum.at(sizes, groups[:, 0], counts)
    return sizes.tolist()

"""Training windows with given notes: which notes of a piece a model writes and which it is handed ahead.

A model that harmonizes a melody or fills a gap has to *see* the notes it must fit, before they sound:
the soprano's next phrase while it writes the bass, the bars after the gap while it fills the gap.
The tokenizer writes such given notes ahead of time (:meth:`MidiDurationTokenizer.encode_anticipated`);
this module decides, for each training window, which notes of the piece are given. One model then
learns every case the toolkit asks of it (Thickstun et al. 2023 train one model the same way):

- **plain**: nothing given — continuation, and the left-context-only baseline of infilling;
- **given**: a random time ``a``, a random later time ``b`` (or the piece's end) and a random non-empty
  set ``C`` of the piece's parts; the model writes every note before ``a`` and the notes of ``C``
  before ``b``; every other note is given. ``a = 0, b = end`` is harmonization (the parts outside
  ``C`` given whole); ``C`` = every part is infilling (the music from ``b`` on given);
- **part left out**: a random non-empty proper subset of the parts removed and nothing given — what
  the remaining parts sound like alone, the unconditioned baseline of harmonization;
- **gap**: a random span ``[a, b)`` (its length uniform in ``infill_seconds``) and parts ``C`` as above;
  the notes of ``C`` in the span are written *after* the music that follows the span
  (:meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_infilling`: prefix, suffix,
  middle), the other parts' notes in the span given ahead — infilling that knows the bars after the gap.
  With ``infill_reread``, every note of the span's first ``r`` seconds is given too (``r`` uniform in
  that range): the music before the gap read again after the block, as :func:`~multimodal.music.harmonize.infill`
  does with ``read_after`` longer than the span;
- **read ahead**: ``a`` and ``b`` as in the given case, ``C`` a random proper subset of the parts (all of
  them for a piece of one part), the given notes written at their onsets and
  read before them in blocks of the seconds to come
  (:meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_read_ahead`) — harmonization
  that sight-reads the melody and has read its next phrase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class DrawnWindow(NamedTuple):
    """One window's notes: ``written`` and ``given`` rows of the piece (``given`` may be empty), the gap case's
    span ``(a, b)`` in seconds (None in the other cases), and whether the given notes are read ahead in blocks."""

    written: np.ndarray
    given: np.ndarray
    gap: tuple[float, float] | None = None
    read_ahead: bool = False


@dataclass(frozen=True)
class GivenNotesDraw:
    """The shares of training windows that get given notes or lose parts (the rest are plain).

    Attributes:
        given_share: Share of windows with given notes (the *given* case of the module docstring).
        part_drop_share: Share of windows with some parts left out and nothing given.
        from_start: Within the given case, the chance that ``a = 0`` (the written parts start with
            the piece, as in harmonization); otherwise ``a`` is uniform over the piece.
        to_end: Within the given case, the chance that ``b`` is the piece's end; otherwise ``b`` is
            uniform between ``a`` and the end.
        all_parts: Within the given and gap cases, the chance that ``C`` is every part (infilling);
            otherwise ``C`` is a uniformly random non-empty subset of the parts.
        infill_share: Share of windows that fill a gap knowing the music after it (the *gap* case;
            the tokenizer needs ``infill_after_steps``).
        infill_seconds: The shortest and longest gap of the *gap* case, in seconds.
        infill_reread: The shortest and longest time, in seconds, at the start of a gap whose notes are all
            given (read again after the block); ``(0, 0)``: none.
        read_ahead_share: Share of windows whose given notes are read ahead in blocks (the *read ahead*
            case; the tokenizer needs ``infill_after_steps``).
    """

    given_share: float = 0.5
    part_drop_share: float = 0.1
    from_start: float = 0.5
    to_end: float = 0.5
    all_parts: float = 0.3
    infill_share: float = 0.0
    infill_seconds: tuple[float, float] = (1.0, 8.0)
    infill_reread: tuple[float, float] = (0.0, 0.0)
    read_ahead_share: float = 0.0

    def __post_init__(self) -> None:
        for name in ("given_share", "part_drop_share", "from_start", "to_end", "all_parts", "infill_share",
                     "read_ahead_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}={getattr(self, name)} must lie in [0, 1]")
        shares = self.given_share + self.part_drop_share + self.infill_share + self.read_ahead_share
        if shares > 1:
            raise ValueError(f"given_share + part_drop_share + infill_share + read_ahead_share = {shares:g} must be at most 1 "
                             "(the rest of the windows are plain)")  # fmt: skip
        object.__setattr__(self, "infill_seconds", tuple(float(value) for value in self.infill_seconds))
        if len(self.infill_seconds) != 2 or not 0 < self.infill_seconds[0] <= self.infill_seconds[1]:
            raise ValueError(f"infill_seconds={list(self.infill_seconds)}: give [shortest, longest] > 0 seconds")
        object.__setattr__(self, "infill_reread", tuple(float(value) for value in self.infill_reread))
        if len(self.infill_reread) != 2 or not 0 <= self.infill_reread[0] <= self.infill_reread[1]:
            raise ValueError(f"infill_reread={list(self.infill_reread)}: give [shortest, longest] >= 0 seconds")

    def __call__(self, notes: np.ndarray, rng: np.random.Generator) -> DrawnWindow:
        """Splits one piece into the notes a model writes and the notes it is given.

        Args:
            notes: ``(n, 5)`` notes ``[pitch, start_s, end_s, velocity, part]`` (4 columns: one part).
            rng: The window's generator.

        Returns:
            The window's :class:`DrawnWindow`.
        """
        nothing = notes[:0]
        if len(notes) == 0:
            return DrawnWindow(notes, nothing)
        parts = np.unique(notes[:, 4]) if notes.shape[1] > 4 else np.zeros(1)
        case = rng.random()
        if case < self.part_drop_share:
            if len(parts) < 2:
                return DrawnWindow(notes, nothing)
            left_out = _random_subset(parts, rng, proper=True)
            return DrawnWindow(notes[~np.isin(notes[:, 4], left_out)], nothing)
        given_until = self.part_drop_share + self.given_share
        infill_until = given_until + self.infill_share
        if case >= infill_until + self.read_ahead_share:
            return DrawnWindow(notes, nothing)
        end = float(notes[:, 1].max())
        gap, read_ahead = given_until <= case < infill_until, case >= infill_until
        reread = 0.0  # seconds at the gap's start whose notes are all given
        if gap:
            a = float(rng.uniform(0.0, end))
            reread = float(rng.uniform(*self.infill_reread))
            b = a + reread + float(rng.uniform(*self.infill_seconds))
        else:
            a = 0.0 if rng.random() < self.from_start else float(rng.uniform(0.0, end))
            b = np.inf if rng.random() < self.to_end else float(rng.uniform(a, end))
        if read_ahead:  # some parts read ahead, the others written (all parts: nothing to read)
            written_parts = _random_subset(parts, rng, proper=True) if len(parts) > 1 else parts
        else:
            written_parts = parts if rng.random() < self.all_parts else _random_subset(parts, rng, proper=False)
        in_parts = np.isin(notes[:, 4], written_parts) if notes.shape[1] > 4 else np.ones(len(notes), dtype=bool)
        written = (notes[:, 1] < a) | (in_parts & (notes[:, 1] >= a + reread) & (notes[:, 1] < b))
        return DrawnWindow(notes[written], notes[~written], (a, b) if gap else None, read_ahead)


def _random_subset(values: np.ndarray, rng: np.random.Generator, proper: bool) -> np.ndarray:
    """A uniformly random non-empty subset of ``values`` (``proper``: not all of them; needs two or more)."""
    while True:
        chosen = values[rng.random(len(values)) < 0.5]
        if len(chosen) and not (proper and len(chosen) == len(values)):
            return chosen

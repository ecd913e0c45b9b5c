"""Voice leading of music in parts: counting parallel fifths and octaves, and a decoding rule that avoids them.

Both use one definition, music21's ``VoiceLeadingQuartet`` rule read over the texture's onsets: at
two consecutive onsets (of any part) where two parts both sound and both move (in the same or in
opposite directions), the interval between them (mod 12, the lower-numbered part minus the other)
is a fifth at both onsets, or an octave / unison at both. A part that holds its note, or rests at
either onset, makes no parallel.

- :func:`voice_leading` counts them in finished music (the harmonization benchmark's measure);
- :class:`ParallelsRule` follows a decoder token by token and names the PITCH ids that would make
  one at the current onset, so a constrained decoder (:mod:`multimodal.music.constrained`) can mask
  them — the harmony teacher's rule as a constraint, not something the model learned.
"""

from __future__ import annotations

import numpy as np
import torch

from multimodal.tokenizers.midi import NUM_PITCHES

FOUR_PARTS = (0, 1, 2, 3)
"""Soprano, alto, tenor, bass: the parts :func:`voice_leading` reads by default."""

PARALLEL_INTERVALS = (0, 7)
"""Interval classes (semitones mod 12) that may not move in parallel: octave / unison and fifth."""


def sounding(notes: np.ndarray, part: int, times: np.ndarray) -> np.ndarray:
    """The pitch ``part`` sounds at each of ``times`` (the highest if several), -1 where it rests.

    Args:
        notes: ``(n, 5)`` ``[pitch, start, end, velocity, part]``.
        part: The part to read.
        times: ``(t,)`` instants, in the notes' unit.
    """
    voice = notes[notes[:, 4] == part]
    out = np.full(len(times), -1)
    for pitch, start, end in voice[:, :3]:
        hit = (times >= start - 1e-6) & (times < end - 1e-6)
        out[hit] = np.maximum(out[hit], int(pitch))
    return out


def voice_leading(notes: np.ndarray, parts: tuple[int, ...] = FOUR_PARTS,
                  within: tuple[float, float] | None = None) -> dict[str, int]:  # fmt: skip
    """Counts over every pair of ``parts`` and consecutive onsets of ``notes`` ``(n, 5)``; ``within``: only
    the onsets in ``[start, end)`` (and the motions arriving at them), the rest of the music still sounding.

    ``motions``: consecutive onsets where both parts sound and at least one moves (the note pairs);
    ``fifths`` / ``octaves``: motions where both parts move (in the same direction or, antiparallel,
    in opposite ones: music21's ``VoiceLeadingQuartet`` rule) and the interval (mod 12) is a fifth /
    an octave or unison at both onsets; ``slices``: (onset, pair) where both
    sound; ``crossings``: those where the higher part (the lower number) is below the other.
    """
    times = np.unique(np.round(notes[:, 1], 6))
    pitch = {part: sounding(notes, part, times) for part in parts}
    counted = np.ones(len(times), dtype=bool) if within is None else (times >= within[0] - 1e-6) & (times < within[1] - 1e-6)
    counts = dict(motions=0, fifths=0, octaves=0, slices=0, crossings=0)
    for a_index, upper in enumerate(parts):
        for lower in parts[a_index + 1 :]:
            high, low = pitch[upper], pitch[lower]
            both = (high >= 0) & (low >= 0)
            counts["slices"] += int((both & counted).sum())
            counts["crossings"] += int((both & counted & (high < low)).sum())
            for t in range(1, len(times)):
                if not (both[t - 1] and both[t] and counted[t]):
                    continue
                moves = (int(high[t] - high[t - 1]), int(low[t] - low[t - 1]))
                if moves == (0, 0):
                    continue
                counts["motions"] += 1
                if moves[0] == 0 or moves[1] == 0:
                    continue  # parallels need both parts moving (either way: music21 counts contrary fifths too)
                before, after = (high[t - 1] - low[t - 1]) % 12, (high[t] - low[t]) % 12
                counts["fifths"] += int(before == after == 7)
                counts["octaves"] += int(before == after == 0)
    return counts


class ParallelsRule:
    """Follows decoded ids and bans the PITCH ids that would start a parallel fifth or octave now.

    Feed every id the decoder appends, in order (:meth:`add`); before sampling at time ``step``,
    :meth:`banned` gives a boolean mask over the vocabulary. A new note of part ``q`` at the current
    onset is banned when, for some other part ``r`` that sounds at the previous onset and has
    already moved to a new note at this one, ``q`` sounded at the previous onset too, the interval
    between them there was a fifth or an octave (mod 12), and the candidate pitch makes the same
    interval with ``r``'s new note. The pitch ``q`` already sounds is never banned (holding it is
    no motion). Pairs whose second new note is not yet written are checked when it is: every pair
    meets the rule once both are known, whatever the order the vocabulary writes parts in.

    A constrained part also sings one note at a time: while a note of ``q`` sounds (one written at
    this onset included), no other note of ``q`` may start. Otherwise a part could move without a
    new note — the higher of two notes ending, the lower one left sounding — where no pitch choice
    could be checked. So every motion of a constrained part is a new note, and every new note is
    checked: the rule leaves no parallel that :func:`voice_leading` would count between a
    constrained part and any other, at the onsets where the decoder writes.

    Args:
        tokenizer: A duration tokenizer with parts (:class:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer`).
        parts: The parts whose new notes the rule constrains (the parts a decoder writes).
    """

    def __init__(self, tokenizer, parts: list[int]) -> None:
        self.tokenizer = tokenizer
        self.parts = list(parts)
        self.notes: list[list[float]] = []  # [pitch, part, start step, end step (inf until its DURATION)]
        self._pending: int | None = None  # index of the note waiting for its DURATION
        self._durations = list(tokenizer.config.duration_steps)

    def add(self, token: int, step: int) -> None:
        """Takes one id the decoder appended at time ``step`` (grid steps since the start).

        Notes are read as the tokenizer decodes them: a PITCH waits for its DURATION (VELOCITY ids may
        come between); any other id drops it, as decoding drops a PITCH without a length.
        """
        tok = self.tokenizer
        if tok.velocity_offset <= token < tok.pitch_offset:
            return
        is_duration = tok.duration_offset <= token < tok.duration_offset + len(self._durations)
        if self._pending is not None and not is_duration:
            self.notes.pop(self._pending)  # the last note: nothing is appended after a pending PITCH
            self._pending = None
        if tok.pitch_offset <= token < tok.duration_offset:
            part, pitch = divmod(token - tok.pitch_offset, NUM_PITCHES)
            self.notes.append([pitch, part, step, np.inf])
            self._pending = len(self.notes) - 1
        elif is_duration and self._pending is not None:
            self.notes[self._pending][3] = step + self._durations[token - tok.duration_offset]
            self._pending = None

    def banned(self, step: int) -> torch.Tensor:
        """``(vocab_size,)`` bool: the PITCH ids of :attr:`parts` that would make a parallel at ``step``, and
        every PITCH id of a part that already sounds a note there."""
        mask = torch.zeros(self.tokenizer.vocab_size, dtype=torch.bool)
        if not self.notes:
            return mask
        notes = np.asarray(self.notes)
        earlier = notes[notes[:, 2] < step, 2]
        if len(earlier) == 0:
            return mask
        previous = earlier.max()

        def pitch_at(part: int, time: float) -> int:
            hit = notes[(notes[:, 1] == part) & (notes[:, 2] <= time) & (notes[:, 3] > time), 0]
            return int(hit.max()) if len(hit) else -1

        candidates = np.arange(NUM_PITCHES)
        others = sorted({int(part) for part in notes[:, 1]})
        for part in self.parts:
            offset = self.tokenizer.pitch_offset + part * NUM_PITCHES
            if pitch_at(part, step) >= 0:  # one note at a time in a part: nothing else can move it
                mask[offset : offset + NUM_PITCHES] = True
                continue
            before = pitch_at(part, previous)
            if before < 0:
                continue
            ban = np.zeros(NUM_PITCHES, dtype=bool)
            for other in others:
                if other == part:
                    continue
                other_before, other_now = pitch_at(other, previous), pitch_at(other, step)
                if other_before < 0 or other_now < 0 or other_now == other_before:
                    continue
                upper_first = part < other  # intervals read from the lower-numbered (higher) part
                interval = ((before - other_before) if upper_first else (other_before - before)) % 12
                if interval in PARALLEL_INTERVALS:
                    now = (candidates - other_now) if upper_first else (other_now - candidates)
                    ban |= now % 12 == interval
            ban[before] = False
            mask[offset : offset + NUM_PITCHES] = torch.from_numpy(ban)
        return mask

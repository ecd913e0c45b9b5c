"""Note-duration MIDI tokenizer: every note carries its own length, so no note can hang.

The performance events of :mod:`multimodal.tokenizers.midi` end a note with a ``NOTE_OFF`` that a
model has to remember to write, possibly hundreds of events later; a model that forgets holds the
note for the rest of the piece. Here a note is written where it starts, with its length:

- ``TIME_SHIFT_k``: time moves forward by ``k`` steps to the next onset (``k`` = 1..``num_time_shifts``
  of ``time_step`` seconds; longer gaps take several shifts);
- ``VELOCITY_b``: the loudness bin of the following notes, written when it changes;
- ``PITCH_p`` then ``DURATION_d``: a note of MIDI pitch ``p`` lasting ``d``.

This is the time-shift / pitch / duration / velocity layout of MidiTok's TSD, in seconds rather
than beats (MIDI files of performances have no reliable beat), and the (arrival time, duration,
note) triples of the Anticipatory Music Transformer (Thickstun et al. 2023) with relative time.
Durations take one of the ``duration_steps`` values, counted in steps: every step up to 100, then
every 5 to 400, then every 10 to ``max_duration_steps`` (800) — with the default 10 ms step, every
10 ms to 1 s, 50 ms to 4 s, 100 ms to 8 s; a note is rounded to the nearest, longer ones are cut. Notes of one onset come in pitch order.

Ids: ``PAD=0, BOS=1, EOS=2``, then ``num_time_shifts`` TIME_SHIFT, ``num_velocity_bins`` VELOCITY,
128 PITCH and the DURATION ids (3 + 100 + 32 + 128 + 200 = 463 with the defaults).

**Parts.** With ``num_parts = P > 1`` a note also says which part (voice, instrument) plays it:
the PITCH id names part and pitch together, ``PITCH_{128·part + pitch}`` (``P × 128`` PITCH ids),
as the Anticipatory Music Transformer and MuseNet join instrument and pitch. A note costs no extra
token (a separate PART event before each note would add one token per note, about a third more
tokens per second of a four-part chorale), at the price of ``128 (P - 1)`` more ids. Notes of one
onset come in part order, then pitch order; note arrays carry the part as a fifth column
``[pitch, start_s, end_s, velocity, part]`` and :meth:`MidiDurationTokenizer.decode` writes one
MIDI track per part, named and with its General MIDI program (``part_names``, ``part_programs``).
``num_parts = 1`` is the single-part vocabulary above, id for id.

**Controls.** With ``controls = True`` the ids end with STYLE, KEY, METER and DENSITY values, each
with an ``unknown`` id (:mod:`~multimodal.tokenizers.music_controls`); a sequence opens
``BOS STYLE KEY METER DENSITY`` (:meth:`MidiDurationTokenizer.control_ids`) and decoding skips them.

The same rules as the performance tokenizer make notes well defined: unisons on one step merge
(longest, loudest), a re-strike ends the sounding note of that pitch, a note lasts one step at least.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pretty_midi

from multimodal.tokenizers.midi import (
    NUM_PITCHES,
    SPECIAL_TOKENS,
    MidiEvent,
    MidiTokenizer,
    MidiTokenizerConfig,
    _as_id_array,
    _notes_from_steps,
    _resolve_overlaps,
)
from multimodal.tokenizers.music_controls import CONTROL_NAMES, Controls, control_sizes

MAX_PARTS = 16  # a MIDI file's channels
INFILL_EVENTS = ("GAP", "AFTER", "MIDDLE")  # a gap's end, the music after it, back to its start (encode_infilling)


@dataclass(frozen=True)
class MidiDurationTokenizerConfig(MidiTokenizerConfig):
    """Resolution of the note-duration vocabulary.

    Attributes:
        time_step: Seconds per step; onsets and durations are rounded to it.
        num_time_shifts: TIME_SHIFT events; the longest single shift is ``num_time_shifts * time_step``.
        num_velocity_bins: VELOCITY events (MIDI velocities 1..127 in bins of equal width).
        max_duration_steps: Longest duration in steps (longer notes are cut to it).
        num_parts: Parts a note can belong to (1: one merged part).
        part_names: Track names of the parts in decoded MIDI files (default ``Part 1``, ...).
        part_programs: General MIDI programs of the parts in decoded files (default 0, the piano).
        controls: Reserve the STYLE / KEY / METER / DENSITY ids of :mod:`~multimodal.tokenizers.music_controls`.
        anticipation_steps: How far ahead, in steps, a given note is written before its onset
            (:meth:`MidiDurationTokenizer.encode_anticipated`); reserves ``AHEAD_0 … AHEAD_<steps>``.
            0: no given notes in the vocabulary.
        infill_after_steps: How much of the music after a gap, in steps, is written before the gap's own
            notes (:meth:`MidiDurationTokenizer.encode_infilling`); reserves ``GAP``, ``AFTER`` and
            ``MIDDLE``. 0: no such ids.
    """

    max_duration_steps: int = 800
    num_parts: int = 1
    part_names: tuple[str, ...] = ()
    part_programs: tuple[int, ...] = ()
    controls: bool = False
    anticipation_steps: int = 0
    infill_after_steps: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_duration_steps < 1:
            raise ValueError(f"max_duration_steps={self.max_duration_steps} must be at least 1")
        if self.anticipation_steps < 0:
            raise ValueError(f"anticipation_steps={self.anticipation_steps} must be 0 (none) or more")
        if self.infill_after_steps < 0:
            raise ValueError(f"infill_after_steps={self.infill_after_steps} must be 0 (none) or more")
        if not 1 <= self.num_parts <= MAX_PARTS:
            raise ValueError(f"num_parts={self.num_parts} must lie in 1..{MAX_PARTS}")
        object.__setattr__(self, "part_names", tuple(str(name) for name in self.part_names))  # lists from JSON
        object.__setattr__(self, "part_programs", tuple(int(program) for program in self.part_programs))
        for name, values in (("part_names", self.part_names), ("part_programs", self.part_programs)):
            if values and len(values) != self.num_parts:
                raise ValueError(f"{name} has {len(values)} entries; give one per part ({self.num_parts}) or none")
        if any(not 0 <= program <= 127 for program in self.part_programs):
            raise ValueError(f"part_programs={list(self.part_programs)}: General MIDI programs lie in 0..127")

    def part_name(self, part: int) -> str:
        """The track name of part ``part`` (``part_names``, else ``"Part <part + 1>"``)."""
        return self.part_names[part] if self.part_names else f"Part {part + 1}"

    def part_program(self, part: int) -> int:
        """The General MIDI program of part ``part`` (``part_programs``, else 0, the piano)."""
        return self.part_programs[part] if self.part_programs else 0

    @property
    def duration_steps(self) -> np.ndarray:
        """The durations a note can take, in steps: 1..100, then every 5 to 400, then every 10."""
        grid = np.r_[np.arange(1, 101), np.arange(105, 401, 5), np.arange(410, self.max_duration_steps + 1, 10)]
        return grid[grid <= self.max_duration_steps]


class MidiDurationTokenizer(MidiTokenizer):
    """Notes as ``[TIME_SHIFT…] [VELOCITY] PITCH DURATION``; the :class:`MidiTokenizer` interface.

    Args:
        config: Time step, shifts, velocity bins and the longest duration.
    """

    config_class = MidiDurationTokenizerConfig

    def __init__(self, config: MidiDurationTokenizerConfig | None = None) -> None:
        super().__init__(config or MidiDurationTokenizerConfig())
        self._durations = self.config.duration_steps
        self.time_shift_offset = len(SPECIAL_TOKENS)
        self.velocity_offset = self.time_shift_offset + self.config.num_time_shifts
        self.pitch_offset = self.velocity_offset + self.config.num_velocity_bins
        self.duration_offset = self.pitch_offset + NUM_PITCHES * self.config.num_parts
        self.control_offset = self.duration_offset + len(self._durations)
        self._control_offsets: dict[str, int] = {}
        offset = self.control_offset
        if self.config.controls:
            for name, size in control_sizes().items():
                self._control_offsets[name.upper()] = offset
                offset += size
        self.ahead_offset = offset  # AHEAD_0 … AHEAD_<anticipation_steps> follow the controls
        # GAP, AFTER, MIDDLE follow the AHEAD ids (a vocabulary without them keeps every id of one with them)
        self.infill_offset = offset + (self.config.anticipation_steps + 1 if self.config.anticipation_steps else 0)
        # Ids of the performance layout do not exist here.
        self.note_on_offset = self.note_off_offset = None

    @property
    def vocab_size(self) -> int:
        """3 specials + time shifts + velocity bins + 128 pitches per part + durations (+ controls, + AHEAD,
        + GAP AFTER MIDDLE)."""
        return self.infill_offset + (len(INFILL_EVENTS) if self.config.infill_after_steps else 0)

    def infill_id(self, name: str) -> int:
        """The id of ``GAP``, ``AFTER`` or ``MIDDLE`` (:meth:`encode_infilling`).

        Raises:
            ValueError: The vocabulary has no infilling ids (``infill_after_steps`` = 0).
        """
        if not self.config.infill_after_steps:
            raise ValueError("this tokenizer has no GAP / AFTER / MIDDLE ids (infill_after_steps = 0)")
        return self.infill_offset + INFILL_EVENTS.index(name)

    def _is_control(self, token: int) -> bool:
        """Whether ``token`` is a STYLE / KEY / METER / DENSITY id."""
        return self.control_offset <= token < self.ahead_offset

    def control_ids(self, controls: Controls | None = None) -> list[int]:
        """The ids ``STYLE KEY METER DENSITY`` that follow BOS (``None`` or a ``None`` field: unknown).

        Raises:
            ValueError: This vocabulary has no controls.
        """
        if not self.config.controls:
            raise ValueError("this tokenizer has no control tokens (a model trained with controls: true has)")
        values = (controls or Controls()).values()
        return [self.event_to_token(name.upper(), value) for name, value in zip(CONTROL_NAMES, values, strict=True)]

    def without_controls(self, ids: Any) -> list[int]:
        """``ids`` with every control id replaced by its kind's ``unknown`` id (same length).

        The unconditional prompt of classifier-free guidance (:mod:`multimodal.generation.guidance`).

        Raises:
            ValueError: This vocabulary has no controls.
        """
        unknown = self.control_ids(None)  # raises without controls
        kinds = [self.token_to_event(token).kind for token in unknown]
        ids = _as_id_array(ids).tolist()
        return [unknown[kinds.index(self.token_to_event(token).kind)] if self._is_control(token) else token
                for token in ids]  # fmt: skip

    def controls_in(self, ids: Any) -> Controls:
        """The controls written in a sequence (the first of each kind; unknown where none is)."""
        found: dict[str, int | None] = {}
        for token in _as_id_array(ids).tolist():
            if self._is_control(token):
                event = self.token_to_event(token)
                found.setdefault(event.kind.lower(), event.value)
        return Controls(**{name: found.get(name) for name in CONTROL_NAMES})

    def token_to_event(self, token: int) -> MidiEvent:
        """The event an id stands for: ``MidiEvent("PITCH", 60)``, ``MidiEvent("DURATION", 50)`` (steps).

        With parts a PITCH value is ``128 * part + pitch``.
        """
        token = int(token)
        if not 0 <= token < self.vocab_size:
            raise ValueError(f"token {token} is outside this tokenizer's vocabulary [0, {self.vocab_size})")
        if token < self.time_shift_offset:
            return MidiEvent(SPECIAL_TOKENS[token], None)
        if token < self.velocity_offset:
            return MidiEvent("TIME_SHIFT", token - self.time_shift_offset + 1)
        if token < self.pitch_offset:
            return MidiEvent("VELOCITY", token - self.velocity_offset)
        if token < self.duration_offset:
            return MidiEvent("PITCH", token - self.pitch_offset)
        if token < self.control_offset:
            return MidiEvent("DURATION", int(self._durations[token - self.duration_offset]))
        if token >= self.infill_offset:
            return MidiEvent(INFILL_EVENTS[token - self.infill_offset], None)
        if token >= self.ahead_offset:
            return MidiEvent("AHEAD", token - self.ahead_offset)
        for name, size in control_sizes().items():  # the value's index; None: unknown
            offset = self._control_offsets[name.upper()]
            if token < offset + size:
                return MidiEvent(name.upper(), None if token == offset + size - 1 else token - offset)
        raise AssertionError("unreachable: token checked against vocab_size")

    def event_to_token(self, kind: str, value: int | None = None) -> int:
        """Inverse of :meth:`token_to_event`; a DURATION value must be one of ``config.duration_steps``."""
        if kind in SPECIAL_TOKENS:
            return SPECIAL_TOKENS.index(kind)
        if kind in INFILL_EVENTS:
            return self.infill_id(kind)
        if kind in self._control_offsets:
            size = control_sizes()[kind.lower()]
            if value is not None and not 0 <= value < size - 1:
                raise ValueError(f"{kind} value {value} must lie in 0..{size - 2} (None: unknown)")
            return self._control_offsets[kind] + (size - 1 if value is None else int(value))
        if kind == "DURATION":
            index = np.flatnonzero(self._durations == value)
            if value is None or len(index) == 0:
                raise ValueError(f"DURATION {value} is not one of this tokenizer's durations (config.duration_steps)")
            return self.duration_offset + int(index[0])
        ranges = {
            "TIME_SHIFT": (self.time_shift_offset - 1, 1, self.config.num_time_shifts),
            "VELOCITY": (self.velocity_offset, 0, self.config.num_velocity_bins - 1),
            "PITCH": (self.pitch_offset, 0, NUM_PITCHES * self.config.num_parts - 1),
        }
        if self.config.anticipation_steps:
            ranges["AHEAD"] = (self.ahead_offset, 0, self.config.anticipation_steps)
        if kind not in ranges:
            raise ValueError(f"unknown event kind {kind!r}; use one of {(*SPECIAL_TOKENS, *ranges, 'DURATION')}")
        offset, low, high = ranges[kind]
        if value is None or not low <= value <= high:
            raise ValueError(f"{kind} value {value} must lie in {low}..{high}")
        return offset + int(value)

    def encode_notes_array(self, notes: np.ndarray) -> np.ndarray:
        """Encodes a note array (vectorised); returns int64 ids ``(num_ids,)``.

        Args:
            notes: ``(num_notes, 4)`` = ``[pitch, start_s, end_s, velocity]``, every note in part 0, or
                ``(num_notes, 5)`` with the part (0..``num_parts - 1``) last; one part merges the parts.
        """
        pitch, onset, offset, velocity_bin = self._grid_notes(notes)
        order = np.lexsort((pitch, onset))
        ids, _ = self._write_rows(onset[order], pitch[order], offset[order] - onset[order], velocity_bin[order])
        return ids

    def encode_anticipated(self, notes: np.ndarray, given: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Encodes ``notes`` to be modelled with ``given`` notes written ahead of them; returns int64 ids
        ``(num_ids,)`` and a bool mask ``(num_ids,)`` of the ids that spell given notes.

        The anticipation of Thickstun et al. (2023) in relative time: the plain sequence of all the notes
        (:meth:`encode_notes_array` of both sets), and each given note with onset ``t`` (in steps) written
        once more at the first point at or after ``t - anticipation_steps`` where that sequence's time
        arrives — the start, an onset, the end of a longest shift inside a long gap (:meth:`ahead_moments`) — as ``AHEAD_k [VELOCITY] PITCH DURATION`` with
        ``k`` the steps from there to its onset: between 0 and ``anticipation_steps`` ahead, and the time
        shifts are the plain sequence's, id for id. Notes ahead come first at their moment.
        A given note thus comes twice: ahead, so a model can plan for it, and at its onset, where a model
        trained on plain music hears what sounds now without adding up time shifts. Notes ahead keep a
        loudness of their own (a VELOCITY after an AHEAD sets theirs), so the ids without the notes
        ahead are the plain sequence of all the notes. A causal model thus sees each given note up to
        ``anticipation_steps`` before it sounds: a melody's next phrase while it writes the
        bass, the music after a gap while it fills the gap. Decoding places every note at its onset
        (:meth:`decode_notes`); ``notes`` and ``given`` should not hold the same pitch of a part at
        overlapping times (the decoded notes follow the unison and re-strike rules).

        Args:
            notes: ``(n, 4 or 5)`` notes as :meth:`encode_notes_array` takes them: what a model writes.
            given: ``(m, 4 or 5)`` notes it is given (may be empty).

        Raises:
            ValueError: The vocabulary has no AHEAD ids (``anticipation_steps`` = 0).
        """
        if not self.config.anticipation_steps:
            raise ValueError("this tokenizer has no AHEAD ids (a model trained with anticipation_steps > 0 has)")
        return self._write_rows(*self._anticipated_rows(self._grid_notes(notes), self._grid_notes(given)))

    def encode_infilling(self, notes: np.ndarray, given: np.ndarray, start: float, end: float
                         ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Encodes a gap ``[start, end)`` seconds to be filled knowing the music after it; returns int64 ids
        ``(num_ids,)`` and a bool mask ``(num_ids,)`` of the ids that are given (the block and given notes).

        Prefix, suffix, middle, as code models fill in the middle (Bavarian et al. 2022), in this
        vocabulary's relative time: the plain sequence of every note before ``start``; then ``GAP``, the
        time shifts from there to ``end``, ``AFTER`` and the given notes starting in ``[end, end +
        infill_after_steps)`` (their shifts counted from ``end``); then ``MIDDLE``, which takes time back to
        where ``GAP`` found it, and the notes starting in the gap — ``notes`` (what a model writes) and, if
        any, ``given`` notes of other parts there, written ahead as :meth:`encode_anticipated` writes them
        when the vocabulary has AHEAD ids. The sequence stops with the gap's last note; later notes are
        left out. :meth:`decode_notes` reads it back (``MIDDLE`` rewinds the clock). Loudness carries
        across the parts, so the middle's first note repeats its VELOCITY only where it changed.

        Args:
            notes: ``(n, 4 or 5)`` the notes before the gap and the notes a model writes in it.
            given: ``(m, 4 or 5)`` the notes after the gap and other parts' notes in it (may be empty).
            start, end: The gap, in seconds (``start < end``).

        Raises:
            ValueError: No infilling ids (``infill_after_steps`` = 0), or ``end`` not after ``start``.
        """
        first, last = round(start / self.config.time_step), round(end / self.config.time_step)
        if not first < last:
            raise ValueError(f"the gap {start:g} s to {end:g} s is empty on the {self.config.time_step:g} s grid")
        written, told = self._grid_notes(notes), self._grid_notes(given)
        before = tuple(np.r_[w[written[1] < first], t[told[1] < first]] for w, t in zip(written, told, strict=True))
        order = np.lexsort((before[0], before[1]))
        before = tuple(column[order] for column in before)
        in_gap = lambda columns: tuple(c[(columns[1] >= first) & (columns[1] < last)] for c in columns)  # noqa: E731
        now = int(before[1][-1]) if len(before[0]) else 0  # the time GAP finds and MIDDLE returns to
        prefix, _ = self._write_rows(before[1], before[0], before[2] - before[1], before[3])
        block, loudness = self.infill_block(given, now, end, int(before[3][-1]) if len(before[0]) else None)
        gap_written, gap_given = in_gap(written), in_gap(told)
        if self.config.anticipation_steps:
            rows = self._anticipated_rows(gap_written, gap_given, origin=now)
        else:  # no AHEAD ids: the other parts' notes only at their onsets
            columns = tuple(np.r_[w, t] for w, t in zip(gap_written, gap_given, strict=True))
            order = np.lexsort((columns[0], columns[1]))
            is_given = np.r_[np.zeros(len(gap_written[0]), dtype=bool), np.ones(len(gap_given[0]), dtype=bool)][order]
            rows = (columns[1][order] - now, columns[0][order], (columns[2] - columns[1])[order], columns[3][order],
                    None, is_given)  # fmt: skip
        body, body_given = self._write_rows(*rows, loudness=(None, loudness))
        ids = np.r_[prefix, block, body].astype(np.int64)
        mask = np.zeros(len(ids), dtype=bool)
        mask[len(prefix) : len(prefix) + len(block)] = True
        mask[len(ids) - len(body) :] = body_given
        return ids, mask

    def infill_block(self, after: np.ndarray, now: int, end: float, loudness: int | None = None
                     ) -> tuple[np.ndarray, int | None]:  # fmt: skip
        """The block :meth:`encode_infilling` writes before a gap's notes, ``GAP [shifts from now to end] AFTER
        [the notes of after starting in [end, end + infill_after_steps)] MIDDLE``, int64 ``(k,)``, and the
        velocity bin in force after it.

        Args:
            after: ``(m, 4 or 5)`` notes; those starting in the block's seconds are written.
            now: The step where time is when ``GAP`` comes (the last onset before the gap).
            end: The gap's end, in seconds.
            loudness: The velocity bin in force before the block (None: unknown, a VELOCITY is written).
        """
        return self._block(self._grid_notes(after), now, round(end / self.config.time_step), loudness)

    def _block(self, told: tuple[np.ndarray, ...], now: int, last: int, loudness: int | None
               ) -> tuple[np.ndarray, int | None]:  # fmt: skip
        """:meth:`infill_block` for grid notes ``told`` (``_grid_notes``' columns) and the block's start ``last`` in steps."""
        chosen = (told[1] >= last) & (told[1] < last + self.config.infill_after_steps)
        pitch, onset, offset, velocity_bin = (column[chosen] for column in told)
        order = np.lexsort((pitch, onset))
        suffix, _ = self._write_rows(onset[order] - last, pitch[order], (offset - onset)[order], velocity_bin[order],
                                     loudness=(None, loudness))  # fmt: skip
        gap, after_id, middle = (self.infill_id(name) for name in INFILL_EVENTS)
        ids = np.r_[gap, self.shift_ids(last - now), after_id, suffix, middle].astype(np.int64)
        return ids, int(velocity_bin[order][-1]) if len(pitch) else loudness

    def encode_read_ahead(self, notes: np.ndarray, given: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Encodes ``notes`` to be modelled with ``given`` notes read ahead in blocks; returns int64 ids
        ``(num_ids,)`` and a bool mask ``(num_ids,)`` of the given ids (the blocks and the given notes).

        The plain sequence of all the notes (:meth:`encode_notes_array` of both sets), with a block ``GAP
        AFTER [the given notes starting in the next infill_after_steps] MIDDLE`` — :meth:`infill_block` of an
        empty gap — at the start, and again each time the sequence's time first arrives
        (:meth:`arrivals`) ``infill_after_steps`` or more after the last block. A melody's next seconds are
        read as a gap's music after it is, in a block, where the plain sequence's clock and rows stay as
        they are: a causal model sight-reads each given note at its onset and has read it up to
        ``infill_after_steps`` before. :meth:`decode_notes` reads a block's note and the same note at its
        onset as one note (a unison merges).

        Args:
            notes: ``(n, 4 or 5)`` notes as :meth:`encode_notes_array` takes them: what a model writes.
            given: ``(m, 4 or 5)`` notes it is given (may be empty).

        Raises:
            ValueError: The vocabulary has no infilling ids (``infill_after_steps`` = 0).
        """
        if not self.config.infill_after_steps:
            raise ValueError("this tokenizer has no GAP / AFTER / MIDDLE ids (infill_after_steps = 0)")
        written, told = self._grid_notes(notes), self._grid_notes(given)
        columns = tuple(np.r_[w, t] for w, t in zip(written, told, strict=True))
        order = np.lexsort((columns[0], columns[1]))
        pitch, onset, offset, velocity_bin = (column[order] for column in columns)
        is_given = np.r_[np.zeros(len(written[0]), dtype=bool), np.ones(len(told[0]), dtype=bool)][order]
        arrivals, moments = self.arrivals(onset), [0]
        while (later := arrivals[arrivals >= moments[-1] + self.config.infill_after_steps]).size:
            moments.append(int(later[0]))
        pieces, masks, time, loudness = [], [], 0, None
        for begin, stop in zip(moments, [*moments[1:], None], strict=True):
            block, loudness = self._block(told, begin, begin, loudness)
            rows = (onset >= begin) & (onset < (np.iinfo(np.int64).max if stop is None else stop))
            body, body_given = self._write_rows(onset[rows] - begin, pitch[rows], (offset - onset)[rows],
                                                velocity_bin[rows], is_given=is_given[rows], loudness=(None, loudness))  # fmt: skip
            shifts = self.shift_ids(begin - time)
            pieces += [shifts, block, body]
            masks += [np.zeros(len(shifts), dtype=bool), np.ones(len(block), dtype=bool), body_given]
            time = int(onset[rows][-1]) if rows.any() else begin
            loudness = int(velocity_bin[rows][-1]) if rows.any() else loudness
        return np.concatenate(pieces).astype(np.int64), np.concatenate(masks)

    def clock(self, ids: Any) -> np.ndarray:
        """The time, in steps, after each of ``ids`` as :meth:`decode_notes` reads them, int64 ``(len(ids),)``:
        TIME_SHIFTs add up, ``MIDDLE`` goes back to the time of the last ``GAP``."""
        ids = _as_id_array(ids)
        is_shift = (ids >= self.time_shift_offset) & (ids < self.velocity_offset)
        moved = np.where(is_shift, ids - self.time_shift_offset + 1, 0)
        if not self.config.infill_after_steps:
            return np.cumsum(moved)
        gap, middle = self.infill_offset, self.infill_offset + 2
        time = np.cumsum(moved)
        for position in np.flatnonzero(ids == middle):  # rare (one per gap): undo the shifts since the last GAP
            opened = np.flatnonzero(ids[:position] == gap)
            if len(opened):
                time[position:] -= time[position] - (time[opened[-1]])
        return time

    def shift_ids(self, steps: int) -> np.ndarray:
        """TIME_SHIFT ids moving time on by ``steps`` (the longest shifts first), int64 ``(k,)``."""
        full, rest = divmod(max(int(steps), 0), self.config.num_time_shifts)
        return np.array([self.velocity_offset - 1] * full + ([self.time_shift_offset + rest - 1] if rest else []),
                        dtype=np.int64)  # fmt: skip

    def _anticipated_rows(self, event: tuple[np.ndarray, ...], given_: tuple[np.ndarray, ...], origin: int = 0
                          ) -> tuple[np.ndarray, ...]:  # fmt: skip
        """The rows of :meth:`encode_anticipated` for grid notes ``event`` and ``given_`` (``_grid_notes``'
        columns), in writing order, their stops counted from step ``origin`` (where time is when they begin):
        the arguments of :meth:`_write_rows`."""
        written, told = len(event[0]), len(given_[0])
        given_stop = self.ahead_moments(np.r_[event[1], given_[1]] - origin, given_[1] - origin)
        # rows: every note at its onset (the plain sequence of both sets), and each given note once more ahead
        stop = np.r_[event[1] - origin, given_[1] - origin, given_stop]
        pitch = np.r_[event[0], given_[0], given_[0]]
        is_ahead = np.r_[np.zeros(written + told, dtype=bool), np.ones(told, dtype=bool)]
        onset = np.r_[event[1], given_[1], given_[1]]
        order = np.lexsort((onset, pitch, ~is_ahead, stop))  # at one moment: notes ahead first, then by part and pitch
        steps_ahead = np.r_[np.full(written + told, -1), given_[1] - origin - given_stop]
        is_given = np.r_[np.zeros(written, dtype=bool), np.ones(2 * told, dtype=bool)]
        length = np.r_[event[2] - event[1], given_[2] - given_[1], given_[2] - given_[1]]
        return (stop[order], pitch[order], length[order], np.r_[event[3], given_[3], given_[3]][order],
                steps_ahead[order], is_given[order])  # fmt: skip

    def ahead_moments(self, onsets: np.ndarray, given_onsets: np.ndarray) -> np.ndarray:
        """Steps ``(m,)`` at which given notes with onsets ``given_onsets`` ``(m,)`` are written ahead.

        The first point at or after ``onset - anticipation_steps`` where the plain sequence of notes with
        ``onsets`` ``(n,)`` (every note's, in steps) arrives after a TIME_SHIFT (:meth:`arrivals`). A decoder
        that announces given notes each time a shift ends writes them exactly there.
        """
        arrivals = self.arrivals(onsets)
        return arrivals[np.searchsorted(arrivals, given_onsets - self.config.anticipation_steps, side="left")]

    def arrivals(self, onsets: np.ndarray) -> np.ndarray:
        """The steps, sorted int64 ``(k,)``, where the plain sequence of notes with ``onsets`` ``(n,)`` (in steps)
        arrives after a TIME_SHIFT: the start, every onset, and inside a gap longer than the longest shift the
        end of each of its shifts (:meth:`shift_ids` writes the longest first)."""
        longest = self.config.num_time_shifts
        moments = np.unique(np.r_[0, onsets]).astype(np.int64)
        inside = (np.diff(moments) - 1) // longest  # shifts of a gap that end before its next onset
        within = np.arange(inside.sum()) - np.repeat(np.cumsum(inside) - inside, inside) + 1
        return np.sort(np.r_[moments, np.repeat(moments[:-1], inside) + longest * within])

    def ahead_rows(self, given: np.ndarray) -> list[tuple[int, int, int, int]]:
        """The given notes ``(m, 4 or 5)`` on the grid as ``(onset step, PITCH id, DURATION id, VELOCITY id)``, by
        onset, then part and pitch: what a decoder needs to write each one ``AHEAD_k [VELOCITY] PITCH DURATION``."""
        pitch, onset, offset, velocity_bin = self._grid_notes(given)
        order = np.lexsort((pitch, onset))
        columns = (onset, self.pitch_offset + pitch, self.duration_offset + self._duration_index(offset - onset),
                   self.velocity_offset + velocity_bin)  # fmt: skip
        return [tuple(int(column[i]) for column in columns) for i in order]

    def _grid_notes(self, notes: np.ndarray) -> tuple[np.ndarray, ...]:
        """Notes on the step grid, overlaps resolved: ``pitch`` (``128 * part + pitch``), ``onset``,
        ``offset``, ``velocity_bin``, each int64 ``(n,)``."""
        if len(notes) == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty, empty
        pitch, onset, offset, velocity_bin = self._quantise(notes)
        if len(pitch) == 0:
            return pitch, onset, offset, velocity_bin
        return _resolve_overlaps(pitch, onset, offset, velocity_bin)

    def _write_rows(self, stop: np.ndarray, pitch: np.ndarray, length: np.ndarray, velocity_bin: np.ndarray,
                    steps_ahead: np.ndarray | None = None, is_given: np.ndarray | None = None,
                    loudness: tuple[int | None, int | None] = (None, None)) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The ids of notes in writing order, each ``[shifts to its stop] [AHEAD] [VELOCITY] PITCH DURATION``.

        Args:
            stop: ``(n,)`` non-decreasing steps at which each note is written.
            pitch: ``(n,)`` PITCH values; ``length``: ``(n,)`` durations in steps; ``velocity_bin``: ``(n,)``.
            steps_ahead: ``(n,)`` the AHEAD value of a note written ahead, -1 for the others; None: none.
            is_given: ``(n,)`` the rows of given notes (ahead or at their onset); None: none.
            loudness: The velocity bins in force before the first row, of notes ahead and of the others
                (None: a VELOCITY opens that stream).

        Returns:
            int64 ids ``(num_ids,)`` and the bool mask ``(num_ids,)`` of the given rows' ids, time shifts
            excluded.
        """
        if len(pitch) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=bool)
        given = np.zeros(len(pitch), dtype=bool) if steps_ahead is None else steps_ahead >= 0  # rows with AHEAD
        needs_velocity = np.empty(len(pitch), dtype=bool)
        for stream, before in zip((np.flatnonzero(given), np.flatnonzero(~given)), loudness, strict=True):
            # notes ahead, notes at onset: a loudness each, written where it changes
            bins = velocity_bin[stream]
            opens = before is None or (len(bins) > 0 and int(bins[0]) != before)
            needs_velocity[stream] = np.r_[opens, bins[1:] != bins[:-1]][: len(bins)]
        max_shift = self.config.num_time_shifts
        num_full, remainder = np.divmod(np.diff(stop, prepend=0), max_shift)
        counts = num_full + (remainder > 0) + given + needs_velocity + 2
        ends = np.cumsum(counts)
        begins = ends - counts
        ids = np.empty(ends[-1], dtype=np.int64)
        ids[ends - 1] = self.duration_offset + self._duration_index(length)
        ids[ends - 2] = self.pitch_offset + pitch
        ids[ends[needs_velocity] - 3] = self.velocity_offset + velocity_bin[needs_velocity]
        has_remainder = remainder > 0
        ids[(begins + num_full)[has_remainder]] = self.time_shift_offset + remainder[has_remainder] - 1
        full_rows = np.repeat(np.arange(len(stop)), num_full)
        within_row = np.arange(len(full_rows)) - np.repeat(np.cumsum(num_full) - num_full, num_full)
        ids[begins[full_rows] + within_row] = self.time_shift_offset + max_shift - 1
        if given.any():
            ids[(ends - 3 - needs_velocity)[given]] = self.ahead_offset + steps_ahead[given]
        mask = np.zeros(len(ids), dtype=bool)
        if is_given is not None and is_given.any():  # from the row's AHEAD, VELOCITY or PITCH to its DURATION
            first = (ends - 2 - needs_velocity - given)[is_given]
            edges = np.zeros(len(ids) + 1, dtype=np.int64)
            np.add.at(edges, first, 1)
            np.add.at(edges, ends[is_given], -1)
            mask = np.cumsum(edges[:-1]) > 0
        return ids, mask

    def _quantise(self, notes: np.ndarray) -> tuple[np.ndarray, ...]:
        """As the single-part rules, the PITCH index being ``128 * part + pitch`` (so unisons merge within a part)."""
        pitch, onset, offset, velocity_bin = super()._quantise(notes)
        notes = np.asarray(notes, dtype=np.float64)
        if self.config.num_parts == 1 or notes.ndim != 2 or notes.shape[1] != 5 or not len(pitch):
            return pitch, onset, offset, velocity_bin
        part = np.rint(notes[:, 4]).astype(np.int64)
        if part.min() < 0 or part.max() >= self.config.num_parts:
            raise ValueError(f"parts must lie in 0..{self.config.num_parts - 1} for this tokenizer, got "
                             f"{part.min()}..{part.max()}")  # fmt: skip
        return part * NUM_PITCHES + pitch, onset, offset, velocity_bin

    def decode(self, ids: Any) -> pretty_midi.PrettyMIDI:
        """Turns ids into a ``PrettyMIDI``: one instrument per part that has notes, named, with its program."""
        if self.config.num_parts == 1:
            midi = super().decode(ids)
            if self.config.part_programs:
                midi.instruments[0].program = self.config.part_programs[0]
            if self.config.part_names:
                midi.instruments[0].name = self.config.part_names[0]
            return midi
        notes = self.decode_notes(ids)
        midi = pretty_midi.PrettyMIDI(resolution=960, initial_tempo=120.0)
        for part in range(self.config.num_parts):
            instrument = pretty_midi.Instrument(self.config.part_program(part), name=self.config.part_name(part))
            for pitch, start, end, velocity, _ in notes[notes[:, 4] == part]:
                instrument.notes.append(pretty_midi.Note(int(velocity), int(pitch), float(start), float(end)))
            if instrument.notes:
                midi.instruments.append(instrument)
        return midi

    def decode_notes(self, ids: Any) -> np.ndarray:
        """Turns any id sequence into a note array ``(num_notes, 4)``, sorted by start then pitch;
        with parts ``(num_notes, 5)`` (the part last), sorted by start, part, pitch.

        Whatever a model sampled gives valid notes: special ids are skipped, a PITCH not followed
        by a DURATION is dropped, a DURATION without a PITCH before it is ignored, and notes of one
        pitch that overlap follow the encoding rules (a unison merges, a re-strike ends the note).
        """
        ids = _as_id_array(ids)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(
                f"ids must lie in [0, {self.vocab_size}) for this tokenizer, got {ids.min()}..{ids.max()}; "
                "was the model built for another vocabulary?"
            )
        time, pitch, ahead = 0, None, None  # ahead: steps to a given note's onset (None: a written note)
        before_gap = 0  # the time at the last GAP, which MIDDLE returns to
        velocity = {False: self.velocity_to_bin(64), True: self.velocity_to_bin(64)}  # written, given notes
        notes: list[tuple[int, int, int, int]] = []
        for token in ids.tolist():
            if token < self.time_shift_offset:
                pitch, ahead = None, None
            elif token < self.velocity_offset:
                time += token - self.time_shift_offset + 1
                pitch, ahead = None, None
            elif token < self.pitch_offset:
                velocity[ahead is not None] = token - self.velocity_offset
            elif token < self.duration_offset:
                pitch = token - self.pitch_offset
            elif token >= self.infill_offset:
                pitch, ahead = None, None
                if token == self.infill_offset:  # GAP: shifts to the gap's end and the music after it follow
                    before_gap = time
                elif token == self.infill_offset + 2:  # MIDDLE: back to the gap's start, for its own notes
                    time = before_gap
            elif token >= self.ahead_offset:
                pitch, ahead = None, token - self.ahead_offset  # the next note is a given one, this far ahead
            elif token >= self.control_offset:
                pitch = None  # a control token says nothing about notes
            elif pitch is not None:
                duration, onset = int(self._durations[token - self.duration_offset]), time + (ahead or 0)
                notes.append((pitch, onset, onset + duration, velocity[ahead is not None]))
                pitch, ahead = None, None
        if not notes:
            return self._with_parts(_notes_from_steps([], self.config.time_step))
        columns = [np.array(column, dtype=np.int64) for column in zip(*notes, strict=True)]
        pitch_, onset, offset, velocity_bin = _resolve_overlaps(*columns)
        velocities = self._bin_to_velocity[velocity_bin]
        steps = list(zip(pitch_.tolist(), onset.tolist(), offset.tolist(), velocities.tolist(), strict=True))
        return self._with_parts(_notes_from_steps(steps, self.config.time_step))

    def _with_parts(self, notes: np.ndarray) -> np.ndarray:
        """``(n, 4)`` notes whose pitch is ``128 * part + pitch`` as ``(n, 5)`` with the part last (one part: as is)."""
        if self.config.num_parts == 1:
            return notes
        part, pitch = np.divmod(notes[:, 0], NUM_PITCHES)
        return np.column_stack([pitch, notes[:, 1:4], part])

    def _duration_index(self, steps: np.ndarray) -> np.ndarray:
        """Index of the nearest allowed duration for each duration in steps (ties go to the shorter)."""
        grid = self._durations
        upper = np.searchsorted(grid, steps).clip(1, len(grid) - 1)
        lower = upper - 1
        return np.where(np.abs(grid[upper] - steps) < np.abs(steps - grid[lower]), upper, lower)

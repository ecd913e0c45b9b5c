"""Performance-event MIDI tokenizer (Oore et al. 2018, "This time with feeling"; Music Transformer).

A piece of (piano) music becomes a stream of four kinds of events:

- ``NOTE_ON_p`` / ``NOTE_OFF_p`` for each MIDI pitch ``p`` in 0..127: a key goes down / comes up;
- ``TIME_SHIFT_k``: time moves forward by ``k`` steps (``k`` = 1..``num_time_shifts``, default
  steps of 10 ms, so 10 ms … 1 s); longer rests are written as several shifts;
- ``VELOCITY_b``: the loudness bin ``b`` used by every following ``NOTE_ON``; written only when
  the bin changes.

Ids: ``PAD=0, BOS=1, EOS=2``, then 128 NOTE_ON, 128 NOTE_OFF, ``num_time_shifts`` TIME_SHIFT and
``num_velocity_bins`` VELOCITY ids (3 + 388 = 391 with the defaults).

A file becomes a note array ``(num_notes, 4)`` = ``[pitch, start_s, end_s, velocity]`` through
the one MIDI reader, :func:`~multimodal.tokenizers.midi_files.notes_from_midi` (seconds through
every tempo change, sustain pedal applied, non-drum tracks merged).
:meth:`MidiTokenizer.encode_notes` then quantises and writes the events; data sets cache the note
arrays, augment them and re-encode cheaply.

Rules that make every stream well formed (each NOTE_ON has exactly one later NOTE_OFF):

- times are rounded to the nearest step and a note lasts at least one step;
- notes of one pitch that start on the same step (unison of two voices) become one note that
  lasts as long as the longest and is as loud as the loudest;
- a re-strike ends the sounding note of the same pitch;
- at one step, NOTE_OFFs come before NOTE_ONs, each group ordered by pitch.

Example:
    >>> tokenizer = MidiTokenizer()
    >>> ids = tokenizer.encode("song.mid")  # doctest: +SKIP
    >>> tokenizer.decode(ids).write("again.mid")  # doctest: +SKIP

Why one file of ~400 lines: the vocabulary (config, event ids) and the two directions of the
tokenizer (notes -> events, events -> notes) are one thing; reading files lives in
:mod:`~multimodal.tokenizers.midi_files`.
"""

from __future__ import annotations

import importlib
import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pretty_midi

from multimodal.tokenizers.midi_files import notes_from_midi

NUM_PITCHES = 128
SPECIAL_TOKENS = ("PAD", "BOS", "EOS")
DEFAULT_VELOCITY = 64  # loudness of NOTE_ONs decoded before any VELOCITY event


@dataclass(frozen=True)
class MidiTokenizerConfig:
    """Resolution of the event vocabulary.

    Attributes:
        time_step: Seconds per TIME_SHIFT step; onsets and offsets are rounded to it.
        num_time_shifts: Number of TIME_SHIFT events; the longest single shift is
            ``num_time_shifts * time_step`` seconds.
        num_velocity_bins: Number of VELOCITY events; MIDI velocities 1..127 are split into this
            many bins of (almost) equal width.
    """

    time_step: float = 0.01
    num_time_shifts: int = 100
    num_velocity_bins: int = 32

    def __post_init__(self) -> None:
        if not self.time_step > 0:
            raise ValueError(f"time_step={self.time_step} must be a positive number of seconds")
        if self.num_time_shifts < 1:
            raise ValueError(f"num_time_shifts={self.num_time_shifts} must be at least 1")
        if not 1 <= self.num_velocity_bins <= 127:
            raise ValueError(f"num_velocity_bins={self.num_velocity_bins} must lie in 1..127")


class MidiEvent(NamedTuple):
    """One decoded token: ``kind`` in PAD/BOS/EOS/NOTE_ON/NOTE_OFF/TIME_SHIFT/VELOCITY.

    ``value`` is the pitch (NOTE_ON/OFF), the number of steps (TIME_SHIFT), the bin (VELOCITY),
    or ``None`` for special tokens.
    """

    kind: str
    value: int | None


class MidiTokenizer:
    """Turns MIDI files, ``PrettyMIDI`` objects or note arrays into performance-event ids and back.

    Follows the :class:`~multimodal.tokenizers.base.Tokenizer` protocol.

    Args:
        config: Time step, number of time shifts and velocity bins; the defaults are those of
            the Music Transformer (10 ms steps up to 1 s, 32 velocity bins).
    """

    config_class = MidiTokenizerConfig

    def __init__(self, config: MidiTokenizerConfig | None = None) -> None:
        self.config = config or MidiTokenizerConfig()
        self.note_on_offset = len(SPECIAL_TOKENS)
        self.note_off_offset = self.note_on_offset + NUM_PITCHES
        self.time_shift_offset = self.note_off_offset + NUM_PITCHES
        self.velocity_offset = self.time_shift_offset + self.config.num_time_shifts
        bins = self.config.num_velocity_bins
        # velocity_to_bin[v] for v in 0..127 (0 is clipped to 1); bin_to_velocity = bin median.
        velocities = np.arange(128).clip(1, 127)
        self._velocity_to_bin = (velocities - 1) * bins // 127
        self._bin_to_velocity = np.array(
            [int(np.median(np.flatnonzero(self._velocity_to_bin[1:] == b) + 1)) for b in range(bins)]
        )

    # ------------------------------------------------------------------ vocabulary
    @property
    def vocab_size(self) -> int:
        """Number of ids: 3 specials + 256 note events + time shifts + velocity bins."""
        return self.velocity_offset + self.config.num_velocity_bins

    @property
    def pad_id(self) -> int:
        """Id 0: padding, ignored by the losses."""
        return 0

    @property
    def bos_id(self) -> int:
        """Id 1: start of a piece."""
        return 1

    @property
    def eos_id(self) -> int:
        """Id 2: end of a piece."""
        return 2

    def token_to_event(self, token: int) -> MidiEvent:
        """Returns the event an id stands for, e.g. ``MidiEvent("NOTE_ON", 60)``."""
        token = int(token)
        if not 0 <= token < self.vocab_size:
            raise ValueError(f"token {token} is outside this tokenizer's vocabulary [0, {self.vocab_size})")
        if token < self.note_on_offset:
            return MidiEvent(SPECIAL_TOKENS[token], None)
        if token < self.note_off_offset:
            return MidiEvent("NOTE_ON", token - self.note_on_offset)
        if token < self.time_shift_offset:
            return MidiEvent("NOTE_OFF", token - self.note_off_offset)
        if token < self.velocity_offset:
            return MidiEvent("TIME_SHIFT", token - self.time_shift_offset + 1)
        return MidiEvent("VELOCITY", token - self.velocity_offset)

    def event_to_token(self, kind: str, value: int | None = None) -> int:
        """Inverse of :meth:`token_to_event`: ``event_to_token("TIME_SHIFT", 3)`` is the 30 ms shift."""
        offsets = {
            "NOTE_ON": (self.note_on_offset, 0, NUM_PITCHES - 1),
            "NOTE_OFF": (self.note_off_offset, 0, NUM_PITCHES - 1),
            "TIME_SHIFT": (self.time_shift_offset - 1, 1, self.config.num_time_shifts),
            "VELOCITY": (self.velocity_offset, 0, self.config.num_velocity_bins - 1),
        }
        if kind in SPECIAL_TOKENS:
            return SPECIAL_TOKENS.index(kind)
        if kind not in offsets:
            raise ValueError(f"unknown event kind {kind!r}; use one of {SPECIAL_TOKENS + tuple(offsets)}")
        offset, low, high = offsets[kind]
        if value is None or not low <= value <= high:
            raise ValueError(f"{kind} value {value} must lie in {low}..{high}")
        return offset + int(value)

    def token_name(self, token: int) -> str:
        """Readable name of an id for debugging: ``"NOTE_ON_60"``, ``"TIME_SHIFT_3"``, ``"BOS"``."""
        event = self.token_to_event(token)
        return event.kind if event.value is None else f"{event.kind}_{event.value}"

    def token_names(self, ids: Any) -> list[str]:
        """Readable names of a sequence of ids."""
        return [self.token_name(token) for token in _as_id_array(ids)]

    def velocity_to_bin(self, velocity: int) -> int:
        """VELOCITY bin (0-based) of a MIDI velocity 1..127."""
        return int(self._velocity_to_bin[int(np.clip(velocity, 1, 127))])

    def bin_to_velocity(self, velocity_bin: int) -> int:
        """MIDI velocity a VELOCITY bin decodes to (the median velocity of the bin)."""
        return int(self._bin_to_velocity[velocity_bin])

    # ------------------------------------------------------------------ encoding
    def encode(self, item: str | Path | pretty_midi.PrettyMIDI | np.ndarray) -> list[int]:
        """Turns a MIDI path, a ``PrettyMIDI`` or a note array ``(num_notes, 4)`` into ids (no BOS/EOS).

        Paths and ``PrettyMIDI`` objects go through :func:`notes_from_midi` (pedal applied, drums
        dropped, instruments merged).
        """
        if isinstance(item, str | Path | pretty_midi.PrettyMIDI):
            item = notes_from_midi(item)
        elif not isinstance(item, np.ndarray):
            raise TypeError(
                f"cannot encode a {type(item).__name__}; pass a MIDI path, a pretty_midi.PrettyMIDI "
                "or a note array of shape (num_notes, 4)"
            )
        return self.encode_notes(item)

    def encode_notes(self, notes: np.ndarray) -> list[int]:
        """Encodes a note array (vectorised with numpy; no Python loop over notes).

        Args:
            notes: ``(num_notes, 4)`` array of ``[pitch, start_s, end_s, velocity]``; pitches
                must be integers in 0..127, times are rounded to ``time_step``.

        Returns:
            The event ids, without BOS/EOS.
        """
        return self.encode_notes_array(notes).tolist()

    def encode_notes_array(self, notes: np.ndarray) -> np.ndarray:
        """Like :meth:`encode_notes` but returns an int64 array ``(num_ids,)``."""
        pitch, onset, offset, velocity_bin = self._quantise(notes)
        if len(pitch) == 0:
            return np.empty(0, dtype=np.int64)
        pitch, onset, offset, velocity_bin = _resolve_overlaps(pitch, onset, offset, velocity_bin)

        # One row per NOTE_OFF / NOTE_ON, ordered by (time, offs first, pitch).
        num_notes = len(pitch)
        times = np.concatenate([offset, onset])
        is_on = np.repeat([False, True], num_notes)
        pitches = np.concatenate([pitch, pitch])
        order = np.lexsort((pitches, is_on, times))
        times, is_on, pitches = times[order], is_on[order], pitches[order]
        bins = np.concatenate([velocity_bin, velocity_bin])[order]
        event_ids = np.where(is_on, self.note_on_offset, self.note_off_offset) + pitches

        # A VELOCITY event precedes a NOTE_ON whose bin differs from the previous NOTE_ON's.
        on_rows = np.flatnonzero(is_on)
        on_bins = bins[on_rows]
        needs_velocity = np.zeros(len(times), dtype=bool)
        needs_velocity[on_rows] = np.r_[True, on_bins[1:] != on_bins[:-1]]

        # Each row is written as [full shifts..., remainder shift, velocity, event].
        max_shift = self.config.num_time_shifts
        delta = np.diff(times, prepend=0)
        num_full, remainder = np.divmod(delta, max_shift)
        counts = num_full + (remainder > 0) + needs_velocity + 1
        ends = np.cumsum(counts)
        begins = ends - counts
        ids = np.empty(ends[-1], dtype=np.int64)
        ids[ends - 1] = event_ids
        ids[ends[needs_velocity] - 2] = self.velocity_offset + bins[needs_velocity]
        has_remainder = remainder > 0
        ids[(begins + num_full)[has_remainder]] = self.time_shift_offset + remainder[has_remainder] - 1
        full_rows = np.repeat(np.arange(len(times)), num_full)
        within_row = np.arange(len(full_rows)) - np.repeat(np.cumsum(num_full) - num_full, num_full)
        ids[begins[full_rows] + within_row] = self.time_shift_offset + max_shift - 1
        return ids

    def _quantise(self, notes: np.ndarray) -> tuple[np.ndarray, ...]:
        """Checks a note array ``(n, 4)`` (or ``(n, 5)``, parts merged) and returns int64 (pitch, onset step,
        offset step, velocity bin)."""
        notes = np.asarray(notes, dtype=np.float64)
        if notes.size == 0:
            notes = notes.reshape(0, 4)
        if notes.ndim != 2 or notes.shape[1] not in (4, 5):
            raise ValueError(
                f"notes must have shape (num_notes, 4) = [pitch, start_s, end_s, velocity] (or 5 with a part "
                f"column), got {notes.shape}"
            )
        notes = notes[:, :4]  # a part column is merged away: this vocabulary has one part
        if not np.isfinite(notes).all():
            raise ValueError("notes contain NaN or infinite values")
        pitch = np.rint(notes[:, 0]).astype(np.int64)
        if len(pitch) and (pitch.min() < 0 or pitch.max() >= NUM_PITCHES):
            raise ValueError(
                f"pitches must lie in 0..127, got {pitch.min()}..{pitch.max()}; transpose less or drop them"
            )
        step = self.config.time_step
        onset = np.rint(np.maximum(notes[:, 1], 0.0) / step).astype(np.int64)
        offset = np.maximum(np.rint(notes[:, 2] / step).astype(np.int64), onset + 1)
        velocity_bin = self._velocity_to_bin[np.clip(np.rint(notes[:, 3]), 1, 127).astype(np.int64)]
        return pitch, onset, offset, velocity_bin

    # ------------------------------------------------------------------ decoding
    def decode(self, ids: Any) -> pretty_midi.PrettyMIDI:
        """Turns ids into a ``PrettyMIDI`` with one piano instrument; see :meth:`decode_notes`."""
        midi = pretty_midi.PrettyMIDI(resolution=960, initial_tempo=120.0)
        piano = pretty_midi.Instrument(program=0, name="Piano")
        for pitch, start, end, velocity in self.decode_notes(ids):
            piano.notes.append(pretty_midi.Note(int(velocity), int(pitch), float(start), float(end)))
        midi.instruments.append(piano)
        return midi

    def decode_to_file(self, ids: Any, path: str | Path) -> Path:
        """Decodes ids and writes a standard MIDI file; returns its path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.decode(ids).write(str(path))
        return path

    def decode_notes(self, ids: Any) -> np.ndarray:
        """Turns any id sequence into a note array ``(num_notes, 4)``, sorted by start then pitch.

        Whatever a model sampled gives valid notes: special ids are skipped, a NOTE_OFF without a
        sounding note is ignored, a NOTE_ON of a sounding pitch ends that note first (a second
        NOTE_ON at the same time is ignored), a note whose NOTE_OFF comes at its own onset time
        is dropped, and notes still sounding at the end are closed at the final time (at least
        one step after their onset).

        Args:
            ids: A list, 1-D array or tensor of ids in ``[0, vocab_size)``.
        """
        ids = _as_id_array(ids)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(
                f"ids must lie in [0, {self.vocab_size}) for this tokenizer, got {ids.min()}..{ids.max()}; "
                "was the model built for another vocabulary?"
            )
        time, velocity = 0, DEFAULT_VELOCITY
        sounding: dict[int, tuple[int, int]] = {}  # pitch -> (onset step, velocity)
        notes: list[tuple[int, int, int, int]] = []
        for token in ids.tolist():
            if token < self.note_on_offset:
                continue
            if token < self.note_off_offset:
                pitch = token - self.note_on_offset
                if pitch in sounding:
                    if sounding[pitch][0] == time:
                        continue
                    onset, note_velocity = sounding.pop(pitch)
                    notes.append((pitch, onset, time, note_velocity))
                sounding[pitch] = (time, velocity)
            elif token < self.time_shift_offset:
                pitch = token - self.note_off_offset
                if pitch in sounding:
                    onset, note_velocity = sounding.pop(pitch)
                    if onset < time:
                        notes.append((pitch, onset, time, note_velocity))
            elif token < self.velocity_offset:
                time += token - self.time_shift_offset + 1
            else:
                velocity = self.bin_to_velocity(token - self.velocity_offset)
        for pitch, (onset, note_velocity) in sounding.items():
            notes.append((pitch, onset, max(time, onset + 1), note_velocity))
        return _notes_from_steps(notes, self.config.time_step)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Writes the configuration as JSON; :meth:`load` rebuilds an identical tokenizer."""
        state = {"type": type(self).__name__, "version": 1, "config": asdict(self.config)}
        Path(path).write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> MidiTokenizer:
        """Reads a tokenizer written by :meth:`save`."""
        state = json.loads(Path(path).read_text())
        if state.get("type") != cls.__name__:
            raise ValueError(f"{path} holds a {state.get('type')!r} tokenizer, not a {cls.__name__}")
        return cls(cls.config_class(**state["config"]))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config}, vocab_size={self.vocab_size})"


def _resolve_overlaps(
    pitch: np.ndarray, onset: np.ndarray, offset: np.ndarray, velocity_bin: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Makes the notes of each pitch disjoint: unisons merge, a re-strike ends the sounding note.

    All inputs are int64 arrays ``(num_notes,)`` in steps; returns the same four arrays, sorted
    by pitch then onset, possibly shorter.
    """
    order = np.lexsort((-offset, onset, pitch))
    pitch, onset, offset, velocity_bin = pitch[order], onset[order], offset[order], velocity_bin[order]
    first = np.r_[True, (pitch[1:] != pitch[:-1]) | (onset[1:] != onset[:-1])]
    groups = np.flatnonzero(first)
    velocity_bin = np.maximum.reduceat(velocity_bin, groups)
    pitch, onset, offset = pitch[groups], onset[groups], offset[groups]  # first of a group ends last
    restruck = pitch[1:] == pitch[:-1]
    offset[:-1] = np.where(restruck, np.minimum(offset[:-1], onset[1:]), offset[:-1])
    return pitch, onset, offset, velocity_bin


def _as_id_array(ids: Any) -> np.ndarray:
    """A list, array or (CPU or GPU) tensor of integer ids as a flat int64 numpy array.

    Raises:
        ValueError: For ids that are not integers (floats, strings).
    """
    if hasattr(ids, "detach"):
        ids = ids.detach().cpu()
    array = np.asarray(ids)
    if array.size and not (np.issubdtype(array.dtype, np.integer) or array.dtype == bool):
        raise ValueError(f"token ids must be integers, got {array.dtype} values")
    return array.astype(np.int64).ravel()


def _notes_from_steps(notes: list[tuple[int, int, int, int]], time_step: float) -> np.ndarray:
    """``[(pitch, onset_step, offset_step, velocity)]`` -> sorted float array ``(num_notes, 4)`` in seconds."""
    array = np.array(notes, dtype=np.float64).reshape(-1, 4)
    array[:, 1:3] *= time_step
    return array[np.lexsort((array[:, 0], array[:, 1]))]


_MOVED = ("SUSTAIN_PEDAL_CC", "UnusableMidi", "apply_sustain_pedal", "check_midi_timing", "check_notes")


def __getattr__(name: str):
    """The reader's names that moved to :mod:`~multimodal.tokenizers.midi_files`, kept importable from
    here for one release with a ``DeprecationWarning`` (``notes_from_midi`` stays: the tokenizer uses it)."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to multimodal.tokenizers.midi_files; the old path goes in version 0.3",
                  DeprecationWarning, stacklevel=2)  # fmt: skip
    return getattr(importlib.import_module("multimodal.tokenizers.midi_files"), name)

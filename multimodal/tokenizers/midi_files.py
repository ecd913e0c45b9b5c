"""MIDI files as note arrays: the one reader behind every MIDI file the toolkit reads.

:func:`read_midi_notes` turns a ``.mid`` file into a float64 array ``(num_notes, 4)`` =
``[pitch, start_s, end_s, velocity]``. Training on a folder (:mod:`multimodal.data.midi_cache`),
the chorales and ``load_midi_files`` (:mod:`multimodal.data.music`), ``generate`` / ``perplexity``
primers, the serve page and :meth:`MidiTokenizer.encode` of a path all read through it;
:func:`notes_from_midi` is the same for a path and also takes a ``pretty_midi.PrettyMIDI`` object.

The rules:

- **Parser**: ``symusic`` (C++; ~40 times faster than pretty_midi's pure-Python parse on the
  chorales), in ticks.
- **Times**: seconds through every ``set_tempo`` of the file (any track; 120 bpm before the first),
  in float64, with pretty_midi's arithmetic: a file pretty_midi reads the same gives the same bits.
- **Notes**: every non-drum track merged (drums, MIDI channel 10, only with ``include_drums``),
  sorted by start then pitch (ties keep the order of the tracks). A note-off (or a note-on of velocity
  0) ends the *earliest* sounding note of its pitch on its channel and track (first in, first out);
  a note-off with no sounding note is ignored, a note never ended is dropped, and a note-on and
  note-off of one pitch at the same tick give a note of length 0 (tokenizers make it one step).
- **Sustain pedal** (CC64 >= 64): applied per track (track, channel and program) with
  :func:`apply_sustain_pedal`; never to drums.
- **Checks** (:func:`check_midi_timing`, :func:`check_notes`): a file that cannot be parsed, with a
  resolution of 0 ticks per beat, a tempo of 0, or note times that are not finite, negative,
  reversed or all of length 0 raises :class:`UnusableMidi` naming the file and the reason.

Where pretty_midi differs (only on files that need the choice): a note-off ends *every* sounding
note of its pitch there, notes of length 0 are dropped, and only the first track's tempo changes
count. First in, first out is how symusic (and so MidiTok) pairs notes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pretty_midi

SUSTAIN_PEDAL_CC = 64


class UnusableMidi(ValueError):
    """A MIDI file that cannot be read, or whose timing or notes make no sense.

    ``str(error)`` is ``"<path>: <reason>"`` (just the reason where no file is known); ``reason``
    and ``path`` are kept apart for callers that name the file themselves.
    """

    def __init__(self, reason: str, path: str | Path | None = None) -> None:
        super().__init__(reason, path)
        self.reason, self.path = reason, path

    def __str__(self) -> str:
        return self.reason if self.path is None else f"{self.path}: {self.reason}"


def read_midi_notes(path: str | Path, include_drums: bool = False, parts: bool = False) -> np.ndarray:
    """Reads the notes of a MIDI file; see the module docstring for every rule.

    Args:
        path: A ``.mid`` / ``.midi`` file.
        include_drums: Keep the notes of drum tracks (MIDI channel 10); dropped by default.
        parts: Keep which track plays each note, as a fifth column: the index among the file's
            tracks that hold notes, in file order (symusic splits a track by channel and program).

    Returns:
        float64 array ``(num_notes, 4)`` of ``[pitch, start_s, end_s, velocity]`` (``(num_notes, 5)``
        with ``part`` last) sorted by start, then pitch; no rows for a file without notes.

    Raises:
        FileNotFoundError: No such file.
        IsADirectoryError: ``path`` is a folder.
        UnusableMidi: Not a readable MIDI file, or one failing :func:`check_midi_timing` or
            :func:`check_notes`; the message names the file and the reason.
    """
    import symusic

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "a folder, not a MIDI file", str(path))
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as error:
        raise UnusableMidi(f"not a readable MIDI file ({type(error).__name__}: {error.strerror})", path) from error
    try:
        score = symusic.Score.from_midi(data)
    except Exception as error:  # symusic raises RuntimeError (or ValueError) with a one-line reason
        detail = str(error).strip().splitlines()[0] if str(error).strip() else "no detail"
        raise UnusableMidi(f"not a readable MIDI file ({type(error).__name__}: {detail})", path) from error
    try:
        tempos = score.tempos.numpy()
        check_midi_timing(score.ticks_per_quarter, tempos["mspq"].tolist())
        seconds = _tick_to_seconds(score.ticks_per_quarter, tempos["time"].tolist(), tempos["mspq"].tolist())
        return check_notes(_score_notes(score, seconds, include_drums, parts))
    except UnusableMidi as error:
        raise UnusableMidi(error.reason, path) from None


def track_names(path: str | Path, include_drums: bool = False) -> list[str]:
    """The names of a MIDI file's tracks that hold notes (``""`` for an unnamed one), in the order of the part
    column of :func:`read_midi_notes` with ``parts=True`` (read it first: this assumes a readable file)."""
    import symusic

    score = symusic.Score.from_midi(Path(path).read_bytes())
    return [track.name.strip() for track in score.tracks if len(track.notes) and (include_drums or not track.is_drum)]


def open_pretty_midi(path: str | Path) -> pretty_midi.PrettyMIDI:
    """A MIDI file as pretty_midi reads it, with its tempo map and time signatures (what the bars and the score of
    a file follow).

    Raises:
        ValueError: ``path`` is not a readable MIDI file (the message names it).
    """
    try:
        return pretty_midi.PrettyMIDI(str(path))
    except Exception as error:  # pretty_midi raises whatever its parser met
        raise ValueError(f"{path}: not a readable MIDI file ({type(error).__name__})") from None


def notes_from_midi(midi: str | Path | pretty_midi.PrettyMIDI, include_drums: bool = False) -> np.ndarray:
    """The notes of a MIDI file (:func:`read_midi_notes`) or of a ``PrettyMIDI`` object, merged and pedal-applied.

    Args:
        midi: A path to a ``.mid`` file, or a ``PrettyMIDI`` (its instruments' notes and control
            changes, as an object holds them: no file is parsed).
        include_drums: Keep notes of drum instruments; they are dropped by default.

    Returns:
        float64 array ``(num_notes, 4)`` of ``[pitch, start_s, end_s, velocity]`` sorted by start,
        then pitch, the sustain pedal of each instrument applied with :func:`apply_sustain_pedal`.

    Raises:
        UnusableMidi: See :func:`read_midi_notes` (a ``ValueError`` naming the file and the reason).
    """
    if not isinstance(midi, pretty_midi.PrettyMIDI):
        return read_midi_notes(midi, include_drums)
    arrays = [np.empty((0, 4))]
    for instrument in midi.instruments:
        if instrument.is_drum and not include_drums:
            continue
        notes = np.array(
            [(note.pitch, note.start, note.end, note.velocity) for note in instrument.notes], dtype=np.float64
        ).reshape(-1, 4)
        if not instrument.is_drum:
            notes = apply_sustain_pedal(notes, instrument.control_changes)
        arrays.append(notes)
    notes = np.concatenate(arrays)
    return notes[np.lexsort((notes[:, 0], notes[:, 1]))]


def check_midi_timing(ticks_per_beat: int, tempos: Iterable[float]) -> None:
    """The header checks of :func:`read_midi_notes`.

    Args:
        ticks_per_beat: The resolution in the file's header.
        tempos: Every ``set_tempo`` of the file, in microseconds per beat.

    Raises:
        UnusableMidi: Ticks per beat not positive (every note time would be infinite), or a tempo
            of 0 (every note after it would last no time).
    """
    if not ticks_per_beat > 0:
        raise UnusableMidi(f"its header gives {ticks_per_beat} ticks per beat, so note times cannot be computed")
    for tempo in tempos:
        if not tempo > 0:
            raise UnusableMidi(f"it sets a tempo of {tempo} microseconds per beat, so its notes would last no time")


def check_notes(notes: np.ndarray) -> np.ndarray:
    """The note checks of :func:`read_midi_notes`; returns ``notes`` when they pass.

    Args:
        notes: ``(num_notes, 4)`` = ``[pitch, start_s, end_s, velocity]`` as read from a file.

    Raises:
        UnusableMidi: Times that are not finite or negative, a note that ends before it starts, or
            notes that all last no time. (A file without notes passes: callers say so themselves.)
    """
    if not len(notes):
        return notes
    times = notes[:, 1:3]
    if not np.isfinite(times).all():
        raise UnusableMidi("its note times are not finite numbers")
    if (times < 0).any():
        raise UnusableMidi("a note starts before time 0")
    if (notes[:, 2] < notes[:, 1]).any():
        raise UnusableMidi("a note ends before it starts")
    if not (notes[:, 2] > notes[:, 1]).any():
        raise UnusableMidi("every note lasts no time (0 s)")
    return notes


def apply_sustain_pedal(notes: np.ndarray, control_changes: list[pretty_midi.ControlChange] | np.ndarray) -> np.ndarray:
    """Lengthens notes released while the sustain pedal (CC64 >= 64) is down.

    Such a note lasts until the pedal comes up, or until the same pitch is struck again, whichever
    is first (never shorter than it was). A pedal still down at the end lifts at the last note end
    or control change of the instrument.

    Args:
        notes: ``(num_notes, 4)`` array ``[pitch, start_s, end_s, velocity]`` of one instrument.
        control_changes: That instrument's control changes (other controllers are ignored): objects
            with ``number``, ``value`` and ``time``, or an array ``(n, 3)`` of ``[time, number, value]``.

    Returns:
        A new ``(num_notes, 4)`` array with the same notes in the same order, ends extended.
    """
    if isinstance(control_changes, np.ndarray):
        rows = control_changes[control_changes[:, 1] == SUSTAIN_PEDAL_CC]
        pedal = sorted(zip(rows[:, 0].tolist(), rows[:, 2].tolist(), strict=True))
    else:
        pedal = sorted((cc.time, cc.value) for cc in control_changes if cc.number == SUSTAIN_PEDAL_CC)
    if not pedal or len(notes) == 0:
        return notes.copy()
    last_time = max(notes[:, 2].max(), pedal[-1][0])
    downs, ups, down_since = [], [], None
    for time, value in pedal:
        if value >= 64 and down_since is None:
            down_since = time
        elif value < 64 and down_since is not None:
            downs.append(down_since)
            ups.append(time)
            down_since = None
    if down_since is not None:
        downs.append(down_since)
        ups.append(max(last_time, down_since))
    if not downs:
        return notes.copy()
    downs, ups = np.array(downs), np.array(ups)

    end = notes[:, 2]
    interval = np.searchsorted(downs, end, side="right") - 1
    sustained = (interval >= 0) & (end < ups[interval.clip(0)])

    # Next onset of the same pitch (strictly later), or +inf.
    by_pitch = np.lexsort((notes[:, 1], notes[:, 0]))
    next_onset = np.full(len(notes), np.inf)
    same_pitch = notes[by_pitch[1:], 0] == notes[by_pitch[:-1], 0]
    later = notes[by_pitch[1:], 1] > notes[by_pitch[:-1], 1]
    next_onset[by_pitch[:-1][same_pitch & later]] = notes[by_pitch[1:][same_pitch & later], 1]

    result = notes.copy()
    pedal_end = np.minimum(ups[interval.clip(0)], next_onset)
    result[:, 2] = np.where(sustained, np.maximum(end, pedal_end), end)
    return result


def _tick_to_seconds(ticks_per_beat: int, tempo_ticks: list[int], tempos: list[int]) -> Callable[[np.ndarray], np.ndarray]:
    """Tick -> seconds of a tempo map, computed as pretty_midi computes it (so the floats are equal).

    Each tempo change starts a segment ``seconds = offset + scale * (tick - start)`` with
    ``scale = 60 / ((6e7 / tempo) * ticks_per_beat)``; changes at tick 0 replace the initial
    120 bpm, a change that repeats the current tempo starts no segment.
    """
    segments = [(0, 60.0 / (120.0 * ticks_per_beat))]
    for tick, tempo in zip(tempo_ticks, tempos, strict=True):
        scale = 60.0 / ((6e7 / tempo) * ticks_per_beat)
        if tick == 0:
            segments = [(0, scale)]
        elif scale != segments[-1][1]:
            segments.append((tick, scale))
    starts = np.array([start for start, _ in segments], dtype=np.int64)
    scales = np.array([scale for _, scale in segments])
    offsets = np.zeros(len(segments))
    for index in range(1, len(segments)):
        offsets[index] = offsets[index - 1] + scales[index - 1] * (starts[index] - starts[index - 1])

    def seconds(ticks: np.ndarray) -> np.ndarray:
        if len(segments) == 1:
            return scales[0] * ticks
        segment = np.searchsorted(starts, ticks, side="right") - 1
        return offsets[segment] + scales[segment] * (ticks - starts[segment])

    return seconds


def _score_notes(
    score, seconds: Callable[[np.ndarray], np.ndarray], include_drums: bool, parts: bool = False
) -> np.ndarray:
    """The merged, pedal-applied, sorted note array of a symusic score read in ticks (a track column with ``parts``)."""
    arrays = []
    for track in score.tracks:
        if (track.is_drum and not include_drums) or not len(track.notes):
            continue
        raw = track.notes.numpy()
        start = raw["time"].astype(np.int64)
        notes = np.empty((len(start), 4))  # filled column by column: no per-column temporaries
        notes[:, 0], notes[:, 3] = raw["pitch"], raw["velocity"]
        notes[:, 1], notes[:, 2] = seconds(start), seconds(start + raw["duration"])
        if not track.is_drum and len(track.controls):
            controls = track.controls.numpy()
            table = np.empty((len(controls["time"]), 3))
            table[:, 0] = seconds(controls["time"].astype(np.int64))
            table[:, 1], table[:, 2] = controls["number"], controls["value"]
            notes = apply_sustain_pedal(notes, table)
        arrays.append(np.column_stack([notes, np.full(len(notes), float(len(arrays)))]) if parts else notes)
    if not arrays:
        return np.empty((0, 5 if parts else 4))
    notes = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    return notes[np.lexsort((notes[:, 0], notes[:, 1]))]

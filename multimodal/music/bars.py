"""Beats and bars of a MIDI file, and span ends given in seconds or bars (``10``, ``10s``, ``bar9``).

A MIDI file's bars follow from its time signatures and tempo changes, on the same timeline as its notes
(:func:`~multimodal.tokenizers.midi_files.read_midi_notes`); a file without them is in 4/4 at 120 beats a minute,
the MIDI standard's defaults. :func:`beat_grid` holds them as a ``PrettyMIDI`` without notes, what a model's notes
(in seconds) are written on to keep the beats of the music they came from.

Bars are numbered as a score numbers them: a **pickup** (an upbeat: the tune starts before the first full bar's
downbeat) is bar 0 and bar 1 is the first full bar. A file marks a pickup the way MuseScore writes one, as a short
first bar (a time signature such as 1/4 for one bar, then the piece's 4/4); a file that does not (music21's, or one
played without a click) gets it from ``pickup`` (:func:`beat_grid`). Bars after the file's end go on at its last
time signature and tempo, so a span may reach past the end.
"""

from __future__ import annotations

import copy
import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pretty_midi

from multimodal.tokenizers.midi_files import open_pretty_midi

BAR = re.compile(r"bar\s*(\d+)", re.IGNORECASE)


def quarters_per_bar(signature: pretty_midi.TimeSignature) -> float:
    """How many quarter notes a bar of ``signature`` holds (6/8: 3.0)."""
    return signature.numerator * 4.0 / signature.denominator


def pickup_quarters(grid: pretty_midi.PrettyMIDI) -> float:
    """The length in quarter notes of the pickup a MIDI file writes (0.0: none): a first time signature at time 0
    that holds for exactly one bar, followed by a time signature of longer bars (1/4, then 4/4 a quarter later)."""
    signatures = grid.time_signature_changes
    if len(signatures) < 2 or signatures[0].time > 0:
        return 0.0
    first, second = signatures[:2]
    ticks = grid.time_to_tick(second.time) - grid.time_to_tick(first.time)
    short = abs(ticks - quarters_per_bar(first) * grid.resolution) <= 1 and quarters_per_bar(first) < quarters_per_bar(second)
    return quarters_per_bar(first) if short else 0.0


def beat_grid(source: str | Path | pretty_midi.PrettyMIDI | None = None, meter: str | None = None,
              pickup: float | None = None, until: float | None = None, key: str | None = None,
              transpose: int = 0) -> pretty_midi.PrettyMIDI:  # fmt: skip
    """The beats and bars to write music on: a ``PrettyMIDI`` without notes holding a tempo map, time signatures
    and key signatures.

    Args:
        source: The MIDI file (or ``PrettyMIDI``) the music came from: its tempo changes, time signatures and key
            signatures (None: 120 beats a minute, no time or key signature, which readers take as 4/4 in C).
        meter: A time signature (``"3/4"``) for every full bar instead of the source's.
        pickup: How many beats of the meter (its lower number's notes: eighths in 6/8) come before bar 1's
            downbeat, written as a short first bar (None: the source's own pickup, :func:`pickup_quarters`;
            0: none).
        until: Seconds after which the source's tempo, time and key signature changes are left out, the last
            before them going on (music continued from the source's first seconds is not the rest of the source).
        key: A key (``"G minor"``) for the key signature instead of the source's.
        transpose: Semitones the music was moved by from the source's: its key signatures move with it (``key``
            is the moved music's own).

    Raises:
        ValueError: A source that is not MIDI, or a pickup of a bar or more (the message says which).
    """
    grid = open_pretty_midi(source) if isinstance(source, (str, Path)) else copy.copy(source or pretty_midi.PrettyMIDI())
    grid.instruments, grid.lyrics, grid.text_events = [], [], []  # a shallow copy: its own lists
    grid.time_signature_changes, grid._tick_scales = list(grid.time_signature_changes), list(grid._tick_scales)
    if until is not None:
        _cut_after(grid, until)
    if key is not None:
        grid.key_signature_changes = [pretty_midi.KeySignature(pretty_midi.key_name_to_key_number(key), 0.0)]
    elif transpose:  # pretty_midi numbers the major keys 0-11 from C, the minor ones 12-23
        grid.key_signature_changes = [pretty_midi.KeySignature(k.key_number // 12 * 12 + (k.key_number + transpose) % 12,
                                                               k.time) for k in grid.key_signature_changes]  # fmt: skip
    grid.time_signature_changes = _changes_only(grid.time_signature_changes, lambda s: (s.numerator, s.denominator))
    grid.key_signature_changes = _changes_only(grid.key_signature_changes, lambda k: k.key_number)
    if meter is not None or pickup is not None:
        grid.time_signature_changes = _bars_with(grid, meter, pickup)
    return grid


def _cut_after(grid: pretty_midi.PrettyMIDI, until: float) -> None:
    """Leaves out ``grid``'s tempo, time and key signature changes after ``until`` seconds."""
    last = grid.time_to_tick(until)
    grid._tick_scales = [scale for scale in grid._tick_scales if scale[0] <= last]  # pretty_midi's tempo map: no
    grid._update_tick_to_time(last + 1)  # public way to cut it
    grid.time_signature_changes = [change for change in grid.time_signature_changes if change.time <= until]
    grid.key_signature_changes = [change for change in grid.key_signature_changes if change.time <= until]


def _bars_with(grid: pretty_midi.PrettyMIDI, meter: str | None, pickup: float | None) -> list[pretty_midi.TimeSignature]:
    """``grid``'s time signatures with ``meter`` for every full bar (None: its own) and ``pickup`` beats before the
    first (None: its own pickup), the pickup written as a bar of its own time signature."""
    found = pickup_quarters(grid)
    full_bars = grid.time_signature_changes[1:] if found else list(grid.time_signature_changes)
    opening = full_bars[0] if full_bars and grid.time_to_tick(full_bars[0].time) <= round(found * grid.resolution) else None
    if meter is not None:
        numerator, denominator = (int(number) for number in meter.split("/"))
        opening, full_bars = pretty_midi.TimeSignature(numerator, denominator, 0.0), []
    quarters = found if pickup is None else _pickup_quarters(pickup, opening)
    start = grid.tick_to_time(round(quarters * grid.resolution))  # where bar 1 starts
    later = [change for change in full_bars if change is not opening and change.time > start]
    signatures = []
    if quarters:
        beats = Fraction(quarters / 4).limit_denominator(64)
        signatures.append(pretty_midi.TimeSignature(beats.numerator, beats.denominator, 0.0))
    if opening is not None or quarters:
        opening = opening or pretty_midi.TimeSignature(4, 4, 0.0)
        signatures.append(pretty_midi.TimeSignature(opening.numerator, opening.denominator, start))
    return signatures + later


def _changes_only(events: list, value) -> list:
    """``events`` (time or key signatures, in time order) without those that repeat the one in force."""
    kept = []
    for event in sorted(events, key=lambda event: event.time):
        if not kept or value(event) != value(kept[-1]):
            kept.append(event)
    return kept


def _pickup_quarters(beats: float, meter: pretty_midi.TimeSignature | None) -> float:
    """``beats`` of ``meter``'s lower number (4/4 when None) in quarter notes, checked shorter than its bar."""
    meter = meter or pretty_midi.TimeSignature(4, 4, 0.0)
    if not 0 <= beats < meter.numerator or not math.isfinite(beats):
        raise ValueError(f"pickup: {beats:g} beats is not 0 or more and shorter than a bar of "
                         f"{meter.numerator}/{meter.denominator}")  # fmt: skip
    return beats * 4.0 / meter.denominator


def bar_starts(source: str | Path | pretty_midi.PrettyMIDI, count: int) -> np.ndarray:
    """The start, in seconds, of bars 1 to ``count`` of a MIDI file or a :func:`beat_grid`, float64 ``(count,)``;
    bar 1 is the first full bar (after a pickup).

    Raises:
        ValueError: ``source`` is not a readable MIDI file (the message names it).
    """
    grid = beat_grid(source) if isinstance(source, (str, Path)) else source
    changes = [(grid.time_to_tick(change.time), quarters_per_bar(change) * grid.resolution)
               for change in grid.time_signature_changes]  # fmt: skip
    if not changes or changes[0][0] > 0:
        changes.insert(0, (0, 4.0 * grid.resolution))
    wanted = count + (1 if pickup_quarters(grid) else 0)
    ticks, tick, index = [], 0.0, 0
    while len(ticks) < wanted:
        while index + 1 < len(changes) and changes[index + 1][0] <= tick + 0.5:
            index += 1
        ticks.append(tick)
        following = changes[index + 1][0] if index + 1 < len(changes) else math.inf
        tick = min(tick + changes[index][1], following)  # a signature mid-bar starts a bar, as sequencers do
    starts = [grid.tick_to_time(round(tick)) for tick in ticks]
    return np.asarray(starts[wanted - count :], dtype=np.float64)


def span_point(text: str) -> tuple[float, bool]:
    """``(value, is_bar)`` of one end of a span: ``"12.5"`` or ``"12.5s"`` seconds, ``"bar9"`` bar 9's start.

    Raises:
        ValueError: Neither (the message says what is expected).
    """
    found = BAR.fullmatch(text.strip())
    if found:
        if int(found.group(1)) < 1:
            raise ValueError(f"{text!r}: bars are counted from 1")
        return float(found.group(1)), True
    try:
        seconds = float(text.strip().removesuffix("s"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time (10 or 10s: seconds; bar9: where bar 9 starts)") from None
    if not 0 <= seconds < math.inf:
        raise ValueError(f"{text!r}: a time is 0 or more seconds")
    return seconds, False


def span_seconds(start: str, end: str, source: str | Path | pretty_midi.PrettyMIDI | None = None) -> tuple[float, float]:
    """The span from ``start`` to ``end`` (each as :func:`span_point` reads it) in seconds; bars are those of the
    MIDI file or :func:`beat_grid` ``source`` (:func:`bar_starts`): ``"bar9", "bar13"`` is bars 9 to 12.

    Raises:
        ValueError: An end that is neither, bars without a MIDI file, an unreadable file, or a start that does
            not come before the end.
    """
    points = [span_point(start), span_point(end)]
    bars = [int(value) for value, is_bar in points if is_bar]
    if bars and source is None:
        raise ValueError("bars need the MIDI file whose time signatures and tempo place them; give seconds")
    starts = bar_starts(source, max(bars)) if bars else None
    first, last = (float(starts[int(value) - 1]) if is_bar else value for value, is_bar in points)
    if not first < last:
        raise ValueError("the start must come before the end")
    return first, last

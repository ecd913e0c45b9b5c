"""Bars of a MIDI file, and span ends given in seconds or bars (``10``, ``10s``, ``bar9``).

A MIDI file's bars follow from its time signatures and tempo changes; pretty_midi reads both and gives the
downbeats in seconds, on the same timeline as the notes (:func:`~multimodal.tokenizers.midi_files.read_midi_notes`).
A file without them is in 4/4 at 120 beats a minute, the MIDI standard's defaults. Bar 1 starts at the file's
time 0, as a sequencer numbers them (a pickup written as a short first bar counts as bar 1). Bars after the
file's last note go on at its last time signature and tempo, so a span may reach past the end.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from multimodal.tokenizers.midi_files import open_pretty_midi

BAR = re.compile(r"bar\s*(\d+)", re.IGNORECASE)


def bar_starts(path: str | Path, count: int) -> np.ndarray:
    """The start, in seconds, of bars 1 to ``count`` of a MIDI file, float64 ``(count,)``.

    Raises:
        ValueError: ``path`` is not a readable MIDI file (the message names it).
    """
    midi = open_pretty_midi(path)
    starts = midi.get_downbeats()
    starts = starts if len(starts) else np.zeros(1)  # a file without notes: bar 1 at its time 0
    if len(starts) < count:  # past the last note: bars of the last time signature at the last tempo
        signature = midi.time_signature_changes[-1] if midi.time_signature_changes else None
        quarters = 4.0 if signature is None else signature.numerator * 4.0 / signature.denominator
        tempi = midi.get_tempo_changes()[1]
        length = quarters * 60.0 / (tempi[-1] if len(tempi) else 120.0)
        starts = np.r_[starts, starts[-1] + length * np.arange(1, count - len(starts) + 1)]
    return np.asarray(starts[:count], dtype=np.float64)


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


def span_seconds(start: str, end: str, path: str | Path | None = None) -> tuple[float, float]:
    """The span from ``start`` to ``end`` (each as :func:`span_point` reads it) in seconds; bars are those of the
    MIDI file at ``path`` (:func:`bar_starts`): ``"bar9", "bar13"`` is bars 9 to 12.

    Raises:
        ValueError: An end that is neither, bars without a MIDI file, an unreadable file, or a start that does
            not come before the end.
    """
    points = [span_point(start), span_point(end)]
    bars = [int(value) for value, is_bar in points if is_bar]
    if bars and path is None:
        raise ValueError("bars need the MIDI file whose time signatures and tempo place them; give seconds")
    starts = bar_starts(path, max(bars)) if bars else None
    first, last = (float(starts[int(value) - 1]) if is_bar else value for value, is_bar in points)
    if not first < last:
        raise ValueError("the start must come before the end")
    return first, last

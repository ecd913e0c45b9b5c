"""The harmonization benchmark's voice-leading counts (benchmarks/harmonization.py) against music21's
``VoiceLeadingQuartet``, an independent implementation, on random four-part music."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from harmonization import VOICES, sounding, voice_leading

WHITE = [0, 2, 4, 5, 7, 9, 11]  # white keys only: 7 semitones is always a perfect fifth when spelled


def _random_chorale(seed: int, onsets: int = 80) -> np.ndarray:
    """Four parts in disjoint registers (no crossings: music21 measures intervals from the lower voice),
    each holding or changing its note at every onset, with some rests."""
    rng = np.random.default_rng(seed)
    registers = {0: 6, 1: 5, 2: 4, 3: 3}  # octave of each part: soprano highest
    notes = []
    for part, octave in registers.items():
        pitch, start = None, 0.0
        for step in range(onsets):
            if pitch is None or rng.random() < 0.6:
                if pitch is not None:
                    notes.append([pitch, start, step * 0.5, 80, part])
                pitch, start = 12 * octave + int(rng.choice(WHITE)), step * 0.5
                if rng.random() < 0.05:  # a rest of one step
                    pitch = None
        if pitch is not None:
            notes.append([pitch, start, onsets * 0.5, 80, part])
    return np.array(notes, dtype=float)


def _music21_counts(notes: np.ndarray) -> dict[str, int]:
    from music21 import note, voiceLeading

    times = np.unique(np.round(notes[:, 1], 6))
    pitch = {part: sounding(notes, part, times) for part in VOICES}
    counts = dict(motions=0, fifths=0, octaves=0)
    for index, upper in enumerate(VOICES):
        for lower in VOICES[index + 1 :]:
            for t in range(1, len(times)):
                a0, a1, b0, b1 = pitch[upper][t - 1], pitch[upper][t], pitch[lower][t - 1], pitch[lower][t]
                if min(a0, a1, b0, b1) < 0 or (a0 == a1 and b0 == b1):
                    continue
                counts["motions"] += 1
                quartet = voiceLeading.VoiceLeadingQuartet(*(note.Note(midi=int(p)) for p in (a0, a1, b0, b1)))
                counts["fifths"] += int(quartet.parallelFifth())
                counts["octaves"] += int(quartet.parallelUnisonOrOctave())
    return counts


@pytest.mark.parametrize("seed", [0, 2])
def test_parallel_fifths_and_octaves_are_counted_as_music21_counts_them(seed):
    notes = _random_chorale(seed)
    ours = voice_leading(notes)
    expected = _music21_counts(notes)
    assert expected["fifths"] + expected["octaves"] > 0  # the random music has some to find
    assert {key: ours[key] for key in expected} == expected
    assert ours["crossings"] == 0


def test_a_crossing_is_counted_where_the_higher_part_sounds_below():
    notes = np.array([[60, 0, 1, 80, 0], [64, 0, 1, 80, 1], [48, 0, 1, 80, 2], [40, 0, 1, 80, 3]], dtype=float)
    found = voice_leading(notes)
    assert found["slices"] == 6 and found["crossings"] == 1  # soprano C4 under alto E4

"""Part ranges: each part's lowest and highest pitch over the training pieces, and the one-line refusal of a melody
that leaves its part's range."""

from __future__ import annotations

import numpy as np
import pytest

from multimodal.music.ranges import check_melody_range, part_chord_sizes, part_ranges


def _piece(rng: np.random.Generator, parts: int) -> np.ndarray:
    rows = [[rng.integers(30 + 10 * part, 60 + 10 * part), 0.5 * i, 0.5 * i + 0.5, 80, part]
            for part in range(parts) for i in range(int(rng.integers(0, 6)))]  # fmt: skip
    return np.array(rows, dtype=float).reshape(-1, 5)


def test_the_ranges_are_each_parts_lowest_and_highest_pitch_widened_by_the_transposition():
    rng = np.random.default_rng(0)
    pieces = [_piece(rng, 3) for _ in range(20)] + [np.empty((0, 5))]
    naive = {}
    for notes in pieces:
        for pitch, _, _, _, part in notes:
            low, high = naive.get(int(part), (999, -1))
            naive[int(part)] = (min(low, int(pitch)), max(high, int(pitch)))
    assert part_ranges(pieces, 4) == [naive[0], naive[1], naive[2], None]  # part 3 never plays
    widened = part_ranges(pieces, 4, transpose=3)
    assert widened[:3] == [(low - 3, high + 3) for low, high in (naive[0], naive[1], naive[2])]
    assert part_ranges([np.array([[1, 0, 1, 80], [126, 1, 2, 80]])], 1, transpose=5) == [(0, 127)]  # (n, 4): part 0


def test_a_melody_outside_its_parts_range_is_refused_with_the_octave_that_fits():
    melody = np.array([[72, 0.0, 0.5, 80], [79, 0.5, 1.0, 80]])
    check_melody_range(melody, (60, 81), "Soprano")  # inside: nothing
    with pytest.raises(ValueError, match=r"^tune.mid: its notes go from 72 to 79 \(MIDI pitch\), outside the range "
                                         r"Soprano had in the model's training music, 48 to 70; transposed by -12 "
                                         r"semitones it fits$"):  # fmt: skip
        check_melody_range(melody, (48, 70), "Soprano", "tune.mid")
    with pytest.raises(ValueError, match="transposed by \\+24 semitones it fits$"):
        check_melody_range(melody - 36, (60, 81), "Soprano")  # +12 falls short
    with pytest.raises(ValueError, match="it spans more than that range, even transposed by octaves$"):
        check_melody_range(melody, (70, 75), "Soprano")
    with pytest.raises(ValueError, match="the model never saw a note in Part 5 in training"):
        check_melody_range(melody, None, "Part 5")


def test_the_chord_sizes_are_the_most_notes_a_part_starts_together():
    chord = [[60, 0.0, 1.0, 80, 1], [64, 0.004, 1.0, 80, 1], [67, 0.0, 0.5, 80, 1]]  # within one 10 ms step
    line = [[72, 0.0, 0.5, 80, 0], [74, 0.5, 1.0, 80, 0], [50, 0.5, 1.0, 80, 2], [53, 0.52, 1.0, 80, 2]]
    pieces = [np.array(chord + line, dtype=float), np.array([[40, 0.0, 1.0, 80, 2], [43, 0.0, 1.0, 80, 2]], dtype=float)]
    assert part_chord_sizes(pieces, 4) == [1, 3, 2, 0]  # part 2: 50 and 53 are 20 ms apart, 40 and 43 together
    assert part_chord_sizes([np.array([[60, 0.0, 1.0, 80], [64, 0.0, 1.0, 80]])], 1) == [2]  # (n, 4): part 0


def test_transposed_music_moves_every_pitch_and_stays_in_midi():
    from multimodal.music.ranges import transposed

    notes = np.array([[60.0, 0.0, 1.0, 80, 0], [72.0, 1.0, 2.0, 80, 1]])
    moved = transposed(notes, -12, "tune.mid")
    assert moved[:, 0].tolist() == [48.0, 60.0] and (moved[:, 1:] == notes[:, 1:]).all() and notes[0, 0] == 60
    assert transposed(np.empty((0, 4)), 5).shape == (0, 4)
    with pytest.raises(ValueError, match="tune.mid: its notes go from 60 to 72 .* moved by \\+56 semitones they would leave"):
        transposed(notes, 56, "tune.mid")

"""Sample statistics: hand-computed histograms of a small MIDI file, and overlaps of known sets."""

import numpy as np
import pretty_midi
import pytest

from multimodal.data.music import load_bach_chorales
from multimodal.music.stats import BIN_EDGES, FEATURES, comparison_table, excerpt_stats, overlaps
from multimodal.tokenizers.midi_files import notes_from_midi


@pytest.fixture
def triad_file(tmp_path):
    """C4 for 0-1 s, E4 for 0-0.5 s, G4 for 0.5-1.5 s, written as a real MIDI file."""
    midi = pretty_midi.PrettyMIDI(initial_tempo=120.0)
    piano = pretty_midi.Instrument(program=0)
    for pitch, start, end in [(60, 0.0, 1.0), (64, 0.0, 0.5), (67, 0.5, 1.5)]:
        piano.notes.append(pretty_midi.Note(80, pitch, start, end))
    midi.instruments.append(piano)
    path = tmp_path / "triad.mid"
    midi.write(str(path))
    return path


def test_hand_computed_histograms_of_a_small_file(triad_file):
    stats = excerpt_stats(notes_from_midi(triad_file))
    assert stats.num_notes == 3 and stats.seconds == pytest.approx(1.5)
    # Durations 1.0, 0.5, 1.0 s. Log bins from 20 ms grow by 800 ** (1 / 24) = 1.3212 each:
    # 0.5 s = 0.02 * 25 lies 11.56 bins up, 1.0 s = 0.02 * 50 lies 14.05 bins up; bin 0 is "< 20 ms".
    assert BIN_EDGES["duration"][12] < 0.5 < BIN_EDGES["duration"][13]
    expected = np.zeros(26)
    expected[12], expected[15] = 1, 2
    np.testing.assert_array_equal(stats.counts["duration"], expected)
    # Two notes sound for 0-0.5 s (C, E) and 0.5-1 s (C, G), one for 1-1.5 s (G): seconds per count.
    np.testing.assert_allclose(stats.counts["polyphony"][:4], [0.0, 0.5, 1.0, 0.0], atol=1e-9)
    assert stats.counts["polyphony"].sum() == pytest.approx(1.5)
    # Distinct onsets 0 and 0.5: one interval of 0.5 s = 0.01 * 50, which lies ln 50 / ln 1.3970 =
    # 11.70 bins (ratio 800 ** (1 / 20)) above the first edge: bin 1 + 11.
    assert stats.counts["ioi"].sum() == 1 and stats.counts["ioi"][12] == 1
    np.testing.assert_array_equal(np.flatnonzero(stats.counts["pitch_class"]), [0, 4, 7])
    np.testing.assert_array_equal(np.flatnonzero(stats.counts["pitch"]), [60, 64, 67])
    assert stats.longest_note == pytest.approx(1.0)
    assert stats.sounding_at_end == 1 and stats.sounding_at_end_share == pytest.approx(1 / 3)


def test_an_excerpt_keeps_notes_that_begin_inside_it_and_cuts_them_at_its_end(triad_file):
    stats = excerpt_stats(notes_from_midi(triad_file), start=0.25, end=1.0)
    assert stats.num_notes == 1  # only G begins in [0.25, 1.0)
    assert stats.longest_note == pytest.approx(0.5) and stats.sounding_at_end == 1
    np.testing.assert_allclose(stats.counts["polyphony"][:2], [0.25, 0.5], atol=1e-9)  # silence, then G


def test_a_piece_against_itself_overlaps_one_and_disjoint_sets_zero():
    chorale = load_bach_chorales(limit=3).notes[2]
    stats = excerpt_stats(chorale)
    assert all(value == pytest.approx(1.0) for value in overlaps(stats, stats).values())
    high = chorale.copy()
    high[:, 0] += 127 - chorale[:, 0].max()  # moved up so that its lowest note is above the original's highest
    assert high[:, 0].min() > chorale[:, 0].max()
    assert overlaps(stats, excerpt_stats(high))["pitch"] == 0.0
    assert overlaps(stats, excerpt_stats(high))["duration"] == pytest.approx(1.0)


def test_partial_overlap_of_pitch_classes_and_pooling(triad_file):
    triad = excerpt_stats(notes_from_midi(triad_file))
    lone_c = excerpt_stats(np.array([[60, 0.0, 1.0, 80]]))
    assert overlaps(lone_c, triad)["pitch_class"] == pytest.approx(1 / 3)
    pooled = lone_c + triad
    assert pooled.num_notes == 4 and pooled.counts["pitch_class"][0] == 2
    assert set(overlaps(pooled, triad)) == set(FEATURES)
    table = comparison_table(lone_c, triad, training_longest_note=2.0)
    assert "| pitch_class | 0.333 |" in table and "longest training note" in table

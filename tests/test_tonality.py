"""Key emphasis: the tonic triads against music21's Roman numerals, the bias on the right PITCH ids, the share."""

from __future__ import annotations

import numpy as np
import pytest

from multimodal.music.tonality import key_emphasis, tonic_triad, tonic_triad_share
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig
from multimodal.tokenizers.music_controls import KEYS


def test_tonic_triads_are_music21s_roman_numeral_one():
    from music21 import key, roman

    for index, name in enumerate(KEYS):
        tonic, mode = name.split()
        chord = roman.RomanNumeral("i" if mode == "minor" else "I", key.Key(tonic.replace("b", "-"), mode))
        assert tonic_triad(index) == {pitch.pitchClass for pitch in chord.pitches}, name


def test_key_emphasis_raises_exactly_the_triads_pitches_in_every_part_among_the_pitches():
    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, controls=True))
    g_minor = KEYS.index("G minor")
    options = key_emphasis(tokenizer, g_minor, 0.5)
    bias = options["logit_bias"]
    assert set(bias.values()) == {0.5}
    expected, pitches = set(), set()
    for token in range(tokenizer.vocab_size):
        event = tokenizer.token_to_event(token)
        if event.kind == "PITCH":
            pitches.add(token)
            if event.value % 128 % 12 in (7, 10, 2):  # G, B-flat, D
                expected.add(token)
    assert set(bias) == expected and len(expected) == 4 * 32  # 11 Gs, 10 B-flats, 11 Ds per part
    assert set(options["logit_bias_group"]) == pitches and len(pitches) == 4 * 128
    assert key_emphasis(tokenizer, g_minor, 0.0) == {}
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="key emphasis"):
            key_emphasis(tokenizer, g_minor, bad)
    with pytest.raises(ValueError, match="outside"):
        key_emphasis(tokenizer, 24, 1.0)


def test_tonic_triad_share_counts_notes():
    notes = np.array([[60, 0, 1, 80], [64, 0, 1, 80], [62, 1, 2, 80], [79, 2, 3, 80]], dtype=float)  # C E D G
    assert tonic_triad_share(notes, KEYS.index("C major")) == 0.75
    assert tonic_triad_share(notes, KEYS.index("A minor")) == 0.5  # A C E: C and E
    assert np.isnan(tonic_triad_share(np.empty((0, 4)), 0))

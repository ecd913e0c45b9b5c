"""Control tokens: what users type parsed as music21 reads keys, keys moving with transposition as
music21 transposes them, the ids in the vocabulary, and training windows that open with them."""

from __future__ import annotations

import numpy as np
import pytest

from multimodal.data.music import MidiAugmentation, MidiCorpus, MidiPieceWindows, MidiWindowDataset
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig
from multimodal.tokenizers.music_controls import (
    KEYS,
    METERS,
    STYLES,
    Controls,
    density_bucket,
    parse_controls,
    parse_key,
    parse_meter,
)

TOKENIZER = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=2, controls=True))


def music21_key(index: int):
    from music21 import key

    tonic, mode = KEYS[index].split()
    return key.Key(tonic.replace("b", "-") if len(tonic) > 1 else tonic, mode)


@pytest.mark.parametrize("text", ["G minor", "g", "Bb major", "B- minor", "F# minor", "c#", "E-flat major", "Ab",
                                  "D min", "a minor", "C"])  # fmt: skip
def test_keys_parse_as_music21_reads_them(text):
    from music21 import key

    if text in ("E-flat major",):
        theirs = key.Key("E-", "major")
    elif " " in text:
        tonic, mode = text.split()
        theirs = key.Key(tonic, {"min": "minor"}.get(mode, mode))
    else:
        theirs = key.Key(text)  # music21: a lower-case tonic is minor
    ours = music21_key(parse_key(text))
    assert (ours.tonic.pitchClass, ours.mode) == (theirs.tonic.pitchClass, theirs.mode)


def test_a_transposed_key_is_music21s_transposition_and_bad_input_is_named():
    for index in range(len(KEYS)):
        for semitones in (-3, -1, 2, 7):
            moved = Controls(key=index).transposed(semitones).key
            theirs = music21_key(index).transpose(semitones)
            assert (music21_key(moved).tonic.pitchClass, music21_key(moved).mode) == (
                theirs.tonic.pitchClass, theirs.mode)  # fmt: skip
    assert parse_meter("6/8") == METERS.index("6/8") and parse_meter("5/4") == METERS.index("other")
    assert [density_bucket(x) for x in (0.5, 1.0, 5.0, 30.0)] == [0, 1, 4, 7]
    for kwargs, message in (({"style": "jazz"}, "unknown style 'jazz'"), ({"key": "H major"}, "key 'H major'"),
                            ({"meter": "waltz"}, "meter 'waltz'"), ({"density": "-1"}, "positive")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            parse_controls(**kwargs)


def test_control_ids_are_in_the_vocabulary_and_decoding_skips_them():
    controls = parse_controls("renaissance", "D minor", "4/4", 3.5)
    ids = TOKENIZER.control_ids(controls)
    assert TOKENIZER.token_names(ids) == [f"STYLE_{list(STYLES).index('renaissance')}", f"KEY_{KEYS.index('D minor')}",
                                          f"METER_{METERS.index('4/4')}", "DENSITY_3"]  # fmt: skip
    assert TOKENIZER.token_names(TOKENIZER.control_ids(None)) == ["STYLE", "KEY", "METER", "DENSITY"]  # unknown
    assert TOKENIZER.controls_in([TOKENIZER.bos_id, *ids]) == controls
    notes = np.array([[60, 0.0, 0.5, 80, 0], [64, 0.5, 1.0, 80, 1]])
    events = TOKENIZER.encode_notes(notes)
    assert np.array_equal(TOKENIZER.decode_notes([TOKENIZER.bos_id, *ids, *events]), TOKENIZER.decode_notes(events))
    assert max(events) < TOKENIZER.control_offset <= min(ids)
    with pytest.raises(ValueError, match="no control tokens"):
        MidiDurationTokenizer().control_ids(controls)


def test_training_windows_open_with_controls_whose_key_moves_with_the_notes():
    piece = np.array([[60, i * 0.25, i * 0.25 + 0.25, 80, i % 2] for i in range(200)], dtype=float)
    corpus = MidiCorpus(["one"], [piece], controls=[parse_controls("chorale", "C major", "3/4", 4)])
    augmentation = MidiAugmentation(max_transpose=5, stretch_range=(1.0, 1.0))
    data = MidiWindowDataset(corpus, TOKENIZER, seq_len=40, epoch_length=64, augmentation=augmentation, seed=0,
                             control_dropout=0.0)  # fmt: skip
    shifts = set()
    for window in data:
        assert window[0] == TOKENIZER.bos_id and len(window) == 41
        controls = TOKENIZER.controls_in(window[:5])
        pitch = next(e.value % 128 for e in map(TOKENIZER.token_to_event, window[5:].tolist()) if e.kind == "PITCH")
        assert KEYS[controls.key] == f"{KEYS[pitch % 12].split()[0]} major"  # the tonic moved with the notes
        assert (controls.style, controls.meter) == (0, METERS.index("3/4"))
        shifts.add(pitch - 60)
    assert len(shifts) > 5  # several transpositions were drawn
    hidden = MidiWindowDataset(corpus, TOKENIZER, seq_len=40, epoch_length=200, seed=0, control_dropout=0.5)
    unknown = np.mean([v is None for w in hidden for v in TOKENIZER.controls_in(w[:5]).values()])
    assert 0.4 < unknown < 0.6
    validation = MidiPieceWindows(corpus, TOKENIZER, seq_len=40)
    assert TOKENIZER.controls_in(validation[0][:5]) == corpus.controls[0]  # held-out pieces: the true controls

"""Who plays the parts: General MIDI programs by name or number, set on a vocabulary's parts."""

from __future__ import annotations

import numpy as np
import pretty_midi
import pytest

from multimodal.music.instruments import parse_program, with_programs
from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig


@pytest.mark.parametrize("program", [0, 19, 40, 52, 73, 127])
def test_a_general_midi_name_in_any_spelling_names_its_program(program):
    name = pretty_midi.INSTRUMENT_MAP[program]  # the standard's list, as pretty_midi keeps it
    for spelling in (name, name.lower(), name.upper().replace(" ", "-"), f"  {name}  "):
        assert parse_program(spelling) == program
    assert parse_program(str(program)) == program


@pytest.mark.parametrize("text, says", [("kazoo", "'kazoo' is not a General MIDI instrument"),
                                        ("128", "128 is not a General MIDI program"),
                                        ("-1", "-1 is not a General MIDI program")])  # fmt: skip
def test_what_is_no_instrument_is_refused_with_examples(text, says):
    with pytest.raises(ValueError, match=says):
        parse_program(text)


def four_part_notes() -> np.ndarray:
    """``(8, 5)``: two notes in each of four parts."""
    return np.array([[72 - 7 * part, start, start + 0.5, 80, part] for part in range(4) for start in (0.0, 0.5)])


def programs_of(tokenizer: MidiDurationTokenizer, notes: np.ndarray) -> dict[str, int]:
    midi = tokenizer.decode(tokenizer.encode_notes(notes))
    return {track.name: track.program for track in midi.instruments}


def test_the_parts_play_the_programs_given_in_order_and_the_ids_stay_the_same():
    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, part_programs=(0, 0, 0, 33)))
    notes = four_part_notes()
    assert programs_of(tokenizer, notes) == {"Part 1": 0, "Part 2": 0, "Part 3": 0, "Part 4": 33}
    strings = with_programs(tokenizer, ["Violin", "viola", 42])  # three of four: the bass keeps its own
    assert programs_of(strings, notes) == {"Part 1": 40, "Part 2": 41, "Part 3": 42, "Part 4": 33}
    assert list(strings.encode_notes(notes)) == list(tokenizer.encode_notes(notes))
    choir = with_programs(tokenizer, ["Choir Aahs"])  # one for all
    assert set(programs_of(choir, notes).values()) == {52}
    assert programs_of(tokenizer, notes)["Part 1"] == 0  # the original is untouched


def test_a_one_part_vocabulary_plays_its_program_too():
    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig())
    notes = four_part_notes()[:, :4]
    assert [track.program for track in tokenizer.decode(tokenizer.encode_notes(notes)).instruments] == [0]
    organ = with_programs(tokenizer, ["Church Organ"])
    assert [track.program for track in organ.decode(organ.encode_notes(notes)).instruments] == [19]


def test_more_programs_than_parts_and_the_performance_vocabulary_are_refused():
    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=2))
    with pytest.raises(ValueError, match="at most 2 .* not 3"):
        with_programs(tokenizer, [0, 1, 2])
    with pytest.raises(ValueError, match="piano"):
        with_programs(MidiTokenizer(), [52])


def test_the_parts_carry_the_names_given_in_order_and_the_ids_stay_the_same():
    from multimodal.music.instruments import with_part_names

    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, part_programs=(0, 0, 0, 33)))
    notes = four_part_notes()
    named = with_part_names(tokenizer, ["Soprano", " Alto ", "Tenor"])  # three of four: the last keeps its own
    assert programs_of(named, notes) == {"Soprano": 0, "Alto": 0, "Tenor": 0, "Part 4": 33}
    assert list(named.encode_notes(notes)) == list(tokenizer.encode_notes(notes))
    both = with_part_names(with_programs(tokenizer, ["Flute", "Violin", "Viola", "Cello"]), ["Fl", "Vn", "Va", "Vc"])
    assert programs_of(both, notes) == {"Fl": 73, "Vn": 40, "Va": 41, "Vc": 42}
    assert programs_of(tokenizer, notes)["Part 1"] == 0  # the original is untouched


@pytest.mark.parametrize("tokenizer, names, says", [
    (MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=2)), ["A", "B", "C"], "at most one a part, 2 .* not 3"),
    (MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=2)), [], "not 0"),
    (MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=3)), ["Alto", "alto"], "a name of its own"),
    (MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=3)), ["Part 2"], "a name of its own"),  # as part 2's
    (MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=2)), ["  "], "a name of its own"),
    (MidiDurationTokenizer(MidiDurationTokenizerConfig()), ["Melody"], "writes one part"),
    (MidiTokenizer(), ["Melody"], "writes one part"),
])  # fmt: skip
def test_names_that_do_not_name_each_part_once_are_refused(tokenizer, names, says):
    from multimodal.music.instruments import with_part_names

    with pytest.raises(ValueError, match=says):
        with_part_names(tokenizer, names)

"""Tests of the piano-roll picture."""

from __future__ import annotations

import numpy as np
import pretty_midi
from PIL import Image

from multimodal.viz import CONTINUATION_COLOUR, PART_COLOURS, PRIMER_COLOUR, pale, piano_roll_png


def colour_pixels(path, colour: str) -> int:
    """Number of pixels of one ``#rrggbb`` colour (within 10 per channel) in a PNG."""
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    image = np.asarray(Image.open(path).convert("RGB")).astype(int)
    return int((np.abs(image - rgb).max(axis=-1) <= 10).sum())


def test_piano_roll_draws_primer_and_continuation_in_two_colours(tmp_path):
    notes = np.array([[60 + i % 12, 0.5 * i, 0.5 * i + 0.4, 80] for i in range(20)])  # 10 s of notes
    path = piano_roll_png(notes, tmp_path / "rolls" / "roll.png", primer_end_seconds=4.0, title="test")
    with Image.open(path) as image:
        image.verify()
    primer, continuation = colour_pixels(path, PRIMER_COLOUR), colour_pixels(path, CONTINUATION_COLOUR)
    assert primer > 1000 and continuation > 1000
    assert 1.2 < continuation / primer < 2.0  # 12 of 20 notes after the primer's 8


def test_piano_roll_of_a_midi_object_without_primer_uses_one_colour(tmp_path):
    midi = pretty_midi.PrettyMIDI()
    piano = pretty_midi.Instrument(program=0)
    piano.notes = [pretty_midi.Note(90, 60, 0.0, 1.0), pretty_midi.Note(90, 64, 1.0, 2.0)]
    midi.instruments.append(piano)
    midi.write(str(tmp_path / "x.mid"))
    for item in (midi, tmp_path / "x.mid"):
        path = piano_roll_png(item, tmp_path / "roll.png")
        assert colour_pixels(path, PRIMER_COLOUR) > 1000
        assert colour_pixels(path, CONTINUATION_COLOUR) < 50  # legend swatch absent too


def test_piano_roll_of_no_notes_is_still_a_picture(tmp_path):
    path = piano_roll_png(np.zeros((0, 4)), tmp_path / "empty.png", primer_end_seconds=1.0)
    with Image.open(path) as image:
        assert image.size[0] > 100


def four_parts(seconds: int = 8) -> np.ndarray:
    """``(64, 5)`` notes: four parts, a note every half second in each, the part last."""
    return np.array([[base + i % 3, 0.5 * i, 0.5 * i + 0.45, 80, part]
                     for part, base in enumerate([72, 65, 58, 48]) for i in range(2 * seconds)], dtype=float)  # fmt: skip


def test_piano_roll_of_parts_gives_each_part_a_hue_and_draws_the_given_notes_pale(tmp_path):
    notes = four_parts()
    path = piano_roll_png(notes, tmp_path / "harmonized.png", given=notes[:, 4] == 0)  # a melody in part 1
    blue, orange, green, red = PART_COLOURS[:4]
    pale_blue = "#b7c7df"  # 60 % white mixed into #4c72b0, worked by hand
    assert colour_pixels(path, pale_blue) > 1000  # the melody
    assert colour_pixels(path, blue) < 400  # only its legend swatch in full colour
    written = [colour_pixels(path, hue) for hue in (orange, green, red)]
    assert min(written) > 1000 and max(written) < 1.3 * min(written)  # three parts of equal length


def test_piano_roll_of_parts_pales_the_primer(tmp_path):
    notes = four_parts()
    path = piano_roll_png(notes, tmp_path / "continued.png", primer_end_seconds=2.0)  # 4 of 16 notes a part
    for hue in PART_COLOURS[:4]:
        before, after = colour_pixels(path, pale(hue)), colour_pixels(path, hue)
        assert before > 200 and 2.0 < after / before < 4.5, hue  # 12 notes after, 4 before (plus a swatch)


def test_piano_roll_of_a_midi_file_colours_its_tracks(tmp_path):
    midi = pretty_midi.PrettyMIDI()
    for program, pitch in ((0, 72), (32, 48)):
        track = pretty_midi.Instrument(program=program, name=f"track {program}")
        track.notes = [pretty_midi.Note(90, pitch, float(t), t + 0.9) for t in range(6)]
        midi.instruments.append(track)
    path = piano_roll_png(midi, tmp_path / "tracks.png")  # nothing given: both tracks in full colour
    assert colour_pixels(path, PART_COLOURS[0]) > 1000 and colour_pixels(path, PART_COLOURS[1]) > 1000
    assert colour_pixels(path, pale(PART_COLOURS[0])) < 50
    assert colour_pixels(path, PART_COLOURS[2]) < 50  # a third hue only for a third track

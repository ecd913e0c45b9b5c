"""Tests of the piano-roll picture."""

from __future__ import annotations

import numpy as np
import pretty_midi
from PIL import Image

from multimodal.viz import CONTINUATION_COLOUR, PRIMER_COLOUR, piano_roll_png


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

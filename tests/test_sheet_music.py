"""Sheet music in: MusicXML and ABC read by music21 and written as MIDI files, their parts, tempo, meter and
pickup kept; held to music21's own reading of the same score and to bar lengths worked out by hand."""

from __future__ import annotations

import numpy as np
import pretty_midi
import pytest

from multimodal.music.bars import bar_starts, pickup_quarters
from multimodal.music.sheet_music import is_sheet_music, sheet_music_to_midi

JIG = """X:1
T:A jig with an upbeat
M:6/8
L:1/8
Q:3/8=100
K:G
D|GAB AGE|DEG G2A|BAG AGE|DED D2:|
"""
"""22 notes: an eighth-note upbeat, four bars of 6/8 (the last one short by the upbeat), and a repeat sign."""


@pytest.fixture(scope="module")
def chorale_xml(tmp_path_factory):
    """Bach's chorale BWV 66.6 (music21's corpus) as MusicXML: four named parts and a one-beat upbeat in 4/4."""
    from music21 import corpus

    path = tmp_path_factory.mktemp("sheet") / "bwv66.6.musicxml"
    corpus.parse("bach/bwv66.6").write("musicxml", fp=str(path))
    return path


def test_a_chorale_in_musicxml_keeps_its_parts_notes_and_upbeat(chorale_xml, tmp_path):
    from music21 import converter

    midi = pretty_midi.PrettyMIDI(str(sheet_music_to_midi(chorale_xml, tmp_path / "chorale.mid")))
    sheet = converter.parse(str(chorale_xml))
    assert [track.name for track in midi.instruments] == [part.partName for part in sheet.parts]
    assert [track.name for track in midi.instruments] == ["Soprano", "Alto", "Tenor", "Bass"]
    seconds_per_quarter = 60.0 / midi.get_tempo_changes()[1][0]
    for track, part in zip(midi.instruments, sheet.parts, strict=True):  # pitches and onsets as music21 reads them
        expected = [(p.midi, float(n.getOffsetInHierarchy(part))) for n in part.recurse().notes if not n.tie or
                    n.tie.type == "start" for p in n.pitches]  # fmt: skip
        got = [(n.pitch, round(n.start / seconds_per_quarter, 3)) for n in sorted(track.notes, key=lambda n: n.start)]
        assert got == [(pitch, round(onset, 3)) for pitch, onset in expected], track.name
    assert pickup_quarters(midi) == 1.0  # the upbeat: one quarter before bar 1
    starts = bar_starts(tmp_path / "chorale.mid", 2)
    np.testing.assert_allclose(starts, [1.0 * seconds_per_quarter, 5.0 * seconds_per_quarter], atol=1e-3)


def test_an_abc_tune_keeps_its_tempo_meter_and_eighth_note_upbeat(tmp_path):
    (tmp_path / "jig.abc").write_text(JIG)
    midi = pretty_midi.PrettyMIDI(str(sheet_music_to_midi(tmp_path / "jig.abc", tmp_path / "jig.mid")))
    assert midi.get_tempo_changes()[1].tolist() == [pytest.approx(150.0)]  # Q:3/8=100 is 150 quarters a minute
    eighth = 0.2  # seconds at 150 quarters a minute
    assert [(s.numerator, s.denominator) for s in midi.time_signature_changes] == [(1, 8), (6, 8)]
    assert pickup_quarters(midi) == 0.5
    np.testing.assert_allclose(bar_starts(tmp_path / "jig.mid", 3), [eighth, 7 * eighth, 13 * eighth], atol=1e-3)
    notes = midi.instruments[0].notes
    assert len(notes) == 22  # the repeat played once, as written: as the training pieces were read
    assert [n.pitch for n in notes[:4]] == [62, 67, 69, 71] and notes[1].start == pytest.approx(eighth, abs=1e-3)


def test_what_is_not_sheet_music_is_one_line(tmp_path):
    assert is_sheet_music("tune.ABC") and is_sheet_music("a/b.musicxml") and not is_sheet_music("tune.mid")
    (tmp_path / "broken.musicxml").write_text("<score-partwise><part id='P1'><measure>")
    with pytest.raises(ValueError, match="broken.musicxml: not readable sheet music"):
        sheet_music_to_midi(tmp_path / "broken.musicxml", tmp_path / "out.mid")
    (tmp_path / "silent.abc").write_text("X:1\nT:Silence\nM:4/4\nL:1/4\nK:C\nz4|z4|\n")
    with pytest.raises(ValueError, match="silent.abc: the sheet music has no notes"):
        sheet_music_to_midi(tmp_path / "silent.abc", tmp_path / "out.mid")
    with pytest.raises(FileNotFoundError):
        sheet_music_to_midi(tmp_path / "missing.abc", tmp_path / "out.mid")
    assert not (tmp_path / "out.mid").exists()


def test_a_folder_of_midi_and_sheet_music_is_one_corpus_each_tune_of_a_book_a_piece(tmp_path, chorale_xml):
    """What ``perplexity`` (and a folder of a user's files) reads: MIDI files, MusicXML and an ABC book of two tunes;
    a sheet music21 cannot read is skipped by name."""
    import shutil

    from multimodal.data.music import load_midi_files

    folder = tmp_path / "pieces"
    (folder / "tunes").mkdir(parents=True)
    (folder / "tunes" / "book.abc").write_text(JIG + "\n" + JIG.replace("X:1", "X:2").replace("D|GAB", "D|GBd"))
    shutil.copy(chorale_xml, folder / "chorale.musicxml")
    midi = pretty_midi.PrettyMIDI()
    midi.instruments.append(pretty_midi.Instrument(0, name="Line"))
    midi.instruments[0].notes = [pretty_midi.Note(80, 60, 0.0, 0.5), pretty_midi.Note(80, 62, 0.5, 1.0)]
    midi.write(str(folder / "line.mid"))
    (folder / "broken.musicxml").write_text("<score-partwise><part id='P1'><measure>")
    with pytest.warns(UserWarning, match="skipping sheet music .*broken.musicxml: music21 could not read it"):
        corpus = load_midi_files([folder], parts=True)
    assert corpus.names == ["chorale.musicxml", "line.mid", "tunes/book.abc#1", "tunes/book.abc#2"]
    assert corpus.num_skipped == 1
    chorale, line, first, second = corpus.notes
    assert sorted(set(chorale[:, 4].astype(int))) == [0, 1, 2, 3] and len(line) == 2
    assert len(first) == len(second) == 22 and first[1, 0] == 67 and second[2, 0] == 71  # G B d: the second tune
    merged = load_midi_files([folder / "tunes" / "book.abc"]).notes[0]
    assert merged.shape == (22, 4)  # without parts: the four columns of every other piece

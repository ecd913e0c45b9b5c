"""Sheet music of generated MIDI: MusicXML in the source's meter, tempo and key, read back with music21."""

from __future__ import annotations

import mido
import pretty_midi
import pytest

from multimodal.music.score import source_timing, write_musicxml

TEMPO = 90.0  # beats a minute: a quarter note lasts 2/3 s
QUARTER = 60.0 / TEMPO


def waltz(path=None, tempo: float = TEMPO, meter: tuple[int, int] | None = (3, 4)) -> pretty_midi.PrettyMIDI:
    """Two parts in beats: a melody of quarters and half notes, a bass of dotted halves (12 beats)."""
    midi = pretty_midi.PrettyMIDI(initial_tempo=tempo)
    if meter is not None:
        midi.time_signature_changes = [pretty_midi.TimeSignature(*meter, 0.0)]
    beat = 60.0 / tempo
    melody, bass = pretty_midi.Instrument(73, name="Flute"), pretty_midi.Instrument(42, name="Cello")
    for start, length, pitch in [(0, 1, 70), (1, 1, 72), (2, 1, 74), (3, 2, 75), (5, 1, 74), (6, 3, 72), (9, 3, 70)]:
        melody.notes.append(pretty_midi.Note(90, pitch, start * beat, (start + length) * beat))
    for start, pitch in [(0, 46), (3, 51), (6, 53), (9, 46)]:
        bass.notes.append(pretty_midi.Note(80, pitch, start * beat, (start + 3) * beat))
    midi.instruments += [melody, bass]
    if path is not None:
        midi.write(str(path))
    return midi


def read_parts(path):
    """``{part name: [(MIDI pitch, onset in quarters, length in quarters)]}`` (a chord's notes each) and the first
    measure of each part."""
    from music21 import converter

    score = converter.parse(str(path))
    notes = {part.partName: [(pitch.midi, float(n.getOffsetInHierarchy(part)), float(n.quarterLength))
                             for n in part.recurse().notes for pitch in n.pitches] for part in score.parts}  # fmt: skip
    return notes, [part.getElementsByClass("Measure").first() for part in score.parts]


def test_the_score_keeps_every_note_in_beats_of_the_source_tempo_its_meter_and_key(tmp_path):
    source = waltz()
    path = write_musicxml(source, tmp_path / "scores" / "waltz.musicxml", seconds_per_quarter=QUARTER, meter="3/4",
                          key="Bb major")  # fmt: skip
    notes, firsts = read_parts(path)
    for track in source.instruments:  # each note's onset and length in quarters, worked from its seconds
        expected = [(n.pitch, round(n.start / QUARTER, 6), round((n.end - n.start) / QUARTER, 6)) for n in track.notes]
        assert [(p, round(o, 6), round(q, 6)) for p, o, q in notes[track.name]] == expected, track.name
    for first in firsts:
        assert first.timeSignature.ratioString == "3/4" and first.keySignature.sharps == -2  # B flat major: two flats
    assert len(next(iter(source.instruments)).notes) == 7 and sum(len(found) for found in notes.values()) == 11


def test_read_at_the_wrong_tempo_the_rhythm_changes(tmp_path):
    """The tempo matters: the same seconds read at 120 a minute are not the waltz's quarters."""
    notes, _ = read_parts(write_musicxml(waltz(), tmp_path / "fast.musicxml", seconds_per_quarter=0.5, meter="3/4"))
    assert [length for _, _, length in notes["Flute"]][:3] != [1.0, 1.0, 1.0]


@pytest.mark.parametrize("scale, sharps", [([60, 62, 64, 65, 67, 69, 71, 72, 67, 64, 60], 0),
                                           ([62, 64, 66, 67, 69, 71, 73, 74, 69, 66, 62], 2)])  # fmt: skip
def test_without_a_key_the_signature_is_the_key_of_the_notes(tmp_path, scale, sharps):
    midi = pretty_midi.PrettyMIDI()
    line = pretty_midi.Instrument(0, name="Line")
    line.notes = [pretty_midi.Note(80, pitch, 0.5 * i, 0.5 * i + 0.5) for i, pitch in enumerate(scale)]
    midi.instruments.append(line)
    _, firsts = read_parts(write_musicxml(midi, tmp_path / "scale.musicxml"))
    assert firsts[0].keySignature.sharps == sharps and firsts[0].timeSignature.ratioString == "4/4"


def test_the_source_timing_is_its_first_tempo_and_time_signature(tmp_path):
    waltz(tmp_path / "waltz.mid", tempo=90.0, meter=(6, 8))
    seconds_per_quarter, meter = source_timing(tmp_path / "waltz.mid")
    assert seconds_per_quarter == pytest.approx(60 / 90, rel=1e-4) and meter == "6/8"
    plain = mido.MidiFile()  # no tempo, no time signature (pretty_midi would write a 4/4)
    plain.tracks.append(mido.MidiTrack([mido.Message("note_on", note=60, velocity=80, time=0),
                                        mido.Message("note_off", note=60, velocity=0, time=480)]))  # fmt: skip
    plain.save(str(tmp_path / "plain.mid"))
    assert source_timing(tmp_path / "plain.mid") == (pytest.approx(0.5), None)
    (tmp_path / "not.mid").write_bytes(b"MThd")
    with pytest.raises(ValueError, match="not.mid: not a readable MIDI file"):
        source_timing(tmp_path / "not.mid")


def test_keep_timing_gives_a_file_its_sources_tempo_and_meter_and_keeps_its_seconds(tmp_path):
    from multimodal.music.score import keep_timing

    waltz(tmp_path / "source.mid", tempo=90.0, meter=(6, 8))
    written = waltz(tmp_path / "written.mid", tempo=120.0, meter=None)  # as a model's file: 120 a minute
    before = (tmp_path / "written.mid").read_bytes()
    assert keep_timing(tmp_path / "written.mid") == (0.5, None) and (tmp_path / "written.mid").read_bytes() == before
    seconds_per_quarter, meter = keep_timing(tmp_path / "written.mid", tmp_path / "source.mid")
    assert seconds_per_quarter == pytest.approx(60 / 90, rel=1e-4) and meter == "6/8"
    meta = [m for track in mido.MidiFile(str(tmp_path / "written.mid")).tracks for m in track if m.is_meta]
    assert [m.tempo for m in meta if m.type == "set_tempo"] == [pytest.approx(mido.bpm2tempo(90), abs=1)]
    assert [(m.numerator, m.denominator) for m in meta if m.type == "time_signature"] == [(6, 8)]
    again = pretty_midi.PrettyMIDI(str(tmp_path / "written.mid"))
    for old, new in zip(written.instruments, again.instruments, strict=True):
        assert [(n.pitch, n.start, n.end) for n in new.notes] == [
            (n.pitch, pytest.approx(n.start, abs=1e-3), pytest.approx(n.end, abs=1e-3)) for n in old.notes]
    assert keep_timing(tmp_path / "written.mid", meter="3/4")[1] == "3/4"  # a meter asked for wins


def test_timed_keeps_drums_bends_and_controllers_at_their_seconds():
    from multimodal.music.score import timed

    midi = pretty_midi.PrettyMIDI()
    drums = pretty_midi.Instrument(0, is_drum=True, name="Drums")
    drums.notes = [pretty_midi.Note(100, 36, 0.25, 0.3)]
    lead = pretty_midi.Instrument(81, name="Lead")
    lead.notes = [pretty_midi.Note(90, 72, 0.0, 1.0)]
    lead.pitch_bends = [pretty_midi.PitchBend(2000, 0.5)]
    lead.control_changes = [pretty_midi.ControlChange(64, 127, 0.1)]
    midi.instruments += [drums, lead]
    copy = timed(midi, 60 / 90, "3/4")
    assert [(t.name, t.is_drum, t.program) for t in copy.instruments] == [("Drums", True, 0), ("Lead", False, 81)]
    assert [(b.pitch, b.time) for b in copy.instruments[1].pitch_bends] == [(2000, 0.5)]
    assert [(c.number, c.value, c.time) for c in copy.instruments[1].control_changes] == [(64, 127, 0.1)]
    assert copy.instruments[0].notes[0].start == 0.25 and copy.get_tempo_changes()[1][0] == pytest.approx(90)


def test_music_without_notes_has_no_score_and_the_command_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    from tasks.cli import main

    with pytest.raises(ValueError, match="empty.musicxml: the music has no notes to write a score of"):
        write_musicxml(pretty_midi.PrettyMIDI(), tmp_path / "empty.musicxml")
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)  # warnings as users see them
    main(["generate", "--model", "music", "--out", str(tmp_path / "out"), "--primer-seconds", "0", "--max-new-tokens",
          "0", "--no-audio", "--score"])  # fmt: skip
    said = capsys.readouterr()
    assert "sample_0.musicxml: the music has no notes to write a score of" in said.err
    assert (tmp_path / "out" / "sample_0.mid").is_file() and not (tmp_path / "out" / "sample_0.musicxml").exists()

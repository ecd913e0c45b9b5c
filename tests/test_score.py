"""Sheet music of generated MIDI: MusicXML in the source's meter, tempo and key, read back with music21."""

from __future__ import annotations

import concurrent.futures
from xml.etree import ElementTree

import mido
import pretty_midi
import pytest

from multimodal.music.bars import beat_grid, pickup_quarters
from multimodal.music.score import keep_timing, timed, write_musicxml

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


def test_the_score_keeps_every_note_in_beats_of_its_tempo_its_meter_and_key(tmp_path):
    source = waltz()
    path = write_musicxml(source, tmp_path / "scores" / "waltz.musicxml", key="Bb major")
    notes, firsts = read_parts(path)
    for track in source.instruments:  # each note's onset and length in quarters, worked from its seconds
        expected = [(n.pitch, round(n.start / QUARTER, 6), round((n.end - n.start) / QUARTER, 6)) for n in track.notes]
        assert [(p, round(o, 6), round(q, 6)) for p, o, q in notes[track.name]] == expected, track.name
    for first in firsts:
        assert first.timeSignature.ratioString == "3/4" and first.keySignature.sharps == -2  # B flat major: two flats
    assert len(next(iter(source.instruments)).notes) == 7 and sum(len(found) for found in notes.values()) == 11


def test_the_score_has_a_title_and_names_its_arranger_not_music21(tmp_path):
    root = ElementTree.parse(write_musicxml(waltz(), tmp_path / "waltz.musicxml", title="Waltz, harmonized")).getroot()
    assert root.find("movement-title").text == "Waltz, harmonized"
    assert [(c.get("type"), c.text) for c in root.iter("creator")] == [("arranger", "multimodal")]
    root = ElementTree.parse(write_musicxml(waltz(), tmp_path / "sample_3.musicxml")).getroot()
    assert root.find("movement-title").text == "sample_3"  # no title given: the file's name


def test_the_score_is_engraved_with_every_note_and_staff(tmp_path):
    """Verovio's picture of the waltz: one notehead per note of the MusicXML (counted by music21), a staff per part
    named as its track, and the title."""
    from multimodal.music.score import engrave_svg

    score = write_musicxml(waltz(), tmp_path / "waltz.musicxml", title="Waltz, harmonized")
    picture = engrave_svg(score)
    assert picture == tmp_path / "waltz.svg"
    svg = ElementTree.parse(picture).getroot()
    classes = [element.get("class", "").split() for element in svg.iter()]
    written = sum(len(found) for found in read_parts(score)[0].values())
    assert sum("note" in names for names in classes) == written == 11
    assert sum("staff" in names for names in classes) == 2 * 4  # two parts, each in 4 bars of 3/4 (12 beats)
    text = " ".join(" ".join(element.itertext()) for element in svg.iter() if element.tag.endswith("text"))
    assert "Flute" in text and "Cello" in text and "Waltz, harmonized" in text
    line = pretty_midi.PrettyMIDI()  # a part named after no instrument keeps its name on every system
    line.instruments.append(pretty_midi.Instrument(0, name="Part 3"))
    line.instruments[0].notes = [pretty_midi.Note(80, 60 + i % 5, 0.5 * i, 0.5 * i + 0.5) for i in range(200)]
    abbreviations = ElementTree.parse(write_musicxml(line, tmp_path / "long.musicxml")).getroot().iter("part-abbreviation")
    assert [element.text for element in abbreviations] == ["Part 3"]  # not "Pno", the piano's of program 0
    threads = concurrent.futures.ThreadPoolExecutor(2)  # as the page's workers call it, after a first call here
    drawn = list(threads.map(engrave_svg, [score] * 2, [tmp_path / "one.svg", tmp_path / "two.svg"]))
    for path in drawn:  # (the ids Verovio gives its elements differ from one drawing to the next)
        assert sum("note" in element.get("class", "").split() for element in ElementTree.parse(path).getroot().iter()) == 11
    (tmp_path / "broken.musicxml").write_text("not a score")
    with pytest.raises(ValueError, match="broken.musicxml: Verovio could not read the score"):
        engrave_svg(tmp_path / "broken.musicxml")


def test_read_at_the_wrong_tempo_the_rhythm_changes(tmp_path):
    """The tempo matters: the same seconds on a grid of 120 a minute are not the waltz's quarters."""
    notes, _ = read_parts(write_musicxml(timed(waltz(), beat_grid(meter="3/4")), tmp_path / "fast.musicxml"))
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


def scale_with_signature(key_name: str | None) -> pretty_midi.PrettyMIDI:
    """A C major scale up and down, with the key signature of ``key_name`` written at its start (None: none)."""
    midi = pretty_midi.PrettyMIDI()
    line = pretty_midi.Instrument(0, name="Line")
    pitches = [60, 62, 64, 65, 67, 69, 71, 72, 67, 64, 60]
    line.notes = [pretty_midi.Note(80, pitch, 0.5 * i, 0.5 * i + 0.5) for i, pitch in enumerate(pitches)]
    midi.instruments.append(line)
    if key_name is not None:
        midi.key_signature_changes = [pretty_midi.KeySignature(pretty_midi.key_name_to_key_number(key_name), 0.0)]
    return midi


@pytest.mark.parametrize("written, asked, sharps", [
    ("C minor", None, -3),  # the file's own signature of flats is the composer's: kept, though the notes say C major
    ("A major", None, 3),
    ("D major", "G major", 1),  # a key asked wins
    (None, None, 0),  # none written: the notes' key
])  # fmt: skip
def test_the_key_signature_is_the_one_asked_else_the_files_own_else_the_notes(tmp_path, written, asked, sharps):
    _, firsts = read_parts(write_musicxml(scale_with_signature(written), tmp_path / "scale.musicxml", asked))
    assert firsts[0].keySignature.sharps == sharps


def test_a_default_key_signature_of_no_sharps_gives_way_to_the_notes_key(tmp_path):
    """Many programs write C major when nobody chose a key: a D major scale under it is scored with two sharps."""
    midi = scale_with_signature("C major")
    for note in midi.instruments[0].notes:
        note.pitch += 2
    _, firsts = read_parts(write_musicxml(midi, tmp_path / "d.musicxml"))
    assert firsts[0].keySignature.sharps == 2


def test_the_grid_keeps_the_sources_key_signatures_or_the_key_asked():
    source = scale_with_signature("Eb major")
    source.key_signature_changes.append(pretty_midi.KeySignature(pretty_midi.key_name_to_key_number("Bb major"), 4.0))
    names = [pretty_midi.key_number_to_key_name(k.key_number) for k in beat_grid(source).key_signature_changes]
    assert names == ["Eb Major", "Bb Major"]
    assert len(beat_grid(source, until=2.0).key_signature_changes) == 1  # a continuation of its first 2 s
    assert [k.key_number for k in beat_grid(source, key="G minor").key_signature_changes] == [
        pretty_midi.key_name_to_key_number("G minor")]
    assert source.instruments and len(source.key_signature_changes) == 2  # the source is untouched
    up_a_tone = [pretty_midi.key_number_to_key_name(k.key_number) for k in beat_grid(source, transpose=2).key_signature_changes]
    assert up_a_tone == ["F Major", "C Major"]  # E flat and B flat major a tone up
    minor = scale_with_signature("B minor")
    assert [pretty_midi.key_number_to_key_name(k.key_number)
            for k in beat_grid(minor, transpose=-3).key_signature_changes] == ["G# minor"]  # fmt: skip


def file_timing(path):
    """``([(tick, beats a minute)], [(tick, numerator, denominator)], ticks per quarter)`` of a MIDI file, read with
    mido (not pretty_midi, which the code under test writes with)."""
    midi = mido.MidiFile(str(path))
    tempi, meters, now = [], [], 0
    for message in mido.merge_tracks(midi.tracks):
        now += message.time
        if message.type == "set_tempo":
            tempi.append((now, round(mido.tempo2bpm(message.tempo), 2)))
        elif message.type == "time_signature":
            meters.append((now, message.numerator, message.denominator))
    return tempi, meters, midi.ticks_per_beat


def test_keep_timing_gives_a_file_its_sources_tempo_and_meter_and_keeps_its_seconds(tmp_path):
    waltz(tmp_path / "source.mid", tempo=90.0, meter=(6, 8))
    written = waltz(tmp_path / "written.mid", tempo=120.0, meter=None)  # as a model's file: 120 a minute
    keep_timing(tmp_path / "written.mid", beat_grid(tmp_path / "source.mid"))
    tempi, meters, _ = file_timing(tmp_path / "written.mid")
    assert [bpm for _, bpm in tempi] == [pytest.approx(90, abs=0.01)] and [m[1:] for m in meters] == [(6, 8)]
    again = pretty_midi.PrettyMIDI(str(tmp_path / "written.mid"))
    for old, new in zip(written.instruments, again.instruments, strict=True):
        assert [(n.pitch, n.start, n.end) for n in new.notes] == [
            (n.pitch, pytest.approx(n.start, abs=1e-3), pytest.approx(n.end, abs=1e-3)) for n in old.notes]
    keep_timing(tmp_path / "written.mid", beat_grid(tmp_path / "source.mid", meter="3/4"))  # a meter asked for wins
    assert [m[1:] for m in file_timing(tmp_path / "written.mid")[1]] == [(3, 4)]
    (tmp_path / "not.mid").write_bytes(b"MThd")
    with pytest.raises(ValueError, match="not.mid: not a readable MIDI file"):
        beat_grid(tmp_path / "not.mid")


def changing(path, ticks: int = 480) -> None:
    """Four bars: 4/4 at 60, then 3/4 at 90 from bar 3, then 100 a minute from bar 4, a note on each downbeat."""
    track = mido.MidiTrack([mido.MetaMessage("time_signature", numerator=4, denominator=4, time=0),
                            mido.MetaMessage("set_tempo", tempo=mido.bpm2tempo(60), time=0)])  # fmt: skip
    for bar, length in enumerate([4, 4, 3, 3]):
        if bar == 2:
            track += [mido.MetaMessage("time_signature", numerator=3, denominator=4, time=0),
                      mido.MetaMessage("set_tempo", tempo=mido.bpm2tempo(90), time=0)]  # fmt: skip
        if bar == 3:
            track.append(mido.MetaMessage("set_tempo", tempo=mido.bpm2tempo(100), time=0))
        track += [mido.Message("note_on", note=60 + bar, velocity=80, time=0),
                  mido.Message("note_off", note=60 + bar, velocity=0, time=length * ticks)]  # fmt: skip
    midi = mido.MidiFile(ticks_per_beat=ticks)
    midi.tracks.append(track)
    midi.save(str(path))


def test_every_tempo_and_meter_change_of_the_source_is_kept_or_cut_where_a_continuation_leaves_it(tmp_path):
    changing(tmp_path / "source.mid")  # bars start at 0, 4, 8 s (60 a minute), then 10 s (3/4 at 90)
    waltz(tmp_path / "written.mid", tempo=120.0, meter=None)
    keep_timing(tmp_path / "written.mid", beat_grid(tmp_path / "source.mid"))
    tempi, meters, ticks = file_timing(tmp_path / "written.mid")
    assert [(tick / ticks, bpm) for tick, bpm in tempi] == [(0, 60), (8, 90), (11, 100)]  # in quarters
    assert [(tick / ticks, n, d) for tick, n, d in meters] == [(0, 4, 4), (8, 3, 4)]
    keep_timing(tmp_path / "written.mid", beat_grid(tmp_path / "source.mid", until=5.0))  # continued after 5 s
    tempi, meters, ticks = file_timing(tmp_path / "written.mid")
    assert [bpm for _, bpm in tempi] == [60] and [m[1:] for m in meters] == [(4, 4)]


def test_a_pickup_is_a_short_first_bar_and_the_score_draws_it_as_an_upbeat(tmp_path):
    """A hymn tune in 3/4 at 90 with a one-beat upbeat: G | C' - B | C' - - | D'."""
    tune = pretty_midi.PrettyMIDI(initial_tempo=90)
    line = pretty_midi.Instrument(0, name="Tune")
    for start, length, pitch in [(0, 1, 67), (1, 2, 72), (3, 1, 71), (4, 3, 72), (7, 1, 74)]:
        line.notes.append(pretty_midi.Note(80, pitch, start * QUARTER, (start + length) * QUARTER))
    tune.instruments.append(line)
    tune.time_signature_changes = [pretty_midi.TimeSignature(3, 4, 0.0)]
    tune.write(str(tmp_path / "tune.mid"))  # as music21 writes an upbeat: nothing marks it
    keep_timing(tmp_path / "tune.mid", beat_grid(tmp_path / "tune.mid", pickup=1))
    _, meters, ticks = file_timing(tmp_path / "tune.mid")
    assert [(tick / ticks, n, d) for tick, n, d in meters] == [(0, 1, 4), (1, 3, 4)]  # as MuseScore writes one
    assert pickup_quarters(pretty_midi.PrettyMIDI(str(tmp_path / "tune.mid"))) == 1.0
    path = write_musicxml(pretty_midi.PrettyMIDI(str(tmp_path / "tune.mid")), tmp_path / "tune.musicxml")
    measures = ElementTree.parse(path).getroot().find("part").findall("measure")
    assert [(m.get("number"), m.get("implicit")) for m in measures[:3]] == [("0", "yes"), ("1", "no"), ("2", "no")]
    assert [(m.find("attributes/time/beats").text, m.find("attributes/time/beat-type").text)
            for m in measures if m.find("attributes/time") is not None] == [("3", "4")]  # fmt: skip
    assert read_parts(path)[0]["Tune"] == [
        (67, 0.0, 1.0), (72, 1.0, 2.0), (71, 3.0, 1.0), (72, 4.0, 3.0), (74, 7.0, 1.0)]


def test_timed_keeps_drums_bends_and_controllers_at_their_seconds():
    midi = pretty_midi.PrettyMIDI()
    drums = pretty_midi.Instrument(0, is_drum=True, name="Drums")
    drums.notes = [pretty_midi.Note(100, 36, 0.25, 0.3)]
    lead = pretty_midi.Instrument(81, name="Lead")
    lead.notes = [pretty_midi.Note(90, 72, 0.0, 1.0)]
    lead.pitch_bends = [pretty_midi.PitchBend(2000, 0.5)]
    lead.control_changes = [pretty_midi.ControlChange(64, 127, 0.1)]
    midi.instruments += [drums, lead]
    copy = timed(midi, beat_grid(waltz(), meter="3/4"))
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

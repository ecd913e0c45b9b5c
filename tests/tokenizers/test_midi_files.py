"""The one MIDI reader against an independent one: pretty_midi (its own mido parse, tick table and note pairing).

Where a file leaves no choice the two agree to the bit; where pretty_midi chooses otherwise (a
note-on while the pitch sounds, notes of length 0, tempo changes outside the first track) the
reader follows its documented rules, checked on notes worked out by hand.
"""

from __future__ import annotations

import collections
import contextlib
import pickle
from pathlib import Path

import mido
import numpy as np
import pretty_midi
import pytest

from multimodal.tokenizers.midi_files import UnusableMidi, notes_from_midi, read_midi_notes


def reference(path: Path, include_drums: bool = False) -> np.ndarray:
    """pretty_midi's reading of the file (merged and pedal-applied as the reader does)."""
    return notes_from_midi(pretty_midi.PrettyMIDI(str(path)), include_drums)


def write_pretty(path: Path, *instruments) -> Path:
    """A file written by pretty_midi from ``(program, is_drum, [(pitch, start, end, velocity)], [(time, pedal)])``."""
    midi = pretty_midi.PrettyMIDI(initial_tempo=97.0)
    for program, is_drum, notes, pedal in instruments:
        instrument = pretty_midi.Instrument(program=program, is_drum=is_drum)
        instrument.notes = [pretty_midi.Note(v, p, s, e) for p, s, e, v in notes]
        instrument.control_changes = [pretty_midi.ControlChange(64, value, time) for time, value in pedal]
        midi.instruments.append(instrument)
    midi.write(str(path))
    return path


def write_mido(path: Path, *tracks: list[tuple[int, mido.Message]], ticks_per_beat: int = 480) -> Path:
    """A file written event by event: each track a list of ``(absolute tick, message)`` in file order."""
    midi = mido.MidiFile(ticks_per_beat=ticks_per_beat)
    for events in tracks:
        track, last = mido.MidiTrack(), 0
        for tick, message in events:
            track.append(message.copy(time=tick - last))
            last = tick
        midi.tracks.append(track)
    midi.save(str(path))
    return path


def on(pitch: int, velocity: int = 80, channel: int = 0) -> mido.Message:
    return mido.Message("note_on", note=pitch, velocity=velocity, channel=channel)


def off(pitch: int, channel: int = 0) -> mido.Message:
    return mido.Message("note_off", note=pitch, velocity=0, channel=channel)


def control(value: int, channel: int = 0) -> mido.Message:
    """A sustain-pedal control change."""
    return mido.Message("control_change", control=64, value=value, channel=channel)


def tempo(microseconds_per_beat: int) -> mido.MetaMessage:
    return mido.MetaMessage("set_tempo", tempo=microseconds_per_beat)


def test_the_reader_equals_pretty_midi_to_the_bit_where_a_file_leaves_no_choice(tmp_path, chorale_files):
    pedal = write_pretty(tmp_path / "pedal.mid",
                         (0, False, [(60, 0.0, 0.5, 80), (62, 0.5, 0.6, 70), (60, 1.5, 1.6, 80)],
                          [(0.25, 100), (1.0, 127), (2.0, 0)]),
                         (19, False, [(72, 0.5, 0.7, 90)], []), (0, True, [(36, 0.0, 0.1, 100)], [(0.0, 127)]))  # fmt: skip
    # Tempo changes at tick 0 replace the first; one repeating the tempo changes nothing. Two channels,
    # a pedal on one, drums, and a note-off with nothing sounding.
    channels = write_mido(tmp_path / "tempi_channels.mid",
                          [(0, tempo(400_000)), (0, tempo(600_000)), (100, tempo(300_000)), (200, tempo(300_000)),
                           (333, tempo(512_345)), (5000, tempo(700_000))],
                          [(0, control(127, 1)), (0, on(60)), (10, on(62, 70, 1)), (150, off(60)), (300, off(62, 1)),
                           (310, control(0, 1)), (400, on(64, 90, 1)), (401, off(64, 1)), (500, on(36, 100, 9)),
                           (510, off(36, 9)), (1000, on(65)), (12_345, off(65)), (20_000, off(65))])  # fmt: skip
    files = [pedal, channels, *chorale_files]
    for file in files:
        for include_drums in (False, True):
            ours = read_midi_notes(file, include_drums)
            assert ours.dtype == np.float64 and ours.shape[1] == 4
            np.testing.assert_array_equal(ours, reference(file, include_drums), err_msg=f"{file} drums={include_drums}")
    assert len(read_midi_notes(files[0], include_drums=True)) == len(read_midi_notes(files[0])) + 1
    assert read_midi_notes(files[0])[0, 2] == pytest.approx(1.5, abs=0.01)  # the pedal held C4 until it was struck again


def test_where_pretty_midi_chooses_otherwise_the_reader_follows_its_rules(tmp_path):
    beat = 0.5  # 120 bpm, 480 ticks a beat: tick t is t / 960 s
    cases = {
        # A note-off ends the earliest sounding note of its pitch (first in, first out); pretty_midi ends both.
        "restruck": ([[(0, on(60, 70)), (240, on(60, 90)), (480, off(60)), (720, off(60))]],
                     [(60, 0.0, beat, 70), (60, 0.25, 0.75, 90)], [(60, 0.0, beat, 70), (60, 0.25, beat, 90)]),
        # A note-on and note-off at one tick: a note of length 0; pretty_midi drops it.
        "zero_length": ([[(0, on(60)), (0, off(60)), (240, on(62)), (480, off(62))]],
                        [(60, 0.0, 0.0, 80), (62, 0.25, beat, 80)], [(62, 0.25, beat, 80)]),
        # Tempo changes count in any track; pretty_midi reads the first track's only.
        "tempo_in_track_2": ([[(0, tempo(500_000))],
                              [(0, on(60)), (480, off(60)), (480, tempo(250_000)), (960, on(62)), (1440, off(62))]],
                             [(60, 0.0, beat, 80), (62, 0.75, 1.0, 80)], [(60, 0.0, beat, 80), (62, 1.0, 1.5, 80)]),
        # Agreed: a note never ended is dropped, a note-off with nothing sounding is ignored.
        "dangling": ([[(0, off(61)), (0, on(60)), (240, on(64)), (480, off(64))]], [(64, 0.25, beat, 80)],
                     [(64, 0.25, beat, 80)]),
    }  # fmt: skip
    for name, (tracks, ours, theirs) in cases.items():
        path = write_mido(tmp_path / f"{name}.mid", *tracks)
        np.testing.assert_allclose(read_midi_notes(path), np.array(ours).reshape(-1, 4), atol=1e-12, err_msg=name)
        with pytest.warns(RuntimeWarning) if name == "tempo_in_track_2" else contextlib.nullcontext():  # its own warning
            np.testing.assert_allclose(reference(path), np.array(theirs).reshape(-1, 4), atol=1e-12, err_msg=name)


def test_files_that_cannot_be_read_are_named_with_the_reason(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_midi_notes(tmp_path / "absent.mid")
    with pytest.raises(IsADirectoryError, match="a folder, not a MIDI file"):
        read_midi_notes(tmp_path)
    for name, content in {"empty.mid": b"", "truncated.mid": b"MThd\x00\x00", "text.mid": b"not music\n" * 10,
                          "random.mid": bytes(range(256)) * 4}.items():  # fmt: skip
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(UnusableMidi) as refused:
            notes_from_midi(path)
        assert str(refused.value).startswith(f"{path}: not a readable MIDI file (")
        assert refused.value.reason.startswith("not a readable MIDI file (") and refused.value.path == path
        assert isinstance(refused.value, ValueError) and "\n" not in str(refused.value)
    again = pickle.loads(pickle.dumps(refused.value))  # crosses process boundaries intact
    assert (str(again), again.reason) == (str(refused.value), refused.value.reason)


def test_notes_from_midi_reads_paths_with_the_reader_and_takes_pretty_midi_objects(tmp_path, chorale_files):
    path = chorale_files[0]
    np.testing.assert_array_equal(notes_from_midi(path), read_midi_notes(path))
    np.testing.assert_array_equal(notes_from_midi(str(path)), read_midi_notes(path))
    np.testing.assert_array_equal(notes_from_midi(pretty_midi.PrettyMIDI(str(path))), read_midi_notes(path))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Tempo, Key or Time signature", "ignore:skipping Bach chorale")
def test_every_chorale_and_music21_test_file_equals_pretty_midi_or_needs_a_documented_choice():
    import music21

    from multimodal.data.music import cache_root, load_bach_chorales

    folder = cache_root() / "bach_chorales" / "midi"
    files = [folder / f"{name}.mid" for name in load_bach_chorales().names]
    files += sorted((Path(music21.__file__).parent / "midi" / "testPrimitive").glob("*.mid"))
    differing = {}
    for file in files:
        ours, theirs = read_midi_notes(file, include_drums=True), reference(file, include_drums=True)
        if ours.shape != theirs.shape or not np.array_equal(ours, theirs):
            differing[file.name] = _choices(file)
    assert len(files) > 360 and len(differing) < 10, differing
    assert all(differing.values()), differing  # each one a file where pretty_midi chose otherwise


def _choices(path: Path) -> set[str]:
    """Which of the documented choices a file needs, from its raw events."""
    found = set()
    midi = mido.MidiFile(str(path))
    for index, track in enumerate(midi.tracks):
        tick, sounding = 0, collections.defaultdict(list)
        for message in track:
            tick += message.time
            if message.type == "set_tempo" and index > 0:
                found.add("tempo outside the first track")
            elif message.type == "note_on" and message.velocity > 0:
                if sounding[message.channel, message.note]:
                    found.add("note-on while the pitch sounds")
                sounding[message.channel, message.note].append(tick)
            elif (message.type in ("note_on", "note_off") and sounding[message.channel, message.note]
                  and sounding[message.channel, message.note].pop(0) == tick):
                found.add("note of length 0")
    return found



def test_the_readers_names_still_import_from_the_tokenizer_module_with_a_warning():
    from multimodal.tokenizers import midi, midi_files

    assert midi.notes_from_midi is notes_from_midi  # the tokenizer's own import: no warning
    for name in ("UnusableMidi", "apply_sustain_pedal", "check_notes"):
        with pytest.warns(DeprecationWarning, match=rf"midi\.{name} moved to multimodal\.tokenizers\.midi_files"):
            assert getattr(midi, name) is getattr(midi_files, name)

"""Tests of the performance-event MIDI tokenizer.

References are independent of the code under test: notes read back from real MIDI files by
pretty_midi, end times worked out by hand for pedal / tempo cases, a plain-Python re-statement
of the encoding rules, and MidiTok's MIDILike for pitch content. Measured round trip over all 349
convertible Bach chorales: see ``docs/music.md`` ("Tokenizer round trip") and the slow test below.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import mido
import numpy as np
import pretty_midi
import pytest

from multimodal.tokenizers.base import Tokenizer
from multimodal.tokenizers.midi import MidiTokenizer, MidiTokenizerConfig
from multimodal.tokenizers.midi_files import notes_from_midi

STEP = 0.01
TOKENIZER = MidiTokenizer()


# ---------------------------------------------------------------------------- helpers
def make_midi(*instruments: tuple[int, bool, list[tuple[int, float, float, int]], list[tuple[float, int]]]):
    """PrettyMIDI from ``(program, is_drum, [(pitch, start, end, velocity)], [(time, pedal value)])``."""
    midi = pretty_midi.PrettyMIDI()
    for program, is_drum, notes, pedal in instruments:
        instrument = pretty_midi.Instrument(program=program, is_drum=is_drum)
        instrument.notes = [pretty_midi.Note(v, p, s, e) for p, s, e, v in notes]
        instrument.control_changes = [pretty_midi.ControlChange(64, value, time) for time, value in pedal]
        midi.instruments.append(instrument)
    return midi


def through_file(midi: pretty_midi.PrettyMIDI, path: Path) -> pretty_midi.PrettyMIDI:
    """Writes and re-reads a MIDI object, as a user's file would arrive."""
    midi.write(str(path))
    return pretty_midi.PrettyMIDI(str(path))


def decoded_notes(ids: list[int], tmp_path: Path) -> list[pretty_midi.Note]:
    """Notes of the decoded MIDI after writing it to a file and reading it back, sorted by (start, pitch)."""
    midi = through_file(TOKENIZER.decode(ids), tmp_path / "decoded.mid")
    return sorted((n for i in midi.instruments for n in i.notes), key=lambda n: (n.start, n.pitch))


def rows(notes: list[pretty_midi.Note]) -> np.ndarray:
    """``(num_notes, 3)`` array of ``[pitch, start, end]``."""
    return np.array([(n.pitch, n.start, n.end) for n in notes]).reshape(-1, 3)


def assert_well_formed(ids: list[int]) -> None:
    """Every NOTE_ON opens a silent pitch and every NOTE_OFF closes a sounding one; all close at the end."""
    sounding: set[int] = set()
    for token in ids:
        kind, pitch = TOKENIZER.token_to_event(token)
        if kind == "NOTE_ON":
            assert pitch not in sounding, f"NOTE_ON_{pitch} while it sounds"
            sounding.add(pitch)
        elif kind == "NOTE_OFF":
            assert pitch in sounding, f"NOTE_OFF_{pitch} without NOTE_ON"
            sounding.remove(pitch)
    assert not sounding


def expected_sounding_notes(notes: list[pretty_midi.Note]) -> list[tuple[int, float, float, int]]:
    """What one piano can sound: unisons merged (longest, loudest), a re-strike ends the earlier note."""
    groups: dict[tuple[int, float], tuple[float, int]] = {}
    for note in notes:
        key = (note.pitch, round(note.start, 6))
        end, velocity = groups.get(key, (0.0, 0))
        groups[key] = (max(end, note.end), max(velocity, note.velocity))
    ordered = sorted(groups.items())
    result = []
    for i, ((pitch, start), (end, velocity)) in enumerate(ordered):
        if i + 1 < len(ordered) and ordered[i + 1][0][0] == pitch:
            end = min(end, ordered[i + 1][0][1])
        result.append((pitch, start, end, velocity))
    return sorted(result, key=lambda n: (n[1], n[0]))


def reference_notes_in_steps(notes: np.ndarray, tokenizer) -> list[tuple[int, int, int, int]]:
    """Plain-Python statement of the note rules: ``(pitch, onset, offset, velocity bin)`` in steps,
    unisons merged (longest, loudest), a re-strike ending the sounding note; sorted by pitch, onset."""
    step = tokenizer.config.time_step
    merged: dict[tuple[int, int], list[int]] = {}
    for pitch, start, end, velocity in notes:
        onset = round(max(start, 0.0) / step)
        offset = max(round(end / step), onset + 1)
        velocity_bin = tokenizer.velocity_to_bin(round(velocity))
        old = merged.get((int(pitch), onset), [0, 0])
        merged[int(pitch), onset] = [max(old[0], offset), max(old[1], velocity_bin)]
    keys = sorted(merged)
    result = []
    for i, (pitch, onset) in enumerate(keys):
        offset, velocity_bin = merged[pitch, onset]
        if i + 1 < len(keys) and keys[i + 1][0] == pitch:
            offset = min(offset, keys[i + 1][1])
        result.append((pitch, onset, offset, velocity_bin))
    return result


def reference_encode(notes: np.ndarray, tokenizer: MidiTokenizer) -> list[int]:
    """Plain-Python statement of the encoding rules, one note at a time."""
    max_shift = tokenizer.config.num_time_shifts
    events = []  # (time, 0 = off / 1 = on, pitch, velocity bin)
    for pitch, onset, offset, velocity_bin in reference_notes_in_steps(notes, tokenizer):
        events += [(onset, 1, pitch, velocity_bin), (offset, 0, pitch, velocity_bin)]
    ids, now, current_bin = [], 0, None
    for time, is_on, pitch, velocity_bin in sorted(events):
        while time - now > 0:
            shift = min(time - now, max_shift)
            ids.append(tokenizer.event_to_token("TIME_SHIFT", shift))
            now += shift
        if is_on and velocity_bin != current_bin:
            ids.append(tokenizer.event_to_token("VELOCITY", velocity_bin))
            current_bin = velocity_bin
        ids.append(tokenizer.event_to_token("NOTE_ON" if is_on else "NOTE_OFF", pitch))
    return ids


def reader_notes(path: Path) -> list[pretty_midi.Note]:
    """The notes of a file as the one MIDI reader gives them (tested against pretty_midi in test_midi_files.py)."""
    return [pretty_midi.Note(int(v), int(p), s, e) for p, s, e, v in notes_from_midi(path)]


def assert_round_trip(path: Path, tmp_path: Path) -> int:
    """Asserts the documented round trip for one real file; returns the number of reference notes."""
    reference = reader_notes(path)
    ids = TOKENIZER.encode(path)
    assert_well_formed(ids)
    expected = expected_sounding_notes(reference)
    decoded = decoded_notes(ids, tmp_path)
    assert len(decoded) == len(expected)
    bin_width = 127 / TOKENIZER.config.num_velocity_bins
    for (pitch, start, end, velocity), note in zip(expected, decoded, strict=True):
        assert note.pitch == pitch
        assert abs(note.start - start) <= STEP
        assert abs(note.end - end) <= STEP
        assert abs(note.velocity - velocity) < bin_width
    return len(reference)


# ---------------------------------------------------------------------------- vocabulary
def test_vocabulary_has_specials_first_then_388_events():
    assert isinstance(TOKENIZER, Tokenizer)
    assert TOKENIZER.vocab_size == 3 + 128 + 128 + 100 + 32
    assert (TOKENIZER.pad_id, TOKENIZER.bos_id, TOKENIZER.eos_id) == (0, 1, 2)
    assert TOKENIZER.token_names([0, 1, 2, 3, 3 + 127, 3 + 128, 259, 358, 359, 390]) == [
        "PAD", "BOS", "EOS", "NOTE_ON_0", "NOTE_ON_127", "NOTE_OFF_0",
        "TIME_SHIFT_1", "TIME_SHIFT_100", "VELOCITY_0", "VELOCITY_31",
    ]  # fmt: skip


def test_token_to_event_and_event_to_token_are_inverse_over_the_whole_vocabulary():
    for token in range(TOKENIZER.vocab_size):
        assert TOKENIZER.event_to_token(*TOKENIZER.token_to_event(token)) == token
    with pytest.raises(ValueError, match="outside"):
        TOKENIZER.token_to_event(TOKENIZER.vocab_size)


def test_config_sets_the_vocabulary_size():
    tokenizer = MidiTokenizer(MidiTokenizerConfig(time_step=0.02, num_time_shifts=50, num_velocity_bins=16))
    assert tokenizer.vocab_size == 3 + 256 + 50 + 16
    with pytest.raises(ValueError, match="num_velocity_bins"):
        MidiTokenizerConfig(num_velocity_bins=0)


def test_save_then_load_gives_identical_ids(tmp_path, chorale_files):
    tokenizer = MidiTokenizer(MidiTokenizerConfig(time_step=0.02, num_time_shifts=50, num_velocity_bins=16))
    tokenizer.save(tmp_path / "midi.json")
    loaded = MidiTokenizer.load(tmp_path / "midi.json")
    assert loaded.config == tokenizer.config
    assert loaded.encode(chorale_files[0]) == tokenizer.encode(chorale_files[0])


# ---------------------------------------------------------------------------- real files
def test_round_trip_on_real_chorales_keeps_pitch_timing_and_velocity(chorale_files, tmp_path):
    assert sum(assert_round_trip(path, tmp_path) for path in chorale_files) > 500


def test_encode_accepts_path_prettymidi_and_note_array_alike(chorale_files):
    path = chorale_files[0]
    midi = pretty_midi.PrettyMIDI(str(path))
    from_path = TOKENIZER.encode(path)
    assert TOKENIZER.encode(str(path)) == from_path
    assert TOKENIZER.encode(midi) == from_path
    assert TOKENIZER.encode(notes_from_midi(midi)) == from_path
    with pytest.raises(TypeError, match="note array"):
        TOKENIZER.encode(42)


def test_pitch_content_matches_miditok_midilike(chorale_files):
    miditok = pytest.importorskip("miditok")
    config = miditok.TokenizerConfig(
        pitch_range=(0, 127), use_programs=True, one_token_stream_for_programs=True
    )
    theirs = miditok.MIDILike(config).encode(chorale_files[1])
    their_pitches = Counter(int(t.split("_")[1]) for t in theirs.tokens if t.startswith("NoteOn_"))
    raw = [n for i in pretty_midi.PrettyMIDI(str(chorale_files[1])).instruments for n in i.notes]
    unisons = Counter(n.pitch for n in raw) - Counter(p for p, *_ in expected_sounding_notes(raw))
    ours = Counter(TOKENIZER.token_to_event(t).value for t in TOKENIZER.encode(chorale_files[1]) if t < 131)
    assert ours + unisons == their_pitches  # MIDILike keeps doubled voices, one piano cannot


@pytest.mark.slow
def test_round_trip_on_every_bach_chorale(tmp_path):
    from multimodal.data.music import cache_root, load_bach_chorales

    corpus = load_bach_chorales()
    folder = cache_root() / "bach_chorales" / "midi"
    assert len(corpus) == 349
    total = sum(assert_round_trip(folder / f"{name}.mid", tmp_path) for name in corpus.names)
    assert total > 90_000


# ---------------------------------------------------------------------------- the encoding rules
def test_vectorised_encoding_equals_plain_python_rules_on_random_notes():
    rng = np.random.default_rng(0)
    for tokenizer in (TOKENIZER, MidiTokenizer(MidiTokenizerConfig(time_step=0.025, num_time_shifts=7))):
        for _ in range(50):
            num_notes = int(rng.integers(0, 40))
            start = rng.uniform(0, 5, num_notes).round(rng.integers(1, 4))
            notes = np.stack(
                [rng.integers(58, 64, num_notes), start, start + rng.exponential(0.3, num_notes),
                 rng.integers(1, 128, num_notes)], axis=1,
            )  # fmt: skip
            assert tokenizer.encode_notes(notes) == reference_encode(notes, tokenizer)


def test_sustain_pedal_extends_notes_to_pedal_up_or_restrike(tmp_path):
    pedal = [(0.25, 100), (1.0, 127), (2.0, 0)]  # down at 0.25, still down at 1.0, up at 2.0
    piano = [
        (50, 0.0, 0.2, 80),  # released before the pedal goes down: unchanged
        (60, 0.0, 0.5, 80),  # released under the pedal, C4 struck again at 1.5: ends at 1.5
        (64, 1.0, 1.2, 80),  # released under the pedal: ends at pedal up, 2.0
        (60, 1.5, 1.6, 80),  # released under the pedal: ends at 2.0
        (67, 2.5, 3.0, 80),  # after the pedal: unchanged
    ]
    organ = [(72, 0.5, 0.7, 80)]  # another instrument, no pedal of its own: unchanged
    midi = through_file(make_midi((0, False, piano, pedal), (19, False, organ, [])), tmp_path / "pedal.mid")
    expected = [
        (50, 0.0, 0.2),
        (60, 0.0, 1.5),
        (72, 0.5, 0.7),
        (64, 1.0, 2.0),
        (60, 1.5, 2.0),
        (67, 2.5, 3.0),
    ]
    notes = notes_from_midi(midi)
    np.testing.assert_allclose(notes[:, :3], np.array(expected), atol=1e-3)
    decoded = decoded_notes(TOKENIZER.encode(midi), tmp_path)
    assert [n.pitch for n in decoded] == [p for p, _, _ in expected]
    np.testing.assert_allclose(
        [(n.start, n.end) for n in decoded], [(s, e) for _, s, e in expected], atol=STEP
    )


def test_overlapping_same_pitch_is_ended_by_the_restrike_and_unisons_merge(tmp_path):
    voice_a = [(60, 0.0, 1.0, 70), (62, 2.0, 3.0, 50)]
    voice_b = [(60, 0.5, 1.5, 70), (62, 2.0, 2.5, 90)]  # C4 struck while sounding; D4 doubled
    midi = make_midi((0, False, voice_a, []), (0, False, voice_b, []))
    ids = TOKENIZER.encode(midi)
    assert_well_formed(ids)
    decoded = decoded_notes(ids, tmp_path)
    np.testing.assert_allclose(rows(decoded), [(60, 0.0, 0.5), (60, 0.5, 1.5), (62, 2.0, 3.0)], atol=1e-3)
    assert abs(decoded[2].velocity - 90) <= 2  # the louder of the doubled voices


def test_long_rest_is_written_as_several_shifts_and_keeps_its_length(tmp_path):
    midi = make_midi((0, False, [(60, 0.0, 0.1, 64), (62, 3.55, 3.6, 64)], []))
    names = TOKENIZER.token_names(TOKENIZER.encode(midi))
    rest = names[names.index("NOTE_OFF_60") + 1 : names.index("NOTE_ON_62")]
    assert rest == ["TIME_SHIFT_100", "TIME_SHIFT_100", "TIME_SHIFT_100", "TIME_SHIFT_45"]
    decoded = decoded_notes(TOKENIZER.encode(midi), tmp_path)
    np.testing.assert_allclose(rows(decoded), [(60, 0.0, 0.1), (62, 3.55, 3.6)], atol=1e-3)


def test_extreme_velocities_survive_and_velocity_is_written_only_when_the_bin_changes(tmp_path):
    midi = make_midi((0, False, [(60, 0.0, 0.5, 1), (62, 1.0, 1.5, 127), (64, 2.0, 2.5, 125)], []))
    names = TOKENIZER.token_names(TOKENIZER.encode(midi))
    assert [n for n in names if n.startswith("VELOCITY")] == [
        "VELOCITY_0",
        "VELOCITY_31",
    ]  # 127 and 125 share
    velocities = [n.velocity for n in decoded_notes(TOKENIZER.encode(midi), tmp_path)]
    assert abs(velocities[0] - 1) < 4 and abs(velocities[1] - 127) < 4 and abs(velocities[2] - 125) < 4


def test_tempo_change_is_respected_in_seconds(tmp_path):
    file = mido.MidiFile(ticks_per_beat=480)
    track = mido.MidiTrack()
    file.tracks.append(track)
    track.append(mido.MetaMessage("set_tempo", tempo=500_000, time=0))  # 120 bpm: a beat is 0.5 s
    track.append(mido.Message("note_on", note=60, velocity=80, time=0))
    track.append(mido.Message("note_off", note=60, velocity=0, time=480))  # 0.5 s
    track.append(mido.MetaMessage("set_tempo", tempo=1_000_000, time=480))  # 1.0 s: 60 bpm from here
    track.append(mido.Message("note_on", note=62, velocity=80, time=0))
    track.append(mido.Message("note_off", note=62, velocity=0, time=480))  # 1.0 + 1 beat = 2.0 s
    track.append(mido.Message("note_on", note=64, velocity=80, time=0))
    track.append(mido.Message("note_off", note=64, velocity=0, time=960))  # 2.0 + 2 beats = 4.0 s
    file.save(tmp_path / "tempo.mid")
    decoded = decoded_notes(TOKENIZER.encode(tmp_path / "tempo.mid"), tmp_path)
    np.testing.assert_allclose(rows(decoded), [(60, 0.0, 0.5), (62, 1.0, 2.0), (64, 2.0, 4.0)], atol=1e-3)


def test_empty_and_drum_only_files_encode_to_nothing_and_decode_to_valid_midi(tmp_path):
    assert TOKENIZER.encode(make_midi()) == []
    drums = make_midi((0, True, [(36, 0.0, 0.1, 100), (38, 0.5, 0.6, 100)], []))
    drums = through_file(drums, tmp_path / "drums.mid")
    assert TOKENIZER.encode(drums) == []
    assert len(notes_from_midi(drums, include_drums=True)) == 2
    assert decoded_notes([], tmp_path) == []


def test_pitch_outside_midi_range_is_refused_with_a_hint():
    with pytest.raises(ValueError, match=r"0\.\.127"):
        TOKENIZER.encode_notes(np.array([[128, 0.0, 1.0, 64]]))


# ---------------------------------------------------------------------------- decoding bad samples
def test_decoding_a_badly_formed_sequence_gives_the_documented_notes(tmp_path):
    t = TOKENIZER.event_to_token
    ids = [
        t("NOTE_OFF", 60),  # nothing sounds: ignored
        t("VELOCITY", 31), t("NOTE_ON", 61), t("NOTE_ON", 61),  # second NOTE_ON at the same time: ignored
        t("PAD"), t("BOS"), t("TIME_SHIFT", 10), t("EOS"),  # specials are skipped
        t("NOTE_ON", 63), t("NOTE_OFF", 63),  # zero length: dropped
        t("NOTE_ON", 61),  # re-strike: ends the first 61 at 0.1 s
        t("TIME_SHIFT", 20), t("NOTE_ON", 62),  # never released: closed one step later, at the end
    ]  # fmt: skip
    decoded = decoded_notes(ids, tmp_path)
    np.testing.assert_allclose(rows(decoded), [(61, 0.0, 0.1), (61, 0.1, 0.3), (62, 0.3, 0.31)], atol=1e-3)
    assert decoded[0].velocity == 126


def test_decoding_random_ids_always_gives_a_readable_midi_file(tmp_path):
    rng = np.random.default_rng(1)
    for length in (1, 10, 300, 2000):
        ids = rng.integers(0, TOKENIZER.vocab_size, length)
        path = TOKENIZER.decode_to_file(ids, tmp_path / f"random{length}.mid")
        midi = pretty_midi.PrettyMIDI(str(path))
        for note in (n for i in midi.instruments for n in i.notes):
            assert 0 <= note.pitch <= 127 and 1 <= note.velocity <= 127 and note.end > note.start
    with pytest.raises(ValueError, match="vocabulary"):
        TOKENIZER.decode([TOKENIZER.vocab_size])

"""The parts vocabulary of the note-duration tokenizer, against plain-Python rules, music21's own
parts of real chorales, MidiTok's program-aware TSD and the MIDI files pretty_midi reads back."""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path

import numpy as np
import pretty_midi
import pytest
from test_midi import reference_notes_in_steps
from test_midi_duration import nearest_duration

from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig

SATB = ("Soprano", "Alto", "Tenor", "Bass")
PARTS = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, part_names=SATB, part_programs=(52, 52, 53, 32)))


def reference_encode_parts(notes: np.ndarray, tokenizer: MidiDurationTokenizer) -> list[int]:
    """Plain Python: the single-part rules within each part, then notes by onset, part, pitch."""
    written = []
    for part in range(tokenizer.config.num_parts):
        for pitch, onset, offset, velocity_bin in reference_notes_in_steps(notes[notes[:, 4] == part, :4], tokenizer):
            written.append((onset, part, pitch, offset - onset, velocity_bin))
    ids, now, current_bin = [], 0, None
    for onset, part, pitch, duration, velocity_bin in sorted(written):
        while onset > now:
            shift = min(onset - now, tokenizer.config.num_time_shifts)
            ids.append(tokenizer.event_to_token("TIME_SHIFT", shift))
            now += shift
        if velocity_bin != current_bin:
            ids.append(tokenizer.event_to_token("VELOCITY", velocity_bin))
            current_bin = velocity_bin
        ids += [tokenizer.event_to_token("PITCH", 128 * part + pitch),
                tokenizer.event_to_token("DURATION", nearest_duration(duration, tokenizer))]  # fmt: skip
    return ids


def random_parts(rng: np.random.Generator, num_notes: int, num_parts: int) -> np.ndarray:
    start = rng.uniform(0, 4, num_notes).round(2)
    return np.stack([rng.integers(58, 64, num_notes), start, start + rng.exponential(1.0, num_notes),
                     rng.integers(1, 128, num_notes), rng.integers(0, num_parts, num_notes)], axis=1)  # fmt: skip


def test_layout_and_one_part_is_the_single_part_vocabulary():
    assert PARTS.vocab_size == 3 + 100 + 32 + 4 * 128 + 200
    for token in range(PARTS.vocab_size):
        event = PARTS.token_to_event(token)
        assert PARTS.event_to_token(event.kind, event.value) == token
    one = MidiDurationTokenizer()
    notes = random_parts(np.random.default_rng(1), 30, 3)
    assert one.encode_notes(notes) == one.encode_notes(notes[:, :4])  # parts merged, ids unchanged
    assert one.vocab_size == 463


def test_vectorised_encoding_equals_plain_python_rules_with_parts():
    rng = np.random.default_rng(0)
    for _ in range(60):
        notes = random_parts(rng, int(rng.integers(0, 40)), 4)
        assert PARTS.encode_notes(notes) == reference_encode_parts(notes, PARTS)


def test_a_unison_of_two_voices_is_two_notes_and_an_unknown_part_is_refused():
    notes = np.array([[60, 0.0, 1.0, 80, 0], [60, 0.0, 0.5, 80, 1], [60, 0.0, 0.25, 80, 1]])
    decoded = PARTS.decode_notes(PARTS.encode_notes(notes))
    assert decoded[:, [0, 4]].tolist() == [[60, 0], [60, 1]]  # merged within a part only
    assert decoded[:, 2].tolist() == [1.0, 0.5]
    assert MidiDurationTokenizer().decode_notes(MidiDurationTokenizer().encode_notes(notes)).shape == (1, 4)
    with pytest.raises(ValueError, match="parts must lie in 0..3"):
        PARTS.encode_notes(np.array([[60, 0.0, 1.0, 80, 4]]))


def test_real_chorales_come_back_part_by_part_as_music21_has_them(tmp_path):
    """Notes of each voice from music21's own score (quarter lengths at the marked tempo), through the
    tokens and a MIDI file read back by pretty_midi: one named track per voice, every note in place."""
    from music21 import corpus

    for name in ("bwv269", "bwv347"):
        score = corpus.parse(f"bach/{name}")
        seconds_per_quarter = 0.5  # these chorales carry no tempo mark: music21 plays them at 120 bpm
        notes = [(p.midi, n.offset * seconds_per_quarter, (n.offset + n.quarterLength) * seconds_per_quarter, 90, part)
                 for part, voice in enumerate(score.parts) for n in voice.stripTies().flatten().notes
                 for p in n.pitches]  # fmt: skip
        notes = np.array(notes, dtype=float)
        path = PARTS.decode_to_file(PARTS.encode_notes(notes), tmp_path / f"{name}.mid")
        midi = pretty_midi.PrettyMIDI(str(path))
        assert [(track.name, track.program) for track in midi.instruments] == list(zip(SATB, (52, 52, 53, 32), strict=True))
        for part, track in enumerate(midi.instruments):
            ours = sorted((n.pitch, round(n.start / 0.01), round((n.end - n.start) / 0.01)) for n in track.notes)
            theirs = sorted((int(p), round(s / 0.01), nearest_duration(round(e / 0.01) - round(s / 0.01), PARTS))
                            for p, s, e, _, q in notes if q == part)  # fmt: skip
            assert ours == theirs, f"{name} part {part}"


def test_note_content_per_part_matches_miditok_tsd_with_programs(tmp_path):
    """MidiTok's TSD with one token stream for all programs counts the same (program, pitch) notes."""
    miditok = pytest.importorskip("miditok")
    rng = np.random.default_rng(3)
    notes = random_parts(rng, 80, 4)
    notes[:, 1:3] = np.round(notes[:, 1:3] * 8) / 8  # on MidiTok's beat grid too
    notes[:, 2] = np.maximum(notes[:, 2], notes[:, 1] + 0.125)
    path = PARTS.decode_to_file(PARTS.encode_notes(notes), tmp_path / "parts.mid")
    config = miditok.TokenizerConfig(pitch_range=(0, 127), use_programs=True, one_token_stream_for_programs=True)
    tokens = miditok.TSD(config).encode(path).tokens
    theirs = Counter((int(a.split("_")[1]), int(b.split("_")[1]))
                     for a, b in pairwise(tokens) if a.startswith("Program_") and b.startswith("Pitch_"))  # fmt: skip
    programs = dict(enumerate(PARTS.config.part_programs))
    ours = Counter((programs[e.value // 128], e.value % 128)
                   for e in map(PARTS.token_to_event, PARTS.encode_notes(notes)) if e.kind == "PITCH")  # fmt: skip
    assert ours == theirs


def test_config_checks_and_save_load(tmp_path: Path):
    with pytest.raises(ValueError, match="num_parts"):
        MidiDurationTokenizerConfig(num_parts=0)
    with pytest.raises(ValueError, match="part_names has 2 entries"):
        MidiDurationTokenizerConfig(num_parts=3, part_names=("a", "b"))
    with pytest.raises(ValueError, match="0..127"):
        MidiDurationTokenizerConfig(num_parts=1, part_programs=(128,))
    PARTS.save(tmp_path / "tokenizer.json")
    again = MidiDurationTokenizer.load(tmp_path / "tokenizer.json")
    assert again.config == PARTS.config and again.config.part_name(3) == "Bass"
    assert MidiDurationTokenizerConfig(num_parts=2).part_name(1) == "Part 2"
    # a tokenizer saved before parts existed (its JSON has none of the new fields) loads as the same vocabulary
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"type": "MidiDurationTokenizer", "version": 1, "config": {
        "time_step": 0.01, "num_time_shifts": 100, "num_velocity_bins": 32, "max_duration_steps": 800}}))  # fmt: skip
    loaded = MidiDurationTokenizer.load(old)
    assert loaded.vocab_size == 463 and loaded.config.num_parts == 1 and not loaded.config.controls


def expected_in_steps(notes: np.ndarray, tokenizer: MidiDurationTokenizer) -> list[tuple[int, int, int, int]]:
    """``(part, pitch, onset, length)`` in steps by the plain-Python rules, each part on its own."""
    expected = []
    for part in np.unique(notes[:, 4]).astype(int):
        for pitch, onset, offset, _ in reference_notes_in_steps(notes[notes[:, 4] == part, :4], tokenizer):
            expected.append([part, pitch, onset, nearest_duration(offset - onset, tokenizer)])
    expected.sort()
    for this, after in pairwise(expected):  # a length rounded past the next strike ends there
        if after[:2] == this[:2]:
            this[3] = min(this[3], after[2] - this[2])
    return [tuple(row) for row in expected]


@pytest.mark.slow
def test_round_trip_on_every_piece_of_every_default_collection():
    """Needs ``multimodal data music21`` (the default collections converted); every part, pitch, onset and
    duration comes back on the grid (a note rounded past the next strike of its pitch in its part ends there)."""
    from multimodal.data.music21_collections import DEFAULT_COLLECTIONS
    from multimodal.data.music21_corpus import load_pieces

    pieces = [piece for piece in load_pieces(DEFAULT_COLLECTIONS, warn=False) if len(piece.notes)]
    if len(pieces) < 1000:
        pytest.skip("the default music21 collections are not converted (multimodal data music21)")
    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=16))
    step = tokenizer.config.time_step
    for piece in pieces:
        decoded = tokenizer.decode_notes(tokenizer.encode_notes(piece.notes))
        ours = sorted((int(q), int(p), round(s / step), round((e - s) / step)) for p, s, e, _, q in decoded)
        expected = expected_in_steps(piece.notes, tokenizer)
        assert ours == expected, piece.name

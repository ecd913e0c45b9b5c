"""Tests of the note-duration MIDI tokenizer, with the references of the performance tokenizer's tests.

Notes read back from real MIDI files by pretty_midi, a plain-Python statement of the encoding
rules, and MidiTok's TSD for the pitch and duration content.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pretty_midi
import pytest
from test_midi import (
    expected_sounding_notes,
    make_midi,
    reader_notes,
    reference_notes_in_steps,
    rows,
    through_file,
)

from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig

STEP = 0.01
TOKENIZER = MidiDurationTokenizer()


def decoded_notes(ids, tmp_path: Path, tokenizer: MidiDurationTokenizer = TOKENIZER) -> list[pretty_midi.Note]:
    midi = through_file(tokenizer.decode(ids), tmp_path / "decoded.mid")
    return sorted((n for i in midi.instruments for n in i.notes), key=lambda n: (n.start, n.pitch))


def nearest_duration(steps: int, tokenizer: MidiDurationTokenizer) -> int:
    """The allowed duration closest to ``steps`` (the shorter on a tie), by a plain search."""
    return min(tokenizer.config.duration_steps.tolist(), key=lambda d: (abs(d - steps), d))


def reference_encode(notes: np.ndarray, tokenizer: MidiDurationTokenizer) -> list[int]:
    """Plain-Python statement of the encoding rules, one note at a time."""
    max_shift = tokenizer.config.num_time_shifts
    written = [(onset, pitch, offset - onset, velocity_bin)
               for pitch, onset, offset, velocity_bin in reference_notes_in_steps(notes, tokenizer)]  # fmt: skip
    ids, now, current_bin = [], 0, None
    for onset, pitch, duration, velocity_bin in sorted(written):
        while onset - now > 0:
            shift = min(onset - now, max_shift)
            ids.append(tokenizer.event_to_token("TIME_SHIFT", shift))
            now += shift
        if velocity_bin != current_bin:
            ids.append(tokenizer.event_to_token("VELOCITY", velocity_bin))
            current_bin = velocity_bin
        ids += [tokenizer.event_to_token("PITCH", pitch),
                tokenizer.event_to_token("DURATION", nearest_duration(duration, tokenizer))]  # fmt: skip
    return ids


def assert_round_trip(path: Path, tmp_path: Path) -> int:
    """Every sounding note comes back with its pitch, onset, length (to the duration grid) and loudness."""
    reference = reader_notes(path)
    expected = expected_sounding_notes(reference)
    decoded = decoded_notes(TOKENIZER.encode(path), tmp_path)
    assert len(decoded) == len(expected)
    bin_width = 127 / TOKENIZER.config.num_velocity_bins
    for index, ((pitch, start, end, velocity), note) in enumerate(zip(expected, decoded, strict=True)):
        # The length rounds to the duration grid; a re-strike of the pitch still ends the note.
        length = nearest_duration(round(end / STEP) - round(start / STEP), TOKENIZER) * STEP
        restrike = min((s for p, s, _, _ in expected[index + 1 :] if p == pitch), default=np.inf)
        assert note.pitch == pitch
        assert abs(note.start - start) <= STEP
        assert abs(note.end - min(note.start + length, restrike)) <= STEP
        assert abs(note.velocity - velocity) < bin_width
    return len(reference)


def test_vocabulary_layout_and_inverse_mapping():
    assert TOKENIZER.vocab_size == 3 + 100 + 32 + 128 + 200
    for token in range(TOKENIZER.vocab_size):
        event = TOKENIZER.token_to_event(token)
        assert TOKENIZER.event_to_token(event.kind, event.value) == token
    assert TOKENIZER.token_name(TOKENIZER.event_to_token("DURATION", 400)) == "DURATION_400"
    with pytest.raises(ValueError, match="durations"):
        TOKENIZER.event_to_token("DURATION", 401)


def test_round_trip_on_real_chorales(chorale_files, tmp_path):
    for path in chorale_files:
        assert assert_round_trip(path, tmp_path) > 100


@pytest.mark.slow
def test_round_trip_on_every_bach_chorale(tmp_path):
    from multimodal.data.music import cache_root, load_bach_chorales

    corpus = load_bach_chorales()
    folder = cache_root() / "bach_chorales" / "midi"
    total = sum(assert_round_trip(folder / f"{name}.mid", tmp_path) for name in corpus.names)
    assert total > 90_000


def test_pitch_and_duration_content_match_miditok_tsd(chorale_files):
    miditok = pytest.importorskip("miditok")
    config = miditok.TokenizerConfig(pitch_range=(0, 127), use_programs=True, one_token_stream_for_programs=True)
    theirs = miditok.TSD(config).encode(chorale_files[0])
    their_pitches = Counter(int(t.split("_")[1]) for t in theirs.tokens if t.startswith("Pitch_"))
    raw = [n for i in pretty_midi.PrettyMIDI(str(chorale_files[0])).instruments for n in i.notes]
    unisons = Counter(n.pitch for n in raw) - Counter(p for p, *_ in expected_sounding_notes(raw))
    ours = Counter(e.value for e in map(TOKENIZER.token_to_event, TOKENIZER.encode(chorale_files[0])) if e.kind == "PITCH")
    assert ours + unisons == their_pitches  # TSD keeps doubled voices, one piano cannot
    assert sum(t.startswith("Duration_") for t in theirs.tokens) == sum(their_pitches.values())


def test_vectorised_encoding_equals_plain_python_rules_on_random_notes():
    rng = np.random.default_rng(0)
    small = MidiDurationTokenizer(MidiDurationTokenizerConfig(time_step=0.025, num_time_shifts=7, max_duration_steps=150))
    for tokenizer in (TOKENIZER, small):
        for _ in range(50):
            num_notes = int(rng.integers(0, 40))
            start = rng.uniform(0, 5, num_notes).round(rng.integers(1, 4))
            notes = np.stack(
                [rng.integers(58, 64, num_notes), start, start + rng.exponential(1.5, num_notes),
                 rng.integers(1, 128, num_notes)], axis=1,
            )  # fmt: skip
            assert tokenizer.encode_notes(notes) == reference_encode(notes, tokenizer)


def test_restrike_unison_long_rest_and_long_note(tmp_path):
    voice_a = [(60, 0.0, 1.0, 70), (62, 2.0, 3.0, 50), (64, 7.0, 19.0, 64)]  # E4 longer than 8 s: cut
    voice_b = [(60, 0.5, 1.5, 70), (62, 2.0, 2.5, 90)]  # C4 struck while sounding; D4 doubled
    ids = TOKENIZER.encode(make_midi((0, False, voice_a, []), (0, False, voice_b, [])))
    names = TOKENIZER.token_names(ids)
    assert names[names.index("PITCH_62") + 2 : names.index("PITCH_64")] == [
        "TIME_SHIFT_100", "TIME_SHIFT_100", "TIME_SHIFT_100", "TIME_SHIFT_100", "TIME_SHIFT_100", "VELOCITY_15",
    ]  # fmt: skip
    decoded = decoded_notes(ids, tmp_path)
    np.testing.assert_allclose(rows(decoded), [(60, 0.0, 0.5), (60, 0.5, 1.5), (62, 2.0, 3.0), (64, 7.0, 15.0)],
                               atol=1e-3)  # fmt: skip
    assert abs(decoded[2].velocity - 90) <= 2


def test_save_load_and_config_errors(tmp_path, chorale_files):
    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(time_step=0.02, max_duration_steps=300))
    tokenizer.save(tmp_path / "tok.json")
    again = MidiDurationTokenizer.load(tmp_path / "tok.json")
    assert again.config == tokenizer.config and again.encode(chorale_files[1]) == tokenizer.encode(chorale_files[1])
    with pytest.raises(ValueError, match="MidiDurationTokenizer"):
        from multimodal.tokenizers.midi import MidiTokenizer

        MidiTokenizer().save(tmp_path / "perf.json")
        MidiDurationTokenizer.load(tmp_path / "perf.json")
    with pytest.raises(ValueError, match="max_duration_steps"):
        MidiDurationTokenizerConfig(max_duration_steps=0)


def test_decoding_a_badly_formed_sequence_gives_the_documented_notes(tmp_path):
    t = TOKENIZER.event_to_token
    ids = [
        t("DURATION", 10),  # no pitch before it: ignored
        t("VELOCITY", 31), t("PITCH", 61), t("DURATION", 50),
        t("PITCH", 63), t("TIME_SHIFT", 10),  # a pitch without a duration: dropped
        t("PAD"), t("PITCH", 61), t("DURATION", 20),  # re-strike at 0.1 s: ends the first 61
        t("PITCH", 62), t("EOS"), t("DURATION", 5),  # a special between pitch and duration: dropped
    ]  # fmt: skip
    decoded = decoded_notes(ids, tmp_path)
    np.testing.assert_allclose(rows(decoded), [(61, 0.0, 0.1), (61, 0.1, 0.3)], atol=1e-3)
    assert decoded[0].velocity == 126


def test_decoding_random_ids_always_gives_a_readable_midi_file(tmp_path):
    rng = np.random.default_rng(1)
    for length in (1, 10, 300, 2000):
        ids = rng.integers(0, TOKENIZER.vocab_size, length)
        path = TOKENIZER.decode_to_file(ids, tmp_path / f"random{length}.mid")
        for note in (n for i in pretty_midi.PrettyMIDI(str(path)).instruments for n in i.notes):
            assert 0 <= note.pitch <= 127 and 1 <= note.velocity <= 127 and note.end > note.start
    with pytest.raises(ValueError, match="vocabulary"):
        TOKENIZER.decode([TOKENIZER.vocab_size])

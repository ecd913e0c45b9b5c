"""Voice-leading counts (multimodal.music.voice_leading, the harmonization benchmark's measure) against
music21's ``VoiceLeadingQuartet``, an independent implementation, on random four-part music."""

from __future__ import annotations

import numpy as np
import pytest

from multimodal.music.voice_leading import FOUR_PARTS as VOICES
from multimodal.music.voice_leading import ParallelsRule, sounding, voice_leading
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig

TOKENIZER = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4))

WHITE = [0, 2, 4, 5, 7, 9, 11]  # white keys only: 7 semitones is always a perfect fifth when spelled


def _random_chorale(seed: int, onsets: int = 80) -> np.ndarray:
    """Four parts in disjoint registers (no crossings: music21 measures intervals from the lower voice),
    each holding or changing its note at every onset, with some rests."""
    rng = np.random.default_rng(seed)
    registers = {0: 6, 1: 5, 2: 4, 3: 3}  # octave of each part: soprano highest
    notes = []
    for part, octave in registers.items():
        pitch, start = None, 0.0
        for step in range(onsets):
            if pitch is None or rng.random() < 0.6:
                if pitch is not None:
                    notes.append([pitch, start, step * 0.5, 80, part])
                pitch, start = 12 * octave + int(rng.choice(WHITE)), step * 0.5
                if rng.random() < 0.05:  # a rest of one step
                    pitch = None
        if pitch is not None:
            notes.append([pitch, start, onsets * 0.5, 80, part])
    return np.array(notes, dtype=float)


def _music21_counts(notes: np.ndarray) -> dict[str, int]:
    from music21 import note, voiceLeading

    times = np.unique(np.round(notes[:, 1], 6))
    pitch = {part: sounding(notes, part, times) for part in VOICES}
    counts = dict(motions=0, fifths=0, octaves=0)
    for index, upper in enumerate(VOICES):
        for lower in VOICES[index + 1 :]:
            for t in range(1, len(times)):
                a0, a1, b0, b1 = pitch[upper][t - 1], pitch[upper][t], pitch[lower][t - 1], pitch[lower][t]
                if min(a0, a1, b0, b1) < 0 or (a0 == a1 and b0 == b1):
                    continue
                counts["motions"] += 1
                quartet = voiceLeading.VoiceLeadingQuartet(*(note.Note(midi=int(p)) for p in (a0, a1, b0, b1)))
                counts["fifths"] += int(quartet.parallelFifth())
                counts["octaves"] += int(quartet.parallelUnisonOrOctave())
    return counts


@pytest.mark.parametrize("seed", [0, 2])
def test_parallel_fifths_and_octaves_are_counted_as_music21_counts_them(seed):
    notes = _random_chorale(seed)
    ours = voice_leading(notes)
    expected = _music21_counts(notes)
    assert expected["fifths"] + expected["octaves"] > 0  # the random music has some to find
    assert {key: ours[key] for key in expected} == expected
    assert ours["crossings"] == 0


def test_a_crossing_is_counted_where_the_higher_part_sounds_below():
    notes = np.array([[60, 0, 1, 80, 0], [64, 0, 1, 80, 1], [48, 0, 1, 80, 2], [40, 0, 1, 80, 3]], dtype=float)
    found = voice_leading(notes)
    assert found["slices"] == 6 and found["crossings"] == 1  # soprano C4 under alto E4


def _random_state(rng: np.random.Generator, part: int, onsets: int = 6, step: float = 0.25) -> tuple[np.ndarray, float]:
    """Four one-line parts over ``onsets`` onsets (each part holds, changes or rests at each), then one more
    onset at which the other parts may have moved; ``part``'s last note ends by it. Returns notes and that time."""
    notes = []
    for voice in VOICES:
        for index in range(onsets + (voice != part)):
            if notes and notes[-1][4] == voice and notes[-1][2] == index * step and rng.random() < 0.3:
                notes[-1][2] += step  # hold
            elif rng.random() < 0.85:
                notes.append([int(rng.integers(43, 80)), index * step, (index + 1) * step, 80, voice])
    return np.array(notes, dtype=float), onsets * step


def test_the_parallels_rule_bans_exactly_the_pitches_that_would_add_a_parallel():
    """Every pitch the rule bans for a part at an onset adds a parallel fifth or octave there that the counter
    (held to music21's above) finds, and every pitch it allows adds none: all 128 pitches, 300 random states."""
    rng = np.random.default_rng(0)
    banned_anywhere = allowed_moves = 0
    for _ in range(300):
        part = int(rng.integers(0, 4))
        notes, now = _random_state(rng, part)
        rule, time = ParallelsRule(TOKENIZER, [part]), 0
        for token in TOKENIZER.encode_notes(notes):
            if TOKENIZER.time_shift_offset <= token < TOKENIZER.velocity_offset:
                time += token - TOKENIZER.time_shift_offset + 1
            rule.add(token, time)
        step = round(now / TOKENIZER.config.time_step)
        offset = TOKENIZER.pitch_offset + part * 128
        banned = rule.banned(step)[offset : offset + 128].numpy()
        assert not rule.banned(step)[: TOKENIZER.pitch_offset].any()  # only pitches, only this part's
        within = (now, now + 0.005)
        before = voice_leading(notes, within=within)
        for pitch in range(128):
            after = voice_leading(np.vstack([notes, [pitch, now, now + 0.25, 80, part]]), within=within)
            added = after["fifths"] + after["octaves"] - before["fifths"] - before["octaves"]
            assert bool(banned[pitch]) == (added > 0), (pitch, notes.tolist())
        banned_anywhere += int(banned.any())
        allowed_moves += int((~banned).sum())
    assert banned_anywhere > 30 and allowed_moves > 0  # the states exercise both sides


def test_the_parallels_rule_keeps_a_part_to_one_note_at_a_time():
    rule = ParallelsRule(TOKENIZER, [1, 2])
    for token in TOKENIZER.encode_notes(np.array([[60, 0.0, 1.0, 80, 1], [48, 0.0, 0.5, 80, 2]])):
        rule.add(token, 0)
    alto, tenor = (slice(TOKENIZER.pitch_offset + p * 128, TOKENIZER.pitch_offset + (p + 1) * 128) for p in (1, 2))
    assert rule.banned(50)[alto].all()  # the alto's note sounds until step 100
    assert not rule.banned(50)[tenor].any()  # the tenor's ended at 50, and nobody moved: free


def test_the_parallels_rule_reads_notes_as_decoding_does():
    """A PITCH without its DURATION is dropped by decoding, so it must not silence its part for the rule."""
    ids = [TOKENIZER.pitch_offset + 128 + 60, TOKENIZER.time_shift_offset + 9,  # alto C4, then a shift: dropped
           TOKENIZER.pitch_offset + 128 + 62, TOKENIZER.velocity_offset + 3, TOKENIZER.duration_offset + 4]  # D4, 5 steps
    rule, time = ParallelsRule(TOKENIZER, [1]), 0
    for token in ids:
        if TOKENIZER.time_shift_offset <= token < TOKENIZER.velocity_offset:
            time += token - TOKENIZER.time_shift_offset + 1
        rule.add(token, time)
    decoded = TOKENIZER.decode_notes(ids)
    assert [row[:2] for row in rule.notes] == [[int(p), 1] for p in decoded[:, 0]] == [[62, 1]]
    alto = slice(TOKENIZER.pitch_offset + 128, TOKENIZER.pitch_offset + 256)
    assert rule.banned(12)[alto].all() and not rule.banned(15)[alto].any()  # D4 sounds from step 10 to 15

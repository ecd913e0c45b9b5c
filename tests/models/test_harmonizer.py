"""Harmonizer and its time alignment: held to a naive per-position reading of the two clocks, and to the
plain CausalLM it wraps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from multimodal.models import CausalLM, CausalLMConfig
from multimodal.models.harmonizer import Harmonizer
from multimodal.music.alignment import given_alignment, given_notes_index, slice_alignment
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig

TOKENIZER = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, controls=True))


def chorale(rng: np.random.Generator, notes: int = 10) -> np.ndarray:
    """A soprano (part 0) and a bass (part 3) on a 50 ms grid; the soprano with rests, some longer than a shift."""
    rows = []
    for part, low in ((0, 60), (3, 40)):
        start = 0.05 * int(rng.integers(0, 10))
        for _ in range(notes):
            length = 0.05 * int(rng.integers(2, 12))
            rows.append([low + int(rng.integers(0, 12)), start, start + length, 80, part])
            start += length + 0.05 * int(rng.integers(0, 30) if part == 0 else 0)
    return np.array(rows, dtype=np.float64)


def naive_alignment(written_ids, given_ids, before: int, after: int, far: int):
    """Per written id: walk the given ids with a running clock, collect (onset, PITCH position) of each note,
    then pick by hand the last note begun by the written id's time and its neighbours."""
    notes, now = [], 0
    for position, token in enumerate(given_ids):
        if TOKENIZER.time_shift_offset <= token < TOKENIZER.velocity_offset:
            now += int(token) - TOKENIZER.time_shift_offset + 1
        elif TOKENIZER.pitch_offset <= token < TOKENIZER.duration_offset:
            notes.append((now, position))
    aligned, distances, now = [], [], 0
    for token in written_ids:
        if TOKENIZER.time_shift_offset <= token < TOKENIZER.velocity_offset:
            now += int(token) - TOKENIZER.time_shift_offset + 1
        begun = [i for i, (onset, _) in enumerate(notes) if onset <= now]
        current = begun[-1] if begun else -1
        row = [notes[i][1] + 1 if 0 <= i < len(notes) else 0 for i in range(current - before, current + after + 1)]
        since = now - notes[current][0] if current >= 0 else far
        until = notes[current + 1][0] - now if current + 1 < len(notes) else far
        aligned.append(row)
        distances.append([min(since, far), min(until, far)])
    return np.array(aligned), np.array(distances)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alignment_matches_a_naive_reading_of_both_clocks(seed):
    notes = chorale(np.random.default_rng(seed))
    written = TOKENIZER.encode_notes_array(notes[notes[:, 4] != 0])
    given = TOKENIZER.encode_notes_array(notes[notes[:, 4] == 0])
    aligned, distances = given_alignment(TOKENIZER.clock(written), *given_notes_index(TOKENIZER, given), 1, 2, 50)
    expected_aligned, expected_distances = naive_alignment(written, given, 1, 2, 50)
    np.testing.assert_array_equal(aligned, expected_aligned)
    np.testing.assert_array_equal(distances, expected_distances)
    assert (aligned[:, 1] > 0).any() and (aligned == 0).any()  # notes read, and edges with none


def test_alignment_without_given_notes_reads_nothing():
    aligned, distances = given_alignment(np.array([0, 5, 9]), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert aligned.shape == (3, 4) and not aligned.any()
    assert (distances == 200).all()


def test_slice_alignment_moves_indices_and_drops_notes_outside():
    aligned = np.array([[0, 3, 7], [7, 12, 20]])
    np.testing.assert_array_equal(slice_alignment(aligned, 5, 12), [[0, 0, 2], [2, 7, 0]])


def tiny_config() -> CausalLMConfig:
    return CausalLMConfig(vocab_size=TOKENIZER.vocab_size, dim=32, num_layers=2, num_heads=4, ff_dim=64,
                          max_seq_len=256, position="relative", max_relative_distance=255, dropout=0.0)  # fmt: skip


def inputs(seed: int = 0):
    notes = chorale(np.random.default_rng(seed))
    written = TOKENIZER.encode_notes_array(notes[notes[:, 4] != 0])
    given = TOKENIZER.encode_notes_array(notes[notes[:, 4] == 0])
    aligned, distances = given_alignment(TOKENIZER.clock(written), *given_notes_index(TOKENIZER, given))
    as_batch = lambda array: torch.as_tensor(array)[None]  # noqa: E731
    return as_batch(written), as_batch(given), as_batch(aligned), as_batch(distances)


def test_a_fresh_harmonizer_gives_its_language_models_logits():
    """The read-out starts at zero: the wrapped LM's weights in a plain CausalLM give the same logits."""
    torch.manual_seed(0)
    harmonizer = Harmonizer(tiny_config()).eval()
    plain = CausalLM(tiny_config()).eval()
    plain.load_state_dict(harmonizer.lm.state_dict())
    written, given, aligned, distances = inputs()
    torch.testing.assert_close(harmonizer(written, given, aligned, distances), plain(written))


def test_the_decoder_reads_the_melody_and_stays_causal_in_its_own_ids():
    torch.manual_seed(0)
    harmonizer = Harmonizer(tiny_config()).eval()
    for module in (harmonizer.read, harmonizer.since_onset, harmonizer.until_onset):
        for parameter in module.parameters():
            torch.nn.init.normal_(parameter, std=0.1)
    written, given, aligned, distances = inputs()
    logits = harmonizer(written, given, aligned, distances)
    other_melody = given.clone()
    pitches = (given >= TOKENIZER.pitch_offset) & (given < TOKENIZER.duration_offset)
    other_melody[pitches] += 1  # every soprano note a semitone higher
    assert not torch.allclose(harmonizer(written, other_melody, aligned, distances), logits)
    changed = written.clone()
    changed[0, 20] = TOKENIZER.time_shift_offset + 3
    torch.testing.assert_close(harmonizer(changed, given, aligned, distances)[:, :20], logits[:, :20])
    # a padded soprano reads the same as the unpadded one
    padded = torch.cat([given, torch.zeros(1, 7, dtype=given.dtype)], 1)
    mask = torch.arange(padded.shape[1])[None] >= given.shape[1]
    torch.testing.assert_close(harmonizer(written, padded, aligned, distances, given_padding=mask), logits)


def test_training_reaches_the_encoder_and_the_loss_ignores_unscored_targets():
    torch.manual_seed(0)
    harmonizer = Harmonizer(tiny_config())
    written, given, aligned, distances = inputs()
    targets = torch.roll(written, -1, 1)
    targets[:, :5] = -100
    loss = harmonizer.loss(written, targets, given, aligned, distances)
    logits = harmonizer(written, given, aligned, distances)
    reference = torch.nn.functional.cross_entropy(logits[0, 5:], targets[0, 5:])
    torch.testing.assert_close(loss, reference)
    loss.backward()
    assert harmonizer.read.weight.grad.abs().sum() > 0  # the zero read-out is the first to move
    with pytest.raises(ValueError, match="reads 3 notes"):
        harmonizer(written, given, aligned[..., :3], distances)

"""Which notes a training window gives ahead (GivenNotesDraw), counted over many draws, and the
windows the data set cuts from them."""

from __future__ import annotations

import numpy as np
import pytest

from multimodal.data.anticipation import GivenNotesDraw
from multimodal.data.music import MidiCorpus, MidiWindowDataset
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig


def four_parts(num_onsets: int = 40) -> np.ndarray:
    """A block-chord piece: four parts, one note each every half second, pitches unique per row."""
    rows = [(60 + part * 5 + onset % 3, onset * 0.5, onset * 0.5 + 0.5, 80, part)
            for onset in range(num_onsets) for part in range(4)]  # fmt: skip
    return np.array(rows, dtype=np.float64)


def as_set(notes: np.ndarray) -> set[tuple[float, ...]]:
    return {tuple(row) for row in notes.tolist()}


def test_every_note_is_either_written_or_given_and_the_cases_come_in_their_shares():
    notes = four_parts()
    draw = GivenNotesDraw(given_share=0.5, part_drop_share=0.2, from_start=0.5, to_end=0.5, all_parts=0.3)
    rng = np.random.default_rng(0)
    counts = {"plain": 0, "given": 0, "dropped": 0, "harmonize": 0}
    for _ in range(2000):
        written, given, gap, _ = draw(notes, rng)
        assert gap is None  # no infill_share
        if len(written) < len(notes) and not len(given):  # parts left out, nothing given
            counts["dropped"] += 1
            kept = np.unique(written[:, 4])
            assert 1 <= len(kept) < 4 and as_set(written) == as_set(notes[np.isin(notes[:, 4], kept)])
            continue
        assert as_set(written) | as_set(given) == as_set(notes) and not as_set(written) & as_set(given)
        if not len(given):
            counts["plain"] += 1
            continue
        counts["given"] += 1
        # each part is written up to a time (a or b) and given from then on
        for part in range(4):
            mine_written, mine_given = written[written[:, 4] == part], given[given[:, 4] == part]
            assert mine_written[:, 1].max(initial=-1) < mine_given[:, 1].min(initial=np.inf)
        whole_given = [part for part in range(4) if part not in written[:, 4]]
        whole_written = [part for part in range(4) if part not in given[:, 4]]
        counts["harmonize"] += bool(whole_given) and len(whole_given) + len(whole_written) == 4
    shares = {name: count / 2000 for name, count in counts.items()}
    assert abs(shares["dropped"] - 0.2) < 0.03
    # the given case with every part written to the end gives nothing: it counts as plain
    assert abs(shares["given"] + shares["plain"] - 0.8) < 0.03 and shares["given"] > 0.35
    assert shares["harmonize"] > 0.05  # whole parts given from the start to the end


def test_one_part_pieces_are_only_ever_infilled_or_plain():
    notes = four_parts()[:, :4]
    notes = np.column_stack([notes, np.zeros(len(notes))])[::4]  # one part
    rng = np.random.default_rng(1)
    for _ in range(200):
        written, given, _, _ = GivenNotesDraw(given_share=1.0, part_drop_share=0.0)(notes, rng)
        if len(given):  # the music from some time on is given, everything before it written
            assert written[:, 1].max() < given[:, 1].min()


def test_shares_are_checked():
    with pytest.raises(ValueError, match="at most 1"):
        GivenNotesDraw(given_share=0.8, part_drop_share=0.3)
    with pytest.raises(ValueError, match="to_end"):
        GivenNotesDraw(to_end=1.5)
    with pytest.raises(ValueError, match="read_ahead_share = 1.1 must be at most 1"):
        GivenNotesDraw(given_share=0.3, part_drop_share=0.1, infill_share=0.5, read_ahead_share=0.2)
    with pytest.raises(ValueError, match="infill_seconds"):
        GivenNotesDraw(infill_seconds=(2.0, 1.0))


def test_gap_windows_write_the_music_after_the_gap_before_it():
    """The gap case: its share, spans within infill_seconds, every note written or given, and its training
    windows end with the gap's notes after ``GAP … AFTER … MIDDLE``, decoding to the piece up to the block's end."""
    notes = four_parts()
    draw = GivenNotesDraw(given_share=0.3, part_drop_share=0.1, infill_share=0.4, infill_seconds=(1.0, 3.0),
                          infill_reread=(0.5, 1.0))  # fmt: skip
    rng = np.random.default_rng(2)
    gaps = 0
    for _ in range(1000):
        written, given, gap, _ = draw(notes, rng)
        if gap is None:
            continue
        gaps += 1
        a, b = gap
        assert 1.5 <= b - a <= 4.0 and as_set(written) | as_set(given) == as_set(notes)
        assert (written[:, 1] < b).all() and (given[given[:, 1] < a].shape[0] == 0)  # before a: all written
        assert not ((written[:, 1] >= a) & (written[:, 1] < a + 0.5)).any()  # the first 0.5-1 s: all given
    assert abs(gaps / 1000 - 0.4) < 0.04
    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, anticipation_steps=100,
                                                                  infill_after_steps=200))  # fmt: skip
    corpus = MidiCorpus(["bach/a"], [notes])
    dataset = MidiWindowDataset(corpus, tokenizer, seq_len=2048, epoch_length=40, augmentation=None, seed=0,
                                given_notes=GivenNotesDraw(given_share=0.0, part_drop_share=0.0, infill_share=1.0))  # fmt: skip
    middle = tokenizer.infill_id("MIDDLE")
    for index in range(len(dataset)):
        ids = [token for token in dataset[index].tolist() if token != tokenizer.pad_id]
        assert ids.count(middle) == 1 and tokenizer.eos_id not in ids
        decoded = tokenizer.decode_notes(ids)
        seen = decoded[:, 1].max()  # the piece up to the block's last onset, note for note
        reference = tokenizer.decode_notes(tokenizer.encode_notes(notes))
        np.testing.assert_array_equal(decoded, reference[reference[:, 1] <= seen])
    with pytest.raises(ValueError, match="infill_after_steps"):
        MidiWindowDataset(corpus, MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, anticipation_steps=10)),
                          seq_len=8, given_notes=GivenNotesDraw(infill_share=0.2))  # fmt: skip


def test_training_windows_write_given_notes_ahead_and_need_a_tokenizer_that_can():
    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, anticipation_steps=100))
    corpus = MidiCorpus(["bach/a"], [four_parts()])
    dataset = MidiWindowDataset(corpus, tokenizer, seq_len=1024, epoch_length=50, augmentation=None, seed=0,
                                given_notes=GivenNotesDraw(given_share=1.0, part_drop_share=0.0))  # fmt: skip
    ahead = [tokenizer.event_to_token("AHEAD", k) for k in range(101)]
    with_given = 0
    for window in dataset:
        ids = [token for token in window.tolist() if token != tokenizer.pad_id]
        assert ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id  # the whole piece fits
        np.testing.assert_array_equal(tokenizer.decode_notes(ids), tokenizer.decode_notes(tokenizer.encode_notes(four_parts())))
        with_given += any(token in ahead for token in ids)
    assert with_given > 25
    with pytest.raises(ValueError, match="anticipation_steps"):
        MidiWindowDataset(corpus, MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4)), seq_len=8,
                          given_notes=GivenNotesDraw())  # fmt: skip

"""Given notes written ahead (``encode_anticipated``), against a plain-Python statement of the rule,
the notes of real chorales from music21's own scores, and the sequences a causal model must see."""

from __future__ import annotations

import numpy as np
import pytest
from test_midi import reference_notes_in_steps
from test_midi_duration import nearest_duration
from test_midi_parts import random_parts

from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig

AHEAD = 100  # one second at the default 10 ms step
TOKENIZER = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, controls=True, anticipation_steps=AHEAD))


def reference_encode_anticipated(notes: np.ndarray, given: np.ndarray, tokenizer) -> tuple[list[int], list[bool]]:
    """Plain Python, one note at a time: every note at its onset, by part and pitch (the plain rule), and each
    given note once more, behind ``AHEAD_<steps to its onset>``, at the first point at or after ``onset - ahead``
    where the plain sequence's time arrives (the start, an onset, the end of a longest shift inside a long gap),
    first at that moment. Notes ahead keep a loudness of their own. The mask: the ids of given notes' rows,
    shifts excluded."""
    rows = []  # (stop, 0 = ahead / 1 = at its onset, part-pitch, ahead, duration, velocity bin, given)
    for is_given, source in ((False, notes), (True, given)):
        for part in range(tokenizer.config.num_parts):
            for pitch, onset, offset, velocity_bin in reference_notes_in_steps(source[source[:, 4] == part, :4], tokenizer):
                rows.append((onset, 1, 128 * part + pitch, 0, offset - onset, velocity_bin, is_given))
    arrivals, now = [0], 0
    for onset in sorted({row[0] for row in rows}):
        while onset > now:
            now += min(onset - now, tokenizer.config.num_time_shifts)
            arrivals.append(now)
    for onset, _, pitch, _, duration, velocity_bin, is_given in list(rows):
        if is_given:
            stop = min(point for point in arrivals if point >= onset - tokenizer.config.anticipation_steps)
            rows.append((stop, 0, pitch, onset - stop, duration, velocity_bin, True))
    ids, marks, now, current_bin = [], [], 0, {0: None, 1: None}  # notes ahead and at onset: a loudness each
    for stop, at_onset, pitch, ahead, duration, velocity_bin, is_given in sorted(rows):
        while stop > now:
            shift = min(stop - now, tokenizer.config.num_time_shifts)
            ids.append(tokenizer.event_to_token("TIME_SHIFT", shift))
            marks.append(False)
            now += shift
        row = [] if at_onset else [tokenizer.event_to_token("AHEAD", ahead)]
        if velocity_bin != current_bin[at_onset]:
            row.append(tokenizer.event_to_token("VELOCITY", velocity_bin))
            current_bin[at_onset] = velocity_bin
        row += [tokenizer.event_to_token("PITCH", pitch),
                tokenizer.event_to_token("DURATION", nearest_duration(duration, tokenizer))]  # fmt: skip
        ids += row
        marks += [is_given] * len(row)
    return ids, marks


def chorale(name: str) -> np.ndarray:
    """A chorale's notes ``[pitch, start, end, velocity, part]`` from music21's own score at 120 bpm."""
    from music21 import corpus

    score = corpus.parse(f"bach/{name}")
    notes = [(p.midi, n.offset * 0.5, (n.offset + n.quarterLength) * 0.5, 90, part)
             for part, voice in enumerate(score.parts) for n in voice.stripTies().flatten().notes
             for p in n.pitches]  # fmt: skip
    return np.array(notes, dtype=float)


def test_layout_adds_ahead_ids_after_the_controls_and_nothing_else_moves():
    plain = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, controls=True))
    assert TOKENIZER.vocab_size == plain.vocab_size + AHEAD + 1
    for token in range(plain.vocab_size):  # every id of a model without given notes means the same
        assert TOKENIZER.token_to_event(token) == plain.token_to_event(token)
    for token in range(TOKENIZER.vocab_size):
        event = TOKENIZER.token_to_event(token)
        assert TOKENIZER.event_to_token(event.kind, event.value) == token
    assert [TOKENIZER.token_to_event(TOKENIZER.vocab_size - 1 - k).value for k in range(3)] == [AHEAD, AHEAD - 1, AHEAD - 2]
    with pytest.raises(ValueError, match="no AHEAD ids"):
        plain.encode_anticipated(random_parts(np.random.default_rng(0), 5, 4), np.zeros((0, 5)))
    with pytest.raises(ValueError, match="anticipation_steps"):
        MidiDurationTokenizerConfig(anticipation_steps=-1)


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_encoding_equals_the_plain_python_rule(seed):
    rng = np.random.default_rng(seed)
    notes = random_parts(rng, 60, 4)
    notes[:, 1:3] *= 3  # onsets over 12 s: gaps longer than a shift, given notes more than AHEAD apart
    given = notes[notes[:, 4] == seed % 4]
    written = notes[notes[:, 4] != seed % 4]
    ids, mask = TOKENIZER.encode_anticipated(written, given)
    reference_ids, reference_mask = reference_encode_anticipated(written, given, TOKENIZER)
    assert ids.tolist() == reference_ids
    assert mask.tolist() == reference_mask


def test_real_chorales_decode_to_every_note_given_or_written():
    """Soprano given, the other voices written (harmonization); the music after 8 s given (infilling):
    both decode to the whole chorale, exactly as the plain encoding does."""
    for name in ("bwv269", "bwv347"):
        notes = chorale(name)
        whole = TOKENIZER.decode_notes(TOKENIZER.encode_notes_array(notes))
        for given_rows in (notes[:, 4] == 0, notes[:, 1] >= 8):
            ids, mask = TOKENIZER.encode_anticipated(notes[~given_rows], notes[given_rows])
            np.testing.assert_array_equal(TOKENIZER.decode_notes(ids), whole)
            # without the given notes' ids the sequence holds the written notes alone, in time
            np.testing.assert_array_equal(TOKENIZER.decode_notes(ids[~mask])[:, [0, 1, 2, 4]],
                                          TOKENIZER.decode_notes(TOKENIZER.encode_notes_array(notes[~given_rows]))[:, [0, 1, 2, 4]])


def test_a_given_note_is_written_exactly_ahead_of_its_onset_and_never_late():
    """Walking the ids as a causal model reads them: a given note's AHEAD id comes at the first time the
    music arrives (after a shift, or at the start) at or after its onset minus the look-ahead, before any
    written note of that moment; its onset is then at most the look-ahead away."""
    notes = chorale("bwv269")
    given_rows = notes[:, 4] == 0
    ids, _ = TOKENIZER.encode_anticipated(notes[~given_rows], notes[given_rows])
    now, before, seen_onsets, checked = 0, -(10**9), [], 0  # before: where the last shift started (none yet)
    events = [TOKENIZER.token_to_event(token) for token in ids.tolist()]
    for index, event in enumerate(events):
        if event.kind == "TIME_SHIFT":
            before, now = now, now + event.value
        elif event.kind == "AHEAD":
            onset = now + event.value
            assert 0 <= event.value <= AHEAD and before < onset - AHEAD
            assert all(seen < now for seen in seen_onsets)  # given notes first at their moment
            checked += 1
        elif event.kind == "PITCH" and events[index - 1].kind != "AHEAD" and not (
            events[index - 1].kind == "VELOCITY" and events[index - 2].kind == "AHEAD"
        ):
            seen_onsets.append(now)
    assert checked == int(given_rows.sum())


def test_the_mask_covers_each_given_note_twice_ahead_and_at_its_onset():
    rng = np.random.default_rng(7)
    notes = random_parts(rng, 40, 4)
    given = notes[notes[:, 4] == 0]
    ids, mask = TOKENIZER.encode_anticipated(notes[notes[:, 4] > 0], given)
    kinds = [TOKENIZER.token_to_event(token).kind for token in ids.tolist()]
    runs, start = [], None
    for index, marked in enumerate([*mask.tolist(), False]):
        if marked and start is None:
            start = index
        if not marked and start is not None:
            runs.append(kinds[start:index])
            start = None
    notes_in_runs = sum(run.count("DURATION") for run in runs)
    assert notes_in_runs == 2 * len(TOKENIZER.decode_notes(TOKENIZER.encode_notes_array(given)))
    assert all(run[-1] == "DURATION" and run[0] in ("AHEAD", "VELOCITY", "PITCH") for run in runs)
    assert kinds.count("AHEAD") == notes_in_runs // 2 and not any("TIME_SHIFT" in run for run in runs)
    # without the notes ahead the ids are the plain sequence of all the notes
    ahead = np.zeros(len(ids), dtype=bool)
    for index, kind in enumerate(kinds):
        if kind == "AHEAD":
            end = index + kinds[index:].index("DURATION")
            ahead[index : end + 1] = True
    plain = TOKENIZER.encode_notes_array(notes)
    assert ids[~ahead].tolist() == plain.tolist()  # time shifts included: the notes ahead never cut one
    empty_ids, empty_mask = TOKENIZER.encode_anticipated(notes, notes[:0])
    assert empty_ids.tolist() == TOKENIZER.encode_notes_array(notes).tolist() and not empty_mask.any()


READING = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, controls=True, anticipation_steps=AHEAD,
                                                            infill_after_steps=400))  # fmt: skip
"""Given notes read ahead in blocks of 4 s (``encode_read_ahead``)."""


@pytest.mark.parametrize("name", ["bwv269", "bwv347"])
def test_read_ahead_blocks_leave_the_plain_sequence_and_hold_the_next_seconds_of_the_given_parts(name):
    """The soprano of real chorales read ahead in blocks: the ids outside the blocks are the plain sequence of
    the whole chorale (loudness aside: a block sets it), the whole decodes to the chorale, the mask holds the
    blocks and the soprano's rows, and walking the ids (as the decoder's test does) each block comes when time
    first arrives 4 s after the last one and holds the soprano notes of its 4 s."""
    from test_harmonize import assert_read_ahead

    notes = chorale(name)
    soprano, lower = notes[notes[:, 4] == 0], notes[notes[:, 4] != 0]
    ids, mask = READING.encode_read_ahead(lower, soprano)
    plain = READING.encode_notes_array(notes)
    gap, middle = (ids == READING.infill_id(event) for event in ("GAP", "MIDDLE"))
    block = (np.cumsum(gap) > np.cumsum(middle)) | middle
    is_velocity = lambda seq: (seq >= READING.velocity_offset) & (seq < READING.pitch_offset)  # noqa: E731
    outside = ids[~block]
    assert outside[~is_velocity(outside)].tolist() == plain[~is_velocity(plain)].tolist()
    np.testing.assert_array_equal(READING.decode_notes(ids), READING.decode_notes(plain))
    assert mask[block].all() and gap.sum() >= 4
    given_rows = READING.decode_notes(np.r_[READING.shift_ids(0), ids[~block & ~mask]])
    np.testing.assert_array_equal(given_rows[:, [0, 1, 2, 4]],
                                  READING.decode_notes(READING.encode_notes_array(lower))[:, [0, 1, 2, 4]])  # fmt: skip
    assert_read_ahead(READING, ids.tolist(), soprano)
    with pytest.raises(ValueError, match="no GAP / AFTER / MIDDLE ids"):
        TOKENIZER.encode_read_ahead(lower, soprano)

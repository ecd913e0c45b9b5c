"""decoder_token_nll: the probability the harmonize / infill decoder gives each id it writes — held to the
distributions the decoder really samples from, and to a naive per-prefix computation of its rules."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from multimodal.models import CausalLM, CausalLMConfig
from multimodal.music.constrained import NoteEnds, decoder_token_nll
from multimodal.music.harmonize import harmonize
from multimodal.music.scoring import token_nll
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig

PLAIN = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, controls=True))
ANTICIPATING = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, controls=True, anticipation_steps=100))
harmonize_module = importlib.import_module("multimodal.music.harmonize")  # the module; the package exports the function
decoder_module = importlib.import_module("multimodal.music.constrained")  # where the decoder samples
TOKENIZERS = pytest.mark.parametrize("tokenizer", [PLAIN, ANTICIPATING], ids=["plain", "anticipating"])


def tiny_model(tokenizer: MidiDurationTokenizer, seed: int = 0) -> CausalLM:
    torch.manual_seed(seed)
    return CausalLM(CausalLMConfig(vocab_size=tokenizer.vocab_size, dim=32, num_layers=1, num_heads=4, ff_dim=64,
                                   max_seq_len=4096)).eval()  # fmt: skip


def soprano(rng: np.random.Generator, num_notes: int = 12) -> np.ndarray:
    """A one-line melody in part 0 on a 50 ms grid, with rests (some longer than the longest shift)."""
    lengths = rng.choice([0.25, 0.5, 1.0], num_notes)
    gaps = rng.choice([0.0, 0.25, 1.5], num_notes)
    starts = np.cumsum(np.r_[0.5, (lengths + gaps)[:-1]])
    return np.stack([rng.integers(60, 80, num_notes), starts, starts + lengths, np.full(num_notes, 90.0),
                     np.zeros(num_notes)], axis=1)  # fmt: skip


def lower_parts(rng: np.random.Generator, melody: np.ndarray) -> np.ndarray:
    """Alto, tenor and bass notes: some with the melody's onsets, some between them."""
    rows = []
    for part in (1, 2, 3):
        for start, end in melody[:, 1:3]:
            if rng.random() < 0.8:
                shift = rng.choice([0.0, 0.0, 0.1])
                rows.append([rng.integers(40, 70), start + shift, end + 0.2, 70.0, part])
    return np.array(rows, dtype=np.float64)


def naive_decoder_nll(model, tokenizer, ids, is_given, parts, position) -> float:
    """-log p(ids[position]) by the decoder's rules, from a forward pass over the prefix alone (float64)."""
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([ids[:position]]))[0, -1].double(), -1).numpy()
    time = sum(tokenizer.token_to_event(t).value for t in ids[:position] if tokenizer.token_to_event(t).kind == "TIME_SHIFT")
    kinds = [tokenizer.token_to_event(t).kind for t in ids]

    def at_onset(q: int) -> bool:  # a given note's PITCH where it sounds, not its row ahead
        return is_given[q] and kinds[q] == "PITCH" and "AHEAD" not in kinds[max(q - 2, 0) : q]

    given_times = [sum(tokenizer.token_to_event(t).value for t in ids[:q] if tokenizer.token_to_event(t).kind == "TIME_SHIFT")
                   for q in range(position, len(ids)) if at_onset(q)]  # fmt: skip
    until = min(given_times) - time if given_times else None
    own, waiting, now = [], None, 0  # the notes the model wrote in the prefix: (PITCH id, onset, end)
    for q, token in enumerate(ids[:position]):
        event = tokenizer.token_to_event(token)
        now += event.value if event.kind == "TIME_SHIFT" else 0
        if event.kind == "DURATION" and waiting is not None:
            own.append((waiting, now, now + event.value))
        if event.kind != "VELOCITY":
            waiting = token if event.kind == "PITCH" and not is_given[q] else None
    sounding = {token for token, onset, _ in own if onset == time}  # struck once an onset at most
    last_own = None if is_given[position - 1] else kinds[position - 1]  # the id before, if the model wrote it
    allowed = np.zeros(len(probs))
    for token in range(len(probs)):
        event = tokenizer.token_to_event(token)
        if event.kind == "AHEAD" or (event.kind == "PITCH" and event.value // 128 not in parts) or token in sounding:
            continue
        if event.kind in ("PAD", "BOS", "STYLE", "KEY", "METER", "DENSITY"):  # a sequence's opening, not music
            continue
        if (waiting is not None) != (event.kind == "DURATION") or (last_own == "VELOCITY" and event.kind == "VELOCITY"):
            continue  # after the model's PITCH its length alone, a length nowhere else, one VELOCITY before a note
        if event.kind == "EOS" and until is not None:
            continue
        if event.kind == "TIME_SHIFT" and until is not None:
            if event.value > until:
                continue
            if event.value == until and tokenizer.config.anticipation_steps:
                longer = [t for t in range(len(probs)) if tokenizer.token_to_event(t).kind == "TIME_SHIFT"
                          and tokenizer.token_to_event(t).value >= until]  # fmt: skip
                allowed[token] = probs[longer].sum()
                continue
        allowed[token] = probs[token]
    return float(-np.log(allowed[ids[position]] / allowed.sum()))


@TOKENIZERS
def test_the_nll_of_each_written_id_follows_the_decoders_rules_computed_naively(tokenizer):
    rng = np.random.default_rng(0)
    model = tiny_model(tokenizer)
    melody = soprano(rng)
    lower = lower_parts(rng, melody)
    head = [tokenizer.bos_id, *tokenizer.control_ids()]
    if tokenizer.config.anticipation_steps:
        body, given = tokenizer.encode_anticipated(lower, melody)
    else:  # the plain decoder feeds each given note at its onset: the sequence of all the notes, melody marked
        body = tokenizer.encode_notes_array(np.r_[melody, lower])
        given = np.zeros(len(body), dtype=bool)
        for index, token in enumerate(body):
            event = tokenizer.token_to_event(int(token))
            if event.kind == "PITCH" and event.value // 128 == 0:
                given[index] = True
                given[index + 1] = True  # its DURATION
    ids = np.r_[head, body]
    is_given = np.r_[np.zeros(len(head), dtype=bool), given]
    got = decoder_token_nll(model, tokenizer, ids, is_given, [1, 2, 3], seq_len=4096)
    written = np.flatnonzero(~is_given[len(head):]) + len(head)  # the head (BOS, controls) is the caller's
    shifts = [p for p in written if tokenizer.token_to_event(int(ids[p])).kind == "TIME_SHIFT"]
    pitches = [p for p in written if tokenizer.token_to_event(int(ids[p])).kind == "PITCH"]
    checked = sorted(set(shifts[:40] + pitches[:10] + list(written[-5:])))
    for position in checked:
        expected = naive_decoder_nll(model, tokenizer, ids.tolist(), is_given, [1, 2, 3], position)
        assert got[position - 1] == pytest.approx(expected, rel=1e-4, abs=1e-5), tokenizer.token_to_event(int(ids[position]))
    raw = token_nll(model, ids, seq_len=4096)
    assert (got[written - 1] <= raw[written - 1] + 1e-6).all()  # the rules only take probability from other ids
    assert (got[written - 1] < raw[written - 1] - 1e-3).mean() > 0.9  # ... and the part mask always takes some


def record_draws(monkeypatch) -> list[float]:
    """A list that collects -log p of every id the harmonize / infill decoder samples, under its masks."""
    drawn: list[float] = []
    real_sample_next = decoder_module.sample_next

    def recording_sample_next(scores, sampling, generator=None):
        token = real_sample_next(scores, sampling, generator=generator)
        drawn.append(float(-torch.log_softmax(scores[0].double(), -1)[int(token[0])]))
        return token

    monkeypatch.setattr(decoder_module, "sample_next", recording_sample_next)
    return drawn

@TOKENIZERS
def test_the_nll_is_what_the_decoder_samples_from_on_its_own_path(tokenizer, monkeypatch):
    rng = np.random.default_rng(1)
    model = tiny_model(tokenizer, seed=1)
    drawn = record_draws(monkeypatch)
    melody = soprano(rng, num_notes=4)  # a short window: the rule on lengths past its end matters early
    ids = harmonize(model, tokenizer, melody, parts=[1, 2, 3], generator=torch.Generator().manual_seed(0),
                    lookahead="ahead" if tokenizer.config.anticipation_steps else "none",
                    max_new_tokens=150)  # fmt: skip
    assert len(drawn) > 50
    head = 1 + len(tokenizer.control_ids())
    fed = given_positions(tokenizer, ids, head)
    got = decoder_token_nll(model, tokenizer, np.asarray(ids), fed, [1, 2, 3], seq_len=4096,
                            window_end=float(melody[:, 2].max()))  # fmt: skip
    sampled = np.flatnonzero(~fed[head:]) + head - 1  # got[i] scores ids[i + 1]; the head is the caller's
    assert len(sampled) >= len(drawn)
    np.testing.assert_allclose(got[sampled[: len(drawn)]], drawn, rtol=1e-4, atol=1e-5)
    without_window = decoder_token_nll(model, tokenizer, np.asarray(ids), fed, [1, 2, 3], seq_len=4096)
    assert (without_window[sampled] > got[sampled] + 1e-4).any()  # the window's rule mattered on this path


def given_positions(tokenizer, ids, head: int) -> np.ndarray:
    """bool ``(len(ids),)``: the ids the decoder fed — every row of a note ahead (``AHEAD … DURATION``) and every
    row of the melody's part (the model may not write a part-0 PITCH, nor anything between a shift and them)."""
    kinds = [tokenizer.token_to_event(int(t)) for t in ids]
    is_given = np.zeros(len(ids), dtype=bool)
    for index in range(head, len(ids)):
        event = kinds[index]
        if event.kind == "AHEAD" or (event.kind == "PITCH" and event.value // 128 == 0):
            end = index + next(k for k, e in enumerate(kinds[index:]) if e.kind == "DURATION")
            is_given[index : end + 1] = True
            if event.kind == "PITCH" and kinds[index - 1].kind == "VELOCITY" and not is_given[index - 1]:
                is_given[index - 1] = True  # the melody's loudness, fed with it
    return is_given


@pytest.mark.parametrize("read_after", [3.0, 1.5, 5.0, None])
def test_the_nll_follows_the_infill_decoder_after_a_block_with_the_music_after_the_span(monkeypatch, read_after):
    """A vocabulary with ``GAP AFTER MIDDLE``: ``infill`` reads the music before the span and the block (at the
    span's start; 1.5 s before its end, after writing the rest as a continuation; 2 s before the span, the
    music from there to the span read again after it; by default 1 s before it), then samples the rest of the
    span with time stopped at its end; ``decoder_token_nll(..., stop_at=end)`` gives each id it sampled the
    probability it was sampled with (the clock rewound at ``MIDDLE``, the block read, not fed)."""
    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, controls=True, anticipation_steps=100,
                                                                  infill_after_steps=200))  # fmt: skip
    rng = np.random.default_rng(2)
    model = tiny_model(tokenizer, seed=2)
    melody = soprano(rng, num_notes=16)
    piece = np.r_[melody, lower_parts(rng, melody)]
    start, end = 3.0, 6.0
    # no note sounds into the span: the decoder's ban on striking a sounding kept pitch is not modelled
    piece[:, 2] = np.where(piece[:, 1] < start, np.minimum(piece[:, 2], start), piece[:, 2])
    piece[(piece[:, 1] >= 5.0) & (piece[:, 1] < end), 2] += 0.5  # the span's last notes ring past its end
    span = (piece[:, 1] >= start) & (piece[:, 1] < end)
    ends = NoteEnds.of(tokenizer, end, replaced=piece[span], kept=piece[~span])  # as infill lets new notes sound
    assert max(ends.reach.values()) > round(end / 0.01)
    drawn = record_draws(monkeypatch)
    ids = harmonize_module.infill(model, tokenizer, piece, start, end, generator=torch.Generator().manual_seed(0),
                                  max_new_tokens=400, read_after=read_after)  # fmt: skip
    ids = np.asarray(ids)
    gap, middle = (int(np.flatnonzero(ids == tokenizer.infill_id(name))[0]) for name in ("GAP", "MIDDLE"))
    clock = tokenizer.clock(ids)
    first, last = round(start / 0.01), round(end / 0.01)
    sampled = np.zeros(len(ids), dtype=bool)  # every id read while time is inside the span, the block's excepted
    sampled[1:] = (clock[:-1] >= first) & (clock[:-1] < last)
    sampled[gap : middle + 1] = False
    if read_after == 1.5:  # the block came 1.5 s before the end, in place of a shift the model drew
        assert clock[gap - 1] < last - 150 <= clock[gap - 1] + 100 and sampled[:gap].sum() > 5
        dropped = int(sampled[:gap].sum())
        drawn.pop(dropped)
    if read_after in (5.0, None):  # read before the span: the notes from then to its start come again after the block
        split = 1.0 if read_after else 2.0
        again = tokenizer.decode_notes(np.r_[ids[:1], tokenizer.shift_ids(int(clock[middle])), ids[middle + 1 :]])
        expected = tokenizer.decode_notes(tokenizer.encode_notes_array(piece))
        window = lambda rows: rows[(rows[:, 1] >= split - 1e-9) & (rows[:, 1] < start - 1e-9)]  # noqa: E731
        np.testing.assert_allclose(window(again), window(expected))
        assert clock[gap - 1] < split * 100 and len(window(expected)) > 0
    assert sampled.sum() == len(drawn) > 20
    got = decoder_token_nll(model, tokenizer, ids, ~sampled, [0, 1, 2, 3], seq_len=4096, window_end=ends, stop_at=end)
    np.testing.assert_allclose(got[np.flatnonzero(sampled) - 1], drawn, rtol=1e-4, atol=1e-5)
    at_the_end = decoder_token_nll(model, tokenizer, ids, ~sampled, [0, 1, 2, 3], seq_len=4096, window_end=end, stop_at=end)
    assert (np.abs(at_the_end[np.flatnonzero(sampled) - 1] - drawn) > 1e-4).any()  # the longer reach mattered
    # the span's notes end by the replaced notes' last end, and the music after it comes back exactly
    notes = tokenizer.decode_notes(ids)
    inside = (notes[:, 1] >= start - 1e-9) & (notes[:, 1] < end - 1e-9)
    assert (notes[inside, 2] <= piece[span, 2].max() + 1e-9).all()
    expected = tokenizer.decode_notes(tokenizer.encode_notes_array(piece))
    keep = lambda rows: rows[(rows[:, 1] < start - 1e-9) | (rows[:, 1] >= end - 1e-9)]  # noqa: E731
    np.testing.assert_allclose(keep(notes), keep(expected))
    without_stop = decoder_token_nll(model, tokenizer, ids, ~sampled, [0, 1, 2, 3], seq_len=4096, window_end=ends)
    assert (np.abs(without_stop[np.flatnonzero(sampled) - 1] - drawn) > 1e-4).any()  # the stop mattered on this path


READING = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=4, controls=True, anticipation_steps=100,
                                                            infill_after_steps=200))  # fmt: skip
"""Given notes read ahead in blocks of 2 s (the GAP AFTER MIDDLE ids)."""


class Oracle(torch.nn.Module):
    """Puts all its probability on the next id of ``target`` (a whole sequence from BOS): it follows the ids it is
    fed and skips a fed VELOCITY the target does not hold at that place (the decoder feeds a melody's loudness with
    its first note, where the encoding's block already set it)."""

    def __init__(self, tokenizer: MidiDurationTokenizer, target: list[int]) -> None:
        super().__init__()
        self.tokenizer, self.target = tokenizer, target
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def new_state(self):
        return {"next": 0}

    def forward(self, tokens, state=None):
        for token in tokens[0].tolist():
            if state["next"] < len(self.target) and token == self.target[state["next"]]:
                state["next"] += 1
            elif not self.tokenizer.velocity_offset <= token < self.tokenizer.pitch_offset:
                raise AssertionError(f"fed {self.tokenizer.token_to_event(token)}, the target has "
                                     f"{self.tokenizer.token_to_event(self.target[state['next']])}")  # fmt: skip
        logits = torch.full((1, tokens.shape[1], self.tokenizer.vocab_size), -30.0)
        logits[0, -1, self.target[min(state["next"], len(self.target) - 1)]] = 30.0
        return logits


def test_the_read_ahead_decoder_writes_what_training_encodes():
    """A model that wants exactly the training encoding's next id (``encode_read_ahead`` of the lower parts with
    the soprano given, written independently of the decoder) gets it back from ``harmonize(lookahead="blocks")``
    id for id: the blocks at the same moments with the same notes, the soprano fed at its onsets."""
    rng = np.random.default_rng(3)
    melody = soprano(rng, num_notes=20)
    lower = lower_parts(rng, melody)
    lower[:, 2] = np.minimum(lower[:, 2], melody[:, 2].max())  # every note ends by the melody's end (the window)
    lower[:, 3] = melody[0, 3]  # one loudness: the decoder writes a melody's as encode_notes of the melody alone
    ids, _ = READING.encode_read_ahead(lower, melody)
    head = [READING.bos_id, *READING.control_ids()]
    target = [*head, *ids.tolist(), READING.eos_id]
    assert (ids == READING.infill_id("GAP")).sum() >= 4  # the melody lasts several blocks
    got = harmonize(Oracle(READING, target), READING, melody, parts=[1, 2, 3], lookahead="blocks",
                    max_new_tokens=len(target))  # fmt: skip
    without_velocity = lambda seq: [t for t in seq if not READING.velocity_offset <= t < READING.pitch_offset]  # noqa: E731
    assert without_velocity(got) == without_velocity(target)


def test_the_nll_is_what_the_read_ahead_decoder_samples_from(monkeypatch):
    """The decoder's own draws with the melody read ahead in blocks: ``decoder_token_nll`` gives each sampled id the
    probability it was drawn with, the blocks read (given), the clock rewound at each ``MIDDLE``."""
    rng = np.random.default_rng(4)
    model = tiny_model(READING, seed=4)
    melody = soprano(rng, num_notes=10)
    drawn = record_draws(monkeypatch)
    ids = np.asarray(harmonize(model, READING, melody, parts=[1, 2, 3], lookahead="blocks",
                               generator=torch.Generator().manual_seed(0), max_new_tokens=200))  # fmt: skip
    gap, middle = (np.asarray(ids == READING.infill_id(name)) for name in ("GAP", "MIDDLE"))
    assert gap.sum() >= 2 and len(drawn) > 50
    head = 1 + len(READING.control_ids())
    fed = given_positions(READING, ids, head) | (np.cumsum(gap) > np.cumsum(middle)) | middle
    fed[:head] = True
    got = decoder_token_nll(model, READING, ids, fed, [1, 2, 3], seq_len=4096, window_end=float(melody[:, 2].max()))
    sampled = np.flatnonzero(~fed) - 1  # got[i] scores ids[i + 1]
    drawn = drawn[:-1]  # the budget's last draw: a PITCH the decoder drops when no length follows
    assert len(sampled) >= len(drawn)
    np.testing.assert_allclose(got[sampled[: len(drawn)]], drawn, rtol=1e-4, atol=1e-5)

"""Decoding around given notes: the model writes some parts, the given notes come back exactly.

:func:`constrained_decode` is the decoder under :func:`~multimodal.music.harmonize.harmonize` and
:func:`~multimodal.music.harmonize.infill`; :func:`decoder_token_nll` scores real music as that decoder would
write it. A vocabulary with parts (:mod:`~multimodal.tokenizers.midi_duration`) writes the notes of each onset
in part order, every note with its length. Decoding is constrained so that the given notes appear
exactly, by construction, and the model only adds to the other parts:

- the given notes are encoded as the model would write them; when decoding reaches an onset of a
  given note, the tokens of that onset's given notes are fed to the model (not sampled);
- a TIME_SHIFT may not jump past the next given onset (longer shifts are masked), and EOS is masked
  until every given note is written;
- the PITCH ids of the given parts, and of parts the caller did not allow, are masked, so the model
  never adds a note to the melody;
- the model writes notes as the vocabulary does, ``[VELOCITY] PITCH DURATION`` (after its PITCH only a
  DURATION, a DURATION nowhere else, one VELOCITY at a time), and never BOS, PAD or a control id, which open
  a sequence: the shipped model, left free, wrote lengths with no note and control ids mid-piece until the
  budget ran out, in 3 of the first 12 test chorales' sopranos;
- a pitch that a given note sounds in a written part is not struck in that part until it ends (a strike
  would cut the given note or merge with it), and the model strikes a pitch in a part once an onset at most:
  one sample of the shipped model struck one note 121 times at one onset. A later strike of its own note
  ends it, as the vocabulary's rule has it (a repeated note: the model guessed the first length too long);
- a note the model starts ends by the window's end, or as late as :class:`NoteEnds` lets it (infilling);
- ``avoid_parallels=True``: each part the model writes sings one note at a time, and the pitches
  that would make parallel fifths or octaves with a part that has moved at the same onset are masked
  (:class:`~multimodal.music.voice_leading.ParallelsRule`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from multimodal.generation.config import SamplingConfig
from multimodal.generation.guidance import GuidedModel
from multimodal.generation.processors import add_logit_bias
from multimodal.generation.sample import sample_next
from multimodal.music.continuation import unconditional_prompt
from multimodal.music.voice_leading import ParallelsRule
from multimodal.tokenizers.midi import NUM_PITCHES
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer
from multimodal.tokenizers.music_controls import Controls

NEW_IDS_PER_SECOND = 64
"""The default budget of new ids a second of a span: about three times what the model writes in the lower voices of
a Bach chorale (three parts of mostly quarter and eighth notes: about 20 ids a second) and above a fiddle tune's
sixteenth notes in every part."""


def new_ids_budget(window: tuple[float, float]) -> int:
    """The sampled ids :func:`constrained_decode` allows by default for a span of ``window`` seconds: 256, and
    :data:`NEW_IDS_PER_SECOND` for each of its seconds."""
    return 256 + math.ceil(NEW_IDS_PER_SECOND * max(window[1] - window[0], 0.0))


CHORD_SECONDS = 0.05
"""Notes of one part that start this close together count as one chord for ``chord_sizes``: lost, a model writes
"smears", two notes at each of eight 10 ms steps in a row, which a bound on one exact onset let through. 50 ms is
a 32nd note at 150 quarter notes a minute: the bound reaches only faster notes than that."""


def constrained_decode(
    model: nn.Module,
    tokenizer: MidiDurationTokenizer,
    given: np.ndarray,
    parts: list[int],
    window: tuple[float, float],
    *,
    controls: Controls | None = None,
    max_new_tokens: int | None = None,
    sampling: SamplingConfig | None = None,
    generator: torch.Generator | None = None,
    avoid_parallels: bool = False,
    chord_sizes: list[int] | None = None,
    part_ranges: list[tuple[int, int] | None] | None = None,
    block: tuple[float, np.ndarray] | None = None,
    announce: bool = True,
    read_ahead: bool = False,
    note_ends: NoteEnds | None = None,
    **options: Any,
) -> list[int]:
    """Samples notes of ``parts`` inside ``window`` (seconds) around ``given`` notes written exactly.

    The rules of the module docstring: given tokens fed at their onsets, shifts that would pass the next
    given onset and EOS (while given notes remain) masked, PITCH ids of other parts masked, and outside
    the window no new note at all (time jumps straight to the next given onset or the window). A note the
    model starts ends by the window's end, or where ``note_ends`` says (:meth:`NoteEnds.latest`). Decoding
    stops at EOS once every given note is written, once
    time passes the window and the given notes, or after ``max_new_tokens`` sampled tokens (None:
    :func:`new_ids_budget` of the window; given notes not reached by then are appended, alone, with a warning
    saying where the new parts stop). ``avoid_parallels``: one note at a time in each of ``parts``, and
    no new pitch that makes parallel fifths or octaves (:class:`~multimodal.music.voice_leading.ParallelsRule`).
    ``part_ranges``: each part's ``(lowest, highest)`` MIDI pitch, the model's notes kept inside it (by part; None,
    or a part's None: no bound; :func:`~multimodal.music.ranges.part_ranges`). ``block``: ``(split seconds, the given notes from the window's end on)`` with infilling ids — before time
    reaches ``split`` (a shift the model samples past it is dropped), the decoder reads ``GAP … AFTER … MIDDLE``
    (:meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.infill_block`) and goes on from the
    last onset before it, as :meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_infilling`
    writes a gap ``[split, end)``: only the given notes in ``[split, end)`` come ahead, the block's notes are
    not fed again, and after it time stops at the window's end. ``announce``: with AHEAD ids, the given notes
    from the window on are also written ahead (False: at their onsets only). ``read_ahead``: with infilling
    ids, each time time arrives ``infill_after_steps`` or more after the last block (and at the start), the
    decoder reads ``GAP AFTER [the given notes of the next infill_after_steps] MIDDLE`` and goes on from
    there, as :meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_read_ahead` writes
    them (no notes ahead then). Returns the ids, from BOS.

    What comes from the given music and when is :class:`_GivenMusic`'s part; the rules for the model's own
    notes are :class:`_ModelNotes`'s; this function samples between them.
    """
    sampling = SamplingConfig.of(sampling, **options)
    max_new_tokens = new_ids_budget(window) if max_new_tokens is None else max_new_tokens
    if read_ahead and not getattr(tokenizer.config, "infill_after_steps", 0):
        raise ValueError("read_ahead needs a vocabulary with GAP AFTER MIDDLE ids (infill_after_steps > 0)")
    score = _GivenMusic(tokenizer, given, window, block, announce, read_ahead)
    kept = score.given[np.isin(score.given[:, 4], parts)] if len(score.given) else score.given
    notes = _ModelNotes(tokenizer, parts, kept, NoteEnds.of(tokenizer, window[1]) if note_ends is None else note_ends,
                        chord_sizes, avoid_parallels)  # fmt: skip
    banned = banned_ids(tokenizer, parts, part_ranges)  # ids the model may not write in the window
    outside = banned.clone()
    outside[tokenizer.pitch_offset : tokenizer.duration_offset] = True  # no new note outside the window
    shift_ids = tokenizer.time_shift_offset + torch.arange(tokenizer.config.num_time_shifts)
    anticipating = getattr(tokenizer.config, "anticipation_steps", 0) > 0

    head = [tokenizer.bos_id, *(tokenizer.control_ids(controls) if tokenizer.config.controls else [])]
    unconditional = unconditional_prompt(tokenizer, head, sampling)
    if unconditional is not None:  # classifier-free guidance: every call below runs both prompts
        model = GuidedModel(model, unconditional, sampling.guidance_scale)
    ids, sampled, queue = list(head), 0, score.start()
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            state = model.new_state()
            logits = model(torch.tensor([ids], device=device), state=state)[0, -1]
            while sampled < max_new_tokens:
                if not queue and not notes.waiting_for_length(ids[-1]):
                    queue = score.due()
                    if queue is None:
                        break  # past the window and every given note
                if queue:
                    token, own = queue.pop(0), False
                else:
                    mask = (banned if score.in_window else outside).clone()
                    notes.forbid(mask, score.time, score.in_window)
                    stop = score.next_stop()
                    if stop is not None:  # no shift past the next given onset (with AHEAD: it stops there)
                        mask[tokenizer.eos_id] = True
                        logits = stop_shifts_at(logits[None], shift_ids, torch.tensor([stop - score.time]),
                                                merge=anticipating)[0]  # fmt: skip
                    scores = add_logit_bias(logits.float().cpu()[None], sampling.logit_bias, sampling.logit_bias_group)
                    token, own = int(sample_next(scores.masked_fill(mask, float("-inf")), sampling,
                                                 generator=generator)[0]), True  # fmt: skip
                    sampled += 1
                    if token == tokenizer.eos_id:
                        ids.append(token)
                        break
                    if score.reaches_split(token):
                        queue = score.read_block()  # the shift is dropped: the gap's notes come after the block
                        continue
                notes.wrote(token, own, score.time)
                due, sounds_at = score.follow(token, ids[-1])
                queue = due + queue  # notes due ahead come first
                if not score.in_block and token < tokenizer.infill_offset:
                    notes.heard(token, sounds_at)
                ids.append(token)
                logits = model(torch.tensor([[token]], device=device), state=state)[0, -1]
    finally:
        model.train(was_training)
    if sampled >= max_new_tokens and score.time < score.last:
        warnings.warn(f"the new notes stop at {score.time * score.step:.1f} s of the {window[0]:g}-{window[1]:g} s span: "
                      f"the budget of {max_new_tokens} new ids ran out (raise max_new_tokens, --max-new-tokens)",
                      stacklevel=3)  # fmt: skip
    if tokenizer.pitch_offset <= ids[-1] < tokenizer.duration_offset:
        ids.pop()  # a note the budget cut before its length
    return ids + score.rest()  # out of tokens: the given notes still go in, alone


class _GivenMusic:
    """Where :func:`constrained_decode` is in the piece and what of the given music it feeds next.

    ``time`` (steps) moves with each shift written; each onset's given notes are fed when time arrives there;
    outside the window time goes straight on to the next given onset or the window; with ``block``, the
    ``GAP … AFTER … MIDDLE`` block of the music after the window is read where time reaches its split (time runs
    inside the block and comes back at its MIDDLE); with ``read_ahead``, a block of the given notes' next seconds
    each time they run out; with AHEAD ids and ``announce``, each given note is also written ahead of it.
    Arguments as :func:`constrained_decode`'s.
    """

    def __init__(self, tokenizer: MidiDurationTokenizer, given: np.ndarray, window: tuple[float, float],
                 block: tuple[float, np.ndarray] | None, announce: bool, read_ahead: bool) -> None:  # fmt: skip
        self.tokenizer, self.step = tokenizer, tokenizer.config.time_step
        self.first, self.last, self.window_end = round(window[0] / self.step), round(window[1] / self.step), window[1]
        self.anticipating = getattr(tokenizer.config, "anticipation_steps", 0) > 0
        self.split = None if block is None else round(block[0] / self.step)  # where the block is read (None: no block)
        self.block_notes = None if block is None else block[1]
        if block is not None and len(given):  # the block writes the music of its seconds after the window: not fed again
            onset = np.rint(given[:, 1] / self.step)
            given = given[(onset < self.last) | (onset >= self.last + tokenizer.config.infill_after_steps)]
        self.given = given
        self.groups = _onset_groups(tokenizer, tokenizer.encode_notes(given)) if len(given) else []
        # with AHEAD ids the given notes from the window on are also written ahead (the music before it sounds);
        # with a block, only those between its split and the window's end, after it
        announced = (given[given[:, 1] >= window[0]] if block is None
                     else given[(given[:, 1] >= block[0]) & (given[:, 1] < window[1])])  # fmt: skip
        announcing = self.anticipating and announce and not read_ahead and len(announced)
        self.announcer = AheadAnnouncer(tokenizer, announced) if announcing else None
        self.read_ahead = read_ahead
        self.time, self.next_group, self.next_read = 0, 0, 0  # next_read: the step from which a block is read ahead
        self.block_read, self.in_block, self.before_gap = block is None, False, 0  # before_gap: the time GAP found
        self.loudness: int | None = None  # the written notes' loudness (a VELOCITY bin; not a note ahead's)
        self.note_ahead = 0  # steps ahead of its moment that the given note being written sounds (AHEAD)

    @property
    def in_window(self) -> bool:
        """Whether time is inside the window, where the model may start notes."""
        return self.first <= self.time < self.last

    def start(self) -> list[int]:
        """The ids due before the model's first choice: the given notes due ahead at the start."""
        return self.announcer.due(self.time) if self.announcer is not None and self.split is None else []

    def next_stop(self) -> int | None:
        """The step no shift may pass: the next given onset, or where the block is read (or, after it, the window's
        end); None when none comes."""
        stop = self.groups[self.next_group][0] if self.next_group < len(self.groups) else None
        if self.split is not None and self.time < self.last and not self.in_block:
            at = self.last if self.block_read else self.split
            stop = at if stop is None else min(stop, at)
        return stop

    def due(self) -> list[int] | None:
        """The ids to feed now, before the model chooses again: a block due, the given notes of this onset, or
        (outside the window) the way on to what comes next; ``[]``: the model chooses; None: nothing comes."""
        stop = self.next_stop()
        if self.read_ahead and not self.in_block and self.time >= self.next_read:  # the given notes' next seconds
            self.next_read = self.time + self.tokenizer.config.infill_after_steps
            return self.tokenizer.infill_block(self.given, self.time, self.time * self.step, self.loudness)[0].tolist()
        if not self.block_read and not self.in_block and self.time >= self.split:
            return self.read_block()  # a span from the piece's start
        if stop == self.time:
            self.next_group += 1
            return list(self.groups[self.next_group - 1][1])  # this onset's given notes, as the model writes them
        if self.in_window:
            return []
        ahead = [t for t in (stop, self.first if self.time < self.first else None) if t is not None]
        if not ahead:
            return None
        if not self.block_read and not self.in_block and min(ahead) >= self.split:
            return self.read_block()
        return self.tokenizer.shift_ids(min(ahead) - self.time).tolist()

    def read_block(self) -> list[int]:
        """``GAP … AFTER … MIDDLE`` from here, in place of a shift that would reach the split."""
        return self.tokenizer.infill_block(self.block_notes, self.time, self.window_end, self.loudness)[0].tolist()

    def reaches_split(self, token: int) -> bool:
        """Whether ``token``, sampled by the model, is a shift that would reach the block's split unread."""
        shift = self.tokenizer.time_shift_offset <= token < self.tokenizer.velocity_offset
        return shift and not self.block_read and self.time + token - self.tokenizer.time_shift_offset + 1 >= self.split

    def follow(self, token: int, previous: int) -> tuple[list[int], int]:
        """Moves on with ``token`` written after ``previous``; returns the given notes now due ahead and the step
        at which ``token``'s note sounds (a note written ahead sounds later than time)."""
        tokenizer, due = self.tokenizer, []
        if tokenizer.time_shift_offset <= token < tokenizer.velocity_offset:
            self.time += token - tokenizer.time_shift_offset + 1
            if self.announcer is not None and self.block_read and not self.in_block:  # time arrived: notes due ahead
                due = self.announcer.due(self.time)
        elif (self.split is not None or self.read_ahead) and token >= tokenizer.infill_offset:
            if token == tokenizer.infill_id("GAP"):
                self.in_block, self.before_gap = True, self.time
            elif token == tokenizer.infill_id("MIDDLE"):
                self.in_block, self.time = False, self.before_gap
                if not self.block_read and self.announcer is not None:  # the gap's given notes ahead, from here
                    due = self.announcer.due(self.time)
                self.block_read = True
        elif tokenizer.velocity_offset <= token < tokenizer.pitch_offset and not (
                self.anticipating and tokenizer.ahead_offset <= previous < tokenizer.infill_offset):  # fmt: skip
            self.loudness = token - tokenizer.velocity_offset
        if self.anticipating and tokenizer.ahead_offset <= token < tokenizer.infill_offset:
            self.note_ahead = token - tokenizer.ahead_offset
        sounds_at = self.time + self.note_ahead
        if tokenizer.duration_offset <= token < tokenizer.control_offset:
            self.note_ahead = 0
        return due, sounds_at

    def rest(self) -> list[int]:
        """The given notes not reached, each onset after a shift to it (when the budget ran out)."""
        ids = []
        for onset, group in self.groups[self.next_group :]:
            ids += self.tokenizer.shift_ids(onset - self.time).tolist() + group
            self.time = onset
        self.next_group = len(self.groups)
        return ids


class _ModelNotes:
    """The rules :func:`constrained_decode` holds the model's own notes to (the module docstring's list), and what
    they need to remember of the ids so far.

    Args:
        tokenizer: The duration tokenizer.
        parts: The parts the model writes.
        kept: ``(n, 4 or 5)`` given notes of those parts: their pitches are not struck while they sound.
        note_ends: Where a note the model starts may end at the latest.
        chord_sizes: The most notes the model may start at one moment — within :data:`CHORD_SECONDS` — by part
            (None: no bound).
        avoid_parallels: No parallel fifths or octaves, one note at a time a part (:class:`ParallelsRule`).
    """

    def __init__(self, tokenizer: MidiDurationTokenizer, parts: list[int], kept: np.ndarray, note_ends: NoteEnds,
                 chord_sizes: list[int] | None, avoid_parallels: bool) -> None:  # fmt: skip
        step = tokenizer.config.time_step
        kept = tokenizer.decode_notes(tokenizer.encode_notes(kept)) if len(kept) else np.empty((0, 5))  # as they sound
        part_of = kept[:, 4] if kept.shape[1] == 5 else np.zeros(len(kept))
        # (PITCH id, onset, end) in steps: while a note sounds, its pitch is not struck again in its part (a given
        # note would end or merge; the model's own notes go in at their onset: one strike a pitch an onset)
        self.sounding = [(tokenizer.pitch_offset + int(q) * NUM_PITCHES + int(p), round(on / step), round(off / step))
                         for p, on, off, q in zip(kept[:, 0], kept[:, 1], kept[:, 2], part_of, strict=True)]  # fmt: skip
        self.tokenizer, self.note_ends, self.chord_sizes = tokenizer, note_ends, list(chord_sizes or [])
        self.parallels = ParallelsRule(tokenizer, parts) if avoid_parallels else None
        self.is_duration, self.is_velocity = note_grammar(tokenizer)
        self.durations = torch.as_tensor(tokenizer.config.duration_steps)
        self.duration_ids = tokenizer.duration_offset + torch.arange(len(self.durations))
        self.chord_steps = max(1, round(CHORD_SECONDS / step))  # onsets this close make one chord
        self.starts: list[tuple[int, int]] = []  # (step, part) of the notes the model started lately
        self.pending = False  # a PITCH the model wrote waits for its DURATION
        self.written_pitch = -1  # that PITCH
        self.own_velocity = False  # the last id is a VELOCITY the model wrote

    def waiting_for_length(self, last: int) -> bool:
        """Whether a note waits for its DURATION after the id ``last`` (the model's, or a given note's)."""
        return self.pending or self.tokenizer.pitch_offset <= last < self.tokenizer.duration_offset

    def forbid(self, mask: torch.Tensor, time: int, in_window: bool) -> None:
        """Adds to ``mask`` (bool ``(vocab,)``, in place) what the rules forbid the model at step ``time``."""
        for pitch_id, onset, offset in self.sounding:
            if onset <= time < offset:
                mask[pitch_id] = True
        recent = [part for onset, part in self.starts if time - onset < self.chord_steps]
        for part, size in enumerate(self.chord_sizes):  # parts that started all they may now
            if recent.count(part) >= size:
                offset = self.tokenizer.pitch_offset + part * NUM_PITCHES
                mask[offset : offset + NUM_PITCHES] = True
        if self.pending:  # the model's PITCH: only its length, and it ends where the rules let it
            mask |= ~self.is_duration
            mask[self.duration_ids[self.durations > self.note_ends.latest(self.written_pitch, time) - time]] = True
        else:
            mask |= self.is_duration  # a length only after a PITCH
            if self.own_velocity:
                mask |= self.is_velocity  # one VELOCITY before a note
        if self.parallels is not None and in_window:  # outside, no pitch may start anyway
            mask |= self.parallels.banned(time)

    def wrote(self, token: int, own: bool, time: int) -> None:
        """Takes in ``token``, written at step ``time`` (``own``: sampled from the model, not fed)."""
        tokenizer = self.tokenizer
        if tokenizer.pitch_offset <= token < tokenizer.duration_offset:
            self.pending, self.written_pitch = own, token
        elif not tokenizer.velocity_offset <= token < tokenizer.pitch_offset:
            if self.pending and tokenizer.duration_offset <= token < tokenizer.control_offset:
                # the model's own note: its pitch in its part is not struck twice at one onset (a later strike
                # ends it, as the vocabulary's rule has it: a repeated note)
                self.sounding.append((self.written_pitch, time, time + 1))
                part = (self.written_pitch - tokenizer.pitch_offset) // NUM_PITCHES
                self.starts = [start for start in self.starts if time - start[0] < self.chord_steps] + [(time, part)]
            self.pending = False  # a DURATION ends it; a shift, special or control drops the pitch
        self.own_velocity = own and tokenizer.velocity_offset <= token < tokenizer.pitch_offset

    def heard(self, token: int, time: int) -> None:
        """Takes in ``token`` of the music as it sounds at step ``time`` (outside a block): a shift ends the notes
        that ended by then; the parallels rule hears every note."""
        if self.tokenizer.time_shift_offset <= token < self.tokenizer.velocity_offset:
            self.sounding = [note for note in self.sounding if note[2] > time]  # time does not go back before this
        if self.parallels is not None:
            self.parallels.add(token, time)


class AheadAnnouncer:
    """Writes given notes ahead during decoding as :meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_anticipated`
    places them: each time the decoder's time arrives (the start, the end of a shift), the notes whose onset is
    ``anticipation_steps`` away or less and not yet written, by part and pitch, each
    ``AHEAD_k [VELOCITY] PITCH DURATION`` (a VELOCITY when the notes ahead change loudness).

    Args:
        tokenizer: A duration tokenizer with AHEAD ids.
        given: ``(m, 4 or 5)`` the notes to write ahead.
    """

    def __init__(self, tokenizer: MidiDurationTokenizer, given: np.ndarray) -> None:
        self.tokenizer = tokenizer
        self.rows = tokenizer.ahead_rows(given) if len(given) else []  # by onset
        self.next = 0
        self.velocity: int | None = None

    def due(self, time: int) -> list[int]:
        """The ids of the notes due ahead at step ``time`` (each note once, over all calls with rising ``time``)."""
        first = self.next
        while self.next < len(self.rows) and self.rows[self.next][0] - self.tokenizer.config.anticipation_steps <= time:
            self.next += 1
        ids = []
        for onset, pitch, duration, velocity in sorted(self.rows[first : self.next], key=lambda row: (row[1], row[0])):
            ids.append(self.tokenizer.ahead_offset + onset - time)
            if velocity != self.velocity:
                ids.append(velocity)
                self.velocity = velocity
            ids += [pitch, duration]
        return ids


class NoteEnds:
    """Where a note the decoder's model starts may end at the latest, in the tokenizer's steps.

    By default at the window's end. :func:`infill` also gives each part a reach: its new notes may sound as
    late as the notes they replace did (the replaced notes of that part that started in the span), so a note
    of the span's last beat is not cut short at the span's end and the part is not silent until its kept
    music resumes. A new note never sounds onto the next kept note of its part and pitch (the vocabulary
    would read that note as a re-strike ending it, or merge the two).

    Args:
        last: The window's end (steps).
        pitch_offset: The tokenizer's first PITCH id.
        reach: By part, the step its new notes may sound to (``last`` or later; parts not named: ``last``).
        kept_onsets: By PITCH id (part and pitch), the sorted onsets (steps) of the kept notes of it.
    """

    def __init__(self, last: int, pitch_offset: int, reach: dict[int, int] | None = None,
                 kept_onsets: dict[int, np.ndarray] | None = None) -> None:  # fmt: skip
        self.last, self.pitch_offset = last, pitch_offset
        self.reach, self.kept_onsets = reach or {}, kept_onsets or {}

    @classmethod
    def of(cls, tokenizer: MidiDurationTokenizer, end: float, replaced: np.ndarray | None = None,
           kept: np.ndarray | None = None) -> NoteEnds:  # fmt: skip
        """The ends for a window ending at ``end`` seconds where ``replaced`` ``(n, 5)`` notes were taken out and
        ``kept`` ``(m, 5)`` notes of the written parts stay (both as the tokenizer writes them once encoded)."""
        step = tokenizer.config.time_step

        def on_grid(notes: np.ndarray | None) -> np.ndarray:  # (n, 5): one part's notes decode without the column
            if notes is None or not len(notes):
                return np.empty((0, 5))
            notes = tokenizer.decode_notes(tokenizer.encode_notes(notes))
            return notes if notes.shape[1] == 5 else np.column_stack([notes, np.zeros(len(notes))])

        last, reach, kept_onsets = round(end / step), {}, {}
        for _, _, off, _, part in on_grid(replaced):
            reach[int(part)] = max(reach.get(int(part), last), round(off / step))
        for pitch, on, _, _, part in on_grid(kept):
            kept_onsets.setdefault(tokenizer.pitch_offset + int(part) * NUM_PITCHES + int(pitch), []).append(round(on / step))
        onsets = {pitch_id: np.sort(found) for pitch_id, found in kept_onsets.items()}
        return cls(last, tokenizer.pitch_offset, reach, onsets)

    def latest(self, pitch_id: int, time: int) -> int:
        """The latest end (step) of a note of ``pitch_id`` (a PITCH id: part and pitch) that starts at ``time``."""
        latest = self.reach.get((pitch_id - self.pitch_offset) // NUM_PITCHES, self.last)
        onsets = self.kept_onsets.get(pitch_id)
        if onsets is not None:
            later = onsets[onsets > time]
            latest = min(latest, int(later[0])) if len(later) else latest
        return latest


def banned_ids(tokenizer: MidiDurationTokenizer, parts: list[int],
               part_ranges: list[tuple[int, int] | None] | None = None) -> torch.Tensor:  # fmt: skip
    """bool ``(vocab,)``: the ids the decoder never lets the model write inside the window — the PITCH ids of
    parts not in ``parts`` (and of pitches outside a part's ``part_ranges`` entry, when given), every AHEAD and
    infilling id (given notes come from the caller, never from the model), and PAD, BOS and the control ids (they
    open a sequence, which the caller writes)."""
    banned = torch.zeros(tokenizer.vocab_size, dtype=torch.bool)
    banned[tokenizer.pitch_offset : tokenizer.duration_offset] = True
    for part in parts:
        offset = tokenizer.pitch_offset + part * NUM_PITCHES
        span = part_ranges[part] if part_ranges is not None and part < len(part_ranges) else None
        low, high = span if span is not None else (0, NUM_PITCHES - 1)
        banned[offset + low : offset + high + 1] = False
    banned[tokenizer.control_offset :] = True
    banned[[tokenizer.pad_id, tokenizer.bos_id]] = True
    return banned


def note_grammar(tokenizer: MidiDurationTokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """bool ``(vocab,)`` masks of the DURATION and the VELOCITY ids, for the decoder's grammar of a note,
    ``[VELOCITY] PITCH DURATION``: after the model's PITCH only a DURATION, a DURATION only after it, and no
    VELOCITY right after the model's VELOCITY (it names the loudness of the note that follows)."""
    is_duration = torch.zeros(tokenizer.vocab_size, dtype=torch.bool)
    is_duration[tokenizer.duration_offset : tokenizer.control_offset] = True
    is_velocity = torch.zeros(tokenizer.vocab_size, dtype=torch.bool)
    is_velocity[tokenizer.velocity_offset : tokenizer.pitch_offset] = True
    return is_duration, is_velocity


def stop_shifts_at(logits: torch.Tensor, shift_ids: torch.Tensor, steps: torch.Tensor, merge: bool = True) -> torch.Tensor:
    """Float ``(n, vocab)`` logits where no TIME_SHIFT of row ``i`` passes a given note ``steps[i]`` steps ahead.

    Longer shifts become ``-inf``; with ``merge`` the shift of exactly ``steps[i]`` first takes their
    probability (log-sum-exp), so time stops at the given note's moment whatever the model meant to skip,
    as training with notes written ahead cut the shifts there. ``shift_ids``: ``(num_shifts,)`` the ids of
    shifts of 1, 2, … steps; ``steps``: ``(n,)``, beyond the longest shift: the row is unchanged. A copy.
    """
    logits = logits.float().clone()
    shift_ids = shift_ids.to(logits.device)
    lengths = torch.arange(1, len(shift_ids) + 1, device=logits.device)
    steps = torch.as_tensor(steps, device=logits.device).reshape(-1, 1)
    shift_logits = logits[:, shift_ids]
    if merge:  # tail[:, k - 1]: log-sum-exp of the shifts of k steps or more
        tail = torch.logcumsumexp(shift_logits.flip(-1), dim=-1).flip(-1)
        shift_logits = torch.where(lengths == steps, tail, shift_logits)
    logits[:, shift_ids] = shift_logits.masked_fill(lengths > steps, float("-inf"))
    return logits


def decoder_token_nll(
    model: nn.Module,
    tokenizer: MidiDurationTokenizer,
    ids: Any,
    is_given: Any,
    parts: list[int],
    seq_len: int,
    stride: int | None = None,
    window_end: float | NoteEnds | None = None,
    stop_at: float | None = None,
) -> np.ndarray:
    """The NLL (nats) of each of ``ids[1:]`` as the harmonize / infill decoder samples it, float64 ``(len(ids) - 1,)``.

    ``ids`` ``(num_ids,)`` are a whole sequence from BOS, ``is_given`` ``(num_ids,)`` marks the ids of given notes
    (:meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_anticipated`'s mask): the
    decoder feeds those and samples the rest from the model's logits under its rules — the ids of
    :func:`banned_ids` (other parts' pitches, AHEAD) and, while given notes remain, EOS are never written,
    and no shift passes the next given note (with AHEAD ids, the shift that reaches it takes the
    probability of the longer ones: :func:`stop_shifts_at`). ``window_end`` (seconds): while a note the
    model started waits for its length, lengths that pass it are never written (None: not applied — a real
    note that passes it would score ``inf``); :func:`infill`'s decoder lets a part's notes sound longer
    (:class:`NoteEnds`, which ``window_end`` may be). ``stop_at`` (seconds): outside a ``GAP … AFTER … MIDDLE``
    block, time stops there as at a given note and EOS is never written before it — :func:`infill`'s decoder,
    which feeds the music after the span (before the block it stops time where it reads the block: the same
    probability for every id arriving earlier). The block's ids are read, not decoded: they count as given,
    never as a given note at its onset. The NLL
    of a given id is not meaningful (it may be ``inf``).
    Windows as :func:`~multimodal.music.scoring.token_nll`. The model strikes a pitch in a part once an onset at
    most, and a note keeps its grammar (:func:`note_grammar`). Not modelled: no note outside the window, the pitches of given
    notes of the written parts while they sound, ``avoid_parallels`` and ``chord_sizes``.
    """
    from multimodal.music.scoring import token_nll

    ids, is_given = np.asarray(ids, dtype=np.int64), np.asarray(is_given, dtype=bool)
    time = tokenizer.clock(ids)  # the step after each id
    remain, steps = _given_stops(tokenizer, ids, is_given, time, stop_at)
    banned = banned_ids(tokenizer, parts)
    shift_ids = tokenizer.time_shift_offset + torch.arange(tokenizer.config.num_time_shifts)
    anticipating = getattr(tokenizer.config, "anticipation_steps", 0) > 0
    pending = _waiting_for_length(tokenizer, ids, is_given)
    forbidden = _forbidden_by_note_rules(tokenizer, ids, is_given, time, pending)
    if window_end is not None:
        ends = window_end if isinstance(window_end, NoteEnds) else NoteEnds.of(tokenizer, window_end)
        forbidden |= _lengths_too_long(tokenizer, ids, time, pending, ends)

    def rules(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        logits = stop_shifts_at(logits, shift_ids, steps[index], merge=anticipating)
        mask = banned.to(logits.device) | forbidden[index].to(logits.device)
        mask[:, tokenizer.eos_id] |= remain[index].to(logits.device)
        return logits.masked_fill(mask, float("-inf"))

    return token_nll(model, ids, seq_len, stride, rules=rules)


def _given_stops(tokenizer: MidiDurationTokenizer, ids: np.ndarray, is_given: np.ndarray, time: np.ndarray,
                 stop_at: float | None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """For each of ``ids[1:]``: whether a given note still comes (bool ``(n - 1,)``: EOS is not written) and how many
    steps ahead time stops for it (int ``(n - 1,)``, int32's max when none), as :func:`decoder_token_nll` reads
    them: given PITCH ids fed at their onset (not a note written ahead, not inside a block), and ``stop_at``."""
    is_ahead = (ids >= tokenizer.ahead_offset) & (ids < tokenizer.infill_offset)  # a given note's row ahead
    row_ahead = np.maximum.accumulate(np.where(is_ahead, np.arange(len(ids)), -1))  # the last AHEAD at or before
    is_pitch = (ids >= tokenizer.pitch_offset) & (ids < tokenizer.duration_offset)
    at_onset = is_given & is_pitch & ~((row_ahead >= 0) & (np.arange(len(ids)) - row_ahead <= 2))  # fed at its onset
    decoding = np.ones(len(ids), dtype=bool)  # the ids after which the decoder chooses (not inside a block)
    if getattr(tokenizer.config, "infill_after_steps", 0):
        gap, middle = (ids == tokenizer.infill_id(name) for name in ("GAP", "MIDDLE"))
        inside = np.cumsum(gap) > np.cumsum(middle)  # GAP up to (not with) its MIDDLE
        at_onset &= ~(inside | middle)  # the block's notes are read, not fed
        decoding &= ~inside
    never = np.iinfo(np.int64).max
    next_given = np.minimum.accumulate(np.where(at_onset, time, never)[::-1])[::-1][1:]  # predicting ids[1:]
    if stop_at is not None:  # time stops at the window's end as at a given note
        last = round(stop_at / tokenizer.config.time_step)
        next_given = np.where(decoding[:-1] & (time[:-1] < last), np.minimum(next_given, last), next_given)
    remain = next_given < never
    return torch.as_tensor(remain), torch.as_tensor(np.where(remain, next_given - time[:-1], np.iinfo(np.int32).max))


def _forbidden_by_note_rules(tokenizer: MidiDurationTokenizer, ids: np.ndarray, is_given: np.ndarray,
                             time: np.ndarray, pending: np.ndarray) -> torch.Tensor:  # fmt: skip
    """Bool ``(n - 1, vocab)``: the ids the rules for the model's own notes forbid in place of each of ``ids[1:]`` —
    its pitches struck again in their part at one onset, and a note's grammar (after its PITCH only a DURATION,
    else no DURATION; no VELOCITY after its VELOCITY)."""
    is_pitch = (ids >= tokenizer.pitch_offset) & (ids < tokenizer.duration_offset)
    forbidden = torch.zeros(len(ids) - 1, tokenizer.vocab_size, dtype=torch.bool)
    written = np.flatnonzero(pending[:-1] & (ids[1:] >= tokenizer.duration_offset) & (ids[1:] < tokenizer.control_offset)) + 1
    for position in written:  # a DURATION of the model's note: the PITCH is the last one before it
        pitch = ids[np.flatnonzero(is_pitch[:position])[-1]]
        forbidden[np.flatnonzero((np.arange(len(ids) - 1) >= position) & (time[:-1] == time[position])), pitch] = True
    is_duration, is_velocity = note_grammar(tokenizer)
    forbidden |= torch.where(torch.as_tensor(pending[:-1])[:, None], ~is_duration, is_duration)
    own_velocity = (ids >= tokenizer.velocity_offset) & (ids < tokenizer.pitch_offset) & ~is_given & ~pending
    forbidden[torch.as_tensor(own_velocity[:-1])] |= is_velocity
    return forbidden


def _lengths_too_long(tokenizer: MidiDurationTokenizer, ids: np.ndarray, time: np.ndarray, pending: np.ndarray,
                      ends: NoteEnds) -> torch.Tensor:  # fmt: skip
    """Bool ``(n - 1, vocab)``: where a note of the model waits for its DURATION, the lengths that end it later than
    ``ends`` allows (:meth:`NoteEnds.latest`)."""
    too_long = torch.zeros(len(ids) - 1, tokenizer.vocab_size, dtype=torch.bool)
    lengths = torch.as_tensor(tokenizer.config.duration_steps)
    is_pitch = (ids >= tokenizer.pitch_offset) & (ids < tokenizer.duration_offset)
    last_pitch = np.maximum.accumulate(np.where(is_pitch, np.arange(len(ids)), 0))  # the PITCH a length waits for
    for position in np.flatnonzero(pending[:-1]):
        latest = ends.latest(int(ids[last_pitch[position]]), int(time[position]))
        too_long[position, tokenizer.duration_offset : tokenizer.control_offset] = lengths > latest - int(time[position])
    return too_long


def _waiting_for_length(tokenizer: MidiDurationTokenizer, ids: np.ndarray, is_given: np.ndarray) -> np.ndarray:
    """Where a PITCH the decoder's model wrote waits for its DURATION, bool ``(len(ids),)``: at the PITCH and at
    the VELOCITY ids after it (as :func:`constrained_decode` reads them: any other id ends the wait)."""
    is_written_pitch = (ids >= tokenizer.pitch_offset) & (ids < tokenizer.duration_offset) & ~is_given
    is_velocity = (ids >= tokenizer.velocity_offset) & (ids < tokenizer.pitch_offset)
    pending = np.zeros(len(ids), dtype=bool)
    for position in range(len(ids)):
        pending[position] = is_written_pitch[position] or (position > 0 and pending[position - 1] and is_velocity[position])
    return pending


def _onset_groups(tokenizer: MidiDurationTokenizer, ids: Any) -> list[tuple[int, list[int]]]:
    """The given notes' ``ids`` as ``(step, the ids written at that step, shifts excluded)``."""
    groups: list[tuple[int, list[int]]] = []
    time = 0
    for token in list(ids):
        if tokenizer.time_shift_offset <= token < tokenizer.velocity_offset:
            time += token - tokenizer.time_shift_offset + 1
            continue
        if not groups or groups[-1][0] != time:
            groups.append((time, []))
        groups[-1][1].append(token)
    return groups

"""Harmonize a melody, fill a gap: the model writes some parts around given notes that it may not change.

A vocabulary with parts (:mod:`~multimodal.tokenizers.midi_duration`) writes the notes of each onset
in part order, every note with its length. Decoding is constrained so that the given notes appear
exactly, by construction, and the model only adds to the other parts, writing notes as its vocabulary does.
The rules, the decoder and its scoring are :mod:`multimodal.music.constrained`'s.

The model sees each given note when its onset comes, not before (no look-ahead): a causal model
trained on whole pieces harmonizes what it has heard so far, as a player sight-reading the tune. A
model fine-tuned to read given notes ahead (``configs/music_given_notes.yaml``) can also be shown what
comes: ``lookahead="ahead"`` writes each melody note ``AHEAD`` of it among the others
(:meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_anticipated`); ``"blocks"``
reads the melody's next seconds in a ``GAP AFTER … MIDDLE`` block each time they run out
(:meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_read_ahead`) and still feeds
each note at its onset. Both scored the real lower voices worse than sight-reading (docs/benchmarks.md),
which stays the default.
:func:`infill` is the same decoder with a window: the notes of the chosen parts that start in the
span are rewritten, the music before it and after it is given, and a new note sounds no later than the
notes of its part that it replaces did (the span's end, if they ended before) and never onto a kept note of
its part and pitch (:class:`~multimodal.music.constrained.NoteEnds`), so none hangs across the seam: what
sounded there before is what the new notes may fill, and a part is not left silent from the span's end to its
next kept note. With a vocabulary that has ``GAP AFTER MIDDLE`` ids (``infill_after_steps``), the music after the span is written
first, in full, before the model writes the span (prefix, suffix, middle:
:meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_infilling`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from multimodal.generation.config import SamplingConfig
from multimodal.music.constrained import NoteEnds, constrained_decode
from multimodal.music.continuation import part_names, prepare_outputs, write_audio
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer
from multimodal.tokenizers.midi_files import read_midi_notes, track_names
from multimodal.tokenizers.music_controls import Controls
from multimodal.viz import piano_roll_png

LOOKAHEAD_IDS = {"none": (None, "ids"), "ahead": ("anticipation_steps", "AHEAD ids (data.anticipation_seconds)"),
                 "blocks": ("infill_after_steps", "GAP AFTER MIDDLE ids (data.infill_after_seconds)")}  # fmt: skip
"""Each way :func:`harmonize` shows the model given notes: the tokenizer setting its ids need (None: none), and
what they are called in a message."""


def can_look_ahead(tokenizer: MidiDurationTokenizer, lookahead: str) -> bool:
    """Whether ``tokenizer``'s vocabulary can write given notes the ``lookahead`` way (:data:`LOOKAHEAD_IDS`)."""
    setting = LOOKAHEAD_IDS[lookahead][0]
    return setting is None or getattr(tokenizer.config, setting, 0) > 0


REREAD_SECONDS = 1.0
"""With infilling ids, :func:`infill` reads the music after the span this long before the span starts and reads
that second again after it (chosen on validation among 0-2 s: docs/benchmarks.md)."""


def check_melody(notes: np.ndarray, source: str = "the melody") -> np.ndarray:
    """A melody ``(n, 4 or 5)`` as one monophonic line ``(n, 4)``: raises ValueError, naming ``source``, for
    no notes or notes sounding together (cut a note that overlaps the next by less than 50 ms)."""
    notes = np.asarray(notes, dtype=np.float64)
    if notes.ndim != 2 or len(notes) == 0:
        raise ValueError(f"{source}: no notes to harmonize")
    notes = notes[np.lexsort((notes[:, 0], notes[:, 1])), :4].copy()
    overlap = notes[:-1, 2] - notes[1:, 1]
    if (np.diff(notes[:, 1]) <= 0).any() or (overlap > 0.05).any():
        at = float(notes[1:, 1][(np.diff(notes[:, 1]) <= 0) | (overlap > 0.05)][0])
        raise ValueError(f"{source}: several notes sound together at {at:.2f} s; give one line (a single part)")
    notes[:-1, 2] = np.minimum(notes[:-1, 2], notes[1:, 1])  # legato overlaps cut
    return notes


def read_melody(path: str | Path, track: str | None = None, source: str | None = None) -> np.ndarray:
    """The melody in a MIDI file as one line ``(n, 4)`` (:func:`check_melody`): all its notes, or those of one
    ``track`` — a number from 1 among the tracks that hold notes, or a track's name in any case (a hymn's
    ``"Soprano"``, to harmonize anew).

    Raises:
        ValueError: Naming ``source`` (default: the path): an unreadable file, a track it does not have, or notes
            that are not one line; the last two list the file's tracks to choose from.
    """
    source = source or str(path)
    notes = read_midi_notes(path, parts=True)
    names = track_names(path)
    listing = ", ".join(f"{number} {name}".strip() for number, name in enumerate(names, start=1))
    if track is not None:
        wanted = str(track).strip()
        found = [index for index, name in enumerate(names) if name.lower() == wanted.lower()]
        if wanted.isdigit() and 1 <= int(wanted) <= len(names):
            found = [int(wanted) - 1]
        if not found:
            raise ValueError(f"{source}: no track {wanted!r} with notes; its tracks: {listing or 'none'}")
        notes = notes[notes[:, 4] == found[0]]
    try:
        return check_melody(notes, source)
    except ValueError as error:
        if track is None and len(names) > 1:
            raise ValueError(f"{error}, or choose one of its {len(names)} tracks: {listing}") from None
        raise


def harmonize(
    model: nn.Module,
    tokenizer: MidiDurationTokenizer,
    given: np.ndarray,
    *,
    parts: list[int] | None = None,
    controls: Controls | None = None,
    max_new_tokens: int | None = None,
    sampling: SamplingConfig | None = None,
    generator: torch.Generator | None = None,
    avoid_parallels: bool = False,
    chord_sizes: list[int] | None = None,
    part_ranges: list[tuple[int, int] | None] | None = None,
    lookahead: str | None = None,
    **options: Any,
) -> list[int]:
    """Writes the other parts around ``given`` notes; returns the ids (BOS, controls, given and new notes).

    Args:
        model: A causal model over ``tokenizer``'s ids (``model(ids, state=...)``, ``new_state()``).
        tokenizer: A duration tokenizer with parts.
        given: ``(n, 5)`` notes ``[pitch, start_s, end_s, velocity, part]`` that must appear exactly
            (on the tokenizer's grid), e.g. a melody in part 0.
        parts: The parts the model may write (default: every part without given notes).
        controls: Style, key, meter, density (a vocabulary with controls; None: unknown).
        max_new_tokens: Sampled tokens at most (the given ones do not count); None: what the span needs,
            :data:`~multimodal.music.constrained.NEW_IDS_PER_SECOND` a second of it (a budget that runs out first
            is warned about).
        sampling: How tokens are chosen (or its fields in ``options``).
        generator: Draws the samples.
        avoid_parallels: One note at a time in each written part, and no new pitch that makes
            parallel fifths or octaves (:class:`~multimodal.music.voice_leading.ParallelsRule`).
        chord_sizes: The most notes the model may start at one moment in each part (by part; None: no
            bound) — what its training music had (:func:`~multimodal.music.ranges.part_chord_sizes`), which
            the commands pass: a model that loses its way can otherwise pile dozens of notes on one onset.
        part_ranges: Each part's ``(lowest, highest)`` MIDI pitch in its training music (by part; None: no bound;
            :func:`~multimodal.music.ranges.part_ranges`, which the commands pass): the model's notes stay inside
            it, where a lost model would otherwise write a tenor note at MIDI 21.
        lookahead: How the model sees the given notes before they sound (module docstring): ``"none"``
            (the default: sight-reading, each note at its onset only), ``"ahead"`` (AHEAD ids) or
            ``"blocks"`` (``GAP AFTER MIDDLE`` ids). Sight-reading is the default because it scored the
            real lower voices best with every given-notes model measured (docs/benchmarks.md).

    Raises:
        ValueError: A tokenizer without parts, ``parts`` that overlap the given ones, or a ``lookahead``
            the vocabulary cannot write.
    """
    num_parts = getattr(tokenizer.config, "num_parts", 1)
    if num_parts < 2:
        raise ValueError("harmonizing needs a model with parts (data.num_parts > 1)")
    given_parts = sorted({int(part) for part in given[:, 4]})
    allowed = [part for part in range(num_parts) if part not in given_parts] if parts is None else list(parts)
    if set(allowed) & set(given_parts) or not allowed or not all(0 <= part < num_parts for part in allowed):
        raise ValueError(f"parts {allowed}: choose among 0..{num_parts - 1}, none of the given parts {given_parts}")
    lookahead = "none" if lookahead is None else lookahead
    if lookahead not in LOOKAHEAD_IDS:
        raise ValueError(f"lookahead {lookahead!r}: choose {', '.join(LOOKAHEAD_IDS)}")
    if not can_look_ahead(tokenizer, lookahead):
        raise ValueError(f"lookahead {lookahead!r}: this model's vocabulary has no {LOOKAHEAD_IDS[lookahead][1]}")
    return constrained_decode(model, tokenizer, given, allowed, (0.0, float(given[:, 2].max())), controls=controls,
                              max_new_tokens=max_new_tokens, sampling=sampling, generator=generator,
                              avoid_parallels=avoid_parallels, chord_sizes=chord_sizes, part_ranges=part_ranges,
                              announce=lookahead == "ahead", read_ahead=lookahead == "blocks", **options)  # fmt: skip


def infill(
    model: nn.Module,
    tokenizer: MidiDurationTokenizer,
    notes: np.ndarray,
    start: float,
    end: float,
    *,
    parts: list[int] | None = None,
    controls: Controls | None = None,
    max_new_tokens: int | None = None,
    sampling: SamplingConfig | None = None,
    generator: torch.Generator | None = None,
    avoid_parallels: bool = False,
    chord_sizes: list[int] | None = None,
    part_ranges: list[tuple[int, int] | None] | None = None,
    read_after: float | None = None,
    **options: Any,
) -> list[int]:
    """Rewrites the notes of ``parts`` that start in ``[start, end)`` seconds; everything else stays.

    Args:
        notes: The piece, ``(n, 5)`` with parts (or ``(n, 4)``: all in part 0).
        start, end: The span to fill, in seconds.
        parts: The parts to rewrite there (default: all); the others' notes in the span are kept.
        read_after: With infilling ids: the music after the span is read this many seconds before the span's
            end (None: :data:`REREAD_SECONDS` before its start). Shorter than the span: its first part is
            written as a continuation, the rest as a gap; longer: the music before the span from there on is
            read again after the block (given, as other parts' notes in a gap), so the model finds its place
            before it writes.
        Others: as :func:`harmonize`.

    Notes starting before the span keep their length (they may sound into it); a new note sounds no later
    than the replaced notes of its part did (``end`` if they ended before it) and never onto a kept note of its
    part and pitch (:meth:`~multimodal.music.constrained.NoteEnds.of`), so none hangs across the seam; the music
    after ``end`` is given back exactly. A vocabulary with infilling ids (``infill_after_steps``) reads the music after the span before
    writing it, as it was trained (:meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_infilling`);
    the ids then hold ``GAP … AFTER … MIDDLE`` after the music before the span (:meth:`decode_notes` reads them).

    Raises:
        ValueError: An empty or inverted span, or parts the vocabulary does not have.
    """
    num_parts = getattr(tokenizer.config, "num_parts", 1)
    notes = np.asarray(notes, dtype=np.float64)
    if notes.ndim == 2 and notes.shape[1] == 4:
        notes = np.column_stack([notes, np.zeros(len(notes))])
    if not 0 <= start < end:
        raise ValueError(f"infill span {start:g} s to {end:g} s: give a start before the end, both >= 0")
    allowed = list(range(num_parts)) if parts is None else list(parts)
    if not allowed or not all(0 <= part < num_parts for part in allowed):
        raise ValueError(f"parts {allowed}: this model has parts 0..{num_parts - 1}")
    rewritten = np.isin(notes[:, 4], allowed) & (notes[:, 1] >= start) & (notes[:, 1] < end)
    given, block = notes[~rewritten], None
    ends = NoteEnds.of(tokenizer, end, replaced=notes[rewritten], kept=given[np.isin(given[:, 4], allowed)])
    if getattr(tokenizer.config, "infill_after_steps", 0):  # the music after the span read before (part of) it
        split = max(start - REREAD_SECONDS, 0.0) if read_after is None else min(max(end - read_after, 0.0), end)
        block = (split, given[np.rint(given[:, 1] / tokenizer.config.time_step) >= round(end / tokenizer.config.time_step)])
    return constrained_decode(model, tokenizer, given, allowed, (start, end), controls=controls,
                              max_new_tokens=max_new_tokens, sampling=sampling, generator=generator,
                              avoid_parallels=avoid_parallels, chord_sizes=chord_sizes, part_ranges=part_ranges,
                              block=block, note_ends=ends, **options)  # fmt: skip


def harmonize_to_files(
    model: nn.Module,
    tokenizer: MidiDurationTokenizer,
    melody: np.ndarray,
    out_dir: str | Path,
    sampling: SamplingConfig | None = None,
    *,
    melody_part: int = 0,
    parts: list[int] | None = None,
    controls: Controls | None = None,
    num_samples: int = 1,
    seed: int | None = None,
    max_new_tokens: int | None = None,
    audio: bool = True,
    sample_rate: int = 16000,
    soundfont: str | Path | None = None,
    overwrite: bool = True,
    **options: Any,
) -> list[Path]:
    """Harmonizes a melody ``num_samples`` times into ``sample_{i}.mid`` (one track per part), ``.png``
    (a hue per part: the melody pale, the new parts in full colour) and ``.wav``; returns the MIDI paths.

    Args:
        melody: ``(n, 4)`` notes of one line (:func:`check_melody`), put in part ``melody_part``.
        Others: as :func:`harmonize` and :func:`~multimodal.music.continuation.continue_music`.
    """
    melody = check_melody(melody)
    if not 0 <= melody_part < getattr(tokenizer.config, "num_parts", 1):
        raise ValueError(f"melody part {melody_part}: this model has parts 0..{tokenizer.config.num_parts - 1}")
    given = np.column_stack([melody, np.full(len(melody), float(melody_part))])

    def sample(generator: torch.Generator | None) -> list[int]:
        return harmonize(model, tokenizer, given, parts=parts, controls=controls, max_new_tokens=max_new_tokens,
                         sampling=sampling, generator=generator, **options)  # fmt: skip

    return _write_samples(sample, tokenizer, out_dir, num_samples, seed, lambda notes: notes[:, 4] == melody_part,
                          "harmonized", audio, sample_rate, soundfont, overwrite)  # fmt: skip


def infill_to_files(
    model: nn.Module,
    tokenizer: MidiDurationTokenizer,
    notes: np.ndarray,
    start: float,
    end: float,
    out_dir: str | Path,
    sampling: SamplingConfig | None = None,
    *,
    parts: list[int] | None = None,
    controls: Controls | None = None,
    num_samples: int = 1,
    seed: int | None = None,
    max_new_tokens: int | None = None,
    audio: bool = True,
    sample_rate: int = 16000,
    soundfont: str | Path | None = None,
    overwrite: bool = True,
    **options: Any,
) -> list[Path]:
    """Fills ``[start, end)`` seconds of a piece ``num_samples`` times into ``sample_{i}.mid``, ``.png`` (a hue per
    part: the kept music pale, the new notes in full colour; one part: blue and orange) and ``.wav``; returns the
    MIDI paths. Arguments as :func:`infill`."""
    chosen = list(range(getattr(tokenizer.config, "num_parts", 1))) if parts is None else list(parts)

    def sample(generator: torch.Generator | None) -> list[int]:
        return infill(model, tokenizer, notes, start, end, parts=parts, controls=controls,
                      max_new_tokens=max_new_tokens, sampling=sampling, generator=generator, **options)  # fmt: skip

    def kept(decoded: np.ndarray) -> np.ndarray:
        part = decoded[:, 4] if decoded.shape[1] == 5 else np.zeros(len(decoded))
        step = tokenizer.config.time_step
        return ~(np.isin(part, chosen) & (decoded[:, 1] >= start - step / 2) & (decoded[:, 1] < end - step / 2))

    return _write_samples(sample, tokenizer, out_dir, num_samples, seed, kept, "the gap filled",
                          audio, sample_rate, soundfont, overwrite)  # fmt: skip


def _write_samples(
    sample, tokenizer, out_dir: str | Path, num_samples: int, seed: int | None, given, legend: str, audio: bool,
    sample_rate: int, soundfont: str | Path | None, overwrite: bool,
) -> list[Path]:  # fmt: skip
    """Runs ``sample(generator)`` per output and writes its MIDI, piano roll (``given(notes)`` pale) and audio."""
    names = [f"sample_{index}" for index in range(num_samples)]
    out_dir = prepare_outputs(out_dir, names, overwrite, audio, soundfont)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    written = []
    for name in names:
        ids = sample(generator)
        midi, notes = tokenizer.decode(ids), tokenizer.decode_notes(ids)
        path = out_dir / f"{name}.mid"
        midi.write(str(path))
        piano_roll_png(notes, path.with_suffix(".png"), title=f"{name.replace('_', ' ')}: {legend}", given=given(notes),
                       part_names=part_names(tokenizer))  # fmt: skip
        if audio:
            write_audio(midi, path, sample_rate, soundfont)
        written.append(path)
    return written

"""Who plays each part and what it is called: General MIDI programs by name or number, and names, set on a
vocabulary's parts.

A model's MIDI files name each part's instrument with its General MIDI program (the tokenizer's
``part_programs``; the piano, 0, by default), and every WAV the toolkit writes plays those programs through a
SoundFont (:mod:`multimodal.audio.synthesis`). :func:`with_programs` gives a tokenizer whose decoded music
plays other instruments: a chorale sung by a choir (``"Choir Aahs"``), played by strings or on an organ.
:func:`with_part_names` gives one whose tracks, staves and piano-roll legends carry the names a musician uses
(``Soprano Alto Tenor Bass`` instead of ``Part 1`` ... ``Part 4``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pretty_midi

from multimodal.tokenizers.midi_duration import MidiDurationTokenizer

EXAMPLES = ("Choir Aahs", "String Ensemble 1", "Church Organ", "Flute", "Acoustic Grand Piano")
"""Names to suggest in a message (General MIDI's, as pretty_midi spells them)."""


def parse_program(text: str) -> int:
    """The General MIDI program (0-127) of ``text``: a number, or an instrument's General MIDI name in any case,
    spacing or punctuation (``"choir aahs"``, ``"String Ensemble 1"``, ``"church-organ"``).

    Raises:
        ValueError: Neither a number 0-127 nor a General MIDI name.
    """
    text = str(text).strip()
    if text.lstrip("-").isdigit():
        program = int(text)
        if not 0 <= program <= 127:
            raise ValueError(f"{text} is not a General MIDI program: they lie in 0..127 (the piano is 0)")
        return program
    try:
        return pretty_midi.instrument_name_to_program(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a General MIDI instrument; give its name, e.g. "
                         f"{', '.join(repr(name) for name in EXAMPLES)}, or its program 0-127") from None  # fmt: skip


def with_programs(tokenizer: MidiDurationTokenizer, programs: Sequence[int | str]) -> MidiDurationTokenizer:
    """A copy of ``tokenizer`` whose decoded music plays its parts on ``programs`` (numbers or names).

    One program plays every part; several go to the parts in order (the first part first), and parts past
    the last keep their own. The ids are the same as ``tokenizer``'s: only the MIDI it writes changes.

    Raises:
        ValueError: A program that is neither a number 0-127 nor a General MIDI name, more programs than
            parts, none at all, or a vocabulary without a program per part (the performance vocabulary).
    """
    if not isinstance(tokenizer, MidiDurationTokenizer):
        raise ValueError("instruments: the note-duration vocabulary names a program per part; this model's "
                         "vocabulary writes every note on the piano")  # fmt: skip
    config = tokenizer.config
    chosen = [parse_program(program) for program in programs]
    if not chosen or len(chosen) > config.num_parts:
        raise ValueError(f"instruments: give one for every part or one a part, at most {config.num_parts} "
                         f"(this model's parts), not {len(chosen)}")  # fmt: skip
    if len(chosen) == 1:
        chosen = chosen * config.num_parts
    own = [config.part_program(part) for part in range(config.num_parts)]
    return type(tokenizer)(replace(config, part_programs=tuple(chosen + own[len(chosen) :])))


def with_part_names(tokenizer: MidiDurationTokenizer, names: Sequence[str]) -> MidiDurationTokenizer:
    """A copy of ``tokenizer`` whose parts are called ``names``, in order (the first part first; parts past the last
    keep their own): the track names of the MIDI files it writes, so the staves of their scores and the legends of
    their piano rolls, and the names ``--parts`` and ``--melody-part`` take. The ids are ``tokenizer``'s.

    Raises:
        ValueError: No names, more names than parts, an empty name or one given twice, or a vocabulary without
            parts.
    """
    config = getattr(tokenizer, "config", None)
    if not isinstance(tokenizer, MidiDurationTokenizer) or config.num_parts < 2:
        raise ValueError("part names: this model writes one part; names are for a model with parts")
    chosen = [" ".join(str(name).split()) for name in names]
    if not chosen or len(chosen) > config.num_parts:
        raise ValueError(f"part names: give at most one a part, {config.num_parts} (this model's parts), not "
                         f"{len(chosen)}")  # fmt: skip
    named = chosen + [config.part_name(part) for part in range(len(chosen), config.num_parts)]
    if not all(named) or len({name.lower() for name in named}) < len(named):
        raise ValueError(f"part names: each part needs a name of its own, not {', '.join(map(repr, named))}")
    return type(tokenizer)(replace(config, part_names=tuple(named)))

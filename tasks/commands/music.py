"""``multimodal generate`` and ``multimodal perplexity`` for music checkpoints (:class:`~tasks.music_continuation.MusicContinuation`).

``generate`` continues a primer (a MIDI file, a folder of them, or a held-out piece of the run) into
MIDI, piano roll and WAV files (:mod:`multimodal.music.continuation` names and writes them);
``perplexity`` scores MIDI files in nats per event, per note and per second of music.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pretty_midi
from torch import nn

from multimodal.convert.folder import is_model_folder, read_model_folder
from multimodal.data.music import MidiCorpus, load_bach_chorales, load_midi_files
from multimodal.data.music21_collections import check_collections
from multimodal.data.music21_corpus import collections_converted, load_music21_corpus
from multimodal.generation.config import SamplingConfig
from multimodal.limits import MAX_BATCH_SIZE, MAX_BEAMS, MAX_CONTEXT, MAX_NEW_TOKENS, MAX_SAMPLES
from multimodal.music import (
    MusicScore,
    continue_music,
    continue_primers,
    primer_ids,
    read_primer,
    score_music,
)
from multimodal.music.bars import beat_grid, span_point, span_seconds
from multimodal.music.constrained import NEW_IDS_PER_SECOND
from multimodal.music.harmonize import (
    LOOKAHEAD_IDS,
    can_look_ahead,
    harmonize_to_files,
    infill_to_files,
    read_melody,
)
from multimodal.music.instruments import with_part_names, with_programs
from multimodal.music.ranges import OutOfRange, check_melody_range, part_chord_sizes, part_ranges, transposed
from multimodal.music.score import engrave_svg, keep_timing, write_musicxml
from multimodal.music.sheet_music import is_sheet_music, sheet_music_to_midi
from multimodal.music.tonality import key_emphasis
from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.tokenizers.music_controls import (
    CONTROL_NAMES,
    KEYS,
    METERS,
    STYLES,
    Controls,
    parse_density,
    parse_key,
    parse_meter,
    parse_style,
)
from tasks.arguments import count, non_negative_float, sampling_from_args

CONTINUATION_IDS = 512
"""The ids a continuation adds unless ``--max-new-tokens`` says (about 20 s of a chorale)."""


# ---------------------------------------------------------------------------------- multimodal generate
def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``multimodal generate`` for music checkpoints."""
    parser.add_argument("--primer", type=Path,
                        help="MIDI file or sheet music (MusicXML, ABC) to continue (default: a held-out chorale), or "
                             "a folder: each MIDI file continued once, --batch-size at a time, into "
                             "<name>.mid/.png/.wav")  # fmt: skip
    parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8,
                        help=f"a folder of primers: files per batch (at most {MAX_BATCH_SIZE:,})")  # fmt: skip
    parser.add_argument("--primer-seconds", type=non_negative_float, default=5.0,
                        help="length of the primer (s); 0: start from nothing, as the controls say")  # fmt: skip
    parser.add_argument("--num-samples", type=count(MAX_SAMPLES), default=1,
                        help=f"continuations of the primer (at most {MAX_SAMPLES:,})")  # fmt: skip
    parser.add_argument("--max-new-tokens", type=count(MAX_NEW_TOKENS, low=0), default=None,
                        help=f"events to add (default {CONTINUATION_IDS}; with --harmonize / --infill: what the span "
                             f"needs, {NEW_IDS_PER_SECOND} a second; at most {MAX_NEW_TOKENS:,})")  # fmt: skip
    parser.add_argument("--no-audio", action="store_true", help="skip the WAV preview")
    parser.add_argument("--soundfont", default=None, help="a .sf2/.sf3 file to render the WAV with, or 'sine' "
                        "(default: $MULTIMODAL_SOUNDFONT, else pretty_midi's TimGM6mb.sf2; docs/music.md)")  # fmt: skip
    parser.add_argument("--score", action="store_true",
                        help="also write <name>.musicxml, sheet music with a staff per part, in the primer's or "
                             "melody's meters, tempi and pickup (else --meter, else 4/4 at 120) and key (--key, "
                             "else the file's or the key music21 finds), which MuseScore opens, and <name>.svg, "
                             "the score engraved (Verovio)")  # fmt: skip
    parser.add_argument("--transpose", type=_semitones, default=0, metavar="SEMITONES",
                        help="move the given music (melody, primer, piece) by this many semitones first, e.g. -12 "
                             "for a melody an octave above its part's range, -2 to sing a hymn a tone lower; the "
                             "files come back in the new key")  # fmt: skip
    parser.add_argument("--pickup", type=non_negative_float, default=None, metavar="BEATS",
                        help="the music starts this many beats of its meter before bar 1's downbeat (an upbeat; "
                             "0: none): the bars of --infill, the MIDI file and --score count from the first full "
                             "bar (default: the file's own short first bar, as MuseScore writes a pickup)")  # fmt: skip
    parser.add_argument("--instruments", nargs="+", metavar="INSTRUMENT",
                        help="who plays the parts, in the MIDI and the WAV: General MIDI names or programs 0-127, "
                             "one for all parts or one a part in order (e.g. 'Choir Aahs', or Flute Violin Viola "
                             "Cello; default: the model's, the piano; docs/music.md)")  # fmt: skip
    harmony = parser.add_argument_group("harmonize (models trained with parts, data.num_parts > 1; docs/music.md)")
    harmony.add_argument("--harmonize", type=Path, metavar="MELODY",
                         help="write the other parts around this one-line melody, a MIDI file or sheet music "
                              "(MusicXML, ABC; its notes kept exactly)")  # fmt: skip
    harmony.add_argument("--part-names", nargs="+", metavar="NAME",
                         help="call the parts this, in order (e.g. Soprano Alto Tenor Bass): the MIDI tracks, the "
                              "score's staves, the piano roll's legend, and names --parts and --melody-part take")  # fmt: skip
    harmony.add_argument("--melody-part", default="1", help="the melody's part: a number from 1 or a part's name")
    harmony.add_argument("--melody-track", metavar="TRACK",
                         help="--harmonize: take the melody from this track of the file (a number from 1 among "
                              "the tracks with notes, or its name, e.g. Soprano; default: all its notes)")  # fmt: skip
    harmony.add_argument("--parts", nargs="+", default=None,
                         help="the parts to write (numbers from 1 or names; default: all the others, or all for "
                              "--infill)")  # fmt: skip
    harmony.add_argument("--infill", nargs=2, type=_span_point, metavar=("START", "END"),
                         help="rewrite the --primer's notes that start between these times (seconds, e.g. 10s "
                              "20s, or bars by the file's meter and tempo: bar9 bar13 is bars 9-12), keeping "
                              "everything before and after")  # fmt: skip
    harmony.add_argument("--avoid-parallels", action="store_true",
                         help="never write parallel fifths or octaves against another part (a decoding rule)")
    harmony.add_argument("--lookahead", choices=list(LOOKAHEAD_IDS), default=None,
                         help="--harmonize: how the model sees the melody before it sounds: read in blocks of the "
                              "next seconds, each note written ahead, or not at all (default: none, sight-reading, "
                              "which scored best; the others need a given-notes model, docs/music.md)")  # fmt: skip
    directed = parser.add_argument_group("controls (models trained with data.controls: true; docs/music.md)")
    directed.add_argument("--style", type=_control(parse_style), help=f"one of: {', '.join(STYLES)}")
    directed.add_argument("--key", type=_control(parse_key), help="tonic and mode, e.g. 'G minor', 'Bb major'")
    directed.add_argument("--meter", type=_control(parse_meter),
                          help="time signature, e.g. 3/4, 6/8 (and the bars of the MIDI file and --score)")
    directed.add_argument("--density", type=_control(parse_density), help="notes per second, e.g. 4")
    directed.add_argument("--key-emphasis", type=non_negative_float, default=0.0, metavar="NATS",
                          help="lean towards the --key's tonic chord: its pitches get this many nats more (e.g. "
                               "0.5; 0: off; docs/music.md)")  # fmt: skip
    directed.add_argument("--guidance-scale", type=non_negative_float, default=1.0,
                          help="classifier-free guidance: > 1 follows the controls more strictly (1: off; "
                               "each step runs the model twice; docs/music.md)")  # fmt: skip
    parser.add_argument("--num-beams", type=count(MAX_BEAMS), default=1,
                        help=f"beam search: the --num-samples best of N beams instead of samples (at most "
                             f"{MAX_BEAMS})")  # fmt: skip


def run_generate(model: nn.Module, tokenizer: MidiTokenizer, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """Writes ``sample_{i}.mid/.png/.wav`` continuations of the primer to ``args.out``.

    Without ``--primer`` the primer is the first held-out piece of the run (``data``: its data settings), or
    nothing (the controls alone) when the run's music21 collections are not converted on this machine.
    """
    if args.instruments:
        try:
            tokenizer = with_programs(tokenizer, args.instruments)
        except ValueError as error:
            raise ValueError(f"--instruments: {str(error).removeprefix('instruments: ')}") from None
    if args.part_names:
        try:
            tokenizer = with_part_names(tokenizer, args.part_names)
        except ValueError as error:
            raise ValueError(f"--part-names: {str(error).removeprefix('part names: ')}") from None
    asked = [f"--{name}" for name in CONTROL_NAMES if getattr(args, name, None) is not None]
    asked += ["--guidance-scale"] if args.guidance_scale != 1.0 else []
    if asked and not getattr(tokenizer.config, "controls", False):
        raise ValueError(f"{'/'.join(asked)}: this model was trained without controls; train one with "
                         "data.controls: true (docs/music.md)")  # fmt: skip
    if args.key_emphasis and args.key is None:
        raise ValueError("--key-emphasis: leans towards the --key's tonic chord; give --key too")
    if args.avoid_parallels and args.harmonize is None and args.infill is None:
        raise ValueError("--avoid-parallels: a rule of --harmonize and --infill; give one of them")
    if args.lookahead is not None and args.harmonize is None:
        raise ValueError("--lookahead: an option of --harmonize")
    with _sheet_music_read_as_midi(args):
        if args.harmonize is not None:
            _harmonize(model, tokenizer, args, data)
        elif args.infill is not None:
            _infill(model, tokenizer, args, data)
        else:
            _continue(model, tokenizer, args, data)


@contextlib.contextmanager
def _sheet_music_read_as_midi(args: argparse.Namespace) -> Iterator[None]:
    """``--harmonize`` / ``--primer`` given as MusicXML or ABC: within the block the option names a MIDI file of it
    in a temporary folder (:func:`~multimodal.music.sheet_music.sheet_music_to_midi`), and messages and printed
    lines name the file given (``args.given``: MIDI path -> the path given)."""
    args.given = {}
    with tempfile.TemporaryDirectory(prefix="multimodal-sheet-") as folder:
        for option in ("harmonize", "primer"):
            path = getattr(args, option)
            if path is not None and is_sheet_music(path):
                midi = sheet_music_to_midi(path, Path(folder) / f"{option}.mid")
                args.given[str(midi)] = str(path)
                setattr(args, option, midi)
        try:
            yield
        except ValueError as error:
            raise ValueError(_as_given(args, str(error))) from None


def _transposed(notes: np.ndarray, args: argparse.Namespace, source: str) -> np.ndarray:
    """The given music moved by ``--transpose`` (:func:`~multimodal.music.ranges.transposed`)."""
    try:
        return transposed(notes, args.transpose, source)
    except ValueError as error:
        raise ValueError(f"--transpose {args.transpose:+d}: {error}") from None


def _semitones(text: str) -> int:
    """``--transpose``: a whole number of semitones within five octaves either way."""
    return count(60, low=-60)(text)


def _as_given(args: argparse.Namespace, text: str) -> str:
    """``text`` with the temporary MIDI files of sheet music named as the user gave them."""
    for midi, path in getattr(args, "given", {}).items():
        text = text.replace(midi, path)
    return text


def _continue(model: nn.Module, tokenizer: MidiTokenizer, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """The primer (a file, each file of a folder, a held-out piece or nothing) continued."""
    if args.primer is not None and args.primer.is_dir():
        _continue_folder(model, tokenizer, args)
        return
    title = None  # the score's: the piece continued (none from nothing)
    if args.primer is not None:
        notes, source = read_primer(args.primer, tokenizer), _as_given(args, str(args.primer))
        notes = _transposed(notes, args, source)
        title = f"{Path(source).stem}, continued"
        if not len(notes[notes[:, 1] < args.primer_seconds]) and args.primer_seconds > 0:
            raise ValueError(f"{args.primer}: no note (outside drum tracks) starts in its first "
                             f"{args.primer_seconds:g} s; give a longer --primer-seconds or another file")  # fmt: skip
    elif args.primer_seconds == 0:
        notes, source = np.empty((0, 4)), "nothing"
    elif not pieces_at_hand(data):
        notes, source = np.empty((0, 4)), "nothing (the model's held-out pieces are not converted here: give --primer)"
    else:
        held_out = run_pieces(data, "val")
        notes, source = held_out.notes[0], f"held-out piece {held_out.names[0]}"
        notes = _transposed(notes, args, source)
        title = f"{held_out.names[0]}, continued"
    primer = primer_ids(notes, tokenizer, args.primer_seconds, _controls_from(args))
    grid = _beat_grid(args, args.primer, until=args.primer_seconds)
    paths = continue_music(
        model, tokenizer, primer, args.out, _sampling(args, tokenizer), num_samples=args.num_samples,
        max_new_tokens=_continuation_ids(args), seed=args.seed, progress=True, audio=not args.no_audio,
        soundfont=args.soundfont, overwrite=args.overwrite,
    )  # fmt: skip
    _keep_timing(paths, args, grid, title if len(notes) else None)
    what = f"{len(primer)} events" if len(notes) else f"{len(primer)} events: the start and the controls"
    print(f"primer: {f'first {args.primer_seconds:g} s of ' if len(notes) else ''}{source} ({what})")
    for path in paths:
        print(f"wrote {path} (+ .png piano roll{'' if args.no_audio else ', .wav preview'})")


def _harmonize(model: nn.Module, tokenizer: MidiTokenizer, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """``--harmonize MELODY``: the melody's notes kept exactly, the model writes the other parts."""
    if getattr(tokenizer.config, "num_parts", 1) < 2:
        raise ValueError("--harmonize: this model has no parts; train one with data.num_parts > 1 (docs/music.md)")
    if args.num_beams > 1 or args.primer is not None:
        raise ValueError("--harmonize takes neither --num-beams nor --primer")
    melody_part = _part(tokenizer, args.melody_part, "--melody-part")
    parts = None if args.parts is None else [_part(tokenizer, part, "--parts") for part in args.parts]
    if args.lookahead is not None and not can_look_ahead(tokenizer, args.lookahead):
        raise ValueError(f"--lookahead: this model cannot read a melody {args.lookahead!r} (its vocabulary has no "
                         "such ids; fine-tune it with configs/music_given_notes.yaml, docs/music.md)")  # fmt: skip
    try:
        melody = read_melody(args.harmonize, args.melody_track)
    except ValueError as error:  # the option that picks a track named
        raise ValueError(str(error).replace("choose one of its", "choose with --melody-track one of its")) from None
    melody = _transposed(melody, args, _as_given(args, str(args.harmonize)))
    grid = _beat_grid(args, args.harmonize)
    facts = model_training_data(getattr(args, "model_source", None), data)
    if facts.get("part_ranges") is not None:
        try:
            check_melody_range(melody, facts["part_ranges"][melody_part], tokenizer.config.part_name(melody_part),
                               str(args.harmonize))  # fmt: skip
        except OutOfRange as error:  # the option that moves it there, counting a --transpose already given
            move = "" if error.shift is None else f" (--transpose {args.transpose + error.shift:+d})"
            raise ValueError(f"{error}{move}") from None
    paths = harmonize_to_files(
        model, tokenizer, melody, args.out, _sampling(args, tokenizer), melody_part=melody_part, parts=parts,
        controls=_controls_from(args), num_samples=args.num_samples, seed=args.seed,
        max_new_tokens=args.max_new_tokens, audio=not args.no_audio, soundfont=args.soundfont, overwrite=args.overwrite,
        avoid_parallels=args.avoid_parallels, lookahead=args.lookahead, chord_sizes=facts.get("chord_sizes"),
        part_ranges=facts.get("part_ranges"),
    )  # fmt: skip
    _keep_timing(paths, args, grid, f"{Path(_as_given(args, str(args.harmonize))).stem}, harmonized")
    print(f"harmonized {_as_given(args, str(args.harmonize))} ({len(melody)} notes in "
          f"{tokenizer.config.part_name(melody_part)})")  # fmt: skip
    for path in paths:
        print(f"wrote {path} (+ .png piano roll{'' if args.no_audio else ', .wav'})")


def _infill(model: nn.Module, tokenizer: MidiTokenizer, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """``--infill START END --primer PIECE``: the span rewritten, the rest of the piece kept exactly."""
    if not hasattr(tokenizer, "duration_offset"):
        raise ValueError("--infill: needs the duration vocabulary (each note carries its length)")
    if args.primer is None or args.primer.is_dir() or args.num_beams > 1:
        raise ValueError("--infill: give the piece with --primer FILE (one file; no --num-beams)")
    asked = " ".join(args.infill)
    parts = None if args.parts is None else [_part(tokenizer, part, "--parts") for part in args.parts]
    notes = _transposed(read_primer(args.primer, tokenizer), args, _as_given(args, str(args.primer)))
    grid = _beat_grid(args, args.primer)
    try:
        start, end = span_seconds(*args.infill, grid)
    except ValueError as error:
        raise ValueError(f"--infill {asked}: {error}") from None
    if len(notes) == 0 or start >= float(notes[:, 2].max()):
        raise ValueError(f"--infill {asked}: {args.primer} ends before the span starts")
    facts = model_training_data(getattr(args, "model_source", None), data)
    paths = infill_to_files(
        model, tokenizer, notes, start, end, args.out, _sampling(args, tokenizer), parts=parts,
        controls=_controls_from(args), num_samples=args.num_samples, seed=args.seed,
        max_new_tokens=args.max_new_tokens, audio=not args.no_audio, soundfont=args.soundfont, overwrite=args.overwrite,
        avoid_parallels=args.avoid_parallels, chord_sizes=facts.get("chord_sizes"), part_ranges=facts.get("part_ranges"),
    )  # fmt: skip
    _keep_timing(paths, args, grid, f"{Path(_as_given(args, str(args.primer))).stem}, {start:g}-{end:g} s written anew")
    in_bars = f" ({asked})" if any(span_point(point)[1] for point in args.infill) else ""
    print(f"filled {start:g}-{end:g} s{in_bars} of {_as_given(args, str(args.primer))}")
    for path in paths:
        print(f"wrote {path} (+ .png piano roll{'' if args.no_audio else ', .wav'})")


def _beat_grid(args: argparse.Namespace, source: Path | None, until: float | None = None) -> pretty_midi.PrettyMIDI | None:
    """The beats, bars and key signature the written files go on (:func:`~multimodal.music.bars.beat_grid`): those of
    the ``source`` file the music came from (its changes up to ``until`` seconds), ``--meter``, ``--pickup`` and
    ``--key`` overriding; None when there is none of them (the files stay at 120 beats a minute in 4/4)."""
    meter = METERS[args.meter] if args.meter is not None and METERS[args.meter] != "other" else None
    key = KEYS[args.key] if args.key is not None else None
    if source is None and meter is None and args.pickup is None and key is None:
        return None
    try:
        return beat_grid(source, meter, args.pickup, until, key, args.transpose)
    except ValueError as error:  # the source was read before: what is left is the pickup
        raise ValueError(f"--{error}") from None


def _keep_timing(paths: list[Path], args: argparse.Namespace, grid: pretty_midi.PrettyMIDI | None,
                 title: str | None = None) -> None:  # fmt: skip
    """Each written MIDI file on ``grid``'s beats and bars (:func:`_beat_grid`, :func:`~multimodal.music.score.keep_timing`);
    with ``--score``, its MusicXML beside it (:func:`~multimodal.music.score.write_musicxml`: the key of ``--key``, else
    the file's or music21's; entitled ``title``, and the sample's name when there are several; None: the file's name)."""
    key = KEYS[args.key] if args.key is not None else None
    for path in paths:
        if grid is not None:
            keep_timing(path, grid)
        if not args.score:
            continue
        try:
            named = title if title is None or len(paths) == 1 else f"{title} ({path.stem.replace('_', ' ')})"
            score = write_musicxml(pretty_midi.PrettyMIDI(str(path)), path.with_suffix(".musicxml"), key, named)
            engrave_svg(score)
            print(f"wrote {score} (the score; {score.with_suffix('.svg').name}: engraved)")
        except ValueError as error:  # nothing written: no score, and the other files stand
            print(f"warning: {error}", file=sys.stderr)


def _continuation_ids(args: argparse.Namespace) -> int:
    """``--max-new-tokens`` of a continuation: as given, else :data:`CONTINUATION_IDS`."""
    return CONTINUATION_IDS if args.max_new_tokens is None else args.max_new_tokens


def _span_point(text: str) -> str:
    """One end of an ``--infill`` span as given, once :func:`~multimodal.music.bars.span_point` can read it."""
    try:
        span_point(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _part(tokenizer: MidiTokenizer, text: str, option: str) -> int:
    """A part index from a number counted from 1 or a part's name (case-insensitive)."""
    names = [tokenizer.config.part_name(part).lower() for part in range(tokenizer.config.num_parts)]
    if text.isdigit() and 1 <= int(text) <= len(names):
        return int(text) - 1
    if text.lower() in names:
        return names.index(text.lower())
    raise ValueError(f"{option} {text}: this model's parts are 1..{len(names)} ({', '.join(names)})")


def _control(parse: Callable[[str], int]) -> Callable[[str], int]:
    """An argument type from a control's parser: its ValueError becomes argparse's one-line error."""

    def argument(text: str) -> int:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    argument.__name__ = parse.__name__.removeprefix("parse_")
    return argument


def _sampling(args: argparse.Namespace, tokenizer: MidiTokenizer) -> SamplingConfig:
    """The sampling options of the command line, with ``--key-emphasis`` as its logit bias."""
    sampling = sampling_from_args(args)
    if args.key_emphasis:
        sampling = sampling.with_options(**key_emphasis(tokenizer, args.key, args.key_emphasis))
    return sampling


def _controls_from(args: argparse.Namespace) -> Controls:
    """The controls asked for on the command line (unknown where not given)."""
    return Controls(*(getattr(args, name, None) for name in CONTROL_NAMES))


def _continue_folder(model: nn.Module, tokenizer: MidiTokenizer, args: argparse.Namespace) -> None:
    """``--primer FOLDER``: every MIDI file in it (corrupt or note-less ones skipped, named) continued once."""
    if args.num_beams > 1 or args.num_samples > 1:
        raise ValueError("--primer FOLDER continues each file once: it takes neither --num-beams nor --num-samples")
    primers, grids, skipped = {}, {}, []
    for path in sorted(p for p in args.primer.rglob("*") if p.suffix.lower() in (".mid", ".midi")):
        try:
            notes = _transposed(read_primer(path, tokenizer), args, str(path))
        except ValueError as error:
            skipped.append(str(error))
            continue
        if not len(notes[notes[:, 1] < args.primer_seconds]):
            skipped.append(f"{path}: no note starts in its first {args.primer_seconds:g} s")
            continue
        name = path.relative_to(args.primer).with_suffix("").as_posix().replace("/", "_")
        primers[name] = primer_ids(notes, tokenizer, args.primer_seconds, _controls_from(args))
        grids[name] = _beat_grid(args, path, until=args.primer_seconds)
    for problem in skipped:
        warnings.warn(f"skipping {problem}", stacklevel=2)
    if not primers:
        raise ValueError(f"{args.primer}: no MIDI file with notes in its first {args.primer_seconds:g} s "
                         f"({len(skipped)} skipped)")  # fmt: skip
    paths = continue_primers(
        model, tokenizer, primers, args.out, _sampling(args, tokenizer), batch_size=args.batch_size,
        max_new_tokens=_continuation_ids(args), seed=args.seed, audio=not args.no_audio, soundfont=args.soundfont,
        overwrite=args.overwrite,
    )  # fmt: skip
    for path, name in zip(paths, primers, strict=True):
        _keep_timing([path], args, grids[name], f"{name}, continued")
    print(f"continued the first {args.primer_seconds:g} s of {len(paths)} file(s) of {args.primer}"
          + (f" ({len(skipped)} skipped)" if skipped else ""))  # fmt: skip
    for path in paths:
        print(f"wrote {path}")


# -------------------------------------------------------------------------------- multimodal perplexity
def add_perplexity_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``multimodal perplexity`` for music checkpoints."""
    parser.add_argument("files", nargs="+", type=Path, help="MIDI files or folders (searched recursively)")
    parser.add_argument("--seq-len", type=count(MAX_CONTEXT), default=None,
                        help=f"window length (default: the run's seq_len; at most {MAX_CONTEXT:,})")  # fmt: skip
    parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8, help=f"at most {MAX_BATCH_SIZE:,}")


def run_perplexity(model: nn.Module, tokenizer: MidiTokenizer, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """Prints nats per event, per note and per second of music for each file and in total.

    Each file is scored as validation scores a held-out piece (windows of the run's ``seq_len``,
    from ``data``, unless ``--seq-len``), so the total over the run's held-out pieces equals its
    ``val_nll``. Files that cannot be read are skipped with a warning.
    """
    seq_len = args.seq_len if args.seq_len is not None else data.get("seq_len") or model.config.max_seq_len
    corpus = load_midi_files(args.files, parts=getattr(tokenizer.config, "num_parts", 1) > 1)
    print(f"windows of {seq_len} events; nll in nats per event, per note and per second of music")
    print(f"{'file':<44} {'events':>8} {'notes':>7} {'seconds':>8} {'/event':>8} {'/note':>8} {'/second':>8}")
    total = MusicScore(0.0, 0, 0, 0.0)
    for name, notes in zip(corpus.names, corpus.notes, strict=True):
        score = score_music(model, tokenizer, notes, seq_len, args.batch_size)
        total = total + score
        print(_score_row(name, score))
    if total.events == 0:
        raise ValueError(f"{' '.join(map(str, args.files))}: no MIDI file with notes to score "
                         f"({corpus.num_skipped} skipped: {'; '.join(corpus.skipped)[:300]})")  # fmt: skip
    print(_score_row("total", total))
    if corpus.num_skipped:
        print(f"skipped {corpus.num_skipped} file(s): " + "; ".join(corpus.skipped))


def _score_row(name: str, score: MusicScore) -> str:
    name = name if len(name) <= 44 else "…" + name[-43:]
    return (f"{name:<44} {score.events:>8} {score.notes:>7} {score.seconds:>8.1f} {score.per_event:>8.4f} "
            f"{score.per_note:>8.4f} {score.per_second:>8.4f}")  # fmt: skip


# ------------------------------------------------------------------------------------- the run's pieces
def training_data(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``multimodal export`` records of a run's training pieces (``data``: its settings): the pitch range of
    each part (``part_ranges``: :func:`~multimodal.music.ranges.part_ranges`, widened by the run's
    ``max_transpose``), which ``--harmonize`` holds a melody to, and the most notes each part starts at one
    moment (``chord_sizes``: :func:`~multimodal.music.ranges.part_chord_sizes`), which bounds what the model
    writes there. None for a model without parts, or when the pieces are not at hand."""
    num_parts = int(data.get("num_parts", 1))
    if num_parts < 2 or not pieces_at_hand(data):
        return None
    pieces = run_pieces(data, "train").notes
    return {"part_ranges": part_ranges(pieces, num_parts, int(data.get("max_transpose", 0))),
            "chord_sizes": part_chord_sizes(pieces, num_parts)}  # fmt: skip


def model_training_data(source: str | Path | None, data: Mapping[str, Any]) -> dict[str, Any]:
    """What the training data of the model from ``source`` showed: a model folder's ``training_data``, else the
    run's training pieces when at hand (:func:`training_data`); ``{}`` where neither says. Part ranges come back
    as tuples (None for a part without notes)."""
    facts: dict[str, Any] = {}
    if source is not None and is_model_folder(source):
        facts = dict(read_model_folder(source).get("training_data", {}))
    if not facts:
        facts = training_data(data) or {}
    if facts.get("part_ranges") is not None:
        facts["part_ranges"] = [tuple(span) if span is not None else None for span in facts["part_ranges"]]
    return facts


def pieces_at_hand(data: Mapping[str, Any]) -> bool:
    """Whether a run's pieces load in seconds here: False for music21 collections not converted on this machine
    (a shipped model's, until ``multimodal data music21`` has run: the conversion takes minutes)."""
    collections = data.get("collections")
    return not collections or collections_converted(check_collections(list(collections), warn=False))


def run_pieces(data: Mapping[str, Any], split: str) -> MidiCorpus:
    """One split of the pieces a run used: its ``midi_dir`` or the chorales, split as the run split them.

    ``data`` is the run's data settings (:attr:`tasks.checkpoint.LoadedCheckpoint.data`, or
    :func:`tasks.checkpoint.data_settings`). Runs saved before the test split existed trained on
    every piece outside validation, so for them ``"test"`` is empty and ``"train"`` is all the rest.
    """
    midi_dir, collections = data.get("midi_dir"), data.get("collections")
    if collections:
        corpus = load_music21_corpus(check_collections(list(collections), warn=False), limit=data.get("limit"),
                                     num_parts=data.get("num_parts", 1))  # fmt: skip
    elif midi_dir:  # the datamodules package imports Lightning: only when a folder needs it
        from tasks.datamodules.music import midi_folder_corpus

        corpus = midi_folder_corpus(midi_dir)
    else:
        corpus = load_bach_chorales(limit=data.get("limit"))
    return corpus.split(split, data.get("validation_percent", 10), data.get("test_percent", 0))

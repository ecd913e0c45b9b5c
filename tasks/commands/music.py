"""``multimodal generate`` and ``multimodal perplexity`` for music checkpoints (:class:`~tasks.music_continuation.MusicContinuation`).

``generate`` continues a primer (a MIDI file, a folder of them, or a held-out piece of the run) into
MIDI, piano roll and WAV files (:mod:`multimodal.music.continuation` names and writes them);
``perplexity`` scores MIDI files in nats per event, per note and per second of music.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from multimodal.data.music import MidiCorpus, load_bach_chorales, load_midi_files
from multimodal.limits import MAX_BATCH_SIZE, MAX_BEAMS, MAX_CONTEXT, MAX_NEW_TOKENS, MAX_SAMPLES
from multimodal.music import MusicScore, continue_music, continue_primers, primer_ids, score_music
from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.tokenizers.midi_files import notes_from_midi
from tasks.arguments import count, positive_float, sampling_from_args


# ---------------------------------------------------------------------------------- multimodal generate
def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``multimodal generate`` for music checkpoints."""
    parser.add_argument("--primer", type=Path,
                        help="MIDI file to continue (default: a held-out chorale), or a folder: each file "
                             "continued once, --batch-size at a time, into <name>.mid/.png/.wav")  # fmt: skip
    parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8,
                        help=f"a folder of primers: files per batch (at most {MAX_BATCH_SIZE:,})")  # fmt: skip
    parser.add_argument("--primer-seconds", type=positive_float, default=5.0, help="length of the primer (s)")
    parser.add_argument("--num-samples", type=count(MAX_SAMPLES), default=1,
                        help=f"continuations of the primer (at most {MAX_SAMPLES:,})")  # fmt: skip
    parser.add_argument("--max-new-tokens", type=count(MAX_NEW_TOKENS, low=0), default=512,
                        help=f"events to add (at most {MAX_NEW_TOKENS:,})")  # fmt: skip
    parser.add_argument("--no-audio", action="store_true", help="skip the WAV preview")
    parser.add_argument("--soundfont", default=None, help="a .sf2/.sf3 file to render the WAV with, or 'sine' "
                        "(default: $MULTIMODAL_SOUNDFONT, else pretty_midi's TimGM6mb.sf2; docs/music.md)")  # fmt: skip
    parser.add_argument("--num-beams", type=count(MAX_BEAMS), default=1,
                        help=f"beam search: the --num-samples best of N beams instead of samples (at most "
                             f"{MAX_BEAMS})")  # fmt: skip


def run_generate(model: nn.Module, tokenizer: MidiTokenizer, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """Writes ``sample_{i}.mid/.png/.wav`` continuations of the primer to ``args.out``.

    Without ``--primer`` the primer is the first held-out piece of the run (``data``: its data settings).
    """
    if args.primer is not None and args.primer.is_dir():
        _continue_folder(model, tokenizer, args)
        return
    if args.primer is not None:
        notes, source = notes_from_midi(args.primer), str(args.primer)
        if not len(notes[notes[:, 1] < args.primer_seconds]):
            raise ValueError(f"{args.primer}: no note (outside drum tracks) starts in its first "
                             f"{args.primer_seconds:g} s; give a longer --primer-seconds or another file")  # fmt: skip
    else:
        held_out = run_pieces(data, "val")
        notes, source = held_out.notes[0], f"held-out piece {held_out.names[0]}"
    primer = primer_ids(notes, tokenizer, args.primer_seconds)
    paths = continue_music(
        model, tokenizer, primer, args.out, sampling_from_args(args), num_samples=args.num_samples,
        max_new_tokens=args.max_new_tokens, seed=args.seed, progress=True, audio=not args.no_audio,
        soundfont=args.soundfont, overwrite=args.overwrite,
    )  # fmt: skip
    print(f"primer: first {args.primer_seconds:g} s of {source} ({len(primer)} events)")
    for path in paths:
        print(f"wrote {path} (+ .png piano roll{'' if args.no_audio else ', .wav preview'})")


def _continue_folder(model: nn.Module, tokenizer: MidiTokenizer, args: argparse.Namespace) -> None:
    """``--primer FOLDER``: every MIDI file in it (corrupt or note-less ones skipped, named) continued once."""
    if args.num_beams > 1 or args.num_samples > 1:
        raise ValueError("--primer FOLDER continues each file once: it takes neither --num-beams nor --num-samples")
    primers, skipped = {}, []
    for path in sorted(p for p in args.primer.rglob("*") if p.suffix.lower() in (".mid", ".midi")):
        try:
            notes = notes_from_midi(path)
        except ValueError as error:
            skipped.append(str(error))
            continue
        if not len(notes[notes[:, 1] < args.primer_seconds]):
            skipped.append(f"{path}: no note starts in its first {args.primer_seconds:g} s")
            continue
        primers[path.relative_to(args.primer).with_suffix("").as_posix().replace("/", "_")] = primer_ids(
            notes, tokenizer, args.primer_seconds
        )
    for problem in skipped:
        warnings.warn(f"skipping {problem}", stacklevel=2)
    if not primers:
        raise ValueError(f"{args.primer}: no MIDI file with notes in its first {args.primer_seconds:g} s "
                         f"({len(skipped)} skipped)")  # fmt: skip
    paths = continue_primers(
        model, tokenizer, primers, args.out, sampling_from_args(args), batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens, seed=args.seed, audio=not args.no_audio, soundfont=args.soundfont,
        overwrite=args.overwrite,
    )  # fmt: skip
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
    corpus = load_midi_files(args.files)
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
def run_pieces(data: Mapping[str, Any], split: str) -> MidiCorpus:
    """One split of the pieces a run used: its ``midi_dir`` or the chorales, split as the run split them.

    ``data`` is the run's data settings (:attr:`tasks.checkpoint.LoadedCheckpoint.data`, or
    :func:`tasks.checkpoint.data_settings`). Runs saved before the test split existed trained on
    every piece outside validation, so for them ``"test"`` is empty and ``"train"`` is all the rest.
    """
    from tasks.datamodules.music import midi_folder_corpus

    midi_dir = data.get("midi_dir")
    corpus = midi_folder_corpus(midi_dir) if midi_dir else load_bach_chorales(limit=data.get("limit"))
    return corpus.split(split, data.get("validation_percent", 10), data.get("test_percent", 0))

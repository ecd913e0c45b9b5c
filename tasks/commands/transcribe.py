"""``multimodal transcribe``: audio files -> MIDI files and piano rolls, with a trained transcription model."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tasks.arguments import positive_int


def transcribe_command(argv: list[str]) -> None:
    """``multimodal transcribe --checkpoint CKPT song.wav [more.wav | DIR ...] --out DIR``: one MIDI file
    (``<name>.mid``) and one piano roll (``<name>.png``) per WAV / FLAC / OGG file; folders are searched
    recursively and their unreadable files skipped with a warning."""
    parser = argparse.ArgumentParser(prog="multimodal transcribe", description=transcribe_command.__doc__)
    parser.add_argument("inputs", nargs="+", type=Path, help="audio files (.wav, .flac, .ogg) or folders of them")
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a Transcription checkpoint, its run folder, or an exported model folder")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("outputs/transcribed"), help="output folder")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="segments decoded together")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--overwrite", action="store_true", help="replace files that already exist")
    args = parser.parse_args(argv)
    if not args.checkpoint.exists():
        parser.error(f"--checkpoint {args.checkpoint}: no such checkpoint file or folder")
    files = _audio_files(parser, args.inputs)

    from multimodal.audio.transcription import notes_to_midi, read_audio, transcribe
    from multimodal.data.storage import claim_paths
    from multimodal.models.transcriber import Transcriber
    from multimodal.tokenizers.transcription import TranscriptionTokenizer
    from multimodal.viz import piano_roll_png
    from tasks.checkpoint import load_task

    loaded = load_task(args.checkpoint, map_location=args.device)
    model, tokenizer = loaded.task.model, loaded.tokenizer
    if not isinstance(model, Transcriber) or not isinstance(tokenizer, TranscriptionTokenizer):
        parser.error(f"--checkpoint {args.checkpoint}: a {type(loaded.task).__name__} checkpoint does not transcribe; "
                     "train one with configs/transcription.yaml")  # fmt: skip
    stems = _output_stems(files)
    claim_paths([args.out / f"{stem}{suffix}" for stem in stems for suffix in (".mid", ".png")], args.overwrite)
    for (path, named), stem in zip(files, stems, strict=True):
        try:
            audio, sample_rate = read_audio(path)
        except ValueError as error:
            if named:
                raise
            print(f"warning: skipping {error}", file=sys.stderr)
            continue
        started = time.perf_counter()
        notes = transcribe(model, tokenizer, audio, sample_rate, batch_size=args.batch_size)
        seconds = audio.shape[-1] / sample_rate
        args.out.mkdir(parents=True, exist_ok=True)
        notes_to_midi(notes).write(str(args.out / f"{stem}.mid"))
        piano_roll_png(notes, args.out / f"{stem}.png", title=f"{path.name}: {len(notes)} notes")
        print(f"{path} -> {args.out / stem}.mid: {len(notes)} notes in {seconds:.1f} s of audio "
              f"({seconds / (time.perf_counter() - started):.1f}x real time)")  # fmt: skip


def _audio_files(parser: argparse.ArgumentParser, inputs: list[Path]) -> list[tuple[Path, bool]]:
    """``(path, named)`` for each file given and each audio file under each folder given (sorted)."""
    from multimodal.audio.transcription import AUDIO_SUFFIXES

    files: list[tuple[Path, bool]] = []
    for item in inputs:
        if item.is_dir():
            found = sorted(p for p in item.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
            if not found:
                parser.error(f"{item}: no {', '.join(AUDIO_SUFFIXES)} file in the folder")
            files += [(path, False) for path in found]
        elif item.is_file():
            files.append((item, True))
        else:
            parser.error(f"{item}: no such file or folder")
    return files


def _output_stems(files: list[tuple[Path, bool]]) -> list[str]:
    """A distinct output name per input: its stem, with ``-2``, ``-3``, ... when stems repeat."""
    stems: list[str] = []
    for path, _ in files:
        stem, count = path.stem, 2
        while stem in stems:
            stem, count = f"{path.stem}-{count}", count + 1
        stems.append(stem)
    return stems

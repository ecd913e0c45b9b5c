"""Transcription, audio -> notes: our Transcriber against Spotify's basic-pitch, on test chorales and a SoundFont never heard.

``--stage select`` scores the validation chorales (through the first training SoundFont) to choose
the model; ``--stage report`` (the default) scores the test chorales once. Both transcribe the same WAV files: the test split's Bach chorales (pieces never trained on; every part
merged), played by one General MIDI program (``--test-program``, the acoustic grand piano by default)
through a SoundFont used nowhere in training (``--test-soundfont``, Fluid R3), at a piece-wide
velocity, peak-normalised, 16 kHz. Scores are ``mir_eval.transcription``'s note F1 per piece, then
the mean over pieces: onset only (50 ms), and onset + offset (offset within 20 % of the note or 50
ms). The reference merges unisons (two voices on one pitch at one onset sound as one note).

Ours: ``configs/transcription.yaml``'s model trained for ``--minutes`` of wall-clock time on the
training SoundFonts (``--train-soundfonts``; pieces of the train split; keyboard programs; reverb,
noise and level augmentation), scored once at the end of the budget (nothing is chosen on test).
Seeds change the model's initialisation and dropout; the rendered audio and the batch order are
those of data seed 0 for every run (rendering is cached once).

basic-pitch (PyPI 0.4.0, its ONNX model through onnxruntime; ``make basic-pitch`` installs it into
the venv): a general instrument-agnostic model, run with its default thresholds. It is not trained on
this data; the comparison says what a small model trained on the target domain buys against a
well-known general one, not that either is the better transcriber in general.

Speed: seconds of audio transcribed per second of wall-clock time, over every test file, on the
machine's threads (``--threads``, 2; onnxruntime's default uses every core, which here is 2).

Usage (alone on the machine: ``flock /tmp/bench.lock``; needs the Debian SoundFonts, ``multimodal data
soundfonts``)::

    .venv/bin/python benchmarks/transcription.py --models ours basic-pitch --seeds 0 1 2 --minutes 12
    .venv/bin/python benchmarks/transcription.py --table
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread, verdict

from multimodal.audio.synthesis import SoundFontRenderer, resolve_soundfont, write_wav
from multimodal.audio.transcription import note_scores, read_audio, transcribe
from multimodal.data.transcription import piece_midi, reference_notes
from multimodal.models.config import TranscriberConfig
from tasks.datamodules import TranscriptionDataModule
from tasks.transcription import Transcription

ROOT = Path(__file__).resolve().parents[1]
TRAIN_SOUNDFONTS = ["bundled", "/usr/share/sounds/sf3/MuseScore_General_Lite.sf3"]
TEST_SOUNDFONT = "/usr/share/sounds/sf2/FluidR3_GM.sf2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["select", "report"], default="report")
    parser.add_argument("--models", nargs="+", default=["ours"], choices=["ours", "basic-pitch"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/transcription.yaml")
    parser.add_argument("--minutes", type=float, default=12.0, help="training budget of each run (wall clock)")
    parser.add_argument("--train-soundfonts", nargs="+", default=TRAIN_SOUNDFONTS)
    parser.add_argument("--test-soundfont", default=TEST_SOUNDFONT)
    parser.add_argument("--test-program", type=int, default=0)
    parser.add_argument("--data", nargs="*", default=[], help="data overrides, e.g. max_pieces=4")
    parser.add_argument("--set", nargs="*", default=[], help="model overrides, e.g. dim=96")
    parser.add_argument("--max-test-pieces", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/transcription.jsonl")
    parser.add_argument("--table", action="store_true", help="print the tables of --out and stop")
    args = parser.parse_args()
    if args.table:
        print(tables(load(args.out)))
        return
    torch.set_num_threads(args.threads)
    config = yaml.safe_load(args.config.read_text())
    data_args = {**config["data"]["init_args"], **_overrides(args.data), "soundfonts": args.train_soundfonts, "seed": 0}
    data = TranscriptionDataModule(**data_args)
    with tempfile.TemporaryDirectory() as folder:
        # select: the validation pieces through the first training SoundFont; report: the test pieces, unseen SoundFont
        split, font = ("val", args.train_soundfonts[0]) if args.stage == "select" else ("test", args.test_soundfont)
        files = render_files(data, split, font, args, Path(folder))
        for name in args.models:
            for seed in args.seeds if name == "ours" else [0]:
                result = run_ours(config, data, args, seed, files) if name == "ours" else run_basic_pitch(files)
                result.update(model=name, seed=seed, split=split, budget_minutes=args.minutes if name == "ours" else None, soundfont=font, test_soundfont=args.test_soundfont, test_program=args.test_program,
                              train_soundfonts=args.train_soundfonts, data_overrides=args.data, overrides=args.set,
                              tempo_range=data_args.get("tempo_range") if name == "ours" else None,
                              date=time.strftime("%Y-%m-%d", time.gmtime()),
                              test_pieces=len(files))  # fmt: skip
                print(f"{name} seed {seed}: onset F1 {result['onset_f1']:.4f}, onset+offset F1 {result['offset_f1']:.4f}, "
                      f"{result['audio_per_second']:.1f} s of audio per second", flush=True)  # fmt: skip
                record(args.out, result, args.stage)
    print(tables(load(args.out)))


def render_files(data: TranscriptionDataModule, split: str, soundfont: str, args: argparse.Namespace,
                 folder: Path) -> list[tuple[Path, np.ndarray]]:  # fmt: skip
    """WAV files of a split's pieces through ``soundfont`` and the test program, with their reference notes."""
    names, pieces = data.split_pieces(split)
    if args.max_test_pieces:
        names, pieces = names[: args.max_test_pieces], pieces[: args.max_test_pieces]
    render = SoundFontRenderer(resolve_soundfont(soundfont), data.tokenizer.audio.sample_rate)
    files = []
    for index, (name, notes) in enumerate(zip(names, pieces, strict=True)):
        rng = np.random.default_rng([1234, index])
        audio = render(piece_midi(notes, args.test_program, int(rng.integers(50, 111)), rng))
        audio = audio * (0.9 / float(audio.abs().max()))
        path = write_wav(folder / f"{index:03d}-{Path(name).stem}.wav", audio, data.tokenizer.audio.sample_rate)
        files.append((path, reference_notes(notes)))
    return files


def run_ours(config: dict, data: TranscriptionDataModule, args: argparse.Namespace, seed: int,
             files: list[tuple[Path, np.ndarray]]) -> dict:  # fmt: skip
    """Trains the config's model for ``--minutes`` and scores it on the test files."""
    pl.seed_everything(seed, verbose=False)
    data.setup("fit")
    init = config["model"]["init_args"]
    model = TranscriberConfig(**{**init["model"], **_overrides(args.set), "vocab_size": data.vocab_size,
                                 "n_mels": data.n_mels})  # fmt: skip
    optimizer_args = init["optimizer"]["init_args"]
    task = Transcription(model=model, optimizer=lambda params: torch.optim.AdamW(params, **optimizer_args),
                         warmup_steps=init["warmup_steps"], pad_id=data.pad_id)  # fmt: skip
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        trainer = pl.Trainer(max_time={"minutes": args.minutes}, max_epochs=-1, logger=False, gradient_clip_val=1.0,
                             default_root_dir=folder, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip
        trainer.fit(task, data)
    minutes = (time.perf_counter() - started) / 60
    val_nll = float(trainer.callback_metrics.get("val_nll", float("nan")))
    model = task.model.eval()
    return {**score(files, lambda audio, rate: transcribe(model, data.tokenizer, audio, rate)), "minutes": minutes,
            "steps": trainer.global_step, "val_nll": val_nll,
            "parameters": sum(p.numel() for p in model.parameters())}  # fmt: skip


def run_basic_pitch(files: list[tuple[Path, np.ndarray]]) -> dict:
    """basic-pitch 0.4.0 (ONNX) with its default thresholds on the test files."""
    import logging

    logging.disable(logging.WARNING)  # it warns about every runtime it does not find
    from basic_pitch import ICASSP_2022_MODEL_PATH
    from basic_pitch.inference import Model, predict

    model = Model(ICASSP_2022_MODEL_PATH)

    def transcribe_file(path: Path) -> np.ndarray:
        _, _, events = predict(path, model)
        return np.array([[pitch, start, end, 127 * amplitude] for start, end, pitch, amplitude, _ in events]).reshape(-1, 4)

    return {**score(files, None, transcribe_file), "model_file": Path(str(ICASSP_2022_MODEL_PATH)).name}


def score(files: list[tuple[Path, np.ndarray]], transcribe_audio=None, transcribe_file=None) -> dict:
    """Mean note scores over the files and the seconds of audio transcribed per second."""
    per_piece, audio_seconds, busy = [], 0.0, 0.0
    for path, reference in files:
        audio, rate = read_audio(path)
        started = time.perf_counter()
        estimate = transcribe_file(path) if transcribe_file is not None else transcribe_audio(audio, rate)
        busy += time.perf_counter() - started
        audio_seconds += audio.shape[-1] / rate
        per_piece.append(note_scores(reference, estimate))
    means = {key: statistics.fmean(p[key] for p in per_piece) for key in per_piece[0]}
    return {**means, "audio_per_second": audio_seconds / busy, "audio_seconds": audio_seconds,
            "per_piece_onset_f1": [p["onset_f1"] for p in per_piece]}  # fmt: skip


def tables(results: list[dict]) -> str:
    """Per model: note F1 (mean over test pieces) as mean ± sd over seeds; the verdicts against basic-pitch."""
    lines = []
    for stage in ("select", "report"):
        rows = [r for r in results if r["stage"] == stage]
        if not rows:
            continue
        split = "validation chorales, a training SoundFont" if stage == "select" else "test chorales, a SoundFont never heard"
        lines += [f"{stage}: note F1 on {rows[0]['test_pieces']} {split} (mean over pieces), mean ± sd over seeds", "",
                  "| model | overrides | training tempo | budget (min) | seeds | training minutes | val NLL | onset P | onset R | onset F1 | "
                  "onset+offset F1 | audio s per s |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            # the peer is deterministic: one row per run, named by its date, as only its speed moves between days
            model = f"{r['model']} ({r['date']})" if r["model"] != "ours" and "date" in r else r["model"]
            groups.setdefault((model, " ".join(r["overrides"] + r["data_overrides"]), tempo(r), budget(r)), []).append(r)
        for (model, overrides, tempi, minutes), group in groups.items():
            def cell(key: str, digits: int = 4, group: list[dict] = group) -> str:
                values = [r[key] for r in group if key in r]
                return spread(values, digits) if values else "-"

            lines.append(f"| {model} | {overrides or '-'} | {tempi or '-'} | {minutes if minutes is not None else '-'} | {len(group)} | {cell('minutes', 1)} | {cell('val_nll', 3)} | "
                         f"{cell('onset_precision')} | {cell('onset_recall')} | {cell('onset_f1')} | {cell('offset_f1')} | "
                         f"{cell('audio_per_second', 1)} |")  # fmt: skip
        peer = [r for r in rows if r["model"] == "basic-pitch"]
        plain = [r for r in rows if r["model"] == "ours" and not r["overrides"]
                 and all(d.startswith("tempo_range=") for d in r["data_overrides"])]  # fmt: skip
        for minutes, tempi in sorted({(budget(r), tempo(r)) for r in plain}) if peer else []:
            ours = [r for r in plain if budget(r) == minutes and tempo(r) == tempi]
            lines.append(f"\n{minutes:g} minutes of training{f', tempo range {tempi}' if tempi else ''}. Onset F1 minus basic-pitch's ({peer[-1]['onset_f1']:.4f}) per seed: "
                         f"{spread([r['onset_f1'] - peer[-1]['onset_f1'] for r in ours])}; above it: "
                         f"{verdict([r['onset_f1'] - peer[-1]['onset_f1'] for r in ours], 0.0, lower_is_better=False)}")
            lines.append(f"Onset+offset F1 minus basic-pitch's ({peer[-1]['offset_f1']:.4f}) per seed: "
                         f"{spread([r['offset_f1'] - peer[-1]['offset_f1'] for r in ours])}; above it by >= 0.1: "
                         f"{verdict([r['offset_f1'] - peer[-1]['offset_f1'] for r in ours], 0.1, lower_is_better=False)}")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def tempo(row: dict) -> str:
    """The training renderings' tempo range of a row (``TranscriptionDataModule.tempo_range``); "" for the pieces' own."""
    return "{:g}-{:g}".format(*row["tempo_range"]) if row.get("tempo_range") else ""


def budget(row: dict) -> float | None:
    """A row's training budget in minutes: ``budget_minutes``, or for rows written before it was recorded, its
    training minutes rounded (the wall-clock budget stops training within seconds of it); None for basic-pitch."""
    if row["model"] != "ours":
        return None
    return row.get("budget_minutes") or float(round(row["minutes"]))


def _overrides(pairs: list[str]) -> dict:
    return {key: yaml.safe_load(value) for key, value in (pair.split("=", 1) for pair in pairs)}


if __name__ == "__main__":
    main()

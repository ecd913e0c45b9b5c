"""Harmonizing the test chorales' sopranos: voice leading against the real chorales, and speed.

The shipped music model (or ``--model``) writes alto, tenor and bass (parts 1-3) under the soprano
(part 0) of each Bach chorale of its test split, cut to the first ``--seconds`` (30), with the
piece's own controls, top-p 0.95, for each of ``--seeds``. Measured on the generated and on the
real chorales over the same seconds:

- parallel fifths and octaves (unisons included) between any two of the four parts, per 100
  note pairs: at consecutive onsets where both parts sound and move (either way, as music21's
  ``VoiceLeadingQuartet`` counts them), the interval (mod 12) is a fifth, or an octave, at both
  (:func:`voice_leading`);
- voice crossings: the share of (onset, pair of parts) where the higher part sounds below the lower;
- notes outside each part's range in the training chorales (lowest to highest pitch of that part);
- the duration and polyphony overlaps of the whole excerpt (:mod:`multimodal.music.stats`);
- the wall time of one harmonization, float32 and ``--quantize int8``.

``--avoid-parallels`` harmonizes with the decoding rule that masks parallel fifths and octaves
(:class:`multimodal.music.voice_leading.ParallelsRule`); rows say which (``avoid_parallels``) and
the table has a column for each.

Rows append to ``--out`` per seed. Usage (alone on the machine)::

    flock /tmp/bench.lock python benchmarks/harmonization.py
    python benchmarks/harmonization.py --table
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread

from multimodal.music.ranges import PartRanges, part_ranges
from multimodal.music.voice_leading import FOUR_PARTS as VOICES
from multimodal.music.voice_leading import voice_leading

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = chorale_arguments(__doc__, "harmonization.jsonl")
    parser.add_argument("--avoid-parallels", action="store_true", help="harmonize with the parallels rule")
    args = parser.parse_args()
    if not args.table:
        run(args)
    print(table(load(args.out)))


def chorale_arguments(description: str, out_name: str) -> argparse.ArgumentParser:
    """The options of a benchmark over the test chorales: the model, seeds, seconds of each piece, how many pieces,
    ``--table`` and ``--out`` (``benchmarks/results/<out_name>``)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="music", help="a shipped model's name or a model folder / checkpoint")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--seconds", type=float, default=30.0, help="each chorale cut to this")
    parser.add_argument("--pieces", type=int, default=None, help="at most this many test chorales")
    parser.add_argument("--table", action="store_true", help="print the table of --out and stop")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / out_name)
    return parser


class Measured(NamedTuple):
    """A model and the Bach chorales it is measured on."""

    model: torch.nn.Module  # in eval mode
    tokenizer: Any
    chord_sizes: list[int] | None  # what the command bounds the written parts by
    part_ranges: list | None  # the pitch range the command keeps each written part in
    train: Any  # the Bach corpus's training split (a MidiCorpus), by the model's run's percentages
    test: Any  # its test split
    chosen: list[int]  # the test pieces with all four voices (at most the asked number)


def load_measured(model_name: str, pieces: int | None = None) -> Measured:
    """``model_name`` (a shipped model's name, a model folder or a checkpoint) loaded with 2 threads, and the Bach
    chorales of its run's splits."""
    from multimodal.data.music21_corpus import load_music21_corpus
    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task
    from tasks.commands.music import model_training_data

    torch.set_num_threads(2)
    loaded = load_task(resolve_model(model_name))
    model, tokenizer, data = loaded.task.model.eval(), loaded.tokenizer, loaded.data
    facts = model_training_data(resolve_model(model_name), data)
    percents = data.get("validation_percent", 10), data.get("test_percent", 10)
    corpus = load_music21_corpus(["bach"], num_parts=data.get("num_parts", 5))
    test = corpus.split("test", *percents)
    chosen = [i for i, notes in enumerate(test.notes) if set(VOICES) <= set(notes[:, 4].astype(int).tolist())]
    return Measured(model, tokenizer, facts.get("chord_sizes"), facts.get("part_ranges"), corpus.split("train", *percents),
                    test, chosen[:pieces] if pieces else chosen)  # fmt: skip


def run(args: argparse.Namespace) -> None:
    from multimodal.layers.quantize import quantize_model
    from multimodal.music.harmonize import harmonize

    model, tokenizer, chord_sizes, bounds, train, test, chosen = load_measured(args.model, args.pieces)
    ranges = part_ranges(train.notes, len(VOICES))  # as Bach wrote them: no transposition
    real = [cut(test.notes[i], args.seconds) for i in chosen]
    day = datetime.date.today().isoformat()
    reference = measure(real, ranges)
    for seed in args.seeds:
        generated, seconds = [], []
        for index, piece in zip(chosen, real, strict=True):
            soprano = piece[piece[:, 4] == 0]
            started = time.perf_counter()
            ids = harmonize(model, tokenizer, soprano, parts=[1, 2, 3], controls=test.controls[index], top_p=0.95,
                            generator=torch.Generator().manual_seed(seed * 1000 + index),
                            avoid_parallels=args.avoid_parallels, chord_sizes=chord_sizes, part_ranges=bounds)  # fmt: skip
            seconds.append(time.perf_counter() - started)
            generated.append(tokenizer.decode_notes(ids))
            kept, given = generated[-1][generated[-1][:, 4] == 0], on_grid(tokenizer, soprano)
            assert np.allclose(kept[np.lexsort(kept.T[:2])][:, :3], given[np.lexsort(given.T[:2])][:, :3]), \
                "the soprano must come back exactly"  # fmt: skip
        row = {"day": day, "model": args.model, "seed": seed, "avoid_parallels": args.avoid_parallels,
               "pieces": len(chosen), "melody_seconds": args.seconds,
               "generated": measure(generated, ranges, real), "real": reference,
               "harmonize_seconds": {"median": statistics.median(seconds), "max": max(seconds)}}  # fmt: skip
        record(args.out, row, "report")
        print(json.dumps(row))
    if args.avoid_parallels:
        return  # the int8 timing is the plain decoder's
    quantize_model(model)
    times = []
    for index, piece in zip(chosen[:8], real[:8], strict=False):
        started = time.perf_counter()
        harmonize(model, tokenizer, piece[piece[:, 4] == 0], parts=[1, 2, 3], controls=test.controls[index], top_p=0.95,
                  generator=torch.Generator().manual_seed(index))  # fmt: skip
        times.append(time.perf_counter() - started)
    record(args.out, {"day": day, "model": args.model, "int8_harmonize_seconds": statistics.median(times),
                      "pieces": len(times), "melody_seconds": args.seconds}, "speed")  # fmt: skip


def on_grid(tokenizer, notes: np.ndarray) -> np.ndarray:
    """``notes`` as the tokenizer writes them (times on its grid, unisons merged): what harmonizing keeps."""
    return tokenizer.decode_notes(tokenizer.encode_notes(notes))


def cut(notes: np.ndarray, seconds: float) -> np.ndarray:
    """The notes that start before ``seconds``, ended there at the latest."""
    kept = notes[notes[:, 1] < seconds].copy()
    kept[:, 2] = np.minimum(kept[:, 2], seconds)
    return kept


def measure(pieces: list[np.ndarray], ranges: PartRanges, real: list[np.ndarray] | None = None) -> dict:
    """Voice-leading rates over ``pieces``; with ``real``, the duration/polyphony overlaps against them."""
    from multimodal.music.stats import excerpt_stats, overlaps

    totals = dict(motions=0, fifths=0, octaves=0, slices=0, crossings=0)
    outside = notes_counted = 0
    for notes in pieces:
        for key, value in voice_leading(notes).items():
            totals[key] += value
        for part in (1, 2, 3):
            pitches = notes[notes[:, 4] == part, 0]
            low, high = ranges[part]
            outside += int(((pitches < low) | (pitches > high)).sum())
            notes_counted += len(pitches)
    result = {"parallels_per_100_pairs": 100 * (totals["fifths"] + totals["octaves"]) / max(totals["motions"], 1),
              "fifths_per_100_pairs": 100 * totals["fifths"] / max(totals["motions"], 1),
              "octaves_per_100_pairs": 100 * totals["octaves"] / max(totals["motions"], 1),
              "crossing_share": totals["crossings"] / max(totals["slices"], 1),
              "outside_range_share": outside / max(notes_counted, 1), **totals}  # fmt: skip
    if real is not None:
        generated_stats = sum((excerpt_stats(n[:, :4]) for n in pieces[1:]), excerpt_stats(pieces[0][:, :4]))
        real_stats = sum((excerpt_stats(n[:, :4]) for n in real[1:]), excerpt_stats(real[0][:, :4]))
        found = overlaps(generated_stats, real_stats)
        result.update(duration_overlap=found["duration"], polyphony_overlap=found["polyphony"])
    return result


def table(rows: list[dict]) -> str:
    """Mean ± sd over seeds of every measure, one column per decoding (plain, with the parallels rule)."""
    runs = [row for row in rows if "generated" in row]
    if not runs:
        return "no runs yet"
    real = runs[-1]["real"]
    rules = sorted({bool(row.get("avoid_parallels")) for row in runs})
    by_rule = {rule: [row for row in runs if bool(row.get("avoid_parallels")) == rule] for rule in rules}
    names = {False: "generated", True: "generated, parallels rule"}
    keys = [("parallels_per_100_pairs", "parallel 5ths + 8ves per 100 note pairs", 2),
            ("fifths_per_100_pairs", "parallel 5ths per 100", 2), ("octaves_per_100_pairs", "parallel 8ves per 100", 2),
            ("crossing_share", "voice crossings (share of onsets × pairs)", 4),
            ("outside_range_share", "A/T/B notes outside the part's training range", 4),
            ("duration_overlap", "duration overlap", 3), ("polyphony_overlap", "polyphony overlap", 3)]  # fmt: skip
    lines = [f"{runs[-1]['pieces']} test chorales, first {runs[-1]['melody_seconds']:g} s, "
             + ", ".join(f"{names[rule]}: {len(group)} seed(s)" for rule, group in by_rule.items()), "",
             "| measure | " + " | ".join(f"{names[rule]} (mean ± sd over seeds)" for rule in rules) + " | real chorales |",
             "|---|" + "---:|" * (len(rules) + 1)]  # fmt: skip
    for key, label, digits in keys:
        cells = [spread([row["generated"][key] for row in group if key in row["generated"]], digits)
                 for group in by_rule.values()]  # fmt: skip
        lines.append(f"| {label} | {' | '.join(cells)} | " + (f"{real[key]:.{digits}f} |" if key in real else "— |"))
    lines.append("")
    for rule, group in by_rule.items():
        medians = [row["harmonize_seconds"]["median"] for row in group]
        lines.append(f"one harmonization of a {group[-1]['melody_seconds']:g}-second soprano, {names[rule]}: median "
                     f"{statistics.fmean(medians):.2f} s (float32, worst {max(r['harmonize_seconds']['max'] for r in group):.2f} s)")  # fmt: skip
    for row in (r for r in rows if "int8_harmonize_seconds" in r):
        lines.append(f"int8 weights, plain decoding: median {row['int8_harmonize_seconds']:.2f} s over {row['pieces']} pieces")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

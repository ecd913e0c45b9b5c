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

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread

ROOT = Path(__file__).resolve().parents[1]
VOICES = (0, 1, 2, 3)  # soprano, alto, tenor, bass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="music", help="a shipped model's name or a model folder / checkpoint")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--pieces", type=int, default=None, help="at most this many test chorales")
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "harmonization.jsonl")
    args = parser.parse_args()
    if not args.table:
        run(args)
    print(table(load(args.out)))


def run(args: argparse.Namespace) -> None:
    from multimodal.data.music21_corpus import load_music21_corpus
    from multimodal.layers.quantize import quantize_model
    from multimodal.music.harmonize import harmonize
    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task

    torch.set_num_threads(2)
    loaded = load_task(resolve_model(args.model))
    model, tokenizer, data = loaded.task.model.eval(), loaded.tokenizer, loaded.data
    percents = data.get("validation_percent", 10), data.get("test_percent", 10)
    corpus = load_music21_corpus(["bach"], num_parts=data.get("num_parts", 5))
    ranges = part_ranges(corpus.split("train", *percents).notes)
    test = corpus.split("test", *percents)
    chosen = [i for i, notes in enumerate(test.notes) if set(VOICES) <= set(notes[:, 4].astype(int).tolist())]
    chosen = chosen[: args.pieces] if args.pieces else chosen
    real = [cut(test.notes[i], args.seconds) for i in chosen]
    day = datetime.date.today().isoformat()
    reference = measure(real, ranges)
    for seed in args.seeds:
        generated, seconds = [], []
        for index, piece in zip(chosen, real, strict=True):
            soprano = piece[piece[:, 4] == 0]
            started = time.perf_counter()
            ids = harmonize(model, tokenizer, soprano, parts=[1, 2, 3], controls=test.controls[index], top_p=0.95,
                            generator=torch.Generator().manual_seed(seed * 1000 + index))  # fmt: skip
            seconds.append(time.perf_counter() - started)
            generated.append(tokenizer.decode_notes(ids))
            kept, given = generated[-1][generated[-1][:, 4] == 0], on_grid(tokenizer, soprano)
            assert np.allclose(kept[np.lexsort(kept.T[:2])][:, :3], given[np.lexsort(given.T[:2])][:, :3]), \
                "the soprano must come back exactly"  # fmt: skip
        row = {"day": day, "model": args.model, "seed": seed, "pieces": len(chosen), "melody_seconds": args.seconds,
               "generated": measure(generated, ranges, real), "real": reference,
               "harmonize_seconds": {"median": statistics.median(seconds), "max": max(seconds)}}  # fmt: skip
        record(args.out, row, "report")
        print(json.dumps(row))
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


def part_ranges(pieces: list[np.ndarray]) -> dict[int, tuple[int, int]]:
    """Lowest and highest pitch of each of :data:`VOICES` over ``pieces``."""
    pitches = {part: [] for part in VOICES}
    for notes in pieces:
        for part in VOICES:
            pitches[part] += notes[notes[:, 4] == part, 0].astype(int).tolist()
    return {part: (min(values), max(values)) for part, values in pitches.items() if values}


def sounding(notes: np.ndarray, part: int, times: np.ndarray) -> np.ndarray:
    """The pitch ``part`` sounds at each of ``times`` (the highest if several), -1 where it rests."""
    voice = notes[notes[:, 4] == part]
    out = np.full(len(times), -1)
    for pitch, start, end in voice[:, :3]:
        hit = (times >= start - 1e-6) & (times < end - 1e-6)
        out[hit] = np.maximum(out[hit], int(pitch))
    return out


def voice_leading(notes: np.ndarray) -> dict[str, int]:
    """Counts over every pair of :data:`VOICES` and consecutive onsets of ``notes`` ``(n, 5)``.

    ``motions``: consecutive onsets where both parts sound and at least one moves (the note pairs);
    ``fifths`` / ``octaves``: motions where both parts move (in the same direction or, antiparallel,
    in opposite ones: music21's ``VoiceLeadingQuartet`` rule) and the interval (mod 12) is a fifth /
    an octave or unison at both onsets; ``slices``: (onset, pair) where both
    sound; ``crossings``: those where the higher part (the lower number) is below the other.
    """
    times = np.unique(np.round(notes[:, 1], 6))
    pitch = {part: sounding(notes, part, times) for part in VOICES}
    counts = dict(motions=0, fifths=0, octaves=0, slices=0, crossings=0)
    for a_index, upper in enumerate(VOICES):
        for lower in VOICES[a_index + 1 :]:
            high, low = pitch[upper], pitch[lower]
            both = (high >= 0) & (low >= 0)
            counts["slices"] += int(both.sum())
            counts["crossings"] += int((both & (high < low)).sum())
            for t in range(1, len(times)):
                if not (both[t - 1] and both[t]):
                    continue
                moves = (int(high[t] - high[t - 1]), int(low[t] - low[t - 1]))
                if moves == (0, 0):
                    continue
                counts["motions"] += 1
                if moves[0] == 0 or moves[1] == 0:
                    continue  # parallels need both parts moving (either way: music21 counts contrary fifths too)
                before, after = (high[t - 1] - low[t - 1]) % 12, (high[t] - low[t]) % 12
                counts["fifths"] += int(before == after == 7)
                counts["octaves"] += int(before == after == 0)
    return counts


def measure(pieces: list[np.ndarray], ranges: dict[int, tuple[int, int]], real: list[np.ndarray] | None = None) -> dict:
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
    runs = [row for row in rows if "generated" in row]
    if not runs:
        return "no runs yet"
    real = runs[-1]["real"]
    keys = [("parallels_per_100_pairs", "parallel 5ths + 8ves per 100 note pairs", 2),
            ("fifths_per_100_pairs", "parallel 5ths per 100", 2), ("octaves_per_100_pairs", "parallel 8ves per 100", 2),
            ("crossing_share", "voice crossings (share of onsets × pairs)", 4),
            ("outside_range_share", "A/T/B notes outside the part's training range", 4),
            ("duration_overlap", "duration overlap", 3), ("polyphony_overlap", "polyphony overlap", 3)]  # fmt: skip
    lines = [f"{runs[-1]['pieces']} test chorales, first {runs[-1]['melody_seconds']:g} s, {len(runs)} seed(s)", "",
             "| measure | generated (mean ± sd over seeds) | real chorales |", "|---|---:|---:|"]  # fmt: skip
    for key, label, digits in keys:
        values = [row["generated"][key] for row in runs if key in row["generated"]]
        lines.append(f"| {label} | {spread(values, digits)} | {real[key]:.{digits}f} |" if key in real
                     else f"| {label} | {spread(values, digits)} | — |")  # fmt: skip
    medians = [row["harmonize_seconds"]["median"] for row in runs]
    lines += ["", f"one harmonization of a {runs[-1]['melody_seconds']:g}-second soprano: median {statistics.fmean(medians):.2f} s "
              f"(float32, worst {max(row['harmonize_seconds']['max'] for row in runs):.2f} s)"]  # fmt: skip
    for row in (r for r in rows if "int8_harmonize_seconds" in r):
        lines[-1] += f"; int8 median {row['int8_harmonize_seconds']:.2f} s over {row['pieces']} pieces"
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Infilling the test chorales: what the new notes do at the span's end, against the notes they replace.

The shipped music model (or ``--model``) rewrites every part of a ``--span``-second gap (4) starting at
40 % of each Bach chorale of its test split, cut to its first 30 s, with the piece's own controls and
the command's chord sizes, top-p 0.95, for each of ``--seeds``. Measured on the new notes and on the
real notes they replace:

- the silence at the seam: for each part, from the span's end to where its kept music resumes (its next
  kept onset), the share of that time in which the part sounds nothing — the real notes that started
  in the span fill it, as a player holds a note into the next bar;
- short notes: the share of notes under 0.15 s (the chorales' sixteenths at the usual tempo are longer);
- the duration overlap (:mod:`multimodal.music.stats`) of the span's notes with the real span's;
- the wall time of one infill.

Every note outside the span is asserted to come back exactly. Rows append to ``--out`` per seed, labelled
with ``--label`` (e.g. the commit). Usage (alone on the machine)::

    flock /tmp/bench.lock python benchmarks/infill_seams.py --label after
    python benchmarks/infill_seams.py --table
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
from harmonization import chorale_arguments, cut, load_measured, on_grid
from protocol import load, record, spread

from multimodal.music.voice_leading import FOUR_PARTS as VOICES

ROOT = Path(__file__).resolve().parents[1]
SHORT = 0.15
"""Seconds: a note shorter than this counts as short."""


def main() -> None:
    parser = chorale_arguments(__doc__, "infill_seams.jsonl")
    parser.add_argument("--span", type=float, default=4.0, help="seconds rewritten, from 40 %% of the cut piece")
    parser.add_argument("--label", default="", help="names the decoder in the rows (e.g. a commit)")
    args = parser.parse_args()
    if not args.table:
        run(args)
    print(table(load(args.out)))


def run(args: argparse.Namespace) -> None:
    from multimodal.music.harmonize import infill

    model, tokenizer, chord_sizes, bounds, _, test, chosen = load_measured(args.model, args.pieces)
    pieces = [on_grid(tokenizer, cut(test.notes[i], args.seconds)) for i in chosen]
    spans = [(round(0.4 * piece[:, 2].max(), 2), round(0.4 * piece[:, 2].max(), 2) + args.span) for piece in pieces]
    real = [seams(piece, piece, *span) for piece, span in zip(pieces, spans, strict=True)]
    for seed in args.seeds:
        found, seconds = [], []
        for index, piece, (start, end) in zip(chosen, pieces, spans, strict=True):
            started = time.perf_counter()
            ids = infill(model, tokenizer, piece, start, end, parts=list(VOICES), controls=test.controls[index],
                         top_p=0.95, chord_sizes=chord_sizes, part_ranges=bounds,
                         generator=torch.Generator().manual_seed(seed * 1000 + index))  # fmt: skip
            seconds.append(time.perf_counter() - started)
            filled = tokenizer.decode_notes(ids)
            assert exact(outside(filled, start, end)) == exact(outside(piece, start, end)), "outside the span: unchanged"
            found.append(seams(filled, piece, start, end))
        row = {"day": datetime.date.today().isoformat(), "model": args.model, "label": args.label, "seed": seed,
               "pieces": len(chosen), "span_seconds": args.span, "generated": summary(found, real), "real": summary(real, real),
               "infill_seconds": {"median": statistics.median(seconds), "max": max(seconds)}}  # fmt: skip
        record(args.out, row, "report")
        print(json.dumps(row))


def outside(notes: np.ndarray, start: float, end: float) -> np.ndarray:
    """The notes that start outside ``[start, end)`` (to the grid's hundredth)."""
    onset = np.round(notes[:, 1], 2)
    return notes[(onset < round(start, 2)) | (onset >= round(end, 2))]


def exact(notes: np.ndarray) -> list[tuple]:
    """Notes as sorted ``(pitch, start, end, part)`` rounded to the hundredth: comparable exactly."""
    return sorted((int(n[0]), round(n[1], 2), round(n[2], 2), int(n[4])) for n in notes)


def seams(filled: np.ndarray, piece: np.ndarray, start: float, end: float) -> dict:
    """The span's notes of ``filled`` and, per part of ``piece``, the seconds from ``end`` to its next kept onset and
    the seconds of them in which the part sounds nothing in ``filled``."""
    onset = np.round(filled[:, 1], 2)
    inside = filled[(onset >= round(start, 2)) & (onset < round(end, 2))]
    waited = silent = 0.0
    for part in VOICES:
        kept = piece[(piece[:, 4] == part) & (np.round(piece[:, 1], 2) >= round(end, 2))]
        resume = float(kept[:, 1].min()) if len(kept) else end
        grid = np.arange(end, resume - 1e-9, 0.01) + 0.005  # hundredths from the seam to the resumption
        notes = filled[filled[:, 4] == part]
        sounding = ((notes[:, 1][None] <= grid[:, None]) & (notes[:, 2][None] > grid[:, None])).any(axis=1)
        waited += len(grid) * 0.01
        silent += float((~sounding).sum()) * 0.01
    return {"notes": inside, "waited": waited, "silent": silent}


def summary(found: list[dict], real: list[dict]) -> dict:
    """The seam silence, short notes and duration overlap of ``found`` spans (against ``real``'s notes)."""
    from multimodal.music.stats import excerpt_stats, overlaps

    notes = np.concatenate([f["notes"] for f in found])
    lengths = notes[:, 2] - notes[:, 1]

    def stats(spans: list[dict]):
        return sum((excerpt_stats(s["notes"][:, :4], select=False) for s in spans[1:]),
                   excerpt_stats(spans[0]["notes"][:, :4], select=False))  # fmt: skip

    return {"seam_silence_share": sum(f["silent"] for f in found) / max(sum(f["waited"] for f in found), 1e-9),
            "seam_seconds": sum(f["waited"] for f in found), "notes": len(notes),
            "short_share": float((lengths < SHORT).mean()) if len(notes) else 0.0,
            "duration_overlap": overlaps(stats(found), stats(real))["duration"]}  # fmt: skip


def table(rows: list[dict]) -> str:
    """Mean ± sd over seeds of each measure, one column per label."""
    runs = [row for row in rows if "generated" in row]
    if not runs:
        return "no runs yet"
    labels = list(dict.fromkeys(row["label"] for row in runs))
    keys = [("seam_silence_share", "silence from the span's end to the next kept note (share)", 3),
            ("short_share", f"new notes under {SHORT:g} s (share)", 3), ("duration_overlap", "duration overlap", 3),
            ("notes", "notes in the spans", 0)]  # fmt: skip
    lines = [f"{runs[-1]['pieces']} test chorales, a {runs[-1]['span_seconds']:g}-s span from 40 % of the first 30 s, "
             "every part rewritten", "",
             "| measure | " + " | ".join(f"{label or 'generated'} ({sum(r['label'] == label for r in runs)} seeds)"
                                       for label in labels) + " | real |",
             "|---|" + "---:|" * (len(labels) + 1)]  # fmt: skip
    real = runs[-1]["real"]
    for key, name, digits in keys:
        cells = [spread([r["generated"][key] for r in runs if r["label"] == label], digits) for label in labels]
        lines.append(f"| {name} | {' | '.join(cells)} | {real[key]:.{digits}f} |")
    medians = " | ".join(spread([r["infill_seconds"]["median"] for r in runs if r["label"] == label], 2) for label in labels)
    lines.append(f"| one infill, median seconds | {medians} | — |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

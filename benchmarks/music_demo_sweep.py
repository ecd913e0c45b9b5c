"""Which model `make demo` should train: candidates trained for the demo's time budget, chosen on validation.

Each candidate is ``configs/music_continuation.yaml`` + ``configs/music_demo.yaml`` + its own
overrides, trained with ``multimodal fit`` for ``--minutes`` (the demo's 7 by default) on the
chorales' train split, in a fresh process, one after another (the script is a timed benchmark:
run it alone). ``--stage select`` (the default) scores the **validation** pieces only (the split
that chooses); ``--stage report`` trains the one chosen candidate for ``--seeds`` and scores the
validation and, once, the **test** pieces, then prints mean ± sd over seeds and the demo's
targets (:data:`TARGETS`) with the protocol's verdict (met only by more than one sd). Measures:

    nll/event, nll/note, nll/second   NLL of the best checkpoint (per event compares runs
                                      of one vocabulary; per note and per second compare across)
    overlaps                          duration / polyphony / ioi / pitch_class / pitch histogram
                                      overlaps of continuations of 8 primers of the split (6 s, 512
                                      new events, top-p 0.95, the demo's sampling) with the real ones
    longest note, at end              longest generated note (s) and share of notes sounding at the end

Usage::

    flock /tmp/bench.lock .venv/bin/python benchmarks/music_demo_sweep.py                  # every candidate
    flock /tmp/bench.lock .venv/bin/python benchmarks/music_demo_sweep.py --candidates 3x128 --minutes 1
    flock /tmp/bench.lock .venv/bin/python benchmarks/music_demo_sweep.py --stage report \
        --candidates 2x128-duration-lr3e-3 --seeds 0 1 2                                  # test, once
    .venv/bin/python benchmarks/music_demo_sweep.py --table outputs/music_sweep             # table of earlier runs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "configs" / "music_continuation.yaml", ROOT / "configs" / "music_demo.yaml"]


def _model(dim: int, layers: int, heads: int = 8) -> list[str]:
    return ["--model.init_args.model.dim", str(dim), "--model.init_args.model.num_layers", str(layers),
            "--model.init_args.model.num_heads", str(heads), "--model.init_args.model.ff_dim", str(4 * dim)]  # fmt: skip


def _data(seq_len: int, batch_size: int) -> list[str]:
    return ["--data.init_args.seq_len", str(seq_len), "--model.init_args.model.max_seq_len", str(seq_len),
            "--data.init_args.batch_size", str(batch_size), "--data.init_args.epoch_length", str(40 * batch_size)]  # fmt: skip


def _lr(lr: float) -> list[str]:
    return ["--model.init_args.optimizer.init_args.lr", str(lr)]


_DURATION = ["--data.init_args.vocabulary", "duration"]

CANDIDATES: dict[str, list[str]] = {
    "4x256": _model(256, 4) + _data(256, 16) + _lr(1e-3),  # the demo before this sweep
    "3x128": _model(128, 3) + _data(256, 16) + _lr(1e-3),
    "3x128-lr2e-3": _model(128, 3) + _data(256, 16) + _lr(2e-3),
    "2x128-lr2e-3": _model(128, 2) + _data(256, 16) + _lr(2e-3),
    "3x192-lr1e-3": _model(192, 3, 6) + _data(256, 16) + _lr(1e-3),
    "3x128-seq512-b8": _model(128, 3) + _data(512, 8) + _lr(2e-3),
    "3x128-duration": _model(128, 3) + _data(256, 16) + _lr(2e-3) + _DURATION,
    # second round, after the first showed that only the duration vocabulary keeps notes short
    "2x128-duration": _model(128, 2) + _data(256, 16) + _lr(2e-3) + _DURATION,
    "2x128-duration-lr3e-3": _model(128, 2) + _data(256, 16) + _lr(3e-3) + _DURATION,
    "3x128-duration-lr3e-3": _model(128, 3) + _data(256, 16) + _lr(3e-3) + _DURATION,
    # the demo's model in bf16-mixed: faster only on a CPU with AMX / AVX-512-BF16 (benchmarks/machine.py)
    "2x128-duration-lr3e-3-bf16": _model(128, 2) + _data(256, 16) + _lr(3e-3) + _DURATION
    + ["--trainer.precision", "bf16-mixed"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["select", "report"], default="select")
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--minutes", type=float, default=7.0, help="training time per candidate")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "music_sweep")
    parser.add_argument("--table", type=Path, help="only print the table of the runs in this folder")
    parser.add_argument("--reevaluate", type=Path, help="evaluate the runs in this folder again (no training)")
    args = parser.parse_args()
    if args.stage == "report" and len(args.candidates) != 1:
        parser.error("--stage report: give the one candidate chosen by --stage select")
    if args.table:
        print(tables(sorted(args.table.glob("*/result.json"))))
        return
    if args.reevaluate:
        for path in sorted(args.reevaluate.glob("*/result.json")):
            old = json.loads(path.read_text())
            if "error" in old:
                continue
            checkpoint = best_checkpoint(path.parent)
            new = {**old, **evaluate(checkpoint)}
            if "test" in old:
                new["test"] = evaluate(checkpoint, "test")
            path.write_text(json.dumps(new, indent=2) + "\n")
            print(json.dumps(new), flush=True)
        print(tables(sorted(args.reevaluate.glob("*/result.json"))))
        return
    for seed in args.seeds:
        for name in args.candidates:
            folder = args.out / (f"{name}-seed{seed}" + ("-report" if args.stage == "report" else ""))
            folder.mkdir(parents=True, exist_ok=True)
            result = run_candidate(name, seed, args.minutes, folder, test=args.stage == "report")
            (folder / "result.json").write_text(json.dumps(result, indent=2) + "\n")
            print(json.dumps(result), flush=True)
    print(tables(sorted(args.out.glob("*/result.json"))))


def run_candidate(name: str, seed: int, minutes: float, folder: Path, test: bool = False) -> dict:
    """Trains one candidate in ``folder`` (its outputs land there) and evaluates its best checkpoint.

    ``test``: also score the test pieces (the report stage), under the result's ``"test"`` key.
    """
    max_time = time.strftime("00:%H:%M:%S", time.gmtime(minutes * 60))
    command = [sys.executable, "-m", "tasks.cli", "fit", *[a for c in CONFIGS for a in ("--config", str(c))],
               *CANDIDATES[name], "--seed_everything", str(seed), "--trainer.max_time", max_time]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=_env())
    if done.returncode:
        return {"candidate": name, "seed": seed, "error": done.stderr.strip().splitlines()[-1:]}
    fit_seconds = time.monotonic() - start
    checkpoint = best_checkpoint(folder)
    result = {"candidate": name, "seed": seed, "fit_seconds": round(fit_seconds), **evaluate(checkpoint)}
    return {**result, "test": evaluate(checkpoint, "test")} if test else result


def best_checkpoint(folder: Path) -> Path:
    """The best checkpoint of the candidate run in ``folder`` (runs made before per-run folders kept it flat)."""
    from tasks.runs import resolve_checkpoint

    flat = folder / "outputs/demo/checkpoints/best.ckpt"
    return flat if flat.is_file() else resolve_checkpoint(folder / "outputs/demo")


def evaluate(checkpoint: Path, split: str = "val") -> dict:
    """NLL in three units and sample statistics of the checkpoint on one split's pieces (``val`` or ``test``).

    The continuations start from the split's first 8 pieces (6 s primers).
    """
    import torch

    from multimodal.music import MusicScore, evaluate_continuations, longest_note, score_music
    from multimodal.music.stats import overlaps
    from tasks.checkpoint import load_task
    from tasks.commands.music import run_pieces

    torch.set_num_threads(2)
    task, tokenizer, data = load_task(checkpoint)
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    seq_len = saved["datamodule_hyper_parameters"]["seq_len"]
    pieces = run_pieces(data, split)
    score = MusicScore(0.0, 0, 0, 0.0)
    for notes in pieces.notes:
        score = score + score_music(task.model, tokenizer, notes, seq_len)
    start = time.perf_counter()
    generated, reference, _ = evaluate_continuations(
        task.model, tokenizer, pieces.notes[:8], primer_seconds=6.0, max_new_tokens=512, top_p=0.95, seed=0
    )
    generation_seconds = time.perf_counter() - start
    events = sum(len(tokenizer.encode_notes(notes)) for notes in pieces.notes)
    music_seconds = sum(float(notes[:, 2].max()) for notes in pieces.notes)
    return {
        "steps": torch.load(checkpoint.with_name("last.ckpt"), map_location="cpu", weights_only=True)["global_step"],
        "best_step": saved["global_step"], "parameters": sum(p.numel() for p in task.model.parameters()),
        "nll_per_event": score.per_event, "nll_per_note": score.per_note, "nll_per_second": score.per_second,
        "overlaps": overlaps(generated, reference), "longest_note": generated.longest_note,
        "sounding_at_end": generated.sounding_at_end_share, "reference_longest_note": reference.longest_note,
        "training_longest_note": longest_note(run_pieces(data, "train").notes),
        "events_per_music_second": events / music_seconds,
        "generated_music_seconds_per_second": generated.seconds / generation_seconds,
        "vocabulary": type(tokenizer).__name__,
    }  # fmt: skip


TARGETS = {  # measure: (target, lower is better) -- the demo's bars, docs/benchmarks.md
    "nll_per_second": (32.8, True),  # 1.6 nats/event x 20.5 performance events per second of chorale
    "duration": (0.7, False),
    "polyphony": (0.7, False),
    "longest_note": (14.0, True),  # twice the training pieces' longest note (7 s)
}


def tables(paths: list[Path]) -> str:
    """The per-run table of every result in ``paths``, then the report (test pieces, mean ± sd) if any ran."""
    results = [json.loads(path.read_text()) for path in paths]
    report = [r for r in results if "test" in r]
    text = table(results)
    if report:
        text += "\n" + report_table(report)
    return text


def report_table(report: list[dict]) -> str:
    """Mean ± sd over the report's seeds on validation and test, and the verdict of each target on test."""
    from protocol import spread, verdict

    def measure(result: dict, name: str) -> float:
        return result["overlaps"][name] if name in result["overlaps"] else result[name]

    lines = [f"Report: {report[0]['candidate']}, {len(report)} seeds (test pieces scored once)", "",
             "| measure | validation | test | target | verdict on test |", "|---|---:|---:|---:|---|"]  # fmt: skip
    for name in ("nll_per_event", "nll_per_note", "nll_per_second", "duration", "polyphony", "ioi",
                 "pitch_class", "pitch", "longest_note", "sounding_at_end"):  # fmt: skip
        val = [measure(r, name) for r in report]
        test = [measure(r["test"], name) for r in report]
        target, lower = TARGETS.get(name, (None, True))
        judged = verdict(test, target, lower_is_better=lower) if target is not None else ""
        bar = f"{'≤' if lower else '≥'} {target:g}" if target is not None else ""
        lines.append(f"| {name} | {spread(val, 3)} | {spread(test, 3)} | {bar} | {judged} |")
    return "\n".join(lines) + "\n"


def table(results: list[dict]) -> str:
    """Markdown table of one row per run result."""
    lines = ["| candidate | seed | params | steps | nll/event | nll/note | nll/second | duration | polyphony | ioi "
             "| pitch class | pitch | longest note s | at end | events / s of music | music s generated / s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in results:
        if "error" in r:
            lines.append(f"| {r['candidate']} | {r['seed']} | failed: {r['error']} |")
            continue
        o = r["overlaps"]
        name = f"{r['candidate']} (report)" if "test" in r else r["candidate"]
        lines.append(f"| {name} | {r['seed']} | {r['parameters'] / 1e6:.2f} M | {r['steps']} | "
                     f"{r['nll_per_event']:.3f} | {r['nll_per_note']:.3f} | {r['nll_per_second']:.3f} | "
                     f"{o['duration']:.2f} | {o['polyphony']:.2f} | {o['ioi']:.2f} | {o['pitch_class']:.2f} | "
                     f"{o['pitch']:.2f} | {r['longest_note']:.1f} | {r['sounding_at_end']:.0%} | "
                     f"{r.get('events_per_music_second', float('nan')):.1f} | "
                     f"{r.get('generated_music_seconds_per_second', float('nan')):.1f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _env() -> dict:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}


if __name__ == "__main__":
    main()

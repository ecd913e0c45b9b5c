"""Does a directed music model do what it is told? Key, style and quality of a model with parts and controls.

One model per seed is trained with ``configs/music_directed.yaml`` (parts, style / key / meter /
density tokens, the default music21 collections) for ``--steps`` steps; its best checkpoint on the
**validation** pieces is then measured once on what the **test** split and the controls give:

    key      48 pieces sampled from nothing, two for each of the 24 keys, with the key token set; the
             key music21's Krumhansl–Schmuckler analysis finds in each must equal the requested one
             (tonic and mode; a relative major/minor is a miss). Baseline: the same model and seeds
             with the key left unknown (the rate at which it lands on the requested key by itself).
    style    16 pieces sampled from nothing per style of the default collections, the style token set;
             a logistic regression on pitch-class, melodic-interval, duration and polyphony histograms,
             trained on the real training pieces, names each sample's style. Its accuracy on the real
             test pieces is the scale.
    quality  per collection, up to ``--pieces`` test pieces continued from their first
             ``--primer-seconds`` with their own controls: the duration and polyphony histogram overlaps
             with the real continuations (``multimodal sample-stats``'s statistics).
    nll      nats per note and per second of music on every test piece.

Each seed appends one JSON line to ``--out`` (a stopped sweep keeps what finished; a seed already
there is not run again); ``--table`` prints mean ± sd over seeds. Run it alone on the machine::

    flock /tmp/bench.lock .venv/bin/python benchmarks/music_direction.py --seeds 0 1 2
    .venv/bin/python benchmarks/music_direction.py --table
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread

from multimodal.music import tonality
from multimodal.tokenizers.music_controls import KEYS

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1500, help="training steps per seed")
    parser.add_argument("--new-tokens", type=int, default=384, help="tokens sampled per piece from nothing")
    parser.add_argument("--per-key", type=int, default=2, help="samples per key (24 keys)")
    parser.add_argument("--per-style", type=int, default=16, help="samples per style")
    parser.add_argument("--pieces", type=int, default=8, help="test pieces continued per collection")
    parser.add_argument("--primer-seconds", type=float, default=4.0)
    parser.add_argument("--root", type=Path, default=ROOT / "outputs" / "music_direction", help="the runs' folder")
    parser.add_argument("--set", nargs=argparse.REMAINDER, default=[],
                        help="(last) more fit options, e.g. --set --data.init_args.limit=20")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2, help="--guidance: torch threads")
    parser.add_argument("--tiny", action="store_true", help="the test suite's size: tiny model and samples")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "music_direction.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table of --out and stop")
    parser.add_argument("--guidance", action="store_true",
                        help="no training: key/style accuracy of --model at each of --scales (classifier-free guidance)")
    parser.add_argument("--model", default="music", help="--guidance: a shipped model's name or a checkpoint/folder")
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    parser.add_argument("--key-emphasis", type=float, nargs="+", default=[0.0],
                        help="--guidance: nats on the requested key's tonic-chord pitches (multimodal.music.tonality)")
    parser.add_argument("--stage", choices=["select", "report"], default="select",
                        help="--guidance: select (seeds the report does not use) or report")  # fmt: skip
    parser.add_argument("--real-ceiling", action="store_true",
                        help="per collection: the overlaps between two disjoint sets of --pieces real pieces of the "
                             "--stage's split (the measure's noise at that sample size), 20 draws; prints, records nothing")
    parser.add_argument("--figure", type=Path, help="draw two chorales from nothing in two keys with seed 0's model "
                        "into this PNG (the README's picture) and stop")  # fmt: skip
    args = parser.parse_args()
    if args.table:
        print(table(load(args.out)))
        if any("guidance_scale" in row for row in load(args.out)):
            print("\n" + guidance_table(load(args.out)))
        return
    if args.guidance:
        torch.set_num_threads(args.threads)
        guidance(args)
        return
    if args.real_ceiling:
        print(real_ceiling(args))
        return
    if args.figure:
        two_keys_figure(args.root / "lightning_logs" / "seed0" / "checkpoints" / "best.ckpt", args.figure)
        return
    torch.set_num_threads(2)
    done = {row["seed"] for row in load(args.out) if row.get("steps") == args.steps}
    for seed in args.seeds:
        if seed in done:
            print(f"seed {seed}: already in {args.out}")
            continue
        started = time.perf_counter()
        checkpoint = train(seed, args)
        result = {"seed": seed, "steps": args.steps, "train_seconds": round(time.perf_counter() - started, 1),
                  **measure(checkpoint, seed, args)}  # fmt: skip
        record(args.out, result, stage="report")
        print(json.dumps(result))
    print(table(load(args.out)))


def train(seed: int, args: argparse.Namespace) -> Path:
    """Fits (or resumes) seed ``seed``'s run; returns its best checkpoint (chosen on validation)."""
    run = args.root / "lightning_logs" / f"seed{seed}"
    configs = ["--config", str(CONFIGS / "music_continuation.yaml"), "--config", str(CONFIGS / "music_directed.yaml")]
    if args.tiny:
        configs += ["--config", str(CONFIGS / "music_continuation_tiny.yaml")]
    command = [sys.executable, "-m", "tasks.cli", "fit", *configs, "--seed_everything", str(seed),
               "--data.init_args.seed", str(seed),  # the training windows differ between seeds too
               "--trainer.max_steps", str(args.steps), "--trainer.max_time", "null", "--trainer.enable_progress_bar",
               "false", "--trainer.default_root_dir", str(args.root), "--run_name", f"seed{seed}", *args.set]  # fmt: skip
    if (run / "checkpoints" / "last.ckpt").is_file():
        command += ["--ckpt_path", "last"]  # an interrupted run resumes; a finished one stops at once
    subprocess.run(command, cwd=ROOT, check=True)
    best = run / "checkpoints" / "best.ckpt"
    return best if best.is_file() else run / "checkpoints" / "last.ckpt"


def measure(checkpoint: Path, seed: int, args: argparse.Namespace) -> dict:
    """The key, style, quality and NLL numbers of one trained model (module docstring)."""
    from multimodal.music import score_music
    from tasks.checkpoint import load_task

    task, tokenizer, data = load_task(checkpoint)
    model = task.model.eval()
    splits = run_splits(data, ("train", "test"))
    result = {"checkpoint": str(checkpoint.relative_to(ROOT) if checkpoint.is_relative_to(ROOT) else checkpoint)}

    result.update(control_accuracies(model, tokenizer, splits, seed, args))

    # quality per collection, and the test NLL
    test = splits["test"]
    result["overlaps"] = collection_overlaps(model, tokenizer, test, seed, args)
    scores = [score_music(model, tokenizer, notes, data.get("seq_len", 256)) for notes in test.notes]
    total = sum(scores[1:], scores[0])
    result.update(test_nats_per_note=total.per_note, test_nats_per_second=total.per_second, test_pieces=len(test))
    return result


def run_splits(data: dict, names: tuple[str, ...]) -> dict:
    """The run's music21 pieces (``data``: its data settings) cut into the named splits, as training cut them."""
    from multimodal.data.music21_corpus import load_music21_corpus

    corpus = load_music21_corpus(data["collections"], limit=data.get("limit"), num_parts=data.get("num_parts", 1))
    return {name: corpus.split(name, data.get("validation_percent", 10), data.get("test_percent", 10)) for name in names}


def by_collection(pieces) -> dict[str, list[int]]:
    """The indices of ``pieces`` per collection (the first part of each name), collections in name order."""
    groups: dict[str, list[int]] = {}
    for index, name in enumerate(pieces.names):
        groups.setdefault(name.split("/")[0], []).append(index)
    return dict(sorted(groups.items()))


def collection_overlaps(model, tokenizer, pieces, seed: int, args: argparse.Namespace, guidance_scale: float = 1.0,
                        emphasis: float = 0.0) -> dict:
    """Per collection: duration and polyphony overlaps of ``args.pieces`` of ``pieces`` continued with their own
    controls (and ``emphasis`` on each piece's own key, when it has one)."""
    from multimodal.music import evaluate_continuations, overlaps

    found = {}
    for collection, indices in by_collection(pieces).items():
        chosen = indices[: args.pieces]
        common = {"primer_seconds": args.primer_seconds, "max_new_tokens": args.new_tokens, "top_p": 0.95,
                  "guidance_scale": guidance_scale}  # fmt: skip
        if not emphasis:
            generated, reference, _ = evaluate_continuations(
                model, tokenizer, [pieces.notes[i] for i in chosen], seed=seed,
                controls=[pieces.controls[i] for i in chosen], **common,
            )  # fmt: skip
        else:  # each piece leans towards its own key: one call per piece, with the seed the pooled call gives it
            generated = reference = None
            for number, i in enumerate(chosen):
                key = pieces.controls[i].key
                leaning = tonality.key_emphasis(tokenizer, key, emphasis) if key is not None else {}
                one, real, _ = evaluate_continuations(model, tokenizer, [pieces.notes[i]], seed=seed + number,
                                                      controls=[pieces.controls[i]], **common, **leaning)  # fmt: skip
                generated, reference = (one, real) if generated is None else (generated + one, reference + real)
        both = overlaps(generated, reference)
        found[collection] = {"pieces": len(chosen), "duration": both["duration"], "polyphony": both["polyphony"]}
    return found


def control_accuracies(model, tokenizer, splits: dict, seed: int, args: argparse.Namespace, guidance_scale: float = 1.0,
                       baseline: bool = True, emphasis: float = 0.0) -> dict:
    """Key and style accuracy of samples from nothing (module docstring), with classifier-free guidance ``guidance_scale``.

    ``baseline``: also the key accuracy with the key token unknown (which guidance leaves unchanged).
    ``emphasis``: the key samples lean towards their key (:func:`multimodal.music.tonality.key_emphasis`);
    the share of their notes in the key's tonic triad is reported beside the accuracy.
    """
    from multimodal.tokenizers.music_controls import STYLES, Controls

    result: dict = {}
    # key: the requested key against music21's analysis, with and without the key token
    keys = [index for index in range(len(KEYS)) for _ in range(args.per_key)]
    for name, given in (("key", True), ("key_baseline", False))[: 2 if baseline else 1]:
        prompts = [Controls(key=key if given else None) for key in keys]
        samples = sample_from_nothing(model, tokenizer, prompts, args.new_tokens, seed, guidance_scale,
                                      emphasis if given else 0.0)  # fmt: skip
        found = [analysed_key(notes) for notes in samples]
        result[f"{name}_accuracy"] = float(np.mean([hit == key for hit, key in zip(found, keys, strict=True)]))
        if given:
            result["tonic_triad_share"] = float(np.nanmean([tonality.tonic_triad_share(notes, key)
                                                            for notes, key in zip(samples, keys, strict=True)]))  # fmt: skip
    result["key_samples"] = len(keys)

    # style: a classifier of the real training pieces names the style of each sample
    styles = sorted({style for style in (controls.style for controls in splits["train"].controls) if style is not None})
    classifier = style_classifier(splits["train"])
    test_pieces = [(notes, c.style) for notes, c in zip(splits["test"].notes, splits["test"].controls, strict=True)
                   if c.style in styles]  # fmt: skip
    result["style_classifier_test_accuracy"] = float(np.mean(
        classifier.predict(np.stack([style_features(notes) for notes, _ in test_pieces])) == [s for _, s in test_pieces]))
    asked = [style for style in styles for _ in range(args.per_style)]
    samples = sample_from_nothing(model, tokenizer, [Controls(style=style) for style in asked], args.new_tokens, seed,
                                  guidance_scale)  # fmt: skip
    usable = [i for i, notes in enumerate(samples) if len(notes) >= 8]
    predicted = classifier.predict(np.stack([style_features(samples[i]) for i in usable])) if usable else []
    result["style_accuracy"] = float(np.sum(np.array(predicted) == [asked[i] for i in usable]) / len(asked))
    result["styles"] = [list(STYLES)[style] for style in styles]
    return result


def sample_from_nothing(model, tokenizer, controls: list, new_tokens: int, seed: int,
                        guidance_scale: float = 1.0, emphasis: float = 0.0) -> list[np.ndarray]:
    """One piece per entry of ``controls``, sampled (top-p 0.95) from ``BOS`` and the control tokens;
    ``guidance_scale != 1``: classifier-free guidance against the same prompt with every control unknown;
    ``emphasis``: each row leans towards its key (rows of one key are then decoded together)."""
    from multimodal.generation.sample import generate_batch

    torch.manual_seed(seed)
    batches = [list(range(start, min(start + 16, len(controls)))) for start in range(0, len(controls), 16)]
    if emphasis:  # one bias per batch
        by_key: dict = {}
        for index, c in enumerate(controls):
            by_key.setdefault(c.key, []).append(index)
        batches = list(by_key.values())
    samples: list = [None] * len(controls)
    for rows in batches:
        prompts = [[tokenizer.bos_id, *tokenizer.control_ids(controls[row])] for row in rows]
        unconditional = [tokenizer.without_controls(prompt) for prompt in prompts] if guidance_scale != 1 else None
        key = controls[rows[0]].key
        leaning = tonality.key_emphasis(tokenizer, key, emphasis) if emphasis and key is not None else {}
        decoded = generate_batch(model, prompts, new_tokens, top_p=0.95, eos_id=tokenizer.eos_id,
                                 guidance_scale=guidance_scale, unconditional_prompts=unconditional, **leaning)  # fmt: skip
        for row, ids in zip(rows, decoded, strict=True):
            samples[row] = tokenizer.decode_notes(ids)
    return samples


def guidance(args: argparse.Namespace) -> None:
    """``--guidance``: key and style accuracy of a trained model (``--model``) at each of ``--scales``, per seed.

    Nothing is trained. ``--stage select`` is meant for seeds that the report does not use (the scale
    is chosen there); ``--stage report`` for the reported seeds. One JSON line per (seed, scale).
    """
    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task

    task, tokenizer, data = load_task(resolve_model(args.model))
    model = task.model.eval()
    splits = run_splits(data, ("train", "val", "test"))
    pieces = splits["val" if args.stage == "select" else "test"]  # continued for the quality overlaps
    # rows from before --key-emphasis (no tonic-triad share) are not counted as done: they are run again
    # rows from before --pieces was recorded continued 8 pieces per collection
    done = {(row["seed"], row["guidance_scale"], row["key_emphasis"]) for row in load(args.out)
            if row.get("stage") == args.stage and row.get("model") == args.model and "key_emphasis" in row
            and row.get("pieces", 8) == args.pieces}  # fmt: skip
    keyed = [(notes, c.key) for notes, c in zip(pieces.notes, pieces.controls, strict=True) if c.key is not None]
    real_share = float(np.mean([tonality.tonic_triad_share(notes, key) for notes, key in keyed]))
    for seed in args.seeds:
        for scale in args.scales:
            for emphasis in args.key_emphasis:
                if (seed, scale, emphasis) in done:
                    print(f"seed {seed}, scale {scale}, key emphasis {emphasis}: already in {args.out}")
                    continue
                started = time.perf_counter()
                result = {"model": args.model, "seed": seed, "guidance_scale": scale, "key_emphasis": emphasis,
                          "pieces": args.pieces,
                          **control_accuracies(model, tokenizer, splits, seed, args, scale, baseline=False,
                                               emphasis=emphasis),
                          "real_tonic_triad_share": real_share,
                          "overlaps": collection_overlaps(model, tokenizer, pieces, seed, args, scale, emphasis),
                          "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
                record(args.out, result, stage=args.stage)
                print(json.dumps(result))
    print(guidance_table(load(args.out)))


def real_ceiling(args: argparse.Namespace, draws: int = 20) -> str:
    """``--real-ceiling``: real against real, per collection — two disjoint random sets of ``args.pieces`` pieces of
    the stage's split (validation for select, test for report), each piece from ``args.primer_seconds`` to its
    end as the tokenizer sees it; mean ± sd over ``draws`` of the duration and polyphony overlaps."""
    from multimodal.music import excerpt_stats, overlaps
    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task

    _, tokenizer, data = load_task(resolve_model(args.model))
    stage = "val" if args.stage == "select" else "test"
    pieces = run_splits(data, (stage,))[stage]
    stats = {}
    lines = [f"| collection | pieces in the split | duration overlap, {args.pieces} vs {args.pieces} real | polyphony overlap |",
             "|---|---:|---:|---:|"]  # fmt: skip
    generator = np.random.default_rng(0)
    for collection, indices in by_collection(pieces).items():
        if len(indices) < 2 * args.pieces:
            lines.append(f"| {collection} | {len(indices)} | (fewer than {2 * args.pieces}) | |")
            continue
        for index in indices:
            if index not in stats:
                notes = tokenizer.decode_notes(tokenizer.encode_notes(pieces.notes[index]))
                stats[index] = excerpt_stats(notes, start=args.primer_seconds)
        found = []
        for _ in range(draws):
            chosen = generator.permutation(indices)[: 2 * args.pieces]
            first, second = (sum((stats[i] for i in half[1:]), stats[half[0]]) for half in np.split(chosen, 2))
            both = overlaps(first, second)
            found.append((both["duration"], both["polyphony"]))
        duration, polyphony = zip(*found, strict=True)
        lines.append(f"| {collection} | {len(indices)} | {spread(list(duration), 3)} | {spread(list(polyphony), 3)} |")
    return "\n".join(lines)


def guidance_table(rows: list[dict]) -> str:
    """Per stage, model and scale: key and style accuracy, mean ± sd over seeds."""
    rows = [row for row in rows if "guidance_scale" in row]
    lines = ["| stage | model | guidance scale | key emphasis | seeds | key accuracy | tonic-triad share (real) | "
             "style accuracy | pieces per collection | lowest duration overlap | lowest polyphony overlap | seconds |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["stage"], row["model"], row["guidance_scale"], row.get("key_emphasis", -1.0), row.get("pieces", 8))
        groups.setdefault(key, []).append(row)
    for (stage, model, scale, emphasis, pieces), group in sorted(groups.items()):  # -1: from before --key-emphasis
        share = (f"{spread([r['tonic_triad_share'] for r in group], 3)} ({group[0]['real_tonic_triad_share']:.3f})"
                 if all("tonic_triad_share" in r for r in group) else "—")  # fmt: skip
        lines.append(f"| {stage} | {model} | {scale:g} | {'—' if emphasis < 0 else f'{emphasis:g}'} | {len(group)} | "
                     f"{spread([r['key_accuracy'] for r in group], 3)} | {share} | "
                     f"{spread([r['style_accuracy'] for r in group], 3)} | {pieces} | "
                     + " | ".join(spread([min(c[feature] for c in r["overlaps"].values()) for r in group], 3)
                                  if all(r["overlaps"] for r in group) else "—" for feature in ("duration", "polyphony"))
                     + f" | {statistics.fmean(r['seconds'] for r in group):.0f} |")  # fmt: skip
    return "\n".join(lines)


def analysed_key(notes: np.ndarray) -> int | None:
    """The key index music21's Krumhansl–Schmuckler analysis finds in ``notes`` (seconds as quarter notes x 2)."""
    from music21 import note, stream

    from multimodal.tokenizers.music_controls import parse_key

    if len(notes) == 0:
        return None
    part = stream.Stream()
    for pitch, start, end, *_ in notes:
        part.insert(float(start) * 2, note.Note(int(pitch), quarterLength=max(float(end - start) * 2, 0.125)))
    found = part.analyze("key")
    return parse_key(f"{found.tonic.name.replace('-', 'b')} {found.mode}") if found.mode in ("major", "minor") else None


def style_features(notes: np.ndarray) -> np.ndarray:
    """Pitch-class (duration-weighted), melodic-interval, duration and polyphony histograms, and density."""
    notes = notes[np.lexsort((-notes[:, 0], notes[:, 1]))]
    durations = notes[:, 2] - notes[:, 1]
    pitch_classes = np.bincount(notes[:, 0].astype(int) % 12, weights=durations, minlength=12)
    onsets, first = np.unique(notes[:, 1], return_index=True)
    top = notes[first, 0]  # the highest note of each onset
    intervals = np.bincount(np.clip(np.diff(top), -12, 12).astype(int) + 12, minlength=25)
    lengths = np.histogram(durations, bins=[0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.9, 1.2, 1.8, 2.5, np.inf])[0]
    sounding = np.array([np.sum((notes[:, 1] <= t) & (notes[:, 2] > t)) for t in onsets])
    polyphony = np.bincount(np.clip(sounding, 1, 6) - 1, minlength=6)
    seconds = max(float(notes[:, 2].max() - notes[:, 1].min()), 1e-3)
    parts = [pitch_classes, intervals, lengths, polyphony]
    return np.concatenate([part / max(part.sum(), 1e-9) for part in parts] + [[np.log(len(notes) / seconds)]])


def style_classifier(train):
    """Logistic regression from :func:`style_features` to style, fitted on the real training pieces."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rows = [(style_features(notes), c.style) for notes, c in zip(train.notes, train.controls, strict=True)
            if c.style is not None and len(notes) >= 8]  # fmt: skip
    features, labels = np.stack([f for f, _ in rows]), np.array([s for _, s in rows])
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000, class_weight="balanced")).fit(
        features, labels)


def two_keys_figure(checkpoint: Path, path: Path, keys: tuple[str, str] = ("D major", "G minor")) -> None:
    """Two chorales sampled from nothing with seed 0's model, the same seed, only the key token different."""
    import matplotlib.pyplot as plt

    from multimodal.generation.sample import generate
    from multimodal.music import parse_controls
    from tasks.checkpoint import load_task

    task, tokenizer, _ = load_task(checkpoint)
    figure, axes = plt.subplots(1, 2, figsize=(12, 3.6), sharey=True)
    colours = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2"]  # one per part
    for axis, key in zip(axes, keys, strict=True):
        prompt = [tokenizer.bos_id, *tokenizer.control_ids(parse_controls(style="chorale", key=key, meter="4/4"))]
        torch.manual_seed(0)
        tokens = generate(task.model.eval(), torch.tensor([prompt]), 384, top_p=0.95, eos_id=tokenizer.eos_id)[0]
        notes = tokenizer.decode_notes(tokens)
        for pitch, start, end, _, part in notes:
            axis.add_patch(plt.Rectangle((start, pitch - 0.4), end - start, 0.8, color=colours[int(part) % 5]))
        found = analysed_key(notes)
        axis.set_title(f"--key '{key}': music21 finds {'?' if found is None else KEYS[found]}")
        axis.set_xlim(0, float(notes[:, 2].max()) if len(notes) else 1.0)
        axis.set_xlabel("time (s)")
    axes[0].set_ylim(30, 84)
    axes[0].set_ylabel("pitch (colour: part)")
    figure.suptitle("--primer-seconds 0 --style chorale --meter 4/4, same seed, two key tokens")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    print(f"wrote {path}")


def table(rows: list[dict]) -> str:
    """Mean ± sd over seeds of each measurement."""
    rows = [row for row in rows if row.get("stage") == "report" and "guidance_scale" not in row]
    if not rows:
        return "no results yet"
    lines = [f"{len(rows)} seed(s), {rows[0]['steps']} steps each", "", "| measure | mean ± sd |", "|---|---:|"]
    for key in ("key_accuracy", "key_baseline_accuracy", "style_accuracy", "style_classifier_test_accuracy",
                "test_nats_per_note", "test_nats_per_second"):  # fmt: skip
        lines.append(f"| {key} | {spread([row[key] for row in rows], 3)} |")
    for collection in rows[0]["overlaps"]:
        for feature in ("duration", "polyphony"):
            values = [row["overlaps"][collection][feature] for row in rows if collection in row["overlaps"]]
            lines.append(f"| {collection} {feature} overlap | {spread(values, 3)} |")
    lines.append(f"| training seconds | {statistics.fmean(row['train_seconds'] for row in rows):.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

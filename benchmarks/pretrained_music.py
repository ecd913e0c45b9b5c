"""The shipped music model: its test-split report against the demo's recipe, and its export into the package.

The model is trained by ``make pretrained-music`` (``configs/pretrained/music.yaml`` with ``music_context.yaml``
on top, then ``music_context_long.yaml``'s closing stage; its best checkpoint on the **validation** pieces is the
one shipped). This script then

``--peer``     trains the demo's 7-minute recipe (``configs/music_demo.yaml``: 2 layers x 128, the same
               note-duration vocabulary without parts or controls) on the Bach collection with the
               shipped model's split (pieces split by the same names), one run per ``--seeds`` entry;
``--report``   measures the shipped model once on the **test** split: nats per note and per second of
               music per collection, the control accuracies and sample-statistics overlaps of
               ``benchmarks/music_direction.py``, the NLL of its float16 export, and nats per
               second on the test Bach pieces against each peer run (target: >= 15 % lower);
               ``--peer-windows N`` scores the peers in windows of N ids as well;
``--finetune`` the fine-tuning example of docs/pretrained.md: on a collection the model never saw
               (``--finetune-collection``, default the Trecento pieces, opt-in: measured, not shipped),
               ``--finetune-steps`` steps from the shipped weights against as many from scratch, the
               same recipe otherwise; test nats per note of each run's best checkpoint on validation;
``--export``   writes the float16 model folder into ``multimodal/pretrained/music`` with its model card
               (the numbers of ``--report``) and ``SHA256SUMS``;
``--reuse-peers`` with ``--report`` when the peer runs are not on disk: the peers' numbers of the
               last report in ``--out`` (scored on the same test Bach pieces; the row says so);
``--select RUN ...`` scores candidate models (runs or folders) on the **validation** split, per collection,
               and the peer runs on the same validation Bach pieces: how a closing stage was chosen;
               ``--select-windows N`` scores them in windows of N ids as well (a model trained on longer
               windows, read as the peers are: what its context buys);
``--table``    prints the report.

Each run appends one JSON line to ``--out``. Run it alone on the machine::

    flock /tmp/bench.lock .venv/bin/python benchmarks/pretrained_music.py --peer --report --export
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import music_direction
from protocol import load, record, spread

from multimodal.pretrained import weights_id

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
SHIPPED_RUN = ROOT / "outputs" / "pretrained_music_context_long"  # its run (configs/pretrained/music_context_long.yaml)
PEER_ROOT = ROOT / "outputs" / "pretrained_music_peer"
PACKAGE_FOLDER = ROOT / "multimodal" / "pretrained" / "music"
TARGET = 0.15  # the shipped model's nats per second on the test chorales: at least 15 % below the peer's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED_RUN, help="the shipped model's run (its best.ckpt)")
    parser.add_argument("--peer", action="store_true", help="train the demo recipe's runs on the same split")
    parser.add_argument("--report", action="store_true", help="measure the shipped model on the test split")
    parser.add_argument("--export", action="store_true", help="write the float16 folder and its card into the package")
    parser.add_argument("--finetune", action="store_true", help="fine-tuned vs from scratch on an unseen collection")
    parser.add_argument("--finetune-collection", default="trecento")
    parser.add_argument("--finetune-steps", type=int, default=150)
    parser.add_argument("--reuse-peers", action="store_true",
                        help="--report without peer runs on disk: take the peers' numbers of the last report in --out "
                             "(the same recipe scored on the same test Bach pieces)")  # fmt: skip
    parser.add_argument("--select", type=Path, nargs="+", default=[], metavar="RUN",
                        help="score these runs or folders on the validation split (choosing a stage)")
    parser.add_argument("--select-windows", type=int, nargs="+", default=[], metavar="IDS",
                        help="with --select, also score each candidate in windows of these many ids (the peers' 256, "
                             "or longer than it was trained on): what context buys")  # fmt: skip
    parser.add_argument("--peer-windows", type=int, nargs="+", default=[], metavar="IDS",
                        help="with --report, also score the peers in windows of these many ids (the length that "
                             "suits them best on validation, from --select-windows)")  # fmt: skip
    parser.add_argument("--table", action="store_true", help="print the report of --out")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="peer runs")
    parser.add_argument("--new-tokens", type=int, default=384)
    parser.add_argument("--per-key", type=int, default=2)
    parser.add_argument("--per-style", type=int, default=16)
    parser.add_argument("--pieces", type=int, default=8)
    parser.add_argument("--primer-seconds", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "pretrained_music.jsonl")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.peer:
        for seed in args.seeds:
            train_peer(seed)
    for candidate in args.select:
        result = select(candidate, args.select_windows)
        record(args.out, result, stage="select")
        print(json.dumps(result))
    if args.report:
        result = report(args)
        record(args.out, result, stage="report")
        print(json.dumps(result))
    if args.finetune:
        done = {(row["start"], row["seed"], row.get("base")) for row in load(args.out) if row.get("kind") == "finetune"
                and row["steps"] == args.finetune_steps and row["collection"] == args.finetune_collection}  # fmt: skip
        for seed in args.seeds:
            for start in ("shipped", "scratch"):
                if (start, seed, finetune_base(start)) not in done:
                    record(args.out, finetune_run(start, seed, args), stage="report")
    if args.export:
        export(args)
    if args.table or args.report:
        print(table(load(args.out)))


def train_peer(seed: int) -> Path:
    """The demo's recipe (its config, its 7 minutes) on the Bach collection, parts merged; its best checkpoint."""
    run = PEER_ROOT / "lightning_logs" / f"seed{seed}"
    best = run / "checkpoints" / "best.ckpt"
    if best.is_file():
        print(f"peer seed {seed}: already trained ({best})")
        return best
    command = [sys.executable, "-m", "tasks.cli", "fit", "--config", str(CONFIGS / "music_continuation.yaml"),
               "--config", str(CONFIGS / "music_demo.yaml"), "--data.init_args.collections", "[bach]",
               "--seed_everything", str(seed), "--data.init_args.seed", str(seed), "--trainer.enable_progress_bar",
               "false", "--trainer.default_root_dir", str(PEER_ROOT), "--run_name", f"seed{seed}"]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True)
    return best


def finetune_base(start: str) -> str | None:
    """The weights a fine-tuning run starts from: the shipped model's id (``start="shipped"``), None from scratch.

    Rows of runs from the shipped weights carry it (rows without it started from the first stage's weights).
    """
    return weights_id("music") if start == "shipped" else None


def finetune_run(start: str, seed: int, args: argparse.Namespace) -> dict:
    """One run on ``--finetune-collection``: from the shipped weights (``start="shipped"``) or from scratch."""
    root = ROOT / "outputs" / "pretrained_music_finetune"
    base = finetune_base(start)
    name = f"{args.finetune_collection}_{start}_seed{seed}" + (f"_{base[:8]}" if base else "")
    steps = args.finetune_steps
    command = [sys.executable, "-m", "tasks.cli", "fit", "--config", str(CONFIGS / "music_continuation.yaml"),
               "--config", str(CONFIGS / "pretrained" / "music.yaml"),
               "--data.init_args.collections", f"[{args.finetune_collection}]", "--data.init_args.collection_shares",
               "null", "--data.init_args.epoch_length", str(steps * 16 // 3), "--trainer.max_steps", str(steps),
               "--model.init_args.warmup_steps", str(max(steps // 10, 1)), "--seed_everything", str(seed),
               "--data.init_args.seed", str(seed), "--trainer.default_root_dir", str(root), "--run_name", name]  # fmt: skip
    if start == "shipped":
        command += ["--model.init_args.finetune.init_from", "music"]
    started = time.perf_counter()
    if not (root / "lightning_logs" / name / "checkpoints" / "best.ckpt").is_file():
        subprocess.run(command, cwd=ROOT, check=True)
    best = root / "lightning_logs" / name / "checkpoints" / "best.ckpt"
    numbers = per_collection(best)[args.finetune_collection]
    # "seconds": of test music (per_collection); "run_seconds": this run's training and scoring
    return {"kind": "finetune", "collection": args.finetune_collection, "start": start, "seed": seed, "steps": steps,
            **({"base": base} if base else {}), **numbers, "run_seconds": round(time.perf_counter() - started, 1)}  # fmt: skip


def report(args: argparse.Namespace) -> dict:
    """The shipped model's test numbers, its float16 export's, and the peers' nats per second on the same Bach pieces."""
    from tasks.checkpoint import load_task
    from tasks.commands.export import export_model_folder
    from tasks.runs import resolve_checkpoint

    checkpoint = resolve_checkpoint(args.checkpoint)
    started = time.perf_counter()
    result = {"checkpoint": str(checkpoint.relative_to(ROOT) if checkpoint.is_relative_to(ROOT) else checkpoint)}
    loaded = load_task(checkpoint)
    result["parameters"] = sum(p.numel() for p in loaded.task.model.parameters())
    result["steps"] = " + ".join(str(steps) for steps in stage_steps(checkpoint))
    result["collection_shares"] = loaded.data.get("collection_shares") or {}
    result["seq_len"] = loaded.data.get("seq_len")
    with tempfile.TemporaryDirectory() as scratch:
        half = export_model_folder(checkpoint, Path(scratch) / "music", half=True)
        result["float32"] = music_direction.measure(checkpoint, 0, args)
        result["float32"].pop("checkpoint")
        result["float32"]["per_collection"] = per_collection(checkpoint)
        # float16 storage: the same weights rounded, read back into float32; its test NLL must hold
        result["float16"] = {"per_collection": per_collection(half)}
        result["folder_bytes"] = sum(file.stat().st_size for file in half.iterdir() if file.is_file())

    # nats per second of music on the test Bach pieces: the shipped model (parts kept) against each peer (merged)
    shipped = result["float32"]["per_collection"]["bach"]
    result["peers"] = peer_scores(loaded.data, "test")
    result["bach_test_pieces"] = shipped["pieces"]
    if not result["peers"] and args.reuse_peers:
        result["peers"], result["peers_from"] = recorded_peers(load(args.out), shipped["pieces"], args.out.name)
    if result["peers"]:
        peer_mean = statistics.fmean(p["nats_per_second"] for p in result["peers"])
        result["bach_reduction_per_second"] = 1 - shipped["nats_per_second"] / peer_mean
    for length in args.peer_windows:  # the peers read in longer windows too (their best on validation)
        result[f"peers_in_{length}"] = peer_scores(loaded.data, "test", length)
    result["report_seconds"] = round(time.perf_counter() - started, 1)
    return result


def stage_steps(checkpoint: Path) -> list[int]:
    """The steps of each stage that made ``checkpoint``, first stage first: a stage that started from another
    run's checkpoint (``finetune.init_from``, e.g. ``configs/pretrained/music_context_long.yaml``) counts its steps."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    start = (saved.get("hyper_parameters", {}).get("finetune") or {}).get("init_from")
    earlier = stage_steps(ROOT / start) if start and str(start).endswith(".ckpt") and (ROOT / start).is_file() else []
    return [*earlier, int(saved.get("global_step", 0))]


def peer_scores(data: dict, split: str, seq_len: int | None = None) -> list[dict]:
    """Each peer run's nats per note and per second on the Bach pieces of ``split`` of the shipped model's data
    (the same pieces, parts merged as the peers were trained), read in windows of ``seq_len`` ids (default: the
    peer's own length); [] when no peer run is on disk."""
    from multimodal.music import score_music
    from tasks.checkpoint import load_task

    with_parts, merged = bach_pieces(data, split, data["num_parts"]), bach_pieces(data, split, 1)
    pieces = [notes for name, notes in zip(merged.names, merged.notes, strict=True) if name in set(with_parts.names)]
    assert len(pieces) == len(with_parts), "the peers are scored on the shipped model's pieces"
    peers = []
    for run in sorted((PEER_ROOT / "lightning_logs").glob("seed*")):
        peer, tokenizer, peer_data = load_task(run / "checkpoints" / "best.ckpt")
        length = seq_len or peer_data.get("seq_len", 256)
        scores = [score_music(peer.model, tokenizer, notes, length) for notes in pieces]
        total = sum(scores[1:], scores[0])
        peers.append({"run": run.name, "nats_per_second": total.per_second, "nats_per_note": total.per_note})
    return peers


def bach_pieces(data: dict, split: str, num_parts: int):
    """The Bach pieces of ``split`` of a run's data (its split percentages), with ``num_parts`` parts."""
    from multimodal.data.music21_corpus import load_music21_corpus

    percents = data.get("validation_percent", 10), data.get("test_percent", 10)
    return load_music21_corpus(["bach"], num_parts=num_parts).split(split, *percents)


@torch.inference_mode()
def part_nats(model: torch.nn.Module, tokenizer, notes, seq_len: int) -> tuple[float, int]:
    """What naming each note's part costs a parts model: the summed ``-log P(part | pitch, context)`` over the
    piece's PITCH targets (the joint PITCH id's probability against the sum over the parts at that pitch),
    and the number of notes. A diagnostic, not a likelihood: the context keeps the true parts."""
    from multimodal.data.music import MidiCorpus, MidiPieceWindows

    windows = MidiPieceWindows(MidiCorpus(["piece"], [notes]), tokenizer, seq_len)
    low, parts, total, count = tokenizer.pitch_offset, tokenizer.config.num_parts, 0.0, 0
    for index in range(len(windows)):
        ids = windows[index][None]
        logp = torch.log_softmax(model(ids[:, :-1]).float(), dim=-1)[0]  # (seq, vocab)
        targets = ids[0, 1:]
        is_pitch = (targets >= low) & (targets < low + 128 * parts)
        if not is_pitch.any():
            continue
        rows, pitch_ids = logp[is_pitch], targets[is_pitch]
        same_pitch = low + (pitch_ids - low)[:, None] % 128 + 128 * torch.arange(parts)  # (notes, parts)
        joint = rows.gather(1, pitch_ids[:, None])[:, 0]
        total += float((rows.gather(1, same_pitch).logsumexp(-1) - joint).sum())
        count += int(is_pitch.sum())
    return total, count


def select(candidate: Path, windows: Sequence[int] = ()) -> dict:
    """A candidate's validation numbers per collection and the peers' on the same validation Bach pieces;
    for each length in ``windows``, also its numbers scored in windows of that many ids instead of its own."""
    from multimodal.convert.folder import is_model_folder
    from tasks.checkpoint import load_task
    from tasks.runs import resolve_checkpoint

    checkpoint = candidate if is_model_folder(candidate) else resolve_checkpoint(candidate)
    numbers = per_collection(checkpoint, split="val")
    task, tokenizer, data = load_task(checkpoint)
    peers = peer_scores(data, "val")
    result = {"candidate": str(candidate), "checkpoint": str(checkpoint), "per_collection": numbers, "peers": peers}
    for length in windows:
        result[f"per_collection_in_{length}"] = per_collection(checkpoint, split="val", seq_len=length)
        result[f"peers_in_{length}"] = peer_scores(data, "val", length)
    # what the Bach nats spend on naming the voices, which the peers' merged notes do not say
    bach = bach_pieces(data, "val", data["num_parts"])
    spent = [part_nats(task.model, tokenizer, notes, data.get("seq_len", 256)) for notes in bach.notes]
    result["bach_part_nats_per_note"] = sum(nats for nats, _ in spent) / sum(count for _, count in spent)
    if peers:
        peer_mean = statistics.fmean(p["nats_per_second"] for p in peers)
        result["bach_reduction_per_second"] = 1 - numbers["bach"]["nats_per_second"] / peer_mean
    return result


def recorded_peers(rows: list[dict], num_pieces: int, source: str) -> tuple[list[dict], str | None]:
    """The peers' numbers of the last report in ``rows`` that scored them on ``num_pieces`` test Bach pieces.

    Returns ``([], None)`` when no report has peers scored on that many pieces (another split).
    """
    earlier = [row for row in rows if row.get("stage") == "report" and row.get("peers")
               and row.get("bach_test_pieces") == num_pieces]  # fmt: skip
    if not earlier:
        return [], None
    return earlier[-1]["peers"], f"the report of the {earlier[-1]['steps']}-step model in {source}"


def per_collection(path: Path, split: str = "test", seq_len: int | None = None) -> dict:
    """Nats per note and per second of music of the model at ``path`` on each collection's pieces of ``split``,
    read in windows of ``seq_len`` ids (default: the length it was trained on)."""
    from multimodal.data.music21_corpus import load_music21_corpus
    from multimodal.music import score_music
    from tasks.checkpoint import load_task

    task, tokenizer, data = load_task(path)
    corpus = load_music21_corpus(data["collections"], num_parts=data.get("num_parts", 1))
    pieces = corpus.split(split, data.get("validation_percent", 10), data.get("test_percent", 10))
    groups: dict[str, list] = {}
    for name, notes in zip(pieces.names, pieces.notes, strict=True):
        groups.setdefault(name.split("/")[0], []).append(score_music(task.model, tokenizer, notes, seq_len or data.get("seq_len", 256)))
    totals = {collection: sum(scores[1:], scores[0]) for collection, scores in groups.items()}
    return {collection: {"pieces": len(groups[collection]), "nats_per_note": total.per_note,
                         "nats_per_second": total.per_second, "seconds": total.seconds}
            for collection, total in sorted(totals.items())}  # fmt: skip


def export(args: argparse.Namespace) -> None:
    """The float16 model folder, its card and its checksums, into ``multimodal/pretrained/music``."""
    from multimodal.pretrained import write_checksums
    from tasks.commands.export import export_model_folder
    from tasks.runs import resolve_checkpoint

    rows = [row for row in load(args.out) if row.get("stage") == "report" and row.get("kind") != "finetune"]
    if not rows:
        raise SystemExit(f"error: {args.out}: no report yet; run --report first")
    if PACKAGE_FOLDER.exists():
        shutil.rmtree(PACKAGE_FOLDER)  # the script's own folder: rewritten whole
    export_model_folder(resolve_checkpoint(args.checkpoint), PACKAGE_FOLDER, half=True)
    (PACKAGE_FOLDER / "README.md").write_text(card(rows[-1]), encoding="utf-8")  # the numbers, not the fine-tuning
    write_checksums(PACKAGE_FOLDER)
    size = sum(path.stat().st_size for path in PACKAGE_FOLDER.iterdir()) / 2**20
    print(f"wrote {PACKAGE_FOLDER} ({size:.1f} MiB)")


def table(rows: list[dict]) -> str:
    """The last report as Markdown tables."""
    tuned = [row for row in rows if row.get("kind") == "finetune"]
    rows = [row for row in rows if row.get("stage") == "report" and row.get("kind") != "finetune"]
    if not rows:
        return "no report yet"
    row = rows[-1]
    lines = [f"shipped model: {row['parameters'] / 1e6:.2f} M parameters, {row['steps']} steps; "
             f"folder {row['folder_bytes'] / 2**20:.1f} MiB (float16)", "",
             "| collection | test pieces | nats/note fp32 | nats/note fp16 | nats/s fp32 | nats/s fp16 | "
             "duration overlap | polyphony overlap |", "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for collection, numbers in row["float32"]["per_collection"].items():
        half = row["float16"]["per_collection"][collection]
        found = row["float32"]["overlaps"].get(collection, {})
        lines.append(f"| {collection} | {numbers['pieces']} | {numbers['nats_per_note']:.3f} | {half['nats_per_note']:.3f} "
                     f"| {numbers['nats_per_second']:.2f} | {half['nats_per_second']:.2f} "
                     f"| {found.get('duration', float('nan')):.3f} | {found.get('polyphony', float('nan')):.3f} |")  # fmt: skip
    lines += ["", "| control | accuracy |", "|---|---:|"]
    for key in ("key_accuracy", "key_baseline_accuracy", "style_accuracy", "style_classifier_test_accuracy"):
        lines.append(f"| {key} | {row['float32'][key]:.3f} |")
    if row.get("peers"):
        peers = [peer["nats_per_second"] for peer in row["peers"]]
        shipped = row["float32"]["per_collection"]["bach"]["nats_per_second"]
        lines += ["", f"test Bach pieces ({row['bach_test_pieces']}), nats per second of music: shipped {shipped:.3f}; "
                  f"the demo recipe {spread(peers, 3)} over {len(peers)} run(s)"
                  + (f" (scored by {row['peers_from']})" if row.get("peers_from") else "") + "; "
                  f"{100 * row['bach_reduction_per_second']:.1f} % lower (target {100 * TARGET:.0f} %)"]  # fmt: skip
        for key in (key for key in row if key.startswith("peers_in_")):
            longer = [peer["nats_per_second"] for peer in row[key]]
            lines += ["", f"the demo recipe read in windows of {key.removeprefix('peers_in_')} ids: "
                      f"{spread(longer, 3)}; {100 * (1 - shipped / statistics.fmean(longer)):.1f} % lower"]  # fmt: skip
    if tuned:
        lines += ["", f"fine-tuning on {tuned[0]['collection']} ({tuned[0]['pieces']} test pieces), "
                  f"{tuned[0]['steps']} steps each:", "", "| start | runs | test nats/note | test nats/s |",
                  "|---|---:|---:|---:|"]  # fmt: skip
        # one row per starting point: from scratch, and from each shipped model's weights (rows without a base
        # started from the first stage's)
        for start, base in dict.fromkeys((t["start"], t.get("base")) for t in tuned):
            runs = [t for t in tuned if (t["start"], t.get("base")) == (start, base)]
            label = start if start == "scratch" else f"shipped ({base or 'first stage'})"
            lines.append(f"| {label} | {len(runs)} | {spread([t['nats_per_note'] for t in runs], 3)} | "
                         f"{spread([t['nats_per_second'] for t in runs], 2)} |")  # fmt: skip
    return "\n".join(lines)


def shares(row: dict) -> str:
    """The training windows' share of each collection in a report row, the rest split by notes."""
    given = row.get("collection_shares") or {}
    named = ", ".join(f"{name.capitalize()} {share:.2f}" for name, share in given.items())
    return f"{named}, the other collections {1 - sum(given.values()):.2f} by their notes" if given else "by their notes"


def card(row: dict) -> str:
    """The model card (README.md) of the shipped folder, from one report."""
    return "\n".join([
        "# music: the model that ships with multimodal",
        "",
        "A Music Transformer (relative attention, the note-duration vocabulary) whose notes keep their part",
        "(up to five voices) and whose sequences open with style, key, meter and note-density tokens, so",
        "it can be directed (`--style chorale --key 'G minor'`), harmonize a melody and fill a gap.",
        "",
        "```python",
        "from multimodal import load",
        'model, tokenizer = load("music")',
        "```",
        "",
        "`multimodal generate --model music --out out --style chorale --key 'G minor'`, `multimodal serve`.",
        "",
        "## Data and licences",
        "",
        "Trained on five collections of the music21 corpus (pip package `music21`), the ones whose licence",
        "lets what is derived from them be redistributed (docs/music.md#collections-of-music21s-corpus):",
        "Bach (chorales and other four-part settings; music21's BSD-3 corpus files, the works public domain),",
        "Monteverdi madrigals, O'Neill's Music of Ireland (1850), Ryan's Mammoth Collection and Aird's Airs",
        f"(ABC transcriptions of public-domain tune books). Share of the training windows: {shares(row)}.",
        "These weights may be redistributed.",
        "",
        "## Numbers (test split, touched once; `benchmarks/pretrained_music.py --report`)",
        "",
        table([row]),
        "",
        "## How it was made",
        "",
        "`make pretrained-music` (`configs/pretrained/music.yaml` with `music_context.yaml` and",
        f"`music_context_long.yaml` on top: windows of 512 ids, then {row['seq_len']}; {row['parameters'] / 1e6:.2f} M",
        f"parameters, {row['steps']} steps in bf16-mixed on 2 CPU cores), the checkpoint with the best validation NLL,",
        "exported in float16 (`multimodal export --half`). The export also records in `config.json`",
        "(`training_data`) each part's pitch range and the most notes it starts at one moment over the training",
        "split: `--harmonize` holds a melody to its part's range and bounds the parts it writes by them.",
        "Fine-tune it on your own MIDI folder: docs/pretrained.md.",
        "",
    ])  # fmt: skip


if __name__ == "__main__":
    main()

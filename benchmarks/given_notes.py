"""Does a model that reads given notes ahead use them? Harmonization and infilling NLL on the test pieces.

One model per seed: the shipped music model fine-tuned for ``--steps`` steps with given notes
(``configs/music_given_notes.yaml``: the AHEAD vocabulary, windows with notes given or parts left out);
its best checkpoint on the **validation** pieces is measured once on the **test** pieces:

    harmonization  the Bach test chorales: nats per note of the real alto, tenor and bass (every id that
                   writes them: their time shifts, pitches and durations) with the soprano given ahead,
                   against the same notes with no soprano at all — the same model reading the three
                   parts alone, which training taught it (windows with parts left out). Issue 31 asks
                   the given soprano to take ≥ 25 % off.
    infilling      every test piece of at least ``--min-seconds``: the span from 40 % of its length,
                   ``--span`` seconds long, all parts. Nats per note of the real span with the music after
                   it given (context on both sides: since v4 written first, ``GAP … AFTER … MIDDLE``, the
                   model's ``infill_after_seconds`` of it; before, ahead among the span's notes) against the
                   same model with only the music before it (left context only: the plain sequence, whose
                   span ids see nothing after). Both scored with time stopped at the span's end.
                   Also the soprano given at its onsets only (the plain sequence of the chorale, the
                   soprano's ids fed): what a decoder that sight-reads the melody, with no look-ahead, gets;
                   and (since v6) the soprano at its onsets and read ahead in blocks of the model's
                   ``infill_after_seconds`` (``encode_read_ahead``).
    plain          nats per note of the Bach test chorales as plain sequences: what the fine-tuning
                   cost the model's continuation (the shipped model's number in the same row).

Scored two ways: as the harmonize / infill decoder writes the notes (its rules applied to the model's
logits: parts, AHEAD and EOS banned, time stopped at given onsets, lengths within the window —
:func:`multimodal.music.constrained.decoder_token_nll`; the measure of the issue), and raw (every scored
id as the model's softmax gives it). Every id is scored with up to the model's ``seq_len`` ids before
it (windows moved by half of it, :func:`multimodal.music.token_nll`). Each seed appends one JSON line to ``--out``; ``--table`` prints
mean ± sd over seeds. ``--checkpoint`` measures a model trained elsewhere as it is (no fine-tuning: given notes
from the first step, ``configs/pretrained/music_given_from_start.yaml``) and sets it against the unconditioned
fine-tuned models. Alone on the machine::

    flock /tmp/bench.lock .venv/bin/python benchmarks/given_notes.py --seeds 0 1 2
    flock /tmp/bench.lock .venv/bin/python benchmarks/given_notes.py --read-after 5 \
        --checkpoint outputs/pretrained_music_given_stage2/lightning_logs/version_0/checkpoints/best.ckpt
    .venv/bin/python benchmarks/given_notes.py --table
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread

from multimodal.pretrained import weights_id

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
DECODER_FIELD = "harmonization_given_decoder_nats_per_note"  # rows scored as the decoder writes (since 2026-12-04)
ENCODING = "v5"  # how given notes are written ahead; a row keeps the encoding its model was trained and scored with
ENCODINGS = {
    "v1": "given notes ahead only, at onset - Δ (time shifts cut there)",
    "v2": "given notes ahead at onset - Δ (time shifts cut there) and again at their onsets",
    "v3": "given notes ahead where time first arrives at or after onset - Δ (the plain time shifts), and at their onsets",
    "v4": "v3, and infilling as prefix, suffix, middle: the music after the gap written before the gap's notes",
    "v5": "v4 with twice the gap windows (0.4), the first 0-2 s of a gap given (read again after the block)",
    "v6": "v5 with windows whose given parts are read ahead in blocks of 4 s (read_ahead_share 0.3, given_share 0.1)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1200, help="fine-tuning steps per seed")
    parser.add_argument("--span", type=float, default=4.0, help="infilling: seconds of the span")
    parser.add_argument("--min-seconds", type=float, default=12.0, help="infilling: shorter test pieces are left out")
    parser.add_argument("--read-after", type=float, default=None,
                        help="infilling with GAP AFTER MIDDLE ids: the music after the span is read this many seconds "
                             "before its end (infill's read_after; default: at the span's start; more than --span: "
                             "the music before the span from there on is read again after it)")  # fmt: skip
    parser.add_argument("--root", type=Path, default=ROOT / "outputs" / f"given_notes_{ENCODING}_{weights_id('music')[:8]}",
                        help="the runs' folder (one per encoding and shipped model: a run of another one is never "
                             "resumed)")  # fmt: skip
    parser.add_argument("--set", nargs=argparse.REMAINDER, default=[],
                        help="(last) more fit options, e.g. --set --data.init_args.limit=20")  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="the test suite's size: tiny model, from scratch")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "given_notes.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table of --out and stop")
    parser.add_argument("--stage", choices=["select", "report"], default="report",
                        help="select: measure on the validation pieces (to choose settings); report: the test pieces")
    parser.add_argument("--by-kind", type=Path, metavar="CHECKPOINT",
                        help="print one checkpoint's harmonization NLL split into time shifts and the other ids "
                             "(soprano at its onsets / ahead / none; the --stage's chorales) and stop")  # fmt: skip
    parser.add_argument("--after-block", type=Path, metavar="CHECKPOINT",
                        help="print one checkpoint's harmonization NLL per lower-voice id with the soprano read ahead "
                             "in blocks against sight-reading, by how many ids after a block's MIDDLE it comes "
                             "(the --stage's chorales) and stop")  # fmt: skip
    parser.add_argument("--checkpoint", type=Path,
                        help="measure this checkpoint, trained elsewhere (no fine-tuning: e.g. given notes from the first "
                             "step, configs/pretrained/music_given_from_start.yaml), once on the --stage's pieces, append "
                             "its row to --out and stop")  # fmt: skip
    args = parser.parse_args()
    if args.checkpoint:
        if not args.checkpoint.is_file():
            parser.error(f"--checkpoint {args.checkpoint}: no such file")
        torch.set_num_threads(2)
        measure_checkpoint(args)
        print(table(load(args.out)))
        return
    if args.after_block:
        torch.set_num_threads(2)
        print(json.dumps(after_block(args.after_block, "val" if args.stage == "select" else "test")))
        return
    if args.table:
        print(table(load(args.out)))
        return
    if args.by_kind:
        torch.set_num_threads(2)
        print(json.dumps(by_kind(args.by_kind, "val" if args.stage == "select" else "test")))
        return
    torch.set_num_threads(2)
    # the shipped weights the runs fine-tune; rows without a base fine-tuned the first stage (3,000 steps)
    base = "none" if args.tiny else weights_id("music")
    same = [row for row in load(args.out)
            if row.get("steps") == args.steps and row.get("stage") == args.stage and row.get("set", []) == args.set
            and row.get("encoding") == ENCODING and row.get("base") == base and row.get("read_after") == args.read_after]
    done = {row["seed"] for row in same if DECODER_FIELD in row}  # rows of older code are measured again
    trained = {row["seed"]: row["train_seconds"] for row in same}
    for seed in args.seeds:
        if seed in done:
            print(f"seed {seed}: already in {args.out}")
            continue
        started = time.perf_counter()
        checkpoint = train(seed, args)  # a finished run stops at once
        seconds = trained.get(seed, round(time.perf_counter() - started, 1))
        result = {"seed": seed, "steps": args.steps, "set": args.set, "encoding": ENCODING, "base": base,
                  "read_after": args.read_after,
                  "train_seconds": seconds,
                  **measure(checkpoint, args)}  # fmt: skip
        record(args.out, result, stage=args.stage)
        print(json.dumps(result))
    print(table(load(args.out)))


def measure_checkpoint(args: argparse.Namespace) -> None:
    """Measures ``args.checkpoint`` (a model trained elsewhere) once on the ``--stage``'s pieces and appends its row,
    labelled ``trained`` by the checkpoint's path; a checkpoint already measured on that stage is not measured
    again."""
    from tasks.checkpoint import read_checkpoint

    path = args.checkpoint.resolve()
    label = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else args.checkpoint)
    if any(row.get("trained") == label and row.get("stage") == args.stage for row in load(args.out)):
        print(f"{label}: already in {args.out}")
        return
    checkpoint = read_checkpoint(args.checkpoint)  # read once here for its step and data settings
    data = checkpoint.get("datamodule_hyper_parameters") or {}
    read_ahead = (data.get("given_notes") or {}).get("read_ahead_share", 0.0)
    result = {"trained": label, "seed": data.get("seed"), "steps": int(checkpoint["global_step"]), "set": [],
              "encoding": "v6" if read_ahead else "v5", "base": "none", "read_after": args.read_after,
              **measure(args.checkpoint, args)}  # fmt: skip
    record(args.out, result, stage=args.stage)
    print(json.dumps(result))


def run_name(seed: int, settings: list[str]) -> str:
    """The run folder's name: the seed, and with ``--set`` options a digest of them, so that a run with other
    settings is never resumed (a finished one would be measured again as if trained with these)."""
    if not settings:
        return f"seed{seed}"
    return f"seed{seed}-" + hashlib.sha256("\0".join(settings).encode()).hexdigest()[:8]


def train(seed: int, args: argparse.Namespace) -> Path:
    """Fits (or resumes) seed ``seed``'s run; returns its best checkpoint (chosen on validation)."""
    name = run_name(seed, args.set)
    run = args.root / "lightning_logs" / name
    configs = ["--config", str(CONFIGS / "music_continuation.yaml"), "--config", str(CONFIGS / "pretrained" / "music.yaml"),
               "--config", str(CONFIGS / "music_given_notes.yaml")]  # fmt: skip
    if args.tiny:  # a tiny model from scratch: the shipped weights do not fit its size
        configs += ["--config", str(CONFIGS / "music_continuation_tiny.yaml"), "--model.init_args.finetune", "null"]
    command = [sys.executable, "-m", "tasks.cli", "fit", *configs, "--seed_everything", str(seed),
               "--data.init_args.seed", str(seed), "--trainer.max_steps", str(args.steps), "--trainer.max_time", "null",
               "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(args.root),
               "--run_name", name, *args.set]  # fmt: skip
    if (run / "checkpoints" / "last.ckpt").is_file():
        command += ["--ckpt_path", "last"]  # an interrupted run resumes; a finished one stops at once
    subprocess.run(command, cwd=ROOT, check=True)
    best = run / "checkpoints" / "best.ckpt"
    return best if best.is_file() else run / "checkpoints" / "last.ckpt"


def measure(checkpoint: Path, args: argparse.Namespace) -> dict:
    """The harmonization, infilling and plain NLLs of one fine-tuned model (module docstring)."""
    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task

    task, tokenizer, data = load_task(checkpoint)
    model = task.model.eval()
    seq_len = int(data.get("seq_len", 256))
    shipped = None if args.tiny else load_task(resolve_model("music"))[0].model.eval()
    pieces = run_split(data, "val" if args.stage == "select" else "test")
    chorales = list(soprano_chorales(tokenizer, pieces))
    nll = dict.fromkeys(["given", "alone", "sight", "given_raw", "alone_raw", "both", "left", "both_raw", "left_raw",
                         "plain", "plain_shipped", "both_late", "left_late", "blocks"], 0.0)  # fmt: skip
    harmony_notes, plain_notes, span_notes, late_notes, spans = 0, 0, 0, 0, 0
    ahead = tokenizer.config.anticipation_steps * tokenizer.config.time_step  # seconds a given note comes ahead
    lower_parts = list(range(1, tokenizer.config.num_parts))
    for _, notes, head, end in chorales:
        soprano, lower = notes[notes[:, 4] == 0], notes[notes[:, 4] != 0]
        ids, is_given = tokenizer.encode_anticipated(lower, soprano)
        nll["given"] += decoder_nll(model, tokenizer, head, ids, is_given, ~is_given, lower_parts, seq_len, end)
        nll["given_raw"] += written_nll(model, head, ids, ~is_given, seq_len)
        plain_ids = tokenizer.encode_notes_array(notes)  # sight-reading: the soprano fed where it sounds, nothing ahead
        fed = soprano_rows(tokenizer, plain_ids)
        nll["sight"] += decoder_nll(model, tokenizer, head, plain_ids, fed, ~fed, lower_parts, seq_len, end)
        if tokenizer.config.infill_after_steps:  # at its onsets, and read ahead in blocks
            ids, is_given = tokenizer.encode_read_ahead(lower, soprano)
            nll["blocks"] += decoder_nll(model, tokenizer, head, ids, is_given, ~is_given, lower_parts, seq_len, end)
        ids = tokenizer.encode_notes_array(lower)
        none_given = np.zeros(len(ids), dtype=bool)
        nll["alone"] += decoder_nll(model, tokenizer, head, ids, none_given, ~none_given, lower_parts, seq_len, end)
        nll["alone_raw"] += written_nll(model, head, ids, ~none_given, seq_len)
        harmony_notes += len(lower)
        every_id = np.ones(len(plain_ids), dtype=bool)
        nll["plain"] += written_nll(model, head, plain_ids, every_id, seq_len)
        if shipped is not None:  # the same ids: the shipped vocabulary is the fine-tuned one without AHEAD
            nll["plain_shipped"] += written_nll(shipped, head, plain_ids, every_id, seq_len)
        plain_notes += len(notes)
    every_part = list(range(tokenizer.config.num_parts))
    step = tokenizer.config.time_step
    for notes, controls in zip(pieces.notes, pieces.controls, strict=True):
        length = float(notes[:, 2].max()) if len(notes) else 0.0
        if length < args.min_seconds:
            continue
        head = [tokenizer.bos_id, *tokenizer.control_ids(controls)]
        start = round(0.4 * length / step) * step
        end = start + args.span
        # where the decoder reads the music after the span (infill's read_after): the span's ids before it are
        # written as a continuation, those after it as a gap
        split = start if args.read_after is None else max(end - args.read_after, 0.0)
        in_span = (notes[:, 1] >= start - step / 2) & (notes[:, 1] < end - step / 2)
        if not in_span.any():
            continue
        before = notes[:, 1] < end - step / 2
        # the span's last `ahead` seconds, where the notes after it can be written ahead, and the time before
        late = round(max(end - ahead, start) / step) * step
        if tokenizer.config.infill_after_steps:  # prefix, suffix, middle (the span's notes after MIDDLE)
            again = (notes[:, 1] >= split - step / 2) & (notes[:, 1] < start - step / 2)  # read after the block, given
            ids, is_given = tokenizer.encode_infilling(notes[before & ~again], notes[~before | again], split, end)
        else:
            ids, is_given = tokenizer.encode_anticipated(notes[before], notes[~before])
        scored = ~is_given & in_window(tokenizer, ids, start, end)
        each = decoder_nll(model, tokenizer, head, ids, is_given, scored, every_part, seq_len, each=True, stop_at=end)
        nll["both"] += float(each[scored].sum())
        nll["both_late"] += float(each[scored & in_window(tokenizer, ids, late, end)].sum())
        nll["both_raw"] += written_nll(model, head, ids, scored, seq_len)
        ids = tokenizer.encode_notes_array(notes)
        scored = in_window(tokenizer, ids, start, end)
        each = decoder_nll(model, tokenizer, head, ids, np.zeros(len(ids), dtype=bool), scored, every_part, seq_len,
                           each=True, stop_at=end)  # fmt: skip
        nll["left"] += float(each[scored].sum())
        nll["left_late"] += float(each[scored & in_window(tokenizer, ids, late, end)].sum())
        nll["left_raw"] += written_nll(model, head, ids, scored, seq_len)
        span_notes += int(in_span.sum())
        late_notes += int((in_span & (notes[:, 1] >= late - step / 2)).sum())
        spans += 1
    return {
        "checkpoint": str(checkpoint.relative_to(ROOT) if checkpoint.is_relative_to(ROOT) else checkpoint),
        "chorales": len(chorales), "harmony_notes": harmony_notes,
        "harmonization_given_decoder_nats_per_note": nll["given"] / max(harmony_notes, 1),
        "harmonization_alone_decoder_nats_per_note": nll["alone"] / max(harmony_notes, 1),
        "harmonization_at_onsets_decoder_nats_per_note": nll["sight"] / max(harmony_notes, 1),
        "harmonization_read_ahead_decoder_nats_per_note": (nll["blocks"] / max(harmony_notes, 1)
                                                           if tokenizer.config.infill_after_steps else None),
        "harmonization_given_nats_per_note": nll["given_raw"] / max(harmony_notes, 1),
        "harmonization_alone_nats_per_note": nll["alone_raw"] / max(harmony_notes, 1),
        "spans": spans, "span_notes": span_notes, "span_seconds": args.span,
        "infill_both_sides_decoder_nats_per_note": nll["both"] / max(span_notes, 1),
        "infill_left_only_decoder_nats_per_note": nll["left"] / max(span_notes, 1),
        "infill_both_sides_nats_per_note": nll["both_raw"] / max(span_notes, 1),
        "infill_left_only_nats_per_note": nll["left_raw"] / max(span_notes, 1),
        # the span split at `ahead` seconds before its end: only the late part can read the notes after it
        "span_late_seconds": ahead, "span_early_notes": span_notes - late_notes, "span_late_notes": late_notes,
        "infill_both_sides_early_decoder_nats_per_note": (nll["both"] - nll["both_late"]) / max(span_notes - late_notes, 1),
        "infill_left_only_early_decoder_nats_per_note": (nll["left"] - nll["left_late"]) / max(span_notes - late_notes, 1),
        "infill_both_sides_late_decoder_nats_per_note": nll["both_late"] / max(late_notes, 1),
        "infill_left_only_late_decoder_nats_per_note": nll["left_late"] / max(late_notes, 1),
        "plain_nats_per_note": nll["plain"] / max(plain_notes, 1),
        "shipped_plain_nats_per_note": nll["plain_shipped"] / max(plain_notes, 1) if shipped is not None else None,
    }  # fmt: skip


def by_kind(checkpoint: Path, split: str) -> dict:
    """Nats per lower-voice note of ``split``'s Bach chorales, as the decoder writes them, split into the time
    shifts and the other ids, with the soprano at its onsets only, written ahead (this encoding), or absent."""
    from tasks.checkpoint import load_task

    task, tokenizer, data = load_task(checkpoint)
    model, seq_len = task.model.eval(), int(data.get("seq_len", 256))
    lower_parts = list(range(1, tokenizer.config.num_parts))
    sums, notes_scored = {case: np.zeros(2) for case in ("at_onsets", "ahead", "alone")}, 0
    for _, notes, head, end in soprano_chorales(tokenizer, run_split(data, split)):
        soprano, lower = notes[notes[:, 4] == 0], notes[notes[:, 4] != 0]
        plain_ids = tokenizer.encode_notes_array(notes)
        lower_ids = tokenizer.encode_notes_array(lower)
        for case, (ids, fed) in {"at_onsets": (plain_ids, soprano_rows(tokenizer, plain_ids)),
                                 "ahead": tokenizer.encode_anticipated(lower, soprano),
                                 "alone": (lower_ids, np.zeros(len(lower_ids), dtype=bool))}.items():  # fmt: skip
            shift = (ids >= tokenizer.time_shift_offset) & (ids < tokenizer.velocity_offset)
            for column, scored in enumerate((~fed & shift, ~fed & ~shift)):
                sums[case][column] += decoder_nll(model, tokenizer, head, ids, fed, scored, lower_parts, seq_len, end)
        notes_scored += len(lower)
    return {"checkpoint": str(checkpoint), "split": split, "lower_notes": notes_scored,
            **{f"{case}_{kind}": round(float(total[column]) / max(notes_scored, 1), 3) for case, total in sums.items()
               for column, kind in enumerate(("shifts", "other_ids"))}}  # fmt: skip


def after_block(checkpoint: Path, split: str, edges: tuple[int, ...] = (0, 5, 10, 20, 40)) -> dict:
    """Nats per lower-voice id of ``split``'s Bach chorales, as the decoder writes them, with the soprano read ahead
    in blocks (``encode_read_ahead``) and sight-read (the plain sequence), by the number of ids since the last
    block's ``MIDDLE`` (bins from ``edges``): where a block costs or helps. The written ids are the same in
    both sequences, in the same order."""
    from tasks.checkpoint import load_task

    task, tokenizer, data = load_task(checkpoint)
    model, seq_len = task.model.eval(), int(data.get("seq_len", 256))
    lower_parts = list(range(1, tokenizer.config.num_parts))
    sums = np.zeros((len(edges), 3))  # per bin: blocks, sight-reading, ids
    for name, notes, head, end in soprano_chorales(tokenizer, run_split(data, split)):
        soprano, lower = notes[notes[:, 4] == 0], notes[notes[:, 4] != 0]
        plain = tokenizer.encode_notes_array(notes)
        fed = soprano_rows(tokenizer, plain)
        sight = decoder_nll(model, tokenizer, head, plain, fed, ~fed, lower_parts, seq_len, end, each=True)
        ids, given = tokenizer.encode_read_ahead(lower, soprano)
        blocks = decoder_nll(model, tokenizer, head, ids, given, ~given, lower_parts, seq_len, end, each=True)
        middles = np.flatnonzero(ids == tokenizer.infill_id("MIDDLE"))
        since = np.arange(len(ids)) - middles[np.searchsorted(middles, np.arange(len(ids)), side="right") - 1]
        written_blocks, written_sight = blocks[~given], sight[~fed]
        if len(written_blocks) != len(written_sight):
            raise AssertionError(f"{name}: the two sequences write different ids")
        where = np.searchsorted(edges, since[~given], side="right") - 1
        np.add.at(sums, where, np.column_stack([written_blocks, written_sight, np.ones(len(where))]))
    return {"checkpoint": str(checkpoint), "split": split, **{
        f"ids_{low}_{'on' if high is None else high - 1}_after_block": {
            "ids": int(total[2]), "blocks": round(total[0] / max(total[2], 1), 3),
            "sight_reading": round(total[1] / max(total[2], 1), 3)}
        for (low, high), total in zip(zip(edges, [*edges[1:], None], strict=True), sums, strict=True)}}  # fmt: skip


def soprano_chorales(tokenizer, pieces):
    """Yields ``(name, notes, head, end)`` for each Bach chorale of ``pieces`` with a soprano and another part: its
    notes ``(n, 5)``, the ids it opens with (BOS and its controls) and the harmonize decoder's window end in seconds
    (a new note ends by the chorale's end as written, lengths rounded to the vocabulary's)."""
    for name, notes, controls in zip(pieces.names, pieces.notes, pieces.controls, strict=True):
        if name.startswith("bach/") and len(np.unique(notes[:, 4])) >= 2 and (notes[:, 4] == 0).any():
            end = float(tokenizer.decode_notes(tokenizer.encode_notes_array(notes))[:, 2].max())
            yield name, notes, [tokenizer.bos_id, *tokenizer.control_ids(controls)], end


def run_split(data: dict, split: str):
    """The run's music21 ``split`` pieces (``val`` or ``test``), cut as training cut them."""
    from multimodal.data.music21_corpus import load_music21_corpus

    corpus = load_music21_corpus(data["collections"], limit=data.get("limit"), num_parts=data.get("num_parts", 1))
    return corpus.split(split, data.get("validation_percent", 10), data.get("test_percent", 10))


def written_nll(model, head: list[int], ids: np.ndarray, scored: np.ndarray, seq_len: int) -> float:
    """Summed NLL of the ``scored`` ids of ``head + ids`` (the head and the closing EOS are never scored)."""
    from multimodal.music import token_nll

    nll = token_nll(model, np.r_[head, ids], seq_len)[len(head) - 1 :]  # the NLL of each of ids
    return float(nll[scored].sum())


def decoder_nll(model, tokenizer, head: list[int], ids: np.ndarray, is_given: np.ndarray, scored: np.ndarray,
                parts: list[int], seq_len: int, window_end: float | None = None, each: bool = False,
                stop_at: float | None = None):
    """Summed NLL of the ``scored`` ids of ``head + ids`` as the harmonize / infill decoder writes them: given
    ids fed, ``parts`` written, shifts stopped at given notes (:func:`multimodal.music.constrained.decoder_token_nll`).
    ``each``: the NLL of every id of ``ids`` instead, float64 ``(len(ids),)`` (NaN where not scored). ``stop_at``:
    the infill decoder's window end (seconds), where time stops."""
    from multimodal.music.constrained import decoder_token_nll

    fed = np.r_[np.ones(len(head), dtype=bool), is_given]
    nll = decoder_token_nll(model, tokenizer, np.r_[head, ids], fed, parts, seq_len, window_end=window_end,
                            stop_at=stop_at)  # fmt: skip
    nll = nll[len(head) - 1 :]
    return np.where(scored, nll, np.nan) if each else float(nll[scored].sum())


def soprano_rows(tokenizer, ids: np.ndarray) -> np.ndarray:
    """bool ``(len(ids),)``: the ids of part 0's notes in a plain sequence — each PITCH, its DURATION and a
    VELOCITY right before it (all parts share one loudness stream; a chorale's rarely changes)."""
    pitch = (ids >= tokenizer.pitch_offset) & (ids < tokenizer.pitch_offset + 128)
    velocity = (ids >= tokenizer.velocity_offset) & (ids < tokenizer.pitch_offset)
    rows = pitch.copy()
    rows[1:] |= pitch[:-1]  # its DURATION (a PITCH is followed by its DURATION in the plain sequence)
    rows[:-1] |= velocity[:-1] & pitch[1:]
    return rows


def in_window(tokenizer, ids: np.ndarray, start: float, end: float) -> np.ndarray:
    """bool ``(len(ids),)``: the ids read while the music is in ``[start, end)`` seconds — the notes written
    there and the time shifts that arrive there (a shift belongs to the time it reaches), the ids of a
    ``GAP … AFTER … MIDDLE`` block excepted."""
    step = tokenizer.config.time_step
    now = tokenizer.clock(ids)
    inside = (now >= round(start / step)) & (now < round(end / step))
    if getattr(tokenizer.config, "infill_after_steps", 0):
        gap, middle = (ids == tokenizer.infill_id(name) for name in ("GAP", "MIDDLE"))
        inside &= ~((np.cumsum(gap) > np.cumsum(middle)) | middle)
    return inside


def table(rows: list[dict]) -> str:
    """Mean ± sd over seeds of each NLL, and the reductions the issue asks for; rows of one stage, steps,
    settings and scoring together."""
    rows = [row for row in rows if "harmonization_given_nats_per_note" in row]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row.get("encoding", "v1"), row.get("stage", "report"), row["steps"],
               " ".join(row.get("set", [])) + (f" (the music after a gap read {row['read_after']:g} s before its end)"
                                                if row.get("read_after") is not None else ""),
               DECODER_FIELD in row, row.get("base", ""), row.get("trained", ""))  # fmt: skip
        groups.setdefault(key, []).append(row)
    tables = "\n\n".join(f"{encoding} ({ENCODINGS[encoding]}), {stage}, {steps} steps{', ' + extra if extra else ''}"
                         f"{'' if decoder else ' (raw scores only: measured before the decoder scores)'}, "
                         f"{'trained elsewhere: ' + trained if trained else 'from scratch (tiny)' if base == 'none' else 'from the shipped model ' + base if base else 'from the first-stage shipped model'}:\n\n" + _group_table(group)
                         for (encoding, stage, steps, extra, decoder, base, trained), group in sorted(groups.items())) or "(no rows)"  # fmt: skip
    return tables + against_unconditioned(rows) + trained_against_unconditioned(rows)


UNCONDITIONED = ["--data.init_args.given_notes.given_share=0.0", "--data.init_args.given_notes.infill_share=0.0",
                 "--data.init_args.given_notes.part_drop_share=0.5"]  # fmt: skip
"""The ``--set`` options of the issue's baseline: the same fine-tuning with no notes given (half the windows plain,
half with parts left out)."""


def against_unconditioned(rows: list[dict]) -> str:
    """Issue 31's harmonization measure by its own definition: the lower voices with the soprano sight-read by a
    given-notes model against the lower voices alone read by an unconditioned model of the same size and budget —
    the run with the same ``--set`` options and :data:`UNCONDITIONED` — paired by stage, steps, base, read_after,
    other settings and seed; mean ± sd."""
    at_onsets, alone = "harmonization_at_onsets_decoder_nats_per_note", "harmonization_alone_decoder_nats_per_note"
    key = lambda row, settings: (row.get("stage"), row["steps"], row.get("base"), row.get("read_after"),  # noqa: E731
                                 row.get("encoding"), tuple(settings))  # fmt: skip
    baselines = {(*key(row, [o for o in row["set"] if o not in UNCONDITIONED]), row["seed"]): row for row in rows
                 if set(UNCONDITIONED) <= set(row.get("set", [])) and alone in row}  # fmt: skip
    pairs: dict[tuple, list[tuple[dict, dict]]] = {}
    for row in rows:
        other = baselines.get((*key(row, row.get("set", [])), row["seed"]))
        if other is not None and other is not row and at_onsets in row:
            pairs.setdefault(key(row, row.get("set", [])), []).append((row, other))
    lines = []
    for (stage, steps, base, read_after, encoding, _), group in sorted(pairs.items(), key=str):
        lines += [f"\n\nagainst an unconditioned model of the same size and budget ({encoding}, {stage}, {steps} steps, "
                  f"base {base}, read_after {read_after}):\n",
                  "| seeds | the soprano sight-read (config's model) | alone (unconditioned model) | reduction |",
                  "|---:|---:|---:|---:|",
                  f"| {len(group)} | {spread([row[at_onsets] for row, _ in group], 3)} | "
                  f"{spread([other[alone] for _, other in group], 3)} | "
                  f"{spread([1 - row[at_onsets] / other[alone] for row, other in group], 3)} |"]  # fmt: skip
    return "\n".join(lines)


def trained_against_unconditioned(rows: list[dict]) -> str:
    """Each model measured with ``--checkpoint`` (trained with given notes from its first step) against the lower
    voices alone read by the unconditioned fine-tuned models of the same stage (:data:`UNCONDITIONED`, every seed:
    more steps than the checkpoint's, none of them with notes given): the reduction with the soprano sight-read,
    read ahead in blocks and written ahead."""
    alone = "harmonization_alone_decoder_nats_per_note"
    readings = {"sight-read": "harmonization_at_onsets_decoder_nats_per_note",
                "read ahead in blocks": "harmonization_read_ahead_decoder_nats_per_note",
                "written ahead": "harmonization_given_decoder_nats_per_note"}  # fmt: skip
    lines = []
    for row in (row for row in rows if row.get("trained")):
        others = [other[alone] for other in rows if set(UNCONDITIONED) <= set(other.get("set", []))
                  and other.get("stage") == row.get("stage") and alone in other]  # fmt: skip
        if not others:
            continue
        lines += [f"\n\n{row['trained']} ({row.get('stage')}, {row['steps']} steps, seed {row['seed']}) against the "
                  f"unconditioned models' lower voices alone, {spread(others, 3)} nats/note over {len(others)} seeds:\n",
                  "| the soprano | nats/note (lower voices) | reduction |", "|---|---:|---:|"]  # fmt: skip
        lines += [f"| {name} | {row[field]:.3f} | {1 - row[field] / float(np.mean(others)):.3f} |"
                  for name, field in readings.items() if row.get(field) is not None]  # fmt: skip
    return "\n".join(lines)


def _group_table(rows: list[dict]) -> str:
    """One group's rows (one stage, steps, settings and scoring): mean ± sd over its seeds."""

    def cut(row: dict, given: str, alone: str) -> float:
        return 1 - row[given] / row[alone]

    measures = [
        ("harmonization: alto, tenor, bass", "harmonization_given", "harmonization_alone"),
        ("infilling: the span", "infill_both_sides", "infill_left_only"),
    ]
    lines = ["| measure (nats/note) | seeds | given ahead | without | reduction |", "|---|---:|---:|---:|---:|"]
    for scoring, suffix in (("as the decoder writes them", "_decoder_nats_per_note"), ("every id, raw", "_nats_per_note")):
        if not all(given + suffix in row for row in rows for _, given, _ in measures):
            continue
        for name, given, alone in measures:
            given, alone = given + suffix, alone + suffix
            lines.append(f"| {name}, {scoring} | {len(rows)} | {spread([r[given] for r in rows], 3)} | "
                         f"{spread([r[alone] for r in rows], 3)} | {spread([cut(r, given, alone) for r in rows], 3)} |")  # fmt: skip
    at_onsets, alone = "harmonization_at_onsets_decoder_nats_per_note", "harmonization_alone_decoder_nats_per_note"
    if all(at_onsets in row for row in rows):
        lines.append(f"| harmonization, the soprano given at its onsets only (sight-reading), as the decoder writes them | "
                     f"{len(rows)} | {spread([r[at_onsets] for r in rows], 3)} | {spread([r[alone] for r in rows], 3)} | "
                     f"{spread([cut(r, at_onsets, alone) for r in rows], 3)} |")  # fmt: skip
    read_ahead = "harmonization_read_ahead_decoder_nats_per_note"
    if all(row.get(read_ahead) is not None for row in rows):
        lines.append(f"| harmonization, the soprano at its onsets and read ahead in blocks, as the decoder writes them | "
                     f"{len(rows)} | {spread([r[read_ahead] for r in rows], 3)} | {spread([r[alone] for r in rows], 3)} | "
                     f"{spread([cut(r, read_ahead, alone) for r in rows], 3)} |")  # fmt: skip
    shipped = [r["shipped_plain_nats_per_note"] for r in rows if r.get("shipped_plain_nats_per_note") is not None]
    split = "validation" if rows[0].get("stage") == "select" else "test"
    lines.append(f"| plain Bach {split} chorales (the shipped model: "
                 f"{spread(shipped, 3) if shipped else '—'}) | {len(rows)} | | {spread([r['plain_nats_per_note'] for r in rows], 3)} | |")
    if all("span_late_notes" in row for row in rows):  # the span before the look-ahead reaches it, and after
        for part, name in (("early", "before its last"), ("late", "in its last")):
            given, alone = f"infill_both_sides_{part}_decoder_nats_per_note", f"infill_left_only_{part}_decoder_nats_per_note"
            lines.append(f"| infilling: the span {name} {rows[0]['span_late_seconds']:g} s (the look-ahead), as the decoder "
                         f"writes them | "
                         f"{len(rows)} | {spread([r[given] for r in rows], 3)} | {spread([r[alone] for r in rows], 3)} | "
                         f"{spread([cut(r, given, alone) for r in rows], 3)} |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()

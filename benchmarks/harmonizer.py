"""An encoder over the melody against the same decoder without it: issue 31's harmonization NLL, encoder design.

Models per seed, all from the shipped music model's weights, trained the same steps on the same windows
of the training Bach chorales (each window opening BOS + the piece's controls, the chorale transposed by
a random -3..3 semitones; the same windows in the same order for every kind):

    alone             the decoder (:class:`~multimodal.models.lm.CausalLM`) on alto, tenor and bass only
                      (parts 1-3, plain events): the issue's "unconditioned model of the same size and budget".
    harmonizer        :class:`multimodal.models.harmonizer.Harmonizer` on the same sequences: at each position
                      the decoder reads an encoder's vectors of the soprano notes around its time (the sounding
                      one, one before, two after) and the steps since and until the nearest soprano onsets; the
                      encoder (``--encoder-layers`` blocks, from scratch) reads the whole soprano.
    sight             the decoder on all four parts (the plain sequence), the soprano's ids fed, not learned:
                      the melody sight-read, as :func:`multimodal.music.harmonize.harmonize` does by default.
    sight+harmonizer  the sight-reading sequence with the harmonizer's read-out of the soprano around now.

Every kind is scored on the lower voices of the ``--stage``'s Bach chorales (validation for ``select``, test
for ``report``): nats per lower-voice note, as the harmonize decoder writes them (its rules on the logits:
given ids fed, the soprano's pitches banned, shifts stopped at the soprano's onsets —
:func:`multimodal.music.constrained.decoder_token_nll`, the measure of ``benchmarks/given_notes.py``) and raw
(every written id as the softmax gives it); each id read with up to 256 ids before it (windows moved by 128).
The reduction ``1 - kind / alone`` per seed is issue 31's measure (target ≥ 25 %). Each finished model
appends one JSON line to ``--out``; ``--table`` prints mean ± sd. The budget is steps, not time, so two
kinds may train side by side on one thread each (nothing else on the machine)::

    flock /tmp/bench.lock sh -c '.venv/bin/python benchmarks/harmonizer.py --stage select --seeds 0 --steps 800 \
        --threads 1 --kinds sight+harmonizer & .venv/bin/python benchmarks/harmonizer.py --stage select --seeds 0 \
        --steps 800 --threads 1 --kinds sight alone; wait'
    .venv/bin/python benchmarks/harmonizer.py --table
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("alone", "harmonizer", "sight", "sight+harmonizer")
READING = ("harmonizer", "sight+harmonizer")
"""The kinds whose decoder reads the soprano through the encoder."""
FOUR_PARTS = ("sight", "sight+harmonizer")
"""The kinds whose sequence is all four parts, the soprano fed."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["select", "report"], default="select")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=["alone", "harmonizer"])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-4, help="the shipped weights' learning rate")
    parser.add_argument("--new-lr", type=float, default=1e-3, help="the encoder's and read-out's learning rate")
    parser.add_argument("--encoder-layers", type=int, default=2)
    parser.add_argument("--max-given", type=int, default=384, help="most soprano ids the encoder reads")
    parser.add_argument("--pieces", type=int, default=None, help="at most this many chorales per split (tests)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1: two runs side by side, quality only)")
    parser.add_argument("--tiny", action="store_true", help="the test suite's size: a tiny model from scratch")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "harmonizer.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = parser.parse_args()
    if not args.table:
        torch.set_num_threads(args.threads)
        data = Chorales(args)
        done = {settings(row) for row in load(args.out)}
        for seed in args.seeds:
            for kind in args.kinds:
                if settings({"kind": kind, "seed": seed, "stage": args.stage, **run_settings(kind, args)}) in done:
                    print(f"{kind} seed {seed}: already in {args.out}")
                    continue
                result = run(kind, seed, data, args)
                record(args.out, result, stage=args.stage)
                print(json.dumps(result), flush=True)
    print(table(load(args.out)))


class Chorales:
    """The shipped model, its tokenizer and the Bach chorales with a soprano and lower voices, split as it was trained."""

    def __init__(self, args: argparse.Namespace) -> None:
        from multimodal.data.music21_corpus import load_music21_corpus
        from multimodal.pretrained import resolve_model
        from tasks.checkpoint import load_task

        self.base, self.tokenizer, settings = load_task(resolve_model("music"))
        self.seq_len = int(settings.get("seq_len", 256))
        corpus = load_music21_corpus(["bach"], num_parts=self.tokenizer.config.num_parts)
        percents = settings.get("validation_percent", 10), settings.get("test_percent", 10)
        self.splits = {}
        for split in ("train", "val", "test"):
            pieces = corpus.split(split, *percents)
            chosen = [(notes, controls) for notes, controls in zip(pieces.notes, pieces.controls, strict=True)
                      if (notes[:, 4] == 0).any() and (notes[:, 4] != 0).any()]  # fmt: skip
            self.splits[split] = chosen[: args.pieces] if args.pieces else chosen
        self.max_given = args.max_given

    def example(self, notes: np.ndarray, controls, rng: np.random.Generator | None, four_parts: bool) -> dict:
        """One chorale as a kind reads it: ``ids`` (head + the lower parts' plain ids, or with ``four_parts`` all
        four parts'), ``fed`` (the head and the soprano's ids: given, not written), the soprano's ids and each
        position's alignment to them; with ``rng`` transposed by -3..3 semitones."""
        from given_notes import soprano_rows

        from multimodal.music.alignment import given_alignment, given_notes_index

        tokenizer = self.tokenizer
        if rng is not None:
            shift = int(rng.integers(-3, 4))
            notes = notes.copy()
            notes[:, 0] += shift
            controls = controls.transposed(shift)
        head = np.array([tokenizer.bos_id, *tokenizer.control_ids(controls)], dtype=np.int64)
        soprano, lower = notes[notes[:, 4] == 0], notes[notes[:, 4] != 0]
        body = tokenizer.encode_notes_array(notes if four_parts else lower)
        given = tokenizer.encode_notes_array(soprano)
        ids = np.r_[head, body]
        fed = np.r_[np.ones(len(head), dtype=bool), soprano_rows(tokenizer, body) if four_parts else np.zeros(len(body), dtype=bool)]
        clock = np.r_[np.zeros(len(head), dtype=np.int64), tokenizer.clock(body)]
        aligned, distances = given_alignment(clock, *given_notes_index(tokenizer, given))
        return {"ids": ids, "fed": fed, "head": len(head), "given": given, "aligned": aligned, "distances": distances,
                "notes": len(lower)}  # fmt: skip

    def given_slice(self, given: np.ndarray, aligned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The soprano ids the encoder reads for written positions aligned as ``aligned`` (all of them, or
        ``max_given`` centred on the notes those positions read) and the alignment into them."""
        from multimodal.music.alignment import slice_alignment

        if len(given) <= self.max_given:
            return given, aligned
        read = aligned[aligned > 0] - 1
        middle = int((read.min() + read.max()) // 2) if len(read) else 0
        first = int(np.clip(middle - self.max_given // 2, 0, len(given) - self.max_given))
        return given[first : first + self.max_given], slice_alignment(aligned, first, first + self.max_given)

    def batch(self, rng: np.random.Generator, size: int, four_parts: bool) -> dict:
        """``size`` training windows of ``seq_len`` positions (targets: the written ids after the head; -100 at fed
        ids)."""
        rows = []
        for _ in range(size):
            notes, controls = self.splits["train"][int(rng.integers(len(self.splits["train"])))]
            example = self.example(notes, controls, rng, four_parts)
            ids, head = example["ids"], example["head"]
            body = len(ids) - head
            room = self.seq_len + 1 - head
            start = int(rng.integers(0, max(body - room, 0) + 1))
            picked = np.r_[np.arange(head), head + start + np.arange(min(room, body - start))]
            given, aligned = self.given_slice(example["given"], example["aligned"][picked[:-1]])
            targets = np.where(example["fed"][picked[1:]], -100, ids[picked[1:]])
            rows.append((ids[picked[:-1]], targets, given, aligned, example["distances"][picked[:-1]]))
        return collate(rows, self.seq_len, self.tokenizer.pad_id)


def collate(rows: list[tuple], seq_len: int, pad_id: int) -> dict:
    """Stacks rows of (inputs, targets, given, aligned, distances), padding the written ids to ``seq_len`` and the
    given ids to the longest."""
    width = max(len(row[2]) for row in rows)
    batch = {name: [] for name in ("tokens", "targets", "given", "given_padding", "aligned", "distances")}
    for tokens, targets, given, aligned, distances in rows:
        missing = seq_len - len(tokens)
        batch["tokens"].append(np.pad(tokens, (0, missing), constant_values=pad_id))
        batch["targets"].append(np.pad(targets, (0, missing), constant_values=-100))
        batch["aligned"].append(np.pad(aligned, ((0, missing), (0, 0))))
        batch["distances"].append(np.pad(distances, ((0, missing), (0, 0))))
        batch["given"].append(np.pad(given, (0, width - len(given)), constant_values=pad_id))
        batch["given_padding"].append(np.arange(width) >= len(given))
    return {name: torch.as_tensor(np.stack(values)) for name, values in batch.items()}


def run_settings(kind: str, args: argparse.Namespace) -> dict:
    """What a row's model was trained with, besides its kind, seed and stage."""
    return {"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "tiny": args.tiny, "scores": 2,
            "encoder_layers": args.encoder_layers if kind in READING else 0,
            "new_lr": args.new_lr if kind in READING else None}  # fmt: skip


def settings(row: dict) -> tuple:
    """The key that says two rows are the same run."""
    return tuple(row.get(name) for name in ("kind", "seed", "stage", "steps", "batch_size", "lr", "tiny",
                                            "encoder_layers", "new_lr", "scores"))  # fmt: skip


def build(kind: str, data: Chorales, args: argparse.Namespace) -> torch.nn.Module:
    """The model of ``kind`` with the shipped weights (``--tiny``: a tiny one from scratch)."""
    from dataclasses import replace

    from multimodal.models.harmonizer import Harmonizer
    from multimodal.models.lm import CausalLM

    config = data.base.model.config
    if args.tiny:
        config = replace(config, dim=32, num_layers=1, num_heads=4, ff_dim=64)
    if kind in READING:
        model = Harmonizer(config, given_layers=args.encoder_layers)
        target = model.lm
    else:
        model = CausalLM(config)
        target = model
    if not args.tiny:
        target.load_state_dict(data.base.model.state_dict())
    return model


def run(kind: str, seed: int, data: Chorales, args: argparse.Namespace) -> dict:
    """Trains one model for ``--steps`` and scores it on the stage's chorales."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = build(kind, data, args).train()
    pretrained = [p for name, p in model.named_parameters() if kind not in READING or name.startswith("lm.")]
    new = [p for name, p in model.named_parameters() if kind in READING and not name.startswith("lm.")]
    groups = [{"params": pretrained, "lr": args.lr}] + ([{"params": new, "lr": args.new_lr}] if new else [])
    optimizer = torch.optim.AdamW(groups, betas=(0.9, 0.98), weight_decay=0.01)
    peaks = [group["lr"] for group in optimizer.param_groups]
    warmup = min(50, args.steps // 10 + 1)
    started = time.perf_counter()
    losses = []
    for step in range(args.steps):
        scale = (step + 1) / warmup if step < warmup else 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(args.steps - warmup, 1)))
        for group, peak in zip(optimizer.param_groups, peaks, strict=True):
            group["lr"] = peak * scale
        batch = data.batch(rng, args.batch_size, kind in FOUR_PARTS)
        loss = batch_loss(model, kind, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % 100 == 0:
            print(f"{kind} seed {seed} step {step + 1}: loss {statistics.fmean(losses[-100:]):.3f} "
                  f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
    minutes = (time.perf_counter() - started) / 60
    if not args.tiny:  # the trained weights, to score again without training (outputs/ is not committed)
        from safetensors.torch import save_model

        folder = ROOT / "outputs" / "harmonizer"
        folder.mkdir(parents=True, exist_ok=True)
        save_model(model, str(folder / f"{args.stage}-{kind}-seed{seed}-{args.steps}.safetensors"))
    split = "val" if args.stage == "select" else "test"
    decoder, raw, notes = score(model.eval(), kind, data, split)
    return {"kind": kind, "seed": seed, **run_settings(kind, args), "split": split, "chorales": len(data.splits[split]),
            "lower_notes": notes, "decoder_nats_per_note": decoder / max(notes, 1), "nats_per_note": raw / max(notes, 1),
            "train_minutes": round(minutes, 2),
            "date": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip


def batch_loss(model, kind: str, batch: dict) -> torch.Tensor:
    """Mean next-id cross-entropy of one batch."""
    if kind not in READING:
        logits = model(batch["tokens"])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch["targets"].flatten(),
                                                 ignore_index=-100)  # fmt: skip
    return model.loss(batch["tokens"], batch["targets"], batch["given"], batch["aligned"], batch["distances"],
                      given_padding=batch["given_padding"])  # fmt: skip


@torch.no_grad()
def score(model, kind: str, data: Chorales, split: str) -> tuple[float, float, int]:
    """Summed NLL of the written (lower-voice) ids of ``split``'s chorales as the harmonize decoder writes them and
    raw, and their number of notes."""
    from multimodal.music import token_nll
    from multimodal.music.constrained import decoder_token_nll

    lower_parts = list(range(1, data.tokenizer.config.num_parts))
    decoder, raw, notes = 0.0, 0.0, 0
    for chorale, controls in data.splits[split]:
        example = data.example(chorale, controls, None, kind in FOUR_PARTS)
        reader = WindowReader(model, example, data) if kind in READING else model
        # the decoder's window end: a new note ends by the chorale's end as written, lengths rounded to the vocabulary's
        end = float(data.tokenizer.decode_notes(data.tokenizer.encode_notes_array(chorale))[:, 2].max())
        nll = decoder_token_nll(reader, data.tokenizer, example["ids"], example["fed"], lower_parts, data.seq_len,
                                window_end=end)  # fmt: skip
        written = ~example["fed"][1:]
        decoder += float(nll[written].sum())
        reader = WindowReader(model, example, data) if kind in READING else model
        raw += float(token_nll(reader, example["ids"], data.seq_len)[written].sum())
        notes += example["notes"]
    return decoder, raw, notes


class WindowReader(torch.nn.Module):
    """A :class:`~multimodal.models.harmonizer.Harmonizer` behind the ``model(ids)`` call the scorers make, one
    chorale's windows in order: each call is checked to be the chorale's ids from the next window start (the
    scorers move windows by ``seq_len // 2``) and gets the soprano and alignment of those positions."""

    def __init__(self, harmonizer, example: dict, data: Chorales) -> None:
        super().__init__()
        self.harmonizer, self.example, self.data, self.start = harmonizer, example, data, 0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        stop = self.start + tokens.shape[1]
        if not np.array_equal(tokens[0].numpy(), self.example["ids"][self.start : stop]):
            raise AssertionError(f"the scorer's window does not start at id {self.start}")
        given, aligned = self.data.given_slice(self.example["given"], self.example["aligned"][self.start : stop])
        logits = self.harmonizer(tokens, torch.as_tensor(given)[None], torch.as_tensor(aligned)[None],
                                 torch.as_tensor(self.example["distances"][self.start : stop])[None])  # fmt: skip
        self.start += self.data.seq_len // 2
        return logits


def table(rows: list[dict]) -> str:
    """Per stage, steps and size: each kind's nats per lower-voice note, as the decoder writes them and raw (mean ±
    sd over seeds), and its reduction against the alone model of the same seed (rows scored both ways)."""
    groups: dict[tuple, dict[int, dict[str, dict]]] = {}
    for row in rows:
        if "decoder_nats_per_note" in row:
            groups.setdefault((row["stage"], row["steps"], row["tiny"]), {}).setdefault(row["seed"], {})[row["kind"]] = row
    lines = ["| stage | steps | kind | seeds | nats per lower-voice note, as the decoder writes them | raw | "
             "reduction against alone (decoder) | raw |", "|---|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for (stage, steps, tiny), seeds in sorted(groups.items()):
        for kind in KINDS:
            paired = [pair for pair in seeds.values() if kind in pair and "alone" in pair]
            if not paired:
                continue
            cells = []
            for field in ("decoder_nats_per_note", "nats_per_note"):
                cells.append(spread([pair[kind][field] for pair in paired], 3))
            for field in ("decoder_nats_per_note", "nats_per_note"):
                cut = [100 * (1 - pair[kind][field] / pair["alone"][field]) for pair in paired]
                cells.append(f"{spread(cut, 1)} %")
            lines.append(f"| {stage}{' (tiny)' if tiny else ''} | {steps} | {kind} | {len(paired)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

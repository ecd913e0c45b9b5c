"""Music models on the Bach chorales: relative vs learned absolute positions vs a Performance-RNN-style LSTM.

Every model sees the same data (train split, random windows with the task's augmentation), batch,
step budget and schedule (AdamW, warm-up then cosine, gradient clipping at 1):

    relative   the Music Transformer: CausalLM with relative attention (the skewed kernel)
    learned    the same Transformer with learned absolute positions (the stronger absolute baseline)
    lstm       Magenta's Performance RNN layout: a stacked LSTM over the same events, sized to the
               relative Transformer's parameter count (``benchmarks/text_quality.py``'s LSTM LM)

Protocol: learning rates are chosen per model on the **validation** pieces (``--lrs``, one seed);
the chosen rates are then run with ``--seeds`` and reported on validation and, once, on the **test**
pieces, as mean ± sd. NLL is in nats per event (one vocabulary for all models), every token of
every piece once. ``--equal-time`` also trains the learned-position model for as many steps as fit
in the relative model's training time, to compare them per second of training, not only per step.
Each run appends one JSON line to ``--out``; ``--table`` prints the tables from that file.

Usage (run alone: the times are part of the result)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/music_quality.py --stage select      # lr per model on validation
    flock /tmp/bench.lock .venv/bin/python benchmarks/music_quality.py --stage report --lr relative=2e-3 \\
        learned=2e-3 lstm=4e-3 --equal-time                                                   # 3 seeds, test once
    .venv/bin/python benchmarks/music_quality.py --table
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import grouped, load, record, spread

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("relative", "learned", "lstm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["select", "report"], default="select")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 2e-3, 4e-3], help="select: rates tried")
    parser.add_argument("--lr", nargs="+", default=[], help="report: MODEL=RATE chosen on validation")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=3)
    parser.add_argument("--lstm-layers", type=int, default=3)
    parser.add_argument("--equal-time", action="store_true", help="report: learned positions at relative's time")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "music_quality.jsonl")
    parser.add_argument("--table", action="store_true", help="print the tables of --out and stop")
    args = parser.parse_args()
    if args.table:
        print(tables(load(args.out)))
        return
    torch.set_num_threads(2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data = Data(args.seq_len, args.batch_size, args.steps)
    if args.stage == "select":
        for name in args.models:
            for lr in args.lrs:
                record(args.out, run(name, lr, 0, args.steps, data, args, splits=("val",)), stage="select")
        return
    rates = dict(item.split("=") for item in args.lr)
    missing = [name for name in args.models if name not in rates]
    if missing:
        parser.error(f"--lr: no rate for {missing}; give MODEL=RATE for each model, as chosen by --stage select")
    if args.equal_time and not {"relative", "learned"} <= set(args.models):
        parser.error("--equal-time compares learned with relative positions: list both in --models")
    # relative first: the equal-time run of the learned model needs its time
    order = sorted(args.models, key=lambda name: name != "relative")
    relative_seconds = {}
    for seed in args.seeds:
        for name in order:
            result = run(name, float(rates[name]), seed, args.steps, data, args, splits=("val", "test"))
            record(args.out, result, stage="report")
            if name == "relative":
                relative_seconds[seed] = result["train_seconds"]
            if name == "learned" and args.equal_time and seed in relative_seconds:
                steps = round(args.steps * relative_seconds[seed] / result["train_seconds"])
                equal = run(name, float(rates[name]), seed, steps, data, args, splits=("val", "test"))
                record(args.out, equal, stage="equal_time")


class Data:
    """The chorales' splits: random augmented training windows, and every held-out token once."""

    def __init__(self, seq_len: int, batch_size: int, steps: int) -> None:
        from multimodal.data.music import MidiAugmentation, MidiPieceWindows, load_bach_chorales
        from multimodal.tokenizers.midi import MidiTokenizer

        self.tokenizer = MidiTokenizer()
        corpus = load_bach_chorales()
        self.train = corpus.split("train")
        self.seq_len, self.batch_size = seq_len, batch_size
        self.augmentation = MidiAugmentation(3, (0.95, 1.05))
        self.evaluation = {split: MidiPieceWindows(corpus.split(split), self.tokenizer, seq_len)
                           for split in ("val", "test")}  # fmt: skip

    def training_batches(self, steps: int, seed: int):
        from multimodal.data.music import MidiWindowDataset

        torch.manual_seed(seed)
        windows = MidiWindowDataset(self.train, self.tokenizer, self.seq_len, steps * self.batch_size, self.augmentation)
        yield from DataLoader(windows, batch_size=self.batch_size)


def run(name: str, lr: float, seed: int, steps: int, data: Data, args: argparse.Namespace, splits) -> dict:
    """Trains one model; returns its NLL on ``splits``, its size and its training time."""
    batches = list(data.training_batches(steps, seed))  # drawn before training: the same for every model
    torch.manual_seed(seed)
    model = build(name, data.tokenizer.vocab_size, args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = min(100, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, warmup, steps))
    model.train()
    start = time.perf_counter()
    for batch in batches:
        targets = batch[:, 1:].masked_fill(batch[:, 1:] == data.tokenizer.pad_id, -100)
        loss = loss_of(model, batch[:, :-1], targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
    seconds = time.perf_counter() - start
    result = {"model": name, "lr": lr, "seed": seed, "steps": steps, "train_seconds": seconds,
              "parameters": sum(p.numel() for p in model.parameters())}  # fmt: skip
    for split in splits:
        result[f"{split}_nll"] = evaluate(model, data.evaluation[split], data.tokenizer.pad_id)
    print(json.dumps(result), flush=True)
    return result


def build(name: str, vocab_size: int, args: argparse.Namespace) -> nn.Module:
    """One of :data:`MODELS`; the LSTM gets the relative Transformer's parameter count."""
    from text_quality import LSTMLanguageModel, lstm_hidden_for

    from multimodal.models import CausalLM, CausalLMConfig

    def transformer(position: str) -> nn.Module:
        config = CausalLMConfig(
            vocab_size=vocab_size, dim=args.dim, num_layers=args.num_layers, num_heads=8, ff_dim=4 * args.dim,
            dropout=0.1, position=position, max_seq_len=args.seq_len,
        )  # fmt: skip
        return CausalLM(config)

    if name != "lstm":
        return transformer(name)
    target = sum(p.numel() for p in transformer("relative").parameters())
    hidden = lstm_hidden_for(target, vocab_size, args.dim, args.lstm_layers)
    return LSTMLanguageModel(vocab_size, args.dim, hidden, args.lstm_layers)


def loss_of(model: nn.Module, tokens: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """Cross-entropy of next-event predictions (``CausalLM.loss`` for ours, the logits for the LSTM)."""
    if hasattr(model, "loss"):
        return model.loss(tokens, targets, ignore_index=-100, reduction=reduction)
    logits = model(tokens)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction=reduction)


@torch.no_grad()
def evaluate(model: nn.Module, windows, pad_id: int, batch_size: int = 16) -> float:
    """Nats per event over every token of every piece once."""
    model.eval()
    total = 0.0
    for batch in DataLoader(windows, batch_size=batch_size):
        targets = batch[:, 1:].masked_fill(batch[:, 1:] == pad_id, -100)
        total += float(loss_of(model, batch[:, :-1], targets, reduction="sum"))
    model.train()
    return total / windows.num_targets


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min((step - warmup) / max(total - warmup, 1), 1.0)))


def tables(results: list[dict]) -> str:
    """The selection table (validation, one seed) and the report (mean ± sd over seeds, test once)."""
    lines = ["Learning-rate selection on the validation pieces (seed 0):", "",
             "| model | lr | steps | validation nll |", "|---|---:|---:|---:|"]  # fmt: skip
    for r in (r for r in results if r["stage"] == "select"):
        lines.append(f"| {r['model']} | {r['lr']:g} | {r['steps']} | {_val(r):.4f} |")
    for stage, title in (("report", "Equal steps"), ("equal_time", "Equal training time (learned positions)")):
        rows = [r for r in results if r["stage"] == stage]
        if not rows:
            continue
        lines += ["", f"{title}, mean ± sd over seeds (nats per event):", "",
                  "| model | lr | params | steps | train s | seeds | validation nll | test nll |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for name, group in grouped(rows).items():
            lines.append(f"| {name} | {group[0]['lr']:g} | {group[0]['parameters'] / 1e6:.2f} M | "
                         f"{spread([r['steps'] for r in group], 0)} | {spread([r['train_seconds'] for r in group], 0)} | "
                         f"{len(group)} | {spread([_val(r) for r in group])} | "
                         f"{spread([r['test_nll'] for r in group])} |")  # fmt: skip
    report = [r for r in results if r["stage"] == "report"]
    if report:
        mean = {name: statistics.fmean(r["test_nll"] for r in report if r["model"] == name)
                for name in dict.fromkeys(r["model"] for r in report)}  # fmt: skip
        if "relative" in mean:
            lines.append("")
            lines += [f"relative / {name} test NLL: {mean['relative'] / value:.3f}" for name, value in mean.items()
                      if name != "relative"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _val(result: dict) -> float:
    """The validation NLL of a result line (older lines call the split ``validation``)."""
    return result["val_nll"] if "val_nll" in result else result["validation_nll"]


if __name__ == "__main__":
    main()

"""Length extrapolation: every position scheme trained on short windows, scored at 1×, 2×, 4× and 8× their length.

The question rotary and ALiBi exist for. Each scheme — ``learned``, ``sinusoidal``, ``relative``
(clipped at the training length, Shaw et al.), ``rotary``, ``alibi`` — trains the same
``CausalLM`` (3 × 128, 4 heads, GELU, no dropout) on the same random windows of ``--train-len``
tokens in the same order, with the same steps, batch, learning rate and seeds. Then each model scores
the same held-out tokens cut into windows of 1, 2, 4 and 8 times the training length: a longer
window gives the later tokens more context, which only helps a model whose positions carry over.
The anchor (Press et al. 2022): ALiBi keeps its perplexity far past the training length while
sinusoidal and rotary degrade. Learned absolute positions have no embedding past the training
length: their longer windows are "n/a".

Corpora (``--corpus``):

    text    the Python standard library (BPE 4096), test modules: the first ``--eval-tokens``
            tokens of their stream, in non-overlapping windows of each length
    music   the Bach chorales (performance events), test pieces: every event of every piece once,
            windows restarting at each piece (pieces are 100-1,800 events long)

Nothing is chosen here (one learning rate, given, for every scheme), so the scores are on the test
split. Mean ± sd over ``--seeds``. Run alone (the training times are printed too).

Usage::

    flock /tmp/bench.lock .venv/bin/python benchmarks/length_extrapolation.py --corpus text
    flock /tmp/bench.lock .venv/bin/python benchmarks/length_extrapolation.py --corpus music --train-len 128
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from multimodal.models import CausalLM, CausalLMConfig

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = ("learned", "sinusoidal", "relative", "rotary", "alibi")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=["text", "music"], default="text")
    parser.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--train-len", type=int, default=256)
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--eval-tokens", type=int, default=16_384, help="text: held-out tokens scored")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "length_extrapolation.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = parser.parse_args()
    if args.table:
        print(table([json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]))
        return
    torch.set_num_threads(2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data = TextData(args) if args.corpus == "text" else MusicData(args)
    for seed in args.seeds:
        for scheme in args.schemes:
            result = run(scheme, seed, data, args)
            with args.out.open("a") as file:
                file.write(json.dumps(result) + "\n")
            print(json.dumps(result), flush=True)
    print(table([json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]))


class TextData:
    """Random training windows of the stdlib's training modules; the test modules' first tokens to score."""

    def __init__(self, args: argparse.Namespace) -> None:
        from multimodal.data.text import stdlib_datasets

        self.args = args
        self.train, _, test = stdlib_datasets(args.train_len, 4096, num_samples=args.steps * args.batch_size)
        self.vocab_size, self.pad_id = self.train.vocab_size, None
        self.test_tokens = test.tokens[: args.eval_tokens + 1]

    def training(self, seed: int):
        self.train.seed, self.train.epoch = seed, 0
        return DataLoader(self.train, batch_size=self.args.batch_size)

    def scoring(self, length: int):
        from multimodal.data.text import TokenWindowDataset

        return TokenWindowDataset(self.test_tokens, length, self.vocab_size, "sequential")


class MusicData:
    """Augmented random windows of the training chorales; every event of the test chorales to score."""

    def __init__(self, args: argparse.Namespace) -> None:
        from multimodal.data.music import load_bach_chorales
        from multimodal.tokenizers.midi import MidiTokenizer

        self.args = args
        self.tokenizer = MidiTokenizer()
        corpus = load_bach_chorales()
        self.train_pieces, self.test_pieces = corpus.split("train"), corpus.split("test")
        self.vocab_size, self.pad_id = self.tokenizer.vocab_size, self.tokenizer.pad_id

    def training(self, seed: int):
        from multimodal.data.music import MidiWindowDataset

        windows = MidiWindowDataset(self.train_pieces, self.tokenizer, self.args.train_len,
                                    self.args.steps * self.args.batch_size, seed=seed)  # fmt: skip
        return DataLoader(windows, batch_size=self.args.batch_size)

    def scoring(self, length: int):
        from multimodal.data.music import MidiPieceWindows

        return MidiPieceWindows(self.test_pieces, self.tokenizer, length)


def build(scheme: str, vocab_size: int, train_len: int) -> CausalLM:
    """The same 3 × 128 model for every scheme; relative distances clip at the training length."""
    config = CausalLMConfig(
        vocab_size=vocab_size, dim=128, num_layers=3, num_heads=4, ff_dim=512, dropout=0.0, position=scheme,
        max_seq_len=train_len, max_relative_distance=train_len - 1, activation="gelu_tanh",
    )  # fmt: skip
    return CausalLM(config)


def run(scheme: str, seed: int, data, args: argparse.Namespace) -> dict:
    """Trains one scheme with one seed; its test NLL at every window length."""
    torch.manual_seed(seed)
    model = build(scheme, data.vocab_size, args.train_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = min(50, args.steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _factor(step, warmup, args.steps))
    model.train()
    start = time.perf_counter()
    for batch in data.training(seed):
        targets = batch[:, 1:] if data.pad_id is None else batch[:, 1:].masked_fill(batch[:, 1:] == data.pad_id, -100)
        model.loss(batch[:, :-1], targets, ignore_index=-100).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
    seconds = time.perf_counter() - start
    result = {"corpus": args.corpus, "scheme": scheme, "seed": seed, "steps": args.steps, "train_len": args.train_len,
              "train_seconds": round(seconds, 1)}  # fmt: skip
    for factor in args.factors:
        length = factor * args.train_len
        if scheme == "learned" and length > args.train_len:
            result[f"nll@{factor}x"] = None  # no embedding for those positions
            continue
        result[f"nll@{factor}x"] = score(model, data.scoring(length), data.pad_id)
    return result


@torch.inference_mode()
def score(model: CausalLM, windows, pad_id: int | None) -> float:
    """Nats per token over every target of ``windows`` (padding ignored)."""
    model.eval()
    total, count = 0.0, 0
    for batch in DataLoader(windows, batch_size=4):
        targets = batch[:, 1:] if pad_id is None else batch[:, 1:].masked_fill(batch[:, 1:] == pad_id, -100)
        logits = model(batch[:, :-1])
        total += F.cross_entropy(logits.flatten(0, 1).double(), targets.flatten(), ignore_index=-100,
                                 reduction="sum").item()  # fmt: skip
        count += int((targets != -100).sum())
    model.train()
    return total / count


def _factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min((step - warmup) / max(total - warmup, 1), 1.0)))


def table(results: list[dict]) -> str:
    """Perplexity (text) or NLL per event (music) by scheme and window length: mean ± sd over seeds."""
    lines = []
    for corpus in sorted({r["corpus"] for r in results}):
        rows = [r for r in results if r["corpus"] == corpus]
        factors = sorted({int(key[4:-1]) for r in rows for key in r if key.startswith("nll@")})
        train_len = rows[0]["train_len"]
        unit = "perplexity" if corpus == "text" else "nats per event"
        lines += [f"{corpus}: test {unit} at window lengths of {'/'.join(str(f * train_len) for f in factors)} "
                  f"tokens (trained on {train_len}), mean ± sd over seeds", "",
                  "| scheme | seeds | " + " | ".join(f"{f}× ({f * train_len})" for f in factors) + " | train s |",
                  "|---|---:|" + "---:|" * (len(factors) + 1)]  # fmt: skip
        for scheme in SCHEMES:
            mine = [r for r in rows if r["scheme"] == scheme]
            if not mine:
                continue
            cells = []
            for factor in factors:
                values = [r[f"nll@{factor}x"] for r in mine if r.get(f"nll@{factor}x") is not None]
                if not values:
                    cells.append("n/a")
                    continue
                shown = [math.exp(v) for v in values] if corpus == "text" else values
                spread = f" ± {statistics.stdev(shown):.2f}" if len(shown) > 1 else ""
                cells.append(f"{statistics.mean(shown):.2f}{spread}")
            seconds = statistics.mean(r["train_seconds"] for r in mine)
            lines.append(f"| {scheme} | {len(mine)} | " + " | ".join(cells) + f" | {seconds:.0f} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

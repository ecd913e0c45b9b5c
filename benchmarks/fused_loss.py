"""The chunked output layer + cross-entropy against the plain loss: a paired A/B on the text benchmark LM.

The model is ``text_throughput.py``'s (6 x 256, vocabulary 8000, tied embeddings). Each contender
computes the loss of the same ``(batch, seq)`` batch from the same hidden states and runs the
backward through the whole model:

    plain       ``F.cross_entropy`` of the full ``(batch * seq, vocab)`` logits (what the peers do)
    chunk N     :func:`multimodal.layers.linear_cross_entropy` with ``chunk_size=N`` tokens: each
                chunk's logits, loss and logit gradient are made and folded at once

The contenders alternate within every round (the VM's load hits them alike); the table gives the
median time and, per contender, the median over rounds of the round's ratio to ``plain``.
``--loss-only`` times the output layer and loss alone (forward + backward from fixed hidden
states), the measurement quoted for the GPU.

Usage (speed: run alone)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/fused_loss.py --threads 2
    flock /tmp/bench.lock .venv/bin/python benchmarks/fused_loss.py --threads 1 --chunks 32 512 1024
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import text_throughput

from multimodal.layers.loss import linear_cross_entropy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--chunks", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--loss-only", action="store_true", help="time the output layer + loss alone")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = text_throughput.ours(args.seq_len).to(args.device).train()
    tokens = torch.randint(0, text_throughput.VOCAB_SIZE, (args.batch_size, args.seq_len + 1), device=args.device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:].flatten()
    fixed_hidden = torch.randn(inputs.numel(), text_throughput.DIM, device=args.device, requires_grad=True)

    def step(chunk: int | None) -> None:
        hidden = fixed_hidden if args.loss_only else model.decoder(model.embedding(inputs)).flatten(0, 1)
        if chunk is None:
            loss = F.cross_entropy(model.head(hidden).float(), targets)
        else:
            loss = linear_cross_entropy(hidden, model.head.weight, targets, chunk_size=chunk)
        loss.backward()
        model.zero_grad(set_to_none=True)
        fixed_hidden.grad = None
        if args.device == "cuda":
            torch.cuda.synchronize()

    contenders = {"plain": None, **{f"chunk {chunk}": chunk for chunk in args.chunks}}
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for chunk in contenders.values():
        step(chunk)  # warm-up
    for _ in range(args.rounds):
        for name, chunk in contenders.items():
            start = time.perf_counter()
            step(chunk)
            times[name].append(time.perf_counter() - start)
    what = "output layer + loss alone" if args.loss_only else "forward + backward of the whole model"
    print(f"# {what}; batch {args.batch_size} x {args.seq_len}, vocab {text_throughput.VOCAB_SIZE}, "
          f"{args.device}, {torch.get_num_threads()} threads, {args.rounds} alternating rounds\n")  # fmt: skip
    print("| contender | median ms | plain / contender (median of per-round ratios) |\n|---|---:|---:|")
    for name, values in times.items():
        ratio = statistics.median(p / c for p, c in zip(times["plain"], values, strict=True))
        print(f"| {name} | {statistics.median(values) * 1e3:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()

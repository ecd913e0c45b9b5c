"""Local 2D vs full attention in the Image Transformer: time per step vs image size, and a same-budget run.

1. **Scaling** — one training step (forward + backward, batch ``--batch``) and one cached decoding
   step at the last sub-pixel, for greyscale images of 16², 32² and 64² pixels (256 to 4,096
   tokens), same model (2 layers, dim 64, 4 heads) with ``attention="full"`` (causal SDPA) or
   ``"local2d"`` (query blocks 4×16, memory 4 rows above and 8 columns each side: 256 keys per
   query at most). Median of ``--repeats`` steps after a warm-up, the two models alternating step
   by step. Ratios are local / full in the same run.
2. **Same budget** — both models trained for ``--steps`` steps on Fashion-MNIST (28×28, 256
   levels; fetch once with ``multimodal data fashion-mnist``) for each of ``--seeds`` (the seed sets
   the initialisation and the batches, the same for both models), then scored on the first 500
   validation images: bits/dim (mean ± sd over seeds, and the paired difference local − full)
   and time per step. Nothing is chosen from this comparison, so it has no selection stage.

Usage (as in docs/benchmarks.md; about 25 minutes on 2 cores)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/local_attention.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import spread

from multimodal.models.config import ImageTransformerConfig
from multimodal.models.image_transformer import ImageTransformer
from tasks.datamodules import ImageGenerationDataModule
from tasks.image_generation import ImageGeneration

LOCAL = dict(attention="local2d", local_query_shape=(4, 16), local_memory_shape=(4, 8))
FASHION_LOCAL = dict(attention="local2d", local_query_shape=(4, 7), local_memory_shape=(3, 7))
MODEL = dict(dim=64, num_layers=2, num_heads=4, ff_dim=256, dropout=0.0, position="none")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sides", type=int, nargs="*", default=[16, 32, 64], help="image sides (none: skip)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300, help="same-budget training steps (0 skips it)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="same-budget seeds")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(f"\nImage Transformer, {MODEL['num_layers']} layers, dim {MODEL['dim']}; training step = forward + "
          f"backward on {args.batch} greyscale images; decoding step = one cached sub-pixel at the end of the "
          f"image; median of {args.repeats}, {args.threads} threads\n")  # fmt: skip
    print("| image | tokens | full: train step | local2d: train step | local/full | full: decode step "
          "| local2d: decode step | local/full |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for side in args.sides or []:
        times = _step_times(side, args.batch, args.repeats)
        full, local = times["full"], times["local2d"]
        print(f"| {side}² | {side * side} | {full[0] * 1e3:.0f} ms | {local[0] * 1e3:.0f} ms | "
              f"{local[0] / full[0]:.2f} | {full[1] * 1e3:.1f} ms | {local[1] * 1e3:.1f} ms | "
              f"{local[1] / full[1]:.2f} |")  # fmt: skip

    if args.steps:
        print(f"\nsame budget: {args.steps} steps of 16 Fashion-MNIST images (28×28, 256 levels), "
              f"{MODEL['num_layers']} layers, dim {MODEL['dim']}; bits/dim on 500 validation images, "
              f"seeds {args.seeds}\n")  # fmt: skip
        contenders = {"full": dict(attention="full"), "local2d 4×7 + 3×7": FASHION_LOCAL}
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
        for seed in args.seeds:  # the contenders alternate seed by seed
            for name, options in contenders.items():
                runs[name].append(_same_budget(options, args.steps, seed))
                print(f"seed {seed}, {name}: {runs[name][-1][0]:.4f} bits/dim", flush=True)
        print("\n| attention | seeds | val bits/dim | time per step |")
        print("|---|---:|---:|---:|")
        for name, results in runs.items():
            bits, seconds = zip(*results, strict=True)
            print(f"| {name} | {len(bits)} | {spread(list(bits), 3)} | {statistics.median(seconds) * 1e3:.0f} ms |")
        full, local = ([bits for bits, _ in results] for results in runs.values())
        paired = [b - a for a, b in zip(full, local, strict=True)]
        print(f"\nlocal − full, paired by seed: {spread(paired, 4)} bits/dim")


def _config(side: int, **options) -> ImageTransformerConfig:
    return ImageTransformerConfig(**{**MODEL, **options}, height=side, width=side, channels=1, num_levels=256)


def _step_times(side: int, batch: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Median seconds of a training step and of a cached decoding step at the last positions, per attention.

    The two models alternate step by step, so both see the same machine load.
    """
    models, optimizers = {}, {}
    for attention in ("full", "local2d"):
        torch.manual_seed(0)
        models[attention] = ImageTransformer(_config(side, **(LOCAL if attention == "local2d" else {"attention": "full"})))
        optimizers[attention] = torch.optim.AdamW(models[attention].parameters(), lr=1e-4)
    tokens = torch.randint(0, 256, (batch, side * side))
    train: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(repeats + 1):
        for name, model in models.items():
            started = time.perf_counter()
            loss = F.cross_entropy(model(model.inputs(tokens)).flatten(0, 1), tokens.flatten())
            optimizers[name].zero_grad()
            loss.backward()
            optimizers[name].step()
            train[name].append(time.perf_counter() - started)
    decode: dict[str, list[float]] = {name: [] for name in models}
    with torch.no_grad():
        states = {}
        for name, model in models.items():
            model.eval()
            states[name] = model.new_state()
            model(model.inputs(tokens[:1])[:, : side * side - repeats - 1], state=states[name])  # prefill all but the end
        for position in range(side * side - repeats - 1, side * side):
            for name, model in models.items():
                started = time.perf_counter()
                model(tokens[:1, position - 1 : position], state=states[name])
                decode[name].append(time.perf_counter() - started)
    return {name: (statistics.median(train[name][1:]), statistics.median(decode[name][1:])) for name in models}


def _same_budget(options: dict, steps: int, seed: int) -> tuple[float, float]:
    """Trains one Image Transformer for ``steps`` steps from ``seed``; (validation bits/dim, seconds per step)."""
    pl.seed_everything(seed, verbose=False)
    data = ImageGenerationDataModule("fashion_mnist", batch_size=16, val_limit=500)
    config = ImageTransformerConfig(**{**MODEL, **options}, height=28, width=28, channels=1, num_levels=256)
    task = ImageGeneration(
        model=config, optimizer=lambda p: torch.optim.AdamW(p, lr=2e-3, betas=(0.9, 0.98), weight_decay=0.01),
        warmup_steps=30, num_samples=0,
    )  # fmt: skip
    trainer = pl.Trainer(max_steps=steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, gradient_clip_val=1.0)  # fmt: skip
    started = time.perf_counter()
    trainer.fit(task, data)
    seconds = (time.perf_counter() - started) / steps
    scorer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)  # all 500 images
    bits = scorer.validate(task, data, verbose=False)[0]["val_bpd"]
    return bits, seconds


if __name__ == "__main__":
    main()

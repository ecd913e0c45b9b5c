"""Image Transformer learning quality: bits/dim on the digits test split vs an independent-pixel baseline.

The baseline is the best model with no pixel interactions: one categorical distribution per
sub-pixel position, fitted on the training split (counts + add-alpha smoothing, alpha picked on
the validation split). The Image Transformer is the model of ``configs/image_generation.yaml``
trained on the training split for ``--epochs`` epochs; the checkpoint with the best validation
bits/dim is scored on the test split. Target: ours <= 0.75 × baseline. A grid of samples is
written to ``--grid``.

Usage (as in docs/benchmarks.md; takes about 5-10 minutes on 2 cores)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/image_generation.py
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml

from multimodal.data.images import load_digits_split
from multimodal.images import sample_images
from multimodal.models.config import ImageTransformerConfig
from multimodal.tokenizers.image import pixels_to_tokens
from multimodal.viz import image_grid_png
from tasks.datamodules import ImageGenerationDataModule
from tasks.image_generation import ImageGeneration

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "configs/image_generation.yaml")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--grid", type=Path, default=ROOT / "docs/images/digits_samples.png")
    parser.add_argument("--set", nargs="*", default=[], help="model overrides, e.g. dim=64 dropout=0.1")
    parser.add_argument("--lr", type=float, default=None, help="override the config's learning rate")
    parser.add_argument("--batch-size", type=int, default=None, help="override the config's batch size")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pl.seed_everything(0, verbose=False)

    baseline, alpha = independent_pixel_baseline()
    config = yaml.safe_load(args.config.read_text())
    batch_size = args.batch_size or config["data"]["init_args"]["batch_size"]
    data = ImageGenerationDataModule("digits", batch_size=batch_size)
    task = build_task(config, data, args.set, args.lr)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = pl.callbacks.ModelCheckpoint(dirpath=folder, monitor="val_bpd")
        trainer = pl.Trainer(max_epochs=args.epochs, logger=False, callbacks=[checkpoint, _Progress()],
                             gradient_clip_val=1.0, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
        trainer.fit(task, data)
        seconds = time.perf_counter() - started
        ours = trainer.test(task, data, ckpt_path="best", verbose=False)[0]["test_bpd"]
    generator = torch.Generator().manual_seed(0)
    samples = sample_images(task.model, 40, generator=generator)
    image_grid_png(samples, args.grid, nrow=10)
    parameters = sum(p.numel() for p in task.model.parameters())

    print(f"\ndigits test split (360 images, 8x8, 17 levels), bits per dimension; {args.epochs} epochs of "
          f"batch {batch_size}, lr {args.lr or config['model']['init_args']['optimizer']['init_args']['lr']} "
          f"in {seconds / 60:.1f} min on {args.threads} threads, {parameters / 1e3:.0f} k parameters\n")  # fmt: skip
    print("| model | test bits/dim | ratio to baseline |")
    print("|---|---|---|")
    print(f"| independent per-pixel categorical (add-{alpha:g} smoothing) | {baseline:.3f} | 1.00 |")
    print(f"| Image Transformer ({describe(task.config)}) | {ours:.3f} | {ours / baseline:.2f} |")
    print(
        f"\ntarget ours <= 0.75 x baseline: {'met' if ours <= 0.75 * baseline else 'NOT met'}; grid: {args.grid}"
    )


def independent_pixel_baseline() -> tuple[float, float]:
    """Test bits/dim of per-position categoricals fitted on train, smoothing picked on val."""
    splits = {
        name: pixels_to_tokens(load_digits_split(name, "uint8")[0], 17) for name in ("train", "val", "test")
    }
    counts = torch.zeros(64, 17, dtype=torch.float64)
    counts.scatter_add_(1, splits["train"].T, torch.ones(splits["train"].T.shape, dtype=torch.float64))

    def bits(alpha: float, split: str) -> float:
        probs = (counts + alpha) / (counts + alpha).sum(1, keepdim=True)
        return -probs.log().gather(1, splits[split].T).mean().item() / math.log(2)

    alpha = min((0.01, 0.03, 0.1, 0.3, 1.0), key=lambda a: bits(a, "val"))
    return bits(alpha, "test"), alpha


def build_task(config: dict, data: ImageGenerationDataModule, overrides: list[str], lr: float | None) -> ImageGeneration:
    """The task of the YAML config, with the data's sizes linked in as the CLI does."""
    init = config["model"]["init_args"]
    model = dict(init["model"])
    for override in overrides:
        key, value = override.split("=", 1)
        model[key] = yaml.safe_load(value)
    model.update(height=data.height, width=data.width, channels=data.channels, num_levels=data.num_levels,
                 num_classes=data.num_classes)  # fmt: skip
    optimizer_args = {**init["optimizer"]["init_args"], **({"lr": lr} if lr else {})}
    return ImageGeneration(
        model=ImageTransformerConfig(**model),
        optimizer=lambda params: torch.optim.AdamW(params, **optimizer_args),
        warmup_steps=init["warmup_steps"],
        num_samples=0,
    )


def describe(config: ImageTransformerConfig) -> str:
    return (f"{config.num_layers} layers, dim {config.dim}, {config.attention} "
            f"{list(config.local_query_shape)}+{list(config.local_memory_shape)}, position {config.position}")  # fmt: skip


class _Progress(pl.Callback):
    """One line per validation: epoch, the monitored metrics, minutes so far."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def on_validation_epoch_end(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        shown = {k: f"{float(v):.4f}" for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
        minutes = (time.perf_counter() - self.started) / 60
        print(f"epoch {trainer.current_epoch}: {shown} ({minutes:.1f} min)", flush=True)


if __name__ == "__main__":
    main()

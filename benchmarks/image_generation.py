"""Image generation learning quality on the digits: bits/dim of the Image Transformer, a PixelCNN and a per-pixel baseline.

Models, all trained on the training split (1,257 images, 8x8, 17 levels):

    transformer  the Image Transformer of ``configs/image_generation.yaml`` (the task's own loop)
    pixelcnn     a PixelCNN (van den Oord et al. 2016: a masked 5x5 convolution, then residual
                 blocks of 1x1 / masked 3x3 / 1x1 convolutions) of the Transformer's parameter
                 count, the same epochs, batch, AdamW and warm-up + cosine schedule
    per-pixel    one categorical per sub-pixel position, fitted by counting (add-alpha smoothing,
                 alpha chosen on the validation split): the best model with no pixel interactions

Each model keeps the epoch with the best validation bits/dim. Protocol (``benchmarks/protocol.py``):
``--stage select`` scores the validation split only (learning rates, overrides); ``--stage report``
trains ``--seeds`` and scores the test split once. Target: the Transformer <= 0.70 x the per-pixel
baseline on test. A grid of the Transformer's samples is written to ``--grid`` (first seed).

Usage (a Transformer run takes about 16 minutes on one thread, a PixelCNN run about 8)::

    .venv/bin/python benchmarks/image_generation.py --stage select --models pixelcnn --lr 1e-3 3e-3
    .venv/bin/python benchmarks/image_generation.py --stage report --models transformer --seeds 0 1 2
    .venv/bin/python benchmarks/image_generation.py --stage report --models pixelcnn --lr 3e-3 --seeds 0 1 2
    .venv/bin/python benchmarks/image_generation.py --table
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread, verdict

from multimodal.data.images import load_digits_split
from multimodal.images import sample_images
from multimodal.models.config import ImageTransformerConfig
from multimodal.tokenizers.image import pixels_to_tokens
from multimodal.viz import image_grid_png
from tasks.datamodules import ImageGenerationDataModule
from tasks.image_generation import ImageGeneration

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.70  # Transformer test bits/dim / per-pixel baseline


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", choices=["select", "report"], default="select")
    parser.add_argument("--models", nargs="+", default=["transformer"], choices=["transformer", "pixelcnn"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/image_generation.yaml")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--grid", type=Path, default=None, help="write a grid of Transformer samples here")
    parser.add_argument("--set", nargs="*", default=[], help="Transformer overrides, e.g. dim=64 dropout=0.1")
    parser.add_argument("--lr", type=float, nargs="+", default=[None], help="learning rates (default: the config's)")
    parser.add_argument("--batch-size", type=int, default=None, help="override the config's batch size")
    parser.add_argument("--ema", type=float, default=None, metavar="DECAY",
                        help="score an exponential moving average of the weights (both models), e.g. 0.999")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "image_generation.jsonl")
    parser.add_argument("--table", action="store_true", help="print the tables of --out and stop")
    args = parser.parse_args()
    if args.table:
        print(tables(load(args.out)))
        return
    if args.stage == "report" and len(args.lr) > 1:
        parser.error("--stage report: give the one learning rate chosen by --stage select")
    torch.set_num_threads(args.threads)
    config = yaml.safe_load(args.config.read_text())
    if not any(r["stage"] == "baseline" for r in load(args.out)):
        baseline, alpha = independent_pixel_baseline()
        record(args.out, {"model": "per-pixel", "alpha": alpha, "test_bpd": baseline}, "baseline")
    for seed in args.seeds:
        for name in args.models:
            for lr in args.lr:
                pl.seed_everything(seed, verbose=False)
                run = train_transformer if name == "transformer" else train_pixelcnn
                result = run(config, args, lr, test=args.stage == "report", grid=seed == args.seeds[0])
                overrides = (args.set if name == "transformer" else []) + ([f"ema={args.ema:g}"] if args.ema else [])
                result.update(model=name, seed=seed, overrides=overrides)
                record(args.out, result, args.stage)
                print({key: value for key, value in result.items()}, flush=True)
    print(tables(load(args.out)))


def train_transformer(config: dict, args: argparse.Namespace, lr: float | None, test: bool, grid: bool) -> dict:
    """The config's Image Transformer through its task; best-validation epoch, its val and (``test``) test bits/dim."""
    batch_size = args.batch_size or config["data"]["init_args"]["batch_size"]
    data = ImageGenerationDataModule("digits", batch_size=batch_size)
    task = build_task(config, data, args.set, lr)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = pl.callbacks.ModelCheckpoint(dirpath=folder, monitor="val_bpd")
        # With EMA, validation runs on the averaged weights and checkpoints hold them as their state_dict.
        averaging = [pl.callbacks.EMAWeightAveraging(decay=args.ema)] if args.ema else []
        trainer = pl.Trainer(max_epochs=args.epochs, logger=False, callbacks=[checkpoint, _Progress(), *averaging],
                             gradient_clip_val=1.0, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
        trainer.fit(task, data)
        minutes = (time.perf_counter() - started) / 60
        result = {"val_bpd": float(checkpoint.best_model_score), "minutes": minutes, "epochs": args.epochs,
                  "lr": lr or config["model"]["init_args"]["optimizer"]["init_args"]["lr"], "batch_size": batch_size,
                  "parameters": sum(p.numel() for p in task.model.parameters()), "describe": describe(task.config)}  # fmt: skip
        if test:  # a trainer without the averaging callback, which would reload the raw weights
            tester = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
            result["test_bpd"] = tester.test(task, data, ckpt_path=checkpoint.best_model_path, verbose=False)[0]["test_bpd"]
    if grid and args.grid:
        samples = sample_images(task.model, 40, generator=torch.Generator().manual_seed(0))
        image_grid_png(samples, args.grid, nrow=10)
    return result


def train_pixelcnn(config: dict, args: argparse.Namespace, lr: float | None, test: bool, grid: bool) -> dict:
    """A PixelCNN of the Transformer's size, the Transformer's recipe; best-validation epoch's bits/dim."""
    init = config["model"]["init_args"]
    batch_size = args.batch_size or config["data"]["init_args"]["batch_size"]
    lr = lr or init["optimizer"]["init_args"]["lr"]
    data = ImageGenerationDataModule("digits", batch_size=batch_size)
    target = sum(p.numel() for p in build_task(config, data, args.set, None).model.parameters())
    model = PixelCNN.matching(target, num_levels=17)
    splits = {name: pixels_to_tokens(load_digits_split(name, "uint8")[0], 17).view(-1, 1, 8, 8)
              for name in ("train", "val", "test")}  # fmt: skip
    optimizer_args = {**init["optimizer"]["init_args"], "lr": lr}
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}], **optimizer_args)
    steps_per_epoch = math.ceil(len(splits["train"]) / batch_size)
    total, warmup = args.epochs * steps_per_epoch, init["warmup_steps"]
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, warmup, total))
    average = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(args.ema)) if args.ema else None
    scored = average.module if average else model
    best, best_state = math.inf, None
    started = time.perf_counter()
    for _ in range(args.epochs):
        model.train()
        for batch in torch.randperm(len(splits["train"])).split(batch_size):
            loss = model.nll(splits["train"][batch])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
            if average:
                average.update_parameters(model)
        val = scored.bits_per_dim(splits["val"])
        if val < best:
            best, best_state = val, {key: value.clone() for key, value in scored.state_dict().items()}
    minutes = (time.perf_counter() - started) / 60
    model.load_state_dict(best_state)
    result = {"val_bpd": best, "minutes": minutes, "epochs": args.epochs, "lr": lr, "batch_size": batch_size,
              "parameters": sum(p.numel() for p in model.parameters()), "describe": model.describe()}  # fmt: skip
    if test:
        result["test_bpd"] = model.bits_per_dim(splits["test"])
    return result


class MaskedConv2d(nn.Conv2d):
    """A convolution that sees only pixels above, and to the left on the same row (``include_centre``: and itself)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, include_centre: bool) -> None:
        super().__init__(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        mask = torch.ones(kernel_size, kernel_size)
        centre = kernel_size // 2
        mask[centre, centre + int(include_centre) :] = 0
        mask[centre + 1 :] = 0
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        """``(batch, in, h, w) -> (batch, out, h, w)``."""
        return F.conv2d(x, self.weight * self.mask, self.bias, padding=self.padding)


class PixelCNN(nn.Module):
    """The PixelCNN baseline for one-channel images of ``num_levels`` intensities.

    A masked 5x5 convolution (type A: not the pixel itself), ``blocks`` residual blocks of 1x1 ->
    masked 3x3 (type B) -> 1x1 convolutions with ReLUs, and a 1x1 head to ``num_levels`` logits per
    pixel. Input: level ids ``(batch, 1, h, w)``; the network reads them scaled to ``[-1, 1]``.
    """

    def __init__(self, width: int, blocks: int, num_levels: int) -> None:
        super().__init__()
        self.width, self.blocks, self.num_levels = width, blocks, num_levels
        self.stem = MaskedConv2d(1, width, 5, include_centre=False)
        half = width // 2
        self.residual = nn.ModuleList(
            nn.Sequential(
                nn.ReLU(), nn.Conv2d(width, half, 1), nn.ReLU(),
                MaskedConv2d(half, half, 3, include_centre=True), nn.ReLU(), nn.Conv2d(half, width, 1),
            )
            for _ in range(blocks)
        )  # fmt: skip
        self.head = nn.Sequential(nn.ReLU(), nn.Conv2d(width, width, 1), nn.ReLU(), nn.Conv2d(width, num_levels, 1))

    def forward(self, levels: Tensor) -> Tensor:
        """Logits ``(batch, num_levels, h, w)`` for level ids ``(batch, 1, h, w)``."""
        x = self.stem(levels.float() / (self.num_levels - 1) * 2 - 1)
        for block in self.residual:
            x = x + block(x)
        return self.head(x)

    def nll(self, levels: Tensor) -> Tensor:
        """Mean negative log-likelihood in nats per sub-pixel."""
        return F.cross_entropy(self(levels), levels[:, 0])

    @torch.no_grad()
    def bits_per_dim(self, levels: Tensor, batch_size: int = 256) -> float:
        """Bits per sub-pixel over every image of ``levels`` ``(n, 1, h, w)``."""
        self.eval()
        total = sum(F.cross_entropy(self(chunk), chunk[:, 0], reduction="sum").item()
                    for chunk in levels.split(batch_size))  # fmt: skip
        return total / levels.numel() / math.log(2)

    def describe(self) -> str:
        return f"PixelCNN, width {self.width}, {self.blocks} residual blocks"

    @classmethod
    def matching(cls, parameters: int, num_levels: int, blocks: int = 12) -> PixelCNN:
        """The width (even) whose model has the parameter count closest to ``parameters``."""
        width = min(range(16, 513, 2), key=lambda w: abs(_count(cls(w, blocks, num_levels)) - parameters))
        return cls(width, blocks, num_levels)


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min((step - warmup) / max(total - warmup, 1), 1.0)))


def tables(results: list[dict]) -> str:
    """Selection (validation) and report (test, mean ± sd over seeds) tables, with the ratio to the per-pixel baseline."""
    baseline = next((r for r in results if r["stage"] == "baseline"), None)
    lines = ["Selection on the validation split (best epoch):", "",
             "| model | parameters | lr | seed | validation bits/dim |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for r in (r for r in results if r["stage"] == "select"):
        lines.append(f"| {r['describe']} {' '.join(r['overrides'])} | {r['parameters']:,} | {r['lr']:g} | "
                     f"{r['seed']} | {r['val_bpd']:.3f} |")  # fmt: skip
    report = [r for r in results if r["stage"] == "report"]
    if report and baseline:
        lines += ["", "Report on the 360 test images (mean ± sd over seeds):", "",
                  "| model | parameters | lr | seeds | minutes | validation bits/dim | test bits/dim | ratio to per-pixel |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|",
                  f"| independent per-pixel categorical (add-{baseline['alpha']:g}) | 4,352 | - | - | - | - | "
                  f"{baseline['test_bpd']:.3f} | 1.00 |"]  # fmt: skip
        groups: dict[str, list[dict]] = {}
        for r in report:
            groups.setdefault(f"{r['describe']} {' '.join(r['overrides'])}".strip(), []).append(r)
        for label, group in groups.items():
            tests = [r["test_bpd"] for r in group]
            lines.append(f"| {label} | {group[0]['parameters']:,} | {group[0]['lr']:g} | {len(group)} | "
                         f"{spread([r['minutes'] for r in group], 1)} | {spread([r['val_bpd'] for r in group], 3)} | "
                         f"{spread(tests, 3)} | {spread([t / baseline['test_bpd'] for t in tests], 3)} |")  # fmt: skip
        transformer = [r["test_bpd"] / baseline["test_bpd"] for r in report if r["model"] == "transformer"]
        if transformer:
            lines.append(f"\nImage Transformer / per-pixel baseline <= {TARGET}: {verdict(transformer, TARGET)}")
    return "\n".join(lines) + "\n"


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

"""Super-resolution learning quality: PSNR / SSIM on the held-out skimage photos, ours vs bicubic.

Trains the regression model of ``configs/super_resolution.yaml`` on random crops of the training
photos for ``--epochs`` epochs, then upscales each *whole* held-out photo (chelsea, camera, gravel;
never seen in training) with the tiled :func:`multimodal.images.upscale` and scores it against the
original, next to bicubic upsampling of the same low-resolution input. Metrics: RGB in ``[0, 1]``,
whole image, no border shave (torchmetrics). Target: ours >= bicubic + 1.0 dB PSNR. A side-by-side
crop (bicubic | ours | original) is written to ``--picture``.

Usage (as in docs/benchmarks.md; about 9 minutes on one thread)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/super_resolution.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

from multimodal.data.images import SKIMAGE_HELD_OUT_PHOTOS, bicubic_downsample, skimage_photos
from multimodal.images import upscale
from multimodal.models.config import SuperResolutionConfig
from multimodal.models.super_resolution import bicubic_upsample
from multimodal.viz import side_by_side_png
from tasks.datamodules import SuperResolutionDataModule
from tasks.super_resolution import SuperResolution, _to_tensor

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "configs/super_resolution.yaml")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--scale", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--picture", type=Path, default=ROOT / "docs/images/super_resolution_x2.png")
    parser.add_argument("--set", nargs="*", default=[], help="model overrides, e.g. dim=96 num_layers=6")
    parser.add_argument("--lr", type=float, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pl.seed_everything(0, verbose=False)

    config = yaml.safe_load(args.config.read_text())
    data = SuperResolutionDataModule(**{**config["data"]["init_args"], "scale": args.scale})
    task = build_task(config, data, args.set, args.lr)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        trainer = pl.Trainer(max_epochs=args.epochs, logger=False, callbacks=[_Progress()], gradient_clip_val=1.0, default_root_dir=folder,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
        trainer.fit(task, data)
    seconds = time.perf_counter() - started

    rows, crops = [], []
    model = task.model.eval()
    for name, photo in zip(SKIMAGE_HELD_OUT_PHOTOS, skimage_photos(SKIMAGE_HELD_OUT_PHOTOS), strict=True):
        original = _to_tensor(photo.convert("RGB" if data.channels == 3 else "L"))
        height, width = (side // args.scale * args.scale for side in original.shape[-2:])
        original = original[:, :height, :width]
        low_res = bicubic_downsample(original, args.scale)
        started_photo = time.perf_counter()
        ours = upscale(model, low_res)
        upscale_seconds = time.perf_counter() - started_photo
        bicubic = bicubic_upsample(low_res[None], args.scale)[0]
        scores = [_scores(image, original) for image in (bicubic, ours)]
        rows.append((name, f"{width}x{height}", *scores, upscale_seconds))
        crops.append((bicubic, ours, original))

    print(f"\nsuper-resolution x{args.scale}, held-out skimage photos (whole images, RGB, no border shave); "
          f"trained {args.epochs} epochs in {seconds / 60:.1f} min on {args.threads} threads, "
          f"{sum(p.numel() for p in model.parameters()) / 1e3:.0f} k parameters\n")  # fmt: skip
    print("| photo | size | bicubic PSNR | ours PSNR | gain | bicubic SSIM | ours SSIM | upscale time |")
    print("|---|---|---|---|---|---|---|---|")
    for name, size, (psnr_b, ssim_b), (psnr_o, ssim_o), upscale_seconds in rows:
        print(f"| {name} | {size} | {psnr_b:.2f} dB | {psnr_o:.2f} dB | {psnr_o - psnr_b:+.2f} dB | "
              f"{ssim_b:.4f} | {ssim_o:.4f} | {upscale_seconds:.1f} s |")  # fmt: skip
    mean = [sum(row[i][j] for row in rows) / len(rows) for i in (2, 3) for j in (0, 1)]
    print(f"| **mean** | | {mean[0]:.2f} dB | {mean[2]:.2f} dB | **{mean[2] - mean[0]:+.2f} dB** | "
          f"{mean[1]:.4f} | {mean[3]:.4f} | |")  # fmt: skip
    print(f"\ntarget ours >= bicubic + 1.0 dB: {'met' if mean[2] - mean[0] >= 1.0 else 'NOT met'}")
    bicubic, ours, original = crops[0]  # chelsea: the cat's face
    window = (slice(None), slice(60, 160), slice(150, 270))
    side_by_side_png([("bicubic", bicubic[window]), ("ours", ours[window]), ("original", original[window])],
                     args.picture, pixel_scale=2)  # fmt: skip
    print(f"picture: {args.picture}")


def build_task(config: dict, data: SuperResolutionDataModule, overrides: list[str], lr: float | None):
    """The task of the YAML config, with the data's sizes linked in as the CLI does."""
    init = config["model"]["init_args"]
    model = dict(init["model"])
    for override in overrides:
        key, value = override.split("=", 1)
        model[key] = yaml.safe_load(value)
    model.update(scale=data.scale, channels=data.channels, crop_size=data.crop_size)
    optimizer_args = {**init["optimizer"]["init_args"], **({"lr": lr} if lr else {})}
    return SuperResolution(
        model=SuperResolutionConfig(**model),
        optimizer=lambda params: torch.optim.AdamW(params, **optimizer_args),
        warmup_steps=init["warmup_steps"],
    )


def _scores(image: torch.Tensor, original: torch.Tensor) -> tuple[float, float]:
    psnr = peak_signal_noise_ratio(image[None], original[None], data_range=1.0).item()
    ssim = structural_similarity_index_measure(image[None], original[None], data_range=1.0).item()
    return psnr, ssim


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

"""Super-resolution: regression (default) or a conditional Image Transformer, always next to bicubic.

``multimodal fit --config configs/super_resolution.yaml`` trains ×2 regression on crops of the
scikit-image photos; ``multimodal generate --checkpoint CKPT --input IMAGE --out DIR`` upscales a
whole image of any size (tiled, seamless) and writes a side-by-side PNG (bicubic | ours).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from PIL import Image
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure
from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

from multimodal.data.images import SKIMAGE_HELD_OUT_PHOTOS, bicubic_downsample, skimage_photos
from multimodal.layers import compile_blocks
from multimodal.models.config import SuperResolutionConfig
from multimodal.models.super_resolution import bicubic_upsample, build_super_resolution
from multimodal.pixels import sample_high_res, upscale
from multimodal.tokenizers.image import pixels_to_tokens
from multimodal.viz import side_by_side_png
from tasks.causal_lm import adamw
from tasks.checkpoint import SelfContainedCheckpoint
from tasks.finetuning import FineTuneConfig, FineTuningMixin, finetune_hparams
from tasks.optim import warmup_cosine
from tasks.outputs import log_folder


class SuperResolution(FineTuningMixin, SelfContainedCheckpoint, pl.LightningModule):
    """Trains a super-resolution model on ``(low_res, high_res)`` crops and scores it against bicubic.

    ``model.method="regression"``: L1 loss; every validation crop is upscaled. ``"autoregressive"``:
    cross-entropy per high-resolution sub-pixel (``train_bpd``, ``val_bpd``); the first
    ``num_val_samples`` crops of each validation are *sampled* (slow: one step per sub-pixel).
    Either way ``val_psnr`` / ``val_ssim`` (RGB in ``[0, 1]``, per crop, averaged; torchmetrics) are
    logged next to ``val_psnr_bicubic`` / ``val_ssim_bicubic`` of bicubic upsampling on the same
    crops, and ``val_psnr_gain`` is their difference. A side-by-side PNG (bicubic | ours | original)
    of the first validation crop goes to ``<log_dir>/samples/epoch_<n>.png``.

    Args:
        model: Model config; ``scale``, ``channels`` and ``crop_size`` are linked from the data.
        optimizer: Called with parameter groups; weight decay applies to 2-D weights only.
        warmup_steps: Linear warm-up, then cosine decay to 10 % (by steps or ``max_time``).
        sample_temperature: Autoregressive: temperature of validation and default generation samples.
        num_val_samples: Autoregressive: validation crops sampled for PSNR / SSIM.
        finetune: Pretrained weights, frozen parts, LoRA, learning-rate split (see :mod:`tasks.finetuning`);
        compile: Compile every Transformer block with ``torch.compile`` (:func:`~multimodal.layers.compile_blocks`);
            the first steps pay for compilation.
            the autoregressive model has two stacks, so ``finetune.init_stack`` says which one
            (``encoder`` or ``decoder``) receives the blocks.
    """

    #: Data-module attribute -> init argument, linked by the CLI at instantiation.
    data_links: ClassVar[dict[str, str]] = {
        "scale": "model.scale",
        "channels": "model.channels",
        "crop_size": "model.crop_size",
    }

    def __init__(
        self,
        model: SuperResolutionConfig | None = None,
        optimizer: OptimizerCallable = adamw,
        warmup_steps: int = 100,
        sample_temperature: float = 0.8,
        num_val_samples: int = 4,
        finetune: FineTuneConfig | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        config = (
            SuperResolutionConfig(**model) if isinstance(model, dict) else (model or SuperResolutionConfig())
        )
        # Plain types only, so checkpoints load with torch.load(weights_only=True).
        self.save_hyperparameters({
            "model": asdict(config), "warmup_steps": warmup_steps, "sample_temperature": sample_temperature,
            "num_val_samples": num_val_samples, "finetune": finetune_hparams(finetune), "compile": compile,
        })  # fmt: skip
        self.config = config
        self.model = build_super_resolution(config)
        self.configure_finetuning(finetune)
        if compile:
            compile_blocks(self.model)
        self.optimizer_factory = optimizer
        self.warmup_steps = warmup_steps
        self.sample_temperature, self.num_val_samples = sample_temperature, num_val_samples
        self.metrics = torch.nn.ModuleDict({
            "psnr": PeakSignalNoiseRatio(data_range=1.0, dim=(1, 2, 3)),
            "ssim": StructuralSimilarityIndexMeasure(data_range=1.0),
            "psnr_bicubic": PeakSignalNoiseRatio(data_range=1.0, dim=(1, 2, 3)),
            "ssim_bicubic": StructuralSimilarityIndexMeasure(data_range=1.0),
        })  # fmt: skip
        self._sums = torch.zeros(2, dtype=torch.float64)  # autoregressive: summed NLL (nats), sub-pixels
        self._first_crop: tuple[Tensor, Tensor, Tensor] | None = None

    @property
    def autoregressive(self) -> bool:
        """Whether the model is the conditional Image Transformer."""
        return self.config.method == "autoregressive"

    def forward(self, low_res: Tensor) -> Tensor:
        """High-resolution images ``(batch, c, h * scale, w * scale)`` in ``[0, 1]`` (sampled if autoregressive)."""
        if self.autoregressive:
            return sample_high_res(self.model, low_res, temperature=self.sample_temperature)
        return self.model(low_res).clamp(0, 1)

    def loss(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
        """Regression: mean L1. Autoregressive: summed NLL (nats) over the sub-pixels, and their count."""
        low_res, high_res = batch
        if not self.autoregressive:
            return F.l1_loss(self.model(low_res), high_res), 1
        tokens = pixels_to_tokens(high_res, self.config.num_levels).flatten(1)
        logits = self.model(self.model.inputs(tokens), self.model.condition(low_res))
        return F.cross_entropy(
            logits.flatten(0, 1).float(), tokens.flatten(), reduction="sum"
        ), tokens.numel()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss, count = self.loss(batch)
        if self.autoregressive:
            loss = loss / count
            self.log("train_bpd", loss / math.log(2), prog_bar=True)
        else:
            self.log("train_l1", loss, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._sums = torch.zeros(2, dtype=torch.float64, device=self.device)
        self._first_crop = None

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        low_res, high_res = batch
        if self.autoregressive:
            nll, count = self.loss(batch)
            self._sums += torch.tensor([nll.item(), float(count)], dtype=torch.float64, device=self.device)
            if batch_idx > 0 or self.num_val_samples < 1:
                return
            low_res, high_res = low_res[: self.num_val_samples], high_res[: self.num_val_samples]
            ours = self(low_res)
        else:
            predicted = self.model(low_res)
            self.log("val_l1", F.l1_loss(predicted, high_res), batch_size=len(low_res))
            ours = predicted.clamp(0, 1)
        bicubic = bicubic_upsample(low_res, self.config.scale)
        self.metrics["psnr"].update(ours, high_res)
        self.metrics["ssim"].update(ours, high_res)
        self.metrics["psnr_bicubic"].update(bicubic, high_res)
        self.metrics["ssim_bicubic"].update(bicubic, high_res)
        if self._first_crop is None:
            self._first_crop = (bicubic[0].cpu(), ours[0].cpu(), high_res[0].cpu())

    def on_validation_epoch_end(self) -> None:
        if self.autoregressive:
            nll = (self._sums[0] / self._sums[1].clamp(min=1)).item()
            self.log("val_bpd", nll / math.log(2), prog_bar=True)
        if self._first_crop is None:
            return
        values = {name: metric.compute().item() for name, metric in self.metrics.items()}
        for metric in self.metrics.values():
            metric.reset()
        for name, value in values.items():
            self.log(f"val_{name}", value, prog_bar=name == "psnr")
        self.log("val_psnr_gain", values["psnr"] - values["psnr_bicubic"], prog_bar=True)
        if not self.trainer.sanity_checking and self.trainer.is_global_zero:
            folder = log_folder(self.trainer) / "samples"
            bicubic, ours, original = self._first_crop
            side_by_side_png([("bicubic", bicubic), ("ours", ours), ("original", original)],
                             folder / f"epoch_{self.trainer.current_epoch}.png", pixel_scale=4)  # fmt: skip

    def configure_optimizers(self):
        optimizer = self.finetuning_optimizer(self.optimizer_factory)  # decay on matrices, pretrained lr scaled
        return {
            "optimizer": optimizer,
            "lr_scheduler": warmup_cosine(optimizer, self.trainer, self.warmup_steps),
        }

    # ----------------------------------------------------------------------------------------------
    # multimodal generate
    # ----------------------------------------------------------------------------------------------

    @staticmethod
    def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
        """Options of ``multimodal generate`` for super-resolution checkpoints."""
        parser.add_argument("--input", type=Path, default=None,
                            help="image to upscale (any size); default: the held-out photo 'chelsea', evaluated")  # fmt: skip
        parser.add_argument("--evaluate", action="store_true",
                            help="treat --input as the ground truth: downsample it first, report PSNR/SSIM vs bicubic")  # fmt: skip
        parser.add_argument("--tile", type=int, default=None, help="tile side in low-resolution pixels")
        parser.add_argument("--overlap", type=int, default=None, help="overlap of neighbouring tiles")
        parser.add_argument("--batch-size", type=int, default=8, help="tiles per forward pass")

    def run_generate(self, tokenizer: None, args: argparse.Namespace) -> None:
        """Writes ``<name>_x<scale>.png`` and ``<name>_side_by_side.png`` (bicubic | ours [| original])."""
        scale, channels = self.config.scale, self.config.channels
        if args.input is None:
            name, evaluate = SKIMAGE_HELD_OUT_PHOTOS[0], True
            image = skimage_photos([name])[0]
        else:
            name, evaluate = args.input.stem, args.evaluate
            image = Image.open(args.input)
        original = _to_tensor(image.convert("L" if channels == 1 else "RGB"))
        if evaluate:
            height, width = original.shape[-2] // scale * scale, original.shape[-1] // scale * scale
            original = original[:, :height, :width]
            low_res = bicubic_downsample(original, scale)
        else:
            low_res = original
        generator = torch.Generator().manual_seed(args.seed) if args.seed is not None else None
        sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, generator=generator)
        ours = upscale(self.model, low_res, tile=args.tile, overlap=args.overlap, batch_size=args.batch_size,
                       progress=True, **(sampling if self.autoregressive else {}))  # fmt: skip
        bicubic = bicubic_upsample(low_res[None], scale)[0]
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        Image.fromarray(_to_uint8(ours)).save(out / f"{name}_x{scale}.png")
        panels = [("bicubic", bicubic), ("ours", ours)] + ([("original", original)] if evaluate else [])
        side_by_side_png(panels, out / f"{name}_side_by_side.png")
        print(
            f"wrote {out / f'{name}_x{scale}.png'} ({ours.shape[-1]}x{ours.shape[-2]}) and {name}_side_by_side.png"
        )
        if evaluate:
            for label, image_ in (("bicubic", bicubic), ("ours", ours)):
                psnr = peak_signal_noise_ratio(image_[None], original[None], data_range=1.0).item()
                ssim = structural_similarity_index_measure(
                    image_[None], original[None], data_range=1.0
                ).item()
                print(f"{label:>8}: PSNR {psnr:.2f} dB, SSIM {ssim:.4f}")


def _to_tensor(image: Image.Image) -> Tensor:
    array = np.asarray(image, dtype=np.float32) / 255
    return torch.from_numpy(array[None] if array.ndim == 2 else array.transpose(2, 0, 1).copy())


def _to_uint8(image: Tensor) -> np.ndarray:
    array = (image.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    return array[0] if array.shape[0] == 1 else array.transpose(1, 2, 0)

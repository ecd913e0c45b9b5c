"""Super-resolution next to bicubic: a regression task and an autoregressive (conditional Image Transformer) task.

``multimodal fit --config configs/super_resolution.yaml`` trains ×2 regression on crops of the
scikit-image photos (:class:`SuperResolution`); ``configs/super_resolution_autoregressive.yaml``
trains the conditional Image Transformer (:class:`AutoregressiveSuperResolution`). ``multimodal
generate --checkpoint CKPT --input IMAGE --out DIR`` upscales a whole image of any size (tiled,
seamless) with either and writes a side-by-side PNG (bicubic | ours) (:mod:`tasks.commands.images`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

from multimodal.images import sample_high_res
from multimodal.images.metrics import psnr_y
from multimodal.models.config import (
    ConditionalSuperResolutionConfig,
    SuperResolutionConfig,
    legacy_super_resolution_config,
)
from multimodal.models.super_resolution import bicubic_upsample, build_super_resolution
from multimodal.tokenizers.image import pixels_to_tokens
from multimodal.viz import side_by_side_png
from tasks.base import Task, adamw, task_arguments
from tasks.finetune import FineTuneConfig
from tasks.outputs import log_folder, show_image


class _SuperResolutionTask(Task):
    """What both super-resolution tasks share: PSNR / SSIM next to bicubic, the sample PNG.

    ``val_psnr`` / ``val_ssim`` (RGB in ``[0, 1]``, per crop, averaged; torchmetrics) are logged next
    to ``val_psnr_bicubic`` / ``val_ssim_bicubic`` of bicubic upsampling on the same crops, and
    ``val_psnr_gain`` is their difference. A side-by-side PNG (bicubic | ours | original) of the
    first validation crop goes to ``<log_dir>/samples/epoch_<n>.png``.
    """

    data_links: ClassVar[dict[str, str]] = {
        "scale": "model.scale",
        "channels": "model.channels",
        "crop_size": "model.crop_size",
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metrics = torch.nn.ModuleDict({
            "psnr": PeakSignalNoiseRatio(data_range=1.0, dim=(1, 2, 3)),
            "ssim": StructuralSimilarityIndexMeasure(data_range=1.0),
            "psnr_bicubic": PeakSignalNoiseRatio(data_range=1.0, dim=(1, 2, 3)),
            "ssim_bicubic": StructuralSimilarityIndexMeasure(data_range=1.0),
            # As SR papers report it: on the luma channel, the border (scale pixels) shaved.
            "psnr_y": MeanMetric(),
            "psnr_y_bicubic": MeanMetric(),
        })  # fmt: skip
        self._first_crop: tuple[Tensor, Tensor, Tensor] | None = None

    def build_model(self, config):
        return build_super_resolution(config)

    @classmethod
    def checkpoint_class(cls, hyper_parameters: dict[str, Any]) -> tuple[type, dict[str, Any]]:
        """Checkpoints from before the split name ``SuperResolution`` for both methods: pick by ``method``."""
        model = hyper_parameters.get("model") or {}
        if "method" not in model:
            return cls, hyper_parameters
        config = legacy_super_resolution_config(model)
        task = AutoregressiveSuperResolution if isinstance(config, ConditionalSuperResolutionConfig) else SuperResolution
        arguments = {**hyper_parameters, "model": dataclasses.asdict(config)}
        if task is SuperResolution:
            arguments.pop("sample_temperature", None), arguments.pop("num_val_samples", None)
        return task, arguments

    def on_validation_epoch_start(self) -> None:
        super().on_validation_epoch_start()
        self._first_crop = None

    def update_image_metrics(self, low_res: Tensor, ours: Tensor, high_res: Tensor) -> None:
        """Adds one batch of upscaled crops (and bicubic's) to the PSNR / SSIM of the epoch."""
        bicubic = bicubic_upsample(low_res, self.config.scale)
        self.metrics["psnr"].update(ours, high_res)
        self.metrics["ssim"].update(ours, high_res)
        self.metrics["psnr_bicubic"].update(bicubic, high_res)
        self.metrics["ssim_bicubic"].update(bicubic, high_res)
        self.metrics["psnr_y"].update(psnr_y(ours.float(), high_res.float(), self.config.scale))
        self.metrics["psnr_y_bicubic"].update(psnr_y(bicubic.float(), high_res.float(), self.config.scale))
        if self._first_crop is None:
            self._first_crop = (bicubic[0].cpu(), ours[0].cpu(), high_res[0].cpu())

    def log_image_metrics(self) -> None:
        """Logs the epoch's PSNR / SSIM (ours, bicubic, gain) and writes the side-by-side PNG.

        Every process computes the metrics (a collective), also one that evaluated no crop.
        """
        if getattr(self, "num_val_samples", 1) < 1 or (self.trainer.sanity_checking and self._first_crop is None):
            return  # no crop was upscaled anywhere
        values = {name: metric.compute().item() for name, metric in self.metrics.items()}
        for metric in self.metrics.values():
            metric.reset()
        for name, value in values.items():
            self.log(f"val_{name}", value, prog_bar=name == "psnr")
        self.log("val_psnr_gain", values["psnr"] - values["psnr_bicubic"], prog_bar=True)
        if not self.trainer.sanity_checking and self.trainer.is_global_zero and self._first_crop is not None:
            folder = log_folder(self.trainer) / "samples"
            bicubic, ours, original = self._first_crop
            path = folder / f"epoch_{self.trainer.current_epoch}.png"
            side_by_side_png([("bicubic", bicubic), ("ours", ours), ("original", original)], path, pixel_scale=4)
            show_image(self.trainer, "samples/bicubic_ours_original", path)


class SuperResolution(_SuperResolutionTask):
    """Regression super-resolution (:class:`~multimodal.models.super_resolution.SuperResolutionRegressor`).

    Trained with L1 (``train_loss``, ``val_l1``); every validation crop is upscaled for PSNR / SSIM.

    Args:
        model: Model config; ``scale``, ``channels`` and ``crop_size`` are linked from the data.
        optimizer: Called with parameter groups; weight decay applies to 2-D weights only.
        warmup_steps: Linear warm-up, then cosine decay to 10 % (by steps or ``max_time``).
        finetune: Pretrained weights, frozen parts, LoRA, learning-rate split (see :mod:`tasks.finetune`).
        compile: Compile every Transformer block with ``torch.compile`` (:func:`~multimodal.layers.compile_blocks`);
            the first steps pay for compilation.
    """

    config_class = SuperResolutionConfig

    def __init__(
        self,
        model: SuperResolutionConfig | None = None,
        optimizer: OptimizerCallable = adamw,
        warmup_steps: int = 100,
        finetune: FineTuneConfig | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__(model, optimizer, warmup_steps, finetune, compile)

    def forward(self, low_res: Tensor) -> Tensor:
        """High-resolution images ``(batch, c, h * scale, w * scale)`` in ``[0, 1]``."""
        return self.model(low_res).clamp(0, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        low_res, high_res = batch
        loss = F.l1_loss(self.model(low_res), high_res)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        low_res, high_res = batch
        predicted = self.model(low_res)
        self.log("val_l1", F.l1_loss(predicted, high_res), batch_size=len(low_res))
        self.update_image_metrics(low_res, predicted.clamp(0, 1), high_res)

    def on_validation_epoch_end(self) -> None:
        self.log_image_metrics()


class AutoregressiveSuperResolution(_SuperResolutionTask):
    """The conditional Image Transformer (:class:`~multimodal.models.super_resolution.ConditionalImageTransformer`).

    Trained with cross-entropy per high-resolution sub-pixel (``train_loss`` in nats, ``train_bpd``; ``val_bpd`` over every
    validation sub-pixel, gathered over processes); the first ``num_val_samples`` crops of each
    validation are *sampled* for PSNR / SSIM (slow: one step per sub-pixel).

    Args:
        model: Model config; ``scale``, ``channels`` and ``crop_size`` are linked from the data.
        optimizer: Called with parameter groups; weight decay applies to 2-D weights only.
        warmup_steps: Linear warm-up, then cosine decay to 10 % (by steps or ``max_time``).
        sample_temperature: Temperature of validation and default generation samples.
        num_val_samples: Validation crops sampled for PSNR / SSIM.
        finetune: Pretrained weights, frozen parts, LoRA, learning-rate split (see :mod:`tasks.finetune`);
            the model has two stacks, so ``finetune.init_stack`` says which one (``encoder`` or
            ``decoder``) receives the blocks.
        compile: Compile every Transformer block with ``torch.compile`` (:func:`~multimodal.layers.compile_blocks`);
            the first steps pay for compilation.
    """

    config_class = ConditionalSuperResolutionConfig
    evaluation_sum_names: ClassVar[tuple[str, ...]] = ("nll", "subpixels")

    def __init__(
        self,
        model: ConditionalSuperResolutionConfig | None = None,
        optimizer: OptimizerCallable = adamw,
        warmup_steps: int = 100,
        sample_temperature: float = 0.8,
        num_val_samples: int = 4,
        finetune: FineTuneConfig | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__(model, optimizer, warmup_steps, finetune, compile, settings=task_arguments(locals()))

    def forward(self, low_res: Tensor) -> Tensor:
        """Sampled high-resolution images ``(batch, c, h * scale, w * scale)`` in ``[0, 1]``."""
        return sample_high_res(self.model, low_res, temperature=self.sample_temperature)

    def nll(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
        """Summed NLL (nats) over the high-resolution sub-pixels of a batch, and their count."""
        low_res, high_res = batch
        tokens = pixels_to_tokens(high_res, self.config.num_levels).flatten(1)
        logits = self.model(self.model.inputs(tokens), self.model.condition(low_res))
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten(), reduction="sum"), tokens.numel()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        nll, count = self.nll(batch)
        loss = nll / count
        self.log("train_loss", loss)
        self.log("train_bpd", loss / math.log(2), prog_bar=True)
        return loss

    def evaluation_sums(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Summed NLL (nats) and the number of high-resolution sub-pixels of a batch."""
        nll, count = self.nll(batch)
        return torch.stack([nll.detach().double(), nll.new_tensor(count, dtype=torch.float64)])

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        if batch_idx > 0 or self.num_val_samples < 1:
            return
        low_res, high_res = (images[: self.num_val_samples] for images in batch)
        self.update_image_metrics(low_res, self(low_res), high_res)

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        """Logs ``val_bpd`` (bits per high-resolution sub-pixel) and the sampled images' PSNR / SSIM."""
        self.log(f"{stage}_bpd", sums["nll"] / max(sums["subpixels"], 1.0) / math.log(2), prog_bar=True, sync_dist=False)
        if stage == "val":  # images are sampled on the first validation batch only
            self.log_image_metrics()

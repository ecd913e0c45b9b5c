"""Super-resolution next to bicubic: a regression task and an autoregressive (conditional Image Transformer) task.

``multimodal fit --config configs/super_resolution.yaml`` trains ×2 regression on crops of the
scikit-image photos (:class:`SuperResolution`); ``configs/super_resolution_autoregressive.yaml``
trains the conditional Image Transformer (:class:`AutoregressiveSuperResolution`). ``multimodal
generate --checkpoint CKPT --input IMAGE --out DIR`` upscales a whole image of any size (tiled,
seamless) with either and writes a side-by-side PNG (bicubic | ours).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure
from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

from multimodal.data.image_folder import to_mode
from multimodal.data.images import SKIMAGE_HELD_OUT_PHOTOS, bicubic_downsample, skimage_photos
from multimodal.images import check_output_size, sample_high_res, upscale
from multimodal.limits import MAX_BATCH_SIZE, MAX_OUTPUT_PIXELS
from multimodal.models.config import (
    ConditionalSuperResolutionConfig,
    SuperResolutionConfig,
    legacy_super_resolution_config,
)
from multimodal.models.super_resolution import bicubic_upsample, build_super_resolution
from multimodal.sr_metrics import psnr_y
from multimodal.tokenizers.image import pixels_to_tokens
from multimodal.viz import side_by_side_png
from tasks.arguments import count, non_negative_int, positive_int
from tasks.base import Task, adamw
from tasks.finetune import FineTuneConfig
from tasks.outputs import claim_outputs, log_folder, show_image


class _SuperResolutionTask(Task):
    """What both super-resolution tasks share: PSNR / SSIM next to bicubic, the sample PNG, ``generate``.

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

    def sampling_options(self, args: argparse.Namespace) -> dict[str, Any]:
        """Keyword arguments of :func:`multimodal.images.upscale` beyond the tiling (sampling, if any)."""
        return {}

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
        parser.add_argument("--tile", type=positive_int, default=None, help="tile side in low-resolution pixels")
        parser.add_argument("--overlap", type=non_negative_int, default=None, help="overlap of neighbouring tiles")
        parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8,
                            help=f"tiles per forward pass (at most {MAX_BATCH_SIZE:,})")  # fmt: skip
        parser.add_argument("--max-output-pixels", type=positive_int, default=MAX_OUTPUT_PIXELS,
                            help=f"refuse an input whose upscaled image has more pixels (default "
                                 f"{MAX_OUTPUT_PIXELS:,} = 4096x4096, checked from the file's header; "
                                 f"each pixel takes about 60 bytes)")  # fmt: skip

    def run_generate(self, tokenizer: None, args: argparse.Namespace) -> None:
        """Writes ``<name>_x<scale>.png`` and ``<name>_side_by_side.png`` (bicubic | ours [| original])."""
        scale, channels = self.config.scale, self.config.channels
        if args.input is None:
            name, evaluate = SKIMAGE_HELD_OUT_PHOTOS[0], True
            image = skimage_photos([name])[0]
        else:
            name, evaluate = args.input.stem, args.evaluate

            def check_size(width: int, height: int) -> None:  # from the header: a huge image is never decoded
                low_height, low_width = (height // scale, width // scale) if evaluate else (height, width)
                check_output_size(low_height, low_width, scale, args.max_output_pixels, str(args.input),
                                  raise_with="--max-output-pixels (about 60 bytes per pixel)")  # fmt: skip

            image = _read_image(args.input, check_size)
        original = _to_tensor(to_mode(image, "L" if channels == 1 else "RGB"))
        if evaluate:
            height, width = original.shape[-2] // scale * scale, original.shape[-1] // scale * scale
            if min(height, width) < 8 * scale:
                raise ValueError(f"{args.input or name}: {original.shape[-1]}x{original.shape[-2]} pixels is too small to "
                                 f"evaluate x{scale} (at least {8 * scale}x{8 * scale}); leave out --evaluate to upscale it")  # fmt: skip
            original = original[:, :height, :width]
            low_res = bicubic_downsample(original, scale)
        else:
            low_res = original
        out = Path(args.out)
        claim_outputs([out / f"{name}_x{scale}.png", out / f"{name}_side_by_side.png"], args.overwrite)
        ours = upscale(self.model, low_res.to(self.device), tile=args.tile, overlap=args.overlap,
                       batch_size=args.batch_size, progress=True, max_output_pixels=args.max_output_pixels,
                       **self.sampling_options(args)).cpu()  # fmt: skip
        bicubic = bicubic_upsample(low_res[None], scale)[0]
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
        settings = {"sample_temperature": sample_temperature, "num_val_samples": num_val_samples}
        super().__init__(model, optimizer, warmup_steps, finetune, compile, settings=settings)
        self.sample_temperature, self.num_val_samples = sample_temperature, num_val_samples

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

    def on_validation_epoch_start(self) -> None:
        super().on_validation_epoch_start()
        self.reset_evaluation_sums()

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        nll, count = self.nll(batch)
        self.add_evaluation_sums(torch.stack([nll.detach().double(), nll.new_tensor(count, dtype=torch.float64)]))
        if batch_idx > 0 or self.num_val_samples < 1:
            return
        low_res, high_res = (images[: self.num_val_samples] for images in batch)
        self.update_image_metrics(low_res, self(low_res), high_res)

    def on_validation_epoch_end(self) -> None:
        sums = self.gathered_evaluation_sums()
        self.log("val_bpd", sums["nll"] / max(sums["subpixels"], 1.0) / math.log(2), prog_bar=True, sync_dist=False)
        self.log_image_metrics()

    def sampling_options(self, args: argparse.Namespace) -> dict[str, Any]:
        generator = torch.Generator(device=self.device).manual_seed(args.seed) if args.seed is not None else None
        return dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, generator=generator)


def _read_image(path: Path, check_size: Callable[[int, int], None] | None = None) -> Image.Image:
    """The decoded image at ``path``; a folder or a file that is not an image is an error naming it.

    ``check_size(width, height)`` runs on the size in the file's header, before the pixels are decoded.
    """
    if path.is_dir():
        raise IsADirectoryError(21, "a folder; --input takes one image file", str(path))
    try:
        image = Image.open(path)
    except FileNotFoundError:
        raise
    except Exception as error:  # PIL: UnidentifiedImageError, ...
        raise ValueError(f"{path}: not a readable image ({type(error).__name__}: {error})") from error
    with image:
        if check_size is not None:
            check_size(*image.size)
        try:
            image.load()
            return image.copy()
        except Exception as error:  # truncated data (OSError), ...
            raise ValueError(f"{path}: not a readable image ({type(error).__name__}: {error})") from error


def _to_tensor(image: Image.Image) -> Tensor:
    array = np.asarray(image, dtype=np.float32) / 255
    return torch.from_numpy(array[None] if array.ndim == 2 else array.transpose(2, 0, 1).copy())


def _to_uint8(image: Tensor) -> np.ndarray:
    array = (image.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    return array[0] if array.shape[0] == 1 else array.transpose(1, 2, 0)

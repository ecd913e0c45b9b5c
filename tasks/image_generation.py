"""Image generation (Image Transformer): next-sub-pixel prediction on raster pixel tokens.

``multimodal fit --config configs/image_generation.yaml`` trains it (digits by default;
``configs/image_generation_fashion_mnist.yaml`` for Fashion-MNIST); ``multimodal generate
--checkpoint CKPT --num-samples N --out DIR`` writes PNG images and a grid (:mod:`tasks.commands.images`).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor

from multimodal.images import class_labels, sample_images
from multimodal.models.config import ImageTransformerConfig
from multimodal.models.image_transformer import ImageTransformer
from multimodal.viz import image_grid, image_grid_png
from tasks.base import Task, adamw, task_arguments
from tasks.finetune import FineTuneConfig
from tasks.outputs import log_folder, show_image, tensorboard


class ImageGeneration(Task):
    """Trains an :class:`~multimodal.models.image_transformer.ImageTransformer` with cross-entropy per sub-pixel.

    Batches are ``(tokens, labels)`` from :class:`~tasks.datamodules.ImageGenerationDataModule`. Logs
    ``train_loss`` (nats per sub-pixel) and ``train_bpd``, ``val_nll`` (nats per sub-pixel) and ``val_bpd`` — **bits per dimension**, the
    negative log-likelihood in bits averaged over every sub-pixel (``height * width * channels`` per
    image) of the split; ``test`` logs the same. Each sampled validation epoch writes a grid of
    samples to ``<log_dir>/samples/epoch_<n>.png`` (and to TensorBoard when it is the logger);
    class-conditional models draw one column per class.

    Args:
        model: Model config; image size, levels and classes are linked from the data module.
        optimizer: Called with parameter groups; weight decay applies to 2-D weights only.
        warmup_steps: Linear warm-up, then cosine decay to 10 % (by steps or ``max_time``).
        num_samples: Images in the validation sample grid (0: none).
        sample_every_n_epochs: How often to sample.
        sample_temperature: Temperature of the grid's samples.
        finetune: Pretrained weights, frozen parts, LoRA, learning-rate split (see :mod:`tasks.finetune`).
        compile: Compile every Transformer block with ``torch.compile`` (:func:`~multimodal.layers.compile_blocks`);
            the first steps pay for compilation.
    """

    config_class = ImageTransformerConfig
    evaluation_sum_names: ClassVar[tuple[str, ...]] = ("nll", "subpixels")
    data_links: ClassVar[dict[str, str]] = {
        "height": "model.height",
        "width": "model.width",
        "channels": "model.channels",
        "num_levels": "model.num_levels",
        "num_classes": "model.num_classes",
    }

    def __init__(
        self,
        model: ImageTransformerConfig | None = None,
        optimizer: OptimizerCallable = adamw,
        warmup_steps: int = 100,
        num_samples: int = 16,
        sample_every_n_epochs: int = 1,
        sample_temperature: float = 1.0,
        finetune: FineTuneConfig | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__(model, optimizer, warmup_steps, finetune, compile, settings=task_arguments(locals()))

    def build_model(self, config: ImageTransformerConfig) -> ImageTransformer:
        return ImageTransformer(config)

    def forward(self, tokens: Tensor, labels: Tensor | None = None, **kwargs: Any) -> Tensor:
        """Logits ``(batch, seq, num_levels)`` for input ids ``(batch, seq)`` (BOS first)."""
        return self.model(tokens, labels, **kwargs)

    def nll(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
        """Summed NLL in nats over every sub-pixel of a batch of images, and the number of sub-pixels."""
        tokens, labels = batch
        if self.config.class_dropout and self.training:  # some images learned without their class (guidance)
            hidden = torch.rand(labels.shape, device=labels.device) < self.config.class_dropout
            labels = labels.masked_fill(hidden, self.model.no_class_id)
        logits = self.model(self.model.inputs(tokens), labels if self.config.class_conditional else None)
        return F.cross_entropy(
            logits.flatten(0, 1).float(), tokens.flatten(), reduction="sum"
        ), tokens.numel()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        nll, count = self.nll(batch)
        loss = nll / count
        self.log("train_loss", loss)
        self.log("train_bpd", loss / math.log(2), prog_bar=True)
        return loss

    def evaluation_sums(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Summed NLL (nats) and the number of sub-pixels of a batch."""
        nll, count = self.nll(batch)
        return torch.stack([nll.detach().double(), nll.new_tensor(count, dtype=torch.float64)])

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        trainer = self.trainer
        due = self.sample_every_n_epochs and (trainer.current_epoch + 1) % self.sample_every_n_epochs == 0
        if self.num_samples and due and not trainer.sanity_checking and trainer.is_global_zero:
            self._write_sample_grid()

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        """Logs ``{stage}_nll`` (nats per sub-pixel) and ``{stage}_bpd`` (bits per dimension)."""
        nll = sums["nll"] / max(sums["subpixels"], 1.0)
        self.log(f"{stage}_nll", nll, sync_dist=False)
        self.log(f"{stage}_bpd", nll / math.log(2), prog_bar=True, sync_dist=False)

    def _write_sample_grid(self) -> None:
        generator = torch.Generator(device=self.device).manual_seed(0)  # same noise every epoch
        samples = sample_images(self.model, self.num_samples, labels=class_labels(self.model, self.num_samples),
                                temperature=self.sample_temperature, generator=generator)  # fmt: skip
        nrow = self.config.num_classes if self.config.class_conditional else None
        folder = log_folder(self.trainer) / "samples"
        image_grid_png(samples, folder / f"epoch_{self.trainer.current_epoch}.png", nrow=nrow)
        if tensorboard(self.trainer) is not None:
            show_image(self.trainer, "samples", image_grid(samples, nrow, pixel_scale=max(1, 32 // self.config.width)))

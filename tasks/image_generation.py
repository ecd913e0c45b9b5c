"""Image generation (Image Transformer): next-sub-pixel prediction on raster pixel tokens.

``multimodal fit --config configs/image_generation.yaml`` trains it (digits by default;
``configs/image_generation_fashion_mnist.yaml`` for Fashion-MNIST); ``multimodal generate
--checkpoint CKPT --num-samples N --out DIR`` writes PNG images and a grid.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor

from multimodal.images import sample_images
from multimodal.limits import MAX_BATCH_SIZE, MAX_SAMPLES
from multimodal.models.config import ImageTransformerConfig
from multimodal.models.image_transformer import ImageTransformer
from multimodal.tokenizers.image import PixelTokenizer
from multimodal.viz import image_grid, image_grid_png
from tasks.arguments import count
from tasks.base import Task, adamw
from tasks.finetune import FineTuneConfig
from tasks.outputs import claim_outputs, log_folder, show_image, tensorboard


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
        settings = {"num_samples": num_samples, "sample_every_n_epochs": sample_every_n_epochs,
                    "sample_temperature": sample_temperature}  # fmt: skip
        super().__init__(model, optimizer, warmup_steps, finetune, compile, settings=settings)
        self.num_samples, self.sample_every_n_epochs = num_samples, sample_every_n_epochs
        self.sample_temperature = sample_temperature

    def build_model(self, config: ImageTransformerConfig) -> ImageTransformer:
        return ImageTransformer(config)

    def forward(self, tokens: Tensor, labels: Tensor | None = None, **kwargs: Any) -> Tensor:
        """Logits ``(batch, seq, num_levels)`` for input ids ``(batch, seq)`` (BOS first)."""
        return self.model(tokens, labels, **kwargs)

    def nll(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
        """Summed NLL in nats over every sub-pixel of a batch of images, and the number of sub-pixels."""
        tokens, labels = batch
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

    def on_validation_epoch_start(self) -> None:
        self.reset_evaluation_sums()

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        nll, count = self.nll(batch)
        self.add_evaluation_sums(torch.stack([nll.detach().double(), nll.new_tensor(count, dtype=torch.float64)]))

    def on_validation_epoch_end(self) -> None:
        self._log_bits("val")
        trainer = self.trainer
        due = self.sample_every_n_epochs and (trainer.current_epoch + 1) % self.sample_every_n_epochs == 0
        if self.num_samples and due and not trainer.sanity_checking and trainer.is_global_zero:
            self._write_sample_grid()

    def on_test_epoch_start(self) -> None:
        self.on_validation_epoch_start()

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def on_test_epoch_end(self) -> None:
        self._log_bits("test")

    def _log_bits(self, stage: str) -> None:
        sums = self.gathered_evaluation_sums()
        nll = sums["nll"] / max(sums["subpixels"], 1.0)
        self.log(f"{stage}_nll", nll, sync_dist=False)
        self.log(f"{stage}_bpd", nll / math.log(2), prog_bar=True, sync_dist=False)

    def sample_labels(self, count: int) -> Tensor | None:
        """Class ids ``0, 1, …, num_classes - 1, 0, …`` for a class-conditional model, else None."""
        if not self.config.class_conditional:
            return None
        return torch.arange(count, device=self.device) % self.config.num_classes

    def _write_sample_grid(self) -> None:
        generator = torch.Generator(device=self.device).manual_seed(0)  # same noise every epoch
        samples = sample_images(self.model, self.num_samples, labels=self.sample_labels(self.num_samples),
                                temperature=self.sample_temperature, generator=generator)  # fmt: skip
        nrow = self.config.num_classes if self.config.class_conditional else None
        folder = log_folder(self.trainer) / "samples"
        image_grid_png(samples, folder / f"epoch_{self.trainer.current_epoch}.png", nrow=nrow)
        if tensorboard(self.trainer) is not None:
            show_image(self.trainer, "samples", image_grid(samples, nrow, pixel_scale=max(1, 32 // self.config.width)))

    # ----------------------------------------------------------------------------------------------
    # multimodal generate
    # ----------------------------------------------------------------------------------------------

    @staticmethod
    def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
        """Options of ``multimodal generate`` for image-generation checkpoints."""
        parser.add_argument("--num-samples", type=count(MAX_SAMPLES), default=16,
                            help=f"images to draw (at most {MAX_SAMPLES:,}; each is a file)")  # fmt: skip
        parser.add_argument("--label", type=int, default=None,
                            help="class id for every image (class-conditional models; default: cycle through classes)")  # fmt: skip
        parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=64,
                            help=f"images decoded together (at most {MAX_BATCH_SIZE:,})")  # fmt: skip

    def run_generate(self, tokenizer: PixelTokenizer | None, args: argparse.Namespace) -> None:
        """Writes ``sample_<i>.png`` (native size) and ``grid.png`` to ``args.out``."""
        out = Path(args.out)
        claim_outputs([out / "grid.png", *(out / f"sample_{i:03d}.png" for i in range(args.num_samples))], args.overwrite)
        if args.seed is not None:
            torch.manual_seed(args.seed)
        labels = self.sample_labels(args.num_samples)
        if labels is not None and args.label is not None:
            labels = torch.full_like(labels, args.label)
        samples = sample_images(
            self.model, args.num_samples, labels=labels, temperature=args.temperature, top_k=args.top_k,
            top_p=args.top_p, batch_size=args.batch_size, progress=True,
        )  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        for index, image in enumerate(samples):
            image_grid_png(image[None], out / f"sample_{index:03d}.png", padding=0, pixel_scale=1)
        nrow = self.config.num_classes if labels is not None and args.label is None else None
        grid = image_grid_png(samples, out / "grid.png", nrow=nrow)
        print(f"wrote {len(samples)} images to {out}/sample_*.png and the grid {grid}")

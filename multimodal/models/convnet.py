"""A small convolutional classifier: the CNN a ViT is measured against and distilled from.

On small images a few 3×3 convolutions learn in minutes what a small ViT learns in half an hour
(Fashion-MNIST: docs/benchmarks.md). :class:`ConvNet` is that network — stages of
``convs_per_stage`` 3×3 convolutions with batch norm and ReLU, each stage closed by a 2×2 max-pool,
then a hidden layer and the head — used as the teacher of a distilled ViT
(``ImageClassification(distillation=...)``, :mod:`multimodal.images.distillation`) and as a baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from multimodal.layers.config import check_sizes


@dataclass
class ConvNetConfig:
    """Sizes of a :class:`ConvNet`.

    Attributes:
        image_size: Side of square images, or ``(height, width)``; each side at least ``2 ** len(widths)``.
            Linked from the data module in the Lightning task.
        channels: Channels per pixel (1 greyscale, 3 RGB); linked from the data module.
        num_classes: Output classes; linked from the data module.
        widths: Output channels of each stage's convolutions; every stage halves the map (max-pool 2).
        convs_per_stage: 3×3 convolutions (each with batch norm and ReLU) per stage.
        hidden: Width of the fully connected layer before the head (0: the head reads the flattened maps).
        dropout: Dropout before the hidden layer and before the head.
    """

    image_size: int | tuple[int, int] = 28
    channels: int = 1
    num_classes: int = 10
    widths: tuple[int, ...] = (16, 32)
    convs_per_stage: int = 2
    hidden: int = 128
    dropout: float = 0.3

    def __post_init__(self) -> None:
        check_sizes(self, positive=("image_size", "channels", "num_classes", "widths", "convs_per_stage"),
                    non_negative=("hidden",))  # fmt: skip
        self.widths = tuple(self.widths)
        if not self.widths:
            raise ValueError("widths must name at least one stage, e.g. [16, 32]")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout}")
        side = (self.image_size, self.image_size) if isinstance(self.image_size, int) else tuple(self.image_size)
        if min(side) < 2 ** len(self.widths):
            raise ValueError(f"image_size {side} is smaller than the {2 ** len(self.widths)} pixels that "
                             f"{len(self.widths)} halving stages need; use fewer widths")  # fmt: skip
        self.image_size = side[0] if side[0] == side[1] else side

    @property
    def feature_shape(self) -> tuple[int, int, int]:
        """``(channels, height, width)`` of the last stage's maps."""
        side = (self.image_size, self.image_size) if isinstance(self.image_size, int) else self.image_size
        shrink = 2 ** len(self.widths)
        return self.widths[-1], side[0] // shrink, side[1] // shrink


class ConvNet(nn.Module):
    """Images ``(batch, channels, height, width)`` -> logits ``(batch, num_classes)``.

    Args:
        config: The sizes (:class:`ConvNetConfig`).
    """

    def __init__(self, config: ConvNetConfig) -> None:
        super().__init__()
        self.config = config
        layers: list[nn.Module] = []
        width_in = config.channels
        for width in config.widths:
            for _ in range(config.convs_per_stage):
                layers += [nn.Conv2d(width_in, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
                width_in = width
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        flat = config.feature_shape[0] * config.feature_shape[1] * config.feature_shape[2]
        hidden = [nn.Linear(flat, config.hidden), nn.ReLU(), nn.Dropout(config.dropout)] if config.hidden else []
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(config.dropout), *hidden,
                                  nn.Linear(config.hidden or flat, config.num_classes))  # fmt: skip

    def forward(self, images: Tensor) -> Tensor:
        """Logits ``(batch, num_classes)`` of images ``(batch, channels, height, width)``."""
        return self.head(self.features(images))

    def no_weight_decay(self) -> set[str]:
        """Names of parameters to train without weight decay: biases and batch-norm scales and shifts."""
        return {name for name, parameter in self.named_parameters() if parameter.dim() < 2}

"""Knowledge distillation: a student classifier also learns from a trained teacher's outputs.

DeiT (Touvron et al. 2021) trains a data-efficient ViT by adding to its label loss a term that
follows a convolutional teacher: the CNN's inductive bias reaches the Transformer through its
predictions. Two forms, as in DeiT:

- **soft** (Hinton et al. 2015): the KL divergence from the teacher's to the student's softmax at
  temperature ``T``, times ``T²`` (so its gradients keep their size as ``T`` grows);
- **hard**: cross-entropy of the student against the teacher's top class.

The loss is ``(1 - alpha) * label_loss + alpha * teacher_term``. The teacher is run in eval mode
without gradients; the Lightning task loads it (``ImageClassification(distillation=...)``). A frozen
teacher gives an image the same logits every epoch, so :class:`RememberingTeacher` keeps them per
distinct image: training images that are not augmented pass through the teacher once, not once an epoch.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class DistillationConfig:
    """How a student follows its teacher.

    Attributes:
        teacher: A checkpoint (or run folder, or model folder) of an image-classification task — a
            :class:`~multimodal.models.convnet.ConvNet` trained with ``ConvNetClassification``, for DeiT's
            recipe — with the student's classes and image size. Read when training starts, not when a
            trained student is loaded.
        alpha: Weight of the teacher term; ``1 - alpha`` weighs the label loss. DeiT: 0.5.
        kind: ``"soft"`` (KL at ``temperature``) or ``"hard"`` (the teacher's top class as label).
        temperature: Softmax temperature of the soft term (1: the plain distributions).
    """

    teacher: str
    alpha: float = 0.5
    kind: Literal["soft", "hard"] = "soft"
    temperature: float = 1.0

    def __post_init__(self) -> None:
        self.teacher = str(self.teacher)
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"distillation alpha must lie in [0, 1], got {self.alpha}")
        if self.kind not in ("soft", "hard"):
            raise ValueError(f"distillation kind must be 'soft' or 'hard', got {self.kind!r}")
        if not self.temperature > 0:
            raise ValueError(f"distillation temperature must be > 0, got {self.temperature}")

    @classmethod
    def parse(cls, value: DistillationConfig | dict[str, Any] | None) -> DistillationConfig | None:
        """The config from itself, its dict (YAML, a checkpoint's hyper-parameters) or None."""
        return cls(**value) if isinstance(value, dict) else value

    def to_dict(self) -> dict[str, Any]:
        """Plain values, for a checkpoint's hyper-parameters."""
        return asdict(self)


def distillation_loss(student_logits: Tensor, teacher_logits: Tensor, label_loss: Tensor, config: DistillationConfig) -> Tensor:
    """``(1 - alpha) * label_loss + alpha * teacher_term`` for logits ``(batch, classes)``; a scalar.

    The teacher term (see the module docstring) is averaged over the batch, computed in float32.
    ``teacher_logits`` carry no gradient.
    """
    student, teacher = student_logits.float(), teacher_logits.detach().float()
    if config.kind == "hard":
        term = F.cross_entropy(student, teacher.argmax(-1))
    else:
        t = config.temperature
        term = F.kl_div(F.log_softmax(student / t, -1), F.log_softmax(teacher / t, -1), reduction="batchmean",
                        log_target=True) * t * t  # fmt: skip
    return (1.0 - config.alpha) * label_loss + config.alpha * term


class RememberingTeacher:
    """A frozen teacher that computes each distinct image's logits once and remembers them.

    Images are told apart by their exact bytes (a 128-bit BLAKE2 digest of each), so a remembered row
    is only ever served for the very image it was computed from: an augmented or mixed image is a new
    image, computed afresh. Without augmentation every training image reaches the teacher once per
    process instead of once an epoch. At most ``max_images`` images are remembered, each with its
    float32 logits and about 125 bytes of key and index; beyond that, new images are computed and not kept.

    Args:
        teacher: The frozen classifier, ``(batch, channels, height, width) -> (batch, classes)``.
        max_images: How many images' logits to keep (0: none).
    """

    def __init__(self, teacher: nn.Module, max_images: int = 250_000) -> None:
        self.teacher, self.max_images = teacher, max_images
        self._rows: dict[bytes, int] = {}  # an image's digest -> its row of _logits
        self._logits: Tensor | None = None  # (rows allocated, classes); grows by doubling

    def to(self, device: torch.device | str) -> RememberingTeacher:
        """Moves the teacher (and any remembered logits) to ``device``; returns itself."""
        self.teacher = self.teacher.to(device)
        self._logits = None if self._logits is None else self._logits.to(device)
        return self

    @property
    def remembered(self) -> int:
        """How many images' logits are kept."""
        return len(self._rows)

    @torch.no_grad()
    def __call__(self, images: Tensor) -> Tensor:
        """The teacher's float32 logits ``(batch, classes)`` of ``images`` ``(batch, ...)``."""
        keys = [hashlib.blake2b(image.tobytes(), digest_size=16).digest()
                for image in images.detach().cpu().contiguous().flatten(1).view(torch.uint8).numpy()]  # fmt: skip
        rows = torch.tensor([self._rows.get(key, -1) for key in keys], device=images.device)
        new = (rows < 0).nonzero().flatten()
        if len(new) == 0:
            return self._logits[rows]
        computed = self.teacher(images[new]).float()
        logits = computed.new_empty(len(images), computed.shape[-1])
        logits[new] = computed
        known = (rows >= 0).nonzero().flatten()
        if len(known):
            logits[known] = self._logits[rows[known]]
        self._remember([keys[index] for index in new.tolist()], computed)
        return logits

    def _remember(self, keys: list[bytes], logits: Tensor) -> None:
        """Keeps ``logits`` ``(len(keys), classes)`` under ``keys``: the first of each key, while there is room."""
        kept, start = [], len(self._rows)
        for position, key in enumerate(keys):
            if len(self._rows) < self.max_images and key not in self._rows:
                self._rows[key] = len(self._rows)
                kept.append(position)
        if not kept:
            return
        if self._logits is None or len(self._logits) < len(self._rows):
            size = min(self.max_images, max(len(self._rows), 2 * (0 if self._logits is None else len(self._logits))))
            grown = logits.new_empty(size, logits.shape[-1])
            if self._logits is not None:
                grown[:start] = self._logits[:start]
            self._logits = grown
        self._logits[start:len(self._rows)] = logits[kept]

"""Knowledge distillation: a student classifier also learns from a trained teacher's outputs.

DeiT (Touvron et al. 2021) trains a data-efficient ViT by adding to its label loss a term that
follows a convolutional teacher: the CNN's inductive bias reaches the Transformer through its
predictions. Two forms, as in DeiT:

- **soft** (Hinton et al. 2015): the KL divergence from the teacher's to the student's softmax at
  temperature ``T``, times ``T²`` (so its gradients keep their size as ``T`` grows);
- **hard**: cross-entropy of the student against the teacher's top class.

The loss is ``(1 - alpha) * label_loss + alpha * teacher_term``. The teacher is run in eval mode
without gradients; the Lightning task loads it (``ImageClassification(distillation=...)``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch.nn.functional as F
from torch import Tensor


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

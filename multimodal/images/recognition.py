"""Judging class-conditional samples with a classifier: the classification accuracy score (CAS).

Ravuri & Vinyals (2019) and the Image Transformer papers ask whether generated images *are* what
they were asked to be: a classifier trained on real images labels each sample, and the score is the
share labelled as the class the generator was given. Read it next to the same classifier's
accuracy on real test images, which is what a perfect generator would score.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn


class ClassAccuracy(NamedTuple):
    """What :func:`classification_accuracy_score` measures.

    Attributes:
        overall: Share of all samples labelled as their requested class.
        per_class: ``(num_classes,)`` share per requested class (NaN for a class never requested).
        predicted: ``(n,)`` the classifier's label of each sample.
    """

    overall: float
    per_class: Tensor
    predicted: Tensor


@torch.no_grad()
def classification_accuracy_score(
    classifier: nn.Module, images: Tensor, requested: Tensor, num_classes: int, batch_size: int = 500
) -> ClassAccuracy:
    """Labels ``images`` with ``classifier`` and compares each label with the class it was generated for.

    Args:
        classifier: Maps images ``(batch, channels, h, w)`` to logits ``(batch, num_classes)``;
            called in eval mode, as it is given (no gradients).
        images: Generated images ``(n, channels, h, w)``, in what the classifier reads (e.g. float in [0, 1]).
        requested: ``(n,)`` the class id each image was generated for.
        num_classes: Number of classes.
        batch_size: Images per classifier call.

    Returns:
        The overall score, the score per requested class and the predicted labels.
    """
    if images.shape[0] != requested.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {requested.shape[0]} requested classes")
    was_training = classifier.training
    classifier.eval()
    predicted = torch.cat([classifier(images[i : i + batch_size]).argmax(-1).cpu()
                           for i in range(0, len(images), batch_size)])  # fmt: skip
    classifier.train(was_training)
    requested = requested.cpu()
    correct = (predicted == requested).float()
    counts = torch.bincount(requested, minlength=num_classes).float()
    hits = torch.bincount(requested, weights=correct, minlength=num_classes)
    per_class = torch.where(counts > 0, hits / counts.clamp(min=1), torch.full_like(counts, float("nan")))
    return ClassAccuracy(correct.mean().item(), per_class, predicted)

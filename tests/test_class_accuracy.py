"""The classification accuracy score of class-conditional samples, against a count by hand."""

import math

import pytest
import torch
from torch import nn

from multimodal.images import classification_accuracy_score


class _ByBrightness(nn.Module):
    """Labels an image by its mean brightness bucket: class k for a mean in [k / 4, (k + 1) / 4)."""

    def forward(self, images):
        means = images.flatten(1).mean(1)
        return nn.functional.one_hot((means * 4).long().clamp(max=3), 4).float()


def test_the_score_is_the_share_labelled_as_requested_overall_and_per_class():
    brightness = torch.tensor([0.1, 0.1, 0.6, 0.9, 0.3, 0.3, 0.3])  # the classifier says 0, 0, 2, 3, 1, 1, 1
    images = brightness.view(-1, 1, 1, 1).expand(-1, 1, 4, 4).contiguous()
    requested = torch.tensor([0, 1, 2, 2, 1, 1, 0])
    # by hand: class 0 requested twice, right once (first); class 1 three times, right twice; class 2
    # twice, right once; class 3 never requested
    score = classification_accuracy_score(_ByBrightness(), images, requested, num_classes=4, batch_size=3)
    assert score.predicted.tolist() == [0, 0, 2, 3, 1, 1, 1]
    assert score.overall == pytest.approx(4 / 7)
    assert score.per_class[:3].tolist() == pytest.approx([1 / 2, 2 / 3, 1 / 2])
    assert math.isnan(score.per_class[3])


def test_mismatched_counts_are_refused():
    with pytest.raises(ValueError, match="3 images but 2 requested"):
        classification_accuracy_score(_ByBrightness(), torch.rand(3, 1, 4, 4), torch.tensor([0, 1]), 4)

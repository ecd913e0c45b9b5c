"""Layer-wise learning-rate decay against timm's ``param_groups_layer_decay`` on the same ViT shape."""

from __future__ import annotations

import re

import pytest
import torch

from multimodal.models import ViT, ViTConfig
from multimodal.models.parameters import layer_decay_scales, parameter_groups, scale_learning_rates
from tasks.finetune import FineTuneConfig

DEPTH = 3


def _ours() -> ViT:
    return ViT(ViTConfig(dim=32, num_layers=DEPTH, num_heads=2, image_size=8, patch_size=4, num_classes=3))


def _where(name: str) -> str:
    """``block<i>``, ``norm`` (the final one), ``head`` or ``embeddings``, for our names and timm's."""
    block = re.match(r"(?:encoder\.)?blocks\.(\d+)\.", name)
    if block:
        return f"block{block.group(1)}"
    if re.match(r"(encoder\.)?norm\.", name):
        return "norm"
    if name.startswith("head."):
        return "head"
    return "embeddings"


def _by_place(scales: dict[str, float]) -> dict[str, float]:
    places: dict[str, set[float]] = {}
    for name, scale in scales.items():
        places.setdefault(_where(name), set()).add(round(scale, 12))
    assert all(len(found) == 1 for found in places.values()), places  # one factor per layer
    return {place: found.pop() for place, found in places.items()}


def test_layer_decay_matches_timm_param_groups_layer_decay():
    timm = pytest.importorskip("timm")
    from timm.optim import param_groups_layer_decay

    reference = timm.models.VisionTransformer(img_size=8, patch_size=4, embed_dim=32, depth=DEPTH, num_heads=2,
                                              num_classes=3)  # fmt: skip
    names = {id(p): n for n, p in reference.named_parameters()}
    timm_scales = {names[id(p)]: group["lr_scale"]
                   for group in param_groups_layer_decay(reference, layer_decay=0.7) for p in group["params"]}  # fmt: skip
    ours = _by_place(layer_decay_scales(_ours(), 0.7))
    assert ours == pytest.approx(_by_place(timm_scales))
    # And by hand: block i at 0.7 ** (L - i), embeddings 0.7 ** (L + 1), the final norm with the
    # last block (timm's group_matcher), the head 1.
    assert ours == pytest.approx(
        {"embeddings": 0.7**4, "block0": 0.7**3, "block1": 0.7**2, "block2": 0.7, "norm": 0.7, "head": 1.0}
    )


def test_layer_decay_multiplies_the_pretrained_scale_and_sets_each_group_lr_once():
    model = _ours()
    pretrained = {n for n, _ in model.named_parameters() if n.startswith("encoder.")}
    groups = parameter_groups(model, pretrained, 0.5, layer_decay=0.5)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    optimizer = scale_learning_rates(torch.optim.AdamW(groups, lr=1.0))
    lr_of = {n: g["lr"] for g in optimizer.param_groups for n, p in model.named_parameters()
             if any(p is q for q in g["params"])}  # fmt: skip
    assert lr_of["head.weight"] == 1.0  # new, top layer
    assert lr_of["encoder.norm.weight"] == 0.5 * 0.5  # pretrained, with the last block
    assert lr_of["encoder.blocks.0.ff.up.weight"] == pytest.approx(0.5 * 0.5**3)
    assert lr_of["encoder.positions.weight"] == pytest.approx(0.5 * 0.5**4)
    assert lr_of["patch_embed.weight"] == pytest.approx(0.5**4)  # new embedding
    assert all("lr_scale" not in g for g in optimizer.param_groups)


def test_layer_decay_off_by_default_and_checked():
    assert FineTuneConfig().layer_decay is None
    assert all("lr_scale" not in g for g in parameter_groups(_ours()))
    with pytest.raises(ValueError, match="layer_decay"):
        FineTuneConfig(layer_decay=1.5)
    with pytest.raises(ValueError, match="layer_decay"):
        layer_decay_scales(_ours(), 0.0)

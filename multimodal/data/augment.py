"""Augmentation pipelines from YAML-friendly specs (``torchvision.transforms.v2``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torchvision.transforms import v2

__all__ = ["ALLOWED_TRANSFORMS", "TransformSpec", "build_transform", "is_transform_spec"]

#: The ``v2`` classes a spec may name: per-image geometry, colour, automatic augmentation
#: (``RandAugment``, ``TrivialAugmentWide``, ``AutoAugment``, ``AugMix``), ``RandomErasing``,
#: normalisation, and the containers. Nothing else in ``v2`` is built from a config (``Lambda``
#: would run code; ``MixUp`` / ``CutMix`` mix a whole batch: the image task's ``mixup_alpha``,
#: ``cutmix_alpha`` options apply them).
ALLOWED_TRANSFORMS: frozenset[str] = frozenset({
    "AugMix", "AutoAugment", "CenterCrop", "ColorJitter", "Compose", "ElasticTransform", "GaussianBlur",
    "Grayscale", "Identity", "Normalize", "Pad", "RandAugment", "RandomAdjustSharpness", "RandomAffine",
    "RandomApply", "RandomAutocontrast", "RandomChoice", "RandomCrop", "RandomEqualize", "RandomErasing",
    "RandomGrayscale", "RandomHorizontalFlip", "RandomInvert", "RandomOrder", "RandomPerspective",
    "RandomPosterize", "RandomResizedCrop", "RandomRotation", "RandomSolarize", "RandomVerticalFlip",
    "RandomZoomOut", "Resize", "ToDtype", "TrivialAugmentWide",
})  # fmt: skip
_BATCH_TRANSFORMS = ("MixUp", "CutMix")

TransformSpec = Sequence[Mapping[str, Any]]
"""A list of ``{name: <v2 class>, **kwargs}`` entries, applied in order."""


def build_transform(spec: TransformSpec | None) -> v2.Compose | None:
    """Builds a ``torchvision.transforms.v2`` pipeline from a YAML-friendly list of dicts.

    Each entry names a ``v2`` class of :data:`ALLOWED_TRANSFORMS` and gives its keyword
    arguments. ``dtype`` strings (``"float32"``) become torch dtypes, ``interpolation`` strings
    (``"bilinear"``) ``InterpolationMode`` values, ``policy`` strings (``"imagenet"``) an
    ``AutoAugmentPolicy``, and a list of entries passed as an argument (for ``RandomApply``,
    ``RandomChoice``) is built recursively. Example (DeiT-style)::

        - {name: RandomCrop, size: 28, padding: 2}
        - {name: RandomHorizontalFlip, p: 0.5}
        - {name: RandomApply, p: 0.3, transforms: [{name: ColorJitter, brightness: 0.2}]}
        - {name: RandAugment, num_ops: 2, magnitude: 9}      # or {name: TrivialAugmentWide}
        - {name: RandomErasing, p: 0.25}                      # on the image tensor, after the above

    Args:
        spec: the entries, in the order they are applied; ``None`` or empty means no transform.

    Returns:
        ``v2.Compose`` of the transforms, or ``None``.

    Raises:
        ValueError: an entry has no ``name``, or names a class outside :data:`ALLOWED_TRANSFORMS`.
    """
    if not spec:
        return None
    return v2.Compose([_build_one(entry) for entry in spec])


def _build_one(entry: Mapping[str, Any]) -> v2.Transform:
    kwargs = dict(entry)
    name = kwargs.pop("name", None)
    if name in _BATCH_TRANSFORMS:
        raise ValueError(
            f"{name} mixes a whole batch, not one image: set the image classification task's "
            f"mixup_alpha / cutmix_alpha instead of listing it in augmentation"
        )
    cls = getattr(v2, name, None) if name in ALLOWED_TRANSFORMS else None
    if not (isinstance(cls, type) and issubclass(cls, v2.Transform)):
        raise ValueError(
            f"augmentation entry {dict(entry)} must have 'name' set to one of the allowed "
            f"torchvision.transforms.v2 transforms ({', '.join(sorted(ALLOWED_TRANSFORMS))}), "
            f"e.g. {{'name': 'RandomCrop', 'size': 28, 'padding': 2}}"
        )
    for key, value in kwargs.items():
        if key == "dtype" and isinstance(value, str):
            kwargs[key] = getattr(torch, value)
        elif key == "interpolation" and isinstance(value, str):
            kwargs[key] = v2.InterpolationMode(value.lower())
        elif key == "policy" and isinstance(value, str):
            kwargs[key] = v2.AutoAugmentPolicy(value.lower())
        elif is_transform_spec(value):
            kwargs[key] = [_build_one(item) for item in value]
    return cls(**kwargs)


def is_transform_spec(value: Any) -> bool:
    """Whether ``value`` is a spec list (a sequence of mappings), not a callable or string."""
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(v, Mapping) for v in value)
    )

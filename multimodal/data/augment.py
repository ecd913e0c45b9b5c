"""Augmentation pipelines from YAML-friendly specs (``torchvision.transforms.v2``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torchvision.transforms import v2

__all__ = ["TransformSpec", "build_transform", "is_transform_spec"]

TransformSpec = Sequence[Mapping[str, Any]]
"""A list of ``{name: <v2 class>, **kwargs}`` entries, applied in order."""


def build_transform(spec: TransformSpec | None) -> v2.Compose | None:
    """Builds a ``torchvision.transforms.v2`` pipeline from a YAML-friendly list of dicts.

    Each entry names a ``v2`` class and gives its keyword arguments. ``dtype`` strings
    (``"float32"``) become torch dtypes, and a list of entries passed as an argument (for
    ``RandomApply``, ``RandomChoice``) is built recursively. Example::

        - {name: RandomCrop, size: 28, padding: 2}
        - {name: RandomHorizontalFlip, p: 0.5}
        - {name: RandomApply, p: 0.3, transforms: [{name: ColorJitter, brightness: 0.2}]}

    Args:
        spec: the entries, in the order they are applied; ``None`` or empty means no transform.

    Returns:
        ``v2.Compose`` of the transforms, or ``None``.

    Raises:
        ValueError: an entry has no ``name`` or names no ``v2`` transform.
    """
    if not spec:
        return None
    return v2.Compose([_build_one(entry) for entry in spec])


def _build_one(entry: Mapping[str, Any]) -> v2.Transform:
    kwargs = dict(entry)
    name = kwargs.pop("name", None)
    cls = getattr(v2, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, v2.Transform)):
        raise ValueError(
            f"augmentation entry {dict(entry)} must have 'name' set to a torchvision.transforms.v2 "
            f"transform, e.g. {{'name': 'RandomCrop', 'size': 28, 'padding': 2}}"
        )
    for key, value in kwargs.items():
        if key == "dtype" and isinstance(value, str):
            kwargs[key] = getattr(torch, value)
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

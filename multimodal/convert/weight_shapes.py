"""Does a config fit the weights that come with it? Checked from names and shapes, before any allocation.

A model folder's ``config.json``, a converted model's Hugging Face config or a checkpoint's
hyper-parameters give the sizes; the weights next to them are the truth. Building the model from
an edited config (``num_layers: 1000000``) would allocate the whole model before loading notices
the mismatch, so every path that builds a model from such a config first calls
:func:`check_config_fits`:

1. the layer counts (:data:`LAYER_FIELDS`) are bounded by the layer indices the tensor names hold
   (a name like ``decoder.blocks.3.ff.up.weight``), so step 2 never builds more blocks than the
   file has, and no whole-number field may exceed the number of weights or
   :data:`MAX_UNSAVED_ELEMENTS`, whichever is larger (no size of a model is larger than both);
2. the model is built on the ``meta`` device (shapes only, nothing allocated) and its state dict's
   names and shapes are compared with the weights' (tied weights are present under one of their names);
3. what the model would allocate beyond its weights (buffers that are not saved: position tables,
   pixel coordinates) is bounded by :data:`MAX_UNSAVED_ELEMENTS` or the weights' own size.

The shapes of a safetensors file come from its header (:func:`weight_shapes`), without reading any
tensor data.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

LAYER_FIELDS = ("num_layers", "decoder_layers")
"""Config fields that count blocks; each is bounded by the layer indices in the weights' names."""

MAX_UNSAVED_ELEMENTS = 2**24
"""Elements (16.8 million, 64 MB in float32) that a model's unsaved buffers may hold beyond the size
of its weights; a config asking for more (``max_seq_len: 1e9`` with sinusoidal positions) is refused."""

_INDEX = re.compile(r"(?:^|\.)(\d+)(?=\.|$)")


def weight_shapes(path: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of a safetensors file, from its header only (no tensor data is read).

    Raises:
        ValueError: The file is not a readable safetensors file (naming it).
    """
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}  # noqa: SIM118
    except Exception as error:  # SafetensorError, OSError: a truncated or foreign file
        raise ValueError(
            f"{path}: not a readable safetensors file ({' '.join(str(error).split())[:200]})"
        ) from error


def layers_in(names: Sequence[str] | Mapping[str, Any]) -> int:
    """One more than the largest layer index (a whole-number part of a dotted name) among ``names``; 0 if none."""
    indices = [int(match) for name in names for match in _INDEX.findall(name)]
    return max(indices, default=-1) + 1


def check_config_fits(
    model_class: Callable[[Any], nn.Module],
    config: Any,
    shapes: Mapping[str, Sequence[int]],
    source: str,
    prepare: Callable[[nn.Module], Any] | None = None,
) -> None:
    """Raises ``ValueError`` unless ``model_class(config)`` has exactly the tensors ``shapes`` describes.

    Nothing is allocated: the layer counts are bounded by the names first, then the model is built
    on the ``meta`` device (see the module docstring).

    Args:
        model_class: The model's class (called with ``config``).
        config: The config dataclass (its own checks have run: sizes are whole numbers >= 1).
        shapes: Name -> shape of the weights at hand (:func:`weight_shapes` of a file, or a state dict's).
        source: The file the config or weights came from, for the message.
        prepare: Changes the built model before its tensors are compared (quantizes its linear layers).
    """
    fix = (
        "the config and the weights must come from the same model (export it again with `multimodal export`)"
    )
    weights = sum(math.prod(shape) for shape in shapes.values())
    bound = max(MAX_UNSAVED_ELEMENTS, weights)
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, numbers.Integral) and not isinstance(item, bool) and item > bound:
                raise ValueError(f"{source}: {field.name}={value} is larger than any size {weights:,} weights can "
                                 f"back (at most {bound:,}); {fix}")  # fmt: skip
    available = layers_in(shapes)
    for field in LAYER_FIELDS:
        value = getattr(config, field, None)
        if isinstance(value, int) and value > available:
            raise ValueError(
                f"{source}: {field}={value}, but the weights hold at most {available} layers; {fix}"
            )
    try:
        with torch.device("meta"):
            model = model_class(config)
            if prepare is not None:
                prepare(model)
    except (RuntimeError, ValueError, TypeError, OverflowError, IndexError) as error:
        raise ValueError(f"{source}: its config describes no model that can be built "
                         f"({' '.join(str(error).split())[:200]})") from error  # fmt: skip
    expected = model.state_dict(keep_vars=True)
    tied: dict[int, list[str]] = {}
    for name, tensor in expected.items():
        tied.setdefault(id(tensor), []).append(name)
    missing, mismatched = [], []
    for names in tied.values():
        present = [name for name in names if name in shapes]
        if not present:
            missing.append(names[0])
        want = tuple(expected[names[0]].shape)
        mismatched += [
            f"{name} {tuple(shapes[name])} (config: {want})"
            for name in present
            if tuple(shapes[name]) != want
        ]
    unexpected = sorted(set(shapes) - set(expected))
    if missing or unexpected or mismatched:
        parts = [f"{label} {items[:5]}{' ...' if len(items) > 5 else ''}"
                 for label, items in (("missing", sorted(missing)), ("unexpected", unexpected),
                                      ("of another shape", mismatched)) if items]  # fmt: skip
        raise ValueError(f"{source}: the weights do not fit the config: {'; '.join(parts)}; {fix}")
    unsaved = sum(buffer.numel() for name, buffer in model.named_buffers() if name not in expected)
    if unsaved > bound:
        raise ValueError(f"{source}: its config asks for {unsaved:,} values of unsaved tables (positions, "
                         f"coordinates) for {weights:,} weights (at most {bound:,}); "
                         f"check max_seq_len and the image sizes of the config")  # fmt: skip

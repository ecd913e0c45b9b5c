"""Fine-tuning helpers: freeze by name pattern, count parameters, split learning rates (layer-wise decay).

Patterns name parameters (``model.named_parameters()``) in one of three ways:

* a part of the export format (:mod:`multimodal.convert.parts`): ``blocks``, ``embeddings``,
  ``head``, or ``blocks[:k]`` / ``blocks[a:b]`` for the first ``k`` blocks / blocks ``a .. b-1``;
* a glob over names: ``decoder.blocks.0.*``, ``*.norm_ff.*``, ``embedding.weight``;
* a regular expression after ``re:``: ``re:decoder\\.blocks\\.[0-3]\\.attention\\..*``.

A pattern that matches nothing is an error (a typo would otherwise silently train everything).
Tied weights (a head sharing the token embedding) are one tensor: freezing either name freezes both.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from multimodal.convert.parts import PARTS, export_names, in_selection, part_of
from multimodal.layers.lora import lora_parameters


def match_parameters(model: nn.Module, patterns: Iterable[str]) -> set[str]:
    """Names of the parameters (tied duplicates included) that any pattern matches.

    Raises:
        ValueError: If a pattern matches no parameter; the message shows a few real names.
    """
    names = [name for name, _ in model.named_parameters(remove_duplicate=False)]
    exported = _safe_export_names(model)
    matched: set[str] = set()
    for pattern in patterns:
        hits = {name for name in names if _matches(pattern, name, exported.get(name))}
        if not hits:
            sample = ", ".join(names[:3] + names[-2:])
            raise ValueError(
                f"pattern {pattern!r} matches no parameter of {type(model).__name__}; use a part "
                f"({', '.join(PARTS)}, blocks[:k]), a glob over names such as {sample}, or 're:REGEX'"
            )
        matched |= hits
    return matched


def set_trainable(model: nn.Module, patterns: Iterable[str], trainable: bool) -> int:
    """Sets ``requires_grad = trainable`` on every matched parameter; returns how many tensors changed."""
    parameters = dict(model.named_parameters(remove_duplicate=False))
    changed = 0
    for name in match_parameters(model, patterns):
        changed += parameters[name].requires_grad != trainable
        parameters[name].requires_grad_(trainable)
    return changed


def freeze(model: nn.Module, patterns: Iterable[str]) -> int:
    """Freezes the matched parameters (no gradient, not given to the optimizer)."""
    return set_trainable(model, patterns, False)


def unfreeze(model: nn.Module, patterns: Iterable[str]) -> int:
    """Makes the matched parameters trainable again (e.g. ``freeze: ['*']`` then ``unfreeze: [head]``)."""
    return set_trainable(model, patterns, True)


@dataclass
class ParameterCounts:
    """Unique parameter numbers (tied tensors counted once).

    Attributes:
        trainable: Numbers the optimizer updates.
        frozen: Numbers that stay fixed.
        lora: Of ``trainable``, those in LoRA adapters.
        by_part: Part -> ``(trainable, frozen)``.
    """

    trainable: int = 0
    frozen: int = 0
    lora: int = 0
    by_part: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.trainable + self.frozen

    def __str__(self) -> str:
        share = 100.0 * self.trainable / max(self.total, 1)
        lines = [
            f"parameters: {self.trainable:,} trainable ({share:.1f}%), {self.frozen:,} frozen, "
            f"{self.total:,} total" + (f"; {self.lora:,} in LoRA adapters" if self.lora else "")
        ]
        for part, (trainable, frozen) in self.by_part.items():
            lines.append(f"  {part:<11} {trainable:>12,} trainable {frozen:>12,} frozen")
        return "\n".join(lines)


def count_parameters(model: nn.Module) -> ParameterCounts:
    """Trainable / frozen counts, in total and per part (``blocks``, ``embeddings``, ``head``, ``lora``)."""
    exported = _safe_export_names(model)
    adapters = {id(p) for p in lora_parameters(model).values()}
    counts = ParameterCounts()
    by_part: dict[str, list[int]] = {}
    for name, parameter in model.named_parameters():
        number = parameter.numel()
        part = "lora" if id(parameter) in adapters else _part(exported.get(name))
        slot = by_part.setdefault(part, [0, 0])
        if parameter.requires_grad:
            counts.trainable += number
            slot[0] += number
        else:
            counts.frozen += number
            slot[1] += number
        counts.lora += number if id(parameter) in adapters and parameter.requires_grad else 0
    counts.by_part = {part: tuple(by_part[part]) for part in (*PARTS, "lora", "other") if part in by_part}
    return counts


def parameter_groups(
    model: nn.Module,
    pretrained: Iterable[str] = (),
    pretrained_lr_scale: float = 1.0,
    no_decay: Iterable[str] | None = None,
    layer_decay: float | None = None,
) -> list[dict[str, Any]]:
    """Optimizer groups of the trainable parameters: weight decay x learning-rate scale.

    Weight decay applies to matrices and embedding tables (``dim() >= 2``), none to biases, norms
    and 1-D tables, unless ``no_decay`` names the parameters to spare (e.g. a ViT's
    ``no_weight_decay()``: class token, positions). Pretrained parameters get the key
    ``lr_scale = pretrained_lr_scale``; :func:`scale_learning_rates` applies it once the optimizer
    exists (its base learning rate is only known then). Empty groups are left out.

    Args:
        model: The model; frozen parameters are not included.
        pretrained: Names (``named_parameters``) loaded from pretrained weights.
        pretrained_lr_scale: Learning-rate factor of the pretrained parameters.
        no_decay: Names trained without weight decay; None: every tensor of fewer than 2 dimensions.
        layer_decay: Layer-wise learning-rate decay (BEiT; timm's ``param_groups_layer_decay``):
            with ``L`` blocks, block ``i`` (0-based) trains at ``layer_decay ** (L - i)`` times the
            rate, the embeddings (patch/token embeddings, class token, positions) at
            ``layer_decay ** (L + 1)``, the final norm with the last block (as timm), the head at 1;
            multiplied with
            ``pretrained_lr_scale``. None: off. Needs a model with one Transformer stack.
    """
    pretrained = set(pretrained)
    spared = None if no_decay is None else set(no_decay)
    layer_scales = {} if layer_decay is None else layer_decay_scales(model, layer_decay)
    groups: dict[tuple[bool, float], list[nn.Parameter]] = {}
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            decay = parameter.dim() >= 2 if spared is None else name not in spared
            scale = (pretrained_lr_scale if name in pretrained else 1.0) * layer_scales.get(name, 1.0)
            groups.setdefault((decay, scale), []).append(parameter)
    result = []
    for (decay, scale), params in sorted(groups.items(), key=lambda item: (not item[0][0], -item[0][1])):
        group: dict[str, Any] = {"params": params}
        if not decay:
            group["weight_decay"] = 0.0
        if scale != 1.0:
            group["lr_scale"] = scale
        result.append(group)
    return result


def layer_decay_scales(model: nn.Module, layer_decay: float) -> dict[str, float]:
    """Parameter name -> learning-rate factor of layer-wise decay (see :func:`parameter_groups`).

    Layer ids as timm's ViT ``group_matcher``: embeddings 0, block ``i`` is ``i + 1``, the final
    norm ``L`` (with the last block), the head ``L + 1``; the factor is ``layer_decay ** (L + 1 - id)``.
    Parameters outside the export names (LoRA adapters) are left out (factor 1).

    Raises:
        ValueError: ``layer_decay`` is not in ``(0, 1]``, or the model has no single stack.
    """
    if not 0.0 < layer_decay <= 1.0:
        raise ValueError(f"layer_decay must lie in (0, 1] (e.g. 0.65 or 0.75), got {layer_decay}")
    exported = _safe_export_names(model)
    if not exported:
        raise ValueError(
            f"layer_decay needs a model with one Transformer stack; {type(model).__name__} has none or several"
        )
    num_layers = (
        max(int(name.split(".")[2]) for name in exported.values() if name.startswith("stack.blocks.")) + 1
    )
    scales = {}
    for name, export_name in exported.items():
        if export_name.startswith("stack.blocks."):
            layer = int(export_name.split(".")[2]) + 1
        elif export_name.startswith("stack.norm."):
            layer = num_layers
        elif part_of(export_name) == "head":
            layer = num_layers + 1
        else:  # embeddings: positions, patch or token embeddings, class token
            layer = 0
        scales[name] = layer_decay ** (num_layers + 1 - layer)
    return scales


def scale_learning_rates(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Multiplies each group's ``lr`` by its ``lr_scale`` (from :func:`parameter_groups`), once."""
    for group in optimizer.param_groups:
        scale = group.pop("lr_scale", None)
        if scale is not None:
            group["lr"] = group["lr"] * scale
    return optimizer


def _matches(pattern: str, name: str, exported: str | None) -> bool:
    if pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], name) is not None
    if exported is not None and (pattern in PARTS or pattern.replace(" ", "").startswith("blocks[")):
        return in_selection(exported, pattern)
    return fnmatch.fnmatchcase(name, pattern)


def _part(exported: str | None) -> str:
    return "other" if exported is None else part_of(exported)


def _safe_export_names(model: nn.Module) -> dict[str, str]:
    """Parameter name -> export name; empty for models without exactly one stack (parts then match nothing)."""
    try:
        return export_names(model)
    except ValueError:
        return {}

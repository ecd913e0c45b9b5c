"""LoRA: low-rank adapters on the attention projections (Hu et al. 2021).

A frozen linear layer ``y = W x + b`` gains a trainable low-rank update::

    y = W x + b + (alpha / rank) * B A x        A: (rank, in_features), B: (out_features, rank)

``B`` starts at zero, so an adapted model computes exactly what the pretrained one did until the
first optimizer step. Only ``A`` and ``B`` train: ``rank * (in + out)`` numbers per projection
instead of ``in * out``.

The self-attention of :class:`~multimodal.layers.MultiHeadAttention` projects queries, keys and
values with ONE fused ``dim -> 3 * dim`` linear (layout ``(three h d)``). Adapting only some of
them (LoRA's classic choice is ``q`` and ``v``) gives each chosen third of the output its own
``(A, B)`` pair and leaves the other rows of ``W`` untouched — the same as adapting separate
``W_q`` and ``W_v`` layers.

:meth:`LoRALinear.merge` folds ``(alpha / rank) B A`` into ``W``: the layer then costs what a plain
linear does, gives the same outputs, and its ``weight`` is what an export writes.
:class:`LoRALinear` subclasses :class:`torch.nn.Linear`, so ``weight`` and ``bias`` keep their
names (``attention.to_qkv.weight``): pretrained weights load into an adapted model unchanged.

Einops legend: ``n`` adapted slices, ``r`` rank, ``i`` input features, ``o`` output features of one slice.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from einops import einsum, rearrange
from torch import Tensor, nn

from multimodal.layers.attention import MultiHeadAttention

Projection = Literal["q", "k", "v", "out"]
_PROJECTIONS = ("q", "k", "v", "out")


@dataclass
class LoRAConfig:
    """Where and how big the adapters are.

    Attributes:
        rank: Inner size ``r`` of each ``B A`` update.
        alpha: The update is scaled by ``alpha / rank`` (so changing the rank keeps its size).
        projections: Which attention projections get adapters: any of ``q``, ``k``, ``v``, ``out``.
        dropout: Dropout on the adapters' input while training.
    """

    rank: int = 8
    alpha: float = 16.0
    projections: list[Projection] = field(default_factory=lambda: ["q", "v"])
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {self.rank}")
        unknown = sorted(set(self.projections) - set(_PROJECTIONS))
        if unknown or not self.projections:
            raise ValueError(
                f"LoRA projections {list(self.projections)} invalid; choose among {list(_PROJECTIONS)}"
            )


class LoRALinear(nn.Linear):
    """A linear layer with low-rank adapters on some row slices of its output.

    Args:
        in_features: Input width.
        out_features: Output width.
        rank: Inner size of the adapters.
        alpha: Scale numerator; the update is multiplied by ``alpha / rank``.
        slices: ``(start, stop)`` output rows each adapter writes to, all of one size; None: one
            adapter over every row.
        dropout: Dropout on the adapters' input while training.
        bias: Whether the layer has a bias.

    Attributes:
        lora_a: ``(num_slices, rank, in_features)``, Kaiming-uniform like ``nn.Linear``.
        lora_b: ``(num_slices, slice_size, rank)``, zeros.
        merged: Whether the update currently sits inside ``weight``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rank: int,
        alpha: float,
        slices: Sequence[tuple[int, int]] | None = None,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__(in_features, out_features, bias=bias)
        slices = [(0, out_features)] if slices is None else [(int(a), int(b)) for a, b in slices]
        sizes = {stop - start for start, stop in slices}
        if len(sizes) != 1 or any(start < 0 or stop > out_features for start, stop in slices):
            raise ValueError(f"LoRA slices {slices} must all have one size and lie in [0, {out_features})")
        self.slices = slices
        self.rank, self.alpha, self.scaling = rank, alpha, alpha / rank
        self.lora_a = nn.Parameter(torch.empty(len(slices), rank, in_features))
        self.lora_b = nn.Parameter(torch.zeros(len(slices), sizes.pop(), rank))
        for a in self.lora_a:
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        self.lora_dropout = nn.Dropout(dropout)
        self.merged = False
        order = sorted(range(len(slices)), key=lambda index: slices[index][0])
        bounds = [slices[index] for index in order]
        tiles = bounds[0][0] == 0 and bounds[-1][1] == out_features
        tiles = tiles and all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
        self._dense_order = order if tiles else None

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        rank: int,
        alpha: float,
        slices: Sequence[tuple[int, int]] | None = None,
        dropout: float = 0.0,
    ) -> LoRALinear:
        """Wraps an existing linear layer: its ``weight`` and ``bias`` are shared (same tensors), and frozen."""
        lora = cls(
            linear.in_features,
            linear.out_features,
            rank,
            alpha,
            slices,
            dropout,
            bias=linear.bias is not None,
        )
        lora.weight = linear.weight
        lora.bias = linear.bias
        lora.weight.requires_grad_(False)
        if lora.bias is not None:
            lora.bias.requires_grad_(False)
        return lora.to(device=linear.weight.device, dtype=linear.weight.dtype)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., in_features) -> (..., out_features)``."""
        out = super().forward(x)
        if self.merged:
            return out
        hidden = einsum(self.lora_dropout(x), self.lora_a, "... i, n r i -> ... n r")
        update = einsum(hidden, self.lora_b, "... n r, n o r -> ... n o") * self.scaling
        if self._dense_order is not None:  # the slices tile every row: one concatenation
            return out + rearrange(update[..., self._dense_order, :], "... n o -> ... (n o)")
        full = torch.zeros_like(out)
        for index, (start, stop) in enumerate(self.slices):
            full[..., start:stop] = update[..., index, :]
        return out + full

    def delta_weight(self) -> Tensor:
        """The update ``(alpha / rank) B A`` as a full ``(out_features, in_features)`` matrix."""
        delta = self.weight.new_zeros(self.out_features, self.in_features)
        per_slice = einsum(self.lora_b, self.lora_a, "n o r, n r i -> n o i") * self.scaling
        for index, (start, stop) in enumerate(self.slices):
            delta[start:stop] += per_slice[index].to(delta.dtype)
        return delta

    @torch.no_grad()
    def merge(self) -> None:
        """Adds the update into ``weight`` (outputs unchanged, adapters then unused)."""
        if not self.merged:
            self.weight += self.delta_weight()
            self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Takes the update back out of ``weight`` (up to float rounding)."""
        if self.merged:
            self.weight -= self.delta_weight()
            self.merged = False

    def to_linear(self) -> nn.Linear:
        """A plain ``nn.Linear`` with the update merged in (new tensors; this layer is unchanged)."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        linear = linear.to(device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(self.weight if self.merged else self.weight + self.delta_weight())
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        linear.weight.requires_grad_(self.weight.requires_grad)
        if self.bias is not None:
            linear.bias.requires_grad_(self.bias.requires_grad)
        return linear

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.rank}, alpha={self.alpha}, slices={self.slices}, merged={self.merged}"


def apply_lora(model: nn.Module, config: LoRAConfig) -> list[str]:
    """Replaces the chosen projections of every :class:`MultiHeadAttention` in ``model`` by :class:`LoRALinear`.

    The wrapped layers' weights and biases are frozen; the new ``lora_a`` / ``lora_b`` train.
    Cross-attention maps ``q`` to its ``to_q`` and ``k``/``v`` to slices of its ``to_kv``.

    Args:
        model: Any module holding attention layers (a model, a stack, one block).
        config: Rank, alpha, projections, dropout.

    Returns:
        The names of the adapted linear layers, e.g. ``decoder.blocks.0.attention.to_qkv``.
    """
    wanted = set(config.projections)
    adapted = []
    for name, attention in list(model.named_modules()):
        if not isinstance(attention, MultiHeadAttention):
            continue
        for attribute, slices in _targets(attention, wanted):
            linear = getattr(attention, attribute)
            if isinstance(linear, LoRALinear):
                raise ValueError(f"{name}.{attribute} already has LoRA adapters; apply_lora once per model")
            setattr(
                attention,
                attribute,
                LoRALinear.from_linear(linear, config.rank, config.alpha, slices, config.dropout),
            )
            adapted.append(f"{name}.{attribute}" if name else attribute)
    if not adapted:
        raise ValueError(
            "no MultiHeadAttention layers found to adapt: LoRA needs a model built from multimodal.layers"
        )
    return adapted


def merge_lora(model: nn.Module) -> nn.Module:
    """Replaces every :class:`LoRALinear` in ``model`` by a plain merged ``nn.Linear``, in place.

    The state dict then has the pretrained names and shapes only (no ``lora_*`` entries): what
    :func:`multimodal.convert.export.export_blocks` writes and any model without LoRA loads.

    Returns:
        ``model``.
    """
    for name, module in list(model.named_modules()):
        if isinstance(module, LoRALinear):
            parent_name, _, attribute = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, attribute, module.to_linear())
    return model


def lora_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The adapters' parameters of ``model`` by name (``...lora_a``, ``...lora_b``)."""
    return {
        name: p for name, p in model.named_parameters() if name.rsplit(".", 1)[-1] in ("lora_a", "lora_b")
    }


def _targets(
    attention: MultiHeadAttention, wanted: set[str]
) -> list[tuple[str, list[tuple[int, int]] | None]]:
    """``(attribute, slices)`` of the projections of one attention layer that ``wanted`` names."""
    dim = attention.to_out.out_features
    targets = []
    if attention.is_cross:
        if "q" in wanted:
            targets.append(("to_q", None))
        kv = [(index * dim, (index + 1) * dim) for index, name in enumerate("kv") if name in wanted]
        if kv:
            targets.append(("to_kv", kv))
    else:
        qkv = [(index * dim, (index + 1) * dim) for index, name in enumerate("qkv") if name in wanted]
        if qkv:
            targets.append(("to_qkv", qkv))
    if "out" in wanted:
        targets.append(("to_out", None))
    return targets

"""Names of the export format: which tensor of a model belongs to which part (``blocks``,
``embeddings``, ``head``), under names that do not depend on what the model called its stack.

The one :class:`~multimodal.layers.TransformerStack` of a model (``decoder`` of a ``CausalLM``,
``encoder`` of a ViT) is named ``stack``; a model with two stacks (the conditional
super-resolution Image Transformer) exports one, chosen with ``stack=``. Every tensor belongs to
one part:

* ``blocks``: ``stack.blocks.*`` and the final ``stack.norm.*`` (relative position tables live in
  the blocks' attention and travel with them);
* ``embeddings``: absolute positions ``stack.positions.*`` and whatever sits outside the stack and
  is not a head (token embeddings, patch embeddings, a class token);
* ``head``: top-level modules whose name starts with ``head``.

Used by the export and loading (:mod:`multimodal.convert.export`, :mod:`multimodal.convert.blocks`)
and by fine-tuning (:mod:`multimodal.models.parameters`), which selects parameters by the same parts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from torch import nn

from multimodal.layers.stack import TransformerStack

PARTS = ("blocks", "embeddings", "head")
FORMAT = "multimodal-blocks"
FORMAT_VERSION = 1
WEIGHTS_FILE = "blocks.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
STACK = "stack"
#: Config fields that change what block weights compute without changing their shapes.
BLOCK_FIELDS = ("dim", "num_heads", "ff_dim", "activation", "norm_eps", "bias")


def stack_name(model: nn.Module, stack: str | None = None) -> str:
    """Attribute path of the model's :class:`~multimodal.layers.TransformerStack` that holds its blocks.

    Args:
        model: Any model built from the shared blocks.
        stack: For a model with several stacks (the super-resolution encoder-decoder), which one:
            its attribute path (``decoder``, ``encoder.encoder``) or the unique first part of it
            (``encoder``). May be None for a single-stack model.

    Raises:
        ValueError: If the model has several stacks and ``stack`` does not name exactly one.
    """
    outer = _outer_stacks(model)
    if stack is None:
        if len(outer) != 1:
            raise ValueError(
                f"{type(model).__name__} has {len(outer)} Transformer stacks ({outer}); say which one holds "
                f"the blocks: `multimodal export --stack NAME`, finetune.init_stack: NAME or stack=NAME"
            )
        return outer[0]
    chosen = [name for name in outer if name == stack or name.startswith(stack + ".")]
    if len(chosen) != 1:
        raise ValueError(f"stack {stack!r} names {len(chosen)} of the stacks {outer} of {type(model).__name__}")
    return chosen[0]


def _outer_stacks(model: nn.Module) -> list[str]:
    stacks = [name for name, module in model.named_modules() if isinstance(module, TransformerStack)]
    return [
        name for name in stacks if not any(name.startswith(other + ".") for other in stacks if other != name)
    ]


def part_of(export_name: str) -> str:
    """The part (``blocks``, ``embeddings``, ``head``) an export name belongs to."""
    if export_name.startswith(f"{STACK}.positions."):
        return "embeddings"
    if export_name.startswith(f"{STACK}."):
        return "blocks"
    if export_name.split(".", 1)[0].startswith("head"):
        return "head"
    return "embeddings"


def export_names(model: nn.Module, stack: str | None = None) -> dict[str, str]:
    """Model state-dict name -> export name, for every entry (tied duplicates included; no LoRA adapters).

    With several stacks, ``stack`` (see :func:`stack_name`) is written as ``stack``; the tensors of
    the other stacks belong to no part and are left out.
    """
    stack = stack_name(model, stack)
    others = tuple(f"{name}." for name in _outer_stacks(model) if name != stack)
    names = {}
    for name in model.state_dict():
        if name.rsplit(".", 1)[-1] in ("lora_a", "lora_b") or name.startswith(others):
            continue
        names[name] = STACK + name[len(stack) :] if name == stack or name.startswith(stack + ".") else name
    return names


def select_names(model: nn.Module, select: Iterable[str], stack: str | None = None) -> dict[str, str]:
    """:func:`export_names` restricted to the parts in ``select``; also accepts ``blocks[:k]`` slices."""
    wanted = list(select)
    chosen = {}
    for name, exported in export_names(model, stack).items():
        if any(in_selection(exported, item) for item in wanted):
            chosen[name] = exported
    return chosen


def in_selection(export_name: str, item: str) -> bool:
    """Whether an export name falls in one selection item: a part, or ``blocks[a:b]`` (blocks a..b-1)."""
    match = re.fullmatch(r"blocks\[(\d*):(\d*)\]", item.replace(" ", ""))
    if match:
        found = re.match(rf"{STACK}\.blocks\.(\d+)\.", export_name)
        start, stop = int(match[1] or 0), int(match[2]) if match[2] else None
        return bool(found) and int(found[1]) >= start and (stop is None or int(found[1]) < stop)
    if item not in PARTS:
        raise ValueError(
            f"unknown part {item!r}; choose among {list(PARTS)} or 'blocks[:k]' (the first k blocks)"
        )
    return part_of(export_name) == item

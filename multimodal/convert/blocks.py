"""Loading pretrained weights by part (``blocks``, ``embeddings``, ``head``) into any model of the shared blocks.

The format, its part names and its reading live beside this module: :mod:`multimodal.convert.parts`
(which tensor is which part), :mod:`multimodal.convert.export` (writing and reading files) and
:mod:`multimodal.convert.positions` (resizing position tables). They are re-exported here.

An export is a folder with two files (no pickle anywhere)::

    blocks.safetensors   the tensors, under model-independent names (below)
    config.json          {"format": "multimodal-blocks", "model": {...the model config...}, ...}
    tokenizer.json       optional: the tokenizer the embeddings were trained with

Names in the file do not depend on what the stack was called in the model that wrote it: the one
:class:`~multimodal.layers.TransformerStack` of a model (``decoder`` of a ``CausalLM``, ``encoder``
of a ViT) is written as ``stack``. A model with two stacks (the conditional super-resolution
Image Transformer: ``encoder`` and ``decoder``) exports one of them, named with ``stack=``; the
other stack's tensors are left out. Every tensor belongs to one part:

* ``blocks``: ``stack.blocks.*`` and the final ``stack.norm.*`` (relative position tables live in
  the blocks' attention and travel with them);
* ``embeddings``: absolute positions ``stack.positions.*`` and whatever sits outside the stack and
  is not a head (token embeddings, patch embeddings, a class token);
* ``head``: top-level modules whose name starts with ``head``.

:func:`load_blocks` copies the chosen parts into a model of the same or another family (text
blocks into a music model, say) with strict checks: every selected tensor must exist on both sides
with the same shape, and the block-shaping config fields (``num_heads``, ``activation``, ...) must
agree, or the error lists every mismatch. Position tables are the exception — they are resized:

* absolute positions of an image grid (``grid_size`` or ``image_size / patch_size`` in the configs):
  bicubic interpolation of the grid, prefix (class) tokens kept, as timm does;
* absolute positions of a sequence: cropped when the new model is shorter (the first positions are
  exactly the trained ones), linearly interpolated when it is longer;
* 1D relative tables: cropped, or padded with the clipped edge distance (which is what the old
  model computed for those distances anyway);
* 2D relative tables: :func:`~multimodal.layers.positions.relative2d.resample_offset_table`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from multimodal.convert.export import Export, config_dict, export_blocks, export_from_state_dict, read_export
from multimodal.convert.folder import folder_export, is_model_folder
from multimodal.convert.parts import (
    BLOCK_FIELDS,
    PARTS,
    STACK,
    export_names,
    in_selection,
    part_of,
    select_names,
    stack_name,
)
from multimodal.convert.positions import resize_positions, resize_relative_table, resize_table

__all__ = [
    "PARTS", "STACK", "Export", "LoadReport", "export_blocks", "export_from_state_dict", "export_names",
    "in_selection", "load_blocks", "part_of", "read_export", "resize_positions", "resize_relative_table",
    "select_names", "stack_name",
]  # fmt: skip


@dataclass
class LoadReport:
    """What :func:`load_blocks` did.

    Attributes:
        loaded: Model parameter names that received pretrained values.
        resized: Those among them whose table was resized, with ``(file shape, model shape)``.
        skipped: Non-strict loads only: names left as they were and why.
    """

    loaded: list[str] = field(default_factory=list)
    resized: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"loaded {len(self.loaded)} pretrained tensors"]
        lines += [
            f"  resized {name}: {tuple(old)} -> {tuple(new)}" for name, (old, new) in self.resized.items()
        ]
        lines += [f"  skipped {name}: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines)


def _read_source(source: str | os.PathLike[str], stack: str | None) -> Export:
    """An export folder, a ``.safetensors`` file or a model folder (``multimodal export``'s) as an :class:`Export`."""
    return folder_export(source, stack) if is_model_folder(source) else read_export(source)


def load_blocks(
    model: nn.Module,
    source: str | os.PathLike[str] | Export,
    select: Sequence[str] = ("blocks",),
    *,
    strict: bool = True,
    stack: str | None = None,
) -> LoadReport:
    """Copies the selected parts of an export into ``model`` (in place, under ``torch.no_grad``).

    Args:
        model: A model built from the shared blocks, possibly with LoRA adapters (they stay as they are).
        source: A model folder, an export folder, a ``.safetensors`` file, or an :class:`Export` (a task checkpoint's:
            ``tasks.checkpoint.read_task_checkpoint``).
        select: Parts to load: ``blocks``, ``embeddings``, ``head``, or ``blocks[:k]`` for the first k blocks.
        strict: Raise on any missing / unexpected / mismatched tensor or block-shaping config field,
            listing all of them; False loads what fits and reports the rest in ``skipped``.
        stack: The stack of a multi-stack ``model`` that receives the blocks; see :func:`stack_name`.

    Returns:
        A :class:`LoadReport` (``loaded`` names are what :mod:`multimodal.models.parameters` treats as pretrained).

    Raises:
        ValueError: With every mismatch, and how to fix it.
    """
    export = source if isinstance(source, Export) else _read_source(source, stack)
    wanted = select_names(model, select, stack)
    target_config = config_dict(getattr(model, "config", None))
    state = model.state_dict()
    problems, planned = [], {}
    report = LoadReport()
    if any(item.replace(" ", "").startswith("blocks") for item in select):
        for key in BLOCK_FIELDS:
            if key in export.config and key in target_config and export.config[key] != target_config[key]:
                problems.append(f"config {key}: model {target_config[key]!r}, file {export.config[key]!r}")
    for name, exported in wanted.items():
        if exported not in export.tensors:
            problems.append(f"missing in file: {exported} (model {name}, shape {tuple(state[name].shape)})")
            report.skipped[name] = "not in the file"
            continue
        value, target = export.tensors[exported], state[name]
        if value.shape != target.shape:
            resized = resize_table(model, name, exported, value, tuple(target.shape), export, target_config)
            if resized is None:
                resized = _grown_vocabulary(value, target, export.config, target_config)
            if resized is None:
                problems.append(
                    f"shape mismatch: {exported}: model {tuple(target.shape)}, file {tuple(value.shape)}"
                )
                report.skipped[name] = f"shape {tuple(value.shape)} != {tuple(target.shape)}"
                continue
            report.resized[name] = (tuple(value.shape), tuple(target.shape))
            value = resized
        planned[name] = value
    selected_exports = set(wanted.values())
    for exported in sorted(export.tensors):
        if exported not in selected_exports and any(in_selection(exported, item) for item in select):
            problems.append(
                f"unexpected in file: {exported} (shape {tuple(export.tensors[exported].shape)}): the model has no such tensor"
            )
    if problems and strict:
        raise ValueError(_mismatch_message(model, export, select, problems))
    with torch.no_grad():
        for name, value in planned.items():
            state[name].copy_(value.to(dtype=state[name].dtype, device=state[name].device))
            report.loaded.append(name)
    return report


def _grown_vocabulary(value: torch.Tensor, target: torch.Tensor, source_config: dict, target_config: dict
                      ) -> torch.Tensor | None:  # fmt: skip
    """A token table ``(vocab, ...)`` of a vocabulary that grew at its end (new ids after the old ones, e.g.
    the AHEAD ids of given notes): the file's rows, then the model's own initial rows; else None."""
    old, new = source_config.get("vocab_size"), target_config.get("vocab_size")
    if not old or not new or not old < new or value.shape[0] != old or target.shape[0] != new:
        return None
    if value.shape[1:] != target.shape[1:]:
        return None
    return torch.cat([value.to(target.dtype), target[old:].detach().cpu().to(target.dtype)])


def _mismatch_message(model: nn.Module, export: Export, select: Sequence[str], problems: list[str]) -> str:
    shown = problems[:40] + ([f"... and {len(problems) - 40} more"] if len(problems) > 40 else [])
    sizes = {
        key: export.config[key]
        for key in ("dim", "num_layers", "num_heads", "ff_dim", "position", "max_seq_len")
        if key in export.config
    }
    return (
        f"cannot load {list(select)} from {export.source} into {type(model).__name__}: {len(problems)} mismatch(es)\n  "
        + "\n  ".join(shown)
        + f"\nFix: build the model with the file's sizes ({', '.join(f'{k}={v}' for k, v in sizes.items()) or 'see its config.json'}), "
        "leave the mismatched parts out of the selection (init_select / select), or load with strict=False to skip them."
    )

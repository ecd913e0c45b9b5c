"""Export and import of pretrained weights by part: ``blocks``, ``embeddings``, ``head``.

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
* 2D relative tables: :func:`~multimodal.layers.relative2d.resample_offset_table`.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from multimodal.layers.lora import LoRALinear, merge_lora
from multimodal.layers.relative import RelativePositionEmbedding
from multimodal.layers.relative2d import RelativePosition2D, resample_offset_table
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


@dataclass
class Export:
    """Tensors under export names and the config of the model they came from.

    Attributes:
        tensors: Export name -> tensor (CPU).
        config: The writer's model config as a dict (empty when unknown, e.g. a bare .safetensors).
        source: Where it was read from (for messages).
        causal: Whether the writer's stack was causal (None when unknown).
    """

    tensors: dict[str, Tensor]
    config: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    causal: bool | None = None


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


# ---------------------------------------------------------------------------------------- naming
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


# ----------------------------------------------------------------------------------------- export
def export_blocks(
    model: nn.Module,
    out_dir: str | os.PathLike[str],
    *,
    tokenizer: Any | None = None,
    metadata: dict[str, Any] | None = None,
    stack: str | None = None,
) -> Path:
    """Writes ``blocks.safetensors`` + ``config.json`` (+ ``tokenizer.json``) for ``model``.

    LoRA adapters are merged into the weights first (on a copy; ``model`` is unchanged). A tied
    head is written once, as the token embedding, and recorded as ``"tied_head": true``.

    Args:
        model: A model with a dataclass ``config`` (``CausalLM``, ViT, Image Transformer, ...).
        out_dir: Folder to write (created).
        tokenizer: Anything with ``save(path)``; written as ``tokenizer.json``.
        metadata: Extra JSON-serialisable entries for ``config.json`` (e.g. where it came from).
        stack: Which stack of a multi-stack model to export as the blocks (see :func:`stack_name`).

    Returns:
        The folder.
    """
    if any(isinstance(module, LoRALinear) for module in model.modules()):
        model = merge_lora(copy.deepcopy(model))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = model.state_dict()
    tensors, seen, tied = {}, {}, []
    stack = stack_name(model, stack)
    for name, exported in export_names(model, stack).items():
        tensor = state[name]
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype)
        if key in seen:
            tied.append((exported, seen[key]))
            continue
        seen[key] = exported
        tensors[exported] = tensor.detach().to("cpu").contiguous()
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_class": type(model).__name__,
        "model": _config_dict(getattr(model, "config", None)),
        "stack": stack,
        "causal": bool(getattr(model.get_submodule(stack), "causal", False)),
        "tied": {name: target for name, target in tied},
        "parts": {part: sorted(n for n in tensors if part_of(n) == part) for part in PARTS},
        **(metadata or {}),
    }
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": FORMAT})
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if tokenizer is not None:
        tokenizer.save(out / TOKENIZER_FILE)
    return out


def read_export(source: str | os.PathLike[str], stack: str | None = None) -> Export:
    """Reads an export folder, a ``.safetensors`` file (config.json beside it, if any) or a task ``.ckpt``.

    Checkpoints are read with ``torch.load(weights_only=True)``; their model weights (``model.*``)
    are renamed to export names on the fly. ``stack`` picks the stack of a multi-stack checkpoint
    (as in :func:`stack_name`); export files hold one stack already.
    """
    path = Path(source)
    if path.is_dir():
        if not (path / WEIGHTS_FILE).is_file():
            raise FileNotFoundError(
                f"{path} has no {WEIGHTS_FILE}; make one with `multimodal export --checkpoint CKPT --out {path}` "
                f"or `multimodal convert gpt2 --hf-dir HF_DIR --out {path}`"
            )
        path = path / WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"init_from={str(source)!r} does not exist; give an export folder, a .safetensors or a .ckpt"
        )
    if path.suffix == ".ckpt":
        return _read_checkpoint(path, stack)
    if path.suffix != ".safetensors":
        raise ValueError(f"{path}: expected an export folder, a .safetensors file or a Lightning .ckpt")
    with safe_open(str(path), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
    config_path = path.with_name(CONFIG_FILE)
    meta = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    for name, target in meta.get("tied", {}).items():
        tensors.setdefault(name, tensors[target])
    return Export(tensors, meta.get("model", {}), str(path), meta.get("causal"))


def _read_checkpoint(path: Path, stack: str | None) -> Export:
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    state = {
        name[len("model.") :]: t
        for name, t in checkpoint.get("state_dict", {}).items()
        if name.startswith("model.")
    }
    if not state:
        raise ValueError(f"{path} holds no `model.*` weights: is it a checkpoint of a multimodal task?")
    if any(name.endswith(("lora_a", "lora_b")) for name in state):
        raise ValueError(
            f"{path} has LoRA adapters: merge them first with `multimodal export --checkpoint {path} --out DIR` "
            f"and set init_from: DIR"
        )
    stacks = sorted({match[1] for name in state if (match := re.match(r"([\w.]+?)\.blocks\.\d+\.", name))})
    chosen = [name for name in stacks if stack is None or name == stack or name.startswith(stack + ".")]
    if len(chosen) != 1:
        raise ValueError(
            f"{path}: cannot tell which Transformer stack among {stacks} holds the blocks; "
            f"name one (finetune.init_stack / stack=) or export it first with `multimodal export --stack NAME`"
        )
    stack = chosen[0]
    others = tuple(f"{name}." for name in stacks if name != stack)
    tensors = {
        (STACK + name[len(stack) :] if name.startswith(stack + ".") else name): t
        for name, t in state.items()
        if not name.startswith(others)
    }
    config = checkpoint.get("hyper_parameters", {}).get("model", {})
    return Export(tensors, config if isinstance(config, dict) else {}, str(path), None)


# ----------------------------------------------------------------------------------------- import
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
        source: An export folder, ``.safetensors`` file, task ``.ckpt``, or an :class:`Export`.
        select: Parts to load: ``blocks``, ``embeddings``, ``head``, or ``blocks[:k]`` for the first k blocks.
        strict: Raise on any missing / unexpected / mismatched tensor or block-shaping config field,
            listing all of them; False loads what fits and reports the rest in ``skipped``.
        stack: The stack of a multi-stack ``model`` that receives the blocks (and, when ``source``
            is a multi-stack checkpoint, the one read from it); see :func:`stack_name`.

    Returns:
        A :class:`LoadReport` (``loaded`` names are what :mod:`multimodal.finetune` treats as pretrained).

    Raises:
        ValueError: With every mismatch, and how to fix it.
    """
    export = source if isinstance(source, Export) else read_export(source, stack)
    wanted = select_names(model, select, stack)
    target_config = _config_dict(getattr(model, "config", None))
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
            resized = _resize(model, name, exported, value, tuple(target.shape), export, target_config)
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


# --------------------------------------------------------------------------------------- resizing
def _resize(
    model: nn.Module,
    name: str,
    exported: str,
    value: Tensor,
    shape: tuple[int, ...],
    export: Export,
    target_config: dict[str, Any],
) -> Tensor | None:
    """``value`` resized to ``shape`` if it is a position table that can be resized; else None."""
    owner_name, _, attribute = name.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    if isinstance(owner, RelativePositionEmbedding) and attribute == "weight":
        if export.causal is not None and export.causal != owner.causal:
            return None
        if value.shape[0] != shape[0] or value.shape[2] != shape[2]:
            return None
        return resize_relative_table(value, shape[1], owner.causal)
    if isinstance(owner, RelativePosition2D) and attribute in ("rows", "cols"):
        if value.shape[0] != shape[0] or value.shape[2] != shape[2]:
            return None
        return resample_offset_table(value, (shape[1] + 1) // 2)
    if _is_absolute_position_table(exported) and value.dim() == len(shape) and value.shape[-1] == shape[-1]:
        return resize_positions(value, shape[-2], _grid(export.config), _grid(target_config))
    return None


def _is_absolute_position_table(exported: str) -> bool:
    return (
        re.search(r"(^|\.)(positions\.weight|pos_embed|position_embeddings?(\.weight)?)$", exported)
        is not None
    )


def resize_positions(
    table: Tensor,
    length: int,
    old_grid: tuple[int, int] | None = None,
    new_grid: tuple[int, int] | None = None,
) -> Tensor:
    """Absolute position table ``(..., old_len, dim)`` -> ``(..., length, dim)``.

    With both grids known (image patches) the last ``rows * cols`` entries are a grid, resized by
    bicubic interpolation (anti-aliased when shrinking, as timm does); the prefix entries before it
    (class token) are kept. Otherwise the table is a sequence: cropped when shorter (trained
    positions stay exact), linearly interpolated when longer.

    Args:
        table: The trained table; leading dimensions (e.g. timm's ``(1, L, dim)``) are kept.
        length: Entries wanted.
        old_grid: ``(rows, cols)`` the table was trained on, or None.
        new_grid: ``(rows, cols)`` wanted, or None.
    """
    old_len = table.shape[-2]
    if old_grid is not None and new_grid is not None:
        prefix = old_len - old_grid[0] * old_grid[1]
        if prefix < 0 or prefix != length - new_grid[0] * new_grid[1]:
            raise ValueError(
                f"position table of {old_len} entries does not fit grids {old_grid} -> {new_grid} with {length} entries"
            )
        lead = table.shape[:-2]
        flat = table.reshape(-1, old_len, table.shape[-1]).float()
        grid = flat[:, prefix:].reshape(flat.shape[0], *old_grid, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", align_corners=False, antialias=True)
        grid = grid.permute(0, 2, 3, 1).reshape(flat.shape[0], -1, flat.shape[-1])
        out = torch.cat([flat[:, :prefix], grid], dim=1)
        return out.reshape(*lead, length, table.shape[-1]).to(table.dtype)
    if length <= old_len:
        return table[..., :length, :].clone()
    lead = table.shape[:-2]
    flat = table.reshape(-1, old_len, table.shape[-1]).transpose(1, 2).float()  # (n, dim, old_len)
    out = F.interpolate(flat, size=length, mode="linear", align_corners=True).transpose(1, 2)
    return out.reshape(*lead, length, table.shape[-1]).to(table.dtype)


def resize_relative_table(table: Tensor, rows: int, causal: bool) -> Tensor:
    """A 1D relative table ``(heads, old_rows, head_dim)`` for another clipping distance.

    Row ``max_distance + r`` holds distance ``r``; a causal table has rows for ``-k .. 0``, a
    bidirectional one for ``-k .. k``. A larger ``k`` repeats the edge rows (the old model clipped
    those distances to its edge), a smaller one drops the far rows.
    """
    old_rows = table.shape[1]
    old_k = old_rows - 1 if causal else (old_rows - 1) // 2
    new_k = rows - 1 if causal else (rows - 1) // 2
    distances = torch.arange(-new_k, (0 if causal else new_k) + 1)
    index = distances.clamp(-old_k, 0 if causal else old_k) + old_k
    return table[:, index].clone()


def _grid(config: dict[str, Any]) -> tuple[int, int] | None:
    """``(rows, cols)`` of a model's patch grid from its config dict, or None for sequences."""
    if config.get("grid_size"):
        return tuple(int(size) for size in config["grid_size"])
    if config.get("image_size") and config.get("patch_size"):
        image, patch = config["image_size"], config["patch_size"]
        image = (image, image) if isinstance(image, int) else tuple(image)
        patch = (patch, patch) if isinstance(patch, int) else tuple(patch)
        return image[0] // patch[0], image[1] // patch[1]
    return None


def _config_dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if is_dataclass(config):
        return json.loads(json.dumps(asdict(config)))  # tuples -> lists, as config.json holds them
    return dict(config)

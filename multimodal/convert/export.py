"""Writing and reading the export format: ``blocks.safetensors`` + ``config.json`` (+ ``tokenizer.json``).

An export is a folder with (no pickle anywhere)::

    blocks.safetensors   the tensors, under the model-independent names of :mod:`multimodal.convert.parts`
    config.json          {"format": "multimodal-blocks", "model": {...the model config...}, ...}
    tokenizer.json       optional: the tokenizer the embeddings were trained with

:func:`export_blocks` writes one from a model; :func:`read_export` reads a folder or a
``.safetensors`` file; :func:`export_from_state_dict` names the tensors of any model's state dict
(a training checkpoint's, read by ``tasks.checkpoint.read_task_checkpoint``) the same way.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from multimodal.convert.parts import (
    CONFIG_FILE,
    FORMAT,
    FORMAT_VERSION,
    PARTS,
    STACK,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    export_names,
    part_of,
    stack_name,
)
from multimodal.data.storage import atomic_write_text, give_default_mode
from multimodal.layers.lora import LoRALinear, merge_lora


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
        "model": config_dict(getattr(model, "config", None)),
        "stack": stack,
        "causal": bool(getattr(model.get_submodule(stack), "causal", False)),
        "tied": {name: target for name, target in tied},
        "parts": {part: sorted(n for n in tensors if part_of(n) == part) for part in PARTS},
        **(metadata or {}),
    }
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": FORMAT})
    give_default_mode(out / WEIGHTS_FILE)  # safetensors writes it 0600
    atomic_write_text(out / CONFIG_FILE, json.dumps(config, indent=2) + "\n")
    if tokenizer is not None:
        tokenizer.save(out / TOKENIZER_FILE)
    return out


def read_export(source: str | os.PathLike[str]) -> Export:
    """Reads an export folder or a ``.safetensors`` file (with the ``config.json`` beside it, if any).

    A training checkpoint (``.ckpt``) is read by ``tasks.checkpoint.read_task_checkpoint``, which
    knows the Lightning layout; here it is an error that says so.
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
        raise ValueError(f"{path} is a training checkpoint: read it with tasks.checkpoint.read_task_checkpoint")
    if path.suffix != ".safetensors":
        raise ValueError(f"{path}: expected an export folder, a .safetensors file or a Lightning .ckpt")
    with safe_open(str(path), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
    config_path = path.with_name(CONFIG_FILE)
    meta = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    for name, target in meta.get("tied", {}).items():
        tensors.setdefault(name, tensors[target])
    return Export(tensors, meta.get("model", {}), str(path), meta.get("causal"))


def export_from_state_dict(
    state: dict[str, Tensor], config: dict[str, Any], source: str, stack: str | None = None
) -> Export:
    """The tensors of a model's state dict under export names (one Transformer stack renamed ``stack``).

    Args:
        state: The model's ``state_dict()`` (names as in the model, no prefix).
        config: The model config as a dict (for block-field checks and position resizing).
        source: Where it came from (for messages).
        stack: Which stack of a multi-stack model holds the blocks: its path or the unique first
            part of it; None when there is one.
    """
    if any(name.endswith(("lora_a", "lora_b")) for name in state):
        raise ValueError(
            f"{source} has LoRA adapters: merge them first with `multimodal export --checkpoint {source} --out DIR` "
            f"and set init_from: DIR"
        )
    stacks = sorted({match[1] for name in state if (match := re.match(r"([\w.]+?)\.blocks\.\d+\.", name))})
    chosen = [name for name in stacks if stack is None or name == stack or name.startswith(stack + ".")]
    if len(chosen) != 1:
        raise ValueError(
            f"{source}: cannot tell which Transformer stack among {stacks} holds the blocks; "
            f"name one (finetune.init_stack / stack=) or export it first with `multimodal export --stack NAME`"
        )
    stack = chosen[0]
    others = tuple(f"{name}." for name in stacks if name != stack)
    tensors = {
        (STACK + name[len(stack) :] if name.startswith(stack + ".") else name): t
        for name, t in state.items()
        if not name.startswith(others)
    }
    return Export(tensors, config, source, None)


def config_dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if is_dataclass(config):
        return json.loads(json.dumps(asdict(config)))  # tuples -> lists, as config.json holds them
    return dict(config)

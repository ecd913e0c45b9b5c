"""Reading a Hugging Face model folder without ``transformers`` and without unpickling code.

``config.json`` as a dict, and the weights from ``model.safetensors`` (preferred) or
``pytorch_model.bin`` (``torch.load(weights_only=True)``), whole or sharded (``*.index.json``).
The converters (:mod:`multimodal.convert.gpt2`, :mod:`multimodal.convert.llama`) build on these and
on :func:`load_causal_lm`, which turns a folder into our ``CausalLM`` given the family's two mappings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor

from multimodal.convert.weight_shapes import check_config_fits
from multimodal.models import CausalLM, CausalLMConfig


def read_weights(folder: str | os.PathLike[str]) -> dict[str, Tensor]:
    """``model.safetensors`` (preferred) or ``pytorch_model.bin`` of a Hugging Face folder, without unpickling code.

    Sharded checkpoints (``*.index.json``) are read shard by shard.
    """
    folder = Path(folder)
    for index_name, reader in (
        ("model.safetensors.index.json", _read_safetensors),
        ("pytorch_model.bin.index.json", _read_bin),
    ):
        if (folder / index_name).is_file():
            shards = sorted(set(read_json(folder / index_name)["weight_map"].values()))
            state: dict[str, Tensor] = {}
            for shard in shards:
                state.update(reader(folder / shard))
            return state
    if (folder / "model.safetensors").is_file():
        return _read_safetensors(folder / "model.safetensors")
    if (folder / "pytorch_model.bin").is_file():
        return _read_bin(folder / "pytorch_model.bin")
    raise FileNotFoundError(f"{folder} has neither model.safetensors nor pytorch_model.bin")


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    return load_file(str(path), device="cpu")


def _read_bin(path: Path) -> dict[str, Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)


def read_json(path: Path) -> dict[str, Any]:
    """A folder's JSON file (``config.json``, an index); a missing one says what folder is expected."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: give the Hugging Face model folder (config.json + weights)"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def load_causal_lm(
    hf_dir: str | os.PathLike[str],
    family: str,
    make_config: Callable[..., CausalLMConfig],
    convert_state: Callable[[dict[str, Tensor], CausalLMConfig], dict[str, Tensor]],
    **config_overrides: Any,
) -> CausalLM:
    """Our ``CausalLM`` (eval mode) with the weights of a Hugging Face folder of one model family.

    Args:
        hf_dir: Folder with ``config.json`` and the weights (see :func:`read_weights`).
        family: The family's name in error messages (``"GPT-2"``, ``"Llama"``).
        make_config: ``config.json`` as a dict (and ``config_overrides``) -> our config.
        convert_state: The family's weight names and layouts -> ours.
        config_overrides: Changes to the derived :class:`CausalLMConfig` (e.g. ``dropout=0.0``).

    Raises:
        ValueError: Naming ``config.json`` when its sizes are not whole numbers >= 1, an option is
            unsupported, or its sizes do not fit the weights (checked before the model is allocated);
            naming the folder when weights are missing or left over.
    """
    folder = Path(hf_dir)
    try:
        config = make_config(read_json(folder / "config.json"), **config_overrides)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{folder / 'config.json'}: {' '.join(str(error).split())}") from error
    state = convert_state(read_weights(folder), config)
    shapes = {name: tuple(tensor.shape) for name, tensor in state.items()}
    check_config_fits(CausalLM, config, shapes, str(folder / "config.json"))
    model = CausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [name for name in missing if not (config.tie_embeddings and name == "head.weight")]
    if missing or unexpected:
        raise ValueError(f"{folder}: {family} weights do not fit the config: missing {missing}, unexpected {unexpected}")
    return model.eval()

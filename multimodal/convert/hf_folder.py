"""Reading a Hugging Face model folder without ``transformers`` and without unpickling code.

``config.json`` as a dict, and the weights from ``model.safetensors`` (preferred) or
``pytorch_model.bin`` (``torch.load(weights_only=True)``), whole or sharded (``*.index.json``).
The converters (:mod:`multimodal.convert.gpt2`, :mod:`multimodal.convert.llama`) build on these.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor


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

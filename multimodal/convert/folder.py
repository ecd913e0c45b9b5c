"""A trained model is a folder: ``load(path)`` gives the model and its tokenizer, without Lightning.

``multimodal export --checkpoint CKPT --out DIR`` writes::

    DIR/config.json        {"format": "multimodal-model", "family": "CausalLM", "model": {...config...},
                            "task": "tasks.music_continuation.MusicContinuation", "task_settings": {...},
                            "tokenizer_class": "multimodal.tokenizers.midi.MidiTokenizer"}
    DIR/model.safetensors  every weight of the model (tied weights stored once)
    DIR/tokenizer.json     the tokenizer, when the model has one
    DIR/README.md          what it is: task, data, validation numbers, parameters, the command that trained it

:func:`load` takes such a folder, or a training checkpoint (``.ckpt``), and returns ``(model, tokenizer)`` in eval mode on the requested device. Nothing is
unpickled (safetensors, JSON, ``torch.load(weights_only=True)``), and the classes a file names
are looked up in :data:`FAMILIES` and under ``multimodal.tokenizers.`` only.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model
from torch import nn

from multimodal.class_paths import import_class
from multimodal.convert.export import Export, export_from_state_dict
from multimodal.convert.weight_shapes import check_config_fits, weight_shapes
from multimodal.data.storage import give_default_mode
from multimodal.layers.lora import LoRALinear, merge_lora
from multimodal.layers.quantize import WEIGHT_SCHEMES, PackedLinear, quantize_model, set_kv_cache_dtype
from multimodal.models.config import CausalLMConfig, ImageTransformerConfig, TranscriberConfig, ViTConfig
from multimodal.models.convnet import ConvNet, ConvNetConfig
from multimodal.models.image_transformer import ImageTransformer
from multimodal.models.lm import CausalLM
from multimodal.models.super_resolution import (
    ConditionalImageTransformer,
    ConditionalSuperResolutionConfig,
    SuperResolutionConfig,
    SuperResolutionRegressor,
)
from multimodal.models.transcriber import Transcriber
from multimodal.models.vit import ViT

FORMAT = "multimodal-model"
TOKENIZER_PACKAGES = ("multimodal.tokenizers",)
"""Where the tokenizer class a checkpoint or model folder names may come from."""
CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, README_FILE = "config.json", "model.safetensors", "tokenizer.json", "README.md"

#: Model family name -> (config class, model class). The only classes a model folder can name.
FAMILIES: dict[str, tuple[type, Callable[[Any], nn.Module]]] = {
    "CausalLM": (CausalLMConfig, CausalLM),
    "ViT": (ViTConfig, ViT),
    "ConvNet": (ConvNetConfig, ConvNet),
    "ImageTransformer": (ImageTransformerConfig, ImageTransformer),
    "SuperResolutionRegressor": (SuperResolutionConfig, SuperResolutionRegressor),
    "ConditionalImageTransformer": (ConditionalSuperResolutionConfig, ConditionalImageTransformer),
    "Transcriber": (TranscriberConfig, Transcriber),
}

#: The family of each task's model, for checkpoints that do not record it (written before it was).
TASK_FAMILIES = {
    "tasks.music_continuation.MusicContinuation": "CausalLM",
    "tasks.language_modeling.LanguageModeling": "CausalLM",
    "tasks.image_classification.ImageClassification": "ViT",
    "tasks.classification.ImageClassification": "ViT",
    "tasks.image_classification.ConvNetClassification": "ConvNet",
    "tasks.image_generation.ImageGeneration": "ImageTransformer",
    "tasks.super_resolution.SuperResolution": "SuperResolutionRegressor",
    "tasks.super_resolution.AutoregressiveSuperResolution": "ConditionalImageTransformer",
    "tasks.transcription.Transcription": "Transcriber",
}


def family_of(model: nn.Module) -> str:
    """The :data:`FAMILIES` name of ``model``'s class."""
    for name, (_, model_class) in FAMILIES.items():
        if type(model) is model_class:
            return name
    raise ValueError(f"{type(model).__name__} is not a model family a folder can hold ({sorted(FAMILIES)})")


def save_model_folder(
    model: nn.Module,
    folder: str | Path,
    *,
    tokenizer: Any | None = None,
    task: str | None = None,
    task_settings: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    training_data: dict[str, Any] | None = None,
    readme: str | None = None,
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
) -> Path:
    """Writes ``model`` (with its config, tokenizer and a README) as a model folder; returns the folder.

    Args:
        model: One of the :data:`FAMILIES`, with a ``config`` dataclass; LoRA adapters are merged
            into the weights (on a copy).
        folder: Where to write (created).
        tokenizer: Saved as ``tokenizer.json`` (any of ``multimodal.tokenizers``).
        task: Class path of the task that trained it (the CLI commands rebuild that task).
        task_settings: The task's other init arguments (class names, sampling defaults, ...).
        data: The data settings of the run (held-out pieces, context length) for the commands.
        training_data: What the run's training data showed that the commands check inputs against, e.g. a music
            model's ``part_ranges`` (:func:`multimodal.music.ranges.part_ranges`).
        readme: Text of ``README.md``.
        dtype: Store the floating-point weights in this dtype (``torch.float16``: half the size); :func:`load`
            reads them back into a float32 model. None: as they are.
        quantize: ``"int8"``: store int8 weights with per-channel scales (a quarter of float32's
            size); ``"float16"``: float16 linear weights (half)
            (:func:`~multimodal.layers.quantize.quantize_model`); :func:`load` gives the quantized model. A model quantized already is stored as it is.
    """
    if any(isinstance(module, LoRALinear) for module in model.modules()):
        model = merge_lora(copy.deepcopy(model))  # the folder holds plain weights; the caller's model is unchanged
    if quantize is not None and getattr(model, "quantization", None) != quantize:
        model = quantize_model(copy.deepcopy(model), quantize)
    if dtype is not None:
        model = _float_weights_to(copy.deepcopy(model), dtype)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {"format": FORMAT, "family": family_of(model), "model": dataclasses.asdict(model.config)}
    if getattr(model, "quantization", None):
        meta["quantization"] = model.quantization
    if task is not None:
        meta["task"], meta["task_settings"] = task, task_settings or {}
    if data is not None:
        meta["data"] = data
    if training_data:
        meta["training_data"] = training_data
    if tokenizer is not None:
        tokenizer.save(folder / TOKENIZER_FILE)
        meta["tokenizer_class"] = f"{type(tokenizer).__module__}.{type(tokenizer).__qualname__}"
    save_model(model, str(folder / WEIGHTS_FILE))
    give_default_mode(folder / WEIGHTS_FILE)  # safetensors writes it 0600, the rest of the folder is 0644
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
    if readme is not None:
        (folder / README_FILE).write_text(readme, encoding="utf-8")
    return folder


def is_model_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder written by :func:`save_model_folder`."""
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("format") == FORMAT
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def read_model_folder(path: str | Path) -> dict[str, Any]:
    """The ``config.json`` of a model folder, checked: the format, a known family, its weights file there,
    and a model config that fits those weights (names and shapes from the file's header, nothing
    allocated: :func:`check_fits`)."""
    folder = Path(path)
    config_path = folder / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(2, f"no {CONFIG_FILE}: not a model folder (make one with `multimodal export`)", str(folder))
    try:
        meta = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{config_path}: not valid JSON ({error})") from error
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{config_path}: not a {FORMAT} config (its 'format' is {meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("family") not in FAMILIES:
        raise ValueError(f"{config_path}: unknown model family {meta.get('family')!r}; a folder can hold {sorted(FAMILIES)}")
    if not (folder / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(2, f"the model folder has no {WEIGHTS_FILE}", str(folder))
    if "tokenizer_class" in meta and not (folder / TOKENIZER_FILE).is_file():
        raise FileNotFoundError(2, f"config.json names a tokenizer but {TOKENIZER_FILE} is missing", str(folder))
    if meta.get("quantization") not in (None, *WEIGHT_SCHEMES):
        raise ValueError(f"{config_path}: unknown quantization {meta['quantization']!r}; known: {list(WEIGHT_SCHEMES)}")
    check_fits(meta["family"], meta.get("model"), weight_shapes(folder / WEIGHTS_FILE), str(config_path),
               quantization=meta.get("quantization"))  # fmt: skip
    return meta


def check_fits(
    family: str, config: Any, shapes: dict[str, tuple[int, ...]], source: str, quantization: str | None = None
) -> None:
    """Raises ``ValueError`` (naming ``source``) unless ``config`` is a valid config of ``family`` whose model
    (with its linear layers quantized by ``quantization``) has exactly the tensors ``shapes`` (name -> shape)
    describes; checked before any model is allocated.

    Every path that builds a model from a file's config calls it (model folders, checkpoints of
    :func:`load`); see :func:`multimodal.convert.weight_shapes.check_config_fits` for how.
    """
    if family not in FAMILIES:
        raise ValueError(f"{source}: unknown model family {family!r}; known: {sorted(FAMILIES)}")
    config_class, model_class = FAMILIES[family]
    if not isinstance(config, dict):
        raise ValueError(f"{source}: its model config is a {type(config).__name__}, not a mapping of fields")
    try:
        config = config_class(**config)
    except (TypeError, ValueError) as error:  # unknown fields, sizes that are not whole numbers >= 1, ...
        raise ValueError(f"{source}: {' '.join(str(error).split())}") from error
    prepare = None if quantization is None else lambda model: quantize_model(model, quantization)
    check_config_fits(model_class, config, shapes, source, prepare=prepare)


def build_model(family: str, config: dict[str, Any]) -> nn.Module:
    """A freshly initialised model of ``family`` from its config dict."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known: {sorted(FAMILIES)}")
    config_class, model_class = FAMILIES[family]
    return model_class(config_class(**config))


def load_tokenizer(class_path: str, json_text: str, source: str = "model folder") -> Any:
    """A tokenizer from its JSON; its class is checked to be one of ``multimodal.tokenizers`` before any import.

    ``source`` names the user's file (checkpoint, folder) in messages, not the scratch file the JSON
    passes through.
    """
    tokenizer_class = import_class(class_path, packages=TOKENIZER_PACKAGES, source=source)
    if not callable(getattr(tokenizer_class, "load", None)):
        raise ValueError(f"{source}: {class_path!r} is not a tokenizer (it has no load)")
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / TOKENIZER_FILE
        path.write_text(json_text, encoding="utf-8")
        try:
            return tokenizer_class.load(path)
        except Exception as error:  # the Rust tokenizers library raises plain Exceptions on bad JSON
            detail = " ".join(str(error).replace(str(path), "its tokenizer JSON").split())[:200]  # not the scratch path
            raise ValueError(f"{source}: its tokenizer does not load ({detail})") from error


def load(
    path: str | Path,
    device: str | torch.device = "cpu",
    *,
    quantize: str | None = None,
    kv_cache_dtype: str | torch.dtype | None = None,
) -> tuple[nn.Module, Any | None]:
    """``(model, tokenizer)`` of a model folder or a training checkpoint, in eval mode on ``device``.

    Args:
        path: A model folder (``multimodal export``) or a ``.ckpt`` written by ``multimodal fit``
            (the commands also take a run's folder: ``tasks.runs.resolve_checkpoint``).
        device: Where the model goes.
        quantize: ``"int8"`` or ``"float16"``: reduced-precision linear weights for faster CPU
            inference (:func:`~multimodal.layers.quantize.quantize_model`); a folder exported with
            them loads quantized without it.
        kv_cache_dtype: ``"float16"`` or ``"bfloat16"``: decoding stores its KV caches in half the
            memory (:func:`~multimodal.layers.quantize.set_kv_cache_dtype`).

    Returns:
        The model and its tokenizer (None for models without one: ViT, super-resolution).
    """
    path = Path(path)
    if is_model_folder(path):
        model, tokenizer = model_of_folder(path, read_model_folder(path), device)
    else:
        model, tokenizer = _load_checkpoint(path, device)
    if quantize is not None:
        quantize_model(model, quantize)
    return set_kv_cache_dtype(model, kv_cache_dtype), tokenizer


def model_of_folder(folder: Path, meta: dict[str, Any], device: str | torch.device = "cpu") -> tuple[nn.Module, Any | None]:
    """The model (eval mode, on ``device``) and tokenizer (or None) of a model folder whose ``config.json`` was
    read and checked (``meta``: :func:`read_model_folder`)."""
    model = build_model(meta["family"], meta["model"])
    load_folder_weights(model, folder, meta.get("quantization"))
    return model.to(device).eval(), folder_tokenizer(folder, meta)


def load_folder_weights(model: nn.Module, folder: str | Path, quantization: str | None = None) -> None:
    """Fills ``model`` with a model folder's ``model.safetensors`` (``quantization``: the folder's, from its
    config: the model's linear layers are quantized first); names that do not match are a ``ValueError``."""
    if quantization is not None:
        quantize_model(model, quantization)
    missing, unexpected = load_model(model, str(Path(folder) / WEIGHTS_FILE), strict=False)
    if missing or unexpected:
        raise ValueError(f"{Path(folder) / WEIGHTS_FILE}: weights do not fit the config: missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}")  # fmt: skip


def folder_tokenizer(folder: str | Path, meta: dict[str, Any]) -> Any | None:
    """The tokenizer of a model folder (``meta``: its checked ``config.json``), or None when it has none."""
    if "tokenizer_class" not in meta:
        return None
    path = Path(folder) / TOKENIZER_FILE
    return load_tokenizer(meta["tokenizer_class"], path.read_text(encoding="utf-8"), source=str(path))


def _load_checkpoint(path: Path, device: str | torch.device) -> tuple[nn.Module, Any | None]:
    """A Lightning checkpoint of one of our tasks, read as tensors and plain values only."""
    checkpoint_path = path
    if path.is_dir():
        raise FileNotFoundError(2, "neither a model folder (no config.json of `multimodal export`) nor a checkpoint file",
                                str(path))  # fmt: skip
    try:
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated zips, pickles needing code, text files, ...
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{checkpoint_path}: not a readable checkpoint or model folder ({detail[:200]})") from error
    entry = checkpoint.get("multimodal") if isinstance(checkpoint, dict) else None
    if not entry:
        raise ValueError(f"{checkpoint_path}: not written by a multimodal task (no 'multimodal' entry)")
    family = entry.get("family") or TASK_FAMILIES.get(entry.get("task", ""))
    config = (checkpoint.get("hyper_parameters") or {}).get("model")
    if family is None or not isinstance(config, dict):
        raise ValueError(f"{checkpoint_path}: its task {entry.get('task')!r} has no model family a folder can hold")
    if family == "SuperResolutionRegressor" and "method" in config:
        raise ValueError(f"{checkpoint_path}: a super-resolution checkpoint of the old layout; load it with "
                         f"tasks.checkpoint.load_task, or export it with `multimodal export`")  # fmt: skip
    state = {name[len("model.") :]: value for name, value in checkpoint["state_dict"].items() if name.startswith("model.")}
    shapes = {name: tuple(value.shape) for name, value in state.items()}
    check_fits(family, config, shapes, str(checkpoint_path))  # before allocating what the config describes
    model = build_model(family, config)
    model.load_state_dict(state)
    tokenizer = load_tokenizer(entry.get("tokenizer_class", ""), entry["tokenizer"], source=str(path)) if "tokenizer" in entry else None
    return model.to(device).eval(), tokenizer


def folder_export(folder: str | Path, stack: str | None = None) -> Export:
    """A model folder's weights under export names, for ``finetune.init_from`` (``stack``: which stack of two)."""
    model, _ = load(folder)
    if getattr(model, "quantization", None):
        raise ValueError(f"{folder}: its weights are {model.quantization} (an inference export); start a run from a "
                         f"float folder (`multimodal export` without --quantize) or the checkpoint")  # fmt: skip
    return export_from_state_dict(model.state_dict(), dataclasses.asdict(model.config), str(folder), stack)


def _float_weights_to(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``model`` with its floating-point parameters and buffers in ``dtype``; the reduced-precision layers
    stay as they are (their weights, scales and biases are what their kernels take)."""
    for module in model.modules():
        if isinstance(module, PackedLinear):
            continue
        for tensor in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
            if tensor is not None and tensor.is_floating_point():
                tensor.data = tensor.data.to(dtype)
    return model

"""Self-contained checkpoints: which task made them and its tokenizer, loaded without unpickling.

Lightning checkpoints written by our tasks carry a ``"multimodal"`` entry with the task's class
path and the tokenizer's JSON. :func:`load_task` rebuilds both with
``torch.load(..., weights_only=True)``: a checkpoint can hold tensors and plain values only, and
hands over the run's data settings with them (:class:`LoadedCheckpoint`), read from the same file.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import torch

from multimodal.class_paths import check_config_class_paths, import_class
from multimodal.convert.export import Export, export_from_state_dict
from multimodal.convert.folder import (
    CONFIG_FILE,
    TASK_FAMILIES,
    check_fits,
    family_of,
    folder_tokenizer,
    is_model_folder,
    load_folder_weights,
    load_tokenizer,
    model_of_folder,
    read_model_folder,
)
from tasks.runs import resolve_checkpoint


class SelfContainedCheckpoint:
    """Mixin for our ``LightningModule`` s: each checkpoint records the task class and the data's tokenizer.

    The data module's ``tokenizer`` attribute (MIDI events, BPE, pixel levels) is stored when it
    has one, so ``multimodal generate`` / :func:`load_task` need nothing but the checkpoint.
    """

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        checkpoint["multimodal"] = describe(self, getattr(datamodule, "tokenizer", None))


def describe(task: Any, tokenizer: Any | None) -> dict[str, str]:
    """The ``"multimodal"`` checkpoint entry for ``task`` (its model family, and its data's tokenizer, if any)."""
    entry = {"task": _path_of(type(task))}
    with contextlib.suppress(AttributeError, ValueError):  # a task without one of our model families
        entry["family"] = family_of(task.model)
    if tokenizer is not None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "tokenizer.json"
            tokenizer.save(path)
            entry["tokenizer"] = path.read_text()
        entry["tokenizer_class"] = _path_of(type(tokenizer))
    return entry


class LoadedCheckpoint(NamedTuple):
    """What :func:`load_task` rebuilds from a checkpoint or model folder."""

    task: Any
    """The task (eval mode, on the requested device)."""
    tokenizer: Any | None
    """Its data's tokenizer, if the run had one."""
    data: dict[str, Any]
    """The data module's settings of the run (:func:`data_settings`; ``{}`` if not recorded)."""


def load_task(path: str | Path, map_location: str = "cpu") -> LoadedCheckpoint:
    """Rebuilds ``(task, tokenizer, data)`` from a checkpoint written by one of our tasks (eval mode, on ``map_location``).

    ``path`` may also be a run's folder (its best checkpoint) or a model folder of ``multimodal export``.
    ``data`` is what :func:`data_settings` reads, from the file already loaded.
    """
    if is_model_folder(path):
        return _load_task_folder(Path(path), map_location)
    checkpoint = read_checkpoint(path, map_location)
    entry = checkpoint.get("multimodal")
    if entry is None:
        raise ValueError(f"{path} was not written by a multimodal task (no 'multimodal' entry); "
                         f"train with `multimodal fit` to get a self-contained checkpoint")  # fmt: skip
    task_class, arguments = checkpoint_task(entry, checkpoint.get("hyper_parameters", {}), str(path))
    _check_model_fits(entry, task_class, arguments, checkpoint.get("state_dict", {}), str(path))
    # A run trained with compile: true is rebuilt eager: the commands score and sample, and
    # compiling for that (on a CPU, per window shape) would cost more than it saves.
    task = task_class(**{**arguments, "compile": False}) if "compile" in arguments else task_class(**arguments)
    task.load_state_dict(checkpoint["state_dict"])
    task.to(map_location)
    task.eval()
    tokenizer = None
    if "tokenizer" in entry:
        tokenizer = load_tokenizer(entry.get("tokenizer_class", ""), entry["tokenizer"], source=str(path))
    return LoadedCheckpoint(task, tokenizer, _checkpoint_data(checkpoint))


def _check_model_fits(entry: dict[str, Any], task_class: type, arguments: dict[str, Any], state: dict, source: str) -> None:
    """Refuses a checkpoint whose model config does not fit its weights, before the task allocates the model.

    A config of ``num_layers: 1000000`` beside the weights of two layers would otherwise take the
    machine's memory while the task builds it (:func:`multimodal.convert.folder.check_fits`).
    """
    family = entry.get("family") or TASK_FAMILIES.get(_path_of(task_class))
    config = arguments.get("model")
    if family is None or not isinstance(config, dict):
        return
    # LoRA adapters are added by the task's fine-tuning set-up, not by the model config.
    shapes = {name[len("model.") :]: tuple(value.shape) for name, value in state.items()
              if name.startswith("model.") and not name.endswith((".lora_a", ".lora_b"))}  # fmt: skip
    check_fits(family, config, shapes, source)


class CommandModel(NamedTuple):
    """What ``generate`` and ``perplexity`` need of a checkpoint or model folder (:func:`load_for_commands`)."""

    model: Any
    """The network (eval mode, on the requested device)."""
    tokenizer: Any | None
    """Its data's tokenizer, if the run had one."""
    data: dict[str, Any]
    """The data module's settings of the run (as in :class:`LoadedCheckpoint`)."""
    task_name: str
    """The registered name of the task that trained it (:data:`tasks.registry.TASKS`)."""


def load_for_commands(path: str | Path, map_location: str = "cpu") -> CommandModel:
    """The model, tokenizer, data settings and task name of a checkpoint or model folder, for the commands that
    use the model alone (``generate``, ``perplexity``).

    A model folder's model is built from its config (:func:`multimodal.convert.folder.model_of_folder`, as
    :func:`multimodal.load` builds it) and its task is looked up, not built: no Lightning import, which is
    3-4 s of a command's start on a CPU. A checkpoint is a training run's: :func:`load_task` rebuilds its task.
    """
    if is_model_folder(path):
        folder = Path(path)
        meta = read_model_folder(folder)
        name = registered_task_name(_folder_task(folder, meta), str(folder / CONFIG_FILE))
        model, tokenizer = model_of_folder(folder, meta, map_location)
        return CommandModel(model, tokenizer, _folder_data(meta), name)
    loaded = load_task(path, map_location)
    return CommandModel(loaded.task.model, loaded.tokenizer, loaded.data,
                        registered_task_name(_path_of(type(loaded.task)), str(path)))  # fmt: skip


def _folder_task(folder: Path, meta: dict[str, Any]) -> str:
    """The task class path a model folder's config names; a folder without one (a converted model) is refused."""
    if "task" not in meta:
        raise ValueError(f"{folder}: this model folder names no task (a converted model?); load it in Python with "
                         f"multimodal.load")  # fmt: skip
    return meta["task"]


def _load_task_folder(folder: Path, map_location: str) -> LoadedCheckpoint:
    """The task of a model folder: its class (``tasks.`` only), its settings, the folder's weights and tokenizer."""
    meta = read_model_folder(folder)
    task_class, arguments = checkpoint_task({"task": _folder_task(folder, meta)},
                                            {**meta.get("task_settings", {}), "model": meta["model"]},
                                            str(folder / CONFIG_FILE))  # fmt: skip
    task = task_class(**{**arguments, "compile": False}) if "compile" in arguments else task_class(**arguments)
    load_folder_weights(task.model, folder, meta.get("quantization"))
    return LoadedCheckpoint(task.to(map_location).eval(), folder_tokenizer(folder, meta), _folder_data(meta))


#: Data settings that name files or folders. A model folder travels between machines, so the paths
#: in it are not followed (``midi_dir: /etc`` would make ``generate`` scan /etc for primers).
PATH_SETTINGS = frozenset({"midi_dir", "root", "predict_dir", "train_files", "val_files", "test_files", "tokenizer"})


def data_settings(path: str | Path) -> dict[str, Any]:
    """The data module's settings of the run that made a checkpoint or model folder (``{}`` if not recorded).

    A model folder's settings come without :data:`PATH_SETTINGS`: commands fall back to the
    built-in data (or ask for a file) instead of reading where a folder from elsewhere points.
    """
    if is_model_folder(path):
        return _folder_data(read_model_folder(path))
    return _checkpoint_data(read_checkpoint(path))


def _folder_data(meta: dict[str, Any]) -> dict[str, Any]:
    """A model folder's data settings, without :data:`PATH_SETTINGS`."""
    data = meta.get("data", {})
    return {key: value for key, value in data.items() if key not in PATH_SETTINGS} if isinstance(data, dict) else {}


def _checkpoint_data(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A training checkpoint's data settings (``datamodule_hyper_parameters``)."""
    data = checkpoint.get("datamodule_hyper_parameters", {}) or {}
    return dict(data) if isinstance(data, dict) else {}


def read_checkpoint(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    """``torch.load(path, weights_only=True)``; a file that is not a checkpoint is a ``ValueError`` naming it.

    ``path`` may be a folder: a run's (its best checkpoint) or a root of runs (the newest run's);
    see :func:`tasks.runs.resolve_checkpoint`.
    """
    path = resolve_checkpoint(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # truncated zips, pickles needing code, text files, ...
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{path}: not a readable checkpoint ({detail[:200]})") from error
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{path}: not a training checkpoint (holds a {type(checkpoint).__name__})")
    return checkpoint


def read_task_checkpoint(path: str | Path, stack: str | None = None) -> Export:
    """The model weights of a training checkpoint (``model.*`` of its state dict) under export names.

    Read with ``torch.load(weights_only=True)``; ``stack`` picks the stack of a multi-stack model
    (:func:`multimodal.convert.export.export_from_state_dict`).
    """
    checkpoint = read_checkpoint(path)
    state = {name[len("model.") :]: t for name, t in checkpoint.get("state_dict", {}).items() if name.startswith("model.")}
    if not state:
        raise ValueError(f"{path} holds no `model.*` weights: is it a checkpoint of a multimodal task?")
    config = checkpoint.get("hyper_parameters", {}).get("model", {})
    return export_from_state_dict(state, config if isinstance(config, dict) else {}, str(path), stack)


def checkpoint_task(entry: dict[str, str], hyper_parameters: dict[str, Any], source: str = "checkpoint") -> tuple[type, dict[str, Any]]:
    """The task class and init arguments a checkpoint's (or model folder's) entry names.

    The class must be a registered task (:data:`tasks.registry.TASKS`, or a path earlier versions
    wrote) and a ``LightningModule``; every class path in the hyper-parameters must be trusted
    (:func:`multimodal.class_paths.check_config_class_paths`). Both are checked before any import.
    ``source`` names the file for messages.
    """
    from pytorch_lightning import LightningModule

    from tasks.registry import TASKS

    path = TASKS[registered_task_name(entry.get("task"), source)]
    if not isinstance(hyper_parameters, dict):
        raise ValueError(f"{source}: its hyper-parameters are a {type(hyper_parameters).__name__}, not a mapping")
    check_config_class_paths(hyper_parameters, f"{source} hyper-parameters")
    task_class = import_class(path, packages=(path.rpartition(".")[0],), base=LightningModule, source=source)
    upgrade = getattr(task_class, "checkpoint_class", None)
    return upgrade(hyper_parameters) if upgrade is not None else (task_class, hyper_parameters)


def registered_task_name(named: Any, source: str) -> str:
    """The registered name (:data:`tasks.registry.TASKS`) of the task class path a checkpoint or model folder
    names (or a path earlier versions wrote); anything else is a ``ValueError`` naming ``source``. Imports nothing."""
    from tasks.registry import LEGACY_TASK_PATHS, TASKS

    path = LEGACY_TASK_PATHS.get(named, named) if isinstance(named, str) else None
    names = [name for name, registered in TASKS.items() if registered == path]
    if not names:
        raise ValueError(f"{source}: refusing to import {named!r}: a checkpoint may name only a registered task "
                         f"({', '.join(sorted(TASKS))})")  # fmt: skip
    return names[0]


def _path_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"

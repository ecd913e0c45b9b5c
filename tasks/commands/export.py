"""``multimodal export``: a training checkpoint written out as a model folder (:mod:`multimodal.convert.folder`) with a README.

The README says what the model is and how it came to be, from what the checkpoint and its run
folder record: the task, the data settings, the monitored validation score, the parameter count,
the config the run was started with (copied beside it as ``training_config.yaml``) and the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path
from typing import Any

from tasks.commands.checkpoint import QUANTIZE_CHOICES
from tasks.runs import RUNS, resolve_checkpoint, run_of


def export_command(argv: list[str]) -> None:
    """``multimodal export``: writes a task checkpoint's model as a model folder.

    config.json (model family and config, task, data settings), model.safetensors (every weight;
    LoRA adapters merged), tokenizer.json and a README.md saying what the model is. The folder
    loads with ``multimodal.load(DIR)`` (no Lightning), works as ``--checkpoint`` of every command
    and as ``finetune.init_from``.
    """
    parser = argparse.ArgumentParser(prog="multimodal export", description=export_command.__doc__)
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a .ckpt written by `multimodal fit`, or a run's folder (its best checkpoint)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--overwrite", action="store_true", help="replace an export already there")
    parser.add_argument("--half", action="store_true",
                        help="store the weights in float16 (half the size; loaded back into float32)")  # fmt: skip
    parser.add_argument("--quantize", choices=QUANTIZE_CHOICES, default=None,
                        help="store int8 (per-channel scales, a quarter of float32) or float16 linear weights "
                             "(half); the folder loads quantized")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.checkpoint.exists():
        parser.error(f"checkpoint not found: {args.checkpoint}")
    from multimodal.data.storage import claim_paths

    files = ["config.json", "model.safetensors", "tokenizer.json", "README.md", "training_config.yaml"]
    claim_paths([args.out / name for name in files], args.overwrite)
    out = export_model_folder(args.checkpoint, args.out, half=args.half, quantize=args.quantize)
    print(f"wrote {out}: {(out / 'README.md').read_text(encoding='utf-8').splitlines()[0].lstrip('# ')}; "
          f"load it with multimodal.load({str(out)!r}), or give it as --checkpoint, or finetune.init_from")  # fmt: skip


def export_model_folder(checkpoint: str | Path, out: str | Path, half: bool = False, quantize: str | None = None) -> Path:
    """Writes ``out/`` (config.json, model.safetensors, tokenizer.json, README.md) for a task checkpoint or run
    folder; ``half``: the weights in float16."""
    import torch  # not for `multimodal export --help`

    from multimodal.convert.folder import save_model_folder
    from tasks.checkpoint import load_task, read_checkpoint, registered_task_name
    from tasks.commands import task_commands

    path = resolve_checkpoint(checkpoint)
    saved = read_checkpoint(path)
    task, tokenizer, data = load_task(path)
    settings = {key: value for key, value in dict(saved.get("hyper_parameters", {})).items() if key != "model"}
    # The folder stands alone: its task settings name no file of the training run (training_config.yaml keeps the
    # record). Its weights are whole, so a task rebuilt from it must not copy its fine-tuning source's in again,
    # nor look for a distillation teacher.
    if settings.get("finetune"):
        settings["finetune"] = {**settings["finetune"], "init_from": None}
    settings.pop("distillation", None)
    out = Path(out)
    run_config = _run_config(path)
    readme = describe_run(task, saved, path, run_config)
    record = getattr(task_commands(registered_task_name(saved["multimodal"]["task"], str(path))), "training_data", None)
    save_model_folder(task.model, out, tokenizer=tokenizer, task=saved["multimodal"]["task"], task_settings=settings,
                      data=data, training_data=record(data) if record is not None else None, readme=readme,
                      dtype=torch.float16 if half else None, quantize=quantize)  # fmt: skip
    if run_config is not None:
        shutil.copyfile(run_config, out / "training_config.yaml")
    return out


def describe_run(task: Any, saved: dict[str, Any], path: Path, run_config: Path | None) -> str:
    """The README of an exported model: task, model, data, validation, training."""
    config = task.model.config
    parameters = sum(p.numel() for p in task.model.parameters())
    fields = dataclasses.asdict(config)
    shape = ", ".join(f"{key} {fields[key]}" for key in ("dim", "num_layers", "num_heads", "position", "attention")
                      if key in fields)  # fmt: skip
    data = saved.get("datamodule_hyper_parameters") or {}
    data_line = ", ".join(f"{key} {value}" for key, value in data.items() if value is not None and not isinstance(value, dict))
    scores = [
        f"{state['monitor']} = {float(state['best_model_score']):.4f}"
        for name, state in (saved.get("callbacks") or {}).items()
        if name.startswith("ModelCheckpoint") and state.get("best_model_score") is not None and state.get("monitor")
    ]
    command = f"multimodal fit --config {run_config}" if run_config is not None else "multimodal fit (config not found beside the checkpoint)"
    return "\n".join([
        f"# {type(task).__name__}: {type(task.model).__name__}",
        "",
        f"- task: `{saved['multimodal']['task']}`",
        f"- model: {type(task.model).__name__}, {parameters / 1e6:.2f} M parameters; {shape}",
        f"- data: {data_line or 'not recorded'}",
        f"- validation: {'; '.join(scores) or 'not recorded'}",
        f"- trained: {saved.get('global_step', '?')} steps, {saved.get('epoch', 0) + 1} epochs; from `{path}`",
        f"- command: `{command}` (the config is `training_config.yaml` here)" if run_config else f"- command: {command}",
        "",
        "Load it without Lightning:",
        "",
        "```python",
        "from multimodal import load",
        'model, tokenizer = load("THIS_FOLDER")',
        "```",
        "",
        "or use the folder wherever a command takes `--checkpoint` (`multimodal generate --checkpoint THIS_FOLDER`).",
        "",
    ])  # fmt: skip


def _run_config(checkpoint: Path) -> Path | None:
    """The ``config.yaml`` Lightning saved in the checkpoint's run folder, if the checkpoint lies in one.

    A ``config.yaml`` that is a link to somewhere outside the run folder is refused: the export
    would copy whatever file it points to into the folder a user may share.
    """
    run = run_of(checkpoint)
    if run is None:
        return None
    folder = run[0] / RUNS / run[1]
    config = folder / "config.yaml"
    if not config.is_file():
        return None
    if not config.resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"{config}: a link to {config.resolve()}, outside the run folder; an export copies only the "
                         f"run's own config (replace the link with the file)")  # fmt: skip
    return config

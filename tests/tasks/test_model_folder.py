"""A model is a folder: export -> load gives the same outputs for every task; the commands and init_from take it."""

import json
import shutil
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

import multimodal
from multimodal.convert.folder import FAMILIES, load
from tasks.checkpoint import load_for_commands, load_task
from tasks.cli import MultimodalCLI, main, task_class_from_args

ROOT = Path(__file__).resolve().parents[2]
TASK_CONFIGS = {
    "music": ["music_continuation.yaml", "music_continuation_tiny.yaml"],
    "text": ["text_lm.yaml", "text_lm_tiny.yaml"],
    "vit": ["image_classification.yaml", "image_classification_tiny.yaml"],
    "cnn": ["image_classification_fashion_mnist_cnn.yaml", "image_classification_cnn_tiny.yaml"],
    "image_generation": ["image_generation.yaml", "image_generation_tiny.yaml"],
    "super_resolution": ["super_resolution.yaml", "super_resolution_tiny.yaml"],
    "super_resolution_autoregressive": ["super_resolution.yaml", "super_resolution_autoregressive.yaml",
                                        "super_resolution_tiny.yaml"],
}  # fmt: skip


def _checkpoint(name: str, folder: Path) -> Path:
    """A checkpoint of the task after one training step of its tiny config (the weights are what matters)."""
    argv = [arg for config in TASK_CONFIGS[name] for arg in ("--config", str(ROOT / "configs" / config))]
    argv += ["--trainer.logger", "false"]
    cli = MultimodalCLI(argv, data_links=task_class_from_args(argv).data_links, run=False)
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=folder)  # fmt: skip
    trainer.fit(cli.model, datamodule=cli.datamodule)
    path = folder / f"{name}.ckpt"
    trainer.save_checkpoint(path)
    return path


def _inputs(model: torch.nn.Module, name: str):
    """Arguments of one forward of the task's model."""
    generator = torch.Generator().manual_seed(0)
    config = model.config
    if name in ("music", "text"):
        return (torch.randint(0, config.vocab_size, (2, 12), generator=generator),)
    if name in ("vit", "cnn"):
        return (torch.rand(2, config.channels, *([config.image_size] * 2 if isinstance(config.image_size, int) else config.image_size), generator=generator),)
    if name == "image_generation":
        return (torch.randint(0, config.num_levels, (2, 20), generator=generator), torch.tensor([1, 2]))
    if name == "super_resolution":
        return (torch.rand(2, config.channels, 8, 8, generator=generator),)
    low = torch.rand(1, config.channels, 4, 4, generator=generator)
    tokens = torch.randint(0, config.num_levels, (1, 40), generator=generator)
    return (model.inputs(tokens), model.condition(low))


@pytest.mark.parametrize("name", list(TASK_CONFIGS))
def test_export_then_load_gives_the_same_model_for_every_task(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkpoint = _checkpoint(name, tmp_path)
    task, _, _ = load_task(checkpoint)
    main(["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "model")])
    folder = tmp_path / "model"
    assert {"config.json", "model.safetensors", "README.md"} <= {p.name for p in folder.iterdir()}
    meta = json.loads((folder / "config.json").read_text())
    assert meta["family"] in FAMILIES and meta["task"].startswith("tasks.")
    readme = (folder / "README.md").read_text()
    assert "parameters" in readme and meta["task"] in readme

    model, tokenizer = multimodal.load(folder)  # no Lightning on this path
    assert not model.training and type(model) is type(task.model)
    assert (tokenizer is None) == (name not in ("music", "text", "image_generation"))
    with torch.no_grad():
        args = _inputs(model, name)
        torch.testing.assert_close(model(*args), task.model(*args), atol=0, rtol=0)
        # The checkpoint loads the same way, and as the task the commands use.
        from_checkpoint, _ = load(checkpoint)
        torch.testing.assert_close(from_checkpoint(*args), task.model(*args), atol=0, rtol=0)
        folder_task, _, _ = load_task(folder)
        torch.testing.assert_close(folder_task.model(*args), task.model(*args), atol=0, rtol=0)
        # generate and perplexity read a folder without building its task, a checkpoint through it: the same model
        for source in (folder, checkpoint):
            commands = load_for_commands(source)
            assert commands.task_name == type(task).__name__ and type(commands.model) is type(task.model)
            assert not commands.model.training and (commands.tokenizer is None) == (tokenizer is None)
            torch.testing.assert_close(commands.model(*args), task.model(*args), atol=0, rtol=0)


def test_the_commands_and_init_from_take_a_model_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkpoint = _checkpoint("music", tmp_path)
    main(["export", "--checkpoint", str(checkpoint), "--out", "model"])
    main(["generate", "--checkpoint", "model", "--out", "samples", "--max-new-tokens", "16", "--no-audio", "--seed", "0"])
    assert (tmp_path / "samples/sample_0.mid").is_file()
    main(["sample-stats", "--checkpoint", "model", "--num-primers", "1", "--max-new-tokens", "16"])
    # A fine-tuning run starts from the folder's blocks.
    argv = ["--config", str(ROOT / "configs/music_continuation.yaml"), "--config",
            str(ROOT / "configs/music_continuation_tiny.yaml"), "--trainer.logger", "false",
            "--model.init_args.finetune", '{"init_from": "model", "init_select": ["blocks", "embeddings"]}']  # fmt: skip
    cli = MultimodalCLI(argv, data_links=task_class_from_args(argv).data_links, run=False)
    cli.model.load_pretrained()
    exported, _ = load(tmp_path / "model")
    torch.testing.assert_close(cli.model.model.decoder.blocks[0].ff.up.weight, exported.decoder.blocks[0].ff.up.weight)


def test_a_broken_model_folder_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    checkpoint = _checkpoint("music", tmp_path)
    main(["export", "--checkpoint", str(checkpoint), "--out", "model"])
    unknown = tmp_path / "unknown"
    shutil.copytree(tmp_path / "model", unknown)
    meta = json.loads((unknown / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps({**meta, "family": "os.system"}))
    with pytest.raises(ValueError, match="unknown model family 'os.system'"):
        load(unknown)
    (unknown / "config.json").write_text(json.dumps({**meta, "tokenizer_class": "builtins.eval"}))
    with pytest.raises(ValueError, match="refusing to import 'builtins.eval'"):
        load(unknown)
    (unknown / "config.json").write_text(json.dumps(meta))
    (unknown / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load(unknown)
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    with pytest.raises(SystemExit):
        main(["generate", "--checkpoint", str(unknown), "--out", "o"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "model.safetensors" in line


def test_a_half_precision_export_stores_float16_and_loads_each_weight_rounded_once(tmp_path, monkeypatch):
    from safetensors import safe_open

    monkeypatch.chdir(tmp_path)
    checkpoint = _checkpoint("music", tmp_path)
    task, _, _ = load_task(checkpoint)
    main(["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "half"), "--half"])
    main(["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "full")])
    with safe_open(tmp_path / "half" / "model.safetensors", "pt") as file:
        stored = {file.get_tensor(key).dtype for key in file.keys()}  # noqa: SIM118 (safe_open is no mapping)
    assert torch.float16 in stored and not stored & {torch.float32, torch.float64}
    half_bytes = (tmp_path / "half" / "model.safetensors").stat().st_size
    assert half_bytes < 0.6 * (tmp_path / "full" / "model.safetensors").stat().st_size
    model, _ = multimodal.load(tmp_path / "half")
    for (name, loaded), original in zip(model.state_dict().items(), task.model.state_dict().values(), strict=True):
        assert loaded.dtype == original.dtype, name
        rounded = original.half().to(original.dtype) if original.is_floating_point() else original
        torch.testing.assert_close(loaded, rounded, atol=0, rtol=0)

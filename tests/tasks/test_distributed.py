"""Data parallelism on two CPU processes (gloo), through the real CLI: each process its own data,
replicas that stay equal, validation metrics over every example once, checkpoints that resume on
another number of processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]

CONFIGS = ROOT / "configs"
TEXT = ["--config", str(CONFIGS / "text_lm.yaml"), "--config", str(CONFIGS / "text_lm_tiny.yaml")]


def _run(args, cwd, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "OMP_NUM_THREADS": "1",
           "MULTIMODAL_TRUSTED_PACKAGES": "distributed_probe"}  # the probe callback is a class of the tests'  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "tasks.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _last_logged(folder, name):
    rows = next(folder.rglob("metrics.csv")).read_text().splitlines()
    column = rows[0].split(",").index(name)
    return [float(row.split(",")[column]) for row in rows[1:] if row.split(",")[column]][-1]


def test_two_processes_train_on_disjoint_shares_stay_equal_and_validate_every_window_once(tmp_path, monkeypatch):
    probe = tmp_path / "probe"
    override = {
        "trainer": {
            "accelerator": "cpu", "devices": 2, "max_epochs": 1, "limit_val_batches": None,
            "logger": {"class_path": "pytorch_lightning.loggers.CSVLogger", "init_args": {"save_dir": "logs"}},
            "callbacks": [
                {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                 "init_args": {"dirpath": "checkpoints", "save_last": True}},
                {"class_path": "distributed_probe.Probe", "init_args": {"folder": str(probe)}},
            ],
        },
    }  # fmt: skip
    (tmp_path / "ddp.yaml").write_text(yaml.safe_dump(override))
    _run(["fit", *TEXT, "--config", str(CONFIGS / "ddp.yaml"), "--config", str(tmp_path / "ddp.yaml")], tmp_path)

    # Each process its own windows; together every window of the epoch, none twice.
    seen = [json.loads((probe / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    from tasks.datamodules.text import TextDataModule

    config = yaml.safe_load((CONFIGS / "text_lm_tiny.yaml").read_text())["data"]["init_args"]
    data = TextDataModule(**{key: value for key, value in config.items() if key != "test_stride"})
    monkeypatch.chdir(tmp_path)  # the same cache and files as the run
    epoch = data.train_dataloader().dataset
    epoch.set_epoch(0)
    expected = sorted(epoch[i].tolist() for i in range(len(epoch)))
    assert len(seen[0]) == len(seen[1]) == len(expected) // 2
    assert sorted(seen[0] + seen[1]) == expected

    # The replicas end with the same weights.
    weights = [torch.load(probe / f"rank{rank}.pt", weights_only=True) for rank in (0, 1)]
    for name, value in weights[0].items():
        torch.testing.assert_close(value, weights[1][name], atol=0, rtol=0, msg=name)

    # The logged val_nll (two processes) equals one process's validation of the same weights.
    logged = _last_logged(tmp_path / "logs", "val_nll")
    _run(["validate", *TEXT, "--trainer.limit_val_batches", "null", "--trainer.logger.class_path",
          "pytorch_lightning.loggers.CSVLogger", "--trainer.logger.init_args.save_dir", "single",
          "--ckpt_path", "checkpoints/last.ckpt"], tmp_path)  # fmt: skip
    assert _last_logged(tmp_path / "single", "val_nll") == pytest.approx(logged, rel=1e-5)

    # The two-process checkpoint resumes on one process.
    _run(["fit", *TEXT, "--trainer.max_epochs", "2", "--trainer.logger", "false", "--ckpt_path", "checkpoints/last.ckpt"],
         tmp_path)  # fmt: skip
    resumed = torch.load(tmp_path / "outputs/text_lm/checkpoints/last.ckpt", weights_only=True)
    two_process = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert resumed["epoch"] == 1 and resumed["global_step"] > two_process["global_step"]


def test_the_ddp_and_fsdp_configs_parse(tmp_path, monkeypatch):
    from tasks.cli import MultimodalCLI
    from tasks.language_modeling import LanguageModeling

    monkeypatch.chdir(tmp_path)
    cli = MultimodalCLI([*TEXT, "--config", str(CONFIGS / "ddp.yaml"), "--trainer.accelerator", "cpu",
                         "--trainer.devices", "2"], data_links=LanguageModeling.data_links, run=False)  # fmt: skip
    assert type(cli.trainer.strategy).__name__ == "DDPStrategy" and cli.trainer.num_devices == 2
    fsdp = yaml.safe_load((CONFIGS / "fsdp.yaml").read_text())["trainer"]["strategy"]
    assert fsdp["class_path"] == "pytorch_lightning.strategies.FSDPStrategy"
    from importlib import import_module

    for path in fsdp["init_args"]["auto_wrap_policy"]:
        module, _, name = path.rpartition(".")
        assert isinstance(getattr(import_module(module), name), type)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FSDP shards over GPUs")
def test_the_fsdp_config_builds_a_sharded_strategy_on_gpus(tmp_path, monkeypatch):
    from tasks.cli import MultimodalCLI
    from tasks.language_modeling import LanguageModeling

    monkeypatch.chdir(tmp_path)
    cli = MultimodalCLI([*TEXT, "--config", str(CONFIGS / "fsdp.yaml"), "--trainer.devices", "1"],
                        data_links=LanguageModeling.data_links, run=False)  # fmt: skip
    assert type(cli.trainer.strategy).__name__ == "FSDPStrategy"

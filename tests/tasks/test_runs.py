"""Runs never share a folder: two fits of one config, resuming a chosen run, folders as checkpoints."""

import os
import time
from pathlib import Path

import pytest
import torch

from tasks.cli import main
from tasks.runs import resolve_checkpoint, run_of, runs_in

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MUSIC = ["--config", str(CONFIGS / "music_continuation.yaml"), "--config", str(CONFIGS / "music_continuation_tiny.yaml"),
         "--trainer.callbacks", "[{class_path: pytorch_lightning.callbacks.ModelCheckpoint, init_args: "
         "{filename: best, monitor: val_nll, save_last: true}}]"]  # fmt: skip


def _error_of(args, capsys) -> str:
    """The last line a failing command printed (the LightningCLI prints its usage above it)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_each_fit_is_its_own_run_and_resume_picks_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "outputs/music_continuation/lightning_logs"
    assert "no run with a last.ckpt" in _error_of(["fit", *MUSIC, "--ckpt_path", "last"], capsys)

    main(["fit", *MUSIC])
    main(["fit", *MUSIC, "--run_name", "second"])
    assert sorted(path.name for path in root.iterdir()) == ["second", "version_0"]
    for run in ("version_0", "second"):  # checkpoints, TensorBoard events and the config, per run
        assert (root / run / "checkpoints/last.ckpt").is_file() and (root / run / "config.yaml").is_file()
        assert list((root / run).glob("events.out.tfevents.*"))

    error = _error_of(["fit", *MUSIC, "--ckpt_path", "last"], capsys)
    assert error.startswith("error: ") and "2 runs" in error and "second" in error and "version_0" in error
    assert "overwritten" in _error_of(["fit", *MUSIC, "--run_name", "second"], capsys)

    first_steps = torch.load(root / "version_0/checkpoints/last.ckpt", weights_only=True)["global_step"]
    second = (root / "second/checkpoints/last.ckpt").read_bytes()
    main(["fit", *MUSIC, "--ckpt_path", "last", "--run_name", "version_0", "--trainer.max_epochs", "2"])
    resumed = torch.load(root / "version_0/checkpoints/last.ckpt", weights_only=True)
    assert resumed["epoch"] == 1 and resumed["global_step"] > first_steps
    assert (root / "second/checkpoints/last.ckpt").read_bytes() == second  # the other run is untouched
    assert sorted(path.name for path in root.iterdir()) == ["second", "version_0"]  # resumed in place


def test_default_root_dir_moves_checkpoints_and_logs_together(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["fit", *MUSIC, "--trainer.default_root_dir", "elsewhere"])
    run = tmp_path / "elsewhere/lightning_logs/version_0"
    assert (run / "checkpoints/best.ckpt").is_file() and list(run.glob("events.out.tfevents.*"))
    assert not (tmp_path / "outputs").exists()


def _touch(path: Path, age: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))


def test_a_folder_means_its_runs_best_checkpoint(tmp_path):
    root = tmp_path / "outputs/task"
    _touch(root / "lightning_logs/version_0/checkpoints/best.ckpt", 100)
    _touch(root / "lightning_logs/version_0/checkpoints/last.ckpt", 90)
    _touch(root / "lightning_logs/version_1/checkpoints/epoch=0-step=4.ckpt", 20)  # newest run, no best.ckpt
    _touch(root / "lightning_logs/version_1/checkpoints/last.ckpt", 10)
    (root / "lightning_logs/version_2").mkdir()  # a validate run: logs, no checkpoint
    run0, run1 = root / "lightning_logs/version_0", root / "lightning_logs/version_1"

    assert runs_in(root) == [run0, run1]
    assert resolve_checkpoint(root) == run1 / "checkpoints/epoch=0-step=4.ckpt"
    assert resolve_checkpoint(root, resume=True) == run1 / "checkpoints/last.ckpt"
    assert resolve_checkpoint(run0) == resolve_checkpoint(run0 / "checkpoints") == run0 / "checkpoints/best.ckpt"
    assert resolve_checkpoint(run0 / "checkpoints/last.ckpt") == run0 / "checkpoints/last.ckpt"
    assert run_of(run0 / "checkpoints/last.ckpt") == (root.resolve(), "version_0")
    assert run_of(tmp_path / "loose.ckpt") is None
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        resolve_checkpoint(root / "lightning_logs/version_2")
    with pytest.raises(FileNotFoundError):
        resolve_checkpoint(tmp_path / "missing")

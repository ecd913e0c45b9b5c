"""Killed and resumed from ``last.ckpt``, a run ends with the weights of a run never interrupted.

Each case trains a tiny config in a subprocess (deterministic mode, CPU, one thread, dropout on,
augmentation on) three ways: straight through and, beside it, killed with SIGKILL some steps after a
checkpoint; then resumed with ``--ckpt_path last``. The resumed run must not repeat or skip a batch
(the loader's state), draw other windows or augmentations (the data's draws are functions of (seed, epoch, index), and
the epoch must be counted right) or other dropout masks (the generators' training stream in the
checkpoint): its final weights equal the uninterrupted run's bit for bit. The checkpoints come
mid-epoch, just before an epoch's validation, and (with the shipped callbacks and ``max_steps``)
at an epoch's end, after its validation. ``last.ckpt`` also always holds a run's final step.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"

CASES = {
    # 6 batches an epoch, 12 steps; checkpoints every 2 steps; killed at step 9 (epoch 1, batch 3 of 6)
    "music": ([CONFIGS / "music_continuation.yaml", CONFIGS / "music_continuation_tiny.yaml"],
              {"data": {"init_args": {"epoch_length": 24}}}, 9, 12),
    # killed at step 7: the checkpoint of step 6 was written before epoch 0's validation, which the
    # resumed run does not run again (validation draws from torch's generator: a DataLoader's base seed)
    "music_checkpoint_before_validation": ([CONFIGS / "music_continuation.yaml", CONFIGS / "music_continuation_tiny.yaml"],
                                           {"data": {"init_args": {"epoch_length": 24}}}, 7, 12),
    # 4 batches an epoch (limit_train_batches), 8 steps; killed at step 7 (epoch 1, batch 3 of 4)
    "image_classification": ([CONFIGS / "image_classification.yaml", CONFIGS / "image_classification_tiny.yaml"],
                             {}, 7, 8),
    # 4 batches an epoch (32 images, batch 8), 8 steps; with the shipped config's EMA of the weights
    "image_generation": ([CONFIGS / "image_generation.yaml", CONFIGS / "image_generation_tiny.yaml"],
                         {}, 7, 8, [{"class_path": "pytorch_lightning.callbacks.EMAWeightAveraging",
                                     "init_args": {"decay": 0.9}}]),
}  # fmt: skip


def _start(configs, root: str, cwd: Path, extra: list[str]) -> tuple[subprocess.Popen, Path]:
    """Start a fit on one thread under ``cwd/root``, its stderr in a file beside it; :func:`_finish` waits."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "OMP_NUM_THREADS": "1"}
    args = [arg for config in configs for arg in ("--config", str(config))]
    log = cwd / f"{root}.stderr"
    with log.open("w") as stderr:
        fit = subprocess.Popen([sys.executable, "-m", "tasks.cli", "fit", *args, "--trainer.default_root_dir", root,
                                *extra], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    return fit, log


def _finish(started: tuple[subprocess.Popen, Path], expect_killed: bool = False) -> None:
    fit, log = started
    fit.wait(timeout=300)
    assert fit.returncode == (-9 if expect_killed else 0), log.read_text()[-3000:]


def _fit(configs, root: str, cwd: Path, extra: list[str], expect_killed: bool = False) -> None:
    _finish(_start(configs, root, cwd, extra), expect_killed)


def _straight_and_killed(configs, cwd: Path, killer: list[str]) -> None:
    """The uninterrupted run and the run killed part-way, side by side (one thread each: 2 cores)."""
    straight = _start(configs, "straight", cwd, [])
    try:
        _fit(configs, "killed", cwd, killer, expect_killed=True)
    finally:  # waited for even when the killed run failed: no process outlives the test
        _finish(straight)


# Two cases run in the fast suite; the other two (~17 s each with the first two runs side by side): `make test-all`.
SLOW_CASES = {"music_checkpoint_before_validation", "image_generation"}


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow) if case in SLOW_CASES else case
                                  for case in CASES])  # fmt: skip
def test_a_run_killed_mid_epoch_resumes_to_the_same_weights_bit_for_bit(case, tmp_path):
    configs, data, kill_step, total_steps, *more_callbacks = CASES[case]
    override = {
        **data,
        "model": {"init_args": {"model": {"dropout": 0.1}}},
        "trainer": {
            "max_epochs": 2, "deterministic": True, "num_sanity_val_steps": 0,
            # a list as long as the config's is merged into it item by item (same class_path):
            # filename and monitor are given, so the config's best.ckpt settings do not leak in
            "callbacks": [{"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                           "init_args": {"every_n_train_steps": 2, "save_last": True, "filename": None, "monitor": None}},
                          *(more_callbacks[0] if more_callbacks else [])],
        },
    }  # fmt: skip
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(override))
    configs = [*configs, tmp_path / "override.yaml"]
    killer = ["--trainer.callbacks+=resume_probe.KillAt", f"--trainer.callbacks.step={kill_step}"]
    _straight_and_killed(configs, tmp_path, killer)
    checkpoint = torch.load(tmp_path / "killed/lightning_logs/version_0/checkpoints/last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == kill_step - 1  # a mid-epoch checkpoint: there is something to resume
    _fit(configs, "killed", tmp_path, ["--ckpt_path", "last"])

    straight = torch.load(tmp_path / "straight/lightning_logs/version_0/checkpoints/last.ckpt", weights_only=True)
    resumed = torch.load(tmp_path / "killed/lightning_logs/version_0/checkpoints/last.ckpt", weights_only=True)
    assert resumed["global_step"] == straight["global_step"] == total_steps  # nothing repeated, nothing skipped
    assert not (tmp_path / "killed/lightning_logs/version_1").exists(), "the resumed run left its folder"
    for name, value in straight["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][name], value, atol=0, rtol=0, msg=name)
    # with weight averaging, state_dict holds the average; the raw weights and the count are beside it
    for key in ("current_model_state", "averaging_state"):
        assert (key in straight) == bool(more_callbacks)
        if key in straight:
            torch.testing.assert_close(resumed[key], straight[key], atol=0, rtol=0, msg=key)


MUSIC_TINY = [CONFIGS / "music_continuation.yaml", CONFIGS / "music_continuation_tiny.yaml"]


def _last(tmp_path: Path, root: str, name: str = "last") -> dict:
    return torch.load(tmp_path / root / f"lightning_logs/version_0/checkpoints/{name}.ckpt", weights_only=True)


def test_a_run_with_the_shipped_checkpoints_and_max_steps_resumes_from_an_epoch_end_bit_for_bit(tmp_path):
    """The shipped music callbacks (best.ckpt on val_nll, last.ckpt at every epoch's end, samples every
    epoch) and validation every epoch, with ``--trainer.max_steps``: the checkpoint is written at the
    end of an epoch, after its validation. Lightning resumes a run limited by ``max_steps`` from there
    by replaying the epoch's end, which counted the epoch twice: every later epoch drew the data of
    the next one (the sampler's epoch), and all weights differed."""
    override = {
        "model": {"init_args": {"model": {"dropout": 0.1}}},
        "trainer": {"max_steps": 8, "max_epochs": -1, "deterministic": True},  # 2 batches an epoch
    }
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(override))
    configs = [*MUSIC_TINY, tmp_path / "override.yaml"]
    _straight_and_killed(configs, tmp_path, ["--trainer.callbacks+=resume_probe.KillAt", "--trainer.callbacks.step=5"])
    checkpoint = _last(tmp_path, "killed")
    epochs = checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]
    assert checkpoint["global_step"] == 4 and epochs["processed"] == epochs["completed"] + 1 == 2  # at epoch 1's end
    _fit(configs, "killed", tmp_path, ["--ckpt_path", "last"])

    straight, resumed = _last(tmp_path, "straight"), _last(tmp_path, "killed")
    assert resumed["global_step"] == straight["global_step"] == 8
    assert resumed["epoch"] == straight["epoch"] == 3
    for name, value in straight["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][name], value, atol=0, rtol=0, msg=name)


def test_last_ckpt_holds_the_last_step_when_the_monitored_metric_stopped_improving(tmp_path):
    """With a learning rate of 0, val_nll never improves after the first epoch, so ``best.ckpt`` stays
    at step 2; ``last.ckpt`` is still written at every epoch's end (a run killed at step 6 resumes
    from step 4) and at the final step (7, mid-epoch)."""
    override = {"model": {"init_args": {"optimizer": {"init_args": {"lr": 0.0}}}},
                "trainer": {"max_steps": 7, "max_epochs": -1}}  # fmt: skip
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(override))
    configs = [*MUSIC_TINY, tmp_path / "override.yaml"]
    _straight_and_killed(configs, tmp_path, ["--trainer.callbacks+=resume_probe.KillAt", "--trainer.callbacks.step=6"])
    assert _last(tmp_path, "straight", "best")["global_step"] == 2
    assert _last(tmp_path, "straight")["global_step"] == 7
    assert _last(tmp_path, "killed")["global_step"] == 4


def test_every_shipped_config_keeps_last_ckpt_with_a_last_checkpoint_callback():
    """Each config that lists callbacks has one ``LastCheckpoint``, and no ``ModelCheckpoint`` with
    ``save_last`` (which writes ``last.ckpt`` only when its metric improves, and would compete for the file)."""
    for path in sorted(CONFIGS.glob("*.yaml")):
        callbacks = (yaml.safe_load(path.read_text()).get("trainer") or {}).get("callbacks")
        if callbacks is None:
            continue
        names = [callback["class_path"] for callback in callbacks]
        assert names.count("tasks.callbacks.LastCheckpoint") == 1, path.name
        for callback in callbacks:
            if callback["class_path"].endswith("ModelCheckpoint"):
                assert not (callback.get("init_args") or {}).get("save_last"), path.name

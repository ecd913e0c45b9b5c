"""Killed mid-epoch and resumed from ``last.ckpt``, a run ends with the weights of a run never interrupted.

Each case trains a tiny config for two epochs in a subprocess (deterministic mode, CPU, dropout on,
augmentation on) three ways: straight through; killed with SIGKILL in the middle of the second
epoch, two steps after a mid-epoch checkpoint; and resumed with ``--ckpt_path last``. The resumed
run must not repeat or skip a batch (the loader's state), draw other windows or augmentations (the
data's draws are functions of (seed, epoch, index)) or other dropout masks (the generator state
in the checkpoint): its final weights equal the uninterrupted run's bit for bit.
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
    # 4 batches an epoch (limit_train_batches), 8 steps; killed at step 7 (epoch 1, batch 3 of 4)
    "image_classification": ([CONFIGS / "image_classification.yaml", CONFIGS / "image_classification_tiny.yaml"],
                             {}, 7, 8),
    # 4 batches an epoch (32 images, batch 8), 8 steps; with the shipped config's EMA of the weights
    "image_generation": ([CONFIGS / "image_generation.yaml", CONFIGS / "image_generation_tiny.yaml"],
                         {}, 7, 8, [{"class_path": "pytorch_lightning.callbacks.EMAWeightAveraging",
                                     "init_args": {"decay": 0.9}}]),
}  # fmt: skip


def _fit(configs, root: str, cwd: Path, extra: list[str], expect_killed: bool = False) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "OMP_NUM_THREADS": "1"}
    args = [arg for config in configs for arg in ("--config", str(config))]
    done = subprocess.run([sys.executable, "-m", "tasks.cli", "fit", *args, "--trainer.default_root_dir", root, *extra],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    if expect_killed:
        assert done.returncode == -9, done.stderr[-3000:]
    else:
        assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("case", list(CASES))
def test_a_run_killed_mid_epoch_resumes_to_the_same_weights_bit_for_bit(case, tmp_path):
    configs, data, kill_step, total_steps, *more_callbacks = CASES[case]
    override = {
        **data,
        "model": {"init_args": {"model": {"dropout": 0.1}}},
        "trainer": {
            "max_epochs": 2, "deterministic": True, "num_sanity_val_steps": 0,
            "callbacks": [{"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                           "init_args": {"every_n_train_steps": 2, "save_last": True}},
                          *(more_callbacks[0] if more_callbacks else [])],
        },
    }  # fmt: skip
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(override))
    configs = [*configs, tmp_path / "override.yaml"]
    _fit(configs, "straight", tmp_path, [])
    killer = ["--trainer.callbacks+=resume_probe.KillAt", f"--trainer.callbacks.step={kill_step}"]
    _fit(configs, "killed", tmp_path, killer, expect_killed=True)
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

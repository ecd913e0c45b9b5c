"""docs/contributing.md's two recipes, followed with a toy modality: drum patterns as strings of 'x' and '.'.

The files are written to a temporary folder that extends the ``multimodal.tokenizers``, ``tasks`` and
``tasks.commands`` packages (as files added to the repository would), the task and its command module
are registered, and the toy then goes through what every task gets: ``multimodal fit`` from a YAML, a
self-contained checkpoint reloaded without unpickling, and ``multimodal generate``.
"""

import textwrap

import yaml

import multimodal.tokenizers
import tasks
import tasks.commands
from tasks.checkpoint import load_task
from tasks.cli import main
from tasks.commands import TASK_COMMANDS
from tasks.registry import TASKS

TOKENIZER = '''
"""Drum patterns: '.' rest, 'x' hit, one character per step."""

import json
from pathlib import Path

SYMBOLS = ".x"


class DrumTokenizer:
    """PAD=0, BOS=1, EOS=2, then one id per symbol."""

    pad_id, bos_id, eos_id = 0, 1, 2
    vocab_size = 3 + len(SYMBOLS)

    def encode(self, text: str) -> list[int]:
        return [3 + SYMBOLS.index(c) for c in text]

    def decode(self, ids) -> str:
        return "".join(SYMBOLS[i - 3] for i in ids if i >= 3)

    def save(self, path) -> None:
        Path(path).write_text(json.dumps({"type": "DrumTokenizer"}))

    @classmethod
    def load(cls, path) -> "DrumTokenizer":
        assert json.loads(Path(path).read_text())["type"] == "DrumTokenizer"
        return cls()
'''

TASK = '''
"""The toy task: a next-step model of drum patterns."""

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from multimodal.tokenizers.toy_drums import DrumTokenizer
from tasks.causal_lm import CausalLMTask


class DrumDataModule(pl.LightningDataModule):
    """Patterns of period 4 with a random phase, as ``(batch, seq_len + 1)`` ids."""

    def __init__(self, seq_len: int = 16, batch_size: int = 4) -> None:
        super().__init__()
        self.seq_len, self.batch_size, self.tokenizer = seq_len, batch_size, DrumTokenizer()

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _windows(self, count: int) -> torch.Tensor:
        phases = torch.arange(count) % 4
        steps = torch.arange(self.seq_len + 1)[None, :] + phases[:, None]
        return torch.where(steps % 4 == 0, 4, 3)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self._windows(16), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._windows(8), batch_size=self.batch_size)


class Drums(CausalLMTask):
    """Learns the toy patterns (``multimodal generate``: :mod:`tasks.commands.toy_drums`)."""

    data_links = {"vocab_size": "model.vocab_size"}
'''

COMMANDS = '''
"""``multimodal generate`` for the toy task: writes one continued pattern."""

import argparse
from pathlib import Path

import torch

from multimodal.generation import generate
from multimodal.tokenizers.toy_drums import DrumTokenizer
from tasks.arguments import sampling_from_args


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-new-tokens", type=int, default=16)


def run_generate(model, tokenizer: DrumTokenizer, args: argparse.Namespace, data: dict) -> None:
    prompt = torch.tensor([[tokenizer.bos_id, *tokenizer.encode("x...")]], device=next(model.parameters()).device)
    ids = generate(model, prompt, args.max_new_tokens, sampling_from_args(args))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "pattern.txt").write_text(tokenizer.decode(ids[0].tolist()))
'''


def test_a_toy_modality_and_task_go_through_fit_checkpoint_and_generate(tmp_path, monkeypatch):
    library = tmp_path / "library"
    (library / "tokenizers").mkdir(parents=True)
    (library / "tasks" / "commands").mkdir(parents=True)
    (library / "tokenizers" / "toy_drums.py").write_text(textwrap.dedent(TOKENIZER))
    (library / "tasks" / "toy_drums.py").write_text(textwrap.dedent(TASK))
    (library / "tasks" / "commands" / "toy_drums.py").write_text(textwrap.dedent(COMMANDS))
    monkeypatch.setattr(multimodal.tokenizers, "__path__", [*multimodal.tokenizers.__path__, str(library / "tokenizers")])
    monkeypatch.setattr(tasks, "__path__", [*tasks.__path__, str(library / "tasks")])
    monkeypatch.setattr(tasks.commands, "__path__", [*tasks.commands.__path__, str(library / "tasks" / "commands")])
    monkeypatch.setitem(TASKS, "Drums", "tasks.toy_drums.Drums")
    monkeypatch.setitem(TASK_COMMANDS, "Drums", "tasks.commands.toy_drums")
    config = {
        "seed_everything": 0,
        "model": {"class_path": "Drums", "init_args": {
            "model": {"dim": 16, "num_layers": 1, "num_heads": 2, "ff_dim": 32, "dropout": 0.0, "max_seq_len": 32},
            "warmup_steps": 1, "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.02}}}},
        "data": {"class_path": "tasks.toy_drums.DrumDataModule"},
        "trainer": {"max_epochs": 30, "logger": False, "enable_progress_bar": False, "callbacks": [
            {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
             "init_args": {"dirpath": "checkpoints", "save_last": True}}]},
    }  # fmt: skip
    (tmp_path / "drums.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "drums.yaml"])

    task, tokenizer, _ = load_task(tmp_path / "checkpoints" / "last.ckpt")
    assert type(task).__name__ == "Drums" and type(tokenizer).__name__ == "DrumTokenizer"
    main(["generate", "--checkpoint", "checkpoints/last.ckpt", "--out", "generated", "--max-new-tokens", "12",
          "--temperature", "0"])  # greedy, through the command's sampling_from_args
    pattern = (tmp_path / "generated" / "pattern.txt").read_text()
    assert pattern == "x..." * 4  # learned the period: the prompt and 12 steps more

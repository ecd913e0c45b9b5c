"""Instrument family from audio: the Audio Spectrogram Transformer against a small CNN, on a SoundFont never heard.

Both models read the same log-mel spectrograms of the same rendered phrases
(``configs/audio_classification.yaml``'s data: Bach chorale voices played by all eight programs of 14
General MIDI families) and are trained by the same task (``ImageClassification``: AdamW, warm-up and
cosine, label smoothing, SpecAugment), the same epochs and batch size; the CNN's width is chosen so
its parameter count matches the Transformer's. Models:

    ast   the config's ViT over 8x8 patches of the spectrogram (Gong et al. 2021, without ImageNet weights)
    cnn   four blocks of two 3x3 convolutions with batch norm and ReLU, max-pooling between them,
          global average pooling and a linear head (the usual small audio CNN)

Data (``--train-soundfonts``, ``--test-soundfont``): training and validation clips are rendered by the
training SoundFonts from the chorales of the train and val splits; ``test`` clips are the test chorales
rendered by a SoundFont used nowhere else; ``test_seen`` the same test chorales through the training
SoundFonts (how much of the gap is the new SoundFont). Nothing is chosen on test: each run trains for
``--epochs`` and is scored once at its end. Each run appends a JSON line to ``--out``.

Usage (alone on the machine: ``flock /tmp/bench.lock``; needs the Debian SoundFonts,
``multimodal data soundfonts``)::

    .venv/bin/python benchmarks/audio_classification.py --stage report --models ast cnn --seeds 0 1 2
    .venv/bin/python benchmarks/audio_classification.py --table
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread, verdict

from multimodal.models import ViTConfig
from tasks.datamodules import InstrumentFamilyDataModule
from tasks.datamodules.audio_classification import SpectrogramClips
from tasks.image_classification import ImageClassification

ROOT = Path(__file__).resolve().parents[1]
TRAIN_SOUNDFONTS = ["bundled", "/usr/share/sounds/sf3/MuseScore_General_Lite.sf3"]
TEST_SOUNDFONT = "/usr/share/sounds/sf2/FluidR3_GM.sf2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["select", "report"], default="select")
    parser.add_argument("--models", nargs="+", default=["ast"], choices=["ast", "cnn"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/audio_classification.yaml")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--train-soundfonts", nargs="+", default=TRAIN_SOUNDFONTS)
    parser.add_argument("--test-soundfont", default=TEST_SOUNDFONT)
    parser.add_argument("--data", nargs="*", default=[], help="data overrides, e.g. clips_per_family=16")
    parser.add_argument("--set", nargs="*", default=[], help="model overrides, e.g. dim=96 num_layers=6")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/audio_classification.jsonl")
    parser.add_argument("--table", action="store_true", help="print the tables of --out and stop")
    args = parser.parse_args()
    if args.table:
        print(tables(load(args.out)))
        return
    torch.set_num_threads(args.threads)
    config = yaml.safe_load(args.config.read_text())
    data_args = {**config["data"]["init_args"], **_overrides(args.data)}
    for seed in args.seeds:
        for name in args.models:
            pl.seed_everything(seed, verbose=False)
            data = InstrumentFamilyDataModule(**{**data_args, "soundfonts": args.train_soundfonts,
                                                 "test_soundfonts": [args.test_soundfont], "seed": seed})  # fmt: skip
            seen = InstrumentFamilyDataModule(**{**data_args, "soundfonts": args.train_soundfonts, "seed": seed})
            task = build_task(config, data, args.set)
            if name == "cnn":
                task.model = SpectrogramCNN.matching(_count(task.model), data.num_classes)
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as folder:
                trainer = pl.Trainer(max_epochs=args.epochs, logger=False, gradient_clip_val=1.0, default_root_dir=folder,
                                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                     num_sanity_val_steps=0)  # fmt: skip
                trainer.fit(task, data)
            minutes = (time.perf_counter() - started) / 60
            splits = {"val": data.split("val"), "test": data.split("test"), "test_seen": seen.split("test")}
            result = {"model": name, "seed": seed, "epochs": args.epochs, "minutes": minutes,
                      "parameters": _count(task.model), "overrides": args.set, "data_overrides": args.data,
                      "train_soundfonts": args.train_soundfonts, "test_soundfont": args.test_soundfont,
                      "train_clips": len(data.split("train")), "families": data.class_names}  # fmt: skip
            for split, clips in splits.items():
                result[split] = score(task.model.eval(), clips, data.num_classes)
            print(f"{name} seed {seed}: " + ", ".join(f"{s} {result[s]['accuracy']:.4f}" for s in splits)
                  + f" ({minutes:.1f} min)", flush=True)  # fmt: skip
            record(args.out, result, args.stage)
    print(tables(load(args.out)))


def score(model: nn.Module, clips: SpectrogramClips, num_classes: int) -> dict:
    """Accuracy over every clip and per family (the share of each family's clips named right)."""
    predictions, labels = [], []
    with torch.no_grad():
        for start in range(0, len(clips), 256):
            batch = [clips[i] for i in range(start, min(start + 256, len(clips)))]
            spectrograms = torch.stack([spectrogram for spectrogram, _ in batch])
            predictions.append(model(spectrograms).argmax(-1))
            labels.append(torch.stack([label for _, label in batch]))
    predicted, truth = torch.cat(predictions), torch.cat(labels)
    per_family = [float((predicted[truth == k] == k).float().mean()) for k in range(num_classes)]
    return {"accuracy": float((predicted == truth).float().mean()), "per_family": per_family, "clips": len(truth)}


def tables(results: list[dict]) -> str:
    """Per stage: accuracy on each split, mean ± sd over seeds; the AST-vs-CNN verdict on the unseen SoundFont."""
    lines = []
    for stage in ("select", "report"):
        rows = [r for r in results if r["stage"] == stage]
        if not rows:
            continue
        lines += [f"{stage}: accuracy (14 families, chance 0.071), mean ± sd over seeds", "",
                  "| model | parameters | epochs | overrides | seeds | minutes | val (seen SoundFonts) | test_seen | "
                  "test (unseen SoundFont) |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            groups.setdefault((r["model"], r["epochs"], " ".join(r["overrides"] + r["data_overrides"])), []).append(r)
        for (model, epochs, overrides), group in groups.items():
            cells = [spread([r[split]["accuracy"] for r in group], 4) for split in ("val", "test_seen", "test")]
            lines.append(f"| {model} | {group[0]['parameters']:,} | {epochs} | {overrides or '-'} | {len(group)} | "
                         f"{spread([r['minutes'] for r in group], 1)} | " + " | ".join(cells) + " |")  # fmt: skip
        if stage == "report":
            plain = [r for r in rows if not r["overrides"] and not r["data_overrides"]]
            cnn = {r["seed"]: r for r in plain if r["model"] == "cnn"}
            for epochs in sorted({r["epochs"] for r in plain if r["model"] == "ast"}):
                ast = {r["seed"]: r for r in plain if r["model"] == "ast" and r["epochs"] == epochs}
                gaps = [ast[seed]["test"]["accuracy"] - cnn[seed]["test"]["accuracy"] for seed in ast if seed in cnn]
                if gaps:
                    lines.append(f"\nAST ({epochs} epochs) minus CNN ({cnn[min(cnn)]['epochs']} epochs), test accuracy "
                                 f"(unseen SoundFont) per seed: {spread(gaps, 4)}; AST > CNN: "
                                 f"{verdict(gaps, 0.0, lower_is_better=False)}")  # fmt: skip
            for model in ("ast", "cnn"):
                group = [r for r in plain if r["model"] == model and r["epochs"] == max(
                    q["epochs"] for q in plain if q["model"] == model)]  # fmt: skip
                if group:
                    families = group[0]["families"]
                    means = [statistics.fmean(r["test"]["per_family"][k] for r in group) for k in range(len(families))]
                    lines.append(f"\n{model} test accuracy per family (mean over seeds): "
                                 + ", ".join(f"{f} {m:.2f}" for f, m in zip(families, means, strict=True)))  # fmt: skip
        lines.append("")
    return "\n".join(lines)


class SpectrogramCNN(nn.Module):
    """The CNN baseline: four blocks of two 3x3 conv-BN-ReLU (2x2 max-pooling after the first three),
    global average pooling, dropout and a linear head. ``(batch, 1, n_mels, frames)`` -> ``(batch, classes)``."""

    def __init__(self, width: int, num_classes: int, dropout: float = 0.1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 1
        for index, out in enumerate((width, 2 * width, 4 * width, 4 * width)):
            for _ in range(2):
                layers += [nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
                channels = out
            if index < 3:
                layers.append(nn.MaxPool2d(2))
        self.body = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(channels, num_classes))

    def forward(self, spectrograms: Tensor) -> Tensor:
        """Logits ``(batch, classes)``."""
        return self.head(self.body(spectrograms).mean(dim=(-2, -1)))

    def no_weight_decay(self) -> set[str]:
        """Biases and batch-norm parameters train without weight decay."""
        return {name for name, parameter in self.named_parameters() if parameter.ndim < 2}

    @classmethod
    def matching(cls, parameters: int, num_classes: int) -> SpectrogramCNN:
        """The width whose model has the parameter count closest to ``parameters``."""
        width = min(range(4, 129), key=lambda w: abs(_count(cls(w, num_classes)) - parameters))
        return cls(width, num_classes)


def build_task(config: dict, data: InstrumentFamilyDataModule, overrides: list[str]) -> ImageClassification:
    """The task of the YAML config, with the data's sizes linked in as the CLI does."""
    init = config["model"]["init_args"]
    model = {**init["model"], **_overrides(overrides), "num_classes": data.num_classes, "channels": data.channels,
             "image_size": data.image_size}  # fmt: skip
    optimizer_args = init["optimizer"]["init_args"]
    return ImageClassification(
        model=ViTConfig(**model), optimizer=lambda params: torch.optim.AdamW(params, **optimizer_args),
        warmup_steps=init["warmup_steps"], label_smoothing=init.get("label_smoothing", 0.0),
        class_names=data.class_names, confusion_matrix_every_n_epochs=0,
    )  # fmt: skip


def _overrides(pairs: list[str]) -> dict:
    return {key: yaml.safe_load(value) for key, value in (pair.split("=", 1) for pair in pairs)}


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    main()

"""Transcription: a spectrogram encoder and a note-event decoder, trained on rendered real music.

``multimodal fit --config configs/transcription.yaml`` trains it (the Bach chorales played by keyboard
programs through SoundFonts); ``multimodal transcribe --checkpoint CKPT song.wav --out DIR`` writes
MIDI files and piano rolls (:mod:`tasks.commands.transcribe`).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor

from multimodal.models.config import TranscriberConfig
from multimodal.models.transcriber import Transcriber
from tasks.base import Task, adamw, task_arguments
from tasks.finetune import FineTuneConfig


class Transcription(Task):
    """Trains a :class:`~multimodal.models.transcriber.Transcriber` with cross-entropy per note event.

    Batches are ``(spectrograms, ids)`` from :class:`~tasks.datamodules.TranscriptionDataModule`.
    Logs ``train_loss`` and ``val_nll`` / ``test_nll``: nats per predicted id (the notes' events and
    EOS) over every segment of the split.

    Args:
        model: Model config; ``vocab_size`` and ``n_mels`` are linked from the data module.
        optimizer: Called with parameter groups; weight decay applies to 2-D weights only.
        warmup_steps: Linear warm-up, then cosine decay (by steps or ``max_time``).
        pad_id: Padding id of the batches (linked from the data module).
        finetune: Pretrained weights, frozen parts, LoRA, learning-rate split (see :mod:`tasks.finetune`).
        compile: Compile every Transformer block with ``torch.compile``.
    """

    config_class = TranscriberConfig
    evaluation_sum_names: ClassVar[tuple[str, ...]] = ("nll", "ids")
    data_links: ClassVar[dict[str, str]] = {"vocab_size": "model.vocab_size", "n_mels": "model.n_mels",
                                            "pad_id": "pad_id"}  # fmt: skip

    def __init__(
        self,
        model: TranscriberConfig | None = None,
        optimizer: OptimizerCallable = adamw,
        warmup_steps: int = 100,
        pad_id: int = 0,
        finetune: FineTuneConfig | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__(model, optimizer, warmup_steps, finetune, compile, settings=task_arguments(locals()))

    def build_model(self, config: TranscriberConfig) -> Transcriber:
        return Transcriber(config)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        spectrograms, ids = batch
        loss = self.model.loss(spectrograms, ids, self.pad_id)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def evaluation_sums(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Summed NLL (nats) of a batch's predicted ids, and how many there are."""
        spectrograms, ids = batch
        total = self.model.loss(spectrograms, ids, self.pad_id, reduction="sum")
        count = (ids[:, 1:] != self.pad_id).sum()
        return torch.stack([total.detach().double(), count.double()])

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        """Logs ``{stage}_nll``: nats per predicted id."""
        self.log(f"{stage}_nll", sums["nll"] / max(sums["ids"], 1.0), prog_bar=True, sync_dist=False)

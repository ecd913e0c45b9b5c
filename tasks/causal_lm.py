"""The Lightning task every next-token model shares: text, MIDI events and raster pixels.

Subclasses add what their modality reports (perplexity, bits per dimension, samples) and how
``multimodal generate`` works for them.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor, nn

from multimodal.models import CausalLM, CausalLMConfig
from tasks.checkpoint import describe


def adamw(params) -> torch.optim.Optimizer:
    """Default optimizer: AdamW(lr=3e-4, betas=(0.9, 0.98), weight_decay=0.01)."""
    return torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.98), weight_decay=0.01)


class CausalLMTask(pl.LightningModule):
    """Trains a :class:`~multimodal.models.CausalLM` with next-token cross-entropy.

    Batches are ``(batch, seq_len + 1)`` token ids; position ``t`` predicts ``t + 1`` and padding
    targets (``pad_id``) are ignored. Logs ``train_nll`` and ``val_nll`` (nats per token, averaged
    over every target token of the epoch, not over batches) and ``val_ppl = exp(val_nll)``.

    Args:
        model: Model config; ``vocab_size`` is linked from the data module by the CLI.
        optimizer: Called with parameter groups; weight decay applies to 2-D weights only.
        warmup_steps: Linear learning-rate warm-up, then cosine decay to 10% over the run.
        pad_id: Token id ignored by the loss.
    """

    #: Data-module attribute -> init argument, linked by the CLI at instantiation.
    data_links: ClassVar[dict[str, str]] = {"vocab_size": "model.vocab_size", "pad_id": "pad_id"}

    def __init__(
        self,
        model: CausalLMConfig | None = None,
        optimizer: OptimizerCallable = adamw,
        warmup_steps: int = 100,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        config = CausalLMConfig(**model) if isinstance(model, dict) else (model or CausalLMConfig())
        # Plain types only, so checkpoints load with torch.load(weights_only=True).
        self.save_hyperparameters({"model": asdict(config), "warmup_steps": warmup_steps, "pad_id": pad_id})
        self.config = config
        self.model = CausalLM(config)
        self.optimizer_factory = optimizer
        self.warmup_steps = warmup_steps
        self.pad_id = pad_id
        self._val_sums = torch.zeros(2, dtype=torch.float64)  # summed NLL, number of targets

    def forward(self, tokens: Tensor, **kwargs: Any) -> Tensor:
        """Logits ``(batch, seq, vocab_size)`` for token ids ``(batch, seq)``."""
        return self.model(tokens, **kwargs)

    def token_nll(self, batch: Tensor) -> tuple[Tensor, Tensor]:
        """Summed NLL (nats) over the non-padding targets of ``(batch, seq_len + 1)`` ids, and their count."""
        inputs, targets = batch[:, :-1], batch[:, 1:]
        logits = self.model(inputs)
        nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=self.pad_id, reduction="sum")
        return nll, (targets != self.pad_id).sum()

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        nll, count = self.token_nll(batch)
        loss = nll / count.clamp(min=1)
        self.log("train_nll", loss, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(2, dtype=torch.float64, device=self.device)

    def validation_step(self, batch: Tensor, batch_idx: int) -> None:
        nll, count = self.token_nll(batch)
        self._val_sums += torch.stack([nll.double(), count.double()])

    def on_validation_epoch_end(self) -> None:
        sums = self.all_gather(self._val_sums)
        if sums.dim() > 1:
            sums = sums.sum(0)
        self.log_epoch_metrics("val", sums[0].item(), sums[1].item())

    def test_step(self, batch: Tensor, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def on_test_epoch_start(self) -> None:
        self.on_validation_epoch_start()

    def on_test_epoch_end(self) -> None:
        self.log_epoch_metrics("test", self._val_sums[0].item(), self._val_sums[1].item())

    def log_epoch_metrics(self, stage: str, nll_sum: float, count: float) -> None:
        """Logs ``{stage}_nll`` (nats per token) and ``{stage}_ppl``; subclasses add their own units."""
        nll = nll_sum / max(count, 1.0)
        self.log(f"{stage}_nll", nll, prog_bar=True, sync_dist=False)
        self.log(f"{stage}_ppl", math.exp(min(nll, 50.0)), sync_dist=False)

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(decay_groups(self.model))
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        warmup = min(self.warmup_steps, total // 2)

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / (warmup + 1)
            progress = min((step - warmup) / max(total - warmup, 1), 1.0)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Stores the task's class and the data's tokenizer so a checkpoint is self-contained."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        checkpoint["multimodal"] = describe(self, getattr(datamodule, "tokenizer", None))


def decay_groups(model: nn.Module) -> list[dict[str, Any]]:
    """Parameter groups: weight decay on matrices (2-D and up), none on biases, norms and 1-D tables."""
    decay, no_decay = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (decay if parameter.dim() >= 2 else no_decay).append(parameter)
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]

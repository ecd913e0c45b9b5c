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
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor, nn

from multimodal.layers import compile_blocks
from multimodal.models import CausalLM, CausalLMConfig
from tasks.checkpoint import SelfContainedCheckpoint
from tasks.finetuning import FineTuneConfig, FineTuningMixin, finetune_hparams
from tasks.optim import warmup_cosine

IGNORE_INDEX = -100
"""Target id the loss skips (``F.cross_entropy``'s default); never a real token id."""


def adamw(params) -> torch.optim.Optimizer:
    """Default optimizer: AdamW(lr=3e-4, betas=(0.9, 0.98), weight_decay=0.01)."""
    return torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.98), weight_decay=0.01)


class CausalLMTask(FineTuningMixin, SelfContainedCheckpoint, pl.LightningModule):
    """Trains a :class:`~multimodal.models.CausalLM` with next-token cross-entropy.

    Batches are ``(batch, seq_len + 1)`` token ids; position ``t`` predicts ``t + 1``. Targets equal
    to ``pad_id`` are ignored when the data pads (``pad_id`` set); with ``pad_id=None`` every target
    counts. (Text streams have no padding, and a GPT-2 tokenizer's PAD is its EOS: ignoring it
    would drop every end-of-document target.) Logs ``train_nll`` and ``val_nll`` (nats per token, averaged
    over every target token of the epoch, not over batches) and ``val_ppl = exp(val_nll)``; ``test``
    logs the same.

    Args:
        model: Model config; ``vocab_size`` is linked from the data module by the CLI.
        optimizer: Called with parameter groups; weight decay applies to 2-D weights only.
        warmup_steps: Linear learning-rate warm-up, then cosine decay to 10% over the run (by steps,
            or by the clock when `trainer.max_time` ends the run first).
        pad_id: Padding id ignored by the loss; None when batches hold no padding.
        finetune: Pretrained weights, frozen parts, LoRA, learning-rate split (see :mod:`tasks.finetuning`).
        compile: Compile every Transformer block with ``torch.compile`` (:func:`~multimodal.layers.compile_blocks`);
            the first steps pay for compilation.
    """

    #: Data-module attribute -> init argument, linked by the CLI at instantiation.
    data_links: ClassVar[dict[str, str]] = {"vocab_size": "model.vocab_size", "pad_id": "pad_id"}
    #: What :meth:`evaluation_sums` returns, summed over a validation/test epoch.
    evaluation_sum_names: ClassVar[tuple[str, ...]] = ("nll", "targets")

    def __init__(
        self,
        model: CausalLMConfig | None = None,
        optimizer: OptimizerCallable = adamw,
        warmup_steps: int = 100,
        pad_id: int | None = None,
        finetune: FineTuneConfig | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        config = CausalLMConfig(**model) if isinstance(model, dict) else (model or CausalLMConfig())
        # Plain types only, so checkpoints load with torch.load(weights_only=True).
        self.save_hyperparameters({"model": asdict(config), "warmup_steps": warmup_steps, "pad_id": pad_id,
                                   "finetune": finetune_hparams(finetune), "compile": compile})  # fmt: skip
        self.config = config
        self.model = CausalLM(config)
        self.configure_finetuning(finetune)
        if compile:
            compile_blocks(self.model)
        self.optimizer_factory = optimizer
        self.warmup_steps = warmup_steps
        self.pad_id = pad_id
        self._eval_sums = torch.zeros(len(self.evaluation_sum_names), dtype=torch.float64)

    def forward(self, tokens: Tensor, **kwargs: Any) -> Tensor:
        """Logits ``(batch, seq, vocab_size)`` for token ids ``(batch, seq)``."""
        return self.model(tokens, **kwargs)

    def inputs_and_targets(self, batch: Any) -> tuple[Tensor, Tensor]:
        """Inputs ``(batch, seq_len)`` and targets ``(batch, seq_len)``, ``IGNORE_INDEX`` where not scored.

        Subclasses whose batches carry more than ids (score masks, byte counts) override this.
        """
        inputs, targets = batch[:, :-1], batch[:, 1:]
        if self.pad_id is not None:
            targets = targets.masked_fill(targets == self.pad_id, IGNORE_INDEX)
        return inputs, targets

    def token_nll(self, batch: Any) -> tuple[Tensor, Tensor]:
        """Summed NLL (nats) over the scored targets of a batch, and their count.

        Computed by :meth:`CausalLM.loss`, which never makes the ``(batch, seq, vocab)`` logits.
        """
        inputs, targets = self.inputs_and_targets(batch)
        nll = self.model.loss(inputs, targets, ignore_index=IGNORE_INDEX, reduction="sum")
        return nll, (targets != IGNORE_INDEX).sum()

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        nll, count = self.token_nll(batch)
        loss = nll / count.clamp(min=1)
        self.log("train_nll", loss, prog_bar=True)
        return loss

    def evaluation_sums(self, batch: Any) -> Tensor:
        """Per-batch sums, ``float64`` in the order of :attr:`evaluation_sum_names`, added over an epoch."""
        nll, count = self.token_nll(batch)
        return torch.stack([nll.double(), count.double()])

    def on_validation_epoch_start(self) -> None:
        self._eval_sums = torch.zeros(len(self.evaluation_sum_names), dtype=torch.float64, device=self.device)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_sums += self.evaluation_sums(batch)

    def on_validation_epoch_end(self) -> None:
        self.log_epoch_metrics("val", self._gathered_sums())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def on_test_epoch_start(self) -> None:
        self.on_validation_epoch_start()

    def on_test_epoch_end(self) -> None:
        self.log_epoch_metrics("test", self._gathered_sums())

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        """Logs ``{stage}_nll`` (nats per token) and ``{stage}_ppl``; subclasses add their own units."""
        nll = sums["nll"] / max(sums["targets"], 1.0)
        self.log(f"{stage}_nll", nll, prog_bar=True, sync_dist=False)
        self.log(f"{stage}_ppl", math.exp(min(nll, 50.0)), sync_dist=False)

    def _gathered_sums(self) -> dict[str, float]:
        """The epoch's sums over every process, by name."""
        sums = self.all_gather(self._eval_sums)
        if sums.dim() > 1:
            sums = sums.sum(0)
        return dict(zip(self.evaluation_sum_names, sums.tolist(), strict=True))

    def configure_optimizers(self):
        optimizer = self.finetuning_optimizer(self.optimizer_factory)  # decay_groups' rule, pretrained lr scaled
        return {"optimizer": optimizer, "lr_scheduler": warmup_cosine(optimizer, self.trainer, self.warmup_steps)}


def decay_groups(model: nn.Module) -> list[dict[str, Any]]:
    """Parameter groups: weight decay on matrices (2-D and up), none on biases, norms and 1-D tables."""
    decay, no_decay = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (decay if parameter.dim() >= 2 else no_decay).append(parameter)
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]

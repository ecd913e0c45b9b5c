"""The Lightning task of the next-token language models: text and MIDI events.

(Raster pixels have their own model and task: :mod:`tasks.image_generation`.)

Subclasses add what their modality reports (perplexity, bits per dimension, samples) and how
``multimodal generate`` works for them.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor

from multimodal.models import CausalLM, CausalLMConfig
from multimodal.text import IGNORE_INDEX
from tasks.base import Task, adamw, task_arguments
from tasks.finetune import FineTuneConfig


class CausalLMTask(Task):
    """Trains a :class:`~multimodal.models.CausalLM` with next-token cross-entropy.

    Batches are ``(batch, seq_len + 1)`` token ids; position ``t`` predicts ``t + 1``. Targets equal
    to ``pad_id`` are ignored when the data pads (``pad_id`` set); with ``pad_id=None`` every target
    counts. (Text streams have no padding, and a GPT-2 tokenizer's PAD is its EOS: ignoring it
    would drop every end-of-document target.) Logs ``train_loss`` (nats per token) and ``val_nll`` (nats per token, averaged
    over every target token of the epoch, not over batches) and ``val_ppl = exp(val_nll)``; ``test``
    logs the same.

    Args:
        model: Model config; ``vocab_size`` is linked from the data module by the CLI.
        optimizer: Called with parameter groups; weight decay applies to 2-D weights only.
        warmup_steps: Linear learning-rate warm-up, then cosine decay to 10% over the run (by steps,
            or by the clock when `trainer.max_time` ends the run first).
        pad_id: Padding id ignored by the loss; None when batches hold no padding.
        finetune: Pretrained weights, frozen parts, LoRA, learning-rate split (see :mod:`tasks.finetune`).
        compile: Compile every Transformer block with ``torch.compile`` (:func:`~multimodal.layers.compile_blocks`);
            the first steps pay for compilation.
    """

    config_class = CausalLMConfig
    data_links: ClassVar[dict[str, str]] = {"vocab_size": "model.vocab_size", "pad_id": "pad_id"}
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
        super().__init__(model, optimizer, warmup_steps, finetune, compile, settings=task_arguments(locals()))

    def build_model(self, config: CausalLMConfig) -> CausalLM:
        return CausalLM(config)

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
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def evaluation_sums(self, batch: Any) -> Tensor:
        """Per-batch sums, ``float64`` in the order of :attr:`evaluation_sum_names`, added over an epoch."""
        nll, count = self.token_nll(batch)
        return torch.stack([nll.double(), count.double()])

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        """Logs ``{stage}_nll`` (nats per token) and ``{stage}_ppl``; subclasses add their own units."""
        nll = sums["nll"] / max(sums["targets"], 1.0)
        self.log(f"{stage}_nll", nll, prog_bar=True, sync_dist=False)
        self.log(f"{stage}_ppl", math.exp(min(nll, 50.0)), sync_dist=False)

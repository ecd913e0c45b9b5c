"""Fine-tuning options shared by every task: pretrained weights, frozen parts, LoRA, split learning rates.

A task takes one ``finetune`` argument (:class:`FineTuneConfig`) and mixes in
:class:`FineTuningMixin`; in YAML::

    model:
      init_args:
        finetune:
          init_from: outputs/gpt2_converted   # export folder, .safetensors, or a task .ckpt
          init_select: [blocks, embeddings, head]
          freeze: [embeddings, "blocks[:2]"]  # parts, globs over parameter names, or re:REGEX
          unfreeze: []
          lora: {rank: 8, alpha: 16, projections: [q, v]}
          pretrained_lr_scale: 0.1
          layer_decay: 0.75                   # block i of L at lr * 0.75 ** (L - i); off: null

Order of events: the model is built, ``freeze`` then ``unfreeze`` patterns are applied, LoRA
adapters are added (their base weights frozen) — all in ``__init__``, so a checkpoint rebuilds the
same structure. The pretrained weights are copied in the ``setup`` hook of ``fit`` / ``validate``
/ ``test``, before Lightning restores a ``--ckpt_path`` (which then wins). ``fit`` prints the
trainable / frozen parameter counts when it starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from pytorch_lightning.utilities.rank_zero import rank_zero_info

from multimodal.convert.blocks import load_blocks, select_names
from multimodal.layers.lora import LoRAConfig, apply_lora
from multimodal.models.parameters import (
    count_parameters,
    freeze,
    parameter_groups,
    scale_learning_rates,
    unfreeze,
)
from multimodal.pretrained import resolve_model
from tasks.checkpoint import read_task_checkpoint
from tasks.optim import fused_on_cuda


@dataclass
class FineTuneConfig:
    """Where pretrained weights come from and what trains.

    Attributes:
        init_from: An export folder (``multimodal export`` / ``multimodal convert``), a
            ``blocks.safetensors`` file, a task ``.ckpt`` or the name of a model that ships with the
            package (``music``: :mod:`multimodal.pretrained`); None trains from scratch.
        init_select: Parts copied from it: ``blocks``, ``embeddings``, ``head``, or ``blocks[:k]``.
        init_stack: Models with two Transformer stacks (conditional super-resolution): the one
            that receives the blocks, ``encoder`` or ``decoder`` (also the one read from a
            multi-stack ``.ckpt``). Single-stack models leave it None.
        strict: Every selected tensor must exist with the right shape (position tables are
            resized); False skips what does not fit.
        freeze: Parameters to freeze: parts (``embeddings``, ``blocks[:2]``), globs over
            parameter names (``decoder.blocks.0.*``) or ``re:REGEX``.
        unfreeze: Patterns made trainable again after ``freeze`` (``freeze: ['*']``, ``unfreeze: [head]``).
        lora: LoRA adapters on the attention projections; None for none.
        pretrained_lr_scale: Learning-rate factor of the parameters loaded from ``init_from``
            (new parameters and LoRA adapters keep the optimizer's rate).
        layer_decay: Layer-wise learning-rate decay (BEiT / timm's ``param_groups_layer_decay``):
            with ``L`` blocks, block ``i`` (0-based) trains at ``lr * layer_decay ** (L - i)``, the
            embeddings at ``lr * layer_decay ** (L + 1)``, the final norm as the last block, the head at ``lr``;
            multiplied with ``pretrained_lr_scale``. None (default): off. Typical: 0.65 - 0.75.
    """

    init_from: str | None = None
    init_select: list[str] = field(default_factory=lambda: ["blocks", "embeddings", "head"])
    init_stack: str | None = None
    strict: bool = True
    freeze: list[str] = field(default_factory=list)
    unfreeze: list[str] = field(default_factory=list)
    lora: LoRAConfig | None = None
    pretrained_lr_scale: float = 1.0
    layer_decay: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):
            self.lora = LoRAConfig(**self.lora)
        if self.pretrained_lr_scale < 0:
            raise ValueError(f"pretrained_lr_scale must be >= 0, got {self.pretrained_lr_scale}")
        if self.layer_decay is not None and not 0.0 < self.layer_decay <= 1.0:
            raise ValueError(
                f"layer_decay must lie in (0, 1] (e.g. 0.75), or be null; got {self.layer_decay}"
            )

    @classmethod
    def parse(cls, value: FineTuneConfig | dict[str, Any] | None) -> FineTuneConfig | None:
        """Accepts the dataclass, its dict (hyper-parameters of a checkpoint) or None."""
        return cls(**value) if isinstance(value, dict) else value

    def to_dict(self) -> dict[str, Any]:
        """Plain values for ``save_hyperparameters`` (checkpoints load with ``weights_only=True``)."""
        return asdict(self)


def finetune_hparams(finetune: FineTuneConfig | dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``finetune`` entry of a task's hyper-parameters: plain values, or None."""
    parsed = FineTuneConfig.parse(finetune)
    return None if parsed is None else parsed.to_dict()


class FineTuningMixin:
    """Adds :class:`FineTuneConfig` to a ``LightningModule`` whose network is ``self.model``.

    A task calls :meth:`configure_finetuning` in ``__init__`` after building ``self.model`` and
    builds its optimizer with :meth:`finetuning_optimizer`.
    """

    def configure_finetuning(self, finetune: FineTuneConfig | dict[str, Any] | None) -> FineTuneConfig | None:
        """Applies freeze / unfreeze patterns and LoRA to ``self.model``; returns the parsed config."""
        self.finetune = FineTuneConfig.parse(finetune)
        self._pretrained_loaded = False
        self._pretrained_names: set[str] = set()
        if self.finetune is None:
            return None
        if self.finetune.freeze:
            freeze(self.model, self.finetune.freeze)
        if self.finetune.unfreeze:
            unfreeze(self.model, self.finetune.unfreeze)
        if self.finetune.lora is not None:
            apply_lora(self.model, self.finetune.lora)
        return self.finetune

    def setup(self, stage: str) -> None:
        super().setup(stage)
        self.load_pretrained()

    def load_pretrained(self) -> None:
        """Copies the selected parts of ``init_from`` into ``self.model`` (once; no-op without ``init_from``)."""
        if self.finetune is None or self.finetune.init_from is None or self._pretrained_loaded:
            return
        spec = self.finetune
        source = str(resolve_model(spec.init_from))  # a shipped model's name (music) is its folder
        if str(source).endswith(".ckpt"):
            source = read_task_checkpoint(source, spec.init_stack)
        report = load_blocks(self.model, source, spec.init_select, strict=spec.strict, stack=spec.init_stack)
        selected = set(select_names(self.model, spec.init_select, spec.init_stack))
        self._pretrained_names = {name for name in report.loaded if name in selected}
        self._pretrained_loaded = True
        rank_zero_info(f"init_from {spec.init_from} ({', '.join(spec.init_select)}): {report}")

    def finetuning_optimizer(
        self, factory: Any, no_decay: Iterable[str] | None = None
    ) -> torch.optim.Optimizer:
        """``factory(parameter groups)`` of the trainable parameters, pretrained learning rates scaled.

        Adam and AdamW on a GPU take the fused kernel (:func:`tasks.optim.fused_on_cuda`).

        Args:
            factory: The task's ``OptimizerCallable``.
            no_decay: Names trained without weight decay; None: tensors of fewer than 2 dimensions.
        """
        scale = self.finetune.pretrained_lr_scale if self.finetune is not None else 1.0
        layer_decay = self.finetune.layer_decay if self.finetune is not None else None
        groups = parameter_groups(self.model, self._pretrained_names, scale, no_decay, layer_decay)
        if not groups:
            raise ValueError(
                "every parameter is frozen: unfreeze some (finetune.unfreeze) or add LoRA adapters"
            )
        return fused_on_cuda(scale_learning_rates(factory(groups)))

    def on_fit_start(self) -> None:
        super().on_fit_start()
        rank_zero_info(str(count_parameters(self.model)))

"""The base of every task: what all of them do the same way, written once.

A task is a ``LightningModule`` that trains one model family. :class:`Task` owns

- the model config: built from the ``model`` argument (a dataclass, its dict from YAML or a
  checkpoint, or None for the defaults) and saved with the other init arguments as plain
  hyper-parameters, so checkpoints load with ``torch.load(weights_only=True)``;
- the fine-tuning set-up (:mod:`tasks.finetune`) and ``compile: true`` (:func:`multimodal.layers.compile_blocks`);
- the optimizer (the ``optimizer`` callable over parameter groups, weight decay on matrices only,
  fused on CUDA) and the warm-up + cosine schedule (:func:`tasks.optim.warmup_cosine`);
- evaluation sums: a float64 vector per validation / test epoch, added over batches and over
  processes (``all_gather``), so a metric covers every example once even under DDP; the epoch
  hooks are the base's, a task adds :meth:`Task.evaluation_sums` and :meth:`Task.log_epoch_metrics`;
- the task's own init arguments, written once in its signature: ``settings=task_arguments(locals())``
  saves them as hyper-parameters and sets each as an attribute.

A task class adds what is its own: :meth:`Task.build_model`, its training step, its metrics.
Tasks train: what ``multimodal generate`` / ``perplexity`` do with a checkpoint lives in the
command module of its task (:data:`tasks.commands.TASK_COMMANDS`).
Its ``__init__`` lists every argument explicitly (LightningCLI and ``--help`` read the signature)
and hands the shared ones to ``super().__init__``, the rest as ``settings=task_arguments(locals())``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor, nn

from multimodal.layers import compile_blocks
from tasks.checkpoint import SelfContainedCheckpoint
from tasks.finetune import FineTuneConfig, FineTuningMixin, finetune_hparams
from tasks.optim import warmup_cosine


def adamw(params) -> torch.optim.Optimizer:
    """Default optimizer: AdamW(lr=3e-4, betas=(0.9, 0.98), weight_decay=0.01)."""
    return torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.98), weight_decay=0.01)


class Task(FineTuningMixin, SelfContainedCheckpoint, pl.LightningModule):
    """Shared set-up of every task; see the module docstring.

    Args:
        model: The model config (``config_class``), its dict, or None for the defaults.
        optimizer: Called with parameter groups.
        warmup_steps: Linear learning-rate warm-up, then cosine decay to ``min_lr_ratio`` of the peak.
        finetune: Pretrained weights, frozen parts, LoRA, learning-rate split (:mod:`tasks.finetune`).
        compile: Compile every Transformer block with ``torch.compile``; the first steps pay for it.
        min_lr_ratio: Final learning rate as a fraction of the peak.
        settings: The task's own init arguments, saved as hyper-parameters (plain values only).
    """

    #: The model config dataclass of this task.
    config_class: ClassVar[type]
    #: Data-module attribute -> init argument, linked by the CLI at instantiation.
    data_links: ClassVar[dict[str, str]] = {}
    #: Names of the evaluation sums (:meth:`add_evaluation_sums`), in order.
    evaluation_sum_names: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        model: Any = None,
        optimizer: OptimizerCallable = adamw,
        warmup_steps: int = 100,
        finetune: FineTuneConfig | dict[str, Any] | None = None,
        compile: bool = False,
        min_lr_ratio: float = 0.1,
        settings: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        config = self.config_class(**model) if isinstance(model, dict) else (model or self.config_class())
        self.save_hyperparameters({
            "model": asdict(config), "warmup_steps": warmup_steps, **(settings or {}),
            "finetune": finetune_hparams(finetune), "compile": compile,
        })  # fmt: skip
        for name, value in (settings or {}).items():  # each task argument becomes the attribute of its name
            setattr(self, name, value)
        self.config = config
        self.model = self.build_model(config)
        self.configure_finetuning(finetune)
        if compile:
            compile_blocks(self.model)
        self.optimizer_factory = SharedCallable(optimizer)
        self.warmup_steps, self.min_lr_ratio = warmup_steps, min_lr_ratio
        self._evaluation_sums = torch.zeros(len(self.evaluation_sum_names), dtype=torch.float64)

    def build_model(self, config: Any) -> nn.Module:
        """The network this task trains, from its config."""
        raise NotImplementedError(f"{type(self).__name__} must define build_model(config)")

    # ------------------------------------------------------------------------ exact resume
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Also saves the training stream of torch's global generators (dropout draws from them).

        The data's draws need no state: they are functions of ``(seed, epoch, index)``
        (:mod:`multimodal.data.resumable`), and the training loader records where the epoch stood.
        Between training batches the stream is the one the last batch left
        (:meth:`on_train_batch_end`), whatever validation or callbacks drew since; inside a batch
        (a callback's ``on_train_batch_end``) it is the generators' current state.
        """
        super().on_save_checkpoint(checkpoint)
        states = getattr(self, "_training_rng_states", None)
        checkpoint["rng_states"] = states if states is not None else _rng_states()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keeps the saved generator states and training-loader states for the start of training.

        The generator states are restored just before the next training batch, not at load time: a
        resumed run validates, builds loaders and so on first, and the run that was not
        interrupted drew nothing between the checkpoint and that batch.
        """
        self._training_rng_states = checkpoint.get("rng_states")
        fit_loop = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
        self._loader_states_to_restore = fit_loop.get("combined_loader")

    def on_train_start(self) -> None:
        """Gives a resumed run's training loaders their saved place in the epoch.

        Lightning restores them itself only when it builds the loaders after the checkpoint; the
        warm-up schedule asks for the run's length first (``estimated_stepping_batches``), which
        builds them before. :class:`~multimodal.data.resumable.ResumableLoader` starts its
        iteration again from a state loaded this late.

        A run resumed from a checkpoint written at the end of an epoch, with ``max_steps`` set,
        would count that epoch twice (:func:`_uncount_replayed_epoch_end`); this takes one back.
        """
        fit_loop = self.trainer.fit_loop
        if fit_loop.restarted_on_epoch_end:
            _uncount_replayed_epoch_end(fit_loop)
        states = getattr(self, "_loader_states_to_restore", None)
        if states:
            loaders = [loader for loader in _loaders(self.trainer.train_dataloader) if hasattr(loader, "load_state_dict")]
            for loader, state in zip(loaders, states, strict=True):
                loader.load_state_dict(state)
        self._loader_states_to_restore = None

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Continues the training stream of the generators where the previous training batch left it.

        Validation draws from the global generator between batches (a ``DataLoader`` iterator
        takes its base seed from it), and a run resumed from a checkpoint written just before a
        validation does not run that validation again; so the training stream is kept apart from
        what runs between batches, and dropout draws the same masks however a run was interrupted.
        """
        states = getattr(self, "_training_rng_states", None)
        if states is not None:
            torch.set_rng_state(states["cpu"])
            if "cuda" in states and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(states["cuda"])
            self._training_rng_states = None

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Keeps the generators' training stream aside until the next training batch (:meth:`on_train_batch_start`)."""
        self._training_rng_states = _rng_states()

    def on_train_end(self) -> None:
        """Drops the kept stream: another fit of this module starts from the generators as they are."""
        self._training_rng_states = None

    # ------------------------------------------------------------------------------- optimization
    def no_weight_decay(self) -> Iterable[str] | None:
        """Parameter names trained without weight decay; None: every tensor of fewer than 2 dimensions."""
        return None

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.finetuning_optimizer(self.optimizer_factory, no_decay=self.no_weight_decay())
        schedule = warmup_cosine(optimizer, self.trainer, self.warmup_steps, self.min_lr_ratio)
        return {"optimizer": optimizer, "lr_scheduler": schedule}

    # ---------------------------------------------------------------------------- evaluation sums
    def evaluation_sums(self, batch: Any) -> Tensor:
        """One validation or test batch's sums, a float vector in the order of :attr:`evaluation_sum_names`."""
        raise NotImplementedError(f"{type(self).__name__} names evaluation sums but does not compute them")

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        """Logs a validation or test epoch's metrics (``stage``: ``"val"`` / ``"test"``) from its gathered sums."""

    def on_validation_epoch_start(self) -> None:
        self.reset_evaluation_sums()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.evaluation_sum_names:
            self.add_evaluation_sums(self.evaluation_sums(batch))

    def on_validation_epoch_end(self) -> None:
        if self.evaluation_sum_names:
            self.log_epoch_metrics("val", self.gathered_evaluation_sums())

    def on_test_epoch_start(self) -> None:
        self.reset_evaluation_sums()

    def test_step(self, batch: Any, batch_idx: int) -> None:
        if self.evaluation_sum_names:
            self.add_evaluation_sums(self.evaluation_sums(batch))

    def on_test_epoch_end(self) -> None:
        if self.evaluation_sum_names:
            self.log_epoch_metrics("test", self.gathered_evaluation_sums())

    def reset_evaluation_sums(self) -> None:
        """Zeros the sums (call at the start of a validation or test epoch)."""
        self._evaluation_sums = torch.zeros(len(self.evaluation_sum_names), dtype=torch.float64, device=self.device)

    def add_evaluation_sums(self, values: Tensor) -> None:
        """Adds one batch's sums, a float vector in the order of :attr:`evaluation_sum_names`."""
        self._evaluation_sums = self._evaluation_sums.to(self.device) + values.to(torch.float64)

    def gathered_evaluation_sums(self) -> dict[str, float]:
        """The epoch's sums over every process, by name (a collective: every process calls it)."""
        sums = self.all_gather(self._evaluation_sums)
        if sums.dim() > 1:
            sums = sums.sum(0)
        return dict(zip(self.evaluation_sum_names, sums.tolist(), strict=True))

    @classmethod
    def checkpoint_class(cls, hyper_parameters: dict[str, Any]) -> tuple[type, dict[str, Any]]:
        """The task class and init arguments that rebuild a checkpoint naming this class.

        Checkpoints of an older layout are upgraded here (the super-resolution tasks were one class).
        """
        return cls, hyper_parameters


def task_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """A task subclass's own init arguments, from its ``locals()`` at the top of ``__init__``.

    ``super().__init__(model, optimizer, ..., settings=task_arguments(locals()))`` saves each of
    them as a hyper-parameter and sets it as the attribute of its name: every argument is written
    once, in the signature (which LightningCLI and ``--help`` read).
    """
    return {name: value for name, value in arguments.items() if name not in _BASE_ARGUMENTS and not name.startswith("_")}


_BASE_ARGUMENTS = frozenset({"self", "__class__", "model", "optimizer", "warmup_steps", "finetune", "compile",
                             "min_lr_ratio", "settings"})  # fmt: skip


def _rng_states() -> dict[str, Any]:
    """torch's global generator states: the CPU one, and the CUDA ones once CUDA is in use."""
    states = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _uncount_replayed_epoch_end(fit_loop: Any) -> None:
    """Takes back the count of an epoch whose end a resumed run is about to replay.

    A checkpoint written in ``on_train_epoch_end`` (where :class:`~pytorch_lightning.callbacks.ModelCheckpoint`
    saves when it monitors a metric validated once an epoch) already counts its epoch as processed.
    A run limited by ``max_steps`` resumes it by replaying the end of that epoch, which counts it
    once more: every later epoch would then hand its sampler and data set the number of the next
    one (``set_epoch(epoch_progress.current.processed)``), drawing another epoch's order and
    windows, and ``max_epochs`` would stop the run an epoch early.
    """
    for progress in (fit_loop.epoch_progress.total, fit_loop.epoch_progress.current):
        if progress.processed == progress.completed + 1:
            progress.processed -= 1


def _loaders(dataloaders: Any) -> list[Any]:
    """The data loaders of a trainer's ``train_dataloader`` (one, or a list / dict of them)."""
    if isinstance(dataloaders, dict):
        return list(dataloaders.values())
    if isinstance(dataloaders, (list, tuple)):
        return list(dataloaders)
    return [] if dataloaders is None else [dataloaders]


class SharedCallable:
    """A callable that a deep copy of its owner shares instead of copying.

    A task keeps its optimizer factory; an EMA of the weights (Lightning's ``EMAWeightAveraging``,
    through ``torch.optim.swa_utils.AveragedModel``) deep-copies the whole task. Under DDP the
    factory that ``LightningCLI`` builds holds jsonargparse's instantiator, which holds a lock that
    cannot be copied. A factory is a recipe, not state: the copy can use the same one.
    """

    def __init__(self, function: Any) -> None:
        self.function = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> SharedCallable:
        return self

"""Learning-rate schedule shared by every task: linear warm-up, then cosine decay.

The decay follows whichever budget ends the run first: the step count Lightning estimates, or the
wall-clock ``max_time`` (a :class:`~pytorch_lightning.callbacks.Timer`), so a time-bounded run
still anneals to its final learning rate. Under data parallelism (``strategy: ddp``) every process
reads its own clock; the processes agree on the furthest one, so all of them apply the same
learning rate to the same averaged gradients and the replicas stay identical.
"""

from __future__ import annotations

import math

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Timer


def warmup_cosine(
    optimizer: torch.optim.Optimizer, trainer: pl.Trainer, warmup_steps: int, min_lr_ratio: float = 0.1
) -> dict:
    """Lightning's ``lr_scheduler`` entry: warm-up over ``warmup_steps``, cosine down to ``min_lr_ratio``.

    Args:
        optimizer: The optimizer to schedule.
        trainer: The running trainer (its step estimate and ``max_time`` timer).
        warmup_steps: Linear warm-up steps (at most half of the run).
        min_lr_ratio: Final learning rate as a fraction of the peak.
    """
    steps = float(trainer.estimated_stepping_batches)
    total = int(steps) if math.isfinite(steps) and steps > 0 else None
    warmup = min(warmup_steps, total // 2) if total else warmup_steps
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = (step - warmup) / max(total - warmup, 1) if total else 0.0
        if timer is not None and timer.time_remaining() is not None:
            elapsed = timer.time_elapsed()
            progress = max(progress, agreed_maximum(elapsed / max(elapsed + timer.time_remaining(), 1e-9)))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return {"scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, factor), "interval": "step"}


def agreed_maximum(value: float) -> float:
    """The largest ``value`` over the processes of a ``torch.distributed`` group (``value`` without one).

    A collective call: every process of the group must call it, in the same order.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return value
    if torch.distributed.get_world_size() == 1:
        return value
    shared = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(shared, op=torch.distributed.ReduceOp.MAX)
    return float(shared.item())

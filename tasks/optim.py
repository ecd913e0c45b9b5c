"""Learning-rate schedule shared by every task: linear warm-up, then cosine decay.

The decay follows whichever budget ends the run first: the step count Lightning estimates, or the
wall-clock ``max_time`` (a :class:`~pytorch_lightning.callbacks.Timer`), so a time-bounded run
still anneals to its final learning rate. Under data parallelism (``strategy: ddp``) every process
reads its own clock; the processes agree on the furthest one, so all of them apply the same
learning rate to the same averaged gradients and the replicas stay identical.
"""

from __future__ import annotations

import inspect
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
    # NCCL reduces CUDA tensors only; gloo (CPU) takes CPU ones.
    device = torch.device("cuda", torch.cuda.current_device()) if torch.distributed.get_backend() == "nccl" else "cpu"
    shared = torch.tensor([value], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(shared, op=torch.distributed.ReduceOp.MAX)
    return float(shared.item())


def fused_on_cuda(optimizer: torch.optim.Optimizer, device_types: tuple[str, ...] = ("cuda",)) -> torch.optim.Optimizer:
    """The same Adam / AdamW with ``fused=True`` when every parameter is on CUDA; else ``optimizer``.

    The fused kernel updates every tensor in one launch (PyTorch's fastest Adam on a GPU); it is not
    the default because it needs floating-point CUDA tensors. An explicit ``fused`` or ``foreach``
    in the config is kept as given.

    Args:
        optimizer: The optimizer the task's factory built.
        device_types: Where to fuse (the tests fuse on CPU, where PyTorch has the kernel too).
    """
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW):
        return optimizer
    if optimizer.defaults.get("fused") is not None or optimizer.defaults.get("foreach") is not None:
        return optimizer
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    if not parameters or not all(p.device.type in device_types and p.is_floating_point() for p in parameters):
        return optimizer
    return with_fused_kernel(optimizer)


def with_fused_kernel(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """A new optimizer of the same class, groups and settings, with ``fused=True`` (no state is copied)."""
    accepted = inspect.signature(type(optimizer).__init__).parameters
    # `defaults` can hold settings the constructor does not take (AdamW's decoupled_weight_decay).
    settings = {key: value for key, value in optimizer.defaults.items() if key in accepted}
    groups = [{**group, "fused": True, "foreach": None} for group in optimizer.param_groups]
    fused = type(optimizer)(groups, **{**settings, "fused": True, "foreach": None})
    # A fused Adam can take a GradScaler's unscaling into its kernel, and says so with this flag;
    # Lightning then refuses gradient clipping under mixed precision (even bf16, which has no
    # scaler). Cleared, the scaler unscales the gradients before clipping, as for any optimizer.
    fused._step_supports_amp_scaling = False
    return fused

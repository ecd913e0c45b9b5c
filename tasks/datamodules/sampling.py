"""Samplers for evaluation under data parallelism: every example scored exactly once.

Lightning gives each process of a distributed run a ``DistributedSampler``, which pads the data
set with repeats so all processes get as many batches: summed validation metrics would count
those repeats twice. Evaluation loaders take :func:`evaluation_sampler` instead, which splits the
examples without repeating any (each process may get one batch fewer; evaluation has no gradient
synchronisation to wait for it). Lightning leaves a ``DistributedSampler`` it is given alone.
"""

from __future__ import annotations

import torch
from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import Dataset, Sampler


def evaluation_sampler(dataset: Dataset) -> Sampler | None:
    """An unrepeated, unshuffled share of ``dataset`` for this process in a distributed run; else None."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    if torch.distributed.get_world_size() == 1:
        return None
    return UnrepeatedDistributedSampler(dataset, shuffle=False)

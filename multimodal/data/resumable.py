"""Training loaders that draw the same data on every run and resume in the middle of an epoch.

Three pieces, each usable alone, that make an interrupted run continue exactly as if it had not
stopped:

* :class:`SeededItems` wraps a data set whose items draw from torch's global generator (the
  ``torchvision`` augmentations): item ``i`` of epoch ``e`` draws from a generator seeded with
  ``(seed, e, i)``, whichever process or worker loads it and whenever. Data sets that are seeded
  themselves (:class:`~multimodal.data.music.MidiWindowDataset`,
  :class:`~multimodal.data.text.TokenWindowDataset`) need no wrapper; both kinds have ``set_epoch``.
* :class:`EpochOrder` is the sampler: indices in order, or shuffled by ``(seed, epoch)``. Its
  ``set_epoch`` (Lightning calls it at every epoch start, resumed ones included, and forwards it
  through its distributed wrapper) also sets the epoch of the data set.
* :class:`ResumableLoader` is a ``DataLoader`` with the ``state_dict`` / ``load_state_dict``
  protocol that Lightning saves in checkpoints: the epoch and the number of batches handed out.
  A loaded state makes the next iteration skip those batches by index, without loading them, so a
  run resumed from a mid-epoch checkpoint sees the rest of that epoch and nothing twice. Creating
  its iterator does not draw from torch's global generator (the loader has its own), so the
  global stream that dropout uses is the same in a resumed run.

Training loaders of multi-process loading must not keep persistent workers: a new epoch's workers
get the data set with its new epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from itertools import islice
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

__all__ = ["EpochOrder", "ResumableBatches", "ResumableLoader", "SeededItems", "item_seed"]


def item_seed(*keys: int) -> int:
    """A 63-bit seed that is a pure function of integer ``keys`` (e.g. ``(seed, epoch, index)``)."""
    return int(
        np.random.SeedSequence([int(key) for key in keys]).generate_state(2, np.uint64)[0] >> np.uint64(1)
    )


class SeededItems(Dataset):
    """``dataset`` whose item ``i`` draws its randomness from a generator seeded with ``(seed, epoch, i)``.

    The item is computed under :func:`torch.random.fork_rng` with torch's CPU generator seeded for
    that item, so the augmentations of ``torchvision`` transforms are a function of ``(seed, epoch, i)``,
    and the caller's global stream (dropout) is left as it was. Items are whatever ``dataset``
    returns. Other attributes (``classes``, ``class_names``, ...) are read from ``dataset``.

    Args:
        dataset: A map-style data set.
        seed: The run's data seed.
    """

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset, self.seed, self.epoch = dataset, int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        """Selects the draws of another epoch."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        with torch.random.fork_rng(devices=[]):
            # The CPU generator only: the one fork_rng restores and the one CPU transforms draw from.
            # torch.manual_seed would also re-seed every accelerator's generator (their dropout streams,
            # which fork_rng(devices=[]) does not restore) and, before CUDA starts, record a stack trace
            # per call for its lazy seeding — a quarter of a Fashion-MNIST ViT's training loop on 2 cores.
            torch.random.default_generator.manual_seed(item_seed(self.seed, self.epoch, index))
            return self.dataset[index]

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "__setstate__"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)


class EpochOrder(Sampler[int]):
    """The indices ``0 .. len(data) - 1`` of one epoch: in order, or permuted as a function of ``(seed, epoch)``.

    :meth:`set_epoch` selects the epoch for this sampler and for ``data`` (when it has
    ``set_epoch``), so the order and the items of an epoch travel together.

    Args:
        data: The data set (sized; its ``set_epoch`` is called if present).
        shuffle: Permute the indices; False keeps them in order.
        seed: The run's data seed (used when shuffling).
    """

    def __init__(self, data: Sized, shuffle: bool = False, seed: int = 0) -> None:
        self.data, self.shuffle, self.seed, self.epoch = data, shuffle, int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        """Selects the order of ``epoch`` and the data set's items of that epoch."""
        self.epoch = int(epoch)
        set_epoch = getattr(self.data, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(self.epoch)

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            yield from range(len(self.data))
            return
        generator = torch.Generator().manual_seed(item_seed(self.seed, self.epoch))
        yield from torch.randperm(len(self.data), generator=generator).tolist()


class ResumableBatches(BatchSampler):
    """A ``BatchSampler`` whose next iteration can continue an epoch after the batches already served.

    ``resume_at = (epoch, batches)``: if the sampler is at ``epoch`` when the iteration starts
    (its first batch is requested), the first ``batches`` batches are left out; either way
    ``resume_at`` is then cleared. ``skipped`` says how many were left out.
    """

    resume_at: tuple[int, int] | None = None
    skipped: int = 0

    def __iter__(self) -> Iterator[list[int]]:
        # A generator: this runs at the first batch, after Lightning's set_epoch of a new epoch.
        resume, self.resume_at = self.resume_at, None
        at_epoch = resume is not None and resume[0] == getattr(self.sampler, "epoch", None)
        self.skipped = resume[1] if at_epoch else 0
        yield from islice(super().__iter__(), self.skipped, None)


class ResumableLoader(DataLoader):
    """A training ``DataLoader`` that Lightning checkpoints mid-epoch and resumes without repeats.

    ``state_dict()`` is ``{"epoch": e, "batches": n}``: ``n`` batches of epoch ``e`` were handed
    out. ``load_state_dict`` selects epoch ``e`` (sampler and data set) and makes the next
    iteration, if it is still epoch ``e``, start at batch ``n`` (:class:`ResumableBatches`; a
    checkpoint saved at the end of an epoch resumes with the next epoch, which Lightning selects
    with ``set_epoch`` before the first batch). Lightning calls both: ``state_dict`` when it saves
    a checkpoint, ``load_state_dict`` before the first iteration of a resumed run.

    With worker processes the batch indices are requested as soon as the iterator exists, before
    Lightning selects a new epoch; a run limited by ``limit_train_batches`` then resumes exactly
    from mid-epoch checkpoints, but not from end-of-epoch ones (use ``num_workers: 0`` there).

    Args:
        dataset: A map-style data set (with ``set_epoch`` if its items depend on the epoch).
        batch_size: Items per batch.
        shuffle: Shuffle by ``(seed, epoch)`` (:class:`EpochOrder`); ignored with ``sampler``.
        seed: The data seed of the order.
        sampler: Another sampler (it should have ``set_epoch`` for the data set to follow).
        drop_last: Drop the last incomplete batch.
        batch_sampler: Lightning's re-created batch sampler in distributed runs; leave None.
        generator: Seeds worker processes; None: one seeded by ``seed`` (not torch's global one).
        **kwargs: ``num_workers``, ``collate_fn``, ``pin_memory``, ... as for ``DataLoader``
            (not ``persistent_workers``).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        sampler: Sampler | None = None,
        drop_last: bool = False,
        batch_sampler: ResumableBatches | None = None,
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("persistent_workers"):
            raise ValueError(
                "a ResumableLoader starts new workers each epoch: they take the data set's new epoch"
            )
        if batch_sampler is None:  # Lightning passes one when it re-creates the loader for distributed runs
            sampler = sampler if sampler is not None else EpochOrder(dataset, shuffle, seed)
            batch_sampler = ResumableBatches(sampler, batch_size, drop_last)
        elif not isinstance(batch_sampler, ResumableBatches):
            raise ValueError(
                f"ResumableLoader needs a ResumableBatches batch sampler, got {type(batch_sampler).__name__}"
            )
        generator = generator if generator is not None else torch.Generator().manual_seed(item_seed(seed, 1))
        super().__init__(dataset, batch_sampler=batch_sampler, generator=generator, **kwargs)
        self.batches_served = 0
        self._restart = False

    def __iter__(self) -> Iterator[Any]:
        # A generator: nothing below runs (no worker starts, no index is drawn) before the first batch.
        self._restart = False
        batches, count = super().__iter__(), 0
        while True:
            if self._restart:  # a state was loaded after this iteration began: begin again from it
                self._restart, batches, count = False, super().__iter__(), 0
            try:
                batch = next(batches)
            except StopIteration:
                return
            count += 1
            self.batches_served = self.batch_sampler.skipped + count
            yield batch

    def state_dict(self) -> dict[str, int]:
        """The epoch and the batches of it handed out so far."""
        return {"epoch": int(getattr(self.batch_sampler.sampler, "epoch", 0)), "batches": self.batches_served}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continues epoch ``state["epoch"]`` after batch ``state["batches"]`` at the next iteration."""
        set_epoch = getattr(self.batch_sampler.sampler, "set_epoch", None)  # Lightning's wrapper forwards it
        if callable(set_epoch):
            set_epoch(int(state["epoch"]))
        self.batch_sampler.resume_at = (int(state["epoch"]), int(state["batches"]))
        self.batches_served = int(state["batches"])
        # An iteration already begun (Lightning may build the iterator before it restores a
        # checkpoint; worker processes fetch indices ahead) restarts from this state at its next batch.
        self._restart = True

"""Seeded items, epoch orders and the resumable loader: the same data on every run, no repeats after a resume."""

import pytest
import torch
from torch.utils.data import Dataset
from torchvision.transforms import v2

from multimodal.data.resumable import EpochOrder, ResumableLoader, SeededItems


class RandomCrops(Dataset):
    """Random 4x4 crops of a fixed 8x8 image: each item draws from torch's global generator."""

    def __init__(self, length: int = 10) -> None:
        self.image = torch.arange(64.0).reshape(1, 8, 8)
        self.crop = v2.RandomCrop(4)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.crop(self.image) + 1000 * index


def test_seeded_items_depend_on_seed_epoch_and_index_only_and_leave_the_global_stream_alone():
    items = SeededItems(RandomCrops(), seed=3)
    torch.manual_seed(0)
    first = [items[i] for i in range(10)]
    state = torch.get_rng_state()
    torch.manual_seed(123)  # another global state, another access order: the same items
    again = {i: items[i] for i in reversed(range(10))}
    for i in range(10):
        torch.testing.assert_close(first[i], again[i], atol=0, rtol=0)
    torch.manual_seed(0)
    _ = [items[i] for i in range(10)]
    assert torch.equal(torch.get_rng_state(), state)  # items drew nothing from the global stream
    items.set_epoch(1)
    assert any(not torch.equal(items[i], first[i]) for i in range(10)), "a new epoch drew the same crops"
    assert any(not torch.equal(SeededItems(RandomCrops(), seed=4)[i], first[i]) for i in range(10))


def test_seeded_items_seed_the_cpu_generator_only(monkeypatch):
    """An accelerator's generator (its dropout stream) is not re-seeded per item, nor queued for seeding."""
    from multimodal.data.resumable import item_seed

    def refuse(*args, **kwargs):
        raise AssertionError("an accelerator's generator was seeded")

    monkeypatch.setattr(torch.cuda, "manual_seed_all", refuse)
    monkeypatch.setattr(torch.mps, "manual_seed", refuse)
    items = SeededItems(RandomCrops(), seed=3)
    expected = torch.Generator().manual_seed(item_seed(3, 0, 5))  # the item's crop, drawn by hand
    top, left = (int(torch.randint(0, 5, (1,), generator=expected)) for _ in range(2))
    torch.testing.assert_close(items[5], torch.arange(64.0).reshape(1, 8, 8)[:, top : top + 4, left : left + 4] + 5000)


def test_epoch_order_is_a_function_of_seed_and_epoch_and_sets_the_data_epoch():
    data = SeededItems(RandomCrops(50), seed=0)
    order = EpochOrder(data, shuffle=True, seed=5)
    epoch0 = list(order)
    assert sorted(epoch0) == list(range(50)) and epoch0 != list(range(50))
    assert list(EpochOrder(data, shuffle=True, seed=5)) == epoch0
    order.set_epoch(1)
    assert data.epoch == 1 and list(order) != epoch0 and sorted(order) == list(range(50))
    assert list(EpochOrder(data, shuffle=False)) == list(range(50))


def _batches(loader):
    return [batch.clone() for batch in loader]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_loaded_state_continues_the_epoch_without_repeats(num_workers):
    data = SeededItems(RandomCrops(20), seed=1)
    loader = ResumableLoader(data, batch_size=3, shuffle=True, seed=1, num_workers=num_workers)
    loader.batch_sampler.sampler.set_epoch(2)
    full = _batches(loader)
    assert len(full) == 7

    interrupted = ResumableLoader(SeededItems(RandomCrops(20), seed=1), batch_size=3, shuffle=True, seed=1,
                                  num_workers=num_workers)  # fmt: skip
    interrupted.batch_sampler.sampler.set_epoch(2)
    iterator = iter(interrupted)
    seen = [next(iterator).clone() for _ in range(3)]
    state = interrupted.state_dict()
    assert state == {"epoch": 2, "batches": 3}

    resumed = ResumableLoader(SeededItems(RandomCrops(20), seed=1), batch_size=3, shuffle=True, seed=1,
                              num_workers=num_workers)  # fmt: skip
    resumed.load_state_dict(state)
    rest = _batches(resumed)
    assert len(rest) == 4 and resumed.state_dict() == {"epoch": 2, "batches": 7}
    for expected, got in zip(full, seen + rest, strict=True):
        torch.testing.assert_close(got, expected, atol=0, rtol=0)
    assert len(_batches(resumed)) == 7  # the next iteration is a whole epoch again


def test_an_end_of_epoch_state_resumes_with_the_whole_next_epoch():
    loader = ResumableLoader(RandomCrops(9), batch_size=3, seed=0)
    _batches(loader)
    state = loader.state_dict()
    resumed = ResumableLoader(RandomCrops(9), batch_size=3, seed=0)
    resumed.load_state_dict({**state, "batches": 2})  # say an epoch limited to 2 batches ended here
    resumed.batch_sampler.sampler.set_epoch(state["epoch"] + 1)  # what Lightning does before the next epoch
    assert len(_batches(resumed)) == 3


def test_making_an_iterator_draws_nothing_from_the_global_generator():
    loader = ResumableLoader(RandomCrops(6), batch_size=2, shuffle=True, seed=0)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    iter(loader)
    assert torch.equal(torch.get_rng_state(), state)


def test_persistent_workers_are_refused():
    with pytest.raises(ValueError, match="new workers each epoch"):
        ResumableLoader(RandomCrops(6), batch_size=2, num_workers=1, persistent_workers=True)


def test_a_state_loaded_during_an_iteration_restarts_it_from_that_state():
    """Lightning can build the iterator before it restores a checkpoint; the loaded place still counts."""
    full = _batches(ResumableLoader(SeededItems(RandomCrops(12), seed=0), batch_size=2, seed=0))
    loader = ResumableLoader(SeededItems(RandomCrops(12), seed=0), batch_size=2, seed=0, num_workers=1)
    iterator = iter(loader)
    next(iterator)  # the worker has fetched ahead
    loader.load_state_dict({"epoch": 0, "batches": 3})
    rest = [batch.clone() for batch in iterator]
    assert len(rest) == 3
    for expected, got in zip(full[3:], rest, strict=True):
        torch.testing.assert_close(got, expected, atol=0, rtol=0)

"""The shared warm-up + cosine schedule follows the step budget, or the clock when max_time ends the run."""

from __future__ import annotations

import math
import socket
from types import SimpleNamespace

import pytest
import torch
from pytorch_lightning.callbacks import Timer

from tasks.optim import agreed_maximum, warmup_cosine


def _factors(trainer, steps: int, warmup: int = 10, min_lr_ratio: float = 0.1) -> list[float]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    entry = warmup_cosine(optimizer, trainer, warmup, min_lr_ratio)
    assert entry["interval"] == "step"
    return [entry["scheduler"].lr_lambdas[0](step) for step in range(steps)]


def test_schedule_warms_up_linearly_then_follows_a_cosine_over_the_step_budget():
    factors = _factors(SimpleNamespace(estimated_stepping_batches=110, callbacks=[]), 111)
    assert factors[:10] == pytest.approx([(s + 1) / 11 for s in range(10)])
    for step in (10, 35, 60, 85, 110):
        progress = (step - 10) / 100
        assert factors[step] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


class _Clock(Timer):
    """A Timer whose clock the test sets."""

    def __init__(self, elapsed: float, remaining: float) -> None:
        super().__init__(duration="00:00:01:00")
        self.elapsed, self.remaining = elapsed, remaining

    def time_elapsed(self, stage="train") -> float:
        return self.elapsed

    def time_remaining(self, stage="train") -> float:
        return self.remaining


def test_a_time_bounded_run_anneals_with_the_clock_when_the_step_budget_is_far_away():
    clock = _Clock(elapsed=0.0, remaining=60.0)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    trainer = SimpleNamespace(estimated_stepping_batches=40_000, callbacks=[clock])  # max_epochs x epoch length
    factor = warmup_cosine(optimizer, trainer, 0)["scheduler"].lr_lambdas[0]
    clock.elapsed, clock.remaining = 45.0, 15.0  # three quarters of max_time gone at step 500
    assert factor(500) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.75)))
    clock.elapsed, clock.remaining = 60.0, 0.0
    assert factor(700) == pytest.approx(0.1)


def _agree(rank: int, port: int, values: list[float], results) -> None:
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=len(values)
    )
    try:
        results[rank] = agreed_maximum(values[rank])
    finally:
        torch.distributed.destroy_process_group()


def test_data_parallel_processes_agree_on_the_furthest_clock():
    """Each process passes its own progress; all get the largest (so their learning rates match)."""
    values = [0.25, 0.75]
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = torch.multiprocessing.get_context("spawn").Manager().dict()
    torch.multiprocessing.spawn(_agree, args=(port, values, results), nprocs=2)
    assert dict(results) == {0: 0.75, 1: 0.75}
    assert agreed_maximum(0.3) == 0.3  # no process group: the value itself

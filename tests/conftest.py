"""Shared test set-up: headless plotting, quiet Lightning, paths to the shipped configs."""

import logging
import os
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("MULTIMODAL_DEBUG", "1")  # failures show tracebacks; tests of one-line errors turn it off
logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


@pytest.fixture
def configs() -> Path:
    """The folder of shipped YAML configs."""
    return CONFIGS


@pytest.fixture
def one_thread():
    """One torch thread for the test: on tiny tensors OpenMP threads only add overhead (and spin when
    other jobs share the cores). Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

"""Instruments for tests: what the code under test allocates."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operator returns (``with LargestTensor() as probe``)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, tuple | list) else [out]:
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out

"""Absolute position embeddings added to the input of a stack."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class SinusoidalPositions(nn.Module):
    """Sine/cosine embeddings of Vaswani et al. 2017 times a learned gain; defined for any position.

    The table's entries are of size 1 while token embeddings start at about 0.02 (GPT-2's
    initialisation), so unscaled positions would drown the tokens at the start of training (on
    the chorales the vanilla Transformer then reached only 4.38 nats/event in 600 steps). The gain
    starts at ``dim ** -0.5`` (each position vector then has a norm of about 0.7) and is learned,
    as in x-transformers' scaled sinusoidal embedding.

    Args:
        dim: Embedding width (even).
        max_seq_len: Positions precomputed; longer sequences are computed on the fly.
    """

    def __init__(self, dim: int, max_seq_len: int) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"sinusoidal positions need an even dim, got {dim}")
        self.dim = dim
        self.gain = nn.Parameter(torch.tensor(dim**-0.5))
        self.register_buffer("table", self._table(max_seq_len), persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Embeddings of positions ``offset .. offset + length - 1``, ``(length, dim)``."""
        if offset + length > self.table.shape[0]:
            self.table = self._table(2 * (offset + length)).to(self.table.device)
        return self.gain * self.table[offset : offset + length]

    def at(self, positions: Tensor) -> Tensor:
        """Embeddings of integer ``positions`` of any shape (one row per prompt of a batch): ``(*shape, dim)``."""
        needed = int(positions.max()) + 1
        if needed > self.table.shape[0]:
            self.table = self._table(2 * needed).to(self.table.device)
        return self.gain * self.table[positions]

    def _table(self, length: int) -> Tensor:
        position = torch.arange(length, dtype=torch.float32)[:, None]
        frequency = torch.exp(torch.arange(0, self.dim, 2, dtype=torch.float32) * (-math.log(10000.0) / self.dim))
        table = torch.zeros(length, self.dim)
        table[:, 0::2] = torch.sin(position * frequency)
        table[:, 1::2] = torch.cos(position * frequency)
        return table


class LearnedPositions(nn.Module):
    """One trained vector per position, as in GPT-2 and ViT.

    Args:
        dim: Embedding width.
        max_seq_len: Number of positions; longer sequences are an error.
    """

    def __init__(self, dim: int, max_seq_len: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_seq_len, dim) * 0.02)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Embeddings of positions ``offset .. offset + length - 1``, ``(length, dim)``."""
        max_seq_len = self.weight.shape[0]
        if offset + length > max_seq_len:
            raise ValueError(
                f"sequence of {offset + length} tokens exceeds max_seq_len={max_seq_len} of this "
                f"absolute-position model; use position='relative' or crop the prompt"
            )
        return self.weight[offset : offset + length]

    def at(self, positions: Tensor) -> Tensor:
        """Embeddings of integer ``positions`` of any shape (one row per prompt of a batch): ``(*shape, dim)``."""
        if int(positions.max()) >= self.weight.shape[0]:
            raise ValueError(
                f"position {int(positions.max())} exceeds max_seq_len={self.weight.shape[0]} of this "
                f"absolute-position model; use position='relative' or crop the prompt"
            )
        return self.weight[positions]

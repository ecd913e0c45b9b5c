"""Sinusoidal positions against the formula of Vaswani et al., written out per entry."""

from __future__ import annotations

import math

import torch

from multimodal.layers.positions import SinusoidalPositions


def test_sinusoidal_table_is_the_textbook_formula_times_a_learned_gain():
    dim, length, offset = 8, 5, 3
    module = SinusoidalPositions(dim, max_seq_len=4)  # shorter than needed: extended on the fly
    expected = torch.zeros(length, dim)
    for row in range(length):
        position = offset + row
        for i in range(dim // 2):
            angle = position / 10000 ** (2 * i / dim)
            expected[row, 2 * i], expected[row, 2 * i + 1] = math.sin(angle), math.cos(angle)
    torch.testing.assert_close(module(length, offset), expected / math.sqrt(dim))
    assert module.gain.requires_grad
    module(length, offset).sum().backward()
    torch.testing.assert_close(module.gain.grad, expected.sum())

"""The position objects a :class:`~multimodal.layers.config.TransformerConfig` names."""

from __future__ import annotations

from torch import nn

from multimodal.layers.config import TransformerConfig
from multimodal.layers.positions.absolute import LearnedPositions, SinusoidalPositions
from multimodal.layers.positions.alibi import ALiBiPositions
from multimodal.layers.positions.base import AttentionPosition
from multimodal.layers.positions.grid import GridOffsets
from multimodal.layers.positions.relative import RelativePositionEmbedding
from multimodal.layers.positions.relative2d import RelativePosition2D
from multimodal.layers.positions.rotary import RotaryPositions


def input_positions(config: TransformerConfig) -> nn.Module | None:
    """The absolute positions added to a stack's input (``sinusoidal``, ``learned``); None for the others."""
    if config.position == "sinusoidal":
        return SinusoidalPositions(config.dim, config.max_seq_len)
    if config.position == "learned":
        return LearnedPositions(config.dim, config.max_seq_len)
    return None


def attention_position(config: TransformerConfig, causal: bool) -> AttentionPosition | None:
    """The position scheme of one self-attention layer of ``config``; None when attention has none.

    ``relative`` learns a distance table clipped at ``max_relative_distance`` for full attention,
    at the window for ``local1d``, and row and column tables for ``local2d``.
    """
    heads, head_dim = config.num_heads, config.head_dim
    if config.position == "relative":
        if config.attention == "local1d":
            return RelativePositionEmbedding(heads, head_dim, max(config.local_window - 1, 1), causal)
        if config.attention == "local2d":
            return GridOffsets(heads, head_dim, config.local_query_shape, config.local_memory_shape, causal)
        return RelativePositionEmbedding(heads, head_dim, config.max_relative_distance, causal)
    if config.position == "relative2d":
        return RelativePosition2D(heads, head_dim, config.grid_size)
    if config.position == "rotary":
        return RotaryPositions(head_dim, config.rotary_base, config.rotary_fraction, config.rotary_scaling,
                               config.rotary_scale)  # fmt: skip
    if config.position == "alibi":
        return ALiBiPositions(heads)
    return None

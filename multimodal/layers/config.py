"""The one dataclass that describes a Transformer stack.

Every block, stack and model is built from a :class:`TransformerConfig`. It holds plain values
and string ``Literal`` choices only, so it round-trips through YAML, ``--help`` and checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PositionScheme = Literal["none", "sinusoidal", "learned", "relative"]
Activation = Literal["gelu", "gelu_tanh", "relu"]


@dataclass
class TransformerConfig:
    """Sizes and options of an encoder or decoder stack.

    Attributes:
        dim: Width of the residual stream (``d_model``).
        num_layers: Number of Transformer blocks.
        num_heads: Attention heads per block; must divide ``dim``.
        ff_dim: Hidden width of the feed-forward network; ``None`` means ``4 * dim``.
        dropout: Dropout after attention, in the feed-forward network and on the input embeddings.
        attention_dropout: Dropout on the attention probabilities.
        position: How attention knows where tokens are. ``"none"``; ``"sinusoidal"`` or
            ``"learned"`` absolute embeddings added to the input; ``"relative"`` learned per-distance
            embeddings inside every attention layer (Shaw et al. 2018, computed with the Music
            Transformer skew).
        max_seq_len: Longest sequence the absolute position tables cover (and the default
            relative clipping distance).
        max_relative_distance: Relative distances are clipped to ``[-k, k]``; ``None`` means
            ``max_seq_len - 1`` (no clipping within the trained length).
        activation: Feed-forward non-linearity; ``gelu_tanh`` is GPT-2's approximation.
        norm_eps: Epsilon of the LayerNorms.
        bias: Whether linear layers have a bias.
        cross_attention: Whether each block also attends to an encoder's output (decoders of
            encoder-decoder models).
        context_dim: Width of that encoder output; ``None`` means ``dim``.
        attention_impl: ``"fast"`` (SDPA / the skewed relative kernel) or ``"reference"`` (plain
            PyTorch, quadratic memory; for tests and debugging).
    """

    dim: int = 256
    num_layers: int = 4
    num_heads: int = 8
    ff_dim: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    position: PositionScheme = "relative"
    max_seq_len: int = 2048
    max_relative_distance: int | None = None
    activation: Activation = "gelu"
    norm_eps: float = 1e-5
    bias: bool = True
    cross_attention: bool = False
    context_dim: int | None = None
    attention_impl: Literal["fast", "reference"] = "fast"

    def __post_init__(self) -> None:
        if self.dim % self.num_heads:
            raise ValueError(
                f"dim={self.dim} is not divisible by num_heads={self.num_heads}; "
                f"pick num_heads among the divisors of dim"
            )
        if self.ff_dim is None:
            self.ff_dim = 4 * self.dim
        if self.context_dim is None:
            self.context_dim = self.dim
        if self.max_relative_distance is None:
            self.max_relative_distance = self.max_seq_len - 1

    @property
    def head_dim(self) -> int:
        """Width of one attention head, ``dim // num_heads``."""
        return self.dim // self.num_heads

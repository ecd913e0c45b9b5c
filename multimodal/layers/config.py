"""The one dataclass that describes a Transformer stack.

Every block, stack and model is built from a :class:`TransformerConfig`. It holds plain values
and string ``Literal`` choices only, so it round-trips through YAML, ``--help`` and checkpoints.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

PositionScheme = Literal["none", "sinusoidal", "learned", "relative", "relative2d", "rotary", "alibi"]
Activation = Literal["gelu", "gelu_tanh", "relu", "silu", "swiglu"]
Norm = Literal["layernorm", "rmsnorm"]
RotaryScaling = Literal["none", "linear", "ntk"]
AttentionPattern = Literal["full", "local1d", "local2d"]


def check_sizes(
    config: Any,
    positive: Iterable[str] = (),
    non_negative: Iterable[str] = (),
    optional_positive: Iterable[str] = (),
    optional_non_negative: Iterable[str] = (),
) -> None:
    """Raises ``ValueError`` naming the first size field of ``config`` that is not a whole number in range.

    Sizes come from YAML, JSON (``config.json`` of a model folder, a converted model's Hugging Face
    config) and checkpoints, where ``-1`` or ``1e6`` (a float) are easy to write; a size must be an
    integer (not a bool, not a float) ``>= 1`` (``positive``) or ``>= 0`` (``non_negative``). Fields
    of the ``optional_*`` groups may also be ``None``; a tuple field (a shape) is checked item by item.
    Integer values of other types (NumPy's) are stored back as ``int``.
    """
    groups = (
        (positive, 1, False),
        (non_negative, 0, False),
        (optional_positive, 1, True),
        (optional_non_negative, 0, True),
    )
    for names, low, optional in groups:
        for name in names:
            value = getattr(config, name)
            if value is None and optional:
                continue
            items = value if isinstance(value, (tuple, list)) else (value,)
            if not items or any(isinstance(item, bool) or not isinstance(item, numbers.Integral) or item < low
                                for item in items):  # fmt: skip
                wanted = "a whole number >= 1" if low else "a whole number >= 0"
                raise ValueError(
                    f"{type(config).__name__}.{name} must be {wanted}{' (or null)' if optional else ''}"
                    f"{' in every entry' if isinstance(value, (tuple, list)) else ''}, got {value!r}; "
                    f"fix {name} in the model config (the run's YAML, or config.json of the model folder)"
                )
            if not isinstance(value, (tuple, list)):
                setattr(config, name, int(value))


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
        drop_path: Stochastic depth (:mod:`multimodal.layers.drop_path`): the largest rate, given to
            the last block; block ``i`` of ``L`` drops each sample's residual branches (attention,
            cross-attention, feed-forward) with probability ``drop_path * i / (L - 1)`` in
            training, as DeiT/timm. 0 (default) turns it off; evaluation is never affected.
        position: How attention knows where tokens are (:mod:`multimodal.layers.positions`;
            costs and extrapolation in ``docs/attention.md``). ``"none"``; ``"sinusoidal"`` or
            ``"learned"`` absolute embeddings added to the input; ``"relative"`` learned per-distance
            embeddings inside every attention layer (Shaw et al. 2018, computed with the Music
            Transformer skew); ``"relative2d"`` learned row- and column-offset embeddings inside
            every attention layer for tokens on a ``grid_size`` grid (image patches; see
            :mod:`multimodal.layers.positions.relative2d`); ``"rotary"`` queries and keys turned by their
            position (RoPE, Su et al. 2021; ``rotary_*``); ``"alibi"`` a fixed linear distance
            penalty per head (Press et al. 2022).
        max_seq_len: Longest sequence the absolute position tables cover (and the default
            relative clipping distance).
        max_relative_distance: Relative distances are clipped to ``[-k, k]``; ``None`` means
            ``max_seq_len - 1`` (no clipping within the trained length).
        activation: Feed-forward non-linearity; ``gelu_tanh`` is GPT-2's approximation;
            ``swiglu`` the gated feed-forward of Llama (a third matrix).
        norm: ``"layernorm"`` or ``"rmsnorm"`` (Llama), before attention, feed-forward and at the end.
        norm_eps: Epsilon of the norms.
        bias: Whether linear layers have a bias (Llama: False).
        num_kv_heads: Key/value heads; None: ``num_heads``. Fewer share each key/value head among
            ``num_heads / num_kv_heads`` query heads (grouped-query attention; 1 is multi-query),
            and the KV cache shrinks by that factor.
        rotary_base: ``position="rotary"``: frequency base (10,000; Llama 3 uses 500,000).
        rotary_fraction: Share of each head's features that rotate (GPT-NeoX's ``rotary_pct``).
        rotary_scaling: ``"none"``, ``"linear"`` (position interpolation) or ``"ntk"``, for
            contexts ``rotary_scale`` times longer than trained.
        rotary_scale: The factor of ``rotary_scaling``.
        cross_attention: Whether each block also attends to an encoder's output (decoders of
            encoder-decoder models).
        context_dim: Width of that encoder output; ``None`` means ``dim``.
        attention_impl: ``"fast"`` (SDPA / the skewed relative kernel) or ``"reference"`` (plain
            PyTorch, quadratic memory; for tests and debugging).
        grid_size: ``(rows, cols)`` of the token grid, required by ``position="relative2d"``:
            the last ``rows * cols`` tokens of a sequence are the grid in raster order, any tokens
            before them (a class token) are off-grid. ``ViTConfig`` derives it from the image size.
        attention: Which keys each query sees (:mod:`multimodal.layers.local`). ``"full"``: all
            (the past, in decoders). ``"local1d"``: itself and the ``local_window - 1`` tokens before
            it (each side, in encoders). ``"local2d"``: the sequence is a grid ``local_grid_width``
            tokens wide (raster pixels: width × channels); query blocks of ``local_query_shape``
            attend to a memory block ``local_memory_shape`` wider: rows above (and below, in
            encoders), columns on each side (Parmar et al. 2018). Local attention costs time and
            memory linear in ``seq_len``; cached decoding keeps only the keys still visible. With
            ``position="relative"`` it learns 1D distance or 2D (row, column) offset embeddings.
        local_window: ``local1d``: keys per query, itself included.
        local_grid_width: ``local2d``: tokens per grid row; None lets a model give it with each
            input (``grid_width=`` of the stack's forward).
        local_query_shape: ``local2d``: ``(rows, cols)`` of a query block.
        local_memory_shape: ``local2d``: ``(rows, cols)`` the memory block adds above the query
            block and on each side of it.
    """

    dim: int = 256
    num_layers: int = 4
    num_heads: int = 8
    ff_dim: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    drop_path: float = 0.0
    position: PositionScheme = "relative"
    max_seq_len: int = 2048
    max_relative_distance: int | None = None
    activation: Activation = "gelu"
    norm: Norm = "layernorm"
    norm_eps: float = 1e-5
    bias: bool = True
    num_kv_heads: int | None = None
    rotary_base: float = 10_000.0
    rotary_fraction: float = 1.0
    rotary_scaling: RotaryScaling = "none"
    rotary_scale: float = 1.0
    cross_attention: bool = False
    context_dim: int | None = None
    attention_impl: Literal["fast", "reference"] = "fast"
    grid_size: tuple[int, int] | None = None
    attention: AttentionPattern = "full"
    local_window: int = 256
    local_grid_width: int | None = None
    local_query_shape: tuple[int, int] = (8, 8)
    local_memory_shape: tuple[int, int] = (8, 8)

    def __post_init__(self) -> None:
        check_sizes(
            self,
            positive=("dim", "num_layers", "num_heads", "max_seq_len", "local_window", "local_query_shape"),
            non_negative=("local_memory_shape",),
            optional_positive=("ff_dim", "num_kv_heads", "context_dim", "local_grid_width", "grid_size"),
            optional_non_negative=("max_relative_distance",),
        )
        if self.dim % self.num_heads:
            raise ValueError(
                f"dim={self.dim} is not divisible by num_heads={self.num_heads}; "
                f"pick num_heads among the divisors of dim"
            )
        if not 0.0 <= self.drop_path < 1.0:
            raise ValueError(f"drop_path={self.drop_path} must lie in [0, 1) (0: no stochastic depth)")
        if self.ff_dim is None:
            self.ff_dim = 4 * self.dim
        if self.num_kv_heads is not None and (self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads):
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads} "
                f"(1: multi-query, num_heads: ordinary multi-head attention)"
            )
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"norm must be 'layernorm' or 'rmsnorm', got {self.norm!r}")
        if self.context_dim is None:
            self.context_dim = self.dim
        if self.max_relative_distance is None:
            self.max_relative_distance = self.max_seq_len - 1
        if self.grid_size is not None:
            self.grid_size = tuple(int(size) for size in self.grid_size)  # YAML and JSON give lists
        if self.position == "relative2d" and (self.grid_size is None or len(self.grid_size) != 2):
            raise ValueError(
                f"position='relative2d' needs grid_size=(rows, cols) of the token grid, got {self.grid_size}; "
                f"for patches that is (height // patch_size, width // patch_size) (ViTConfig sets it)"
            )
        self.local_query_shape = tuple(int(size) for size in self.local_query_shape)  # YAML gives lists
        self.local_memory_shape = tuple(int(size) for size in self.local_memory_shape)
        if self.attention not in ("full", "local1d", "local2d"):
            raise ValueError(f"attention must be 'full', 'local1d' or 'local2d', got {self.attention!r}")
        if self.attention != "full" and self.position == "relative2d":
            raise ValueError(
                "local attention brings its own 2D relative positions: use position='relative' with "
                "attention='local2d' instead of 'relative2d'"
            )

    @property
    def head_dim(self) -> int:
        """Width of one attention head, ``dim // num_heads``."""
        return self.dim // self.num_heads

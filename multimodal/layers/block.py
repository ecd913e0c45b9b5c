"""Feed-forward network and the pre-norm Transformer block."""

from __future__ import annotations

from torch import Tensor, nn

from multimodal.layers.attention import MultiHeadAttention
from multimodal.layers.cache import DecodingState
from multimodal.layers.config import TransformerConfig
from multimodal.layers.local import LocalAttention

_ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": lambda: nn.ReLU(),
}


class FeedForward(nn.Module):
    """Position-wise ``Linear -> activation -> Linear -> dropout``; ``(batch, seq, dim)`` in and out.

    Args:
        dim: Input and output width.
        hidden_dim: Inner width.
        activation: ``"gelu"``, ``"gelu_tanh"`` or ``"relu"``.
        dropout: Dropout on the output.
        bias: Bias in both linear layers.
    """

    def __init__(self, dim: int, hidden_dim: int, activation: str = "gelu", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(_ACTIVATIONS)}")
        self.up = nn.Linear(dim, hidden_dim, bias=bias)
        self.activation = _ACTIVATIONS[activation]()
        self.down = nn.Linear(hidden_dim, dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(batch, seq, dim) -> (batch, seq, dim)``."""
        return self.dropout(self.down(self.activation(self.up(x))))


class TransformerBlock(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))``, optionally ``+ cross_attn(norm(x), context)``, ``+ ff(norm(x))``.

    Args:
        config: Sizes and options; ``config.position == "relative"`` gives the self-attention its
            own relative distance table, ``"relative2d"`` its own row and column offset tables.
        causal: Mask future positions in self-attention.
    """

    def __init__(self, config: TransformerConfig, causal: bool) -> None:
        super().__init__()
        local = LocalAttention.from_config(config, causal)  # None for full attention
        relative = config.max_relative_distance if config.position == "relative" and local is None else None
        grid = config.grid_size if config.position == "relative2d" else None
        self.norm_attention = nn.LayerNorm(config.dim, eps=config.norm_eps)
        self.attention = MultiHeadAttention(
            config.dim, config.num_heads, causal=causal, relative_max_distance=relative, relative_2d_grid=grid,
            dropout=config.attention_dropout, bias=config.bias, impl=config.attention_impl, local=local,
        )  # fmt: skip
        self.norm_cross = self.cross_attention = None
        if config.cross_attention:
            self.norm_cross = nn.LayerNorm(config.dim, eps=config.norm_eps)
            self.cross_attention = MultiHeadAttention(
                config.dim, config.num_heads, context_dim=config.context_dim,
                dropout=config.attention_dropout, bias=config.bias, impl=config.attention_impl,
            )  # fmt: skip
        self.norm_ff = nn.LayerNorm(config.dim, eps=config.norm_eps)
        self.ff = FeedForward(config.dim, config.ff_dim, config.activation, config.dropout, config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        *,
        context: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        context_padding_mask: Tensor | None = None,
        state: DecodingState | None = None,
        layer: int = 0,
        num_queries: int | None = None,
    ) -> Tensor:
        """``(batch, seq, dim) -> (batch, seq, dim)``, or ``(batch, num_queries, dim)``.

        Args:
            x: Block input.
            context: Encoder output ``(batch, ctx_len, context_dim)`` for cross-attention.
            key_padding_mask: ``(batch, k_len)`` bool, True at padded self-attention keys.
            context_padding_mask: ``(batch, ctx_len)`` bool, True at padded context positions.
            state: Decoding state; this block uses its cache number ``layer``.
            layer: Index of this block in its stack.
            num_queries: Compute only the first ``num_queries`` outputs: they attend to every
                position, and the rest of the block runs on them alone (see
                :meth:`MultiHeadAttention.forward`).
        """
        cache = state.layers[layer] if state is not None else None
        offset = state.position if state is not None else 0
        attended = self.attention(
            self.norm_attention(x), key_padding_mask=key_padding_mask, cache=cache, query_offset=offset,
            num_queries=num_queries,
        )  # fmt: skip
        x = x[:, :num_queries] + self.dropout(attended)
        if self.cross_attention is not None:
            kv = context
            if state is not None:
                if state.cross[layer] is None:
                    state.cross[layer] = self.cross_attention.project_context(context)
                kv = state.cross[layer]
            x = x + self.dropout(self.cross_attention(self.norm_cross(x), kv, key_padding_mask=context_padding_mask))
        return x + self.ff(self.norm_ff(x))

"""Feed-forward network and the pre-norm Transformer block."""

from __future__ import annotations

from torch import Tensor, nn

from multimodal.layers.attention import MultiHeadAttention
from multimodal.layers.cache import DecodingState
from multimodal.layers.config import TransformerConfig
from multimodal.layers.drop_path import DropPath
from multimodal.layers.local import LocalAttention
from multimodal.layers.positions.build import attention_position

_ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": lambda: nn.ReLU(),
    "silu": lambda: nn.SiLU(),
    "swiglu": lambda: nn.SiLU(),  # gated: silu(gate(x)) * up(x)
}


def norm_layer(config: TransformerConfig) -> nn.Module:
    """The block's normalisation: ``LayerNorm`` (GPT-2, ViT) or ``RMSNorm`` (Llama), with ``config.norm_eps``."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.dim, eps=config.norm_eps)
    return nn.LayerNorm(config.dim, eps=config.norm_eps)


class FeedForward(nn.Module):
    """Position-wise ``Linear -> activation -> Linear -> dropout``; ``(batch, seq, dim)`` in and out.

    With ``activation="swiglu"`` it is gated (Shazeer 2020, the Llama MLP):
    ``down(silu(gate(x)) * up(x))``, a third ``dim -> hidden_dim`` matrix ``gate``.

    Args:
        dim: Input and output width.
        hidden_dim: Inner width.
        activation: ``"gelu"``, ``"gelu_tanh"``, ``"relu"``, ``"silu"`` or ``"swiglu"``.
        dropout: Dropout on the output.
        bias: Bias in the linear layers.
    """

    def __init__(self, dim: int, hidden_dim: int, activation: str = "gelu", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(_ACTIVATIONS)}")
        self.gate = nn.Linear(dim, hidden_dim, bias=bias) if activation == "swiglu" else None
        self.up = nn.Linear(dim, hidden_dim, bias=bias)
        self.activation = _ACTIVATIONS[activation]()
        self.down = nn.Linear(hidden_dim, dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(batch, seq, dim) -> (batch, seq, dim)``."""
        if self.gate is not None:
            out = self.down(self.activation(self.gate(x)) * self.up(x))
        else:
            out = self.down(self.activation(self.up(x)))
        return self.dropout(out) if self.training else out


class TransformerBlock(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))``, optionally ``+ cross_attn(norm(x), context)``, ``+ ff(norm(x))``.

    Args:
        config: Sizes and options; ``config.position`` gives the self-attention its position
            scheme (:func:`~multimodal.layers.positions.build.attention_position`), ``config.norm``
            and ``config.activation`` the Llama block (``rmsnorm``, ``swiglu``, ``bias=False``).
        causal: Mask future positions in self-attention.
        local: The stack's local pattern, shared by its blocks; None for full attention.
        drop_path: Stochastic-depth rate of this block (:class:`~multimodal.layers.drop_path.DropPath`
            on every residual branch, training only); the stack sets it from ``config.drop_path``.
    """

    def __init__(
        self, config: TransformerConfig, causal: bool, local: LocalAttention | None = None, drop_path: float = 0.0
    ) -> None:
        super().__init__()
        self.norm_attention = norm_layer(config)
        self.attention = MultiHeadAttention(
            config.dim, config.num_heads, causal=causal, position=attention_position(config, causal), local=local,
            num_kv_heads=config.num_kv_heads, dropout=config.attention_dropout, bias=config.bias,
            impl=config.attention_impl,
        )  # fmt: skip
        self.norm_cross = self.cross_attention = None
        if config.cross_attention:
            self.norm_cross = norm_layer(config)
            self.cross_attention = MultiHeadAttention(
                config.dim, config.num_heads, context_dim=config.context_dim, num_kv_heads=config.num_kv_heads,
                dropout=config.attention_dropout, bias=config.bias, impl=config.attention_impl,
            )  # fmt: skip
        self.norm_ff = norm_layer(config)
        self.ff = FeedForward(config.dim, config.ff_dim, config.activation, config.dropout, config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

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
        grid_width: int | None = None,
        positions: Tensor | None = None,
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
            grid_width: Tokens per grid row of a ``local2d`` pattern, for inputs of varying size.
            positions: ``(batch, seq)`` positions of the tokens when rows differ (left-padded prompts).
        """
        cache = state.layers[layer] if state is not None else None
        offset = state.position if state is not None else 0
        attended = self.attention(
            self.norm_attention(x), key_padding_mask=key_padding_mask, cache=cache, query_offset=offset,
            num_queries=num_queries, grid_width=grid_width, positions=positions,
        )  # fmt: skip
        x = x[:, :num_queries] + self._residual(attended)
        if self.cross_attention is not None:
            kv = context
            if state is not None:
                if state.cross[layer] is None:
                    state.cross[layer] = self.cross_attention.project_context(context)
                kv = state.cross[layer]
            crossed = self.cross_attention(self.norm_cross(x), kv, key_padding_mask=context_padding_mask)
            x = x + self._residual(crossed)
        ff = self.ff(self.norm_ff(x))
        return x + (self.drop_path(ff) if self.training else ff)

    def _residual(self, branch: Tensor) -> Tensor:
        """A residual branch's output after dropout and drop path; both are the identity in eval mode, where
        the two module calls are skipped (a decoding step runs this twice per block)."""
        return self.drop_path(self.dropout(branch)) if self.training else branch

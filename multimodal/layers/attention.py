"""Multi-head attention: projections, head split/merge, KV cache; the core lives in ``attend.py``.

Einops legend: ``b`` batch, ``l`` sequence, ``h`` heads, ``d`` head_dim, ``three`` the q/k/v
(or ``two`` the k/v) stacked by one fused projection.
"""

from __future__ import annotations

from einops import rearrange
from torch import Tensor, nn

from multimodal.layers.attend import attend, attend_reference
from multimodal.layers.cache import KVCache
from multimodal.layers.relative import RelativePositionEmbedding


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with optional causal mask, padding mask, relative positions and cache.

    Self-attention uses one fused ``dim -> 3 * dim`` projection (the layout of GPT-2's ``c_attn``
    and timm's ``qkv``); cross-attention projects queries from ``x`` and keys/values from the
    context.

    Args:
        dim: Width of ``x``.
        num_heads: Number of heads; ``dim`` must be divisible by it.
        causal: Mask future keys (self-attention only).
        context_dim: Width of the context for cross-attention; None for self-attention.
        relative_max_distance: If set, adds learned relative position embeddings clipped at this
            distance (self-attention only).
        dropout: Dropout on the attention probabilities.
        bias: Bias in the projections.
        impl: ``"fast"`` or ``"reference"`` core (see :mod:`multimodal.layers.attend`).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        causal: bool = False,
        context_dim: int | None = None,
        relative_max_distance: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        impl: str = "fast",
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim={dim} is not divisible by num_heads={num_heads}")
        self.is_cross = context_dim is not None
        if self.is_cross and (causal or relative_max_distance is not None):
            raise ValueError("cross-attention takes neither a causal mask nor relative positions")
        self.num_heads = num_heads
        self.causal = causal
        self.dropout = dropout
        self.core = attend_reference if impl == "reference" else attend
        if self.is_cross:
            self.to_q = nn.Linear(dim, dim, bias=bias)
            self.to_kv = nn.Linear(context_dim, 2 * dim, bias=bias)
        else:
            self.to_qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.to_out = nn.Linear(dim, dim, bias=bias)
        self.relative = (
            RelativePositionEmbedding(num_heads, dim // num_heads, relative_max_distance, causal)
            if relative_max_distance is not None
            else None
        )

    def forward(
        self,
        x: Tensor,
        context: Tensor | tuple[Tensor, Tensor] | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        query_offset: int = 0,
    ) -> Tensor:
        """Attends from ``x`` ``(batch, seq, dim)``; returns ``(batch, seq, dim)``.

        Args:
            x: Queries' input ``(batch, seq, dim)``.
            context: Cross-attention only: the encoder output ``(batch, ctx_len, context_dim)``,
                or its projected keys/values from :meth:`project_context` (reused while decoding).
            key_padding_mask: ``(batch, k_len)`` bool, True for keys to ignore (``k_len`` counts
                cached keys too).
            cache: Self-attention only: keys/values of earlier positions; the new ones are appended.
            query_offset: Absolute position of ``x[:, 0]`` (the number of cached positions).
        """
        if self.is_cross:
            if context is None:
                raise ValueError("cross-attention needs `context` (the encoder output)")
            q = rearrange(self.to_q(x), "b l (h d) -> b h l d", h=self.num_heads)
            k, v = context if isinstance(context, tuple) else self.project_context(context)
        else:
            q, k, v = rearrange(self.to_qkv(x), "b l (three h d) -> three b h l d", three=3, h=self.num_heads)
            if cache is not None:
                k, v = cache.append(k, v)
        out = self.core(
            q, k, v,
            causal=self.causal,
            query_offset=query_offset,
            key_padding_mask=key_padding_mask,
            relative=self.relative,
            dropout_p=self.dropout if self.training else 0.0,
        )  # fmt: skip
        return self.to_out(rearrange(out, "b h l d -> b l (h d)"))

    def project_context(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values ``(batch, heads, ctx_len, head_dim)`` of an encoder output ``(batch, ctx_len, dim)``."""
        k, v = rearrange(self.to_kv(context), "b l (two h d) -> two b h l d", two=2, h=self.num_heads)
        return k, v

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, causal={self.causal}, cross={self.is_cross}"

"""Multi-head attention: projections, head split/merge, KV cache; the core lives in ``attend.py``.

Shape legend (einops notation): ``b`` batch, ``l`` sequence, ``h`` heads, ``d`` head_dim,
``three`` the q/k/v (or ``two`` the k/v) stacked by one fused projection.
"""

from __future__ import annotations

from torch import Tensor, nn

from multimodal.layers.attend import attend, attend_reference
from multimodal.layers.cache import KVCache
from multimodal.layers.local import LocalAttention
from multimodal.layers.relative import RelativePositionEmbedding
from multimodal.layers.relative2d import RelativePosition2D


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
        relative_2d_grid: If set, ``(rows, cols)`` of a token grid: adds learned 2D relative
            positions (:class:`~multimodal.layers.RelativePosition2D`; self-attention only, no
            KV cache). Exclusive with ``relative_max_distance``.
        dropout: Dropout on the attention probabilities.
        bias: Bias in the projections.
        impl: ``"fast"`` or ``"reference"`` core (see :mod:`multimodal.layers.attend`).
        local: A local attention pattern (:mod:`multimodal.layers.local`) that replaces the core;
            it carries its own relative positions (self-attention only).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        causal: bool = False,
        context_dim: int | None = None,
        relative_max_distance: int | None = None,
        relative_2d_grid: tuple[int, int] | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        impl: str = "fast",
        local: LocalAttention | None = None,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim={dim} is not divisible by num_heads={num_heads}")
        self.is_cross = context_dim is not None
        if self.is_cross and (causal or relative_max_distance is not None or relative_2d_grid is not None):
            raise ValueError("cross-attention takes neither a causal mask nor relative positions")
        if relative_max_distance is not None and relative_2d_grid is not None:
            raise ValueError("choose 1D (relative_max_distance) or 2D (relative_2d_grid) relative positions")
        if local is not None and (self.is_cross or relative_max_distance is not None or relative_2d_grid is not None):
            raise ValueError("local attention is for self-attention and brings its own relative positions")
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
        self.relative_2d = (
            RelativePosition2D(num_heads, dim // num_heads, relative_2d_grid)
            if relative_2d_grid is not None
            else None
        )
        self.local = local
        self.use_reference = impl == "reference"

    def forward(
        self,
        x: Tensor,
        context: Tensor | tuple[Tensor, Tensor] | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        query_offset: int = 0,
        num_queries: int | None = None,
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
            num_queries: Self-attention without a cache only: attend from the first ``num_queries``
                positions alone (keys and values still come from all of ``x``) and return
                ``(batch, num_queries, dim)``, the same values as slicing the full output. With 2D
                relative positions these must be prefix (class) tokens.
        """
        if num_queries is not None and (self.is_cross or cache is not None or self.local is not None):
            raise ValueError("num_queries (a stack's num_outputs) is for full self-attention without a cache")
        if num_queries is not None and self.causal and self.relative_2d is not None:
            raise ValueError("num_queries (a stack's num_outputs) with 2D relative positions needs a bidirectional stack")
        if self.is_cross:
            if context is None:
                raise ValueError("cross-attention needs `context` (the encoder output)")
            (q,) = _split_heads(self.to_q(x), 1, self.num_heads)
            k, v = context if isinstance(context, tuple) else self.project_context(context)
        else:
            q, k, v = _split_heads(self.to_qkv(x), 3, self.num_heads)
            if cache is not None:
                if self.relative_2d is not None:
                    raise ValueError("2D relative positions have no KV-cached decoding; run full forwards")
                k, v = cache.append(k, v)
            if num_queries is not None:
                q = q[:, :, :num_queries]
                if self.causal:  # the first queries see none of the later keys
                    k, v = k[:, :, :num_queries], v[:, :, :num_queries]
                    if key_padding_mask is not None:
                        key_padding_mask = key_padding_mask[:, :num_queries]
        if self.local is not None:
            core = self.local.reference if self.use_reference else self.local
            out = core(
                q, k, v, query_offset=query_offset, key_offset=0 if cache is None else cache.start,
                key_padding_mask=key_padding_mask, dropout_p=self.dropout if self.training else 0.0,
            )  # fmt: skip
            return self.to_out(_merge_heads(out))
        out = self.core(
            q, k, v,
            causal=self.causal,
            query_offset=query_offset,
            key_padding_mask=key_padding_mask,
            relative=self.relative,
            bias=self._bias_2d(q, k.shape[-2]),
            dropout_p=self.dropout if self.training else 0.0,
        )  # fmt: skip
        return self.to_out(_merge_heads(out))

    def _bias_2d(self, q: Tensor, k_len: int) -> Tensor | None:
        """The 2D relative logits bias of queries ``q`` against ``k_len`` keys, if this layer has one."""
        if self.relative_2d is None:
            return None
        if q.shape[-2] == k_len:
            return self.relative_2d(q)
        return self.relative_2d.prefix_bias(q.shape[-2], k_len).to(q.dtype)

    def project_context(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values ``(batch, heads, ctx_len, head_dim)`` of an encoder output ``(batch, ctx_len, dim)``."""
        k, v = _split_heads(self.to_kv(context), 2, self.num_heads)
        return k, v

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, causal={self.causal}, cross={self.is_cross}"


# Head split and merge are written with tensor methods, not einops: they run once per layer and
# decoding step, where einops' pattern handling costs about as much as the reshape itself.
def _split_heads(x: Tensor, parts: int, num_heads: int) -> tuple[Tensor, ...]:
    """``"b l (parts h d) -> parts b h l d"``: ``parts`` views ``(batch, heads, seq, head_dim)``."""
    batch, length, _ = x.shape
    return x.reshape(batch, length, parts, num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)


def _merge_heads(x: Tensor) -> Tensor:
    """``"b h l d -> b l (h d)"``."""
    batch, heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * head_dim)

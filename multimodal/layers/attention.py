"""Multi-head attention: projections, head split/merge, KV cache; the core lives in ``attend.py``.

Shape legend (einops notation): ``b`` batch, ``l`` sequence, ``h`` heads, ``d`` head_dim,
``g`` the query heads that share one key/value head (grouped-query attention).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from multimodal.layers.attend import attend, attend_reference
from multimodal.layers.cache import KVCache
from multimodal.layers.local import LocalAttention
from multimodal.layers.positions.base import AttentionPosition


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with a position scheme, a pattern (full or local), grouped keys and a KV cache.

    Self-attention uses one fused projection of ``dim`` to queries, keys and values (the layout of
    GPT-2's ``c_attn`` and timm's ``qkv``: queries, then keys, then values); cross-attention
    projects queries from ``x`` and keys/values from the context.

    Args:
        dim: Width of ``x``.
        num_heads: Query heads; ``dim`` must be divisible by it.
        causal: Mask future keys (self-attention only).
        context_dim: Width of the context for cross-attention; None for self-attention.
        position: How attention knows where tokens are
            (:class:`~multimodal.layers.positions.base.AttentionPosition`: relative, 2D relative,
            rotary, ALiBi); None for none (or absolute positions added to the input). Self-attention only.
        local: A local pattern (:class:`~multimodal.layers.local.LocalAttention`) instead of full
            attention; it asks ``position`` for the bias of its blocks. Self-attention only.
        num_kv_heads: Key/value heads (grouped-query attention: each serves ``num_heads /
            num_kv_heads`` query heads; 1 is multi-query attention). None: ``num_heads``. The KV
            cache holds this many heads.
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
        position: AttentionPosition | None = None,
        local: LocalAttention | None = None,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        impl: str = "fast",
    ) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if dim % num_heads:
            raise ValueError(f"dim={dim} is not divisible by num_heads={num_heads}")
        if num_kv_heads < 1 or num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
        self.is_cross = context_dim is not None
        if self.is_cross and (causal or position is not None or local is not None):
            raise ValueError("cross-attention takes neither a causal mask, positions nor a local pattern")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, dim // num_heads
        self.causal = causal
        self.dropout = dropout
        kv_dim = num_kv_heads * self.head_dim
        if self.is_cross:
            self.to_q = nn.Linear(dim, dim, bias=bias)
            self.to_kv = nn.Linear(context_dim, 2 * kv_dim, bias=bias)
        else:
            self.to_qkv = nn.Linear(dim, dim + 2 * kv_dim, bias=bias)
        self.to_out = nn.Linear(dim, dim, bias=bias)
        self.position = position
        self.local = local
        self.use_reference = impl == "reference"
        self.register_load_state_dict_pre_hook(_rename_position_tables)

    def forward(
        self,
        x: Tensor,
        context: Tensor | tuple[Tensor, Tensor] | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        query_offset: int = 0,
        num_queries: int | None = None,
        grid_width: int | None = None,
        positions: Tensor | None = None,
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
            grid_width: Tokens per grid row for a ``local2d`` pattern, when the config left it open
                (inputs of varying size).
            positions: ``(batch, seq)`` positions of the new tokens when the rows of a batch differ
                (left-padded prompts); rotary turns each row by its own. Default ``query_offset + 0 .. seq - 1``.
        """
        if num_queries is not None and (self.is_cross or cache is not None or self.local is not None):
            raise ValueError("num_queries (a stack's num_outputs) is for full self-attention without a cache")
        if self.is_cross:
            if context is None:
                raise ValueError("cross-attention needs `context` (the encoder output)")
            q = _split_heads(self.to_q(x), self.num_heads)
            k, v = context if isinstance(context, tuple) else self.project_context(context)
        else:
            q, k, v = self._project(x)
            if self.position is not None and self.position.rotates:
                if positions is None:
                    positions = torch.arange(x.shape[1], device=x.device) + query_offset
                q, k = self.position.rotate(q, positions), self.position.rotate(k, positions)
            if cache is not None:
                if self.position is not None and not self.position.supports_cache:
                    raise ValueError(f"{type(self.position).__name__} has no KV-cached decoding; run full forwards")
                k, v = cache.append(k, v)
            if num_queries is not None:
                q = q[:, :, :num_queries]
                if self.causal:  # the first queries see none of the later keys
                    k, v = k[:, :, :num_queries], v[:, :, :num_queries]
                    if key_padding_mask is not None:
                        key_padding_mask = key_padding_mask[:, :num_queries]
        dropout_p = self.dropout if self.training else 0.0
        if self.local is not None:
            core = self.local.reference if self.use_reference else self.local
            out = core(
                q, *repeat_kv(k, v, self.num_heads), query_offset=query_offset,
                key_offset=0 if cache is None else cache.start, key_padding_mask=key_padding_mask,
                dropout_p=dropout_p, position=self.position, grid_width=grid_width,
            )  # fmt: skip
        else:
            core = attend_reference if self.use_reference else attend
            out = core(
                q, k, v, causal=self.causal, query_offset=query_offset, key_padding_mask=key_padding_mask,
                position=self.position, dropout_p=dropout_p,
            )  # fmt: skip
        return self.to_out(_merge_heads(out))

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``(batch, heads, seq, head_dim)`` and keys, values ``(batch, kv_heads, seq, head_dim)``."""
        qkv = self.to_qkv(x)
        if self.num_kv_heads == self.num_heads:
            return _split_heads(qkv, 3 * self.num_heads).chunk(3, dim=1)
        kv_dim = self.num_kv_heads * self.head_dim
        q, k, v = qkv.split([qkv.shape[-1] - 2 * kv_dim, kv_dim, kv_dim], dim=-1)
        return _split_heads(q, self.num_heads), _split_heads(k, self.num_kv_heads), _split_heads(v, self.num_kv_heads)

    def project_context(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values ``(batch, kv_heads, ctx_len, head_dim)`` of an encoder output ``(batch, ctx_len, dim)``."""
        return _split_heads(self.to_kv(context), 2 * self.num_kv_heads).chunk(2, dim=1)

    def extra_repr(self) -> str:
        kv = f", num_kv_heads={self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        return f"num_heads={self.num_heads}{kv}, causal={self.causal}, cross={self.is_cross}"


def repeat_kv(k: Tensor, v: Tensor, num_heads: int) -> tuple[Tensor, Tensor]:
    """Keys and values of ``kv_heads`` heads repeated to ``num_heads`` (each serves a group of adjacent query heads)."""
    groups = num_heads // k.shape[1]
    if groups == 1:
        return k, v
    return k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)


# Checkpoints written before the positions had one interface kept the tables under these names.
_OLD_POSITION_NAMES = {
    "relative.weight": "position.weight",
    "relative_2d.rows": "position.rows",
    "relative_2d.cols": "position.cols",
    "relative_2d.prefix": "position.prefix",
    "local.tables.distance.weight": "position.weight",
    "local.tables.rows.weight": "position.rows.weight",
    "local.tables.cols.weight": "position.cols.weight",
}


def _rename_position_tables(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """Load-state-dict pre-hook: moves position tables saved under their old names to ``position.*``."""
    for old, new in _OLD_POSITION_NAMES.items():
        if prefix + old in state_dict and prefix + new not in state_dict:
            state_dict[prefix + new] = state_dict.pop(prefix + old)


# Head split and merge are written with tensor methods, not einops: they run once per layer and
# decoding step, where einops' pattern handling costs about as much as the reshape itself.
def _split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``"b l (h d) -> b h l d"``: a view ``(batch, heads, seq, head_dim)``."""
    batch, length, _ = x.shape
    return x.reshape(batch, length, num_heads, -1).transpose(1, 2)


def _merge_heads(x: Tensor) -> Tensor:
    """``"b h l d -> b l (h d)"``."""
    batch, heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * head_dim)

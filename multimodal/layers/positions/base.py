"""The one interface through which attention learns where tokens are.

Every position scheme that acts inside attention is an :class:`AttentionPosition`. Attention asks it
three questions, and each scheme answers the ones that concern it (the defaults change nothing):

* :meth:`~AttentionPosition.rotate` — turn queries and keys by their positions before the product
  (rotary). Keys are rotated once, when they enter the KV cache.
* :meth:`~AttentionPosition.bias` — the term added to the scaled logit ``q·k / sqrt(d)`` of each
  (query, key) pair, for any set of pairs: the dense fallback of full attention, the blocks of local
  attention, one cached decoding step and the reference path all use it.
* :meth:`~AttentionPosition.attend` — a fused kernel for full attention over whole sequences
  (the skewed relative kernel, query-blocked ALiBi); ``None`` lets attention use SDPA with
  :meth:`~AttentionPosition.bias`.

Absolute schemes (``sinusoidal``, ``learned``) add to the input of a stack instead
(:mod:`multimodal.layers.positions.absolute`). :func:`~multimodal.layers.positions.build.attention_position`
builds the scheme a config names.

Positions are absolute token indices as integer tensors that broadcast against each other:
``query_pos`` ``(q, 1)`` and ``key_pos`` ``(1, k)``, or with a leading batch axis
``(batch, 1, q, 1)`` / ``(batch, 1, 1, k)`` when rows of a batch sit at different positions.
"""

from __future__ import annotations

from torch import Tensor, nn


def repeat_kv_heads(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``q, k, v`` with grouped-query keys and values ``(batch, kv_heads, ...)`` repeated to the query heads.

    For kernels that need one key/value head per query head; adjacent query heads share a key/value
    head (the layout of Llama). No copy when the heads already match.
    """
    groups = q.shape[1] // k.shape[1]
    if groups == 1:
        return q, k, v
    return q, k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)


class AttentionPosition(nn.Module):
    """Base of the position schemes inside attention; see the module docstring.

    Attributes:
        rotates: Whether :meth:`rotate` does anything (attention skips it otherwise).
        supports_cache: Whether KV-cached decoding can use this scheme (its bias for one new query
            against cached keys is defined); attention refuses a cache otherwise.
    """

    rotates: bool = False
    supports_cache: bool = True

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Queries or keys ``(batch, heads, seq, head_dim)`` at ``positions`` (``(seq,)`` or ``(batch, seq)``), turned."""
        return x

    def bias(self, q: Tensor, query_pos: Tensor, key_pos: Tensor, grid_width: int | None = None) -> Tensor | None:
        """The logit term of every (query, key) pair, added after the ``1 / sqrt(head_dim)`` scaling.

        Args:
            q: Queries ``(batch, heads, ..., q_len, head_dim)`` (content-dependent schemes read them).
            query_pos: Absolute query positions, broadcastable to ``(..., q_len, 1)``.
            key_pos: Absolute key positions, broadcastable to ``(..., 1, k_len)``.
            grid_width: Tokens per row when the positions lie on a raster grid (``local2d``
                attention passes it); schemes of sequence positions ignore it.

        Returns:
            A tensor broadcastable to ``(batch, heads, ..., q_len, k_len)``, or None (no term).
        """
        return None

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool,
        query_offset: int,
        key_padding_mask: Tensor | None,
        dropout_p: float,
    ) -> Tensor | None:
        """A fused full-attention kernel ``(batch, heads, q_len, head_dim)``, or None for SDPA + :meth:`bias`.

        Same arguments as :func:`multimodal.layers.attend.attend`: ``k`` and ``v`` keep their
        ``kv_heads`` (grouped-query attention); a kernel that needs one per query head calls
        :func:`repeat_kv_heads`, and only when it runs (a decoding step that returns None copies nothing).
        """
        return None

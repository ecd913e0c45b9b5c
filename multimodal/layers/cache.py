"""Key/value caches for incremental decoding.

A decoder that has already seen ``t`` tokens keeps each layer's keys and values so the next token
costs one query against ``t + 1`` keys instead of a full forward over ``t + 1`` tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of one attention layer, stored in a buffer that grows by doubling.

    ``append`` writes new ``(batch, heads, new, head_dim)`` keys and values and returns views of
    everything cached so far, ``(batch, heads, length, head_dim)``. Views stay valid until the next
    ``append``.

    With a ``window`` (local attention) the cache forgets keys more than ``window`` positions
    behind the newest one, so its memory and each step's work stay ``O(window)``: the buffer holds
    at most ``2 * window`` (or ``window + new``) positions, and ``start`` is the absolute position
    of the first one kept.

    With a storage ``dtype`` (float16, bfloat16: half the memory of float32) the buffer keeps keys
    and values in it and ``append`` returns them converted back to the dtype they came in.

    Args:
        window: Keep at least this many past positions; None keeps everything.
        dtype: Storage dtype; None stores what ``append`` is given.
    """

    def __init__(self, window: int | None = None, dtype: torch.dtype | None = None) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.length = 0
        self.window = window
        self.start = 0
        self.dtype = dtype

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Adds ``(batch, heads, new, head_dim)`` keys/values; returns all cached keys and values."""
        new = keys.shape[-2]
        if self.window is not None and self.keys is not None and self.length + new > self.keys.shape[-2]:
            self._forget()
        if self.keys is None or self.length + new > self.keys.shape[-2]:
            self._grow(keys, values, self.length + new)
        self.keys[..., self.length : self.length + new, :] = keys
        self.values[..., self.length : self.length + new, :] = values
        self.length += new
        keys_so_far, values_so_far = self.keys[..., : self.length, :], self.values[..., : self.length, :]
        if self.dtype is not None:  # stored smaller: read back in the dtype the keys came in
            return keys_so_far.to(keys.dtype), values_so_far.to(values.dtype)
        return keys_so_far, values_so_far

    def truncate(self, position: int) -> None:
        """Forgets the positions from ``position`` on (speculative decoding rolls back rejected tokens)."""
        kept = position - self.start
        if not 0 <= kept <= self.length:
            raise ValueError(f"cannot truncate a cache holding positions {self.start}..{self.start + self.length - 1} "
                             f"to {position}")  # fmt: skip
        self.length = kept

    def _forget(self) -> None:
        """Moves the last ``window`` positions to the front of the buffer (amortised O(1) per position)."""
        dropped = max(self.length - self.window, 0)
        if dropped:
            kept = slice(dropped, self.length)
            self.keys[..., : self.window, :] = self.keys[..., kept, :].clone()
            self.values[..., : self.window, :] = self.values[..., kept, :].clone()
            self.length -= dropped
            self.start += dropped

    def _grow(self, keys: Tensor, values: Tensor, needed: int) -> None:
        capacity = max(needed, 2 * (0 if self.keys is None else self.keys.shape[-2]), 64)
        if self.window is not None:
            capacity = max(needed, 2 * self.window, 1)
        dtype = self.dtype or keys.dtype
        grown_keys = keys.new_empty(*keys.shape[:-2], capacity, keys.shape[-1], dtype=dtype)
        grown_values = values.new_empty(*values.shape[:-2], capacity, values.shape[-1], dtype=dtype)
        if self.keys is not None:
            grown_keys[..., : self.length, :] = self.keys[..., : self.length, :]
            grown_values[..., : self.length, :] = self.values[..., : self.length, :]
        self.keys, self.values = grown_keys, grown_values


class DecodingState:
    """Everything a stack carries from one decoding step to the next.

    Args:
        num_layers: Blocks in the stack.
        window: Past positions each cache must keep (local attention); None keeps all.
        grid_width: Tokens per grid row of the sequence being decoded (``local2d`` attention of
            inputs of varying size); the stack reads it at every step.
        dtype: Storage dtype of the KV caches (:class:`KVCache`); None: the dtype of the keys.

    Attributes:
        layers: One self-attention :class:`KVCache` per block.
        cross: Per block, the projected encoder keys/values (computed once), or None.
        position: Number of tokens already decoded (the absolute position of the next one).
        memo: Tensors a model derives once per generation and reuses every step (the language
            model keeps a transposed copy of its output matrix here).
    """

    def __init__(
        self, num_layers: int, window: int | None = None, grid_width: int | None = None, dtype: torch.dtype | None = None
    ) -> None:
        self.layers = [KVCache(window, dtype) for _ in range(num_layers)]
        self.grid_width = grid_width
        self.cross: list[tuple[Tensor, Tensor] | None] = [None] * num_layers
        self.position = 0
        self.memo: dict[str, Tensor] = {}

    def truncate(self, position: int) -> None:
        """Rolls the state back to ``position`` tokens: every cache forgets the later ones."""
        for cache in self.layers:
            if cache.keys is not None:
                cache.truncate(position)
        self.position = position

    def reorder(self, index: Tensor) -> None:
        """Keeps batch rows ``index`` (beam search, dropping finished samples)."""
        for cache in self.layers:
            if cache.keys is not None:
                cache.keys = cache.keys.index_select(0, index)
                cache.values = cache.values.index_select(0, index)
        self.cross = [None if kv is None else (kv[0].index_select(0, index), kv[1].index_select(0, index))
                      for kv in self.cross]  # fmt: skip

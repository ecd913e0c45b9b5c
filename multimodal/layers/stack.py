"""Encoder and decoder stacks: input positions, a list of blocks, a final norm."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from multimodal.layers.block import TransformerBlock, norm_layer
from multimodal.layers.cache import DecodingState
from multimodal.layers.config import TransformerConfig
from multimodal.layers.drop_path import drop_path_rates
from multimodal.layers.local import LocalAttention
from multimodal.layers.positions.build import input_positions


class TransformerStack(nn.Module):
    """``num_layers`` pre-norm blocks with the position scheme of ``config``; see :class:`Encoder`, :class:`Decoder`.

    Absolute positions (``"sinusoidal"``, ``"learned"``) are added to the input here; the other
    schemes live inside each block's attention (:mod:`multimodal.layers.positions`). A local
    pattern is one object shared by the blocks (it has no parameters and keeps its block layouts).

    Args:
        config: Sizes and options.
        causal: Whether self-attention is masked to the past.
    """

    def __init__(self, config: TransformerConfig, causal: bool) -> None:
        super().__init__()
        self.config = config
        self.causal = causal
        self.positions = input_positions(config)
        self.dropout = nn.Dropout(config.dropout)
        self.local = LocalAttention.from_config(config, causal)
        self.blocks = nn.ModuleList(
            TransformerBlock(config, causal, self.local, drop_path=rate)
            for rate in drop_path_rates(config.drop_path, config.num_layers)
        )
        self.norm = norm_layer(config)
        self._compiled_blocks: list[nn.Module] | None = None  # a plain list: not submodules
        self.kv_cache_dtype: torch.dtype | None = None  # storage of new_state's caches (quantize.set_kv_cache_dtype)

    def compile_blocks(self, **options) -> None:
        """Compiles each block with ``torch.compile(block, **options)`` for full-sequence calls.

        Each block is compiled on its own (as torchtune and torchtitan do): the graphs are small,
        identical blocks share compiled code, and the loss, embeddings and sampling stay eager.
        Calls with a decoding state (cached generation, whose shapes grow every step) keep the
        eager blocks. Parameters and state-dict keys do not change.
        """
        self._compiled_blocks = [torch.compile(block, **options) for block in self.blocks]

    def forward(
        self,
        x: Tensor,
        *,
        context: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        context_padding_mask: Tensor | None = None,
        state: DecodingState | None = None,
        num_outputs: int | None = None,
        grid_width: int | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Runs the blocks over embeddings ``(batch, seq, dim)``; returns ``(batch, seq, dim)``.

        Args:
            x: Input embeddings.
            context: Encoder output ``(batch, ctx_len, context_dim)`` (cross-attention stacks).
            key_padding_mask: ``(batch, seq)`` bool, True at padding (with a state: ``(batch,
                cached + seq)``).
            context_padding_mask: ``(batch, ctx_len)`` bool, True at padded context positions.
            state: From :meth:`new_state`; makes this call continue where the last one stopped
                and advances it by ``seq``.
            num_outputs: Return only the first ``num_outputs`` positions, ``(batch, num_outputs,
                dim)``, with the same values as slicing the full output. The last block attends
                from those positions alone and runs its feed-forward on them (a ViT classifying
                from its class token saves about 7 % of its work; with local attention the last
                block runs in full and the output is sliced). Not with ``state``.
            grid_width: ``attention="local2d"``: tokens per grid row of this input, when the config
                leaves ``local_grid_width`` open (inputs of varying size).
            positions: ``(batch, seq)`` position of each token, when the rows of a batch sit at
                different positions (left-padded prompts: a row's first real token is position 0).
                Absolute embeddings and rotary use it; the other schemes depend on distances only,
                which padding on the left does not change. Default: ``offset .. offset + seq - 1``.
        """
        if x.dim() != 3 or x.shape[-1] != self.config.dim:
            raise ValueError(f"expected input (batch, seq, dim={self.config.dim}), got {tuple(x.shape)}")
        if self.config.cross_attention and context is None:
            raise ValueError("this stack has cross-attention: pass `context` (the encoder output)")
        if state is not None and not self.causal:
            raise ValueError("incremental decoding needs a causal stack (Decoder)")
        if num_outputs is not None and (state is not None or not 0 < num_outputs <= x.shape[1]):
            raise ValueError(f"num_outputs must be in 1..seq={x.shape[1]} and without a decoding state")
        offset = state.position if state is not None else 0
        if grid_width is None and state is not None:
            grid_width = state.grid_width
        if self.positions is not None:
            embedded = self.positions(x.shape[1], offset) if positions is None else self.positions.at(positions)
            x = x + embedded.to(x.dtype)
        if self.training:
            x = self.dropout(x)
        last = len(self.blocks) - 1
        blocks = self._compiled_blocks if self._compiled_blocks is not None and state is None else self.blocks
        for index, block in enumerate(blocks):
            # Local attention computes whole blocks of queries: its last block runs in full.
            trim = index == last and self.local is None
            x = block(
                x, context=context, key_padding_mask=key_padding_mask,
                context_padding_mask=context_padding_mask, state=state, layer=index,
                num_queries=num_outputs if trim else None, grid_width=grid_width, positions=positions,
            )  # fmt: skip
        if num_outputs is not None:
            x = x[:, :num_outputs]  # a view; already this size when the last block was trimmed
        if state is not None:
            state.position += x.shape[1]
        return self.norm(x)

    def new_state(self, grid_width: int | None = None) -> DecodingState:
        """An empty decoding state (KV caches for every block; local attention keeps only visible keys).

        Args:
            grid_width: ``local2d`` with an open grid width: the width of the sequence to decode.
        """
        window = None if self.local is None else self.local.lookback(grid_width)
        return DecodingState(len(self.blocks), window=window, grid_width=grid_width, dtype=self.kv_cache_dtype)


class Encoder(TransformerStack):
    """Bidirectional stack: every position attends to every other. ``(batch, seq, dim)`` in and out."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config, causal=False)


class Decoder(TransformerStack):
    """Causal stack: position ``i`` attends to ``0..i``; supports cached incremental decoding."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config, causal=True)


def compile_blocks(model: nn.Module, **options) -> nn.Module:
    """Compiles the blocks of every :class:`TransformerStack` inside ``model`` in place; returns ``model``.

    Args:
        model: Any module holding stacks (a ``CausalLM``, ``ViT``, encoder-decoder, ...).
        **options: Passed to ``torch.compile`` (``mode="max-autotune"``, ``dynamic=True``, ...).
    """
    for module in model.modules():
        if isinstance(module, TransformerStack):
            module.compile_blocks(**options)
    return model

"""Decoder-only language model used for text, MIDI events and raster pixels."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from multimodal.layers.cache import DecodingState
from multimodal.layers.stack import Decoder
from multimodal.models.config import CausalLMConfig
from multimodal.models.init import init_weights


class CausalLM(nn.Module):
    """Token embedding, causal :class:`~multimodal.layers.Decoder`, linear head to the vocabulary.

    Args:
        config: Sizes, position scheme and vocabulary size.
    """

    def __init__(self, config: CausalLMConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.dim)
        self.decoder = Decoder(config)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        init_weights(self, config.num_layers)
        if config.tie_embeddings:
            self.head.weight = self.embedding.weight

    def forward(
        self, tokens: Tensor, *, key_padding_mask: Tensor | None = None, state: DecodingState | None = None
    ) -> Tensor:
        """Next-token logits ``(batch, seq, vocab_size)`` for token ids ``(batch, seq)``.

        Args:
            tokens: Token ids.
            key_padding_mask: ``(batch, seq)`` bool, True at padding.
            state: From :meth:`new_state`, for cached incremental decoding.
        """
        if tokens.dim() != 2:
            raise ValueError(f"expected token ids (batch, seq), got shape {tuple(tokens.shape)}")
        hidden = self.decoder(self.embedding(tokens), key_padding_mask=key_padding_mask, state=state)
        if state is not None and tokens.shape[1] == 1 and not torch.is_grad_enabled():
            return hidden @ self._decoding_head(state)
        return self.head(hidden)

    def _decoding_head(self, state: DecodingState) -> Tensor:
        """The output matrix as a contiguous ``(dim, vocab_size)`` copy, made once per generation.

        One new token makes the head a matrix-vector product over ``vocab_size`` short rows, which
        MKL runs 2-5x slower from the ``(vocab_size, dim)`` layout of ``nn.Linear`` than from this one.
        """
        if "head_t" not in state.memo:
            state.memo["head_t"] = self.head.weight.detach().t().contiguous()
        return state.memo["head_t"]

    def new_state(self) -> DecodingState:
        """An empty decoding state for :func:`multimodal.generation.generate`."""
        return self.decoder.new_state()

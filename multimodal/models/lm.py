"""Decoder-only language model used for text and MIDI events."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multimodal.layers.cache import DecodingState
from multimodal.layers.loss import linear_cross_entropy
from multimodal.layers.stack import Decoder
from multimodal.models.config import CausalLMConfig
from multimodal.models.init import init_weights

PLAIN_LOSS_MAX_BYTES = 4 * 2**30
"""Largest float32 logits tensor :meth:`CausalLM.loss` makes on a GPU before it switches to chunks."""


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
        self,
        tokens: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        state: DecodingState | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Next-token logits ``(batch, seq, vocab_size)`` for token ids ``(batch, seq)``.

        Args:
            tokens: Token ids.
            key_padding_mask: ``(batch, seq)`` bool, True at padding (with a ``state``: ``(batch,
                cached + seq)``, the cached positions too).
            state: From :meth:`new_state`, for cached incremental decoding.
            positions: ``(batch, seq)`` position of each token when the rows differ (left-padded
                prompts, :func:`multimodal.generation.generate_batch`).
        """
        if tokens.dim() != 2:
            raise ValueError(f"expected token ids (batch, seq), got shape {tuple(tokens.shape)}")
        hidden = self.decoder(self.embedding(tokens), key_padding_mask=key_padding_mask, state=state, positions=positions)
        if state is not None and tokens.shape[1] == 1 and not torch.is_grad_enabled() and type(self.head) is nn.Linear:
            return hidden @ self._decoding_head(state)
        return self.head(hidden)

    def loss(
        self,
        tokens: Tensor,
        targets: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        chunked: bool | None = None,
    ) -> Tensor:
        """Cross-entropy of the next-token logits against ``targets``; on a CPU without making the logits.

        The same value and gradients as ``F.cross_entropy(forward(tokens).flatten(0, 1),
        targets.flatten())``. Chunked (for a plain bias-free ``nn.Linear`` head), it is computed by
        :func:`~multimodal.layers.loss.linear_cross_entropy` a chunk of tokens at a time, so the
        ``(batch, seq, vocab_size)`` logits never exist: faster on a CPU (1.06x the training step,
        docs/benchmarks.md) and much smaller in memory. On a GPU the plain loss is faster (an H200
        trained the benchmark LM 1.66x as fast with it, docs/benchmarks.md), so there it is the
        default unless the float32 logits would pass :data:`PLAIN_LOSS_MAX_BYTES`.

        Args:
            tokens: Input ids ``(batch, seq)``.
            targets: Ids to predict ``(batch, seq)``; ``ignore_index`` where not scored.
            key_padding_mask: ``(batch, seq)`` bool, True at padding.
            ignore_index: Target value that is skipped.
            reduction: ``"mean"`` over scored targets or ``"sum"``. A batch with no scored target
                gives 0 (``F.cross_entropy``'s mean gives nan).
            chunked: True: the chunked loss; False: logits, then ``F.cross_entropy``; None: chunked
                except on a GPU when the logits are at most :data:`PLAIN_LOSS_MAX_BYTES`.
        """
        if tokens.dim() != 2 or targets.shape != tokens.shape:
            raise ValueError(
                f"expected token ids and targets of one shape (batch, seq), got {tuple(tokens.shape)} and "
                f"{tuple(targets.shape)}"
            )
        hidden = self.decoder(self.embedding(tokens), key_padding_mask=key_padding_mask)
        head = self.head
        if chunked is None:
            logits_bytes = 4 * targets.numel() * self.config.vocab_size
            chunked = not (hidden.is_cuda and logits_bytes <= PLAIN_LOSS_MAX_BYTES)
        plain_head = type(head) is nn.Linear and head.bias is None and not (head._forward_hooks or head._forward_pre_hooks)
        if not (chunked and plain_head):
            # The plain loss; always for a replaced or hooked head (weight norm, pruning, ...).
            total = F.cross_entropy(
                head(hidden).flatten(0, 1).float(), targets.flatten(), ignore_index=ignore_index, reduction="sum"
            )
            return total if reduction == "sum" else total / (targets != ignore_index).sum().clamp(min=1)
        return linear_cross_entropy(
            hidden.flatten(0, 1), head.weight, targets.flatten(), ignore_index=ignore_index, reduction=reduction
        )

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

"""Classifier-free guidance for causal models: sample from ``p(x | c)^s / p(x)^(s-1)`` instead of ``p(x | c)``.

A model trained to run both with its conditioning (control tokens, a class, a prompt) and without it
(the conditioning dropped at random in training, as the music controls are) can be pushed toward what
the conditioning asks for at sampling time (Ho & Salimans 2022 for diffusion; Sanchez et al. 2023 for
language models; MusicGen samples this way). Each step runs the model twice — on the prompt as given and
on an *unconditional* prompt, the same prompt with the conditioning taken out — and samples from

    log p_guided = log p(x | uncond) + scale * (log p(x | cond) - log p(x | uncond))

(Hugging Face's ``guidance_scale`` is the same rule). ``scale = 1`` is plain sampling from the
conditional model, ``scale = 0`` ignores the conditioning, ``scale > 1`` follows it more strictly than
the model would on its own, at some cost in the variety and naturalness of the samples.

:class:`GuidedModel` wraps any :class:`~multimodal.generation.config.DecodingModel`: both rows run in
one batch of twice the size with one decoding state, so every decoding loop — :func:`generate`, the
constrained harmonizer — guides without knowing it. Both prompts must have the same length (the
music controls are fixed-length: a control is replaced by its ``unknown`` id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from multimodal.generation.config import check_guidance_scale


@dataclass
class GuidedState:
    """A :class:`GuidedModel`'s decoding state: the wrapped model's state (for both halves of the batch) and the position."""

    inner: Any
    position: int = 0


class GuidedModel(nn.Module):
    """A causal model sampled with classifier-free guidance; ``(batch, seq)`` ids in, guided log-probs ``(batch, seq, vocab)`` out.

    Args:
        model: The conditional model (``model(tokens, state=...)``, ``model.new_state()``).
        unconditional_prompt: ``(batch or 1, prompt_len)`` ids: the prompt the decoding loop will
            feed, with its conditioning replaced (e.g. control tokens made ``unknown``). Where a call
            covers positions ``< prompt_len`` the unconditional half reads these ids instead.
        scale: The guidance scale ``s`` (>= 0; 1: no guidance).

    The wrapped model sees each call with the batch doubled: rows ``0 .. batch-1`` conditional,
    ``batch .. 2 batch - 1`` unconditional (``key_padding_mask`` and ``positions`` doubled alike).
    """

    def __init__(self, model: nn.Module, unconditional_prompt: Tensor, scale: float) -> None:
        super().__init__()
        if unconditional_prompt.dim() != 2 or unconditional_prompt.shape[1] == 0:
            raise ValueError(f"unconditional_prompt must be ids (batch, prompt_len >= 1), got {tuple(unconditional_prompt.shape)}")
        check_guidance_scale(scale)
        self.model = model
        self.unconditional_prompt = unconditional_prompt
        self.scale = float(scale)

    @property
    def config(self) -> Any:
        """The wrapped model's config (what decoding loops read of a model)."""
        return getattr(self.model, "config", None)

    def new_state(self) -> GuidedState:
        """An empty state; the wrapped model's state serves both halves of the batch."""
        return GuidedState(self.model.new_state())

    def forward(self, tokens: Tensor, *, state: GuidedState | None = None, **inputs: Tensor | None) -> Tensor:
        """Guided log-probabilities ``(batch, seq, vocab)`` of the next token after each of ``tokens`` ``(batch, seq)``.

        ``inputs``: the wrapped model's other per-row keywords (``key_padding_mask``, ``positions``), doubled for it.
        """
        start = 0 if state is None else state.position
        unconditional = self._unconditional(tokens, start)
        doubled = {name: None if value is None else torch.cat([value, value]) for name, value in inputs.items()}
        logits = self.model(torch.cat([tokens, unconditional]), state=None if state is None else state.inner, **doubled)
        if state is not None:
            state.position += tokens.shape[1]
        conditional, plain = logits.float().log_softmax(-1).chunk(2)
        return plain + self.scale * (conditional - plain)

    def _unconditional(self, tokens: Tensor, start: int) -> Tensor:
        """``tokens`` (at positions ``start ..``) with the positions the unconditional prompt covers read from it."""
        prompt = self.unconditional_prompt.to(tokens.device)
        covered = min(prompt.shape[1] - start, tokens.shape[1])
        if covered <= 0:
            return tokens
        if prompt.shape[0] not in (1, tokens.shape[0]):
            raise ValueError(f"unconditional_prompt has {prompt.shape[0]} rows for a batch of {tokens.shape[0]}")
        unconditional = tokens.clone()
        unconditional[:, :covered] = prompt[:, start : start + covered]
        return unconditional

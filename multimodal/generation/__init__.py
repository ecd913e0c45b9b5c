"""Generation from causal models: one sampling config, cached decoding, beam search, speculative decoding.

- :mod:`~multimodal.generation.config`: :class:`SamplingConfig` (how each token is chosen) and the
  :class:`DecodingModel` protocol;
- :mod:`~multimodal.generation.sample`: :func:`generate`, :func:`generate_stream`, :func:`generate_batch`,
  :func:`sample_next`;
- :mod:`~multimodal.generation.beam`: :func:`beam_search` (Hugging Face's scoring and stopping);
- :mod:`~multimodal.generation.speculative`: :func:`speculative_generate` (a draft model proposes);
- :mod:`~multimodal.generation.processors`: the logit rules (repetition penalty, no-repeat n-grams, min-p).
"""

from __future__ import annotations

from multimodal.generation.beam import beam_search
from multimodal.generation.config import DecodingModel, SamplingConfig, check_max_new_tokens
from multimodal.generation.sample import generate, generate_batch, generate_stream, sample_next
from multimodal.generation.speculative import SpeculativeStats, speculative_generate, warped_probs

__all__ = [
    "DecodingModel", "SamplingConfig", "SpeculativeStats", "beam_search", "check_max_new_tokens", "generate",
    "generate_batch", "generate_stream", "sample_next", "speculative_generate", "warped_probs",
]  # fmt: skip

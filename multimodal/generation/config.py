"""What generation needs to know: how each token is chosen (:class:`SamplingConfig`) and of the model (:class:`DecodingModel`).

One :class:`SamplingConfig` travels from the command line or the serve page through the modality
pipelines (:mod:`multimodal.music`, :mod:`multimodal.text`, :mod:`multimodal.images`) to the decoding
loops (:func:`~multimodal.generation.sample.generate`, beam search, speculative decoding); the
functions also take its fields as keywords (``generate(model, ids, 64, top_p=0.95)``), merged by
:meth:`SamplingConfig.with_options`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from multimodal.limits import MAX_BEAMS, MAX_NEW_TOKENS


@dataclass(frozen=True)
class SamplingConfig:
    """How each new token is chosen.

    Attributes:
        temperature: Divides the logits; 0 is greedy (argmax).
        top_k: Keep only the ``k`` most likely tokens (None or 0: all).
        top_p: Nucleus sampling: keep the smallest set of tokens whose probability reaches ``p``,
            after ``top_k`` (None or 1: all).
        min_p: Keep the tokens at least ``min_p`` times as likely as the best, after ``top_p`` (None: off).
        repetition_penalty: ``> 1`` discourages ids already in the sequence (CTRL's rule).
        no_repeat_ngram_size: Forbid repeating any n-gram of this size (0: off).
        min_new_tokens: No stop id or EOS before this many new tokens.
        stop_ids: Ids that end a row besides EOS; the row then stops, padded with its stop id.
        num_beams: More than 1: deterministic beam search (:mod:`multimodal.generation.beam`), which
            takes none of the options above; a hypothesis ends at EOS.
        length_penalty: Beam search: exponent of the new length dividing a finished hypothesis's
            log-probability (``> 0`` favours longer ones).
        early_stopping: Beam search: stop a prompt's search once ``num_beams`` hypotheses have finished.
        guidance_scale: Classifier-free guidance (:mod:`multimodal.generation.guidance`): each step
            samples from ``log p(x | uncond) + s * (log p(x | cond) - log p(x | uncond))``, the
            unconditional prompt being the prompt with its conditioning (e.g. music controls) taken
            out. 1: off; > 1 follows the conditioning more strictly; costs a second row per row.
        logit_bias: ``{id: bias}`` added to those ids' logits at every step, before the other rules
            and the temperature (OpenAI's ``logit_bias``; Hugging Face's ``sequence_bias`` for
            one-id sequences); ``-inf`` forbids an id. A mapping or ``(id, bias)`` pairs, kept as
            sorted pairs.
        logit_bias_group: Ids among which ``logit_bias`` only moves probability: after the bias their
            logits are shifted together so that, when every biased id is in the group, the group's
            total probability is what the model gave it (music: every PITCH id, so leaning towards
            some pitches does not change how often a note starts;
            :func:`multimodal.music.tonality.key_emphasis`). Empty: no such group.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    min_new_tokens: int = 0
    stop_ids: tuple[int, ...] = ()
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool = False
    guidance_scale: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    logit_bias_group: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_ids", tuple(int(token) for token in self.stop_ids))
        pairs = self.logit_bias.items() if isinstance(self.logit_bias, Mapping) else self.logit_bias
        object.__setattr__(self, "logit_bias", tuple(sorted((int(token), float(bias)) for token, bias in pairs)))
        bad = [(token, bias) for token, bias in self.logit_bias if token < 0 or math.isnan(bias) or bias == math.inf]
        if bad:
            raise ValueError(f"logit_bias takes ids >= 0 and biases that are numbers or -inf, got {bad[0]}")
        object.__setattr__(self, "logit_bias_group", tuple(sorted({int(token) for token in self.logit_bias_group})))
        if self.logit_bias_group and self.logit_bias_group[0] < 0:
            raise ValueError(f"logit_bias_group takes ids >= 0, got {self.logit_bias_group[0]}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {self.temperature}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k must be >= 1 (or 0 / None: every token), got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.min_p is not None and not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(f"repetition_penalty must be a finite number > 0, got {self.repetition_penalty}")
        if self.no_repeat_ngram_size < 0:
            raise ValueError(f"no_repeat_ngram_size must be >= 0, got {self.no_repeat_ngram_size}")
        if self.min_new_tokens < 0:
            raise ValueError(f"min_new_tokens must be >= 0, got {self.min_new_tokens}")
        if not 1 <= self.num_beams <= MAX_BEAMS:
            raise ValueError(f"num_beams must be in [1, {MAX_BEAMS}], got {self.num_beams}")
        if not math.isfinite(self.length_penalty):
            raise ValueError(f"length_penalty must be a finite number, got {self.length_penalty}")
        check_guidance_scale(self.guidance_scale)
        if self.num_beams > 1 and self.sampling_options():
            raise ValueError(f"num_beams > 1 is deterministic beam search; it does not take "
                             f"{', '.join(self.sampling_options())}")  # fmt: skip

    def sampling_options(self) -> list[str]:
        """The names of the options set away from their defaults that only sampling uses (not beam search)."""
        beam_fields = {"num_beams", "length_penalty", "early_stopping"}
        return [field.name for field in dataclasses.fields(self)
                if field.name not in beam_fields and getattr(self, field.name) != field.default]  # fmt: skip

    def with_options(self, **options: Any) -> SamplingConfig:
        """This config with ``options`` (its field names) replaced; an unknown name is a ``TypeError`` naming it."""
        if not options:  # the decoding loop asks once per token
            return self
        unknown = sorted(set(options) - SAMPLING_FIELDS)
        if unknown:
            raise TypeError(f"unknown sampling option(s) {', '.join(unknown)}; SamplingConfig takes "
                            f"{', '.join(field.name for field in dataclasses.fields(self))}")  # fmt: skip
        return dataclasses.replace(self, **options)

    @classmethod
    def of(cls, sampling: SamplingConfig | None = None, **options: Any) -> SamplingConfig:
        """``sampling`` (default: the defaults) with ``options`` replaced: how every function reads its arguments."""
        return (sampling or cls()).with_options(**options)


SAMPLING_FIELDS = frozenset(field.name for field in dataclasses.fields(SamplingConfig))
"""The names :class:`SamplingConfig` takes (and every generation function takes as keywords)."""


@runtime_checkable
class DecodingModel(Protocol):
    """What cached decoding needs of a model: logits for new tokens, continuing a decoding state.

    ``new_state()`` returns an empty state (a :class:`~multimodal.layers.DecodingState` for the
    shared stacks); ``model(tokens, state=state)`` takes ids ``(batch, new)`` at the state's
    position, returns logits ``(batch, new, vocab)`` and advances the state by ``new``. Implemented
    by ``CausalLM``, ``ImageTransformer``, ``ConditionalImageTransformer`` (with its conditioning
    bound) and the stacks themselves.
    """

    def new_state(self) -> Any: ...

    def __call__(self, tokens: Tensor, *, state: Any = None) -> Tensor: ...


def check_guidance_scale(scale: float) -> None:
    """Raises ``ValueError`` unless ``scale`` is a finite number >= 0 (classifier-free guidance; 1: off)."""
    if not (math.isfinite(scale) and scale >= 0):
        raise ValueError(f"guidance_scale must be a finite number >= 0 (1: no guidance), got {scale}")


def check_max_new_tokens(model: Any, max_new_tokens: int) -> None:
    """Raises ``ValueError`` unless ``0 <= max_new_tokens <= `` the most one call may ask of ``model``.

    The most is :data:`multimodal.limits.MAX_NEW_TOKENS`, or the model's ``config.max_seq_len`` when
    that is larger (an Image Transformer samples a whole image); checked before the token buffer and
    the cache are allocated, which grow with it.
    """
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    limit = max(MAX_NEW_TOKENS, int(getattr(getattr(model, "config", None), "max_seq_len", 0) or 0))
    if max_new_tokens > limit:
        raise ValueError(f"max_new_tokens={max_new_tokens:,} is more than one call generates (at most {limit:,}, "
                         f"multimodal.limits.MAX_NEW_TOKENS or the model's max_seq_len); ask for fewer")  # fmt: skip

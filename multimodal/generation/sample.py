"""Sampling from causal models: pure functions over logits, and a cached decoding loop.

Any model with ``model(tokens, state=...) -> logits`` and ``model.new_state()`` works
(:class:`~multimodal.models.CausalLM` for text and MIDI, the Image Transformers for pixels);
:class:`~multimodal.generation.config.DecodingModel` states the protocol. How each token is chosen is
one :class:`~multimodal.generation.config.SamplingConfig`; every function here also takes its fields
as keywords.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from multimodal.generation.beam import beam_search
from multimodal.generation.config import SAMPLING_FIELDS, DecodingModel, SamplingConfig, check_max_new_tokens
from multimodal.generation.guidance import GuidedModel
from multimodal.generation.processors import (
    add_logit_bias,
    forbid,
    min_p_filter,
    no_repeat_ngram_mask,
    repetition_penalty,
)


def sample_next(
    logits: Tensor, sampling: SamplingConfig | None = None, *, generator: torch.Generator | None = None, **options: Any
) -> Tensor:
    """Draws one token id per row from logits ``(batch, vocab)``; returns ``(batch,)``.

    Temperature (0: argmax), then ``top_k``, then ``top_p`` (nucleus), then ``min_p``
    (:func:`multimodal.generation.processors.min_p_filter`) of ``sampling`` (or ``options``, its
    fields); ``generator`` draws, for reproducible samples.
    """
    sampling = SamplingConfig.of(sampling, **options)
    temperature, top_k, top_p, min_p = sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    candidates = None  # (batch, n) ids of the kept tokens, sorted by decreasing logit; None: all tokens
    if top_k and top_k < logits.shape[-1]:
        logits, candidates = torch.topk(logits, top_k, dim=-1)  # sampling among k values is cheap
    if top_p is not None and top_p < 1.0:
        if candidates is None:
            logits, candidates = torch.sort(logits, dim=-1, descending=True)
        probs = logits.softmax(-1)
        # Drop a token when the tokens ranked above it already reach top_p (the top one always stays).
        logits = logits.masked_fill(probs.cumsum(-1) - probs >= top_p, float("-inf"))
    if min_p:
        logits = min_p_filter(logits, min_p)
    choice = torch.multinomial(logits.softmax(-1), 1, generator=generator)  # (batch, 1)
    return (choice if candidates is None else candidates.gather(-1, choice)).squeeze(-1)


def generate(
    model: DecodingModel,
    prompt: Tensor,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    *,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    progress: bool = False,
    prompt_padding: Tensor | None = None,
    unconditional_prompt: Tensor | None = None,
    **options: Any,
) -> Tensor:
    """Continues ``prompt`` ``(batch, prompt_len)``; returns ``(batch, prompt_len + new)`` token ids.

    Tokens are chosen as ``sampling`` says (``options``: its fields, e.g. ``top_p=0.95``). With
    ``use_cache`` each step runs one token through the model against cached keys/values; without it
    every step re-runs the whole sequence (kept as a reference and for benchmarks). A row stops at
    ``eos_id`` or one of ``sampling.stop_ids``; stopped rows are padded with ``eos_id`` (or their
    stop id) and decoding ends when every row has stopped. Decoding runs under
    ``torch.inference_mode``; the returned ids are an ordinary tensor.

    ``prompt_padding`` ``(batch, prompt_len)`` bool marks padding on the *left* of shorter prompts
    (:func:`generate_batch` makes it): the model then gets the padding as ``key_padding_mask`` and
    each row's own positions (``positions``, its first real token at 0), so every row decodes as it
    would alone. The model must take both keywords (``CausalLM`` does).

    ``sampling.guidance_scale != 1`` samples with classifier-free guidance
    (:mod:`multimodal.generation.guidance`): ``unconditional_prompt`` ``(batch or 1, prompt_len)`` is
    the prompt with its conditioning taken out, decoded beside it in the same batch.

    ``sampling.num_beams > 1`` runs :func:`~multimodal.generation.beam.beam_search` (with
    ``length_penalty``, ``early_stopping`` and ``eos_id``) and returns each prompt's best hypothesis,
    padded with ``eos_id`` after it ends; padded prompts and uncached decoding are not part of it.
    """
    sampling = SamplingConfig.of(sampling, **options)
    if sampling.num_beams > 1:
        refused = [name for name, given in (("prompt_padding", prompt_padding is not None), ("use_cache", not use_cache),
                                            ("generator", generator is not None)) if given]  # fmt: skip
        if refused:
            raise ValueError(f"num_beams > 1 is deterministic beam search; it does not take {', '.join(refused)}")
        sequences, _ = beam_search(model, prompt, max_new_tokens, sampling.num_beams, eos_id=eos_id,
                                   length_penalty=sampling.length_penalty, early_stopping=sampling.early_stopping)  # fmt: skip
        return sequences
    check_max_new_tokens(model, max_new_tokens)  # now: list() below sizes itself by the progress bar's total
    steps = generate_stream(model, prompt, max_new_tokens, sampling, eos_id=eos_id, generator=generator,
                            use_cache=use_cache, prompt_padding=prompt_padding,
                            unconditional_prompt=unconditional_prompt)  # fmt: skip
    new = list(tqdm(steps, total=max_new_tokens, disable=not progress, desc="generating", unit="tok"))
    return torch.cat([prompt, torch.stack(new, dim=1)], dim=1) if new else prompt.clone()


def generate_stream(
    model: DecodingModel,
    prompt: Tensor,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    *,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    prompt_padding: Tensor | None = None,
    unconditional_prompt: Tensor | None = None,
    **options: Any,
) -> Iterator[Tensor]:
    """:func:`generate` as an iterator: yields each new token ``(batch,)`` as soon as it is decoded (sampling only)."""
    sampling = SamplingConfig.of(sampling, **options)
    if sampling.num_beams > 1:
        raise ValueError("beam search decides its tokens at the end; it does not stream (use generate)")
    check_max_new_tokens(model, max_new_tokens)
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError(f"prompt must be token ids (batch, prompt_len >= 1), got shape {tuple(prompt.shape)}")
    model = guided(model, sampling, unconditional_prompt, prompt)
    pads = _left_padding(prompt_padding, prompt)  # (batch,) padding tokens before each prompt, or None
    stops = tuple(dict.fromkeys([*([] if eos_id is None else [eos_id]), *sampling.stop_ids]))
    was_training = model.training
    model.eval()
    try:
        # Inference mode is entered for each step, not across the yields: the caller's code between
        # two tokens runs as it would anyway.
        with torch.inference_mode():
            batch, length = prompt.shape
            tokens = prompt.new_empty(batch, length + max_new_tokens)
            tokens[:, :length] = prompt
            state = model.new_state() if use_cache else None
            finished = torch.zeros(batch, dtype=torch.bool, device=prompt.device)
            ended_with = tokens.new_full((batch,), stops[0] if stops else 0)
            stop_ids = torch.tensor(stops, dtype=tokens.dtype, device=tokens.device)
            padding = None
            if pads is not None:
                padding = torch.zeros(batch, length + max_new_tokens, dtype=torch.bool, device=prompt.device)
                padding[:, :length] = prompt_padding
        step_input, start = prompt, 0
        for step in range(max_new_tokens):
            with torch.inference_mode():
                if not use_cache:
                    step_input, start = tokens[:, :length], 0
                logits = model(step_input, state=state, **_padded(padding, pads, start, step_input.shape[1]))[:, -1]
                logits = _shape(logits, tokens[:, :length], sampling, stops, step, pads)
                next_token = sample_next(logits, sampling, generator=generator)
                if stops:
                    next_token = torch.where(finished, ended_with, next_token)
                    stopped = torch.isin(next_token, stop_ids) & ~finished
                    if eos_id is None:
                        ended_with = torch.where(stopped, next_token, ended_with)
                    finished |= stopped
                tokens[:, length] = next_token
                length += 1
                step_input, start = tokens[:, length - 1 : length], length - 1
            yield next_token.clone()
            if stops and bool(finished.all()):
                break
    finally:
        model.train(was_training)


def generate_batch(
    model: DecodingModel,
    prompts: list[Tensor | list[int]],
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    *,
    eos_id: int | None = None,
    unconditional_prompts: list[Tensor | list[int]] | None = None,
    **options: Any,
) -> list[Tensor]:
    """Continues prompts of different lengths in one batch; returns each row's ids (prompt + new) ``(length,)``.

    The prompts are padded on the left and decoded together (:func:`generate` with
    ``prompt_padding``), each exactly as it would be alone. A row that stopped (EOS or a stop id)
    ends at its stop token. With ``sampling.guidance_scale != 1``, ``unconditional_prompts`` are the
    prompts with their conditioning taken out, one per prompt and of its length. ``options`` are the
    other keywords of :func:`generate` and ``sampling``'s fields.
    """
    if not prompts:
        raise ValueError("no prompt to continue")
    rows = [torch.as_tensor(prompt, dtype=torch.long) for prompt in prompts]
    if any(row.dim() != 1 or len(row) == 0 for row in rows):
        raise ValueError("each prompt must be a non-empty 1-D sequence of token ids")
    padded, padding = _left_padded(rows)
    unconditional = None
    if unconditional_prompts is not None:
        others = [torch.as_tensor(prompt, dtype=torch.long) for prompt in unconditional_prompts]
        if [other.shape for other in others] != [row.shape for row in rows]:
            raise ValueError("unconditional_prompts must be one per prompt, each of its prompt's length")
        unconditional = _left_padded(others)[0]
    device = next(iter(model.parameters()), torch.empty(0)).device if hasattr(model, "parameters") else None
    sampling = SamplingConfig.of(sampling, **{key: value for key, value in options.items() if key in SAMPLING_FIELDS})
    rest = {key: value for key, value in options.items() if key not in SAMPLING_FIELDS}
    out = generate(model, padded.to(device), max_new_tokens, sampling, eos_id=eos_id, prompt_padding=padding.to(device),
                   unconditional_prompt=None if unconditional is None else unconditional.to(device), **rest)  # fmt: skip
    longest = padded.shape[1]
    stops = {*([] if eos_id is None else [eos_id]), *sampling.stop_ids}
    results = []
    for index, row in enumerate(rows):
        ids = out[index, longest - len(row) :]
        new = ids[len(row) :].tolist()
        ended = next((position for position, token in enumerate(new) if token in stops), None)
        results.append(ids if ended is None else ids[: len(row) + ended + 1])
    return results



def guided(model: DecodingModel, sampling: SamplingConfig, unconditional_prompt: Tensor | None, prompt: Tensor):
    """``model`` wrapped for classifier-free guidance when ``sampling.guidance_scale != 1`` (else ``model`` itself).

    Raises:
        ValueError: Guidance without an ``unconditional_prompt`` of the prompt's length.
    """
    if sampling.guidance_scale == 1.0:
        return model
    if unconditional_prompt is None or unconditional_prompt.shape[-1] != prompt.shape[-1]:
        raise ValueError("guidance_scale != 1 needs unconditional_prompt: the prompt with its conditioning taken "
                         "out, of the prompt's length")  # fmt: skip
    return GuidedModel(model, unconditional_prompt, sampling.guidance_scale)


def _left_padded(rows: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Rows of ids padded with 0 on the left to the longest ``(batch, longest)``, and the padding ``(batch, longest)`` bool."""
    longest = max(len(row) for row in rows)
    padded = torch.zeros(len(rows), longest, dtype=torch.long)
    padding = torch.ones(len(rows), longest, dtype=torch.bool)
    for index, row in enumerate(rows):
        padded[index, longest - len(row) :] = row
        padding[index, longest - len(row) :] = False
    return padded, padding


def _left_padding(prompt_padding: Tensor | None, prompt: Tensor) -> Tensor | None:
    """Padding tokens before each row's prompt ``(batch,)``; checks the padding is on the left and leaves a token."""
    if prompt_padding is None:
        return None
    if prompt_padding.shape != prompt.shape:
        raise ValueError(f"prompt_padding must be (batch, prompt_len) = {tuple(prompt.shape)}, got {tuple(prompt_padding.shape)}")
    pads = prompt_padding.sum(1)
    expected = torch.arange(prompt.shape[1], device=prompt.device)[None, :] < pads[:, None]
    if not torch.equal(expected, prompt_padding.bool()) or bool((pads >= prompt.shape[1]).any()):
        raise ValueError("prompt_padding must pad on the left (True before each prompt) and leave every row a token")
    return pads


def _padded(padding: Tensor | None, pads: Tensor | None, start: int, length: int) -> dict[str, Tensor]:
    """The model's ``key_padding_mask`` (every position so far) and ``positions`` for tokens ``start .. start + length - 1``."""
    if padding is None:
        return {}
    positions = torch.arange(start, start + length, device=pads.device)[None, :] - pads[:, None]
    return {"key_padding_mask": padding[:, : start + length], "positions": positions.clamp(min=0)}


def _shape(
    logits: Tensor, tokens: Tensor, shaping: SamplingConfig, stops: tuple[int, ...], step: int, pads: Tensor | None = None
) -> Tensor:
    """The logit rules of ``shaping`` (bias, repetition, n-grams, minimum length) applied to one step's logits ``(batch, vocab)`` (rows' padding left out)."""
    if shaping.logit_bias:
        logits = add_logit_bias(logits.float(), shaping.logit_bias, shaping.logit_bias_group)
    if shaping.repetition_penalty != 1.0:
        seen = tokens if pads is None else _without_padding(tokens, pads)
        logits = repetition_penalty(logits.float(), seen, shaping.repetition_penalty)
    if shaping.no_repeat_ngram_size:
        size, vocab = shaping.no_repeat_ngram_size, logits.shape[-1]
        if pads is None:
            banned = no_repeat_ngram_mask(tokens, size, vocab)
        else:
            banned = torch.cat([no_repeat_ngram_mask(tokens[row : row + 1, int(pads[row]) :], size, vocab)
                                for row in range(tokens.shape[0])])  # fmt: skip
        logits = logits.float().masked_fill(banned, float("-inf"))
    if step < shaping.min_new_tokens:
        logits = forbid(logits.float(), stops)
    return logits


def _without_padding(tokens: Tensor, pads: Tensor) -> Tensor:
    """``tokens`` with each row's padding replaced by its first real token (presence-based rules then ignore it)."""
    first = tokens.gather(1, pads[:, None])
    return torch.where(torch.arange(tokens.shape[1], device=tokens.device)[None, :] < pads[:, None], first, tokens)

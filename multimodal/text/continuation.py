"""Continuing text prompts: one, a batch of different lengths, or streamed token by token.

Any causal model over :class:`~multimodal.tokenizers.text.TextTokenizer` ids works
(:class:`~multimodal.models.CausalLM`), in a notebook, a training loop or a command.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from multimodal.generation.beam import beam_search
from multimodal.generation.config import SamplingConfig
from multimodal.generation.sample import generate_batch, generate_stream
from multimodal.tokenizers.text import TextTokenizer


def continue_text(
    model: nn.Module,
    tokenizer: TextTokenizer,
    prompt: str,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    *,
    seed: int | None = None,
    stop: Sequence[str] = (),
    **options: Any,
) -> str:
    """``prompt`` followed by up to ``max_new_tokens`` new tokens (stops at EOS), as text.

    Tokens are chosen as ``sampling`` says (``options``: its fields as keywords); with
    ``num_beams > 1`` the continuation is the best hypothesis of a beam search
    (:func:`multimodal.generation.beam.beam_search`) instead of a sample.

    The model sees ``[EOS] + encode(prompt)``, the way a document starts in the training stream,
    and decodes with its KV cache. Generation also stops at the first of the ``stop`` strings (the
    text ends before it). A model with learned absolute positions cannot go past its
    ``max_seq_len``: that is an error naming the numbers.
    """
    sampling = SamplingConfig.of(sampling, **options)
    if sampling.num_beams > 1:
        if seed is not None:
            raise ValueError("num_beams > 1 is deterministic beam search; it does not take seed")
        prompt_ids = [tokenizer.eos_id, *tokenizer.encode(prompt)]
        device = next(model.parameters()).device
        sequences, _ = beam_search(model, torch.tensor([prompt_ids], device=device), max_new_tokens, sampling.num_beams,
                                   eos_id=tokenizer.eos_id, length_penalty=sampling.length_penalty,
                                   early_stopping=sampling.early_stopping)  # fmt: skip
        new = [token for token in sequences[0, len(prompt_ids) :].tolist() if token != tokenizer.eos_id]
        text = tokenizer.decode(new)
        cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
        return prompt + text[:cut]
    return prompt + "".join(stream_text(model, tokenizer, prompt, max_new_tokens, sampling, seed=seed, stop=stop))


def continue_texts(
    model: nn.Module,
    tokenizer: TextTokenizer,
    prompts: Sequence[str],
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    *,
    batch_size: int = 8,
    seed: int | None = None,
    stop: Sequence[str] = (),
    **options: Any,
) -> list[str]:
    """Each prompt followed by its continuation, decoded ``batch_size`` prompts at a time.

    Prompts of different lengths share a batch (padded on the left,
    :func:`~multimodal.generation.generate_batch`); each continues as it would alone (the same
    tokens as :func:`continue_text` when greedy). Stops at EOS or the first ``stop`` string, per prompt.
    Sampling only (``sampling``, or its fields as keywords): beam search takes one prompt at a time.
    """
    sampling = SamplingConfig.of(sampling, **options)
    if sampling.num_beams > 1:
        raise ValueError("continue_texts samples; run continue_text per prompt for beam search")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if any(not text for text in stop):
        raise ValueError("stop strings must not be empty")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    texts = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        rows = [[tokenizer.eos_id, *tokenizer.encode(prompt)] for prompt in chunk]
        _check_length(model, max(len(row) for row in rows), max_new_tokens)
        outputs = generate_batch(model, rows, max_new_tokens, sampling, eos_id=tokenizer.eos_id, generator=generator)
        for prompt, row, ids in zip(chunk, rows, outputs, strict=True):
            new = [token for token in ids[len(row) :].tolist() if token != tokenizer.eos_id]
            text = tokenizer.decode(new)
            cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
            texts.append(prompt + text[:cut])
    return texts


def _check_length(model: nn.Module, prompt_tokens: int, max_new_tokens: int) -> None:
    """A learned-position model cannot go past its ``max_seq_len``: an error naming the numbers."""
    config = getattr(model, "config", None)
    if config is not None and config.position == "learned" and prompt_tokens + max_new_tokens > config.max_seq_len:
        raise ValueError(
            f"prompt ({prompt_tokens} tokens with the leading EOS) + max_new_tokens={max_new_tokens} "
            f"exceeds max_seq_len={config.max_seq_len} of this learned-position model; lower "
            f"--max-new-tokens or shorten the prompt"
        )


def stream_text(
    model: nn.Module,
    tokenizer: TextTokenizer,
    prompt: str,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    *,
    seed: int | None = None,
    stop: Sequence[str] = (),
    **options: Any,
) -> Iterator[str]:
    """:func:`continue_text` as it is decoded: yields pieces of text, each valid UTF-8.

    A token that ends inside a multi-byte character is held back until the character is whole;
    a ``stop`` string is never yielded (the pieces stop just before it).
    """
    prompt_ids = [tokenizer.eos_id, *tokenizer.encode(prompt)]
    _check_length(model, len(prompt_ids), max_new_tokens)
    if any(not text for text in stop):
        raise ValueError("stop strings must not be empty")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    prompt_tensor = torch.tensor([prompt_ids], device=device)
    steps = generate_stream(model, prompt_tensor, max_new_tokens, SamplingConfig.of(sampling, **options),
                            eos_id=tokenizer.eos_id, generator=generator)  # fmt: skip
    new_ids: list[int] = []
    shown = 0  # characters of the decoded continuation already yielded
    hold = max((len(text) for text in stop), default=1) - 1  # a stop string may still be completing
    try:
        for token in steps:
            if int(token[0]) == tokenizer.eos_id:
                break
            new_ids.append(int(token[0]))
            text = tokenizer.decode(new_ids)
            cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if cut >= 0:
                if cut > shown:
                    yield text[shown:cut]
                return
            complete = len(text.rstrip("\ufffd"))  # a character still missing bytes decodes to U+FFFD
            ready = max(complete - hold, shown) if stop else complete
            if ready > shown:
                yield text[shown:ready]
                shown = ready
        text = tokenizer.decode(new_ids)
        if len(text) > shown:
            yield text[shown:]
    finally:
        steps.close()

"""Sampling from causal models: pure functions over logits, and a cached decoding loop.

Any model with ``model(tokens, state=...) -> logits`` and ``model.new_state()`` works
(:class:`~multimodal.models.CausalLM` for text, MIDI and pixels).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm


def sample_next(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Draws one token id per row from logits ``(batch, vocab)``; returns ``(batch,)``.

    Args:
        logits: Unnormalised scores of the next token.
        temperature: Divides the logits; 0 means greedy (argmax).
        top_k: Keep only the ``k`` most likely tokens (None or 0: all).
        top_p: Keep the smallest set of tokens whose probability reaches ``p`` (nucleus sampling),
            after ``top_k``.
        generator: Random generator, for reproducible samples.
    """
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
    choice = torch.multinomial(logits.softmax(-1), 1, generator=generator)  # (batch, 1)
    return (choice if candidates is None else candidates.gather(-1, choice)).squeeze(-1)


def generate(
    model: nn.Module,
    prompt: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    progress: bool = False,
) -> Tensor:
    """Continues ``prompt`` ``(batch, prompt_len)``; returns ``(batch, prompt_len + new)`` token ids.

    With ``use_cache`` each step runs one token through the model against cached keys/values;
    without it every step re-runs the whole sequence (kept as a reference and for benchmarks).
    Stops early once every row has produced ``eos_id``; rows that finished are padded with it.
    Decoding runs under ``torch.inference_mode``; the returned ids are an ordinary tensor.
    """
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError(f"prompt must be token ids (batch, prompt_len >= 1), got shape {tuple(prompt.shape)}")
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            tokens = _decode(model, prompt, max_new_tokens, temperature, top_k, top_p, eos_id, generator,
                             use_cache, progress)  # fmt: skip
    finally:
        model.train(was_training)
    return tokens.clone()  # outside inference mode, so callers may use it with autograd


def _decode(model, prompt, max_new_tokens, temperature, top_k, top_p, eos_id, generator, use_cache, progress):
    """The decoding loop of :func:`generate`, writing into one preallocated ``(batch, total)`` buffer."""
    batch, length = prompt.shape
    tokens = prompt.new_empty(batch, length + max_new_tokens)
    tokens[:, :length] = prompt
    state = model.new_state() if use_cache else None
    step_input = prompt
    finished = torch.zeros(batch, dtype=torch.bool, device=prompt.device)
    for _ in tqdm(range(max_new_tokens), disable=not progress, desc="generating", unit="tok"):
        logits = model(step_input, state=state)[:, -1] if use_cache else model(tokens[:, :length])[:, -1]
        next_token = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
        if eos_id is not None:
            next_token = next_token.masked_fill(finished, eos_id)
            finished |= next_token == eos_id
        tokens[:, length] = next_token
        length += 1
        step_input = tokens[:, length - 1 : length]
        if eos_id is not None and finished.all():
            break
    return tokens[:, :length]

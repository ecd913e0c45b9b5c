"""Text end to end without Lightning: continue a prompt, score documents in nats, tokens and bytes.

Mirrors :mod:`multimodal.music`: any causal model over :class:`~multimodal.tokenizers.text.TextTokenizer`
ids works (:class:`~multimodal.models.CausalLM`), in a notebook, a training loop or a command.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from multimodal.beam_search import beam_search
from multimodal.data.text_windows import DocumentWindows, evaluation_loader, token_byte_lengths
from multimodal.generation import Shaping, generate_batch, generate_stream
from multimodal.tokenizers.text import TextTokenizer

IGNORE_INDEX = -100
"""Target id the losses skip (``F.cross_entropy``'s default); never a real token id."""


def continue_text(
    model: nn.Module,
    tokenizer: TextTokenizer,
    prompt: str,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop: Sequence[str] = (),
    shaping: Shaping | None = None,
    num_beams: int = 1,
    length_penalty: float = 1.0,
) -> str:
    """``prompt`` followed by up to ``max_new_tokens`` sampled tokens (stops at EOS), as text.

    With ``num_beams > 1`` the continuation is the best hypothesis of a beam search
    (:func:`multimodal.beam_search.beam_search`) instead of a sample.

    The model sees ``[EOS] + encode(prompt)``, the way a document starts in the training stream,
    and decodes with its KV cache. Generation also stops at the first of the ``stop`` strings (the
    text ends before it) and follows ``shaping`` (stop ids, minimum length, repetition penalty,
    n-gram ban, min-p). A model with learned absolute positions cannot go past its
    ``max_seq_len``: that is an error naming the numbers.
    """
    if num_beams > 1:
        prompt_ids = [tokenizer.eos_id, *tokenizer.encode(prompt)]
        device = next(model.parameters()).device
        sequences, _ = beam_search(model, torch.tensor([prompt_ids], device=device), max_new_tokens, num_beams,
                                   eos_id=tokenizer.eos_id, length_penalty=length_penalty)  # fmt: skip
        new = [token for token in sequences[0, len(prompt_ids) :].tolist() if token != tokenizer.eos_id]
        text = tokenizer.decode(new)
        cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
        return prompt + text[:cut]
    return prompt + "".join(stream_text(model, tokenizer, prompt, max_new_tokens, temperature=temperature,
                                        top_k=top_k, top_p=top_p, seed=seed, stop=stop, shaping=shaping))  # fmt: skip


def continue_texts(
    model: nn.Module,
    tokenizer: TextTokenizer,
    prompts: Sequence[str],
    max_new_tokens: int,
    *,
    batch_size: int = 8,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop: Sequence[str] = (),
    shaping: Shaping | None = None,
) -> list[str]:
    """Each prompt followed by its continuation, decoded ``batch_size`` prompts at a time.

    Prompts of different lengths share a batch (padded on the left,
    :func:`~multimodal.generation.generate_batch`); each continues as it would alone (the same
    tokens as :func:`continue_text` when greedy). Stops at EOS or the first ``stop`` string, per prompt.
    """
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
        outputs = generate_batch(model, rows, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                 eos_id=tokenizer.eos_id, generator=generator, shaping=shaping)  # fmt: skip
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
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop: Sequence[str] = (),
    shaping: Shaping | None = None,
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
    steps = generate_stream(model, prompt_tensor, max_new_tokens, temperature=temperature, top_k=top_k,
                            top_p=top_p, eos_id=tokenizer.eos_id, generator=generator, shaping=shaping)  # fmt: skip
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


@dataclass
class Score:
    """Evaluation totals of some text and the units derived from them."""

    nll: float  # summed negative log-likelihood, nats
    targets: int  # scored tokens
    bytes: int  # UTF-8 bytes those tokens spell

    @classmethod
    def from_sums(cls, sums: dict[str, float]) -> Score:
        return cls(sums["nll"], int(sums["targets"]), int(sums["bytes"]))

    @property
    def nll_per_token(self) -> float:
        return self.nll / max(self.targets, 1)

    @property
    def perplexity(self) -> float:
        return math.exp(min(self.nll_per_token, 700.0))

    @property
    def bits_per_byte(self) -> float:
        return self.nll / math.log(2) / max(self.bytes, 1)

    def __add__(self, other: Score) -> Score:
        return Score(self.nll + other.nll, self.targets + other.targets, self.bytes + other.bytes)


def window_sums(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """Summed NLL (nats), scored targets and their UTF-8 bytes of one batch of windows, float64 ``(3,)``.

    ``batch`` comes from :func:`~multimodal.data.text_windows.evaluation_loader`; ``model`` has
    ``loss(tokens, targets, ignore_index=..., reduction=...)`` (:class:`~multimodal.models.CausalLM`).
    """
    tokens = batch["tokens"]
    targets = tokens[:, 1:].masked_fill(~batch["scored"], IGNORE_INDEX)
    nll = model.loss(tokens[:, :-1], targets, ignore_index=IGNORE_INDEX, reduction="sum")
    count = (targets != IGNORE_INDEX).sum()
    return torch.stack([nll.double(), count.double(), batch["bytes"].sum().double()])


@torch.inference_mode()
def score_windows(model: nn.Module, windows: DocumentWindows, batch_size: int = 8) -> Score:
    """Totals of ``model`` over evaluation windows, with the code validation and ``multimodal test`` run."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    for batch in evaluation_loader(windows, batch_size):
        sums += window_sums(model, {name: value.to(device) for name, value in batch.items()})
    model.train(was_training)
    nll, targets, byte_count = sums.tolist()
    return Score(nll, int(targets), int(byte_count))


def score_text(
    model: nn.Module,
    tokenizer: TextTokenizer,
    text: str,
    context: int,
    stride: int,
    batch_size: int = 8,
) -> Score:
    """Scores one document (every token, plus nothing else) with sliding windows; see ``docs/text.md``."""
    windows = DocumentWindows([np.asarray(tokenizer.encode(text))], tokenizer.eos_id,
                              token_byte_lengths(tokenizer), context, stride)  # fmt: skip
    return score_windows(model, windows, batch_size)

"""Rules that reshape next-token logits before sampling: a per-id bias, repetition penalty, no repeated
n-grams, a minimum length, min-p. Pure functions over ``(batch, vocab)`` logits and the ids so far.

They follow the definitions of Hugging Face's logits processors of the same names (the tests
hold them to those): the repetition penalty of Keskar et al. 2019 (CTRL) divides the positive
logits of every id already in the sequence by the penalty and multiplies the negative ones; an
n-gram ban forbids any id that would repeat an n-gram of the sequence; min-p (Nguyen et al. 2024)
keeps the ids whose probability is at least ``min_p`` times the most likely one's.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


def add_logit_bias(logits: Tensor, bias: tuple[tuple[int, float], ...], group: tuple[int, ...] = ()) -> Tensor:
    """Logits ``(batch, vocab)`` with ``bias`` (``(id, value)`` pairs) added to those ids' columns in every row.

    ``group``: after the bias the group's logits are shifted together by ``logsumexp(before) -
    logsumexp(after)`` over the group, so a bias on its members only moves probability among them: with
    every biased id in the group, the group's total probability and every other id's are the model's
    (rows where the group has no probability are left as biased).

    Raises:
        ValueError: An id outside the vocabulary.
    """
    if not bias:
        return logits
    ids, values, members = (tensor.to(logits.device) for tensor in _bias_tensors(tuple(bias), tuple(group)))
    largest = max(int(ids.max()), int(members.max()) if len(members) else 0)
    if largest >= logits.shape[-1]:
        raise ValueError(f"logit_bias names id {largest}, outside the vocabulary of {logits.shape[-1]}")
    biased = logits.index_add(-1, ids, values.to(logits.dtype).expand(logits.shape[0], -1))
    if len(members):
        before, after = logits[:, members].logsumexp(-1), biased[:, members].logsumexp(-1)
        shift = torch.where(torch.isfinite(before) & torch.isfinite(after), before - after, 0.0)
        biased[:, members] += shift[:, None]
    return biased


@functools.lru_cache(maxsize=8)
def _bias_tensors(bias: tuple[tuple[int, float], ...], group: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """The ids, values and group of a bias as tensors, made once per bias (a decoding loop asks every step)."""
    ids = torch.tensor([token for token, _ in bias], dtype=torch.long)
    return ids, torch.tensor([value for _, value in bias], dtype=torch.float64), torch.tensor(group, dtype=torch.long)


def repetition_penalty(logits: Tensor, tokens: Tensor, penalty: float) -> Tensor:
    """Logits ``(batch, vocab)`` with every id present in ``tokens`` ``(batch, seq)`` penalised.

    Args:
        logits: Next-token scores.
        tokens: The ids so far (prompt and generated).
        penalty: ``> 1`` discourages repeats, ``1`` changes nothing.
    """
    if penalty <= 0:
        raise ValueError(f"repetition_penalty must be > 0, got {penalty}")
    if penalty == 1.0:
        return logits
    seen = torch.gather(logits, 1, tokens)
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return logits.scatter(1, tokens, seen)


def no_repeat_ngram_mask(tokens: Tensor, size: int, vocab_size: int) -> Tensor:
    """Bool ``(batch, vocab)``: True for the ids that would complete an n-gram already in ``tokens``.

    Args:
        tokens: The ids so far ``(batch, seq)``.
        size: ``n``; 0 bans nothing.
        vocab_size: Columns of the mask.
    """
    banned = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.bool, device=tokens.device)
    if size <= 0 or tokens.shape[1] < size:
        return banned
    for row, sequence in enumerate(tokens.tolist()):
        prefix = tuple(sequence[len(sequence) - size + 1 :])
        for start in range(len(sequence) - size + 1):
            if tuple(sequence[start : start + size - 1]) == prefix:
                banned[row, sequence[start + size - 1]] = True
    return banned


def min_p_filter(logits: Tensor, min_p: float) -> Tensor:
    """Logits with every id less likely than ``min_p`` times the most likely one set to ``-inf``."""
    if not 0 <= min_p <= 1:
        raise ValueError(f"min_p must be in [0, 1], got {min_p}")
    probs = logits.softmax(-1)
    threshold = min_p * probs.max(-1, keepdim=True).values
    return logits.masked_fill(probs < threshold, float("-inf"))


def forbid(logits: Tensor, token_ids: list[int] | tuple[int, ...]) -> Tensor:
    """Logits with ``token_ids`` made impossible (a minimum length forbids the stop ids)."""
    if not token_ids:
        return logits
    return logits.index_fill(1, torch.tensor(list(token_ids), device=logits.device), float("-inf"))

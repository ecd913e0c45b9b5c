"""Beam search on the KV cache, with the scoring and stopping rules of Hugging Face's ``generate``.

Each prompt keeps ``num_beams`` running hypotheses. At every step each one is extended by every
token; of the ``num_beams × vocab`` candidates (summed log-probabilities) the best
``2 × num_beams`` are looked at: those that end with EOS (or reach the length limit) among the
best ``num_beams`` become finished hypotheses, scored ``sum log p / new_length ** length_penalty``,
and the best ``num_beams`` that did not end keep running. The cache rows follow their hypotheses
(:meth:`~multimodal.layers.DecodingState.reorder`). Search stops when no running hypothesis can
beat the worst kept finished one (with ``early_stopping=True``: as soon as ``num_beams`` have
finished), or at ``max_new_tokens``. The tests hold sequences and scores to
``GPT2LMHeadModel.generate(num_beams=...)`` on a converted model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from multimodal.generation.config import DecodingModel, check_max_new_tokens
from multimodal.limits import MAX_BEAMS

_NEVER = -1.0e9


@torch.inference_mode()
def beam_search(
    model: DecodingModel,
    prompt: Tensor,
    max_new_tokens: int,
    num_beams: int,
    *,
    eos_id: int | None = None,
    length_penalty: float = 1.0,
    early_stopping: bool = False,
    num_return_sequences: int = 1,
) -> tuple[Tensor, Tensor]:
    """The best continuations of each prompt ``(batch, prompt_len)`` by beam search.

    Args:
        model: A causal model with a decoding state (:class:`~multimodal.generation.DecodingModel`).
        prompt: Token ids, every row the same length.
        max_new_tokens: At most this many new tokens.
        num_beams: Hypotheses kept per prompt.
        eos_id: The id that ends a hypothesis (None: only the length does).
        length_penalty: Exponent of the new length dividing a finished hypothesis's log-probability
            (``> 0`` favours longer ones).
        early_stopping: Stop a prompt's search once ``num_beams`` hypotheses have finished.
        num_return_sequences: Best hypotheses returned per prompt (``<= num_beams``).

    Returns:
        ``(sequences, scores)``: ids ``(batch * num_return_sequences, prompt_len + new)`` (rows of
        one prompt together, best first; a shorter hypothesis is padded with ``eos_id``, or 0) and
        their scores ``(batch * num_return_sequences,)``.
    """
    if num_beams < 1 or not 1 <= num_return_sequences <= num_beams:
        raise ValueError(f"need num_beams >= 1 and 1 <= num_return_sequences <= num_beams, got {num_beams}, "
                         f"{num_return_sequences}")  # fmt: skip
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1 for beam search, got {max_new_tokens}")
    check_max_new_tokens(model, max_new_tokens)
    if num_beams > MAX_BEAMS:
        raise ValueError(f"num_beams={num_beams:,} is more than multimodal.limits.MAX_BEAMS={MAX_BEAMS}")
    was_training = model.training
    model.eval()
    try:
        return _search(model, prompt, max_new_tokens, num_beams, eos_id, length_penalty, early_stopping,
                       num_return_sequences)  # fmt: skip
    finally:
        model.train(was_training)


def _search(model, prompt, max_new_tokens, num_beams, eos_id, length_penalty, early_stopping, num_return):
    batch, prompt_len = prompt.shape
    total = prompt_len + max_new_tokens
    device = prompt.device
    keep = 2 * num_beams  # candidates looked at per step: enough to leave num_beams running after EOS
    filler = eos_id if eos_id is not None else 0
    running = torch.full((batch, num_beams, total), filler, dtype=torch.long, device=device)
    running[:, :, :prompt_len] = prompt[:, None]
    running_scores = torch.full((batch, num_beams), _NEVER, device=device)
    running_scores[:, 0] = 0.0  # the beams start identical: only the first may expand at first
    finished = running.clone()
    finished_scores = torch.full((batch, num_beams), _NEVER, device=device)
    finished_lengths = torch.zeros((batch, num_beams), dtype=torch.long, device=device)
    finished_mask = torch.zeros((batch, num_beams), dtype=torch.bool, device=device)
    improvable = torch.ones((batch, 1), dtype=torch.bool, device=device)
    in_top = torch.arange(keep, device=device) < num_beams
    state = model.new_state()
    step_input = prompt.repeat_interleave(num_beams, dim=0)  # (batch * beams, prompt_len)
    for length in range(prompt_len, total):
        logits = model(step_input, state=state)[:, -1].float()
        vocab = logits.shape[-1]
        scores = torch.log_softmax(logits, -1).view(batch, num_beams, vocab) + running_scores[:, :, None]
        top_scores, top_index = scores.view(batch, -1).topk(keep, dim=-1)  # (batch, keep)
        source, token = top_index // vocab, top_index % vocab
        candidates = torch.gather(running, 1, source[:, :, None].expand(-1, -1, total)).clone()
        candidates[:, :, length] = token
        ends = (token == eos_id) if eos_id is not None else torch.zeros_like(token, dtype=torch.bool)
        if length + 1 == total:
            ends = torch.ones_like(ends)  # the length limit ends every candidate
        # Running: the best num_beams candidates that did not end.
        alive_scores = top_scores + ends.float() * _NEVER
        alive = alive_scores.topk(num_beams, dim=-1).indices
        running = torch.gather(candidates, 1, alive[:, :, None].expand(-1, -1, total))
        running_scores = torch.gather(alive_scores, 1, alive)
        parents = torch.gather(source, 1, alive)  # (batch, beams): the beam each new one extends
        # Finished: candidates among the best num_beams that ended, if they can still enter.
        new_length = length + 1 - prompt_len
        scored = top_scores / new_length**length_penalty
        full = finished_mask.all(-1, keepdim=True) & early_stopping
        scored = scored + (full | ~improvable).float() * _NEVER
        just_ended = ends & in_top[None, :]
        scored = scored + (~just_ended).float() * _NEVER
        merged = torch.cat([finished_scores, scored], dim=1).topk(num_beams, dim=-1).indices
        finished = torch.gather(torch.cat([finished, candidates], 1), 1, merged[:, :, None].expand(-1, -1, total))
        finished_scores = torch.gather(torch.cat([finished_scores, scored], 1), 1, merged)
        lengths = torch.cat([finished_lengths, torch.full_like(scored, length + 1, dtype=torch.long)], 1)
        finished_lengths = torch.gather(lengths, 1, merged)
        finished_mask = torch.gather(torch.cat([finished_mask, just_ended], 1), 1, merged)
        # Can a running beam still beat the worst finished one? (The best it can do is its score
        # now, over the current length: log-probabilities only fall.)
        best_running = running_scores[:, :1] / new_length**length_penalty
        worst_finished = torch.where(finished_mask, finished_scores.min(-1, keepdim=True).values, _NEVER)
        improvable = improvable & (best_running > worst_finished).any(-1, keepdim=True)
        if not bool(improvable.any()) or (early_stopping and bool(finished_mask.all())) or bool(ends.all()):
            break
        rows = (parents + torch.arange(batch, device=device)[:, None] * num_beams).flatten()
        state.reorder(rows)
        step_input = running[:, :, length : length + 1].reshape(batch * num_beams, 1)
    end = int(finished_lengths[:, :num_return].max())
    sequences = finished[:, :num_return, :end].reshape(batch * num_return, end)
    return sequences.clone(), finished_scores[:, :num_return].reshape(-1).clone()

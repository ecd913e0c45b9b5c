"""Speculative decoding: a small draft model proposes, the target model verifies several tokens in one forward.

Leviathan et al. 2023 / Chen et al. 2023. Each round the draft decodes ``num_draft`` tokens
``x_1 .. x_k`` one by one (cheap), then the target scores them all in one cached forward over
``[last, x_1, .., x_k]`` (one step's cost, nearly, when a step is dominated by overheads or by reading
weights). Token ``x_i`` is accepted with probability ``min(1, p(x_i) / q(x_i))`` — ``p`` the
target's distribution, ``q`` the draft's, both after the same temperature / top-k / top-p —
until the first rejection; there a token is drawn from ``max(0, p - q)`` normalised instead, and
after ``k`` acceptances one more from the target's next distribution. The tokens then have exactly
the target's distribution, whatever the draft; with ``temperature=0`` (greedy) a draft token is
accepted when it is the target's argmax, so the output is the target's greedy output token for
token. Both KV caches are rolled back past rejected tokens (:meth:`DecodingState.truncate`).

One sequence at a time (rows of a batch would accept different numbers of tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from multimodal.generation.config import DecodingModel, SamplingConfig, check_max_new_tokens


@dataclass
class SpeculativeStats:
    """What a run of :func:`speculative_generate` did.

    Attributes:
        rounds: Draft-then-verify rounds.
        proposed: Draft tokens proposed.
        accepted: Draft tokens accepted.
        new_tokens: Tokens added to the sequence (accepted ones plus one per round).
    """

    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    new_tokens: int = 0

    @property
    def acceptance(self) -> float:
        """Share of proposed tokens accepted."""
        return self.accepted / max(self.proposed, 1)


def warped_probs(logits: Tensor, sampling: SamplingConfig | None = None, **options: Any) -> Tensor:
    """The sampling distribution ``(..., vocab)`` of :func:`~multimodal.generation.sample.sample_next` for ``logits``.

    Temperature, then top-k, then top-p (the top token always stays) of ``sampling`` (or
    ``options``, its fields), as ``sample_next`` samples; ``temperature=0`` gives the one-hot argmax.
    """
    sampling = SamplingConfig.of(sampling, **options)
    temperature, top_k, top_p = sampling.temperature, sampling.top_k, sampling.top_p
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.float32)
    logits = logits.float() / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return logits.softmax(-1)


@torch.inference_mode()
def speculative_generate(
    target: DecodingModel,
    draft: DecodingModel,
    prompt: Tensor,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    *,
    num_draft: int = 4,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    stats: SpeculativeStats | None = None,
    **options: Any,
) -> Tensor:
    """Continues ``prompt`` ``(1, prompt_len)`` with ``target``'s distribution, drafted by ``draft``; ``(1, prompt_len + new)``.

    Args:
        target: The model whose distribution (or greedy output) the result has.
        draft: A smaller model over the same vocabulary.
        prompt: Token ids, one row.
        max_new_tokens: Tokens to add (fewer if ``eos_id`` comes first; EOS is kept).
        num_draft: Tokens the draft proposes per round.
        sampling: Temperature, top-k and top-p, as :func:`~multimodal.generation.sample.sample_next`
            (temperature 0: greedy); ``options`` are its fields as keywords. The logit rules
            (repetition penalty, stop ids, ...) and beam search are not part of speculative decoding.
        eos_id: Stop after this id.
        generator: Random generator of every draw (reproducible runs).
        stats: Filled with the rounds, proposals and acceptances, if given.
    """
    sampling = SamplingConfig.of(sampling, **options)
    unsupported = [name for name in sampling.sampling_options() if name not in ("temperature", "top_k", "top_p")]
    if sampling.num_beams > 1 or unsupported:
        raise ValueError(f"speculative decoding samples with temperature, top_k and top_p only; it does not take "
                         f"{', '.join(unsupported or ['num_beams'])}")  # fmt: skip
    temperature = sampling.temperature
    if prompt.dim() != 2 or prompt.shape[0] != 1 or prompt.shape[1] == 0:
        raise ValueError(f"speculative decoding takes one prompt (1, prompt_len >= 1), got {tuple(prompt.shape)}")
    if num_draft < 1 or max_new_tokens < 0:
        raise ValueError(f"num_draft must be >= 1 and max_new_tokens >= 0, got {num_draft} and {max_new_tokens}")
    check_max_new_tokens(target, max_new_tokens)
    stats = stats if stats is not None else SpeculativeStats()
    models = (target, draft)
    was_training = [model.training for model in models]
    for model in models:
        model.eval()
    try:
        tokens = prompt[0].tolist()
        target_state, draft_state = target.new_state(), draft.new_state()
        if len(tokens) > 1:  # every prompt token but the last enters both caches now
            target(prompt[:, :-1], state=target_state)
            draft(prompt[:, :-1], state=draft_state)
        draft_pending = [tokens[-1]]  # tokens the draft has not seen yet
        device = prompt.device

        def sample(probs: Tensor) -> int:
            if temperature == 0:
                return int(probs.argmax())
            return int(torch.multinomial(probs, 1, generator=generator))

        added = 0  # this call's tokens (``stats`` may carry earlier calls' counts)
        while added < max_new_tokens:
            k = min(num_draft, max_new_tokens - added)
            # The draft proposes k tokens.
            proposals, draft_probs = [], []
            step_input = torch.tensor([draft_pending], device=device)
            for _ in range(k):
                q = warped_probs(draft(step_input, state=draft_state)[0, -1], sampling)
                proposals.append(sample(q))
                draft_probs.append(q)
                step_input = torch.tensor([[proposals[-1]]], device=device)
            # The target scores them in one forward: p_0 .. p_k.
            start = target_state.position
            verify = torch.tensor([[tokens[-1], *proposals]], device=device)
            target_probs = warped_probs(target(verify, state=target_state)[0], sampling)
            accepted = 0
            for i, token in enumerate(proposals):
                p, q = target_probs[i, token], draft_probs[i][token]
                if temperature == 0:
                    keep = int(target_probs[i].argmax()) == token
                else:
                    keep = bool(torch.rand((), generator=generator, device=device) * q < p)  # u < p / q
                if not keep:
                    break
                accepted += 1
            if accepted < k:
                residual = (target_probs[accepted] - draft_probs[accepted]).clamp(min=0)
                last = sample(residual / residual.sum() if temperature and float(residual.sum()) > 0 else target_probs[accepted])
            else:
                last = sample(target_probs[k])
            new = [*proposals[:accepted], last]
            stats.rounds, stats.proposed, stats.accepted = stats.rounds + 1, stats.proposed + k, stats.accepted + accepted
            # Roll both caches back to what was kept: the target saw [previous last, x_1..x_k].
            target_state.truncate(start + 1 + accepted)
            draft_seen = draft_state.position  # it fed its pending tokens and x_1 .. x_{k-1}
            kept_by_draft = min(draft_seen, start + 1 + accepted)
            draft_state.truncate(kept_by_draft)
            new = new[: max_new_tokens - added]  # k accepted plus the target's own token can be one too many
            if eos_id is not None and eos_id in new:
                new = new[: new.index(eos_id) + 1]
            tokens += new
            added += len(new)
            stats.new_tokens += len(new)
            if eos_id is not None and new[-1] == eos_id:
                break
            draft_pending = tokens[kept_by_draft:]
        return torch.tensor([tokens], device=device)
    finally:
        for model, mode in zip(models, was_training, strict=True):
            model.train(mode)

"""Speculative decoding: the target's greedy output token for token, and the target's distribution when sampling."""

import itertools

import pytest
import torch
from scipy.stats import chisquare

from multimodal.generation import generate
from multimodal.generation.speculative import SpeculativeStats, speculative_generate, warped_probs
from multimodal.models import CausalLM, CausalLMConfig


def _model(seed, dim=32, layers=2, vocab=40, position="relative"):
    torch.manual_seed(seed)
    config = CausalLMConfig(vocab_size=vocab, dim=dim, num_layers=layers, num_heads=4, ff_dim=2 * dim, dropout=0.0,
                            position=position, max_seq_len=128, max_relative_distance=8)  # fmt: skip
    model = CausalLM(config).double().eval()
    with torch.no_grad():  # sharper distributions than the initialisation's, so tokens differ by model
        model.head.weight.mul_(8.0)  # tied: the embedding too
    return model


@pytest.mark.parametrize("num_draft", [1, 3, 5])
@pytest.mark.parametrize("position", ["relative", "rotary", "learned"])
def test_greedy_output_is_the_targets_greedy_output(num_draft, position):
    target, draft = _model(0, position=position), _model(1, dim=16, layers=1, position=position)
    prompt = torch.tensor([[5, 17, 3, 3, 8]])
    expected = generate(target, prompt, 30, temperature=0)
    stats = SpeculativeStats()
    got = speculative_generate(target, draft, prompt, 30, num_draft=num_draft, temperature=0, stats=stats)
    assert torch.equal(got, expected)
    assert stats.new_tokens == 30 and stats.rounds <= 30 and 0 <= stats.accepted <= stats.proposed
    # A draft equal to the target is always right: k + 1 tokens per round.
    perfect = SpeculativeStats()
    assert torch.equal(speculative_generate(target, target, prompt, 30, num_draft=4, temperature=0, stats=perfect),
                       expected)  # fmt: skip
    assert perfect.acceptance == 1.0 and perfect.rounds == 6


def test_stops_at_eos_like_the_target():
    target, draft = _model(0), _model(1, dim=16, layers=1)
    prompt = torch.tensor([[5, 17]])
    free = generate(target, prompt, 20, temperature=0)[0].tolist()
    eos = free[2 + 6]
    expected = free[: free.index(eos, 2) + 1]
    got = speculative_generate(target, draft, prompt, 20, num_draft=3, temperature=0, eos_id=eos)
    assert got[0].tolist() == expected


def _exact_two_token_distribution(model, prompt, vocab, **warp):
    """P(a, b) = p(a | prompt) p(b | prompt, a), enumerated."""
    with torch.no_grad():
        first = warped_probs(model(prompt)[0, -1], **warp)
        table = {}
        for a in range(vocab):
            second = warped_probs(model(torch.cat([prompt, torch.tensor([[a]])], 1))[0, -1], **warp)
            for b in range(vocab):
                table[a, b] = float(first[a] * second[b])
    return table


@pytest.mark.parametrize("warp", [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 4}], ids=["plain", "top-k"])
def test_samples_have_the_targets_distribution(warp):
    vocab = 5
    target = _model(0, dim=16, layers=1, vocab=vocab)
    draft = _model(3, dim=8, layers=1, vocab=vocab)
    prompt = torch.tensor([[1, 2]])
    exact = _exact_two_token_distribution(target, prompt, vocab, **warp)
    generator, stats = torch.Generator().manual_seed(0), SpeculativeStats()
    runs = 3000
    counts = dict.fromkeys(itertools.product(range(vocab), repeat=2), 0)
    for _ in range(runs):
        out = speculative_generate(target, draft, prompt, 2, num_draft=2, generator=generator, stats=stats, **warp)
        counts[tuple(out[0, 2:].tolist())] += 1
    assert 0.1 < stats.acceptance < 0.95  # the draft is wrong often enough to test the residual draws
    cells = [cell for cell in counts if exact[cell] * runs >= 5]
    rest = [cell for cell in counts if cell not in cells]
    observed = [counts[c] for c in cells] + [sum(counts[c] for c in rest)]
    expected = [exact[c] * runs for c in cells] + [sum(exact[c] for c in rest) * runs]
    assert sum(counts[c] for c in rest if exact[c] == 0) == 0  # nothing the target cannot produce
    expected = [e * runs / sum(expected) for e in expected]  # the enumerated table sums to 1 only to float precision
    assert chisquare(observed, expected).pvalue > 1e-3


def test_a_truncated_state_decodes_like_a_fresh_one():
    model = _model(0)
    tokens = torch.tensor([[4, 9, 2, 7, 7, 1, 3]])
    state = model.new_state()
    with torch.no_grad():
        model(tokens, state=state)
        state.truncate(4)
        again = model(tokens[:, 4:], state=state)
        torch.testing.assert_close(again, model(tokens)[:, 4:])
    with pytest.raises(ValueError, match="truncate"):
        state.truncate(20)


def test_one_prompt_at_a_time():
    target = _model(0)
    with pytest.raises(ValueError, match="one prompt"):
        speculative_generate(target, target, torch.ones(2, 3, dtype=torch.long), 4)

"""Prompts of different lengths decoded in one batch, each exactly as it would be alone, for every position scheme."""

import pytest
import torch

from multimodal.generation import generate, generate_batch
from multimodal.models import CausalLM, CausalLMConfig

SCHEMES = [
    ("learned", "full"), ("sinusoidal", "full"), ("relative", "full"), ("rotary", "full"), ("alibi", "full"),
    ("none", "full"), ("relative", "local1d"), ("rotary", "local1d"),
]  # fmt: skip


def _model(position, attention):
    torch.manual_seed(0)
    config = CausalLMConfig(vocab_size=50, dim=32, num_layers=2, num_heads=4, ff_dim=64, dropout=0.0, position=position,
                            max_seq_len=64, max_relative_distance=6, attention=attention, local_window=5)  # fmt: skip
    return CausalLM(config).double().eval()


PROMPTS = [[3, 9, 4], [7, 1, 2, 8, 5, 5, 6, 1, 2], [11], [4, 4, 20, 31, 2, 9]]


@pytest.mark.parametrize(("position", "attention"), SCHEMES)
def test_a_padded_batch_gives_each_row_its_own_logits_and_greedy_tokens(position, attention):
    model = _model(position, attention)
    # One forward over the left-padded batch: each row's logits at its real tokens equal the row alone.
    longest = max(map(len, PROMPTS))
    tokens = torch.zeros(len(PROMPTS), longest, dtype=torch.long)
    padding = torch.ones(len(PROMPTS), longest, dtype=torch.bool)
    for row, prompt in enumerate(PROMPTS):
        tokens[row, longest - len(prompt) :], padding[row, longest - len(prompt) :] = torch.tensor(prompt), False
    positions = (torch.arange(longest)[None] - padding.sum(1, keepdim=True)).clamp(min=0)
    with torch.no_grad():
        batched = model(tokens, key_padding_mask=padding, positions=positions)
        assert torch.isfinite(batched).all()  # the padding's own rows stay finite
        for row, prompt in enumerate(PROMPTS):
            alone = model(torch.tensor([prompt]))[0]
            torch.testing.assert_close(batched[row, longest - len(prompt) :], alone)
    # Cached greedy decoding, 20 new tokens (past the relative clip distance and the local window).
    outputs = generate_batch(model, PROMPTS, 20, temperature=0)
    for prompt, output in zip(PROMPTS, outputs, strict=True):
        alone = generate(model, torch.tensor([prompt]), 20, temperature=0)[0]
        assert torch.equal(output, alone)
    uncached = generate_batch(model, PROMPTS, 8, temperature=0, use_cache=False)
    assert all(torch.equal(a, b[: len(a)]) for a, b in zip(uncached, outputs, strict=True))


def test_rows_stop_on_their_own_and_end_at_their_stop_token():
    model = _model("rotary", "full")
    free = generate_batch(model, PROMPTS, 12, temperature=0)
    stop = int(free[1][len(PROMPTS[1]) + 3])  # the fourth token row 1 makes
    stopped = generate_batch(model, PROMPTS, 12, temperature=0, eos_id=stop)
    for prompt, row, full in zip(PROMPTS, stopped, free, strict=True):
        new = full[len(prompt) :].tolist()
        expected = full if stop not in new else full[: len(prompt) + new.index(stop) + 1]
        assert torch.equal(row, expected)


def test_bad_padding_is_refused():
    model = _model("none", "full")
    prompt = torch.ones(2, 4, dtype=torch.long)
    right = torch.tensor([[False, False, True, True], [False] * 4])
    with pytest.raises(ValueError, match="on the left"):
        generate(model, prompt, 2, prompt_padding=right)
    with pytest.raises(ValueError, match="on the left"):
        generate(model, prompt, 2, prompt_padding=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="non-empty"):
        generate_batch(model, [[1, 2], []], 2)

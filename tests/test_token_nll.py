"""token_nll: each id scored once, by a full forward pass where the sequence fits, and by windows that give
every id its own context where it does not — held to direct cross-entropies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from multimodal.models import CausalLM, CausalLMConfig
from multimodal.music import token_nll


class Bigram(nn.Module):
    """Logits that depend on the current id only: any window gives each id the same score."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab, vocab)

    def forward(self, tokens, state=None):
        return self.table(tokens)


def test_a_sequence_that_fits_is_scored_by_one_forward_pass():
    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig(vocab_size=50, dim=32, num_layers=2, num_heads=4, ff_dim=64, max_seq_len=64)).eval()
    ids = torch.randint(0, 50, (40,))
    with torch.no_grad():
        expected = nn.functional.cross_entropy(model(ids[None, :-1])[0], ids[1:], reduction="none").double().numpy()
    np.testing.assert_allclose(token_nll(model, ids, seq_len=64), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("seq_len", "stride"), [(16, 8), (16, 16), (16, 5), (7, 3)])
def test_windows_score_every_id_once_with_its_own_target(seq_len, stride):
    torch.manual_seed(1)
    model = Bigram(30)
    ids = torch.randint(0, 30, (101,))
    with torch.no_grad():
        expected = nn.functional.cross_entropy(model(ids[:-1]), ids[1:], reduction="none").double().numpy()
    got = token_nll(model, ids, seq_len=seq_len, stride=stride)
    assert got.shape == (100,) and not np.isnan(got).any()
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    with pytest.raises(ValueError, match="stride"):
        token_nll(model, ids, seq_len=8, stride=9)

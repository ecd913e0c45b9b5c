"""CausalLM.loss (chunked head + cross-entropy) against cross-entropy of the model's own logits."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from multimodal.models import CausalLM, CausalLMConfig


def _model(**overrides):
    torch.manual_seed(0)
    values = dict(vocab_size=97, dim=32, num_layers=2, num_heads=4, ff_dim=64, max_seq_len=32, dropout=0.0)
    return CausalLM(CausalLMConfig(**{**values, **overrides}))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_loss_equals_cross_entropy_of_the_logits_values_and_gradients(reduction, tie_embeddings):
    model = _model(tie_embeddings=tie_embeddings)
    tokens = torch.randint(0, 97, (3, 21))
    targets = torch.randint(0, 97, (3, 21))
    targets[0, -4:] = -100
    ours = model.loss(tokens, targets, reduction=reduction)
    reference = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten(), reduction=reduction)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-6)
    parameters = list(model.parameters())
    for got, expected in zip(
        torch.autograd.grad(ours, parameters), torch.autograd.grad(reference, parameters), strict=True
    ):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-4)


def test_a_hooked_head_is_run_and_all_ignored_targets_give_zero_on_both_paths():
    model = _model(tie_embeddings=False)
    tokens, targets = torch.randint(0, 97, (2, 9)), torch.randint(0, 97, (2, 9))
    model.head.register_forward_hook(lambda module, inputs, output: output * 2.0)
    torch.testing.assert_close(
        model.loss(tokens, targets), F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
    )
    ignored = torch.full_like(targets, -100)
    assert model.loss(tokens, ignored).item() == 0.0  # the hooked (plain) path
    assert _model().loss(tokens, ignored).item() == 0.0  # the fused path


def test_a_replaced_head_takes_the_plain_path():
    model = _model(tie_embeddings=False)
    model.head = nn.Sequential(nn.Linear(32, 97), nn.LogSoftmax(-1))  # e.g. a head with a bias
    tokens, targets = torch.randint(0, 97, (2, 9)), torch.randint(0, 97, (2, 9))
    torch.testing.assert_close(
        model.loss(tokens, targets), F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
    )
    with pytest.raises(ValueError, match="one shape"):
        model.loss(tokens, targets[:, :-1])


@pytest.mark.parametrize("position", ["relative", "learned"])
def test_loss_under_bf16_autocast_matches_the_logits_path_and_float32(position):
    model = _model(position=position, max_seq_len=160)
    tokens, targets = torch.randint(0, 97, (2, 150)), torch.randint(0, 97, (2, 150))  # 2 query blocks
    parameters = list(model.parameters())
    float32 = torch.autograd.grad(model.loss(tokens, targets), parameters)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = model.loss(tokens, targets)
        reference = F.cross_entropy(model(tokens).flatten(0, 1).float(), targets.flatten())
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, reference, atol=2e-2, rtol=0)
    ours_grads = torch.autograd.grad(ours, parameters)
    reference_grads = torch.autograd.grad(reference, parameters)
    for got, expected, exact in zip(ours_grads, reference_grads, float32, strict=True):
        assert got.dtype == expected.dtype == exact.dtype == torch.float32
        torch.testing.assert_close(got, expected, atol=2e-2, rtol=0.1)
        assert (got - exact).norm() <= 0.05 * exact.norm() + 1e-6  # bf16 rounding, not a wrong gradient


@pytest.mark.parametrize("chunked", [True, False])
def test_both_loss_paths_equal_cross_entropy_and_cpu_defaults_to_chunks(chunked, monkeypatch):
    import multimodal.models.lm as lm

    model = _model()
    tokens, targets = torch.randint(0, 97, (2, 13)), torch.randint(0, 97, (2, 13))
    reference = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
    torch.testing.assert_close(model.loss(tokens, targets, chunked=chunked), reference, atol=1e-5, rtol=1e-6)
    calls = []
    monkeypatch.setattr(lm, "linear_cross_entropy", lambda *args, **kwargs: calls.append(1) or reference)
    model.loss(tokens, targets)  # chunked=None on a CPU: the chunked loss
    model.loss(tokens, targets, chunked=False)
    assert calls == [1]

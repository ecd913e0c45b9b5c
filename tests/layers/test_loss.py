"""The chunked output layer + cross-entropy against F.cross_entropy over the full logits."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from multimodal.layers.loss import linear_cross_entropy

aten = torch.ops.aten


def _inputs(tokens=37, dim=12, vocab=50, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, dim, generator=g, dtype=dtype, requires_grad=True)
    weight = torch.randn(vocab, dim, generator=g, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,), generator=g)
    return hidden, weight, targets


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("chunk_size", [1, 8, 37, 100])
def test_values_and_gradients_equal_full_logits_cross_entropy(reduction, chunk_size):
    hidden, weight, targets = _inputs()
    targets[[3, 10, 11, 36]] = -100  # not scored
    ours = linear_cross_entropy(hidden, weight, targets, reduction=reduction, chunk_size=chunk_size)
    reference = F.cross_entropy(hidden @ weight.T, targets, reduction=reduction)
    torch.testing.assert_close(ours, reference, atol=1e-12, rtol=0)
    upstream = torch.tensor(0.7, dtype=torch.float64)  # a non-unit upstream gradient
    got = torch.autograd.grad(ours * upstream, [hidden, weight])
    expected = torch.autograd.grad(reference * upstream, [hidden, weight])
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=0)


def test_float32_matches_and_ignored_rows_get_no_gradient():
    hidden, weight, targets = _inputs(dtype=torch.float32)
    targets[:5] = 7
    targets[5] = -1
    ours = linear_cross_entropy(hidden, weight, targets, ignore_index=-1, chunk_size=16)
    reference = F.cross_entropy(hidden @ weight.T, targets, ignore_index=-1)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-6)
    grad_hidden, grad_weight = torch.autograd.grad(ours, [hidden, weight])
    assert not grad_hidden[5].any() and grad_hidden[4].abs().sum() > 0
    expected = torch.autograd.grad(reference, [hidden, weight])
    torch.testing.assert_close(grad_hidden, expected[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grad_weight, expected[1], atol=1e-6, rtol=1e-5)


def test_a_weight_shared_with_an_embedding_sums_both_gradients():
    hidden, weight, targets = _inputs()
    ids = torch.tensor([1, 4, 4, 9])

    def weight_grad(loss):
        return torch.autograd.grad(loss + F.embedding(ids, weight).pow(2).sum(), weight)[0]

    torch.testing.assert_close(
        weight_grad(linear_cross_entropy(hidden, weight, targets)),
        weight_grad(F.cross_entropy(hidden @ weight.T, targets)), atol=1e-12, rtol=0,
    )  # fmt: skip


class _CountProducts(TorchDispatchMode):
    """Counts the matrix products that run (one per chunk for the loss; two more per chunk for gradients)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (aten.matmul.default, aten.mm.default, aten.addmm.default, aten.addmm_.default):
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_without_gradients_only_the_loss_is_computed(context):
    hidden, weight, targets = _inputs()
    with context(), _CountProducts() as products:
        ours = linear_cross_entropy(hidden, weight, targets, chunk_size=5)
    assert products.count == 8  # ceil(37 / 5) chunks, one product each: no gradient work
    torch.testing.assert_close(ours, F.cross_entropy(hidden @ weight.T, targets).detach(), atol=1e-12, rtol=0)
    with _CountProducts() as products:
        linear_cross_entropy(hidden, weight, targets, chunk_size=5)
    assert products.count == 3 * 8


@pytest.mark.parametrize("trainable", ["hidden", "weight"])
def test_only_one_input_trainable_gets_the_same_gradient(trainable):
    hidden, weight, targets = _inputs()
    hidden.requires_grad_(trainable == "hidden")
    weight.requires_grad_(trainable == "weight")
    wanted = hidden if trainable == "hidden" else weight
    ours = torch.autograd.grad(linear_cross_entropy(hidden, weight, targets, chunk_size=8), wanted)[0]
    expected = torch.autograd.grad(F.cross_entropy(hidden @ weight.T, targets), wanted)[0]
    torch.testing.assert_close(ours, expected, atol=1e-12, rtol=0)


def test_nothing_scored_or_no_tokens_gives_zero_and_zero_gradients():
    hidden, weight, targets = _inputs()
    loss = linear_cross_entropy(hidden, weight, torch.full_like(targets, -100))
    assert loss.item() == 0.0
    assert not torch.autograd.grad(loss, hidden)[0].any()
    empty = linear_cross_entropy(hidden[:0], weight, targets[:0])
    assert empty.item() == 0.0


def test_wrong_shapes_say_what_to_fix():
    hidden, weight, targets = _inputs()
    with pytest.raises(ValueError, match="flatten"):
        linear_cross_entropy(hidden[None], weight, targets)
    with pytest.raises(ValueError, match="targets"):
        linear_cross_entropy(hidden, weight, targets[:-1])
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(hidden, weight, targets, reduction="none")
    with pytest.raises(ValueError, match="chunk_size"):
        linear_cross_entropy(hidden, weight, targets, chunk_size=0)

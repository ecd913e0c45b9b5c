"""Relative attention against a naive Shaw et al. implementation that materialises (L, L, d)."""

import math

import pytest
import torch

from multimodal.layers.positions.relative import RelativePositionEmbedding, relative_attention


def naive_shaw_attention(q, k, v, table, *, causal, max_distance, query_offset=0, key_padding_mask=None):
    """Shaw et al. 2018 written out: a_ij = E[clip(j - i)] gathered into a (q, k, heads, d) tensor."""
    q_len, k_len = q.shape[-2], k.shape[-2]
    i = torch.arange(q_len, device=q.device)[:, None] + query_offset
    j = torch.arange(k_len, device=q.device)[None, :]
    distance = (j - i).clamp(-max_distance, 0 if causal else max_distance) + max_distance
    a = table[:, distance]  # (h, q, k, d) -- the tensor the skew avoids
    logits = torch.einsum("bhid,bhjd->bhij", q, k) + torch.einsum("bhid,hijd->bhij", q, a)
    logits = logits / math.sqrt(q.shape[-1])
    if causal:
        logits = logits.masked_fill(j > i, float("-inf"))
    if key_padding_mask is not None:
        logits = logits.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    return torch.softmax(logits, -1) @ v


def _inputs(batch, heads, length, head_dim, dtype=torch.float64):
    g = torch.Generator().manual_seed(length)
    return [torch.randn(batch, heads, length, head_dim, generator=g, dtype=dtype, requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("max_distance", [4, 100])  # clipped, and longer than the sequence
@pytest.mark.parametrize(("length", "block_size"), [(37, 8), (33, 128), (64, 16)])
def test_matches_naive_shaw_values_and_gradients(causal, max_distance, length, block_size):
    table = RelativePositionEmbedding(3, 8, max_distance, causal).double()
    q, k, v = _inputs(2, 3, length, 8)
    padding = torch.zeros(2, length, dtype=torch.bool)
    padding[1, -5:] = True  # second sequence is 5 tokens shorter
    ours = relative_attention(q, k, v, table, causal=causal, key_padding_mask=padding, block_size=block_size)
    naive = naive_shaw_attention(q, k, v, table.weight, causal=causal, max_distance=max_distance,
                                 key_padding_mask=padding)  # fmt: skip
    keep = ~padding[:, None, :, None]  # outputs at padded queries are don't-care
    torch.testing.assert_close(ours * keep, naive * keep, atol=1e-5, rtol=0)
    weights = torch.randn_like(ours) * keep
    ours_grads = torch.autograd.grad((ours * weights).sum(), [q, k, v, table.weight])
    naive_grads = torch.autograd.grad((naive * weights).sum(), [q, k, v, table.weight])
    for got, expected in zip(ours_grads, naive_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_float32_matches_naive_to_1e5():
    table = RelativePositionEmbedding(4, 16, 64, causal=True)
    q, k, v = (x.detach().float() for x in _inputs(2, 4, 97, 16))
    ours = relative_attention(q, k, v, table, causal=True)
    naive = naive_shaw_attention(q, k, v, table.weight, causal=True, max_distance=64)
    torch.testing.assert_close(ours, naive, atol=1e-5, rtol=0)


def test_gradcheck_float64_with_clipping():
    table = RelativePositionEmbedding(2, 4, 3, causal=False).double()
    q, k, v = _inputs(1, 2, 7, 4)
    padding = torch.tensor([[False] * 6 + [True]])

    def attention(q, k, v, weight):
        return relative_attention(q, k, v, table, causal=False, key_padding_mask=padding, block_size=3)

    assert torch.autograd.gradcheck(attention, (q, k, v, table.weight))


def test_query_offset_gives_the_rows_of_the_full_attention():
    table = RelativePositionEmbedding(2, 8, 50, causal=True).double()
    q, k, v = (x.detach() for x in _inputs(1, 2, 20, 8))
    full = relative_attention(q, k, v, table, causal=True)
    last_rows = relative_attention(q[:, :, 12:], k, v, table, causal=True, query_offset=12)
    torch.testing.assert_close(last_rows, full[:, :, 12:])


def test_dropout_backward_sees_the_same_mask_as_forward():
    torch.manual_seed(0)
    table = RelativePositionEmbedding(2, 4, 8, causal=True).double()
    q, k, v = _inputs(1, 2, 9, 4)

    def attention(q, k, v, weight):
        torch.manual_seed(123)  # gradcheck calls forward many times: same seed, same mask
        return relative_attention(q, k, v, table, causal=True, dropout_p=0.3, block_size=4)

    assert torch.autograd.gradcheck(attention, (q, k, v, table.weight))


def test_shape_errors_say_what_was_expected():
    table = RelativePositionEmbedding(2, 4, 8, causal=True)
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match="k_len = query_offset"):
        relative_attention(q, torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4), table, causal=True)
    with pytest.raises(ValueError, match="key_padding_mask must be"):
        relative_attention(q, q, q, table, causal=True, key_padding_mask=torch.zeros(1, 4, dtype=torch.bool))

"""2D relative attention against a naive reference that materialises the (N, N, head_dim) embeddings."""

import math

import pytest
import torch
from probes import LargestTensor

from multimodal.layers import Encoder, MultiHeadAttention, RelativePosition2D, TransformerConfig
from multimodal.layers.attend import attend, attend_reference
from multimodal.layers.positions.resample import resample_offset_table


def naive_2d_attention(q, k, v, rows, cols, prefix_bias, grid, num_prefix, causal=False):
    """Every pair's embedding a_ij = R[r_j - r_i] + C[c_j - c_i] gathered into a (heads, N, N, d) tensor.

    Prefix tokens (before the grid) get the learned scalars: prefix->grid, grid->prefix, prefix->prefix.
    """
    num_rows, num_cols = grid
    length = q.shape[-2]
    cell = torch.arange(num_rows * num_cols)
    row, col = cell // num_cols, cell % num_cols
    a = (
        rows[:, row[None, :] - row[:, None] + num_rows - 1]
        + cols[:, col[None, :] - col[:, None] + num_cols - 1]
    )
    grid_q = q[..., num_prefix:, :]
    logits = torch.einsum("bhid,bhjd->bhij", q, k)
    logits[..., num_prefix:, num_prefix:] += torch.einsum("bhid,hijd->bhij", grid_q, a)
    logits = logits / math.sqrt(q.shape[-1])
    heads = q.shape[1]
    logits[..., :num_prefix, num_prefix:] += prefix_bias[:, 0].view(1, heads, 1, 1)
    logits[..., num_prefix:, :num_prefix] += prefix_bias[:, 1].view(1, heads, 1, 1)
    logits[..., :num_prefix, :num_prefix] += prefix_bias[:, 2].view(1, heads, 1, 1)
    if causal:
        future = torch.ones(length, length, dtype=torch.bool).triu(1)
        logits = logits.masked_fill(future, float("-inf"))
    return torch.softmax(logits, -1) @ v


def _inputs(batch, heads, length, head_dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, heads, length, head_dim, generator=g, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    ]


def _position(heads, head_dim, grid, seed=0):
    torch.manual_seed(seed)
    position = RelativePosition2D(heads, head_dim, grid).double()
    with torch.no_grad():  # make every part matter (the prefix biases start at zero)
        position.rows.normal_(0, 0.5)
        position.cols.normal_(0, 0.5)
        position.prefix.normal_(0, 1.0)
    return position


@pytest.mark.parametrize(("grid", "num_prefix"), [((3, 4), 1), ((4, 4), 0), ((2, 5), 2), ((1, 3), 1)])
@pytest.mark.parametrize("core", [attend, attend_reference], ids=["fast", "reference"])
def test_matches_naive_reference_values_and_gradients(grid, num_prefix, core):
    position = _position(3, 8, grid)
    q, k, v = _inputs(2, 3, num_prefix + grid[0] * grid[1], 8)
    ours = core(q, k, v, causal=False, position=position)
    naive = naive_2d_attention(q, k, v, position.rows, position.cols, position.prefix, grid, num_prefix)
    torch.testing.assert_close(ours, naive, atol=1e-10, rtol=0)
    weights = torch.randn_like(ours)
    parameters = [q, k, v, position.rows, position.cols, position.prefix]
    ours_grads = torch.autograd.grad((ours * weights).sum(), parameters, allow_unused=True)
    naive_grads = torch.autograd.grad((naive * weights).sum(), parameters, allow_unused=True)
    for got, expected in zip(ours_grads, naive_grads, strict=True):
        if got is None:  # no prefix tokens: the prefix biases take no part
            assert num_prefix == 0 and not expected.any()
            continue
        torch.testing.assert_close(got, expected, atol=1e-10, rtol=0)


@pytest.mark.parametrize("num_prefix", [1, 2])
def test_prefix_bias_equals_the_prefix_rows_of_the_full_bias(num_prefix):
    position = _position(3, 8, (3, 4))
    q = _inputs(2, 3, num_prefix + 12, 8)[0].detach()
    full = position(q)
    for num_queries in range(1, num_prefix + 1):
        rows = position.prefix_bias(num_queries, q.shape[-2])
        torch.testing.assert_close(rows.expand(2, -1, -1, -1), full[:, :, :num_queries], atol=0, rtol=0)
    with pytest.raises(ValueError, match="prefix"):
        position.prefix_bias(num_prefix + 1, q.shape[-2])


def test_causal_mask_combines_with_the_2d_bias():
    position = _position(2, 4, (3, 3))
    q, k, v = (x.detach() for x in _inputs(1, 2, 10, 4))
    ours = attend(q, k, v, causal=True, position=position)
    naive = naive_2d_attention(q, k, v, position.rows, position.cols, position.prefix, (3, 3), 1, causal=True)
    torch.testing.assert_close(ours, naive, atol=1e-10, rtol=0)
    # The pair-by-pair bias of the reference path gathers the same terms.
    reference = attend_reference(q, k, v, causal=True, position=position)
    torch.testing.assert_close(reference, naive, atol=1e-10, rtol=0)


def test_bias_depends_only_on_the_offset_between_cells():
    """Shift query and key together on the grid and (for the same query vector) the bias stays."""
    position = _position(1, 4, (4, 5)).float()
    q = torch.randn(1, 1, 1, 4).expand(1, 1, 4 * 5, 4)  # the same query everywhere: only positions differ
    bias = position(q)[0, 0].view(4, 5, 4, 5)
    torch.testing.assert_close(bias[0, 0, 1, 2], bias[2, 1, 3, 3])  # offset (+1, +2)
    torch.testing.assert_close(bias[3, 4, 1, 1], bias[2, 3, 0, 0])  # offset (-2, -3)
    assert not torch.allclose(bias[0, 0, 1, 2], bias[0, 0, 2, 1])


def test_no_tensor_of_size_n_by_n_by_head_dim_is_built_forward_or_backward():
    rows, cols, head_dim, heads = 8, 8, 32, 2
    attention = MultiHeadAttention(heads * head_dim, heads, position=RelativePosition2D(heads, head_dim, (rows, cols)))
    x = torch.randn(1, 1 + rows * cols, heads * head_dim, requires_grad=True)
    with LargestTensor() as probe:
        attention(x).sum().backward()
    n = rows * cols
    assert probe.largest >= heads * n * n  # the (b, h, N, N) bias exists...
    assert probe.largest < n * n * head_dim  # ...but nothing as large as one head's (N, N, d) embeddings


def test_encoder_with_relative2d_fast_equals_reference_and_has_its_own_tables_per_layer():
    config = dict(dim=32, num_layers=2, num_heads=4, dropout=0.0, position="relative2d", grid_size=[3, 4])
    fast = Encoder(TransformerConfig(**config)).double()
    reference = Encoder(TransformerConfig(**config, attention_impl="reference")).double()
    reference.load_state_dict(fast.state_dict())
    assert fast.config.grid_size == (3, 4)  # a YAML list becomes a tuple
    tables = [name for name, _ in fast.named_parameters() if name.endswith("attention.position.rows")]
    assert len(tables) == 2
    x = torch.randn(2, 1 + 12, 32, dtype=torch.float64)
    torch.testing.assert_close(fast(x), reference(x))


def test_padding_keys_still_masked_with_a_2d_bias():
    config = TransformerConfig(
        dim=16, num_layers=1, num_heads=2, dropout=0.0, position="relative2d", grid_size=(2, 3)
    )
    encoder = Encoder(config).eval()
    x = torch.randn(1, 7, 16)
    padding = torch.zeros(1, 7, dtype=torch.bool)
    padding[0, -1] = True
    changed = x.clone()
    changed[0, -1] = 100.0
    out, out_changed = encoder(x, key_padding_mask=padding), encoder(changed, key_padding_mask=padding)
    torch.testing.assert_close(out[:, :-1], out_changed[:, :-1])


def test_resampled_tables_keep_the_zero_offset_and_the_ends():
    table = torch.randn(2, 2 * 4 - 1, 3)
    bigger = resample_offset_table(table, 7)
    assert bigger.shape == (2, 13, 3)
    torch.testing.assert_close(bigger[:, 6], table[:, 3])  # offset 0 stays offset 0
    torch.testing.assert_close(bigger[:, [0, -1]], table[:, [0, -1]])
    assert resample_offset_table(table, 4) is table


def test_configuration_errors_say_how_to_fix():
    with pytest.raises(ValueError, match=r"grid_size=\(rows, cols\)"):
        TransformerConfig(dim=16, num_heads=2, position="relative2d")
    with pytest.raises(ValueError, match="do not cover the 3x3 grid"):
        RelativePosition2D(2, 4, (3, 3))(torch.randn(1, 2, 8, 4))
    with pytest.raises(ValueError, match="cross-attention"):
        MultiHeadAttention(8, 2, context_dim=8, position=RelativePosition2D(2, 4, (2, 2)))


def test_the_position_says_it_has_no_cached_decoding_and_attention_refuses_a_cache():
    from multimodal.layers import KVCache, RotaryPositions

    assert not RelativePosition2D(2, 4, (2, 2)).supports_cache and RotaryPositions(4).supports_cache
    attention = MultiHeadAttention(8, 2, causal=True, position=RelativePosition2D(2, 4, (2, 2)))
    with pytest.raises(ValueError, match="RelativePosition2D has no KV-cached decoding"):
        attention(torch.randn(1, 4, 8), cache=KVCache())

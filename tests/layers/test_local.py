"""Local 1D/2D attention against full attention with the equivalent mask, written out here by hand."""

import pytest
import torch

from multimodal.layers import Decoder, Encoder, LocalAttention, RelativePositionEmbedding, TransformerConfig
from multimodal.layers.cache import KVCache
from multimodal.layers.positions.grid import GridOffsets

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def mask_1d(length, window, causal):
    """Query i sees key j when j is one of the `window` positions ending at i (or around i)."""
    allowed = torch.zeros(length, length, dtype=torch.bool)
    for i in range(length):
        for j in range(length):
            allowed[i, j] = 0 <= i - j < window if causal else abs(i - j) < window
    return allowed


def mask_2d(length, width, query_shape, memory_shape, causal):
    """Cut the grid into query blocks; each block's queries see the rectangle around the block."""
    rows, cols = query_shape
    memory_rows, memory_cols = memory_shape
    allowed = torch.zeros(length, length, dtype=torch.bool)
    for i in range(length):
        block_top, block_left = (i // width) // rows * rows, (i % width) // cols * cols
        for j in range(length):
            row, col = j // width, j % width
            below = block_top + rows + (0 if causal else memory_rows)
            in_rows = block_top - memory_rows <= row < below
            in_cols = block_left - memory_cols <= col < block_left + cols + memory_cols
            allowed[i, j] = in_rows and in_cols and (j <= i or not causal)
    return allowed


def offsets(length, width, pattern):
    positions = torch.arange(length)
    if pattern == "local1d":
        return {"distance": positions[None, :] - positions[:, None]}
    rows, cols = positions // width, positions % width
    return {"rows": rows[None, :] - rows[:, None], "cols": cols[None, :] - cols[:, None]}


def tables_of(position):
    """The relative tables of a position, by the offset each one embeds."""
    if position is None:
        return {}
    if isinstance(position, GridOffsets):
        return {"rows": position.rows, "cols": position.cols}
    return {"distance": position}


def relative_position(pattern, causal, window=None, query_shape=None, memory_shape=None):
    """The position a relative local layer of this geometry gets, its tables drawn at full scale."""
    if pattern == "local1d":
        position = RelativePositionEmbedding(2, 8, max(window - 1, 1), causal)
    else:
        position = GridOffsets(2, 8, query_shape, memory_shape, causal)
    for table in tables_of(position).values():
        torch.nn.init.normal_(table.weight)
    return position


def naive(q, k, v, allowed, position=None, width=None, pattern="local1d"):
    """softmax((q·k + q·E[offset]) / sqrt(d)) v, Shaw et al.'s way: gather an embedding per pair."""
    logits = q @ k.transpose(-1, -2)
    if position is not None:
        for name, offset in offsets(q.shape[-2], width, pattern).items():
            table = tables_of(position)[name]
            upper = 0 if table.causal else table.max_distance
            rows = offset.clamp(-table.max_distance, upper) + table.max_distance
            per_pair = table.weight[:, rows]  # (heads, q, k, d)
            logits = logits + torch.einsum("bhqd,hqkd->bhqk", q, per_pair)
    logits = (logits / q.shape[-1] ** 0.5).masked_fill(~allowed, float("-inf"))
    return torch.softmax(logits, -1) @ v


def qkv(length, seed=0, heads=2, head_dim=8, batch=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, length, head_dim, generator=g, requires_grad=True) for _ in range(3)]


CASES_2D = [  # (length, width, query_shape, memory_shape): ragged last row, widths not multiple of blocks
    (35, 7, (2, 3), (1, 2)),
    (64, 8, (4, 4), (2, 4)),
    (30, 10, (3, 2), (0, 0)),
]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("length,window", [(23, 5), (16, 4), (7, 16)])
@pytest.mark.parametrize("relative", [False, True])
def test_local1d_equals_full_attention_with_the_window_mask(causal, length, window, relative):
    local = LocalAttention("local1d", causal=causal, window=window)
    position = relative_position("local1d", causal, window) if relative else None
    q, k, v = qkv(length)
    expected = naive(q, k, v, mask_1d(length, window, causal), position)
    torch.testing.assert_close(local(q, k, v, position=position), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(local.reference(q, k, v, position=position), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("length,width,query_shape,memory_shape", CASES_2D)
@pytest.mark.parametrize("relative", [False, True])
def test_local2d_equals_full_attention_with_the_block_mask(
    causal, length, width, query_shape, memory_shape, relative
):
    local = LocalAttention("local2d", causal=causal, grid_width=width, query_shape=query_shape,
                           memory_shape=memory_shape)  # fmt: skip
    position = relative_position("local2d", causal, None, query_shape, memory_shape) if relative else None
    q, k, v = qkv(length, seed=1)
    expected = naive(q, k, v, mask_2d(length, width, query_shape, memory_shape, causal), position, width, "local2d")
    torch.testing.assert_close(local(q, k, v, position=position), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(local.reference(q, k, v, position=position), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pattern", ["local1d", "local2d"])
def test_blocked_gradients_equal_the_reference_gradients(pattern):
    local = LocalAttention(pattern, causal=True, window=4, grid_width=6, query_shape=(2, 2), memory_shape=(1, 1))
    position = relative_position(pattern, True, 4, (2, 2), (1, 1))
    grads = []
    for core in (local, local.reference):
        q, k, v = qkv(29, seed=2)
        core(q, k, v, position=position).pow(2).sum().backward()
        grads.append([q.grad, k.grad, v.grad, *(t.weight.grad.clone() for t in tables_of(position).values())])
        position.zero_grad()
    for fast, reference in zip(*grads, strict=True):
        torch.testing.assert_close(fast, reference, atol=1e-5, rtol=0)


def test_padding_keys_are_ignored_by_the_blocked_path():
    local = LocalAttention("local2d", causal=False, grid_width=5, query_shape=(2, 2), memory_shape=(1, 1))
    q, k, v = qkv(20, seed=3)
    padding = torch.zeros(2, 20, dtype=torch.bool)
    padding[0, 13:] = True
    padding[1, ::3] = True
    allowed = mask_2d(20, 5, (2, 2), (1, 1), causal=False) & ~padding[:, None, None, :]
    got, expected = local(q, k, v, key_padding_mask=padding), naive(q, k, v, allowed)
    real = ~padding[:, None, :, None]
    torch.testing.assert_close(got * real, expected * real, atol=1e-5, rtol=0)


def test_a_window_covering_everything_is_full_causal_attention():
    q, k, v = qkv(12, seed=4)
    full = naive(q, k, v, torch.ones(12, 12, dtype=torch.bool).tril())
    wide_1d = LocalAttention("local1d", causal=True, window=12)
    wide_2d = LocalAttention("local2d", causal=True, grid_width=4, query_shape=(1, 4), memory_shape=(3, 0))
    torch.testing.assert_close(wide_1d(q, k, v), full, atol=1e-5, rtol=0)
    torch.testing.assert_close(wide_2d(q, k, v), full, atol=1e-5, rtol=0)


def _config(attention, **overrides):
    values = dict(dim=32, num_layers=2, num_heads=4, ff_dim=64, max_seq_len=64, dropout=0.0, position="relative",
                  attention=attention, local_window=6, local_grid_width=7, local_query_shape=(2, 3),
                  local_memory_shape=(1, 2))  # fmt: skip
    return TransformerConfig(**{**values, **overrides})


@pytest.mark.parametrize("attention", ["local1d", "local2d"])
@pytest.mark.parametrize("position", ["none", "relative"])
def test_cached_decoding_of_a_local_decoder_equals_its_full_forward(attention, position):
    torch.manual_seed(0)
    decoder = Decoder(_config(attention, position=position)).eval()
    x = torch.randn(2, 40, 32)
    full = decoder(x)
    state = decoder.new_state()
    pieces = [decoder(x[:, :16], state=state)]  # a prompt, then one token at a time
    pieces += [decoder(x[:, t : t + 1], state=state) for t in range(16, 38)]
    pieces.append(decoder(x[:, 38:], state=state))  # two at once against the windowed cache
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-5, rtol=0)
    reference = Decoder(_config(attention, position=position, attention_impl="reference")).eval()
    reference.load_state_dict(decoder.state_dict())
    torch.testing.assert_close(reference(x), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", ["local1d", "local2d"])
def test_local_cache_stays_bounded_while_decoding(attention):
    decoder = Decoder(_config(attention)).eval()
    lookback = decoder.local.lookback()
    state = decoder.new_state()
    with torch.no_grad():
        for _ in range(60):
            decoder(torch.randn(1, 1, 32), state=state)
    cache = state.layers[0]
    assert cache.keys.shape[-2] <= 2 * lookback + 1  # the buffer, not 60 positions
    assert cache.start + cache.length == 60 and cache.length >= lookback


def test_windowed_kv_cache_keeps_the_last_window_positions():
    cache = KVCache(window=3)
    for t in range(10):
        keys, _ = cache.append(torch.full((1, 1, 1, 2), float(t)), torch.zeros(1, 1, 1, 2))
        assert keys[0, 0, -1, 0] == t
        assert keys.shape[-2] >= min(t + 1, 4)  # the new position and at least 3 before it
        assert keys[0, 0, 0, 0] == cache.start


def test_local_encoder_fast_equals_reference_and_takes_the_grid_width_per_call():
    torch.manual_seed(0)
    config = _config("local2d", local_grid_width=None)
    encoder = Encoder(config).eval()
    reference = Encoder(_config("local2d", local_grid_width=None, attention_impl="reference")).eval()
    reference.load_state_dict(encoder.state_dict())
    with pytest.raises(ValueError, match="grid_width="):
        encoder(torch.randn(1, 12, 32))
    for width in (3, 5):
        x = torch.randn(2, 5 * width, 32)
        torch.testing.assert_close(encoder(x, grid_width=width), reference(x, grid_width=width), atol=1e-5, rtol=0)
    assert all(block.attention.local is encoder.local for block in encoder.blocks)  # one pattern, shared


@pytest.mark.parametrize("pattern", ["local1d", "local2d"])
def test_gradcheck_float64_local_core(pattern):
    torch.manual_seed(0)
    local = LocalAttention(pattern, causal=True, window=3, grid_width=3, query_shape=(1, 2), memory_shape=(1, 1))
    if pattern == "local1d":
        position = RelativePositionEmbedding(1, 3, 2, True).double()
    else:
        position = GridOffsets(1, 3, (1, 2), (1, 1), True).double()
    tables = [table.weight for table in tables_of(position).values()]
    q, k, v = (torch.randn(1, 1, 7, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v, *tables: local(q, k, v, position=position), (q, k, v, *tables))


def test_bad_local_settings_say_how_to_fix():
    with pytest.raises(ValueError, match="'full', 'local1d' or 'local2d'"):
        _config("local3d")
    with pytest.raises(ValueError, match="position='relative' with attention='local2d'"):
        _config("local2d", position="relative2d", grid_size=(2, 2))
    with pytest.raises(ValueError, match="window >= 1"):
        LocalAttention("local1d", causal=True, window=0)

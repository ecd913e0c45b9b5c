"""Rotary, ALiBi and grouped-query attention against independent references; every scheme through one interface."""

import math

import pytest
import torch
from probes import LargestTensor

from multimodal.layers import (
    ALiBiPositions,
    Decoder,
    Encoder,
    MultiHeadAttention,
    RotaryPositions,
    TransformerConfig,
)
from multimodal.layers.attend import attend, attend_reference
from multimodal.layers.positions import alibi_slopes

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# ------------------------------------------------------------------------------------------ rotary
def rotate_as_complex(x, positions, base=10_000.0, rotary_dims=None, position_factor=1.0):
    """RoFormer's definition: pairs (i, i + d/2) as complex numbers, multiplied by exp(i * pos * theta_i)."""
    rotary_dims = rotary_dims or x.shape[-1]
    half = rotary_dims // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) * 2 / rotary_dims)
    angles = positions.double()[:, None] * position_factor * theta  # (seq, half)
    pairs = torch.complex(x[..., :half].double(), x[..., half:rotary_dims].double()) * torch.polar(
        torch.ones_like(angles), angles
    )
    turned = torch.cat([pairs.real, pairs.imag], dim=-1).to(x.dtype)
    return torch.cat([turned, x[..., rotary_dims:]], dim=-1)


@pytest.mark.parametrize("fraction", [1.0, 0.5])
@pytest.mark.parametrize("scaling,scale", [("none", 1.0), ("linear", 4.0)])
def test_rotary_equals_complex_multiplication(fraction, scaling, scale):
    rotary = RotaryPositions(16, fraction=fraction, scaling=scaling, scale=scale)
    x = torch.randn(2, 3, 11, 16, dtype=torch.float64)
    positions = torch.arange(11) + 5
    expected = rotate_as_complex(x, positions, rotary_dims=int(16 * fraction), position_factor=1 / scale)
    # Angles are float32, as in Hugging Face's Llama: agreement to float32 precision.
    torch.testing.assert_close(rotary.rotate(x, positions), expected, atol=1e-6, rtol=1e-5)  # in place, no autograd
    trained = x.clone().requires_grad_()
    torch.testing.assert_close(rotary.rotate(trained, positions), expected, atol=1e-6, rtol=1e-5)  # with autograd


def test_rotary_ntk_raises_the_base_and_matches_hugging_face():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=500_000.0)
    hf = LlamaRotaryEmbedding(config)
    q, k = torch.randn(2, 4, 9, 16), torch.randn(2, 4, 9, 16)
    positions = torch.arange(9)[None].expand(2, -1)
    cos, sin = hf(q, positions)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, cos, sin)
    ours = RotaryPositions(16, base=500_000.0)
    torch.testing.assert_close(ours.rotate(q, positions), hf_q, atol=1e-6, rtol=1e-5)  # per-row positions
    torch.testing.assert_close(ours.rotate(k, torch.arange(9)), hf_k, atol=1e-6, rtol=1e-5)
    ntk = RotaryPositions(16, scaling="ntk", scale=4.0)
    assert ntk.base == pytest.approx(10_000.0 * 4.0 ** (16 / 14))


def test_rotary_logits_depend_on_the_distance_only():
    rotary = RotaryPositions(8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    logits = [(rotary.rotate(q, torch.tensor([i + 3])) * rotary.rotate(k, torch.tensor([i]))).sum() for i in (0, 7, 100)]
    torch.testing.assert_close(torch.stack(logits), logits[0].expand(3), atol=1e-5, rtol=0)


def test_rotary_settings_are_checked():
    with pytest.raises(ValueError, match="no pair"):
        RotaryPositions(8, fraction=0.1)
    with pytest.raises(ValueError, match="scaling"):
        RotaryPositions(8, scaling="yarn")
    with pytest.raises(ValueError, match="scale"):
        RotaryPositions(8, scale=2.0)


# ------------------------------------------------------------------------------------------- ALiBi
def test_alibi_slopes_are_the_papers_and_blooms():
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    for heads in (4, 6, 12):
        mask = torch.ones(1, 5)
        built = bloom.build_alibi_tensor(mask, heads, torch.float32)  # (heads, 1, 5): slope * position
        torch.testing.assert_close(built[:, 0, 1], alibi_slopes(heads))


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_blocked_kernel_equals_the_dense_reference_forward_and_backward(causal):
    alibi = ALiBiPositions(4, block_size=16).double()
    q, k, v = (torch.randn(2, 4, 50, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    padding = torch.zeros(2, 50, dtype=torch.bool)
    padding[1, 40:] = not causal
    results = []
    for core in (attend, attend_reference):
        out = core(q, k, v, causal=causal, key_padding_mask=padding if not causal else None, position=alibi)
        results.append((out, torch.autograd.grad(out.square().sum(), (q, k, v))))
    torch.testing.assert_close(results[0][0], results[1][0])
    for fast, reference in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(fast, reference)
    # The reference itself: the bias is -slope * |i - j|.
    bias = alibi.bias(q, torch.arange(50)[:, None], torch.arange(50)[None, :])
    assert bias.shape == (4, 50, 50) and bias[2, 10, 3] == -alibi_slopes(4)[2] * 7


def test_causal_alibi_stays_exact_in_float32_over_a_long_sequence_with_padding_and_grouped_heads():
    """The folded query/key features of the causal kernel against the float64 dense reference."""
    torch.manual_seed(0)
    length = 1100  # nine blocks; the last query is 1,099 positions from the first key
    q = torch.randn(2, 8, length, 16, requires_grad=True)
    k, v = (torch.randn(2, 2, length, 16, requires_grad=True) for _ in range(2))
    padding = torch.zeros(2, length, dtype=torch.bool)
    padding[1, :37] = True  # a left-padded row: its first 37 queries see no real key
    fast = attend(q, k, v, causal=True, key_padding_mask=padding, position=ALiBiPositions(8))
    assert torch.isfinite(fast).all()
    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
    reference = attend_reference(*wide, causal=True, key_padding_mask=padding, position=ALiBiPositions(8).double())
    real = torch.ones(2, 1, length, 1)
    real[1, :, :37] = 0  # the padded queries' rows are discarded by their users
    torch.testing.assert_close(fast * real, (reference * real).float(), atol=2e-5, rtol=1e-4)
    weights = torch.randn(2, 8, length, 16) * real
    grads = torch.autograd.grad((fast * weights).sum(), (q, k, v))
    expected = torch.autograd.grad((reference * weights.double()).sum(), wide)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want.float(), atol=1e-4, rtol=1e-3)


def test_causal_alibi_queries_at_an_offset_equal_the_reference():
    """A chunk of queries after cached keys (chunked prefill): the fused blocks against the dense reference."""
    alibi = ALiBiPositions(4, block_size=8).double()
    q = torch.randn(2, 4, 21, 8, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 4, 50, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    results = []
    for core in (attend, attend_reference):
        out = core(q, k, v, causal=True, query_offset=29, key_padding_mask=None, position=alibi)
        results.append((out, torch.autograd.grad(out.square().sum(), (q, k, v))))
    torch.testing.assert_close(results[0][0], results[1][0])
    for fast, reference in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(fast, reference)


def test_alibi_backward_recomputes_no_forward_on_the_cpu():
    """Each block keeps its log-sum-exp: the backward calls the fused backward, never the forward again."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    alibi = ALiBiPositions(4, block_size=16)
    q, k, v = (torch.randn(1, 4, 64, 16, requires_grad=True) for _ in range(3))
    with Calls() as forward:
        out = attend(q, k, v, causal=True, position=alibi)
    with Calls() as backward:
        out.sum().backward()
    fused = "_scaled_dot_product_flash_attention_for_cpu"
    assert forward.names.count(fused) == 4  # one per block of 16 queries
    assert fused not in backward.names and backward.names.count(fused + "_backward") == 4


def test_alibi_memory_is_linear_in_the_sequence():
    length, heads, block = 512, 4, 64
    alibi = ALiBiPositions(heads, block_size=block)
    q, k, v = (torch.randn(1, heads, length, 16, requires_grad=True) for _ in range(3))
    with LargestTensor() as probe:
        attend(q, k, v, causal=True, position=alibi).sum().backward()
    assert probe.largest <= heads * block * length  # one block's bias, never (heads, L, L)


# --------------------------------------------------------------------------- every scheme, one stack
def _config(position, **overrides):
    values = dict(dim=32, num_layers=2, num_heads=4, ff_dim=64, max_seq_len=64, dropout=0.0, position=position,
                  max_relative_distance=5)  # fmt: skip
    return TransformerConfig(**{**values, **overrides})


SCHEMES = ["none", "sinusoidal", "learned", "relative", "rotary", "alibi"]


@pytest.mark.parametrize("position", SCHEMES)
@pytest.mark.parametrize("attention", ["full", "local1d"])
@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_every_scheme_fast_equals_reference_and_caches_exactly(position, attention, num_kv_heads):
    torch.manual_seed(0)
    options = dict(attention=attention, local_window=6, num_kv_heads=num_kv_heads)
    decoder = Decoder(_config(position, **options)).double().eval()
    reference = Decoder(_config(position, attention_impl="reference", **options)).double().eval()
    reference.load_state_dict(decoder.state_dict())
    x = torch.randn(2, 30, 32, dtype=torch.float64, requires_grad=True)
    full = decoder(x)
    expected = reference(x)
    torch.testing.assert_close(full, expected)
    grads = [torch.autograd.grad(out.square().sum(), [x, *model.parameters()]) for out, model in
             ((full, decoder), (expected, reference))]  # fmt: skip
    for fast, slow in zip(*grads, strict=True):
        torch.testing.assert_close(fast, slow)
    # Cached decoding, a prompt then one token at a time, past the clip distance and the window.
    with torch.no_grad():
        state = decoder.new_state()
        pieces = [decoder(x[:, :9], state=state)] + [decoder(x[:, t : t + 1], state=state) for t in range(9, 30)]
    torch.testing.assert_close(torch.cat(pieces, 1), full.detach())
    if num_kv_heads is not None:
        assert state.layers[0].keys.shape[1] == num_kv_heads  # the cache holds the kv heads only


@pytest.mark.parametrize("position", ["none", "rotary", "alibi"])
def test_grouped_query_attention_equals_full_attention_with_repeated_key_value_heads(position):
    torch.manual_seed(0)
    grouped = MultiHeadAttention(32, 4, causal=True, num_kv_heads=2, position=_position(position))
    full = MultiHeadAttention(32, 4, causal=True, position=_position(position))
    with torch.no_grad():
        q_rows, kv_rows = 32, 2 * 8
        weight, bias = grouped.to_qkv.weight, grouped.to_qkv.bias
        k_w, v_w = weight[q_rows : q_rows + kv_rows], weight[q_rows + kv_rows :]
        k_b, v_b = bias[q_rows : q_rows + kv_rows], bias[q_rows + kv_rows :]
        # kv head j serves query heads 2j and 2j + 1
        repeat = lambda t: t.unflatten(0, (2, 8)).repeat_interleave(2, dim=0).flatten(0, 1)  # noqa: E731
        full.to_qkv.weight.copy_(torch.cat([weight[:q_rows], repeat(k_w), repeat(v_w)]))
        full.to_qkv.bias.copy_(torch.cat([bias[:q_rows], repeat(k_b), repeat(v_b)]))
        full.to_out.load_state_dict(grouped.to_out.state_dict())
    x = torch.randn(2, 13, 32)
    torch.testing.assert_close(grouped(x), full(x), atol=1e-6, rtol=1e-5)
    assert grouped.to_qkv.weight.shape == (32 + 2 * 16, 32)


def _position(name):
    return {"none": None, "rotary": RotaryPositions(8), "alibi": ALiBiPositions(4)}[name]


def test_bidirectional_encoders_take_rotary_and_alibi():
    for position in ("rotary", "alibi"):
        encoder = Encoder(_config(position)).double().eval()
        reference = Encoder(_config(position, attention_impl="reference")).double().eval()
        reference.load_state_dict(encoder.state_dict())
        x = torch.randn(2, 20, 32, dtype=torch.float64)
        torch.testing.assert_close(encoder(x), reference(x))


def test_checkpoints_with_the_old_table_names_load():
    torch.manual_seed(0)
    for config in (_config("relative"), _config("relative", attention="local1d", local_window=4),
                   _config("relative", attention="local2d", local_grid_width=6, local_query_shape=(2, 2),
                           local_memory_shape=(1, 1))):  # fmt: skip
        decoder = Decoder(config).eval()
        old_names = {"position.rows.weight": "local.tables.rows.weight", "position.cols.weight": "local.tables.cols.weight",
                     "position.weight": "local.tables.distance.weight" if config.attention == "local1d" else "relative.weight"}  # fmt: skip
        old = {}
        for name, value in decoder.state_dict().items():
            for new, was in old_names.items():
                if name.endswith("attention." + new):
                    name = name.removesuffix(new) + was
                    break
            old[name] = value
        assert old.keys() != decoder.state_dict().keys()
        fresh = Decoder(config).eval()
        fresh.load_state_dict(old)
        x = torch.randn(1, 24, 32)
        torch.testing.assert_close(fresh(x), decoder(x))


def test_llama_block_options():
    config = _config("rotary", norm="rmsnorm", activation="swiglu", bias=False, num_kv_heads=1)
    block = Decoder(config).blocks[0]
    assert isinstance(block.norm_attention, torch.nn.RMSNorm) and block.ff.gate is not None
    assert all(module.bias is None for module in block.modules() if isinstance(module, torch.nn.Linear))
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide"):
        _config("rotary", num_kv_heads=3)
    with torch.no_grad():
        assert math.isfinite(float(Decoder(config)(torch.randn(1, 5, 32)).sum()))

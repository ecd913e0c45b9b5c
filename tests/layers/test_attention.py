"""Fast attention paths against plain references; causality; cached decoding; gradcheck."""

import pytest
import torch

from multimodal.layers import (
    Decoder,
    Encoder,
    MultiHeadAttention,
    TransformerConfig,
    attend,
    attend_reference,
)
from multimodal.layers.positions.relative import RelativePositionEmbedding

SCHEMES = ["none", "sinusoidal", "learned", "relative"]


def _config(position, **overrides):
    values = dict(dim=32, num_layers=2, num_heads=4, ff_dim=64, position=position, max_seq_len=64, dropout=0.0)
    return TransformerConfig(**{**values, **overrides})


def naive_attention(q, k, v, allowed):
    """Textbook softmax(QK^T / sqrt(d)) V with a boolean mask, one (batch, head) at a time."""
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            logits = q[b, h] @ k[b, h].T / q.shape[-1] ** 0.5
            logits[~allowed[b]] = float("-inf")
            out[b, h] = torch.softmax(logits, -1) @ v[b, h]
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_path_and_reference_path_match_naive_attention(causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 11, 8, generator=g) for _ in range(3))
    padding = torch.zeros(2, 11, dtype=torch.bool)
    padding[0, 9:] = True
    allowed = ~padding[:, None, :].expand(2, 11, 11)
    if causal:
        allowed = allowed & torch.ones(11, 11, dtype=torch.bool).tril()
    expected = naive_attention(q, k, v, allowed)
    rows = ~padding[:, None, :, None]
    for core in (attend, attend_reference):
        got = core(q, k, v, causal=causal, key_padding_mask=padding)
        torch.testing.assert_close(got * rows, expected * rows, atol=1e-5, rtol=0)


@pytest.mark.parametrize("causal", [True, False])
def test_relative_fast_path_equals_reference_path(causal):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 45, 8, generator=g) for _ in range(3))
    table = RelativePositionEmbedding(4, 8, 10, causal)
    torch.testing.assert_close(
        attend(q, k, v, causal=causal, position=table), attend_reference(q, k, v, causal=causal, position=table),
        atol=1e-5, rtol=0,
    )  # fmt: skip


@pytest.mark.parametrize("position", SCHEMES)
def test_fast_stack_equals_reference_stack(position):
    torch.manual_seed(0)
    fast = Decoder(_config(position)).eval()
    reference = Decoder(_config(position, attention_impl="reference")).eval()
    reference.load_state_dict(fast.state_dict())
    x = torch.randn(2, 19, 32)
    torch.testing.assert_close(fast(x), reference(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("position", SCHEMES)
def test_changing_token_t_never_changes_earlier_outputs(position):
    torch.manual_seed(0)
    decoder = Decoder(_config(position)).eval()
    x = torch.randn(1, 24, 32)
    changed = x.clone()
    changed[:, 15] += torch.randn(32)  # not a constant: LayerNorm would erase that
    before, after = decoder(x), decoder(changed)
    torch.testing.assert_close(before[:, :15], after[:, :15], atol=1e-6, rtol=0)
    assert (before[:, 15:] - after[:, 15:]).abs().max() > 1e-3


@pytest.mark.parametrize("position", SCHEMES)
def test_cached_incremental_decoding_equals_full_forward(position):
    torch.manual_seed(0)
    decoder = Decoder(_config(position)).eval()
    x = torch.randn(2, 30, 32)
    full = decoder(x)
    state = decoder.new_state()
    pieces = [decoder(x[:, :9], state=state)]  # a prompt, then one token at a time
    pieces += [decoder(x[:, t : t + 1], state=state) for t in range(9, 30)]
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-5, rtol=0)
    assert state.position == 30


def test_cached_decoding_with_cross_attention_equals_full_forward():
    torch.manual_seed(0)
    decoder = Decoder(_config("relative", cross_attention=True, context_dim=16)).eval()
    x, context = torch.randn(2, 12, 32), torch.randn(2, 7, 16)
    full = decoder(x, context=context)
    state = decoder.new_state()
    steps = [decoder(x[:, t : t + 1], context=context, state=state) for t in range(12)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)


def test_encoder_padding_keys_do_not_change_real_outputs():
    torch.manual_seed(0)
    encoder = Encoder(_config("relative")).eval()
    x = torch.randn(1, 10, 32)
    padded = torch.cat([x, torch.randn(1, 4, 32)], 1)
    mask = torch.zeros(1, 14, dtype=torch.bool)
    mask[:, 10:] = True
    torch.testing.assert_close(encoder(padded, key_padding_mask=mask)[:, :10], encoder(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("position", SCHEMES)
def test_gradcheck_float64_tiny_stack(position):
    torch.manual_seed(0)
    config = _config(position, dim=8, num_heads=2, num_layers=1, ff_dim=8, max_seq_len=8, max_relative_distance=3)
    decoder = Decoder(config).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: decoder(x), (x,))


def test_learned_positions_beyond_max_seq_len_say_how_to_fix():
    decoder = Decoder(_config("learned", max_seq_len=8))
    with pytest.raises(ValueError, match="exceeds max_seq_len=8.*position='relative'"):
        decoder(torch.randn(1, 9, 32))


def test_wrong_width_and_bad_head_count_are_clear_errors():
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        TransformerConfig(dim=30, num_heads=4)
    with pytest.raises(ValueError, match=r"expected input \(batch, seq, dim=32\)"):
        Encoder(_config("none"))(torch.randn(2, 5, 16))
    with pytest.raises(ValueError, match="cross-attention"):
        MultiHeadAttention(32, 4, causal=True, context_dim=16)


@pytest.mark.parametrize("stack", [Encoder, Decoder])
@pytest.mark.parametrize("position", SCHEMES)
def test_first_outputs_only_equal_the_full_stack_sliced_values_and_gradients(stack, position):
    torch.manual_seed(0)
    model = stack(_config(position)).eval()
    x = torch.randn(2, 17, 32, requires_grad=True)
    short = model(x, num_outputs=3)
    full = model(x)[:, :3]
    assert short.shape == (2, 3, 32)
    torch.testing.assert_close(short, full, atol=1e-5, rtol=0)
    weights = torch.randn_like(full)
    parameters = [x, *model.parameters()]
    short_grads = torch.autograd.grad((short * weights).sum(), parameters)
    full_grads = torch.autograd.grad((full * weights).sum(), parameters)
    for got, expected in zip(short_grads, full_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    padding = torch.zeros(2, 17, dtype=torch.bool)
    padding[1, 3:] = True  # inside the kept positions and beyond
    kept = ~padding[:, :5, None]  # compare real positions (a padded query's output is arbitrary)
    torch.testing.assert_close(
        model(x, key_padding_mask=padding, num_outputs=5) * kept, model(x, key_padding_mask=padding)[:, :5] * kept,
        atol=1e-5, rtol=0,
    )  # fmt: skip
    with pytest.raises(ValueError, match="num_outputs"):
        model(x, num_outputs=18)


@pytest.mark.parametrize("padded", [False, True])
def test_bf16_training_attention_on_cpu_matches_naive_attention(padded):
    # Under bf16 autocast the CPU path computes attention whose backward will run in float32
    # (multimodal/layers/sdpa.py): outputs and gradients must still be those of the bf16 inputs,
    # handed back in bf16.
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 17, 16, generator=g).bfloat16().requires_grad_() for _ in range(3))
    padding = torch.zeros(2, 17, dtype=torch.bool)
    if padded:
        padding[1, 13:] = True
    allowed = ~padding[:, None, :].expand(2, 17, 17) & torch.ones(17, 17, dtype=torch.bool).tril()
    with torch.autocast("cpu", torch.bfloat16):
        out = attend(q, k, v, causal=True, key_padding_mask=padding if padded else None)
    assert out.dtype == torch.bfloat16
    weights = torch.randn(out.shape, generator=g)
    (out.float() * weights).sum().backward()
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = naive_attention(*leaves, allowed)
    (expected * weights.double()).sum().backward()
    torch.testing.assert_close(out.double(), expected.detach(), atol=2e-2, rtol=1e-2)
    for got, want in zip((q, k, v), leaves, strict=True):
        assert got.grad.dtype == torch.bfloat16
        torch.testing.assert_close(got.grad.double(), want.grad, atol=3e-2, rtol=2e-2)


def test_bf16_cpu_attention_runs_in_float32_only_for_short_trained_sequences(monkeypatch):
    # PyTorch's 16-bit CPU attention trains slower than float32 up to 512 keys and faster beyond
    # (docs/benchmarks.md): only short sequences whose backward will run are handed over in float32.
    import torch.nn.functional as F

    from multimodal.layers.sdpa import FLOAT32_TRAINING_MAX_KEYS

    seen = []
    original = F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        seen.append(q.dtype)
        return original(q, k, v, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)

    def run(length, grad):
        q, k, v = (torch.randn(1, 2, length, 8).bfloat16().requires_grad_(grad) for _ in range(3))
        with torch.autocast("cpu", torch.bfloat16):
            out = attend(q, k, v, causal=True)
        assert out.dtype == torch.bfloat16
        return seen.pop()

    assert run(FLOAT32_TRAINING_MAX_KEYS, grad=True) == torch.float32
    assert run(FLOAT32_TRAINING_MAX_KEYS + 1, grad=True) == torch.bfloat16
    assert run(17, grad=False) == torch.bfloat16
    with torch.no_grad():
        assert run(17, grad=True) == torch.bfloat16

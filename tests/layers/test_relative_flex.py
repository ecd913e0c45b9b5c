"""FlexAttention relative attention against the naive Shaw et al. reference (CPU forward, CUDA gradients)."""

import pytest
import torch
from test_relative import naive_shaw_attention

from multimodal.layers.positions.relative import RelativePositionEmbedding, relative_attention


def _inputs(batch, heads, length, head_dim, device="cpu", dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, length, head_dim, generator=g, dtype=dtype).to(device) for _ in range(3)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("max_distance", [5, 200])  # clipped, and longer than the sequence
def test_flex_forward_matches_naive_shaw_with_padding(causal, max_distance):
    table = RelativePositionEmbedding(2, 16, max_distance, causal)
    q, k, v = _inputs(2, 2, 70, 16)
    padding = torch.zeros(2, 70, dtype=torch.bool)
    padding[1, -9:] = True
    with torch.no_grad():
        flex = relative_attention(q, k, v, table, causal=causal, key_padding_mask=padding, backend="flex")
        naive = naive_shaw_attention(q, k, v, table.weight, causal=causal, max_distance=max_distance,
                                     key_padding_mask=padding)  # fmt: skip
    keep = ~padding[:, None, :, None]
    torch.testing.assert_close(flex * keep, naive * keep, atol=2e-5, rtol=0)


@pytest.mark.parametrize("max_distance", [7, 100])
def test_flex_forward_with_query_offset_gives_the_rows_of_the_full_attention(max_distance):
    table = RelativePositionEmbedding(2, 16, max_distance, causal=True)
    q, k, v = _inputs(1, 2, 48, 16)
    with torch.no_grad():
        full = naive_shaw_attention(q, k, v, table.weight, causal=True, max_distance=max_distance)
        tail = relative_attention(q[:, :, 40:], k, v, table, causal=True, query_offset=40, backend="flex")
    torch.testing.assert_close(tail, full[:, :, 40:], atol=2e-5, rtol=0)


def test_auto_backend_takes_the_skewed_kernel_on_cpu_and_flex_refuses_dropout():
    table = RelativePositionEmbedding(2, 16, 8, causal=True)
    q, k, v = (x.requires_grad_() for x in _inputs(1, 2, 20, 16))
    out = relative_attention(q, k, v, table, causal=True)
    assert out.grad_fn is not None and "RelativeAttention" in type(out.grad_fn).__name__
    with pytest.raises(ValueError, match="dropout"):
        relative_attention(q, k, v, table, causal=True, dropout_p=0.1, backend="flex")
    with pytest.raises(ValueError, match="backend"):
        relative_attention(q, k, v, table, causal=True, backend="triton")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled FlexAttention backward needs CUDA")
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("max_distance", [64, 1000])
def test_flex_on_cuda_matches_naive_values_and_gradients(causal, max_distance):
    table = RelativePositionEmbedding(4, 32, max_distance, causal).cuda()
    q, k, v = (x.requires_grad_() for x in _inputs(2, 4, 300, 32, device="cuda"))
    padding = torch.zeros(2, 300, dtype=torch.bool, device="cuda")
    padding[0, -17:] = True
    keep = ~padding[:, None, :, None]
    flex = relative_attention(q, k, v, table, causal=causal, key_padding_mask=padding)  # auto: flex on CUDA
    naive = naive_shaw_attention(q, k, v, table.weight, causal=causal, max_distance=max_distance,
                                 key_padding_mask=padding)  # fmt: skip
    torch.testing.assert_close(flex * keep, naive * keep, atol=1e-4, rtol=0)
    weights = torch.randn_like(flex) * keep
    flex_grads = torch.autograd.grad((flex * weights).sum(), [q, k, v, table.weight])
    naive_grads = torch.autograd.grad((naive * weights).sum(), [q, k, v, table.weight])
    for got, expected in zip(flex_grads, naive_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled FlexAttention needs CUDA")
def test_flex_on_cuda_compiles_each_new_length():
    """A second and third length recompile (they failed to lower with symbolic sizes in torch 2.11)."""
    for length in (128, 200, 384):
        table = RelativePositionEmbedding(2, 32, length - 1, causal=True).cuda()
        q, k, v = _inputs(1, 2, length, 32, device="cuda", seed=length)
        flex = relative_attention(q, k, v, table, causal=True, backend="flex")
        naive = naive_shaw_attention(q, k, v, table.weight, causal=True, max_distance=length - 1)
        torch.testing.assert_close(flex, naive, atol=1e-4, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the cuDNN attention backend is CUDA's")
@pytest.mark.parametrize("length", [1000, 1024])
def test_skewed_kernel_on_cuda_matches_naive_in_bf16(length):
    """The skewed kernel's strided bias view through SDPA on CUDA (a 'misaligned address' in cuDNN)."""
    table = RelativePositionEmbedding(4, 64, length - 1, causal=True).cuda()
    q, k, v = _inputs(1, 4, length, 64, device="cuda", dtype=torch.bfloat16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        skew = relative_attention(q, k, v, table, causal=True, backend="skew")
    naive = naive_shaw_attention(q.float(), k.float(), v.float(), table.weight, causal=True, max_distance=length - 1)
    torch.testing.assert_close(skew.float(), naive, atol=3e-2, rtol=0)

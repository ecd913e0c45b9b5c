"""The fused C++ relative-attention kernel against naive Shaw attention computed in float64."""

import os
import warnings

import pytest
import torch
from test_relative import naive_shaw_attention

from multimodal.layers.positions import relative_cpu
from multimodal.layers.positions.relative import RelativePositionEmbedding, relative_attention

needs_kernel = pytest.mark.skipif(relative_cpu.kernel() is None, reason="the fused kernel did not build here")


def _float32_inputs(batch, heads, q_len, k_len, head_dim, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, head_dim, generator=g)
    k, v = (torch.randn(batch, heads, k_len, head_dim, generator=g) for _ in range(2))
    return [x.requires_grad_() for x in (q, k, v)]


# (q_len, k_len, query_offset, block_size), below and above the kernel's 512-key tiles; with an
# offset the queries are the last ones of a causal sequence.
SHAPES = [(70, 70, 0, 16), (37, 37, 0, 64), (600, 600, 0, 64)]
OFFSET_SHAPES = [(21, 50, 29, 8), (45, 530, 485, 16)]


@needs_kernel
@pytest.mark.parametrize(("causal", "q_len", "k_len", "query_offset", "block_size"),
                         [(c, *shape) for c in (True, False) for shape in SHAPES] + [(True, *s) for s in OFFSET_SHAPES])  # fmt: skip
@pytest.mark.parametrize("max_distance", [5, 700])  # clipped, and longer than the sequence
@pytest.mark.parametrize("padded", [False, True])
def test_fused_matches_naive_float64_values_and_gradients(causal, max_distance, q_len, k_len, query_offset,
                                                          block_size, padded):  # fmt: skip
    table = RelativePositionEmbedding(3, 16, max_distance, causal)
    q, k, v = _float32_inputs(2, 3, q_len, k_len, 16, seed=q_len + max_distance)
    padding = torch.zeros(2, k_len, dtype=torch.bool)
    if padded:
        padding[1, -4:] = True
    mask = padding if padded else None
    ours = relative_attention(q, k, v, table, causal=causal, query_offset=query_offset, key_padding_mask=mask,
                              block_size=block_size, backend="fused")  # fmt: skip
    as64 = [x.detach().double().requires_grad_() for x in (q, k, v, table.weight)]
    naive = naive_shaw_attention(*as64, causal=causal, max_distance=max_distance, query_offset=query_offset,
                                 key_padding_mask=mask)  # fmt: skip
    keep = ~padding[:, None, query_offset:, None]  # outputs at padded queries are don't-care
    torch.testing.assert_close(ours * keep, (naive * keep).float(), atol=2e-5, rtol=0)
    weights = torch.randn(ours.shape, generator=torch.Generator().manual_seed(1)) * keep
    ours_grads = torch.autograd.grad((ours * weights).sum(), [q, k, v, table.weight])
    naive_grads = torch.autograd.grad((naive * weights.double()).sum(), as64)
    for got, expected in zip(ours_grads, naive_grads, strict=True):
        torch.testing.assert_close(got, expected.float(), atol=5e-5, rtol=1e-4)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_inputs_are_computed_in_float32_and_handed_back_in_their_dtype(dtype):
    table = RelativePositionEmbedding(2, 16, 700, causal=True)
    q, k, v = (x.detach().to(dtype).requires_grad_() for x in _float32_inputs(2, 2, 600, 600, 16, seed=3))
    ours = relative_attention(q, k, v, table, causal=True, backend="fused")
    assert ours.dtype == dtype
    as64 = [x.detach().double().requires_grad_() for x in (q, k, v, table.weight)]
    naive = naive_shaw_attention(*as64, causal=True, max_distance=700)
    # the only 16-bit roundings are the output's and the gradients' own (one ulp: 2^-8 relative in bf16)
    ulp = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11
    torch.testing.assert_close(ours.double(), naive, atol=ulp, rtol=ulp)
    weights = torch.randn(ours.shape, generator=torch.Generator().manual_seed(1))
    ours_grads = torch.autograd.grad((ours.float() * weights).sum(), [q, k, v, table.weight])
    naive_grads = torch.autograd.grad((naive * weights.double()).sum(), as64)
    for got, expected, tensor in zip(ours_grads, naive_grads, [q, k, v, table.weight], strict=True):
        assert got.dtype == tensor.dtype
        torch.testing.assert_close(got.double(), expected, atol=4 * ulp, rtol=ulp)


@needs_kernel
def test_auto_takes_the_fused_kernel_on_the_cpu_and_the_skew_kernel_for_float64_and_dropout(monkeypatch):
    calls = []
    original = relative_cpu.FusedRelativeAttention.apply
    monkeypatch.setattr(relative_cpu.FusedRelativeAttention, "apply", lambda *a: calls.append(1) or original(*a))
    table = RelativePositionEmbedding(2, 8, 16, causal=True)
    q, k, v = _float32_inputs(1, 2, 12, 12, 8, seed=0)
    relative_attention(q, k, v, table, causal=True)
    relative_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), table, causal=True)
    assert calls == [1, 1]
    relative_attention(q.double(), k.double(), v.double(), table.double(), causal=True)  # float64: skew
    relative_attention(q, k, v, table.float(), causal=True, dropout_p=0.1)  # dropout: skew
    relative_attention(q, k, v, table, causal=True, backend="skew")
    assert calls == [1, 1]
    with pytest.raises(ValueError, match="backend='fused' needs float32/bf16/fp16 CPU tensors"):
        relative_attention(q, k, v, table, causal=True, dropout_p=0.1, backend="fused")


def test_a_kernel_that_cannot_be_built_warns_once_and_leaves_the_skew_kernel(monkeypatch):
    import torch.utils.cpp_extension

    def no_compiler(*args, **kwargs):
        raise RuntimeError("error: no C++ compiler here\nmore lines")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", no_compiler)
    relative_cpu.kernel.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not be built \\(error: no C\\+\\+ compiler here\\)"):
            assert relative_cpu.kernel() is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the second call neither builds nor warns again
            table = RelativePositionEmbedding(2, 8, 16, causal=True)
            q, k, v = (x.detach() for x in _float32_inputs(1, 2, 12, 12, 8, seed=0))
            out = relative_attention(q, k, v, table, causal=True)
        naive = naive_shaw_attention(q, k, v, table.weight, causal=True, max_distance=16)
        torch.testing.assert_close(out, naive, atol=1e-5, rtol=0)
    finally:
        relative_cpu.kernel.cache_clear()


def test_each_checkout_builds_in_a_folder_of_its_own(monkeypatch, tmp_path):
    # ninja's rules in a build folder name the source's path, so two checkouts sharing one folder rebuild in turns
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache"))
    sources = [tmp_path / checkout / "relative_cpu.cpp" for checkout in ("main", "worktree")]
    folders = [relative_cpu._build_folder("kernel_x", source) for source in sources]
    assert folders[0] != folders[1]
    assert all(folder.is_dir() and folder.parent == tmp_path / "cache" for folder in folders)
    assert all(folder.name.startswith(f"kernel_x-torch{torch.__version__}-") for folder in folders)
    assert relative_cpu._build_folder("kernel_x", sources[0]) == folders[0]  # the same checkout: the same folder


def test_a_build_is_announced_when_none_is_there_or_the_source_is_newer(tmp_path):
    source = tmp_path / "relative_cpu.cpp"
    source.write_text("// kernel")
    os.utime(source, (1_000, 1_000))
    assert relative_cpu._needs_build(tmp_path, "kernel_x", source)  # nothing built
    (tmp_path / "kernel_x_v1.so").write_bytes(b"")
    os.utime(tmp_path / "kernel_x_v1.so", (2_000, 2_000))
    (tmp_path / "other.so").write_bytes(b"")  # another name's build does not count
    assert not relative_cpu._needs_build(tmp_path, "kernel_x", source)
    os.utime(source, (3_000, 3_000))  # edited after the build: ninja compiles again
    assert relative_cpu._needs_build(tmp_path, "kernel_x", source)
    assert relative_cpu._needs_build(tmp_path, "kernel_y", source)


@needs_kernel
def test_a_first_build_in_an_empty_cache_says_so_once_and_gives_the_same_kernel(monkeypatch, tmp_path, capsys):
    import torch.utils.cpp_extension

    # torch counts the builds of one name in one process (a build elsewhere is version 1, then 2): the count is
    # put back afterwards, so the next kernel() loads the build in the usual cache instead of compiling anew
    versions = dict(torch.utils.cpp_extension.JIT_EXTENSION_VERSIONER.entries)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    relative_cpu.kernel.cache_clear()
    try:
        built = relative_cpu.kernel()
        assert "building the fused relative-attention kernel" in capsys.readouterr().err
        assert list(tmp_path.glob("multimodal_relative_cpu_*/*.so"))
        relative_cpu.kernel.cache_clear()
        assert relative_cpu.kernel() is not None
        assert "building" not in capsys.readouterr().err  # found in the cache: no notice
        table = RelativePositionEmbedding(2, 8, 16, causal=True)
        q, k, v = (x.detach() for x in _float32_inputs(1, 2, 12, 12, 8, seed=0))
        out, _ = built.forward(q, k, v, table.weight.detach().contiguous(), None, True, 0, 16, 64)
        naive = naive_shaw_attention(q, k, v, table.weight, causal=True, max_distance=16)
        torch.testing.assert_close(out, naive, atol=1e-5, rtol=0)
    finally:
        torch.utils.cpp_extension.JIT_EXTENSION_VERSIONER.entries = versions
        relative_cpu.kernel.cache_clear()

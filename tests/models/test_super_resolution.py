"""Super-resolution models and tiled upscaling: sizes, bicubic start, seamless tiles, cached sampling."""

import numpy as np
import pytest
import torch
from PIL import Image

from multimodal.images import blend_weights, sample_high_res, tile_starts, upscale
from multimodal.models.config import ConditionalSuperResolutionConfig, SuperResolutionConfig
from multimodal.models.super_resolution import (
    ConditionalImageTransformer,
    SuperResolutionRegressor,
    bicubic_upsample,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _pil_bicubic(images, scale):
    """PIL's bicubic resize (a = -0.5, the MATLAB kernel) of each channel as a float image: the independent reference."""
    batch, channels, height, width = images.shape
    out = [
        np.asarray(Image.fromarray(channel.numpy(), mode="F").resize((width * scale, height * scale), Image.BICUBIC))
        for channel in images.reshape(-1, height, width)
    ]
    return torch.from_numpy(np.stack(out)).reshape(batch, channels, height * scale, width * scale).clamp(0, 1)


def _regressor(num_layers=1, patch_size=1, random_head=True, stem_channels=4, residual_groups=0):
    torch.manual_seed(0)
    config = SuperResolutionConfig(dim=16, num_layers=num_layers, num_heads=2, ff_dim=32, scale=2, crop_size=16,
                                   patch_size=patch_size, local_query_shape=(2, 2), local_memory_shape=(1, 1),
                                   stem_channels=stem_channels, residual_groups=residual_groups)  # fmt: skip
    model = SuperResolutionRegressor(config).eval()
    if random_head:  # the last layer starts at zero (output = bicubic); make the encoder matter
        torch.nn.init.normal_(model.tail.weight if stem_channels else model.head.weight, std=0.3)
    return model


@pytest.mark.parametrize("stem_channels", [0, 4])
def test_regressor_starts_exactly_at_bicubic_upsampling(stem_channels):
    model = _regressor(random_head=False, stem_channels=stem_channels)
    low = torch.rand(2, 3, 9, 7)
    torch.testing.assert_close(model(low), _pil_bicubic(low, 2), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("patch_size,stem_channels", [(1, 4), (2, 4), (2, 0)])
def test_regressor_upscales_odd_sizes(patch_size, stem_channels):
    model = _regressor(patch_size=patch_size, stem_channels=stem_channels)
    assert model(torch.rand(1, 3, 11, 13)).shape == (1, 3, 22, 26)


def test_regressor_with_stem_upscales_by_four_and_starts_at_bicubic():
    config = SuperResolutionConfig(dim=16, num_layers=1, num_heads=2, ff_dim=32, scale=4, crop_size=16,
                                   patch_size=2, local_query_shape=(2, 2), local_memory_shape=(1, 1), stem_channels=4)  # fmt: skip
    model = SuperResolutionRegressor(config).eval()
    low = torch.rand(2, 3, 9, 7)
    torch.testing.assert_close(model(low), _pil_bicubic(low, 4), atol=1e-5, rtol=1e-5)  # (2, 3, 36, 28): the tail starts at zero


@pytest.mark.parametrize("num_layers,patch_size,residual_groups", [(1, 2, 0), (2, 1, 2), (2, 2, 1)])
def test_regressor_output_pixel_depends_only_on_inputs_within_the_receptive_radius(num_layers, patch_size,
                                                                                   residual_groups):
    """Changing one input pixel changes outputs only within ``receptive_radius`` of it (and some do change)."""
    model = _regressor(num_layers=num_layers, patch_size=patch_size, residual_groups=residual_groups)
    image = torch.rand(1, 3, 40, 40)
    changed = image.clone()
    changed[..., 20, 20] += 0.5
    moved = (model(changed) - model(image)).abs().amax(dim=(0, 1)) > 1e-6  # (80, 80) high-res pixels
    rows, cols = moved.nonzero(as_tuple=True)
    reach = max((rows // 2 - 20).abs().max(), (cols // 2 - 20).abs().max()).item()
    assert 0 < reach <= model.receptive_radius


def test_residual_groups_close_each_group_with_a_grid_convolution_and_a_residual():
    """SwinIR's body, against a naive per-pixel 3x3 convolution: with every block's residual branch at
    zero (the blocks are identities), group i gives h + conv_i(h), and the body x + conv(norm(h))."""
    model = _regressor(num_layers=4, patch_size=1, residual_groups=2)
    body = model.encoder.encoder
    assert len(body.groups) == 2 and all(len(group.blocks) == 2 for group in body.groups)
    for name, parameter in body.groups.named_parameters():
        if name.endswith(("to_out.weight", "to_out.bias", "down.weight", "down.bias")):
            torch.nn.init.zeros_(parameter)
    for conv in [*body.convs, body.body_conv]:
        torch.nn.init.normal_(conv.weight, std=0.1)
        torch.nn.init.normal_(conv.bias, std=0.1)
    rows, cols, dim = 5, 7, 16
    x = torch.randn(2, rows * cols, dim)

    def naive_conv(conv, tokens):  # tokens (batch, rows * cols, dim), row-major grid, zero padding
        out = torch.zeros_like(tokens)
        for r in range(rows):
            for c in range(cols):
                total = conv.bias.expand(tokens.shape[0], dim).clone()
                for dr in (-1, 0, 1):
                    for dc in (-1, 0, 1):
                        if 0 <= r + dr < rows and 0 <= c + dc < cols:
                            total = total + tokens[:, (r + dr) * cols + c + dc] @ conv.weight[:, :, dr + 1, dc + 1].T
                out[:, r * cols + c] = total
        return out

    expected = x
    for conv in body.convs:
        expected = expected + naive_conv(conv, expected)
    normed = torch.nn.functional.layer_norm(expected, (dim,), body.norm.weight, body.norm.bias, body.norm.eps)
    expected = x + naive_conv(body.body_conv, normed)
    torch.testing.assert_close(body(x, grid_width=cols), expected, atol=1e-5, rtol=1e-5)


def test_residual_groups_must_divide_the_blocks():
    with pytest.raises(ValueError, match="multiple of residual_groups"):
        SuperResolutionConfig(dim=16, num_layers=3, num_heads=2, residual_groups=2)


def test_tiled_upscaling_of_an_odd_image_that_fits_one_tile_equals_untiled():
    model = _regressor()
    image = torch.rand(3, 13, 17)
    tiled = upscale(model, image, tile=32)
    assert tiled.shape == (3, 26, 34)
    torch.testing.assert_close(tiled, model(image[None])[0].clamp(0, 1))


@pytest.mark.parametrize("num_layers,patch_size,stem_channels,residual_groups",
                         [(1, 1, 4, 0), (2, 1, 4, 0), (1, 2, 4, 0), (1, 2, 0, 0), (2, 1, 4, 2)])
def test_tiled_upscaling_of_an_odd_image_has_no_seams(num_layers, patch_size, stem_channels, residual_groups):
    """With the overlap covering the receptive field, every tile is exact where it is blended."""
    model = _regressor(num_layers, patch_size, stem_channels=stem_channels, residual_groups=residual_groups)
    overlap = 4 * model.receptive_radius
    height, width = 29 + overlap, 45 + overlap  # odd, and a few tiles either way
    image = torch.rand(3, height, width)
    untiled = model(image[None])[0].clamp(0, 1)
    tiled = upscale(model, image, tile=overlap + 8, overlap=overlap)
    assert len(tile_starts(height, overlap + 8, overlap, model.alignment[0])) > 2  # really tiled, both ways
    assert len(tile_starts(width, overlap + 8, overlap, model.alignment[1])) > 3
    assert tiled.shape == (3, 2 * height, 2 * width)
    torch.testing.assert_close(tiled, untiled, atol=1e-5, rtol=0)


def test_blend_weights_add_up_to_one_across_tiles():
    starts = tile_starts(50, tile=16, overlap=8, align=2)
    assert starts == [0, 8, 16, 24, 32, 40]
    total = torch.zeros(100)
    for start in starts:
        length = min(16, 50 - start)
        total[start * 2 : (start + length) * 2] += blend_weights(starts, start, length, 16, 2, total)
    torch.testing.assert_close(total, torch.ones(100))


def test_tile_without_stride_is_a_clear_error():
    with pytest.raises(ValueError, match="larger tile or a smaller overlap"):
        tile_starts(100, tile=8, overlap=8)


def _conditional():
    torch.manual_seed(0)
    config = ConditionalSuperResolutionConfig(dim=16, num_layers=1, num_heads=2, ff_dim=32, scale=2,
                                   crop_size=8, num_levels=16, decoder_layers=2, decoder_query_shape=(2, 6),
                                   decoder_memory_shape=(1, 3), local_query_shape=(2, 2), local_memory_shape=(1, 1))  # fmt: skip
    return ConditionalImageTransformer(config).eval()


def test_conditional_image_transformer_cached_sampling_equals_uncached():
    model = _conditional()
    low = torch.rand(2, 3, 2, 3)
    draws = [sample_high_res(model, low, generator=torch.Generator().manual_seed(3), use_cache=use_cache)
             for use_cache in (True, False)]  # fmt: skip
    assert draws[0].shape == (2, 3, 4, 6)
    torch.testing.assert_close(draws[0], draws[1], atol=0, rtol=0)


def test_conditional_image_transformer_is_causal_and_conditioned():
    model = _conditional()
    low = torch.rand(1, 3, 4, 4)
    tokens = torch.randint(0, 16, (1, 96))
    inputs, condition = model.inputs(tokens), model.condition(low)
    logits = model(inputs, condition)
    changed = tokens.clone()
    changed[0, 40] = (changed[0, 40] + 5) % 16
    torch.testing.assert_close(model(model.inputs(changed), condition)[:, :41], logits[:, :41])
    other = model(inputs, model.condition(torch.rand(1, 3, 4, 4)))
    assert (other - logits).abs().max() > 1e-4


def test_autoregressive_tiles_are_upscaled_and_blended():
    model = _conditional()
    out = upscale(model, torch.rand(3, 7, 7), batch_size=16, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, 14, 14) and out.min() >= 0 and out.max() <= 1  # 4 tiles of 4x4, one batch


def test_bicubic_upsample_is_clamped():
    assert bicubic_upsample(torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]]]), 2).max() <= 1

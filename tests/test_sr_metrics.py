"""The super-resolution baseline and scores as SR papers compute them: PIL/MATLAB bicubic, PSNR on Y with the border shaved."""

import numpy as np
import torch
from PIL import Image
from skimage.color import rgb2ycbcr

from multimodal.data.super_resolution import bicubic_downsample
from multimodal.images.metrics import luma, psnr_y
from multimodal.models.super_resolution import bicubic_upsample


def _photo(height=24, width=32, seed=0):
    rng = np.random.default_rng(seed)
    smooth = np.cumsum(np.cumsum(rng.normal(size=(height, width, 3)), 0), 1)
    return ((smooth - smooth.min()) / np.ptp(smooth) * 255).round().astype(np.uint8)


def _tensor(array):
    return torch.from_numpy(array.astype(np.float32) / 255).permute(2, 0, 1)


def test_bicubic_up_and_down_are_pils_filter():
    photo = _photo()
    for scale in (2, 3):
        up = Image.fromarray(photo).resize((32 * scale, 24 * scale), Image.BICUBIC)
        ours = bicubic_upsample(_tensor(photo)[None], scale)[0]
        assert (ours - _tensor(np.asarray(up))).abs().max() <= 1.5 / 255  # PIL rounds to 8 bits
    down = Image.fromarray(photo).resize((16, 12), Image.BICUBIC)
    assert (bicubic_downsample(_tensor(photo), 2) - _tensor(np.asarray(down))).abs().max() <= 1.5 / 255


def test_luma_is_matlabs_rgb2ycbcr_and_psnr_y_shaves_the_border():
    photo = _tensor(_photo())
    expected = rgb2ycbcr(photo.permute(1, 2, 0).numpy())[..., 0]
    np.testing.assert_allclose(luma(photo)[0].numpy(), expected, atol=1e-3)
    noisy = (photo + 0.05 * torch.randn_like(photo, generator=None)).clamp(0, 1)
    border = 3
    difference = (luma(noisy) - luma(photo))[:, border:-border, border:-border].double()
    expected_psnr = 10 * np.log10(255.0**2 / float(difference.square().mean()))
    assert abs(float(psnr_y(noisy, photo, border)) - expected_psnr) < 1e-6
    spoilt = noisy.clone()
    spoilt[:, :border] = 1 - photo[:, :border]  # damage only the shaved border
    assert abs(float(psnr_y(spoilt, photo, border)) - float(psnr_y(noisy, photo, border))) < 1e-9


def _cubic(x):
    """Keys' cubic convolution kernel with a = -0.5, the one MATLAB's imresize uses."""
    x = np.abs(x)
    return np.where(x <= 1, 1.5 * x**3 - 2.5 * x**2 + 1, np.where(x < 2, -0.5 * x**3 + 2.5 * x**2 - 4 * x + 2, 0.0))


def _matlab_upsample_1d(values, scale, axis):
    """MATLAB ``imresize(..., 'bicubic')`` upsampling along ``axis``: 4 taps, symmetric padding at the edges."""
    size = values.shape[axis]
    out = []
    for x in range(size * scale):
        u = (x + 0.5) / scale - 0.5
        taps = np.floor(u).astype(int) + np.arange(-1, 3)
        weights = _cubic(u - taps)
        taps = np.where(taps < 0, -taps - 1, np.where(taps >= size, 2 * size - taps - 1, taps))  # mirror
        out.append(np.tensordot(np.take(values, taps, axis=axis), weights / weights.sum(), axes=([axis], [0])))
    return np.moveaxis(np.stack(out), 0, axis)


def test_bicubic_upsampling_is_matlabs_away_from_the_border():
    photo = _photo().astype(np.float64) / 255
    for scale in (2, 3):
        reference = _matlab_upsample_1d(_matlab_upsample_1d(photo, scale, 0), scale, 1)
        ours = bicubic_upsample(torch.from_numpy(photo).permute(2, 0, 1)[None].float(), scale)[0]
        ours = ours.permute(1, 2, 0).double().numpy()
        inner = (slice(2 * scale, -2 * scale), slice(2 * scale, -2 * scale))
        np.testing.assert_allclose(ours[inner], reference[inner], atol=1e-5)
        # At the border PIL renormalises the kernel where MATLAB mirrors the image: close, not equal.
        assert np.abs(ours - reference).max() < 0.05

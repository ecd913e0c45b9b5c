"""The super-resolution baseline and scores as SR papers compute them: PIL/MATLAB bicubic, PSNR on Y with the border shaved."""

import numpy as np
import torch
from PIL import Image
from skimage.color import rgb2ycbcr

from multimodal.data.super_resolution import bicubic_downsample
from multimodal.models.super_resolution import bicubic_upsample
from multimodal.sr_metrics import luma, psnr_y


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

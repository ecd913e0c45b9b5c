"""Super-resolution scores as the papers report them: PSNR on the luma (Y) channel with the border shaved.

SR papers (SRCNN onwards, EDSR, SwinIR) convert RGB to the Y of ITU-R BT.601 (MATLAB's
``rgb2ycbcr``: ``Y = 16 + 65.481 R + 128.553 G + 24.966 B`` for ``R, G, B`` in ``[0, 1]``, ``Y`` in
``[16, 235]``), drop ``scale`` pixels at each border (where the upsampler has no neighbours) and
compute PSNR with a peak of 255. Greyscale images are their own luma.
"""

from __future__ import annotations

import torch
from torch import Tensor


def luma(images: Tensor) -> Tensor:
    """BT.601 luma ``(..., 1, h, w)`` in ``[16, 235]`` of RGB ``(..., 3, h, w)`` in ``[0, 1]``; greyscale ``x 255``."""
    if images.shape[-3] == 1:
        return images * 255
    weights = images.new_tensor([65.481, 128.553, 24.966]).view(3, 1, 1)
    return 16 + (images * weights).sum(-3, keepdim=True)


def psnr_y(output: Tensor, target: Tensor, border: int) -> Tensor:
    """PSNR (dB) on the luma channel with ``border`` pixels shaved at each side; one value per image ``(...,)``.

    Args:
        output: ``(..., channels, h, w)`` in ``[0, 1]``.
        target: The same shape.
        border: Pixels dropped at each edge (the papers use the scale factor).
    """
    if output.shape != target.shape:
        raise ValueError(f"output {tuple(output.shape)} and target {tuple(target.shape)} differ")
    crop = (..., slice(border, -border or None), slice(border, -border or None))
    difference = luma(output.double())[crop] - luma(target.double())[crop]
    mse = difference.square().mean(dim=(-3, -2, -1))
    return 10 * torch.log10(255.0**2 / mse.clamp(min=1e-12))

"""Stochastic depth ("drop path", Huang et al. 2016), as DeiT and timm train ViTs.

A residual branch ``x + f(x)`` becomes ``x + drop_path(f(x))``: in training each *sample* of the
batch skips the branch with probability ``p`` and keeps it scaled by ``1 / (1 - p)`` otherwise, so
the expected output is unchanged; in evaluation the branch passes through untouched (exact
identity). :class:`~multimodal.layers.TransformerStack` gives block ``i`` of ``L`` the rate
``drop_path * i / (L - 1)`` (0 for the first block, the full rate for the last), as
``torch.linspace(0, drop_path, L)`` does in timm.
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["DropPath", "drop_path_rates"]


class DropPath(nn.Module):
    """Zeroes whole samples of a residual branch with probability ``p`` in training, scaling the rest by ``1/(1-p)``.

    Args:
        p: Drop probability, in ``[0, 1)``; 0 is the identity.
    """

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"drop path rate must lie in [0, 1), got {p}")
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        """``(batch, ...)`` in and out; the identity in eval mode or with ``p = 0``."""
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
        return x * mask.div_(keep)

    def extra_repr(self) -> str:
        return f"p={self.p:g}"


def drop_path_rates(rate: float, num_layers: int) -> list[float]:
    """Per-block rates rising linearly from 0 (first block) to ``rate`` (last), timm's ``linspace``."""
    if num_layers == 1:
        return [0.0]
    return [rate * i / (num_layers - 1) for i in range(num_layers)]

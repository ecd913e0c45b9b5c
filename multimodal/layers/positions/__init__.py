"""How attention knows where tokens are: absolute positions added to the input, and the schemes inside attention.

* :mod:`~multimodal.layers.positions.base` — :class:`AttentionPosition`, the one interface every
  scheme inside attention implements (rotate queries and keys, bias logits, or a fused kernel);
* :mod:`~multimodal.layers.positions.absolute` — sinusoidal and learned input positions;
* :mod:`~multimodal.layers.positions.rotary` — rotary embeddings (RoPE) with linear / NTK scaling;
* :mod:`~multimodal.layers.positions.alibi` — ALiBi linear distance biases;
* :mod:`multimodal.layers.positions.relative`, :mod:`multimodal.layers.positions.relative2d`,
  :mod:`~multimodal.layers.positions.grid` — learned 1D distances (Shaw / Music Transformer), 2D
  offsets of patch grids, row and column offsets of local 2D attention;
* :mod:`~multimodal.layers.positions.build` — the objects a config names;
* :mod:`~multimodal.layers.positions.resample` — every position table moved to another length or grid.
"""

from multimodal.layers.positions.absolute import LearnedPositions, SinusoidalPositions
from multimodal.layers.positions.alibi import ALiBiPositions, alibi_slopes
from multimodal.layers.positions.base import AttentionPosition
from multimodal.layers.positions.rotary import RotaryPositions

__all__ = [
    "ALiBiPositions",
    "AttentionPosition",
    "LearnedPositions",
    "RotaryPositions",
    "SinusoidalPositions",
    "alibi_slopes",
]

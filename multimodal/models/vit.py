"""Vision Transformer classifier built from the shared blocks (Dosovitskiy et al. 2021).

Images are cut into non-overlapping patches (:func:`multimodal.tokenizers.image.patchify`, each
flattened ``(p1 p2 c)``), linearly embedded, prefixed with a class token (``pooling="cls"``), and
run through a bidirectional :class:`~multimodal.layers.Encoder` (pre-norm blocks, fused ``qkv``,
exact GELU, final LayerNorm — timm's ``VisionTransformer`` layout). Positions are either learned
absolute embeddings added to the tokens (``position="learned"``, ViT's own) or 2D relative offsets
inside every attention layer (``position="relative2d"``, :mod:`multimodal.layers.relative2d`).

Names follow timm where a concept is the same: ``patch_embed``, ``cls_token``, ``forward_features``,
``forward_head``, ``head``, ``no_weight_decay``. The absolute position table is
``encoder.positions.weight`` ``(1 + num_patches, dim)`` (timm's ``pos_embed`` without its batch axis);
a timm conv patch weight ``(dim, c, p, p)`` maps to ``patch_embed.weight`` with
``rearrange(w, "d c p1 p2 -> d (p1 p2 c)")``.

Loading a state dict made for another image size resamples the position parameters to this
model's grid: absolute embeddings bicubically (as timm's ``resample_abs_pos_embed``), 2D relative
offset tables linearly (:func:`~multimodal.layers.relative2d.resample_offset_table`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multimodal.layers.relative2d import resample_offset_table
from multimodal.layers.stack import Encoder
from multimodal.models.config import ViTConfig
from multimodal.tokenizers.image import patchify

__all__ = ["ViT", "resample_positions"]


class ViT(nn.Module):
    """Patch embedding, optional class token, :class:`~multimodal.layers.Encoder`, linear head.

    Args:
        config: Sizes, image geometry, position scheme, pooling and number of classes.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = nn.Linear(config.patch_dim, config.dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.dim)) if config.pooling == "cls" else None
        self.encoder = Encoder(config)
        self.head = nn.Linear(config.dim, config.num_classes) if config.num_classes > 0 else nn.Identity()
        self.apply(_init_weights)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=0.02)
        self.register_load_state_dict_pre_hook(_resample_position_parameters)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches (1 with a class token, else 0)."""
        return self.config.num_prefix_tokens

    def forward(self, images: Tensor) -> Tensor:
        """Class logits ``(batch, num_classes)`` of images ``(batch, channels, height, width)``.

        With class-token pooling only the class token's output is needed, so the last block
        computes that one token (``Encoder(num_outputs=1)``): the same logits as
        ``forward_head(forward_features(images))``, for about 7 % less work.
        """
        num_outputs = self.num_prefix_tokens if self.config.pooling == "cls" else None
        return self.forward_head(self.encoder(self._embed(images), num_outputs=num_outputs))

    def forward_features(self, images: Tensor) -> Tensor:
        """Normalised tokens ``(batch, prefix + num_patches, dim)`` of images ``(batch, c, h, w)``."""
        return self.encoder(self._embed(images))

    def _embed(self, images: Tensor) -> Tensor:
        """Patch embeddings, class token first: ``(batch, prefix + num_patches, dim)``."""
        self._check(images)
        tokens = self.patch_embed(patchify(images, self.config.patch_size))  # (b, num_patches, dim)
        if self.cls_token is not None:
            tokens = torch.cat(
                [self.cls_token.expand(tokens.shape[0], -1, -1).to(tokens.dtype), tokens], dim=1
            )
        return tokens

    def forward_head(self, features: Tensor, pre_logits: bool = False) -> Tensor:
        """Pools ``(batch, tokens, dim)`` features (class token or patch mean) and classifies them.

        Args:
            features: Output of :meth:`forward_features`.
            pre_logits: Return the pooled ``(batch, dim)`` vector instead of the logits.
        """
        if self.config.pooling == "cls":
            pooled = features[:, 0]
        else:
            pooled = features[:, self.num_prefix_tokens :].mean(dim=1)
        return pooled if pre_logits else self.head(pooled)

    def no_weight_decay(self) -> set[str]:
        """Names of parameters to train without weight decay: tokens, positions, norms, biases."""
        return {
            name
            for name, parameter in self.named_parameters()
            if parameter.dim() < 2 or name == "cls_token" or "positions" in name or "relative_2d" in name
        }

    def _check(self, images: Tensor) -> None:
        height, width = (
            self.config.grid_size[0] * self.config.patch_size,
            self.config.grid_size[1] * self.config.patch_size,
        )
        expected = (self.config.channels, height, width)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"expected images (batch, {', '.join(map(str, expected))}), got {tuple(images.shape)}; "
                f"resize them, or build the ViT for their size (ViTConfig.image_size, channels): a state "
                f"dict trained at another size loads by interpolating its positions"
            )


def resample_positions(
    weight: Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int], num_prefix_tokens: int
) -> Tensor:
    """Bicubic resampling of absolute position embeddings ``(prefix + rows * cols, dim)`` to a new grid.

    The prefix (class token) rows are kept as they are; the grid rows are viewed as an image of
    ``dim`` channels and resized with antialiasing (timm's ``resample_abs_pos_embed``).

    Args:
        weight: ``(num_prefix_tokens + old_rows * old_cols, dim)``.
        old_grid: ``(rows, cols)`` the embeddings were trained for.
        new_grid: ``(rows, cols)`` wanted.
        num_prefix_tokens: Leading rows that are not on the grid.

    Returns:
        ``(num_prefix_tokens + new_rows * new_cols, dim)``.
    """
    if tuple(old_grid) == tuple(new_grid):
        return weight
    prefix, grid = weight[:num_prefix_tokens], weight[num_prefix_tokens:]
    if grid.shape[0] != old_grid[0] * old_grid[1]:
        raise ValueError(f"{grid.shape[0]} grid embeddings do not fill an {old_grid[0]}x{old_grid[1]} grid")
    image = grid.float().T.reshape(1, -1, *old_grid)  # (1, dim, rows, cols)
    image = F.interpolate(image, size=tuple(new_grid), mode="bicubic", antialias=True, align_corners=False)
    return torch.cat([prefix, image.reshape(weight.shape[1], -1).T.to(weight.dtype)])


def _resample_position_parameters(module: ViT, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """Load-state-dict pre-hook: fits position parameters of another grid to this model's grid."""
    new_grid = module.config.grid_size
    key = prefix + "encoder.positions.weight"
    if key in state_dict and module.encoder.positions is not None:
        weight = state_dict[key]
        if weight.shape != module.encoder.positions.weight.shape:
            num_grid = weight.shape[0] - module.num_prefix_tokens
            side = math.isqrt(max(num_grid, 0))
            if side * side != num_grid:
                raise ValueError(
                    f"cannot tell the grid of {num_grid} position embeddings in {key} (not a square); "
                    f"resample them with multimodal.models.vit.resample_positions(weight, old_grid, "
                    f"{new_grid}, {module.num_prefix_tokens}) before loading"
                )
            state_dict[key] = resample_positions(weight, (side, side), new_grid, module.num_prefix_tokens)
    for name in list(state_dict):
        if name.startswith(prefix) and name.endswith(("relative_2d.rows", "relative_2d.cols")):
            size = new_grid[0] if name.endswith("rows") else new_grid[1]
            state_dict[name] = resample_offset_table(state_dict[name], size)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)

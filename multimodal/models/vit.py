"""Vision Transformer classifier built from the shared blocks (Dosovitskiy et al. 2021).

Images (or the feature maps of an optional convolutional stem, ``stem_channels``) are cut into
non-overlapping patches (:func:`multimodal.tokenizers.image.patchify`, each
flattened ``(p1 p2 c)``), linearly embedded, prefixed with a class token (``pooling="cls"``), and
run through a bidirectional :class:`~multimodal.layers.Encoder` (pre-norm blocks, fused ``qkv``,
exact GELU, final LayerNorm — timm's ``VisionTransformer`` layout). Positions are either learned
absolute embeddings added to the tokens (``position="learned"``, ViT's own) or 2D relative offsets
inside every attention layer (``position="relative2d"``, :mod:`multimodal.layers.positions.relative2d`).

With ``distillation_token`` a second learned token follows the class token and has its own head,
``head_dist`` (DeiT, timm's ``VisionTransformerDistilled``): :meth:`ViT.forward_heads` gives both
heads' logits, for a task that trains the class head on labels and the other on a teacher;
:meth:`ViT.forward` gives their mean, as DeiT classifies.

Names follow timm where a concept is the same: ``patch_embed``, ``cls_token``, ``dist_token``,
``forward_features``, ``forward_head``, ``head``, ``head_dist``, ``no_weight_decay``. The absolute
position table is ``encoder.positions.weight`` ``(prefix + num_patches, dim)`` (timm's ``pos_embed``
without its batch axis); a timm conv patch weight ``(dim, c, p, p)`` maps to ``patch_embed.weight`` with
``rearrange(w, "d c p1 p2 -> d (p1 p2 c)")``.

Loading a state dict made for another image size resamples the position parameters to this
model's grid: absolute embeddings bicubically (as timm's ``resample_abs_pos_embed``), 2D relative
offset tables linearly (:func:`~multimodal.layers.positions.resample.resample_offset_table`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from multimodal.layers.positions.resample import resample_offset_table, resize_positions
from multimodal.layers.stack import Encoder
from multimodal.models.config import ViTConfig
from multimodal.tokenizers.image import patchify

__all__ = ["ViT"]


class ViT(nn.Module):
    """Patch embedding, optional class (and distillation) token, :class:`~multimodal.layers.Encoder`, linear head(s).

    Args:
        config: Sizes, image geometry, position scheme, pooling and number of classes.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        self.stem = _conv_stem(config.channels, config.stem_channels, config.stem_stride)
        self.patch_embed = nn.Linear(config.patch_dim, config.dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.dim)) if config.pooling == "cls" else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, config.dim)) if config.distillation_token else None
        self.encoder = Encoder(config)
        self.head = _head(config)
        self.head_dist = _head(config) if config.distillation_token else None
        self.apply(_init_weights)
        for token in (self.cls_token, self.dist_token):
            if token is not None:
                nn.init.normal_(token, std=0.02)
        self.register_load_state_dict_pre_hook(_resample_position_parameters)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches (1 with a class token, 2 with a distillation token too, else 0)."""
        return self.config.num_prefix_tokens

    def forward(self, images: Tensor) -> Tensor:
        """Class logits ``(batch, num_classes)`` of images ``(batch, channels, height, width)``.

        With class-token pooling only the prefix tokens' outputs are needed, so the last block
        computes those (``Encoder(num_outputs=prefix)``): the same logits as
        ``forward_head(forward_features(images))``, for about 7 % less work.
        """
        return self.forward_head(self._prefix_features(images))

    def forward_heads(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """The class head's and the distillation head's logits, each ``(batch, num_classes)``, of images
        ``(batch, channels, height, width)``; their mean is :meth:`forward`. Needs ``distillation_token``."""
        if self.head_dist is None:
            raise ValueError("forward_heads needs a ViT with a distillation token (ViTConfig.distillation_token)")
        features = self._prefix_features(images)
        return self.head(features[:, 0]), self.head_dist(features[:, 1])

    def _prefix_features(self, images: Tensor) -> Tensor:
        """What the head reads: the prefix tokens' outputs with class-token pooling, else every token."""
        num_outputs = self.num_prefix_tokens if self.config.pooling == "cls" else None
        return self.encoder(self._embed(images), num_outputs=num_outputs)

    def forward_features(self, images: Tensor) -> Tensor:
        """Normalised tokens ``(batch, prefix + num_patches, dim)`` of images ``(batch, c, h, w)``."""
        return self.encoder(self._embed(images))

    def _embed(self, images: Tensor) -> Tensor:
        """Patch embeddings after the prefix (class token, then distillation token): ``(batch, prefix + num_patches, dim)``."""
        self._check(images)
        features = self.stem(images) if self.stem is not None else images  # (b, stem or c, h, w)
        tokens = self.patch_embed(patchify(features, self.config.patch_size))  # (b, num_patches, dim)
        prefix = [token.expand(tokens.shape[0], -1, -1).to(tokens.dtype)
                  for token in (self.cls_token, self.dist_token) if token is not None]  # fmt: skip
        return torch.cat([*prefix, tokens], dim=1) if prefix else tokens

    def forward_head(self, features: Tensor, pre_logits: bool = False) -> Tensor:
        """Pools ``(batch, tokens, dim)`` features (class token or patch mean) and classifies them.

        With a distillation token the logits are the mean of the class head's and the distillation
        head's (DeiT), and the pooled vector the mean of the two tokens (timm's).

        Args:
            features: Output of :meth:`forward_features`.
            pre_logits: Return the pooled ``(batch, dim)`` vector instead of the logits.
        """
        if self.head_dist is not None:
            if pre_logits:
                return (features[:, 0] + features[:, 1]) / 2
            return (self.head(features[:, 0]) + self.head_dist(features[:, 1])) / 2
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
            if parameter.dim() < 2 or name in ("cls_token", "dist_token") or "positions" in name or "attention.position." in name
        }

    def _check(self, images: Tensor) -> None:
        expected = (self.config.channels, *self.config.image_shape)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"expected images (batch, {', '.join(map(str, expected))}), got {tuple(images.shape)}; "
                f"resize them, or build the ViT for their size (ViTConfig.image_size, channels): a state "
                f"dict trained at another size loads by interpolating its positions"
            )


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
                    f"resample them with multimodal.layers.positions.resample.resize_positions(weight, "
                    f"{module.num_prefix_tokens + new_grid[0] * new_grid[1]}, old_grid, {new_grid}) before loading"
                )
            length = module.num_prefix_tokens + new_grid[0] * new_grid[1]
            state_dict[key] = resize_positions(weight, length, (side, side), new_grid)
    for name in list(state_dict):
        # Tables under their current names, or their names before the position interface.
        if name.startswith(prefix) and name.endswith(
            ("attention.position.rows", "attention.position.cols", "relative_2d.rows", "relative_2d.cols")
        ):
            size = new_grid[0] if name.endswith("rows") else new_grid[1]
            state_dict[name] = resample_offset_table(state_dict[name], size)


def _head(config: ViTConfig) -> nn.Module:
    """A linear classifier over ``dim`` features, or the identity for a features-only model (0 classes)."""
    return nn.Linear(config.dim, config.num_classes) if config.num_classes > 0 else nn.Identity()


def _conv_stem(channels: int, widths: tuple[int, ...], stride: int = 1) -> nn.Sequential | None:
    """3x3 convolutions (padding 1), each followed by GELU: ``(b, channels, h, w)`` ->
    ``(b, widths[-1], h, w)`` at stride 1, each side halved (rounding up) per layer at stride 2;
    None without widths."""
    if not widths:
        return None
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Conv2d(channels, width, kernel_size=3, stride=stride, padding=1), nn.GELU()]
        channels = width
    return nn.Sequential(*layers)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)

"""Super-resolution on the shared blocks: a regression model and a conditional Image Transformer.

Both read the low-resolution image as patch tokens (:func:`~multimodal.tokenizers.image.patchify`)
through the shared :class:`~multimodal.layers.Encoder` (:class:`PatchEncoder`); with
``stem_channels`` a 3×3 convolution first turns each low-resolution pixel into that many features,
and the patches are cut from those (a convolutional stem, as in SwinIR; it learns the local edge
filters far faster than attention over patches does). With ``residual_groups`` the encoder is
SwinIR's body (:class:`ResidualGroups`): groups of blocks, each closed by a 3×3 convolution on the
token grid with a residual around it.

- :class:`SuperResolutionRegressor` — with a stem, the encoder output is mapped back to per-pixel
  features (:func:`unpatchify`), added to the stem's, and a 3×3 convolution + pixel shuffle makes
  the ``scale²`` high-resolution pixels of each low-resolution pixel; without one, a linear
  "pixel-shuffle" head turns each token into the ``(patch_size * scale)²`` pixels it covers. Added
  to the bicubic upsampling when ``residual``. Trained with L1; one forward pass per image.
- :class:`ConditionalImageTransformer` — a causal :class:`~multimodal.layers.Decoder` with
  cross-attention to the encoder generates the high-resolution intensity tokens one by one (raster
  order, channels interleaved), sampled with a temperature. Each decoder position also receives
  the encoder feature of the low-resolution patch it lies in and the bicubic estimate of its value.

Images are float ``(batch, channels, height, width)`` in ``[0, 1]``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multimodal.layers.block import norm_layer
from multimodal.layers.cache import DecodingState
from multimodal.layers.stack import Decoder, Encoder
from multimodal.models.config import (
    ConditionalSuperResolutionConfig,
    PatchEncoderConfig,
    SuperResolutionConfig,
)
from multimodal.models.image_transformer import PixelPositionEmbedding
from multimodal.models.init import init_weights
from multimodal.tokenizers.image import patchify, pixels_to_tokens, unpatchify


def bicubic_upsample(images: Tensor, scale: int) -> Tensor:
    """Bicubic upsampling by ``scale`` with the kernel of PIL and MATLAB's ``imresize`` (a = -0.5), clamped to ``[0, 1]``.

    The same cubic as the degradation (:func:`multimodal.data.super_resolution.bicubic_downsample`)
    and as super-resolution papers' bicubic baseline. ``F.interpolate(mode="bicubic")`` alone uses
    a = -0.75; its ``antialias=True`` path is PIL's filter (a = -0.5), which when upsampling only
    changes the kernel.

    Args:
        images: ``(batch, channels, height, width)`` in ``[0, 1]``.
        scale: Integer factor.

    Returns:
        ``(batch, channels, height * scale, width * scale)``.
    """
    return F.interpolate(images, scale_factor=scale, mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)


class Condition(NamedTuple):
    """What the conditional decoder needs of a low-resolution image (:meth:`ConditionalImageTransformer.condition`).

    Attributes:
        context: Encoder output ``(batch, patches, dim)`` for cross-attention.
        inputs: Per-position conditioning ``(batch, seq_len, dim)`` of the high-resolution tokens.
        grid_width: Tokens per raster row of the high-resolution image (``width * channels``).
    """

    context: Tensor
    inputs: Tensor
    grid_width: int


class PatchEncoder(nn.Module):
    """Low-resolution image → non-overlapping patches → linear embedding → shared :class:`Encoder`.

    With ``local2d`` attention the encoder's grid width is set from each input, so any image size
    whose sides are multiples of ``patch_size`` works.

    Args:
        config: Encoder options, ``patch_size`` and ``channels``.
    """

    def __init__(self, config: PatchEncoderConfig) -> None:
        super().__init__()
        self.patch_size, self.channels = config.patch_size, config.channels
        self.stem = (
            nn.Conv2d(config.channels, config.stem_channels, 3, padding=1, padding_mode="replicate")
            if config.stem_channels
            else None
        )
        self.embed = nn.Linear(config.patch_size**2 * config.feature_channels, config.dim)
        self.encoder = ResidualGroups(config) if config.residual_groups else Encoder(config)

    def features(self, low_res: Tensor) -> Tensor:
        """Per-pixel features ``(batch, feature_channels, height, width)``: the stem's, or the centred pixels."""
        if low_res.dim() != 4 or low_res.shape[1] != self.channels:
            raise ValueError(
                f"expected low-resolution images (batch, {self.channels}, height, width), got {tuple(low_res.shape)}"
            )
        return low_res - 0.5 if self.stem is None else F.gelu(self.stem(low_res - 0.5))

    def forward(self, low_res: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """Token features ``(batch, rows * cols, dim)`` of ``(batch, channels, height, width)`` and the grid ``(rows, cols)``."""
        return self.encode(self.features(low_res))

    def encode(self, features: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """Token features and grid ``(rows, cols)`` of per-pixel features from :meth:`features`."""
        rows, cols = features.shape[-2] // self.patch_size, features.shape[-1] // self.patch_size
        tokens = patchify(features, self.patch_size)  # (b, rows * cols, p * p * feature_channels)
        return self.encoder(self.embed(tokens), grid_width=cols), (rows, cols)


class ResidualGroups(nn.Module):
    """SwinIR's deep feature body on the shared blocks: residual groups of window-attention blocks closed by convolutions.

    ``config.residual_groups`` groups of ``num_layers / residual_groups`` pre-norm blocks (local 2D
    window attention whose memory reaches past the query block, so information crosses block
    borders: an overlapping, not a shifted, window). After each group a 3×3 convolution over the
    token grid, and the group's input added back (SwinIR's RSTB); after the last group a norm, one
    more 3×3 convolution, and the body's input added back (SwinIR's ``conv_after_body``). The
    convolutions give the body the translation-equivariant local filters attention has to learn.
    Called like :class:`~multimodal.layers.Encoder`: ``(batch, rows * cols, dim)`` and the grid
    width ``cols`` in, the same shape out.

    Args:
        config: Encoder options; ``num_layers`` counts the blocks of all groups together.
    """

    def __init__(self, config: PatchEncoderConfig) -> None:
        super().__init__()
        per_group = config.num_layers // config.residual_groups
        self.groups = nn.ModuleList(Encoder(replace(config, num_layers=per_group, residual_groups=0))
                                    for _ in range(config.residual_groups))  # fmt: skip
        for group in self.groups:
            group.norm = nn.Identity()  # the blocks are pre-norm; SwinIR normalises once, after the body
        self.convs = nn.ModuleList(nn.Conv2d(config.dim, config.dim, 3, padding=1)
                                   for _ in range(config.residual_groups))  # fmt: skip
        self.norm = norm_layer(config)
        self.body_conv = nn.Conv2d(config.dim, config.dim, 3, padding=1)

    def forward(self, x: Tensor, *, grid_width: int) -> Tensor:
        """``(batch, rows * grid_width, dim)`` → the same shape."""
        rows = x.shape[1] // grid_width
        hidden = x
        for group, conv in zip(self.groups, self.convs, strict=True):
            hidden = hidden + _grid_conv(conv, group(hidden, grid_width=grid_width), rows, grid_width)
        return x + _grid_conv(self.body_conv, self.norm(hidden), rows, grid_width)


def _grid_conv(conv: nn.Conv2d, tokens: Tensor, rows: int, cols: int) -> Tensor:
    """Applies a convolution to tokens ``(batch, rows * cols, dim)`` laid out on their grid; same shape out."""
    grid = tokens.transpose(1, 2).reshape(tokens.shape[0], -1, rows, cols)
    return conv(grid).flatten(2).transpose(1, 2)


class SuperResolutionRegressor(nn.Module):
    """Encoder over low-resolution patches + pixel-shuffle head; ``forward`` returns the high-resolution image.

    With ``stem_channels`` (the default): stem features ``f`` ``(batch, stem_channels, h, w)`` →
    patches → encoder → a linear map back to ``(patch_size², stem_channels)`` per token →
    ``unpatchify`` to ``g`` like ``f`` → ``tail``, a 3×3 convolution of ``f + g`` to
    ``channels * scale²`` → pixel shuffle. Without a stem: a linear head per token to its
    ``(patch_size * scale)²`` pixels. The last layer starts at zero, so with ``residual`` an untrained
    model returns exactly the bicubic upsampling.

    Args:
        config: Encoder and head options.
    """

    def __init__(self, config: SuperResolutionConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = PatchEncoder(config)
        if config.stem_channels:
            self.unembed = nn.Linear(config.dim, config.patch_size**2 * config.stem_channels)
            self.tail = nn.Conv2d(config.stem_channels, config.channels * config.scale**2, 3, padding=1)
            last: nn.Module = self.tail
        else:
            out_patch = config.patch_size * config.scale
            self.head = nn.Linear(config.dim, out_patch**2 * config.channels)
            last = self.head
        init_weights(self, config.num_layers)
        if config.residual:  # start exactly at the bicubic upsampling
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)

    def forward(self, low_res: Tensor) -> Tensor:
        """``(batch, channels, h, w)`` → ``(batch, channels, h * scale, w * scale)``, not clamped.

        Sides that are not multiples of ``patch_size`` are padded by replication and cropped back.
        """
        config = self.config
        height, width = low_res.shape[-2:]
        padded = _pad_to_multiple(low_res, config.patch_size)
        features = self.encoder.features(padded)
        hidden, (rows, cols) = self.encoder.encode(features)
        if config.stem_channels:
            back = unpatchify(
                self.unembed(hidden), config.patch_size, features.shape[-2:], config.stem_channels
            )
            high_res = F.pixel_shuffle(self.tail(features + back), config.scale)
        else:
            out_patch = config.patch_size * config.scale
            high_res = unpatchify(
                self.head(hidden), out_patch, (rows * out_patch, cols * out_patch), config.channels
            )
        high_res = high_res[..., : height * config.scale, : width * config.scale]
        if config.residual:  # the unpadded image: PIL's kernel renormalises at the border, it does not replicate
            high_res = high_res + bicubic_upsample(low_res, config.scale)
        return high_res

    @property
    def alignment(self) -> tuple[int, int]:
        """Low-resolution pixels between block boundaries: tiles starting at multiples see the same blocks."""
        return _alignment(self.config)

    @property
    def receptive_radius(self) -> int:
        """Low-resolution pixels beyond which an input pixel cannot change an output pixel (local2d)."""
        return _receptive_radius(self.config)


class ConditionalImageTransformer(nn.Module):
    """Encoder over the low-resolution image, causal decoder with cross-attention over high-resolution tokens.

    The decoder reads ``[BOS, t_0, …]`` like :class:`~multimodal.models.ImageTransformer`; position
    ``i`` (sub-pixel ``(row, col, channel)`` of the high-resolution image) adds learned row, column
    and channel embeddings, the encoder feature of the low-resolution patch containing it, and an
    embedding of its bicubic estimate (quantised to ``num_levels``). Call :meth:`condition` once per
    image, then :meth:`forward` for teacher forcing or step by step with a decoding state.

    Args:
        config: Encoder and decoder options.
    """

    def __init__(self, config: ConditionalSuperResolutionConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = PatchEncoder(config)
        decoder_config = replace(
            config, num_layers=config.decoder_layers, cross_attention=True, context_dim=config.dim,
            attention="local2d", local_query_shape=config.decoder_query_shape,
            local_memory_shape=config.decoder_memory_shape,
        )  # fmt: skip
        low = config.crop_size // (config.scale * config.patch_size)
        self.context_positions = PixelPositionEmbedding(config.dim, low, low, 1)
        self.positions = PixelPositionEmbedding(
            config.dim, config.crop_size, config.crop_size, config.channels
        )
        self.embedding = nn.Embedding(config.num_levels + 2, config.dim)  # levels, BOS, PAD
        self.estimate = nn.Embedding(config.num_levels, config.dim)
        self.feature = nn.Linear(config.dim, config.dim)
        self.decoder = Decoder(decoder_config)
        self.head = nn.Linear(config.dim, config.num_levels)
        init_weights(self, config.num_layers + config.decoder_layers)

    @property
    def bos_id(self) -> int:
        """Id that starts every high-resolution image."""
        return self.config.num_levels

    def condition(self, low_res: Tensor) -> tuple[Tensor, Tensor]:
        """What the decoder needs of ``low_res`` ``(batch, channels, h, w)``, computed once.

        Returns:
            A :class:`Condition`: ``context`` ``(batch, patches, dim)`` for cross-attention,
            ``inputs`` ``(batch, seq_len, dim)``, the per-position conditioning of the
            ``seq_len = h * scale * w * scale * channels`` high-resolution tokens, and the raster
            grid width of those tokens (``w * scale * channels``).
        """
        config = self.config
        if low_res.shape[-2] % config.patch_size or low_res.shape[-1] % config.patch_size:
            raise ValueError(f"low-resolution sides must be multiples of patch_size={config.patch_size}")
        hidden, (rows, cols) = self.encoder(low_res)
        context = hidden + self.context_positions.of_grid(rows, cols)
        height, width = low_res.shape[-2] * config.scale, low_res.shape[-1] * config.scale
        # Encoder feature of the patch each high-resolution sub-pixel lies in, in raster token order.
        per_patch = self.feature(hidden).unflatten(1, (rows, cols))  # (b, rows, cols, dim)
        factor = config.patch_size * config.scale
        per_pixel = per_patch.repeat_interleave(factor, 1).repeat_interleave(factor, 2)  # (b, H, W, dim)
        per_token = per_pixel.repeat_interleave(config.channels, 2).flatten(1, 2)  # (b, H * W * c, dim)
        estimate = pixels_to_tokens(bicubic_upsample(low_res, config.scale), config.num_levels)
        inputs = per_token + self.estimate(estimate) + self.positions.of_grid(height, width)
        return Condition(context, inputs, width * config.channels)

    def forward(self, tokens: Tensor, condition: Condition, *, state: DecodingState | None = None) -> Tensor:
        """Logits ``(batch, seq, num_levels)`` for input ids ``(batch, seq)`` (BOS first).

        Args:
            tokens: BOS, then the high-resolution intensity ids so far.
            condition: From :meth:`condition`.
            state: From :meth:`new_state`, for cached incremental decoding.
        """
        context, inputs, grid_width = condition
        offset = state.position if state is not None else 0
        if offset + tokens.shape[1] > inputs.shape[1]:
            raise ValueError(f"{offset + tokens.shape[1]} positions exceed the {inputs.shape[1]} sub-pixels")
        x = self.embedding(tokens) + inputs[:, offset : offset + tokens.shape[1]]
        return self.head(self.decoder(x, context=context, state=state, grid_width=grid_width))

    def new_state(self, condition: Condition) -> DecodingState:
        """An empty decoding state for the image of ``condition`` (from :meth:`condition`)."""
        return self.decoder.new_state(grid_width=condition.grid_width)

    def inputs(self, tokens: Tensor) -> Tensor:
        """Teacher-forcing inputs for intensity ids ``(batch, seq_len)``: BOS + all but the last."""
        bos = tokens.new_full((tokens.shape[0], 1), self.bos_id)
        return torch.cat([bos, tokens[:, :-1]], dim=1)

    @property
    def alignment(self) -> tuple[int, int]:
        """Tiles start on whole patches (samples differ per tile anyway, so block alignment buys nothing)."""
        return self.config.patch_size, self.config.patch_size


def build_super_resolution(
    config: SuperResolutionConfig | ConditionalSuperResolutionConfig,
) -> SuperResolutionRegressor | ConditionalImageTransformer:
    """The model of a config: the regressor, or the conditional Image Transformer."""
    if isinstance(config, ConditionalSuperResolutionConfig):
        return ConditionalImageTransformer(config)
    return SuperResolutionRegressor(config)


def _pad_to_multiple(images: Tensor, multiple: int) -> Tensor:
    height, width = images.shape[-2:]
    pad_h, pad_w = -height % multiple, -width % multiple
    if pad_h or pad_w:
        images = F.pad(images, (0, pad_w, 0, pad_h), mode="replicate")
    return images


def _alignment(config: PatchEncoderConfig) -> tuple[int, int]:
    if config.attention != "local2d":
        return config.patch_size, config.patch_size
    rows, cols = config.local_query_shape
    return rows * config.patch_size, cols * config.patch_size


def _receptive_radius(config: PatchEncoderConfig) -> int:
    if config.attention != "local2d":
        return 2**31 - 1  # every token sees every other
    (rows, cols), (memory_rows, memory_cols) = config.local_query_shape, config.local_memory_shape
    per_layer = max(rows - 1 + memory_rows, cols - 1 + memory_cols)
    convolutions = 2 if config.stem_channels else 0  # the 3x3 stem and tail reach one pixel each
    # Residual groups: each group's 3x3 convolution and the body's reach one token each.
    grid_convolutions = config.residual_groups + 1 if config.residual_groups else 0
    return (config.num_layers * per_layer + grid_convolutions + 1) * config.patch_size + convolutions

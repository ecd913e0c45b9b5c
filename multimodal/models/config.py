"""Config dataclasses of the model families, with named presets.

A preset is a starting point: ``CausalLMConfig.from_preset("small", vocab_size=388)`` returns a
full config whose fields can be changed like any other. YAML configs spell every field out, so a
run's config file is the whole truth about its model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

# Every name the inherited fields' annotations use: jsonargparse reads a dataclass's generated ``__init__``
# annotations (strings, with postponed evaluation) in this module, and without them it leaves every field of
# these configs unvalidated (a bad --model value passes the parser; a tuple field warns at each config dump).
from multimodal.layers.config import (  # noqa: F401
    Activation,
    AttentionPattern,
    Norm,
    PositionScheme,
    RotaryScaling,
    TransformerConfig,
    check_sizes,
)

# Sizes shared by every family; each family adds its own fields.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(dim=32, num_layers=2, num_heads=4, ff_dim=64, max_seq_len=256, dropout=0.0),
    "small": dict(dim=256, num_layers=4, num_heads=8, ff_dim=1024, max_seq_len=1024, dropout=0.1),
    "base": dict(dim=512, num_layers=6, num_heads=8, ff_dim=2048, max_seq_len=2048, dropout=0.1),
}


@dataclass
class Presets:
    """Named starting points of a config family: ``Config.from_preset(name, **overrides)``.

    A family lists its presets in the class attribute ``presets`` (name -> field values); a preset
    is a dict of fields, and ``overrides`` replace any of them, so the result is
    ``cls(**{**presets[name], **overrides})`` for every family alike.
    """

    presets: ClassVar[dict[str, dict[str, Any]]] = PRESETS

    @classmethod
    def from_preset(cls, name: str, **overrides: Any):
        """The preset ``name`` with ``overrides`` applied (``Config.presets`` lists the names)."""
        if name not in cls.presets:
            family = cls.__name__.removesuffix("Config")
            raise ValueError(f"unknown {family} preset {name!r}; choose one of {sorted(cls.presets)}")
        return cls(**{**cls.presets[name], **overrides})


@dataclass
class CausalLMConfig(Presets, TransformerConfig):
    """A decoder-only language model over token ids (text, MIDI events); presets ``tiny``, ``small``, ``base``.

    Attributes:
        vocab_size: Number of token ids; linked from the data module in the Lightning tasks.
        tie_embeddings: Share the input embedding matrix with the output projection.
    """

    vocab_size: int = 256
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        check_sizes(self, positive=("vocab_size",))
        super().__post_init__()


# The standard ViT sizes (Dosovitskiy et al. 2021; Touvron et al. 2021 for Ti and S), plus "micro"
# for tests and the small data sets of this project.
VIT_PRESETS: dict[str, dict[str, Any]] = {
    "micro": dict(dim=64, num_layers=2, num_heads=4, ff_dim=128),
    "tiny": dict(dim=192, num_layers=12, num_heads=3, ff_dim=768),
    "small": dict(dim=384, num_layers=12, num_heads=6, ff_dim=1536),
    "base": dict(dim=768, num_layers=12, num_heads=12, ff_dim=3072),
}


@dataclass
class ViTConfig(Presets, TransformerConfig):
    """A Vision Transformer classifier over non-overlapping patches (bidirectional encoder).

    Presets (:data:`VIT_PRESETS`) ``tiny``/``small``/``base`` are ViT-Ti/S/B: 192/384/768 wide, 12
    layers, 3/6/12 heads, MLP ratio 4; ``micro`` (64 wide, 2 layers) is for tests and quick runs.

    The encoder fields keep their meaning; ViT changes some defaults (no dropout, LayerNorm eps
    ``1e-6`` as timm, learned absolute positions) and *derives* two of them from the image:
    ``grid_size = (height // patch_size, width // patch_size)`` (of the stem's maps with
    ``stem_stride=2``) and ``max_seq_len`` = prefix tokens + patches. Values given for those two are replaced.

    Attributes:
        image_size: Side of square images, or ``(height, width)``; multiples of ``patch_size`` (after
            a stride-2 stem: its maps' sides are).
            Linked from the data module in the Lightning task.
        patch_size: Side of the square patches, in pixels.
        channels: Channels per pixel (1 greyscale, 3 RGB); linked from the data module.
        num_classes: Output classes; 0 gives a model without head (features only). Linked from
            the data module.
        pooling: ``"cls"``: classify the class token (ViT, timm's default); ``"mean"``: average
            the patch tokens (no class token).
        stem_channels: Output channels of 3x3 convolutions (stride 1, each followed by GELU) run
            over the full-resolution image before it is cut into patches — a convolutional stem
            (Xiao et al. 2021, "Early convolutions help Transformers see better"), which gives a
            small-data ViT local features (one 16-channel layer: ~19 % fewer training images/s
            at 28x28, patch 7). ``()`` (the default): the image's own pixels are patched, as in
            ViT and timm.
        stem_stride: Stride of every stem convolution, 1 or 2. With 2 each convolution halves the
            feature map, rounding up (28 -> 14 -> 7 -> 4), as the stride-2 stem of Xiao et al.'s ViT_C,
            and the patches are cut from the reduced map: three stride-2 layers and ``patch_size=1``
            turn a 28x28 image into a 4x4 grid of tokens from overlapping 15x15 receptive fields, at
            a fraction of the full-resolution stem's cost. The grid is then ``stem size // patch_size``.
        distillation_token: DeiT's second prefix token (Touvron et al. 2021, timm's
            ``VisionTransformerDistilled``): a learned token after the class token, with its own head
            ``head_dist``. A distilling task trains the class head on the labels and this head on the
            teacher; the model's logits are the mean of the two heads. Needs ``pooling="cls"``.
    """

    dropout: float = 0.0
    position: PositionScheme = "learned"
    norm_eps: float = 1e-6
    image_size: int | tuple[int, int] = 224
    patch_size: int = 16
    channels: int = 3
    num_classes: int = 1000
    pooling: Literal["cls", "mean"] = "cls"
    stem_channels: tuple[int, ...] = ()
    stem_stride: int = 1
    distillation_token: bool = False

    def __post_init__(self) -> None:
        check_sizes(self, positive=("image_size", "patch_size", "channels"), non_negative=("num_classes",))
        self.stem_channels = tuple(self.stem_channels)
        if any(int(width) < 1 for width in self.stem_channels):
            raise ValueError(f"stem_channels must be positive, got {list(self.stem_channels)}")
        height, width = (
            (self.image_size, self.image_size) if isinstance(self.image_size, int) else self.image_size
        )
        if self.stem_stride not in (1, 2):
            raise ValueError(f"stem_stride must be 1 or 2, got {self.stem_stride}")
        self.image_size = height if height == width else (height, width)
        rows, cols = self.stem_size
        if rows % self.patch_size or cols % self.patch_size:
            raise ValueError(
                f"image_size {height}x{width}"
                + (f" (the stride-2 stem's {rows}x{cols} maps)" if (rows, cols) != (height, width) else "")
                + f" is not a multiple of patch_size={self.patch_size}; resize the images (the data "
                f"module's image_size) or pick a patch size that divides them"
            )
        if self.pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {self.pooling!r}")
        if self.distillation_token and self.pooling != "cls":
            raise ValueError("distillation_token needs pooling='cls': its head reads the token after the class token")
        self.grid_size = (rows // self.patch_size, cols // self.patch_size)
        self.max_seq_len = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        super().__post_init__()

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: the class token with ``pooling="cls"`` (1), the distillation token
        after it (2), else 0."""
        return 0 if self.pooling != "cls" else 1 + int(self.distillation_token)

    @property
    def image_shape(self) -> tuple[int, int]:
        """``(height, width)`` of the input images."""
        return (self.image_size, self.image_size) if isinstance(self.image_size, int) else tuple(self.image_size)

    @property
    def stem_size(self) -> tuple[int, int]:
        """``(rows, cols)`` of the map that is patched: the image's, halved (rounding up) by each
        stride-2 stem convolution."""
        size = self.image_shape
        if self.stem_stride == 2:
            size = tuple(-(-side // 2 ** len(self.stem_channels)) for side in size)
        return size

    @property
    def num_patches(self) -> int:
        """Patches per image, ``rows * cols`` of the grid."""
        return self.grid_size[0] * self.grid_size[1]

    @property
    def patch_dim(self) -> int:
        """Values in one flattened patch, ``patch_size**2 * channels`` (the stem's last width with a stem)."""
        return self.patch_size * self.patch_size * (self.stem_channels[-1] if self.stem_channels else self.channels)

    presets: ClassVar[dict[str, dict[str, Any]]] = VIT_PRESETS


@dataclass
class ImageTransformerConfig(Presets, TransformerConfig):
    """An autoregressive Image Transformer over raster pixel tokens (Parmar et al. 2018).

    Presets (:data:`IMAGE_PRESETS`): ``tiny`` for tests, ``small`` (the digits config's model).

    Tokens are the intensity ids of :class:`~multimodal.tokenizers.image.PixelTokenizer` (channels
    of a pixel interleaved). The decoder fields keep their meaning; two are *derived*:
    ``max_seq_len = height * width * channels`` and, for ``attention="local2d"``,
    ``local_grid_width = width * channels`` (the raster grid). Values given for those are replaced.

    Attributes:
        height: Image height in pixels; linked from the data module.
        width: Image width in pixels; linked from the data module.
        channels: Channels per pixel (1 or 3); linked from the data module.
        num_levels: Intensity levels per channel (the output classes); linked from the data module.
        num_classes: Classes of the data set; linked from the data module, used only when
            ``class_conditional``.
        class_conditional: Add a learned class embedding to every position, so samples can be
            drawn per class.
        class_dropout: Class-conditional training replaces a label by the extra "no class" id
            ``num_classes`` with this probability, so the model also learns the images without
            their class: what sampling with classifier-free guidance needs (``guidance_scale``,
            :func:`multimodal.images.sample_images`). 0: no "no class" embedding (the earlier layout).
        pixel_positions: ``"absolute"``: learned row, column and channel embeddings added to the
            input (Parmar et al.); ``"none"``: rely on ``position="relative"`` alone.
    """

    presets: ClassVar[dict[str, dict[str, Any]]] = {}  # filled below the class (IMAGE_PRESETS)

    dropout: float = 0.1
    position: PositionScheme = "none"
    attention: AttentionPattern = "local2d"
    local_query_shape: tuple[int, int] = (4, 8)
    local_memory_shape: tuple[int, int] = (4, 8)
    height: int = 8
    width: int = 8
    channels: int = 1
    num_levels: int = 256
    num_classes: int = 0
    class_conditional: bool = False
    class_dropout: float = 0.0
    pixel_positions: Literal["absolute", "none"] = "absolute"

    def __post_init__(self) -> None:
        check_sizes(
            self, positive=("height", "width", "channels", "num_levels"), non_negative=("num_classes",)
        )
        if min(self.height, self.width, self.channels) < 1 or not 2 <= self.num_levels <= 256:
            raise ValueError(
                f"need height, width, channels >= 1 and 2 <= num_levels <= 256, got {self.height}x{self.width}"
                f"x{self.channels} with {self.num_levels} levels"
            )
        if self.class_conditional and self.num_classes < 1:
            raise ValueError("class_conditional=True needs num_classes >= 1 (linked from the data module)")
        if not 0 <= self.class_dropout < 1 or (self.class_dropout and not self.class_conditional):
            raise ValueError(f"class_dropout must be in [0, 1) and needs class_conditional=True, got {self.class_dropout}")
        if self.pixel_positions not in ("absolute", "none"):
            raise ValueError(f"pixel_positions must be 'absolute' or 'none', got {self.pixel_positions!r}")
        self.max_seq_len = self.height * self.width * self.channels
        if self.attention == "local2d":
            self.local_grid_width = self.width * self.channels
        super().__post_init__()

    @property
    def seq_len(self) -> int:
        """Tokens per image, ``height * width * channels``."""
        return self.height * self.width * self.channels


@dataclass
class PatchEncoderConfig(Presets, TransformerConfig):
    """The low-resolution side of super-resolution: patches of a (stem-filtered) image into an ``Encoder``.

    By default the encoder uses ``local2d`` attention with relative (row, column) positions on the
    patch grid: it is translation-equivariant and accepts any image size, which is what makes tiled
    upscaling seamless. The grid width is set from each input.

    Attributes:
        scale: Upscaling factor (2 or 4); linked from the data module.
        channels: Channels per pixel (1 or 3); linked from the data module.
        crop_size: High-resolution training crop side; linked from the data module.
        patch_size: Low-resolution pixels per token side.
        stem_channels: Features per low-resolution pixel made by a 3×3 convolution before the
            patches are cut; 0 reads raw pixels into the patches.
        residual_groups: 0: the ``num_layers`` blocks are one plain stack. ``k``: SwinIR's body —
            ``k`` groups of ``num_layers / k`` blocks, each group closed by a 3×3 convolution on
            the token grid and a residual connection around it, then one more 3×3 convolution
            (:class:`~multimodal.models.super_resolution.ResidualGroups`).
    """

    presets: ClassVar[dict[str, dict[str, Any]]] = {}  # filled below (SUPER_RESOLUTION_PRESETS)

    dropout: float = 0.0
    position: PositionScheme = "relative"
    attention: AttentionPattern = "local2d"
    local_query_shape: tuple[int, int] = (4, 4)
    local_memory_shape: tuple[int, int] = (4, 4)
    scale: int = 2
    channels: int = 3
    crop_size: int = 48
    patch_size: int = 1
    stem_channels: int = 32
    residual_groups: int = 0

    def __post_init__(self) -> None:
        check_sizes(
            self, positive=("scale", "channels", "crop_size", "patch_size"),
            non_negative=("stem_channels", "residual_groups"),
        )  # fmt: skip
        if self.residual_groups and self.num_layers % self.residual_groups:
            raise ValueError(
                f"num_layers={self.num_layers} must be a multiple of residual_groups={self.residual_groups} "
                f"(every group has the same number of blocks)"
            )
        if self.scale < 1 or self.patch_size < 1 or self.crop_size % (self.scale * self.patch_size):
            raise ValueError(
                f"crop_size={self.crop_size} must be a multiple of scale * patch_size = "
                f"{self.scale} * {self.patch_size}; pick the data module's crop_size accordingly"
            )
        if self.stem_channels < 0:
            raise ValueError(
                f"stem_channels must be >= 0 (0: no convolutional stem), got {self.stem_channels}"
            )
        self.local_grid_width = None  # set from each input's size
        super().__post_init__()

    @property
    def feature_channels(self) -> int:
        """Values per low-resolution pixel that go into the patches: ``stem_channels`` or ``channels``."""
        return self.stem_channels or self.channels


@dataclass
class SuperResolutionConfig(PatchEncoderConfig):
    """Regression super-resolution: a pixel-shuffle head predicts every high-resolution pixel at once.

    With a stem, the encoder output is mapped back to per-pixel features, added to the stem's, and
    a 3×3 convolution + pixel shuffle makes the ``scale²`` pixels of each low-resolution pixel;
    without one, a linear head turns each token into the ``(patch_size * scale)²`` pixels it covers.
    Trained with L1. (:class:`ConditionalSuperResolutionConfig` is the autoregressive model.)

    Attributes:
        residual: Predict the difference to the bicubic upsampling.
    """

    residual: bool = True


@dataclass
class ConditionalSuperResolutionConfig(PatchEncoderConfig):
    """Autoregressive super-resolution: a conditional Image Transformer over high-resolution tokens.

    A ``Decoder`` with cross-attention to the encoder generates the high-resolution intensity tokens
    in raster order; each position also gets its encoder feature, the bicubic estimate of its value,
    and learned row, column and channel embeddings. Trained with cross-entropy; sampled with a
    temperature. Its row/column tables cover ``crop_size``, so its tiles are at most that big.

    Attributes:
        num_levels: Intensity levels per channel.
        decoder_layers: Blocks of the decoder (same width and heads as the encoder).
        decoder_query_shape: ``local2d`` query block on the high-resolution raster grid
            (``crop_size * channels`` tokens wide).
        decoder_memory_shape: ``local2d`` memory extension of the decoder.
    """

    num_levels: int = 256
    decoder_layers: int = 2
    decoder_query_shape: tuple[int, int] = (2, 24)
    decoder_memory_shape: tuple[int, int] = (2, 12)

    def __post_init__(self) -> None:
        check_sizes(self, positive=("num_levels", "decoder_layers", "decoder_query_shape"),
                    non_negative=("decoder_memory_shape",))  # fmt: skip
        self.decoder_query_shape = tuple(int(size) for size in self.decoder_query_shape)
        self.decoder_memory_shape = tuple(int(size) for size in self.decoder_memory_shape)
        super().__post_init__()


@dataclass
class TranscriberConfig(Presets, TransformerConfig):
    """Audio -> notes: a spectrogram encoder and a note-event decoder that cross-attends to it.

    The encoder reads ``frame_stack`` consecutive log-mel frames as one token (``n_mels *
    frame_stack`` values projected to ``dim``); ``encoder_layers`` bidirectional blocks. The decoder
    is ``num_layers`` causal blocks with cross-attention, over the ids of a note-event vocabulary
    (:class:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer`). Both share ``dim``,
    heads, feed-forward width and the position scheme (rotary by default: cheap, and it works
    both ways).

    Attributes:
        n_mels: Mel bands of the input; linked from the data module.
        frame_stack: Spectrogram frames per encoder token (4 frames of 10 ms: one token per 40 ms).
        encoder_layers: Blocks of the encoder.
        vocab_size: Ids of the note-event vocabulary; linked from the data module.
    """

    position: PositionScheme = "rotary"
    n_mels: int = 128
    frame_stack: int = 4
    encoder_layers: int = 4
    vocab_size: int = 256

    def __post_init__(self) -> None:
        check_sizes(self, positive=("n_mels", "frame_stack", "encoder_layers", "vocab_size"))
        super().__post_init__()


TRANSCRIBER_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(dim=32, num_layers=1, encoder_layers=1, num_heads=2, ff_dim=64, dropout=0.0, max_seq_len=512),
    "small": dict(dim=128, num_layers=3, encoder_layers=4, num_heads=4, ff_dim=512, dropout=0.1, max_seq_len=512),
}
"""Transcriber sizes; ``small`` is the model of ``configs/transcription.yaml``."""
TranscriberConfig.presets = TRANSCRIBER_PRESETS


IMAGE_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(dim=16, num_layers=1, num_heads=2, ff_dim=32, dropout=0.0),
    "small": dict(dim=128, num_layers=4, num_heads=4, ff_dim=512, dropout=0.2, position="relative",
                  local_query_shape=(2, 8), local_memory_shape=(3, 4)),
}
"""Image Transformer sizes; ``small`` is the model of ``configs/image_generation.yaml``."""
ImageTransformerConfig.presets = IMAGE_PRESETS

SUPER_RESOLUTION_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(dim=16, num_layers=1, num_heads=2, ff_dim=32, local_query_shape=(2, 2), local_memory_shape=(1, 1)),
    "small": dict(dim=64, num_layers=4, num_heads=4, ff_dim=128, local_memory_shape=(2, 2), patch_size=2),
}
"""Super-resolution encoder sizes; ``small`` is the model of ``configs/super_resolution.yaml``."""
PatchEncoderConfig.presets = SUPER_RESOLUTION_PRESETS


def legacy_super_resolution_config(fields: dict[str, Any]) -> SuperResolutionConfig | ConditionalSuperResolutionConfig:
    """The config saved by a checkpoint from before regression and autoregressive super-resolution
    had a config each: one dict with ``method`` and the fields of both; the other model's are dropped."""
    fields = dict(fields)
    method = fields.pop("method")
    config_class = ConditionalSuperResolutionConfig if method == "autoregressive" else SuperResolutionConfig
    known = {field.name for field in dataclasses.fields(config_class)}
    return config_class(**{key: value for key, value in fields.items() if key in known})

"""The Image Transformer (Parmar et al. 2018): a causal decoder over raster pixel tokens.

An image of ``height × width × channels`` becomes ``seq_len = height * width * channels``
intensity tokens (:class:`~multimodal.tokenizers.image.PixelTokenizer`). The model reads
``[BOS, t_0, …, t_{seq_len-2}]`` and predicts ``t_0 … t_{seq_len-1}``: input position ``i`` carries
token ``i - 1`` plus the position embedding of the sub-pixel it predicts, ``(row, column, channel)``
of token ``i``. The shared :class:`~multimodal.layers.Decoder` usually runs local 2D attention on
the ``height × (width * channels)`` raster grid.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from multimodal.layers.cache import DecodingState
from multimodal.layers.stack import Decoder
from multimodal.models.config import ImageTransformerConfig
from multimodal.models.init import init_weights
from multimodal.tokenizers.image import pixel_positions


class ImageTransformer(nn.Module):
    """Pixel-token embedding, optional class embedding, causal decoder, head over intensity levels.

    Input ids are intensity levels ``0 .. num_levels - 1`` plus BOS (``num_levels``) and PAD
    (``num_levels + 1``), as :class:`~multimodal.tokenizers.image.PixelTokenizer` numbers them; the
    head predicts intensity levels only.

    Args:
        config: Image size, levels, conditioning and the decoder's options.
    """

    def __init__(self, config: ImageTransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.num_levels + 2, config.dim)
        self.positions = (
            PixelPositionEmbedding(config.dim, config.height, config.width, config.channels)
            if config.pixel_positions == "absolute"
            else None
        )
        # with class_dropout, one more row: the "no class" id num_classes (classifier-free guidance)
        classes = config.num_classes + (1 if config.class_dropout else 0)
        self.class_embedding = nn.Embedding(classes, config.dim) if config.class_conditional else None
        self.decoder = Decoder(config)
        self.head = nn.Linear(config.dim, config.num_levels)
        init_weights(self, config.num_layers)

    @property
    def bos_id(self) -> int:
        """Id that starts every image (the first id after the intensity levels)."""
        return self.config.num_levels

    def forward(
        self, tokens: Tensor, labels: Tensor | None = None, *, state: DecodingState | None = None
    ) -> Tensor:
        """Logits ``(batch, seq, num_levels)`` of the sub-pixels at positions ``offset .. offset + seq - 1``.

        Args:
            tokens: Input ids ``(batch, seq)``: BOS, then the intensity ids so far.
            labels: Class ids ``(batch,)``; required by a class-conditional model, else ignored.
                With ``class_dropout``, the id ``num_classes`` is "no class" (:attr:`no_class_id`).
            state: From :meth:`new_state`, for cached incremental decoding.
        """
        if tokens.dim() != 2:
            raise ValueError(f"expected token ids (batch, seq), got shape {tuple(tokens.shape)}")
        offset = state.position if state is not None else 0
        if offset + tokens.shape[1] > self.config.seq_len:
            raise ValueError(
                f"{offset + tokens.shape[1]} positions exceed the {self.config.seq_len} sub-pixels of a "
                f"{self.config.height}x{self.config.width}x{self.config.channels} image"
            )
        x = self.embedding(tokens)
        if self.positions is not None:
            x = x + self.positions(tokens.shape[1], offset)
        if self.class_embedding is not None:
            if labels is None:
                raise ValueError("this model is class-conditional: pass labels (batch,) of class ids")
            x = x + self.class_embedding(labels)[:, None]
        return self.head(self.decoder(x, state=state))

    @property
    def no_class_id(self) -> int | None:
        """The "no class" label a model trained with ``class_dropout`` knows (``num_classes``), else None."""
        return self.config.num_classes if self.config.class_conditional and self.config.class_dropout else None

    def new_state(self) -> DecodingState:
        """An empty decoding state (local attention caches only the keys still visible)."""
        return self.decoder.new_state()

    def inputs(self, tokens: Tensor) -> Tensor:
        """Teacher-forcing inputs for images' intensity ids ``(batch, seq_len)``: BOS + all but the last."""
        bos = tokens.new_full((tokens.shape[0], 1), self.bos_id)
        return torch.cat([bos, tokens[:, :-1]], dim=1)


class PixelPositionEmbedding(nn.Module):
    """Learned absolute row + column + channel embeddings of raster sub-pixels (Parmar et al. 2018).

    Args:
        dim: Embedding width.
        height: Rows covered.
        width: Columns covered.
        channels: Channels per pixel.
    """

    def __init__(self, dim: int, height: int, width: int, channels: int) -> None:
        super().__init__()
        self.height, self.width, self.channels = height, width, channels
        self.rows = nn.Embedding(height, dim)
        self.cols = nn.Embedding(width, dim)
        self.channel = nn.Embedding(channels, dim)
        self.register_buffer("coordinates", pixel_positions(height, width, channels), persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Embeddings ``(length, dim)`` of raster positions ``offset .. offset + length - 1``."""
        row, col, channel = self.coordinates[offset : offset + length].unbind(-1)
        return self.rows(row) + self.cols(col) + self.channel(channel)

    def of_grid(self, height: int, width: int) -> Tensor:
        """Embeddings ``(height * width * channels, dim)`` of the top-left ``height × width`` pixels, raster order."""
        if height > self.height or width > self.width:
            raise ValueError(
                f"a {height}x{width} tile exceeds the {self.height}x{self.width} pixels the position tables "
                f"cover; use tiles of at most the training crop size"
            )
        row, col, channel = (
            pixel_positions(height, width, self.channels).to(self.rows.weight.device).unbind(-1)
        )
        return self.rows(row) + self.cols(col) + self.channel(channel)

"""Shared Transformer blocks, re-exported flat: ``from multimodal.layers import Decoder``."""

from multimodal.layers.attend import attend, attend_reference
from multimodal.layers.attention import MultiHeadAttention
from multimodal.layers.block import FeedForward, TransformerBlock
from multimodal.layers.cache import DecodingState, KVCache
from multimodal.layers.config import TransformerConfig
from multimodal.layers.local import LocalAttention
from multimodal.layers.loss import linear_cross_entropy
from multimodal.layers.positions import (
    ALiBiPositions,
    AttentionPosition,
    LearnedPositions,
    RotaryPositions,
    SinusoidalPositions,
)
from multimodal.layers.positions.relative import RelativePositionEmbedding, relative_attention
from multimodal.layers.positions.relative2d import RelativePosition2D
from multimodal.layers.stack import Decoder, Encoder, TransformerStack, compile_blocks

__all__ = [
    "ALiBiPositions",
    "AttentionPosition",
    "Decoder",
    "DecodingState",
    "Encoder",
    "FeedForward",
    "KVCache",
    "LearnedPositions",
    "LocalAttention",
    "MultiHeadAttention",
    "RelativePosition2D",
    "RelativePositionEmbedding",
    "RotaryPositions",
    "SinusoidalPositions",
    "TransformerBlock",
    "TransformerConfig",
    "TransformerStack",
    "attend",
    "attend_reference",
    "compile_blocks",
    "linear_cross_entropy",
    "relative_attention",
]

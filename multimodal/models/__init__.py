"""Model families built from the shared blocks."""

from multimodal.models.config import PRESETS, VIT_PRESETS, CausalLMConfig, ViTConfig
from multimodal.models.lm import CausalLM
from multimodal.models.vit import ViT

__all__ = ["PRESETS", "VIT_PRESETS", "CausalLM", "CausalLMConfig", "ViT", "ViTConfig"]

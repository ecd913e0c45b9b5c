"""Model families built from the shared blocks."""

from multimodal.models.config import PRESETS, CausalLMConfig
from multimodal.models.lm import CausalLM

__all__ = ["PRESETS", "CausalLM", "CausalLMConfig"]

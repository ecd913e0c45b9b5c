"""Config dataclasses of the model families, with named presets.

A preset is a starting point: ``CausalLMConfig.from_preset("small", vocab_size=388)`` returns a
full config whose fields can be changed like any other. YAML configs spell every field out, so a
run's config file is the whole truth about its model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from multimodal.layers.config import TransformerConfig

# Sizes shared by every family; each family adds its own fields.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(dim=32, num_layers=2, num_heads=4, ff_dim=64, max_seq_len=256, dropout=0.0),
    "small": dict(dim=256, num_layers=4, num_heads=8, ff_dim=1024, max_seq_len=1024, dropout=0.1),
    "base": dict(dim=512, num_layers=6, num_heads=8, ff_dim=2048, max_seq_len=2048, dropout=0.1),
}


@dataclass
class CausalLMConfig(TransformerConfig):
    """A decoder-only language model over token ids (text, MIDI events, pixels).

    Attributes:
        vocab_size: Number of token ids; linked from the data module in the Lightning tasks.
        tie_embeddings: Share the input embedding matrix with the output projection.
    """

    vocab_size: int = 256
    tie_embeddings: bool = True

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> CausalLMConfig:
        """The preset ``name`` (``tiny``, ``small``, ``base``) with ``overrides`` applied."""
        return replace(cls(**_preset(name)), **overrides)


def _preset(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return dict(PRESETS[name])

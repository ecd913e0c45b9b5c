"""GPT-2 weight initialisation shared by the autoregressive models (language, pixels, super-resolution)."""

from __future__ import annotations

import math

from torch import nn


def init_weights(model: nn.Module, num_layers: int) -> None:
    """GPT-2 initialisation: N(0, 0.02) weights, zero biases, residual projections shrunk with depth."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
    for name, parameter in model.named_parameters():
        if name.endswith(("to_out.weight", "down.weight")):
            nn.init.normal_(parameter, std=0.02 / math.sqrt(2 * num_layers))

"""Pretrained weights in and out of our blocks.

* :mod:`multimodal.convert.gpt2`: a Hugging Face GPT-2 folder -> ``CausalLM`` + tokenizer;
* :mod:`multimodal.convert.timm_vit`: a timm ``vit_*`` state dict -> ``ViT``;
* :mod:`multimodal.convert.parts`: which tensor of a model is which part (``blocks``,
  ``embeddings``, ``head``), under model-independent names;
* :mod:`multimodal.convert.export`: our export format (``blocks.safetensors`` + ``config.json``),
  written and read;
* :mod:`multimodal.convert.positions`: position tables resized between models;
* :mod:`multimodal.convert.blocks`: loading an export by part into any model of the shared blocks.

Only ``torch`` and ``safetensors`` are needed; ``transformers`` and ``timm`` are test references.
"""

from multimodal.convert.blocks import export_blocks, load_blocks, read_export
from multimodal.convert.gpt2 import convert_gpt2, load_gpt2
from multimodal.convert.timm_vit import convert_timm_vit, load_timm_vit

__all__ = [
    "convert_gpt2",
    "convert_timm_vit",
    "export_blocks",
    "load_blocks",
    "load_gpt2",
    "load_timm_vit",
    "read_export",
]

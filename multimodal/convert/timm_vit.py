"""timm ``vit_*`` state dict on disk -> our :class:`~multimodal.models.ViT`.

No ``timm`` needed: the weights come from a ``.safetensors`` file or a ``.pth`` / ``.bin`` /
``.pt`` read with ``torch.load(weights_only=True)``; the sizes are read off the tensors' shapes,
except the number of heads, which no shape shows — it comes from ``num_heads`` or the model name
(``vit_tiny`` 3, ``vit_small`` 6, ``vit_base`` 12, ``vit_large`` / ``vit_huge`` 16; ``deit_*`` alike).

Supported: the classic ViT of timm's ``VisionTransformer`` — class token, ``pos_embed`` covering
it, pre-norm blocks with ``qkv`` bias, exact GELU, final ``norm``, linear ``head`` on the class
token — and DeiT's distilled ViT (``VisionTransformerDistilled``: ``dist_token`` after the class
token, ``head_dist``; our ``distillation_token``). Variants with layer scale (``ls1``), qk-norm,
register tokens, average pooling with ``fc_norm`` or no class token in ``pos_embed`` compute
something else and are refused by name.

==================================  =============================================
timm                                 ours
==================================  =============================================
``cls_token`` (1, 1, dim)            ``cls_token``
``dist_token`` (1, 1, dim)           ``dist_token`` (``distillation_token=True``)
``pos_embed`` (1, P + N, dim)        ``encoder.positions.weight`` (P + N, dim), P prefix tokens
``patch_embed.proj`` conv            ``patch_embed`` linear over ``(p1 p2 c)`` patches
``blocks.{i}.norm1``                 ``encoder.blocks.{i}.norm_attention``
``blocks.{i}.attn.qkv``              ``encoder.blocks.{i}.attention.to_qkv``
``blocks.{i}.attn.proj``             ``encoder.blocks.{i}.attention.to_out``
``blocks.{i}.norm2``                 ``encoder.blocks.{i}.norm_ff``
``blocks.{i}.mlp.fc1`` / ``fc2``     ``encoder.blocks.{i}.ff.up`` / ``ff.down``
``norm``                             ``encoder.norm``
``head``                             ``head``
``head_dist``                        ``head_dist``
==================================  =============================================
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import torch
from einops import rearrange
from safetensors.torch import load_file
from torch import Tensor

from multimodal.convert.blocks import export_blocks
from multimodal.convert.weight_shapes import check_config_fits
from multimodal.models import ViT, ViTConfig

#: Heads of timm's standard ViT sizes (the shapes do not tell).
NUM_HEADS = {"tiny": 3, "small": 6, "base": 12, "large": 16, "huge": 16}
_BLOCK_NAMES = {
    "norm1": "norm_attention",
    "attn.qkv": "attention.to_qkv",
    "attn.proj": "attention.to_out",
    "norm2": "norm_ff",
    "mlp.fc1": "ff.up",
    "mlp.fc2": "ff.down",
}
_UNSUPPORTED = {
    "fc_norm": "average pooling with fc_norm",
    "reg_token": "register tokens",
    ".ls1.": "layer scale (init_values)",
    ".q_norm.": "qk-norm",
    "norm_pre": "a pre-norm before the blocks",
    "attn_pool": "attention pooling",
}


def read_timm_state_dict(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """A timm state dict from ``.safetensors`` or ``.pth``/``.bin``/``.pt`` (``weights_only=True``).

    Checkpoints that wrap the weights (``{"state_dict": ...}``, ``{"model": ...}``) or prefix them
    with ``module.`` are unwrapped.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: give a timm ViT state dict (.safetensors or .pth)")
    if path.suffix == ".safetensors":
        state = load_file(str(path), device="cpu")
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
        for key in ("state_dict", "model", "state_dict_ema"):
            if isinstance(state, dict) and key in state and isinstance(state[key], dict):
                state = state[key]
                break
    return {name.removeprefix("module."): tensor for name, tensor in state.items()}


def timm_vit_config(
    state: dict[str, Tensor],
    *,
    num_heads: int | None = None,
    model_name: str | None = None,
    image_size: int | tuple[int, int] | None = None,
    **overrides: Any,
) -> ViTConfig:
    """Our :class:`ViTConfig` for a timm ViT state dict.

    Args:
        state: The timm state dict.
        num_heads: Attention heads; None: from ``model_name``.
        model_name: A timm name such as ``vit_base_patch16_224`` (gives the heads).
        image_size: The training image size; None: a square grid read off ``pos_embed``.
        overrides: Other :class:`ViTConfig` fields (``norm_eps`` if not timm's 1e-6, dropout, ...).

    Raises:
        ValueError: For unsupported variants, naming them, or when the heads cannot be told.
    """
    for marker, what in _UNSUPPORTED.items():
        if any(marker in name for name in state):
            raise ValueError(
                f"this timm ViT uses {what} ({marker.strip('.')}), which our ViT does not compute"
            )
    if "cls_token" not in state:
        raise ValueError(
            "this timm ViT has no class token; only class-token ViTs (global_pool='token') convert"
        )
    if not any(name.endswith("attn.qkv.bias") for name in state):
        raise ValueError(
            "this timm ViT has no qkv bias (qkv_bias=False); our blocks need bias in every projection"
        )
    proj = state["patch_embed.proj.weight"]  # (dim, channels, patch, patch)
    dim, channels, patch_height, patch_width = proj.shape
    if patch_height != patch_width:
        raise ValueError(f"non-square patches {patch_height}x{patch_width} are not supported")
    heads = num_heads or _heads_from_name(model_name)
    num_layers = 1 + max(int(match[1]) for name in state if (match := re.match(r"blocks\.(\d+)\.", name)))
    num_tokens = state["pos_embed"].shape[1]
    num_prefix = 2 if "dist_token" in state else 1
    if image_size is None:
        side = math.isqrt(num_tokens - num_prefix)
        if side * side != num_tokens - num_prefix:
            raise ValueError(
                f"pos_embed has {num_tokens} entries: not {num_prefix} prefix token(s) + a square grid "
                f"(no_embed_class models are not supported); pass image_size=(height, width)"
            )
        image_size = side * patch_height
    head = state.get("head.weight")
    values = dict(
        dim=dim,
        num_layers=num_layers,
        num_heads=heads,
        ff_dim=state["blocks.0.mlp.fc1.weight"].shape[0],
        image_size=image_size,
        patch_size=patch_height,
        channels=channels,
        num_classes=0 if head is None else head.shape[0],
        pooling="cls",
        distillation_token=num_prefix == 2,
        position="learned",
        activation="gelu",
        norm_eps=1e-6,
        dropout=0.0,
    )
    config = ViTConfig(**{**values, **overrides})
    if config.max_seq_len != num_tokens:
        raise ValueError(
            f"image_size {image_size} gives {config.max_seq_len} tokens but pos_embed has {num_tokens}"
        )
    return config


def convert_timm_vit_state_dict(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """timm names and layouts -> ours (see the module table). Unknown names are an error."""
    converted: dict[str, Tensor] = {}
    unknown = []
    for name, tensor in state.items():
        if name in ("cls_token", "dist_token"):
            converted[name] = tensor
        elif name == "pos_embed":
            converted["encoder.positions.weight"] = tensor[0]
        elif name == "patch_embed.proj.weight":
            converted["patch_embed.weight"] = rearrange(tensor, "d c p1 p2 -> d (p1 p2 c)").contiguous()
        elif name == "patch_embed.proj.bias":
            converted["patch_embed.bias"] = tensor
        elif name.startswith("norm."):
            converted["encoder." + name] = tensor
        elif name.startswith(("head.", "head_dist.")):
            converted[name] = tensor
        elif match := re.fullmatch(r"blocks\.(\d+)\.(.+)\.(weight|bias)", name):
            layer, module, kind = match.groups()
            if module not in _BLOCK_NAMES:
                unknown.append(name)
                continue
            converted[f"encoder.blocks.{layer}.{_BLOCK_NAMES[module]}.{kind}"] = tensor
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(f"not timm ViT weights we know: {unknown[:10]}{' ...' if len(unknown) > 10 else ''}")
    return converted


def load_timm_vit(
    path_or_state: str | os.PathLike[str] | dict[str, Tensor],
    *,
    num_heads: int | None = None,
    model_name: str | None = None,
    image_size: int | tuple[int, int] | None = None,
    **overrides: Any,
) -> ViT:
    """Builds our ViT with the weights of a timm ``vit_*`` state dict (eval mode); see :func:`timm_vit_config`."""
    state = path_or_state if isinstance(path_or_state, dict) else read_timm_state_dict(path_or_state)
    config = timm_vit_config(
        state, num_heads=num_heads, model_name=model_name, image_size=image_size, **overrides
    )
    converted = convert_timm_vit_state_dict(state)
    source = "the timm state dict" if isinstance(path_or_state, dict) else str(path_or_state)
    check_config_fits(ViT, config, {name: tuple(t.shape) for name, t in converted.items()}, source)
    model = ViT(config)
    missing, unexpected = model.load_state_dict(converted, strict=False)
    if missing or unexpected:
        raise ValueError(f"timm ViT weights do not fit: missing {missing}, unexpected {unexpected}")
    return model.eval()


def convert_timm_vit(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    num_heads: int | None = None,
    model_name: str | None = None,
    image_size: int | tuple[int, int] | None = None,
) -> Path:
    """Writes a timm ViT state dict in our export format (``blocks.safetensors`` + ``config.json``)."""
    model = load_timm_vit(path, num_heads=num_heads, model_name=model_name, image_size=image_size)
    source = f"timm:{model_name or Path(path).name}"
    return export_blocks(model, out_dir, metadata={"converted_from": source})


def _heads_from_name(model_name: str | None) -> int:
    match = re.search(r"(?:vit|deit)_(tiny|small|base|large|huge)", model_name or "")
    if match is None:
        raise ValueError(
            f"cannot tell the number of heads of {model_name or 'this ViT'} from its weights; pass num_heads "
            f"(--num-heads), or a timm model name like vit_base_patch16_224 ({NUM_HEADS})"
        )
    return NUM_HEADS[match[1]]

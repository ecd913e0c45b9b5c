"""Hugging Face Llama folder on disk -> our :class:`~multimodal.models.CausalLM` and tokenizer.

No ``transformers`` needed: ``config.json`` gives the sizes, ``model.safetensors`` (whole or
sharded; or ``pytorch_model.bin``, read with ``weights_only=True``) the weights, ``tokenizer.json``
the tokenizer when there is one.

A Llama block is one of ours with ``norm="rmsnorm"``, ``activation="swiglu"``, ``bias=False``,
``position="rotary"`` (the "rotate half" pairing, so q and k need no permutation) and
``num_kv_heads`` key/value heads (grouped-query attention). The conversion is a renaming plus one
concatenation: our self-attention projects queries, keys and values with one fused ``to_qkv``,
rows ``[q | k | v]``.

==========================================  ============================================
Llama (``model.`` prefix)                     ours
==========================================  ============================================
``embed_tokens.weight``                       ``embedding.weight``
``layers.{i}.input_layernorm``                ``decoder.blocks.{i}.norm_attention``
``layers.{i}.self_attn.{q,k,v}_proj``         ``decoder.blocks.{i}.attention.to_qkv`` (rows q, k, v)
``layers.{i}.self_attn.o_proj``               ``decoder.blocks.{i}.attention.to_out``
``layers.{i}.post_attention_layernorm``       ``decoder.blocks.{i}.norm_ff``
``layers.{i}.mlp.{gate,up,down}_proj``        ``decoder.blocks.{i}.ff.{gate,up,down}``
``norm``                                      ``decoder.norm``
``lm_head.weight`` (untied models)            ``head.weight``
==========================================  ============================================

Rotary scaling: ``default`` and ``linear`` (position interpolation) convert; ``llama3``, ``yarn``,
``dynamic`` and other schedules are refused by name rather than computed differently.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from multimodal.convert.blocks import export_blocks
from multimodal.convert.hf_folder import load_causal_lm
from multimodal.models import CausalLM, CausalLMConfig
from multimodal.tokenizers.text import TextTokenizer

_BLOCK_NAMES = {
    "input_layernorm": "norm_attention",
    "self_attn.o_proj": "attention.to_out",
    "post_attention_layernorm": "norm_ff",
    "mlp.gate_proj": "ff.gate",
    "mlp.up_proj": "ff.up",
    "mlp.down_proj": "ff.down",
}
_IGNORED = re.compile(r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")  # a buffer some checkpoints saved


def llama_config(hf_config: dict[str, Any], **overrides: Any) -> CausalLMConfig:
    """Our config for a Hugging Face Llama ``config.json`` (as a dict).

    Raises:
        ValueError: For Llama variants our blocks do not compute (another activation, a head width
            other than ``hidden_size / heads``, biases in attention but not in the MLP, a rotary
            schedule other than default or linear), naming the option.
    """
    if hf_config.get("model_type", "llama") != "llama":
        raise ValueError(f"config.json is a {hf_config.get('model_type')!r} model, not llama")
    if hf_config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"Llama activation {hf_config['hidden_act']!r} is not supported (needs silu, for SwiGLU)")
    heads, dim = hf_config["num_attention_heads"], hf_config["hidden_size"]
    if hf_config.get("head_dim") not in (None, dim // heads):
        raise ValueError(f"head_dim={hf_config['head_dim']} differs from hidden_size / heads = {dim // heads}")
    if bool(hf_config.get("attention_bias", False)) != bool(hf_config.get("mlp_bias", False)):
        raise ValueError("attention_bias and mlp_bias differ; our blocks have biases everywhere or nowhere")
    rope = dict(hf_config.get("rope_parameters") or hf_config.get("rope_scaling") or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "linear"):
        raise ValueError(f"rotary scaling {rope_type!r} is not supported (default and linear are)")
    factor = float(rope.get("factor", 1.0)) if rope_type == "linear" else 1.0
    values = dict(
        vocab_size=hf_config["vocab_size"],
        dim=dim,
        num_layers=hf_config["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf_config.get("num_key_value_heads") or heads,
        ff_dim=hf_config["intermediate_size"],
        dropout=0.0,
        attention_dropout=float(hf_config.get("attention_dropout") or 0.0),
        position="rotary",
        rotary_base=float(rope.get("rope_theta", hf_config.get("rope_theta", 10_000.0))),
        rotary_fraction=float(rope.get("partial_rotary_factor", hf_config.get("partial_rotary_factor", 1.0))),
        rotary_scaling="linear" if factor != 1.0 else "none",
        rotary_scale=factor,
        max_seq_len=hf_config.get("max_position_embeddings", 2048),
        activation="swiglu",
        norm="rmsnorm",
        norm_eps=hf_config.get("rms_norm_eps", 1e-6),
        bias=bool(hf_config.get("attention_bias", False)),
        tie_embeddings=bool(hf_config.get("tie_word_embeddings", False)),
    )
    return CausalLMConfig(**{**values, **overrides})


def load_llama(hf_dir: str | os.PathLike[str], **config_overrides: Any) -> CausalLM:
    """Builds our ``CausalLM`` with the weights of a Hugging Face Llama folder (eval mode).

    Args:
        hf_dir: Folder with ``config.json`` and ``model.safetensors`` (or shards, or ``pytorch_model.bin``).
        config_overrides: Changes to the derived :class:`CausalLMConfig`.
    """
    return load_causal_lm(hf_dir, "Llama", llama_config, convert_llama_state_dict, **config_overrides)


def convert_llama_state_dict(state: dict[str, Tensor], config: CausalLMConfig) -> dict[str, Tensor]:
    """Llama names -> ours (see the module table); q, k, v projections joined into ``to_qkv``. Unknown names are an error."""
    converted: dict[str, Tensor] = {}
    projections: dict[tuple[str, str], dict[str, Tensor]] = {}
    unknown = []
    for name, tensor in state.items():
        short = name.removeprefix("model.")
        if _IGNORED.search(short):
            continue
        if short == "embed_tokens.weight":
            converted["embedding.weight"] = tensor
        elif short == "norm.weight":
            converted["decoder.norm.weight"] = tensor
        elif short == "lm_head.weight":
            if not config.tie_embeddings:
                converted["head.weight"] = tensor
        elif match := re.fullmatch(r"layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", short):
            layer, which, kind = match.groups()
            projections.setdefault((layer, kind), {})[which] = tensor
        elif match := re.fullmatch(r"layers\.(\d+)\.(.+)\.(weight|bias)", short):
            layer, module, kind = match.groups()
            if module not in _BLOCK_NAMES:
                unknown.append(name)
                continue
            converted[f"decoder.blocks.{layer}.{_BLOCK_NAMES[module]}.{kind}"] = tensor
        else:
            unknown.append(name)
    for (layer, kind), parts in projections.items():
        if set(parts) != {"q", "k", "v"}:
            raise ValueError(f"layer {layer}: the {kind} of q_proj, k_proj and v_proj are not all there ({sorted(parts)})")
        converted[f"decoder.blocks.{layer}.attention.to_qkv.{kind}"] = torch.cat([parts["q"], parts["k"], parts["v"]])
    if unknown:
        raise ValueError(f"not Llama weights we know: {unknown[:10]}{' ...' if len(unknown) > 10 else ''}")
    return converted


def load_llama_tokenizer(hf_dir: str | os.PathLike[str]) -> TextTokenizer | None:
    """The folder's ``tokenizer.json`` as our tokenizer; None (with a warning) when absent or not byte-level BPE."""
    path = Path(hf_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        return TextTokenizer.from_hf_tokenizer_json(path)
    except (ValueError, KeyError) as error:
        warnings.warn(f"{path}: not converted ({error}); the weights are converted without a tokenizer", stacklevel=2)
        return None


def convert_llama(hf_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], **config_overrides: Any) -> Path:
    """Writes a Llama folder in our export format: ``blocks.safetensors`` + ``config.json`` (+ ``tokenizer.json``).

    The result is what a task's ``init_from`` takes (see :mod:`multimodal.convert.blocks`).
    """
    model = load_llama(hf_dir, **config_overrides)
    tokenizer = load_llama_tokenizer(hf_dir)
    return export_blocks(model, out_dir, tokenizer=tokenizer, metadata={"converted_from": f"llama:{Path(hf_dir)}"})

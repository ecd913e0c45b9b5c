"""Hugging Face GPT-2 folder on disk -> our :class:`~multimodal.models.CausalLM` and tokenizer.

No ``transformers`` needed: the folder's ``config.json`` gives the sizes, ``model.safetensors``
(or ``pytorch_model.bin``, read with ``torch.load(weights_only=True)``) the weights, and
``tokenizer.json`` (or ``vocab.json`` + ``merges.txt``) the byte-level BPE.

GPT-2 is a pre-norm Transformer with learned absolute positions, ``gelu_tanh`` ("gelu_new"),
LayerNorm eps 1e-5, biases in every linear layer and a head tied to the token embedding — all
options of our blocks, so the conversion is a renaming plus one transposition: GPT-2's ``Conv1D``
stores weights as ``(in_features, out_features)``, ``nn.Linear`` as ``(out, in)``. Its fused
``c_attn`` output is ``[q | k | v]`` with heads contiguous inside each, the ``(three h d)`` layout
of our ``to_qkv``.

=======================================  =========================================
GPT-2 (``transformer.`` prefix optional)   ours
=======================================  =========================================
``wte.weight``                            ``embedding.weight`` (= ``head.weight``)
``wpe.weight``                            ``decoder.positions.weight``
``h.{i}.ln_1``                            ``decoder.blocks.{i}.norm_attention``
``h.{i}.attn.c_attn`` (transposed)        ``decoder.blocks.{i}.attention.to_qkv``
``h.{i}.attn.c_proj`` (transposed)        ``decoder.blocks.{i}.attention.to_out``
``h.{i}.ln_2``                            ``decoder.blocks.{i}.norm_ff``
``h.{i}.mlp.c_fc`` (transposed)           ``decoder.blocks.{i}.ff.up``
``h.{i}.mlp.c_proj`` (transposed)         ``decoder.blocks.{i}.ff.down``
``ln_f``                                  ``decoder.norm``
``lm_head.weight`` (untied models only)   ``head.weight``
=======================================  =========================================
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from torch import Tensor

from multimodal.convert.blocks import export_blocks
from multimodal.convert.hf_folder import load_causal_lm
from multimodal.models import CausalLM, CausalLMConfig
from multimodal.tokenizers.text import TextTokenizer

_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
_BLOCK_NAMES = {
    "ln_1": "norm_attention",
    "attn.c_attn": "attention.to_qkv",
    "attn.c_proj": "attention.to_out",
    "ln_2": "norm_ff",
    "mlp.c_fc": "ff.up",
    "mlp.c_proj": "ff.down",
}
_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
_IGNORED = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers of old checkpoints


def gpt2_config(hf_config: dict[str, Any], **overrides: Any) -> CausalLMConfig:
    """Our config for a Hugging Face GPT-2 ``config.json`` (as a dict).

    Dropout comes from ``resid_pdrop`` / ``attn_pdrop`` (GPT-2 fine-tunes with them on); pass
    ``dropout=0.0`` in ``overrides`` to turn it off.

    Raises:
        ValueError: For GPT-2 variants our blocks do not compute (cross-attention, per-layer
            attention scaling, ...), naming the option.
    """
    if hf_config.get("model_type", "gpt2") != "gpt2":
        raise ValueError(f"config.json is a {hf_config.get('model_type')!r} model, not gpt2")
    unsupported = {
        "add_cross_attention": False,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "scale_attn_weights": True,
    }
    for key, supported in unsupported.items():
        if hf_config.get(key, supported) != supported:
            raise ValueError(
                f"GPT-2 option {key}={hf_config[key]} is not supported by our blocks (needs {supported})"
            )
    activation = hf_config.get("activation_function", "gelu_new")
    if activation not in _ACTIVATIONS:
        raise ValueError(
            f"GPT-2 activation {activation!r} has no equivalent here; supported: {sorted(_ACTIVATIONS)}"
        )
    values = dict(
        vocab_size=hf_config["vocab_size"],
        dim=hf_config["n_embd"],
        num_layers=hf_config["n_layer"],
        num_heads=hf_config["n_head"],
        ff_dim=hf_config.get("n_inner") or 4 * hf_config["n_embd"],
        dropout=hf_config.get("resid_pdrop", 0.1),
        attention_dropout=hf_config.get("attn_pdrop", 0.1),
        position="learned",
        max_seq_len=hf_config["n_positions"],
        activation=_ACTIVATIONS[activation],
        norm_eps=hf_config.get("layer_norm_epsilon", 1e-5),
        bias=True,
        tie_embeddings=hf_config.get("tie_word_embeddings", True),
    )
    return CausalLMConfig(**{**values, **overrides})


def load_gpt2(hf_dir: str | os.PathLike[str], **config_overrides: Any) -> CausalLM:
    """Builds our ``CausalLM`` with the weights of a Hugging Face GPT-2 folder (eval mode).

    Args:
        hf_dir: Folder with ``config.json`` and ``model.safetensors`` or ``pytorch_model.bin``.
        config_overrides: Changes to the derived :class:`CausalLMConfig` (e.g. ``dropout=0.0``).
    """
    return load_causal_lm(hf_dir, "GPT-2", gpt2_config, convert_gpt2_state_dict, **config_overrides)


def convert_gpt2_state_dict(state: dict[str, Tensor], config: CausalLMConfig) -> dict[str, Tensor]:
    """GPT-2 names and layouts -> ours (see the module table). Unknown names are an error."""
    converted: dict[str, Tensor] = {}
    unknown = []
    for name, tensor in state.items():
        short = name.removeprefix("transformer.")
        if _IGNORED.search(short):
            continue
        if short == "wte.weight":
            converted["embedding.weight"] = tensor
        elif short == "wpe.weight":
            converted["decoder.positions.weight"] = tensor
        elif short.startswith("ln_f."):
            converted["decoder.norm." + short.removeprefix("ln_f.")] = tensor
        elif short == "lm_head.weight":
            if not config.tie_embeddings:
                converted["head.weight"] = tensor
        elif match := re.fullmatch(r"h\.(\d+)\.(.+)\.(weight|bias)", short):
            layer, module, kind = match.groups()
            if module not in _BLOCK_NAMES:
                unknown.append(name)
                continue
            if module in _CONV1D and kind == "weight":
                tensor = tensor.t()
            converted[f"decoder.blocks.{layer}.{_BLOCK_NAMES[module]}.{kind}"] = tensor.contiguous()
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(f"not GPT-2 weights we know: {unknown[:10]}{' ...' if len(unknown) > 10 else ''}")
    return converted


def load_gpt2_tokenizer(hf_dir: str | os.PathLike[str]) -> TextTokenizer | None:
    """The folder's tokenizer: ``tokenizer.json`` if present, else ``vocab.json`` + ``merges.txt``; None if neither."""
    folder = Path(hf_dir)
    if (folder / "tokenizer.json").is_file():
        return TextTokenizer.from_hf_tokenizer_json(folder / "tokenizer.json")
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return TextTokenizer.from_gpt2_files(folder / "vocab.json", folder / "merges.txt")
    return None


def convert_gpt2(
    hf_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], **config_overrides: Any
) -> Path:
    """Writes a GPT-2 folder in our export format: ``blocks.safetensors`` + ``config.json`` + ``tokenizer.json``.

    The result is what a task's ``init_from`` takes (see :mod:`multimodal.convert.blocks`).

    Raises:
        ValueError: If the tokenizer's vocabulary is larger than the model's embedding table.
    """
    model = load_gpt2(hf_dir, **config_overrides)
    tokenizer = load_gpt2_tokenizer(hf_dir)
    if tokenizer is not None and tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer of {hf_dir} has {tokenizer.vocab_size} ids but the model only {model.config.vocab_size} "
            f"embeddings; is this the right tokenizer?"
        )
    return export_blocks(
        model, out_dir, tokenizer=tokenizer, metadata={"converted_from": f"gpt2:{Path(hf_dir)}"}
    )

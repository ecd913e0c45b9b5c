"""Tiny reference models with random weights for conversion tests, built with ``transformers``.

Nothing is downloaded: each helper builds a model from a small config, perturbs every weight
(so biases and norms are not at their trivial initial values) and saves it to a folder the way the
library saves real checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

#: A toy GPT-2 vocabulary: the 256 byte symbols, these merges, then <|endoftext|>.
GPT2_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "Ġ w", "o r", "Ġ s", "d e", "Ġ d", "Ġd e", "e f"]
GPT2_VOCAB_SIZE = 256 + len(GPT2_MERGES) + 1


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (OpenAI encoder.py)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def write_gpt2_vocabulary(folder: Path) -> None:
    """``vocab.json`` + ``merges.txt`` of the toy vocabulary."""
    symbols = [bytes_to_unicode()[byte] for byte in range(256)]
    tokens = symbols + [merge.replace(" ", "") for merge in GPT2_MERGES] + ["<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(
        json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False), encoding="utf-8"
    )
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(GPT2_MERGES) + "\n", encoding="utf-8")


def tiny_gpt2(
    folder: Path,
    *,
    dim: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    max_seq_len: int = 64,
    weights: str = "safetensors",
    tokenizer: str = "files",
    seed: int = 0,
    **config: object,
):
    """Saves a random ``GPT2LMHeadModel`` to ``folder``; returns it (eval mode).

    Args:
        weights: ``"safetensors"`` (``save_pretrained``) or ``"bin"`` (a ``pytorch_model.bin`` state dict).
        tokenizer: ``"files"`` (vocab.json + merges.txt), ``"json"`` (tokenizer.json only) or ``"none"``.
    """
    import transformers

    torch.manual_seed(seed)
    hf_config = transformers.GPT2Config(
        vocab_size=GPT2_VOCAB_SIZE, n_embd=dim, n_layer=num_layers, n_head=num_heads, n_positions=max_seq_len,
        bos_token_id=GPT2_VOCAB_SIZE - 1, eos_token_id=GPT2_VOCAB_SIZE - 1, **config,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(hf_config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    if weights == "bin":
        (folder / "model.safetensors").unlink()
        torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "pytorch_model.bin")
    if tokenizer != "none":
        write_gpt2_vocabulary(folder)
        if tokenizer == "json":
            fast = transformers.GPT2TokenizerFast.from_pretrained(str(folder))
            fast.backend_tokenizer.save(str(folder / "tokenizer.json"))
            (folder / "vocab.json").unlink()
            (folder / "merges.txt").unlink()
    return model

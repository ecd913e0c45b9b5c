"""``multimodal convert gpt2|llama|timm-vit`` and ``multimodal export``: weights in our export format.

The export format (``blocks.safetensors`` + ``config.json`` [+ ``tokenizer.json``], see
:mod:`multimodal.convert.blocks`) is what a task's ``finetune.init_from`` takes::

    multimodal convert gpt2 --hf-dir path/to/gpt2 --out outputs/gpt2_converted
    multimodal convert llama --hf-dir path/to/llama --out outputs/llama_converted
    multimodal convert timm-vit --weights vit_base_patch16_224.safetensors --out outputs/vit_converted
    multimodal export --checkpoint outputs/text_lm --out outputs/text_blocks
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out`` and ``--overwrite``, which every kind of conversion takes."""
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--overwrite", action="store_true", help="replace an export already there")


def convert_command(argv: list[str]) -> None:
    """``multimodal convert``: converts weights already on disk (nothing is downloaded)."""
    parser = argparse.ArgumentParser(prog="multimodal convert", description=convert_command.__doc__)
    kinds = parser.add_subparsers(dest="kind", required=True)
    gpt2 = kinds.add_parser(
        "gpt2",
        help="a Hugging Face GPT-2 folder (config.json + model.safetensors or pytorch_model.bin)",
        description="Writes blocks.safetensors + config.json + tokenizer.json; init_from: OUT loads them.",
    )
    gpt2.add_argument("--hf-dir", type=Path, required=True, help="the Hugging Face GPT-2 folder")
    _add_output_arguments(gpt2)
    llama = kinds.add_parser(
        "llama",
        help="a Hugging Face Llama folder (config.json + model.safetensors, sharded or not)",
        description="Writes blocks.safetensors + config.json (+ tokenizer.json); init_from: OUT loads them.",
    )
    llama.add_argument("--hf-dir", type=Path, required=True, help="the Hugging Face Llama folder")
    _add_output_arguments(llama)
    vit = kinds.add_parser(
        "timm-vit",
        help="a timm vit_* state dict (.safetensors, or .pth read with weights_only=True)",
        description="Writes blocks.safetensors + config.json; init_from: OUT loads them.",
    )
    vit.add_argument("--weights", type=Path, required=True, help="the state dict file")
    _add_output_arguments(vit)
    vit.add_argument(
        "--model-name", default=None, help="timm name, e.g. vit_base_patch16_224 (gives the heads)"
    )
    vit.add_argument(
        "--num-heads", type=int, default=None, help="attention heads (not visible in the weights)"
    )
    vit.add_argument(
        "--image-size", type=int, nargs="+", default=None, help="H [W]; default: read off pos_embed"
    )
    args = parser.parse_args(argv)
    _claim_export(args.out, args.overwrite)
    if args.kind == "gpt2":
        from multimodal.convert.gpt2 import convert_gpt2

        out = convert_gpt2(args.hf_dir, args.out)
    elif args.kind == "llama":
        from multimodal.convert.llama import convert_llama

        out = convert_llama(args.hf_dir, args.out)
    else:
        from multimodal.convert.timm_vit import convert_timm_vit

        size = None if args.image_size is None else (args.image_size * 2)[:2]
        out = convert_timm_vit(args.weights, args.out, num_heads=args.num_heads, model_name=args.model_name,
                               image_size=None if size is None else tuple(size))  # fmt: skip
    _print_summary(out)


def _print_summary(out: Path) -> None:
    meta = json.loads((out / "config.json").read_text(encoding="utf-8"))
    counts = ", ".join(f"{len(names)} {part} tensors" for part, names in meta["parts"].items())
    print(f"wrote {out}: {meta['model_class']} ({counts}); use it with finetune.init_from: {out}")


def _claim_export(out: Path, overwrite: bool) -> None:
    from multimodal.data.storage import claim_paths

    claim_paths([out / "blocks.safetensors", out / "config.json", out / "tokenizer.json"], overwrite)

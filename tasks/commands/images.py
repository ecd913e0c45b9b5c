"""``multimodal generate`` for the image checkpoints: image generation, super-resolution, and classification's refusal.

Three kinds of task share this module, so each has its own :class:`~tasks.commands.TaskCommands`
(:data:`generation`, :data:`super_resolution`, :data:`classification`), which
:data:`tasks.commands.TASK_COMMANDS` names. Reading, converting and naming image files is library
code (:mod:`multimodal.images.files`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

from multimodal.data.image_folder import to_mode
from multimodal.data.images import SKIMAGE_HELD_OUT_PHOTOS, bicubic_downsample, skimage_photos
from multimodal.data.storage import claim_paths
from multimodal.images import (
    check_output_size,
    class_labels,
    image_to_tensor,
    read_image,
    sample_image_files,
    sample_images,
    save_image,
    upscale,
    upscaled_files,
    write_image_samples,
)
from multimodal.limits import MAX_BATCH_SIZE, MAX_OUTPUT_PIXELS, MAX_SAMPLES
from multimodal.models.super_resolution import bicubic_upsample
from multimodal.viz import side_by_side_png
from tasks.arguments import count, non_negative_float, non_negative_int, positive_int, sampling_from_args
from tasks.commands import TaskCommands


# ------------------------------------------------------------------------------------ image generation
def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``multimodal generate`` for image-generation checkpoints."""
    parser.add_argument("--num-samples", type=count(MAX_SAMPLES), default=16,
                        help=f"images to draw (at most {MAX_SAMPLES:,}; each is a file)")  # fmt: skip
    parser.add_argument("--label", type=int, default=None,
                        help="class id for every image (class-conditional models; default: cycle through classes)")  # fmt: skip
    parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=64,
                        help=f"images decoded together (at most {MAX_BATCH_SIZE:,})")  # fmt: skip
    parser.add_argument("--guidance-scale", type=non_negative_float, default=1.0,
                        help="classifier-free guidance toward the class: > 1 follows it more strictly (1: off; "
                             "models trained with class_dropout > 0; docs/image_generation.md)")  # fmt: skip


def run_generation(model: nn.Module, tokenizer: Any, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """Writes ``sample_<i>.png`` (native size) and ``grid.png`` to ``args.out``."""
    if args.guidance_scale != 1.0 and getattr(model, "no_class_id", None) is None:
        raise ValueError("--guidance-scale: this model has no 'no class' label to guide against; train a "
                         "class-conditional one with model.class_dropout > 0 (docs/image_generation.md)")  # fmt: skip
    out = Path(args.out)
    claim_paths(sample_image_files(out, args.num_samples), args.overwrite)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    labels = class_labels(model, args.num_samples)
    if labels is not None and args.label is not None:
        labels = torch.full_like(labels, args.label)
    samples = sample_images(model, args.num_samples, sampling_from_args(args), labels=labels,
                            batch_size=args.batch_size, progress=True)  # fmt: skip
    nrow = model.config.num_classes if labels is not None and args.label is None else None
    grid = write_image_samples(samples, out, nrow=nrow)
    print(f"wrote {len(samples)} images to {out}/sample_*.png and the grid {grid}")


generation = TaskCommands(add_generate_arguments=add_generation_arguments, run_generate=run_generation)
"""``multimodal generate`` of :class:`~tasks.image_generation.ImageGeneration` checkpoints."""


# ------------------------------------------------------------------------------------ super-resolution
def add_super_resolution_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``multimodal generate`` for super-resolution checkpoints."""
    parser.add_argument("--input", type=Path, default=None,
                        help="image to upscale (any size); default: the held-out photo 'chelsea', evaluated")  # fmt: skip
    parser.add_argument("--evaluate", action="store_true",
                        help="treat --input as the ground truth: downsample it first, report PSNR/SSIM vs bicubic")  # fmt: skip
    parser.add_argument("--tile", type=positive_int, default=None, help="tile side in low-resolution pixels")
    parser.add_argument("--overlap", type=non_negative_int, default=None, help="overlap of neighbouring tiles")
    parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8,
                        help=f"tiles per forward pass (at most {MAX_BATCH_SIZE:,})")  # fmt: skip
    parser.add_argument("--max-output-pixels", type=positive_int, default=MAX_OUTPUT_PIXELS,
                        help=f"refuse an input whose upscaled image has more pixels (default "
                             f"{MAX_OUTPUT_PIXELS:,} = 4096x4096, checked from the file's header; "
                             f"each pixel takes about 60 bytes)")  # fmt: skip


def run_super_resolution(model: nn.Module, tokenizer: Any, args: argparse.Namespace, data: Mapping[str, Any]) -> None:
    """Writes ``<name>_x<scale>.png`` and ``<name>_side_by_side.png`` (bicubic | ours [| original]).

    The autoregressive model samples each tile as ``--temperature`` / ``--top-k`` / ``--top-p`` /
    ``--seed`` say; the regression model has nothing to sample.
    """
    scale, channels = model.config.scale, model.config.channels
    if args.input is None:
        name, evaluate = SKIMAGE_HELD_OUT_PHOTOS[0], True
        image = skimage_photos([name])[0]
    else:
        name, evaluate = args.input.stem, args.evaluate

        def check_size(width: int, height: int) -> None:  # from the header: a huge image is never decoded
            low_height, low_width = (height // scale, width // scale) if evaluate else (height, width)
            check_output_size(low_height, low_width, scale, args.max_output_pixels, str(args.input),
                              raise_with="--max-output-pixels (about 60 bytes per pixel)")  # fmt: skip

        image = read_image(args.input, check_size)
    original = image_to_tensor(to_mode(image, "L" if channels == 1 else "RGB"))
    if evaluate:
        height, width = original.shape[-2] // scale * scale, original.shape[-1] // scale * scale
        if min(height, width) < 8 * scale:
            raise ValueError(f"{args.input or name}: {original.shape[-1]}x{original.shape[-2]} pixels is too small to "
                             f"evaluate x{scale} (at least {8 * scale}x{8 * scale}); leave out --evaluate to upscale it")  # fmt: skip
        original = original[:, :height, :width]
        low_res = bicubic_downsample(original, scale)
    else:
        low_res = original
    upscaled, side_by_side = upscaled_files(args.out, name, scale)
    claim_paths([upscaled, side_by_side], args.overwrite)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(args.seed) if args.seed is not None else None
    ours = upscale(model, low_res.to(device), tile=args.tile, overlap=args.overlap, batch_size=args.batch_size,
                   progress=True, max_output_pixels=args.max_output_pixels, sampling=sampling_from_args(args),
                   generator=generator).cpu()  # fmt: skip
    bicubic = bicubic_upsample(low_res[None], scale)[0]
    save_image(ours, upscaled)
    panels = [("bicubic", bicubic), ("ours", ours)] + ([("original", original)] if evaluate else [])
    side_by_side_png(panels, side_by_side)
    print(f"wrote {upscaled} ({ours.shape[-1]}x{ours.shape[-2]}) and {side_by_side.name}")
    if evaluate:
        for label, image_ in (("bicubic", bicubic), ("ours", ours)):
            psnr = peak_signal_noise_ratio(image_[None], original[None], data_range=1.0).item()
            ssim = structural_similarity_index_measure(image_[None], original[None], data_range=1.0).item()
            print(f"{label:>8}: PSNR {psnr:.2f} dB, SSIM {ssim:.4f}")


super_resolution = TaskCommands(add_generate_arguments=add_super_resolution_arguments,
                                run_generate=run_super_resolution)  # fmt: skip
"""``multimodal generate`` of both super-resolution tasks (regression and autoregressive)."""


# ------------------------------------------------------------------------------------- classification
def refuse_classification(parser: argparse.ArgumentParser) -> NoReturn:
    """Classifiers do not generate; says what to run instead."""
    parser.exit(
        2,
        "an image classification checkpoint does not generate; classify images with `multimodal "
        "predict --config CONFIG --ckpt_path CKPT [--data.init_args.predict_dir DIR]`\n",
    )


classification = TaskCommands(add_generate_arguments=refuse_classification)
"""Image classification has no ``generate``: its options say what to run instead."""

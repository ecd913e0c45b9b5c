"""Images end to end without Lightning: sample pixels (:mod:`.generation`), upscale (:mod:`.super_resolution`),
score super-resolution as the papers do (:mod:`.metrics`), judge class-conditional samples with a classifier
(:mod:`.recognition`), read and write image files (:mod:`.files`)."""

from __future__ import annotations

from multimodal.images.files import (
    image_to_tensor,
    read_image,
    sample_image_files,
    save_image,
    tensor_to_uint8,
    upscaled_files,
    write_image_samples,
)
from multimodal.images.generation import class_labels, sample_high_res, sample_images
from multimodal.images.metrics import luma, psnr_y
from multimodal.images.recognition import ClassAccuracy, classification_accuracy_score
from multimodal.images.super_resolution import (
    ImageTooLarge,
    blend_weights,
    check_output_size,
    tile_starts,
    upscale,
)

__all__ = [
    "ClassAccuracy", "ImageTooLarge", "blend_weights", "check_output_size", "class_labels",
    "classification_accuracy_score", "image_to_tensor", "luma", "psnr_y", "read_image", "sample_high_res", "sample_image_files", "sample_images", "save_image", "tensor_to_uint8",
    "tile_starts", "upscale", "upscaled_files", "write_image_samples",
]  # fmt: skip

"""The image pages: sample grids, super-resolution next to bicubic, class probabilities."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from multimodal.data.image_folder import to_mode
from multimodal.generation import SamplingConfig
from multimodal.images import (
    ImageTooLarge,
    check_output_size,
    image_to_tensor,
    sample_images,
    save_image,
    upscale,
    upscaled_files,
)
from multimodal.images.files import read_image
from multimodal.limits import MAX_OUTPUT_PIXELS
from multimodal.models.super_resolution import bicubic_upsample
from multimodal.viz import image_grid, side_by_side_png
from tasks.serve.checks import SEEDS, bounded

TEMPERATURE = (0.1, 1.5)  # the widget's bounds, checked again in the function (the API)
SAMPLES = (1, 64)  # the same for the number of samples: a request cannot ask for 10**9 images


def _open(path: str, check_size: Callable[[int, int], None] | None = None) -> Image.Image:
    """An uploaded image, decoded (:func:`multimodal.images.files.read_image`); a file that is not one is
    a ``ValueError`` naming the upload by its name only (not the server's temporary path)."""
    try:
        return read_image(Path(path), check_size)
    except (ValueError, OSError) as error:
        if isinstance(error, ValueError) and error.__cause__ is None:
            raise  # check_size's own message (too large to upscale here)
        kind = type(error.__cause__ or error).__name__
        raise ValueError(f"{Path(path).name} is not a readable image ({kind})") from error


class GenerationSession:
    """Image generation without the page: a grid of samples (of one class, for a class-conditional model)."""

    def __init__(self, task: Any) -> None:
        self.task = task

    def sample(self, label: str | None, count: int, temperature: float, seed: int) -> tuple[Any, str]:
        """``(grid (H, W, 3) uint8, message)``; a ``gradio.Error`` for a setting outside its widget's bounds."""
        config = self.task.config
        count = int(bounded("samples", count, *SAMPLES, whole=True))
        temperature = bounded("temperature", temperature, *TEMPERATURE)
        seed = int(bounded("seed", seed, *SEEDS, whole=True))
        labels = None
        if config.class_conditional:
            label = int(bounded("class", label or 0, 0, config.num_classes - 1, whole=True))
            labels = torch.full((int(count),), label, dtype=torch.long, device=self.task.device)
        generator = torch.Generator(device=self.task.device).manual_seed(seed)
        sampling = SamplingConfig(temperature=temperature)
        images = sample_images(self.task.model, int(count), sampling, labels=labels, generator=generator)
        grid = image_grid(images, pixel_scale=max(1, 64 // config.width))
        return grid, f"{int(count)} samples" + (f" of class {label}" if labels is not None else "")


def generation_page(task: Any) -> Any:
    """The Gradio page of an image-generation checkpoint."""
    import gradio as gr

    session = GenerationSession(task)
    config = task.config
    with gr.Blocks(title="multimodal: image generation") as page:
        gr.Markdown(f"# Image generation\n{type(task.model).__name__}, {config.height}x{config.width} pixels, "
                    f"{config.num_levels} levels per channel.")  # fmt: skip
        with gr.Row():
            classes = [str(i) for i in range(config.num_classes)] if config.class_conditional else []
            label = gr.Dropdown(classes, value=classes[0] if classes else None, label="class",
                                visible=bool(classes))  # fmt: skip
            count = gr.Slider(*SAMPLES, value=16, step=1, label="samples")
            temperature = gr.Slider(*TEMPERATURE, value=1.0, step=0.05, label="temperature")
            seed = gr.Number(0, precision=0, minimum=SEEDS[0], maximum=SEEDS[1], label="seed")
        button = gr.Button("Sample", variant="primary")
        message = gr.Markdown()
        grid = gr.Image(label="samples", type="numpy")
        button.click(session.sample, [label, count, temperature, seed], [grid, message], api_name="sample")
    return page


class SuperResolutionSession:
    """Super-resolution without the page: an uploaded image upscaled, beside bicubic."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.folder = Path(tempfile.mkdtemp(prefix="multimodal-serve-"))
        self.count = 0

    def upscale(self, upload: str | None) -> tuple[str | None, str | None, str]:
        """``(side-by-side png, upscaled png, message)``; a message alone for a missing or broken upload."""
        if not upload:
            return None, None, "Upload an image to upscale."
        config = self.task.config

        def check_size(width: int, height: int) -> None:  # the header's size: a huge upload is never decoded
            check_output_size(height, width, config.scale, MAX_OUTPUT_PIXELS, Path(upload).name,
                              raise_with=None)  # fmt: skip

        try:
            image = _open(upload, check_size)
        except ImageTooLarge as error:
            return None, None, f"Too large to upscale here: {error}"
        except ValueError as error:
            return None, None, f"Could not read the upload: {error}"
        low_res = image_to_tensor(to_mode(image, "L" if config.channels == 1 else "RGB"))
        ours = upscale(self.task.model, low_res.to(self.task.device)).cpu()
        bicubic = bicubic_upsample(low_res[None], config.scale)[0]
        self.count += 1
        upscaled, side_by_side = upscaled_files(self.folder, str(self.count), config.scale)
        side_by_side_png([("bicubic", bicubic), ("ours", ours)], side_by_side)
        save_image(ours, upscaled)
        return str(side_by_side), str(upscaled), f"{low_res.shape[-1]}x{low_res.shape[-2]} → x{config.scale}"


def super_resolution_page(task: Any) -> Any:
    """The Gradio page of a super-resolution checkpoint."""
    import gradio as gr

    session = SuperResolutionSession(task)
    with gr.Blocks(title="multimodal: super-resolution") as page:
        gr.Markdown(f"# Super-resolution x{task.config.scale}\nUpload an image: bicubic on the left, the model on the right.")
        upload = gr.File(label="image", file_types=["image"], type="filepath")
        button = gr.Button("Upscale", variant="primary")
        message = gr.Markdown()
        compared = gr.Image(label="bicubic | ours", type="filepath")
        result = gr.File(label="upscaled image")
        button.click(session.upscale, [upload], [compared, result, message], api_name="upscale")
    return page


class ClassificationSession:
    """Classification without the page: class probabilities of an uploaded image, with the run's transforms."""

    def __init__(self, task: Any, data: dict[str, Any]) -> None:
        from tasks.datamodules.image_classification import prediction_pipeline

        self.task = task
        self.pipeline, self.mode = prediction_pipeline(task.config.channels, data.get("image_size"), data.get("transform"))

    def classify(self, upload: str | None) -> tuple[dict[str, float] | None, str]:
        """``({class name: probability}, message)``; a message alone for a missing or broken upload."""
        if not upload:
            return None, "Upload an image to classify."
        try:
            pixels = to_mode(_open(upload), self.mode)
        except ValueError as error:
            return None, f"Could not read the upload: {error}"
        image = self.pipeline(pixels).as_subclass(torch.Tensor)
        expected = self.task.config.image_size
        expected = (expected, expected) if isinstance(expected, int) else tuple(expected)
        if tuple(image.shape[-2:]) != expected:
            return None, f"The model takes {expected[1]}x{expected[0]} images; this one is {image.shape[-1]}x{image.shape[-2]}."
        with torch.no_grad():
            probabilities = torch.softmax(self.task.model(image[None].to(self.task.device)).float(), -1)[0].cpu()
        names = self.task.class_names or [str(i) for i in range(len(probabilities))]
        return {name: float(p) for name, p in zip(names, probabilities, strict=True)}, ""


def classification_page(task: Any, data: dict[str, Any]) -> Any:
    """The Gradio page of an image-classification checkpoint (``data``: its run's data settings)."""
    import gradio as gr

    session = ClassificationSession(task, data)
    with gr.Blocks(title="multimodal: image classification") as page:
        gr.Markdown("# Image classification\nUpload an image: the model's class probabilities.")
        upload = gr.File(label="image", file_types=["image"], type="filepath")
        button = gr.Button("Classify", variant="primary")
        message = gr.Markdown()
        probabilities = gr.Label(label="classes", num_top_classes=5)
        button.click(session.classify, [upload], [probabilities, message], api_name="classify")
    return page

"""Sampling images pixel by pixel: unconditional / class-conditional grids and conditioned high-resolution images.

No Lightning here: the functions take the models of :mod:`multimodal.models` and plain tensors.
Images are float ``(channels, height, width)`` in ``[0, 1]`` unless said otherwise.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from multimodal.generation.config import SamplingConfig
from multimodal.generation.sample import generate
from multimodal.models.image_transformer import ImageTransformer
from multimodal.models.super_resolution import ConditionalImageTransformer
from multimodal.tokenizers.image import tokens_to_pixels


def class_labels(model: ImageTransformer, count: int) -> Tensor | None:
    """Class ids ``0, 1, …, num_classes - 1, 0, …`` (on the model's device) for a class-conditional model, else None."""
    config = model.config
    if not config.class_conditional:
        return None
    return torch.arange(count, device=next(model.parameters()).device) % config.num_classes


@torch.no_grad()
def sample_images(
    model: ImageTransformer,
    num_images: int,
    sampling: SamplingConfig | None = None,
    *,
    labels: Tensor | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    batch_size: int = 64,
    progress: bool = False,
    **options: Any,
) -> Tensor:
    """Draws images from an Image Transformer, one sub-pixel at a time; returns uint8 ``(n, c, h, w)``.

    Args:
        model: The trained model.
        num_images: How many images.
        sampling: How each sub-pixel level is chosen (:class:`~multimodal.generation.config.SamplingConfig`;
            ``options``: its fields as keywords; temperature 0: the most likely level at every step).
        labels: Class ids ``(num_images,)``; required by a class-conditional model.
        generator: Random generator, for reproducible samples.
        use_cache: KV-cached decoding (each step costs the local window); False re-runs the prefix.
        batch_size: Images decoded together.
        progress: Show a progress bar per batch (generation is slow: one step per sub-pixel).

    ``sampling.guidance_scale != 1`` samples with classifier-free guidance
    (:mod:`multimodal.generation.guidance`) between each label and the "no class" label, which a
    model trained with ``class_dropout > 0`` knows.
    """
    sampling = SamplingConfig.of(sampling, **options)
    config = model.config
    if config.class_conditional and labels is None:
        raise ValueError("this model is class-conditional: pass labels=(num_images,) class ids")
    guided = sampling.guidance_scale != 1.0
    if guided and model.no_class_id is None:
        raise ValueError("guidance_scale needs a class-conditional model trained with class_dropout > 0 "
                         "(it learns the images without their class too)")  # fmt: skip
    device = next(model.parameters()).device
    images = []
    for start in range(0, num_images, batch_size):
        count = min(batch_size, num_images - start)
        batch_labels = None if labels is None else labels[start : start + count].to(device)
        prompt = torch.full((count, 1), model.bos_id, dtype=torch.long, device=device)
        if guided:  # the guided rows' twins ask for "no class"; their prompt is the same BOS
            batch_labels = torch.cat([batch_labels, torch.full_like(batch_labels, model.no_class_id)])
        tokens = generate(
            _Bound(model, batch_labels), prompt, config.seq_len, sampling, generator=generator, use_cache=use_cache,
            progress=progress, unconditional_prompt=prompt if guided else None,
        )  # fmt: skip
        images.append(
            tokens_to_pixels(tokens[:, 1:], config.height, config.width, config.channels, config.num_levels)
        )
    return torch.cat(images).cpu()


@torch.no_grad()
def sample_high_res(
    model: ConditionalImageTransformer,
    low_res: Tensor,
    sampling: SamplingConfig | None = None,
    *,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    progress: bool = False,
    **options: Any,
) -> Tensor:
    """Samples high-resolution images ``(batch, c, h * scale, w * scale)`` in ``[0, 1]`` given ``low_res``.

    Args:
        model: The conditional Image Transformer.
        low_res: ``(batch, channels, h, w)`` in ``[0, 1]``.
        sampling: How each level is chosen (``options``: its fields as keywords); a lower temperature
            is sharper but less varied (0: greedy).
        generator: Random generator, for reproducible samples.
        use_cache: KV-cached decoding; False re-runs the prefix at every step (reference).
        progress: Show a progress bar.
    """
    sampling = SamplingConfig.of(sampling, **options)
    config = model.config
    was_training = model.training
    model.eval()
    condition = model.condition(low_res)
    height, width = low_res.shape[-2] * config.scale, low_res.shape[-1] * config.scale
    prompt = torch.full((low_res.shape[0], 1), model.bos_id, dtype=torch.long, device=low_res.device)
    tokens = generate(
        _Bound(model, condition, state_of_extra=True), prompt, height * width * config.channels, sampling,
        generator=generator, use_cache=use_cache, progress=progress,
    )  # fmt: skip
    model.train(was_training)
    pixels = tokens_to_pixels(tokens[:, 1:], height, width, config.channels, config.num_levels)
    return pixels.float() / 255


class _Bound(nn.Module):
    """Binds a model's extra inputs so :func:`~multimodal.generation.generate` can call ``model(tokens, state=...)``.

    ``state_of_extra``: the model's ``new_state`` takes the extra input too (the conditional
    decoder's grid width comes with its condition).
    """

    def __init__(self, model: nn.Module, extra, state_of_extra: bool = False) -> None:
        super().__init__()
        self.model = model
        self.extra = extra
        self.state_of_extra = state_of_extra

    def forward(self, tokens: Tensor, state=None) -> Tensor:
        return self.model(tokens, self.extra, state=state)

    def new_state(self):
        return self.model.new_state(self.extra) if self.state_of_extra else self.model.new_state()

    @property
    def config(self):
        """The bound model's config: its ``max_seq_len`` bounds what one generation call may ask."""
        return self.model.config

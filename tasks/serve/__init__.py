"""``multimodal serve``: a local web page suited to a checkpoint's task, built on Gradio (the ``serve`` extra).

One page per kind of model, each in its own module: :mod:`~tasks.serve.music` (continue a held-out
or uploaded MIDI primer: hear it, see the piano roll, download the MIDI), :mod:`~tasks.serve.text`
(a prompt, streamed), :mod:`~tasks.serve.images` (image generation grids, super-resolution next
to bicubic, class probabilities), :mod:`~tasks.serve.audio` (a recording transcribed to MIDI and a
piano roll). Each page's work is a plain function of its inputs (tested
without a browser); a bad upload gives a message on the page, not a stack trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.serve.checks import CONCURRENCY, QUEUE_SIZE


def build_page(
    task: Any, tokenizer: Any, data: dict[str, Any], checkpoint: Path, concurrency: int = CONCURRENCY,
    queue_size: int = QUEUE_SIZE,
) -> Any:
    """The ``gradio.Blocks`` page for ``task`` (its model in eval mode), the run's data settings and the
    checkpoint it came from (what :func:`tasks.checkpoint.load_task` returns), with a bounded queue:
    ``concurrency`` requests computed at once, ``queue_size`` more waiting, the rest refused."""
    page = _page(task, tokenizer, data, checkpoint)
    page.delete_cache = (3600, 3600)  # Gradio's copies of uploads and results: deleted hourly once an hour old
    return page.queue(default_concurrency_limit=concurrency, max_size=queue_size)


def _page(task: Any, tokenizer: Any, data: dict[str, Any], checkpoint: Path) -> Any:
    from tasks.image_classification import ImageClassification
    from tasks.image_generation import ImageGeneration
    from tasks.language_modeling import LanguageModeling
    from tasks.music_continuation import MusicContinuation
    from tasks.super_resolution import AutoregressiveSuperResolution, SuperResolution
    from tasks.transcription import Transcription

    if isinstance(task, MusicContinuation):
        from tasks.serve.music import music_page

        return music_page(task, tokenizer, data, checkpoint)
    if isinstance(task, LanguageModeling):
        from tasks.serve.text import text_page

        return text_page(task, tokenizer)
    if isinstance(task, Transcription):
        from tasks.serve.audio import transcription_page

        return transcription_page(task, tokenizer)
    from tasks.serve import images

    if isinstance(task, ImageGeneration):
        return images.generation_page(task)
    if isinstance(task, (SuperResolution, AutoregressiveSuperResolution)):
        return images.super_resolution_page(task)
    if isinstance(task, ImageClassification):
        return images.classification_page(task, data)
    raise ValueError(f"no page for a {type(task).__name__} checkpoint")

"""What the serve pages bound: requests at once, the queue, uploads, and every value a page's function takes.

The widgets keep to their bounds, but a request through Gradio's API need not: each page's function
checks its inputs again with :func:`bounded` against the same numbers.
"""

from __future__ import annotations

from typing import Any

CONCURRENCY = 1  # requests computed at once (each page has one function); on a CPU a second only shares cores
QUEUE_SIZE = 16  # requests waiting beyond those; one more is refused at once ("Queue is full", try again)
SEEDS = (0, 2**32 - 1)  # a seed widget's bounds
MAX_UPLOAD = "10mb"  # a larger upload is refused (HTTP 413) as it streams in, before it fills memory or disk


def bounded(name: str, value: Any, low: float, high: float, whole: bool = False) -> float:
    """``value`` as a number if it is one in ``[low, high]`` (a whole one if ``whole``), else a ``gradio.Error``
    naming the setting: the widgets keep to their bounds, but a request through the API need not (NaN, None)."""
    import gradio as gr

    try:
        number = float(value)
    except (TypeError, ValueError):
        raise gr.Error(f"{name}: expected a number, got {value!r}.") from None
    if not low <= number <= high:  # NaN fails this too
        raise gr.Error(f"{name}: {value!r} is outside [{low:g}, {high:g}].")
    if whole and number != int(number):
        raise gr.Error(f"{name}: expected a whole number, got {value!r}.")
    return number

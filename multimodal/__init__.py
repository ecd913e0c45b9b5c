"""Transformers on text, images and music with one shared set of attention blocks.

``from multimodal import load; model, tokenizer = load("music")`` loads the music model that ships
in the package (:mod:`multimodal.pretrained`); ``load(PATH)`` a model folder (``multimodal export``)
or a training checkpoint, without Lightning (:mod:`multimodal.convert.folder`). Importing the
package loads nothing else: the subpackages are imported where they are used.
"""

from __future__ import annotations

from typing import Any

from multimodal import _moved

__all__ = ["load"]

_moved.install()  # the 0.1 module paths (multimodal.synthesis, ...) for one more release


def load(path: Any, device: Any = "cpu", *, quantize: str | None = None, kv_cache_dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a shipped model's name (``"music"``; ``multimodal models`` lists them), a model
    folder or a ``.ckpt``, in eval mode on ``device``; ``quantize="int8"`` and ``kv_cache_dtype="float16"``
    for faster, smaller CPU inference. See :func:`multimodal.convert.folder.load`."""
    from multimodal.convert.folder import load as load_folder
    from multimodal.pretrained import resolve_model

    return load_folder(resolve_model(path), device, quantize=quantize, kv_cache_dtype=kv_cache_dtype)

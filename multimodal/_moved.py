"""The module paths of the 0.1 layout, kept importable for one release with a ``DeprecationWarning``.

Round 3 grouped the package root by role (generation, the modality pipelines, conversion and model
folders). ``import multimodal.beam_search`` (or ``from multimodal.synthesis import ...``) still
works: the old name is a thin module that hands every attribute on to the new one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = {
    "multimodal.beam_search": "multimodal.generation.beam",
    "multimodal.speculative": "multimodal.generation.speculative",
    "multimodal.shaping": "multimodal.generation.processors",
    "multimodal.synthesis": "multimodal.audio.synthesis",
    "multimodal.music_stats": "multimodal.music.stats",
    "multimodal.sr_metrics": "multimodal.images.metrics",
    "multimodal.model_folder": "multimodal.convert.folder",
    "multimodal.finetune": "multimodal.models.parameters",
    "multimodal.cache": "multimodal.data.storage",
}
"""Old module path -> where it lives now."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED` and loads each as a module delegating to its new home."""

    def find_spec(self, name, path, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        return None  # a plain new module

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} moved to {new}; the old path goes in version 0.3",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        target = importlib.import_module(new)
        module.__getattr__ = lambda name: getattr(target, name)
        module.__doc__ = f"Deprecated: moved to {new}."


def install() -> None:
    """Adds the finder once (importing :mod:`multimodal` does it)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())

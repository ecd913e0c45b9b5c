"""Class paths that files name, checked against an allow-list before anything is imported.

YAML configs, checkpoints and model folders name classes by dotted path (``class_path:
torch.optim.AdamW``, a checkpoint's task, a model folder's tokenizer). Importing a module runs its
code, and calling what a file names runs that too, so a path from a file is checked *before* the
import: it must lie under a trusted package (:data:`TRUSTED_PACKAGES`, plus the packages a user
lists in the ``MULTIMODAL_TRUSTED_PACKAGES`` environment variable for their own callbacks or
tasks). :func:`import_class` then also checks that what it found is a class of the expected kind.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

#: Packages whose classes a config file may name (callbacks, loggers, strategies, optimizers, ...).
TRUSTED_PACKAGES: tuple[str, ...] = (
    "tasks",
    "multimodal",
    "torch.optim",
    "pytorch_lightning.callbacks",
    "pytorch_lightning.loggers",
    "pytorch_lightning.strategies",
    "pytorch_lightning.plugins",
    "pytorch_lightning.profilers",
    "lightning.pytorch.callbacks",
    "lightning.pytorch.loggers",
    "lightning.pytorch.strategies",
    "lightning.pytorch.plugins",
    "lightning.pytorch.profilers",
)

TRUST_VARIABLE = "MULTIMODAL_TRUSTED_PACKAGES"
"""Environment variable: comma-separated packages of the user's own, trusted like :data:`TRUSTED_PACKAGES`."""

#: Config keys whose string values LightningCLI reads as class paths (``optimizer: torch.optim.SGD``).
CLASS_KEYS = frozenset({"class_path", "model", "data", "optimizer", "lr_scheduler", "callbacks", "logger",
                        "strategy", "plugins", "profiler", "_class_path", "_instantiator"})  # fmt: skip

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def trusted_packages() -> tuple[str, ...]:
    """:data:`TRUSTED_PACKAGES` and the packages named by ``MULTIMODAL_TRUSTED_PACKAGES``."""
    extra = [name.strip() for name in os.environ.get(TRUST_VARIABLE, "").split(",") if name.strip()]
    return (*TRUSTED_PACKAGES, *extra)


def is_under(path: str, packages: Sequence[str]) -> bool:
    """Whether the dotted ``path`` lies in one of ``packages`` (``"a.b"`` holds ``"a.b.C"``, not ``"a.bc.C"``)."""
    return any(path == package or path.startswith(package + ".") for package in packages)


def check_class_path(path: str, source: str, packages: Sequence[str] | None = None) -> None:
    """Raises ``ValueError`` unless ``path`` lies under ``packages`` (default: :func:`trusted_packages`).

    Args:
        path: A dotted class path read from a file.
        source: The file (and key) it came from, for the message.
        packages: The allowed packages.
    """
    packages = trusted_packages() if packages is None else tuple(packages)
    if not is_under(path, packages):
        raise ValueError(f"{source}: refusing to import {path!r}: classes named by files load only from "
                         f"{', '.join(packages)} (trust a package of yours with {TRUST_VARIABLE}=name)")  # fmt: skip


def check_config_class_paths(config: Any, source: str) -> None:
    """Checks every class path a parsed config (or checkpoint hyper-parameters) names, at any depth.

    A class path is the value of a ``class_path`` key, or a dotted string under a key LightningCLI
    reads as a class (:data:`CLASS_KEYS`, e.g. ``optimizer: this.Zen``). Raises ``ValueError``
    naming the first untrusted one.
    """
    for key, path in _class_paths(config, None):
        check_class_path(path, f"{source} ({key})")


def import_class(path: str, *, packages: Sequence[str], base: type | None = None, source: str) -> type:
    """Imports the class at ``path`` after checking it lies under ``packages``; checks it is a ``base``.

    Args:
        path: Dotted path ``package.module.Class``.
        packages: Where the class may come from; checked before anything is imported.
        base: The class must be a subclass of this (None: any class).
        source: The file the path came from, for messages.

    Raises:
        ValueError: The path is outside ``packages``, names nothing, or names something that is not
            such a class (a function, a module, another kind of class).
    """
    check_class_path(path, source, packages)
    module_name, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{source}: {path!r} names no class ({error})") from error
    if not isinstance(found, type) or not is_under(found.__module__, packages):
        raise ValueError(f"{source}: {path!r} is not a class of {', '.join(packages)}")
    if base is not None and not issubclass(found, base):
        raise ValueError(f"{source}: {path!r} is not a {base.__name__}")
    return found


def _class_paths(value: Any, key: str | None) -> Iterator[tuple[str, str]]:
    """``(key, dotted path)`` for every class path in a nested config value."""
    if isinstance(value, dict):
        for child_key, child in value.items():
            yield from _class_paths(child, str(child_key))
    elif isinstance(value, (list, tuple)):
        for child in value:
            yield from _class_paths(child, key)
    elif isinstance(value, str) and key in CLASS_KEYS and _DOTTED.match(value.strip()):
        yield key, value.strip()

"""The one on-disk cache of the toolkit: where it lives, how files get into it, how pieces are keyed.

Everything derived from data and kept between runs (converted chorales, token arrays, trained
tokenizers, fetched data sets) lives under :func:`cache_root`: ``$MULTIMODAL_CACHE`` when set and
not empty, else ``~/.cache/multimodal``. Files are written through a temporary file in the same
folder and a rename (:func:`atomic_write_text`, :func:`atomic_write_bytes`), so an interrupted run
never leaves half a file that a later run would trust.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """Root of the cache: ``$MULTIMODAL_CACHE`` when set and not empty, else ``~/.cache/multimodal``."""
    return Path(os.environ.get("MULTIMODAL_CACHE") or Path.home() / ".cache" / "multimodal").expanduser()


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Writes ``text`` (UTF-8) to ``path`` through a temporary file and a rename; returns the path."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Writes ``data`` to ``path`` through a temporary file and a rename; creates the folder; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as handle:
        handle.write(data)
    Path(handle.name).replace(path)
    return path


def hash_bucket(name: str, buckets: int = 100) -> int:
    """A stable bucket ``0 .. buckets - 1`` of a name: the first 8 bytes of its SHA-1, big-endian, modulo.

    Held-out splits by name use it, so a piece's or file's split never changes when others are
    added or removed (and is the same on every machine and Python version).
    """
    return int.from_bytes(hashlib.sha1(name.encode("utf-8")).digest()[:8], "big") % buckets

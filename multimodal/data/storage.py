"""The one on-disk cache of the toolkit: where it lives, how files get into it, how pieces are keyed.

Everything derived from data and kept between runs (converted chorales, token arrays, trained
tokenizers, fetched data sets) lives under :func:`cache_root`: ``$MULTIMODAL_CACHE`` when set and
not empty, else ``~/.cache/multimodal``. Files are written through a temporary file in the same
folder and a rename (:func:`atomic_write_text`, :func:`atomic_write_bytes`), so an interrupted run
never leaves half a file that a later run would trust; the file then gets the permissions a plain
``open(path, "w")`` would have given it (:func:`give_default_mode`), not the temporary file's 0600.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
    give_default_mode(handle.name)
    Path(handle.name).replace(path)
    return path


def cached_tensors(folder: str | Path, key: dict[str, Any], build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``build()`` — a dict of tensors (or lists of them) — computed once and kept in ``folder``.

    The file is named by a hash of ``key`` (JSON, sorted), so anything that changes what ``build``
    makes must be in the key. A kept file is read with ``torch.load(weights_only=True)``; one that does
    not read (damaged, cut short) is built and written again.
    """
    import torch

    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    path = Path(folder) / f"{name}.pt"
    if path.is_file():
        try:
            return torch.load(path, weights_only=True)
        except Exception:  # a damaged cache file is built again
            pass
    built = build()
    buffer = io.BytesIO()
    torch.save(built, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    return built


def give_default_mode(path: str | Path) -> Path:
    """Sets ``path``'s permissions to what ``open(path, "w")`` creates: 0666 less the umask (0644 usually).

    Files written through a temporary file (``tempfile``, safetensors' writer) are created 0600,
    readable by their owner only, unlike every other file beside them.
    """
    os.chmod(path, 0o666 & ~_umask())
    return Path(path)


def _umask() -> int:
    """The process's umask (from ``/proc`` where it can be read, else by setting and restoring it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def hash_bucket(name: str, buckets: int = 100) -> int:
    """A stable bucket ``0 .. buckets - 1`` of a name: the first 8 bytes of its SHA-1, big-endian, modulo.

    Held-out splits by name use it, so a piece's or file's split never changes when others are
    added or removed (and is the same on every machine and Python version).
    """
    return int.from_bytes(hashlib.sha1(name.encode("utf-8")).digest()[:8], "big") % buckets


def claim_paths(paths: list[Path], overwrite: bool) -> None:
    """Refuses to replace files that already exist, unless ``overwrite`` (a command's ``--overwrite``).

    Raises:
        FileExistsError: Naming the first such file; nothing has been written yet.
    """
    if overwrite:
        return
    for path in paths:
        if Path(path).exists():
            raise FileExistsError(17, "already exists; pass --overwrite to replace it, or another --out", str(path))

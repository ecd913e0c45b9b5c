"""Which text documents, and reading one: the built-in corpus and its split, a user's files.

- The built-in corpus is the ``.py`` source of the running Python's standard library (PSF licence):
  :func:`stdlib_files` lists it, :func:`split_stdlib_files` splits it into train / validation / test
  by a fixed list of held-out modules.
- :func:`find_text_files` lists a user's files, folders or globs; :func:`hold_out` sets some of them
  aside for validation when no validation files are given.
- :func:`read_text_file` reads one document as UTF-8, or skips it (empty, binary, unreadable) with a
  :class:`TextDataWarning` naming the file.

Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
import warnings
from collections.abc import Sequence
from pathlib import Path

DEFAULT_PATTERNS = ("*.txt", "*.md", "*.py")
"""File patterns searched for when a folder is given to :func:`find_text_files`."""

VALIDATION_MODULES = (
    "argparse", "calendar", "csv", "difflib", "fractions", "heapq", "json", "shlex", "statistics", "textwrap",
)  # fmt: skip
"""Top-level stdlib modules/packages held out for validation (~3 % of the corpus bytes)."""

TEST_MODULES = (
    "bisect", "configparser", "dataclasses", "graphlib", "ipaddress", "pathlib", "pprint", "string", "tomllib",
    "zipfile",
)  # fmt: skip
"""Top-level stdlib modules/packages held out for testing (~3 % of the corpus bytes)."""

_BINARY_REPLACED_FRACTION = 0.1  # more undecodable characters than this: the file is binary


class TextDataWarning(UserWarning):
    """A text file was skipped or read with replacements; the message names the file."""


def stdlib_root() -> Path:
    """The folder of the running Python's standard library (``sysconfig`` ``"stdlib"`` path)."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    """All files of the built-in corpus, sorted by path relative to ``root``.

    The corpus is every non-empty ``*.py`` file under the standard library, except those inside a
    folder named ``test*``, ``tests``, ``idle_test`` (idlelib's tests), ``site-packages``,
    ``dist-packages`` or ``__pycache__``. (So ``test/``, ``lib2to3/tests/``, ``ctypes/test/`` and
    installed third-party packages are out.) Generated files (``encodings`` codec tables,
    ``pydoc_data/topics.py``) are part of the standard library and stay in.

    Args:
        root: The library folder; default :func:`stdlib_root`.
    """
    root = root or stdlib_root()
    excluded = {"tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in excluded and not name.startswith("test")]
        for name in names:
            path = Path(folder, name)
            if name.endswith(".py") and path.is_file() and path.stat().st_size > 0:
                files.append(path)
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def split_stdlib_files(root: Path | None = None) -> tuple[list[Path], list[Path], list[Path]]:
    """The built-in corpus split into ``(train_files, val_files, test_files)``.

    The rule is by module, never by window: a file goes to validation if its top-level module or
    package (first component of its path under ``root``, ``.py`` removed) is in
    :data:`VALIDATION_MODULES`, to test if it is in :data:`TEST_MODULES`, to training otherwise.
    The named modules exist in every Python from 3.11 on (``pathlib`` and ``zipfile`` count as one
    unit whether a file or a package), so the split does not depend on the machine.

    Args:
        root: The library folder; default :func:`stdlib_root`.

    Returns:
        Three disjoint lists of paths, each sorted like :func:`stdlib_files`.
    """
    root = root or stdlib_root()
    splits: tuple[list[Path], list[Path], list[Path]] = ([], [], [])
    for path in stdlib_files(root):
        unit = path.relative_to(root).parts[0].removesuffix(".py")
        index = 1 if unit in VALIDATION_MODULES else 2 if unit in TEST_MODULES else 0
        splits[index].append(path)
    return splits


def find_text_files(
    paths: str | Path | Sequence[str | Path], patterns: Sequence[str] = DEFAULT_PATTERNS
) -> list[Path]:
    """Lists a user's text files.

    Each entry of ``paths`` may be a file (taken whatever its extension), a folder (searched
    recursively for ``patterns``) or a glob pattern such as ``"notes/**/*.rst"``. Folders and
    globs skip files inside hidden folders (``.git``, ``.venv``) and ``__pycache__``.

    Args:
        paths: One entry or a sequence of them.
        patterns: File-name patterns for folders.

    Returns:
        The files, sorted and without duplicates.
    """
    entries = [paths] if isinstance(paths, str | Path) else list(paths)
    found: set[Path] = set()
    for entry in entries:
        path = Path(entry).expanduser()
        if path.is_file():
            found.add(path)
        elif path.is_dir():
            for pattern in patterns:
                found.update(p for p in path.rglob(pattern) if p.is_file() and not _hidden(p, path))
        elif any(char in str(entry) for char in "*?["):
            anchor = Path(path.anchor) if path.is_absolute() else Path()
            matches = anchor.glob(str(path.relative_to(anchor)))
            found.update(p for p in matches if p.is_file() and not _hidden(p, anchor))
        else:
            raise FileNotFoundError(f"{entry} is neither a file, a folder nor a glob pattern matching files")
    return sorted(found)


def read_text_file(path: Path) -> str | None:
    """Reads one document as UTF-8, or returns None (with a :class:`TextDataWarning`) to skip it.

    - Unreadable (OS error), empty or white-space-only files are skipped.
    - Binary files are skipped: a NUL byte, or more than 10 % of the characters undecodable.
    - Other invalid UTF-8 is kept, each undecodable byte replaced by U+FFFD, with a warning.
    - A leading UTF-8 byte-order mark is dropped.
    """
    text, problem = read_document(Path(path))
    if problem is not None:
        warnings.warn(problem, TextDataWarning, stacklevel=2)
    return text


def read_document(path: Path) -> tuple[str | None, str | None]:
    """``(text or None to skip, problem message or None)`` following :func:`read_text_file`'s rules, without warning."""
    try:
        data = path.read_bytes()
    except OSError as error:
        return None, f"{path}: skipped, unreadable ({error})"
    if not data.strip():
        return None, f"{path}: skipped, empty file"
    if b"\x00" in data:
        return None, f"{path}: skipped, binary (contains NUL bytes)"
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        text = data.decode("utf-8-sig", errors="replace")
    replaced = text.count("\ufffd")
    if replaced > _BINARY_REPLACED_FRACTION * len(text):
        return None, f"{path}: skipped, binary ({replaced} of {len(text)} characters are not UTF-8)"
    return text, f"{path}: not valid UTF-8; {replaced} undecodable bytes read as U+FFFD"


def hold_out(files: list[Path], percent: int) -> tuple[list[Path], list[Path]]:
    """Splits files into ``(kept, held_out)``: ``max(1, round(percent% of n))`` files, chosen by name hash."""
    if len(files) < 2:
        raise ValueError(
            f"cannot hold out validation files from {len(files)} training file(s); pass val_files"
        )
    count = max(1, round(len(files) * percent / 100))
    ranked = sorted(files, key=lambda path: hashlib.sha256(path.name.encode()).hexdigest())
    held = set(ranked[:count])
    return [path for path in files if path not in held], [path for path in files if path in held]


# ------------------------------------------------------------------------------------- helpers
def _hidden(path: Path, root: Path) -> bool:
    """Whether ``path`` lies inside a hidden folder (``.git``, ``.venv``) or ``__pycache__`` under ``root``."""
    return any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(root).parts[:-1])


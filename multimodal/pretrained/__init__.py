"""Models that ship inside the package: ``load("music")`` makes music on a fresh clone, before any training.

Each shipped model is a model folder (:mod:`multimodal.convert.folder`: ``config.json``,
``model.safetensors`` in half precision, ``tokenizer.json`` and a model card, ``README.md``) in a
folder of this package, named in :data:`SHIPPED`. Beside them, ``SHA256SUMS`` holds the SHA-256 of
each file as the script that exported the folder wrote it (``benchmarks/pretrained_music.py
--export``); :func:`verify` checks a folder against it.

A name of :data:`SHIPPED` means the shipped model wherever a model is asked for (``load``,
``multimodal generate --model``, ``multimodal serve``); to load a folder of your own that happens to
carry such a name, write it as a path (``./music``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: Name of each shipped model -> one line on what it is (``multimodal models`` prints them).
SHIPPED: dict[str, str] = {
    "music": "Music Transformer with parts (up to 5 voices) and style / key / meter / density controls, "
    "trained on five music21 collections (Bach, Monteverdi, three folk-tune books)",
}
CHECKSUM_FILE = "SHA256SUMS"
HERE = Path(__file__).resolve().parent


def shipped_path(name: str) -> Path:
    """The folder of the shipped model ``name``; a ``ValueError`` names the shipped ones for any other name, a
    ``FileNotFoundError`` says when the installation lacks its weights."""
    if name not in SHIPPED:
        raise ValueError(f"{name!r} is not a shipped model; the package ships {', '.join(SHIPPED)}")
    folder = HERE / name
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(2, "the shipped model's weights are missing from this installation "
                                "(reinstall the package, or rebuild them: make pretrained-music)", str(folder))  # fmt: skip
    return folder


def resolve_model(name_or_path: str | Path) -> Path:
    """A shipped model's folder for a name of :data:`SHIPPED`, else ``name_or_path`` as a path."""
    if isinstance(name_or_path, str) and name_or_path in SHIPPED:
        return shipped_path(name_or_path)
    return Path(name_or_path)


def file_checksums(folder: str | Path) -> dict[str, str]:
    """SHA-256 (hex) of every file of ``folder`` but :data:`CHECKSUM_FILE`, by file name."""
    folder = Path(folder)
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.iterdir()) if path.is_file() and path.name != CHECKSUM_FILE}  # fmt: skip


def write_checksums(folder: str | Path) -> Path:
    """Writes ``SHA256SUMS`` (``sha256sum`` format) for the files of ``folder``; returns its path."""
    path = Path(folder) / CHECKSUM_FILE
    path.write_text("".join(f"{digest}  {name}\n" for name, digest in file_checksums(folder).items()), encoding="utf-8")
    return path


def listed_checksums(folder: str | Path) -> dict[str, str]:
    """The SHA-256 (hex) that ``folder``'s ``SHA256SUMS`` lists, by file name."""
    lines = (Path(folder) / CHECKSUM_FILE).read_text(encoding="utf-8").splitlines()
    return {name: digest for digest, _, name in (line.partition("  ") for line in lines)}


def weights_id(name: str) -> str:
    """The first 12 hex digits of the shipped model ``name``'s weights' SHA-256, as its ``SHA256SUMS`` lists them.

    Benchmarks that start from a shipped model record it, so runs from other weights are neither reused nor
    averaged with them.
    """
    return listed_checksums(shipped_path(name))["model.safetensors"][:12]


def verify(folder: str | Path) -> list[str]:
    """Files of ``folder`` whose SHA-256 differs from ``SHA256SUMS`` (or that are missing or not listed); [] if all match."""
    listed, found = listed_checksums(folder), file_checksums(folder)
    return sorted(name for name in set(listed) | set(found) if listed.get(name) != found.get(name))

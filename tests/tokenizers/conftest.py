"""Shared fixtures of the tokenizer tests."""

from pathlib import Path

import pytest

CHORALES = ("bwv269", "bwv347", "bwv86.6")


@pytest.fixture(scope="module")
def chorale_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A few real chorales written to MIDI by music21 (independent of multimodal.data)."""
    from music21 import corpus

    folder = tmp_path_factory.mktemp("chorales")
    paths = []
    for name in CHORALES:
        path = folder / f"{name}.mid"
        corpus.parse(f"bach/{name}").write("midi", fp=path)
        paths.append(path)
    return paths



"""The protocol every tokenizer follows, whatever the modality.

A tokenizer turns a file or object (text, a MIDI file, an image) into a 1-D sequence of integer
token ids and back. Models only ever see ids, so any model can be paired with any tokenizer whose
``vocab_size`` it was built for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """What the models, data sets and CLI expect of a tokenizer.

    Implementations keep their whole state in one JSON file: ``save(path)`` writes it and the
    class method ``load(path)`` rebuilds an identical tokenizer (same ids for the same input).
    """

    @property
    def vocab_size(self) -> int:
        """Number of distinct ids, special tokens included; ids lie in ``[0, vocab_size)``."""
        ...

    @property
    def pad_id(self) -> int:
        """Id used to pad sequences to a common length; ignored by the losses."""
        ...

    @property
    def bos_id(self) -> int:
        """Id that starts a sequence."""
        ...

    @property
    def eos_id(self) -> int:
        """Id that ends a sequence (and separates documents in a stream)."""
        ...

    def encode(self, item: Any) -> list[int]:
        """Turns one item (text, MIDI, image) into token ids, without BOS/EOS."""
        ...

    def decode(self, ids: list[int]) -> Any:
        """Turns token ids back into the item; special ids are skipped."""
        ...

    def save(self, path: str | Path) -> None:
        """Writes the tokenizer as one JSON file."""
        ...

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Reads a tokenizer written by ``save``."""
        ...

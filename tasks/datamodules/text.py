"""Text data module and the sliding-window evaluation set shared by ``multimodal test`` and ``perplexity``.

Training items are random windows of the token stream (:class:`~multimodal.data.text.TokenWindowDataset`).
Validation and test items come from :class:`~multimodal.data.text_windows.DocumentWindows`: every document is scored on its own,
as ``EOS doc``, by sliding windows of ``context`` tokens moved ``stride`` tokens at a time, so each
token of each document is predicted exactly once. ``multimodal perplexity`` builds the same windows,
so the two report the same numbers on the same files.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader

from multimodal.data.resumable import ResumableLoader
from multimodal.data.text import TokenWindowDataset, stdlib_tokenizer
from multimodal.data.text_cache import tokenize_files, trained_tokenizer
from multimodal.data.text_files import find_text_files, hold_out, split_stdlib_files
from multimodal.data.text_windows import DocumentWindows, evaluation_loader
from multimodal.tokenizers.text import TextTokenizer
from tasks.datamodules.checks import check_options, check_percents
from tasks.datamodules.sampling import evaluation_sampler


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
        seed: Training windows are a function of ``(seed, epoch, index)`` (each process of a
            distributed run its own, a resumed run the same as an uninterrupted one).
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
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_options({"vocab_size": 257, "limit": 1, "seq_len": 1, "batch_size": 1, "epoch_length": 1,
                       "val_stride": 1, "test_stride": 1, "num_workers": 0},
                      vocab_size=vocab_size, limit=limit, seq_len=seq_len, batch_size=batch_size,
                      epoch_length=epoch_length, val_stride=val_stride, test_stride=test_stride,
                      num_workers=num_workers)  # fmt: skip
        check_percents(validation_percent=validation_percent)
        self.save_hyperparameters()  # kept in checkpoints: `multimodal perplexity` reads seq_len, test_stride
        self.train_files, self.val_files, self.test_files = train_files, val_files, test_files
        self.tokenizer_path, self.requested_vocab_size, self.limit = tokenizer, vocab_size, limit
        self.seq_len, self.batch_size, self.epoch_length = seq_len, batch_size, epoch_length
        self.validation_percent, self.num_workers, self.seed = validation_percent, num_workers, seed
        self.val_stride = val_stride or seq_len
        self.test_stride = test_stride or max(seq_len // 2, 1)
        self._streams: dict[str, np.ndarray] = {}

    @cached_property
    def splits(self) -> dict[str, list[Path]]:
        """The ``"train"``, ``"val"`` and ``"test"`` files."""
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
        splits = {"train": train, "val": validation, "test": test}
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
                    f"the {name} split has no files; pass {name}_files"
                )
            self._streams[name] = tokenize_files(self.splits[name], self.tokenizer)
        return self._streams[name]

    def train_dataloader(self) -> DataLoader:
        windows = TokenWindowDataset(
            self.stream("train"), self.seq_len, self.vocab_size, "random", self.epoch_length, seed=self.seed
        )
        return ResumableLoader(windows, batch_size=self.batch_size, seed=self.seed, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._evaluation_loader("val", self.val_stride)

    def test_dataloader(self) -> DataLoader:
        return self._evaluation_loader("test", self.test_stride)

    def _evaluation_loader(self, name: str, stride: int) -> DataLoader:
        windows = DocumentWindows.from_stream(self.stream(name), self.tokenizer, self.seq_len, stride)
        return evaluation_loader(windows, self.batch_size, self.num_workers, evaluation_sampler(windows))

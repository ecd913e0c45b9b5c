"""Sliding-window evaluation of text: every token of every document scored exactly once.

Used by validation and ``multimodal test`` of the text task and by ``multimodal perplexity``, so the
three report the same numbers on the same files. Lightning-free: any causal model with a
``loss(tokens, targets, ...)`` method can be scored (:func:`multimodal.text.score_windows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import pre_tokenizers
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from multimodal.tokenizers.text import TextTokenizer


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


def evaluation_loader(
    windows: DocumentWindows, batch_size: int, num_workers: int = 0, sampler: Sampler | None = None
) -> DataLoader:
    """Batches of :class:`DocumentWindows`: ``tokens`` ``(batch, longest)`` padded with 0, ``scored``
    ``(batch, longest - 1)`` bool (True at scored targets) and ``bytes`` ``(batch,)``; ``sampler``
    picks this process's windows in a distributed run."""
    return DataLoader(windows, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_windows,
                      sampler=sampler)  # fmt: skip


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

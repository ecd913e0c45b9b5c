"""Byte-level BPE for text, built on Hugging Face ``tokenizers``.

How it works, in three steps:

1. **Bytes, not characters.** Text is taken as UTF-8 bytes and each of the 256 byte values is a
   token of the initial alphabet, so every string (Chinese, emoji, control characters) can be
   encoded and no ``<unk>`` token is ever needed.
2. **Pre-tokenisation.** The GPT-2 regular expression cuts the text into words, numbers, runs of
   punctuation and runs of white space; merges never cross these cuts. No prefix space is added
   and no normalisation (NFC, lower-casing, stripping) is applied, so nothing is lost.
3. **Merges.** Training repeatedly merges the most frequent adjacent pair into a new token until
   ``vocab_size`` is reached; encoding replays the merges in the order they were learned.

Because nothing is normalised, stripped or cleaned up, ``decode(encode(text)) == text`` for any
string that can be written as UTF-8 (every Python ``str`` without lone surrogates).

Special tokens are never produced by ``encode``: a text that literally contains ``"<|eos|>"``
is encoded byte by byte like any other text. Add BOS/EOS/PAD by id where they are wanted.

The tokenizer is stored as the Hugging Face tokenizer JSON with one extra top-level key,
``"multimodal"``, naming the special tokens. ``TextTokenizer.hf_tokenizer.save(path)`` writes the
plain Hugging Face file (loadable by ``tokenizers.Tokenizer.from_file``) if one is needed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|eos|>"
GPT2_SPECIAL_TOKEN = "<|endoftext|>"
_METADATA_KEY = "multimodal"
_FORMAT_VERSION = 1


class TextTokenizer:
    """Byte-level BPE text tokenizer following the ``multimodal.tokenizers.base.Tokenizer`` protocol.

    A tokenizer trained by :meth:`train` has ``pad_id == 0``, ``bos_id == 1``, ``eos_id == 2``,
    then the 256 byte tokens (ids 3..258), then the learned merges.

    Example:
        >>> tok = TextTokenizer.train(["def f(x):\\n    return x\\n"] * 10, vocab_size=300)
        >>> tok.decode(tok.encode("  naïve 😀\\t\\n")) == "  naïve 😀\\t\\n"
        True

    Args:
        tokenizer: A Hugging Face tokenizer whose vocabulary contains the three special tokens.
        pad_token: Text of the padding token.
        bos_token: Text of the beginning-of-sequence token.
        eos_token: Text of the end-of-sequence (document separator) token.
    """

    def __init__(
        self,
        tokenizer: HFTokenizer,
        pad_token: str = PAD_TOKEN,
        bos_token: str = BOS_TOKEN,
        eos_token: str = EOS_TOKEN,
    ) -> None:
        self._tokenizer = tokenizer
        # Special tokens typed in the text stay text, so decode(encode(x)) == x for every x.
        self._tokenizer.encode_special_tokens = True
        self._special_tokens = {"pad": pad_token, "bos": bos_token, "eos": eos_token}
        self._special_ids = {}
        for role, token in self._special_tokens.items():
            token_id = tokenizer.token_to_id(token)
            if token_id is None:
                raise ValueError(
                    f"{role} token {token!r} is not in the vocabulary; pass one of the tokenizer's "
                    f"added tokens instead: {[t.content for t in tokenizer.get_added_tokens_decoder().values()]}"
                )
            self._special_ids[role] = token_id

    # ----------------------------------------------------------------------------------- training
    @classmethod
    def train(
        cls,
        files_or_iterator: Iterable[str | os.PathLike[str]],
        vocab_size: int = 8000,
        min_frequency: int = 2,
        show_progress: bool = False,
    ) -> TextTokenizer:
        """Learns a byte-level BPE vocabulary.

        Args:
            files_or_iterator: Training material. Items that are ``os.PathLike`` (``pathlib.Path``)
                are read as UTF-8 files (undecodable bytes become U+FFFD); plain ``str`` items are
                the training texts themselves. Wrap file names given as strings in ``Path``.
            vocab_size: Size of the final vocabulary, special and byte tokens included; at least
                259 (3 specials + 256 bytes). Training may stop earlier if no pair occurs
                ``min_frequency`` times.
            min_frequency: A pair is merged only if it occurs at least this many times.
            show_progress: Show the Hugging Face progress bar.

        Returns:
            The trained tokenizer with PAD=0, BOS=1, EOS=2.
        """
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        minimum = 3 + len(alphabet)
        if vocab_size < minimum:
            raise ValueError(
                f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least {minimum}"
            )
        tokenizer = HFTokenizer(models.BPE())
        _make_lossless(tokenizer)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=[PAD_TOKEN, BOS_TOKEN, EOS_TOKEN],
            initial_alphabet=alphabet,
            show_progress=show_progress,
        )
        tokenizer.train_from_iterator(_texts(files_or_iterator), trainer=trainer)
        return cls(tokenizer)

    # ------------------------------------------------------------------------------- GPT-2 import
    @classmethod
    def from_gpt2_files(cls, vocab_json: str | Path, merges_txt: str | Path) -> TextTokenizer:
        """Loads a GPT-2 style byte-level BPE from its ``vocab.json`` and ``merges.txt``.

        GPT-2's only special token is ``<|endoftext|>``; it serves as BOS, EOS and PAD, as in
        OpenAI's and Hugging Face's GPT-2 (the ids then agree with GPT-2 checkpoints, 50256 for
        the real vocabulary). Since ``pad_id == eos_id``, a loss must not drop targets equal to
        ``pad_id`` (that would drop EOS too): mark padded targets with a separate ignore index.

        Args:
            vocab_json: ``{"token": id}`` in GPT-2's byte-to-unicode alphabet.
            merges_txt: One merge ``"a b"`` per line, in priority order (a ``#version`` first line
                is allowed).

        Returns:
            A tokenizer giving the same ids as GPT-2's for text without ``<|endoftext|>``.
        """
        tokenizer = HFTokenizer(models.BPE.from_file(str(vocab_json), str(merges_txt)))
        _make_lossless(tokenizer)
        if tokenizer.token_to_id(GPT2_SPECIAL_TOKEN) is None:
            raise ValueError(f"{vocab_json} has no {GPT2_SPECIAL_TOKEN!r} entry; is it a GPT-2 vocabulary?")
        tokenizer.add_special_tokens([GPT2_SPECIAL_TOKEN])
        return cls(tokenizer, GPT2_SPECIAL_TOKEN, GPT2_SPECIAL_TOKEN, GPT2_SPECIAL_TOKEN)

    @classmethod
    def from_hf_tokenizer_json(
        cls,
        path: str | Path,
        pad_token: str | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
    ) -> TextTokenizer:
        """Loads a Hugging Face ``tokenizer.json`` (e.g. GPT-2's) or a file written by :meth:`save`.

        The file's normaliser, pre-tokeniser and decoder are kept as they are, so exact
        round-trips are only guaranteed for byte-level BPE files without a normaliser, as GPT-2's.

        Args:
            path: The JSON file.
            pad_token: Padding token; by default the one recorded by :meth:`save`, else
                ``<|endoftext|>`` (the GPT-2 convention, see :meth:`from_gpt2_files`).
            bos_token: Beginning-of-sequence token, defaulting the same way.
            eos_token: End-of-sequence token, defaulting the same way.

        Returns:
            The tokenizer.
        """
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        recorded = data.pop(_METADATA_KEY, {}).get("special_tokens", {})
        tokenizer = HFTokenizer.from_str(json.dumps(data))
        fallback = GPT2_SPECIAL_TOKEN if tokenizer.token_to_id(GPT2_SPECIAL_TOKEN) is not None else None
        chosen = {
            role: given or recorded.get(role) or fallback
            for role, given in (("pad", pad_token), ("bos", bos_token), ("eos", eos_token))
        }
        missing = [role for role, token in chosen.items() if token is None]
        if missing:
            raise ValueError(
                f"{path} records no {'/'.join(missing)} token and has no {GPT2_SPECIAL_TOKEN!r}; "
                "pass pad_token=, bos_token=, eos_token= naming tokens of its vocabulary"
            )
        return cls(tokenizer, chosen["pad"], chosen["bos"], chosen["eos"])

    # ------------------------------------------------------------------------------- the protocol
    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included; every id lies in ``[0, vocab_size)``."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def pad_id(self) -> int:
        """Id of the padding token (0 for a trained tokenizer)."""
        return self._special_ids["pad"]

    @property
    def bos_id(self) -> int:
        """Id of the beginning-of-sequence token (1 for a trained tokenizer)."""
        return self._special_ids["bos"]

    @property
    def eos_id(self) -> int:
        """Id of the end-of-sequence token, also the document separator (2 for a trained tokenizer)."""
        return self._special_ids["eos"]

    @property
    def hf_tokenizer(self) -> HFTokenizer:
        """The wrapped Hugging Face tokenizer (shared, not a copy)."""
        return self._tokenizer

    def encode(self, text: str) -> list[int]:
        """Turns a text into token ids, without BOS/EOS.

        Args:
            text: Any string that can be written as UTF-8.

        Returns:
            ``num_tokens`` ids; ``decode`` of them gives ``text`` back exactly.
        """
        try:
            return self._tokenizer.encode(text, add_special_tokens=False).ids
        except TypeError:
            _explain_bad_text([text])
            raise

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Encodes many texts in parallel (Rust threads); equal to ``[encode(t) for t in texts]``.

        Args:
            texts: ``batch`` strings.

        Returns:
            ``batch`` lists of ids, each as long as its text needs (no padding).
        """
        try:
            encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        except TypeError:
            _explain_bad_text(texts)
            raise
        return [encoding.ids for encoding in encodings]

    def decode(self, ids: Iterable[int]) -> str:
        """Turns ids back into text; special ids (PAD/BOS/EOS) are skipped.

        Args:
            ids: ``num_tokens`` ids (a list, a 1-D array or tensor).

        Returns:
            The text. Ids that cut a multi-byte character in half decode to U+FFFD.

        Raises:
            ValueError: For ids that are not integers or lie outside ``[0, vocab_size)``.
        """
        values = ids.detach().cpu().tolist() if hasattr(ids, "detach") else list(ids)
        if any(isinstance(value, float) or not isinstance(value, (int, np.integer)) for value in values):
            raise ValueError("token ids must be integers")
        if values and not 0 <= min(values) <= max(values) < self.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}) for this tokenizer, "
                             f"got {min(values)}..{max(values)}; was the model built for another vocabulary?")  # fmt: skip
        return self._tokenizer.decode([int(value) for value in values], skip_special_tokens=True)

    def id_to_token(self, token_id: int) -> str | None:
        """The token's text in the byte-to-unicode alphabet (``"Ġ"`` is a space), or None."""
        return self._tokenizer.id_to_token(token_id)

    def to_json(self) -> str:
        """The whole tokenizer as one JSON string (the content :meth:`save` writes)."""
        data = json.loads(self._tokenizer.to_str())
        data[_METADATA_KEY] = {"format_version": _FORMAT_VERSION, "special_tokens": self._special_tokens}
        return json.dumps(data, ensure_ascii=False)

    def save(self, path: str | Path) -> None:
        """Writes the tokenizer as one JSON file (atomically: temporary file, then rename).

        Args:
            path: Destination, conventionally ``*.json``; parent folders are created.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(self.to_json(), encoding="utf-8")
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: str | Path) -> TextTokenizer:
        """Reads a tokenizer written by :meth:`save` (or any file :meth:`from_hf_tokenizer_json` takes)."""
        return cls.from_hf_tokenizer_json(path)

    def __repr__(self) -> str:
        return (
            f"TextTokenizer(vocab_size={self.vocab_size}, pad_id={self.pad_id}, "
            f"bos_id={self.bos_id}, eos_id={self.eos_id})"
        )


def _make_lossless(tokenizer: HFTokenizer) -> None:
    """Byte-level pre-tokeniser and decoder with no prefix space, no normaliser, no post-processor."""
    tokenizer.normalizer = None
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = None


def _texts(files_or_texts: Iterable[Any]) -> Iterator[str]:
    """Yields the training texts: files (``os.PathLike``) are read, strings are passed through."""
    for item in files_or_texts:
        if isinstance(item, os.PathLike):
            yield Path(item).read_text(encoding="utf-8", errors="replace")
        elif isinstance(item, str):
            if "\n" not in item and len(item) < 4096 and os.path.isfile(item):
                raise TypeError(
                    f"{item!r} is a file name given as str; wrap it in pathlib.Path to train on its text"
                )
            yield item
        else:
            raise TypeError(f"expected a text (str) or a file (pathlib.Path), got {type(item).__name__}")


def _explain_bad_text(texts: Iterable[Any]) -> None:
    """Turns Hugging Face's terse TypeError into one that says which text is wrong and why."""
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"expected str texts to encode, item {index} is a {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"text {index} has a lone surrogate at character {error.start} that UTF-8 cannot hold; "
                "clean it first with text.encode('utf-8', 'replace').decode('utf-8')"
            ) from error

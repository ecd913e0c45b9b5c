"""Tests of the byte-level BPE text tokenizer.

Independent references: the GPT-2 byte-to-unicode table and BPE encoder re-implemented here from
OpenAI's published ``encoder.py`` algorithm, and Hugging Face ``transformers``' GPT-2 tokenizer.
"""

from __future__ import annotations

import itertools
import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tiny_models import bytes_to_unicode as gpt2_bytes_to_unicode

from multimodal.data.text_files import split_stdlib_files
from multimodal.tokenizers.base import Tokenizer
from multimodal.tokenizers.text import TextTokenizer

VOCAB_SIZE = 1000
TRICKY_TEXTS = [
    "",
    " leading space",
    "   three leading spaces",
    "trailing spaces   ",
    "\n\n\nmultiple newlines\n\n",
    "def f(x):\n\treturn x\t# tab\n",
    "中文文本，汉字。",
    "emoji 😀👍🏽🇫🇷 and ZWJ 👩‍👩‍👧",
    "control \x00\x01\x1b[0m\x7f chars",
    "windows\r\nline\rendings\r\n",
    "literal specials <|pad|><|bos|><|eos|><|endoftext|>",
    "combining e\u0301 vs \u00e9, NBSP\u00a0, BOM\ufeff",
    "\U0010ffff max code point",
]


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    """A small BPE trained on the first 40 training files of the stdlib corpus (~0.5 MB)."""
    train_files = split_stdlib_files()[0][:40]
    return TextTokenizer.train(train_files, vocab_size=VOCAB_SIZE)


bytes_to_unicode = cache(gpt2_bytes_to_unicode)


def ids_to_bytes(tokenizer: TextTokenizer, ids: list[int]) -> bytes:
    """Bytes spelt by the tokens, through the independent byte table."""
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    return bytes(to_byte[char] for token_id in ids for char in tokenizer.id_to_token(token_id))


# ----------------------------------------------------------------------------------- round trip
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
@example(text="  \t\n\n  x  ")
def test_decode_of_encode_is_identity_for_any_unicode(tokenizer: TextTokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text)) == text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.lists(
        st.sampled_from(["😀", "中", "é", "\t", " ", "\n", "\r", "\x00", "  ", "def", "<|eos|>", "Ġ"])
        | st.characters(codec="utf-8"),
        max_size=60,
    ).map("".join)
)
def test_token_bytes_spell_the_utf8_of_the_text(tokenizer: TextTokenizer, text: str) -> None:
    assert ids_to_bytes(tokenizer, tokenizer.encode(text)) == text.encode("utf-8")


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_tricky_texts_round_trip_exactly(tokenizer: TextTokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert ids_to_bytes(tokenizer, ids) == text.encode("utf-8")


def test_lone_surrogate_is_refused_with_a_clear_error(tokenizer: TextTokenizer) -> None:
    with pytest.raises(ValueError, match="surrogate"):
        tokenizer.encode("ok \ud800")


# ------------------------------------------------------------------------------ vocabulary, ids
def test_follows_the_tokenizer_protocol(tokenizer: TextTokenizer) -> None:
    assert isinstance(tokenizer, Tokenizer)


def test_specials_have_documented_ids_and_are_never_produced_by_encode(tokenizer: TextTokenizer) -> None:
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2)
    assert [tokenizer.id_to_token(i) for i in range(3)] == ["<|pad|>", "<|bos|>", "<|eos|>"]
    assert not {0, 1, 2} & set(tokenizer.encode(TRICKY_TEXTS[10]))
    assert tokenizer.decode([1, *tokenizer.encode("hi"), 2, 0, 0]) == "hi"


def test_vocabulary_has_requested_size_and_full_byte_alphabet(tokenizer: TextTokenizer) -> None:
    assert tokenizer.vocab_size == VOCAB_SIZE
    vocabulary = tokenizer.hf_tokenizer.get_vocab()
    assert all(char in vocabulary for char in bytes_to_unicode().values())
    assert sorted(vocabulary.values()) == list(range(VOCAB_SIZE))


def test_training_learns_merges_that_compress_python(tokenizer: TextTokenizer) -> None:
    source = "def __init__(self):\n        return self\n"
    assert len(tokenizer.encode(source)) < len(source.encode("utf-8")) / 2


def test_batch_encode_equals_single_encode(tokenizer: TextTokenizer) -> None:
    assert tokenizer.encode_batch(TRICKY_TEXTS) == [tokenizer.encode(text) for text in TRICKY_TEXTS]


def test_save_load_gives_one_json_file_and_identical_ids(tokenizer: TextTokenizer, tmp_path: Path) -> None:
    path = tmp_path / "sub" / "tok.json"
    tokenizer.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["tok.json"]
    assert "model" in json.loads(path.read_text(encoding="utf-8"))
    loaded = TextTokenizer.load(path)
    assert loaded.encode_batch(TRICKY_TEXTS) == tokenizer.encode_batch(TRICKY_TEXTS)
    assert (loaded.vocab_size, loaded.pad_id, loaded.bos_id, loaded.eos_id) == (VOCAB_SIZE, 0, 1, 2)
    assert loaded.decode(loaded.encode(TRICKY_TEXTS[10])) == TRICKY_TEXTS[10]


def test_train_accepts_texts_and_rejects_too_small_vocabularies() -> None:
    tiny = TextTokenizer.train(["aaaa bbbb aaaa bbbb"] * 5, vocab_size=270)
    assert 259 < tiny.vocab_size <= 270
    assert tiny.decode(tiny.encode("aaaa zzz")) == "aaaa zzz"
    with pytest.raises(ValueError, match="at least 259"):
        TextTokenizer.train(["x"], vocab_size=100)
    with pytest.raises(TypeError, match=r"pathlib\.Path"):
        TextTokenizer.train([__file__], vocab_size=270)


# ------------------------------------------------------------------------------------ GPT-2 files
GPT2_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "Ġ w", "o r", "Ġ s", "Ġw or", "l d", "Ġwor ld"]
GPT2_TEXTS = ["the world", "Hello the world!  It's there", " in  a\tworld\n\n", "über 中文 😀 the", "the"]


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 style vocab.json/merges.txt: 256 bytes, 12 merges, then <|endoftext|>."""
    folder = tmp_path_factory.mktemp("gpt2")
    vocabulary = {char: index for index, char in enumerate(bytes_to_unicode().values())}
    for merge in GPT2_MERGES:
        vocabulary["".join(merge.split())] = len(vocabulary)
    vocabulary["<|endoftext|>"] = len(vocabulary)
    (folder / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(GPT2_MERGES) + "\n", encoding="utf-8")
    return folder


def reference_gpt2_encode(text: str, folder: Path) -> list[int]:
    """OpenAI's GPT-2 encoder algorithm: regex split, bytes → unicode, greedy lowest-rank merges."""
    regex = pytest.importorskip("regex")
    vocabulary = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    ranks = {tuple(merge.split()): rank for rank, merge in enumerate(GPT2_MERGES)}
    pattern = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    ids = []
    for piece in pattern.findall(text):
        word = [bytes_to_unicode()[byte] for byte in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = set(itertools.pairwise(word))
            best = min(pairs, key=lambda pair: ranks.get(pair, float("inf")))
            if best not in ranks:
                break
            merged, index = [], 0
            while index < len(word):
                if index < len(word) - 1 and (word[index], word[index + 1]) == best:
                    merged.append(word[index] + word[index + 1])
                    index += 2
                else:
                    merged.append(word[index])
                    index += 1
            word = merged
        ids += [vocabulary[token] for token in word]
    return ids


def test_gpt2_files_give_the_reference_encoder_ids(gpt2_files: Path) -> None:
    tokenizer = TextTokenizer.from_gpt2_files(gpt2_files / "vocab.json", gpt2_files / "merges.txt")
    for text in GPT2_TEXTS:
        assert tokenizer.encode(text) == reference_gpt2_encode(text, gpt2_files)
        assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.vocab_size == 256 + len(GPT2_MERGES) + 1
    assert tokenizer.pad_id == tokenizer.bos_id == tokenizer.eos_id == 256 + len(GPT2_MERGES)


def test_gpt2_files_match_transformers_gpt2_tokenizer(gpt2_files: Path, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    reference = transformers.GPT2TokenizerFast.from_pretrained(str(gpt2_files))
    tokenizer = TextTokenizer.from_gpt2_files(gpt2_files / "vocab.json", gpt2_files / "merges.txt")
    for text in GPT2_TEXTS:
        assert tokenizer.encode(text) == reference.encode(text, add_special_tokens=False)
    assert tokenizer.eos_id == reference.eos_token_id
    # transformers' own tokenizer.json loads too and gives the same ids.
    reference.save_pretrained(str(tmp_path))
    from_json = TextTokenizer.from_hf_tokenizer_json(tmp_path / "tokenizer.json")
    assert [from_json.encode(text) for text in GPT2_TEXTS] == [tokenizer.encode(text) for text in GPT2_TEXTS]
    assert from_json.eos_id == reference.eos_token_id


def test_hf_json_without_known_specials_asks_for_them(tokenizer: TextTokenizer, tmp_path: Path) -> None:
    path = tmp_path / "plain.json"
    tokenizer.hf_tokenizer.save(str(path))  # plain Hugging Face file: no "multimodal" metadata
    with pytest.raises(ValueError, match="pad_token="):
        TextTokenizer.from_hf_tokenizer_json(path)
    named = TextTokenizer.from_hf_tokenizer_json(path, "<|pad|>", "<|bos|>", "<|eos|>")
    assert (named.pad_id, named.bos_id, named.eos_id) == (0, 1, 2)

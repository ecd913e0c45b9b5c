"""Tests of the text data: corpus split and files (text_files), token stream and its cache (text_cache), windows (text)."""

from __future__ import annotations

import os
import pickle
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from multimodal.data import text as text_data
from multimodal.data.text import TokenWindowDataset, stdlib_tokenizer
from multimodal.data.text_cache import ShardedTokens, token_dtype, tokenize_files
from multimodal.data.text_files import (
    TextDataWarning,
    find_text_files,
    split_stdlib_files,
    stdlib_files,
    stdlib_root,
)
from multimodal.tokenizers.text import TextTokenizer

DOCUMENTS = {
    "a.txt": "First document.\nWith two lines.\n",
    "b.md": "# Second\n\n  indented  \n",
    "c.py": "def third():\n\treturn '中文 😀'\n",
}


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    return TextTokenizer.train(list(DOCUMENTS.values()) * 3, vocab_size=300)


@pytest.fixture
def documents(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, content in DOCUMENTS.items():
        (folder / name).write_text(content, encoding="utf-8")
    return [folder / name for name in DOCUMENTS]


class CountingTokenizer(TextTokenizer):
    """Counts ``encode_batch`` calls, to tell a cache hit from a fresh tokenisation."""

    calls = 0

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        type(self).calls += 1
        return super().encode_batch(texts)


@pytest.fixture
def counting(tokenizer: TextTokenizer) -> CountingTokenizer:
    CountingTokenizer.calls = 0
    return CountingTokenizer(tokenizer.hf_tokenizer)


# ---------------------------------------------------------------------------------- stdlib split
def make_fake_stdlib(root: Path) -> None:
    files = {
        "os.py": "x = 1\n",
        "argparse.py": "y = 2\n",
        "json/__init__.py": "z = 3\n",
        "bisect.py": "w = 4\n",
        "email/parser.py": "v = 5\n",
        "empty.py": "",
        "notes.txt": "not python\n",
        "test/test_os.py": "t\n",
        "lib2to3/tests/data.py": "t\n",
        "idlelib/idle_test/t.py": "t\n",
        "ctypes/test/t.py": "t\n",
        "testing_helpers/t.py": "t\n",
        "site-packages/pkg/mod.py": "t\n",
        "__pycache__/os.py": "t\n",
    }
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)


def test_split_follows_the_documented_rule_on_a_fake_library(tmp_path: Path) -> None:
    make_fake_stdlib(tmp_path)
    train, val, test = split_stdlib_files(tmp_path)
    assert train == [tmp_path / "email/parser.py", tmp_path / "os.py"]
    assert val == [tmp_path / "argparse.py", tmp_path / "json/__init__.py"]
    assert test == [tmp_path / "bisect.py"]


def test_stdlib_split_is_disjoint_deterministic_and_holds_out_named_modules() -> None:
    root = stdlib_root()
    train, val, test = split_stdlib_files()
    assert (train, val, test) == split_stdlib_files()
    assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))
    assert sorted(train + val + test) == sorted(stdlib_files())
    assert root / "argparse.py" in val and root / "json" / "decoder.py" in val
    assert root / "bisect.py" in test and root / "tomllib" / "_parser.py" in test
    assert root / "os.py" in train and root / "asyncio" / "tasks.py" in train
    assert all(not any(part.startswith("test") for part in p.relative_to(root).parts[:-1]) for p in train)
    assert all(p.suffix == ".py" and p.stat().st_size > 0 for p in train + val + test)
    assert len(train) > 500 and len(val) >= 10 and len(test) >= 10


# ------------------------------------------------------------------------------------ user files
def test_find_text_files_recurses_skips_hidden_and_takes_globs(tmp_path: Path) -> None:
    for name in ["a.txt", "sub/b.md", "sub/deep/c.py", "sub/d.rst", ".git/e.txt", "sub/__pycache__/f.py"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    expected = [tmp_path / "a.txt", tmp_path / "sub/b.md", tmp_path / "sub/deep/c.py"]
    assert find_text_files(tmp_path) == expected
    assert find_text_files([tmp_path / "sub/d.rst", tmp_path / "a.txt"]) == [
        tmp_path / "a.txt",
        tmp_path / "sub/d.rst",
    ]
    assert find_text_files(str(tmp_path / "sub" / "**" / "*.py")) == [tmp_path / "sub/deep/c.py"]
    with pytest.raises(FileNotFoundError, match="missing"):
        find_text_files(tmp_path / "missing")


# ---------------------------------------------------------------------------------- token stream
def test_stream_is_documents_joined_by_eos(
    tokenizer: TextTokenizer, documents: list[Path], tmp_path: Path
) -> None:
    tokens = tokenize_files(documents, tokenizer, tmp_path / "cache")
    a, b, c = (tokenizer.encode(content) for content in DOCUMENTS.values())
    assert tokens.tolist() == [*a, tokenizer.eos_id, *b, tokenizer.eos_id, *c]
    assert isinstance(tokens, np.memmap) and tokens.dtype == np.uint16


def test_token_dtype_is_uint16_until_ids_no_longer_fit() -> None:
    assert token_dtype(8000) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32 and token_dtype(100_000) == np.uint32


def test_second_run_is_a_cache_hit(
    counting: CountingTokenizer, documents: list[Path], tmp_path: Path
) -> None:
    first = tokenize_files(documents, counting, tmp_path)
    calls = CountingTokenizer.calls
    assert calls >= 1
    second = tokenize_files(documents, counting, tmp_path)
    assert CountingTokenizer.calls == calls
    assert np.array_equal(first, second)
    assert not list(tmp_path.glob(".*tmp"))  # temporary files renamed away


def test_cache_root_follows_the_environment_variable(
    tokenizer: TextTokenizer, documents: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "elsewhere"))
    tokenize_files(documents, tokenizer)
    assert len(list((tmp_path / "elsewhere" / "text").glob("tokens-*.bin"))) == 1


def test_changed_file_invalidates_the_cache(
    counting: CountingTokenizer, documents: list[Path], tmp_path: Path
) -> None:
    tokenize_files(documents, counting, tmp_path)
    calls = CountingTokenizer.calls
    documents[1].write_text("Changed content, different size.\n")
    tokens = tokenize_files(documents, counting, tmp_path)
    assert CountingTokenizer.calls > calls
    assert (
        counting.encode("Changed content, different size.\n")
        == tokens.tolist()[len(counting.encode(DOCUMENTS["a.txt"])) + 1 :][
            : len(counting.encode("Changed content, different size.\n"))
        ]
    )
    # Same size, new modification time: a new entry too.
    calls = CountingTokenizer.calls
    documents[1].write_text("Changed content, different SIZE.\n")
    status = documents[1].stat()
    os.utime(documents[1], ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    tokenize_files(documents, counting, tmp_path)
    assert CountingTokenizer.calls > calls


def test_changed_tokenizer_invalidates_the_cache(
    counting: CountingTokenizer, documents: list[Path], tmp_path: Path
) -> None:
    tokenize_files(documents, counting, tmp_path)
    other = TextTokenizer.train(list(DOCUMENTS.values()) * 3, vocab_size=280)
    tokens = tokenize_files(documents, other, tmp_path)
    assert tokens.tolist()[: len(other.encode(DOCUMENTS["a.txt"]))] == other.encode(DOCUMENTS["a.txt"])
    assert len(list(tmp_path.glob("tokens-*.bin"))) == 2


def test_empty_binary_and_bad_utf8_files_warn_with_their_names(
    tokenizer: TextTokenizer, documents: list[Path], tmp_path: Path
) -> None:
    empty, binary, latin1 = tmp_path / "empty.txt", tmp_path / "blob.txt", tmp_path / "latin1.txt"
    empty.write_text("  \n")
    binary.write_bytes(b"\x00\x01\x02binary")
    latin1_text = "A café serves crème brûlée and other desserts to everyone.\n"
    latin1.write_bytes(latin1_text.encode("latin-1"))
    files = [documents[0], empty, binary, latin1]
    for _ in range(2):  # fresh tokenisation, then cache hit: the same warnings
        with pytest.warns(TextDataWarning) as caught:
            tokens = tokenize_files(files, tokenizer, tmp_path / "cache")
        messages = [str(warning.message) for warning in caught]
        assert any(re.search(re.escape(str(empty)) + ".*empty", m) for m in messages)
        assert any(re.search(re.escape(str(binary)) + ".*binary", m) for m in messages)
        assert any(
            re.search(re.escape(str(latin1)) + ": not valid UTF-8; 4 undecodable", m) for m in messages
        )
    expected = [
        *tokenizer.encode(DOCUMENTS["a.txt"]),
        tokenizer.eos_id,
        *tokenizer.encode(re.sub("[éèû]", "\ufffd", latin1_text)),
    ]
    assert tokens.tolist() == expected


def test_no_readable_text_is_an_error(tokenizer: TextTokenizer, tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    with pytest.warns(TextDataWarning), pytest.raises(ValueError, match="none of the 1 files"):
        tokenize_files([tmp_path / "empty.txt"], tokenizer, tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())


# ---------------------------------------------------------------------------------------- windows
def test_sequential_windows_tile_the_stream_without_overlap() -> None:
    tokens = np.arange(103, dtype=np.uint16) * 7 % 101  # not a plain range, so offsets matter
    dataset = TokenWindowDataset(tokens, seq_len=10, vocab_size=101, mode="sequential")
    assert len(dataset) == 10  # (103 - 1) // 10
    windows = [dataset[i] for i in range(len(dataset))]
    assert all(w.shape == (11,) and w.dtype == torch.long for w in windows)
    targets = torch.cat([w[1:] for w in windows])
    assert targets.tolist() == tokens[1:101].tolist()
    inputs = torch.cat([w[:-1] for w in windows])
    assert inputs.tolist() == tokens[:100].tolist()
    with pytest.raises(IndexError):
        dataset[10]


def test_random_windows_are_contiguous_slices_of_the_stream() -> None:
    tokens = np.arange(500, dtype=np.uint32)
    dataset = TokenWindowDataset(tokens, seq_len=16, vocab_size=500, mode="random", num_samples=64, seed=3)
    assert len(dataset) == 64 and dataset.vocab_size == 500
    starts = set()
    for index in range(len(dataset)):
        window = dataset[index]
        assert window.shape == (17,) and window.dtype == torch.long
        assert window.tolist() == list(range(int(window[0]), int(window[0]) + 17))
        starts.add(int(window[0]))
    assert len(starts) > 32 and max(starts) <= 500 - 17


def test_seeded_random_windows_repeat_within_an_epoch_and_change_across_epochs() -> None:
    tokens = np.arange(10_000, dtype=np.uint16)
    dataset = TokenWindowDataset(tokens, seq_len=8, vocab_size=10_000, num_samples=20, seed=0)
    first = [dataset[i].tolist() for i in range(20)]
    assert first == [dataset[i].tolist() for i in range(20)]
    dataset.set_epoch(1)
    assert first != [dataset[i].tolist() for i in range(20)]


def test_unseeded_random_windows_follow_torch_manual_seed() -> None:
    dataset = TokenWindowDataset(
        np.arange(10_000, dtype=np.uint16), seq_len=8, vocab_size=10_000, num_samples=5
    )
    torch.manual_seed(0)
    first = [dataset[i].tolist() for i in range(5)]
    torch.manual_seed(0)
    assert first == [dataset[i].tolist() for i in range(5)]


def test_memmap_dataset_pickles_by_file_name(
    tokenizer: TextTokenizer, documents: list[Path], tmp_path: Path
) -> None:
    dataset = TokenWindowDataset.from_files(
        documents, tokenizer, seq_len=4, mode="sequential", cache_dir=tmp_path
    )
    payload = pickle.dumps(dataset)
    assert len(payload) < 2_000
    restored = pickle.loads(payload)
    assert isinstance(restored.tokens, np.memmap)
    assert [restored[i].tolist() for i in range(len(restored))] == [
        dataset[i].tolist() for i in range(len(dataset))
    ]
    assert restored.vocab_size == tokenizer.vocab_size


def test_too_short_stream_is_refused_with_advice() -> None:
    with pytest.raises(ValueError, match="lower seq_len"):
        TokenWindowDataset(np.arange(5), seq_len=5, vocab_size=10)


# ----------------------------------------------------------------------------- stdlib tokenizer
def test_stdlib_tokenizer_is_trained_on_training_files_once_then_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_fake_stdlib(tmp_path / "lib")
    (tmp_path / "lib" / "os.py").write_text("import sys\n" * 50)
    monkeypatch.setattr(text_data, "stdlib_root", lambda: tmp_path / "lib")
    trained_on = []
    original = TextTokenizer.train.__func__

    def spy(cls: type[TextTokenizer], files: list[Path], **kwargs: int) -> TextTokenizer:
        trained_on.append(list(files))
        return original(cls, files, **kwargs)

    monkeypatch.setattr(TextTokenizer, "train", classmethod(spy))
    first = stdlib_tokenizer(vocab_size=270, cache_dir=tmp_path / "cache")
    second = stdlib_tokenizer(vocab_size=270, cache_dir=tmp_path / "cache")
    assert trained_on == [[tmp_path / "lib/email/parser.py", tmp_path / "lib/os.py"]]
    assert first.encode("import sys\n") == second.encode("import sys\n")
    stdlib_tokenizer(vocab_size=280, cache_dir=tmp_path / "cache")
    assert len(trained_on) == 2


@pytest.mark.slow
def test_stdlib_corpus_end_to_end_with_timings(tmp_path: Path) -> None:
    start = time.perf_counter()
    tokenizer = stdlib_tokenizer(8000, cache_dir=tmp_path)
    train_time = time.perf_counter() - start
    train_files = split_stdlib_files()[0]
    start = time.perf_counter()
    first = tokenize_files(train_files, tokenizer, tmp_path)
    first_time = time.perf_counter() - start
    start = time.perf_counter()
    second = tokenize_files(train_files, tokenizer, tmp_path)
    second_time = time.perf_counter() - start
    print(f"train {train_time:.2f}s, tokens {len(first)}, first {first_time:.2f}s, second {second_time:.3f}s")
    assert tokenizer.vocab_size == 8000 and np.array_equal(first, second)
    assert second_time < first_time / 5
    sample = train_files[0].read_text(encoding="utf-8")
    assert first[: len(tokenizer.encode(sample))].tolist() == tokenizer.encode(sample)


# ---------------------------------------------------------------------------------- shards
def test_a_sharded_stream_is_the_same_tokens_as_one_entry(
    counting: CountingTokenizer, documents: list[Path], tmp_path: Path
) -> None:
    more = []
    for index in range(5):
        path = tmp_path / "docs" / f"extra{index}.txt"
        path.write_text(f"Document number {index}.\n" * (index + 2), encoding="utf-8")
        more.append(path)
    files = documents + more
    whole = tokenize_files(files, counting, tmp_path / "one")
    sharded = tokenize_files(files, counting, tmp_path / "many", shard_bytes=60)
    assert isinstance(whole, np.memmap) and isinstance(sharded, ShardedTokens)
    assert len(sharded.shards) > 3 and len(sharded) == len(whole) and sharded.shape == whole.shape
    np.testing.assert_array_equal(np.asarray(sharded), whole)
    for start in range(0, len(whole) - 7):  # every window, those across a shard boundary included
        np.testing.assert_array_equal(sharded[start : start + 7], whole[start : start + 7])
    assert sharded[-1] == whole[-1] and sharded[3] == whole[3]
    restored = pickle.loads(pickle.dumps(sharded))
    assert all(isinstance(shard, np.memmap) for shard in restored.shards)
    np.testing.assert_array_equal(np.asarray(restored), whole)
    windows = TokenWindowDataset(sharded, seq_len=5, vocab_size=counting.vocab_size, mode="sequential")
    assert torch.equal(windows[3], torch.from_numpy(np.asarray(whole[15:21], dtype=np.int64)))


def test_an_edit_re_encodes_only_its_shard(counting: CountingTokenizer, documents: list[Path], tmp_path: Path) -> None:
    tokenize_files(documents, counting, tmp_path, shard_bytes=1)  # one file per shard
    calls = CountingTokenizer.calls
    documents[2].write_text("def third():\n    return 3\n", encoding="utf-8")
    stream = tokenize_files(documents, counting, tmp_path, shard_bytes=1)
    assert CountingTokenizer.calls == calls + 1
    assert np.asarray(stream).tolist()[-len(counting.encode("def third():\n    return 3\n")) :] == counting.encode(
        "def third():\n    return 3\n"
    )


def test_names_that_moved_out_still_import_from_multimodal_data_text_with_a_warning() -> None:
    from multimodal.data import text_cache, text_files

    for name, home in (("find_text_files", text_files), ("read_text_file", text_files), ("ShardedTokens", text_cache)):
        with pytest.warns(DeprecationWarning, match=rf"{name} moved to {home.__name__}"):
            assert getattr(text_data, name) is getattr(home, name)
    with pytest.raises(AttributeError):
        text_data.no_such_name  # noqa: B018

"""Tests of the music corpora, the split, the augmentation and the window data sets."""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pretty_midi
import pytest
import torch
from torch.utils.data import DataLoader

from multimodal.data.music import (
    NOTES_CACHE,
    MidiAugmentation,
    MidiCorpus,
    MidiPieceWindows,
    MidiWindowDataset,
    cache_root,
    load_bach_chorales,
    load_midi_folder,
)
from multimodal.tokenizers.midi import MidiTokenizer

TOKENIZER = MidiTokenizer()
FIRST_CHORALES = ["bwv10.7", "bwv101.7", "bwv102.7", "bwv103.6", "bwv104.6", "bwv108.6", "bwv11.6"]


def random_notes(rng: np.random.Generator, num_notes: int, low: int = 48, high: int = 84) -> np.ndarray:
    """``(num_notes, 4)`` notes on a 50 ms grid, sorted by start."""
    start = np.sort(rng.integers(0, 20 * num_notes, num_notes)) * 0.05
    duration = rng.integers(1, 20, num_notes) * 0.05
    return np.stack(
        [rng.integers(low, high + 1, num_notes), start, start + duration, rng.integers(30, 110, num_notes)], 1
    )


def write_midi(path: Path, notes: list[tuple[int, float, float]], is_drum: bool = False) -> None:
    """Writes a one-instrument MIDI file."""
    midi = pretty_midi.PrettyMIDI()
    instrument = pretty_midi.Instrument(program=0, is_drum=is_drum)
    instrument.notes = [pretty_midi.Note(80, p, s, e) for p, s, e in notes]
    midi.instruments.append(instrument)
    path.parent.mkdir(parents=True, exist_ok=True)
    midi.write(str(path))


def piece_ids(notes: np.ndarray) -> list[int]:
    """``[BOS] + events + [EOS]`` of one piece, as the data sets document it."""
    return [TOKENIZER.bos_id, *TOKENIZER.encode_notes(notes), TOKENIZER.eos_id]


@pytest.fixture(scope="module")
def chorale_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache with the first 7 chorales converted (two of them are validation pieces)."""
    cache = tmp_path_factory.mktemp("cache") / "bach_chorales"
    load_bach_chorales(limit=7, cache_dir=cache)
    return cache


# ---------------------------------------------------------------------------- Bach chorales
def test_chorales_are_converted_once_and_then_load_from_the_cache_fast(chorale_cache):
    assert sorted(p.name for p in (chorale_cache / "midi").iterdir()) == sorted(
        f"{n}.mid" for n in FIRST_CHORALES
    )
    start = time.perf_counter()
    corpus = load_bach_chorales(limit=7, cache_dir=chorale_cache)
    assert time.perf_counter() - start < 1.0
    assert corpus.names == FIRST_CHORALES and corpus.num_skipped == 0
    reference = pretty_midi.PrettyMIDI(str(chorale_cache / "midi" / "bwv10.7.mid"))
    assert len(corpus.notes[0]) == sum(len(i.notes) for i in reference.instruments)
    assert corpus.split("val").names == ["bwv10.7", "bwv11.6"]


def test_interrupted_conversion_resumes_with_only_the_missing_chorale(chorale_cache):
    before = {p.name: p.stat().st_mtime_ns for p in (chorale_cache / "midi").iterdir()}
    (chorale_cache / "midi" / "bwv104.6.mid").unlink()
    (chorale_cache / NOTES_CACHE).unlink()
    corpus = load_bach_chorales(limit=7, cache_dir=chorale_cache)
    after = {p.name: p.stat().st_mtime_ns for p in (chorale_cache / "midi").iterdir()}
    assert corpus.names == FIRST_CHORALES
    assert {name for name in after if after[name] != before.get(name)} == {"bwv104.6.mid"}


def test_chorale_music21_cannot_convert_is_skipped_with_a_warning_and_not_retried(tmp_path):
    cache = tmp_path / "bach_chorales"
    cache.mkdir()
    (cache / "names.json").write_text(json.dumps(["bwv10.7", "bwv277"]))  # the cache's own list
    with pytest.warns(UserWarning, match="bwv277"):
        corpus = load_bach_chorales(cache_dir=cache)
    assert corpus.names == ["bwv10.7"] and corpus.num_skipped == 1
    assert "bwv277" in json.loads((cache / "failed.json").read_text())
    start = time.perf_counter()
    with pytest.warns(UserWarning, match="bwv277"):
        assert load_bach_chorales(cache_dir=cache).names == ["bwv10.7"]
    assert time.perf_counter() - start < 1.0


def test_cache_root_follows_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.delenv("MULTIMODAL_CACHE")
    assert cache_root() == Path.home() / ".cache" / "multimodal"


# ---------------------------------------------------------------------------- user folders
def test_folder_is_searched_recursively_and_bad_files_are_skipped_with_a_warning_each(tmp_path):
    write_midi(tmp_path / "good.mid", [(60, 0.0, 0.5)])
    write_midi(tmp_path / "deep" / "er" / "good2.MIDI", [(62, 0.0, 0.5), (64, 0.5, 1.0)])
    write_midi(tmp_path / "drums.mid", [(36, 0.0, 0.1)], is_drum=True)
    (tmp_path / "corrupt.mid").write_bytes(b"MThd\x00\x00\x00\x06 this is not a MIDI file")
    (tmp_path / "empty.midi").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not music")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        corpus = load_midi_folder(tmp_path)
    messages = [
        str(w.message) for w in caught if issubclass(w.category, UserWarning) and "skipping" in str(w.message)
    ]
    assert corpus.names == ["deep/er/good2.MIDI", "good.mid"]
    assert corpus.num_skipped == 3
    for bad in ("corrupt.mid", "empty.midi", "drums.mid"):
        assert sum(str(tmp_path / bad) in message for message in messages) == 1


def test_folder_without_usable_midi_raises_saying_what_was_searched(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"\*\.mid.*0 file\(s\) skipped"):
        load_midi_folder(tmp_path)
    (tmp_path / "broken.mid").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="broken.mid"), pytest.raises(FileNotFoundError, match=r"1 file\(s\) skipped"):
        load_midi_folder(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_midi_folder(tmp_path / "missing")


# ---------------------------------------------------------------------------- split
def test_split_is_by_piece_disjoint_complete_and_follows_the_documented_hash():
    names = [f"piece{i:03d}.mid" for i in range(300)]
    corpus = MidiCorpus(names, [np.zeros((0, 4))] * len(names))
    train, validation, test = corpus.split("train"), corpus.split("val"), corpus.split("test")
    assert not set(train.names) & set(validation.names) and not set(test.names) & (set(train.names) | set(validation.names))
    assert sorted(train.names + validation.names + test.names) == names
    buckets = {n: int.from_bytes(hashlib.sha1(n.encode()).digest()[:8], "big") % 100 for n in names}
    assert validation.names == [n for n in names if buckets[n] < 10] and 15 <= len(validation) <= 45
    assert test.names == [n for n in names if 10 <= buckets[n] < 20] and 15 <= len(test) <= 45
    assert corpus.split("val").names == validation.names  # the same every time
    assert corpus.split("test", test_percent=0).names == []
    with pytest.raises(ValueError, match="'train', 'val', 'test'"):
        corpus.split("dev")


# ---------------------------------------------------------------------------- augmentation
def test_augmentation_shifts_all_pitches_alike_keeps_them_in_range_and_stretches_time():
    rng = np.random.default_rng(0)
    notes = random_notes(rng, 50, low=122, high=126)  # only shifts -3..+1 keep 126 in range
    augment = MidiAugmentation()
    shifts = set()
    for _ in range(200):
        out = augment(notes, rng)
        shift = np.unique(out[:, 0] - notes[:, 0])
        assert len(shift) == 1 and out[:, 0].max() <= 127 and out[:, 0].min() >= 0
        shifts.add(int(shift[0]))
        factor = out[:, 2] / notes[:, 2]
        assert np.allclose(factor, factor[0]) and 0.95 <= factor[0] <= 1.05
        np.testing.assert_allclose(out[:, 1], notes[:, 1] * factor[0])
        np.testing.assert_array_equal(out[:, 3], notes[:, 3])
    assert shifts == {-3, -2, -1, 0, 1}


# ---------------------------------------------------------------------------- data sets
def test_training_windows_have_seq_len_plus_one_ids_cut_from_bos_events_eos():
    rng = np.random.default_rng(1)
    pieces = [random_notes(rng, 200), random_notes(rng, 2)]  # a long piece and one shorter than a window
    corpus = MidiCorpus(["long", "short"], pieces)
    dataset = MidiWindowDataset(corpus, TOKENIZER, seq_len=64, epoch_length=40, augmentation=None)
    assert len(dataset) == 40 and dataset.vocab_size == TOKENIZER.vocab_size == 391
    long_ids, short_ids = piece_ids(pieces[0]), piece_ids(pieces[1])
    torch.manual_seed(0)
    for window in dataset:
        assert window.shape == (65,) and window.dtype == torch.int64
        ids = window.tolist()
        if ids[: len(short_ids)] == short_ids:
            assert ids[len(short_ids) :] == [TOKENIZER.pad_id] * (65 - len(short_ids))
        else:
            assert any(long_ids[i : i + 65] == ids for i in range(len(long_ids) - 64))
    torch.manual_seed(0)
    first = next(iter(DataLoader(dataset, batch_size=8)))
    torch.manual_seed(0)
    assert first.shape == (8, 65) and torch.equal(first, next(iter(DataLoader(dataset, batch_size=8))))


def test_collection_shares_set_how_often_each_collection_is_drawn():
    # Three pieces that open with different pitches, so a window tells which piece it came from.
    pieces = [np.array([[60.0 + i, 0.0, 0.5, 80.0]] * 1, dtype=np.float64) for i in range(3)]
    pieces[2] = np.repeat(pieces[2], 3, axis=0)  # folk/b has three times folk/a's notes
    corpus = MidiCorpus(["bach/x", "folk/a", "folk/b"], pieces)
    dataset = MidiWindowDataset(corpus, TOKENIZER, seq_len=8, epoch_length=4000, augmentation=None, seed=0,
                                collection_shares={"bach": 0.6})  # fmt: skip
    note_on = [TOKENIZER.event_to_token("NOTE_ON", 60 + i) for i in range(3)]
    drawn = [next(i for i, token in enumerate(note_on) if token in window.tolist()) for window in dataset]
    counts = np.bincount(drawn, minlength=3) / len(drawn)
    # bach gets 0.6; folk's 0.4 splits 3:1 by notes (pieces of one note and three notes)
    np.testing.assert_allclose(counts, [0.6, 0.1, 0.3], atol=0.03)
    with pytest.raises(ValueError, match="opera"):
        MidiWindowDataset(corpus, TOKENIZER, seq_len=8, collection_shares={"opera": 0.5})
    with pytest.raises(ValueError, match="at most 1"):
        MidiWindowDataset(corpus, TOKENIZER, seq_len=8, collection_shares={"bach": 0.8, "folk": 0.7})


def test_training_windows_are_augmented_by_default():
    rng = np.random.default_rng(2)
    notes = random_notes(rng, 3)
    dataset = MidiWindowDataset(MidiCorpus(["p"], [notes]), TOKENIZER, seq_len=128)
    assert dataset.augmentation == MidiAugmentation(max_transpose=3, stretch_range=(0.95, 1.05))
    originals = {tuple(piece_ids(notes))}
    seen = {tuple(t for t in dataset[0].tolist() if t != TOKENIZER.pad_id) for _ in range(30)}
    assert len(seen - originals) > 5


def test_validation_windows_cover_every_token_of_every_piece_exactly_once(chorale_cache):
    rng = np.random.default_rng(3)
    validation = load_bach_chorales(limit=7, cache_dir=chorale_cache).split("val")
    synthetic = [random_notes(rng, n) for n in (1, 30, 31, 200)]
    corpus = MidiCorpus([*validation.names, "a", "b", "c", "d"], [*validation.notes, *synthetic])
    for seq_len in (16, 100, 4096):
        windows = MidiPieceWindows(corpus, TOKENIZER, seq_len=seq_len)
        targets = [w[1:][w[1:] != TOKENIZER.pad_id].tolist() for w in windows]
        assert all(len(w) == seq_len + 1 for w in windows)
        expected = [t for notes in corpus.notes for t in piece_ids(notes)[1:]]
        assert [t for window in targets for t in window] == expected
        assert windows.num_targets == len(expected)
        assert torch.equal(
            torch.stack(list(windows)), torch.stack(list(MidiPieceWindows(corpus, TOKENIZER, seq_len)))
        )

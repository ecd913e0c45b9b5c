"""The MIDI ingest: the sharded cache holds the one reader's notes; re-runs and interruptions.

The reader itself is tested against pretty_midi in ``tests/tokenizers/test_midi_files.py``."""

import os
import time

import numpy as np
import pretty_midi
import pytest

import multimodal.data.midi_cache as midi_cache
from multimodal.data.midi_cache import MidiCache, ingest_midi
from multimodal.tokenizers.midi_files import read_midi_notes


def _write(path, notes, pedal=(), drums=(), tempo=120.0):
    midi = pretty_midi.PrettyMIDI(initial_tempo=tempo)
    piano = pretty_midi.Instrument(program=0)
    piano.notes = [pretty_midi.Note(v, p, s, e) for p, s, e, v in notes]
    piano.control_changes = [pretty_midi.ControlChange(64, value, t) for t, value in pedal]
    midi.instruments.append(piano)
    if drums:
        kit = pretty_midi.Instrument(program=0, is_drum=True)
        kit.notes = [pretty_midi.Note(100, p, s, e) for p, s, e in drums]
        midi.instruments.append(kit)
    path.parent.mkdir(parents=True, exist_ok=True)
    midi.write(str(path))
    return path


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "midi"
    _write(root / "a.mid", [(60, 0.0, 0.5, 80), (64, 0.5, 1.0, 70)])
    _write(root / "deep" / "b.MIDI", [(50, 0.0, 0.2, 90), (55, 1.0, 1.2, 90)], pedal=[(0.1, 127), (0.8, 0)],
           drums=[(36, 0.0, 0.1)])  # fmt: skip
    (root / "broken.mid").write_bytes(b"MThd\x00\x00\x00\x06garbage")
    _write(root / "drums_only.mid", [], drums=[(36, 0.0, 0.1)])
    (root / "notes.txt").write_text("not midi")
    return root


def test_ingest_caches_every_readable_file_and_names_the_rest(folder, tmp_path):
    with pytest.warns(UserWarning) as caught:
        report = ingest_midi(folder, tmp_path / "cache", num_workers=1, progress=False)
    assert (report.files, report.parsed, report.reused) == (4, 2, 0)
    assert set(report.skipped) == {"broken.mid", "drums_only.mid"} and "holds no note" in report.skipped["drums_only.mid"]
    assert sum("broken.mid" in str(w.message) for w in caught) == 1
    cache = MidiCache(tmp_path / "cache")
    assert cache.names == ["a.mid", "deep/b.MIDI"] and len(cache.skipped) == 2
    for index, name in enumerate(cache.names):
        np.testing.assert_allclose(cache.notes(index), read_midi_notes(folder / name), atol=1e-6)
        assert cache.num_notes(index) == len(read_midi_notes(folder / name))
    corpus = cache.corpus()
    assert corpus.names == cache.names and isinstance(corpus.notes[0], np.memmap)
    assert [len(notes) for notes in corpus.split("all").notes] == [2, 2]


def test_a_rerun_parses_only_new_and_changed_files_and_forgets_removed_ones(folder, tmp_path):
    with pytest.warns(UserWarning):
        ingest_midi(folder, tmp_path / "cache", num_workers=1, progress=False)
    again = ingest_midi(folder, tmp_path / "cache", num_workers=1, progress=False)  # no warning: skips remembered
    assert (again.parsed, again.reused, len(again.skipped)) == (0, 2, 2)
    time.sleep(0.01)
    _write(folder / "a.mid", [(72, 0.0, 0.3, 80)])  # changed
    _write(folder / "c.mid", [(40, 0.0, 2.0, 60)])  # new
    os.remove(folder / "deep" / "b.MIDI")  # removed
    third = ingest_midi(folder, tmp_path / "cache", num_workers=1, progress=False)
    assert (third.parsed, third.reused) == (2, 0)
    cache = MidiCache(tmp_path / "cache")
    assert cache.names == ["a.mid", "c.mid"]
    assert cache.notes(0)[:, 0].tolist() == [72.0]


def test_an_interrupted_ingest_keeps_its_finished_shards_and_resumes(folder, tmp_path, monkeypatch):
    for index in range(6):
        _write(folder / f"extra{index}.mid", [(48 + index, 0.0, 0.5, 80)])
    real, calls = midi_cache._parse_one, []

    def failing(path, include_drums):
        calls.append(path)
        if len(calls) == 5:
            raise KeyboardInterrupt  # the user pressed Ctrl-C during the fifth file
        return real(path, include_drums)

    monkeypatch.setattr(midi_cache, "_parse_one", failing)
    with pytest.raises(KeyboardInterrupt), pytest.warns(UserWarning):
        ingest_midi(folder, tmp_path / "cache", num_workers=1, shard_files=2, progress=False)
    kept = len(MidiCache(tmp_path / "cache").names)
    assert kept >= 2  # the shards written before the interruption
    monkeypatch.setattr(midi_cache, "_parse_one", real)
    resumed = ingest_midi(folder, tmp_path / "cache", num_workers=1, progress=False)
    assert resumed.reused == kept and resumed.parsed + kept == 8
    assert len(MidiCache(tmp_path / "cache").names) == 8


def test_parallel_ingest_gives_the_same_cache_as_one_process(folder, tmp_path):
    for index in range(12):
        _write(folder / f"many{index:02d}.mid", [(40 + index, 0.1 * index, 0.1 * index + 0.5, 64)])
    with pytest.warns(UserWarning):
        ingest_midi(folder, tmp_path / "one", num_workers=1, progress=False)
    with pytest.warns(UserWarning):
        ingest_midi(folder, tmp_path / "two", num_workers=2, progress=False)
    one, two = MidiCache(tmp_path / "one"), MidiCache(tmp_path / "two")
    assert one.names == two.names and len(one.names) == 14
    for index in range(len(one)):
        np.testing.assert_array_equal(one.notes(index), two.notes(index))


def test_the_music_data_module_trains_from_an_ingested_folder(folder, tmp_path, monkeypatch):
    from tasks.datamodules import MusicDataModule

    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache_root"))
    data = MusicDataModule(midi_dir=str(folder), seq_len=8, batch_size=2, epoch_length=4, validation_percent=0,
                           test_percent=0)  # fmt: skip
    with pytest.warns(UserWarning):
        data.prepare_data()
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert batch.shape == (2, 9) and set(data.corpus.names) == {"a.mid", "deep/b.MIDI"}

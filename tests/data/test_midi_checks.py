"""The one MIDI reader's checks: what ``generate`` and ``perplexity`` refuse, training on a folder (the
note cache) and ``load_midi_files`` skip with a warning, for the same reason."""

import warnings

import mido
import numpy as np
import pytest

from multimodal.data.midi_cache import MidiCache, ingest_midi
from multimodal.data.music import load_midi_files
from multimodal.tokenizers.midi_files import UnusableMidi, check_notes, notes_from_midi, read_midi_notes


def _write(path, ticks_per_beat=480, tempo=500_000):
    """Four notes of a quaver each; the header's resolution and the tempo as given (mido writes anything)."""
    midi = mido.MidiFile(ticks_per_beat=ticks_per_beat)
    track = mido.MidiTrack()
    midi.tracks.append(track)
    track.append(mido.MetaMessage("set_tempo", tempo=tempo, time=0))
    for index in range(4):
        track.append(mido.Message("note_on", note=60 + index, velocity=80, time=0 if index == 0 else 10))
        track.append(mido.Message("note_off", note=60 + index, velocity=0, time=240))
    path.parent.mkdir(parents=True, exist_ok=True)
    midi.save(str(path))
    return path


CORRUPT = {"resolution_0.mid": ({"ticks_per_beat": 0}, "0 ticks per beat"),
           "tempo_0.mid": ({"tempo": 0}, "tempo of 0 microseconds per beat")}  # fmt: skip


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "midi"
    _write(root / "good.mid")
    for name, (header, _) in CORRUPT.items():
        _write(root / name, **header)
    return root


def test_the_reader_refuses_a_zero_resolution_or_tempo_naming_the_file_and_the_reason(folder):
    assert len(read_midi_notes(folder / "good.mid")) == 4
    for name, (_, reason) in CORRUPT.items():
        with pytest.raises(UnusableMidi, match=reason) as refused:
            read_midi_notes(folder / name)  # symusic parses them: infinite times / zero-length notes
        assert str(refused.value) == f"{folder / name}: {refused.value.reason}" and reason in refused.value.reason
        with pytest.raises(ValueError, match=reason):  # generate, perplexity, the serve page: a ValueError
            notes_from_midi(folder / name)


def test_the_cache_skips_them_with_a_warning_naming_each(folder, tmp_path):
    with pytest.warns(UserWarning) as caught:
        report = ingest_midi(folder, tmp_path / "cache", num_workers=1, progress=False)
    assert report.parsed == 1 and set(report.skipped) == set(CORRUPT)
    for name, (_, reason) in CORRUPT.items():
        assert reason in report.skipped[name]
        assert any(name in str(warning.message) and reason in str(warning.message) for warning in caught)
    cache = MidiCache(tmp_path / "cache")
    assert cache.names == ["good.mid"] and np.isfinite(cache.notes(0)).all()


def test_training_on_the_folder_warns_every_run_and_uses_only_good_files(folder, tmp_path, monkeypatch):
    from tasks.datamodules.music import midi_folder_corpus

    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    for _ in range(2):  # the second run reads the cache: still named
        with pytest.warns(UserWarning) as caught:
            corpus = midi_folder_corpus(str(folder))
        assert corpus.names == ["good.mid"]
        summary = [str(w.message) for w in caught if "2 of 3 MIDI files skipped" in str(w.message)]
        assert len(summary) == 1 and all(name in summary[0] for name in CORRUPT)


def test_perplexity_and_generate_skip_them_the_same_way(folder):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        corpus = load_midi_files([folder])
    assert corpus.names == ["good.mid"] and len(corpus.skipped) == 2
    for name, (_, reason) in CORRUPT.items():
        assert any(name in line and reason in line for line in corpus.skipped)
        assert any(name in str(warning.message) for warning in caught)


def test_note_checks():
    good = np.array([[60, 0.0, 0.5, 80], [62, 0.5, 0.5, 80]])  # one zero-length note among others: kept
    assert check_notes(good) is good and len(check_notes(np.empty((0, 4)))) == 0
    for notes, reason in ((np.array([[60, np.inf, np.inf, 80]]), "not finite"), (np.array([[60, -1.0, 0.5, 80]]), "before time 0"),
                          (np.array([[60, 1.0, 0.5, 80]]), "ends before it starts"),
                          (np.array([[60, 1.0, 1.0, 80], [61, 2.0, 2.0, 80]]), "lasts no time")):  # fmt: skip
        with pytest.raises(UnusableMidi, match=reason):
            check_notes(notes)

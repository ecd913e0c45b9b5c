"""Instrument-family phrases: melody windows, octave placement, a reused SoundFont, the cache, the data module."""

import numpy as np
import pretty_midi
import pytest
import torch
from melodies import melody_folder

from multimodal.audio.synthesis import SoundFontRenderer, bundled_soundfont, midi_to_waveform
from multimodal.data import instrument_phrases
from multimodal.data.instrument_phrases import (
    ALL_FAMILIES,
    DEFAULT_FAMILIES,
    REGISTERS,
    _in_register,
    melody_windows,
    phrase_set,
    render_phrases,
)
from multimodal.data.music import MidiCorpus
from multimodal.tokenizers.audio import AudioSpectrogramTokenizer
from tasks.datamodules import InstrumentFamilyDataModule

pytest.importorskip("tinysoundfont")
TOKENIZER = AudioSpectrogramTokenizer(n_mels=32)


def _notes(rows):
    return np.array(rows, dtype=np.float64)


def test_families_are_general_midis_sixteen_and_the_default_leaves_out_the_effects():
    assert len(ALL_FAMILIES) == 16 and ALL_FAMILIES[0] == "Piano" and ALL_FAMILIES[4] == "Bass"
    assert all(pretty_midi.program_to_instrument_class(8 * i + 7) == name for i, name in enumerate(ALL_FAMILIES))
    assert len(DEFAULT_FAMILIES) == 14 and "Sound Effects" not in DEFAULT_FAMILIES
    assert set(REGISTERS) == set(ALL_FAMILIES)


def test_windows_start_at_onsets_do_not_overlap_and_keep_their_part():
    # part 0: notes at 0, 0.5, 1.0, 2.5, 2.6; part 1: one lone note (too few) -> windows only from part 0.
    piece = _notes([[60, 0.0, 0.5, 80, 0], [62, 0.5, 1.5, 80, 0], [64, 1.0, 3.0, 80, 0], [72, 1.2, 1.4, 80, 1],
                    [65, 2.5, 2.6, 80, 0], [67, 2.6, 4.0, 80, 0]])  # fmt: skip
    windows = melody_windows(MidiCorpus(["a"], [piece]), clip_seconds=2.0)
    assert len(windows) == 2
    first, second = windows
    np.testing.assert_allclose(first, [[60, 0, 0.5, 80], [62, 0.5, 1.5, 80], [64, 1.0, 2.0, 80]])  # end cut at 2 s
    np.testing.assert_allclose(second, [[65, 0, 0.1, 80], [67, 0.1, 1.5, 80]])  # starts at the next onset, 2.5 s


def test_register_moves_by_octaves_towards_the_centre_and_stays_on_the_keyboard():
    line = _notes([[60, 0, 1, 80], [64, 1, 2, 80], [67, 2, 3, 80]])
    bass = _in_register(line, REGISTERS["Bass"])
    assert (bass[:, 0] - line[:, 0] == -24).all()  # median 64 -> 40
    assert (_in_register(line, 74)[:, 0] - line[:, 0] == 12).all()
    wide = _notes([[30, 0, 1, 80], [100, 1, 2, 80]])
    assert _in_register(wide, 100)[:, 0].min() >= 21 and _in_register(wide, 100)[:, 0].max() <= 108


def _midi(pitch: int, program: int, seconds: float = 0.5) -> pretty_midi.PrettyMIDI:
    midi = pretty_midi.PrettyMIDI()
    instrument = pretty_midi.Instrument(program=program)
    instrument.notes.append(pretty_midi.Note(100, pitch, 0.0, seconds))
    midi.instruments.append(instrument)
    return midi


def test_a_reused_renderer_sounds_like_a_fresh_synthesizer_every_time():
    render = SoundFontRenderer(bundled_soundfont(), 16000)
    render(_midi(48, 48, seconds=2.0))  # strings with a long release, cut off by the next clip
    again = render(_midi(72, 0))
    fresh = midi_to_waveform(_midi(72, 0), 16000, soundfont=bundled_soundfont(), gain=0.0)
    torch.testing.assert_close(again, fresh)


def test_renderer_refuses_sine_waves_and_files_that_are_not_soundfonts(tmp_path):
    with pytest.raises(ValueError, match="SoundFont file"):
        SoundFontRenderer("sine")
    bad = tmp_path / "x.sf2"
    bad.write_bytes(b"not a soundfont")
    with pytest.raises(ValueError, match="not a readable SoundFont"):
        SoundFontRenderer(bad)


def _windows():
    return melody_windows(MidiCorpus(["a"], [_notes([[60 + i % 5, 0.4 * i, 0.4 * i + 0.35, 90] for i in range(12)])]), 1.0)


def test_rendered_phrases_are_balanced_played_by_their_family_and_a_function_of_the_seed():
    families = ["Piano", "Bass", "Pipe"]
    phrases = render_phrases(_windows(), bundled_soundfont(), families, 8, TOKENIZER, 1.0, seed=3)
    assert phrases.spectrograms.shape == (24, 32, 100) and phrases.spectrograms.dtype == torch.float16
    assert torch.bincount(phrases.labels).tolist() == [8, 8, 8]
    for label, program in zip(phrases.labels.tolist(), phrases.programs.tolist(), strict=True):
        assert ALL_FAMILIES[program // 8] == families[label]
    assert sorted(phrases.programs[phrases.labels == 1].tolist()) == list(range(32, 40))  # all eight basses
    again = render_phrases(_windows(), bundled_soundfont(), families, 8, TOKENIZER, 1.0, seed=3)
    torch.testing.assert_close(again.spectrograms, phrases.spectrograms)
    other = render_phrases(_windows(), bundled_soundfont(), families, 8, TOKENIZER, 1.0, seed=4)
    assert not torch.equal(other.spectrograms, phrases.spectrograms)
    # A bass phrase holds its energy lower than a pipe's: mean mel band weighted by power.
    power = 10 ** (phrases.spectrograms.float() / 10)
    centre = (power.mean(-1) * torch.arange(32)).sum(-1) / power.mean(-1).sum(-1)
    assert centre[phrases.labels == 1].mean() < centre[phrases.labels == 2].mean() - 3


def test_phrase_set_renders_once_then_reads_the_cache(tmp_path, monkeypatch):
    first = phrase_set(_windows(), bundled_soundfont(), ["Piano", "Organ"], 2, TOKENIZER, 1.0, 0, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 1

    def fail(*args, **kwargs):
        raise AssertionError("rendered again")

    monkeypatch.setattr(instrument_phrases, "render_phrases", fail)
    cached = phrase_set(_windows(), bundled_soundfont(), ["Piano", "Organ"], 2, TOKENIZER, 1.0, 0, cache_dir=tmp_path)
    torch.testing.assert_close(cached.spectrograms, first.spectrograms)
    assert torch.equal(cached.programs, first.programs)
    with pytest.raises(AssertionError, match="rendered again"):  # another seed is another set
        phrase_set(_windows(), bundled_soundfont(), ["Piano", "Organ"], 2, TOKENIZER, 1.0, 1, cache_dir=tmp_path)


def test_data_module_links_sizes_normalises_with_training_statistics_and_masks_training_clips(tmp_path):
    data = InstrumentFamilyDataModule(melodies=str(melody_folder(tmp_path / "tunes")), families=["Piano", "Brass"],
                                      clip_seconds=1.0, clips_per_family=4, eval_clips_per_family=2, n_mels=32,
                                      freq_mask=6, time_mask=10, cache_dir=str(tmp_path / "cache"))  # fmt: skip
    assert (data.num_classes, data.channels, data.image_size, data.class_names) == (2, 1, (32, 100), ["Piano", "Brass"])
    data.setup("fit")
    raw = data.phrases("train").spectrograms.float()
    mean, std = data.statistics
    assert mean == pytest.approx(float(raw.mean()), rel=1e-5) and std == pytest.approx(float(raw.std()), rel=1e-5)
    clip, label = data.split("val")[0]
    assert clip.shape == (1, 32, 100) and label.dtype == torch.long
    torch.testing.assert_close(clip[0], (data.phrases("val").spectrograms[0].float() - mean) / std)
    def zeroed(clip):  # a whole mel band or a whole frame set to 0 (a mask)
        return bool((clip == 0).all(dim=-1).any() or (clip == 0).all(dim=-2).any())

    masked = [zeroed(data.split("train")[i][0]) for i in range(len(data.split("train")))]
    assert sum(masked) >= len(masked) // 2  # a mask's width is drawn from 0..max-1: most clips get one
    assert not any(zeroed(data.split("val")[i][0]) for i in range(len(data.split("val"))))
    assert len(data.split("train")) == 8 and len(data.split("val")) == 4


def test_data_module_refuses_bad_options_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="families"):
        InstrumentFamilyDataModule(families=["Piano", "Kazoo"])
    with pytest.raises(ValueError, match="clips_per_family=0"):
        InstrumentFamilyDataModule(clips_per_family=0)
    with pytest.raises(ValueError, match="not a readable SoundFont"):
        InstrumentFamilyDataModule(soundfonts=[str(tmp_path / "missing.sf2")])
    with pytest.raises(FileNotFoundError, match="neither a music21 collection"):
        InstrumentFamilyDataModule(melodies=str(tmp_path / "nowhere")).phrases("train")

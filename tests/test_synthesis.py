"""Tests of MIDI rendering, WAV files and spectrograms (references: numpy FFT, scipy's WAV reader)."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pretty_midi
import pytest
import torch
from PIL import Image
from scipy.io import wavfile

from multimodal.audio import synthesis
from multimodal.audio.synthesis import (
    midi_to_waveform,
    power_spectrogram,
    read_wav,
    spectrogram_png,
    write_wav,
)


def one_note(pitch: int = 69, seconds: float = 1.0) -> pretty_midi.PrettyMIDI:
    midi = pretty_midi.PrettyMIDI()
    piano = pretty_midi.Instrument(program=0)
    piano.notes = [pretty_midi.Note(100, pitch, 0.0, seconds)]
    midi.instruments.append(piano)
    return midi


def test_waveform_is_normalised_and_sounds_the_note():
    waveform = midi_to_waveform(one_note(69), sample_rate=16000)  # A4 = 440 Hz
    assert waveform.dtype == torch.float32 and waveform.ndim == 1
    assert len(waveform) >= 16000 and waveform.abs().max() == pytest.approx(synthesis.PEAK)
    spectrum = np.abs(np.fft.rfft(waveform[:16000].numpy()))
    assert abs(np.argmax(spectrum) - 440) < 3  # 16000 samples at 16 kHz: bin k is k Hz
    assert len(midi_to_waveform(pretty_midi.PrettyMIDI())) == 0


def test_wav_round_trip_keeps_rate_length_and_samples(tmp_path):
    waveform = midi_to_waveform(one_note(60, 0.5), sample_rate=22050)
    path = write_wav(tmp_path / "out" / "note.wav", waveform, 22050)
    rate, samples = wavfile.read(path)
    assert rate == 22050 and samples.dtype == np.int16 and len(samples) == len(waveform)
    np.testing.assert_allclose(samples / 32767, waveform.numpy(), atol=1 / 32767)
    assert np.abs(samples).max() > 20000
    stereo, rate = read_wav(write_wav(tmp_path / "stereo.wav", torch.stack([waveform, -waveform]), 22050))
    assert stereo.shape == (2, len(waveform)) and rate == 22050
    torch.testing.assert_close(stereo[1], -waveform, atol=1 / 32767, rtol=0)


def test_power_spectrogram_equals_a_numpy_stft():
    rng = np.random.default_rng(0)
    signal = rng.standard_normal(3000).astype(np.float32)
    n_fft, hop = 256, 64
    padded = np.pad(signal, n_fft // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = np.stack([padded[i : i + n_fft] * window for i in range(0, len(padded) - n_fft + 1, hop)])
    expected = (np.abs(np.fft.rfft(frames, axis=1)) ** 2).T
    result = power_spectrogram(torch.from_numpy(signal), n_fft=n_fft, hop_length=hop)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-3, atol=1e-3)


def test_spectrogram_png_is_a_picture_with_content(tmp_path):
    path = spectrogram_png(midi_to_waveform(one_note()), 16000, tmp_path / "spec.png")
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("L"))
    assert pixels.shape[1] > 300 and pixels.std() > 20


# ------------------------------------------------------------------------------ SoundFont rendering
def note_of(program: int, pitch: int = 69, seconds: float = 1.0, is_drum: bool = False) -> pretty_midi.PrettyMIDI:
    midi = pretty_midi.PrettyMIDI()
    part = pretty_midi.Instrument(program=program, is_drum=is_drum)
    part.notes = [pretty_midi.Note(100, pitch, 0.0, seconds)]
    midi.instruments.append(part)
    return midi


def harmonic_ratio(waveform: torch.Tensor, f0: float = 440.0, sample_rate: int = 16000) -> float:
    """Power in harmonics 2-6 over the fundamental's (numpy FFT of 0.1-0.9 s, Hann window, ±8 Hz bands)."""
    segment = waveform[sample_rate // 10 : 9 * sample_rate // 10].numpy().astype(np.float64)
    power = np.abs(np.fft.rfft(segment * np.hanning(len(segment)))) ** 2
    hz = np.fft.rfftfreq(len(segment), 1 / sample_rate)

    def band(f):
        return power[np.abs(hz - f) < 8].sum()

    return sum(band(k * f0) for k in range(2, 7)) / band(f0)


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Each test sees the once-per-reason fallback warnings anew, with no $MULTIMODAL_SOUNDFONT."""
    monkeypatch.setattr(synthesis, "_warned", set())
    monkeypatch.delenv(synthesis.SOUNDFONT_ENV, raising=False)


def test_soundfont_a4_peaks_at_440_hz_with_overtones(fresh_warnings):
    waveform = midi_to_waveform(note_of(0), 16000, soundfont=synthesis.bundled_soundfont())
    spectrum = np.abs(np.fft.rfft(waveform[:16000].numpy()))  # bin k is k Hz
    assert abs(int(np.argmax(spectrum)) - 440) <= 3
    assert harmonic_ratio(waveform) > 0.05  # a piano, not a sine (whose ratio is ~0)
    default = midi_to_waveform(note_of(0), 16000)  # the default is the same SoundFont
    torch.testing.assert_close(default, waveform)


def test_programs_differ_in_timbre_with_a_soundfont_not_with_sines(fresh_warnings):
    piano, trumpet = midi_to_waveform(note_of(0)), midi_to_waveform(note_of(56))
    assert abs(np.log10(harmonic_ratio(trumpet) / harmonic_ratio(piano))) > 1  # measured: 0.27 vs 68
    sine_piano, sine_trumpet = (midi_to_waveform(note_of(p), soundfont="sine") for p in (0, 56))
    torch.testing.assert_close(sine_piano, sine_trumpet)
    assert harmonic_ratio(sine_piano) < 1e-3


def test_drums_sound_and_are_not_the_melodic_program(fresh_warnings):
    midi = pretty_midi.PrettyMIDI()
    kit = pretty_midi.Instrument(program=0, is_drum=True)
    kit.notes = [pretty_midi.Note(110, pitch, 0.25 * i, 0.25 * i + 0.2) for i, pitch in enumerate((36, 38, 42, 49))]
    midi.instruments.append(kit)
    drums = midi_to_waveform(midi)
    assert drums.pow(2).mean().sqrt() > 0.05 and drums.abs().max() == pytest.approx(synthesis.PEAK)
    kit.is_drum = False  # the same notes as piano (bank 0): a different sound
    piano = midi_to_waveform(midi)
    length = min(len(drums), len(piano))
    assert (drums[:length] - piano[:length]).abs().max() > 0.3


def test_more_parts_than_midi_channels_all_sound(fresh_warnings):
    midi = pretty_midi.PrettyMIDI()
    for index in range(20):  # 20 parts, one note each in its own quarter second
        part = pretty_midi.Instrument(program=index % 8 * 8)
        part.notes = [pretty_midi.Note(100, 60 + index, 0.25 * index, 0.25 * index + 0.2)]
        midi.instruments.append(part)
    waveform = midi_to_waveform(midi, 8000)
    slots = waveform[: 20 * 2000].reshape(20, 2000)
    assert (slots.pow(2).mean(dim=1).sqrt() > 0.01).all()


def test_sustain_pedal_holds_notes_until_released(fresh_warnings):
    midi = note_of(0, pitch=60, seconds=0.3)
    plain = midi_to_waveform(midi, gain=0.0)
    midi.instruments[0].control_changes = [pretty_midi.ControlChange(64, 127, 0.0), pretty_midi.ControlChange(64, 0, 1.0)]
    pedal = midi_to_waveform(midi, gain=0.0)

    def rms(waveform, start, end):
        return float(waveform[int(start * 16000) : int(end * 16000)].pow(2).mean().sqrt())

    assert rms(pedal, 0.6, 0.9) > 10 * rms(plain, 0.6, 0.9)  # still sounding after the note's end
    assert rms(pedal, 1.25, 1.45) < 0.1 * rms(pedal, 0.6, 0.9) and len(pedal) < 2 * 16000  # released with the pedal


def test_gain_in_db_keeps_the_rendered_level(fresh_warnings):
    loud = midi_to_waveform(note_of(0), soundfont=synthesis.bundled_soundfont(), gain=0.0)
    quiet = midi_to_waveform(note_of(0), soundfont=synthesis.bundled_soundfont(), gain=-20.0)
    assert 0 < loud.abs().max() < synthesis.PEAK  # not normalised
    torch.testing.assert_close(quiet[: len(loud)], loud[: len(quiet)] / 10, atol=1e-5, rtol=1e-3)


def test_a_broken_named_soundfont_is_a_one_line_error(tmp_path, fresh_warnings):
    garbage = tmp_path / "broken.sf2"
    garbage.write_bytes(b"RIFF\x10\x00\x00\x00sfbkLIST" + bytes(range(256)) * 8)
    text = tmp_path / "notes.sf2"
    text.write_text("not a SoundFont\n")
    for path, reason in [(garbage, "tinysoundfont cannot parse it"), (text, "no RIFF sfbk header: not .sf2/.sf3"),
                         (tmp_path / "absent.sf2", "No such file or directory")]:  # fmt: skip
        with pytest.raises(ValueError) as error:
            midi_to_waveform(note_of(0), soundfont=path)
        assert str(error.value) == f"{path}: not a readable SoundFont ({reason})"


def test_missing_default_soundfont_falls_back_to_sines_and_warns_once(tmp_path, monkeypatch, fresh_warnings):
    sine = midi_to_waveform(note_of(0), soundfont="sine")
    missing = tmp_path / "gone.sf2"
    monkeypatch.setenv(synthesis.SOUNDFONT_ENV, str(missing))
    with pytest.warns(UserWarning, match=rf"{missing}: not a readable SoundFont .*\$MULTIMODAL_SOUNDFONT.*sine"):
        torch.testing.assert_close(midi_to_waveform(note_of(0)), sine)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per reason
        torch.testing.assert_close(midi_to_waveform(note_of(0)), sine)
    monkeypatch.setenv(synthesis.SOUNDFONT_ENV, "sine")  # chosen, so no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(midi_to_waveform(note_of(0)), sine)


def test_without_tinysoundfont_sines_render_with_a_warning(monkeypatch, fresh_warnings):
    monkeypatch.setitem(sys.modules, "tinysoundfont", None)  # import fails
    with pytest.warns(UserWarning, match="tinysoundfont does not import"):
        waveform = midi_to_waveform(note_of(0), soundfont=synthesis.bundled_soundfont())
    torch.testing.assert_close(waveform, midi_to_waveform(note_of(0), soundfont="sine"))


def test_data_soundfonts_lists_debian_files_and_prints_the_best(tmp_path, monkeypatch, capsys):
    from tasks.commands.data import data_command

    present = tmp_path / "FluidR3_GM.sf2"
    present.write_bytes(b"RIFF\x00\x00\x00\x00sfbk")
    monkeypatch.setattr(synthesis, "DEBIAN_SOUNDFONTS", (("pkg-a", str(tmp_path / "a.sf3"), "A"),
                                                         ("pkg-b", str(present), "B")))  # fmt: skip
    data_command(["soundfonts"])
    out, err = capsys.readouterr()
    assert out.strip() == str(present)
    assert "sudo apt-get install pkg-a" in err and "pkg-b" not in err
    monkeypatch.setattr(synthesis, "DEBIAN_SOUNDFONTS", (("pkg-a", str(tmp_path / "a.sf3"), "A"),))
    data_command(["soundfonts"])
    assert capsys.readouterr().out.strip() == str(synthesis.bundled_soundfont())

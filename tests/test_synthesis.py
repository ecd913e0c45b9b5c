"""Tests of MIDI rendering, WAV files and spectrograms (references: numpy FFT, scipy's WAV reader)."""

from __future__ import annotations

import numpy as np
import pretty_midi
import pytest
import torch
from PIL import Image
from scipy.io import wavfile

from multimodal import synthesis
from multimodal.synthesis import midi_to_waveform, power_spectrogram, read_wav, spectrogram_png, write_wav


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

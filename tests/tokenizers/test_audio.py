"""The audio spectrogram tokenizer against direct torchaudio calls and a naive patch loop."""

from __future__ import annotations

import math

import pytest
import torch
import torchaudio

from multimodal.tokenizers.audio import AudioSpectrogramTokenizer


def _tone(seconds: float = 1.0, rate: int = 16_000, hz: float = 440.0) -> torch.Tensor:
    t = torch.arange(int(seconds * rate)) / rate
    return 0.5 * torch.sin(2 * math.pi * hz * t) + 0.05 * torch.randn(len(t), generator=torch.Generator().manual_seed(0))


def test_the_spectrogram_is_torchaudios_log_mel_normalised():
    tokenizer = AudioSpectrogramTokenizer(n_mels=64, mean=-20.0, std=15.0)
    audio = _tone()
    mel = torchaudio.transforms.MelSpectrogram(16_000, n_fft=400, hop_length=160, n_mels=64)(audio)
    expected = 10 * torch.log10(mel.clamp(min=1e-10))
    expected = torch.maximum(expected, expected.max() - 80)
    torch.testing.assert_close(tokenizer.spectrogram(audio), (expected + 20) / 15, atol=1e-4, rtol=1e-4)
    assert tokenizer.frames(audio).shape == (1 + 16_000 // 160, 64)


def test_other_rates_and_stereo_are_resampled_and_mixed_down():
    tokenizer = AudioSpectrogramTokenizer(n_mels=32)
    stereo = torch.stack([_tone(rate=44_100), _tone(rate=44_100, hz=220)])
    expected = tokenizer.spectrogram(torchaudio.functional.resample(stereo.mean(0), 44_100, 16_000))
    torch.testing.assert_close(tokenizer.spectrogram(stereo, 44_100), expected)


def test_patches_are_the_overlapping_squares_of_a_naive_loop():
    tokenizer = AudioSpectrogramTokenizer(n_mels=32, patch_freq=8, patch_time=8, stride_freq=6, stride_time=5)
    audio = _tone(0.5)
    spectrogram = tokenizer.spectrogram(audio)
    rows, cols = tokenizer.patch_grid(spectrogram.shape[1])
    naive = [spectrogram[r * 6 : r * 6 + 8, c * 5 : c * 5 + 8].reshape(-1) for r in range(rows) for c in range(cols)]
    torch.testing.assert_close(tokenizer.patches(audio), torch.stack(naive))
    assert rows == (32 - 8) // 6 + 1 and cols == (spectrogram.shape[1] - 8) // 5 + 1


def test_a_clip_shorter_than_a_patch_is_padded_with_silence():
    tokenizer = AudioSpectrogramTokenizer(n_mels=16, patch_freq=16, patch_time=16)
    patches = tokenizer.patches(_tone(0.05))  # 6 frames
    assert patches.shape == (1, 256)


def test_save_and_load_round_trip_and_bad_input_is_refused(tmp_path):
    tokenizer = AudioSpectrogramTokenizer(n_mels=40, top_db=None, stride_time=10)
    tokenizer.save(tmp_path / "audio.json")
    assert AudioSpectrogramTokenizer.load(tmp_path / "audio.json") == tokenizer
    (tmp_path / "bad.json").write_text('{"type": "AudioSpectrogramTokenizer", "n_mel": 3}')
    with pytest.raises(ValueError, match="bad.json: .*n_mel"):
        AudioSpectrogramTokenizer.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="n_mels must be a whole number >= 1"):
        AudioSpectrogramTokenizer(n_mels=0)
    with pytest.raises(ValueError, match="expected a waveform"):
        tokenizer.spectrogram(torch.zeros(0))


def test_the_docs_example_reads_a_wav_at_another_rate(tmp_path):
    from multimodal.audio.synthesis import read_wav, write_wav

    write_wav(tmp_path / "phrase.wav", _tone(0.5, rate=22_050).numpy(), 22_050)
    tokenizer = AudioSpectrogramTokenizer(n_mels=128, stride_freq=10, stride_time=10)
    waveform, rate = read_wav(tmp_path / "phrase.wav")
    frames, patches = tokenizer.frames(waveform, rate), tokenizer.patches(waveform, rate)
    assert frames.shape == (1 + 8_000 // 160, 128)
    rows, cols = tokenizer.patch_grid(frames.shape[0])
    assert patches.shape == (rows * cols, 256) and rows == 12

"""Listening to MIDI: render to a waveform, write a WAV file, draw a spectrogram.

Rendering uses FluidSynth with the General MIDI SoundFont that pretty_midi ships
(``TimGM6mb.sf2``) when the ``pyfluidsynth`` module (plus Debian's ``libfluidsynth3``) is
importable, and otherwise pretty_midi's sine-wave synthesis, which needs nothing extra.

WAV files are written with the standard library's ``wave`` module as 16-bit PCM: torchaudio
>= 2.9 hands ``torchaudio.save`` to TorchCodec, which this project does not install, so the
stdlib path is the one that works everywhere. Spectrograms use ``torchaudio.transforms`` when
torchaudio imports and the identical ``torch.stft`` computation when it does not.
"""

from __future__ import annotations

import functools
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pretty_midi
import torch

from multimodal.viz import new_figure, save_figure

PEAK = 0.9  # rendered waveforms are scaled to this peak amplitude


def midi_to_waveform(midi: pretty_midi.PrettyMIDI | str | Path, sample_rate: int = 16000) -> torch.Tensor:
    """Renders MIDI to mono audio.

    Args:
        midi: A ``PrettyMIDI`` or a path to a MIDI file.
        sample_rate: Samples per second.

    Returns:
        float32 tensor ``(num_samples,)`` scaled to a peak of 0.9 (all zeros if silent; empty
        if the MIDI holds no notes).
    """
    if not isinstance(midi, pretty_midi.PrettyMIDI):
        midi = pretty_midi.PrettyMIDI(str(midi))
    if not any(instrument.notes for instrument in midi.instruments):
        return torch.zeros(0)
    if has_fluidsynth():
        audio = midi.fluidsynth(fs=sample_rate)  # pretty_midi's bundled TimGM6mb.sf2
    else:
        audio = midi.synthesize(fs=sample_rate)
    audio = np.asarray(audio, dtype=np.float32)
    peak = float(np.abs(audio).max()) if audio.size else 0.0
    if peak > 0:
        audio = audio * (PEAK / peak)
    return torch.from_numpy(audio)


@functools.cache
def has_fluidsynth() -> bool:
    """Whether FluidSynth rendering is available (``pyfluidsynth`` and its C library import)."""
    try:
        import fluidsynth  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


def write_wav(path: str | Path, waveform: Any, sample_rate: int) -> Path:
    """Writes a 16-bit PCM WAV file.

    Args:
        path: File to write (folders are created).
        waveform: Tensor or array, ``(num_samples,)`` or ``(channels, num_samples)``, values in
            [-1, 1] (clipped).
        sample_rate: Samples per second.

    Returns:
        The path written.
    """
    audio = torch.as_tensor(waveform, dtype=torch.float32).detach().cpu()
    if audio.ndim == 1:
        audio = audio[None]
    if audio.ndim != 2:
        raise ValueError(
            f"waveform must be (num_samples,) or (channels, num_samples), got {tuple(audio.shape)}"
        )
    pcm = (audio.clamp(-1.0, 1.0) * 32767.0).round().to(torch.int16).T.contiguous().numpy()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(audio.shape[0])
        handle.setsampwidth(2)
        handle.setframerate(int(sample_rate))
        handle.writeframes(pcm.astype("<i2").tobytes())
    return path


def read_wav(path: str | Path) -> tuple[torch.Tensor, int]:
    """Reads a 16-bit PCM WAV file; returns float32 ``(channels, num_samples)`` in [-1, 1] and the sample rate."""
    with wave.open(str(path), "rb") as handle:
        if handle.getsampwidth() != 2:
            raise ValueError(f"{path} has {8 * handle.getsampwidth()}-bit samples; only 16-bit PCM is read")
        channels, sample_rate = handle.getnchannels(), handle.getframerate()
        frames = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    audio = torch.from_numpy(frames.reshape(-1, channels).T.astype(np.float32) / 32767.0)
    return audio, sample_rate


def power_spectrogram(waveform: torch.Tensor, n_fft: int = 1024, hop_length: int = 256) -> torch.Tensor:
    """Power spectrogram ``|STFT|²`` with a Hann window, centred frames, reflect padding.

    Args:
        waveform: ``(num_samples,)``, longer than ``n_fft // 2``.

    Returns:
        ``(n_fft // 2 + 1, num_frames)`` with ``num_frames = num_samples // hop_length + 1``.
    """
    waveform = torch.as_tensor(waveform, dtype=torch.float32)
    transforms = _torchaudio_transforms()
    if transforms is not None:
        return transforms.Spectrogram(n_fft=n_fft, hop_length=hop_length, power=2.0)(waveform)
    window = torch.hann_window(n_fft)
    stft = torch.stft(
        waveform, n_fft, hop_length, window=window, center=True, pad_mode="reflect", return_complex=True
    )
    return stft.abs().pow(2.0)


def spectrogram_png(
    waveform: torch.Tensor, sample_rate: int, path: str | Path, n_fft: int = 1024, hop_length: int = 256
) -> Path:
    """Draws the power spectrogram in dB (80 dB range) of ``waveform`` ``(num_samples,)``; returns the path."""
    waveform = torch.as_tensor(waveform, dtype=torch.float32).reshape(-1)
    if len(waveform) <= n_fft // 2:
        raise ValueError(f"waveform of {len(waveform)} samples is too short for n_fft={n_fft}")
    power = power_spectrogram(waveform, n_fft, hop_length)
    decibels = 10.0 * torch.log10(power.clamp(min=1e-10))
    decibels = decibels.clamp(min=float(decibels.max()) - 80.0)
    figure, axes = new_figure(width=10.0, height=4.0)
    duration = len(waveform) / sample_rate
    image = axes.imshow(
        decibels.numpy(),
        origin="lower",
        aspect="auto",
        cmap="magma",
        extent=(0.0, duration, 0.0, sample_rate / 2),
    )
    figure.colorbar(image, ax=axes, label="power (dB)")
    axes.set_xlabel("time (s)")
    axes.set_ylabel("frequency (Hz)")
    return save_figure(figure, path)


@functools.cache
def _torchaudio_transforms() -> Any:
    """``torchaudio.transforms`` if torchaudio imports (its C++ library must match torch), else ``None``."""
    try:
        import torchaudio.transforms
    except (ImportError, OSError):
        return None
    return torchaudio.transforms

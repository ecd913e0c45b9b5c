"""Audio as a sequence: log-mel spectrogram frames, or time × frequency patches (the AST's input).

A waveform becomes what the shared Transformer blocks read in three steps, all torchaudio:

1. mono (channels averaged) at ``sample_rate`` (``torchaudio.functional.resample`` when the file's
   rate differs);
2. a log-mel spectrogram ``(n_mels, frames)``: ``MelSpectrogram`` (power 2, ``n_fft`` window,
   ``hop_length`` hop, ``n_mels`` bands between ``f_min`` and ``f_max``), then decibels
   (``AmplitudeToDB``: ``10 log10(max(x, 1e-10))``, floored ``top_db`` below the loudest value of
   the clip), then ``(x - mean) / std`` (the data set's statistics; AST's normalisation);
3. either **frames** ``(frames, n_mels)`` — one vector per hop, for an encoder over time
   (transcription) — or **patches** ``(num_patches, patch_freq * patch_time)``: ``patch_freq × patch_time``
   squares of the spectrogram taken every ``stride_freq`` bands and ``stride_time`` frames (AST,
   Gong et al. 2021, overlaps them: strides below the patch size), in raster order (frequency
   rows, then time within a row), each flattened frequency-major — a ViT's patch tokens.

Einops letters: ``f`` mel bands, ``t`` frames.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor

from multimodal.layers.config import check_sizes

__all__ = ["AudioSpectrogramTokenizer"]


@dataclass
class AudioSpectrogramTokenizer:
    """Waveform -> log-mel frames or patches, with every parameter in one JSON file (``save``/``load``).

    Attributes:
        sample_rate: Rate the waveform is resampled to (Hz).
        n_fft: FFT window (samples); 400 at 16 kHz is 25 ms.
        hop_length: Samples between frames; 160 at 16 kHz is 10 ms.
        n_mels: Mel bands.
        f_min, f_max: Band limits (Hz); ``f_max`` None is half the sample rate.
        top_db: Floor of the decibels below the clip's loudest value (None: no floor).
        mean, std: Normalisation of the decibels.
        patch_freq, patch_time: Patch size in bands and frames.
        stride_freq, stride_time: Patch strides; below the patch size, patches overlap.
    """

    sample_rate: int = 16_000
    n_fft: int = 400
    hop_length: int = 160
    n_mels: int = 128
    f_min: float = 0.0
    f_max: float | None = None
    top_db: float | None = 80.0
    mean: float = 0.0
    std: float = 1.0
    patch_freq: int = 16
    patch_time: int = 16
    stride_freq: int = 16
    stride_time: int = 16

    def __post_init__(self) -> None:
        check_sizes(self, positive=("sample_rate", "n_fft", "hop_length", "n_mels", "patch_freq", "patch_time",
                                    "stride_freq", "stride_time"))  # fmt: skip
        if self.patch_freq > self.n_mels:
            raise ValueError(f"patch_freq={self.patch_freq} is more than the {self.n_mels} mel bands")
        if self.std <= 0:
            raise ValueError(f"std must be > 0, got {self.std}")

    def waveform(self, audio: Tensor, sample_rate: int) -> Tensor:
        """Mono ``(samples,)`` at :attr:`sample_rate` from ``(samples,)`` or ``(channels, samples)`` at ``sample_rate``."""
        import torchaudio.functional as AF

        audio = torch.as_tensor(audio, dtype=torch.float32)
        if audio.ndim == 2:
            audio = audio.mean(0)
        if audio.ndim != 1 or audio.numel() == 0:
            raise ValueError(f"expected a waveform (samples,) or (channels, samples), got shape {tuple(audio.shape)}")
        if sample_rate != self.sample_rate:
            audio = AF.resample(audio, sample_rate, self.sample_rate)
        return audio

    def spectrogram(self, audio: Tensor, sample_rate: int | None = None) -> Tensor:
        """The normalised log-mel spectrogram ``(n_mels, frames)`` of a waveform (see the module docstring)."""
        import torchaudio.transforms as T

        audio = self.waveform(audio, self.sample_rate if sample_rate is None else sample_rate)
        mel = T.MelSpectrogram(sample_rate=self.sample_rate, n_fft=self.n_fft, hop_length=self.hop_length,
                               n_mels=self.n_mels, f_min=self.f_min, f_max=self.f_max, power=2.0)(audio)  # fmt: skip
        decibels = T.AmplitudeToDB(stype="power", top_db=self.top_db)(mel)
        return (decibels - self.mean) / self.std

    def frames(self, audio: Tensor, sample_rate: int | None = None) -> Tensor:
        """One vector per hop: ``(frames, n_mels)``."""
        return self.spectrogram(audio, sample_rate).T.contiguous()

    def patches(self, audio: Tensor, sample_rate: int | None = None) -> Tensor:
        """AST patches ``(num_patches, patch_freq * patch_time)``; a clip shorter than one patch is padded
        with the spectrogram's minimum (silence) to ``patch_time`` frames."""
        spectrogram = self.spectrogram(audio, sample_rate)
        if spectrogram.shape[1] < self.patch_time:
            fill = spectrogram.new_full((self.n_mels, self.patch_time - spectrogram.shape[1]), float(spectrogram.min()))
            spectrogram = torch.cat([spectrogram, fill], dim=1)
        grid = spectrogram.unfold(0, self.patch_freq, self.stride_freq).unfold(1, self.patch_time, self.stride_time)
        return grid.reshape(-1, self.patch_freq * self.patch_time)  # (rows cols) (f t)

    def patch_grid(self, frames: int) -> tuple[int, int]:
        """``(rows, columns)`` of the patch grid of a spectrogram with ``frames`` frames."""
        frames = max(frames, self.patch_time)
        return (self.n_mels - self.patch_freq) // self.stride_freq + 1, (frames - self.patch_time) // self.stride_time + 1

    def save(self, path: str | Path) -> None:
        """Writes the parameters as one JSON file."""
        Path(path).write_text(json.dumps({"type": "AudioSpectrogramTokenizer", **asdict(self)}, indent=2) + "\n",
                              encoding="utf-8")  # fmt: skip

    @classmethod
    def load(cls, path: str | Path) -> AudioSpectrogramTokenizer:
        """Reads a tokenizer written by :meth:`save`; unknown fields are an error."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.pop("type", None) != "AudioSpectrogramTokenizer":
            raise ValueError(f"{path}: not an AudioSpectrogramTokenizer JSON")
        try:
            return cls(**data)
        except TypeError as error:
            raise ValueError(f"{path}: {error}") from error

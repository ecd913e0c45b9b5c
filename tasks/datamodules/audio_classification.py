"""Audio classification data module: the instrument family of rendered phrases, as spectrogram images.

Wraps :mod:`multimodal.data.instrument_phrases`: real melodies (a music21 collection or your MIDI
folder) played by every program of each General MIDI family through the training SoundFonts, and
the test melodies through ``test_soundfonts`` (one the model never heard, for the real question).
Each clip is a one-channel image ``(1, n_mels, frames)``, so :class:`~tasks.image_classification.
ImageClassification` trains an Audio Spectrogram Transformer on it with the ViT as it is. The
decibels are normalised with the training clips' mean and standard deviation (as AST does);
SpecAugment's frequency and time masks (``torchaudio.transforms``) are the training augmentation.
``multimodal predict`` classifies the WAV files of ``predict_dir``, one row per ``clip_seconds``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from multimodal.audio.synthesis import BUNDLED, resolve_soundfont
from multimodal.data.instrument_phrases import (
    ALL_FAMILIES,
    DEFAULT_FAMILIES,
    PhraseSet,
    load_melodies,
    melody_windows,
    phrase_set,
)
from multimodal.data.music import MidiCorpus
from multimodal.data.resumable import ResumableLoader, SeededItems
from multimodal.tokenizers.audio import AudioSpectrogramTokenizer
from tasks.datamodules.checks import check_options

__all__ = ["InstrumentFamilyDataModule", "SpectrogramClips"]

_SPLIT_SEEDS = {"train": 0, "val": 1, "test": 2}


class InstrumentFamilyDataModule(pl.LightningDataModule):
    """``(spectrogram, family)`` batches, spectrograms ``(batch, 1, n_mels, frames)``; ``predict``: ``(spectrogram, name)``.

    Args:
        melodies: A music21 collection (``bach``: the chorales' voices; ``oneills1850``: folk tunes) or
            a folder of MIDI files; pieces split by the fixed hash rule.
        soundfonts: SoundFonts of the training and validation clips (``bundled``: pretty_midi's
            TimGM6mb; or ``.sf2``/``.sf3`` paths, e.g. from ``multimodal data soundfonts``).
        test_soundfonts: SoundFonts of the test clips; None: ``soundfonts``.
        families: General MIDI families to tell apart (pretty_midi's names); None: the 14 pitched ones.
        clip_seconds: Length of a phrase.
        clips_per_family: Training clips per family and SoundFont.
        eval_clips_per_family: Validation and test clips per family and SoundFont.
        sample_rate, n_mels, n_fft, hop_length: The spectrogram (:class:`AudioSpectrogramTokenizer`).
        freq_mask, time_mask: SpecAugment on training clips: one mask of up to this many bands /
            frames each (0: off).
        batch_size: Clips per training batch.
        eval_batch_size: Clips per validation/test/predict batch; None: ``batch_size``.
        num_workers: DataLoader worker processes.
        predict_dir: Folder of ``.wav`` files (searched recursively) for ``multimodal predict``; None:
            the test clips.
        seed: Rendering draws and the training order; the masks are a function of ``(seed, epoch, index)``.
        cache_dir: Where rendered clips are kept; None: ``cache_root()/instrument_phrases``.
    """

    def __init__(
        self,
        melodies: str = "bach",
        soundfonts: list[str] | None = None,
        test_soundfonts: list[str] | None = None,
        families: list[str] | None = None,
        clip_seconds: float = 2.0,
        clips_per_family: int = 192,
        eval_clips_per_family: int = 32,
        sample_rate: int = 16_000,
        n_mels: int = 64,
        n_fft: int = 400,
        hop_length: int = 160,
        freq_mask: int = 0,
        time_mask: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        predict_dir: str | None = None,
        seed: int = 0,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        check_options({"clips_per_family": 1, "eval_clips_per_family": 1, "freq_mask": 0, "time_mask": 0,
                       "batch_size": 1, "eval_batch_size": 1, "num_workers": 0},
                      clips_per_family=clips_per_family, eval_clips_per_family=eval_clips_per_family,
                      freq_mask=freq_mask, time_mask=time_mask, batch_size=batch_size,
                      eval_batch_size=eval_batch_size, num_workers=num_workers)  # fmt: skip
        if clip_seconds <= 0:
            raise ValueError(f"clip_seconds={clip_seconds}: must be > 0")
        self.families = tuple(families) if families else DEFAULT_FAMILIES
        unknown = [name for name in self.families if name not in ALL_FAMILIES]
        if unknown or len(set(self.families)) < 2 or len(set(self.families)) != len(self.families):
            raise ValueError(f"families={list(self.families)}: two or more distinct names of "
                             f"{list(ALL_FAMILIES)}")  # fmt: skip
        self.soundfonts = [resolve_soundfont(name) for name in (soundfonts or [BUNDLED])]
        self.test_soundfonts = [resolve_soundfont(name) for name in test_soundfonts] if test_soundfonts else self.soundfonts
        self.tokenizer = AudioSpectrogramTokenizer(sample_rate=sample_rate, n_fft=n_fft, hop_length=hop_length,
                                                   n_mels=n_mels)  # fmt: skip
        self.melodies, self.clip_seconds = melodies, float(clip_seconds)
        self.clips = {"train": clips_per_family, "val": eval_clips_per_family, "test": eval_clips_per_family}
        self.freq_mask, self.time_mask = freq_mask, time_mask
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers, self.predict_dir, self.seed, self.cache_dir = num_workers, predict_dir, seed, cache_dir
        self._corpus: MidiCorpus | None = None
        self._splits: dict[str, SpectrogramClips] = {}
        self._statistics: tuple[float, float] | None = None

    # ----------------------------------------------------------------------------------------------
    # Sizes linked into the task
    # ----------------------------------------------------------------------------------------------

    @property
    def class_names(self) -> list[str]:
        """The families, one per label id."""
        return list(self.families)

    @property
    def num_classes(self) -> int:
        """Number of families."""
        return len(self.families)

    @property
    def channels(self) -> int:
        """One: a spectrogram is a one-channel image."""
        return 1

    @property
    def image_size(self) -> tuple[int, int]:
        """``(n_mels, frames)`` of a clip."""
        samples = round(self.clip_seconds * self.tokenizer.sample_rate)
        return self.tokenizer.n_mels, samples // self.tokenizer.hop_length

    # ----------------------------------------------------------------------------------------------
    # Data sets and loaders
    # ----------------------------------------------------------------------------------------------

    def phrases(self, split: Literal["train", "val", "test"]) -> PhraseSet:
        """The rendered clips of a split, every SoundFont of it concatenated (not normalised)."""
        if self._corpus is None:
            self._corpus = load_melodies(self.melodies)
        windows = melody_windows(self._corpus.split(split), self.clip_seconds)
        if not windows:
            raise ValueError(f"melodies={self.melodies}: the {split} pieces hold no phrase of two notes or more")
        fonts = self.test_soundfonts if split == "test" else self.soundfonts
        sets = [
            phrase_set(windows, font, self.families, self.clips[split], self.tokenizer, self.clip_seconds,
                       seed=self.seed * 1000 + _SPLIT_SEEDS[split] * 100 + index, cache_dir=self.cache_dir)
            for index, font in enumerate(fonts)
        ]  # fmt: skip
        columns = zip(*((s.spectrograms, s.labels, s.programs) for s in sets), strict=True)
        return PhraseSet(*(torch.cat(column) for column in columns))

    @property
    def statistics(self) -> tuple[float, float]:
        """Mean and standard deviation of the training clips' decibels (the normalisation of every split)."""
        if self._statistics is None:
            spectrograms = self.split("train").spectrograms if "train" in self._splits else self.phrases("train").spectrograms
            values = spectrograms.float()
            self._statistics = float(values.mean()), float(values.std())
        return self._statistics

    def split(self, name: Literal["train", "val", "test"]) -> SpectrogramClips:
        """The ``train``, ``val`` or ``test`` clips, normalised, masked when training (built once)."""
        if name not in self._splits:
            phrases = self.phrases(name)
            masks = (self.freq_mask, self.time_mask) if name == "train" else (0, 0)
            self._splits[name] = SpectrogramClips(phrases.spectrograms, phrases.labels, *masks)
            self._splits[name].normalise(*self.statistics)
        return self._splits[name]

    def predict_dataset(self) -> Dataset:
        """``(spectrogram, name)`` items: clips of the WAV files of ``predict_dir``, or the test clips by index."""
        if self.predict_dir is None:
            return _NamedClips(self.split("test"))
        return PredictionClips(self.predict_dir, self.tokenizer, self.clip_seconds, self.statistics)

    def setup(self, stage: str | None = None) -> None:
        needed = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}.get(stage or "", ())
        for name in needed:
            self.split(name)

    def train_dataloader(self) -> DataLoader:
        return ResumableLoader(SeededItems(self.split("train"), self.seed), batch_size=self.batch_size, shuffle=True,
                               seed=self.seed, num_workers=self.num_workers)  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.split("val"))

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.split("test"))

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_dataset())

    def _loader(self, data: Dataset, **kwargs: Any) -> DataLoader:
        return DataLoader(data, batch_size=self.eval_batch_size, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0, **kwargs)  # fmt: skip


class SpectrogramClips(Dataset):
    """``(spectrogram (1, n_mels, frames) float32, label)`` items, with optional SpecAugment masks.

    Args:
        spectrograms: ``(clips, n_mels, frames)``, any float dtype.
        labels: ``(clips,)`` int64.
        freq_mask, time_mask: Widest frequency / time mask (torchaudio's ``FrequencyMasking`` /
            ``TimeMasking``, filled with the clip's mean); 0: none.
    """

    def __init__(self, spectrograms: torch.Tensor, labels: torch.Tensor, freq_mask: int = 0, time_mask: int = 0) -> None:
        self.spectrograms, self.labels = spectrograms, labels
        self.mean, self.std = 0.0, 1.0
        self.freq_mask, self.time_mask = freq_mask, time_mask

    def normalise(self, mean: float, std: float) -> None:
        """Items become ``(decibels - mean) / std``."""
        self.mean, self.std = mean, std

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        clip = ((self.spectrograms[index].float() - self.mean) / self.std)[None]
        if self.freq_mask or self.time_mask:
            import torchaudio.transforms as T

            if self.freq_mask:
                clip = T.FrequencyMasking(self.freq_mask)(clip, mask_value=0.0)
            if self.time_mask:
                clip = T.TimeMasking(self.time_mask)(clip, mask_value=0.0)
        return clip, self.labels[index]


class PredictionClips(Dataset):
    """Every ``.wav`` file under a folder (recursively, sorted), cut into ``clip_seconds`` clips: ``(clip, "file@start")``.

    A file's last clip is padded with silence; a file that cannot be read is left out with a warning
    naming it.

    Args:
        folder: Where the files are.
        tokenizer: The spectrogram of the training clips.
        clip_seconds: Clip length.
        statistics: The training clips' mean and standard deviation.
    """

    def __init__(self, folder: str | Path, tokenizer: AudioSpectrogramTokenizer, clip_seconds: float,
                 statistics: tuple[float, float]) -> None:  # fmt: skip
        from multimodal.audio.synthesis import read_wav

        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"predict_dir {folder} is not a folder of WAV files")
        samples = round(clip_seconds * tokenizer.sample_rate)
        frames = samples // tokenizer.hop_length
        self.items: list[tuple[torch.Tensor, str]] = []
        for path in sorted(p for p in folder.rglob("*") if p.suffix.lower() == ".wav" and p.is_file()):
            try:
                waveform = tokenizer.waveform(*read_wav(path))
            except Exception as error:  # OSError, wave.Error, EOFError, ValueError (not 16-bit PCM, empty)
                warnings.warn(f"skipping unreadable audio file {path}: {error}", stacklevel=2)
                continue
            for start in range(0, len(waveform), samples):
                piece = torch.nn.functional.pad(waveform[start : start + samples], (0, max(0, samples - len(waveform) + start)))
                spectrogram = tokenizer.spectrogram(piece)[:, :frames]
                self.items.append((((spectrogram - statistics[0]) / statistics[1])[None], f"{path}@{start / tokenizer.sample_rate:g}s"))
        if not self.items:
            raise FileNotFoundError(f"no readable .wav file under {folder}")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str]:
        return self.items[index]


class _NamedClips(Dataset):
    """The test clips as ``(clip, "test/<index>")``."""

    def __init__(self, clips: SpectrogramClips) -> None:
        self.clips = clips

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str]:
        return self.clips[index][0], f"test/{index}"

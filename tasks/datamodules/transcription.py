"""Transcription data: ``(spectrogram segment, note-event ids)`` batches from pieces rendered through SoundFonts."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from multimodal.audio.synthesis import BUNDLED, resolve_soundfont
from multimodal.data.instrument_phrases import load_melodies
from multimodal.data.music import MidiCorpus
from multimodal.data.resumable import ResumableLoader, SeededItems
from multimodal.data.transcription import (
    NO_AUGMENTATION,
    AudioAugmentation,
    rendered_pieces,
    segment_frames,
    segment_notes,
    segment_starts,
)
from multimodal.tokenizers.audio import AudioSpectrogramTokenizer
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig
from multimodal.tokenizers.transcription import TranscriptionTokenizer
from tasks.datamodules.checks import check_options

__all__ = ["TranscriptionDataModule", "TranscriptionSegments"]

#: Keyboard programs of General MIDI: acoustic grand, bright, electric grand, electric piano 1, harpsichord.
KEYBOARDS = [0, 1, 2, 4, 6]
_SPLIT_SEEDS = {"train": 0, "val": 1, "test": 2}


class TranscriptionDataModule(pl.LightningDataModule):
    """Batches ``(spectrograms (batch, n_mels, frames), ids (batch, seq))``; ids are BOS, the segment's notes, EOS, PAD.

    Args:
        pieces: A music21 collection (``bach``: the chorales, every part merged into one) or a folder
            of MIDI files; split by the pieces' fixed hash rule.
        soundfonts: SoundFonts of the training and validation audio (``bundled``: pretty_midi's TimGM6mb;
            or ``.sf2``/``.sf3`` paths, e.g. from ``multimodal data soundfonts``); every piece is
            rendered once through each.
        test_soundfonts: SoundFonts of the test audio; None: ``soundfonts``.
        programs: General MIDI programs a piece is played by (one drawn per piece and SoundFont).
        test_programs: Programs of the test audio; None: ``programs``.
        augment: Reverb, noise and a random level on the training audio (:class:`AudioAugmentation`).
        tempo_range: With ``augment``, each training rendering plays its piece at a tempo factor drawn
            log-uniformly from ``[low, high]`` (its notes retimed with it); None: the pieces' own tempi.
        segment_seconds, lookahead_seconds: A segment writes the notes that start in
            ``segment_seconds`` and hears ``lookahead_seconds`` more.
        max_tokens: Most ids a segment writes (BOS and EOS not counted); longer segments are cut.
        sample_rate, n_mels, n_fft, hop_length, f_min: The spectrogram.
        time_step: Seconds per time step of the note events (onsets and durations are rounded to it).
        max_pieces: Use only the first this many pieces of each split (quick runs); None: all.
        batch_size: Segments per training batch.
        eval_batch_size: Segments per validation / test batch; None: ``batch_size``.
        num_workers: DataLoader worker processes.
        seed: Rendering draws and the training order.
        cache_dir: Where rendered pieces are kept; None: ``cache_root()/transcription``.
    """

    def __init__(
        self,
        pieces: str = "bach",
        soundfonts: list[str] | None = None,
        test_soundfonts: list[str] | None = None,
        programs: list[int] | None = None,
        test_programs: list[int] | None = None,
        augment: bool = True,
        tempo_range: list[float] | None = None,
        segment_seconds: float = 2.0,
        lookahead_seconds: float = 1.0,
        max_tokens: int = 384,
        sample_rate: int = 16_000,
        n_mels: int = 128,
        n_fft: int = 2048,
        hop_length: int = 160,
        f_min: float = 30.0,
        time_step: float = 0.01,
        max_pieces: int | None = None,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        check_options({"max_tokens": 1, "max_pieces": 1, "batch_size": 1, "eval_batch_size": 1, "num_workers": 0},
                      max_tokens=max_tokens, max_pieces=max_pieces, batch_size=batch_size,
                      eval_batch_size=eval_batch_size, num_workers=num_workers)  # fmt: skip
        for name, values in (("programs", programs), ("test_programs", test_programs)):
            if values is not None and (not values or any(not 0 <= int(p) <= 127 for p in values)):
                raise ValueError(f"{name}={values}: one or more General MIDI programs, 0..127")
        self.soundfonts = [resolve_soundfont(name) for name in (soundfonts or [BUNDLED])]
        self.test_soundfonts = [resolve_soundfont(name) for name in test_soundfonts] if test_soundfonts else self.soundfonts
        self.programs = [int(p) for p in (programs or KEYBOARDS)]
        self.test_programs = [int(p) for p in test_programs] if test_programs else self.programs
        audio = AudioSpectrogramTokenizer(sample_rate=sample_rate, n_fft=n_fft, hop_length=hop_length, n_mels=n_mels,
                                          f_min=f_min)  # fmt: skip
        midi = MidiDurationTokenizer(MidiDurationTokenizerConfig(time_step=time_step, num_velocity_bins=1))
        self.tokenizer = TranscriptionTokenizer(audio, midi, segment_seconds, lookahead_seconds, max_tokens)
        self.pieces, self.augment, self.max_pieces = pieces, augment, max_pieces
        tempo = {"tempo_range": tuple(float(t) for t in tempo_range)} if tempo_range is not None else {}
        self.train_augmentation = AudioAugmentation(**tempo) if augment else NO_AUGMENTATION
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers, self.seed, self.cache_dir = num_workers, seed, cache_dir
        self._corpus: MidiCorpus | None = None
        self._splits: dict[str, TranscriptionSegments] = {}

    @property
    def vocab_size(self) -> int:
        """Ids of the note-event vocabulary (linked into the model)."""
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        """The padding id (linked into the task)."""
        return self.tokenizer.pad_id

    @property
    def n_mels(self) -> int:
        """Mel bands (linked into the model)."""
        return self.tokenizer.audio.n_mels

    def split_pieces(self, split: Literal["train", "val", "test"]) -> tuple[list[str], list[np.ndarray]]:
        """Names and notes ``(n, 4)`` (parts merged) of a split's pieces."""
        if self._corpus is None:
            self._corpus = load_melodies(self.pieces)
        corpus = self._corpus.split(split)
        names, notes = corpus.names[: self.max_pieces], [n[:, :4] for n in corpus.notes[: self.max_pieces]]
        if not names:
            raise ValueError(f"pieces={self.pieces}: the {split} split holds no piece")
        return names, notes

    def split(self, name: Literal["train", "val", "test"]) -> TranscriptionSegments:
        """The segments of a split, every SoundFont of it; normalised by the training audio's statistics (built once)."""
        if name not in self._splits:
            if name != "train":
                self.split("train")  # its statistics normalise every split
            _, notes = self.split_pieces(name)
            fonts = self.test_soundfonts if name == "test" else self.soundfonts
            programs = self.test_programs if name == "test" else self.programs
            augmentation = self.train_augmentation if name == "train" else NO_AUGMENTATION
            spectrograms, pieces = [], []
            for index, font in enumerate(fonts):
                rendered = rendered_pieces(notes, font, programs, self.tokenizer.audio,
                                           seed=self.seed * 1000 + _SPLIT_SEEDS[name] * 100 + index,
                                           augmentation=augmentation, cache_dir=self.cache_dir)  # fmt: skip
                spectrograms += rendered.spectrograms
                pieces += rendered.notes
            if name == "train":
                values = torch.cat([s.flatten().float() for s in spectrograms])
                self.tokenizer.audio.mean, self.tokenizer.audio.std = float(values.mean()), float(values.std())
            self._splits[name] = TranscriptionSegments(spectrograms, pieces, self.tokenizer)
        return self._splits[name]

    def setup(self, stage: str | None = None) -> None:
        needed = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}.get(stage or "", ())
        for name in needed:
            self.split(name)

    def train_dataloader(self) -> DataLoader:
        return ResumableLoader(SeededItems(self.split("train"), self.seed), batch_size=self.batch_size, shuffle=True,
                               seed=self.seed, num_workers=self.num_workers, collate_fn=self.collate)  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.split("val"))

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.split("test"))

    def collate(self, items: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Stacks the spectrograms and pads the id rows to the longest with PAD."""
        longest = max(len(ids) for _, ids in items)
        ids = torch.full((len(items), longest), self.pad_id, dtype=torch.long)
        for row, (_, item_ids) in enumerate(items):
            ids[row, : len(item_ids)] = item_ids
        return torch.stack([spectrogram for spectrogram, _ in items]), ids

    def _loader(self, data: Dataset) -> DataLoader:
        return DataLoader(data, batch_size=self.eval_batch_size, num_workers=self.num_workers, collate_fn=self.collate,
                          persistent_workers=self.num_workers > 0)  # fmt: skip


class TranscriptionSegments(Dataset):
    """Every segment of every rendered piece: ``(spectrogram (n_mels, frames) float32 normalised, ids (seq,))``.

    Args:
        spectrograms: Per rendering, float16 ``(n_mels, frames)`` decibels (not normalised).
        pieces: Per rendering, its notes ``(n, 4)``.
        tokenizer: Segmenting, normalisation (read at item time) and note events.
    """

    def __init__(self, spectrograms: list[torch.Tensor], pieces: list[np.ndarray], tokenizer: TranscriptionTokenizer) -> None:
        self.spectrograms, self.pieces, self.tokenizer = spectrograms, pieces, tokenizer
        fps = tokenizer.frames_per_second
        self.index = [(piece, start) for piece, spectrogram in enumerate(spectrograms)
                      for start in segment_starts(spectrogram.shape[1] / fps, tokenizer.segment_seconds)]  # fmt: skip

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        piece, start = self.index[index]
        tokenizer = self.tokenizer
        audio = segment_frames(self.spectrograms[piece], start, tokenizer.window_seconds, tokenizer.frames_per_second)
        audio = (audio.float() - tokenizer.audio.mean) / tokenizer.audio.std
        events = tokenizer.midi.encode_notes_array(segment_notes(self.pieces[piece], start, tokenizer.segment_seconds))
        ids = [tokenizer.bos_id, *events[: tokenizer.max_tokens].tolist(), tokenizer.eos_id]
        return audio, torch.tensor(ids, dtype=torch.long)

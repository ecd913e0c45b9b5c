"""Music data module: MIDI performance-event windows for the music continuation task."""

from __future__ import annotations

from typing import Literal

import pytorch_lightning as pl
from torch.utils.data import DataLoader

from multimodal.data.music import (
    MidiAugmentation,
    MidiCorpus,
    MidiPieceWindows,
    MidiWindowDataset,
    load_bach_chorales,
    load_midi_folder,
)
from multimodal.tokenizers.midi import MidiTokenizer, MidiTokenizerConfig
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig

VOCABULARIES = {
    "performance": (MidiTokenizer, MidiTokenizerConfig),
    "duration": (MidiDurationTokenizer, MidiDurationTokenizerConfig),
}


class MusicDataModule(pl.LightningDataModule):
    """MIDI events: the Bach chorales bundled with music21, or your own MIDI folder.

    Training items are random ``seq_len + 1`` windows of augmented pieces; validation covers
    every token of every held-out piece once (see :mod:`multimodal.data.music` for the split).

    Args:
        midi_dir: A folder of ``.mid``/``.midi`` files (searched recursively); None for the chorales.
        limit: Use only the first ``limit`` chorales (quick runs); ignored with ``midi_dir``.
        seq_len: Model positions per window.
        batch_size: Windows per batch.
        epoch_length: Training windows per epoch.
        validation_percent: Share of pieces held out for validation (by a fixed hash of the piece name).
        test_percent: Share of pieces held out for ``multimodal test`` (the next hash buckets).
        max_transpose: Random transposition in semitones for training (0 turns it off).
        stretch_range: Random time-stretch factor range for training ([1, 1] turns it off).
        vocabulary: ``"performance"``: NOTE_ON / NOTE_OFF / TIME_SHIFT / VELOCITY events
            (:class:`~multimodal.tokenizers.midi.MidiTokenizer`, the Music Transformer's);
            ``"duration"``: TIME_SHIFT / VELOCITY / PITCH / DURATION, each note carrying its length
            (:class:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer`).
        time_step: Tokenizer resolution in seconds.
        num_time_shifts: TIME_SHIFT events (longest shift = ``num_time_shifts * time_step``).
        num_velocity_bins: VELOCITY events.
        num_workers: DataLoader worker processes.
    """

    def __init__(
        self,
        midi_dir: str | None = None,
        limit: int | None = None,
        seq_len: int = 512,
        batch_size: int = 16,
        epoch_length: int = 2048,
        validation_percent: int = 10,
        test_percent: int = 10,
        max_transpose: int = 3,
        stretch_range: tuple[float, float] = (0.95, 1.05),
        vocabulary: Literal["performance", "duration"] = "performance",
        time_step: float = 0.01,
        num_time_shifts: int = 100,
        num_velocity_bins: int = 32,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()  # kept in checkpoints: `multimodal sample-stats` finds the held-out pieces
        self.midi_dir, self.limit, self.seq_len, self.batch_size = midi_dir, limit, seq_len, batch_size
        self.epoch_length, self.validation_percent, self.num_workers = epoch_length, validation_percent, num_workers
        self.test_percent = test_percent
        self.augmentation = MidiAugmentation(max_transpose, tuple(stretch_range))
        if vocabulary not in VOCABULARIES:
            raise ValueError(f"vocabulary must be one of {sorted(VOCABULARIES)}, got {vocabulary!r}")
        tokenizer_class, config_class = VOCABULARIES[vocabulary]
        self.tokenizer = tokenizer_class(config_class(time_step, num_time_shifts, num_velocity_bins))
        self.corpus: MidiCorpus | None = None

    @property
    def vocab_size(self) -> int:
        """Number of token ids of the tokenizer (events + PAD/BOS/EOS)."""
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        """Padding id, ignored by the loss."""
        return self.tokenizer.pad_id

    def prepare_data(self) -> None:
        """Converts and caches the chorales once (about 80 s on 2 cores the first time)."""
        if self.midi_dir is None:
            load_bach_chorales(limit=self.limit)

    def setup(self, stage: str | None = None) -> None:
        if self.corpus is None:
            self.corpus = load_midi_folder(self.midi_dir) if self.midi_dir else load_bach_chorales(limit=self.limit)

    def split(self, name: str) -> MidiCorpus:
        """The ``"train"``, ``"validation"`` or ``"test"`` pieces."""
        self.setup()
        return self.corpus.split(name, self.validation_percent, self.test_percent)

    def train_dataloader(self) -> DataLoader:
        data = MidiWindowDataset(self.split("train"), self.tokenizer, self.seq_len, self.epoch_length,
                                 self.augmentation)  # fmt: skip
        return DataLoader(data, batch_size=self.batch_size, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        data = MidiPieceWindows(self.split("validation"), self.tokenizer, self.seq_len)
        return DataLoader(data, batch_size=self.batch_size, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader:
        data = MidiPieceWindows(self.split("test"), self.tokenizer, self.seq_len)
        return DataLoader(data, batch_size=self.batch_size, num_workers=self.num_workers)

    def evaluation_totals(self, split: str = "validation") -> dict[str, float]:
        """Targets, notes and seconds of music of the ``"validation"`` or ``"test"`` pieces."""
        data = MidiPieceWindows(self.split(split), self.tokenizer, self.seq_len)
        return {"targets": data.num_targets, "notes": data.num_notes, "seconds": data.seconds}

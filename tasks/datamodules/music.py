"""Music data module: MIDI performance-event windows for the music continuation task."""

from __future__ import annotations

import warnings
from typing import Literal

import pytorch_lightning as pl
from torch.utils.data import DataLoader

from multimodal.data.anticipation import GivenNotesDraw
from multimodal.data.midi_cache import MidiCache, ingest_midi
from multimodal.data.music import (
    MidiAugmentation,
    MidiCorpus,
    MidiPieceWindows,
    MidiWindowDataset,
    check_shares,
    load_bach_chorales,
)
from multimodal.data.music21_collections import check_collections
from multimodal.data.music21_corpus import convert_collections, load_music21_corpus
from multimodal.data.resumable import ResumableLoader
from multimodal.tokenizers.midi import MidiTokenizer, MidiTokenizerConfig
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig
from multimodal.tokenizers.music_controls import DEFAULT_DROPOUT
from tasks.datamodules.checks import check_options, check_percents
from tasks.datamodules.sampling import evaluation_sampler

VOCABULARIES = {
    "performance": (MidiTokenizer, MidiTokenizerConfig),
    "duration": (MidiDurationTokenizer, MidiDurationTokenizerConfig),
}


class MusicDataModule(pl.LightningDataModule):
    """MIDI events: the Bach chorales bundled with music21, other music21 collections, or your own MIDI folder.

    Training items are random ``seq_len + 1`` windows of augmented pieces; validation covers
    every token of every held-out piece once (see :mod:`multimodal.data.music` for the split).

    Args:
        midi_dir: A folder of ``.mid``/``.midi`` files (searched recursively), parsed once into a
            memory-mapped note cache (:mod:`multimodal.data.midi_cache`; later runs parse only new or
            changed files); None for the chorales.
        collections: Collections of music21's corpus (:mod:`multimodal.data.music21_corpus`, e.g.
            ``[oneills1850, ryansMammoth]``), converted once into a note cache, each piece's parts
            kept; None for the chorales. Opt-in collections warn with their licence. Not with ``midi_dir``.
        limit: Use only the first ``limit`` chorales (or pieces of ``collections``, by name; quick
            runs); ignored with ``midi_dir``.
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
        max_duration_steps: ``vocabulary="duration"``: the longest note in steps (longer ones are cut).
        num_parts: ``vocabulary="duration"`` with ``collections``: notes keep their part (voice or
            instrument, top to bottom as the score lists them) in the tokens, ``PITCH`` ids naming
            part and pitch (:mod:`~multimodal.tokenizers.midi_duration`); pieces with more parts are
            left out. 1: parts merged into one.
        part_names: Track names of the parts in written MIDI files (default ``Part 1``, ...).
        part_programs: General MIDI programs of the parts in written files (default 0, piano).
        controls: ``vocabulary="duration"`` with ``collections``: every sequence opens with STYLE, KEY,
            METER and DENSITY tokens (:mod:`~multimodal.tokenizers.music_controls`), so generation
            can be directed (``--style``, ``--key``, ...).
        control_dropout: Chance that a training window hides each control (writes it as unknown), so
            the model also samples with any of them left out.
        collection_shares: Share of the training windows per collection (e.g. ``{bach: 0.4}``; with
            ``midi_dir``, per subfolder); the others share the rest by their notes. None: each note
            equally likely.
        anticipation_seconds: ``vocabulary="duration"``: how far ahead of its onset a given note is
            written (``AHEAD`` ids, :meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_anticipated`);
            0: the vocabulary has no given notes.
        given_notes: Shares of the training windows that get given notes or lose parts, the fields of
            :class:`~multimodal.data.anticipation.GivenNotesDraw` (e.g. ``{given_share: 0.5}``); needs
            ``anticipation_seconds``. None: every window plain.
        infill_after_seconds: ``vocabulary="duration"``: how much of the music after a gap is written
            before the gap's notes (``GAP AFTER MIDDLE`` ids,
            :meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_infilling`; windows of
            ``given_notes.infill_share``), and how far ahead given notes are read in blocks (windows of
            ``given_notes.read_ahead_share``, :meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.encode_read_ahead`).
            0: the vocabulary has no such ids.
        num_workers: DataLoader worker processes.
        seed: Training windows are a function of ``(seed, epoch, index)`` (each process of a
            distributed run its own, a resumed run the same as an uninterrupted one).
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
        max_duration_steps: int = 800,
        num_workers: int = 0,
        seed: int = 0,
        collections: list[str] | None = None,
        num_parts: int = 1,
        part_names: list[str] | None = None,
        part_programs: list[int] | None = None,
        controls: bool = False,
        control_dropout: float = DEFAULT_DROPOUT,
        collection_shares: dict[str, float] | None = None,
        anticipation_seconds: float = 0.0,
        given_notes: dict[str, float | list[float]] | None = None,
        infill_after_seconds: float = 0.0,
    ) -> None:
        super().__init__()
        check_options({"seq_len": 1, "batch_size": 1, "epoch_length": 1, "limit": 1, "num_workers": 0,
                       "max_transpose": 0, "num_time_shifts": 1, "num_velocity_bins": 1, "max_duration_steps": 1},
                      seq_len=seq_len, batch_size=batch_size, epoch_length=epoch_length, limit=limit,
                      num_workers=num_workers, max_transpose=max_transpose, num_time_shifts=num_time_shifts,
                      num_velocity_bins=num_velocity_bins, max_duration_steps=max_duration_steps)  # fmt: skip
        check_percents(validation_percent=validation_percent, test_percent=test_percent)
        if not 0 < stretch_range[0] <= stretch_range[1]:
            raise ValueError(f"stretch_range={list(stretch_range)}: must be [low, high] with 0 < low <= high")
        if collections is not None:
            if midi_dir is not None:
                raise ValueError("give midi_dir or collections, not both")
            collections = check_collections(list(collections), warn=False)
        if num_parts != 1 and (vocabulary != "duration" or collections is None):
            raise ValueError(f"num_parts={num_parts}: parts need vocabulary: duration and music21 collections "
                             "(e.g. collections: [bach]); a MIDI folder's cache keeps its tracks merged")  # fmt: skip
        if controls and (vocabulary != "duration" or collections is None):
            raise ValueError("controls: true needs vocabulary: duration and music21 collections (their pieces say "
                             "style, key and meter)")  # fmt: skip
        if collection_shares is not None:
            check_shares(dict(collection_shares))  # the names are checked against the pieces at set-up
        if not 0 <= control_dropout <= 1:
            raise ValueError(f"control_dropout={control_dropout} must lie in [0, 1]")
        if anticipation_seconds < 0 or (anticipation_seconds and vocabulary != "duration"):
            raise ValueError(f"anticipation_seconds={anticipation_seconds}: given notes need vocabulary: duration "
                             "and a look-ahead of 0 (none) or more seconds")  # fmt: skip
        if given_notes is not None and not anticipation_seconds:
            raise ValueError("given_notes needs anticipation_seconds > 0: how far ahead a given note is written")
        if infill_after_seconds < 0 or (infill_after_seconds and vocabulary != "duration"):
            raise ValueError(f"infill_after_seconds={infill_after_seconds}: infilling needs vocabulary: duration "
                             "and 0 (none) or more seconds")  # fmt: skip
        self.given_notes = None if given_notes is None else GivenNotesDraw(**dict(given_notes))
        blocks = self.given_notes is not None and (self.given_notes.infill_share or self.given_notes.read_ahead_share)
        if blocks and not infill_after_seconds:
            raise ValueError("given_notes.infill_share and read_ahead_share need infill_after_seconds > 0: how much "
                             "music a GAP AFTER MIDDLE block holds")  # fmt: skip
        self.save_hyperparameters()  # kept in checkpoints: `multimodal sample-stats` finds the held-out pieces
        self.midi_dir, self.limit, self.seq_len, self.batch_size = midi_dir, limit, seq_len, batch_size
        self.epoch_length, self.validation_percent, self.num_workers = epoch_length, validation_percent, num_workers
        self.test_percent, self.seed, self.collections, self.num_parts = test_percent, seed, collections, num_parts
        self.control_dropout, self.collection_shares = control_dropout, collection_shares
        self.augmentation = MidiAugmentation(max_transpose, tuple(stretch_range))
        if vocabulary not in VOCABULARIES:
            raise ValueError(f"vocabulary must be one of {sorted(VOCABULARIES)}, got {vocabulary!r}")
        tokenizer_class, config_class = VOCABULARIES[vocabulary]
        extra = {"max_duration_steps": max_duration_steps, "num_parts": num_parts, "part_names": part_names or (),
                 "part_programs": part_programs or (), "controls": controls,
                 "anticipation_steps": round(anticipation_seconds / time_step),
                 "infill_after_steps": round(infill_after_seconds / time_step)} if vocabulary == "duration" else {}  # fmt: skip
        self.tokenizer = tokenizer_class(config_class(time_step, num_time_shifts, num_velocity_bins, **extra))
        self.corpus: MidiCorpus | None = None
        self._totals: dict[str, dict[str, float]] = {}

    @property
    def vocab_size(self) -> int:
        """Number of token ids of the tokenizer (events + PAD/BOS/EOS)."""
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        """Padding id, ignored by the loss."""
        return self.tokenizer.pad_id

    def prepare_data(self) -> None:
        """Converts and caches the chorales, or ingests ``midi_dir``, once (one process of a distributed run)."""
        if self.collections is not None:
            convert_collections(self.collections, progress=False)
        elif self.midi_dir is None:
            load_bach_chorales(limit=self.limit)
        else:
            ingest_midi(self.midi_dir, progress=False)

    def setup(self, stage: str | None = None) -> None:
        if self.corpus is None and self.collections is not None:
            self.corpus = load_music21_corpus(self.collections, limit=self.limit, num_parts=self.num_parts)
        if self.corpus is None:
            self.corpus = midi_folder_corpus(self.midi_dir) if self.midi_dir else load_bach_chorales(limit=self.limit)

    def split(self, name: str) -> MidiCorpus:
        """The ``"train"``, ``"val"`` or ``"test"`` pieces."""
        self.setup()
        return self.corpus.split(name, self.validation_percent, self.test_percent)

    def train_dataloader(self) -> DataLoader:
        data = MidiWindowDataset(self.split("train"), self.tokenizer, self.seq_len, self.epoch_length,
                                 self.augmentation, seed=self.seed, control_dropout=self.control_dropout,
                                 collection_shares=self.collection_shares, given_notes=self.given_notes)  # fmt: skip
        return ResumableLoader(data, batch_size=self.batch_size, seed=self.seed, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._evaluation_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._evaluation_loader("test")

    def _evaluation_loader(self, split: str) -> DataLoader:
        data = MidiPieceWindows(self.split(split), self.tokenizer, self.seq_len)
        return DataLoader(data, batch_size=self.batch_size, num_workers=self.num_workers,
                          sampler=evaluation_sampler(data))  # fmt: skip

    def evaluation_totals(self, split: str = "val") -> dict[str, float]:
        """Targets, notes and seconds of music of the ``"val"`` or ``"test"`` pieces (counted once)."""
        if split not in self._totals:
            data = MidiPieceWindows(self.split(split), self.tokenizer, self.seq_len)
            self._totals[split] = {"targets": data.num_targets, "notes": data.num_notes, "seconds": data.seconds}
        return self._totals[split]


def midi_folder_corpus(folder: str) -> MidiCorpus:
    """A folder's pieces through the ingested note cache (parsed once; only new files after that).

    Files the cache skipped (unreadable, no notes, failing the readers' checks) are named in a
    warning on every run, not only the one that parsed them.
    """
    report = ingest_midi(folder, progress=False)
    if report.skipped:
        named = "; ".join(f"{name}: {reason}" for name, reason in list(report.skipped.items())[:5])
        more = f"; ... (all in {report.cache / 'manifest.json'})" if len(report.skipped) > 5 else ""
        warnings.warn(f"{folder}: {len(report.skipped)} of {report.files} MIDI files skipped ({named}{more})",
                      stacklevel=2)  # fmt: skip
    corpus = MidiCache(report.cache).corpus()
    if not corpus.names:
        raise FileNotFoundError(f"{folder}: no usable MIDI file ({len(report.skipped)} skipped, {report.files} found)")
    return corpus

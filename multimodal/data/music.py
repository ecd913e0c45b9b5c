"""Music data: the Bach chorales of music21 or a folder of MIDI files, as torch data sets.

A corpus is loaded once as note arrays (:class:`MidiCorpus`): one float array
``(num_notes, 4)`` = ``[pitch, start_s, end_s, velocity]`` per piece, read by
:func:`~multimodal.tokenizers.midi_files.read_midi_notes`. The data sets augment those arrays and
encode them on the fly with :meth:`MidiTokenizer.encode_notes` (about 0.25 ms a chorale).

Train / validation / test split — by piece, never by window: the first 8 bytes of the SHA-1 of
a piece's name, read as a big-endian integer, modulo 100 give its bucket; buckets below
``validation_percent`` (default 10) are validation, the next ``test_percent`` (default 10) test,
the rest train. Choices (recipes, sizes) are made on validation; test is for the final report. The name of a chorale is its music21 file name
(``"bwv269"``); the name of a file in a user folder is its path relative to the folder
(``"op10/etude1.mid"``). The split of a piece never changes when pieces are added or removed.

Bach chorales: music21's ``chorales.Iterator()`` yields 371 entries (Riemenschneider numbers)
but only 350 distinct files: 21 chorales are listed twice. They are kept once, so no chorale can
be in both splits; bwv277 fails to convert (music21 cannot expand its repeats) and is skipped
with a warning, leaving 349 pieces. They are converted to MIDI once, in parallel, under
``$MULTIMODAL_CACHE/bach_chorales/`` (default ``~/.cache/multimodal/bach_chorales/``)::

    names.json      sorted distinct chorale names (listing them needs music21, ~1 s import)
    midi/*.mid      one file per chorale, written to a temporary name then renamed
    failed.json     chorales music21 cannot convert, with the error (not retried)
    notes_v2.npz    the note arrays of every converted chorale (a load reads only this)

An interrupted conversion resumes where it stopped. Delete the folder to rebuild it.

Why one file of ~450 lines: the corpus, its split and the training / evaluation data sets share
the split rule and the augmentation (transposition, time stretch); apart, the rule would be
restated where a split is made and where it is used.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from multimodal.data.anticipation import GivenNotesDraw
from multimodal.data.music21_scores import SHEET_MUSIC_SUFFIXES, parse_pieces
from multimodal.data.storage import atomic_write_text, cache_root, hash_bucket
from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.tokenizers.midi_files import UnusableMidi, read_midi_notes
from multimodal.tokenizers.music_controls import CONTROL_NAMES, DEFAULT_DROPOUT, Controls

MIDI_SUFFIXES = (".mid", ".midi")
NOTES_CACHE = "notes_v2.npz"  # bump the version when read_midi_notes changes (v2: the one reader, symusic)


@dataclass
class MidiCorpus:
    """Pieces of music as note arrays.

    Attributes:
        names: One name per piece (see the module docstring), sorted.
        notes: One float64 array ``(num_notes, 4)`` = ``[pitch, start_s, end_s, velocity]`` per piece.
        skipped: Files or chorales that could not be read, each with the reason.
        controls: Per piece its :class:`~multimodal.tokenizers.music_controls.Controls` (style, key,
            meter, density), where the source says them; None: no piece has any.
    """

    names: list[str]
    notes: list[np.ndarray]
    skipped: list[str] = field(default_factory=list)
    controls: list[Controls] | None = None

    @property
    def num_skipped(self) -> int:
        """Number of files or chorales that were skipped."""
        return len(self.skipped)

    def split(self, split: str, validation_percent: int = 10, test_percent: int = 10) -> MidiCorpus:
        """The pieces of one split: ``"train"``, ``"val"``, ``"test"`` or ``"all"`` (module docstring)."""
        if split == "all":
            return self
        if split not in ("train", "val", "test"):
            raise ValueError(f"split must be 'train', 'val', 'test' or 'all', got {split!r}")
        kept = [i for i, name in enumerate(self.names) if piece_split(name, validation_percent, test_percent) == split]
        # A lazily read corpus (an ingested cache) stays lazy: its subset opens pieces on access.
        subset = getattr(self.notes, "subset", None)
        notes = subset(kept) if subset is not None else [self.notes[i] for i in kept]
        controls = None if self.controls is None else [self.controls[i] for i in kept]
        return MidiCorpus([self.names[i] for i in kept], notes, self.skipped, controls)

    def __len__(self) -> int:
        return len(self.names)


def piece_split(name: str, validation_percent: int = 10, test_percent: int = 10) -> str:
    """``"val"``, ``"test"`` or ``"train"``: a fixed hash of the piece's name decides."""
    bucket = hash_bucket(name)
    if bucket < validation_percent:
        return "val"
    return "test" if bucket < validation_percent + test_percent else "train"


def is_validation_piece(name: str, validation_percent: int = 10) -> bool:
    """Whether a piece belongs to the validation split (a fixed hash of its name)."""
    return piece_split(name, validation_percent, 0) == "val"


# ---------------------------------------------------------------------------- corpora
def load_bach_chorales(
    limit: int | None = None, cache_dir: str | Path | None = None, num_workers: int | None = None
) -> MidiCorpus:
    """The Bach chorales bundled with music21, converted to MIDI and cached on first use.

    Args:
        limit: Use only the first ``limit`` chorales by sorted name (fast tests); ``None``: all 350.
        cache_dir: Folder of the cache; default ``cache_root() / "bach_chorales"``.
        num_workers: Processes converting chorales the first time; default one per CPU core.

    Returns:
        The chorales that converted, sorted by name; ``skipped`` names the ones that did not.
    """
    cache = Path(cache_dir) if cache_dir is not None else cache_root() / "bach_chorales"
    (cache / "midi").mkdir(parents=True, exist_ok=True)
    wanted = _chorale_names(cache)[:limit]
    failed_path = cache / "failed.json"
    failed = json.loads(failed_path.read_text()) if failed_path.exists() else {}
    cached = _read_notes_cache(cache / NOTES_CACHE)

    missing = [name for name in wanted if name not in cached and name not in failed]
    if missing:
        failed.update(_convert_chorales(missing, cache / "midi", num_workers))
        atomic_write_text(failed_path, json.dumps(failed, indent=2, sort_keys=True))
        for name in missing:
            if name not in failed:
                cached[name] = read_midi_notes(cache / "midi" / f"{name}.mid")
        _write_notes_cache(cache / NOTES_CACHE, cached)

    skipped = [f"{name}: {failed[name]}" for name in wanted if name in failed]
    for reason in skipped:
        warnings.warn(f"skipping Bach chorale {reason}", stacklevel=2)
    names = [name for name in wanted if name in cached]
    return MidiCorpus(names, [cached[name] for name in names], skipped)


def load_midi_folder(folder: str | Path, include_drums: bool = False) -> MidiCorpus:
    """Every ``.mid`` / ``.midi`` file under a folder (searched recursively).

    Files that cannot be parsed or hold no note are skipped with a warning naming each one and
    counted in ``num_skipped``.

    Raises:
        FileNotFoundError: The folder does not exist or holds no usable MIDI file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"MIDI folder {folder} does not exist or is not a folder")
    corpus = load_midi_files([folder], include_drums)
    if not corpus.names:
        raise FileNotFoundError(
            f"no usable MIDI file under {folder.resolve()} (searched recursively for "
            f"{', '.join('*' + s for s in MIDI_SUFFIXES)}, any case): {corpus.num_skipped} file(s) skipped"
        )
    return corpus


def load_midi_files(paths: list[str | Path], include_drums: bool = False, parts: bool = False) -> MidiCorpus:
    """MIDI files and sheet music, and every ``.mid`` / ``.midi`` file and sheet (:data:`~multimodal.data.music21_scores.SHEET_MUSIC_SUFFIXES`) under
    folders (recursively), in the order given.

    With ``parts`` each note keeps its track (a sheet's part) as a fifth column (:func:`read_midi_notes`). Sheet music
    is read as the music21 corpus is (:func:`~multimodal.data.music21_scores.parse_pieces`: ties joined, repeats
    once as written), each tune of an ABC book a piece.

    A piece's name is its path relative to the folder it was found in (a file's: its file name; ``#<number>`` after
    it for a tune of a book). Missing paths, files that cannot be parsed and files with no note are skipped with a
    warning naming each one and counted in ``num_skipped``; the corpus may be empty.
    """
    names, notes, skipped = [], [], []
    readable = MIDI_SUFFIXES + SHEET_MUSIC_SUFFIXES
    for entry in map(Path, paths):
        if entry.is_dir():
            files = sorted(p for p in entry.rglob("*") if p.suffix.lower() in readable and p.is_file())
            base = entry
        elif entry.is_file():
            files, base = [entry], entry.parent
        else:
            skipped.append(f"{entry}: does not exist")
            warnings.warn(f"skipping {entry}: does not exist", stacklevel=2)
            continue
        for path in files:
            if path.suffix.lower() in SHEET_MUSIC_SUFFIXES:
                skipped += _add_sheet_pieces(path, path.relative_to(base).as_posix(), parts, names, notes)
                continue
            try:
                piece = read_midi_notes(path, include_drums=include_drums, parts=parts)
            except UnusableMidi as error:  # not MIDI, or failing the reader's checks: the reason
                reason = error.reason
            except OSError as error:  # gone or unreadable since listed
                reason = f"cannot be read ({type(error).__name__}: {error})"
            else:
                if len(piece):
                    names.append(path.relative_to(base).as_posix())
                    notes.append(piece)
                    continue
                reason = "holds no note" + ("" if include_drums else " outside drum tracks")
            skipped.append(f"{path}: {reason}")
            warnings.warn(f"skipping MIDI file {path}: {reason}", stacklevel=2)
    return MidiCorpus(names, notes, skipped)


def _add_sheet_pieces(path: Path, name: str, parts: bool, names: list[str], notes: list[np.ndarray]) -> list[str]:
    """Appends the pieces of the sheet music at ``path`` to ``names`` and ``notes``; returns what was skipped (the file
    music21 cannot read, or pieces without notes), each warned of by name."""
    try:
        pieces = parse_pieces(path, name)
    except Exception as error:  # music21 raises what its parsers meet
        reason = f"music21 could not read it ({type(error).__name__}: {' '.join(str(error).split())[:200]})"
        warnings.warn(f"skipping sheet music {path}: {reason}", stacklevel=3)
        return [f"{path}: {reason}"]
    skipped = []
    for meta, piece in pieces:
        if len(piece):
            names.append(meta["name"])
            notes.append(piece if parts else piece[:, :4])
        else:
            skipped.append(f"{path} ({meta['name']}): holds no note")
            warnings.warn(f"skipping sheet music {skipped[-1]}", stacklevel=3)
    return skipped


# ---------------------------------------------------------------------------- augmentation
@dataclass(frozen=True)
class MidiAugmentation:
    """Random pitch transposition and time stretch of a whole piece (Music Transformer recipe).

    Attributes:
        max_transpose: Shift every pitch by the same whole number of semitones in
            ``[-max_transpose, max_transpose]``, drawn among the shifts that keep every note in 0..127.
        stretch_range: Multiply every time by one factor drawn uniformly from this range.
    """

    max_transpose: int = 3
    stretch_range: tuple[float, float] = (0.95, 1.05)

    def __call__(self, notes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Returns an augmented copy of ``notes`` ``(num_notes, 4 or 5)``."""
        return self.draw(notes, rng)[0]

    def draw(self, notes: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """An augmented copy of ``notes`` and the transposition drawn, in semitones (a key moves with it)."""
        if len(notes) == 0:
            return notes.copy(), 0
        low, high = notes[:, 0].min(), notes[:, 0].max()
        shifts = [
            s for s in range(-self.max_transpose, self.max_transpose + 1) if low + s >= 0 and high + s <= 127
        ]
        shift = int(rng.choice(shifts))
        return stretch_notes(transpose_notes(notes, shift), rng.uniform(*self.stretch_range)), shift


DEFAULT_AUGMENTATION = MidiAugmentation()


def transpose_notes(notes: np.ndarray, semitones: int) -> np.ndarray:
    """Copy of ``notes`` ``(num_notes, 4)`` with every pitch moved by ``semitones``."""
    result = notes.copy()
    result[:, 0] += semitones
    return result


def stretch_notes(notes: np.ndarray, factor: float) -> np.ndarray:
    """Copy of ``notes`` ``(num_notes, 4)`` with start and end times multiplied by ``factor``."""
    result = notes.copy()
    result[:, 1:3] *= factor
    return result


# ---------------------------------------------------------------------------- data sets
def check_shares(shares: dict[str, float]) -> None:
    """Raises ``ValueError`` unless each share of ``collection_shares`` lies in [0, 1] and all sum to at most 1."""
    if any(not 0 <= share <= 1 for share in shares.values()) or sum(shares.values()) > 1 + 1e-9:
        raise ValueError(f"collection_shares={shares}: each share must lie in [0, 1] and together at most 1")


def piece_weights(names: list[str], sizes: np.ndarray, shares: dict[str, float]) -> np.ndarray:
    """Probability of drawing each piece: ``sizes`` within a collection, ``shares`` across them.

    Args:
        names: One name per piece; a collection is the part before the first ``/`` (a music21 collection,
            or a subfolder of a MIDI folder).
        sizes: ``(num_pieces,)`` positive weights (notes per piece).
        shares: Share of the draws for each named collection (each in [0, 1], summing to at most
            1); the other collections split the rest in proportion to their sizes.
    Returns:
        ``(num_pieces,)`` float64 probabilities summing to 1.
    """
    collections = np.array([name.split("/")[0] for name in names])
    unknown = sorted(set(shares) - set(collections))
    if unknown:
        raise ValueError(f"collection_shares names {', '.join(unknown)}: no training piece comes from it "
                         f"(collections: {', '.join(sorted(set(collections)))})")  # fmt: skip
    check_shares(shares)
    named = np.isin(collections, list(shares))
    rest = 1.0 - sum(shares.values())
    if named.all() and rest > 1e-9:
        raise ValueError(f"collection_shares={shares}: every collection is named, so the shares must sum to 1")
    weights = np.zeros_like(sizes, dtype=np.float64)
    for collection, share in shares.items():
        inside = collections == collection
        weights[inside] = share * sizes[inside] / sizes[inside].sum()
    if (~named).any():
        weights[~named] = rest * sizes[~named] / sizes[~named].sum()
    return weights / weights.sum()


class MidiWindowDataset(Dataset):
    """Training windows: each item is ``seq_len + 1`` ids from a random place of a random piece.

    A piece is drawn with probability proportional to its number of notes (so every part of
    the corpus is seen equally often; ``collection_shares`` reweighs whole collections), augmented, encoded as ``[BOS] + events + [EOS]``, and a
    window starting at a uniformly random position is cut from it; a piece shorter than the
    window is padded on the right with ``pad_id``. The model side uses ``ids[:-1]`` as input and
    ``ids[1:]`` as target.

    With an integer ``seed``, item ``i`` is a pure function of ``(seed, epoch, i)``: the same on
    every run and in every process, so a distributed sampler that gives each process its own
    indices gives it its own windows, and a resumed run draws what the interrupted one would have.
    :meth:`set_epoch` (the tasks call it at each epoch start) draws a new set. With ``seed=None``
    the draws come from torch's global generator.

    Args:
        corpus: The (training) pieces.
        tokenizer: Encodes the augmented notes.
        seq_len: Number of model positions; items have ``seq_len + 1`` ids.
        epoch_length: Number of items in one epoch.
        augmentation: Applied to each drawn piece: by default a transposition within ±3
            semitones and a time stretch by 0.95–1.05 (:class:`MidiAugmentation`); ``None`` for none.
        seed: Makes the draws a function of ``(seed, epoch, index)``; None: torch's global generator.
        control_dropout: Probability that each control token of a window is hidden.
        collection_shares: Share of the windows each named collection gets (the part of a piece's
            name before its first ``/``), e.g. ``{"bach": 0.4}``; the collections not named share the
            rest in proportion to their notes. None: every note equally likely.
        given_notes: Draws, per window, which notes of the piece are given ahead of time
            (:mod:`multimodal.data.anticipation`; the tokenizer needs ``anticipation_steps``). None: none.
    """

    def __init__(
        self,
        corpus: MidiCorpus,
        tokenizer: MidiTokenizer,
        seq_len: int,
        epoch_length: int = 10_000,
        augmentation: Callable[[np.ndarray, np.random.Generator], np.ndarray] | None = DEFAULT_AUGMENTATION,
        seed: int | None = None,
        control_dropout: float = DEFAULT_DROPOUT,
        collection_shares: dict[str, float] | None = None,
        given_notes: GivenNotesDraw | None = None,
    ) -> None:
        if len(corpus) == 0:
            raise ValueError("the corpus holds no piece; check the split and the limit")
        if given_notes is not None and not getattr(tokenizer.config, "anticipation_steps", 0):
            raise ValueError("given_notes needs a tokenizer with anticipation_steps > 0 (AHEAD ids)")
        if (given_notes is not None and (given_notes.infill_share or given_notes.read_ahead_share)
                and not getattr(tokenizer.config, "infill_after_steps", 0)):  # fmt: skip
            raise ValueError("given_notes.infill_share and read_ahead_share need a tokenizer with infill_after_steps > 0 "
                             "(GAP AFTER MIDDLE ids)")  # fmt: skip
        self.given_notes = given_notes
        self.corpus, self.tokenizer, self.seq_len = corpus, tokenizer, seq_len
        self.epoch_length, self.augmentation, self.control_dropout = epoch_length, augmentation, control_dropout
        self.seed, self.epoch = seed, 0
        sizes = np.array([max(len(notes), 1) for notes in corpus.notes], dtype=np.float64)
        self.piece_weights = torch.from_numpy(piece_weights(corpus.names, sizes, collection_shares or {}))

    def set_epoch(self, epoch: int) -> None:
        """Selects the windows of another epoch (seeded data sets only)."""
        self.epoch = epoch

    @property
    def vocab_size(self) -> int:
        """The tokenizer's vocabulary size."""
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        """Id used for right padding."""
        return self.tokenizer.pad_id

    def __len__(self) -> int:
        return self.epoch_length

    def __getitem__(self, index: int) -> torch.Tensor:
        """Returns int64 ids ``(seq_len + 1,)``; ``index`` only counts the epoch."""
        if not 0 <= index < self.epoch_length:
            raise IndexError(f"index {index} outside the epoch of {self.epoch_length} windows")
        if self.seed is None:
            rng = np.random.default_rng(int(torch.randint(0, 2**62, ()).item()))
            piece = int(torch.multinomial(self.piece_weights, 1).item())
        else:
            rng = np.random.default_rng([self.seed, self.epoch, index])
            piece = int(rng.choice(len(self.piece_weights), p=self.piece_weights.numpy()))
        notes, semitones = self.corpus.notes[piece], 0
        if isinstance(self.augmentation, MidiAugmentation):
            notes, semitones = self.augmentation.draw(notes, rng)
        elif self.augmentation is not None:
            notes = self.augmentation(notes, rng)
        given, gap, read_ahead = None, None, False
        if self.given_notes is not None:
            notes, given, gap, read_ahead = self.given_notes(notes, rng)
        if not _has_controls(self.tokenizer):
            ids = _piece_ids(self.tokenizer, notes, given=given, gap=gap, read_ahead=read_ahead)
            latest = max(len(ids) - self.seq_len - 1, 0)  # a gap's window ends with its notes (prefix cut first)
            start = latest if gap is not None else int(rng.integers(0, latest + 1))
            return _pad(ids[start : start + self.seq_len + 1], self.seq_len + 1, self.pad_id)
        # Every window opens BOS + controls (each hidden at random), then events from a random place.
        controls = _controls(self.corpus, piece).transposed(semitones)
        controls = controls.dropped((rng.random(len(CONTROL_NAMES)) >= self.control_dropout).tolist())
        head = torch.tensor([self.tokenizer.bos_id, *self.tokenizer.control_ids(controls)])
        body = _piece_ids(self.tokenizer, notes, given=given, gap=gap, read_ahead=read_ahead)[1:]
        room = self.seq_len + 1 - len(head)
        latest = max(len(body) - room, 0)
        start = latest if gap is not None else int(rng.integers(0, latest + 1))
        return _pad(torch.cat([head, body[start : start + room]]), self.seq_len + 1, self.pad_id)


class MidiPieceWindows(Dataset):
    """Validation windows that cover every token of every piece exactly once, in a fixed order.

    Each piece is encoded (no augmentation) as ``[BOS] + events + [EOS]`` = ``t_0 … t_{L-1}``.
    Window ``k`` is ``t[k*seq_len : k*seq_len + seq_len + 1]``, right-padded with ``pad_id``:
    consecutive windows share one id, so the targets ``ids[1:]`` of all windows are
    ``t_1 … t_{L-1}``, each exactly once (BOS is never a target). A loss with
    ``ignore_index=pad_id``, summed over windows and divided by the number of non-pad targets, is
    the NLL per token of the whole validation set, comparable between runs with the same
    tokenizer and ``seq_len``. Tokens at the start of a window see no earlier context.

    ``num_notes`` and ``seconds`` (notes in the pieces, their summed lengths, before
    tokenization) turn the summed NLL into units that compare across vocabularies: nats per note
    and per second of music.

    Args:
        corpus: The (validation) pieces.
        tokenizer: Encodes the notes.
        seq_len: Number of model positions; items have ``seq_len + 1`` ids.
    """

    def __init__(self, corpus: MidiCorpus, tokenizer: MidiTokenizer, seq_len: int) -> None:
        if len(corpus) == 0:
            raise ValueError("the corpus holds no piece; check the split and the limit")
        self.tokenizer, self.seq_len = tokenizer, seq_len
        self.pieces = [_piece_ids(tokenizer, notes, _controls(corpus, index) if _has_controls(tokenizer) else None)
                       for index, notes in enumerate(corpus.notes)]  # fmt: skip
        self.num_notes = sum(len(notes) for notes in corpus.notes)
        self.seconds = sum(float(notes[:, 2].max(initial=0.0)) for notes in corpus.notes)
        self.windows = [
            (piece, start)
            for piece, ids in enumerate(self.pieces)
            for start in range(0, len(ids) - 1, seq_len)
        ]

    @property
    def vocab_size(self) -> int:
        """The tokenizer's vocabulary size."""
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        """Id used for right padding."""
        return self.tokenizer.pad_id

    @property
    def num_targets(self) -> int:
        """Number of non-pad targets over all windows (tokens of all pieces minus one BOS each)."""
        return sum(len(ids) - 1 for ids in self.pieces)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> torch.Tensor:
        """Returns int64 ids ``(seq_len + 1,)`` of window ``index``."""
        piece, start = self.windows[index]
        return _pad(self.pieces[piece][start : start + self.seq_len + 1], self.seq_len + 1, self.pad_id)


def _piece_ids(tokenizer: MidiTokenizer, notes: np.ndarray, controls: Controls | None = None,
               given: np.ndarray | None = None, gap: tuple[float, float] | None = None,
               read_ahead: bool = False) -> torch.Tensor:  # fmt: skip
    """``[BOS] (+ controls) + events + [EOS]`` of one piece as int64 ``(length,)``; with ``given`` notes,
    the events are ``notes`` with ``given`` written ahead (``encode_anticipated``), or read ahead in blocks
    (``read_ahead``: ``encode_read_ahead``); with a ``gap`` ``(a, b)`` seconds, the prefix, the music after
    the gap and the gap's notes (``encode_infilling``, no EOS: the piece goes on after the gap)."""
    end = [tokenizer.eos_id]
    if given is None:
        events = torch.from_numpy(tokenizer.encode_notes_array(notes))
    elif gap is not None:
        events, end = torch.from_numpy(tokenizer.encode_infilling(notes, given, *gap)[0]), []
    elif read_ahead:
        events = torch.from_numpy(tokenizer.encode_read_ahead(notes, given)[0])
    else:
        events = torch.from_numpy(tokenizer.encode_anticipated(notes, given)[0])
    head = [tokenizer.bos_id, *(tokenizer.control_ids(controls) if controls is not None else [])]
    return torch.cat([torch.tensor(head), events, torch.tensor(end, dtype=torch.int64)])


def _has_controls(tokenizer: MidiTokenizer) -> bool:
    """Whether the vocabulary opens each sequence with control tokens."""
    return bool(getattr(tokenizer.config, "controls", False))


def _controls(corpus: MidiCorpus, piece: int) -> Controls:
    """Piece ``piece``'s controls (all unknown when the corpus has none)."""
    return Controls() if corpus.controls is None else corpus.controls[piece]


def _pad(ids: torch.Tensor, length: int, pad_id: int) -> torch.Tensor:
    """Right-pads a 1-D tensor to ``length``."""
    return torch.nn.functional.pad(ids, (0, length - len(ids)), value=pad_id)


# ---------------------------------------------------------------------------- chorale cache
def _chorale_names(cache: Path) -> list[str]:
    """Sorted distinct chorale names, listed by music21 once and kept in ``names.json``."""
    path = cache / "names.json"
    if path.exists():
        return json.loads(path.read_text())
    from music21 import corpus

    names = sorted({Path(name).name for name in corpus.chorales.Iterator(returnType="filename")})
    atomic_write_text(path, json.dumps(names, indent=0))
    return names


def _convert_chorales(names: list[str], folder: Path, num_workers: int | None) -> dict[str, str]:
    """Writes ``folder/<name>.mid`` for each name not yet there; returns ``{name: error}`` of failures."""
    todo = [name for name in names if not (folder / f"{name}.mid").exists()]
    num_workers = min(num_workers or os.cpu_count() or 1, len(todo))
    progress = {"total": len(todo), "desc": "converting Bach chorales (once)", "unit": "chorale",
                "disable": len(todo) < 20}  # fmt: skip
    if num_workers <= 1 or len(todo) < 4:
        results = [_convert_chorale(name, folder) for name in tqdm(todo, **progress)]
    else:
        with ProcessPoolExecutor(num_workers, mp_context=get_context("fork")) as pool:
            results = list(tqdm(pool.map(_convert_chorale, todo, [folder] * len(todo), chunksize=4), **progress))
    return {name: error for name, error in zip(todo, results, strict=True) if error is not None}


def _convert_chorale(name: str, folder: Path) -> str | None:
    """Converts one chorale with music21 (temporary file, then rename); returns the error or ``None``."""
    from music21 import corpus

    with tempfile.NamedTemporaryFile(dir=folder, suffix=".mid.tmp", delete=False) as handle:
        temporary = Path(handle.name)
    try:
        corpus.parse(f"bach/{name}").write("midi", fp=temporary)
        temporary.replace(folder / f"{name}.mid")
    except Exception as error:  # music21 raises its own exception classes
        temporary.unlink(missing_ok=True)
        return f"music21 could not convert it ({type(error).__name__}: {error})"
    return None


def _read_notes_cache(path: Path) -> dict[str, np.ndarray]:
    """``{name: notes}`` from the npz cache, or ``{}``."""
    if not path.exists():
        return {}
    with np.load(path) as data:
        names, offsets, notes = data["names"].tolist(), data["offsets"], data["notes"]
    return {name: notes[offsets[i] : offsets[i + 1]] for i, name in enumerate(names)}


def _write_notes_cache(path: Path, pieces: dict[str, np.ndarray]) -> None:
    """Writes all note arrays into one npz (concatenated, with offsets), atomically."""
    names = sorted(pieces)
    sizes = [len(pieces[name]) for name in names]
    notes = np.concatenate([pieces[name] for name in names]) if names else np.empty((0, 4))
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz.tmp", delete=False) as handle:
        np.savez(handle, names=np.array(names), offsets=np.r_[0, np.cumsum(sizes)], notes=notes)
    Path(handle.name).replace(path)

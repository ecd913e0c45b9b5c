"""Instrument-family phrases: real melodies played through General MIDI SoundFonts, as log-mel spectrograms.

The data of the audio classification task (an Audio Spectrogram Transformer naming the General MIDI
instrument family of a phrase, as NSynth's instrument-family task does). A phrase is a
``clip_seconds`` window of one part of a real piece (a chorale voice, a folk tune, a track of your
own MIDI files), moved by octaves into the family's register, played by one program of the family
through one SoundFont at a random velocity, and scaled to a random level.

Splits: the melodies follow their pieces' fixed hash split (:func:`multimodal.data.music.piece_split`),
so a test phrase is never a melody trained on; the SoundFonts are chosen per split, so the test
phrases can be rendered by a SoundFont the model never heard. Labels are the families in the order
given (pretty_midi's General MIDI class names, ``program // 8``).

Rendering takes a few milliseconds a clip (:class:`~multimodal.audio.synthesis.SoundFontRenderer`);
the spectrograms (float16) are cached under ``cache_root()/instrument_phrases``, keyed by everything
that makes them, and read back with ``weights_only=True``.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pretty_midi
import torch
from torch import Tensor

from multimodal.data.music import MidiCorpus, load_midi_files
from multimodal.data.storage import cache_root, cached_tensors
from multimodal.data.transcription import piece_midi
from multimodal.tokenizers.audio import AudioSpectrogramTokenizer

__all__ = [
    "ALL_FAMILIES",
    "DEFAULT_FAMILIES",
    "REGISTERS",
    "PhraseSet",
    "load_melodies",
    "melody_windows",
    "phrase_set",
    "render_phrases",
]

#: The 16 General MIDI families, ``program // 8`` (pretty_midi's names).
ALL_FAMILIES: tuple[str, ...] = tuple(pretty_midi.program_to_instrument_class(8 * i) for i in range(16))
#: The pitched families: the two effects families (rain, seashore, helicopter, gunshot...) are left out.
DEFAULT_FAMILIES: tuple[str, ...] = tuple(name for name in ALL_FAMILIES if "Effects" not in name)
#: MIDI pitch a phrase of each family is centred on (by whole octaves), roughly the middle of its instruments.
REGISTERS: dict[str, int] = {
    "Piano": 60, "Chromatic Percussion": 72, "Organ": 60, "Guitar": 57, "Bass": 40, "Strings": 60,
    "Ensemble": 62, "Brass": 60, "Reed": 62, "Pipe": 74, "Synth Lead": 67, "Synth Pad": 60,
    "Synth Effects": 60, "Ethnic": 64, "Percussive": 60, "Sound Effects": 60,
}  # fmt: skip
_CACHE_VERSION = 1


@dataclass(frozen=True)
class PhraseSet:
    """Rendered phrases of one split and SoundFont.

    Attributes:
        spectrograms: float16 ``(clips, n_mels, frames)``: the tokenizer's log-mel decibels, not normalised.
        labels: int64 ``(clips,)``: index of the family in the list the set was rendered with.
        programs: int64 ``(clips,)``: the General MIDI program that played each clip.
    """

    spectrograms: Tensor
    labels: Tensor
    programs: Tensor


def load_melodies(source: str) -> MidiCorpus:
    """The pieces phrases are cut from, each note with its part: ``(n, 5)`` ``[pitch, start, end, velocity, part]``.

    Args:
        source: A music21 collection (``bach``, ``oneills1850``, ...; :mod:`multimodal.data.music21_collections`,
            converted once into the cache) or a folder of your MIDI files (each track a part).

    Raises:
        FileNotFoundError: ``source`` is neither a collection nor a folder holding a usable MIDI file.
    """
    from multimodal.data.music21_collections import COLLECTIONS

    if source in COLLECTIONS:
        from multimodal.data.music21_corpus import load_music21_corpus

        return load_music21_corpus([source], num_parts=64)
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"{source}: neither a music21 collection ({', '.join(COLLECTIONS)}) nor a folder")
    corpus = load_midi_files([folder], parts=True)
    if not corpus.names:
        raise FileNotFoundError(f"{source}: no usable MIDI file in the folder")
    return corpus


def melody_windows(corpus: MidiCorpus, clip_seconds: float, min_notes: int = 2) -> list[np.ndarray]:
    """Non-overlapping ``clip_seconds`` windows of every part of every piece, each starting at a note.

    A window starts at a note's onset and holds the part's notes that begin inside it, their times
    moved to start at 0 and their ends cut at ``clip_seconds``; the next window starts at the first
    onset after it. Windows with fewer than ``min_notes`` notes are left out.

    Args:
        corpus: Pieces with a part column (``(n, 5)``); ``(n, 4)`` pieces count as one part.
        clip_seconds: Window length.
        min_notes: Fewest notes a window keeps.

    Returns:
        One float64 ``(notes, 4)`` array ``[pitch, start, end, velocity]`` per window, in corpus order.
    """
    windows = []
    for notes in corpus.notes:
        parts = notes[:, 4] if notes.shape[1] > 4 else np.zeros(len(notes))
        for part in np.unique(parts):
            line = notes[parts == part, :4]
            line = line[np.argsort(line[:, 1], kind="stable")]
            index = 0
            while index < len(line):
                start = line[index, 1]
                inside = (line[:, 1] >= start) & (line[:, 1] < start + clip_seconds)
                window = line[inside].copy()
                window[:, 1:3] -= start
                window[:, 2] = np.minimum(window[:, 2], clip_seconds)
                if len(window) >= min_notes:
                    windows.append(window)
                later = np.flatnonzero(line[:, 1] >= start + clip_seconds)
                index = int(later[0]) if later.size else len(line)
    return windows


def render_phrases(
    windows: list[np.ndarray],
    soundfont: str | Path,
    families: tuple[str, ...] | list[str],
    clips_per_family: int,
    tokenizer: AudioSpectrogramTokenizer,
    clip_seconds: float,
    seed: int,
    level_range_db: float = 12.0,
) -> PhraseSet:
    """Renders ``clips_per_family`` phrases of each family through ``soundfont``.

    Clip ``i`` is family ``i % len(families)``, played by its programs in turn (all eight, evenly), a
    melody window drawn at random and moved by octaves so its median pitch lies nearest the family's
    :data:`REGISTERS` centre (and every note in 21..108), each note at a velocity around one drawn for
    the clip (40..110). The audio is cut or padded to ``clip_seconds``, scaled to a peak of
    ``-U(0, level_range_db)`` dB, and turned into the tokenizer's spectrogram, cut to
    ``clip_seconds * sample_rate // hop_length`` frames.

    Returns:
        The clips as a :class:`PhraseSet`, a function of the arguments (``seed`` drives every draw).
    """
    from multimodal.audio.synthesis import SoundFontRenderer

    if not windows:
        raise ValueError("no melody windows to render: the melodies hold no window of enough notes")
    unknown = [name for name in families if name not in REGISTERS]
    if unknown:
        raise ValueError(f"unknown instrument families {unknown}; choose from {list(ALL_FAMILIES)}")
    render = SoundFontRenderer(soundfont, tokenizer.sample_rate)
    rng = np.random.default_rng(seed)
    samples = round(clip_seconds * tokenizer.sample_rate)
    frames = samples // tokenizer.hop_length
    count = clips_per_family * len(families)
    spectrograms = torch.empty(count, tokenizer.n_mels, frames, dtype=torch.float16)
    labels, programs = torch.empty(count, dtype=torch.long), torch.empty(count, dtype=torch.long)
    for i in range(count):
        label = i % len(families)
        family = families[label]
        program = 8 * ALL_FAMILIES.index(family) + (i // len(families)) % 8
        notes = _in_register(windows[int(rng.integers(len(windows)))], REGISTERS[family])
        velocity = rng.integers(40, 111)
        audio = render(piece_midi(notes, program, int(velocity), rng))[:samples]
        audio = torch.nn.functional.pad(audio, (0, samples - len(audio)))
        peak = float(audio.abs().max())
        if peak > 0:
            audio = audio * (10 ** (-rng.uniform(0, level_range_db) / 20) / peak)
        spectrograms[i] = tokenizer.spectrogram(audio)[:, :frames].to(torch.float16)
        labels[i], programs[i] = label, program
    return PhraseSet(spectrograms, labels, programs)


def phrase_set(
    windows: list[np.ndarray],
    soundfont: str | Path,
    families: tuple[str, ...] | list[str],
    clips_per_family: int,
    tokenizer: AudioSpectrogramTokenizer,
    clip_seconds: float,
    seed: int,
    cache_dir: str | Path | None = None,
) -> PhraseSet:
    """:func:`render_phrases`, cached: rendered once per set of arguments, read back from the cache after.

    The key covers the windows' notes, the SoundFont file (path, size, modification time), the
    families, counts, clip length, seed and the tokenizer's parameters.
    """
    digest = hashlib.sha256()
    for window in windows:
        digest.update(np.ascontiguousarray(window, dtype=np.float64).tobytes())
    stat = Path(soundfont).expanduser().stat()
    key = {
        "version": _CACHE_VERSION, "windows": digest.hexdigest(), "soundfont": [str(soundfont), stat.st_size,
        stat.st_mtime_ns], "families": list(families), "clips_per_family": clips_per_family,
        "clip_seconds": clip_seconds, "seed": seed, "tokenizer": asdict(tokenizer),
    }  # fmt: skip

    def build() -> dict[str, Tensor]:
        phrases = render_phrases(windows, soundfont, families, clips_per_family, tokenizer, clip_seconds, seed)
        return {"spectrograms": phrases.spectrograms, "labels": phrases.labels, "programs": phrases.programs}

    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "instrument_phrases"
    return PhraseSet(**cached_tensors(folder, key, build))


def _in_register(notes: np.ndarray, centre: int) -> np.ndarray:
    """``notes`` moved by whole octaves so their median pitch lies nearest ``centre``, kept inside 21..108."""
    shift = 12 * round((centre - float(np.median(notes[:, 0]))) / 12)
    low, high = notes[:, 0].min() + shift, notes[:, 0].max() + shift
    while low < 21 and high + 12 <= 108:
        shift, low, high = shift + 12, low + 12, high + 12
    while high > 108 and low - 12 >= 21:
        shift, low, high = shift - 12, low - 12, high - 12
    moved = notes.copy()
    moved[:, 0] = np.clip(notes[:, 0] + shift, 21, 108)
    return moved

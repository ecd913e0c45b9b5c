"""Transcription data: real pieces rendered through SoundFonts, cut into segments of audio and the notes they start.

A piece (the notes of every part, merged: transcription writes one part) is rendered whole through a
SoundFont with one General MIDI program, at a random velocity and level, optionally at a random tempo
and with reverb and noise (:class:`AudioAugmentation`), and turned into a log-mel spectrogram (cached,
float16). Training items are **segments**: the spectrogram from ``start`` to ``start + segment_seconds +
lookahead_seconds``, and the notes whose onset lies in ``[start, start + segment_seconds)``, their
times relative to ``start`` and their full lengths (the look-ahead lets the model hear how long a
note near the segment's end lasts). Segments tile a piece without overlap in what they write, so
:func:`stitch` puts the notes of a piece's segments back together exactly
(:func:`segment_notes` then :func:`stitch` is the identity on a piece's notes).

Splits follow the pieces' fixed hash split (:func:`multimodal.data.music.piece_split`), so test
audio is never music trained on; SoundFonts and programs are chosen per split.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pretty_midi
import torch
from torch import Tensor

from multimodal.data.music import stretch_notes
from multimodal.data.storage import cache_root, cached_tensors
from multimodal.tokenizers.audio import AudioSpectrogramTokenizer

__all__ = ["AudioAugmentation", "piece_midi", "reference_notes", "render_piece", "rendered_pieces",
           "segment_notes", "segment_starts", "stitch"]  # fmt: skip

_CACHE_VERSION = 2  # 2: the drawn tempo of each rendering is stored


@dataclass(frozen=True)
class AudioAugmentation:
    """What varies between renderings besides the SoundFont and program.

    Attributes:
        level_range_db: The rendering's peak is scaled to ``-U(0, level_range_db)`` dB.
        reverb_probability: Chance of a synthetic room: the audio convolved with exponentially
            decaying noise (RT60 ``U(0.2, 1.2)`` s), mixed in at ``U(0.1, 0.4)``.
        noise_probability: Chance of white noise at ``U(20, 40)`` dB below the audio's RMS level.
        tempo_range: The piece is played at a tempo factor drawn log-uniformly from ``[low, high]``
            (1.25: a quarter faster; its times are divided by it); ``(1, 1)``
            keeps the piece's own tempo and draws nothing.
    """

    level_range_db: float = 12.0
    reverb_probability: float = 0.5
    noise_probability: float = 0.5
    tempo_range: tuple[float, float] = (1.0, 1.0)

    def __post_init__(self) -> None:
        if len(self.tempo_range) != 2 or not 0 < self.tempo_range[0] <= self.tempo_range[1]:
            raise ValueError(f"tempo_range={list(self.tempo_range)}: [low, high] with 0 < low <= high")

    def draw_tempo(self, rng: np.random.Generator) -> float:
        """A tempo factor from ``tempo_range`` (log-uniform); 1.0, drawing nothing, when the range is ``(1, 1)``."""
        low, high = self.tempo_range
        if low == high == 1.0:
            return 1.0
        return math.exp(rng.uniform(math.log(low), math.log(high)))

    def __call__(self, audio: Tensor, sample_rate: int, rng: np.random.Generator) -> Tensor:
        """``audio`` ``(samples,)`` with the drawn reverb, noise and level (a function of ``rng``'s state)."""
        import torchaudio.functional as AF

        reverb, noise = rng.random() < self.reverb_probability, rng.random() < self.noise_probability
        if reverb and len(audio):
            rt60, wet = rng.uniform(0.2, 1.2), rng.uniform(0.1, 0.4)
            length = int(rt60 * sample_rate)
            decay = np.exp(-6.9 * np.arange(length) / length)  # -60 dB at rt60
            response = torch.from_numpy((rng.standard_normal(length) * decay).astype(np.float32))
            response /= response.norm()
            audio = (1 - wet) * audio + wet * AF.fftconvolve(audio, response)[: len(audio)]
        if noise and len(audio):
            rms = float(audio.pow(2).mean().sqrt())
            level = rms * 10 ** (-rng.uniform(20, 40) / 20)
            audio = audio + level * torch.from_numpy(rng.standard_normal(len(audio)).astype(np.float32))
        peak = float(audio.abs().max()) if len(audio) else 0.0
        if peak > 0:
            audio = audio * (10 ** (-rng.uniform(0, self.level_range_db) / 20) / peak)
        return audio


NO_AUGMENTATION = AudioAugmentation(level_range_db=0.0, reverb_probability=0.0, noise_probability=0.0)
"""Only a peak normalisation to 0 dB: how test audio is rendered."""


def piece_midi(notes: np.ndarray, program: int, velocity: int | None, rng: np.random.Generator) -> pretty_midi.PrettyMIDI:
    """One instrument of General MIDI ``program`` playing ``notes`` ``(n, 4+)`` ``[pitch, start, end, velocity, ...]``.

    ``velocity`` None keeps each note's velocity; a number plays every note at ``velocity ± 10`` (drawn).
    """
    midi = pretty_midi.PrettyMIDI()
    instrument = pretty_midi.Instrument(program=int(program))
    for pitch, start, end, note_velocity in notes[:, :4]:
        if velocity is not None:
            note_velocity = velocity + rng.integers(-10, 11)
        instrument.notes.append(pretty_midi.Note(int(np.clip(note_velocity, 1, 127)), int(pitch), float(start),
                                                 float(max(end, start + 0.02))))  # fmt: skip
    midi.instruments.append(instrument)
    return midi


def render_piece(
    notes: np.ndarray,
    render: object,
    program: int,
    tokenizer: AudioSpectrogramTokenizer,
    rng: np.random.Generator,
    augmentation: AudioAugmentation = NO_AUGMENTATION,
    velocity_range: tuple[int, int] | None = (50, 110),
) -> Tensor:
    """The log-mel decibels ``(n_mels, frames)`` (float16, not normalised) of ``notes`` played by ``program``.

    Args:
        notes: ``(n, 4+)`` notes; only the first four columns are read.
        render: A :class:`~multimodal.audio.synthesis.SoundFontRenderer` (``PrettyMIDI`` -> waveform).
        program: General MIDI program.
        tokenizer: The spectrogram.
        rng: Every draw (velocity, augmentation).
        augmentation: Reverb, noise and level.
        velocity_range: A piece-wide velocity is drawn from it (each note ± 10); None keeps the notes'.
    """
    velocity = None if velocity_range is None else int(rng.integers(velocity_range[0], velocity_range[1] + 1))
    audio = render(piece_midi(notes, program, velocity, rng))
    audio = augmentation(audio, tokenizer.sample_rate, rng)
    return tokenizer.spectrogram(audio).to(torch.float16)


@dataclass(frozen=True)
class RenderedPieces:
    """The spectrograms of a list of pieces, each rendered once.

    Attributes:
        spectrograms: Per piece, float16 ``(n_mels, frames)`` log-mel decibels, not normalised.
        programs: Per piece, the General MIDI program that played it.
        notes: Per piece, the notes ``(n, 4+)`` as played: at the rendering's drawn tempo.
    """

    spectrograms: list[Tensor]
    programs: list[int]
    notes: list[np.ndarray]


def rendered_pieces(
    pieces: list[np.ndarray],
    soundfont: str | Path,
    programs: list[int],
    tokenizer: AudioSpectrogramTokenizer,
    seed: int,
    augmentation: AudioAugmentation = NO_AUGMENTATION,
    cache_dir: str | Path | None = None,
) -> RenderedPieces:
    """Renders each piece through ``soundfont`` with a program drawn from ``programs``; cached.

    Piece ``i`` draws from ``numpy.random.default_rng([seed, i])``, so a piece renders the same
    whatever other pieces are in the list. The cache key covers the pieces' notes, the SoundFont
    file (path, size, modification time), the programs, seed, augmentation and the spectrogram.
    """
    from multimodal.audio.synthesis import SoundFontRenderer

    digest = hashlib.sha256()
    for notes in pieces:
        digest.update(np.ascontiguousarray(notes[:, :4], dtype=np.float64).tobytes())
    stat = Path(soundfont).expanduser().stat()
    key = {
        "version": _CACHE_VERSION, "pieces": digest.hexdigest(), "soundfont": [str(soundfont), stat.st_size,
        stat.st_mtime_ns], "programs": list(programs), "seed": seed, "augmentation": asdict(augmentation),
        "tokenizer": {k: v for k, v in asdict(tokenizer).items() if k not in ("mean", "std")},
    }  # fmt: skip

    def build() -> dict[str, Any]:
        render = SoundFontRenderer(soundfont, tokenizer.sample_rate)
        raw = AudioSpectrogramTokenizer(**{**asdict(tokenizer), "mean": 0.0, "std": 1.0})
        spectrograms, chosen, tempos = [], [], []
        for index, notes in enumerate(pieces):
            rng = np.random.default_rng([seed, index])
            program = int(programs[int(rng.integers(len(programs)))])
            tempo = augmentation.draw_tempo(rng)
            spectrograms.append(render_piece(stretch_notes(notes, 1 / tempo), render, program, raw, rng, augmentation))
            chosen.append(program)
            tempos.append(tempo)
        return {"spectrograms": spectrograms, "programs": torch.tensor(chosen),
                "tempos": torch.tensor(tempos, dtype=torch.float64)}  # fmt: skip

    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "transcription"
    stored = cached_tensors(folder, key, build)
    played = [stretch_notes(notes, 1 / float(tempo)) for notes, tempo in zip(pieces, stored["tempos"], strict=True)]
    return RenderedPieces(list(stored["spectrograms"]), [int(p) for p in stored["programs"]], played)


def reference_notes(notes: np.ndarray, tolerance: float = 1e-3) -> np.ndarray:
    """What can be heard of ``notes`` ``(n, 4+)``: notes of one pitch starting together (doubled voices) become one,
    the longest; returned ``(m, 4)`` sorted by onset then pitch."""
    notes = np.asarray(notes, dtype=np.float64).reshape(-1, np.shape(notes)[-1] if np.size(notes) else 4)[:, :4]
    if not len(notes):
        return notes
    order = np.lexsort((-notes[:, 2], notes[:, 1], notes[:, 0]))  # by pitch, onset, longest first
    ordered = notes[order]
    same = (np.diff(ordered[:, 0]) == 0) & (np.diff(ordered[:, 1]) <= tolerance)
    kept = ordered[np.r_[True, ~same]]
    return kept[np.lexsort((kept[:, 0], kept[:, 1]))]


def segment_starts(seconds: float, segment_seconds: float) -> list[float]:
    """Starts ``0, S, 2S, ...`` of the segments that cover ``[0, seconds)`` (one at least)."""
    return [index * segment_seconds for index in range(max(1, math.ceil(seconds / segment_seconds - 1e-9)))]


def segment_notes(notes: np.ndarray, start: float, segment_seconds: float) -> np.ndarray:
    """The notes with onset in ``[start, start + segment_seconds)``, times moved to start at 0, full lengths kept."""
    inside = (notes[:, 1] >= start) & (notes[:, 1] < start + segment_seconds)
    moved = notes[inside].copy()
    moved[:, 1:3] -= start
    return moved


def stitch(segments: list[np.ndarray], starts: list[float]) -> np.ndarray:
    """The notes of consecutive segments (times relative to each ``start``) as one piece, sorted by onset then pitch."""
    shifted = []
    for notes, start in zip(segments, starts, strict=True):
        moved = np.array(notes, dtype=np.float64, copy=True).reshape(-1, 4)
        moved[:, 1:3] += start
        shifted.append(moved)
    joined = np.concatenate(shifted) if shifted else np.zeros((0, 4))
    return joined[np.lexsort((joined[:, 0], joined[:, 1]))]


def segment_frames(spectrogram: Tensor, start: float, seconds: float, frames_per_second: float) -> Tensor:
    """``spectrogram[:, start : start + seconds]`` in frames, padded at the end with its quietest value.

    Returns ``(n_mels, round(seconds * frames_per_second))``.
    """
    first, count = round(start * frames_per_second), round(seconds * frames_per_second)
    piece = spectrogram[:, first : first + count]
    if piece.shape[1] < count:
        floor = spectrogram.min() if spectrogram.numel() else spectrogram.new_zeros(())
        piece = torch.cat([piece, floor.expand(spectrogram.shape[0], count - piece.shape[1])], dim=1)
    return piece

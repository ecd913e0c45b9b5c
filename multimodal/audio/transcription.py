"""Audio -> notes with a trained :class:`~multimodal.models.transcriber.Transcriber`: read, segment, decode, stitch, score.

:func:`transcribe` cuts a recording into the segments the model was trained on (``segment_seconds``
of onsets, heard with ``lookahead_seconds`` more), decodes every segment greedily in batches with a
KV cache, and stitches the segments' notes into one piece (:func:`multimodal.data.transcription.stitch`).
:func:`read_audio` reads WAV, FLAC and OGG (``soundfile``); :func:`note_scores` is
``mir_eval.transcription``'s note precision, recall and F1 (onset only, and onset + offset).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pretty_midi
import torch
from torch import Tensor

from multimodal.data.transcription import segment_frames, segment_starts, stitch
from multimodal.tokenizers.transcription import TranscriptionTokenizer

__all__ = ["AUDIO_SUFFIXES", "note_scores", "notes_to_midi", "read_audio", "transcribe"]

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")


def read_audio(path: str | Path) -> tuple[Tensor, int]:
    """A WAV / FLAC / OGG file as float32 ``(channels, samples)`` in [-1, 1] and its sample rate.

    Raises:
        ValueError: The file is not readable audio, or holds no samples (the message names the file).
    """
    import soundfile

    try:
        data, sample_rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as error:
        raise ValueError(f"{path}: not a readable audio file ({' '.join(str(error).split())[:120]})") from error
    if data.size == 0:
        raise ValueError(f"{path}: holds no audio samples")
    if not np.isfinite(data).all():
        raise ValueError(f"{path}: holds samples that are not finite numbers")
    return torch.from_numpy(np.ascontiguousarray(data.T)), int(sample_rate)


@torch.no_grad()
def transcribe(
    model: torch.nn.Module,
    tokenizer: TranscriptionTokenizer,
    audio: Tensor,
    sample_rate: int,
    batch_size: int = 16,
) -> np.ndarray:
    """The notes ``(n, 4)`` ``[pitch, start_s, end_s, velocity]`` of a recording, sorted by onset then pitch.

    Args:
        model: A :class:`~multimodal.models.transcriber.Transcriber` (eval mode).
        tokenizer: The model's :class:`TranscriptionTokenizer`.
        audio: ``(samples,)`` or ``(channels, samples)`` (channels are averaged).
        sample_rate: Of ``audio``; resampled to the tokenizer's.
        batch_size: Segments decoded together.
    """
    spectrogram = tokenizer.audio.spectrogram(audio, sample_rate)
    seconds = spectrogram.shape[1] / tokenizer.frames_per_second
    starts = segment_starts(seconds, tokenizer.segment_seconds)
    device = next(model.parameters()).device
    segments: list[np.ndarray] = []
    for first in range(0, len(starts), batch_size):
        batch = torch.stack([segment_frames(spectrogram, start, tokenizer.window_seconds, tokenizer.frames_per_second)
                             for start in starts[first : first + batch_size]])  # fmt: skip
        rows = model.greedy(batch.to(device), tokenizer.bos_id, tokenizer.eos_id, tokenizer.max_tokens)
        for ids in rows:
            notes = tokenizer.midi.decode_notes(ids)
            # A segment writes the onsets in its own span; a stray later onset belongs to the next one.
            segments.append(notes[notes[:, 1] < tokenizer.segment_seconds - 1e-9])
    return stitch(segments, starts)


def notes_to_midi(notes: np.ndarray, program: int = 0, name: str = "Transcription") -> pretty_midi.PrettyMIDI:
    """A one-track ``PrettyMIDI`` of ``notes`` ``(n, 4)`` with General MIDI ``program``."""
    midi = pretty_midi.PrettyMIDI(resolution=960, initial_tempo=120.0)
    instrument = pretty_midi.Instrument(program=program, name=name)
    for pitch, start, end, velocity in notes[:, :4]:
        instrument.notes.append(pretty_midi.Note(int(velocity), int(pitch), float(start), float(end)))
    midi.instruments.append(instrument)
    return midi


def note_scores(reference: np.ndarray, estimate: np.ndarray, onset_tolerance: float = 0.05) -> dict[str, float]:
    """Note precision, recall and F1 of ``estimate`` against ``reference`` (both ``(n, 4+)`` notes), by ``mir_eval``.

    ``onset_*``: a note matches when its pitch is within 50 cents and its onset within
    ``onset_tolerance`` seconds (offsets ignored); ``offset_*``: also its offset within 20 % of the
    reference note's length or 50 ms, whichever is more (``mir_eval.transcription``'s defaults).
    """
    import mir_eval

    def intervals_and_hz(notes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        notes = np.asarray(notes, dtype=np.float64).reshape(-1, notes.shape[-1] if notes.size else 4)
        intervals = notes[:, 1:3].copy()
        intervals[:, 1] = np.maximum(intervals[:, 1], intervals[:, 0] + 1e-3)  # mir_eval wants positive lengths
        return intervals, 440.0 * 2 ** ((notes[:, 0] - 69) / 12)

    (ref_intervals, ref_hz), (est_intervals, est_hz) = intervals_and_hz(reference), intervals_and_hz(estimate)
    scores = {}
    for name, offset_ratio in (("onset", None), ("offset", 0.2)):
        precision, recall, f1, _ = mir_eval.transcription.precision_recall_f1_overlap(
            ref_intervals, ref_hz, est_intervals, est_hz, onset_tolerance=onset_tolerance, offset_ratio=offset_ratio)
        scores.update({f"{name}_precision": precision, f"{name}_recall": recall, f"{name}_f1": f1})
    return scores

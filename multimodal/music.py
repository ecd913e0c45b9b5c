"""Music continuation end to end: primer notes -> model -> MIDI, piano roll and audio files.

No Lightning here: any causal model over :class:`~multimodal.tokenizers.midi.MidiTokenizer` ids
works, in a notebook or a training callback alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from multimodal.beam_search import beam_search
from multimodal.data.music import MidiCorpus, MidiPieceWindows
from multimodal.generation import generate, generate_batch
from multimodal.music_stats import ExcerptStats, excerpt_stats
from multimodal.synthesis import SINE, check_soundfont, midi_to_waveform, spectrogram_png, write_wav
from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.viz import piano_roll_png


def primer_ids(notes: np.ndarray, tokenizer: MidiTokenizer, seconds: float) -> list[int]:
    """``[BOS]`` + events of the first ``seconds`` of a piece; notes still sounding are cut there.

    Args:
        notes: ``(num_notes, 4)`` array of ``[pitch, start_s, end_s, velocity]``.
        tokenizer: The model's tokenizer.
        seconds: Length of the primer.
    """
    kept = notes[notes[:, 1] < seconds].copy()
    kept[:, 2] = np.minimum(kept[:, 2], seconds)
    return [tokenizer.bos_id, *tokenizer.encode_notes(kept)]


def continue_music(
    model: nn.Module,
    tokenizer: MidiTokenizer,
    primer: list[int],
    out_dir: str | Path,
    *,
    num_samples: int = 1,
    max_new_tokens: int = 512,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    progress: bool = False,
    audio: bool = True,
    sample_rate: int = 16000,
    num_beams: int = 1,
    soundfont: str | Path | None = None,
) -> list[Path]:
    """Samples continuations of ``primer`` and writes ``sample_{i}.mid``, ``.png`` (and ``.wav``).

    The piano roll draws the primer in blue and the continuation in orange. The WAV is rendered
    with ``soundfont`` (:func:`~multimodal.synthesis.midi_to_waveform`; ``None``: the default; a
    named file is checked before generating). Generation uses the model's KV cache. With
    ``num_beams > 1`` the continuations are the ``num_samples`` best hypotheses of a beam search
    (:func:`multimodal.beam_search.beam_search`) instead of samples. Returns the MIDI paths.
    """
    if audio and soundfont is not None and str(soundfont).lower() != SINE:
        check_soundfont(soundfont)  # a wrong file fails now, not after generating
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    if num_beams > 1:
        if num_samples > num_beams:
            raise ValueError(f"num_samples={num_samples} needs at least as many beams, got num_beams={num_beams}")
        tokens, _ = beam_search(model, torch.tensor([primer], device=device), max_new_tokens, num_beams,
                                eos_id=tokenizer.eos_id, num_return_sequences=num_samples)  # fmt: skip
    else:
        prompt = torch.tensor([primer] * num_samples, device=device)
        tokens = generate(
            model, prompt, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            eos_id=tokenizer.eos_id, generator=generator, progress=progress,
        )  # fmt: skip
    return [_write_sample(tokenizer, row, primer, out_dir / f"sample_{index}.mid", f"sample {index}", audio,
                          sample_rate, soundfont) for index, row in enumerate(tokens.tolist())]  # fmt: skip


def continue_primers(
    model: nn.Module,
    tokenizer: MidiTokenizer,
    primers: dict[str, list[int]],
    out_dir: str | Path,
    *,
    batch_size: int = 8,
    max_new_tokens: int = 512,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    audio: bool = True,
    sample_rate: int = 16000,
    soundfont: str | Path | None = None,
) -> list[Path]:
    """Continues many primers, ``batch_size`` at a time, into ``<name>.mid``, ``.png`` (and ``.wav``).

    Primers of different lengths share a batch (padded on the left,
    :func:`~multimodal.generation.generate_batch`); each continues as it would alone. ``primers``
    maps an output name to its event ids. Returns the MIDI paths, in the order of ``primers``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if audio and soundfont is not None and str(soundfont).lower() != SINE:
        check_soundfont(soundfont)  # a wrong file fails now, not after generating
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    names, written = list(primers), []
    for start in range(0, len(names), batch_size):
        chunk = names[start : start + batch_size]
        rows = generate_batch(model, [primers[name] for name in chunk], max_new_tokens, temperature=temperature,
                              top_k=top_k, top_p=top_p, eos_id=tokenizer.eos_id, generator=generator)  # fmt: skip
        for name, row in zip(chunk, rows, strict=True):
            written.append(_write_sample(tokenizer, row.tolist(), primers[name], out_dir / f"{name}.mid", name,
                                         audio, sample_rate, soundfont))  # fmt: skip
    return written


def _write_sample(
    tokenizer: MidiTokenizer, ids: list[int], primer: list[int], path: Path, title: str, audio: bool, sample_rate: int,
    soundfont: str | Path | None = None,
) -> Path:
    """Writes one continuation as MIDI, its piano roll (primer blue, continuation orange) and, with ``audio``, WAV."""
    midi = tokenizer.decode(ids)
    midi.write(str(path))
    piano_roll_png(midi, path.with_suffix(".png"), primer_end_seconds=tokenizer.decode(primer).get_end_time(),
                   title=f"{title}: primer (blue) and continuation (orange)")  # fmt: skip
    if audio:
        waveform = midi_to_waveform(midi, sample_rate, soundfont)
        write_wav(path.with_suffix(".wav"), waveform, sample_rate)
        if waveform.numel() > 2048:  # a spectrogram needs at least one FFT window
            spectrogram_png(waveform, sample_rate, path.with_name(f"{path.stem}_spectrogram.png"))
    return path


def evaluate_continuations(
    model: nn.Module,
    tokenizer: MidiTokenizer,
    pieces: list[np.ndarray],
    *,
    primer_seconds: float = 6.0,
    max_new_tokens: int = 512,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
) -> tuple[ExcerptStats, ExcerptStats, list[np.ndarray]]:
    """Continues the first ``primer_seconds`` of each piece and measures both continuations.

    Both sides are measured as the tokenizer sees music (the piece is encoded and decoded first:
    times on its grid, unisons merged), from the same cut:

    - the primer is the notes that begin before ``primer_seconds``, cut there;
    - the model continues it once (KV-cached, stopping at EOS or after ``max_new_tokens`` events);
      the generated continuation is every decoded note that is not a primer note, measured from
      the cut to the end of its last note;
    - the reference is the piece's notes that begin at or after the cut, over the same seconds (or
      to the piece's end).

    See :mod:`multimodal.music_stats` for the statistics.

    Args:
        model: A causal model over ``tokenizer``'s ids.
        tokenizer: Any MIDI tokenizer with ``encode_notes`` / ``decode_notes`` and ``config.time_step``.
        pieces: Note arrays ``(num_notes, 4)`` of held-out pieces.
        primer_seconds: Length of each primer.
        max_new_tokens: Events generated per piece.
        temperature, top_k, top_p: Sampling (see :func:`multimodal.generation.sample_next`).
        seed: Seeds piece ``i``'s sampling with ``seed + i``.

    Returns:
        The pooled statistics of the generated and of the real continuations, and the generated
        note arrays (primer included).
    """
    device = next(model.parameters()).device
    step = tokenizer.config.time_step
    cut_step = round(primer_seconds / step)
    cut = cut_step * step
    generated, reference, samples = ExcerptStats(), ExcerptStats(), []
    for index, notes in enumerate(pieces):
        real = tokenizer.decode_notes(tokenizer.encode_notes(notes))
        before_cut = np.rint(real[:, 1] / step) < cut_step  # onsets on the tokenizer's grid, compared exactly
        primer = primer_ids(real[before_cut], tokenizer, cut)
        generator = torch.Generator(device=device).manual_seed(seed + index)
        tokens = generate(
            model, torch.tensor([primer], device=device), max_new_tokens, temperature=temperature, top_k=top_k,
            top_p=top_p, eos_id=tokenizer.eos_id, generator=generator,
        )[0]  # fmt: skip
        sample = tokenizer.decode_notes(tokens)
        samples.append(sample)
        continuation = _without(sample, tokenizer.decode_notes(primer))
        end = max(cut, float(continuation[:, 2].max(initial=cut)))
        generated = generated + excerpt_stats(continuation, cut, end, select=False)
        real_end = min(end, float(real[:, 2].max(initial=cut)))
        reference = reference + excerpt_stats(real[~before_cut], cut, max(real_end, cut), select=False)
    return generated, reference, samples


def _without(notes: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """``notes`` minus the notes of ``removed`` (matched by pitch and onset, each used once)."""
    left = {}
    for pitch, onset in np.rint(removed[:, :2] * 1e6).astype(np.int64).tolist():
        left[pitch, onset] = left.get((pitch, onset), 0) + 1
    keep = np.ones(len(notes), dtype=bool)
    for index, (pitch, onset) in enumerate(np.rint(notes[:, :2] * 1e6).astype(np.int64).tolist()):
        if left.get((pitch, onset), 0):
            left[pitch, onset] -= 1
            keep[index] = False
    return notes[keep]


def longest_note(pieces: list[np.ndarray]) -> float:
    """The longest note duration in seconds over ``pieces`` (note arrays)."""
    return max((float((notes[:, 2] - notes[:, 1]).max(initial=0.0)) for notes in pieces), default=0.0)


@dataclass
class MusicScore:
    """Summed negative log-likelihood of some music and the units it is divided by."""

    nll: float  # nats
    events: int  # scored tokens (every event of each piece and its EOS)
    notes: int  # notes of the pieces, before tokenization
    seconds: float  # summed lengths of the pieces

    @property
    def per_event(self) -> float:
        """Nats per event (comparable only between models of one vocabulary)."""
        return self.nll / max(self.events, 1)

    @property
    def per_note(self) -> float:
        """Nats per note: comparable across vocabularies."""
        return self.nll / max(self.notes, 1)

    @property
    def per_second(self) -> float:
        """Nats per second of music: comparable across vocabularies."""
        return self.nll / max(self.seconds, 1e-9)

    def __add__(self, other: MusicScore) -> MusicScore:
        return MusicScore(self.nll + other.nll, self.events + other.events, self.notes + other.notes,
                          self.seconds + other.seconds)  # fmt: skip


@torch.inference_mode()
def score_music(model: nn.Module, tokenizer: MidiTokenizer, notes: np.ndarray, seq_len: int, batch_size: int = 8) -> MusicScore:
    """Scores one piece ``(num_notes, 4)`` as validation does: ``[BOS] + events + [EOS]`` in windows of
    ``seq_len`` that predict every token once (:class:`~multimodal.data.music.MidiPieceWindows`)."""
    if seq_len < 1 or batch_size < 1:
        raise ValueError(f"seq_len and batch_size must be >= 1, got seq_len={seq_len}, batch_size={batch_size}")
    windows = MidiPieceWindows(MidiCorpus(["piece"], [notes]), tokenizer, seq_len)
    device = next(model.parameters()).device
    nll = 0.0
    was_training = model.training
    model.eval()
    for start in range(0, len(windows), batch_size):
        batch = torch.stack([windows[i] for i in range(start, min(start + batch_size, len(windows)))]).to(device)
        targets = batch[:, 1:].masked_fill(batch[:, 1:] == tokenizer.pad_id, -100)
        nll += float(model.loss(batch[:, :-1], targets, ignore_index=-100, reduction="sum"))
    model.train(was_training)
    return MusicScore(nll, windows.num_targets, windows.num_notes, windows.seconds)

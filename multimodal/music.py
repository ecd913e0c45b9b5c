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

from multimodal.audio import midi_to_waveform, spectrogram_png, write_wav
from multimodal.data.music import MidiCorpus, MidiPieceWindows
from multimodal.generation import generate
from multimodal.music_stats import ExcerptStats, excerpt_stats
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
) -> list[Path]:
    """Samples continuations of ``primer`` and writes ``sample_{i}.mid``, ``.png`` (and ``.wav``).

    The piano roll draws the primer in blue and the continuation in orange. Generation uses the
    model's KV cache. Returns the MIDI paths.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    device = next(model.parameters()).device
    prompt = torch.tensor([primer] * num_samples, device=device)
    tokens = generate(
        model, prompt, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
        eos_id=tokenizer.eos_id, generator=generator, progress=progress,
    )  # fmt: skip
    primer_end = tokenizer.decode(primer).get_end_time()
    written = []
    for index, row in enumerate(tokens.tolist()):
        midi = tokenizer.decode(row)
        path = out_dir / f"sample_{index}.mid"
        midi.write(str(path))
        piano_roll_png(midi, path.with_suffix(".png"), primer_end_seconds=primer_end,
                       title=f"sample {index}: primer (blue) and continuation (orange)")  # fmt: skip
        if audio:
            waveform = midi_to_waveform(midi, sample_rate)
            write_wav(path.with_suffix(".wav"), waveform, sample_rate)
            if waveform.numel() > 2048:  # a spectrogram needs at least one FFT window
                spectrogram_png(waveform, sample_rate, out_dir / f"sample_{index}_spectrogram.png")
        written.append(path)
    return written


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

    For every piece the model continues its primer once (KV-cached, stopping at EOS or after
    ``max_new_tokens`` events); the generated continuation is the notes that begin after the
    primer, up to the last generated event. The reference is the same piece's real continuation
    over the same number of seconds (or to the piece's end). See :mod:`multimodal.music_stats`.

    Args:
        model: A causal model over ``tokenizer``'s ids.
        tokenizer: Performance-event or any tokenizer with ``encode_notes`` / ``decode_notes``.
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
    generated, reference, samples = ExcerptStats(), ExcerptStats(), []
    for index, notes in enumerate(pieces):
        primer = primer_ids(notes, tokenizer, primer_seconds)
        generator = torch.Generator(device=device).manual_seed(seed + index)
        tokens = generate(
            model, torch.tensor([primer], device=device), max_new_tokens, temperature=temperature, top_k=top_k,
            top_p=top_p, eos_id=tokenizer.eos_id, generator=generator,
        )[0]  # fmt: skip
        sample = tokenizer.decode_notes(tokens)
        samples.append(sample)
        start = float(tokenizer.decode_notes(primer)[:, 2].max(initial=0.0))
        end = float(sample[:, 2].max(initial=start))
        generated = generated + excerpt_stats(sample, start, end)
        piece_end = float(notes[:, 2].max(initial=primer_seconds))
        real_end = min(primer_seconds + max(end - start, 0.0), piece_end)
        reference = reference + excerpt_stats(notes, primer_seconds, max(real_end, primer_seconds))
    return generated, reference, samples


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

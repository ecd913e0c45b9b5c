"""Music continuation end to end: primer notes -> model -> MIDI, piano roll and audio files.

No Lightning here: any causal model over :class:`~multimodal.tokenizers.midi.MidiTokenizer` ids
works, in a notebook or a training callback alike.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from multimodal.audio import midi_to_waveform, spectrogram_png, write_wav
from multimodal.generation import generate
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

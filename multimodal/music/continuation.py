"""Music continuation end to end: primer notes -> model -> MIDI, piano roll and audio files.

No Lightning here: any causal model over :class:`~multimodal.tokenizers.midi.MidiTokenizer` ids
works, in a notebook or a training callback alike. Output files are named here, once
(``sample_{i}`` or a primer's name, with ``.mid``, ``.png``, ``.wav``, ``_spectrogram.png``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from multimodal.audio.synthesis import SINE, check_soundfont, midi_to_waveform, spectrogram_png, write_wav
from multimodal.data.storage import claim_paths
from multimodal.generation.beam import beam_search
from multimodal.generation.config import SamplingConfig
from multimodal.generation.sample import generate, generate_batch
from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.tokenizers.midi_files import read_midi_notes
from multimodal.tokenizers.music_controls import Controls
from multimodal.viz import piano_roll_png


def primer_ids(notes: np.ndarray, tokenizer: MidiTokenizer, seconds: float, controls: Controls | None = None) -> list[int]:
    """``[BOS]`` (+ controls) + events of the first ``seconds`` of a piece; notes still sounding are cut there.

    Args:
        notes: ``(num_notes, 4)`` array of ``[pitch, start_s, end_s, velocity]`` (``(num_notes, 5)``
            with the part last, for a vocabulary with parts).
        tokenizer: The model's tokenizer.
        seconds: Length of the primer; 0 starts from nothing (a piece made only of what the controls say).
        controls: Style, key, meter, density to ask for (:func:`~multimodal.tokenizers.music_controls.parse_controls`);
            None or unknown fields: the model's choice.

    Raises:
        ValueError: Controls asked of a model whose vocabulary has none.
    """
    kept = notes[notes[:, 1] < seconds].copy()
    kept[:, 2] = np.minimum(kept[:, 2], seconds)
    if getattr(tokenizer.config, "controls", False):
        head = [tokenizer.bos_id, *tokenizer.control_ids(controls)]
    elif controls is not None and any(value is not None for value in controls.values()):
        raise ValueError("this model was trained without controls (style, key, meter, density); train one with "
                         "data.controls: true")  # fmt: skip
    else:
        head = [tokenizer.bos_id]
    return [*head, *tokenizer.encode_notes(kept)]


def read_primer(path: str | Path, tokenizer: MidiTokenizer) -> np.ndarray:
    """A MIDI file's notes as ``tokenizer`` reads them: with parts (its tracks in file order), when the
    vocabulary has them, else merged.

    Raises:
        UnusableMidi: Not a usable MIDI file (one line naming it).
        ValueError: More tracks with notes than the vocabulary has parts.
    """
    num_parts = getattr(tokenizer.config, "num_parts", 1)
    if num_parts == 1:
        return read_midi_notes(path)
    notes = read_midi_notes(path, parts=True)
    found = int(notes[:, 4].max()) + 1 if len(notes) else 0
    if found > num_parts:
        raise ValueError(f"{path}: {found} tracks with notes; this model knows {num_parts} parts (one track each)")
    return notes


def continue_music(
    model: nn.Module,
    tokenizer: MidiTokenizer,
    primer: list[int],
    out_dir: str | Path,
    sampling: SamplingConfig | None = None,
    *,
    num_samples: int = 1,
    max_new_tokens: int = 512,
    seed: int | None = None,
    progress: bool = False,
    audio: bool = True,
    sample_rate: int = 16000,
    soundfont: str | Path | None = None,
    overwrite: bool = True,
    **options: Any,
) -> list[Path]:
    """Samples continuations of ``primer`` and writes ``sample_{i}.mid``, ``.png`` (and ``.wav``).

    Tokens are chosen as ``sampling`` says (``options``: its fields as keywords). With
    ``overwrite=False`` nothing is written when any of the files (:func:`sample_files`) exists.

    The piano roll draws the primer in blue and the continuation in orange (a hue per part, the primer pale, for a
    model with parts). The WAV is rendered
    with ``soundfont`` (:func:`~multimodal.audio.synthesis.midi_to_waveform`; ``None``: the default; a
    named file is checked before generating). Generation uses the model's KV cache. With
    ``sampling.num_beams > 1`` the continuations are the ``num_samples`` best hypotheses of a beam search
    (:func:`multimodal.generation.beam.beam_search`) instead of samples. Returns the MIDI paths.
    """
    sampling = SamplingConfig.of(sampling, **options)
    unconditional = unconditional_prompt(tokenizer, primer, sampling)  # before any file: refuses guidance without controls
    names = [f"sample_{index}" for index in range(num_samples)]
    out_dir = prepare_outputs(out_dir, names, overwrite, audio, soundfont)
    device = next(model.parameters()).device
    if sampling.num_beams > 1:
        if seed is not None:
            raise ValueError("num_beams > 1 is deterministic beam search; it does not take seed")
        if num_samples > sampling.num_beams:
            raise ValueError(f"num_samples={num_samples} needs at least as many beams, got num_beams={sampling.num_beams}")
        tokens, _ = beam_search(model, torch.tensor([primer], device=device), max_new_tokens, sampling.num_beams,
                                eos_id=tokenizer.eos_id, num_return_sequences=num_samples,
                                length_penalty=sampling.length_penalty, early_stopping=sampling.early_stopping)  # fmt: skip
    else:
        generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
        prompt = torch.tensor([primer] * num_samples, device=device)
        tokens = generate(model, prompt, max_new_tokens, sampling, eos_id=tokenizer.eos_id, generator=generator,
                          progress=progress, unconditional_prompt=unconditional)  # fmt: skip
    return [_write_sample(tokenizer, row, primer, out_dir / f"{name}.mid", name.replace("_", " "), audio,
                          sample_rate, soundfont) for name, row in zip(names, tokens.tolist(), strict=True)]  # fmt: skip


def unconditional_prompt(tokenizer: MidiTokenizer, prompt: list[int], sampling: SamplingConfig) -> torch.Tensor | None:
    """``(1, len(prompt))``: the prompt with its controls unknown, for ``sampling.guidance_scale != 1``; else None.

    Raises:
        ValueError: Guidance asked of a model without controls (it has nothing to be guided by).
    """
    if sampling.guidance_scale == 1.0:
        return None
    if not getattr(tokenizer.config, "controls", False):
        raise ValueError("guidance_scale: this model has no controls to follow; train one with data.controls: true")
    return torch.tensor([tokenizer.without_controls(prompt)])


SAMPLE_SUFFIXES = (".mid", ".png", ".wav", "_spectrogram.png", ".musicxml", ".svg")
"""The files one continuation named ``NAME`` may write: ``NAME.mid``, its piano roll, its audio and spectrogram, and
its score and its engraving (``multimodal generate --score``)."""


def part_names(tokenizer: MidiTokenizer) -> list[str] | None:
    """The names of a vocabulary's parts, by part (its track names, ``Part <n>`` by default); None for one part."""
    num_parts = getattr(tokenizer.config, "num_parts", 1)
    return [tokenizer.config.part_name(part) for part in range(num_parts)] if num_parts > 1 else None


def sample_files(out_dir: str | Path, name: str) -> list[Path]:
    """Every file a continuation named ``name`` may write in ``out_dir`` (the one place output names are made)."""
    return [Path(out_dir) / f"{name}{suffix}" for suffix in SAMPLE_SUFFIXES]


def prepare_outputs(out_dir: str | Path, names: list[str], overwrite: bool, audio: bool,
                    soundfont: str | Path | None) -> Path:  # fmt: skip
    """Checks a named SoundFont (a wrong file fails before generating), refuses to replace any file the
    outputs ``names`` would write unless ``overwrite`` (:func:`sample_files`), and creates ``out_dir``."""
    if audio and soundfont is not None and str(soundfont).lower() != SINE:
        check_soundfont(soundfont)
    out_dir = Path(out_dir)
    claim_paths([path for name in names for path in sample_files(out_dir, name)], overwrite)
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def write_audio(midi, path: Path, sample_rate: int, soundfont: str | Path | None) -> None:
    """``path``'s WAV and spectrogram (:func:`sample_files`) of a ``PrettyMIDI``, rendered with ``soundfont``."""
    waveform = midi_to_waveform(midi, sample_rate, soundfont)
    write_wav(path.with_suffix(".wav"), waveform, sample_rate)
    if waveform.numel() > 2048:  # a spectrogram needs at least one FFT window
        spectrogram_png(waveform, sample_rate, sample_files(path.parent, path.stem)[3])


def continue_primers(
    model: nn.Module,
    tokenizer: MidiTokenizer,
    primers: dict[str, list[int]],
    out_dir: str | Path,
    sampling: SamplingConfig | None = None,
    *,
    batch_size: int = 8,
    max_new_tokens: int = 512,
    seed: int | None = None,
    audio: bool = True,
    sample_rate: int = 16000,
    soundfont: str | Path | None = None,
    overwrite: bool = True,
    **options: Any,
) -> list[Path]:
    """Continues many primers, ``batch_size`` at a time, into ``<name>.mid``, ``.png`` (and ``.wav``).

    Primers of different lengths share a batch (padded on the left,
    :func:`~multimodal.generation.generate_batch`); each continues as it would alone. ``primers``
    maps an output name to its event ids. Returns the MIDI paths, in the order of ``primers``.
    Sampling only (``sampling``, or its fields as keywords); ``overwrite`` as :func:`continue_music`.
    """
    sampling = SamplingConfig.of(sampling, **options)
    if sampling.num_beams > 1:
        raise ValueError("continue_primers samples; continue one primer with continue_music for beam search")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    out_dir = prepare_outputs(out_dir, list(primers), overwrite, audio, soundfont)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    names, written = list(primers), []
    for start in range(0, len(names), batch_size):
        chunk = names[start : start + batch_size]
        unconditional = [unconditional_prompt(tokenizer, primers[name], sampling) for name in chunk]
        rows = generate_batch(model, [primers[name] for name in chunk], max_new_tokens, sampling,
                              eos_id=tokenizer.eos_id, generator=generator,
                              unconditional_prompts=None if unconditional[0] is None else [u[0] for u in unconditional])  # fmt: skip
        for name, row in zip(chunk, rows, strict=True):
            written.append(_write_sample(tokenizer, row.tolist(), primers[name], out_dir / f"{name}.mid", name,
                                         audio, sample_rate, soundfont))  # fmt: skip
    return written


def _write_sample(
    tokenizer: MidiTokenizer, ids: list[int], primer: list[int], path: Path, title: str, audio: bool, sample_rate: int,
    soundfont: str | Path | None = None,
) -> Path:
    """Writes one continuation as MIDI, its piano roll (:func:`~multimodal.viz.piano_roll_png`: the primer blue
    and the continuation orange, or a hue per part, the primer pale) and, with ``audio``, WAV."""
    midi = tokenizer.decode(ids)
    midi.write(str(path))
    num_parts = getattr(tokenizer.config, "num_parts", 1)
    drawn = tokenizer.decode_notes(ids) if num_parts > 1 else midi  # parts by their index, coloured alike in every sample
    piano_roll_png(drawn, path.with_suffix(".png"), primer_end_seconds=tokenizer.decode(primer).get_end_time(),
                   title=f"{title}: primer and continuation", part_names=part_names(tokenizer))  # fmt: skip
    if audio:
        write_audio(midi, path, sample_rate, soundfont)
    return path

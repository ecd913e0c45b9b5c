"""Listening to MIDI: render to a waveform, write a WAV file, draw a spectrogram.

Rendering plays each part of the MIDI through a SoundFont with ``tinysoundfont`` (TinySoundFont,
a self-contained C library; offline, into a buffer, no audio device): the General MIDI program
of each pretty_midi instrument, bank 128 for drum parts. The SoundFont is the one named, else
``$MULTIMODAL_SOUNDFONT``, else the ``TimGM6mb.sf2`` that pretty_midi ships (GPL-2, Tim
Brechbill; read at run time from the pretty_midi install, not redistributed). When
``tinysoundfont`` does not import, or the default SoundFont is missing or unreadable, a warning
(once per reason) names why and pretty_midi's sine-wave synthesis renders instead; a SoundFont
named explicitly that cannot be read is a ``ValueError``.

WAV files are written with the standard library's ``wave`` module as 16-bit PCM: torchaudio
>= 2.9 hands ``torchaudio.save`` to TorchCodec, which this project does not install, so the
stdlib path is the one that works everywhere. Spectrograms use ``torchaudio.transforms`` when
torchaudio imports and the identical ``torch.stft`` computation when it does not.
"""

from __future__ import annotations

import functools
import os
import warnings
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pretty_midi
import torch

from multimodal.viz import new_figure, save_figure

PEAK = 0.9  # rendered waveforms are scaled to this peak amplitude (unless a gain is given)
SOUNDFONT_ENV = "MULTIMODAL_SOUNDFONT"  # the SoundFont every WAV is rendered with by default
SINE = "sine"  # as a SoundFont name: pretty_midi's sine waves, no SoundFont
TAIL_SECONDS = 2.0  # longest release rendered after the last note ends (trimmed at -60 dB)
SUSTAIN_PEDAL = 64  # MIDI controller number
# Debian (bookworm) packages of General MIDI SoundFonts larger than TimGM6mb, best first:
# (package, file it installs, about). `multimodal data soundfonts` lists them.
DEBIAN_SOUNDFONTS = (
    ("fluid-soundfont-gm", "/usr/share/sounds/sf2/FluidR3_GM.sf2", "Fluid R3 GM, 142 MiB, MIT"),
    ("musescore-general-soundfont", "/usr/share/sounds/sf3/MuseScore_General_Full.sf3",
     "MuseScore General (HQ), 82 MiB, MIT"),
    ("musescore-general-soundfont-small", "/usr/share/sounds/sf3/MuseScore_General_Lite.sf3",
     "MuseScore General (lite), 38 MiB, MIT"),
)  # fmt: skip
_warned: set[str] = set()


def midi_to_waveform(
    midi: pretty_midi.PrettyMIDI | str | Path,
    sample_rate: int = 16000,
    soundfont: str | Path | None = None,
    gain: float | None = None,
) -> torch.Tensor:
    """Renders MIDI to mono audio through a SoundFont (sine waves when none can be used).

    Args:
        midi: A ``PrettyMIDI`` or a path to a MIDI file.
        sample_rate: Samples per second.
        soundfont: A ``.sf2`` / ``.sf3`` file; ``"sine"`` for pretty_midi's sine waves; ``None``
            for :func:`default_soundfont` (``$MULTIMODAL_SOUNDFONT``, else pretty_midi's
            ``TimGM6mb.sf2``).
        gain: ``None`` scales the result to a peak of 0.9; a number is the SoundFont's output
            gain in dB (the sine waves' too) and keeps the level as rendered, so renders compare
            in loudness (``write_wav`` clips beyond ±1).

    Returns:
        float32 tensor ``(num_samples,)`` (all zeros if silent; empty if the MIDI holds no notes).

    Raises:
        ValueError: ``soundfont`` names a file that is not a readable SoundFont.
    """
    if not isinstance(midi, pretty_midi.PrettyMIDI):
        midi = pretty_midi.PrettyMIDI(str(midi))
    if not any(instrument.notes for instrument in midi.instruments):
        return torch.zeros(0)
    synth = _soundfont_synth(soundfont, sample_rate, 0.0 if gain is None else gain)
    if synth is None:
        audio = np.asarray(midi.synthesize(fs=sample_rate), dtype=np.float32)
        if gain is not None:
            audio = audio * np.float32(10.0 ** (gain / 20.0))
    else:
        audio = _render(midi, synth, sample_rate)
    if gain is None:
        peak = float(np.abs(audio).max()) if audio.size else 0.0
        if peak > 0:
            audio = audio * (PEAK / peak)
    return torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))


class SoundFontRenderer:
    """One SoundFont loaded once, rendering many pieces: for data sets of thousands of rendered clips.

    :func:`midi_to_waveform` loads its SoundFont on every call (0.5-2.4 s for the Debian ones), right
    for one WAV; a data set renders each clip through the same loaded synthesizer, silenced between
    clips (``sounds_off`` and 0.1 s played out) so no release leaks from one clip into the next. No sine fallback: a
    clip that should sound like an instrument and does not is an error, not a warning.

    Args:
        soundfont: A ``.sf2`` / ``.sf3`` file.
        sample_rate: Samples per second.

    Raises:
        ValueError: The file is not a readable SoundFont, or ``tinysoundfont`` does not import.
    """

    def __init__(self, soundfont: str | Path, sample_rate: int = 16000) -> None:
        if str(soundfont).lower() == SINE:
            raise ValueError(f"{soundfont}: a SoundFontRenderer needs a SoundFont file, not sine waves")
        self.soundfont, self.sample_rate = Path(soundfont).expanduser(), int(sample_rate)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._synth = _soundfont_synth(self.soundfont, self.sample_rate, 0.0)
        if self._synth is None:
            raise ValueError(f"{soundfont}: cannot render: tinysoundfont does not import "
                             "(`pip install --no-deps tinysoundfont==0.3.7`)")  # fmt: skip

    def __call__(self, midi: pretty_midi.PrettyMIDI) -> torch.Tensor:
        """The piece as rendered (0 dB gain, not rescaled): float32 ``(num_samples,)``; empty without notes."""
        if not any(instrument.notes for instrument in midi.instruments):
            return torch.zeros(0)
        self._synth.sounds_off()  # TinySoundFont fades sounding voices out over a few ms: play that out first
        flush = np.zeros((self.sample_rate // 10, 2), dtype=np.float32)
        self._synth.generate_simple(len(flush), memoryview(flush).cast("B"))
        return torch.from_numpy(np.ascontiguousarray(_render(midi, self._synth, self.sample_rate)))


def bundled_soundfont() -> Path:
    """pretty_midi's General MIDI SoundFont ``TimGM6mb.sf2`` (GPL-2, Tim Brechbill), in its install."""
    return Path(pretty_midi.__file__).with_name("TimGM6mb.sf2")


BUNDLED = "bundled"  # as a SoundFont name: pretty_midi's TimGM6mb.sf2


def resolve_soundfont(name: str | Path) -> str:
    """The path of a SoundFont named in a config: ``bundled`` (:func:`bundled_soundfont`) or a checked file."""
    if str(name) == BUNDLED:
        return str(bundled_soundfont())
    return str(check_soundfont(name))


def default_soundfont() -> str:
    """``$MULTIMODAL_SOUNDFONT`` if set (a file or ``"sine"``), else :func:`bundled_soundfont`."""
    return os.environ.get(SOUNDFONT_ENV, "").strip() or str(bundled_soundfont())


def check_soundfont(path: str | Path) -> Path:
    """``path`` if it is a readable file that begins like a SoundFont (RIFF ``sfbk``), else one-line ValueError.

    Cheap (reads 12 bytes): for options checked before a long run; :func:`midi_to_waveform` parses
    the whole file.
    """
    path = Path(path).expanduser()
    try:
        with path.open("rb") as handle:
            head = handle.read(12)
    except OSError as error:
        raise _not_a_soundfont(path, error.strerror or type(error).__name__) from None
    if head[:4] != b"RIFF" or head[8:12] != b"sfbk":
        raise _not_a_soundfont(path, "no RIFF sfbk header: not .sf2/.sf3")
    return path


def find_soundfonts() -> list[tuple[str, Path, str, bool]]:
    """The Debian SoundFont packages as ``(package, file, about, installed)``, best first."""
    return [(package, Path(file), about, Path(file).is_file()) for package, file, about in DEBIAN_SOUNDFONTS]


def _not_a_soundfont(path: Path, reason: str) -> ValueError:
    return ValueError(f"{path}: not a readable SoundFont ({reason})")


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"{reason}; rendering MIDI as sine waves instead", stacklevel=4)


def _soundfont_synth(soundfont: str | Path | None, sample_rate: int, gain: float) -> Any:
    """A ``tinysoundfont.Synth`` with the SoundFont loaded, or ``None`` for the sine path (warned once)."""
    named = soundfont is not None
    source = str(soundfont) if named else default_soundfont()
    if source.lower() == SINE:
        return None
    path = Path(source).expanduser()
    origin = f" (${SOUNDFONT_ENV})" if not named and os.environ.get(SOUNDFONT_ENV, "").strip() else ""
    try:
        check_soundfont(path)
    except ValueError as error:
        if named:
            raise
        _warn_once(f"{error}{origin}")
        return None
    try:
        import tinysoundfont
    except (ImportError, OSError) as error:  # OSError: the compiled extension does not load
        _warn_once(f"tinysoundfont does not import ({error}); `pip install --no-deps tinysoundfont==0.3.7`")
        return None
    synth = tinysoundfont.Synth(gain=gain, samplerate=int(sample_rate))
    try:
        synth.sfload(str(path))
    except (RuntimeError, OSError):
        error = _not_a_soundfont(path, "tinysoundfont cannot parse it")
        if named:
            raise error from None
        _warn_once(f"{error}{origin}")
        return None
    return synth


def _render(midi: pretty_midi.PrettyMIDI, synth: Any, sample_rate: int) -> np.ndarray:
    """Plays every part of ``midi`` through ``synth`` (a loaded ``tinysoundfont.Synth``); mono float32.

    Each instrument gets its own channel (its General MIDI program; drums: bank 128) with its
    notes, pitch bends and control changes; events at one sample apply in the order control
    changes and bends, note-offs, note-ons. While the sustain pedal (controller 64) is down, a
    channel's note-offs wait for its release. The buffer runs to the end of the last note plus the
    release, up to :data:`TAIL_SECONDS`, cut where it falls below -60 dB of the peak.
    """
    sfid = next(iter(synth.soundfonts))
    events: list[tuple[int, int, int, int, int, int]] = []  # (sample, order, channel, kind, a, b)
    parts = [instrument for instrument in midi.instruments if instrument.notes]
    for channel, instrument in enumerate(parts):
        synth.channel.setdefault(channel, sfid)  # tinysoundfont maps channels 0-15; TinySoundFont takes any
        for program in (instrument.program, 0):  # a SoundFont without the program: program 0
            try:
                synth.program_change(channel, program, instrument.is_drum)  # drums: bank 128
                break
            except RuntimeError:
                continue
        else:
            continue  # the SoundFont has neither: the part stays silent
        for change in instrument.control_changes:
            events.append((round(change.time * sample_rate), 0, channel, 0, change.number, change.value))
        for bend in instrument.pitch_bends:
            events.append((round(bend.time * sample_rate), 0, channel, 1, bend.pitch + 8192, 0))
        for note in instrument.notes:
            start = round(note.start * sample_rate)
            events.append((start, 2, channel, 2, note.pitch, note.velocity))
            events.append((max(round(note.end * sample_rate), start + 1), 1, channel, 3, note.pitch, 0))
    events.sort()
    end = max((sample for sample, _, _, kind, _, _ in events if kind == 3), default=0)
    total = end + round(TAIL_SECONDS * sample_rate)
    out = np.zeros((total, 2), dtype=np.float32)  # stereo interleaved, as TinySoundFont renders
    position = 0
    held: dict[int, set[int] | None] = {}  # channel -> keys released under a pressed sustain pedal
    for sample, _, channel, kind, a, b in events:
        sample = min(max(sample, 0), total)
        if sample > position:
            synth.generate_simple(sample - position, memoryview(out[position:sample]).cast("B"))
            position = sample
        if kind == 0:
            synth.control_change(channel, a, b)
            if a == SUSTAIN_PEDAL:  # TinySoundFont ignores it: hold the note-offs here
                if b >= 64:
                    held[channel] = held.get(channel) or set()
                else:
                    for key in held.pop(channel, None) or ():
                        synth.noteoff(channel, key)
        elif kind == 1:
            synth.pitchbend(channel, min(max(a, 0), 16383))
        elif kind == 2:
            synth.noteon(channel, a, b)
        elif held.get(channel) is not None:
            held[channel].add(a)
        else:
            synth.noteoff(channel, a)
    if total > position:
        synth.generate_simple(total - position, memoryview(out[position:]).cast("B"))
    audio = out.mean(axis=1)
    loud = np.flatnonzero(np.abs(audio) > 1e-3 * float(np.abs(audio).max() or 1.0))
    return audio[: max(end, int(loud[-1]) + 1 if loud.size else end)]


def write_wav(path: str | Path, waveform: Any, sample_rate: int) -> Path:
    """Writes a 16-bit PCM WAV file.

    Args:
        path: File to write (folders are created).
        waveform: Tensor or array, ``(num_samples,)`` or ``(channels, num_samples)``, values in
            [-1, 1] (clipped).
        sample_rate: Samples per second.

    Returns:
        The path written.
    """
    audio = torch.as_tensor(waveform, dtype=torch.float32).detach().cpu()
    if audio.ndim == 1:
        audio = audio[None]
    if audio.ndim != 2:
        raise ValueError(
            f"waveform must be (num_samples,) or (channels, num_samples), got {tuple(audio.shape)}"
        )
    pcm = (audio.clamp(-1.0, 1.0) * 32767.0).round().to(torch.int16).T.contiguous().numpy()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(audio.shape[0])
        handle.setsampwidth(2)
        handle.setframerate(int(sample_rate))
        handle.writeframes(pcm.astype("<i2").tobytes())
    return path


def read_wav(path: str | Path) -> tuple[torch.Tensor, int]:
    """Reads a 16-bit PCM WAV file; returns float32 ``(channels, num_samples)`` in [-1, 1] and the sample rate."""
    with wave.open(str(path), "rb") as handle:
        if handle.getsampwidth() != 2:
            raise ValueError(f"{path} has {8 * handle.getsampwidth()}-bit samples; only 16-bit PCM is read")
        channels, sample_rate = handle.getnchannels(), handle.getframerate()
        frames = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    audio = torch.from_numpy(frames.reshape(-1, channels).T.astype(np.float32) / 32767.0)
    return audio, sample_rate


def power_spectrogram(waveform: torch.Tensor, n_fft: int = 1024, hop_length: int = 256) -> torch.Tensor:
    """Power spectrogram ``|STFT|²`` with a Hann window, centred frames, reflect padding.

    Args:
        waveform: ``(num_samples,)``, longer than ``n_fft // 2``.

    Returns:
        ``(n_fft // 2 + 1, num_frames)`` with ``num_frames = num_samples // hop_length + 1``.
    """
    waveform = torch.as_tensor(waveform, dtype=torch.float32)
    transforms = _torchaudio_transforms()
    if transforms is not None:
        return transforms.Spectrogram(n_fft=n_fft, hop_length=hop_length, power=2.0)(waveform)
    window = torch.hann_window(n_fft)
    stft = torch.stft(
        waveform, n_fft, hop_length, window=window, center=True, pad_mode="reflect", return_complex=True
    )
    return stft.abs().pow(2.0)


def spectrogram_png(
    waveform: torch.Tensor, sample_rate: int, path: str | Path, n_fft: int = 1024, hop_length: int = 256
) -> Path:
    """Draws the power spectrogram in dB (80 dB range) of ``waveform`` ``(num_samples,)``; returns the path."""
    waveform = torch.as_tensor(waveform, dtype=torch.float32).reshape(-1)
    if len(waveform) <= n_fft // 2:
        raise ValueError(f"waveform of {len(waveform)} samples is too short for n_fft={n_fft}")
    power = power_spectrogram(waveform, n_fft, hop_length)
    decibels = 10.0 * torch.log10(power.clamp(min=1e-10))
    decibels = decibels.clamp(min=float(decibels.max()) - 80.0)
    figure, axes = new_figure(width=10.0, height=4.0)
    duration = len(waveform) / sample_rate
    image = axes.imshow(
        decibels.numpy(),
        origin="lower",
        aspect="auto",
        cmap="magma",
        extent=(0.0, duration, 0.0, sample_rate / 2),
    )
    figure.colorbar(image, ax=axes, label="power (dB)")
    axes.set_xlabel("time (s)")
    axes.set_ylabel("frequency (Hz)")
    return save_figure(figure, path)


@functools.cache
def _torchaudio_transforms() -> Any:
    """``torchaudio.transforms`` if torchaudio imports (its C++ library must match torch), else ``None``."""
    try:
        import torchaudio.transforms
    except (ImportError, OSError):
        return None
    return torchaudio.transforms

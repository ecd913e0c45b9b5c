"""What a transcription model reads and writes: the spectrogram, the segmenting, the note events. One JSON file.

A transcription checkpoint or model folder must know how audio became its input (sample rate, mel
bands, normalisation), how long pieces were cut (segment and look-ahead seconds) and how notes
became ids; :class:`TranscriptionTokenizer` holds all three so ``multimodal transcribe`` needs
nothing but the checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from multimodal.tokenizers.audio import AudioSpectrogramTokenizer
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig

__all__ = ["TranscriptionTokenizer"]


@dataclass
class TranscriptionTokenizer:
    """Audio in (:class:`AudioSpectrogramTokenizer`), note events out (:class:`MidiDurationTokenizer`), in segments.

    Attributes:
        audio: Waveform -> normalised log-mel spectrogram.
        midi: Notes <-> ids (one part; ``num_velocity_bins=1`` when velocity is not transcribed).
        segment_seconds: Audio a segment writes the notes of (the onsets in it).
        lookahead_seconds: Audio after the segment the model also hears (to end its last notes).
        max_tokens: Most ids written per segment (BOS and EOS not counted).
    """

    audio: AudioSpectrogramTokenizer
    midi: MidiDurationTokenizer
    segment_seconds: float = 2.0
    lookahead_seconds: float = 1.0
    max_tokens: int = 384

    def __post_init__(self) -> None:
        if self.segment_seconds <= 0 or self.lookahead_seconds < 0 or self.max_tokens < 1:
            raise ValueError(f"segment_seconds={self.segment_seconds} must be > 0, lookahead_seconds="
                             f"{self.lookahead_seconds} >= 0 and max_tokens={self.max_tokens} >= 1")  # fmt: skip

    @property
    def vocab_size(self) -> int:
        """Ids of the note-event vocabulary."""
        return self.midi.vocab_size

    @property
    def pad_id(self) -> int:
        return self.midi.pad_id

    @property
    def bos_id(self) -> int:
        return self.midi.bos_id

    @property
    def eos_id(self) -> int:
        return self.midi.eos_id

    @property
    def frames_per_second(self) -> float:
        """Spectrogram frames per second of audio."""
        return self.audio.sample_rate / self.audio.hop_length

    @property
    def window_seconds(self) -> float:
        """Audio one segment's model input covers: ``segment_seconds + lookahead_seconds``."""
        return self.segment_seconds + self.lookahead_seconds

    def save(self, path: str | Path) -> None:
        """Writes every parameter as one JSON file."""
        state = {"type": type(self).__name__, "version": 1, "audio": asdict(self.audio),
                 "midi": asdict(self.midi.config), "segment_seconds": self.segment_seconds,
                 "lookahead_seconds": self.lookahead_seconds, "max_tokens": self.max_tokens}  # fmt: skip
        Path(path).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> TranscriptionTokenizer:
        """Reads a tokenizer written by :meth:`save`; unknown fields are an error."""
        state = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(state, dict) or state.get("type") != cls.__name__:
            raise ValueError(f"{path}: not a {cls.__name__} JSON")
        try:
            return cls(AudioSpectrogramTokenizer(**state["audio"]),
                       MidiDurationTokenizer(MidiDurationTokenizerConfig(**state["midi"])),
                       float(state["segment_seconds"]), float(state["lookahead_seconds"]), int(state["max_tokens"]))  # fmt: skip
        except (KeyError, TypeError) as error:
            raise ValueError(f"{path}: {error}") from error

"""Sheet music as the models read it: a MusicXML or ABC file (read by music21) written as a MIDI file.

Musicians keep melodies as sheet music: MusicXML from MuseScore, Finale, Sibelius or Dorico, ABC for folk tunes.
:func:`sheet_music_to_midi` writes one as a MIDI file the rest of the toolkit reads — a track per part, named as
the part (``--melody-track Soprano``), at the score's tempo (music21's default where it marks none), with its time
and key signatures — and marks its pickup as a short first bar (:func:`~multimodal.music.bars.beat_grid`), which
music21's own MIDI files leave out, so the bars and scores of what is written from it count as the sheet does.
Repeats are played out, as music21 plays them (a jig's ``:|`` twice through).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pretty_midi

from multimodal.music.bars import beat_grid
from multimodal.music.score import timed

SHEET_MUSIC_SUFFIXES = (".musicxml", ".mxl", ".xml", ".abc")
"""The files :func:`sheet_music_to_midi` reads: MusicXML (plain or compressed) and ABC."""


def is_sheet_music(path: str | Path) -> bool:
    """Whether ``path`` names a MusicXML or ABC file (by its suffix)."""
    return Path(path).suffix.lower() in SHEET_MUSIC_SUFFIXES


def sheet_music_to_midi(path: str | Path, midi_path: str | Path) -> Path:
    """Writes the MusicXML or ABC file ``path`` as the MIDI file ``midi_path`` (the first tune of an ABC book; folders
    are created).

    Returns:
        ``midi_path``.

    Raises:
        FileNotFoundError: No such file.
        ValueError: music21 cannot read it, or it has no notes (the message names ``path``).
    """
    from music21 import converter, stream

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(2, "no such file", str(path))
    try:
        score = converter.parse(str(path), format="abc" if path.suffix.lower() == ".abc" else "musicxml")
        if isinstance(score, stream.Opus):  # an ABC book: its first tune
            score = score.scores[0]
        with tempfile.TemporaryDirectory() as folder:
            score.write("midi", fp=str(Path(folder) / "sheet.mid"))
            midi = pretty_midi.PrettyMIDI(str(Path(folder) / "sheet.mid"))
    except Exception as error:  # music21 raises what its parsers meet
        detail = " ".join(str(error).split())[:120] or type(error).__name__
        raise ValueError(f"{path}: not readable sheet music ({detail})") from None
    if not any(track.notes for track in midi.instruments):
        raise ValueError(f"{path}: the sheet music has no notes")
    Path(midi_path).parent.mkdir(parents=True, exist_ok=True)
    timed(midi, beat_grid(midi, pickup=_pickup_beats(score))).write(str(midi_path))
    return Path(midi_path)


def _pickup_beats(score) -> float:
    """The length of a music21 score's pickup in beats of its first meter (its first bar's left padding; 0: none)."""
    first = score.recurse().getElementsByClass("Measure").first()
    if first is None or not first.paddingLeft or first.barDuration is None:
        return 0.0
    quarters = first.barDuration.quarterLength - first.paddingLeft
    meter = first.timeSignature or score.recurse().getElementsByClass("TimeSignature").first()
    return float(quarters) * (meter.denominator if meter is not None else 4) / 4.0

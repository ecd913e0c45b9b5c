"""Sheet music as the models read it: a MusicXML or ABC file (read by music21) written as a MIDI file.

Musicians keep melodies as sheet music: MusicXML from MuseScore, Finale, Sibelius or Dorico, ABC for folk tunes.
:func:`sheet_music_to_midi` writes one as a MIDI file the rest of the toolkit reads. The notes are read as the
corpus the models trained on was read (:func:`~multimodal.data.music21_scores.score_piece`: from music21's own
note objects, ties joined, at concert pitch, repeats played once as written), a track per part named as the part
(``--melody-track Soprano``). The file's beats are the sheet's, in quarter notes: its metronome marks (120 a
minute before the first, as music21 plays a score), time and key signatures, and its pickup written as a short
first bar (:func:`~multimodal.music.bars.beat_grid`), so the bars and scores of what is written from it count as
the sheet does. (music21's own MIDI writer is not used: it drops the pickup, drops a note where two of one pitch
overlap in a part, and plays repeats out, which the training pieces never did.)
"""

from __future__ import annotations

import io
from pathlib import Path

import mido
import pretty_midi

from multimodal.data.music21_scores import SHEET_MUSIC_SUFFIXES, score_piece, tempo_marks
from multimodal.music.bars import beat_grid
from multimodal.music.score import timed

TICKS_PER_QUARTER = 960
"""The resolution of the beats written: quarter-note offsets of sixteenth triplets and finer land on whole ticks."""

MAJOR_KEY_OF_SHARPS = {-7: "Cb", -6: "Gb", -5: "Db", -4: "Ab", -3: "Eb", -2: "Bb", -1: "F", 0: "C", 1: "G", 2: "D",
                       3: "A", 4: "E", 5: "B", 6: "F#", 7: "C#"}  # fmt: skip
"""The key signature of each count of sharps (flats negative), named as MIDI files name it."""


def is_sheet_music(path: str | Path) -> bool:
    """Whether ``path`` names a MusicXML, ABC or Humdrum file (by its suffix, :data:`SHEET_MUSIC_SUFFIXES`)."""
    return Path(path).suffix.lower() in SHEET_MUSIC_SUFFIXES


def sheet_music_to_midi(path: str | Path, midi_path: str | Path) -> Path:
    """Writes the MusicXML, ABC or Humdrum file ``path`` as the MIDI file ``midi_path`` (the first tune of an ABC book;
    folders are created).

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
        score = converter.parse(str(path))  # the format from the suffix
        if isinstance(score, stream.Opus):  # an ABC book: its first tune
            score = score.scores[0]
        if not isinstance(score, stream.Score):  # a lone part
            score = stream.Score([score])
        meta, notes = score_piece(score, path.stem)
        grid = _beats_of(score)
    except Exception as error:  # music21 raises what its parsers meet
        detail = " ".join(str(error).split())[:120] or type(error).__name__
        raise ValueError(f"{path}: not readable sheet music ({detail})") from None
    if not len(notes):
        raise ValueError(f"{path}: the sheet music has no notes")
    midi = pretty_midi.PrettyMIDI()
    for index, part in enumerate(meta["parts"]):
        track = pretty_midi.Instrument(_program(part.get("program")), name=(part.get("name") or "").strip())
        track.notes = [pretty_midi.Note(int(velocity), int(pitch), start, end)
                       for pitch, start, end, velocity, _ in notes[notes[:, 4] == index]]  # fmt: skip
        if track.notes:
            midi.instruments.append(track)
    Path(midi_path).parent.mkdir(parents=True, exist_ok=True)
    timed(midi, beat_grid(grid, pickup=_pickup_beats(score))).write(str(midi_path))
    return Path(midi_path)


def _beats_of(score) -> pretty_midi.PrettyMIDI:
    """A music21 score's metronome marks, time signatures and key signatures as a MIDI file's (no notes), read back
    by pretty_midi: its beats and bars at the sheet's quarter-note offsets."""
    first_part = score.parts[0] if score.parts else score
    events = [(offset, mido.MetaMessage("set_tempo", tempo=mido.bpm2tempo(bpm))) for offset, bpm in tempo_marks(score)]
    for meter in first_part.recurse().getElementsByClass("TimeSignature"):
        events.append((float(meter.getOffsetInHierarchy(score)),
                       mido.MetaMessage("time_signature", numerator=meter.numerator, denominator=meter.denominator)))  # fmt: skip
    for signature in first_part.recurse().getElementsByClass("KeySignature"):
        if signature.sharps in MAJOR_KEY_OF_SHARPS:
            events.append((float(signature.getOffsetInHierarchy(score)),
                           mido.MetaMessage("key_signature", key=MAJOR_KEY_OF_SHARPS[signature.sharps])))  # fmt: skip
    track, now = mido.MidiTrack(), 0
    for offset, message in sorted(events, key=lambda event: event[0]):
        tick = round(offset * TICKS_PER_QUARTER)
        track.append(message.copy(time=tick - now))
        now = tick
    file = mido.MidiFile(ticks_per_beat=TICKS_PER_QUARTER)
    file.tracks.append(track)
    buffer = io.BytesIO()
    file.save(file=buffer)
    buffer.seek(0)
    return pretty_midi.PrettyMIDI(buffer)


def _program(program: int | None) -> int:
    """A part's General MIDI program as music21 names it (None: the piano)."""
    return int(program) if program is not None and 0 <= int(program) <= 127 else 0


def _pickup_beats(score) -> float:
    """The length of a music21 score's pickup in beats of its first meter (its first bar's left padding; 0: none)."""
    first = score.recurse().getElementsByClass("Measure").first()
    if first is None or not first.paddingLeft or first.barDuration is None:
        return 0.0
    quarters = first.barDuration.quarterLength - first.paddingLeft
    meter = first.timeSignature or score.recurse().getElementsByClass("TimeSignature").first()
    return float(quarters) * (meter.denominator if meter is not None else 4) / 4.0

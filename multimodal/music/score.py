"""Beats and bars of what a model wrote: its MIDI file in the source's tempo and meter, and sheet music (MusicXML
through music21, a staff per part).

A model writes notes in seconds, and its MIDI files keep them at 120 beats a minute; a sequencer's grid and a
score need beats. :func:`timed` gives the file the tempo and time signature of the music it came from.
:func:`write_musicxml` reads the seconds at the tempo of the music they came from (a melody or primer at 90
beats a minute has its quarter notes every 0.667 s), quantises them to sixteenths and eighth-note triplets
(music21's ``quantizePost``), bars them in the given meter and writes the key signature of the given key, or of
the key music21 finds in the notes (the Krumhansl-Schmuckler profiles). MuseScore, Finale, Sibelius and
Dorico open the file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pretty_midi

from multimodal.tokenizers.midi_files import open_pretty_midi

QUARTER_DIVISORS = (4, 3)
"""How finely onsets and lengths are quantised: sixteenths and eighth-note triplets (music21's own default)."""


def source_timing(path: str | Path) -> tuple[float, str | None]:
    """``(seconds per quarter note, meter)`` at the start of a MIDI file: its first tempo (none: 120 beats a
    minute, 0.5 s) and first time signature (``"3/4"``; None when it has none).

    Raises:
        ValueError: ``path`` is not a readable MIDI file (the message names it).
    """
    midi = open_pretty_midi(path)
    tempi = midi.get_tempo_changes()[1]
    signatures = midi.time_signature_changes
    meter = f"{signatures[0].numerator}/{signatures[0].denominator}" if signatures else None
    return 60.0 / float(tempi[0]) if len(tempi) else 0.5, meter


def music21_key(name: str):
    """A music21 ``Key`` of a key written as the controls write them (``"Bb minor"``, ``"F# major"``)."""
    from music21 import key

    tonic, mode = name.split()
    return key.Key(tonic.replace("b", "-") if len(tonic) > 1 else tonic, mode)


def timed(midi: pretty_midi.PrettyMIDI, seconds_per_quarter: float = 0.5, meter: str | None = None) -> pretty_midi.PrettyMIDI:
    """A copy of ``midi`` whose file has a tempo of a quarter note every ``seconds_per_quarter`` and the time
    signature ``meter`` (``"3/4"``; None: none written, which readers take as 4/4). Its tracks, notes, pitch bends
    and controllers sound at the same seconds: only the beats and bars a sequencer or a score reads change."""
    copy = pretty_midi.PrettyMIDI(resolution=960, initial_tempo=60.0 / seconds_per_quarter)
    for track in midi.instruments:
        kept = pretty_midi.Instrument(track.program, is_drum=track.is_drum, name=track.name)
        kept.notes = [pretty_midi.Note(note.velocity, note.pitch, note.start, note.end) for note in track.notes]
        kept.pitch_bends, kept.control_changes = list(track.pitch_bends), list(track.control_changes)
        copy.instruments.append(kept)
    if meter is not None:
        numerator, denominator = (int(number) for number in meter.split("/"))
        copy.time_signature_changes = [pretty_midi.TimeSignature(numerator, denominator, 0.0)]
    return copy


def keep_timing(path: str | Path, source: str | Path | None = None, meter: str | None = None) -> tuple[float, str | None]:
    """Rewrites the MIDI file ``path`` in the tempo and meter of the ``source`` file its music came from
    (:func:`source_timing`, :func:`timed`: the notes keep their seconds), ``meter`` overriding the source's; neither
    a source nor a meter: the file stays as written. Returns ``(seconds per quarter note, meter)``, what a score of
    the file should read it with (:func:`write_musicxml`)."""
    seconds_per_quarter, found = source_timing(source) if source is not None else (0.5, None)
    meter = meter if meter is not None else found
    if source is not None or meter is not None:
        timed(pretty_midi.PrettyMIDI(str(path)), seconds_per_quarter, meter).write(str(path))
    return seconds_per_quarter, meter


def write_musicxml(midi: pretty_midi.PrettyMIDI, path: str | Path, seconds_per_quarter: float = 0.5,
                   meter: str | None = None, key: str | None = None) -> Path:  # fmt: skip
    """Writes ``midi`` (notes in seconds) as a MusicXML score: one part a non-drum track, named as the track.

    Args:
        midi: The music, e.g. what :meth:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer.decode` gives.
        path: The ``.musicxml`` file to write (folders are created).
        seconds_per_quarter: How long a quarter note lasts in ``midi`` (the tempo of its source; 0.5: 120 a minute).
        meter: A time signature such as ``"3/4"`` (None: 4/4).
        key: A key as the controls write it (``"G minor"``, ``"Bb major"``; None: music21's analysis of the notes).

    Returns:
        The path written.

    Raises:
        ValueError: ``midi`` has no notes outside drum tracks (nothing to put on a staff).
    """
    from music21 import converter
    from music21 import key as keys

    staves = timed(midi, seconds_per_quarter, meter)
    staves.instruments = [track for track in staves.instruments if track.notes and not track.is_drum]
    if not staves.instruments:
        raise ValueError(f"{path}: the music has no notes to write a score of")
    with tempfile.TemporaryDirectory() as folder:
        staves.write(str(Path(folder) / "timed.mid"))
        score = converter.parse(str(Path(folder) / "timed.mid"), quantizePost=True,
                                quarterLengthDivisors=QUARTER_DIVISORS)  # fmt: skip
    found = music21_key(key) if key is not None else score.analyze("key")
    for part in score.parts:
        first = part.getElementsByClass("Measure").first()
        if first is not None:
            first.keySignature = keys.KeySignature(found.sharps)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    score.write("musicxml", fp=str(path))
    return path

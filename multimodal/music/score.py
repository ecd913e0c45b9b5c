"""Beats and bars of what a model wrote: its MIDI file on the beats of the music it came from, and sheet music
(MusicXML through music21, a staff per part).

A model writes notes in seconds, and its MIDI files keep them at 120 beats a minute; a sequencer's grid and a
score need beats. :func:`keep_timing` rewrites a file on the tempo map, time signatures and pickup of the melody
or primer it came from (:func:`~multimodal.music.bars.beat_grid`), the notes keeping their seconds.
:func:`write_musicxml` reads the seconds in the file's own beats (a melody at 90 beats a minute has its quarter
notes every 0.667 s), quantises them to sixteenths and eighth-note triplets (music21's ``quantizePost``), bars
them in the file's meters, draws a short first bar as an upbeat and writes the key signature of the given key, the
one the file writes (of sharps or flats), or that of the key music21 finds in the notes (the Krumhansl-Schmuckler
profiles). MuseScore, Finale, Sibelius and Dorico open the file; :func:`engrave_svg` draws it as a picture
(Verovio).
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pretty_midi

from multimodal.music.bars import beat_grid, pickup_quarters

QUARTER_DIVISORS = (4, 3)
"""How finely onsets and lengths are quantised: sixteenths and eighth-note triplets (music21's own default)."""


def music21_key(name: str):
    """A music21 ``Key`` of a key written as the controls write them (``"Bb minor"``, ``"F# major"``)."""
    from music21 import key

    tonic, mode = name.split()
    return key.Key(tonic.replace("b", "-") if len(tonic) > 1 else tonic, mode)


def timed(midi: pretty_midi.PrettyMIDI, grid: pretty_midi.PrettyMIDI) -> pretty_midi.PrettyMIDI:
    """A copy of ``midi`` written on ``grid``'s tempo map and time signatures (:func:`~multimodal.music.bars.beat_grid`).
    Its tracks, notes, pitch bends and controllers sound at the same seconds: only the beats and bars a sequencer or
    a score reads change."""
    written = beat_grid(grid)
    for track in midi.instruments:
        kept = pretty_midi.Instrument(track.program, is_drum=track.is_drum, name=track.name)
        kept.notes = [pretty_midi.Note(note.velocity, note.pitch, note.start, note.end) for note in track.notes]
        kept.pitch_bends, kept.control_changes = list(track.pitch_bends), list(track.control_changes)
        written.instruments.append(kept)
    return written


def keep_timing(path: str | Path, grid: pretty_midi.PrettyMIDI) -> None:
    """Rewrites the MIDI file ``path`` on ``grid``'s beats and bars (:func:`timed`: the notes keep their seconds),
    e.g. the tempo, time signatures and pickup of the melody or primer its music came from."""
    timed(pretty_midi.PrettyMIDI(str(path)), grid).write(str(path))


ARRANGER = "multimodal"
"""Who the scores name as their arranger (the model wrote them; without a name music21 would sign them "Music21")."""


def write_musicxml(midi: pretty_midi.PrettyMIDI, path: str | Path, key: str | None = None, title: str | None = None) -> Path:
    """Writes ``midi`` as a MusicXML score: one part a non-drum track, named as the track, in the beats and bars of
    ``midi``'s own tempo map and time signatures (a file :func:`keep_timing` rewrote; a short first bar is a pickup,
    :func:`~multimodal.music.bars.pickup_quarters`, drawn as an upbeat in the next bar's meter and numbered 0).

    Args:
        midi: The music, e.g. a written sample read back (``pretty_midi.PrettyMIDI("sample_0.mid")``).
        path: The ``.musicxml`` file to write (folders are created).
        key: A key as the controls write it (``"G minor"``, ``"Bb major"``; None: the key signature ``midi`` writes
            at its start, else — none, or none of sharps or flats, which many programs write by default — music21's
            analysis of the notes).
        title: The score's title (None: the file's name without its suffix); its arranger is :data:`ARRANGER`.

    Returns:
        The path written.

    Raises:
        ValueError: ``midi`` has no notes outside drum tracks (nothing to put on a staff).
    """
    from music21 import converter, metadata
    from music21 import key as keys

    staves = timed(midi, midi)
    staves.instruments = [track for track in staves.instruments if track.notes and not track.is_drum]
    if not staves.instruments:
        raise ValueError(f"{path}: the music has no notes to write a score of")
    with tempfile.TemporaryDirectory() as folder:
        staves.write(str(Path(folder) / "timed.mid"))
        score = converter.parse(str(Path(folder) / "timed.mid"), quantizePost=True,
                                quarterLengthDivisors=QUARTER_DIVISORS)  # fmt: skip
    written = [change for change in staves.key_signature_changes if change.time == 0]
    if key is None and written and keys.Key(*_key_name(written[0].key_number)).sharps != 0:
        found = None  # the key signature the file writes, which music21 has read: the composer's spelling
    else:
        found = music21_key(key) if key is not None else score.analyze("key")
    for part in score.parts:
        measures = list(part.getElementsByClass("Measure"))
        if pickup_quarters(staves) and len(measures) > 1:
            _as_pickup(measures)
        if measures and found is not None:
            measures[0].keySignature = keys.KeySignature(found.sharps)
        if part.partName and part.getInstrument(returnDefault=True).instrumentName != part.partName:
            part.partAbbreviation = part.partName  # "Part 3" on every system, not the piano's "Pno" of its program
    path = Path(path)
    score.metadata = metadata.Metadata(title=title or path.stem)
    score.metadata.addContributor(metadata.Contributor(role="arranger", name=ARRANGER))
    path.parent.mkdir(parents=True, exist_ok=True)
    score.write("musicxml", fp=str(path))
    return path


ENGRAVING = {"pageWidth": 2100, "pageHeight": 60000, "adjustPageHeight": True, "scale": 40, "breaks": "auto",
             "footer": "none"}  # fmt: skip
"""Verovio's options: an A4-wide page as tall as the music needs (one picture for the whole score), at 40 %."""


def engrave_svg(musicxml: str | Path, svg: str | Path | None = None) -> Path:
    """Engraves a MusicXML score (:func:`write_musicxml`'s) as one SVG picture with Verovio: its title, staves,
    clefs, key and time signatures, bars and notes, systems broken to an A4 page's width.

    Args:
        musicxml: The ``.musicxml`` file.
        svg: The picture to write (None: beside the score, ``.svg``).

    Returns:
        The path written.

    Raises:
        ValueError: Verovio cannot read the score (the message names it).
    """
    import verovio

    svg = Path(musicxml).with_suffix(".svg") if svg is None else Path(svg)
    verovio.enableLog(verovio.LOG_OFF)  # its own "[Error] ..." lines: the ValueError below says it in one
    toolkit = verovio.toolkit()
    # the wheel's fonts: a toolkit made in a thread other than the one that imported verovio looks where the wheel
    # was built instead, finds no font and reads no score (the page's worker threads)
    toolkit.setResourcePath(str(Path(verovio.__file__).parent / "data"))
    toolkit.setOptions(ENGRAVING)
    if not toolkit.loadFile(str(musicxml)) or toolkit.getPageCount() < 1:
        raise ValueError(f"{musicxml}: Verovio could not read the score")
    svg.parent.mkdir(parents=True, exist_ok=True)
    svg.write_text(toolkit.renderToSVG(1), encoding="utf-8")
    return svg


def _key_name(key_number: int) -> tuple[str, str]:
    """``(tonic, mode)`` in music21's spelling of a pretty_midi key number (0-11 major, 12-23 minor)."""
    tonic, mode = pretty_midi.key_number_to_key_name(key_number).split()
    return tonic.replace("b", "-") if len(tonic) > 1 else tonic, mode.lower()


def _as_pickup(measures: list) -> None:
    """Draws a part's short first bar as an upbeat: in the second bar's meter, left-padded, numbered 0 (not shown),
    the full bars numbered from 1."""
    from music21.stream.enums import ShowNumber

    pickup, first_full = measures[0], measures[1]
    meter, short = first_full.timeSignature, pickup.timeSignature
    if meter is None or short is None:
        return
    pickup.timeSignature, first_full.timeSignature = copy.deepcopy(meter), None
    pickup.paddingLeft = meter.barDuration.quarterLength - short.barDuration.quarterLength
    pickup.number, pickup.showNumber = 0, ShowNumber.NEVER
    for number, measure in enumerate(measures[1:], start=1):
        measure.number = number

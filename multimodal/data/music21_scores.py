"""One sheet of music read into notes: a MusicXML, ABC or Humdrum file parsed by music21, each score (each tune of
an ABC book) a piece of notes ``(n, 5)`` ``[pitch, start_s, end_s, velocity, part]`` and its metadata.

The one reader of sheet music: the music21 collections' converter (:mod:`multimodal.data.music21_corpus`), a user's
files among MIDI ones (:func:`~multimodal.data.music.load_midi_files`: ``perplexity``) and the sheet music given to
``generate`` (:mod:`multimodal.music.sheet_music`) all read it here, so a user's tune is read as the training pieces
were: from music21's own note objects (not through a MIDI file music21 writes), ties joined, at concert pitch,
repeats once as written, in seconds through the metronome marks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SHEET_MUSIC_SUFFIXES = (".mxl", ".xml", ".musicxml", ".krn", ".abc")
"""Sheet music music21 reads (MusicXML plain or compressed, Humdrum, ABC): the music21 corpus's files, and a user's."""
DEFAULT_BPM = 120.0  # music21 plays a score without a metronome mark at this tempo
DEFAULT_VELOCITY = 90  # and its notes without a dynamic this loud


def parse_pieces(source: Path, name: str) -> list[tuple[dict, np.ndarray]]:
    """The pieces of a MusicXML, ABC or Humdrum file, ``[(metadata, notes (n, 5))]`` (:func:`score_piece`): music21
    parses the file and each score (each tune of an ABC book, named ``<name>#<number>``) becomes a piece. Raises
    whatever music21 raises."""
    from music21 import converter, stream

    parsed = converter.parse(source)
    if isinstance(parsed, stream.Opus):
        scores = list(parsed.scores)
        names = [f"{name}#{score.metadata.number if score.metadata and score.metadata.number else i + 1}"
                 for i, score in enumerate(scores)]  # fmt: skip
    else:
        scores, names = [parsed], [name]
    if not scores:
        raise ValueError("holds no score")
    if len(set(names)) < len(names):  # tunes numbered twice: number them in file order instead
        names = [f"{name}#{i + 1}" for i in range(len(scores))]
    return [score_piece(score, piece_name) for score, piece_name in zip(scores, names, strict=True)]


def score_piece(score, name: str) -> tuple[dict, np.ndarray]:
    """The notes ``(n, 5)`` and metadata of one music21 score, read from music21's own note objects (the one reader
    of sheet music: the corpus's files and a user's, :mod:`multimodal.music.sheet_music`).

    Not through a MIDI file music21 writes: its writer drops a note where two of one pitch overlap
    in a part and renames tracks after instruments, and the parts are what is kept here. Ties are
    joined, transposing instruments sound at concert pitch, grace notes (no length) are left out,
    and times follow the score's metronome marks (120 quarter notes a minute before the first,
    as music21 plays them).
    """
    from music21 import stream

    if not isinstance(score, stream.Score):  # a lone part or a flat stream
        score = stream.Score([score])
    seconds = _seconds_of_offsets(score)
    meta = {"name": name, **_score_meta(score), "parts": []}
    rows = []
    for index, part in enumerate(score.parts):
        instrument = part.getInstrument(returnDefault=True)
        meta["parts"].append({"name": part.partName, "instrument": instrument.instrumentName,
                              "program": instrument.midiProgram})  # fmt: skip
        for note in part.toSoundingPitch().stripTies().flatten().notes:
            length = float(note.quarterLength)
            if length <= 0:
                continue
            velocity = getattr(note.volume, "velocity", None) or DEFAULT_VELOCITY
            onset = float(note.getOffsetInHierarchy(score))
            rows += [(pitch.midi, onset, onset + length, velocity, index) for pitch in getattr(note, "pitches", ())]
    notes = np.array(rows, dtype=np.float64).reshape(-1, 5)
    notes[:, 1], notes[:, 2] = seconds(notes[:, 1]), seconds(notes[:, 2])
    notes = notes[(notes[:, 0] >= 0) & (notes[:, 0] <= 127)]
    return meta, notes[np.lexsort((notes[:, 0], notes[:, 1]))]


def tempo_marks(score) -> list[tuple[float, float]]:
    """``[(offset in quarter notes, quarter notes a minute)]`` of a music21 score's metronome marks, the first at 0
    (:data:`DEFAULT_BPM` before a first mark that comes later, as music21 plays a score)."""
    marks = [(0.0, DEFAULT_BPM)]
    for start, _, mark in score.metronomeMarkBoundaries():
        bpm = mark.getQuarterBPM() if mark.number is not None or mark.numberSounding is not None else None
        if bpm:
            if float(start) <= marks[-1][0]:
                marks[-1] = (float(start), float(bpm))
            else:
                marks.append((float(start), float(bpm)))
    return marks


def _seconds_of_offsets(score):
    """A function from offsets in quarter notes to seconds, through the score's metronome marks."""
    marks = tempo_marks(score)
    starts, rates = np.array([start for start, _ in marks]), np.array([60.0 / bpm for _, bpm in marks])
    elapsed = np.r_[0.0, np.cumsum(np.diff(starts) * rates[:-1])]

    def seconds(offsets: np.ndarray) -> np.ndarray:
        index = np.clip(np.searchsorted(starts, offsets, side="right") - 1, 0, len(starts) - 1)
        return elapsed[index] + (offsets - starts[index]) * rates[index]

    return seconds


def _analysed_key(score) -> str | None:
    """The key music21's Krumhansl–Schmuckler analysis finds (``"G major"``, ``"F# minor"``), or None.

    The key control trains on this, not on the source's key signature: a signature does not say
    major or minor, folk tunes are often modal, and the key benchmark judges samples by the same analysis.
    """
    try:
        found = score.analyze("key")
    except Exception:  # no pitches, or music21 fails on an odd score: no key then
        return None
    return f"{found.tonic.name.replace('-', 'b')} {found.mode}" if found.mode in ("major", "minor") else None


def _score_meta(score) -> dict:
    """Title, composer, key, time signature and first tempo of a score (None where it has none)."""
    from music21 import key, meter, tempo

    flat = score.flatten()
    found_key = flat.getElementsByClass(key.Key).first() or flat.getElementsByClass(key.KeySignature).first()
    if isinstance(found_key, key.Key):
        key_name = f"{found_key.tonic.name} {found_key.mode}"
    else:
        key_name = None if found_key is None else f"{found_key.sharps} sharps"
    signature = flat.getElementsByClass(meter.TimeSignature).first()
    mark = flat.getElementsByClass(tempo.MetronomeMark).first()
    metadata = score.metadata
    return {
        "title": metadata.title if metadata else None,
        "composer": metadata.composer if metadata else None,
        "key": key_name,
        "analysed_key": _analysed_key(score),
        "time_signature": signature.ratioString if signature is not None else None,
        "tempo_bpm": float(mark.getQuarterBPM()) if mark is not None and mark.number is not None else None,
    }

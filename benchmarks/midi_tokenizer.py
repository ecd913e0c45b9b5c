"""MIDI tokenizer benchmark: round-trip accuracy on the Bach chorales and speed against MidiTok.

Usage::

    python benchmarks/midi_tokenizer.py            # all 349 chorales (converted once, cached)
    python benchmarks/midi_tokenizer.py --limit 40 --repeats 1

Round trip: each chorale MIDI file is read with the one MIDI reader (the reference notes, every
voice: :func:`multimodal.tokenizers.midi_files.read_midi_notes`, itself tested against pretty_midi in
``tests/tokenizers/test_midi_files.py``), encoded, decoded, written to a MIDI file and read back
with pretty_midi. Notes of one pitch that
start together (two voices in unison) sound as one note, and a note of a pitch struck again
before it ends is expected to end at the re-strike; the table counts both.

Speed: files per second over the same files in the same process, best of ``--repeats`` passes
(the contenders alternate within each pass), for our :class:`MidiTokenizer` and MidiTok's
``MIDILike`` (symusic parser, one merged token stream: ``use_programs=True``), on equal work:
file → ids, parsed piece → ids, ids → in-memory piece. The ratio is ours / MidiTok.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

import numpy as np
import pretty_midi
from machine import machine

from multimodal.data.music import cache_root, load_bach_chorales
from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.tokenizers.midi_files import read_midi_notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="use only the first N chorales")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; the best one counts")
    args = parser.parse_args()

    corpus = load_bach_chorales(limit=args.limit)
    folder = cache_root() / "bach_chorales" / "midi"
    paths = [folder / f"{name}.mid" for name in corpus.names]
    tokenizer = MidiTokenizer()
    print(f"{date.today()} · {machine()} · {len(paths)} chorales\n")
    print_round_trip(tokenizer, paths)
    print()
    print_speed(tokenizer, paths, corpus.notes, args.repeats)


def print_round_trip(tokenizer: MidiTokenizer, paths: list[Path]) -> None:
    """Prints the round-trip table (reference: the notes the reader reads from each file)."""
    stats = {"notes": 0, "unison": 0, "restruck": 0, "matched": 0, "extra": 0}
    onset_error = offset_error = velocity_error = 0.0
    with tempfile.TemporaryDirectory() as folder:
        for path in paths:
            reference = [pretty_midi.Note(int(v), int(p), s, e) for p, s, e, v in read_midi_notes(path)]
            back = Path(folder) / "back.mid"
            tokenizer.decode_to_file(tokenizer.encode(path), back)
            decoded = [n for i in pretty_midi.PrettyMIDI(str(back)).instruments for n in i.notes]
            stats["notes"] += len(reference)
            expected = expected_sounding_notes(reference)
            stats["unison"] += len(reference) - len(expected)
            stats["extra"] += len(decoded) - len(expected)
            for pitch, onset, end, velocity, restruck in expected:
                candidates = [n for n in decoded if n.pitch == pitch]
                best = min(candidates, key=lambda n: abs(n.start - onset), default=None)
                if best is None or abs(best.start - onset) > tokenizer.config.time_step:
                    continue
                stats["matched"] += 1
                stats["restruck"] += restruck
                onset_error = max(onset_error, abs(best.start - onset))
                offset_error = max(offset_error, abs(best.end - end))
                velocity_error = max(velocity_error, abs(best.velocity - velocity))
    sounding = stats["notes"] - stats["unison"]
    rows = [
        ("reference notes (all voices)", f"{stats['notes']}"),
        ("unison doublings merged into one sounding note", f"{stats['unison']}"),
        (
            "sounding notes matched (same pitch, onset within one step)",
            f"{stats['matched']} / {sounding} ({100 * stats['matched'] / sounding:.2f} %)",
        ),
        ("of which shortened by a re-strike of their pitch", f"{stats['restruck']}"),
        ("decoded notes with no reference", f"{stats['extra']}"),
        ("max onset error", f"{1000 * onset_error:.2f} ms"),
        ("max offset error", f"{1000 * offset_error:.2f} ms"),
        ("max velocity error", f"{velocity_error:.0f}"),
    ]
    print_table(("round trip (encode → decode → MIDI file → pretty_midi)", "value"), rows)


def expected_sounding_notes(notes: list[pretty_midi.Note]) -> list[tuple[int, float, float, int, bool]]:
    """What a single piano can sound: ``(pitch, onset, end, velocity, restruck)`` per distinct (pitch, onset).

    Unisons keep the longest end and the loudest velocity; a note ends at the next onset of its pitch.
    """
    groups: dict[tuple[int, float], tuple[float, int]] = {}
    for note in notes:
        key = (note.pitch, round(note.start, 6))
        end, velocity = groups.get(key, (0.0, 0))
        groups[key] = (max(end, note.end), max(velocity, note.velocity))
    ordered = sorted(groups.items())
    result = []
    for i, ((pitch, onset), (end, velocity)) in enumerate(ordered):
        following = ordered[i + 1][0] if i + 1 < len(ordered) else None
        restruck = following is not None and following[0] == pitch and following[1] < end
        result.append((pitch, onset, following[1] if restruck else end, velocity, restruck))
    return result


def print_speed(tokenizer: MidiTokenizer, paths: list[Path], notes: list[np.ndarray], repeats: int) -> None:
    """Prints files/s of our tokenizer and MidiTok's MIDILike on the same files, for equal work.

    Three operations, each done by both: a MIDI file to ids (both parse the file), an already
    parsed piece to ids (our cached note array; MidiTok's symusic ``Score`` loaded beforehand), and
    ids back to an in-memory piece (PrettyMIDI; symusic ``Score``). The contenders alternate within
    every pass; the best pass of each counts.
    """
    import miditok
    import symusic

    miditok_tokenizer = miditok.MIDILike(
        miditok.TokenizerConfig(num_velocities=32, use_programs=True, one_token_stream_for_programs=True)
    )
    scores = [symusic.Score(str(path)) for path in paths]
    our_ids = [tokenizer.encode(path) for path in paths]
    their_ids = [miditok_tokenizer.encode(path) for path in paths]
    contenders = {
        ("encode MIDI file → ids", "ours"): lambda: [tokenizer.encode(p) for p in paths],
        ("encode MIDI file → ids", "theirs"): lambda: [miditok_tokenizer.encode(p) for p in paths],
        ("encode parsed piece → ids", "ours"): lambda: [tokenizer.encode_notes(n) for n in notes],
        ("encode parsed piece → ids", "theirs"): lambda: [miditok_tokenizer.encode(s) for s in scores],
        ("decode ids → PrettyMIDI / symusic Score", "ours"): lambda: [tokenizer.decode(i) for i in our_ids],
        ("decode ids → PrettyMIDI / symusic Score", "theirs"): lambda: [miditok_tokenizer.decode(s) for s in their_ids],
    }
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(repeats):  # alternate: every contender once per pass
        for key, run in contenders.items():
            best[key] = min(best[key], _timed(run))
    rows = []
    for operation in dict.fromkeys(key[0] for key in contenders):
        ours, theirs = len(paths) / best[operation, "ours"], len(paths) / best[operation, "theirs"]
        rows.append((operation, f"{ours:,.0f}", f"{theirs:,.0f}", f"{ours / theirs:.2f}"))
    mean_ids = np.mean([len(i) for i in our_ids])
    mean_theirs = np.mean([len(s.ids) for s in their_ids])
    print_table(("files/s", "MidiTokenizer", "MidiTok MIDILike", "ratio"), rows)
    print(f"\nmean ids per chorale: MidiTokenizer {mean_ids:.0f}, MIDILike {mean_theirs:.0f}")


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Prints a Markdown table."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

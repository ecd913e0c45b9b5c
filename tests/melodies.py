"""A folder of short two-part MIDI tunes covering every split: melodies for the audio tests."""

from pathlib import Path

import pretty_midi

from multimodal.data.music import piece_split


def melody_folder(folder: Path) -> Path:
    """Short two-part MIDI pieces whose names put at least two in each split."""
    folder.mkdir(parents=True, exist_ok=True)
    counts = {"train": 0, "val": 0, "test": 0}
    index = 0
    while min(counts.values()) < 2:
        name = f"tune{index:03d}.mid"
        index += 1
        split = piece_split(name)
        if counts[split] >= 3:
            continue
        counts[split] += 1
        midi = pretty_midi.PrettyMIDI()
        for part, base in enumerate((67, 55)):
            instrument = pretty_midi.Instrument(program=0)
            for step in range(8):
                start = 0.25 * step
                instrument.notes.append(pretty_midi.Note(90, base + (step * (index + part)) % 7, start, start + 0.24))
            midi.instruments.append(instrument)
        midi.write(str(folder / name))
    return folder

"""Files per second from a folder of MIDI files to training-ready data: our ingest against MidiTok.

A folder of ``--files`` MIDI files is made from the Bach chorales (each chorale transposed by
-6..+5 semitones and played at one of several tempi, written with pretty_midi), once, under
``--folder``. Then, alternating, each contender turns the whole folder into what training reads,
with the same number of processes (``--workers``, default 2 = the cores of the test machine):

    ours     ``multimodal data midi`` (:func:`multimodal.data.midi_cache.ingest_midi`): symusic parse,
             notes with the sustain pedal, written to the sharded memory-mapped cache (a fresh
             cache each time, so every file is parsed)
    miditok  MidiTok 3 ``MIDILike`` (symusic parser too) tokenizing every file, the way its
             ``tokenize_dataset`` does (tokens kept in memory, not written)

Ours leaves note arrays, which the data sets encode on the fly (0.25 ms a chorale); MidiTok leaves
token ids. Rows: files per second (median of ``--rounds``), and the ratio.

Usage::

    flock /tmp/bench.lock .venv/bin/python benchmarks/midi_ingest.py                   # 10,000 files
    .venv/bin/python benchmarks/midi_ingest.py --files 500 --rounds 1                  # a quick look
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pretty_midi

from multimodal.data.storage import cache_root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=cache_root() / "benchmarks" / "chorale_variants")
    args = parser.parse_args()
    folder = make_variants(args.folder, args.files)
    files = sorted(folder.glob("*.mid"))[: args.files]
    print(f"{len(files)} files, {sum(f.stat().st_size for f in files) / 2**20:.1f} MiB, {args.workers} processes\n")
    rates: dict[str, list[float]] = {"ours": [], "miditok": []}
    for _ in range(args.rounds):
        for name, run in (("ours", ours), ("miditok", miditok)):
            start = time.perf_counter()
            count = run(folder, files, args.workers)
            rates[name].append(count / (time.perf_counter() - start))
            print(f"{name}: {rates[name][-1]:.0f} files/s", flush=True)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print("\n| contender | files/s (median) | ratio to MidiTok |\n|---|---:|---:|")
    for name, value in medians.items():
        print(f"| {name} | {value:.0f} | {value / medians['miditok']:.1f} |")


def make_variants(folder: Path, count: int) -> Path:
    """``count`` MIDI files from the chorales: transpositions and tempi (made once, then reused)."""
    from multimodal.data.music import load_bach_chorales

    folder.mkdir(parents=True, exist_ok=True)
    if len(list(folder.glob("*.mid"))) >= count:
        return folder
    corpus = load_bach_chorales()
    index = 0
    while index < count:
        for name, notes in zip(corpus.names, corpus.notes, strict=True):
            if index >= count:
                break
            shift, tempo = index % 12 - 6, (0.8, 0.9, 1.0, 1.15, 1.3)[index // 12 % 5]
            midi = pretty_midi.PrettyMIDI()
            piano = pretty_midi.Instrument(program=0)
            piano.notes = [pretty_midi.Note(int(v), int(np.clip(p + shift, 0, 127)), s / tempo, e / tempo)
                           for p, s, e, v in notes]  # fmt: skip
            midi.instruments.append(piano)
            midi.write(str(folder / f"{name}-{index:05d}.mid"))
            index += 1
    return folder


def ours(folder: Path, files: list[Path], workers: int) -> int:
    from multimodal.data.midi_cache import MidiCache, ingest_midi

    cache = Path(tempfile.mkdtemp(prefix="midi-cache-"))
    try:
        ingest_midi(folder, cache, num_workers=workers, progress=False)
        return len(MidiCache(cache).names)
    finally:
        shutil.rmtree(cache)


def miditok(folder: Path, files: list[Path], workers: int) -> int:
    with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
        return sum(pool.map(_miditok_chunk, [files[i::workers] for i in range(workers)]))


def _miditok_chunk(files: list[Path]) -> int:
    import miditok

    config = miditok.TokenizerConfig(num_velocities=32, use_programs=True, one_token_stream_for_programs=True)
    tokenizer = miditok.MIDILike(config)
    for path in files:
        tokenizer(path)
    return len(files)


if __name__ == "__main__":
    main()
